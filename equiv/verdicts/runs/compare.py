"""What changed between two runs of the same plan (a new llama.cpp build, a new draft, another
machine): the setup, the prompts whose label changed, new and fixed divergences, outputs that
changed on either path, and the shifts in drift, acceptance and speed with their uncertainty.

Pure functions of the two runs' records; no model. Each shift is paired by record key and its
95 % interval comes from a paired bootstrap over the prompts (rows and tokens within a prompt
are not independent, prompts are), with a fixed seed so the same files give the same answer.
Per-record figures come from `SuiteSummary` and `run_drift`, where they are computed once.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from equiv.config import Mode
from equiv.json_types import JSONDict, JSONObject
from equiv.records import (
    AnalysisRecord,
    EventRecord,
    HeaderRecord,
    ResultRecord,
    ResultsFile,
    RunRecord,
)
from equiv.records.verdict import SEVERITY as LABEL_SEVERITY
from equiv.verdicts.runs.drift import run_drift
from equiv.verdicts.runs.summary import SuiteSummary, summarize

__all__ = [
    "BOOTSTRAP_RESAMPLES",
    "Gate",
    "PromptChange",
    "RunComparison",
    "RunRecords",
    "Shift",
    "compare_runs",
]

BOOTSTRAP_RESAMPLES = 4000
_LEVEL = 0.95
#: How bad a label is, by its text (`equiv.records.verdict.SEVERITY`, where both orders of the
#: labels are explained): a move up this scale is a regression.
SEVERITY = {label.value: rank for label, rank in LABEL_SEVERITY.items()}
# Header entries that differ between any two runs and say nothing about the setup.
_VOLATILE = ("created", "command", "argv", "kind", "schema", "python", "servers")


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
def _flatten(data: JSONObject, prefix: str = "") -> JSONDict:
    flat: JSONDict = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(_flatten(value, name + "."))
        else:
            flat[name] = value
    return flat


def machine_change(a: HeaderRecord, b: HeaderRecord) -> str | None:
    """``machine: ...`` where the two headers name machines whose numerics may differ (CPU, SIMD
    features, GPU, llama.cpp build); None where they agree or a header predates the record."""
    if a.machine is None or b.machine is None:
        return None
    changes = a.machine.changes(b.machine)
    if not changes:
        return None
    return (
        f"machine: {'; '.join(changes)} (near-ties flip where each machine's kernels put them: "
        "divergences may move between prompts with both runs right)"
    )


def setup_differences(a: HeaderRecord, b: HeaderRecord) -> tuple[str, ...]:
    """Header entries that differ, as ``name: A -> B`` named by their dotted place in the file
    (fingerprints and config included); a change of machine first, in words
    (`machine_change`), then its fields with the rest."""
    fa = _flatten({k: v for k, v in a.to_dict().items() if k not in _VOLATILE})
    fb = _flatten({k: v for k, v in b.to_dict().items() if k not in _VOLATILE})
    machine = machine_change(a, b)
    fields = [
        f"{k}: {_change(fa.get(k), fb.get(k))}"
        for k in sorted(set(fa) | set(fb))
        if fa.get(k) != fb.get(k)
    ]
    return tuple([machine, *fields] if machine else fields)


def _change(a: Any, b: Any, room: int = 60) -> str:
    """``A -> B``, long values cut to the part where they differ."""
    ta, tb = ("(none)" if v is None else str(v) for v in (a, b))
    if max(len(ta), len(tb)) <= room:
        return f"{ta} -> {tb}"
    head = next((i for i, (x, y) in enumerate(zip(ta, tb, strict=False)) if x != y), 0)
    start = max(head - 10, 0)

    def cut(text: str) -> str:
        part = text[start : start + room]
        return ("..." if start else "") + part + ("..." if start + room < len(text) else "")

    return f"{cut(ta)} -> {cut(tb)}"


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


def _ratio_of_sums(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    """sum(num) / sum(den) along the last axis, NaN where the denominator sums to 0."""
    total = den.sum(axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(total > 0, num.sum(axis=-1) / np.where(total > 0, total, 1), np.nan)


def _shift(
    name: str,
    fa: np.ndarray,
    fb: np.ndarray,
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
    paired = sorted(set(results_a) & set(results_b))
    fa = np.array([_figures(results_a[k]) for k in paired], dtype=np.float64).reshape(-1, 8)
    fb = np.array([_figures(results_b[k]) for k in paired], dtype=np.float64).reshape(-1, 8)
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
        drift=_shift("drift (mean KL per shared row, nats)", fa, fb, 0, 1),
        acceptance=_shift("draft acceptance", fa, fb, 2, 3),
        baseline_speed=_shift("baseline speed", fa, fb, 4, 5, ratio=True, unit=" tok/s"),
        speculative_speed=_shift("speculative speed", fa, fb, 6, 7, ratio=True, unit=" tok/s"),
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
