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
E is a nonnegative martingale under H0, and by Ville's inequality ``P(sup E >= 1 / alpha) <=
alpha``: the p-value ``min(1, 1 / E)`` holds at every look and for any tails.

The temperature's output is not linear in k, and its score ``s`` is not bounded below by -1: a
bet on it had to be capped wherever some token's score was large, and mixing the exact
likelihood ratios of a grid of k instead paid Ville's price, about 3x the fixed-sample limit
(stop 54-55, CHANGELOG). A run's looks are Bonferroni-split already
(`equiv.verdicts.stats.sequential`), so each look may use a fixed-sample test, and the
temperature test is the score test ``T = S / sqrt(I)``, two-sided against the standard normal
(the martingale central limit theorem). A plain sum of the scores would not be one: at a row
near certainty a token of probability 1e-4 can score a hundred of its row's standard
deviations, no clipping changes that (a two-point score keeps its shape at any scale), and a
few such tokens would reject a correct sampler. So each position adds, by its row alone
(before its token is drawn):

- where its score is near-symmetric in the tails, ``ρ = E|s|³ / V^1.5 <= RHO`` under p (a
  normal's is 1.6, a two-point score at 1e-4 about 100): the score itself, ``s`` to S and its
  variance ``V`` to I, as long as those positions are many enough that their sum is near
  normal (Lyapunov's ratio ``Σ ρ V^1.5 / (Σ V)^1.5 <= LYAPUNOV``, about 100 positions or
  more; below, they too take the normal scores);
- elsewhere, as the pooled ``temperature`` test does
  (`equiv.verdicts.stats.one_sample.temperature_test`): the normal score of the token's
  randomized PIT, the row's tokens ranked by s (exactly N(0, 1) given the past under p),
  weighed by ``c = d/dk E_k[Φ⁻¹(u)]`` (its covariance with s), ``c Φ⁻¹(u)`` to S and ``c²``
  to I. A rare token then moves T by one Gaussian draw times a small weight.

Both parts have mean 0 and add ``(k - 1) I`` to S under a draft read at ``1 / k`` times its
temperature, to first order. The normal scores keep about two thirds of a row's information and
the score all of it (`benchmarks/score_efficiency.py`), so the score is kept wherever its tails
allow. The level is a normal approximation's: measured (`benchmarks/pooled_level.py --drafted`,
the tests), not proven.
Faults outside these three families are left to the omnibus tests
(`equiv.verdicts.sampling.pooled`).
"""

from __future__ import annotations

import dataclasses
import enum
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt
from scipy import stats
from scipy.special import logsumexp

from equiv.engines.acceptance_rules import Rule, output_distribution, wrong_temp_rows
from equiv.verdicts.stats import TestResult
from equiv.verdicts.stats.result import not_enough

if TYPE_CHECKING:  # samples reads what token_evidence, which scores with this module, writes
    from equiv.verdicts.sampling.samples import Sample

__all__ = [
    "BETS",
    "LYAPUNOV",
    "RHO",
    "Direction",
    "betting_test",
    "pit_intervals",
    "position_scores",
    "rule_tests",
    "score_rows",
    "score_test",
    "temperature_entry",
]

FloatArray = npt.NDArray[np.float64]

#: The bets λ the leak and relaxed tests' e-values mix, with equal weights: from the likelihood
#: ratio of the whole fault (1) down to faults 32 times milder.
BETS = (1.0, 0.5, 0.25, 0.125, 0.0625, 0.03125)
#: The finite difference in the exponent k of the draft's row, for its score.
STEP = 0.01
#: The temperature test sums the score itself at a position whose score's standardized third
#: absolute moment ``E|s|³ / V^1.5`` is at most this (a normal's is 1.6), and the normal
#: scores of its PIT elsewhere (module docstring).
RHO = 3.0
#: The most the scores summed may weigh in their third moments, Lyapunov's ratio ``Σ E|s|³ /
#: (Σ V)^1.5`` (a bound on the sum's skewness): above it, as in a run of few positions, every
#: position takes the normal scores (module docstring).
LYAPUNOV = 0.2


class Direction(str, enum.Enum):
    """A fault family's test, in the order a record's ``rule_score`` entry holds each one's
    numbers (`width`): for the leak and relaxed tests the token's score s, its variance V under
    p, and the lowest and highest score over p's support; for the temperature test its score,
    and its PIT and weight for the normal scores (`temperature_entry`)."""

    DRAFT_LEAK = "draft-leak"
    RELAXED = "relaxed-acceptance"
    DRAFT_TEMPERATURE = "draft-temperature"

    def __str__(self) -> str:
        return self.value

    @property
    def width(self) -> int:
        return 6 if self is Direction.DRAFT_TEMPERATURE else 4

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
    score for k; the test clips it, `temperature_scores`)."""
    live = p > 0
    up, down = wrong_temp_rows(p, q, (1.0 + STEP, 1.0 - STEP))
    slope = (up - down) / (2 * STEP)
    return (*_linear_scores(p, q), np.where(live, slope / np.where(live, p, 1.0), 0.0))


def pit_intervals(p: FloatArray, s: FloatArray) -> tuple[FloatArray, FloatArray]:
    """Over a support (p > 0 throughout) ranked by ``s`` (ties in index order), each token's
    interval of the randomized PIT ``u``: its lower end, and ``E[Φ⁻¹(u) | x]``, the normal's
    mean over it."""
    order = np.argsort(s, kind="stable")
    edges = np.clip(np.concatenate([[0.0], np.cumsum(p[order])]), 0.0, 1.0)
    dens = stats.norm.pdf(stats.norm.ppf(edges))
    width = np.diff(edges)
    lower, mean_z = np.empty_like(p), np.empty_like(p)
    lower[order] = edges[:-1]
    mean_z[order] = np.where(width > 0, (dens[:-1] - dens[1:]) / np.where(width > 0, width, 1), 0)
    return lower, mean_z


def temperature_entry(p: FloatArray, q: FloatArray, token: int) -> list[float]:
    """The temperature test's numbers at one position (p > 0 at ``token``): the emitted token's
    score s (centred: mean exactly 0 under p), its variance V and its standardized third
    absolute moment ``ρ = E|s|³ / V^1.5`` under p; and for the normal scores the token's
    ``[mass before, probability]`` (`pit_intervals`) and the weight ``c = Σ p(x) E[Φ⁻¹(u) |
    x] s(x)`` (module docstring)."""
    live = p > 0
    pl, s = p[live], score_rows(p, q)[2][live]
    s = s - pl @ s
    variance = float(pl @ s**2)
    rho = float(pl @ np.abs(s) ** 3) / variance**1.5 if variance > 0 else math.inf
    lower, mean_z = pit_intervals(pl, s)
    at = int(np.count_nonzero(live[:token]))
    c = float(pl @ (mean_z * s))
    return [float(s[at]), variance, min(rho, 1e12), float(lower[at]), float(pl[at]), c]


def position_scores(p: FloatArray, q: FloatArray, token: int | None) -> list[float]:
    """One judged position's `Direction` entries (`WIDTH` numbers): p and q over one support,
    ``token`` the emitted one's index in it (None, or p = 0 there: outside the chain's support,
    which the support test counts; its scores are 0 and its temperature weight)."""
    live = p > 0
    at = token if token is not None and live[token] else None
    out: list[float] = []
    for s in _linear_scores(p, q):
        values = s[live]
        score = float(s[at]) if at is not None else 0.0
        out += [score, float(p[live] @ values**2), float(values.min()), float(values.max())]
    # Outside the chain's support: no score, no weight (the support test's to count).
    out += temperature_entry(p, q, at) if at is not None else [0.0, 0.0, 0.0, 0.0, 1.0, 0.0]
    return [round(x, 12) for x in out]


def _log_products(entries: FloatArray) -> list[float]:
    """The logarithm of each bet's product over the positions (the leak and relaxed tests)."""
    s, low = entries[:, 0], entries[:, 2]
    logs = []
    for bet in BETS:  # a score is >= -1, so the cap binds only on rows whose lowest is below it
        lam = np.minimum(bet, 1.0 / np.maximum(-low, 1e-12))
        with np.errstate(divide="ignore"):
            logs.append(float(np.sum(np.log(np.maximum(1.0 + lam * s, 0.0)))))
    return logs


def betting_test(entries: FloatArray, direction: Direction, alpha: float) -> TestResult:
    """The leak's or relaxed acceptance's test on its entries (module docstring)."""
    name = str(direction)
    n = int(entries.shape[0])
    info = float(entries[:, 1].sum())
    if info <= 0.0:
        return not_enough(name, alpha, n, "no judged position where the direction moves p")
    log_e = float(logsumexp(_log_products(entries))) - math.log(len(BETS))
    p_value = min(1.0, math.exp(-log_e)) if log_e > -700 else 1.0
    effect = float(entries[:, 0].sum()) / info  # the score's estimate of e
    what = "leaked" if direction is Direction.DRAFT_LEAK else "relaxed"
    detail = (
        f"{n} judged positions; e-value {math.exp(min(log_e, 700)):.3g} (bets "
        f"{BETS[-1]:g}..{BETS[0]:g}, valid at every look); the score's estimate of the {what} "
        f"share e: {effect:+.3f} +- {1 / math.sqrt(info):.3f}"
    )
    return TestResult(name, log_e, p_value, alpha, n, None, None, effect, detail)


def score_test(entries: FloatArray, alpha: float, rng: np.random.Generator) -> TestResult:
    """The temperature's test on its entries, the PITs randomized by ``rng`` (module
    docstring): ``T = S / sqrt(I)`` two-sided, with ``S = Σ s + Σ c Φ⁻¹(u)`` and ``I = Σ V +
    Σ c²``, the score where ``ρ <= RHO`` (unless those positions' Lyapunov ratio is above
    `LYAPUNOV`) and the normal scores elsewhere; its effect the estimate of ``k - 1``, ``S /
    I``. Below ``I = 1`` there is no test, as for the pooled
    ``temperature`` test."""
    name = str(Direction.DRAFT_TEMPERATURE)
    n = int(entries.shape[0])
    s, variance, rho, before, width, c = entries.T
    u = np.clip(before + rng.random(n) * width, 1e-16, 1.0 - 1e-16)
    raw = rho <= RHO
    third = float(rho[raw] @ variance[raw] ** 1.5)
    if third > LYAPUNOV * float(variance[raw].sum()) ** 1.5:  # too few to sum: none
        raw[:] = False
    total = float(s[raw].sum() + c[~raw] @ stats.norm.ppf(u[~raw]))
    info = float(variance[raw].sum() + c[~raw] @ c[~raw])
    if info < 1.0:
        return not_enough(name, alpha, n, f"information {info:.2f} < 1: near-certain positions")
    t = total / math.sqrt(info)
    effect = total / info
    detail = (
        f"{n} judged positions; score test T = {t:+.2f} (two-sided, normal; the score at "
        f"{int(raw.sum())} positions, the normal scores of its PIT at {n - int(raw.sum())} "
        f"whose score is skewed); the estimate of k - 1, the draft read at 1 / k times its "
        f"temperature: {effect:+.3f} +- {1 / math.sqrt(info):.3f}"
    )
    p_value = float(2.0 * stats.norm.sf(abs(t)))
    return TestResult(name, t, p_value, alpha, n, None, None, effect, detail)


def _test(entries: FloatArray, direction: Direction, alpha: float, seed: int) -> TestResult:
    if direction is Direction.DRAFT_TEMPERATURE:
        return score_test(entries, alpha, np.random.default_rng(seed))
    return betting_test(entries, direction, alpha)


def rule_tests(records: Sequence[Sample], alpha: float, seed: int) -> list[TestResult]:
    """Each `Direction`'s test over every speculative sample's judged positions, named
    ``<direction>:pooled`` (the temperature's PITs randomized from ``seed``); none without
    judgements, and no data where some samples lack them (a file written before equiv
    recorded them)."""
    rows = [r.speculative.rule_scores for r in records]
    if all(r is None for r in rows):
        return []  # an engine without judgements
    stale = sum(r is None or any(len(e) != WIDTH for e in r) for r in rows)
    if stale:  # a run resumed from a file written before equiv recorded these scores
        why = f"{stale} of {len(rows)} samples without the draft's rows' scores (an older file)"
        return [not_enough(f"{d}:pooled", alpha, 0, why) for d in Direction]
    entries = np.asarray([e for r in rows if r for e in r], dtype=np.float64).reshape(-1, WIDTH)
    return [
        dataclasses.replace(_test(entries[:, d.columns], d, alpha, seed), name=f"{d}:pooled")
        for d in Direction
    ]
