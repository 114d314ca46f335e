"""The typed evidence of the verdict rules writes the keys results files hold, in their order."""

import math

from equiv.records.comparison import Drift
from equiv.verdicts.sampling.analysis_record import PooledDrift, ScoredTest
from equiv.verdicts.temp0.drift_bound import drift_bound
from equiv.verdicts.verdict_evidence import (
    BatchedFigures,
    PowerEvidence,
    RescoredGaps,
    RunEvidence,
    SamplingEvidence,
    Temp0Evidence,
)

AT = Temp0Evidence(5, 11, 12, 0.25, 0.5)
HEAD = ["position", "baseline_token", "speculative_token", "margin_baseline", "margin_speculative"]


def test_temp0_evidence_writes_only_what_the_rule_reached() -> None:
    assert list(AT.to_dict()) == HEAD
    assert Temp0Evidence(5, 11, 12, 0.25, 0.5, own_argmax=3).to_dict()["own_argmax"] == 3
    assert Temp0Evidence(5, 11, 12, None, None, rescore_failed=True).to_dict() == {
        **dict.fromkeys(HEAD[3:]),
        "position": 5,
        "baseline_token": 11,
        "speculative_token": 12,
        "rescore_failed": True,
    }


def test_baseline_gap_is_rounded_and_none_outside_the_top_k() -> None:
    assert Temp0Evidence(5, 11, 12, 0.25, 0.5, baseline_gap=0.1234567).to_dict()[
        "baseline_gap"
    ] == round(0.1234567, 5)
    outside = Temp0Evidence(5, 11, 12, 0.25, 0.5, outside_baseline_top=True).to_dict()
    assert "baseline_gap" in outside
    assert outside["baseline_gap"] is None


def test_rescored_gaps_in_the_rule_s_order() -> None:
    bound = drift_bound([0.1, 0.2, 0.3, 0.4])
    assert bound is not None
    rows = {"single_token": [[11, 1.0]], "batched": [[11, 1.0]]}
    stopped = RescoredGaps(math.inf, 0.01, bound, rows, used_row_deviation=2.0)
    assert list(stopped.to_dict()) == [
        "gap_batched",
        "drift_at_divergence",
        "drift_bound",
        "target_rows",
        "used_row_deviation",
    ]
    assert stopped.to_dict()["gap_batched"] is None  # not finite
    server = RescoredGaps(0.5, 0.01, None, rows, gap_single_at_least=3.1234567)
    data = Temp0Evidence(5, 11, 12, 0.25, 0.5, rescored=server).to_dict()
    assert list(data)[len(HEAD) :] == [
        "gap_batched",
        "drift_at_divergence",
        "drift_bound",
        "target_rows",
        "gap_single",
        "gap_single_at_least",
    ]
    assert data["gap_single"] is None
    assert data["gap_single_at_least"] == round(3.1234567, 6)


def test_sampling_evidence_batched_follow_up_and_power() -> None:
    drift = PooledDrift(3, Drift(4, 0.001, None, 0.01, 0.1, 1.0))
    base = SamplingEvidence(0.01, ("pit",), 0.5, drift, (), None)
    assert list(base.to_dict()) == [
        "alpha",
        "rejected",
        "same_seed_agreement",
        "drift",
        "placebo_rejected",
        "fidelity",
    ]
    assert base.to_dict()["drift"] == drift.to_dict()
    unanswered = SamplingEvidence(0.01, (), 0.5, None, (), None, limit="off", followed_up=True)
    assert unanswered.to_dict()["limit"] == "off"
    assert unanswered.to_dict()["batched"] is None
    figures = BatchedFigures(("pit:vs-placebo-batched",), {"pit:vs-placebo-batched": 0.001})
    assert SamplingEvidence(
        0.01, (), 0.5, None, (), None, followed_up=True, batched=figures
    ).to_dict()["batched"] == {
        "rejected": ["pit:vs-placebo-batched"],
        "p_adjusted": {"pit:vs-placebo-batched": 0.001},
    }
    test = ScoredTest("temperature:vs-placebo", 1.0, 0.5, 0.5, 10, "", power=0.3)
    power = PowerEvidence(0.4, 0.001, test, tokens=100, tokens_needed=800)
    tail = SamplingEvidence(0.01, (), 0.5, None, (), None, power=power).to_dict()
    assert list(tail)[6:] == [
        "power",
        "power_alpha",
        "temperature_power",
        *("tokens", "tokens_needed"),
    ]
    assert "temperature_power" not in PowerEvidence(0.9, 0.001).to_dict()


def test_run_evidence() -> None:
    assert RunEvidence({"equivalent": 2}, ("n_ctx: 1 vs 2",)).to_dict() == {
        "counts": {"equivalent": 2},
        "differences": ["n_ctx: 1 vs 2"],
    }
