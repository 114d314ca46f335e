"""Each token's bytes from a GGUF vocabulary (`equiv.models.token_bytes`): what places
llama-server's rows among byte pieces."""

from __future__ import annotations

from typing import Any

from equiv.models.gguf import read_token_texts
from equiv.models.token_bytes import _byte_level_decoder, token_bytes


def test_the_byte_level_alphabet_is_gpt2s():
    decode = _byte_level_decoder()
    assert sorted(decode.values()) == list(range(256))  # every byte, once
    assert (decode["Ġ"], decode["Ċ"], decode["A"]) == (0x20, 0x0A, 0x41)
    assert bytes(decode[c] for c in "Ġâ\u0124¬") == " \xe2\x82\xac".encode("latin-1")


def test_a_sentencepiece_vocabulary_gives_byte_pieces_and_spaces(model_pair: Any):
    path = str(model_pair.target.path)
    vocab, texts = token_bytes(path), read_token_texts(path)
    assert len(vocab) == len(texts)
    assert vocab[texts.index("<0xE2>")] == b"\xe2"
    assert vocab[texts.index("€")] == "€".encode()
    spaced = next(i for i, t in enumerate(texts) if t.startswith("\u2581") and len(t) > 3)
    assert vocab[spaced] == b" " + texts[spaced][1:].encode()
