"""Temp 0 at run level: are there more divergences than numeric drift can make?

One divergence at a near-tie cannot tell a lossy acceptance rule (one that accepts the target's
runner-up) from drift: both emit a token the target ranks a close second. Their *rate* can. The
placebo is the baseline's own tokens evaluated by the target in one batch, as verification
evaluates (`equiv.records.ArgmaxFlips`): each position where the batched row's argmax is not the
token plain decoding chose is a divergence that drift alone would give a correct speculative path.

Both are counted per position, as the hazard of a first divergence:

- the speculative path: ``D`` divergences in ``E`` positions (a prompt that diverged at token
  ``d`` was exposed for ``d + 1`` positions, one that did not for every compared position);
- the placebo: ``K`` flips in ``N`` positions (every baseline token of every prompt).

The test is the exact conditional test of two Poisson rates (Przyborowski & Wilenski 1940): given
``D + K`` events, ``D ~ Binomial(D + K, cE / (cE + N))`` when the speculative path's rate is
``c`` times the placebo's. H0: the rate is at most ``RATE_SAFETY`` (c = 2) times the placebo's,
because verification batches have other shapes than the placebo's one batch and so other
reduction orders (on the default pair the two rates agree within that factor:
benchmarks/README.md). The run is ``sampler-bug`` when H0 is rejected at ``RATE_ALPHA``: drift
cannot account for the divergences, whatever each one's label says. The smallest true ratio the
run would detect with power 0.8 is given beside the answer, so that "no excess" is read with what
the data could see.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import asdict, dataclass

import numpy as np
from scipy import stats

from equiv.config import Mode
from equiv.json_types import JSONDict
from equiv.records import ResultRecord

__all__ = ["RATE_ALPHA", "RATE_SAFETY", "DivergenceRate", "divergence_rate", "rate_test"]

RATE_ALPHA = 0.01
RATE_SAFETY = 2.0
POWER = 0.8
_POWER_DRAWS = 2000


@dataclass(frozen=True)
class DivergenceRate:
    """The speculative path's divergences per position against the placebo's flips per position."""

    prompts: int
    divergences: int  # D
    exposure: int  # E
    flips: int  # K
    positions: int  # N
    p_value: float
    alpha: float = RATE_ALPHA
    safety: float = RATE_SAFETY

    @functools.cached_property
    def detectable_ratio(self) -> float | None:
        """The smallest true rate ratio this run finds with power POWER (None: none below 1e4)."""
        if not self.exposure:
            return None
        return _detectable_ratio(self.exposure, self.flips, self.positions, self.safety, self.alpha)

    @property
    def ratio(self) -> float | None:
        """Observed rate ratio (speculative over placebo); None where the placebo never flipped."""
        if self.flips == 0 or self.exposure == 0:
            return None
        return (self.divergences / self.exposure) / (self.flips / self.positions)

    @property
    def excess(self) -> bool:
        """Drift cannot account for the divergences (H0 rejected at ``alpha``)."""
        return self.p_value < self.alpha

    @property
    def line(self) -> str:
        ratio = "no flip in the placebo" if self.ratio is None else f"{self.ratio:.2f}x its rate"
        seen = (
            f"would see {self.detectable_ratio:.3g}x with power {POWER:.0%}"
            if self.detectable_ratio is not None
            else "too few positions to see any ratio"
        )
        answer = (
            "drift cannot account for them"
            if self.excess
            else f"within what drift gives (up to {self.safety:g}x; {seen})"
        )
        return (
            f"divergence rate: {self.divergences} in {self.exposure} positions over "
            f"{self.prompts} prompt(s); drift alone flips {self.flips} in {self.positions} "
            f"(the baseline's tokens re-scored in a batch): {ratio}, p = {self.p_value:.3g} "
            f"(exact test of two Poisson rates, H0 ratio <= {self.safety:g}, alpha "
            f"{self.alpha:g}): {answer}"
        )

    def to_dict(self) -> JSONDict:
        return {
            **asdict(self),
            "ratio": self.ratio,
            "excess": self.excess,
            "detectable_ratio": self.detectable_ratio,
        }


def _p_value(d: int, exposure: int, k: int, positions: int, c: float) -> float:
    if d == 0:
        return 1.0
    share = c * exposure / (c * exposure + positions)
    return float(stats.binom.sf(d - 1, d + k, share))


@functools.lru_cache(maxsize=64)  # a run's summary is drawn several times (terminal, report, json)
def _detectable_ratio(
    exposure: int, k: int, positions: int, c: float, alpha: float
) -> float | None:
    """The smallest true ratio rejected with probability >= POWER, by simulation at the placebo's
    observed rate (rule of three where it never flipped): a bisection on the ratio."""
    rate = (k if k else 3.0) / positions
    rng = np.random.default_rng(0)
    u_d, u_k = rng.random(_POWER_DRAWS), rng.random(_POWER_DRAWS)  # common numbers: monotone

    def power(ratio: float) -> float:
        d = stats.poisson.ppf(u_d, ratio * rate * exposure)
        kk = stats.poisson.ppf(u_k, rate * positions)
        share = c * exposure / (c * exposure + positions)
        p = np.where(d > 0, stats.binom.sf(d - 1, d + kk, share), 1.0)
        return float(np.mean(p < alpha))

    low, high = 1.0, 1e4
    if power(high) < POWER:
        return None
    for _ in range(40):
        mid = (low * high) ** 0.5
        low, high = (mid, high) if power(mid) < POWER else (low, mid)
        if high / low < 1.02:
            break
    return round(high, 3)


def rate_test(
    *,
    prompts: int,
    divergences: int,
    exposure: int,
    flips: int,
    positions: int,
    alpha: float = RATE_ALPHA,
    safety: float = RATE_SAFETY,
) -> DivergenceRate:
    """The test on counts: ``divergences`` in ``exposure`` positions against ``flips`` in
    ``positions``."""
    return DivergenceRate(
        prompts=prompts,
        divergences=divergences,
        exposure=exposure,
        flips=flips,
        positions=positions,
        p_value=_p_value(divergences, exposure, flips, positions, safety),
        alpha=alpha,
        safety=safety,
    )


def divergence_rate(
    results: Iterable[ResultRecord], *, alpha: float = RATE_ALPHA, safety: float = RATE_SAFETY
) -> DivergenceRate | None:
    """The run-level test over the temp-0 results that carry a placebo (None where none does)."""
    prompts = d = exposure = k = positions = 0
    for r in results:
        if r.mode is not Mode.TEMP0 or r.drift_placebo is None:
            continue
        prompts += 1
        div, c = r.comparison.divergence, r.comparison
        if div is not None and div.baseline_token is not None and div.speculative_token is not None:
            d += 1
            exposure += div.position + 1
        else:  # identical, or one path ended first: compared where both had tokens
            exposure += div.position if div is not None else min(c.n_baseline, c.n_speculative)
        k += len(r.drift_placebo.flips)
        positions += r.drift_placebo.positions
    if prompts == 0 or positions == 0:
        return None
    return rate_test(
        prompts=prompts,
        divergences=d,
        exposure=exposure,
        flips=k,
        positions=positions,
        alpha=alpha,
        safety=safety,
    )
