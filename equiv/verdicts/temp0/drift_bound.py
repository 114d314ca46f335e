"""How far evaluation-path drift moves the gap between plausible candidates at temperature 0:
the calibrated bound of the temp-0 rule (`equiv.verdicts.temp0.classify`).

At every re-scored position j except the divergence, drift moved the gap between the
single-token row's top token t and each other plausible candidate c by
``M_j = max_c |(S_j[t] - S_j[c]) - (B_j[t] - B_j[c])|`` (`gap_movements`); the bound is
`DRIFT_SAFETY` x the largest of them (`drift_bound`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from equiv.json_types import JSONDict
from equiv.records.generation import LogitsRow, top_k

__all__ = [
    "CALIBRATION_POSITIONS",
    "DRIFT_SAFETY",
    "GAP_CANDIDATES",
    "MIN_CALIBRATION",
    "DriftBound",
    "drift_bound",
    "gap_movements",
    "top_of",
]

# The calibrated temp-0 bound (`DriftBound`): the gaps between the single-token row's top
# GAP_CANDIDATES (2: the top token and its runner-up; on the default pair the top-8 gaps move
# 1.5-2x as far, and the whole row's largest difference 4-8x, `benchmarks/temp0_rule.py`); the
# baseline's first CALIBRATION_POSITIONS tokens (at least) are re-scored batched; the bound is
# DRIFT_SAFETY x the largest movement seen, from MIN_CALIBRATION positions up.
GAP_CANDIDATES = 2
CALIBRATION_POSITIONS = 32
DRIFT_SAFETY = 2.0
MIN_CALIBRATION = 4


@dataclass(frozen=True)
class DriftBound:
    """How far evaluation-path drift moves the gap between plausible candidates, calibrated on
    the positions where the target was evaluated both single-token and batched.

    ``bound`` is `DRIFT_SAFETY` x the largest movement seen; were the movement at the divergence
    exchangeable with those at the calibration positions, it would exceed even the largest of
    them with probability at most 1 / (positions + 1) (``exceed_at_most``).
    """

    bound: float
    positions: int
    max_movement: float
    median_movement: float
    exceed_at_most: float

    def describe(self) -> str:
        return (
            f"{DRIFT_SAFETY:g} x the largest of {self.positions} movements of the gap between the "
            f"top {GAP_CANDIDATES} candidates from single-token to batched rows, median "
            f"{self.median_movement:.4f}"
        )

    def to_dict(self) -> JSONDict:
        return {
            "bound": round(self.bound, 6),
            "positions": self.positions,
            "max_movement": round(self.max_movement, 6),
            "median_movement": round(self.median_movement, 6),
            "exceed_at_most": round(self.exceed_at_most, 6),
            "safety": DRIFT_SAFETY,
            "candidates": GAP_CANDIDATES,
        }


def gap_movements(
    single_rows: npt.ArrayLike, batched_rows: npt.ArrayLike, *, k: int = GAP_CANDIDATES
) -> npt.NDArray[np.float64]:
    """Per position j, how far evaluation-path drift moved the gaps between plausible
    candidates: ``max_c |(S_j[t] - S_j[c]) - (B_j[t] - B_j[c])|`` over c among the top ``k`` of
    the single-token row S_j (t its top token) that are known in both rows. NaN where no
    candidate pair is known in both (rows a server knows only in part hold -inf). Rows are read
    in their own precision; the few candidate values are compared in float64."""
    single = np.asarray(single_rows)
    batched = np.asarray(batched_rows)
    out = np.full(single.shape[0], np.nan)
    for j, (s, bt) in enumerate(zip(single, batched, strict=True)):
        top = _top_known(s, bt, k)
        if top.size < 2:
            continue
        sv, bv = s[top].astype(np.float64), bt[top].astype(np.float64)
        out[j] = float(np.abs((sv[0] - sv[1:]) - (bv[0] - bv[1:])).max())
    return out


def _top_known(s: LogitsRow, bt: LogitsRow, k: int) -> npt.NDArray[np.intp]:
    """The top ``k`` of row ``s`` among the ids finite in both rows (`top_of`'s order): full rows
    (in process) by `top_k`, which searches near the row's maximum first; rows a server knows
    only in part (-inf elsewhere) among their few known ids."""
    if np.isfinite(s).all() and np.isfinite(bt).all():
        return top_k(s, k)
    return top_of(s, np.flatnonzero(np.isfinite(s) & np.isfinite(bt)), k)


def top_of(row: LogitsRow, ids: npt.NDArray[np.intp], k: int) -> npt.NDArray[np.intp]:
    """The ``k`` of ``ids`` with the largest ``row`` values, descending, ties by ascending id (as
    a stable sort of all of them orders them), without sorting a whole vocabulary."""
    values = row[ids]
    if ids.size > k:
        kth = np.partition(values, ids.size - k)[ids.size - k]  # the k-th largest value
        keep = values >= kth  # every tie at the k-th value, so the order below is exact
        ids, values = ids[keep], values[keep]
    return ids[np.lexsort((ids, -values))][:k]


def drift_bound(movements: npt.ArrayLike) -> DriftBound | None:
    """The `DriftBound` of these movements (NaN ignored); None below `MIN_CALIBRATION`."""
    values = np.asarray(movements, dtype=np.float64)
    values = values[np.isfinite(values)]
    if values.size < MIN_CALIBRATION:
        return None
    largest = float(values.max())
    return DriftBound(
        bound=DRIFT_SAFETY * largest,
        positions=int(values.size),
        max_movement=largest,
        median_movement=float(np.median(values)),
        exceed_at_most=1.0 / (values.size + 1),
    )
