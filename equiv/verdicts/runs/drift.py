"""Drift at run level, as llama.cpp users know it from ``llama-perplexity --kl-divergence``.

Every row both paths computed on the same context (each prompt's rows up to and including its
first divergence) is pooled over the run: the mean KL and its percentiles (99.9 %, 99 %, 95 %,
median), the largest KL, the largest |Δlogit| and the share of rows with the same top token.
A pure function of the comparisons' recorded drift; no model.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass

import numpy as np

from equiv.json_types import JSONDict
from equiv.records import Drift

__all__ = ["RunDrift", "run_drift"]

#: The percentiles llama-perplexity --kl-divergence prints, as (name, q in [0, 100]).
PERCENTILES: tuple[tuple[str, float], ...] = (
    ("kl_p999", 99.9),
    ("kl_p99", 99.0),
    ("kl_p95", 95.0),
    ("kl_median", 50.0),
)


@dataclass(frozen=True)
class RunDrift:
    """The pooled drift of a run. KL is KL(baseline || speculative) in nats, per row.

    ``rows_with_kl`` of the ``rows`` carry their own KL (results written before equiv kept it
    carry only their prompt's mean); the percentiles are over those rows, None where none do.
    """

    prompts: int
    rows: int
    rows_with_kl: int
    kl_mean: float
    kl_median: float | None
    kl_p95: float | None
    kl_p99: float | None
    kl_p999: float | None
    kl_max: float
    max_abs_logit_delta: float
    same_top: float  # share of rows whose top token is the same on both paths

    def to_dict(self) -> JSONDict:
        return asdict(self)

    @property
    def line(self) -> str:
        """One line, in llama-perplexity's order."""
        parts = [f"mean KL {self.kl_mean:.3g}"]
        parts += [
            f"{label} {value:.3g}"
            for label, value in (
                ("99.9%", self.kl_p999),
                ("99%", self.kl_p99),
                ("95%", self.kl_p95),
                ("median", self.kl_median),
            )
            if value is not None
        ]
        parts.append(f"max {self.kl_max:.3g}")
        some = ""
        if not self.rows_with_kl:
            some = "; no per-row KL recorded (results of an older equiv), so no percentiles"
        elif self.rows_with_kl < self.rows:
            some = f"; percentiles over the {self.rows_with_kl} rows with per-row KL"
        return (
            f"drift over {self.rows} shared rows of {self.prompts} prompt(s): "
            f"{', '.join(parts)} nats; max |Δlogit| {self.max_abs_logit_delta:.4g}; "
            f"same top token {100 * self.same_top:.2f}%{some}"
        )


def run_drift(drifts: Iterable[Drift | None]) -> RunDrift | None:
    """Pool the recorded drift of each comparison (``comparison.drift`` of each result record;
    None where a record has none). None when no record has any."""
    kept = [d for d in drifts if d is not None and d.rows > 0]
    if not kept:
        return None
    n = np.array([d.rows for d in kept])
    means = np.array([float(d.kl_mean) for d in kept])
    agree = np.array([float(d.top1_agreement) for d in kept])
    pooled = [float(x) for d in kept for x in d.kl_rows]
    values = np.array(pooled, dtype=np.float64)
    quantiles: dict[str, float | None] = {name: None for name, _ in PERCENTILES}
    if values.size:
        quantiles = {name: float(np.percentile(values, q)) for name, q in PERCENTILES}
    return RunDrift(
        prompts=len(kept),
        rows=int(n.sum()),
        rows_with_kl=int(values.size),
        kl_mean=float((means * n).sum() / n.sum()),
        kl_max=max(float(d.kl_max) for d in kept),
        max_abs_logit_delta=max(float(d.max_abs_logit_delta) for d in kept),
        same_top=float(np.round(agree * n).sum() / n.sum()),
        **quantiles,
    )
