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
from equiv.verdicts.sampling.pit_tests import pit_seed
from equiv.verdicts.sampling.placebo import quasi_tempering, tempering, top_excess
from equiv.verdicts.sampling.samples import Sample
from equiv.verdicts.stats import randomized_pit

__all__ = [
    "MARGINS",
    "Bound",
    "Effect",
    "PathData",
    "bounds",
    "clopper_pearson",
    "difference_interval",
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
    Effect.TEMPERATURE: 0.1,
    Effect.SUPPORT: 0.002,
}

_UNITS = {
    Effect.TOP_TOKEN: "top-token rate, per token",
    Effect.TEMPERATURE: "λ - 1 (p ** λ; > 0 colder)",
    Effect.SUPPORT: "share of tokens outside the chain's support",
}


@dataclass(frozen=True)
class Bound:
    """One directed statistic's difference, speculative minus placebo, with its ``1 - 2 alpha``
    interval and the margin it must lie within for ``equivalent``."""

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


def clopper_pearson(k: int, n: int, alpha: float) -> tuple[float, float]:
    """The one-sided Clopper-Pearson bounds ``(low, high)`` of ``k`` in ``n``, each at ``alpha``."""
    low = 0.0 if k == 0 else float(sps.beta.ppf(alpha, k, n - k + 1))
    high = 1.0 if k == n else float(sps.beta.isf(alpha, k + 1, n - k))
    return low, high


#: Each path's PIT entries, the sample of each token and the sensitivities (`tokens_of`).
PathData = dict[
    str, tuple[npt.NDArray[np.float64], npt.NDArray[np.intp], npt.NDArray[np.float64] | None]
]


def bounds(
    records: Sequence[Sample],
    data: PathData,
    tops: Mapping[str, npt.NDArray[np.float64] | None],
    alpha: float,
    *,
    own_rows: bool,
) -> tuple[Bound, ...]:
    """The directed statistics with their ``1 - 2 alpha`` intervals, samples as clusters (``data``
    and ``tops``: each path's, speculative first): the speculative samples' own where their
    rows say the expected value, 0 (``own_rows``), else their difference from the placebo's.
    The temperature's from the top token's indicator and the PIT's normal score combined
    (`equiv.verdicts.sampling.placebo.quasi_tempering`: at temperature 0.2 close to all the
    information the tokens carry), or from the normal
    scores alone where the records lack the top token's derivative (``tops``: written before
    equiv recorded it). The tokens' likelihood scores would carry a little more, but their sum
    is skewed at a low temperature and its interval misses the true value three times as often
    as allowed (benchmarks/bound_coverage.py)."""
    seed = pit_seed(records) + 11
    rng = np.random.default_rng(seed)
    out = []

    def against(
        estimates: Sequence[tuple[float, float, int]],
    ) -> tuple[float, float, float]:
        zero = (0.0, 0.0, estimates[0][2])  # the rows themselves: no error to add
        return difference_interval(estimates[0], zero if own_rows else estimates[1], alpha)

    top = [top_excess(p[:, 0] == 0.0, p[:, 2], ids) for p, ids, _ in data.values()]
    diff, low, high = against(top)
    out.append(Bound(Effect.TOP_TOKEN, diff, low, high, MARGINS[Effect.TOP_TOKEN]))
    if all(sens is not None for _, _, sens in data.values()):
        combined = all(t is not None for t in tops.values())
        lam = []
        for path, (pits, ids, sens) in data.items():
            assert sens is not None
            u = randomized_pit(pits[:, 0], pits[:, 1], rng)
            t = tops[path]
            if combined and t is not None:
                lam.append(quasi_tempering(u, sens, pits[:, 2], t, ids))
            else:
                theta, var, m, _ = tempering(u, sens, ids)
                lam.append((theta, var, m))
        diff, low, high = against(lam)
        out.append(Bound(Effect.TEMPERATURE, diff, low, high, MARGINS[Effect.TEMPERATURE]))
    (ps, _, _), (pb, _, _) = data.values()
    a, b = int(np.sum(ps[:, 1] == 0.0)), int(np.sum(pb[:, 1] == 0.0))
    lo_s, hi_s = clopper_pearson(a, len(ps), alpha / 2)
    lo_b, hi_b = (0.0, 0.0) if own_rows else clopper_pearson(b, len(pb), alpha / 2)
    support = a / len(ps) - (0.0 if own_rows else b / len(pb))
    out.append(Bound(Effect.SUPPORT, support, lo_s - hi_b, hi_s - lo_b, MARGINS[Effect.SUPPORT]))
    return tuple(out)
