"""The placebo's draws as a control variate for the speculative samples' own bounds (the
one-sample designs of `equiv.verdicts.sampling.pooled`).

Both paths of a seed draw from one random stream: llama.cpp's ``dist`` sampler takes one uniform
per emitted token from a generator seeded by the request, on the speculative path too (its
verification samples each position from the target's row and keeps the draft token where they
match). So while the two paths' contexts agree their tokens agree, and a seed that drew the top
token less often than the rows imply on one path tends to on the other: on the seed-003 runs the
two paths' per-sample errors of the temperature estimate correlate at 0.55-0.59.

The placebo's own estimate ``θ_b`` has mean 0 under its rows: that is the instrument's
exactness, which its own tests check (a run whose placebo fails them is ``inconclusive``). So the
regression estimate ``θ_s - β θ_b`` (``β`` the two paths' covariance over the placebo's
variance, both from the samples) estimates the speculative samples' own effect with the variance
``var θ_s (1 - ρ²)``; where the paths do not correlate it is ``θ_s`` with one degree of freedom
less. Samples are the clusters, lined up by index on both paths.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

__all__ = ["Residuals", "controlled"]

#: One path's per-token numerator and denominator of its ratio estimate ``Σ N / Σ D``, and the
#: sample (record index) of each token.
Residuals = tuple[npt.NDArray[np.float64], npt.NDArray[np.float64], npt.NDArray[np.intp]]


def controlled(
    speculative: Residuals, placebo: Residuals, *, floor: float = 0.0
) -> tuple[float, float, int]:
    """``(θ, var θ, df)``: the speculative samples' ratio estimate with the placebo's as its
    control variate, the variance of the regression estimate and its degrees of freedom (the
    samples with a token on either path, less 2). ``floor``: the least variance ``θ_s`` is
    given before the reduction (`equiv.verdicts.sampling.placebo.information_floor`: a run that
    drew few rare tokens has a sandwich far too small). Infinite variance under 3 samples."""
    (ns, ds, ids_s), (nb, db, ids_b) = speculative, placebo
    clusters = np.union1d(ids_s, ids_b)
    m = int(clusters.size)
    size = int(clusters.max()) + 1 if m else 0
    big_ns, big_ds = np.bincount(ids_s, ns, size), np.bincount(ids_s, ds, size)
    big_nb, big_db = np.bincount(ids_b, nb, size), np.bincount(ids_b, db, size)
    total_s, total_b = float(big_ds.sum()), float(big_db.sum())
    if m < 3 or total_s <= 0:
        return 0.0, math.inf, 1
    theta_s = float(big_ns.sum()) / total_s
    e_s = ((big_ns - theta_s * big_ds) / total_s)[clusters]
    var_s = max(float(e_s @ e_s) * m / (m - 1), floor)
    if total_b <= 0:
        return theta_s, var_s, m - 1
    theta_b = float(big_nb.sum()) / total_b
    e_b = ((big_nb - theta_b * big_db) / total_b)[clusters]
    s_sb, s_bb, s_ss = float(e_s @ e_b), float(e_b @ e_b), float(e_s @ e_s)
    if s_bb <= 0 or s_ss <= 0:
        return theta_s, var_s, m - 1
    beta = s_sb / s_bb
    rho2 = min(s_sb * s_sb / (s_ss * s_bb), 1.0)
    return theta_s - beta * theta_b, var_s * (1.0 - rho2) * (m - 1) / (m - 2), m - 2
