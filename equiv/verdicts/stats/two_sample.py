"""Tests of two samples against each other: token ids (chi-square homogeneity), values (KS,
Mann-Whitney). KS and Mann-Whitney report no power (None): no honest formula."""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping

import numpy as np
import numpy.typing as npt
from scipy import stats as sps

from equiv.errors import ConfigError
from equiv.verdicts.stats.power import power_detail
from equiv.verdicts.stats.result import FloatArray, TestResult, check_alpha, not_enough

__all__ = ["chi2_two_sample", "ks_two_sample", "mann_whitney"]


def _bins(
    ca: npt.NDArray[np.int64], cb: npt.NDArray[np.int64], scale: float, min_expected: float
) -> tuple[list[int], list[int], int, int]:
    """`chi2_two_sample`'s bins: each sample's counts per kept category (largest first, ties
    by id) then the pooled "other" bin, the categories pooled, and the categories seen."""
    col = ca + cb
    order = np.lexsort((np.arange(col.size), -col))  # largest first, ties by id
    order = order[col[order] > 0]
    big = [int(i) for i in order if col[i] * scale >= min_expected]
    small = [int(i) for i in order if col[i] * scale < min_expected]
    other_a, other_b = int(ca[small].sum()), int(cb[small].sum())
    n_pooled = len(small)
    while small and (other_a + other_b) * scale < min_expected and big:
        j = big.pop()  # the smallest remaining category
        other_a, other_b = other_a + int(ca[j]), other_b + int(cb[j])
        n_pooled += 1
    rows_a = [int(ca[i]) for i in big] + ([other_a] if n_pooled else [])
    rows_b = [int(cb[i]) for i in big] + ([other_b] if n_pooled else [])
    return rows_a, rows_b, n_pooled, len(order)


def chi2_two_sample(
    counts_a: Mapping[int, int],
    counts_b: Mapping[int, int],
    *,
    alpha: float,
    min_expected: float = 5.0,
    effect_w: float = 0.1,
) -> TestResult:
    """Chi-square test of homogeneity of two samples of token ids (a 2 x K contingency table).

    H0: both samples come from the same categorical distribution. Categories whose smaller
    expected count ``min(n_a, n_b) * col / n`` is below ``min_expected`` are pooled into one
    "other" bin; while that bin is itself below ``min_expected``, the smallest remaining category
    joins it. The table is tested with ``scipy.stats.chi2_contingency(correction=False)``,
    ``df = K - 1``. ``effect`` is the observed Cohen's ``w = sqrt(X2 / n)`` (= Cramer's V);
    ``power`` is `chi2_power` with ``n = n_a + n_b`` at ``w = effect_w``. With fewer than 2 bins
    left, the result is p 1.0 and power 0.0 with a detail saying there is not enough data.
    """
    check_alpha(alpha)
    if not min_expected > 0.0:
        raise ConfigError(f"min_expected={min_expected!r} is not positive; pass 5.0")
    keys = sorted(set(counts_a) | set(counts_b))
    ca = np.array([counts_a.get(k, 0) for k in keys], dtype=np.int64)
    cb = np.array([counts_b.get(k, 0) for k in keys], dtype=np.int64)
    if (ca < 0).any() or (cb < 0).any():
        raise ValueError("counts must be non-negative")
    na, nb = int(ca.sum()), int(cb.sum())
    n = na + nb
    name = "chi2_two_sample"
    if na == 0 or nb == 0:
        return not_enough(name, alpha, n, f"n_a={na}, n_b={nb}; both samples need tokens")
    rows_a, rows_b, n_pooled, seen = _bins(ca, cb, min(na, nb) / n, min_expected)
    k = len(rows_a)
    if k < 2:
        why = f"{seen} categories leave {k} bin once those with expected count < "
        return not_enough(name, alpha, n, why + f"{min_expected:g} are pooled; collect more")
    table = np.array([rows_a, rows_b], dtype=np.float64)
    res = sps.chi2_contingency(table, correction=False)
    stat = float(res.statistic)
    df = k - 1
    power, pdetail = power_detail(n, df, alpha, effect_w)
    tv = 0.5 * float(np.abs(table[0] / na - table[1] / nb).sum())
    detail = (
        f"{k} bins ({n_pooled} of {seen} categories pooled into 'other'); "
        f"n_a={na}, n_b={nb}; empirical TV {tv:.4f}; effect is Cohen's w; {pdetail}"
    )
    w = math.sqrt(stat / n)
    return TestResult(name, stat, float(res.pvalue), alpha, n, df, power, w, detail)


def _samples(a: npt.ArrayLike, b: npt.ArrayLike) -> tuple[FloatArray, FloatArray]:
    return np.asarray(a, dtype=np.float64).ravel(), np.asarray(b, dtype=np.float64).ravel()


def ks_two_sample(a: npt.ArrayLike, b: npt.ArrayLike, *, alpha: float) -> TestResult:
    """Two-sample Kolmogorov-Smirnov test (``scipy.stats.ks_2samp``, two-sided).

    H0: ``a`` and ``b`` come from the same continuous distribution. ``effect`` is the statistic
    ``D = sup |F_a - F_b|``. For discrete data (token ids, lengths) the test is conservative.
    ``power`` is None: it depends on the unknown alternative's shape.
    """
    check_alpha(alpha)
    xa, xb = _samples(a, b)
    n = int(xa.size + xb.size)
    if xa.size == 0 or xb.size == 0:
        return not_enough("ks_two_sample", alpha, n, f"n_a={xa.size}, n_b={xb.size}")
    detail = f"n_a={xa.size}, n_b={xb.size}; effect is the KS distance D"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)
            res = sps.ks_2samp(xa, xb)
    except RuntimeWarning:
        res = sps.ks_2samp(xa, xb, method="asymp")
        detail += "; asymptotic p (the exact one failed in floating point)"
    d = float(res.statistic)
    return TestResult("ks_two_sample", d, float(res.pvalue), alpha, n, None, None, d, detail)


def mann_whitney(a: npt.ArrayLike, b: npt.ArrayLike, *, alpha: float) -> TestResult:
    """Mann-Whitney U test (``scipy.stats.mannwhitneyu``, two-sided, tie-corrected).

    H0: ``P(A > B) = P(B > A)`` for ``A`` from ``a`` and ``B`` from ``b``. ``statistic`` is
    ``U_a``; ``effect`` is the common-language effect size ``U_a / (n_a n_b) = P(A > B) +
    P(A = B) / 2`` (McGraw & Wong 1992), 0.5 under H0. ``power`` is None (alternative-specific).
    When every value is equal there is no ordering to test and p is 1.
    """
    check_alpha(alpha)
    xa, xb = _samples(a, b)
    n = int(xa.size + xb.size)
    if xa.size == 0 or xb.size == 0:
        return not_enough("mann_whitney", alpha, n, f"n_a={xa.size}, n_b={xb.size}")
    detail = f"n_a={xa.size}, n_b={xb.size}; effect is P(A > B) + P(A = B) / 2"
    if np.all(np.concatenate([xa, xb]) == xa[0]):
        u_a, p = xa.size * xb.size / 2.0, 1.0
        detail += "; every value is equal"
    else:
        res = sps.mannwhitneyu(xa, xb, alternative="two-sided")
        u_a, p = float(res.statistic), float(res.pvalue)
    cles = u_a / (xa.size * xb.size)
    return TestResult("mann_whitney", u_a, p, alpha, n, None, None, cles, detail)
