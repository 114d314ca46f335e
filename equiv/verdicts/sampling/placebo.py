"""The placebo comparison: the speculative samples against the baseline's, both scored by one
instrument.

A one-sample test of the speculative samples against re-scored rows measures the sampler *and*
the instrument: re-scored rows are not exactly the rows a server sampled from (another batch,
another cache state), and at a low temperature that error is as large as the effects that matter.
The *placebo* is the baseline's own samples through the very same pipeline (the same rows,
re-scored the same way). Each test here compares a per-token residual of the speculative samples
with the placebo's, so that an error the instrument makes on both shifts both alike and cancels.

The instrument's error is not independent from token to token: one request, one batch, one
cache state serve a whole sample, so residuals cluster by sample (seed). Every estimate is
therefore a ratio of per-sample sums with a cluster-robust (sandwich) variance over the samples,
``Σ_c (R_c - θ n_c)² / (Σ n)² · m / (m - 1)`` for m samples, and the two paths (independent
samples) add their variances. Under H0 (the speculative path samples as plain decoding does, up
to the instrument's common error) each statistic is approximately N(0, 1); p-values use
Student's t with ``min(m) - 1`` degrees of freedom (a Wald chi-square for the PIT histogram).

- `pit_vs_placebo`: the randomized PITs' histograms (shape);
- `top_token_vs_placebo`: the excess rate of top tokens, emitted minus implied (greedy-ish bias);
- `temperature_vs_placebo`: ``λ - 1`` of the tempered family ``p**λ`` from the sensitivity-weighted
  normal scores of the PIT (`equiv.verdicts.stats.temperature_test`).

Each takes per-token arrays and ``samples``, the index of the sample each token belongs to.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import numpy.typing as npt
from scipy import stats as sps

from equiv.verdicts.stats import TestResult, chi2_power
from equiv.verdicts.stats.result import check_alpha, not_enough

__all__ = [
    "PathTokens",
    "cluster_ratio",
    "information_floor",
    "normal_score_residuals",
    "pit_vs_placebo",
    "quasi_tempering",
    "temperature_vs_placebo",
    "tempering",
    "tempering_information",
    "tempering_means",
    "tempering_residuals",
    "top_excess",
    "top_token_vs_placebo",
]

FloatArray = npt.NDArray[np.float64]
PathTokens = tuple[npt.ArrayLike, npt.ArrayLike]  # (per-token values, sample index per token)


def cluster_ratio(
    numerator: npt.ArrayLike, denominator: npt.ArrayLike, samples: npt.ArrayLike
) -> tuple[float, float, int]:
    """``(θ, var θ, m)`` of ``θ = Σ num / Σ den`` with the samples as clusters: the sandwich
    variance ``Σ_c (N_c - θ D_c)² / (Σ D)² · m / (m - 1)`` (inf with fewer than 2 samples)."""
    num = np.asarray(numerator, dtype=np.float64).reshape(-1)
    den = np.asarray(denominator, dtype=np.float64).reshape(-1)
    ids = np.asarray(samples).reshape(-1)
    if not num.shape == den.shape == ids.shape:
        raise ValueError(f"shapes differ: {num.shape}, {den.shape}, {ids.shape}")
    _, index = np.unique(ids, return_inverse=True)
    m = int(index.max()) + 1 if index.size else 0
    big_n, big_d = np.bincount(index, num, m), np.bincount(index, den, m)
    total = float(big_d.sum())
    if m < 2 or total <= 0:
        return 0.0, math.inf, m
    theta = float(big_n.sum()) / total
    var = float(np.sum((big_n - theta * big_d) ** 2)) / total**2 * m / (m - 1)
    return theta, var, m


def top_excess(
    is_top: npt.ArrayLike, p_top: npt.ArrayLike, samples: npt.ArrayLike
) -> tuple[float, float, int]:
    """``(e, var e, m)``: the top token emitted in excess of what the rows imply, per token
    (``Σ (is_top - p_top) / n``), with the samples as clusters (`cluster_ratio`)."""
    t = np.asarray(is_top, dtype=np.float64).reshape(-1)
    q = np.asarray(p_top, dtype=np.float64).reshape(-1)
    return cluster_ratio(t - q, np.ones_like(q), samples)


def tempering(
    u: npt.ArrayLike, k: npt.ArrayLike, samples: npt.ArrayLike
) -> tuple[float, float, int, float]:
    """``(λ - 1, var, m, Σk²)`` of the tempered family ``p ** λ`` from randomized PITs ``u`` and
    sensitivities ``k`` (`equiv.verdicts.sampling.token_evidence.chain_sensitivity`):
    ``λ - 1 = Σ k Z / Σ k²`` with ``Z`` the PIT's normal scores and ``k <= 0`` (colder:
    positive, as `equiv.verdicts.stats.temperature_test` reads it), samples as clusters."""
    h, info = normal_score_residuals(u, k)
    return (*cluster_ratio(h, info, samples), float(info.sum()))


def normal_score_residuals(u: npt.ArrayLike, k: npt.ArrayLike) -> tuple[FloatArray, FloatArray]:
    """Each token's ``k Z`` and ``k²`` (`tempering`, whose ``λ - 1`` is their sums' ratio)."""
    x = np.asarray(u, dtype=np.float64).reshape(-1)
    w = np.minimum(np.asarray(k, dtype=np.float64).reshape(-1), 0.0)
    if x.shape != w.shape:
        raise ValueError(f"u {x.shape} and sensitivity {w.shape} differ in shape")
    if x.size and (np.isnan(x).any() or x.min() < 0.0 or x.max() > 1.0):
        raise ValueError("PIT values must lie in [0, 1]; build them with randomized_pit")
    z = sps.norm.ppf(np.clip(x, 1e-16, 1.0 - 1e-16))
    return w * z, w * w


def _weights(
    k: npt.ArrayLike, p_top: npt.ArrayLike, t: npt.ArrayLike
) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray]:
    """Each position's weights ``(a, b)`` of `quasi_tempering`'s two residuals, its information
    ``J`` about λ and ``p_top``, from the row alone (no token needed)."""
    w = np.minimum(np.asarray(k, dtype=np.float64).reshape(-1), 0.0)
    p = np.clip(np.asarray(p_top, dtype=np.float64).reshape(-1), 0.0, 1.0)
    d = np.maximum(np.asarray(t, dtype=np.float64).reshape(-1), 0.0)
    if not w.shape == p.shape == d.shape:
        raise ValueError(f"shapes differ: k {w.shape}, p_top {p.shape}, t {d.shape}")
    v_top = p * (1.0 - p)
    cov = -sps.norm.pdf(sps.norm.ppf(np.clip(p, 1e-16, 1.0 - 1e-16)))
    det = v_top - cov * cov
    both = det > 1e-9
    safe = np.where(both, det, 1.0)
    a = np.where(both, (d - cov * w) / safe, 0.0)
    b = np.where(both, (v_top * w - cov * d) / safe, w)
    return a, b, a * d + b * w, p


def tempering_information(k: npt.ArrayLike, p_top: npt.ArrayLike, t: npt.ArrayLike) -> FloatArray:
    """Each position's information ``J`` about λ in `quasi_tempering` (what the position adds
    to ``Σ J``, the inverse of the estimate's variance under the rows): a function of the row
    the token was drawn from, not of the token. Near 0 where the top token is near certain."""
    return _weights(k, p_top, t)[2]


def quasi_tempering(
    u: npt.ArrayLike,
    k: npt.ArrayLike,
    p_top: npt.ArrayLike,
    t: npt.ArrayLike,
    samples: npt.ArrayLike,
) -> tuple[float, float, int]:
    """``(λ - 1, var, m)`` of the tempered family ``p ** λ`` from two residuals of each token
    with mean 0 under the rows: the top token's indicator ``1[u < p_top] - p_top`` (its mean
    moves by ``t = p_top (log p_top - E log p)`` per unit of λ) and the PIT's normal score
    ``Z`` (moves by the sensitivity ``k``). Their covariance at a position is known from the row
    alone (``Var = p_top (1 - p_top)``, ``1`` and ``Cov = -φ(Φ⁻¹(p_top))``: the top token holds
    the PIT's first ``p_top``), so each position combines them with the weights ``Σ⁻¹ (t, k)``
    (the optimal linear estimating function, Godambe's), and ``λ - 1 = Σ h / Σ J`` with
    ``J = (t, k) Σ⁻¹ (t, k)`` (`tempering_information`), samples as clusters. Where the top
    token is (near) certain only the normal score is left.

    The variance is the larger of the sandwich and ``1 / Σ J``, the estimate's variance under
    the rows themselves: at a low temperature most of the information sits in rare tokens
    off the top, and a run that happens to draw few of them has a sandwich far too small
    (its interval then misses the truth several times as often as its level allows,
    benchmarks/bound_coverage.py)."""
    h, info = tempering_residuals(u, k, p_top, t)
    theta, var, m = cluster_ratio(h, info, samples)
    return theta, max(var, information_floor(info)), m


def tempering_residuals(
    u: npt.ArrayLike, k: npt.ArrayLike, p_top: npt.ArrayLike, t: npt.ArrayLike
) -> tuple[FloatArray, FloatArray]:
    """Each token's combined residual ``h`` and information ``J`` (`quasi_tempering`, whose
    ``λ - 1`` is ``Σ h / Σ J``)."""
    x = np.asarray(u, dtype=np.float64).reshape(-1)
    a, b, info, p = _weights(k, p_top, t)
    if x.shape != info.shape:
        raise ValueError(f"shapes differ: u {x.shape}, rows {info.shape}")
    z = sps.norm.ppf(np.clip(x, 1e-16, 1.0 - 1e-16))
    top = (x < p).astype(np.float64)
    return a * (top - p) + b * z, info


def tempering_means(
    k: npt.ArrayLike, p_top: npt.ArrayLike, t: npt.ArrayLike, moves: npt.ArrayLike
) -> tuple[FloatArray, FloatArray]:
    """Each token's mean of `tempering_residuals`' ``h`` under the tempered family at the two
    margins, from ``moves`` (n, 4: per margin the means of the top token's indicator less
    ``p_top`` and of the normal score, `equiv.verdicts.sampling.pit_tests.margin_moves`)."""
    a, b, _, _ = _weights(k, p_top, t)
    m = np.asarray(moves, dtype=np.float64).reshape(-1, 4)
    return a * m[:, 0] + b * m[:, 1], a * m[:, 2] + b * m[:, 3]


def information_floor(info: npt.ArrayLike) -> float:
    """``1 / Σ J``: the variance of `quasi_tempering`'s estimate under the rows themselves."""
    total = float(np.sum(info))
    return 1.0 / total if total > 0 else math.inf


def _difference(
    name: str,
    estimates: tuple[float, float],
    var: float,
    df: int,
    *,
    alpha: float,
    n: int,
    shift: float,
    describe: Callable[[float, float], str],
) -> TestResult:
    """The speculative estimate minus the placebo's, over its standard error ``sqrt(var)``: a
    two-sided t-test with ``df`` degrees of freedom, and its power against a true difference
    of ``shift``; ``describe(se, power)`` words the detail."""
    diff = estimates[0] - estimates[1]
    se = math.sqrt(var)
    t = diff / se if se > 0 else 0.0
    crit = float(sps.t.isf(alpha / 2, df))
    lam = shift / se if se > 0 else 0.0
    power = float(sps.nct.sf(crit, df, lam) + sps.nct.cdf(-crit, df, lam))
    p_value = float(2 * sps.t.sf(abs(t), df))
    return TestResult(name, t, p_value, alpha, n, None, power, diff, describe(se, power))


def top_token_vs_placebo(
    speculative: tuple[npt.ArrayLike, npt.ArrayLike, npt.ArrayLike],
    placebo: tuple[npt.ArrayLike, npt.ArrayLike, npt.ArrayLike],
    *,
    alpha: float,
    shift: float = 0.05,
) -> TestResult:
    """The speculative path's excess rate of top tokens against the placebo's.

    Each path gives ``(is_top, p_top, samples)`` per token; its excess ``e = Σ (is_top - p_top) /
    n`` (top tokens emitted minus implied by the rows it is scored under, per token), with the
    samples as clusters. The statistic is ``(e_spec - e_placebo) / se``; ``effect`` their
    difference; ``power`` is for every speculative ``p_top`` raised by ``shift`` (capped at 1).
    """
    check_alpha(alpha)
    name = "top_token_vs_placebo"
    parts = []
    for top, p, ids in (speculative, placebo):
        t = np.asarray(top, dtype=np.float64).reshape(-1)
        q = np.asarray(p, dtype=np.float64).reshape(-1)
        if t.shape != q.shape:
            raise ValueError(f"is_top {t.shape} and p_top {q.shape} differ in shape")
        parts.append((t, q, top_excess(t, q, ids)))
    (ts, ps, (es, vs, ms)), (tb, pb, (eb, vb, mb)) = parts
    n = int(ps.size + pb.size)
    binomial = min(float(np.sum(ps * (1 - ps))), float(np.sum(pb * (1 - pb))))
    if binomial < 1.0 or min(ms, mb) < 2:
        why = f"top-token variance {binomial:.2f} < 1 or fewer than 2 samples on a path"
        return not_enough(name, alpha, n, why)
    lift = float(np.minimum(shift, 1.0 - ps).sum()) / ps.size

    def describe(se: float, power: float) -> str:
        return (
            f"top token in excess of the rows: speculative {es:+.4f} per token ({ts.sum():.0f} "
            f"of {ps.size}, rows imply {ps.sum():.1f}), placebo {eb:+.4f} ({tb.sum():.0f} of "
            f"{pb.size}, rows imply {pb.sum():.1f}); difference {es - eb:+.4f} +- {se:.4f} over "
            f"{ms} and {mb} samples; power {power:.3f} for a shift of {shift:g} in the top "
            "token's probability"
        )

    df = min(ms, mb) - 1
    return _difference(name, (es, eb), vs + vb, df, alpha=alpha, n=n, shift=lift, describe=describe)


def temperature_vs_placebo(
    speculative: tuple[npt.ArrayLike, npt.ArrayLike, npt.ArrayLike],
    placebo: tuple[npt.ArrayLike, npt.ArrayLike, npt.ArrayLike],
    *,
    alpha: float,
    rel_error: float = 0.1,
) -> TestResult:
    """Is the speculative path colder or hotter than the placebo, under the same rows?

    Each path gives ``(u, k, samples)`` per token (randomized PIT, sensitivity of
    `equiv.verdicts.sampling.token_evidence.chain_sensitivity`); its ``λ - 1 = Σ k Z / Σ k²`` (``Z``
    the PIT's normal scores), with the samples as clusters. Positive statistic: the speculative
    samples are colder than the placebo's. ``power`` is against a speculative temperature off by
    ``rel_error``. Below ``Σ k² = 1`` on a path there is no test.
    """
    check_alpha(alpha)
    name = "temperature_vs_placebo"
    estimates = []
    for u, k, ids in (speculative, placebo):
        estimates.append(tempering(u, k, ids))
    (ls, vs, ms, info_s), (lb, vb, mb, info_b) = estimates
    n = int(np.asarray(speculative[0]).size + np.asarray(placebo[0]).size)
    if min(info_s, info_b) < 1.0 or min(ms, mb) < 2:
        why = f"sensitivity Σk² {min(info_s, info_b):.2f} < 1 or fewer than 2 samples on a path"
        return not_enough(name, alpha, n, why)

    def describe(se: float, power: float) -> str:
        return (
            f"λ - 1 under the same rows: speculative {ls:+.3f}, placebo {lb:+.3f} (Σk² "
            f"{info_s:.0f} and {info_b:.0f}); the speculative samples look "
            f"{'colder' if ls > lb else 'hotter'} by {ls - lb:+.3f} +- {se:.3f} over {ms} and "
            f"{mb} samples; power {power:.3f} for a temperature off by {rel_error:.0%}"
        )

    df = min(ms, mb) - 1
    return _difference(
        name, (ls, lb), vs + vb, df, alpha=alpha, n=n, shift=rel_error, describe=describe
    )


def _bin_shares(u: FloatArray, ids: npt.ArrayLike, bins: int) -> tuple[FloatArray, FloatArray, int]:
    """The PIT's share in each bin and its cluster-robust covariance: ``(π, V, m)``."""
    counts = np.eye(bins)[np.minimum((u * bins).astype(np.int64), bins - 1)]
    _, index = np.unique(np.asarray(ids).reshape(-1), return_inverse=True)
    m = int(index.max()) + 1 if index.size else 0
    per = np.zeros((m, bins))
    np.add.at(per, index, counts)
    sizes = per.sum(axis=1)
    total = float(sizes.sum())
    pi = per.sum(axis=0) / total
    resid = per - np.outer(sizes, pi)
    cov = resid.T @ resid / total**2 * m / max(m - 1, 1)
    return pi, cov, m


def pit_vs_placebo(
    speculative: PathTokens,
    placebo: PathTokens,
    *,
    alpha: float,
    bins: int = 10,
    effect_w: float = 0.1,
) -> TestResult:
    """Do the two paths' randomized PITs (under the same instrument) share one distribution?

    Each path's PIT is counted in ``bins`` equal-width bins (fewer where a path has under 5
    tokens a bin, or there are few samples); the shares' difference is tested by a Wald
    statistic with each path's cluster-robust covariance (samples as clusters), scaled as
    Hotelling's T² to ``F(bins - 1, ν - bins + 2)``, ``ν = m_s + m_b - 2``. ``effect``
    is the observed Cohen's ``w`` between the paths' histograms; ``power`` is `chi2_power` at
    ``w = effect_w`` for ``n_s n_b / (n_s + n_b)`` tokens divided by the design effect of the
    clustering (the sandwich variance over the multinomial one).
    """
    check_alpha(alpha)
    name = "pit_vs_placebo"
    us = np.asarray(speculative[0], dtype=np.float64).reshape(-1)
    ub = np.asarray(placebo[0], dtype=np.float64).reshape(-1)
    n = int(us.size + ub.size)
    bins = max(2, min(bins, min(us.size, ub.size) // 5))
    if min(us.size, ub.size) < 10:
        return not_enough(name, alpha, n, f"{us.size} and {ub.size} PIT values; need 10 each")
    samples = (np.unique(np.asarray(c)).size for c in (speculative[1], placebo[1]))
    nu = sum(samples) - 2  # the degrees of freedom of the two samples' covariance
    bins = min(bins, nu)  # at most nu - 1 shares to compare
    if bins < 2:
        return not_enough(name, alpha, n, "too few samples for a covariance across them")
    pis, covs, ms = _bin_shares(us, speculative[1], bins)
    pib, covb, mb = _bin_shares(ub, placebo[1], bins)
    diff = (pis - pib)[:-1]
    cov = (covs + covb)[:-1, :-1]
    wald = float(diff @ np.linalg.pinv(cov) @ diff)
    df = bins - 1
    # Hotelling's scaling of a Wald statistic whose covariance is estimated from nu degrees of
    # freedom: F(df, nu - df + 1) (the chi-square limit over-rejects with tens of samples).
    stat = wald * (nu - df + 1) / (df * nu)
    p_value = float(sps.f.sf(stat, df, nu - df + 1))
    pooled = (pis * us.size + pib * ub.size) / n
    multinomial = np.diag(pooled)[:-1, :-1] * (1 / us.size + 1 / ub.size)
    deff = max(1.0, float(np.trace(cov) / np.trace(multinomial)))
    n_eff = int(us.size * ub.size / n / deff)
    power = chi2_power(n_eff, df, alpha=alpha, w=effect_w)
    w = float(np.sqrt(np.sum((pis - pib) ** 2 / np.maximum(pooled, 1e-12)) / 4))
    detail = (
        f"PIT of {us.size} speculative and {ub.size} placebo tokens ({ms} and {mb} samples) in "
        f"{bins} bins: speculative {np.round(pis * us.size).astype(int).tolist()}, placebo "
        f"{np.round(pib * ub.size).astype(int).tolist()}; Wald test with the samples as "
        f"clusters, F({df}, {nu - df + 1}) (design effect {deff:.2f}); asymptotic power "
        f"{power:.3f} for Cohen's w={effect_w:g} between the paths ({n_eff} effective tokens)"
    )
    return TestResult(name, stat, p_value, alpha, n_eff, df, power, w, detail)
