"""Tests for equiv.verdicts.stats: the distribution tests, their power, and drift metrics."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from equiv.engines.chain import pit_position
from equiv.errors import ConfigError
from equiv.records import Drift
from equiv.verdicts.stats import (
    TestResult,
    acceptance_rate_test,
    benjamini_hochberg,
    chi2_power,
    chi2_two_sample,
    forced_decisions_test,
    holm,
    ks_two_sample,
    mann_whitney,
    min_detectable_w,
    pit_uniformity_test,
    randomized_pit,
    top_token_test,
)
from equiv.verdicts.temp0.drift import drift_metrics


def pit_values(n: int, greedy_share: float, seed: int) -> np.ndarray:
    """PIT values of ``n`` tokens, each from a fresh random distribution over 50 tokens; a
    ``greedy_share`` of them take the argmax instead of a sample (a greedy-biased sampler)."""
    rng = np.random.default_rng(seed)
    before = np.empty(n)
    p_tok = np.empty(n)
    for i in range(n):
        probs = rng.dirichlet(np.full(50, 0.3))
        if rng.random() < greedy_share:
            token = int(np.argmax(probs))
        else:
            token = int(rng.choice(50, p=probs))
        before[i], p_tok[i] = pit_position(probs, token)
    return randomized_pit(before, p_tok, rng)


def test_pit_does_not_reject_tokens_from_the_stated_distribution() -> None:
    u = pit_values(2000, greedy_share=0.0, seed=1)
    res = pit_uniformity_test(u, alpha=0.01)
    assert not res.rejects
    assert res.p_value > 0.01
    assert res.n == 2000
    assert res.df == 9


def test_pit_rejects_greedy_biased_tokens() -> None:
    u = pit_values(2000, greedy_share=0.3, seed=2)
    res = pit_uniformity_test(u, alpha=0.01)
    assert res.rejects
    assert np.mean(u) < 0.45  # pushed toward 0
    assert res.effect is not None
    assert res.effect > 0.1


def test_randomized_pit_is_uniform_and_stays_in_its_interval() -> None:
    rng = np.random.default_rng(3)
    before = np.array([0.0, 0.25, 0.9])
    p_tok = np.array([0.25, 0.5, 0.1])
    u = np.stack([randomized_pit(before, p_tok, rng) for _ in range(200)])
    assert (u >= before).all()
    assert (u <= before + p_tok).all()


def test_pit_power_and_detail() -> None:
    res = pit_uniformity_test(np.linspace(0.0, 1.0, 1000), alpha=0.05, bins=10, effect_w=0.1)
    assert res.power == pytest.approx(chi2_power(1000, 9, alpha=0.05, w=0.1))
    assert "minimum detectable w at power 0.95" in res.detail
    assert res.p_value > 0.99  # evenly spread values fit perfectly


def test_pit_rejects_values_outside_unit_interval() -> None:
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        pit_uniformity_test([0.5, 1.5], alpha=0.01)


def test_chi2_power_matches_cohen() -> None:
    # Cohen (1988) table 7.4.6 / G*Power: w = 0.3, df = 1, alpha = 0.05 needs n = 88 for 0.80.
    assert chi2_power(88, 1, alpha=0.05, w=0.3) == pytest.approx(0.80, abs=0.01)
    assert min_detectable_w(88, 1, alpha=0.05, power=0.8) == pytest.approx(0.3, abs=0.005)


def test_power_increases_with_n() -> None:
    powers = [chi2_power(n, 9, alpha=0.01, w=0.1) for n in (100, 500, 2000, 10000)]
    assert powers == sorted(powers)
    assert powers[0] < 0.2 < 0.99 < powers[-1]
    mdws = [min_detectable_w(n, 9, alpha=0.01) for n in (100, 500, 2000, 10000)]
    assert mdws == sorted(mdws, reverse=True)


def test_min_detectable_w_inverts_power() -> None:
    w = min_detectable_w(700, 4, alpha=0.01, power=0.95)
    assert chi2_power(700, 4, alpha=0.01, w=w) == pytest.approx(0.95, abs=1e-6)
    assert min_detectable_w(0, 4, alpha=0.01) == math.inf
    assert chi2_power(0, 4, alpha=0.01, w=0.5) == 0.01


def counts(rng: np.random.Generator, probs: np.ndarray, n: int) -> dict[int, int]:
    draws = rng.choice(probs.size, size=n, p=probs)
    ids, cs = np.unique(draws, return_counts=True)
    return {int(i): int(c) for i, c in zip(ids, cs, strict=True)}


BASE = np.array([0.4, 0.25, 0.15, 0.1, 0.05, 0.03, 0.01, 0.005, 0.004, 0.001])


def test_chi2_two_sample_does_not_reject_identical_distributions() -> None:
    rng = np.random.default_rng(4)
    res = chi2_two_sample(counts(rng, BASE, 3000), counts(rng, BASE, 3000), alpha=0.01)
    assert not res.rejects
    assert res.n == 6000
    assert res.power is not None
    assert res.power > 0.9


def test_chi2_two_sample_rejects_a_tv_shift() -> None:
    shifted = BASE.copy()
    shifted[0] -= 0.1
    shifted[1] += 0.1  # TV 0.1
    rng = np.random.default_rng(5)
    res = chi2_two_sample(counts(rng, BASE, 3000), counts(rng, shifted, 3000), alpha=0.01)
    assert res.rejects
    assert "empirical TV" in res.detail


def test_chi2_two_sample_pools_rare_categories() -> None:
    a = {0: 100, 1: 100, 2: 3, 3: 4}
    b = {0: 100, 1: 100, 4: 2, 5: 3}
    res = chi2_two_sample(a, b, alpha=0.01)
    # 2..5 have expected counts < 5 on their own: they pool into one bin, leaving 3 bins
    assert res.df == 2
    assert "4 of 6 categories pooled" in res.detail


def test_chi2_two_sample_pools_further_when_other_is_still_small() -> None:
    res = chi2_two_sample({0: 50, 1: 30, 2: 2}, {0: 50, 1: 30, 3: 1}, alpha=0.01)
    # {2, 3} hold 3 tokens, too few; the smallest regular category (1) joins them
    assert res.df == 1
    assert "3 of 4 categories pooled" in res.detail


def test_chi2_two_sample_with_too_little_data() -> None:
    res = chi2_two_sample({0: 3}, {0: 2, 1: 1}, alpha=0.01)
    assert res.p_value == 1.0
    assert res.power == 0.0
    assert "not enough data" in res.detail
    assert not res.rejects
    empty = chi2_two_sample({}, {0: 5}, alpha=0.01)
    assert "not enough data" in empty.detail


def test_ks_and_mann_whitney() -> None:
    rng = np.random.default_rng(6)
    a, b, c = rng.normal(size=400), rng.normal(size=400), rng.normal(0.5, 1.0, size=400)
    assert not ks_two_sample(a, b, alpha=0.01).rejects
    assert ks_two_sample(a, c, alpha=0.01).rejects
    assert not mann_whitney(a, b, alpha=0.01).rejects
    shifted = mann_whitney(a, c, alpha=0.01)
    assert shifted.rejects
    assert shifted.effect is not None
    assert shifted.effect < 0.45  # a tends to be smaller than c
    assert shifted.power is None


def test_ks_falls_back_to_the_asymptotic_p_where_the_exact_one_fails() -> None:
    # 48 lengths each, all equal but one: scipy's exact p rounds to just above 1 and warns
    # (a real run at 48 seeds hit this); the test answers instead of raising
    a = np.full(48, 48.0)
    b = a.copy()
    b[0] = 30.0
    res = ks_two_sample(a, b, alpha=0.01)
    assert res.effect == pytest.approx(1 / 48)
    assert res.p_value > 0.99
    assert not res.rejects
    assert "asymptotic p" in res.detail
    assert "asymptotic" not in ks_two_sample(a, a + 1.0, alpha=0.01).detail


def test_effect_sizes_on_separated_samples() -> None:
    ks = ks_two_sample([1, 2, 3], [10, 11], alpha=0.05)
    assert ks.effect == 1.0
    assert mann_whitney([10, 11, 12], [1, 2], alpha=0.05).effect == 1.0
    assert mann_whitney([1, 2, 3], [10, 11], alpha=0.05).effect == 0.0
    same = mann_whitney([4, 4, 4], [4, 4], alpha=0.05)
    assert same.p_value == 1.0
    assert same.effect == 0.5


def test_test_result_round_trips_through_json() -> None:
    res = pit_uniformity_test(np.linspace(0.0, 1.0, 50), alpha=0.05)
    back = TestResult.from_dict(json.loads(json.dumps(res.to_dict())))
    assert back == res
    assert "rejects" not in res.to_dict()
    ks = ks_two_sample([1.0, 2.0], [3.0], alpha=0.05)  # df and power are None
    assert TestResult.from_dict(json.loads(json.dumps(ks.to_dict()))) == ks
    with pytest.raises(ValueError, match=r"test\.statistic: missing"):
        TestResult.from_dict({"name": "x"})


def test_rejects_is_p_below_alpha() -> None:
    base = {"name": "t", "statistic": 1.0, "alpha": 0.05, "n": 10, "df": 1}
    extra = {"power": None, "effect": None, "detail": ""}
    assert TestResult(**base, p_value=0.049, **extra).rejects  # type: ignore[arg-type]
    assert not TestResult(**base, p_value=0.05, **extra).rejects  # type: ignore[arg-type]


def test_holm_known_values() -> None:
    got = holm([0.01, 0.04, 0.03, 0.005])
    assert got == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])
    assert holm([]) == []


def test_benjamini_hochberg_known_values() -> None:
    got = benjamini_hochberg([0.01, 0.04, 0.03, 0.005])
    assert got == pytest.approx([0.02, 0.04, 0.04, 0.02])
    # R: p.adjust(c(0.01, 0.02, 0.03, 0.04, 0.05), "BH") gives 0.05 for all
    assert benjamini_hochberg([0.01, 0.02, 0.03, 0.04, 0.05]) == pytest.approx([0.05] * 5)
    assert benjamini_hochberg([]) == []


def test_adjusters_reject_invalid_p_values() -> None:
    with pytest.raises(ValueError, match="p-values"):
        holm([0.5, 1.2])


def test_drift_metrics_of_identical_rows() -> None:
    rng = np.random.default_rng(7)
    x = rng.normal(size=(20, 100))
    m = drift_metrics(x, x.copy())
    assert m.kl_mean == 0.0
    assert m.kl_max == 0.0
    assert m.max_abs_logit_delta == 0.0
    assert m.top1_agreement == 1.0
    assert m.rows == 20


def test_drift_metrics_values() -> None:
    a = np.log(np.array([[0.5, 0.5], [0.9, 0.1]]))
    b = np.log(np.array([[0.9, 0.1], [0.9, 0.1]])) + 3.0  # a shift leaves softmax unchanged
    m = drift_metrics(a, b)
    kl0 = 0.5 * math.log(0.5 / 0.9) + 0.5 * math.log(0.5 / 0.1)
    assert m.kl_max == pytest.approx(kl0)
    assert m.kl_mean == pytest.approx(kl0 / 2)
    assert m.kl_p99 == pytest.approx(kl0 * 0.99)
    assert m.top1_agreement == 1.0  # row 0 ties at 0 in a: argmax 0 agrees with b
    assert m.max_abs_logit_delta == pytest.approx(3.0 + math.log(0.9 / 0.5))
    assert Drift.from_dict(m.to_dict()) == m


def test_drift_metrics_forbidden_token_gives_infinite_kl() -> None:
    m = drift_metrics(np.array([[0.0, 1.0]]), np.array([[0.0, -np.inf]]))
    assert m.kl_max == math.inf
    assert m.top1_agreement == 0.0


def test_bad_alpha_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"alpha=1\.5"):
        pit_uniformity_test([0.5], alpha=1.5)


def test_forced_decisions_count_only_the_decisions_the_rule_fixes() -> None:
    a = [1.0] * 998 + [0.4, 0.0]
    accepted = [1] * 998 + [0, 0]
    clean = forced_decisions_test(a, accepted, [0.2] * 1000, alpha=0.01)
    assert (clean.n, clean.statistic, clean.p_value) == (999, 0.0, 1.0)
    accepted[0] = 0  # a token with p >= q rejected: at most a rounding's chance under H0
    one = forced_decisions_test(a, accepted, [0.2] * 1000, alpha=0.01)
    assert one.statistic == 1.0
    assert one.p_value == pytest.approx(1 - (1 - 1e-6) ** 999, rel=1e-6)
    assert "1 draft tokens with p >= q rejected" in one.detail
    outside = forced_decisions_test([0.4], [1], [0.0], alpha=0.01)  # q(x) = 0: impossible
    assert outside.statistic == 1.0
    assert outside.p_value < 1e-5
    assert forced_decisions_test([0.5], [1], [0.3], alpha=0.01).detail.startswith("not enough")


def test_acceptance_rate_is_an_exact_poisson_binomial_test() -> None:
    all_in = acceptance_rate_test([0.5] * 10, [1] * 10, alpha=0.01)
    assert all_in.p_value == pytest.approx(2 * 0.5**10)
    assert acceptance_rate_test([0.5] * 10, [1] * 5 + [0] * 5, alpha=0.01).p_value == 1.0
    # forced decisions (a = 1 or 0) are the other test's; they do not count here
    assert acceptance_rate_test([1.0, 0.5, 0.0], [1, 1, 0], alpha=0.01).n == 1
    with pytest.raises(ValueError, match="differ in shape"):
        acceptance_rate_test([0.5, 0.5], [1], alpha=0.01)


def test_top_token_p_value_is_the_exact_poisson_binomial_one() -> None:
    p = [0.5] * 10
    result = top_token_test([True] * 10, p, alpha=0.01)
    assert result.p_value == pytest.approx(2 * 0.5**10)  # the normal approximation gives 0.0016
    assert top_token_test([True] * 5 + [False] * 5, p, alpha=0.01).p_value == 1.0


def test_pit_uses_fewer_bins_when_values_are_few() -> None:
    rng = np.random.default_rng(4)
    few = pit_uniformity_test(rng.random(30), alpha=0.01)
    assert few.df == 5  # 6 bins keep 5 expected in each
    assert "not 10: 30 values keep 5 expected per bin" in few.detail
    assert pit_uniformity_test(rng.random(9), alpha=0.01).detail.startswith("not enough")
    assert pit_uniformity_test(rng.random(500), alpha=0.01).df == 9


def _kl_resolution(a: np.ndarray, b: np.ndarray) -> float:
    """How far two float32 computations of one row's KL may differ when only the order of their
    float32 sums differs (the CPU's SIMD width and BLAS kernel decide it): both take the same
    exponentials and float64 normalisers, and differ in the cross term ``E_pa[d]``, a float32
    dot product over the row with ``d = a - b`` (the windowed path) or ``za - zb`` (the full
    one), held to a few dozen units of roundoff in the sum of its terms' sizes. KL is a small
    difference of O(1) terms, so this, not a relative error, bounds how well two agree."""
    u = float(np.finfo(np.float32).eps)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    za, zb = a64 - a64.max(), b64 - b64.max()
    pa = np.exp(za) / np.exp(za).sum()
    with np.errstate(invalid="ignore"):  # -inf - -inf where both forbid a token
        terms = np.where(pa > 0, pa * (np.abs(a64 - b64) + np.abs(za - zb)), 0.0)
    return 32 * u * float(np.nansum(terms))


def test_drift_over_the_entries_that_carry_mass_equals_the_full_sum() -> None:
    """The windowed KL (entries within 60 nats of a maximum) against the exact full-row sum, on
    rows as peaked and as flat as real ones, and rows with forbidden (-inf) tokens; equal to
    4 significant digits or to the float32 resolution of the row's KL, whichever is larger."""
    from equiv.verdicts.temp0.drift import _row_kl

    rng = np.random.default_rng(7)
    for scale in (0.5, 3.0, 12.0):
        a = (rng.standard_normal((6, 4096)) * scale).astype(np.float32)
        b = a + (rng.standard_normal(a.shape) * 0.05).astype(np.float32)
        a[1, :100] = -np.inf
        b[2, :50] = -np.inf
        m = drift_metrics(a, b, rows=True)
        exact = [_row_kl(ra, rb) for ra, rb in zip(a, b, strict=True)]
        resolution = [_kl_resolution(ra, rb) for ra, rb in zip(a, b, strict=True)]
        for got, want, tol in zip(m.kl_rows, exact, resolution, strict=True):
            assert got == pytest.approx(float(f"{want:.4g}"), rel=1e-3, abs=tol)
        worst = int(np.argmax(exact))
        assert m.kl_max == pytest.approx(exact[worst], rel=1e-6, abs=resolution[worst])
        assert m.max_abs_logit_delta == np.inf  # a token one row forbids and the other allows
        finite = drift_metrics(a[3:], b[3:])
        assert finite.max_abs_logit_delta == pytest.approx(float(np.abs(a[3:] - b[3:]).max()))
        assert finite.top1_agreement == np.mean(a[3:].argmax(1) == b[3:].argmax(1))


def test_drift_metrics_refuses_nan_and_positive_infinity() -> None:
    for bad in (np.nan, np.inf):
        a = np.array([[0.0, 1.0, bad]], dtype=np.float32)
        with pytest.raises(ValueError, match="NaN"):
            drift_metrics(a, np.zeros((1, 3), dtype=np.float32))
