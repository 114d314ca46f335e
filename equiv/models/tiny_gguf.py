"""What the tiny models (`equiv.models.tiny_recurrent`, `equiv.models.tiny_mtp`) share: the
bundled tokenizer's chat template and live tokens, seeded normal weights, and one GGUF writer
that writes a file atomically and packs the tokenizer's arrays in one call each."""

from __future__ import annotations

import os
import struct
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import gguf
import numpy as np
import numpy.typing as npt

from equiv.models.gguf import MetaValue

__all__ = [
    "F32",
    "GEMMA_CHAT_TEMPLATE",
    "Tensors",
    "gguf_version",
    "live_tokens",
    "normal",
    "write_gguf",
]

F32 = npt.NDArray[np.float32]
#: Tensor name -> (values, raw GGML type where the values are already quantized, else None).
Tensors = dict[str, tuple[npt.NDArray[np.generic], gguf.GGMLQuantizationType | None]]

#: llama.cpp's built-in ``gemma`` chat template (``LLM_CHAT_TEMPLATE_GEMMA``, which the bundled
#: Gemma 3 gets by its architecture) written as Jinja: a system message joins the first user turn.
#: A ``mamba`` or ``llama`` file has no built-in Gemma template, so the tiny pair carries this one;
#: llama-server detects it as ``gemma`` (``<start_of_turn>``) and renders the same text.
GEMMA_CHAT_TEMPLATE = (
    "{%- set ns = namespace(system='') -%}"
    "{%- for message in messages -%}"
    "{%- if message['role'] == 'system' -%}"
    "{%- set ns.system = ns.system + message['content'] | trim -%}"
    "{%- else -%}"
    "{%- set role = 'model' if message['role'] == 'assistant' else message['role'] -%}"
    "{{- '<start_of_turn>' + role + '\\n' -}}"
    "{%- if ns.system and role != 'model' -%}"
    "{{- ns.system + '\\n\\n' -}}{%- set ns.system = '' -%}"
    "{%- endif -%}"
    "{{- message['content'] | trim + '<end_of_turn>\\n' -}}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<start_of_turn>model\\n' -}}{%- endif -%}"
)


def live_tokens(tokenizer: dict[str, MetaValue]) -> npt.NDArray[np.bool_]:
    """Ordinary tokens whose text is printable ASCII (SentencePiece's '▁' read as a space)."""
    texts = tokenizer["tokenizer.ggml.tokens"].value
    types = tokenizer.get("tokenizer.ggml.token_type")
    assert isinstance(texts, list)
    kinds = types.value if types is not None else [1] * len(texts)
    assert isinstance(kinds, list)
    live = np.zeros(len(texts), dtype=bool)
    for i, (text, kind) in enumerate(zip(texts, kinds, strict=True)):
        piece = text.replace("\u2581".encode(), b" ")
        live[i] = kind == 1 and bool(piece) and piece.isascii() and piece.decode().isprintable()
    return live


def normal(rng: np.random.Generator, shape: tuple[int, ...], std: float) -> F32:
    values: F32 = rng.standard_normal(shape, dtype=np.float32)
    values *= np.float32(std)
    return values


def write_gguf(
    path: Path,
    arch: str,
    *,
    name: str,
    file_type: gguf.LlamaFileType,
    params: Mapping[str, int | float],
    tokenizer: Mapping[str, MetaValue],
    tensors: Tensors,
) -> None:
    """Write atomically: a reader never sees half a file under the final name. ``params`` are
    ``{arch}.*`` keys (floats as float32, the rest as uint32)."""
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    writer = _Writer(tmp, arch)
    writer.add_name(name)
    writer.add_file_type(file_type)
    for key, value in params.items():
        if isinstance(value, float):
            writer.add_float32(f"{arch}.{key}", value)
        else:
            writer.add_uint32(f"{arch}.{key}", value)
    for key, meta in tokenizer.items():
        writer.add_key_value(key, meta.value, meta.type, sub_type=meta.item_type)
    writer.add_chat_template(GEMMA_CHAT_TEMPLATE)
    for tensor, (array, raw_dtype) in tensors.items():
        writer.add_tensor(tensor, array, raw_dtype=raw_dtype)
    try:
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
    finally:
        writer.close()
    os.replace(tmp, path)


class _Writer(gguf.GGUFWriter):
    """`gguf.GGUFWriter` with typed arrays packed in one call instead of one per item (the
    tokenizer's three 262,144-item arrays take 3 s per file otherwise); the same bytes."""

    def _pack_val(
        self,
        val: Any,  # as gguf (untyped) declares it
        vtype: gguf.GGUFValueType,
        add_vtype: bool,
        sub_type: gguf.GGUFValueType | None = None,
    ) -> bytes:
        little = self.endianess == gguf.GGUFEndian.LITTLE
        if vtype != gguf.GGUFValueType.ARRAY or sub_type is None or not val or not little:
            return super()._pack_val(val, vtype, add_vtype, sub_type)
        if sub_type == gguf.GGUFValueType.STRING:
            items = [v.encode() if isinstance(v, str) else bytes(v) for v in val]
            body = b"".join(struct.pack("<Q", len(v)) + v for v in items)
        elif (fmt := self._simple_value_packing.get(sub_type)) is not None and fmt != "?":
            body = struct.pack(f"<{len(val)}{fmt}", *val)
        else:
            return super()._pack_val(val, vtype, add_vtype, sub_type)
        head = struct.pack("<I", vtype) if add_vtype else b""
        return head + struct.pack("<IQ", sub_type, len(val)) + body


def gguf_version() -> str:
    from importlib.metadata import version

    return version("gguf")
