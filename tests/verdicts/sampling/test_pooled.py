"""The run's pooled answer at temperature > 0 (`equiv.verdicts.sampling.pooled`,
`equiv.verdicts.sampling.run_verdict`), on simulated prompts through the real sampler chain.

Each simulated prompt is a first-order chain over a small vocabulary with its own random logits;
both paths sample from it through `equiv.engines.chain` and carry the evidence a run records in
process (`chain_evidence`). A faulty speculative path samples from the chain tempered colder or
with extra mass on the top token. Everything is seeded: numpy's generators give the same draws on
every machine, so no outcome depends on a CPU's rounding of a near-tie.
"""

import dataclasses
from collections import Counter

import numpy as np
import pytest
from scipy import stats as sps
from simulated_chain import sample_drifted, sample_pair, sample_path

from equiv.config import SamplingConfig
from equiv.records import RUN_KEY, RunRecord, parse_record
from equiv.records.verdict import Label
from equiv.verdicts.sampling.analysis_record import ScoredTest
from equiv.verdicts.sampling.drift_shift import drift_shift
from equiv.verdicts.sampling.fidelity import EXACT_TV, Fidelity
from equiv.verdicts.sampling.pit_tests import pit_seed, tokens_of, top_derivatives
from equiv.verdicts.sampling.placebo import quasi_tempering
from equiv.verdicts.sampling.pooled import (
    Design,
    PooledAnalysis,
    is_reported,
    pool,
)
from equiv.verdicts.sampling.pooled_bounds import MARGINS, Bound, Effect, calibrated
from equiv.verdicts.sampling.run_batched import RunBatched
from equiv.verdicts.sampling.run_verdict import (
    RunJudgement,
    classify_run,
    judge_run,
)
from equiv.verdicts.sampling.samples import PathSample, Sample
from equiv.verdicts.sampling.support import (
    FAR_TOLERANCE,
    SUPPORT_TOLERANCE,
    support_vs_placebo,
)
from equiv.verdicts.stats import randomized_pit

SAMPLING = SamplingConfig(temp=0.8)
VOCAB = 32
ALPHA = 0.005


def _path(rng, logits, n, fault, sampling=SAMPLING):
    return sample_path(rng, logits, n, sampling, fault)


def simulate(
    prompts,
    seeds,
    fault="none",
    *,
    tokens=32,
    faulty_prompts=None,
    base=0,
    placebo="none",
    sampling=SAMPLING,
):
    """``prompts`` simulated prompts x ``seeds`` samples; the fault on ``faulty_prompts`` of
    them (default: all); ``placebo`` samples the baseline path with a fault of its own."""
    out = {}
    for p in range(prompts):
        rng = np.random.default_rng([base + p, 2026])
        logits = rng.normal(0.0, 2.5, size=(VOCAB, VOCAB)).astype(np.float32)
        bad = fault if faulty_prompts is None or p in faulty_prompts else "none"
        key = f"sim/p{p}"
        out[key] = [
            Sample(
                f"{key}::sampling::seed{s}",
                _path(rng, logits, tokens, placebo, sampling),
                _path(rng, logits, tokens, bad, sampling),
            )
            for s in range(seeds)
        ]
    return out


@pytest.fixture(scope="module")
def placebo_run():
    return simulate(8, 32)


def test_a_correct_sampler_pooled_over_prompts_is_equivalent_within_every_margin(placebo_run):
    judged = judge_run(placebo_run, Counter(), alpha=ALPHA, has_logits=True)
    assert judged.pooled.prompts == 8
    assert judged.pooled.samples == 8 * 32
    assert not judged.pooled.rejected()
    assert {b.effect for b in judged.pooled.bounds} == set(Effect)
    assert all(b.within for b in judged.pooled.bounds), judged.verdict.reason
    assert judged.verdict.label is Label.EQUIVALENT, judged.verdict.reason
    assert "within +-0.02" in judged.verdict.reason


def test_the_same_evidence_judged_prompt_by_prompt_cannot_say_equivalent(placebo_run):
    """What pooling buys: each prompt alone has 32 samples, too few for its bounds."""
    for key, samples in placebo_run.items():
        alone = judge_run({key: samples}, Counter(), alpha=ALPHA, has_logits=True)
        assert alone.verdict.label is Label.INCONCLUSIVE
        assert "one prompt: nothing is pooled" in alone.verdict.reason
        # more seeds, counted where every estimate lies inside its margin
        reason = alone.verdict.reason
        assert "seeds a prompt would bring them within" in reason or "more seeds" in reason


@pytest.mark.parametrize(
    ("fault", "test"), [("wrong_temp", "temperature"), ("greedy", "top-token")]
)
def test_a_faulty_sampler_is_a_sampler_bug_with_the_directed_test_rejecting(fault, test):
    judged = judge_run(simulate(8, 16, fault), Counter(), alpha=ALPHA, has_logits=True)
    assert judged.verdict.label is Label.SAMPLER_BUG, judged.verdict.reason
    names = {t.kind for t in judged.pooled.rejected()}
    assert test in names, judged.verdict.reason
    assert "pooled over the run (8 prompt(s), 128 samples" in judged.verdict.reason
    bound = {b.effect.value: b for b in judged.pooled.bounds}[test]
    assert bound.low > 0  # colder, or the top token too often: the interval excludes 0


def test_in_process_the_speculative_samples_meet_their_own_rows_and_the_placebo_the_same():
    """In process the rows are the logits each engine sampled from: one sample, no placebo
    variance; the placebo's samples take the same tests, as the instrument's check."""
    judged = judge_run(simulate(8, 16, "greedy"), Counter(), alpha=ALPHA, has_logits=True)
    pooled = judged.pooled
    assert pooled.design is Design.OWN_ROWS
    assert {t.kind for t in pooled.tests} == {"pit", "top-token", "temperature", "support"}
    assert {t.kind for t in pooled.instrument} == {"pit", "top-token", "temperature", "support"}
    assert not pooled.instrument_rejected(), pooled.lines()
    assert "are not draws from the rows they were sampled from" in judged.verdict.reason
    assert any("the instrument's check" in line for line in pooled.lines())
    again = PooledAnalysis.from_dict(pooled.to_dict())
    assert again == pooled


def test_in_process_a_few_tokens_outside_the_chains_support_are_a_sampler_bug():
    """Under the very rows a path sampled from, a token its chain cannot emit is the sampler's
    (or, within `SUPPORT_TOLERANCE` and only at a cut-off, the instrument's): one beyond
    rounding convicts, where comparing the count with the placebo's needs about ten."""
    run = simulate(2, 8, "outside")
    judged = judge_run(run, Counter(), alpha=ALPHA, has_logits=True)
    support = next(t for t in judged.pooled.tests if t.kind == "support")
    outside, tokens = int(support.statistic), support.n
    far = sum(len(s.speculative.far_outside) for samples in run.values() for s in samples)
    assert 1 <= far <= outside <= 12
    count = sps.binom.sf(outside - 1, tokens, SUPPORT_TOLERANCE)
    beyond = sps.binom.sf(far - 1, tokens, FAR_TOLERANCE)
    assert support.p_value == pytest.approx(2 * min(count, beyond))
    assert f"{far} of them beyond rounding" in support.detail
    assert support.p_adjusted < ALPHA
    versus = support_vs_placebo((outside, tokens), (0, tokens), alpha=ALPHA)
    assert versus.p_value == pytest.approx(0.5**outside)
    assert judged.verdict.label is Label.SAMPLER_BUG, judged.verdict.reason
    assert not judged.pooled.instrument_rejected()
    # a file written before equiv counted them: the count alone, as then
    uncounted = {
        key: [dataclasses.replace(s.speculative, far_outside=None) for s in v]
        for key, v in run.items()
    }
    older = {
        key: [s.with_path("speculative", u) for s, u in zip(run[key], v, strict=True)]
        for key, v in uncounted.items()
    }
    judged = judge_run(older, Counter(), alpha=ALPHA, has_logits=True)
    support = next(t for t in judged.pooled.tests if t.kind == "support")
    assert support.p_value == pytest.approx(count)
    # older records beside newer (a resumed run): the far count over the newer ones' tokens
    mixed = {key: [*older[key][:4], *run[key][4:]] for key in run}
    newer = [s.speculative for v in mixed.values() for s in v if s.speculative.far_outside]
    beyond = sum(len(p.far_outside or ()) for p in newer)
    counted = sum(
        len(s.speculative.tokens)
        for v in mixed.values()
        for s in v
        if s.speculative.far_outside is not None
    )
    judged = judge_run(mixed, Counter(), alpha=ALPHA, has_logits=True)
    support = next(t for t in judged.pooled.tests if t.kind == "support")
    assert f"{beyond} of them beyond rounding, of {counted} tokens counted" in support.detail
    assert counted < tokens


def test_a_placebo_outside_its_own_support_breaks_the_instrument_not_the_deployment():
    run = simulate(2, 8, "outside", placebo="outside")
    judged = judge_run(run, Counter(), alpha=ALPHA, has_logits=True)
    assert [t.kind for t in judged.pooled.instrument_rejected()] == ["support"]
    assert judged.verdict.label is Label.INCONCLUSIVE, judged.verdict.reason


def test_an_instrument_the_placebo_fails_is_inconclusive_never_a_sampler_bug():
    """Both engines sample colder than the rows they report (equiv's chain does not reproduce
    their sampler): the speculative samples fail their rows, but so do the placebo's, and no
    pooled test is believed; a prompt's own comparison with the placebo still may speak."""
    run = simulate(8, 16, "wrong_temp", placebo="wrong_temp")
    judged = judge_run(run, Counter(), alpha=ALPHA, has_logits=True)
    assert judged.pooled.rejected(), "the speculative samples fail their rows"
    assert judged.pooled.instrument_rejected(), "so do the placebo's"
    assert judged.verdict.label is Label.INCONCLUSIVE, judged.verdict.reason
    assert "the instrument does not reproduce this engine's sampler" in judged.verdict.reason
    bug = judge_run(run, Counter({Label.SAMPLER_BUG: 1}), alpha=ALPHA, has_logits=True)
    assert bug.verdict.label is Label.SAMPLER_BUG
    assert "against the placebo" in bug.verdict.reason


def test_over_http_the_speculative_samples_are_compared_with_the_placebo():
    pooled = judge_run(_http(simulate(4, 8)), Counter(), alpha=ALPHA, has_logits=False).pooled
    assert pooled.prompts == 4
    assert pooled.design is Design.VS_PLACEBO
    assert pooled.instrument == ()
    assert {t.name for t in pooled.tests} >= {"pit:pooled", "top-token:pooled"}


def test_a_fault_on_half_the_prompts_names_where_the_evidence_lives():
    """Diluted by the correct prompts (half the effect per pooled token), the fault needs more
    seeds than on every prompt, and the answer names the faulty prompts first."""
    run = simulate(4, 128, "greedy", faulty_prompts={1, 3})
    judged = judge_run(run, Counter(), alpha=ALPHA, has_logits=True)
    assert judged.verdict.label is Label.SAMPLER_BUG, judged.verdict.reason
    carriers = [key for key, _ in judged.pooled.carriers]
    assert set(carriers[:2]) == {"sim/p1", "sim/p3"}, carriers


def test_the_pooled_bounds_are_in_units_a_user_reads_and_say_what_would_decide():
    bound = Bound(Effect.TEMPERATURE, 0.02, -0.13, 0.17, MARGINS[Effect.TEMPERATURE])
    assert not bound.within
    assert bound.seeds_factor() == pytest.approx((0.15 / 0.08) ** 2)
    assert "λ - 1" in bound.line
    assert "not within +-0.1" in bound.line
    at_margin = Bound(Effect.TOP_TOKEN, 0.03, 0.01, 0.05, 0.02)
    assert at_margin.seeds_factor() is None  # more seeds cannot bring it within
    one_sample = Bound(Effect.TOP_TOKEN, 0.0, -float("inf"), float("inf"), 0.02)
    assert one_sample.seeds_factor() is None  # no interval from one sample a path
    # none outside the support in 2,824 tokens: the upper bound falls as one over the tokens
    support = Bound(Effect.SUPPORT, 0.0, 0.0, 0.0021, MARGINS[Effect.SUPPORT])
    assert not support.within
    assert support.seeds_factor() == pytest.approx(0.0021 / 0.002)


def test_the_bounds_take_the_runs_level_and_the_tests_keep_their_share(placebo_run):
    """A false `sampler-bug` can come from the pooled tests or a prompt's own, which share the
    run's level; a false `equivalent` only from a bound on the wrong side of its margin. So the
    bounds are at the run's level: narrower by the ratio of Student's t quantiles, each test's
    p-value and level as before."""
    shared = pool(placebo_run, alpha=ALPHA, has_logits=True)
    whole = pool(placebo_run, alpha=ALPHA, has_logits=True, bound_alpha=2 * ALPHA)
    assert whole.tests == shared.tests
    assert (whole.bounds_level, shared.bounds_level) == (2 * ALPHA, ALPHA)
    df = shared.samples - 2  # the placebo's draws as the control variate take one more
    for wide, narrow in zip(shared.bounds, whole.bounds, strict=True):
        assert narrow.estimate == wide.estimate
        assert wide.low <= narrow.low  # (the support's: 0 on both)
        assert narrow.high < wide.high
        if narrow.effect is Effect.TOP_TOKEN:  # (the others are not symmetric t intervals)
            ratio = (narrow.high - narrow.low) / (wide.high - wide.low)
            expected = sps.t.isf(2 * ALPHA, df) / sps.t.isf(ALPHA, df)
            assert ratio == pytest.approx(expected, rel=1e-9)
    assert f"the bounds at 1 - 2 x {2 * ALPHA:.3g}" in whole.lines()[0]
    assert "the bounds at" not in shared.lines()[0]
    assert PooledAnalysis.from_dict(whole.to_dict()) == whole
    assert "bound_alpha" not in shared.to_dict()  # files written before read as before


def test_the_temperature_interval_is_read_in_lambda_at_its_margins():
    """The estimator reads 0.087 where λ - 1 is 0.1 and -0.12 where it is -0.1 (at these
    positions): each side is scaled to read the margin there, so the interval lies within
    the margins exactly when the estimator's lies within those reads."""
    est, low, high = calibrated((0.087, -0.06, 0.0435), -0.12, 0.087)
    assert (est, low, high) == pytest.approx((0.1, -0.05, 0.05))
    assert calibrated((0.02, -0.01, 0.05), 0.01, 0.087) == (0.02, -0.01, 0.05)  # no reads


def simulate_paired(prompts, seeds, fault="none", *, tokens=32, drift=0.3):
    """As `simulate`, each seed's two paths drawing from one random stream (as llama.cpp's
    do), the speculative rows moved by ``drift``."""
    out = {}
    for p in range(prompts):
        rng = np.random.default_rng([p, 2031])
        logits = rng.normal(0.0, 2.5, size=(VOCAB, VOCAB)).astype(np.float32)
        key = f"sim/p{p}"
        out[key] = [
            Sample(
                f"{key}::sampling::seed{s}",
                *sample_pair(rng, logits, tokens, SAMPLING, fault, drift),
            )
            for s in range(seeds)
        ]
    return out


def _temperature(judged):
    return next(b for b in judged.pooled.bounds if b.effect is Effect.TEMPERATURE)


def _shuffled_placebo(run):
    """``run`` with each prompt's placebo samples given to other seeds: the same draws, no
    longer paired with the speculative sample of their seed."""
    out = {}
    for key, samples in run.items():
        placebos = [s.baseline for s in samples]
        moved = placebos[1:] + placebos[:1]
        out[key] = [dataclasses.replace(s, baseline=b) for s, b in zip(samples, moved, strict=True)]
    return out


def test_a_seeds_two_paths_from_one_random_stream_narrow_the_speculative_samples_bounds():
    """In process the placebo's own effect is 0 under its rows, and where a seed's two paths
    share their draws its error predicts the speculative samples': the bounds take it as a
    control variate. The same draws with the placebo's seeds shuffled give no such help."""
    run = simulate_paired(8, 16)
    paired = judge_run(run, Counter(), alpha=ALPHA, has_logits=True)
    apart = judge_run(_shuffled_placebo(run), Counter(), alpha=ALPHA, has_logits=True)
    narrow, wide = _temperature(paired), _temperature(apart)
    assert narrow.low < 0 < narrow.high
    assert narrow.high - narrow.low < 0.8 * (wide.high - wide.low)
    tops = [
        next(b for b in j.pooled.bounds if b.effect is Effect.TOP_TOKEN) for j in (paired, apart)
    ]
    assert tops[0].high - tops[0].low < tops[1].high - tops[1].low
    assert paired.verdict.label is Label.EQUIVALENT, paired.verdict.reason


def _three_scores(run):
    """``run`` as files written before the margins' reads were recorded hold it."""
    return _scores_cut(run, 3)


def test_without_the_margins_reads_the_temperature_bound_is_the_speculative_samples_own():
    """Older files: the estimator's own interval (its variance floored by the rows'), neither
    calibrated nor narrowed by the control variate, whose width its bias at the margins would
    not allow."""
    run = _three_scores(simulate_paired(4, 16))
    records = [s for samples in run.values() for s in samples]
    bound = _temperature(judge_run(run, Counter(), alpha=ALPHA, has_logits=True))
    pits, ids, sens = tokens_of(records, "speculative", "chain_pit")
    rng = np.random.default_rng(pit_seed(records) + 11)
    u = randomized_pit(pits[:, 0], pits[:, 1], rng)
    t = top_derivatives(records, "speculative", "chain_pit")
    theta, var, m = quasi_tempering(u, sens, pits[:, 2], t, ids)
    half = sps.t.isf(ALPHA, m - 1) * np.sqrt(var)
    assert (bound.estimate, bound.low, bound.high) == pytest.approx(
        (theta, theta - half, theta + half)
    )


def test_a_run_whose_chain_leaves_one_token_everywhere_has_no_temperature_interval():
    run = simulate(2, 4, sampling=SamplingConfig(temp=0.8, top_k=1))
    bound = _temperature(judge_run(run, Counter(), alpha=ALPHA, has_logits=True))
    assert not bound.within


@pytest.mark.parametrize(
    ("fault", "effect"), [("wrong_temp", Effect.TEMPERATURE), ("greedy", Effect.TOP_TOKEN)]
)
def test_a_fault_on_the_placebos_random_stream_stays_outside_the_bound(fault, effect):
    judged = judge_run(simulate_paired(8, 16, fault), Counter(), alpha=ALPHA, has_logits=True)
    assert judged.verdict.label is Label.SAMPLER_BUG, judged.verdict.reason
    bound = next(b for b in judged.pooled.bounds if b.effect is effect)
    assert bound.low > 0, bound.line  # colder, or the top token too often


def _without_top_derivatives(run):
    """The run as files written before equiv recorded ``t`` hold it: scores of two entries."""
    return _scores_cut(run, 2)


def _scores_cut(run, entries):
    """``run`` with each token's scores cut to their first ``entries``."""

    def strip(path):
        scores = {k: tuple(score[:entries] for score in v) for k, v in path.scores.items()}
        return dataclasses.replace(path, scores=scores)

    return {
        key: [
            dataclasses.replace(s, baseline=strip(s.baseline), speculative=strip(s.speculative))
            for s in samples
        ]
        for key, samples in run.items()
    }


def test_the_temperature_bound_weighs_the_top_token_where_the_records_allow():
    """At temperature 0.2 most of the information on λ sits in whether the top token was
    drawn: with its derivative recorded the interval is much narrower than from the normal
    scores alone, which files written before it still get."""
    run = simulate(6, 16, tokens=24, sampling=SamplingConfig(temp=0.2))

    def width(r):
        pooled = pool(r, alpha=ALPHA, has_logits=True)
        bound = next(b for b in pooled.bounds if b.effect is Effect.TEMPERATURE)
        assert bound.low < 0 < bound.high
        return bound.high - bound.low

    assert width(run) < 0.75 * width(_without_top_derivatives(run))


def test_one_seed_a_prompt_is_inconclusive_not_an_error(placebo_run):
    """One sample a path has no cluster variance: no interval, no seeds estimate, no crash
    (a one-seed run of the real pair raised OverflowError before)."""
    one = {key: samples[:1] for key, samples in list(placebo_run.items())[:1]}
    judged = judge_run(one, Counter(), alpha=ALPHA, has_logits=True)
    assert judged.verdict.label is Label.INCONCLUSIVE
    assert judged.pooled.seeds_needed() is None
    assert "a path has under 2 samples" in judged.verdict.reason


def test_prompts_without_a_placebo_are_left_out_and_counted(placebo_run):
    # Over HTTP the instrument is the target's re-scoring (target_pit): these samples lack it.
    judged = judge_run(placebo_run, Counter(), alpha=ALPHA, has_logits=False)
    assert judged.pooled.prompts == 0
    assert len(judged.pooled.left_out) == 8
    assert judged.verdict.label is Label.INCONCLUSIVE
    assert "no prompt could be pooled: 8 prompt(s) have no placebo" in judged.verdict.reason
    part = {**placebo_run, "sim/empty": []}
    partial = judge_run(part, Counter(), alpha=ALPHA, has_logits=True)
    assert partial.pooled.left_out == ("sim/empty",)
    assert "1 prompt(s) left out without a placebo" in partial.verdict.reason


def _http(run, fidelity=None):
    """The simulated samples as an HTTP run records them: scored by re-scoring (target_pit),
    with the baseline's re-scoring ``fidelity`` where given."""

    def moved(path):
        return PathSample(
            tokens=path.tokens,
            pits={"target_pit": path.pits["chain_pit"]},
            sensitivities={"target_sensitivity": path.sensitivities["chain_sensitivity"]},
            scores={"target_score": path.scores["chain_score"]},
        )

    return {
        k: [Sample(s.key, moved(s.baseline), moved(s.speculative), None, fidelity) for s in v]
        for k, v in run.items()
    }


def _fidelity(tv_max, top_changed=0):
    return Fidelity(32, tv_max / 4, tv_max, 0.0, 0.0, 0.0, 0.0, top_changed, 0)


@pytest.mark.parametrize(
    ("fidelity", "design"),
    [
        (_fidelity(0.0), Design.EXACT_RESCORED),
        (_fidelity(EXACT_TV), Design.EXACT_RESCORED),
        (_fidelity(2 * EXACT_TV), Design.VS_PLACEBO),
        (_fidelity(0.0, top_changed=1), Design.VS_PLACEBO),
        (None, Design.VS_PLACEBO),
    ],
)
def test_over_http_the_design_follows_the_measured_fidelity_of_the_re_scoring(fidelity, design):
    """Re-scored rows measured to be the rows the baseline sampled from (one request in
    flight) are tested against as in process; rows off by more, or not measured, only
    against the placebo."""
    pooled = pool(_http(simulate(4, 8), fidelity), alpha=ALPHA, has_logits=False)
    assert pooled.design is design
    assert bool(pooled.instrument) is design.one_sample
    assert PooledAnalysis.from_dict(pooled.to_dict()) == pooled


def test_one_sample_not_measured_keeps_the_comparison_with_the_placebo():
    run = _http(simulate(4, 8), _fidelity(0.0))
    key = next(iter(run))
    run[key] = [dataclasses.replace(run[key][0], rescore_fidelity=None), *run[key][1:]]
    assert pool(run, alpha=ALPHA, has_logits=False).design is Design.VS_PLACEBO


def test_over_http_with_exact_rows_the_bounds_are_the_speculative_samples_own():
    """Against exact rows the placebo adds no variance: every bound is narrower than the same
    samples' comparison with the placebo, and a correct sampler's are within their margins
    where the comparison's are not all."""
    run = simulate(8, 32)
    exact = pool(_http(run, _fidelity(0.0)), alpha=ALPHA, has_logits=False)
    versus = pool(_http(run, _fidelity(0.5)), alpha=ALPHA, has_logits=False)
    width = {b.effect: b.high - b.low for b in versus.bounds}
    for bound in exact.bounds:
        assert bound.high - bound.low < width[bound.effect], bound.line
    verdict = classify_run(exact, prompt_labels=Counter(), has_logits=False)
    assert verdict.label is Label.EQUIVALENT, verdict.reason


def test_over_http_with_exact_rows_a_rejection_still_needs_the_batched_follow_up():
    """Single-token rows are plain decoding's; the speculative samples follow verification's
    batched rows: a rejection may be numeric drift, and is asked again batched."""
    run = _http(simulate(8, 16, "greedy"), _fidelity(0.0))
    judged = judge_run(run, Counter(), alpha=ALPHA, has_logits=False)
    assert judged.pooled.design is Design.EXACT_RESCORED
    assert judged.pooled.rejected()
    assert judged.verdict.label is Label.INCONCLUSIVE, judged.verdict.reason
    assert "re-scored exactly" in judged.verdict.reason
    batched = RunBatched(tests=(_batched_test(1e-6, 0.99),), samples=64)
    confirmed = judge_run(run, Counter(), alpha=ALPHA, has_logits=False, batched=batched)
    assert confirmed.verdict.label is Label.SAMPLER_BUG, confirmed.verdict.reason


def _batched_test(p_adjusted, power):
    return ScoredTest(
        "top-token:vs-placebo-batched", 3.0, p_adjusted, p_adjusted, 500, "d", power=power
    )


def test_over_http_a_pooled_rejection_needs_the_batched_follow_up_to_be_a_sampler_bug():
    run = _http(simulate(8, 16, "greedy"))
    unchecked = judge_run(run, Counter(), alpha=ALPHA, has_logits=False)
    assert unchecked.pooled.rejected()
    assert unchecked.verdict.label is Label.INCONCLUSIVE
    assert "whether numeric drift explains it could not be checked" in unchecked.verdict.reason
    cases = [
        (RunBatched(tests=(_batched_test(1e-6, 0.99),), samples=64), Label.SAMPLER_BUG),
        (RunBatched(tests=(_batched_test(0.6, 0.95),), samples=64), Label.NUMERIC_DRIFT),
        (RunBatched(tests=(_batched_test(0.6, 0.3),), samples=64), Label.INCONCLUSIVE),
        (RunBatched(error="the server timed out"), Label.INCONCLUSIVE),
    ]
    for batched, label in cases:
        judged = judge_run(run, Counter(), alpha=ALPHA, has_logits=False, batched=batched)
        assert judged.verdict.label is label, (batched, judged.verdict.reason)
    assert (
        "the server timed out"
        in judge_run(
            run, Counter(), alpha=ALPHA, has_logits=False, batched=cases[-1][0]
        ).verdict.reason
    )


def _reported(http, run, every=3):
    """``http`` (`_http` of ``run``) with the rows a server reported sampling from at every
    ``every``-th position of each sample (chosen by position, as llama-server's choice depends
    on what came before): those positions' own evidence as ``reported_*``."""

    def add(moved, own):
        def part(entries):
            return tuple(e for i, e in enumerate(entries) if i % every == 0)

        return dataclasses.replace(
            moved,
            pits={**moved.pits, "reported_pit": part(own.pits["chain_pit"])},
            sensitivities={
                **moved.sensitivities,
                "reported_sensitivity": part(own.sensitivities["chain_sensitivity"]),
            },
            scores={**moved.scores, "reported_score": part(own.scores["chain_score"])},
            reported_positions=part(range(len(own.tokens))),
        )

    return {
        k: [
            dataclasses.replace(
                h,
                baseline=add(h.baseline, o.baseline),
                speculative=add(h.speculative, o.speculative),
            )
            for h, o in zip(samples, run[k], strict=True)
        ]
        for k, samples in http.items()
    }


@pytest.mark.parametrize("fidelity", [_fidelity(0.0), None])
def test_over_http_a_rejection_against_the_rows_the_server_reported_is_the_samplers(fidelity):
    """Where the speculative server reported the row a token was sampled from, nothing but its
    sampler lies between them: a rejection there is a sampler bug without the batched
    follow-up, in both designs; a correct sampler's run is judged as without those rows."""
    faulty = simulate(8, 16, "greedy")
    judged = judge_run(
        _reported(_http(faulty, fidelity), faulty), Counter(), alpha=ALPHA, has_logits=False
    )
    assert any(is_reported(t) for t in judged.pooled.rejected())
    assert judged.verdict.label is Label.SAMPLER_BUG, judged.verdict.reason
    assert "reported sampling from reject" in judged.verdict.reason
    correct = simulate(8, 32)
    plain = judge_run(_http(correct, fidelity), Counter(), alpha=ALPHA, has_logits=False)
    reported = judge_run(
        _reported(_http(correct, fidelity), correct), Counter(), alpha=ALPHA, has_logits=False
    )
    assert not reported.pooled.rejected()
    assert {t.name for t in reported.pooled.tests} > {t.name for t in plain.pooled.tests}
    assert reported.verdict.label is plain.verdict.label, reported.verdict.reason


def test_a_placebo_that_fails_the_rows_its_server_reported_is_never_a_sampler_bug():
    """Both paths sampling otherwise than their reported rows say (equiv's chain is not the
    server's): the placebo's check rejects, so the ``:reported`` tests are left out, and the
    comparison with the placebo, which that error does not touch, stands."""
    run = simulate(8, 16, "greedy", placebo="greedy")
    judged = judge_run(_reported(_http(run, None), run), Counter(), alpha=ALPHA, has_logits=False)
    assert any(is_reported(t) for t in judged.pooled.instrument_rejected())
    assert any(is_reported(t) for t in judged.pooled.rejected())
    assert judged.verdict.label is not Label.SAMPLER_BUG, judged.verdict.reason
    assert "the placebo's own samples fail them" in judged.verdict.reason


def _hotter(sample, share, rng):
    """``sample`` with its re-scored likelihood scores lowered by ``share`` of their information
    (re-scored rows under which the tokens look hotter than under their own), and some noise."""
    scores = [
        (s - share * f + rng.normal(0.0, 0.01), f, *rest)
        for s, f, *rest in sample.scores["target_score"]
    ]
    return dataclasses.replace(sample, scores={**sample.scores, "target_score": tuple(scores)})


def test_over_http_the_pooled_answer_says_what_the_rescored_rows_move_the_temperature_by():
    """On the tokens whose row the speculative server reported, their temperature scores under
    the re-scored rows less those under their own rows: what numeric drift moves the estimate
    by. Here the re-scoring reads the speculative tokens 0.05 hotter, the placebo's as its own."""
    rng = np.random.default_rng(3)
    run = simulate(8, 16)
    reported = _reported(_http(run, _fidelity(0.0)), run)
    drifted = {
        k: [dataclasses.replace(s, speculative=_hotter(s.speculative, 0.05, rng)) for s in v]
        for k, v in reported.items()
    }
    pooled = pool(drifted, alpha=ALPHA, has_logits=False)
    drift = pooled.drift
    assert drift is not None
    assert drift.tokens == sum(
        len(s.speculative.pits["reported_pit"]) for v in reported.values() for s in v
    )
    assert drift.low < -0.05 < drift.high < 0.0
    assert drift.placebo == pytest.approx(0.0, abs=1e-12)
    assert drift.line in pooled.lines()
    assert PooledAnalysis.from_dict(pooled.to_dict()).drift == drift
    unpositioned = {
        k: [
            dataclasses.replace(
                s, speculative=dataclasses.replace(s.speculative, reported_positions=None)
            )
            for s in v
        ]
        for k, v in drifted.items()
    }
    assert pool(unpositioned, alpha=ALPHA, has_logits=False).drift is None  # older files
    first = next(iter(drifted))
    mixed = {**drifted, first: unpositioned[first]}  # a resumed run: older records beside new
    partial = pool(mixed, alpha=ALPHA, has_logits=False).drift
    assert partial is not None
    assert partial.left_out == len(drifted[first])
    assert partial.tokens < drift.tokens
    assert f"({partial.left_out} samples without them left out)" in partial.line
    assert pool(run, alpha=ALPHA, has_logits=True).drift is None  # in process


def drifted_server(prompts, seeds, scale, *, placebo_scale=1.0, tokens=32):
    """An HTTP run whose speculative server samples correctly from rows drifted from plain
    decoding's (logits times ``scale``) and reports each of them; the baseline server's rows
    drifted by ``placebo_scale``: at 1 its own rows are the re-scored ones (exact re-scoring),
    otherwise the re-scoring is not exact (as at several requests in flight)."""
    own, rescored = {}, {}
    for p in range(prompts):
        rng = np.random.default_rng([p, 2040])
        logits = rng.normal(0.0, 2.5, size=(VOCAB, VOCAB)).astype(np.float32)
        key = f"sim/p{p}"
        for s in range(seeds):
            base_own, base_rescored = sample_drifted(rng, logits, tokens, SAMPLING, placebo_scale)
            spec_own, spec_rescored = sample_drifted(rng, logits, tokens, SAMPLING, scale)
            name = f"{key}::sampling::seed{s}"
            own.setdefault(key, []).append(Sample(name, base_own, spec_own))
            rescored.setdefault(key, []).append(Sample(name, base_rescored, spec_rescored))
    fidelity = _fidelity(0.0) if placebo_scale == 1.0 else None
    return _reported(_http(rescored, fidelity), own, every=1)


def test_the_drift_line_says_whether_the_speculative_shift_lies_beyond_the_placebos():
    """A speculative server sampling correctly from rows 5 % hotter than plain decoding's:
    its shift lies beyond the placebo's (exactly 0, its rows the re-scored ones), and the
    p-value is the level at which the line's interval reaches 0. Both servers' rows drifted
    alike from the re-scoring (the instrument's error, not the deployment's): no difference."""
    run = drifted_server(4, 8, 0.95)
    drift = pool(run, alpha=ALPHA, has_logits=False).drift
    assert drift is not None
    assert drift.high < 0.0  # hotter
    assert drift.placebo == 0.0
    assert drift.p_beyond is not None
    assert drift.p_beyond < 1e-4
    assert f"(the difference: p {drift.p_beyond:.2g})" in drift.line
    at_p = drift_shift([s for v in run.values() for s in v], alpha=drift.p_beyond / 2)
    assert at_p is not None
    assert at_p.high == pytest.approx(0.0, abs=1e-9)
    alike = pool(drifted_server(4, 8, 0.95, placebo_scale=0.95), alpha=ALPHA, has_logits=False)
    assert alike.design is Design.VS_PLACEBO
    assert alike.drift is not None
    assert alike.drift.high < 0.0
    assert alike.drift.placebo is not None
    assert alike.drift.placebo < 0.0
    assert alike.drift.p_beyond is not None
    assert alike.drift.p_beyond > 0.05
    # a speculative server drifted 5 %, a placebo's 2 %: the p-value from the clusters' sums
    apart = drifted_server(4, 8, 0.95, placebo_scale=0.98)
    found = pool(apart, alpha=ALPHA, has_logits=False).drift
    assert found is not None
    assert found.p_beyond == pytest.approx(_welch_of_clusters(apart), rel=1e-9)


def _welch_of_clusters(run):
    """The shift beyond the placebo's, computed here from each sample's sums: per path
    ``θ = Σ shift / Σ info`` with the sandwich variance over samples, then Student's t on the
    difference with ``min(m) - 1`` degrees of freedom."""
    estimates = []
    for path in ("speculative", "baseline"):
        sums = []
        for sample in (s.path(path) for v in run.values() for s in v):
            own = np.asarray(sample.scores["reported_score"])
            rescored = np.asarray(sample.scores["target_score"])[list(sample.reported_positions)]
            sums.append(((rescored[:, 0] - own[:, 0]).sum(), own[:, 1].sum()))
        n, d = np.asarray(sums).T
        theta = n.sum() / d.sum()
        m = len(n)
        estimates.append((theta, ((n - theta * d) ** 2).sum() / d.sum() ** 2 * m / (m - 1), m))
    (a, va, ma), (b, vb, mb) = estimates
    return 2 * sps.t.sf(abs(a - b) / np.sqrt(va + vb), min(ma, mb) - 1)


def test_a_server_whose_rows_are_plain_decodings_shows_no_drift():
    """The same servers without drift: the shift is exactly 0 and its p-value 1."""
    drift = pool(drifted_server(4, 8, 1.0), alpha=ALPHA, has_logits=False).drift
    assert drift is not None
    assert (drift.estimate, drift.low, drift.high) == (0.0, 0.0, 0.0)
    assert drift.p_beyond == 1.0


def test_no_reported_tests_where_no_row_was_kept():
    """Rows that hold none of the chain's support, or a server that sends no bytes: no
    position counts, and the Holm family keeps its own tests alone."""
    run = simulate(4, 8)
    none = _reported(_http(run, None), run, every=10**6)  # position 0 only
    emptied = {
        k: [
            dataclasses.replace(
                s,
                speculative=dataclasses.replace(
                    s.speculative, pits={**s.speculative.pits, "reported_pit": ()}
                ),
            )
            for s in v
        ]
        for k, v in none.items()
    }
    names = {t.name for t in pool(emptied, alpha=ALPHA, has_logits=False).tests}
    assert not any(name.endswith(":reported") for name in names)


def test_the_prompts_labels_speak_where_the_pool_does_not(placebo_run):
    pooled = pool(placebo_run, alpha=ALPHA, has_logits=True)
    bug = classify_run(pooled, prompt_labels=Counter({Label.SAMPLER_BUG: 1}))
    assert bug.label is Label.SAMPLER_BUG
    assert "1 prompt(s) show a sampler fault on their own" in bug.reason
    drift = classify_run(pooled, prompt_labels=Counter({Label.NUMERIC_DRIFT: 2}))
    assert drift.label is Label.NUMERIC_DRIFT
    # per-prompt inconclusive no longer makes the run inconclusive
    many = classify_run(pooled, prompt_labels=Counter({Label.INCONCLUSIVE: 8}))
    assert many.label is Label.EQUIVALENT
    assert many.evidence == {"labels": {"inconclusive": 8}}
    setup = classify_run(pooled, prompt_labels=Counter(), differences=["n_ctx: 2048 vs 4096"])
    assert setup.label is Label.MISCONFIGURATION


def test_the_run_record_holds_the_judgement_and_reads_back_the_same(placebo_run):
    judged = judge_run(placebo_run, Counter({Label.INCONCLUSIVE: 8}), alpha=ALPHA, has_logits=True)
    assert PooledAnalysis.from_dict(judged.pooled.to_dict()) == judged.pooled
    record = judged.record()
    assert record.key == RUN_KEY
    again = parse_record(record.to_dict())
    assert isinstance(again, RunRecord)
    assert RunJudgement.of(again) == judged
    batched = RunBatched(tests=(_batched_test(0.5, 0.9),), error=None, samples=64)
    assert RunBatched.from_dict(batched.to_dict()) == batched
