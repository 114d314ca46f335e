"""The pooled answer's bounds (`equiv.verdicts.sampling.pooled`): per directed statistic the
effect with its ``1 - 2 alpha`` confidence interval, in units a user reads, and the margin it
must lie within for ``equivalent`` (`MARGINS`: the smallest effects that matter)."""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping
from dataclasses import dataclass

from scipy import stats as sps

from equiv.json_types import JSONDict, JSONObject
from equiv.records.codec import decode, encode

__all__ = ["MARGINS", "Bound", "Effect", "clopper_pearson", "difference_interval"]


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
