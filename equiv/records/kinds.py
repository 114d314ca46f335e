"""The kinds of line in a results file (`Kind`), the schema version, and the records of the
sampling run and its events; each record is frozen, with ``to_dict``/``from_dict``.

- ``header`` (the first line): `equiv.records.header.HeaderRecord`;
- ``result``: one prompt x mode x seed, `equiv.records.result.ResultRecord`;
- `AnalysisRecord` (``analysis``): one prompt's distribution tests over all its seeds (sampling);
- `RunRecord` (``run``): the run's own answer over all its prompts (sampling);
- `EventRecord` (``event``): a run-level fact found while running, e.g. a control's outcome.

``from_dict`` validates: a missing field or a value of the wrong type raises `FieldError` naming
the field. Keys a record does not know are kept (``extra``, `unknown_fields`) and written back
unchanged. `equiv.records.reader.parse_record` reads a line as the record of its kind.

Schema 2 (this version) differs from 1 in the names of the drift figures (`Drift`) and in the
``prompt_hash`` of each result; version 1 files are read (the hash derived from the prompt).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import ClassVar

from equiv.config import Mode
from equiv.json_types import JSONDict, JSONObject, JSONValue
from equiv.records.fields import Fields
from equiv.records.verdict import Label, Verdict

__all__ = [
    "OLDEST_SCHEMA",
    "RUN_KEY",
    "SCHEMA_VERSION",
    "AnalysisRecord",
    "Control",
    "EventRecord",
    "Kind",
    "RunRecord",
    "analysis_key",
    "parse_verdict",
    "unknown_fields",
]

SCHEMA_VERSION = 2
OLDEST_SCHEMA = 1  # the oldest version this equiv reads


class Kind(str, enum.Enum):
    """What a line of the results file holds."""

    HEADER = "header"
    RESULT = "result"
    ANALYSIS = "analysis"
    EVENT = "event"
    RUN = "run"

    def __str__(self) -> str:
        return self.value


class Control(str, enum.Enum):
    """The controls a run records as events; ``engine-failure`` is a path that failed on a
    prompt (a failed control whose ``key`` names it and whose ``path`` says which)."""

    DETERMINISM = "determinism"
    SELF_DRAFT = "self-draft"
    ENGINE_FAILURE = "engine-failure"

    def __str__(self) -> str:
        return self.value


def parse_verdict(data: JSONValue, where: str = "verdict") -> Verdict:
    """A record's ``verdict`` field; `FieldError` names what is wrong."""
    f = Fields(data, where)
    label = f.text("label")
    try:
        parsed = Label(label)
    except ValueError:
        f.fail("label", f"{label!r} is not one of {', '.join(x.value for x in Label)}")
    return Verdict(parsed, f.text("reason"), f.mapping("evidence", {}))


def unknown_fields(data: JSONObject, known: frozenset[str]) -> JSONDict:
    """The fields of ``data`` a record does not know: kept, and written back unchanged."""
    return {k: v for k, v in data.items() if k not in known}


def _test(data: JSONValue, where: str) -> JSONDict:
    """One distribution test of an analysis: a name, and numbers (or null) where given."""
    f = Fields(data, where)
    f.text("name")
    for key in ("statistic", "p_value", "p_adjusted", "alpha", "power", "effect"):
        f.number(key, None)
    for key in ("n", "df"):
        f.integer(key, None)
    f.text("detail", None)
    return dict(f.data)


@dataclass(frozen=True)
class AnalysisRecord:
    """One sampled prompt's distribution tests over all its seeds, and their verdict."""

    kind: ClassVar[Kind] = Kind.ANALYSIS
    _KNOWN: ClassVar[frozenset[str]] = frozenset(
        {"kind", "key", "suite", "prompt_id", "mode", "tests", "verdict"}
    )

    key: str
    suite: str
    prompt_id: str
    tests: tuple[JSONObject, ...] = ()
    verdict: Verdict | None = None
    mode: Mode = Mode.SAMPLING
    # samples, alpha, same_seed_agreement, drift, charts: as `PromptAnalysis.figures` wrote them
    figures: JSONObject = field(default_factory=dict)

    @property
    def judged(self) -> Verdict:
        if self.verdict is not None:
            return self.verdict
        return Verdict(Label.INCONCLUSIVE, "no verdict recorded for this analysis")

    def to_dict(self) -> JSONDict:
        data: JSONDict = {
            "kind": Kind.ANALYSIS.value,
            "key": self.key,
            "suite": self.suite,
            "prompt_id": self.prompt_id,
            "mode": self.mode.value,
            **self.figures,
            "tests": [dict(t) for t in self.tests],
        }
        if self.verdict is not None:
            data["verdict"] = self.verdict.to_dict()
        return data

    @classmethod
    def from_dict(cls, data: JSONObject, where: str = "") -> AnalysisRecord:
        f = Fields(data, where)
        mode = f.text("mode", Mode.SAMPLING.value)
        if mode != Mode.SAMPLING.value:
            f.fail("mode", f"an analysis is of sampling mode, found {mode!r}")
        return cls(
            key=f.text("key"),
            suite=f.text("suite"),
            prompt_id=f.text("prompt_id"),
            tests=tuple(
                _test(t, f.name(f"tests[{i}]")) for i, t in enumerate(f.array("tests", []))
            ),
            verdict=parse_verdict(data["verdict"], f.name("verdict")) if f.has("verdict") else None,
            figures=unknown_fields(data, cls._KNOWN),
        )


@dataclass(frozen=True)
class EventRecord:
    """A run-level fact: a control's outcome (``ok``), or a warning (``ok`` None)."""

    kind: ClassVar[Kind] = Kind.EVENT
    _KNOWN: ClassVar[frozenset[str]] = frozenset({"kind", "event", "ok", "detail", "key"})

    event: str
    detail: str
    ok: bool | None = None
    key: str | None = None  # the result it is about, if one
    extra: JSONObject = field(default_factory=dict)  # e.g. a self-draft's acceptance

    @property
    def failed(self) -> bool:
        return self.ok is False

    def to_dict(self) -> JSONDict:
        data: JSONDict = {"kind": Kind.EVENT.value, "event": self.event, "ok": self.ok}
        if self.key is not None:
            data["key"] = self.key
        data["detail"] = self.detail
        data.update(self.extra)
        return data

    @classmethod
    def from_dict(cls, data: JSONObject, where: str = "") -> EventRecord:
        f = Fields(data, where)
        return cls(
            event=f.text("event"),
            detail=f.text("detail", ""),
            ok=f.flag("ok", None),
            key=f.text("key", None),
            extra=unknown_fields(data, cls._KNOWN),
        )


#: The key of the run's own answer in sampling mode (`RunRecord`).
RUN_KEY = "run::sampling"


def analysis_key(prompt_key: str) -> str:
    """The key of a prompt's sampling analysis (`AnalysisRecord`): ``suite/id::sampling``."""
    return f"{prompt_key}::{Mode.SAMPLING.value}"


@dataclass(frozen=True)
class RunRecord:
    """The run's own answer over all its prompts: at temperature > 0 the verdict of the pooled
    tests (`equiv.verdicts.sampling.run_verdict`), written once the run has decided."""

    kind: ClassVar[Kind] = Kind.RUN
    _KNOWN: ClassVar[frozenset[str]] = frozenset({"kind", "key", "mode", "verdict"})

    verdict: Verdict
    key: str = RUN_KEY
    mode: Mode = Mode.SAMPLING
    # pooled, batched, stopping: as `equiv.verdicts.sampling.run_verdict.RunJudgement` wrote them
    figures: JSONObject = field(default_factory=dict)

    def to_dict(self) -> JSONDict:
        return {
            "kind": Kind.RUN.value,
            "key": self.key,
            "mode": self.mode.value,
            **self.figures,
            "verdict": self.verdict.to_dict(),
        }

    @classmethod
    def from_dict(cls, data: JSONObject, where: str = "") -> RunRecord:
        f = Fields(data, where)
        mode = f.text("mode", Mode.SAMPLING.value)
        if mode != Mode.SAMPLING.value:
            f.fail("mode", f"a run record is of sampling mode, found {mode!r}")
        return cls(
            verdict=parse_verdict(data.get("verdict"), f.name("verdict")),
            key=f.text("key"),
            figures=unknown_fields(data, cls._KNOWN),
        )
