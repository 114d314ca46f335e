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
  is the derivative ``d out(x) / dk / p(x)`` at k = 1 (either sign), for the estimate of k.

All three scores have mean exactly 0 under p at every position given its past, whatever q is, so
over all judged positions of all samples they are martingale differences. The leak and relaxed
tests bet on their scores: ``E = mean_λ prod_t (1 + λ s_t)`` over a grid of bets λ <= 1 (a
score is >= -1, so no factor is negative); ``1 + λ s`` is then exactly the likelihood ratio of
``(1 - λ) p + λ out`` (at λ = 1 the relaxed test's product is that of full relaxed acceptance).
The temperature's output is not linear in k, and a bet on its score would have to be capped
wherever a token's score is large (p tiny): the test mixes instead the exact likelihood ratios
``out_k(x) / p(x)`` over a grid of exponents k (`EXPONENTS`), each one's factor >= 0 with mean 1
under p. Either way E is a nonnegative martingale under H0, and by Ville's inequality
``P(sup E >= 1 / alpha) <= alpha``: the p-value ``min(1, 1 / E)`` holds at every look and for
any tails, with no normal approximation. Faults outside these three families are left to the
omnibus tests (`equiv.verdicts.sampling.pooled`).
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

from equiv.engines.acceptance_rules import Rule, output_distribution, wrong_temp_outputs
from equiv.verdicts.stats import TestResult
from equiv.verdicts.stats.result import not_enough

if TYPE_CHECKING:  # samples reads what token_evidence, which scores with this module, writes
    from equiv.verdicts.sampling.samples import Sample

__all__ = [
    "BETS",
    "EXPONENTS",
    "Direction",
    "betting_test",
    "position_scores",
    "rule_tests",
    "score_rows",
]

FloatArray = npt.NDArray[np.float64]

#: The bets λ the leak and relaxed tests' e-values mix, with equal weights: from the likelihood
#: ratio of the whole fault (1) down to faults 32 times milder.
BETS = (1.0, 0.5, 0.25, 0.125, 0.0625, 0.03125)
#: The exponents k of the draft's row whose exact likelihood ratios the temperature test mixes,
#: with equal weights: ``2 ** ±e``, the draft read at 4 times its temperature (or a quarter of
#: it) down to 2 % off, each a factor 2 from the next in log k (for a mild fault, the nearest
#: is at most a factor 1.41 from it in log k and keeps 83 % of the evidence per token or more).
EXPONENTS = tuple(
    2.0 ** (sign * e) for e in (2, 1, 1 / 2, 1 / 4, 1 / 8, 1 / 16, 1 / 32) for sign in (-1, 1)
)
#: The finite difference in the exponent k of the draft's row, for its score.
STEP = 0.01
#: The null's share in each likelihood ratio's factor, ``(1 - FLOOR) out_k / p + FLOOR``: a
#: factor of exactly 0 (a token out_k cannot emit) would have no logarithm in the record.
FLOOR = 1e-9


class Direction(str, enum.Enum):
    """A fault family's test, in the order a record's ``rule_score`` entry holds each one's
    numbers (`width`): for the leak and relaxed tests the token's score s, its variance V under
    p, and the lowest and highest score over p's support; for the temperature test the logarithm
    of each exponent's factor (`EXPONENTS`)."""

    DRAFT_LEAK = "draft-leak"
    RELAXED = "relaxed-acceptance"
    DRAFT_TEMPERATURE = "draft-temperature"

    def __str__(self) -> str:
        return self.value

    @property
    def width(self) -> int:
        return len(EXPONENTS) if self is Direction.DRAFT_TEMPERATURE else 4

    @property
    def columns(self) -> slice:
        """Where this direction's numbers lie in a judged position's entry."""
        order = list(Direction)
        start = sum(d.width for d in order[: order.index(self)])
        return slice(start, start + self.width)


#: How many numbers a judged position's ``rule_score`` entry holds.
WIDTH = sum(d.width for d in Direction)


def _linear_scores(p: FloatArray, q: FloatArray) -> tuple[FloatArray, FloatArray]:
    """The leak's and relaxed acceptance's scores over one support (0 where p is 0)."""
    live = p > 0
    safe = np.where(live, p, 1.0)
    inside = float(q[live].sum())  # 0: q lives outside p's support, all of it the support test's
    leak = q / (inside * safe) - 1.0 if inside > 0 else np.zeros_like(p)
    # With one token left in p's support the "second most probable" would be one p cannot emit
    # (the support test's to count): there relaxed acceptance is the correct rule.
    relaxed = output_distribution(Rule.TOP2, p, q) - p if live.sum() > 1 else np.zeros_like(p)
    return np.where(live, leak, 0.0), np.where(live, relaxed / safe, 0.0)


def score_rows(p: FloatArray, q: FloatArray) -> tuple[FloatArray, FloatArray, FloatArray]:
    """Each `Direction`'s score at every token of one support (p and q over it; 0 where p is
    0): ``q' / p - 1``, ``out_top2 / p - 1``, and the derivative of the wrong-temperature rule's
    output in the exponent k of the draft's row at k = 1, over p (the locally most powerful
    score, which the temperature test itself does not bet on: module docstring)."""
    live = p > 0
    shifted = []
    for k in (1.0 + STEP, 1.0 - STEP):
        qk = np.where(q > 0, np.power(q, k), 0.0)
        shifted.append(output_distribution(Rule.WRONG_TEMP, p, q, q_wrong=qk / qk.sum()))
    slope = (shifted[0] - shifted[1]) / (2 * STEP)
    return (*_linear_scores(p, q), np.where(live, slope / np.where(live, p, 1.0), 0.0))


def position_scores(p: FloatArray, q: FloatArray, token: int | None) -> list[float]:
    """One judged position's `Direction` entries (`WIDTH` numbers): p and q over one support,
    ``token`` the emitted one's index in it (None, or p = 0 there: outside the chain's support,
    which the support test counts; its scores are 0 and its factors 1)."""
    live = p > 0
    at = token if token is not None and live[token] else None
    out: list[float] = []
    for s in _linear_scores(p, q):
        values = s[live]
        score = float(s[at]) if at is not None else 0.0
        out += [score, float(p[live] @ values**2), float(values.min()), float(values.max())]
    if at is not None:
        ratio = wrong_temp_outputs(p, q, EXPONENTS, at) / p[at]
        out += [float(x) for x in np.log((1.0 - FLOOR) * ratio + FLOOR)]
    else:
        out += [0.0] * len(EXPONENTS)
    return [round(x, 12) for x in out]


def _log_products(entries: FloatArray, direction: Direction) -> list[float]:
    """The logarithm of each alternative's product over the positions: bets on the score for
    the leak and relaxed tests, exact likelihood ratios for the temperature test."""
    if direction is Direction.DRAFT_TEMPERATURE:
        return [float(x) for x in entries.sum(axis=0)]
    s, low = entries[:, 0], entries[:, 2]
    logs = []
    for bet in BETS:  # a score is >= -1, so the cap binds only on rows whose lowest is below it
        lam = np.minimum(bet, 1.0 / np.maximum(-low, 1e-12))
        with np.errstate(divide="ignore"):
            logs.append(float(np.sum(np.log(np.maximum(1.0 + lam * s, 0.0)))))
    return logs


def betting_test(entries: FloatArray, direction: Direction, alpha: float) -> TestResult:
    """The test of one direction on its entries (module docstring)."""
    name = str(direction)
    n = int(entries.shape[0])
    temperature = direction is Direction.DRAFT_TEMPERATURE
    # A factor of 1 everywhere (temperature), or no variance (a linear score), moves nothing.
    moves = np.any(entries != 0.0) if temperature else entries[:, 1].sum() > 0.0
    if not moves:
        return not_enough(name, alpha, n, "no judged position where the direction moves p")
    logs = _log_products(entries, direction)
    log_e = float(logsumexp(logs)) - math.log(len(logs))
    p_value = min(1.0, math.exp(-log_e)) if log_e > -700 else 1.0
    e_value = f"e-value {math.exp(min(log_e, 700)):.3g}"
    if temperature:  # the likeliest exponent of the grid
        best = EXPONENTS[int(np.argmax(logs))]
        effect = best - 1.0
        detail = (
            f"{n} judged positions; {e_value} (likelihood ratios of q ** k at k = 2 ** "
            f"+-{1 / 32:g}..{max(EXPONENTS):g}, valid at every look); the likeliest k: "
            f"{best:.3g}, the draft read at {1 / best:.3g} times its temperature"
        )
    else:
        info = float(entries[:, 1].sum())
        effect = float(entries[:, 0].sum()) / info  # the score's estimate of e
        what = "leaked" if direction is Direction.DRAFT_LEAK else "relaxed"
        detail = (
            f"{n} judged positions; {e_value} (bets {BETS[-1]:g}..{BETS[0]:g}, valid at every "
            f"look); the score's estimate of the {what} share e: {effect:+.3f} "
            f"+- {1 / math.sqrt(info):.3f}"
        )
    return TestResult(name, log_e, p_value, alpha, n, None, None, effect, detail)


def rule_tests(records: Sequence[Sample], alpha: float) -> list[TestResult]:
    """Each `Direction`'s test over every speculative sample's judged positions, named
    ``<direction>:pooled``; none without judgements, and no data where some samples lack them
    (a file written before equiv recorded them)."""
    rows = [r.speculative.rule_scores for r in records]
    if all(r is None for r in rows):
        return []  # an engine without judgements
    stale = sum(r is None or any(len(e) != WIDTH for e in r) for r in rows)
    if stale:  # a run resumed from a file written before equiv recorded these scores
        why = f"{stale} of {len(rows)} samples without the draft's rows' scores (an older file)"
        return [not_enough(f"{d}:pooled", alpha, 0, why) for d in Direction]
    entries = np.asarray([e for r in rows if r for e in r], dtype=np.float64).reshape(-1, WIDTH)
    return [
        dataclasses.replace(betting_test(entries[:, d.columns], d, alpha), name=f"{d}:pooled")
        for d in Direction
    ]
