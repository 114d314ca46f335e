"""Two paths' pass rates on the same graded prompts compared, as pure functions: Wilson
intervals, the exact McNemar test, the paired difference with its equivalence test (TOST).

**Temp 0** (one deterministic answer per prompt and path; the unit is the prompt): both paths'
pass counts, the prompts whose outcome flipped in each direction with their divergence labels,
and an **exact McNemar test** (two-sided binomial test of the discordant pairs against 1/2).
The difference in pass rate, speculative minus baseline, gets the Bonett & Price (2012)
adjusted-Wald interval for paired proportions.

**Temp > 0** (the unit is the seed, within each prompt): each prompt's pass rate on both paths
over the seeds with a Wilson interval; pooled rates (Wilson on the pooled counts, conservative
for these fixed prompts); and the difference as the mean over prompts of the per-prompt
differences, with a Wald interval whose per-prompt variances are Agresti & Caffo's (one pass and
one fail added to each path) so that a prompt always or never solved still carries uncertainty.
The two paths' seeds are treated as independent samples; any positive correlation from sharing a
seed only makes the interval conservative.

**Equivalence** (both modes): two one-sided tests (TOST) at level ``alpha`` against a margin
``m``: no change larger than ``m`` when the ``1 - 2 alpha`` interval lies inside ``(-m, m)``.
A drop is *significant* when the one-sided test of "speculative is not worse" rejects at
``alpha``: at temp 0 the exact one-sided McNemar test, at temp > 0 Fisher's exact one-sided
test on the pooled counts. Power is that of the TOST when the
true difference is 0, and "about N would" is the number of prompts (temp 0) or seeds per prompt
(temp > 0) that brings it to `TARGET_POWER`, scaling the standard error by ``1 / sqrt(N)``.
"""

from __future__ import annotations

import dataclasses
import enum
import math
from collections.abc import Sequence
from dataclasses import dataclass

from scipy import stats

from equiv.json_types import JSONDict

__all__ = [
    "QUALITY_ALPHA",
    "TARGET_POWER",
    "Difference",
    "QualityAnswer",
    "Rate",
    "exact_mcnemar",
    "paired_difference",
    "stratified_difference",
    "units_needed",
    "units_to_detect",
    "wilson",
]

QUALITY_ALPHA = 0.05
TARGET_POWER = 0.8


@dataclass(frozen=True)
class Rate:
    """``passed`` of ``n`` with a Wilson interval at ``level``."""

    passed: int
    n: int
    low: float
    high: float

    @property
    def value(self) -> float:
        return self.passed / self.n if self.n else math.nan

    def to_dict(self) -> JSONDict:
        return {"passed": self.passed, "n": self.n, "low": self.low, "high": self.high}


def wilson(passed: int, n: int, level: float = 1 - 2 * QUALITY_ALPHA) -> Rate:
    """The Wilson score interval of a binomial proportion."""
    if not 0 <= passed <= n:
        raise ValueError(f"passed={passed} must lie in [0, n={n}]")
    if n == 0:
        return Rate(0, 0, 0.0, 1.0)
    ci = stats.binomtest(passed, n).proportion_ci(confidence_level=level, method="wilson")
    return Rate(passed, n, float(ci.low), float(ci.high))


def exact_mcnemar(worse: int, better: int) -> float:
    """Two-sided exact McNemar p-value of ``worse`` vs ``better`` discordant pairs."""
    n = worse + better
    return 1.0 if n == 0 else float(stats.binomtest(worse, n, 0.5).pvalue)


def _mcnemar_drop(worse: int, better: int) -> float:
    """One-sided exact McNemar p-value of "speculative fails more often"."""
    n = worse + better
    return 1.0 if n == 0 else float(stats.binomtest(worse, n, 0.5, alternative="greater").pvalue)


class QualityAnswer(str, enum.Enum):
    NO_LOSS = "no-loss"  # the TOST interval lies inside the margin
    DROP = "drop"  # significantly lower on the speculative path
    RISE = "rise"  # significantly higher on the speculative path
    UNDECIDED = "not-enough-samples"


@dataclass(frozen=True)
class Difference:
    """Speculative minus baseline pass rate (fractions), its interval and the tests on it."""

    estimate: float
    se: float
    low: float  # the 1 - 2 alpha interval (the TOST interval)
    high: float
    margin: float
    alpha: float
    p_drop: float  # one-sided: H0 "not worse" (difference >= 0)
    p_rise: float  # one-sided: H0 "not better"
    power: float  # of the TOST at a true difference of 0
    needed: int | None  # units (prompts or seeds per prompt) for TARGET_POWER; None if reached
    unit: str  # "prompts" or "seeds"
    units: int = 0  # how many of them the data had (seeds: the fewest of any prompt)

    @property
    def to_detect(self) -> int | None:
        """Units at which a change as large as this estimate would be significant (80 %)."""
        return units_to_detect(self.estimate, self.se, self.units, self.alpha)

    @property
    def answer(self) -> QualityAnswer:
        if -self.margin < self.low and self.high < self.margin:
            return QualityAnswer.NO_LOSS
        if self.p_drop < self.alpha:
            return QualityAnswer.DROP
        if self.p_rise < self.alpha:
            return QualityAnswer.RISE
        return QualityAnswer.UNDECIDED

    @property
    def significant_drop(self) -> bool:
        return self.p_drop < self.alpha

    @property
    def sentence(self) -> str:
        """The user's question answered in one clause."""
        pts = 100 * self.margin
        conf = f"{100 * (1 - self.alpha):g} %"
        ci = f"{100 * self.low:+.1f} to {100 * self.high:+.1f} points"
        answer = self.answer
        if answer is QualityAnswer.NO_LOSS:
            text = f"no quality change larger than {pts:g} points, at {conf} (TOST; {ci})"
            if self.significant_drop:
                text += f"; a drop of {-100 * self.estimate:.1f} points is significant but small"
            return text
        if answer is QualityAnswer.DROP:
            return (
                f"quality dropped by {-100 * self.estimate:.1f} points "
                f"({ci}; one-sided p = {self.p_drop:.2g})"
            )
        if answer is QualityAnswer.RISE:
            return f"quality rose by {100 * self.estimate:.1f} points ({ci})"
        more = f"; about {self.needed} {self.unit} would" if self.needed else ""
        return (
            f"not enough samples to tell a change within {pts:g} points ({ci}, "
            f"power {self.power:.0%}){more}"
        )

    def to_dict(self) -> JSONDict:
        return {
            "estimate": self.estimate,
            "se": self.se,
            "low": self.low,
            "high": self.high,
            "margin": self.margin,
            "alpha": self.alpha,
            "p_drop": self.p_drop,
            "p_rise": self.p_rise,
            "power": self.power,
            "needed": self.needed,
            "unit": self.unit,
            "units": self.units,
            "answer": self.answer.value,
        }


def _tost_power(se: float, margin: float, alpha: float) -> float:
    if se <= 0:
        return 1.0
    z = float(stats.norm.ppf(1 - alpha))
    return max(0.0, 2 * float(stats.norm.cdf(margin / se - z)) - 1)


def units_needed(
    se: float, units: int, margin: float, alpha: float, power: float = TARGET_POWER
) -> int | None:
    """Units for which a TOST at a true difference of 0 has ``power`` (None if it already has),
    assuming the standard error shrinks as ``1 / sqrt(units)``."""
    if se <= 0 or _tost_power(se, margin, alpha) >= power:
        return None
    z = float(stats.norm.ppf(1 - alpha) + stats.norm.ppf(1 - (1 - power) / 2))
    return max(units + 1, math.ceil(units * (z * se / margin) ** 2))


def units_to_detect(
    estimate: float, se: float, units: int, alpha: float, power: float = TARGET_POWER
) -> int | None:
    """Units (prompts or seeds per prompt) at which a true change of ``estimate`` is found
    significant by the one-sided test at ``alpha`` with ``power``, scaling the standard error
    by ``1 / sqrt(units)``; None for no change."""
    if estimate == 0 or se <= 0:
        return None
    z = float(stats.norm.ppf(1 - alpha) + stats.norm.ppf(power))
    return max(1, math.ceil(units * (z * se / abs(estimate)) ** 2))


def _difference(
    estimate: float, se: float, margin: float, alpha: float, units: int, unit: str
) -> Difference:
    z = float(stats.norm.ppf(1 - alpha))
    if se > 0:
        p_drop = float(stats.norm.cdf(estimate / se))
        p_rise = float(stats.norm.sf(estimate / se))
    else:
        p_drop = p_rise = 0.5
    return Difference(
        estimate=estimate,
        se=se,
        low=max(-1.0, estimate - z * se),
        high=min(1.0, estimate + z * se),
        margin=margin,
        alpha=alpha,
        p_drop=p_drop,
        p_rise=p_rise,
        power=_tost_power(se, margin, alpha),
        needed=units_needed(se, units, margin, alpha),
        unit=unit,
        units=units,
    )


def paired_difference(
    n: int, worse: int, better: int, *, margin: float, alpha: float = QUALITY_ALPHA
) -> Difference:
    """Temp 0: ``n`` prompts, ``worse`` passed only on the baseline, ``better`` only on the
    speculative path. Bonett-Price interval; the drop test is the exact one-sided McNemar."""
    if worse < 0 or better < 0 or worse + better > n or n < 1:
        raise ValueError(f"need 0 <= worse, better and worse + better <= n > 0; got {n=}")
    p12 = (worse + 1) / (n + 2)
    p21 = (better + 1) / (n + 2)
    se = math.sqrt(max(p12 + p21 - (p21 - p12) ** 2, 0.0) / (n + 2))
    diff = _difference((better - worse) / n, se, margin, alpha, n, "prompts")
    return dataclasses.replace(
        diff, p_drop=_mcnemar_drop(worse, better), p_rise=_mcnemar_drop(better, worse)
    )


def stratified_difference(
    strata: Sequence[tuple[int, int, int, int]], *, margin: float, alpha: float = QUALITY_ALPHA
) -> Difference:
    """Temp > 0: per prompt ``(baseline passes, baseline n, speculative passes, speculative
    n)``. The mean per-prompt difference, with Agresti-Caffo variances for its interval; the
    drop and rise tests are Fisher's exact one-sided tests on the pooled counts (every prompt has
    the same seeds on both paths, so the pools mix the prompts alike; ignoring the strata only
    makes the test conservative, and exact where the Wald interval is not: few seeds)."""
    strata = [s for s in strata if s[1] > 0 and s[3] > 0]
    if not strata:
        raise ValueError("no prompt has samples on both paths")
    k = len(strata)
    estimate = sum(xs / ns - xb / nb for xb, nb, xs, ns in strata) / k
    var = 0.0
    for xb, nb, xs, ns in strata:
        pb, ps = (xb + 1) / (nb + 2), (xs + 1) / (ns + 2)
        var += pb * (1 - pb) / (nb + 2) + ps * (1 - ps) / (ns + 2)
    se = math.sqrt(var) / k
    seeds = min(min(nb, ns) for _, nb, _, ns in strata)
    diff = _difference(estimate, se, margin, alpha, seeds, "seeds")
    xb, nb, xs, ns = (sum(s[i] for s in strata) for i in range(4))
    return dataclasses.replace(
        diff, p_drop=_fisher(xs, ns, xb, nb, "less"), p_rise=_fisher(xs, ns, xb, nb, "greater")
    )


def _fisher(xs: int, ns: int, xb: int, nb: int, alternative: str) -> float:
    """One-sided Fisher exact p on the pooled counts: speculative ``less`` / ``greater``."""
    table = [[xs, ns - xs], [xb, nb - xb]]
    return float(stats.fisher_exact(table, alternative=alternative).pvalue)
