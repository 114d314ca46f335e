"""llama.cpp's sampler chain as pure numpy: the exact distribution a logits row implies.

llama-cpp-python 0.3.x builds its chain in ``Llama._init_sampler`` (mirostat off, no grammar)::

    temp > 0:   penalties -> top_k -> typical -> top_p -> min_p -> temp -> dist
    temp == 0:  penalties -> greedy

Each stage below follows ``src/llama-sampling.cpp`` of the llama.cpp it vendors (read to learn the
semantics, no code taken). With ``l`` the logits of the tokens still in the candidate set ``S``:

- penalties: for each token with count ``c > 0`` in the window, ``l <- l * r`` if ``l <= 0`` else
  ``l / r``, then ``l <- l - c * freq - presence``; a no-op when ``r == 1`` and ``freq == presence
  == 0``. The window is the last ``penalty_last_n`` tokens the sampler *accepted*; in
  llama-cpp-python that is the generated tokens only (prompt tokens are never accepted) and
  ``penalty_last_n = last_n_tokens_size`` (64 by default). The caller slices the window.
- top_k: ``k <= 0`` is a no-op; otherwise keep the ``min(k, |S|)`` largest logits.
- typical (locally typical sampling, Meister et al. 2023): a no-op when ``typical_p >= 1``.
  Otherwise ``p = softmax(l)``, ``H = -sum p log p``; order ``S`` by ``|-log p - H|`` ascending
  and keep the shortest prefix whose cumulative ``p`` is *strictly* greater than ``typical_p`` and
  that holds at least ``min_keep`` tokens (all of ``S`` if none is).
- top_p (nucleus, Holtzman et al. 2020): a no-op when ``top_p >= 1``. Otherwise ``p =
  softmax(l)`` on the *untempered* logits (temp comes later in the chain); order by ``p``
  descending and keep the shortest prefix with cumulative ``p >= top_p`` and at least ``min_keep``
  tokens (all of ``S`` if none is).
- min_p: a no-op when ``min_p <= 0``. Otherwise keep ``l >= max(l) + log(min_p)``, i.e.
  ``p_i >= min_p * p_max`` on the untempered softmax; if fewer than ``min_keep`` pass, keep the
  ``min_keep`` largest.
- temp and dist: ``P(i) = exp(l_i / temp) / sum_{j in S} exp(l_j / temp)`` for ``i`` in ``S``, 0
  elsewhere.
- greedy: the first index of the maximum logit over the whole vocabulary (strict ``>`` scan).

Edge cases resolved here, where llama.cpp leaves the answer to its arithmetic:

- Ties. llama.cpp orders candidates with ``std::partial_sort`` / ``std::sort``, which are not
  stable, so when tied logits straddle a top_k, top_p or typical cut, *which* tied token survives
  is unspecified. We break every tie by ascending token id.
- Precision. llama.cpp works in float32; we work in float64. A cut whose cumulative sum or ratio
  lies within float32 rounding (~1e-7) of its threshold can fall on the other side.
- ``-inf`` logits (e.g. from a grammar or logit bias) get probability 0; in typical sampling we
  take ``0 * log 0 = 0`` for the entropy, where llama.cpp's float arithmetic would yield NaN.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from equiv.config import SamplingConfig, validate_sampling
from equiv.errors import ConfigError

__all__ = [
    "NEAR_TOP",
    "PENALTY_WINDOW",
    "apply_penalties",
    "chain_distribution",
    "chain_probs",
    "on_one_support",
    "penalised",
    "pit_position",
    "top_k_candidates",
    "validate_sampling",
]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.intp]


def _row(logits: npt.ArrayLike) -> FloatArray:
    """One logits row as float64, checked: 1-D, non-empty, no NaN or +inf, one finite entry."""
    x = np.array(logits, dtype=np.float64)
    if x.ndim != 1 or x.size == 0:
        raise ValueError(f"expected one non-empty logits row, got an array of shape {x.shape}")
    if np.isnan(x).any() or np.isposinf(x).any():
        raise ValueError("logits contain NaN or +inf; check the engine's logits buffer")
    if not np.isfinite(x).any():
        raise ValueError("every logit is -inf; no token can be sampled")
    return x


def apply_penalties(
    logits: npt.ArrayLike,
    recent_tokens: Sequence[int] | npt.NDArray[np.integer],
    *,
    repeat_penalty: float,
    frequency_penalty: float,
    presence_penalty: float,
) -> FloatArray:
    """Return a float64 copy of ``logits`` with llama.cpp's repetition penalties applied.

    For each distinct token ``t`` in ``recent_tokens`` with count ``c``::

        l_t <- l_t * repeat_penalty   if l_t <= 0   else   l_t / repeat_penalty
        l_t <- l_t - c * frequency_penalty - presence_penalty

    (``llama_sampler_penalties_apply``). A no-op when ``repeat_penalty == 1`` and both other
    penalties are 0. ``recent_tokens`` is the penalty window: the caller passes the last
    ``penalty_last_n`` accepted tokens (see the module docstring).
    """
    if not repeat_penalty > 0.0:
        raise ConfigError(
            f"repeat_penalty={repeat_penalty!r} is not positive; pass 1.0 to disable it "
            "or a value such as 1.1"
        )
    x = _row(logits)
    if repeat_penalty == 1.0 and frequency_penalty == 0.0 and presence_penalty == 0.0:
        return x
    tokens = np.asarray(recent_tokens, dtype=np.int64).reshape(-1)
    if tokens.size == 0:
        return x
    if tokens.min() < 0 or tokens.max() >= x.size:
        bad = int(tokens[(tokens < 0) | (tokens >= x.size)][0])
        raise ValueError(f"recent token id {bad} is outside the vocabulary [0, {x.size})")
    ids, counts = np.unique(tokens, return_counts=True)
    sel = x[ids]
    sel = np.where(sel <= 0.0, sel * repeat_penalty, sel / repeat_penalty)
    sel = sel - counts * frequency_penalty - presence_penalty
    x[ids] = sel
    return x


def _ranked(x: FloatArray, ids: IntArray) -> IntArray:
    """``ids`` ordered by logit descending, ties by ascending id."""
    ids = np.sort(ids)
    return ids[np.argsort(-x[ids], kind="stable")]


def _softmax(z: FloatArray) -> FloatArray:
    """``exp(z - max z) / sum``; ``-inf`` entries get 0."""
    e = np.exp(z - z.max())
    out: FloatArray = e / e.sum()
    return out


def _prefix_len(cum: FloatArray, hit: npt.NDArray[np.bool_], min_keep: int) -> int:
    """Length of the shortest prefix whose last index satisfies ``hit`` and ``i + 1 >= min_keep``;
    the whole array if there is none."""
    ok = hit & (np.arange(1, cum.size + 1) >= min_keep)
    return int(np.argmax(ok)) + 1 if ok.any() else int(cum.size)


def _typical(x: FloatArray, keep: IntArray, typical_p: float, min_keep: int) -> IntArray:
    p = _softmax(x[keep])
    pos = p > 0.0
    logp = np.full(p.shape, -np.inf)
    logp[pos] = np.log(p[pos])
    entropy = float(-np.sum(p[pos] * logp[pos]))
    shifted = np.abs(-logp - entropy)
    order = np.argsort(shifted, kind="stable")
    cum = np.cumsum(p[order])
    n = _prefix_len(cum, cum > typical_p, min_keep)
    return keep[order[:n]]


def _top_p(x: FloatArray, keep: IntArray, top_p: float, min_keep: int) -> IntArray:
    keep = _ranked(x, keep)
    cum = np.cumsum(_softmax(x[keep]))
    return keep[: _prefix_len(cum, cum >= top_p, min_keep)]


def _min_p(x: FloatArray, keep: IntArray, min_p: float, min_keep: int) -> IntArray:
    keep = _ranked(x, keep)
    threshold = x[keep[0]] + math.log(min_p)
    n_pass = int(np.count_nonzero(x[keep] >= threshold))
    return keep[: max(n_pass, min(min_keep, keep.size))]


def chain_probs(
    logits: npt.ArrayLike,
    *,
    temp: float,
    top_k: int,
    top_p: float,
    min_p: float,
    typical_p: float = 1.0,
    min_keep: int = 1,
) -> FloatArray:
    """The probability of every token id under llama.cpp's chain for one (penalised) logits row.

    Runs top_k -> typical -> top_p -> min_p -> temp -> dist exactly as the module docstring
    states and returns a float64 vector of the vocabulary's size that sums to 1, with 0 for every
    token a stage removed. ``temp == 0`` returns the one-hot vector of the greedy token (the first
    index of the maximum), as llama-cpp-python then uses the greedy sampler alone. Penalties are
    not applied here: pass the output of `apply_penalties`. ``min_keep`` is 1 in llama-cpp-python.
    """
    validate_sampling(
        temp=temp, top_k=top_k, top_p=top_p, min_p=min_p, typical_p=typical_p, repeat_penalty=1.0
    )
    if min_keep < 0:
        raise ConfigError(f"min_keep={min_keep!r} is negative; pass 1 as llama-cpp-python does")
    x = _row(logits)
    out = np.zeros_like(x)
    if temp == 0.0:
        out[int(np.argmax(x))] = 1.0
        return out
    if 0 < top_k < x.size:
        # Only the top_k survive: rank just the candidates at or above the k-th largest logit
        # (ties at the boundary included) instead of sorting the whole vocabulary.
        kth = np.partition(x, x.size - top_k)[x.size - top_k]
        keep = _ranked(x, np.flatnonzero(x >= kth))[:top_k]
    else:
        keep = np.arange(x.size)  # each stage below ranks what it keeps; the last needs no order
    if typical_p < 1.0:
        keep = _typical(x, _ranked(x, keep), typical_p, min_keep)
    if top_p < 1.0:
        keep = _top_p(x, keep, top_p, min_keep)
    if min_p > 0.0:
        keep = _min_p(x, keep, min_p, min_keep)
    out[keep] = _softmax(x[keep] / temp)
    return out


def pit_position(probs: npt.ArrayLike, token: int) -> tuple[float, float]:
    """``(F(token-), P(token))`` for the probability integral transform of a discrete draw.

    Tokens are ranked by probability descending, ties by ascending id; ``F(token-)`` is the mass
    of the tokens ranked strictly before ``token``. Every fixed order makes the randomised PIT
    ``F(token-) + V * P(token)``, ``V ~ U(0, 1)``, exactly uniform under the null (see
    `equiv.verdicts.stats.randomized_pit`); this order makes a bias toward likely tokens push it
    toward 0.
    Keeping these two floats per emitted token replaces keeping the whole row.
    """
    p = np.asarray(probs, dtype=np.float64)
    if p.ndim != 1 or p.size == 0:
        raise ValueError(f"expected one non-empty probability row, got shape {p.shape}")
    if not 0 <= token < p.size:
        raise ValueError(f"token={token!r} is outside the vocabulary [0, {p.size})")
    pt = float(p[token])
    ids = np.arange(p.size)
    before = (p > pt) | ((p == pt) & (ids < token))
    return float(np.sum(p[before])), pt


PENALTY_WINDOW = 64  # llama-cpp-python's last_n_tokens_size


def penalised(sampling: SamplingConfig) -> bool:
    """Whether the chain applies a repetition, frequency or presence penalty."""
    return bool(
        sampling.repeat_penalty != 1 or sampling.frequency_penalty or sampling.presence_penalty
    )


#: How far below its largest logit `top_k_candidates` looks first. On Gemma 3's rows the top 40
#: lie within it at most positions, and partitioning those candidates alone makes the chain
#: 3x faster on them than partitioning the 262,144 logits (`evidence_cost.py --model`); the
#: rest of the row cannot hold one of the k largest.
NEAR_TOP = 12.0


def top_k_candidates(logits: npt.NDArray[np.floating], k: int) -> IntArray:
    """The ids (ascending) of the ``k`` largest of ``logits``, ties with the k-th included.

    Where at least ``k`` logits lie within `NEAR_TOP` of the largest, the k-th largest is among
    them and only they are partitioned; otherwise the whole row is."""
    near = np.flatnonzero(logits >= logits.max() - NEAR_TOP)
    if near.size < k:  # (also where the row holds a NaN: the chain rejects it)
        kth = np.partition(logits, logits.shape[0] - k)[-k]
        return np.flatnonzero(logits >= kth)
    values = logits[near]
    kth = np.partition(values, values.size - k)[-k]
    out: IntArray = near[values >= kth]
    return out


def chain_distribution(
    row: npt.NDArray[np.float32], history: Sequence[int], sampling: SamplingConfig
) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.float64]]:
    """The configured chain's distribution over one logits row (full, or top-K with ``-inf``
    elsewhere): the candidate ids (ascending) and their probabilities; ``history`` is the output
    so far, for the penalties."""
    logits: npt.NDArray[np.float32] | FloatArray = row
    if penalised(sampling):
        logits = apply_penalties(
            row,
            list(history[-PENALTY_WINDOW:]),
            repeat_penalty=sampling.repeat_penalty,
            frequency_penalty=sampling.frequency_penalty,
            presence_penalty=sampling.presence_penalty,
        )
    ids: npt.NDArray[np.intp] | None = None
    absent = np.isneginf(logits)
    if absent.any():
        # A top-K row (a server's, -inf elsewhere): a -inf logit has probability 0 under any
        # chain, so the chain runs on the other candidates alone (a partition of the whole row
        # degrades on the ties: 34 ms a position against 0.28 ms, benchmarks/evidence_cost.py)
        ids = np.flatnonzero(~absent)
        logits = logits[ids]
    if 0 < sampling.top_k < logits.shape[0]:
        # Only the top_k (ties at the boundary included) can survive the chain: run it on
        # those candidates, in ascending id order so that ties rank as over the full row.
        keep = top_k_candidates(logits, sampling.top_k)
        ids = keep if ids is None else ids[keep]
        logits = logits[keep]
    probs = chain_probs(
        logits,
        temp=sampling.temp,
        top_k=sampling.top_k,
        top_p=sampling.top_p,
        min_p=sampling.min_p,
        typical_p=sampling.typical_p,
    )
    return (np.arange(row.shape[0]) if ids is None else ids), probs


def on_one_support(
    ids_a: npt.NDArray[np.intp],
    a: FloatArray,
    ids_b: npt.NDArray[np.intp],
    b: FloatArray,
) -> tuple[npt.NDArray[np.intp], FloatArray, FloatArray]:
    """Two of `chain_distribution`'s outputs over the union of their candidates: the ids
    (ascending) and each distribution there, 0 where it has no candidate. The union is a mask
    over the vocabulary (``np.union1d`` hashes: 0.1 s a position over whole rows of 262,144)."""
    mask = np.zeros(int(max(ids_a.max(initial=-1), ids_b.max(initial=-1))) + 1, dtype=bool)
    mask[ids_a] = True
    mask[ids_b] = True
    ids = np.flatnonzero(mask)
    out_a, out_b = np.zeros(ids.size), np.zeros(ids.size)
    out_a[np.searchsorted(ids, ids_a)] = a
    out_b[np.searchsorted(ids, ids_b)] = b
    return ids, out_a, out_b
