"""The bytes a token adds to generated text, read from a GGUF vocabulary.

llama-server decides per token whether the text so far ends inside a UTF-8 character, and sends
no row of probabilities for a token after which it does (`equiv.engines.server.api`). Telling
which token a row belongs to, where two byte pieces share an ID, needs each token's bytes:

- SentencePiece vocabularies (``llama``: Gemma, Llama 2, Mistral): a byte-fallback piece
  ``<0xNN>`` is the byte NN; any other piece is its text with ``▁`` as a space;
- byte-level BPE (``gpt2``: Llama 3, Qwen): every character of a piece stands for one byte
  (GPT-2's printable mapping of the 256 bytes).

Control tokens are rendered as their text here; llama-server may leave them out. A caller
checks what it derives against what the server sent (`equiv.engines.server.api.rows_of_tokens`).
"""

from __future__ import annotations

import functools
import re

from equiv.models.gguf import read_gguf_info, read_token_texts

__all__ = ["token_bytes"]

_BYTE_PIECE = re.compile(r"<0x([0-9A-Fa-f]{2})>")
_BYTE_LEVEL = frozenset({"gpt2", "hybriddna", "whitespace"})


@functools.lru_cache(maxsize=2)
def token_bytes(path: str) -> tuple[bytes, ...]:
    """Every token's bytes, by ID, for the GGUF vocabulary at ``path``."""
    texts = read_token_texts(path)
    if read_gguf_info(path, with_sha256=False).vocab_model in _BYTE_LEVEL:
        decode = _byte_level_decoder()
        return tuple(bytes(decode.get(ch, 0x3F) for ch in text) for text in texts)
    return tuple(_spm_piece(text) for text in texts)


def _spm_piece(text: str) -> bytes:
    match = _BYTE_PIECE.fullmatch(text)
    if match:
        return bytes([int(match[1], 16)])
    return text.replace("\u2581", " ").encode("utf-8", "surrogateescape")


def _byte_level_decoder() -> dict[str, int]:
    """GPT-2's byte-level alphabet reversed: the printable bytes stand for themselves, the others
    (controls, space, 0x7F-0xA0, 0xAD) for the code points from 256 on, in byte order."""
    printable = [*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    others = [b for b in range(256) if b not in printable]
    decoder = {chr(b): b for b in printable}
    decoder.update({chr(256 + i): b for i, b in enumerate(others)})
    return decoder
