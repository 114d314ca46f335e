"""The analysis of one sampled prompt as typed records: what `prompt_analysis.analyze` finds and
`verdict.classify_sampling` reads.

- `ScoredTest`: one test's outcome with its Holm-adjusted p-value (a line of ``tests``);
- `Placebo`: the baseline's own samples through the speculative samples' pipeline;
- `BatchedEvidence`: over HTTP, the speculative samples re-scored batched against the placebo;
- `PooledDrift`: the seeds' re-scoring drifts pooled;
- `PromptAnalysis`: all of it for one prompt.

Each writes the analysis record of the results file (``to_dict``, the file byte for byte as
before) and reads one back (``from_dict``, tolerant of analyses written before a field existed).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from equiv.engines.base import RescoreCost
from equiv.json_types import (
    JSONDict,
    JSONObject,
    JSONValue,
    json_float,
    json_int,
    json_list,
    json_object,
)
from equiv.records import Drift
from equiv.records.codec import decode, encode
from equiv.verdicts.sampling.fidelity import Fidelity
from equiv.verdicts.stats import TestResult

__all__ = [
    "BatchedEvidence",
    "Charts",
    "Placebo",
    "PooledDrift",
    "PromptAnalysis",
    "ScoredTest",
    "find",
    "rejected",
]


@dataclass(frozen=True)
class ScoredTest:
    """A `TestResult` with its Holm-adjusted p-value among the tests of its family."""

    name: str
    statistic: float
    p_value: float
    p_adjusted: float
    n: int
    detail: str
    alpha: float | None = None
    df: int | None = None
    power: float | None = None
    effect: float | None = None

    @classmethod
    def of(cls, result: TestResult, p_adjusted: float) -> ScoredTest:
        return cls(**dataclasses.asdict(result), p_adjusted=p_adjusted)

    @property
    def kind(self) -> str:
        """The test's kind: its name up to the ``:`` (``pit``, ``top-token``, ...)."""
        return self.name.split(":")[0]

    @property
    def summary(self) -> str:
        """The first clause of ``detail``."""
        return self.detail.split(";")[0]

    def to_dict(self) -> JSONDict:
        return encode(self)

    @classmethod
    def from_dict(cls, data: JSONObject) -> ScoredTest:
        return decode(cls, data, "test")


def _tests(rows: JSONValue) -> tuple[ScoredTest, ...] | None:
    if rows is None:
        return None
    return tuple(ScoredTest.from_dict(json_object(t)) for t in json_list(rows))


def _rows(tests: Sequence[ScoredTest]) -> list[JSONDict]:
    return [t.to_dict() for t in tests]


def find(tests: Sequence[ScoredTest], name: str) -> ScoredTest | None:
    """The test named ``name``, if one ran."""
    return next((t for t in tests if t.name == name), None)


def rejected(tests: Sequence[ScoredTest], alpha: float) -> list[ScoredTest]:
    """The tests whose Holm-adjusted p-value is below ``alpha``."""
    return [t for t in tests if t.p_adjusted < alpha]


@dataclass(frozen=True)
class Placebo:
    """The placebo's own record: the baseline's one-sample tests through the speculative
    samples' pipeline (``tests``), how (``instrument``), the re-scoring's ``fidelity`` (as the
    file holds it: rounded), over HTTP the baseline against the rows the server reported while
    sampling (``own_rows``); ``error`` where it could not be formed."""

    fidelity: Fidelity | None = None
    error: str | None = None
    tests: tuple[ScoredTest, ...] | None = None
    instrument: str | None = None
    own_rows: tuple[ScoredTest, ...] | None = None

    def to_dict(self) -> JSONDict:
        data: JSONDict = {"fidelity": None if self.fidelity is None else self.fidelity.to_dict()}
        if self.error is not None:
            data["error"] = self.error
        if self.tests is not None:
            data["tests"] = _rows(self.tests)
        if self.instrument is not None:
            data["instrument"] = self.instrument
        if self.own_rows is not None:
            data["own_rows"] = _rows(self.own_rows)
        return data

    @classmethod
    def from_dict(cls, data: JSONObject) -> Placebo:
        fidelity = data.get("fidelity")
        return cls(
            fidelity=Fidelity.from_dict(json_object(fidelity)) if fidelity else None,
            error=None if data.get("error") is None else str(data["error"]),
            tests=_tests(data.get("tests")),
            instrument=None if data.get("instrument") is None else str(data["instrument"]),
            own_rows=_tests(data.get("own_rows")),
        )


@dataclass(frozen=True)
class BatchedEvidence:
    """Over HTTP, the speculative samples re-scored batched against the placebo
    (`pit_tests.batched_vs_placebo`): its ``tests``, or the ``error`` that stopped it, and the
    re-scoring's cost where an engine counts it (as `RescoreCost.to_dict` writes it)."""

    tests: tuple[ScoredTest, ...] | None = None
    error: str | None = None
    rescore_cost: RescoreCost | None = None

    def to_dict(self) -> JSONDict:
        data: JSONDict = {}
        if self.error is not None:
            data["error"] = self.error
        if self.tests is not None:
            data["tests"] = _rows(self.tests)
        if self.rescore_cost is not None:
            data["rescore_cost"] = self.rescore_cost.to_dict()
        return data

    @classmethod
    def from_dict(cls, data: JSONObject) -> BatchedEvidence:
        cost = data.get("rescore_cost")
        return cls(
            tests=_tests(data.get("tests")),
            error=None if data.get("error") is None else str(data["error"]),
            rescore_cost=None if cost is None else RescoreCost.from_dict(json_object(cost)),
        )


@dataclass(frozen=True)
class PooledDrift:
    """The seeds' re-scoring drifts as one `Drift` (means of the means, maxima of the maxima),
    with the number of samples it pools."""

    samples: int
    drift: Drift

    def to_dict(self) -> JSONDict:
        return {"samples": self.samples, **self.drift.to_dict()}

    @classmethod
    def from_dict(cls, data: JSONObject) -> PooledDrift:
        return cls(json_int(data.get("samples") or 0), Drift.from_dict(data, "drift"))


def _counts(values: JSONValue) -> list[float]:
    """A histogram's counts as the file holds them (integers stay integers)."""
    counts: list[float] = []
    for x in json_list(values):
        if not isinstance(x, int | float):
            raise TypeError(f"expected a number, found {type(x).__name__}")
        counts.append(x)
    return counts


@dataclass(frozen=True)
class Charts:
    """What the report draws per path: the PIT histogram (``observed`` and ``expected`` counts
    per bin) and the most frequent first tokens (token id as text -> count)."""

    pit_hist: Mapping[str, Mapping[str, Sequence[float]]] = field(default_factory=dict)
    first_token: Mapping[str, Mapping[str, int]] = field(default_factory=dict)

    def to_dict(self) -> JSONDict:
        return {
            "pit_hist": {path: dict(hist) for path, hist in self.pit_hist.items()},
            "first_token": {path: dict(counts) for path, counts in self.first_token.items()},
        }

    @classmethod
    def from_dict(cls, data: JSONObject) -> Charts:
        hists = json_object(data.get("pit_hist") or {})
        firsts = json_object(data.get("first_token") or {})
        return cls(
            {
                path: {name: _counts(values) for name, values in json_object(hist).items()}
                for path, hist in hists.items()
            },
            {
                path: {token: json_int(n) for token, n in json_object(counts).items()}
                for path, counts in firsts.items()
            },
        )


@dataclass(frozen=True)
class PromptAnalysis:
    """One sampled prompt's tests over all its seeds (`prompt_analysis.analyze`): the decision
    family (``tests``), the placebo, the speculative samples' one-sample tests
    (``consistency``), the pooled drift, the charts of the report, and over HTTP the batched
    follow-up where it was asked (``batched``)."""

    samples: int
    alpha: float
    tests: tuple[ScoredTest, ...]
    same_seed_agreement: float
    placebo: Placebo | None = None  # None: an analysis written before the placebo existed
    pipeline: Mapping[str, str] = field(default_factory=dict)
    consistency: tuple[ScoredTest, ...] = ()
    drift: PooledDrift | None = None
    charts: Charts = field(default_factory=lambda: Charts())
    rescore_errors: tuple[str, ...] = ()
    batched: BatchedEvidence | None = None

    def figures(self) -> JSONDict:
        """What the analysis record holds beside its tests, in the file's order."""
        data: JSONDict = {}
        if self.rescore_errors:
            data["rescore_errors"] = list(self.rescore_errors)
        data.update(samples=self.samples, alpha=self.alpha, pipeline=dict(self.pipeline))
        if self.placebo is not None:
            data["placebo"] = self.placebo.to_dict()
        data.update(
            consistency=_rows(self.consistency),
            same_seed_agreement=self.same_seed_agreement,
            drift=None if self.drift is None else self.drift.to_dict(),
            charts=self.charts.to_dict(),
        )
        if self.batched is not None:
            data["batched"] = self.batched.to_dict()
        return data

    def to_dict(self) -> JSONDict:
        """As the analysis record holds it: the figures, with ``tests`` after ``pipeline``."""
        figures = self.figures()
        at = list(figures).index("pipeline") + 1
        items = list(figures.items())
        return dict([*items[:at], ("tests", _rows(self.tests)), *items[at:]])

    @classmethod
    def from_dict(cls, data: JSONObject) -> PromptAnalysis:
        placebo = data.get("placebo")
        drift = data.get("drift")
        batched = data.get("batched")
        return cls(
            samples=json_int(data.get("samples") or 0),
            alpha=json_float(data["alpha"]),
            tests=_tests(data["tests"]) or (),
            same_seed_agreement=json_float(data.get("same_seed_agreement") or 0.0),
            placebo=None if placebo is None else Placebo.from_dict(json_object(placebo)),
            pipeline={k: str(v) for k, v in json_object(data.get("pipeline") or {}).items()},
            consistency=_tests(data.get("consistency")) or (),
            drift=None if not drift else PooledDrift.from_dict(json_object(drift)),
            charts=Charts.from_dict(json_object(data.get("charts") or {})),
            rescore_errors=tuple(str(e) for e in json_list(data.get("rescore_errors") or ())),
            batched=None if batched is None else BatchedEvidence.from_dict(json_object(batched)),
        )
