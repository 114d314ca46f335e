"""Power and minimum detectable effect of the chi-square tests, from the noncentral chi-square
distribution with Cohen's effect size ``w`` (Cohen 1988, *Statistical Power Analysis for the
Behavioral Sciences*, ch. 7)::

    power(n, df, alpha, w) = P[ ncx2(df, lambda = n * w**2) > chi2.ppf(1 - alpha, df) ]

``w = sqrt(sum_i (p1_i - p0_i)**2 / p0_i)`` (Cramer's V for a 2 x K table); Cohen calls 0.1
small, 0.3 medium, 0.5 large.
"""

from __future__ import annotations

import math

from scipy import stats as sps

from equiv.errors import ConfigError
from equiv.verdicts.stats.result import check_alpha

__all__ = ["chi2_power", "min_detectable_w", "power_detail"]


def chi2_power(n: int, df: int, *, alpha: float, w: float) -> float:
    """Power of a chi-square test with ``df`` degrees of freedom and ``n`` observations to
    detect Cohen's effect size ``w`` at level ``alpha``: ``ncx2.sf(chi2.isf(alpha, df), df,
    n * w**2)`` (``alpha`` itself when ``n * w**2 == 0``)."""
    check_alpha(alpha)
    if df < 1:
        raise ValueError(f"df={df!r} must be at least 1")
    if n < 0 or w < 0:
        raise ValueError(f"n={n!r} and w={w!r} must be non-negative")
    crit = float(sps.chi2.isf(alpha, df))
    nc = n * w * w
    if nc == 0.0:
        return alpha
    return float(sps.ncx2.sf(crit, df, nc))


def min_detectable_w(n: int, df: int, *, alpha: float, power: float = 0.95) -> float:
    """The smallest Cohen's ``w`` that ``n`` observations detect with probability ``power``.

    Solves ``chi2_power(n, df, alpha=alpha, w=w) == power`` for ``lambda = n * w**2`` by
    bisection (power rises monotonically in lambda), then ``w = sqrt(lambda / n)``. ``inf`` when
    ``n == 0``; 0 when ``power <= alpha``.
    """
    check_alpha(alpha)
    if not 0.0 < power < 1.0:
        raise ConfigError(f"power={power!r} is outside (0, 1); pass a value such as 0.95")
    if n <= 0:
        return math.inf
    if power <= alpha:
        return 0.0
    crit = float(sps.chi2.isf(alpha, df))

    def pw(lam: float) -> float:
        return float(sps.ncx2.sf(crit, df, lam))

    lo, hi = 0.0, 1.0
    while pw(hi) < power:
        lo, hi = hi, hi * 2.0
    while hi - lo > 1e-10 * hi:
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if pw(mid) < power else (lo, mid)
    return math.sqrt(hi / n)


def power_detail(n: int, df: int, alpha: float, effect_w: float) -> tuple[float, str]:
    power = chi2_power(n, df, alpha=alpha, w=effect_w)
    mdw = min_detectable_w(n, df, alpha=alpha, power=0.95)
    return power, (
        f"power {power:.3f} to detect Cohen's w={effect_w:g} at alpha={alpha:g}; "
        f"minimum detectable w at power 0.95: {mdw:.4f}"
    )
