"""Speculative-decoding acceptance rules, correct and faulty, and their exact one-step output.

One step: the draft proposes ``x ~ q``; the verifier accepts it with probability ``a(x)``;
otherwise it draws from a residual distribution ``r``. The emitted token's distribution is then,
exactly (no sampling)::

    out(y) = q(y) a(y) + (1 - sum_x q(x) a(x)) r(y)

`output_distribution` evaluates this formula with the very `accept_probability` / `residual`
functions a sampling engine calls, so an engine built on them is tested by the same code.

The correct rule (Leviathan, Kalman & Matias 2023, "Fast Inference from Transformers via
Speculative Decoding", ICML, arXiv:2211.17192; Chen et al. 2023, "Accelerating Large Language
Model Decoding with Speculative Sampling", arXiv:2302.01318) is ``a(x) = min(1, p(x) / q(x))``,
``r = norm(max(0, p - q))``; then ``out = min(p, q) + TV(p, q) r = p``. The other rules are
plausible bugs, kept so the detectors can be shown to catch them:

==============  =======================================  ========================================
rule            acceptance ``a(x)``                      residual ``r``
==============  =======================================  ========================================
``correct``     ``min(1, p(x) / q(x))``                  ``norm(max(0, p - q))``
``greedy``      ``1`` iff ``x == argmax p``              ``p`` (resample from the target)
``no_max``      ``min(1, p(x) / q(x))``                  ``|p - q| / sum |p - q|``
``no_norm``     ``min(1, p(x) / q(x))``                  ``max(0, p - q)`` walked unnormalised
``wrong_temp``  ``min(1, p(x) / q_wrong(x))``            ``norm(max(0, p - q_wrong))``
``top2``        ``1`` iff ``x`` in the two largest p     ``norm(max(0, p - q))``
``off_by_one``  ``min(1, p_wrong(x) / q(x))``            ``norm(max(0, p_wrong - q))``
==============  =======================================  ========================================

Details of the faults:

- ``greedy``: accepting the draft only when it is the target's argmax, as a temp-0 verifier
  does, while still sampling at temp > 0, and on rejection resampling from the target row: the
  naive extension of greedy verification. Output ``q(a) e_a + (1 - q(a)) p`` with ``a = argmax
  p``: biased toward the target's favourite token by ``q(a)(1 - p(a))``, most when the draft
  agrees with it. Ties in ``argmax p`` go to the lowest id.
- ``no_max``: the residual ``p - q`` without the clamp, made non-negative with ``abs()`` so the
  sampler accepts it. Output ``min(p, q) + |p - q| / 2``, which is ``TV(p, q) / 2`` away from p.
- ``no_norm``: a uniform ``u`` in [0, 1) is walked through ``cumsum(max(0, p - q))``, whose
  total is only ``TV(p, q)``; the walk picks the first ``i`` with ``cumsum_i > u``, and when it
  runs off the end (probability ``1 - TV``) the loop's fall-through returns the last token id.
  `residual` returns the distribution of that walk: ``max(0, p - q)`` plus ``1 - TV`` on the
  last id. Output ``p - (1 - TV)(max(0, p - q) - TV e_last)``: the fault is invisible exactly
  when all of ``max(0, p - q)`` sits on the last id.
- ``wrong_temp``: proposals come from ``q`` (the draft at its real temperature) but the ratio
  and residual use ``q_wrong``, the draft's probabilities at another temperature.
- ``top2``: "relaxed acceptance": accept iff ``x`` is one of the target's two most probable
  tokens (ties to the lower id), reject otherwise.
- ``off_by_one``: the verifier reads the target row of the previous position, ``p_wrong``;
  the output is exactly ``p_wrong``.

Where a residual is all zero (``p == q``), rejection has probability 0 and the residual falls
back to the target row (``p``, or ``p_wrong`` for ``off_by_one``) so that it is a distribution.
Inputs are probability vectors over the same vocabulary; each is checked (finite, >= 0, sum
within 1e-3 of 1) and renormalised in float64.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from equiv.errors import ConfigError

__all__ = [
    "Rule",
    "accept_probability",
    "output_distribution",
    "residual",
    "total_variation",
    "wrong_temp_outputs",
]

FloatArray = npt.NDArray[np.float64]


class Rule(enum.Enum):
    """An acceptance rule; ``Rule("greedy")`` parses the string form."""

    CORRECT = "correct"
    GREEDY = "greedy"
    NO_MAX = "no_max"
    NO_NORM = "no_norm"
    WRONG_TEMP = "wrong_temp"
    TOP2 = "top2"
    OFF_BY_ONE = "off_by_one"

    def __str__(self) -> str:
        return self.value


def _dist(name: str, x: npt.ArrayLike, size: int | None = None) -> FloatArray:
    v = np.array(x, dtype=np.float64)
    if v.ndim != 1 or v.size == 0:
        raise ValueError(f"{name} must be one non-empty probability vector, got shape {v.shape}")
    if size is not None and v.size != size:
        raise ValueError(f"{name} has {v.size} entries but p has {size}; use one vocabulary")
    if not np.isfinite(v).all() or v.min() < 0.0:
        raise ValueError(f"{name} has negative or non-finite entries; pass probabilities")
    total = float(v.sum())
    if abs(total - 1.0) > 1e-3:
        raise ValueError(f"{name} sums to {total!r}, not 1; pass probabilities, not logits")
    out: FloatArray = v / total
    return out


def _rows(
    rule: Rule,
    p: npt.ArrayLike,
    q: npt.ArrayLike,
    q_wrong: npt.ArrayLike | None,
    p_wrong: npt.ArrayLike | None,
) -> tuple[FloatArray, FloatArray, FloatArray]:
    """``(proposal q, numerator row, denominator row)`` of the rule's ratio ``num / den``."""
    rule = Rule(rule)
    pv = _dist("p", p)
    qv = _dist("q", q, pv.size)
    num, den = pv, qv
    if rule is Rule.WRONG_TEMP:
        if q_wrong is None:
            raise ConfigError(
                "rule wrong_temp needs q_wrong; pass the draft's probabilities at the wrong "
                "temperature"
            )
        den = _dist("q_wrong", q_wrong, pv.size)
    if rule is Rule.OFF_BY_ONE:
        if p_wrong is None:
            raise ConfigError(
                "rule off_by_one needs p_wrong; pass the target row of the previous position"
            )
        num = _dist("p_wrong", p_wrong, pv.size)
    return qv, num, den


def _top_ids(p: FloatArray, k: int) -> list[int]:
    """The ``k`` most probable ids, ties to the lower id (``argmax`` returns the first), by
    ``k`` passes over the row rather than a sort of it: k is 1 or 2, rows are a vocabulary."""
    rest = p.copy()
    ids = []
    for _ in range(min(k, rest.size)):
        ids.append(int(np.argmax(rest)))
        rest[ids[-1]] = -np.inf
    return ids


def _accept_vector(rule: Rule, num: FloatArray, den: FloatArray) -> FloatArray:
    rule = Rule(rule)
    if rule is Rule.GREEDY:
        a = np.zeros_like(num)
        a[_top_ids(num, 1)] = 1.0
        return a
    if rule is Rule.TOP2:
        a = np.zeros_like(num)
        a[_top_ids(num, 2)] = 1.0
        return a
    ratio = np.divide(num, den, out=np.ones_like(num), where=den > 0.0)
    out: FloatArray = np.minimum(1.0, ratio)
    return out


def _residual_vector(rule: Rule, num: FloatArray, den: FloatArray) -> FloatArray:
    rule = Rule(rule)
    if rule is Rule.GREEDY:
        target: FloatArray = num.copy()
        return target
    w: FloatArray = np.abs(num - den) if rule is Rule.NO_MAX else np.maximum(0.0, num - den)
    total = float(w.sum())
    if rule is Rule.NO_NORM:
        w[-1] += max(0.0, 1.0 - total)
        return w
    if total <= 0.0:
        fallback: FloatArray = num.copy()
        return fallback
    out: FloatArray = w / total
    return out


def accept_probability(
    rule: Rule,
    p: npt.ArrayLike,
    q: npt.ArrayLike,
    x: int,
    *,
    q_wrong: npt.ArrayLike | None = None,
    p_wrong: npt.ArrayLike | None = None,
) -> float:
    """The probability that ``rule`` accepts the draft token ``x`` (drawn from ``q``) given the
    target row ``p``; see the module docstring's table. ``q_wrong`` is required by
    ``wrong_temp`` and ``p_wrong`` by ``off_by_one``; both are ignored otherwise. A token with
    ``q(x) == 0`` cannot be proposed; its ratio is taken as 1."""
    _, num, den = _rows(rule, p, q, q_wrong, p_wrong)
    if not 0 <= x < num.size:
        raise ValueError(f"x={x!r} is outside the vocabulary [0, {num.size})")
    return float(_accept_vector(rule, num, den)[x])


def residual(
    rule: Rule,
    p: npt.ArrayLike,
    q: npt.ArrayLike,
    *,
    q_wrong: npt.ArrayLike | None = None,
    p_wrong: npt.ArrayLike | None = None,
) -> FloatArray:
    """The distribution ``rule`` draws from after a rejection (sums to 1); for ``no_norm`` the
    distribution of its unnormalised walk (see the module docstring)."""
    _, num, den = _rows(rule, p, q, q_wrong, p_wrong)
    return _residual_vector(rule, num, den)


def output_distribution(
    rule: Rule,
    p: npt.ArrayLike,
    q: npt.ArrayLike,
    *,
    q_wrong: npt.ArrayLike | None = None,
    p_wrong: npt.ArrayLike | None = None,
) -> FloatArray:
    """The exact distribution of the token emitted in one step under ``rule``::

        out(y) = q(y) a(y) + (1 - sum_x q(x) a(x)) r(y)

    with ``a`` from `accept_probability` and ``r`` from `residual`. ``correct`` gives ``p``
    (Leviathan et al. 2023, Theorem 1); ``off_by_one`` gives ``p_wrong``.
    """
    qv, num, den = _rows(rule, p, q, q_wrong, p_wrong)
    accepted = qv * _accept_vector(rule, num, den)
    reject = max(0.0, 1.0 - float(accepted.sum()))
    out: FloatArray = accepted + reject * _residual_vector(rule, num, den)
    return out


def wrong_temp_outputs(
    p: FloatArray, q: FloatArray, exponents: Sequence[float], token: int
) -> FloatArray:
    """``output_distribution(Rule.WRONG_TEMP, p, q, q_wrong=norm(q ** k))[token]`` for each
    ``k`` of ``exponents`` at once: the draft read at ``1 / k`` times its temperature
    (temperature comes last in llama.cpp's chain). The same formula, ``out(x) = q(x) a(x) +
    (1 - sum q a) r(x)``, kept to the one token the scoring loop asks for: ``p`` and ``q`` are
    distributions already (no checks), and a row of the vocabulary costs a pass, not a sort."""
    live = q > 0
    log_q = np.log(q[live])
    k = np.asarray(exponents, dtype=np.float64)[:, None]
    wrong = np.exp(k * (log_q - log_q.max()))
    wrong /= wrong.sum(axis=1, keepdims=True)  # q_wrong on q's support, one row a k
    pl, ql = p[live], q[live]
    accepted = np.minimum(ql, ql * pl / wrong)  # q a, with a = min(1, p / q_wrong)
    excess = np.maximum(0.0, pl - wrong)
    # The residual max(0, p - q_wrong) over the vocabulary: where q is 0, q_wrong is too.
    total = excess.sum(axis=1) + float(p[~live].sum())
    reject = np.maximum(0.0, 1.0 - accepted.sum(axis=1))
    if live[token]:
        at = int(np.count_nonzero(live[:token]))
        mine, residual = accepted[:, at], excess[:, at]
    else:
        mine, residual = np.zeros(k.shape[0]), np.full(k.shape[0], p[token])
    # An all-zero residual (p == q_wrong) falls back to p, as `residual` does.
    safe = np.where(total > 0.0, total, 1.0)
    out: FloatArray = mine + reject * np.where(total > 0.0, residual / safe, p[token])
    return out


def total_variation(a: npt.ArrayLike, b: npt.ArrayLike) -> float:
    """``TV(a, b) = sum_i |a_i - b_i| / 2``, in [0, 1] for probability vectors."""
    av = np.asarray(a, dtype=np.float64)
    bv = np.asarray(b, dtype=np.float64)
    if av.shape != bv.shape:
        raise ValueError(f"shapes {av.shape} and {bv.shape} differ; use one vocabulary")
    return 0.5 * float(np.abs(av - bv).sum())
