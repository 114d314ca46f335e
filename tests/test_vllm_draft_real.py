"""equiv against real vLLM servers with a draft model: the bundled target plain on one core, and
with the bundled Q4_0 draft (as a Hugging Face directory, scripts/build_vllm_cpu.sh) drafting for
it on the other (`--speculative-config {"method": "draft_model", ...}`).

A module of its own so that its two servers start after tests/test_vllm_real.py's have stopped:
two vLLM servers hold about 12 GiB, three would not fit beside the tests.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from vllm_server import draft_model_config, temp0_records, vllm_pair

pytestmark = [pytest.mark.model, pytest.mark.vllm]


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """(baseline URL, draft-model speculative URL)."""
    with vllm_pair(tmp_path_factory.mktemp("vllm-draft-logs"), draft_model_config()) as urls:
        yield urls


def test_temp0_with_a_draft_model_labels_each_divergence_from_rescored_rows(servers, tmp_path):
    records = temp0_records(servers, tmp_path / "run")
    for record in records:
        if not record.comparison.identical:  # judged on the target's re-scored rows
            assert "gap_single" in record.verdict.evidence, record.verdict.reason
    drafted = sum(s.drafted for r in records for s in r.speculative.draft_steps)
    accepted = sum(s.accepted for r in records for s in r.speculative.draft_steps)
    assert drafted > 0, "the draft model drafts on every request"
    assert 0 < accepted <= drafted  # the draft is the target requantized: it is often right
