"""The pooled answer's bounds (`equiv.verdicts.sampling.pooled`): per directed statistic the
effect with its ``1 - 2 alpha`` confidence interval, in units a user reads, and the margin it
must lie within for ``equivalent`` (`MARGINS`: the smallest effects that matter)."""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from scipy import stats as sps

from equiv.json_types import JSONDict, JSONObject
from equiv.records.codec import decode, encode
from equiv.verdicts.sampling.control_variate import Residuals, controlled
from equiv.verdicts.sampling.pit_tests import margin_moves, pit_seed
from equiv.verdicts.sampling.placebo import (
    cluster_ratio,
    information_floor,
    normal_score_residuals,
    tempering_means,
    tempering_residuals,
)
from equiv.verdicts.sampling.samples import Sample
from equiv.verdicts.sampling.support import outside
from equiv.verdicts.sampling.token_evidence import TEMPERATURE_MARGIN
from equiv.verdicts.stats import randomized_pit

__all__ = [
    "MARGINS",
    "Bound",
    "Effect",
    "PathData",
    "bounds",
    "calibrated",
    "clopper_pearson",
    "difference_interval",
    "difference_p",
]


class Effect(str, enum.Enum):
    """The directed statistics that carry a bound."""

    TOP_TOKEN = "top-token"
    TEMPERATURE = "temperature"
    SUPPORT = "support"

    def __str__(self) -> str:
        return self.value


#: The smallest effect that matters, per statistic (the speculative samples' own in process,
#: speculative minus placebo over HTTP): 2 points of top-token rate per token; ``λ - 1`` of
#: 0.1 (an effective temperature off by 9-11 %); 0.2 % of tokens outside the chain's support.
MARGINS: Mapping[Effect, float] = {
    Effect.TOP_TOKEN: 0.02,
    Effect.TEMPERATURE: TEMPERATURE_MARGIN,
    Effect.SUPPORT: 0.002,
}

_UNITS = {
    Effect.TOP_TOKEN: "top-token rate, per token",
    Effect.TEMPERATURE: "λ - 1 (p ** λ; > 0 colder)",
    Effect.SUPPORT: "share of tokens outside the chain's support",
}


@dataclass(frozen=True)
class Bound:
    """One directed statistic's effect (the speculative samples' own, or their difference from
    the placebo's, `bounds`) with its ``1 - 2 alpha`` interval and the margin it must lie
    within for ``equivalent``."""

    effect: Effect
    estimate: float
    low: float
    high: float
    margin: float

    @property
    def within(self) -> bool:
        return -self.margin < self.low and self.high < self.margin

    @property
    def line(self) -> str:
        inside = "within" if self.within else "not within"
        return (
            f"{self.effect}: {self.estimate:+.4f} [{self.low:+.4f}, {self.high:+.4f}] "
            f"({_UNITS[self.effect]}), {inside} +-{self.margin:g}"
        )

    def seeds_factor(self) -> float | None:
        """How many times the seeds would bring the interval within the margin, if the estimate
        stayed where it is (the half-width shrinks as one over the root of the samples; the
        support's upper bound where no token fell outside it, as one over the samples); None
        where the estimate itself is at or past the margin."""
        half = (self.high - self.low) / 2
        room = self.margin - abs(self.estimate)
        if room <= 0 or not math.isfinite(half):  # past the margin, or under 2 samples a path
            return None
        if self.effect is Effect.SUPPORT and self.estimate == self.low == 0.0:
            return max(1.0, self.high / room)
        return max(1.0, (half / room) ** 2)

    def to_dict(self) -> JSONDict:
        return encode(self)

    @classmethod
    def from_dict(cls, data: JSONObject) -> Bound:
        return decode(cls, data, "bound")


def difference_interval(
    estimates: tuple[float, float, int], placebo: tuple[float, float, int], alpha: float
) -> tuple[float, float, float]:
    """The difference of two cluster estimates ``(θ, var, m)`` and its ``1 - 2 alpha``
    interval (Student's t with ``min(m) - 1`` degrees of freedom)."""
    diff = estimates[0] - placebo[0]
    df = max(min(estimates[2], placebo[2]) - 1, 1)
    half = float(sps.t.isf(alpha, df)) * math.sqrt(estimates[1] + placebo[1])
    return diff, diff - half, diff + half


def difference_p(estimates: tuple[float, float, int], placebo: tuple[float, float, int]) -> float:
    """The two-sided p-value of the same difference as `difference_interval` against 0 (the
    same Student's t); 1 where both variances are 0 (both exact, or a single sample carrying
    information: nothing to tell)."""
    diff, var = estimates[0] - placebo[0], estimates[1] + placebo[1]
    if var <= 0:
        return 1.0
    df = max(min(estimates[2], placebo[2]) - 1, 1)
    return float(2 * sps.t.sf(abs(diff) / math.sqrt(var), df))


def clopper_pearson(k: int, n: int, alpha: float) -> tuple[float, float]:
    """The one-sided Clopper-Pearson bounds ``(low, high)`` of ``k`` in ``n``, each at ``alpha``."""
    low = 0.0 if k == 0 else float(sps.beta.ppf(alpha, k, n - k + 1))
    high = 1.0 if k == n else float(sps.beta.isf(alpha, k + 1, n - k))
    return low, high


#: Each path's PIT entries, the sample of each token and the sensitivities (`tokens_of`).
PathData = dict[
    str, tuple[npt.NDArray[np.float64], npt.NDArray[np.intp], npt.NDArray[np.float64] | None]
]


def calibrated(
    estimates: Sequence[float], at_low: float, at_high: float
) -> tuple[float, float, float]:
    """The temperature's ``(estimate, low, high)`` in ``λ - 1``, from its estimator's units:
    the estimator reads ``at_low`` and ``at_high`` where the true ``λ - 1`` is minus and plus
    the margin (`equiv.verdicts.sampling.placebo.tempering_means`, at the very positions
    drawn: a linear estimating function from λ = 1, it reads 0.087 at a true 0.1 at temp 0.2,
    benchmarks/bound_coverage.py), so each side is scaled to read the margin there. Then an
    interval within the margins is the two one-sided tests of λ at 0.9 and 1.1 themselves.
    Unchanged where the reads are not on either side of 0."""
    margin = MARGINS[Effect.TEMPERATURE]
    if not at_low < 0.0 < at_high:
        est, low, high = estimates
        return est, low, high
    scaled = (x * margin / (at_high if x >= 0 else -at_low) for x in estimates)
    est, low, high = scaled
    return est, low, high


def _interval(
    parts: Sequence[Residuals],
    floors: Sequence[float],
    alpha: float,
    own_rows: bool,
    *,
    control: bool = True,
) -> tuple[float, float, float]:
    """``(estimate, low, high)`` from each path's residuals (speculative first): the
    speculative samples' own (``own_rows``) with the placebo's as their control variate
    (``control``), else their difference from the placebo's; ``floors``: the least variance
    of each path's own."""
    if own_rows and control:
        theta, var, df = controlled(parts[0], parts[1], floor=floors[0])
        half = float(sps.t.isf(alpha, max(df, 1))) * math.sqrt(var)
        return theta, theta - half, theta + half
    (est_s, var_s, m_s), (est_b, var_b, m_b) = (cluster_ratio(*part) for part in parts)
    placebo = (0.0, 0.0, m_s) if own_rows else (est_b, max(var_b, floors[1]), m_b)
    return difference_interval((est_s, max(var_s, floors[0]), m_s), placebo, alpha)


def _temperature(
    records: Sequence[Sample],
    data: PathData,
    tops: Mapping[str, npt.NDArray[np.float64] | None],
    key: str,
    alpha: float,
    own_rows: bool,
) -> Bound | None:
    """The temperature's bound: from the top token's indicator and the PIT's normal score
    combined (`equiv.verdicts.sampling.placebo.quasi_tempering`), calibrated to ``λ - 1`` where
    the records say what it reads at the margins (`calibrated`; in both designs by the
    speculative samples' reads: the placebo's own effect is 0), and only then with the
    control variate; from the normal scores alone where they lack the top token's derivative
    (written before equiv recorded it). None without the sensitivities."""
    if any(sens is None for _, _, sens in data.values()):
        return None
    rng = np.random.default_rng(pit_seed(records) + 11)
    combined = all(t is not None for t in tops.values())
    parts: list[Residuals] = []
    floors = []
    for path, (pits, ids, sens) in data.items():
        assert sens is not None
        u = randomized_pit(pits[:, 0], pits[:, 1], rng)
        t = tops[path]
        if combined and t is not None:
            h, info = tempering_residuals(u, sens, pits[:, 2], t)
            floors.append(information_floor(info))
        else:  # the normal scores alone (`tempering`)
            h, info = normal_score_residuals(u, sens)
            floors.append(0.0)
        parts.append((h, info, ids))
    pits, _, sens = data["speculative"]
    t, moves = tops["speculative"], margin_moves(records, "speculative", key)
    total = float(parts[0][1].sum())
    if not combined or t is None or sens is None or moves is None or total <= 0:
        # no reads at the margins (files written before them, or no information): the
        # estimator's own interval, without the control variate that would narrow it past
        # what its bias at the margins allows (benchmarks/bound_coverage.py)
        estimates = _interval(parts, floors, alpha, own_rows, control=False)
        return Bound(Effect.TEMPERATURE, *estimates, MARGINS[Effect.TEMPERATURE])
    reads = (float(m.sum()) / total for m in tempering_means(sens, pits[:, 2], t, moves))
    estimates = calibrated(_interval(parts, floors, alpha, own_rows), *reads)
    return Bound(Effect.TEMPERATURE, *estimates, MARGINS[Effect.TEMPERATURE])


def bounds(
    records: Sequence[Sample],
    data: PathData,
    tops: Mapping[str, npt.NDArray[np.float64] | None],
    alpha: float,
    *,
    own_rows: bool,
    key: str = "chain_pit",
) -> tuple[Bound, ...]:
    """The directed statistics with their ``1 - 2 alpha`` intervals, samples as clusters (``data``
    and ``tops``: each path's, speculative first; ``key``: the rows they are under): the
    speculative samples' own where their rows say the expected value, 0 (``own_rows``; the
    placebo's draws with the same seeds as their control variate,
    `equiv.verdicts.sampling.control_variate`), else their difference from the placebo's. The
    tokens' likelihood scores would carry a little more about the temperature, but their sum is
    skewed at a low temperature and its interval misses the true value three times as often as
    allowed (benchmarks/bound_coverage.py)."""
    top = [((p[:, 0] == 0.0) - p[:, 2], np.ones(len(ids)), ids) for p, ids, _ in data.values()]
    estimate, low, high = _interval(top, (0.0, 0.0), alpha, own_rows)
    out = [Bound(Effect.TOP_TOKEN, estimate, low, high, MARGINS[Effect.TOP_TOKEN])]
    temperature = _temperature(records, data, tops, key, alpha, own_rows)
    if temperature is not None:
        out.append(temperature)
    (ps, _, _), (pb, _, _) = data.values()
    a, b = int(outside(ps).sum()), int(outside(pb).sum())
    lo_s, hi_s = clopper_pearson(a, len(ps), alpha / 2)
    lo_b, hi_b = (0.0, 0.0) if own_rows else clopper_pearson(b, len(pb), alpha / 2)
    support = a / len(ps) - (0.0 if own_rows else b / len(pb))
    out.append(Bound(Effect.SUPPORT, support, lo_s - hi_b, hi_s - lo_b, MARGINS[Effect.SUPPORT]))
    return tuple(out)
