"""Re-scoring fidelity: how far re-scored rows are from the rows a path actually sampled from.

Over HTTP the speculative samples can only be judged against rows re-scored on a server, and
those are not exactly the rows behind the samples (another batch, another cache state). The
baseline's positions show by how much: there the server reported the rows it sampled from (its
top-K log-probabilities, ``n_probs``) and the same positions are re-scored as every other sample
is. The figures, under the run's sampler chain and temperature (`Fidelity`), say what the
instrument can and cannot see: a sampler fault that moves the distribution by less than the
re-scoring does is invisible to a test against re-scored rows alone.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from equiv.config import SamplingConfig
from equiv.engines.chain import chain_distribution, on_one_support
from equiv.json_types import JSONDict, JSONObject
from equiv.records.codec import ROUND, decode, encode

__all__ = ["EXACT_TV", "Fidelity", "rescore_fidelity"]

#: The most total variation at any position for re-scored rows to count as the rows sampled
#: from (`Fidelity.exact`). With one request in flight forced decoding gives them bit for bit
#: to the 6 decimals recorded (TV 0, at most 7e-6 measured); at 4 in flight 0.05 a token. At
#: 1e-4 a position, the top-token count of 10,000 tokens moves by at most 1 token under rows
#: this close, against a standard error of about 10 at temp 0.2.
EXACT_TV = 1e-4


@dataclass(frozen=True)
class Fidelity:
    """Reported against re-scored rows over ``positions`` emitted tokens, under the chain:

    - ``tv_mean``, ``tv_max``: total variation between the two chain distributions (the share
      of draws a sampler would make differently);
    - ``kl_mean``, ``kl_max``: KL(reported || re-scored) of the raw rows (temperature 1, as the
      speculative path's drift is measured) over the candidates both report, in nats;
    - ``top_shift_mean``, ``top_shift_max``: |change| of the probability of the reported row's
      top token;
    - ``top_changed``: positions whose top token differs; ``rank_changed``: positions where the
      emitted token's rank differs.
    """

    positions: int
    tv_mean: float = field(metadata={ROUND: 6})
    tv_max: float = field(metadata={ROUND: 6})
    kl_mean: float = field(metadata={ROUND: 6})
    kl_max: float = field(metadata={ROUND: 6})
    top_shift_mean: float = field(metadata={ROUND: 6})
    top_shift_max: float = field(metadata={ROUND: 6})
    top_changed: int
    rank_changed: int

    def to_dict(self) -> JSONDict:
        return encode(self)

    @classmethod
    def from_dict(cls, data: JSONObject) -> Fidelity:
        return decode(cls, data, "fidelity")

    @classmethod
    def pooled(cls, parts: Iterable[Fidelity]) -> Fidelity | None:
        """Many samples' figures as one: means weighted by positions, maxima and counts."""
        items = [p for p in parts if p.positions]
        if not items:
            return None
        n = sum(p.positions for p in items)

        def mean(name: str) -> float:
            return float(sum(getattr(p, name) * p.positions for p in items)) / n

        return cls(
            positions=n,
            tv_mean=mean("tv_mean"),
            tv_max=max(p.tv_max for p in items),
            kl_mean=mean("kl_mean"),
            kl_max=max(p.kl_max for p in items),
            top_shift_mean=mean("top_shift_mean"),
            top_shift_max=max(p.top_shift_max for p in items),
            top_changed=sum(p.top_changed for p in items),
            rank_changed=sum(p.rank_changed for p in items),
        )

    @property
    def exact(self) -> bool:
        """The re-scored rows are the rows sampled from at every position measured (within
        `EXACT_TV`, the top token unchanged): the instrument is exact."""
        return self.positions > 0 and self.tv_max <= EXACT_TV and self.top_changed == 0

    @property
    def line(self) -> str:
        return (
            f"re-scored rows against the rows sampled from, over {self.positions} positions: "
            f"total variation {self.tv_mean:.4f} on average (max {self.tv_max:.3f}), top token's "
            f"probability moved by {self.top_shift_mean:.4f} (max {self.top_shift_max:.3f}), top "
            f"token changed at {self.top_changed}, the emitted token's rank at {self.rank_changed}"
        )


def _rows_kl(a: npt.NDArray[np.float32], b: npt.NDArray[np.float32]) -> float:
    """KL of the softmaxes of two rows over the candidates both hold (finite in both)."""
    both = np.isfinite(a) & np.isfinite(b)
    if both.sum() < 2:
        return 0.0
    x = a[both].astype(np.float64)
    y = b[both].astype(np.float64)
    lp = x - x.max() - math.log(np.exp(x - x.max()).sum())
    lq = y - y.max() - math.log(np.exp(y - y.max()).sum())
    return max(float(np.dot(np.exp(lp), lp - lq)), 0.0)


def _widen(row: npt.NDArray[np.float32], width: int) -> npt.NDArray[np.float32]:
    """A top-K row (``-inf`` beyond its last candidate) padded to ``width`` with ``-inf``."""
    if row.shape[0] >= width:
        return row
    return np.concatenate([row, np.full(width - row.shape[0], -np.inf, dtype=row.dtype)])


def _rank(ids: npt.NDArray[np.intp], probs: npt.NDArray[np.float64], token: int) -> int:
    """The token's rank under the chain (0: most probable; ties by id); -1 outside it."""
    where = np.flatnonzero(ids == token)
    if where.size == 0 or probs[where[0]] <= 0:
        return -1
    p = probs[where[0]]
    return int(np.sum((probs > p) | ((probs == p) & (ids < token))))


def rescore_fidelity(
    reported: npt.NDArray[np.float32],
    rescored: npt.NDArray[np.float32],
    tokens: Sequence[int],
    sampling: SamplingConfig,
) -> Fidelity:
    """`Fidelity` of ``rescored`` rows against the ``reported`` ones at the positions of
    ``tokens`` (rows may be top-K, ``-inf`` elsewhere; the narrower is padded with ``-inf``)."""
    width = max(reported.shape[1], rescored.shape[1])
    tv, kl, shift = [], [], []
    top_changed = rank_changed = 0
    for i, token in enumerate(tokens):
        a, b = _widen(reported[i], width), _widen(rescored[i], width)
        ids_a, pa = chain_distribution(a, tokens[:i], sampling)
        ids_b, pb = chain_distribution(b, tokens[:i], sampling)
        ids, fa, fb = on_one_support(ids_a, pa, ids_b, pb)
        tv.append(0.5 * float(np.abs(fa - fb).sum()))
        kl.append(_rows_kl(a, b))
        top = int(np.argmax(fa))
        shift.append(abs(float(fa[top] - fb[top])))
        top_changed += int(np.argmax(fb)) != top
        rank_changed += _rank(ids, fa, int(token)) != _rank(ids, fb, int(token))
    if not tv:
        return Fidelity(0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0, 0)
    return Fidelity(
        positions=len(tv),
        tv_mean=float(np.mean(tv)),
        tv_max=float(np.max(tv)),
        kl_mean=float(np.mean(kl)),
        kl_max=float(np.max(kl)),
        top_shift_mean=float(np.mean(shift)),
        top_shift_max=float(np.max(shift)),
        top_changed=top_changed,
        rank_changed=rank_changed,
    )
