"""How far a figure moved from run A to run B (`equiv compare`): the drift, the draft acceptance
and both paths' speeds, each paired by record key over the keys both runs have, B - A (speeds:
B / A), with a 95 % interval from a paired bootstrap over the prompts (rows and tokens within a
prompt are not independent, prompts are) under a fixed seed, so the same files give the same
answer. Per-record figures come from `SuiteSummary` and `run_drift`, where they are computed once.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from equiv.records import ResultRecord
from equiv.verdicts.runs.drift import run_drift
from equiv.verdicts.runs.summary import SuiteSummary

__all__ = ["BOOTSTRAP_RESAMPLES", "Shift", "Shifts", "shifts"]

BOOTSTRAP_RESAMPLES = 4000
_LEVEL = 0.95


@dataclass(frozen=True)
class Shift:
    """Run B's figure against run A's over the ``n`` keys both have: B - A (``ratio``: B / A),
    with a 95 % paired-bootstrap interval (None with fewer than 2 keys)."""

    name: str
    a: float | None
    b: float | None
    low: float | None
    high: float | None
    n: int
    ratio: bool = False
    unit: str = ""

    @property
    def change(self) -> float | None:
        if self.a is None or self.b is None:
            return None
        if self.ratio:
            return self.b / self.a if self.a else None
        return self.b - self.a

    @property
    def significant(self) -> bool:
        """The interval excludes no change (0, or 1 for a ratio)."""
        if self.low is None or self.high is None:
            return False
        none = 1.0 if self.ratio else 0.0
        return not self.low <= none <= self.high

    @property
    def line(self) -> str:
        change = self.change
        if self.a is None or self.b is None or change is None:
            return f"{self.name}: not measured in both runs"
        if self.ratio:
            head = f"{self.a:.4g} -> {self.b:.4g}{self.unit} ({change:.3f}x"
            interval = f"{self.low:.3f}x to {self.high:.3f}x" if self.low is not None else ""
        else:
            head = f"{self.a:.4g} -> {self.b:.4g}{self.unit} ({change:+.3g}"
            interval = f"{self.low:+.3g} to {self.high:+.3g}" if self.low is not None else ""
        if not interval:
            return f"{self.name}: {head}; {self.n} paired key(s): too few for an interval)"
        verdict = "a real change" if self.significant else "within noise"
        return f"{self.name}: {head}, 95 % CI {interval} over {self.n} paired keys: {verdict})"


def _figures(record: ResultRecord) -> tuple[float, ...]:
    """(kl x rows, rows, accepted, drafted, base tokens, base s, spec tokens, spec s)."""
    s = SuiteSummary("one")
    # speed and draft counts only: no label counted
    s.add_generations(record.baseline, record.speculative)
    d = run_drift([record.comparison.drift])
    rows = float(d.rows) if d else 0.0
    return (
        (d.kl_mean * rows) if d else 0.0,
        rows,
        float(s.accepted),
        float(s.drafted),
        float(s.baseline_tokens),
        s.baseline_decode_s,
        float(s.speculative_tokens),
        s.speculative_decode_s,
    )


def _ratio_of_sums(
    num: npt.NDArray[np.float64], den: npt.NDArray[np.float64]
) -> npt.NDArray[np.float64]:
    """sum(num) / sum(den) along the last axis, NaN where the denominator sums to 0."""
    total = den.sum(axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(total > 0, num.sum(axis=-1) / np.where(total > 0, total, 1), np.nan)


def _shift(
    name: str,
    fa: npt.NDArray[np.float64],
    fb: npt.NDArray[np.float64],
    num: int,
    den: int,
    *,
    ratio: bool = False,
    unit: str = "",
) -> Shift:
    """The shift of sum(num)/sum(den) between the paired rows of ``fa`` and ``fb``."""
    n = fa.shape[0]
    keep = (fa[:, den] > 0) & (fb[:, den] > 0) if n else np.zeros(0, bool)
    fa, fb = fa[keep], fb[keep]
    n = int(fa.shape[0])
    if n == 0:
        return Shift(name, None, None, None, None, 0, ratio, unit)
    a = float(_ratio_of_sums(fa[:, num], fa[:, den]))
    b = float(_ratio_of_sums(fb[:, num], fb[:, den]))
    low = high = None
    if n >= 2 and not (ratio and a == 0):
        idx = np.random.default_rng(0).integers(0, n, size=(BOOTSTRAP_RESAMPLES, n))
        ra = _ratio_of_sums(fa[idx, num], fa[idx, den])
        rb = _ratio_of_sums(fb[idx, num], fb[idx, den])
        with np.errstate(invalid="ignore", divide="ignore"):
            stat = rb / ra if ratio else rb - ra
        stat = stat[np.isfinite(stat)]
        if stat.size:
            tail = 100 * (1 - _LEVEL) / 2
            low, high = (float(x) for x in np.percentile(stat, [tail, 100 - tail]))
    return Shift(name, a, b, low, high, n, ratio, unit)


@dataclass(frozen=True)
class Shifts:
    """The figures `equiv compare` follows from run A to run B."""

    drift: Shift
    acceptance: Shift
    baseline_speed: Shift
    speculative_speed: Shift


def shifts(a: Mapping[str, ResultRecord], b: Mapping[str, ResultRecord]) -> Shifts:
    """The `Shifts` from run ``a`` to run ``b`` (each: key -> result record), paired over the
    keys both hold."""
    paired = sorted(set(a) & set(b))
    fa = np.array([_figures(a[k]) for k in paired], dtype=np.float64).reshape(-1, 8)
    fb = np.array([_figures(b[k]) for k in paired], dtype=np.float64).reshape(-1, 8)
    return Shifts(
        drift=_shift("drift (mean KL per shared row, nats)", fa, fb, 0, 1),
        acceptance=_shift("draft acceptance", fa, fb, 2, 3),
        baseline_speed=_shift("baseline speed", fa, fb, 4, 5, ratio=True, unit=" tok/s"),
        speculative_speed=_shift("speculative speed", fa, fb, 6, 7, ratio=True, unit=" tok/s"),
    )
