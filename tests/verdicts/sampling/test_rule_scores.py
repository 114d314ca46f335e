"""The pooled tests aimed at a wrong acceptance rule (`equiv.verdicts.sampling.rule_scores`):
each score has mean 0 under the target's row, the bets keep their level whatever the scores'
tails, and a rejection sampler that leaks the draft (an unclamped residual), relaxes its
acceptance or reads a wrong draft temperature is caught by its own direction's test, through a
run's real evidence (`judgement_evidence`). Seeded numpy draws: the same outcomes on every
machine."""

import dataclasses
from collections import Counter

import numpy as np
import pytest
from simulated_chain import sample_drafted, sample_path

from equiv.config import SamplingConfig
from equiv.engines.acceptance_rules import Rule, output_distribution, wrong_temp_outputs
from equiv.records.verdict import Label
from equiv.verdicts.sampling.rule_scores import (
    BETS,
    EXPONENTS,
    Direction,
    betting_test,
    position_scores,
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


def _test(entries, direction, alpha=0.01):
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


def test_each_factor_is_a_fair_game_under_the_target_row():
    """Every bet's and every likelihood ratio's factor is >= 0 at every token and 1 on average
    under p, whatever the rows (p cut to few tokens or one, p equal to q); the linear scores
    have mean 0 and their stated variance, lowest and highest."""
    rng = np.random.default_rng(7)
    for _ in range(20):
        for p, q in _edge_rows(rng):
            every = np.asarray([position_scores(p, q, x) for x in range(VOCAB)])
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
            factors = np.exp(every[:, Direction.DRAFT_TEMPERATURE.columns])
            assert factors.shape[1] == len(EXPONENTS)
            assert p @ factors == pytest.approx(np.ones(len(EXPONENTS)), abs=1e-9)


def test_the_temperature_factors_are_the_wrong_temp_rules_likelihood_ratios():
    """`wrong_temp_outputs`, the one-token shortcut the scoring loop takes, is the rule's
    `output_distribution` at each exponent and token, edge rows included."""
    rng = np.random.default_rng(9)
    for _ in range(10):
        for p, q in _edge_rows(rng):
            for k in (0.25, 0.5, 0.9, 1.0, 1.3, 4.0):
                qk = np.where(q > 0, q**k, 0.0)
                out = output_distribution(Rule.WRONG_TEMP, p, q, q_wrong=qk / qk.sum())
                at = [wrong_temp_outputs(p, q, (k,), x)[0] for x in range(VOCAB)]
                assert at == pytest.approx(out, abs=1e-12)
            x = int(np.argmax(p))
            log_ratio = position_scores(p, q, x)[Direction.DRAFT_TEMPERATURE.columns]
            out = wrong_temp_outputs(p, q, EXPONENTS, x)
            assert np.exp(log_ratio) == pytest.approx((1 - 1e-9) * out / p[x] + 1e-9)


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


def test_the_bets_keep_their_level_on_independent_runs_of_a_correct_sampler():
    """200 runs of 100 positions a test: at alpha 0.05 Ville's bound makes rejections far
    rarer than alpha (10 expected of a test exact at its level; a bias of 0.05 in every score
    already gives 2-3, of 0.1 13-22)."""
    rng = np.random.default_rng(11)
    hits = Counter()
    for _ in range(200):
        entries = _draws(rng, 100)
        for d in Direction:
            hits[d] += _test(entries, d, 0.05).rejects
    for d in Direction:
        assert hits[d] <= 5, (d, hits[d])


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
    """A file from before the temperature test's likelihood ratios held 12 numbers a position
    (three directions of 4), one from before the leak score 8: neither is read as today's."""
    run = _run(Rule.CORRECT, prompts=1, seeds=2)
    old = {
        k: [
            Sample(
                s.key,
                s.baseline,
                dataclasses.replace(
                    s.speculative,
                    rule_scores=tuple(e[: 4 * (2 + n)] for e in s.speculative.rule_scores),
                ),
            )
            for n, s in enumerate(samples)
        ]
        for k, samples in run.items()
    }
    tests = judge_run(old, Counter(), alpha=0.005, has_logits=True).pooled.tests
    assert {t.detail for t in tests if t.kind in RULE_KINDS} == {
        "not enough data: 2 of 2 samples without the draft's rows' scores (an older file)"
    }
