"""The placebo comparison and the re-scoring fidelity, on simulated runs with known answers.

Every run below draws tokens from true rows ``p`` and scores them under re-scored rows ``q``
(the instrument: ``p`` with logit noise, as re-scoring on a server gives). A correct
speculative path and the placebo are both drawn from ``p``: the tests against the placebo must
keep their level however far ``q`` is off, while a one-sample test against ``q`` alone does not.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import norm

from equiv.config import SamplingConfig
from equiv.verdicts.sampling.fidelity import Fidelity, rescore_fidelity
from equiv.verdicts.sampling.placebo import (
    cluster_ratio,
    pit_vs_placebo,
    temperature_vs_placebo,
    top_token_vs_placebo,
)
from equiv.verdicts.sampling.token_evidence import _pit, _tempering
from equiv.verdicts.stats import randomized_pit, top_token_test

ALPHA = 0.01
IDS = np.arange(8)


def _scored(q, tokens):
    """PIT triples ``[mass_before, p_token, p_top]`` and sensitivities of ``tokens`` under rows
    ``q`` (n, V), vectorized: tokens ranked by probability descending, ties by id, as
    `token_evidence._pit` and `_sensitivity` rank them (checked against them below)."""
    n = q.shape[0]
    order = np.lexsort((np.broadcast_to(IDS, q.shape), -q), axis=1)
    sorted_q = np.take_along_axis(q, order, axis=1)
    upper = np.clip(np.cumsum(sorted_q, axis=1), 0, 1)
    lower = np.clip(upper - sorted_q, 0, 1)
    rank = np.argsort(order, axis=1)[np.arange(n), tokens]
    pits = np.stack([lower[np.arange(n), rank], q[np.arange(n), tokens], q.max(axis=1)], axis=1)
    density = norm.pdf(norm.ppf(lower)) - norm.pdf(norm.ppf(upper))
    logq = np.log(sorted_q)
    centred = logq - np.sum(sorted_q * logq, axis=1, keepdims=True)
    return pits, np.sum(centred * density, axis=1)


def _path(rng, seeds, length, *, instrument, per_seed=0.0, greedy=0.0, power=1.0):
    """One path of ``seeds`` samples of ``length`` tokens: PIT triples, sensitivities and the
    sample of each token, under the instrument's rows: ``p`` with logit noise of sd
    ``instrument`` per entry, plus one offset of sd ``per_seed`` per sample and candidate (the
    error one request shares). ``greedy``: share of draws replaced by the true top token;
    ``power``: draws from p**power."""
    n = seeds * length
    samples = np.repeat(np.arange(seeds), length)
    p = rng.dirichlet(np.full(IDS.size, 0.6), size=n) + 1e-12
    p /= p.sum(axis=1, keepdims=True)
    drawn = p**power / np.sum(p**power, axis=1, keepdims=True)
    tokens = (rng.random((n, 1)) < np.cumsum(drawn, axis=1)).argmax(axis=1)
    tokens = np.where(rng.random(n) < greedy, p.argmax(axis=1), tokens)
    shared = np.repeat(rng.normal(0, per_seed, (seeds, IDS.size)), length, axis=0)
    q = np.exp(np.log(p) + rng.normal(0, instrument, p.shape) + shared)
    q /= q.sum(axis=1, keepdims=True)
    pits, sens = _scored(q, tokens)
    return pits, sens, samples


def test_the_vectorized_scoring_here_is_the_one_runs_use():
    rng = np.random.default_rng(2)
    q = rng.dirichlet(np.full(IDS.size, 0.6), size=30)
    q[0, 3] = q[0, 5] = q[0].max() + 0.01  # a tie at the top, broken by id
    q /= q.sum(axis=1, keepdims=True)
    tokens = rng.integers(0, IDS.size, 30)
    pits, sens = _scored(q, tokens)
    for row, token, pit, k in zip(q, tokens, pits, sens, strict=True):
        assert pit == pytest.approx(_pit(IDS, row, int(token)), abs=1e-8)
        assert k == pytest.approx(_tempering(IDS, row, int(token))[0], abs=1e-8)


def _tests(rng, spec, base):
    out = {}
    u = {}
    for name, (pits, sens, samples) in (("spec", spec), ("base", base)):
        u[name] = randomized_pit(pits[:, 0], pits[:, 1], rng)
        out[name] = (pits, sens, samples)
    (ps, ks, cs), (pb, kb, cb) = out["spec"], out["base"]
    return [
        pit_vs_placebo((u["spec"], cs), (u["base"], cb), alpha=ALPHA),
        top_token_vs_placebo(
            (ps[:, 0] == 0, ps[:, 2], cs), (pb[:, 0] == 0, pb[:, 2], cb), alpha=ALPHA
        ),
        temperature_vs_placebo((u["spec"], ks, cs), (u["base"], kb, cb), alpha=ALPHA),
    ]


@pytest.mark.parametrize(("instrument", "per_seed"), [(0.4, 0.0), (0.2, 0.4)])
def test_the_placebo_comparison_keeps_its_level_through_an_instrument_that_is_off(
    instrument, per_seed
):
    """400 independent runs of 30 samples x 20 tokens a path, each path scored by its own
    imperfect re-scoring: logit noise per entry, or an error each sample shares (one request, one
    batch). Each test against the placebo rejects about alpha of the time (binomial(400, 0.01):
    P(>= 12) < 1e-3); the one-sample top-token test against the re-scored rows alone far more."""
    rng = np.random.default_rng(21)
    rejections = np.zeros(3, dtype=int)
    alone = 0
    for _ in range(400):
        spec = _path(rng, 30, 20, instrument=instrument, per_seed=per_seed)
        base = _path(rng, 30, 20, instrument=instrument, per_seed=per_seed)
        rejections += [t.rejects for t in _tests(rng, spec, base)]
        pits = spec[0]
        alone += top_token_test(pits[:, 0] == 0, pits[:, 2], alpha=ALPHA).rejects
    assert (rejections < 12).all(), rejections
    assert alone > 40, alone  # what judging the speculative samples against rows alone did


@pytest.mark.parametrize(
    ("fault", "test"), [({"greedy": 0.3}, 1), ({"power": 1.5}, 2), ({"power": 0.6}, 2)]
)
def test_a_faulty_sampler_separates_from_the_placebo(fault, test):
    """A greedy-ish verifier (30 % of draws replaced by the top token) or a temperature off
    (draws from p**1.5 or p**0.6), through the same imperfect instrument: found in at least 45
    of 50 runs of 30 samples x 20 tokens a path by the test aimed at it."""
    rng = np.random.default_rng(5)
    found = 0
    for _ in range(50):
        spec = _path(rng, 30, 20, instrument=0.2, per_seed=0.1, **fault)
        base = _path(rng, 30, 20, instrument=0.2, per_seed=0.1)
        result = _tests(rng, spec, base)[test]
        found += result.rejects
        if result.rejects and "power" in fault:
            assert (result.statistic > 0) is (fault["power"] > 1)  # colder, or hotter
    assert found >= 45, found


def test_too_little_variance_or_too_few_samples_is_no_test():
    peaked = (np.ones(20, bool), np.full(20, 0.999), np.repeat(np.arange(4), 5))
    result = top_token_vs_placebo(peaked, peaked, alpha=ALPHA)
    assert not result.rejects
    assert "not enough data" in result.detail
    flat = (np.full(5, 0.5), np.zeros(5), np.arange(5))
    assert "not enough data" in temperature_vs_placebo(flat, flat, alpha=ALPHA).detail
    one = (np.linspace(0, 1, 50), np.zeros(50))  # a single sample: no variance across samples
    assert "not enough data" in pit_vs_placebo(one, one, alpha=ALPHA).detail


def test_cluster_ratio_is_the_sandwich_over_samples():
    theta, var, m = cluster_ratio([1, 1, 0, 0, 1, 1], [1] * 6, [0, 0, 1, 1, 2, 2])
    assert (theta, m) == (pytest.approx(2 / 3), 3)
    sums = np.array([2, 0, 2]) - theta * 2
    assert var == pytest.approx(float(np.sum(sums**2)) / 36 * 3 / 2)
    assert cluster_ratio([1.0], [1.0], [0])[1] == float("inf")


SAMPLING = SamplingConfig(temp=0.5, top_k=6, top_p=1.0, min_p=0.0)


def test_fidelity_of_identical_rows_is_perfect_and_of_moved_rows_is_measured():
    rng = np.random.default_rng(3)
    rows = rng.normal(0, 2, (20, 30)).astype(np.float32)
    tokens = [int(np.argmax(r)) for r in rows]
    same = rescore_fidelity(rows, rows.copy(), tokens, SAMPLING)
    assert same == Fidelity(20, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0, 0)
    assert same.exact
    assert not Fidelity(0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0, 0).exact  # nothing measured
    moved = rows.copy()
    moved[:, :] += rng.normal(0, 0.3, moved.shape).astype(np.float32)
    swapped = rows.copy()
    swapped[0, tokens[0]] -= 10.0  # the top token of row 0 drops out of first place
    fid = rescore_fidelity(rows, moved, tokens, SAMPLING)
    assert fid.positions == 20
    assert 0 < fid.tv_mean <= fid.tv_max <= 1
    assert 0 < fid.kl_mean <= fid.kl_max
    assert 0 < fid.top_shift_mean <= fid.top_shift_max
    one = rescore_fidelity(rows, swapped, tokens, SAMPLING)
    assert one.top_changed == 1
    assert not fid.exact
    assert not one.exact
    assert one.rank_changed == 1
    assert Fidelity.from_dict(fid.to_dict()) == Fidelity.from_dict(
        {k: round(v, 6) if isinstance(v, float) else v for k, v in fid.__dict__.items()}
    )
    pooled = Fidelity.pooled([fid, one, same])
    assert pooled is not None
    assert pooled.positions == 60
    assert pooled.top_changed == fid.top_changed + 1
    assert pooled.tv_max == max(fid.tv_max, one.tv_max)
    assert Fidelity.pooled([]) is None
    assert "60 positions" in pooled.line


def test_fidelity_reads_top_k_rows_with_minus_infinity_elsewhere():
    rng = np.random.default_rng(4)
    full = rng.normal(0, 2, (5, 40)).astype(np.float32)
    top = np.full_like(full, -np.inf)
    for i, row in enumerate(full):
        keep = np.argsort(-row)[:8]
        top[i, keep] = row[keep]
    tokens = [int(np.argmax(r)) for r in full]
    fid = rescore_fidelity(top, full, tokens, SAMPLING)  # the chain's top 6 are in both
    assert fid.tv_max == pytest.approx(0.0, abs=1e-6)
    assert fid.top_changed == fid.rank_changed == 0
