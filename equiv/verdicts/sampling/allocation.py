"""Where a sequential run spends its next seeds: on the prompts whose positions carry the pooled
tests' information, not on those where the target is all but certain of every token.

At a low temperature most positions of many prompts have a top token of probability near 1:
there the correct and any faulty sampler emit the same token, and a token spent there tells
nothing about the sampler. The pooled temperature statistic (`equiv.verdicts.sampling.placebo.
quasi_tempering`) has, at every position, an information ``J`` that is a function of the row
alone (`tempering_information`). A token costs about the same time on any prompt, so a prompt's
``J`` per token over its placebo samples (`information_per_token`) says how much a second of
sampling it tells. After each look the next round goes to the prompts that tell at least the
run's mean per token, and to no fewer than `MIN_SHARE` of the prompts (the best); the others
keep the seeds they have.

The choice reads only the placebo's (the baseline's) samples already in the file, and only their
rows, never a residual: each new seed is a fresh draw whose residuals have mean 0 given
everything before, so the pooled sums stay martingales and every look's test keeps its level
(`benchmarks/pooled_level.py --allocate`). It is a pure function of the file, so a resumed run
chooses as the interrupted one did.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from equiv.verdicts.sampling.pit_tests import tokens_of, top_derivatives
from equiv.verdicts.sampling.placebo import tempering_information
from equiv.verdicts.sampling.samples import Sample

__all__ = ["MIN_SHARE", "information", "information_per_token", "informative"]

#: The least share of the prompts the next round keeps (breadth: a fault that shows on few
#: prompts must still be sampled).
MIN_SHARE = 0.25


def information(samples: Sequence[Sample], key: str) -> tuple[float, int] | None:
    """The temperature statistic's information (`tempering_information`) summed over the
    placebo's samples of one prompt, and their tokens; None where the records lack the rows'
    derivatives (written before equiv recorded them, or not re-scored)."""
    if not samples:
        return None
    pits, _, sens = tokens_of(samples, "baseline", key)
    tops = top_derivatives(samples, "baseline", key)
    if sens is None or tops is None or len(sens) != len(pits):
        return None
    info = tempering_information(sens, pits[:, 2], tops) if len(pits) else np.zeros(0)
    return float(info.sum()), len(pits)


def information_per_token(samples: Sequence[Sample], key: str) -> float | None:
    """`information` per placebo token (0 where the samples are empty); None where unknown."""
    found = information(samples, key)
    return None if found is None else _per_token(found)


def _per_token(found: tuple[float, int]) -> float:
    total, tokens = found
    return total / tokens if tokens else 0.0


def informative(by_prompt: Mapping[str, Sequence[Sample]], *, has_logits: bool) -> frozenset[str]:
    """The prompts of ``by_prompt`` (key -> the samples it has) that get the next round: those
    whose information per token is at least the run's (all prompts' information over all their
    tokens), and no fewer than `MIN_SHARE` of them, the best first; every prompt where any lacks
    the information or none has any (nothing to choose by)."""
    key = "chain_pit" if has_logits else "target_pit"
    found = {prompt: information(s, key) for prompt, s in by_prompt.items()}
    known = {prompt: f for prompt, f in found.items() if f is not None}
    total = sum(f[0] for f in known.values())
    tokens = sum(f[1] for f in known.values())
    if len(known) < len(found) or total <= 0 or tokens == 0:
        return frozenset(by_prompt)
    rate = {prompt: _per_token(f) for prompt, f in known.items()}
    ranked = sorted(rate, key=lambda prompt: (-rate[prompt], prompt))
    least = math.ceil(MIN_SHARE * len(ranked))
    mean = total / tokens
    return frozenset(p for i, p in enumerate(ranked) if i < least or rate[p] >= mean)
