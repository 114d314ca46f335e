"""What changed between two runs of the same plan (a new llama.cpp build, a new draft, another
machine): the setup, the prompts whose label changed, new and fixed divergences, outputs that
changed on either path, and the shifts in drift, acceptance and speed with their uncertainty.

Pure functions of the two runs' records; no model. The setup's differences come from the headers
(`equiv.verdicts.runs.setup_differences`); the shifts, paired by record key with a paired-bootstrap
interval each, from `equiv.verdicts.runs.shifts`.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass

from equiv.config import Mode
from equiv.json_types import JSONDict
from equiv.records import (
    AnalysisRecord,
    EventRecord,
    HeaderRecord,
    ResultRecord,
    ResultsFile,
    RunRecord,
)
from equiv.records.verdict import SEVERITY as LABEL_SEVERITY
from equiv.verdicts.runs.setup_differences import setup_differences
from equiv.verdicts.runs.shifts import BOOTSTRAP_RESAMPLES, Shift, shifts
from equiv.verdicts.runs.summary import summarize

__all__ = [
    "BOOTSTRAP_RESAMPLES",
    "Gate",
    "PromptChange",
    "RunComparison",
    "RunRecords",
    "Shift",
    "compare_runs",
]

#: How bad a label is, by its text (`equiv.records.verdict.SEVERITY`, where both orders of the
#: labels are explained): a move up this scale is a regression.
SEVERITY = {label.value: rank for label, rank in LABEL_SEVERITY.items()}


class Gate(str, enum.Enum):
    """What fails ``equiv compare`` (exit 1)."""

    WORSE = "worse"  # a label got worse, a new divergence, a control newly failed
    CHANGED = "changed"  # any of those, or any label or output that changed at all
    NEVER = "never"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class RunRecords:
    """One run as `compare_runs` reads it: its header, result, analysis and event records."""

    name: str
    header: HeaderRecord
    results: Sequence[ResultRecord]
    analyses: Sequence[AnalysisRecord] = ()
    events: Sequence[EventRecord] = ()
    runs: Sequence[RunRecord] = ()  # the run's own answer at temp > 0

    @classmethod
    def from_file(cls, results: ResultsFile, name: str = "") -> RunRecords:
        """A `ResultsFile`'s records (``name``: how to call the run; default its path)."""
        contents = results.read()
        return cls(
            name=name or str(results.path),
            header=results.header(),
            results=contents.results,
            analyses=contents.analyses,
            events=contents.events,
            runs=contents.runs,
        )

    def labels(self) -> dict[str, str]:
        """Key -> label of each judged unit: temp-0 results, sampling analyses."""
        judged: list[ResultRecord | AnalysisRecord] = [
            r for r in self.results if r.mode is Mode.TEMP0
        ]
        return {r.key: r.judged.label.value for r in [*judged, *self.analyses]}

    @property
    def failed_controls(self) -> list[str]:
        return [e.event for e in self.events if e.failed]


@dataclass(frozen=True)
class PromptChange:
    """One key whose label, divergence or output differs between run A and run B."""

    key: str
    label_a: str | None  # None: the key is not in that run, or has no label of its own
    label_b: str | None
    diverged_a: bool | None  # the two paths' tokens differed (result records only)
    diverged_b: bool | None
    baseline_changed: bool | None  # the target alone emitted other tokens in B than in A
    speculative_changed: bool | None

    @property
    def worse(self) -> bool:
        new_divergence = self.diverged_a is False and self.diverged_b is True
        return new_divergence or (
            self.label_a is not None
            and self.label_b is not None
            and SEVERITY[self.label_b] > SEVERITY[self.label_a]
        )

    @property
    def line(self) -> str:
        parts = []
        if self.label_a != self.label_b and self.label_a and self.label_b:
            parts.append(f"{self.label_a} -> {self.label_b}")
        if self.diverged_a is False and self.diverged_b:
            parts.append("new divergence")
        if self.diverged_a and self.diverged_b is False:
            parts.append("divergence gone")
        changed = [
            p
            for p, flag in (
                ("baseline", self.baseline_changed),
                ("speculative", self.speculative_changed),
            )
            if flag
        ]
        if changed:
            parts.append(f"{' and '.join(changed)} output changed")
        return f"{self.key}: {'; '.join(parts)}"


@dataclass(frozen=True)
class RunComparison:
    a: str
    b: str
    verdict_a: str
    verdict_b: str
    setup: tuple[str, ...]  # header entries that differ ("config.n_threads: 1 -> 2")
    common: int
    only_a: tuple[str, ...]
    only_b: tuple[str, ...]
    changes: tuple[PromptChange, ...]
    drift: Shift
    acceptance: Shift
    baseline_speed: Shift
    speculative_speed: Shift
    controls_a: tuple[str, ...]  # controls that failed
    controls_b: tuple[str, ...]

    @property
    def worse(self) -> tuple[PromptChange, ...]:
        return tuple(c for c in self.changes if c.worse)

    @property
    def new_failed_controls(self) -> tuple[str, ...]:
        return tuple(c for c in self.controls_b if c not in self.controls_a)

    def failures(self, gate: Gate) -> list[str]:
        """Why ``gate`` fails this comparison (empty: it passes)."""
        if gate is Gate.NEVER:
            return []
        found = [f"control {c} failed in {self.b} only" for c in self.new_failed_controls]
        found += [f"worse: {c.line}" for c in self.worse]
        if gate is Gate.CHANGED:
            found += [f"changed: {c.line}" for c in self.changes if not c.worse]
        return found

    def to_dict(self, gate: Gate = Gate.WORSE) -> JSONDict:
        """Plain data for ``equiv compare --json``, with the derived figures and the gate."""
        shifts = (self.drift, self.acceptance, self.baseline_speed, self.speculative_speed)
        return {
            "a": self.a,
            "b": self.b,
            "verdict_a": self.verdict_a,
            "verdict_b": self.verdict_b,
            "setup": list(self.setup),
            "common": self.common,
            "only_a": list(self.only_a),
            "only_b": list(self.only_b),
            "changes": [{**c.__dict__, "worse": c.worse} for c in self.changes],
            "shifts": {
                key: {**s.__dict__, "change": s.change, "significant": s.significant}
                for key, s in zip(
                    ("drift", "acceptance", "baseline_speed", "speculative_speed"),
                    shifts,
                    strict=True,
                )
            },
            "new_failed_controls": list(self.new_failed_controls),
            "gate": gate.value,
            "failures": self.failures(gate),
        }

    def lines(self) -> list[str]:
        """The comparison for a terminal, most important first."""
        out = [f"A: {self.a} ({self.verdict_a})", f"B: {self.b} ({self.verdict_b})"]
        out += [f"setup: {s}" for s in self.setup] or ["setup: no difference in the headers"]
        out.append(
            f"{self.common} key(s) in both runs"
            + (f"; {len(self.only_a)} only in A" if self.only_a else "")
            + (f"; {len(self.only_b)} only in B" if self.only_b else "")
        )
        worse = self.worse
        out.append(
            f"{len(self.changes)} key(s) changed, {len(worse)} for the worse"
            if self.changes
            else "no label, divergence or output changed"
        )
        out += [("  worse  " if c.worse else "  change ") + c.line for c in self.changes]
        out += [f"control {c}: failed in B, not in A" for c in self.new_failed_controls]
        out += [
            s.line
            for s in (self.drift, self.acceptance, self.baseline_speed, self.speculative_speed)
        ]
        return out


# -- computing it ------------------------------------------------------------------------------
def _tokens(record: ResultRecord | None, path: str) -> list[int] | None:
    return None if record is None else list(record.generation(path).tokens)


def compare_runs(a: RunRecords, b: RunRecords) -> RunComparison:
    """What changed from run ``a`` to run ``b``."""
    results_a = {r.key: r for r in a.results}
    results_b = {r.key: r for r in b.results}
    labels_a, labels_b = a.labels(), b.labels()
    keys_a, keys_b = set(results_a) | set(labels_a), set(results_b) | set(labels_b)
    changes = []
    for key in sorted(keys_a & keys_b):
        ra, rb = results_a.get(key), results_b.get(key)
        div_a = None if ra is None else not ra.comparison.identical
        div_b = None if rb is None else not rb.comparison.identical
        base = (
            None if ra is None or rb is None else _tokens(ra, "baseline") != _tokens(rb, "baseline")
        )
        spec = (
            None
            if ra is None or rb is None
            else _tokens(ra, "speculative") != _tokens(rb, "speculative")
        )
        change = PromptChange(key, labels_a.get(key), labels_b.get(key), div_a, div_b, base, spec)
        if change.label_a != change.label_b or div_a != div_b or base or spec:
            changes.append(change)
    moved = shifts(results_a, results_b)
    return RunComparison(
        a=a.name,
        b=b.name,
        verdict_a=_verdict(a),
        verdict_b=_verdict(b),
        setup=setup_differences(a.header, b.header),
        common=len(keys_a & keys_b),
        only_a=tuple(sorted(keys_a - keys_b)),
        only_b=tuple(sorted(keys_b - keys_a)),
        changes=tuple(changes),
        drift=moved.drift,
        acceptance=moved.acceptance,
        baseline_speed=moved.baseline_speed,
        speculative_speed=moved.speculative_speed,
        controls_a=tuple(a.failed_controls),
        controls_b=tuple(b.failed_controls),
    )


def _verdict(run: RunRecords) -> str:
    """The run's label (as its summary gives it) and its label counts, worst first."""
    summary = summarize(
        run.results, run.events, run.analyses, differences=run.header.differences, runs=run.runs
    )
    counts = summary.total.labels
    order = sorted(counts, key=lambda x: (-SEVERITY.get(x, 0), x))
    listed = ", ".join(f"{counts[x]} {x}" for x in order if counts[x])
    return f"{summary.verdict.label.value}: {listed or 'no labels'}"
