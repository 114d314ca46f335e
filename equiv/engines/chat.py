"""Chat prompts in process: llama.cpp's built-in templates, for GGUF files that carry none."""

from __future__ import annotations

import ctypes
from collections.abc import Sequence

import llama_cpp

from equiv.errors import ModelError

__all__ = ["BUILTIN_TEMPLATES", "apply_builtin_template"]

# GGUF files without tokenizer.chat_template get llama.cpp's built-in template of their family,
# as llama.cpp itself would pick it (llama_chat_apply_template accepts these names).
BUILTIN_TEMPLATES = {"gemma": "gemma", "gemma2": "gemma", "gemma3": "gemma", "llama": "llama3"}


def apply_builtin_template(name: str, messages: Sequence[tuple[str, str]]) -> str:
    """Render ``messages`` with one of llama.cpp's built-in chat templates."""
    encoded = [(role.encode(), content.encode()) for role, content in messages]
    chat = (llama_cpp.llama_chat_message * len(encoded))(
        *(llama_cpp.llama_chat_message(role=r, content=c) for r, c in encoded)
    )
    size = 2 * sum(len(r) + len(c) for r, c in encoded) + 256
    buf = ctypes.create_string_buffer(size)
    n = llama_cpp.llama_chat_apply_template(name.encode(), chat, len(encoded), True, buf, size)
    if n > size:  # the first guess was short: llama.cpp says how much it needs
        size = n + 1
        buf = ctypes.create_string_buffer(size)
        n = llama_cpp.llama_chat_apply_template(name.encode(), chat, len(encoded), True, buf, size)
    if n < 0:
        raise ModelError(f"llama.cpp's built-in chat template {name!r} failed (code {n})")
    return bytes(buf.raw[:n]).decode("utf-8")
