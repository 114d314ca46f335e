"""What a target can draft with (`equiv.models.drafting`, ``equiv check-draft``): an MTP head read
from GGUF tensors as llama.cpp reads it, and Hugging Face config.json figures (the seed case:
DeepSeek-R1, vocabulary 129,280 with one nextn layer, against its distills)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from equiv.cli.main import main
from equiv.models.drafting import drafting_report, model_facts
from equiv.models.gguf import read_gguf_info


def _config(tmp_path: Path, name: str, **figures: object) -> Path:
    folder = tmp_path / name
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(figures))
    return folder


def test_an_mtp_head_is_the_last_blocks_nextn_projection(make_gguf):
    head = make_gguf(
        "mtp.gguf", extra_kv={"llama.block_count": 3}, tensors=["blk.2.nextn.eh_proj.weight"]
    )
    elsewhere = make_gguf(
        "not.gguf", extra_kv={"llama.block_count": 3}, tensors=["blk.1.nextn.eh_proj.weight"]
    )
    assert read_gguf_info(head).mtp_head
    assert read_gguf_info(head).inferred_spec_type == "draft-mtp"
    assert not read_gguf_info(elsewhere).mtp_head  # llama.cpp looks at the last block only
    assert read_gguf_info(elsewhere).inferred_spec_type is None
    assert "carries an MTP head" in drafting_report(head).lines()[0]
    assert "no MTP head" in drafting_report(elsewhere).lines()[0]


def test_deepseek_r1_has_no_compatible_draft_but_its_own_head(tmp_path, capsys):
    r1 = _config(
        tmp_path, "DeepSeek-R1", model_type="deepseek_v3", vocab_size=129280,
        num_nextn_predict_layers=1,
    )  # fmt: skip
    for name, vocab in (("R1-Distill-Qwen-1.5B", 151936), ("R1-Distill-Llama-8B", 128256)):
        distill = _config(tmp_path, name, vocab_size=vocab)
        report = drafting_report(r1, distill / "config.json")
        assert report.compatible is False
        assert f"draft {vocab:,}" in report.reasons[0]
        assert main(["check-draft", str(r1), str(distill)]) == 4
        out = capsys.readouterr().out
        assert "NOT compatible" in out
        assert "your model has an MTP head: use --spec-type draft-mtp" in out
    assert main(["check-draft", str(r1)]) == 0
    assert "declares 1 MTP (nextn) layer" in capsys.readouterr().out


def test_config_sizes_that_agree_prove_nothing(tmp_path):
    a = _config(tmp_path, "a", vocab_size=32000)
    b = _config(tmp_path, "b", text_config={"vocab_size": 32064})
    report = drafting_report(a, b)
    assert report.compatible is None
    assert "cannot tell" in report.lines()[0]
    assert model_facts(b).vocab_size == 32064  # multimodal configs nest it


@pytest.mark.parametrize(
    ("content", "message"),
    [("{}", "has no vocab_size"), ("{nope", "is not JSON")],
)
def test_a_bad_config_is_named(tmp_path, capsys, content, message):
    path = tmp_path / "config.json"
    path.write_text(content)
    assert main(["check-draft", str(path)]) == 3
    err = capsys.readouterr().err
    assert message in err
    assert str(path) in err
