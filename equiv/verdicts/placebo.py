"""The placebo comparison: the speculative samples against the baseline's, both scored by one
instrument.

A one-sample test of the speculative samples against re-scored rows measures the sampler *and*
the instrument: re-scored rows are not exactly the rows a server sampled from, and at a low
temperature that error is as large as the effects that matter. The *placebo* is the baseline's own
samples through the very same pipeline (the same rows, re-scored the same way). Each test here
compares the speculative path's per-token residuals with the placebo's: an error the instrument
makes on both cancels, and what remains is what separates the speculative sampler from plain
decoding. Under H0 (the speculative path samples as the baseline does, up to the instrument's
common error) each statistic is N(0, 1) by the martingale central limit theorem: every residual
has mean zero given the tokens before it, whatever the rows.

- `pit_vs_placebo`: the randomized PITs' histograms, chi-square test of homogeneity (shape);
- `top_token_vs_placebo`: the excess rate of top tokens, emitted minus implied (a greedy-ish bias);
- `temperature_vs_placebo`: the sensitivity-weighted normal scores of the PIT, an estimate of
  ``λ - 1`` for the tempered family ``p**λ`` (`equiv.verdicts.stats.temperature_test`).
"""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import numpy.typing as npt
from scipy import stats as sps

from equiv.verdicts.stats import TestResult, _check_alpha, _not_enough, chi2_two_sample

__all__ = ["pit_vs_placebo", "temperature_vs_placebo", "top_token_vs_placebo"]

FloatArray = npt.NDArray[np.float64]


def _two_sided(z: float) -> float:
    return float(2.0 * sps.norm.sf(abs(z)))


def _power(shift: float, alpha: float) -> float:
    """Power of a two-sided z-test at ``alpha`` when the statistic's mean is ``shift``."""
    z_crit = float(sps.norm.isf(alpha / 2))
    return float(sps.norm.sf(z_crit - shift) + sps.norm.cdf(-z_crit - shift))


def pit_vs_placebo(
    u_speculative: npt.ArrayLike,
    u_placebo: npt.ArrayLike,
    *,
    alpha: float,
    bins: int = 10,
    effect_w: float = 0.1,
) -> TestResult:
    """Do the two paths' randomized PITs (under the same instrument) share one distribution?

    Both are counted in ``bins`` equal-width bins and compared with `chi2_two_sample` (a 2 x
    bins table); ``power`` is that test's, for Cohen's ``w = effect_w``.
    """
    xs = np.asarray(u_speculative, dtype=np.float64).reshape(-1)
    xb = np.asarray(u_placebo, dtype=np.float64).reshape(-1)

    def binned(u: FloatArray) -> Counter[int]:
        return Counter(np.minimum((u * bins).astype(np.int64), bins - 1).tolist())

    result = chi2_two_sample(binned(xs), binned(xb), alpha=alpha, effect_w=effect_w)
    return TestResult(
        "pit_vs_placebo",
        result.statistic,
        result.p_value,
        alpha,
        result.n,
        result.df,
        result.power,
        result.effect,
        f"PIT of {xs.size} speculative and {xb.size} placebo tokens in {bins} bins; "
        + result.detail,
    )


def top_token_vs_placebo(
    is_top: npt.ArrayLike,
    p_top: npt.ArrayLike,
    placebo_is_top: npt.ArrayLike,
    placebo_p_top: npt.ArrayLike,
    *,
    alpha: float,
    shift: float = 0.05,
) -> TestResult:
    """The speculative path's excess rate of top tokens against the placebo's.

    Each path's excess ``e = (X - Σ p) / n`` (top tokens emitted minus implied by the rows it is
    scored under, per token) has variance ``Σ p (1 - p) / n²`` given the rows; the statistic is
    ``z = (e_spec - e_placebo) / sqrt(V_spec + V_placebo)``. ``effect`` is ``e_spec - e_placebo``;
    ``power`` is for every speculative ``p_top`` raised by ``shift``.
    """
    _check_alpha(alpha)
    parts = []
    for top, p in ((is_top, p_top), (placebo_is_top, placebo_p_top)):
        t = np.asarray(top, dtype=np.float64).reshape(-1)
        q = np.asarray(p, dtype=np.float64).reshape(-1)
        if t.shape != q.shape:
            raise ValueError(f"is_top {t.shape} and p_top {q.shape} differ in shape")
        parts.append((t, q))
    (ts, ps), (tb, pb) = parts
    n = int(ps.size + pb.size)
    name = "top_token_vs_placebo"
    vs, vb = float(np.sum(ps * (1 - ps))), float(np.sum(pb * (1 - pb)))
    if vs < 1.0 or vb < 1.0:
        why = f"variance {min(vs, vb):.2f} < 1 on a path: the top token is near-certain"
        return _not_enough(name, alpha, n, why)
    es = (float(ts.sum()) - float(ps.sum())) / ps.size
    eb = (float(tb.sum()) - float(pb.sum())) / pb.size
    se = math.sqrt(vs / ps.size**2 + vb / pb.size**2)
    z = (es - eb) / se
    lift = float(np.minimum(shift, 1.0 - ps).sum()) / ps.size
    power = _power(lift / se, alpha)
    detail = (
        f"top token in excess of the rows: speculative {es:+.4f} per token ({ts.sum():.0f} of "
        f"{ps.size}, rows imply {ps.sum():.1f}), placebo {eb:+.4f} ({tb.sum():.0f} of {pb.size}, "
        f"rows imply {pb.sum():.1f}); difference {es - eb:+.4f} +- {se:.4f}; power {power:.3f} "
        f"for a shift of {shift:g} in the top token's probability"
    )
    return TestResult(name, z, _two_sided(z), alpha, n, None, power, es - eb, detail)


def _lambda_estimate(u: FloatArray, k: FloatArray) -> tuple[float, float, int]:
    """``(λ - 1 estimate, its variance, tokens that weigh)`` of one path: ``-Σ k Z / Σ k²`` with
    variance ``1 / Σ k²`` (each Z is N(0, 1) given the past under H0)."""
    weight = -np.minimum(k, 0.0)
    info = float(np.dot(weight, weight))
    if info <= 0.0:
        return 0.0, math.inf, 0
    z = sps.norm.ppf(np.clip(u, 1e-16, 1.0 - 1e-16))
    return -float(np.dot(weight, z)) / info, 1.0 / info, int(np.count_nonzero(weight))


def temperature_vs_placebo(
    u: npt.ArrayLike,
    sensitivity: npt.ArrayLike,
    placebo_u: npt.ArrayLike,
    placebo_sensitivity: npt.ArrayLike,
    *,
    alpha: float,
    rel_error: float = 0.1,
) -> TestResult:
    """Is the speculative path colder or hotter than the placebo, under the same rows?

    Each path's ``λ - 1`` is estimated as ``-Σ k Z / Σ k²`` (variance ``1 / Σ k²``; ``k`` the
    sensitivities of `equiv.verdicts.sampling_evidence.chain_sensitivity`, ``Z`` the normal
    scores of the randomized PITs); the statistic is their difference over its standard error.
    Positive: the speculative samples are colder than the placebo's. ``power`` is against a
    speculative temperature off by ``rel_error``. Below ``Σ k² = 1`` on a path there is no test.
    """
    _check_alpha(alpha)
    arrays = [
        np.asarray(a, dtype=np.float64).reshape(-1)
        for a in (u, sensitivity, placebo_u, placebo_sensitivity)
    ]
    for x, k in (arrays[:2], arrays[2:]):
        if x.shape != k.shape:
            raise ValueError(f"u {x.shape} and sensitivity {k.shape} differ in shape")
        if x.size and (np.isnan(x).any() or x.min() < 0.0 or x.max() > 1.0):
            raise ValueError("PIT values must lie in [0, 1]; build them with randomized_pit")
    ls, vs, ns = _lambda_estimate(arrays[0], arrays[1])
    lb, vb, nb = _lambda_estimate(arrays[2], arrays[3])
    name = "temperature_vs_placebo"
    if vs > 1.0 or vb > 1.0:
        why = f"sensitivity Σk² < 1 on a path ({ns} and {nb} tokens weigh): near-certain tokens"
        return _not_enough(name, alpha, ns + nb, why)
    se = math.sqrt(vs + vb)
    z = (ls - lb) / se
    power = _power(rel_error / se, alpha)
    detail = (
        f"λ - 1 under the same rows: speculative {ls:+.3f} ({ns} tokens weigh), placebo "
        f"{lb:+.3f} ({nb}); the speculative samples look {'colder' if z > 0 else 'hotter'} by "
        f"{ls - lb:+.3f} +- {se:.3f}; power {power:.3f} for a temperature off by {rel_error:.0%}"
    )
    return TestResult(name, z, _two_sided(z), alpha, ns + nb, None, power, ls - lb, detail)
