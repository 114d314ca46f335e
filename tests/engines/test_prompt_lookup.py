"""``--engine llamacpp:prompt-lookup``: llama-cpp-python's own n-gram drafting
(``LlamaPromptLookupDecoding``) in process, no draft model, checked as any speculative path:
it drafts and is accepted on repeating text, and a correct verifier is no sampler bug."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from repeating_prompts import REPEATS

from equiv.cli.main import main
from equiv.records import ResultsFile

pytestmark = pytest.mark.model


@pytest.fixture(scope="module")
def suite(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("suite") / "repeats.jsonl"
    path.write_text("".join(json.dumps(p) + "\n" for p in REPEATS))
    return path


@pytest.mark.parametrize(
    ("mode", "args"),
    [
        ("temp0", ()),
        ("sampling", ("--temp", "0.8", "--seeds", "4", "--max-tokens", "16", "--top-k", "40")),
    ],
)
def test_prompt_lookup_drafts_in_process(tmp_path, suite, model_pair, mode, args):
    argv = ["run", "--engine", "llamacpp:prompt-lookup", "--suite", str(suite), "--mode", mode]
    code = main([*argv, *args, "--out", str(tmp_path)])
    contents = ResultsFile(tmp_path / "results.jsonl").read()
    fingerprint = contents.header.fingerprints["speculative"]
    assert fingerprint["draft_config"]["drafter"] == "prompt-lookup"
    assert "draft_sha256" not in fingerprint  # no draft file was read
    assert contents.header.differences == ()
    steps = [s for r in contents.results for s in r.speculative.draft_steps]
    drafted, accepted = sum(s.drafted for s in steps), sum(s.accepted for s in steps)
    assert drafted > 0
    assert 0 < accepted <= drafted
    if mode == "temp0":
        labels = {r.verdict.label.value for r in contents.results}
        assert labels <= {"equivalent", "numeric-drift"}
        assert not [e for e in contents.events if e.event == "self-draft"]
    else:
        assert contents.runs[-1].verdict.label.value != "sampler-bug"
    assert code == 0
