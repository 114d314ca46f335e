"""Adjusted p-values of a family of tests: Holm (family-wise error) and Benjamini-Hochberg
(false discovery rate)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from scipy import stats as sps

from equiv.verdicts.stats.result import FloatArray

__all__ = ["benjamini_hochberg", "holm"]


def _pvals(p_values: Sequence[float]) -> FloatArray:
    p = np.asarray(p_values, dtype=np.float64).reshape(-1)
    if p.size and (np.isnan(p).any() or p.min() < 0.0 or p.max() > 1.0):
        raise ValueError(f"p-values must lie in [0, 1], got {p.tolist()}")
    return p


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values (Holm 1979, *Scand. J. Stat.* 6), in input order.

    With ``p_(1) <= ... <= p_(m)``: ``adj_(i) = max_{j <= i} min(1, (m - j + 1) p_(j))``.
    Rejecting ``adj < alpha`` controls the family-wise error rate at ``alpha``.
    """
    p = _pvals(p_values)
    m = p.size
    order = np.argsort(p, kind="stable")
    stepped = np.minimum(1.0, (m - np.arange(m)) * p[order])
    adj = np.empty(m)
    adj[order] = np.maximum.accumulate(stepped)
    return [float(v) for v in adj]


def benjamini_hochberg(p_values: Sequence[float]) -> list[float]:
    """Benjamini-Hochberg adjusted p-values (Benjamini & Hochberg 1995, *JRSS B* 57), in input
    order: ``adj_(i) = min_{j >= i} min(1, m p_(j) / j)``
    (``scipy.stats.false_discovery_control(method="bh")``). Rejecting ``adj < q`` controls the
    false discovery rate at ``q`` for independent or positively dependent tests.
    """
    p = _pvals(p_values)
    if p.size == 0:
        return []
    adj = sps.false_discovery_control(p, method="bh")
    return [float(v) for v in np.atleast_1d(adj)]
