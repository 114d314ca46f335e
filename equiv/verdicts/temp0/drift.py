"""Logit drift between two paths: how far their logits rows for the same positions are apart.

The figures ``llama-perplexity --kl-divergence`` reports (KL of the softmax in nats: mean, 99th
percentile and max; the largest |Δlogit|; the share of rows with the same argmax), per row pair
in a dozen passes over the row, so a 262,144-token vocabulary stays cheap.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from equiv.records.comparison import Drift

__all__ = ["drift_metrics"]


def _row_kl(a: npt.NDArray[np.float32], b: npt.NDArray[np.float32]) -> float:
    """KL(softmax a || softmax b) of one row: float32 arithmetic, float64 sums."""
    za, zb = a - a.max(), b - b.max()
    ea = np.exp(za)
    sa, sb = float(ea.sum(dtype=np.float64)), float(np.exp(zb).sum(dtype=np.float64))
    if np.isfinite(a).all() and np.isfinite(b).all():
        diff = za - zb
    else:  # 0 log 0 = 0 where a forbids a token; inf where only b forbids it
        with np.errstate(invalid="ignore"):
            diff = np.where(ea > 0.0, za - zb, 0.0)
    cross = float((ea * diff).sum(dtype=np.float64)) / sa
    return max(cross - math.log(sa) + math.log(sb), 0.0)


def _row_drift(
    a: npt.NDArray[np.float32], b: npt.NDArray[np.float32], buf: npt.NDArray[np.float32]
) -> tuple[float, float, bool]:
    """One row pair's (KL(softmax a || softmax b), max |a - b|, same argmax) in about twelve
    passes over the row, reusing ``buf`` (shape (3, V)); rows with a -inf take `_row_kl`.

    With ``d = a - b`` and ``e = exp(a - max a)``: ``KL = (e . d) / sum(e) - (max a - max b)
    - log sum(e) + log sum(exp(b - max b))``; float32 arithmetic, float64 reductions.
    """
    ia, ib = int(a.argmax()), int(b.argmax())
    ma, mb = float(a[ia]), float(b[ib])
    if not (math.isfinite(ma) and math.isfinite(mb)):
        raise ValueError("logits hold NaN, +inf or an all -inf row; check the engine")
    d, e, scratch = buf
    with np.errstate(invalid="ignore"):  # -inf - -inf
        np.subtract(a, b, out=d)
        np.abs(d, out=scratch)
        delta = float(scratch.max())
    if not math.isfinite(delta):  # a -inf somewhere (or NaN): the exact, slower path
        if np.isnan(a).any() or np.isnan(b).any():
            raise ValueError("logits hold NaN, +inf or an all -inf row; check the engine")
        with np.errstate(invalid="ignore"):
            delta = float(np.where(a == b, 0.0, np.abs(a - b)).max())
        return _row_kl(a, b), delta, ia == ib
    np.subtract(a, np.float32(ma), out=e)
    np.exp(e, out=e)
    np.subtract(b, np.float32(mb), out=scratch)
    np.exp(scratch, out=scratch)
    sa, sb = float(e.sum(dtype=np.float64)), float(scratch.sum(dtype=np.float64))
    cross = float(np.dot(e, d)) / sa - (ma - mb)
    return max(cross - math.log(sa) + math.log(sb), 0.0), delta, ia == ib


def drift_metrics(logits_a: npt.ArrayLike, logits_b: npt.ArrayLike, *, rows: bool = False) -> Drift:
    """Per-row ``KL(P_a || P_b) = sum_i P_a(i) (log P_a(i) - log P_b(i))`` with ``P =
    softmax(logits)``, summarised by mean, 99th percentile (linear interpolation) and max; the
    largest ``|l_a - l_b|`` over all entries (0 where both are -inf); and the fraction of rows
    whose argmax (first index on ties) agrees. A token that ``a`` allows and ``b`` forbids
    (-inf) makes that row's KL ``inf``. Rows are processed one at a time in float32 with float64
    sums (KL accurate to about 1e-6 nats), so a 262,144-token vocabulary stays cheap.
    ``rows``: keep each row's KL too (4 significant digits).
    """
    a = np.asarray(logits_a, dtype=np.float32)
    b = np.asarray(logits_b, dtype=np.float32)
    if a.ndim == 1:
        a, b = a[None, :], b.reshape(1, -1)
    if a.shape != b.shape or a.ndim != 2 or a.shape[0] == 0 or a.shape[1] == 0:
        raise ValueError(f"logits shapes {a.shape} and {b.shape} must be equal (n, V), n >= 1")
    buf = np.empty((3, a.shape[1]), dtype=np.float32)
    per_row = [_row_drift(ra, rb, buf) for ra, rb in zip(a, b, strict=True)]
    kl = np.array([r[0] for r in per_row], dtype=np.float64)
    delta = max(r[1] for r in per_row)
    with np.errstate(invalid="ignore"):  # a percentile between two infinities
        p99 = float(np.percentile(kl, 99))
    return Drift(
        rows=int(a.shape[0]),
        kl_mean=float(kl.mean()),
        kl_p99=math.inf if math.isnan(p99) else p99,
        kl_max=float(kl.max()),
        max_abs_logit_delta=delta,
        top1_agreement=float(np.mean([r[2] for r in per_row])),
        kl_rows=tuple(float(f"{x:.4g}") for x in kl) if rows else (),
    )
