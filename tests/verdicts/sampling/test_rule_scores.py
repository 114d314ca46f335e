"""The pooled tests aimed at a wrong acceptance rule (`equiv.verdicts.sampling.rule_scores`):
each score has mean 0 under the target's row, the bets keep their level whatever the scores'
tails, the temperature's score test holds its own, and a rejection sampler that leaks the draft
(an unclamped residual), relaxes its acceptance or reads a wrong draft temperature is caught by
its own direction's test, through a run's real evidence (`judgement_evidence`). Seeded numpy
draws: the same outcomes on every machine."""

import dataclasses
from collections import Counter

import numpy as np
import pytest
from scipy import stats
from simulated_chain import sample_drafted, sample_path

from equiv.config import SamplingConfig
from equiv.engines.acceptance_rules import Rule, output_distribution, wrong_temp_rows
from equiv.records.verdict import Label
from equiv.verdicts.sampling.rule_scores import (
    BETS,
    RHO,
    STEP,
    WIDTH,
    Direction,
    betting_test,
    position_scores,
    score_test,
)
from equiv.verdicts.sampling.run_verdict import judge_run
from equiv.verdicts.sampling.samples import PathSample, Sample

SAMPLING = SamplingConfig(temp=0.8)
VOCAB = 24


def _rows(rng):
    """A peaked target row and a draft row near it, cut as a chain cuts (min-p)."""
    logits = rng.normal(0.0, 2.5, VOCAB)
    p = np.exp(logits) / np.exp(logits).sum()
    q = np.exp((logits + rng.normal(0.0, 1.5, VOCAB)) / 0.8)
    q = np.where(q >= 0.02 * q.max(), q, 0.0)
    return p, q / q.sum()


def _draws(rng, n, fault=None):
    """``n`` positions' ``rule_score`` entries, each token drawn from p or from a faulty rule."""
    entries = []
    for _ in range(n):
        p, q = _rows(rng)
        f = p
        if fault in (Rule.TOP2, Rule.NO_MAX):
            f = output_distribution(fault, p, q)
        if fault is Rule.WRONG_TEMP:
            wrong = np.sqrt(q) / np.sqrt(q).sum()
            f = output_distribution(Rule.WRONG_TEMP, p, q, q_wrong=wrong)
        entries.append(position_scores(p, q, int(rng.choice(VOCAB, p=f))))
    return np.asarray(entries)


def _test(entries, direction, alpha=0.01, seed=0):
    if direction is Direction.DRAFT_TEMPERATURE:
        return score_test(entries[:, direction.columns], alpha, np.random.default_rng(seed))
    return betting_test(entries[:, direction.columns], direction, alpha)


def _edge_rows(rng):
    """Rows as a chain leaves them: p cut to a few tokens, one token, or equal to q."""
    p, q = _rows(rng)
    cut = np.where(p >= np.sort(p)[-3], p, 0.0)
    one = np.zeros(VOCAB)
    one[int(np.argmax(q))] = 1.0
    yield cut / cut.sum(), q
    yield one, q
    yield q, q
    yield p, q
    apart = np.where(q > 0, 0.0, p)  # no draft mass on p's support: the leak scores 0
    if apart.sum() > 0:
        yield apart / apart.sum(), q


def _expected_normal_scores(entries):
    """``E[Φ⁻¹(u) | x]`` for each token's ``[mass before, probability]``."""
    low, width = entries[:, 0], entries[:, 1]
    dens = stats.norm.pdf(stats.norm.ppf(np.clip([low, low + width], 0.0, 1.0)))
    return np.where(width > 0, (dens[0] - dens[1]) / np.where(width > 0, width, 1.0), 0.0)


def test_each_factor_is_a_fair_game_under_the_target_row():
    """Every bet's factor is >= 0 at every token and 1 on average under p, whatever the rows (p
    cut to few tokens or one, p equal to q); the linear scores have mean 0 and their stated
    variance, lowest and highest; the temperature's score is the rule's derivative in k over p
    with mean 0 and its stated variance and ρ, its PIT intervals tile [0, 1] over p's support,
    and its weight is the derivative in k of the expected normal score under the rule."""
    rng = np.random.default_rng(7)
    for _ in range(20):
        for p, q in _edge_rows(rng):
            every = np.asarray([position_scores(p, q, x) for x in range(VOCAB)])
            assert every.shape[1] == WIDTH
            live = p > 0
            for d in (Direction.DRAFT_LEAK, Direction.RELAXED):
                s, variance, low, high = every[:, d.columns].T
                assert p @ s == pytest.approx(0.0, abs=1e-9)
                assert p @ s**2 == pytest.approx(variance[0], rel=1e-6, abs=1e-12)
                assert s[live].min() == pytest.approx(low[0])
                assert s[live].max() == pytest.approx(high[0])
                assert low[0] >= -1 - 1e-12
                for bet in BETS:
                    assert (1 + bet * s[live]).min() >= -1e-9
                    assert p @ (1 + bet * s) == pytest.approx(1.0, abs=1e-9)
            temp = every[live][:, Direction.DRAFT_TEMPERATURE.columns]
            score, variance, rho = temp[:, 0], temp[0, 1], temp[0, 2]
            assert p[live] @ score == pytest.approx(0.0, abs=1e-9)
            assert p[live] @ score**2 == pytest.approx(variance, rel=1e-6, abs=1e-12)
            if variance > 0:
                assert rho == pytest.approx(p[live] @ np.abs(score) ** 3 / variance**1.5)
            order = np.argsort(temp[:, 3])
            ends = np.concatenate([[0.0], np.cumsum(temp[order, 4])])
            assert temp[order, 3] == pytest.approx(ends[:-1], abs=1e-9)
            assert temp[:, 4] == pytest.approx(p[live], abs=1e-12)
            assert np.ptp(temp[:, [1, 2, 5]], axis=0) == pytest.approx(0.0, abs=1e-9)  # a row's
            rows = wrong_temp_rows(p, q, (1 + STEP, 1 - STEP))[:, live]
            slope = (rows[0] - rows[1]) / (2 * STEP)
            assert score == pytest.approx(slope / p[live] - slope @ np.ones(live.sum()), abs=1e-6)
            mean_z = _expected_normal_scores(temp[:, 3:5])
            assert temp[0, 5] == pytest.approx(slope @ mean_z, abs=1e-6)


def test_wrong_temp_rows_is_the_rules_output_distribution():
    """`wrong_temp_rows`, the scoring loop's shortcut, is the rule's `output_distribution` at
    each exponent, edge rows included."""
    rng = np.random.default_rng(9)
    for _ in range(10):
        for p, q in _edge_rows(rng):
            ks = (0.25, 0.5, 0.9, 1.0, 1.3, 4.0)
            for k, row in zip(ks, wrong_temp_rows(p, q, ks), strict=True):
                qk = np.where(q > 0, q**k, 0.0)
                out = output_distribution(Rule.WRONG_TEMP, p, q, q_wrong=qk / qk.sum())
                assert row == pytest.approx(out, abs=1e-12)


def test_a_rare_token_at_a_certain_row_moves_the_temperature_test_by_one_gaussian_draw():
    """At a row near certainty a token of probability 1e-4 scores far beyond its row's spread
    (the likelihood score's sum would reject on it alone); in the temperature test it is one
    normal score times its row's small weight among 400 positions."""
    rng = np.random.default_rng(2)
    rows = [_rows(rng) for _ in range(399)]
    entries = [position_scores(p, q, int(rng.choice(VOCAB, p=p))) for p, q in rows]
    p = np.asarray([1 - 1e-4, 1e-4, 0.0, 0.0])
    q = np.asarray([0.5, 0.3, 0.1, 0.1])
    column = Direction.DRAFT_TEMPERATURE.columns
    with_rare, without = (
        score_test(np.asarray([*entries, position_scores(p, q, x)])[:, column], 0.01, rng_)
        for x, rng_ in ((1, np.random.default_rng(3)), (0, np.random.default_rng(3)))
    )
    assert abs(with_rare.statistic - without.statistic) < 0.5
    slope = np.diff(wrong_temp_rows(p, q, (1 - STEP, 1 + STEP)), axis=0)[0, :2] / (2 * STEP)
    score = slope / p[:2]
    assert abs(score[1]) / np.sqrt(p[:2] @ score**2) > 50  # what the sum would have moved by


def test_the_temperature_test_sums_the_scores_of_long_runs_and_keeps_its_level():
    """1,000 correct runs of 600 positions (rows redrawn from 100, each token from its row) at
    alpha 0.05: long enough that the scores of the rows whose tails allow it are summed, and
    the test rejects about alpha: 50 expected, under 30 or over 72 each with probability under
    0.001."""
    column = Direction.DRAFT_TEMPERATURE.columns
    rng = np.random.default_rng(23)
    rows = [_rows(rng) for _ in range(100)]
    every = [np.asarray([position_scores(p, q, x)[column] for x in range(VOCAB)]) for p, q in rows]
    cum = np.cumsum([p for p, _ in rows], axis=1)
    hits = 0
    for _ in range(1000):
        which = rng.integers(0, 100, 600)
        tokens = np.minimum((cum[which] < rng.random((600, 1))).sum(axis=1), VOCAB - 1)
        entries = np.stack(every)[which, tokens]
        result = score_test(entries, 0.05, rng)
        assert "the score at 0 positions" not in result.detail, result.detail
        hits += result.rejects
    assert 30 <= hits <= 72, hits


def test_runs_of_rows_near_certainty_keep_the_level_where_a_sum_of_scores_would_not():
    """1,000 correct runs of 10 ordinary positions and 4,000 rows near certainty, whose rare
    token (probability 1e-5) scores about 7 against a spread of 0.02: a sum of the scores
    rejects whenever one rare token is drawn with the ordinary positions leaning its way (about
    3 % of runs at alpha 0.01); the test, which takes the normal scores of such rows, about
    alpha (10 expected; 23 or more has probability under 0.001)."""
    column = Direction.DRAFT_TEMPERATURE.columns
    rng = np.random.default_rng(17)
    ordinary = []
    for _ in range(100):
        p, q = _rows(rng)
        ordinary.append((p, np.asarray([position_scores(p, q, x)[column] for x in range(VOCAB)])))
    p = np.asarray([1 - 1e-5, 1e-5, 0.0])
    q = np.asarray([0.999, 1e-3 - 1e-12, 1e-12])
    certain = np.asarray([position_scores(p, q, x)[column] for x in (0, 1)])
    assert certain[0, 2] > RHO  # skewed: the normal scores
    hits = summed = 0
    for _ in range(1000):
        run = [certain[(rng.random(4000) < p[1]).astype(int)]]
        for i in rng.integers(0, 100, 10):
            row, entries = ordinary[i]
            run.append(entries[[rng.choice(VOCAB, p=row)]])
        entries = np.concatenate(run)
        hits += score_test(entries, 0.01, rng).rejects
        z = entries[:, 0].sum() / np.sqrt(entries[:, 1].sum())
        summed += 2 * stats.norm.sf(abs(z)) < 0.01
    assert hits <= 22, hits
    assert summed >= 20, summed


def test_the_relaxed_bet_at_one_is_the_likelihood_ratio_of_relaxed_acceptance():
    rng = np.random.default_rng(3)
    p, q = _rows(rng)
    f = output_distribution(Rule.TOP2, p, q)
    x = int(np.argmax(f / p))
    entries = np.asarray([position_scores(p, q, x)])
    s = entries[0, Direction.RELAXED.columns][0]
    assert 1 + s == pytest.approx(f[x] / p[x])
    result = _test(entries, Direction.RELAXED)
    assert result.statistic == pytest.approx(np.log(np.mean([1 + b * s for b in BETS])))


def test_the_tests_keep_their_level_on_independent_runs_of_a_correct_sampler():
    """200 runs of 100 positions a test at alpha 0.05: Ville's bound makes the bets' rejections
    far rarer than alpha (a bias of 0.05 in every score already gives 2-3, of 0.1 13-22); the
    temperature's test is about exact (10 expected; 21 or more has probability under 0.001)."""
    rng = np.random.default_rng(11)
    hits = Counter()
    for _ in range(200):
        entries = _draws(rng, 100)
        for d in Direction:
            hits[d] += _test(entries, d, 0.05, seed=len(hits)).rejects
    for d in (Direction.DRAFT_LEAK, Direction.RELAXED):
        assert hits[d] <= 5, (d, hits[d])
    assert hits[Direction.DRAFT_TEMPERATURE] <= 20, hits


@pytest.mark.parametrize(
    ("fault", "direction", "n"),
    [
        (Rule.NO_MAX, Direction.DRAFT_LEAK, 60),
        (Rule.TOP2, Direction.RELAXED, 60),
        (Rule.WRONG_TEMP, Direction.DRAFT_TEMPERATURE, 600),
    ],
)
def test_each_faulty_rule_is_caught_by_its_own_direction(fault, direction, n):
    result = _test(_draws(np.random.default_rng(5), n, fault), direction)
    assert result.p_value < 0.001, result.detail
    assert result.effect < 0 if direction is Direction.DRAFT_TEMPERATURE else result.effect > 0


def test_the_leak_bet_at_one_half_is_the_likelihood_ratio_of_an_unclamped_residual():
    """``no_max`` emits ``(p + q) / 2``: where q lives inside p's support the bet λ = 1/2 on the
    leak score is its likelihood ratio, the Neyman-Pearson test's statistic."""
    rng = np.random.default_rng(4)
    logits = rng.normal(0.0, 2.5, VOCAB)
    p = np.exp(logits) / np.exp(logits).sum()
    q = np.exp(logits + rng.normal(0.0, 1.5, VOCAB))
    q /= q.sum()
    f = output_distribution(Rule.NO_MAX, p, q)
    assert f == pytest.approx((p + q) / 2)
    for x in range(VOCAB):
        assert 1 + 0.5 * position_scores(p, q, x)[0] == pytest.approx(f[x] / p[x])


def _run(rule, prompts=4, seeds=6, tokens=24, sampling=SAMPLING):
    """A run whose speculative path is a rejection sampler with ``rule``; the placebo plain."""
    out = {}
    for k in range(prompts):
        rng = np.random.default_rng([k, 51])
        logits = rng.normal(0.0, 2.5, (VOCAB, VOCAB)).astype(np.float32)
        draft = (logits + rng.normal(0.0, 1.5, logits.shape)).astype(np.float32)
        key = f"sim/p{k}"
        out[key] = [
            Sample(
                f"{key}::sampling::seed{s}",
                sample_path(rng, logits, tokens, sampling),
                sample_drafted(rng, logits, draft, tokens, sampling, rule),
            )
            for s in range(seeds)
        ]
    return out


def test_without_cut_offs_an_unclamped_residual_is_caught_by_the_leak_alone():
    """Whole rows (no top-k, top-p or min-p): ``no_max`` emits no token outside the chain's
    support, so the support test sees nothing and ``draft-leak`` must."""
    whole = SamplingConfig(temp=0.8, top_k=0, top_p=1.0, min_p=0.0)
    run = _run(Rule.NO_MAX, sampling=whole)
    pooled = judge_run(run, Counter(), alpha=0.005, has_logits=True).pooled
    tests = {t.kind: t for t in pooled.tests}
    assert tests["support"].n > 0, pooled.lines()
    assert tests["support"].statistic == 0, pooled.lines()
    assert "draft-leak" in {t.kind for t in pooled.rejected()}, pooled.lines()


@pytest.mark.parametrize(
    ("rule", "kind", "seeds"),
    [
        (Rule.NO_MAX, "draft-leak", 6),
        (Rule.TOP2, "relaxed-acceptance", 6),
        (Rule.WRONG_TEMP, "draft-temperature", 10),
    ],
)
def test_a_run_with_a_wrong_acceptance_rule_is_a_sampler_bug_by_its_direction(rule, kind, seeds):
    judged = judge_run(_run(rule, seeds=seeds), Counter(), alpha=0.005, has_logits=True)
    assert kind in {t.kind for t in judged.pooled.rejected()}, judged.pooled.lines()
    assert judged.verdict.label is Label.SAMPLER_BUG, judged.verdict.reason


RULE_KINDS = {"draft-leak", "relaxed-acceptance", "draft-temperature"}


def test_a_correct_rejection_sampler_passes_every_direction_and_reads_back_from_its_record():
    run = _run(Rule.CORRECT)
    judged = judge_run(run, Counter(), alpha=0.005, has_logits=True)
    kinds = {t.kind for t in judged.pooled.tests}
    assert kinds >= RULE_KINDS
    assert not judged.pooled.rejected(), judged.pooled.lines()
    sample = next(iter(run.values()))[0].speculative
    record = {"tokens": list(sample.tokens), "rule_score": [list(e) for e in sample.rule_scores]}
    assert PathSample.from_dict(record).rule_scores == sample.rule_scores


def test_without_judgements_there_is_no_rule_test_and_with_some_missing_no_data():
    run = _run(Rule.CORRECT, prompts=2, seeds=2)
    plain = {
        k: [Sample(s.key, s.baseline, s.baseline) for s in samples] for k, samples in run.items()
    }
    judged = judge_run(plain, Counter(), alpha=0.005, has_logits=True)
    assert not RULE_KINDS & {t.kind for t in judged.pooled.tests}
    first, *rest = next(iter(run.values()))
    mixed = {"sim/p0": [Sample(first.key, first.baseline, first.baseline), *rest]}
    tests = judge_run(mixed, Counter(), alpha=0.005, has_logits=True).pooled.tests
    rules = [t for t in tests if t.kind in RULE_KINDS]
    why = "not enough data: 1 of 2 samples without the draft's rows' scores (an older file)"
    assert [t.detail for t in rules] == [why] * 3


def test_scores_recorded_by_an_older_equiv_give_no_data_not_a_misread():
    """A file from before the temperature's PIT held 22 numbers a position (its 14
    likelihood ratios), one from before them 12 (three directions of 4), one from before the
    leak score 8: none is read as today's."""
    run = _run(Rule.CORRECT, prompts=1, seeds=3)

    def cut(entry, width):
        return (*entry[:width], *[0.0] * (width - len(entry)))

    old = {
        k: [
            Sample(
                s.key,
                s.baseline,
                dataclasses.replace(
                    s.speculative,
                    rule_scores=tuple(cut(e, width) for e in s.speculative.rule_scores),
                ),
            )
            for width, s in zip((8, 12, 22), samples, strict=True)
        ]
        for k, samples in run.items()
    }
    tests = judge_run(old, Counter(), alpha=0.005, has_logits=True).pooled.tests
    assert {t.detail for t in tests if t.kind in RULE_KINDS} == {
        "not enough data: 3 of 3 samples without the draft's rows' scores (an older file)"
    }
