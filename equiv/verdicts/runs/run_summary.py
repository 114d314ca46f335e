"""``summary.json``'s figures: a run's verdict and figures for a machine, without its per-prompt
records (labels with their rates, controls, speed, drift, the quality lines, the pooled analysis).
Every figure comes from a `Summary` (`equiv.verdicts.runs.summary`), where it is computed once;
`equiv.report.summary_json` writes the file.
"""

from __future__ import annotations

from dataclasses import dataclass

from equiv.json_types import JSONDict, JSONValue
from equiv.records.verdict import Label
from equiv.verdicts.quality.pass_rates import wilson
from equiv.verdicts.runs.drift import RunDrift
from equiv.verdicts.runs.summary import Summary
from equiv.verdicts.sampling.pooled import PooledAnalysis
from equiv.verdicts.temp0.divergence_rate import DivergenceRate

__all__ = ["SUMMARY_SCHEMA", "Control", "LabelRate", "RunSummary", "Speed", "run_summary"]

#: The version of summary.json's layout (`RunSummary.to_dict`).
SUMMARY_SCHEMA = 1


@dataclass(frozen=True)
class LabelRate:
    """How many prompts got a label, their share, and its 95 % Wilson interval."""

    label: str
    count: int
    rate: float
    low: float
    high: float


@dataclass(frozen=True)
class Control:
    event: str
    ok: bool
    detail: str


@dataclass(frozen=True)
class Speed:
    """Decode speed of both paths (tokens/s after the first token) and the draft's figures."""

    baseline_tps: float
    speculative_tps: float
    measured_speedup: float | None
    predicted_speedup: float | None
    acceptance: float | None
    drafted: int
    accepted: int
    mean_accepted: float | None
    cost_ratio: float | None


@dataclass(frozen=True)
class RunSummary:
    """What ``summary.json`` holds: a run's verdict and figures, without its per-prompt records.
    Every figure comes from `Summary` (computed there once)."""

    schema: int
    label: str
    reason: str
    conclusion: str
    prompts: int
    labels: tuple[LabelRate, ...]
    controls: tuple[Control, ...]
    speed: Speed
    drift: RunDrift | None
    divergence_rate: DivergenceRate | None
    differences: tuple[str, ...]
    quality: tuple[str, ...]  # the quality line of each mode; empty without graded prompts
    suites: tuple[tuple[str, int, float | None], ...]  # (suite, prompts, acceptance)
    extra: tuple[tuple[str, JSONValue], ...] = ()  # the caller's: results path, mode, command
    pooled: PooledAnalysis | None = None  # temp > 0: the run's pooled tests and bounds

    @property
    def failed_controls(self) -> int:
        return sum(not c.ok for c in self.controls)

    def to_dict(self) -> JSONDict:
        return {
            "schema": self.schema,
            **dict(self.extra),
            "verdict": {"label": self.label, "reason": self.reason},
            "conclusion": self.conclusion,
            "prompts": self.prompts,
            "labels": {x.label: x.count for x in self.labels},
            "rates": {x.label: {"rate": x.rate, "low": x.low, "high": x.high} for x in self.labels},
            "controls": [c.__dict__ for c in self.controls],
            "failed_controls": self.failed_controls,
            "speed": self.speed.__dict__,
            "drift": None if self.drift is None else self.drift.to_dict(),
            "divergence_rate": None
            if self.divergence_rate is None
            else self.divergence_rate.to_dict(),
            "differences": list(self.differences),
            "quality": list(self.quality),
            "suites": [{"suite": s, "prompts": n, "acceptance": a} for s, n, a in self.suites],
            "pooled": None if self.pooled is None else self.pooled.to_dict(),
        }


def run_summary(summary: Summary, **extra: JSONValue) -> RunSummary:
    """The summary.json figures of ``summary``; ``extra`` (plain JSON values) are kept as is."""
    t, verdict = summary.total, summary.verdict
    labels = []
    for label in Label:
        count = t.labels.get(label.value, 0)
        interval = wilson(count, t.prompts, level=0.95)
        rate = count / t.prompts if t.prompts else 0.0
        labels.append(LabelRate(label.value, count, rate, interval.low, interval.high))
    return RunSummary(
        schema=SUMMARY_SCHEMA,
        label=verdict.label.value,
        reason=verdict.reason,
        conclusion=summary.conclusion,
        prompts=t.prompts,
        labels=tuple(labels),
        controls=tuple(Control(e.event, bool(e.ok), e.detail) for e in summary.events),
        speed=Speed(
            baseline_tps=t.baseline_tps,
            speculative_tps=t.speculative_tps,
            measured_speedup=t.measured_speedup,
            predicted_speedup=t.predicted_speedup,
            acceptance=t.acceptance,
            drafted=t.drafted,
            accepted=t.accepted,
            mean_accepted=t.mean_accepted,
            cost_ratio=t.cost_ratio,
        ),
        drift=summary.drift,
        divergence_rate=summary.divergence_rate,
        differences=tuple(summary.differences),
        quality=tuple(summary.quality_lines) if summary.quality else (),
        suites=tuple((s.suite, s.prompts, s.acceptance) for s in summary.suites.values()),
        extra=tuple(extra.items()),
        pooled=summary.run.pooled if summary.run is not None else None,
    )
