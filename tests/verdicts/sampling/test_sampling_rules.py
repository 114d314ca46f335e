"""Each rule of `equiv.verdicts.sampling.verdict.classify_sampling` on a typed analysis built to
meet it and nothing before it (the rules run in order: the module's docstring), with the words
its reason must carry. The statistics that feed them are tested beside it, in
tests/verdicts/sampling/: test_placebo.py, test_distribution.py and
test_batched_attribution.py."""

from __future__ import annotations

from dataclasses import replace

import pytest

from equiv.records.comparison import Drift
from equiv.records.verdict import Label
from equiv.verdicts.sampling.analysis_record import (
    Placebo,
    PooledDrift,
    PromptAnalysis,
    ScoredTest,
)
from equiv.verdicts.sampling.verdict import KL_NOT_TARGET, STAGES, classify_sampling

ALPHA = 0.01


def _test(name: str, p: float = 1.0, *, n: int = 4000, power: float | None = None) -> ScoredTest:
    return ScoredTest(name, 0.0, p, p, n, "chi-square", df=9, power=power)


def _analysis(*tests: ScoredTest, **fields: object) -> PromptAnalysis:
    placebo = fields.pop("placebo", Placebo(tests=(_test("pit:placebo"),)))
    return replace(
        PromptAnalysis(samples=64, alpha=ALPHA, tests=tests, same_seed_agreement=0.0),
        placebo=placebo,
        **fields,
    )


QUIET = _test("pit:vs-placebo", 0.6, n=40_000)  # no rejection, and power to spare


def test_the_quiet_case_is_equivalent():
    verdict = classify_sampling(_analysis(QUIET))
    assert verdict.label is Label.EQUIVALENT, verdict.reason


def test_a_setup_difference_comes_first():
    bug = _test("pit:vs-placebo", 1e-9)
    verdict = classify_sampling(_analysis(bug), differences=["n_ctx: 2048 vs 4096 (...)"])
    assert verdict.label is Label.MISCONFIGURATION
    assert "n_ctx: 2048 vs 4096" in verdict.reason


def test_in_process_an_instrument_the_placebo_rejects_is_believed_by_no_test():
    off = Placebo(tests=(_test("pit:placebo", 1e-6),))
    verdict = classify_sampling(_analysis(_test("pit:vs-placebo", 1e-9), placebo=off))
    assert verdict.label is Label.INCONCLUSIVE, verdict.reason
    assert "in process those are the rows the engine reports" in verdict.reason
    assert "the instrument here is off" in verdict.reason
    # over HTTP the same placebo only bounds what can be seen; the comparison still decides
    http = classify_sampling(_analysis(QUIET, placebo=off), has_logits=False)
    assert "in process" not in http.reason


@pytest.mark.parametrize("stage", list(STAGES))
def test_a_stage_of_the_rejection_sampler_that_rejects_is_a_sampler_bug(stage):
    verdict = classify_sampling(_analysis(QUIET, _test(stage, 1e-7)))
    assert verdict.label is Label.SAMPLER_BUG, verdict.reason
    assert verdict.reason.startswith(f"the speculative sampler's {STAGES[stage]}")


def test_rows_that_are_not_the_targets_are_a_sampler_bug():
    far = Drift(rows=500, kl_mean=KL_NOT_TARGET * 3, kl_p99=None, kl_max=2.0,
                max_abs_logit_delta=9.0, top1_agreement=0.4)  # fmt: skip
    verdict = classify_sampling(_analysis(QUIET, drift=PooledDrift(64, far)))
    assert verdict.label is Label.SAMPLER_BUG, verdict.reason
    assert "the logits the speculative sampler used are not the target's" in verdict.reason
    near = replace(far, kl_mean=KL_NOT_TARGET / 2)
    assert classify_sampling(_analysis(QUIET, drift=PooledDrift(64, near))).label is not (
        Label.SAMPLER_BUG
    )


def test_a_rejection_that_is_not_against_the_placebo_is_numeric_drift():
    rows = _test("first-token:two-sample", 1e-8)
    verdict = classify_sampling(_analysis(QUIET, rows))
    assert verdict.label is Label.NUMERIC_DRIFT, verdict.reason
    assert "no test of the speculative samples against the placebo rejects, but" in verdict.reason


def test_samples_that_only_reject_the_rows_alone_need_more_seeds():
    alone = (_test("pit:speculative", 1e-6),)
    verdict = classify_sampling(_analysis(QUIET, consistency=alone))
    assert verdict.label is Label.INCONCLUSIVE, verdict.reason
    assert "the speculative samples alone reject the rows" in verdict.reason
    assert "add seeds" in verdict.reason


def test_failed_rescoring_is_said_beside_the_power():
    thin = _test("pit:vs-placebo", 0.6, n=50)
    verdict = classify_sampling(
        _analysis(thin, rescore_errors=("HTTP 500 on seed 3", "HTTP 500 on seed 9"))
    )
    assert verdict.label is Label.INCONCLUSIVE, verdict.reason
    assert "re-scoring failed for 2 of 64 samples (HTTP 500 on seed 3)" in verdict.reason
    assert "seeds" in verdict.reason
