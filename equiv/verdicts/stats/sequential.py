"""Looks at a prompt's seeds as they accumulate: a group-sequential design with alpha spending.

With ``looks`` > 1 the seed budget is spent in rounds. After each round every prompt still
running is judged on the seeds it has; a conclusive verdict stops it, and the last look judges
what is left. Each look ``k`` tests at its own share ``alpha_k`` of the prompt's level with
``sum(alpha_k) = alpha``, so by the union bound the chance that *any* look rejects a true null
is at most ``alpha``, whatever the looks saw and whenever a prompt stopped (Bonferroni over
looks: valid under optional stopping without assuming how the looks' statistics correlate).
Half the level is kept for the last look, so a prompt that runs to the end loses little power
against a fixed-size test; the other half is split equally among the earlier looks.

A look stops a prompt only on a verdict more seeds cannot overturn by the same rules:
`sampler-bug`, `misconfiguration` or `equivalent` (`stops`). `numeric-drift` at an early look
is a rejection whose cause more seeds may yet show to be the sampler's (on simulated prompts a
sampler 18 % too cold was first labelled so at 16 of 100 early stops), so the prompt runs on,
and the last look's verdict stands. Running on after a rejection keeps the level: the union
bound covers every look, judged or not.

The rounds double: with a budget of 600 seeds and 4 looks, the looks come at 75, 150, 300 and
600 seeds. A look never has fewer than `MIN_SEEDS` seeds (a smaller budget has fewer looks),
except in a run pooled over several prompts (`run_schedule`): its first looks may come at fewer
seeds a prompt, as long as the pooled look has `MIN_POOLED` samples; only the run is judged
there, each prompt on its own from its first look with `MIN_SEEDS` seeds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from equiv.errors import ConfigError
from equiv.json_types import JSONDict, JSONObject
from equiv.records.codec import OMIT, decode, encode
from equiv.records.verdict import Label

__all__ = [
    "MIN_POOLED",
    "MIN_SEEDS",
    "STOPPING_LABELS",
    "Look",
    "Stopping",
    "run_schedule",
    "schedule",
    "stops",
]

#: The fewest seeds a look judges a prompt on: below this no test of ours has useful power.
MIN_SEEDS = 8
#: The fewest samples, over all its prompts, that a pooled run's first look judges the run on.
MIN_POOLED = 32


@dataclass(frozen=True)
class Look:
    """The ``index``-th of ``of`` looks (1-based): it judges the first ``seeds`` seeds of a
    prompt at ``share`` of the prompt's level."""

    index: int
    of: int
    seeds: int
    share: float

    @property
    def last(self) -> bool:
        return self.index == self.of


#: The verdicts that stop a prompt at an early look.
STOPPING_LABELS = frozenset({Label.SAMPLER_BUG, Label.MISCONFIGURATION, Label.EQUIVALENT})


def stops(label: Label, look: Look) -> bool:
    """Whether a prompt judged ``label`` at ``look`` stops there (the last look always does)."""
    return look.last or label in STOPPING_LABELS


def schedule(budget: int, looks: int, *, least: int = MIN_SEEDS) -> tuple[Look, ...]:
    """The looks of a prompt given ``budget`` seeds at most and ``looks`` looks at most, none
    with fewer than ``least`` seeds but the budget itself."""
    if budget < 1:
        raise ConfigError(f"seeds={budget} must be >= 1")
    if looks < 1:
        raise ConfigError(f"looks={looks} must be >= 1 (1: a fixed-size test of every seed)")
    sizes: list[int] = []
    for k in range(looks, 0, -1):  # from the last look back, halving
        n = -(-budget // 2 ** (k - 1))
        if (n >= least or n == budget) and (not sizes or n > sizes[-1]):
            sizes.append(n)
    if len(sizes) == 1:
        return (Look(1, 1, budget, 1.0),)
    early = 0.5 / (len(sizes) - 1)
    return tuple(
        Look(i + 1, len(sizes), n, 0.5 if i == len(sizes) - 1 else early)
        for i, n in enumerate(sizes)
    )


def run_schedule(budget: int, looks: int, prompts: int, *, pooled: bool) -> tuple[Look, ...]:
    """The looks of a sampling run of ``prompts`` prompts: a prompt's (`schedule`), except that
    a run pooled over several prompts may look first at as few as 2 seeds a prompt, where that
    gives the pooled look `MIN_POOLED` samples (24 prompts: from 2 seeds; 4 prompts: from 8).
    A prompt is judged on its own only at looks with `MIN_SEEDS` seeds (and the last)."""
    least = MIN_SEEDS
    if pooled and prompts > 1:
        least = max(2, min(MIN_SEEDS, math.ceil(MIN_POOLED / prompts)))
    return schedule(budget, looks, least=least)


@dataclass(frozen=True)
class Stopping:
    """Why a sequential prompt stopped where it did, as its analysis records it.

    look / looks: the look that decided and how many were planned; seeds / budget: the seeds
    judged and the most allowed; alpha: the level of the deciding look; conclusive: whether it
    stopped on a verdict of `STOPPING_LABELS` (else the budget was spent); paused: the run
    gave its seeds after this look to more informative prompts (`equiv.run.looks`)."""

    look: int
    looks: int
    seeds: int
    budget: int
    alpha: float
    conclusive: bool
    paused: bool = field(default=False, metadata={OMIT: False})

    @property
    def reason(self) -> str:
        why = "conclusive" if self.conclusive else "paused" if self.paused else "budget spent"
        return (
            f"stopped at look {self.look} of {self.looks} after {self.seeds} of {self.budget} "
            f"seeds ({why}; this look tests at alpha {self.alpha:.3g})"
        )

    def to_dict(self) -> JSONDict:
        return encode(self)

    @classmethod
    def from_dict(cls, data: JSONObject) -> Stopping:
        return decode(cls, data, "stopping")
