"""The placebo's draws as a control variate for the speculative samples' own bound
(`equiv.verdicts.sampling.control_variate.controlled`)."""

import numpy as np
import pytest

from equiv.verdicts.sampling.control_variate import controlled


def _residuals(per_sample, tokens=3):
    """Each sample's total spread over ``tokens`` tokens of denominator 1."""
    num = np.repeat(np.asarray(per_sample, dtype=np.float64) / tokens, tokens)
    ids = np.repeat(np.arange(len(per_sample)), tokens)
    return num, np.ones_like(num), ids


def test_the_estimate_is_the_regression_of_the_speculative_errors_on_the_placebos():
    rng = np.random.default_rng(3)
    shared = rng.normal(0.0, 1.0, 200)
    spec = 0.3 + shared + rng.normal(0.0, 0.6, 200)
    base = shared + rng.normal(0.0, 0.6, 200)
    theta, var, df = controlled(_residuals(spec), _residuals(base))
    # by hand: per-sample errors of the two ratio estimates (3 tokens a sample), their
    # regression, and the residuals' variance with two parameters spent
    e_s = (spec - spec.mean()) / 600
    e_b = (base - base.mean()) / 600
    beta = (e_s @ e_b) / (e_b @ e_b)
    residual = e_s - beta * e_b
    assert theta == pytest.approx(spec.mean() / 3 - beta * base.mean() / 3)
    assert var == pytest.approx(residual @ residual * 200 / 198)
    assert df == 198
    plain = e_s @ e_s * 200 / 199
    assert var < 0.6 * plain  # correlated at about 0.8: the variance falls by 1 - ρ²


def test_a_placebo_that_does_not_correlate_leaves_the_estimate_and_its_variance():
    rng = np.random.default_rng(4)
    spec, base = rng.normal(0.1, 1.0, 400), rng.normal(0.0, 1.0, 400)
    theta, var, df = controlled(_residuals(spec), _residuals(base))
    plain = np.var(spec, ddof=1) / 400 / 9
    assert abs(theta - spec.mean() / 3) < 0.2 * np.sqrt(plain)
    assert var == pytest.approx(plain, rel=0.02)
    assert df == 398


def test_the_floor_is_kept_before_the_reduction_and_few_samples_give_no_interval():
    rng = np.random.default_rng(5)
    shared = rng.normal(0.0, 1.0, 50)
    spec, base = _residuals(shared + 0.1 * rng.normal(size=50)), _residuals(shared)
    _, unfloored, _ = controlled(spec, base)
    _, floored, _ = controlled(spec, base, floor=1.0)
    assert floored > 100 * unfloored
    assert floored < 1.0  # the reduction still applies to the floor
    assert controlled(_residuals([1.0, 2.0]), _residuals([1.0, 2.0]))[1] == float("inf")
