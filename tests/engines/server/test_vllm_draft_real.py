"""equiv starting vLLM itself with a draft model: ``equiv run --vllm-model DIR --vllm-spec-config
'{"method": "draft_model", ...}'`` starts the bundled target plain on one core, and with the
bundled Q4_0 draft (both as Hugging Face directories, scripts/build_vllm_cpu.sh) drafting for it
on the other, runs, and stops them.

A module of its own so that its two servers start after
tests/engines/server/test_vllm_real.py's have stopped: two vLLM servers hold about 12 GiB, three
would not fit beside the tests.
"""

from __future__ import annotations

import pytest
from vllm_server import TEMP0_ARGS, check_temp0, draft_model_config, equiv_starts_vllm

from equiv.records import ResultsFile
from equiv.verdicts.verdict_evidence import Temp0Evidence

pytestmark = [pytest.mark.model, pytest.mark.vllm]


def test_equiv_starts_vllm_with_a_draft_model_and_labels_each_divergence(tmp_path):
    out = tmp_path / "run"
    proc = equiv_starts_vllm(draft_model_config(), out, *TEMP0_ARGS)
    records = check_temp0(proc, out)
    for record in records:
        if not record.comparison.identical:  # judged on the target's re-scored rows
            rescored = Temp0Evidence.from_dict(record.verdict.evidence).rescored
            assert rescored is not None, record.verdict.reason
            single = (rescored.gap_single, rescored.gap_single_at_least)
            assert single != (None, None), record.verdict.reason  # the single-token gap
    drafted = sum(s.drafted for r in records for s in r.speculative.draft_steps)
    accepted = sum(s.accepted for r in records for s in r.speculative.draft_steps)
    assert drafted > 0, "the draft model drafts on every request"
    assert 0 < accepted <= drafted  # the draft is the target requantized: it is often right
    fingerprints = ResultsFile(out / "results.jsonl").header().fingerprints
    baseline, speculative = fingerprints["baseline"], fingerprints["speculative"]
    assert baseline["started_by_equiv"] is True
    assert str(baseline["server_version"]).startswith("vLLM ")
    assert baseline["server_argv"] == speculative["server_argv"]  # one setup on both paths
    assert "--disable-hybrid-kv-cache-manager" in baseline["server_argv"]
    own = speculative["draft_config"]["server_flags"]
    assert own[0] == "--speculative-config"
    assert "draft_model" in own[1]
