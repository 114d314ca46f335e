"""equiv against real vLLM servers with a draft model: the bundled target plain on one core, and
with the bundled Q4_0 draft (as a Hugging Face directory, scripts/build_vllm_cpu.sh) drafting for
it on the other (`--speculative-config {"method": "draft_model", ...}`).

A module of its own so that its two servers start after tests/test_vllm_real.py's have stopped:
two vLLM servers hold about 12 GiB, three would not fit beside the tests.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from vllm_server import PROMPTS, equiv_run, prompt_args, vllm_root, vllm_server

from equiv.records import ResultsFile

pytestmark = [pytest.mark.model, pytest.mark.vllm]


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """(baseline URL, draft-model speculative URL)."""
    root = vllm_root()
    logs = tmp_path_factory.mktemp("vllm-draft-logs")
    draft = {
        "method": "draft_model",
        "model": str(root / "models" / "draft"),
        "num_speculative_tokens": 4,
    }
    with (
        vllm_server(root, logs / "baseline.log", core=0) as baseline,
        vllm_server(root, logs / "speculative.log", speculative=draft, core=1) as speculative,
    ):
        yield baseline, speculative


def test_temp0_with_a_draft_model_labels_each_divergence_from_rescored_rows(servers, tmp_path):
    baseline, speculative = servers
    out = tmp_path / "run"
    proc = equiv_run(baseline, speculative, out, "--max-tokens", "16", *prompt_args(PROMPTS))
    assert proc.returncode in (0, 1), proc.stderr
    assert "Traceback" not in proc.stderr
    results = ResultsFile(out / "results.jsonl")
    assert results.header().fingerprints["speculative"]["speculating"] is True
    records = results.results()
    assert {r.key for r in records} == {f"{k}::temp0" for k in PROMPTS}
    # a near-tie may flip under batched verification (numeric drift); nothing else may differ
    assert {r.verdict.label.value for r in records} <= {"equivalent", "numeric-drift"}
    for record in records:
        if not record.comparison.identical:  # judged on the target's re-scored rows
            assert "gap_single" in record.verdict.evidence, record.verdict.reason
    drafted = sum(s.drafted for r in records for s in r.speculative.draft_steps)
    accepted = sum(s.accepted for r in records for s in r.speculative.draft_steps)
    assert drafted > 0, "the draft model drafts on every request"
    assert 0 < accepted <= drafted  # the draft is the target requantized: it is often right
