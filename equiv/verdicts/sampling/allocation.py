"""Where a sequential run spends its next seeds: on the prompts whose positions carry the pooled
tests' information, not on those where the target is all but certain of every token.

At a low temperature most positions of most prompts have a top token of probability near 1:
there the correct and any faulty sampler emit the same token, and a seed spent there tells
nothing about the sampler. The pooled temperature statistic (`equiv.verdicts.sampling.placebo.
quasi_tempering`) has, at every position, an information ``J`` that is a function of the row
alone (`tempering_information`): its sum over a prompt's placebo samples, per seed, says how
much one more seed of that prompt tells. After each look the next round goes to the fewest
prompts that together carry `KEEP` of the run's information per seed (at least `MIN_SHARE` of
the prompts); the others keep the seeds they have.

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

__all__ = ["KEEP", "MIN_SHARE", "information_per_seed", "informative"]

#: The share of the run's information per seed that the next round keeps.
KEEP = 0.9
#: The least share of the prompts the next round keeps (breadth: a fault that shows on few
#: prompts must still be sampled).
MIN_SHARE = 0.25


def information_per_seed(samples: Sequence[Sample], key: str) -> float | None:
    """The temperature statistic's information (`tempering_information`) over the placebo's
    samples of one prompt, per sample; None where the records lack the rows' derivatives
    (written before equiv recorded them, or not re-scored)."""
    if not samples:
        return None
    pits, _, sens = tokens_of(samples, "baseline", key)
    tops = top_derivatives(samples, "baseline", key)
    if sens is None or tops is None or len(sens) != len(pits):
        return None
    info = tempering_information(sens, pits[:, 2], tops) if len(pits) else np.zeros(0)
    return float(info.sum()) / len(samples)


def informative(by_prompt: Mapping[str, Sequence[Sample]], *, has_logits: bool) -> frozenset[str]:
    """The prompts of ``by_prompt`` (key -> the samples it has) that get the next round: the
    fewest, by information per seed, that carry `KEEP` of the total, and no fewer than
    `MIN_SHARE` of them; every prompt where any lacks the information (nothing to choose by)."""
    key = "chain_pit" if has_logits else "target_pit"
    rates = {prompt: information_per_seed(s, key) for prompt, s in by_prompt.items()}
    known = {prompt: r for prompt, r in rates.items() if r is not None}
    total = sum(known.values())
    if len(known) < len(rates) or total <= 0:
        return frozenset(by_prompt)
    least = math.ceil(MIN_SHARE * len(known))
    chosen: list[str] = []
    carried = 0.0
    for prompt, rate in sorted(known.items(), key=lambda kv: (-kv[1], kv[0])):
        if carried >= KEEP * total and len(chosen) >= least:
            break
        chosen.append(prompt)
        carried += rate
    return frozenset(chosen)
