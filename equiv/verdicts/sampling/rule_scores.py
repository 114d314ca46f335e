"""Tests aimed at a rejection sampler's wrong acceptance rule, from the draft's rows: the pooled
``draft-leak``, ``relaxed-acceptance`` and ``draft-temperature`` tests.

At a position where the draft proposed a token from its row q and the target's row is p, a
verifier with rule R emits from ``out_R(p, q)`` (`equiv.engines.acceptance_rules`); the correct
rule emits from p. Three families of faults that happen, each a direction away from p:

- a draft leak: some of the draft's distribution reaches the output, ``(1 - e) p + e q``. A
  residual without its clamp is one at e = 1/2 (``no_max``: ``min(p, q) + |p - q| / 2`` is
  ``(p + q) / 2``), as is any path that emits unverified draft tokens some of the time. Its
  score is ``s = q'(x) / p(x) - 1``, q' being q within p's support, renormalised (the draft's
  mass outside it is the support test's to count): locally most powerful against the leak, and
  at λ = e its bet's factor is the leak's likelihood ratio (up to that renormalisation);
- relaxed acceptance: the draft token is accepted whenever it is one of the target's two most
  probable tokens (TensorRT-LLM's "relaxed acceptance" for MTP heads, lossy by design). Its
  score is ``s = out_top2(x) / p(x) - 1``, locally most powerful against emitting
  ``(1 - e) p + e out_top2``, and at e = 1 the likelihood ratio itself;
- a wrong draft temperature: the ratio ``p / q`` and the residual read the draft's row at
  another temperature than the one it proposed at, ``q ** k`` normalised (temperature comes
  last in llama.cpp's chain, so that is the row at ``1 / k`` times its temperature). Its score
  is the derivative ``d out(x) / dk / p(x)`` at k = 1 (either sign).

All three have mean exactly 0 under p at every position given its past, whatever q is, so over all
judged positions of all samples they are martingale differences. Each test bets on its score:
``E = mean_λ prod_t (1 + λ_t s_t)`` over a grid of bets λ, each capped where a position's lowest
(or highest) score would make a factor negative, is a nonnegative martingale under H0, and by
Ville's inequality ``P(sup E >= 1 / alpha) <= alpha``: the p-value ``min(1, 1 / E)`` holds at
every look and for any tails of s, with no normal approximation. At λ = 1 the relaxed test's
product is the likelihood ratio of full relaxed acceptance. Faults outside these three families
are left to the omnibus tests (`equiv.verdicts.sampling.pooled`).
"""

from __future__ import annotations

import dataclasses
import enum
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt
from scipy.special import logsumexp

from equiv.engines.acceptance_rules import Rule, output_distribution
from equiv.verdicts.stats import TestResult
from equiv.verdicts.stats.result import not_enough

if TYPE_CHECKING:  # samples reads what token_evidence, which scores with this module, writes
    from equiv.verdicts.sampling.samples import Sample

__all__ = ["BETS", "Direction", "betting_test", "position_scores", "rule_tests", "score_rows"]

FloatArray = npt.NDArray[np.float64]

#: The bets λ the e-value mixes, with equal weights (and their negatives where a test is
#: two-sided): from the likelihood ratio of the whole fault (1) down to faults 32 times milder.
BETS = (1.0, 0.5, 0.25, 0.125, 0.0625, 0.03125)
#: The finite difference in the exponent k of the draft's row.
STEP = 0.01


class Direction(str, enum.Enum):
    """A fault family's score, in the order a record's ``rule_score`` entry holds each one's
    ``(s, V, lowest, highest)``: the token's score, its variance under p, and the lowest and
    highest score over p's support."""

    DRAFT_LEAK = "draft-leak"
    RELAXED = "relaxed-acceptance"
    DRAFT_TEMPERATURE = "draft-temperature"

    def __str__(self) -> str:
        return self.value

    @property
    def two_sided(self) -> bool:
        return self is Direction.DRAFT_TEMPERATURE


def score_rows(p: FloatArray, q: FloatArray) -> tuple[FloatArray, FloatArray, FloatArray]:
    """Each `Direction`'s score at every token of one support (p and q over it; 0 where p is
    0): ``q' / p - 1``, ``out_top2 / p - 1``, and the derivative of the wrong-temperature rule's
    output in the exponent k of the draft's row at k = 1, over p."""
    live = p > 0
    safe = np.where(live, p, 1.0)
    inside = float(q[live].sum())  # 0: q lives outside p's support, all of it the support test's
    leak = q / (inside * safe) - 1.0 if inside > 0 else np.zeros_like(p)
    shifted = []
    for k in (1.0 + STEP, 1.0 - STEP):
        qk = np.where(q > 0, np.power(q, k), 0.0)
        shifted.append(output_distribution(Rule.WRONG_TEMP, p, q, q_wrong=qk / qk.sum()))
    # With one token left in p's support the "second most probable" would be one p cannot emit
    # (the support test's to count): there relaxed acceptance is the correct rule.
    relaxed = output_distribution(Rule.TOP2, p, q) - p if live.sum() > 1 else np.zeros_like(p)
    slope = (shifted[0] - shifted[1]) / (2 * STEP)
    return (
        np.where(live, leak, 0.0),
        np.where(live, relaxed / safe, 0.0),
        np.where(live, slope / safe, 0.0),
    )


def position_scores(p: FloatArray, q: FloatArray, token: int | None) -> list[float]:
    """``(s, V, lowest, highest)`` of each `Direction` at one judged position: p and q over
    one support, ``token`` the emitted one's index in it (None, or p = 0 there: outside the
    chain's support, which the support test counts; its scores are 0)."""
    live = p > 0
    out: list[float] = []
    for s in score_rows(p, q):
        at = float(s[token]) if token is not None and live[token] else 0.0
        values = s[live]
        out += [at, float(p[live] @ values**2), float(values.min()), float(values.max())]
    return [round(x, 12) for x in out]


def betting_test(entries: FloatArray, direction: Direction, alpha: float) -> TestResult:
    """The test of one direction on its ``(s, V, lowest, highest)`` rows (module docstring)."""
    name = str(direction)
    n = int(entries.shape[0])
    info = float(entries[:, 1].sum()) if n else 0.0
    if info <= 0.0:
        return not_enough(name, alpha, n, "no judged position where the direction moves p")
    s, low, high = entries[:, 0], entries[:, 2], entries[:, 3]
    logs = []
    for bet in BETS + (tuple(-b for b in BETS) if direction.two_sided else ()):
        worst = -low if bet > 0 else high  # the factor's lowest is 1 - |λ| worst
        lam = np.sign(bet) * np.minimum(abs(bet), 1.0 / np.maximum(worst, 1e-12))
        with np.errstate(divide="ignore"):
            logs.append(float(np.sum(np.log(np.maximum(1.0 + lam * s, 0.0)))))
    log_e = float(logsumexp(logs)) - math.log(len(logs))
    p_value = min(1.0, math.exp(-log_e)) if log_e > -700 else 1.0
    effect = float(s.sum()) / info  # the score's estimate of e (leak, relaxed) or k - 1
    what = {
        Direction.DRAFT_LEAK: "the leaked share e",
        Direction.RELAXED: "the relaxed share e",
        Direction.DRAFT_TEMPERATURE: "k - 1 of q ** k",
    }[direction]
    detail = (
        f"{n} judged positions; e-value {math.exp(min(log_e, 700)):.3g} (bets "
        f"{'+-' if direction.two_sided else ''}{BETS[-1]:g}..{BETS[0]:g}, valid at every look); "
        f"the score's estimate of {what}: {effect:+.3f} +- {1 / math.sqrt(info):.3f}"
    )
    return TestResult(name, log_e, p_value, alpha, n, None, None, effect, detail)


def rule_tests(records: Sequence[Sample], alpha: float) -> list[TestResult]:
    """Each `Direction`'s test over every speculative sample's judged positions, named
    ``<direction>:pooled``; none without judgements, and no data where some samples lack them
    (a file written before equiv recorded them)."""
    rows = [r.speculative.rule_scores for r in records]
    if all(r is None for r in rows):
        return []  # an engine without judgements
    width = 4 * len(Direction)
    stale = sum(r is None or any(len(e) != width for e in r) for r in rows)
    if stale:  # a run resumed from a file written before equiv recorded these scores
        why = f"{stale} of {len(rows)} samples without the draft's rows' scores (an older file)"
        return [not_enough(f"{d}:pooled", alpha, 0, why) for d in Direction]
    entries = np.asarray([e for r in rows if r for e in r], dtype=np.float64).reshape(-1, width)
    return [
        dataclasses.replace(
            betting_test(entries[:, 4 * i : 4 * i + 4], d, alpha), name=f"{d}:pooled"
        )
        for i, d in enumerate(Direction)
    ]
