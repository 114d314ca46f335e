"""The tiny ``mtp`` target (`equiv.models.tiny_mtp`): built deterministically on the bundled
tokenizer, with the MTP head llama.cpp looks for; its drafting on llama-server is in
tests/engines/server/test_spec_types_server.py."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from equiv.models.drafting import drafting_report
from equiv.models.gguf import read_gguf_info, read_token_texts
from equiv.models.pair import default_target, resolve_pair
from equiv.models.tiny_mtp import build_tiny_mtp_model

pytestmark = pytest.mark.model


def test_the_same_inputs_give_the_same_bytes(tmp_path: Path) -> None:
    first = build_tiny_mtp_model(default_target(), tmp_path / "a")
    second = build_tiny_mtp_model(default_target(), tmp_path / "b")
    digest = [hashlib.sha256(Path(m.path).read_bytes()).hexdigest() for m in (first, second)]
    assert digest[0] == digest[1]
    assert Path(first.path).stat().st_size < 40_000_000


def test_it_carries_an_mtp_head_on_r1s_architecture_and_the_bundled_vocabulary() -> None:
    pair = resolve_pair(pair="mtp")
    assert pair.target == pair.draft  # it drafts for itself
    info = read_gguf_info(pair.target.path)
    assert info.architecture == "deepseek2"
    assert info.nextn_predict_layers == 1
    assert info.mtp_head
    assert info.inferred_spec_type == "draft-mtp"
    assert read_token_texts(pair.target.path) == read_token_texts(default_target().path)
    assert "carries an MTP head" in drafting_report(pair.target.path).lines()[0]
