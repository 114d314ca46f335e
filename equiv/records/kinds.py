"""The four kinds of line in a results file, each a frozen record with ``to_dict``/``from_dict``.

- `HeaderRecord` (``header``, the first line): the configuration, both paths' fingerprints and
  capabilities, the differences between them, and what else the run knew (vocabulary, argv, ...);
- `ResultRecord` (``result``): one prompt x mode x seed, both generations and their comparison,
  the verdict (temp 0) and the per-token evidence of sampling mode;
- `AnalysisRecord` (``analysis``): one prompt's distribution tests over all its seeds (sampling);
- `EventRecord` (``event``): a run-level fact found while running, e.g. a control's outcome.

``from_dict`` validates: a missing field or a value of the wrong type raises `FieldError` naming
the field. Keys a record does not know are kept (``extra``) and written back unchanged.

Schema 2 (this version) differs from 1 in the names of the drift figures (`Drift`) and in the
``prompt_hash`` of each result; version 1 files are read (the hash derived from the prompt).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from equiv.config import Mode
from equiv.errors import PromptError
from equiv.json_types import JSONDict, JSONObject, JSONValue
from equiv.prompts import Prompt
from equiv.records.comparison import ArgmaxFlips, Comparison, Drift
from equiv.records.fields import FieldError, Fields
from equiv.records.generation import Generation
from equiv.records.machine import Machine
from equiv.records.verdict import Label, Verdict

__all__ = [
    "OLDEST_SCHEMA",
    "RUN_KEY",
    "SCHEMA_VERSION",
    "AnalysisRecord",
    "Control",
    "EventRecord",
    "HeaderRecord",
    "Kind",
    "Record",
    "ResultRecord",
    "RunRecord",
    "analysis_key",
    "parse_record",
    "parse_verdict",
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


def parse_verdict(data: Any, where: str = "verdict") -> Verdict:
    f = Fields(data, where)
    label = f.text("label")
    try:
        parsed = Label(label)
    except ValueError:
        f.fail("label", f"{label!r} is not one of {', '.join(x.value for x in Label)}")
    return Verdict(parsed, f.text("reason"), f.mapping("evidence", {}))


def _extra(data: JSONObject, known: frozenset[str]) -> JSONDict:
    return {k: v for k, v in data.items() if k not in known}


@dataclass(frozen=True)
class HeaderRecord:
    """The first line: what was run, on what, and how the two paths differ."""

    kind: ClassVar[Kind] = Kind.HEADER
    _KNOWN: ClassVar[frozenset[str]] = frozenset(
        {
            "kind",
            "schema",
            "equiv",
            "created",
            "command",
            "python",
            "config",
            "fingerprints",
            "differences",
            "capabilities",
            "machine",
        }
    )

    config: JSONObject
    schema: int = SCHEMA_VERSION
    equiv: str = ""
    created: str = ""
    command: str = ""
    python: str = ""
    fingerprints: Mapping[str, JSONObject] = field(default_factory=dict)
    differences: tuple[str, ...] = ()
    capabilities: JSONObject = field(default_factory=dict)
    machine: Machine | None = None  # None in files written before equiv recorded it
    extra: JSONObject = field(default_factory=dict)  # vocab, argv, servers, ...

    @property
    def has_logits(self) -> bool:
        """Both paths reported the rows they sampled from (in process), per the capabilities
        recorded."""
        caps = [self.capabilities.get(path) for path in ("baseline", "speculative")]
        return all(isinstance(c, dict) and c.get("full_logits") is True for c in caps)

    def get(self, key: str, default: Any = None) -> Any:
        """A field by its name in the file (known or extra)."""
        return self.to_dict().get(key, default)

    def to_dict(self) -> JSONDict:
        return {
            "kind": Kind.HEADER.value,
            "schema": self.schema,
            "equiv": self.equiv,
            "created": self.created,
            "command": self.command,
            "python": self.python,
            "config": dict(self.config),
            "fingerprints": {k: dict(v) for k, v in self.fingerprints.items()},
            "differences": list(self.differences),
            "capabilities": dict(self.capabilities),
            **({"machine": self.machine.to_dict()} if self.machine else {}),
            **self.extra,
        }

    @classmethod
    def from_dict(cls, data: JSONObject, where: str = "") -> HeaderRecord:
        f = Fields(data, where)
        schema = f.integer("schema")
        prints = f.obj("fingerprints", None)
        fingerprints: dict[str, JSONDict] = {}
        if prints is not None:
            fingerprints = {k: prints.mapping(k) for k in prints.data}
        machine = f.obj("machine", None)
        return cls(
            config=f.mapping("config"),
            schema=schema,
            equiv=f.text("equiv", ""),
            created=f.text("created", ""),
            command=f.text("command", ""),
            python=f.text("python", ""),
            fingerprints=fingerprints,
            differences=f.strs("differences", ()),
            capabilities=f.mapping("capabilities", {}),
            machine=None if machine is None else Machine.from_dict(machine.data, "machine"),
            extra=_extra(data, cls._KNOWN),
        )


@dataclass(frozen=True)
class ResultRecord:
    """One prompt x mode x seed: both generations, their comparison, and its verdict."""

    kind: ClassVar[Kind] = Kind.RESULT
    _KNOWN: ClassVar[frozenset[str]] = frozenset(
        {
            "kind",
            "key",
            "suite",
            "prompt_id",
            "mode",
            "seed",
            "prompt",
            "prompt_hash",
            "baseline",
            "speculative",
            "comparison",
            "verdict",
            "rescore_drift",
            "drift_placebo",
        }
    )

    key: str
    suite: str
    prompt_id: str
    mode: Mode
    seed: int | None
    prompt: Prompt
    baseline: Generation
    speculative: Generation
    comparison: Comparison
    verdict: Verdict | None = None
    rescore_drift: Drift | None = None
    # Temp 0: the placebo, where drift alone flips the target's choice along the baseline's tokens.
    drift_placebo: ArgmaxFlips | None = None
    # Per path, what a record holds beside the generation (sampling mode: the chain's PIT of
    # each token, the target's PIT of the speculative tokens, the judgements' evidence).
    evidence: Mapping[str, JSONObject] = field(default_factory=dict)
    extra: JSONObject = field(default_factory=dict)
    prompt_hash: str = ""  # empty: from the prompt (`Prompt.content_hash`)

    def __post_init__(self) -> None:
        if not self.prompt_hash:
            object.__setattr__(self, "prompt_hash", self.prompt.content_hash)

    @property
    def judged(self) -> Verdict:
        """The recorded verdict; records from before classification get a plain one."""
        if self.verdict is not None:
            return self.verdict
        if self.comparison.identical:
            return Verdict(Label.EQUIVALENT, "token IDs identical")
        return Verdict(Label.INCONCLUSIVE, "outputs differ; not classified yet")

    @property
    def rescore_failed(self) -> bool:
        """Re-scoring the target failed for this result (a server timed out or refused): the
        generations are kept, the verdict says why, and a resumed run redoes it."""
        if any("rescore_error" in self.evidence.get(p, {}) for p in ("baseline", "speculative")):
            return True
        return self.verdict is not None and bool(self.verdict.evidence.get("rescore_failed"))

    def generation(self, path: str) -> Generation:
        """``baseline`` or ``speculative``."""
        return self.speculative if path == "speculative" else self.baseline

    def to_dict(self) -> JSONDict:
        data: JSONDict = {
            "kind": Kind.RESULT.value,
            "key": self.key,
            "suite": self.suite,
            "prompt_id": self.prompt_id,
            "mode": self.mode.value,
            "seed": self.seed,
            "prompt": self.prompt.to_dict(),
            "prompt_hash": self.prompt_hash,
            "baseline": {**self.baseline.to_dict(), **self.evidence.get("baseline", {})},
            "speculative": {
                **self.speculative.to_dict(),
                **self.evidence.get("speculative", {}),
            },
            "comparison": self.comparison.to_dict(),
        }
        if self.verdict is not None:
            data["verdict"] = self.verdict.to_dict()
        if self.rescore_drift is not None:
            data["rescore_drift"] = self.rescore_drift.to_dict()
        if self.drift_placebo is not None:
            data["drift_placebo"] = self.drift_placebo.to_dict()
        data.update(self.extra)
        return data

    @classmethod
    def from_dict(cls, data: JSONObject, where: str = "") -> ResultRecord:
        f = Fields(data, where)
        key = f.text("key")
        suite = f.text("suite")
        try:
            raw = f.mapping("prompt")
            prompt = Prompt.from_dict(raw, suite=str(raw.get("suite") or suite))
        except PromptError as exc:
            raise FieldError(f.name("prompt"), str(exc)) from None
        mode = f.text("mode", Mode.TEMP0.value)
        try:
            parsed_mode = Mode(mode)
        except ValueError:
            f.fail("mode", f"{mode!r} is not one of {', '.join(m.value for m in Mode)}")
        gens = {path: f.obj(path) for path in ("baseline", "speculative")}
        drift = f.obj("rescore_drift", None)
        placebo = f.obj("drift_placebo", None)
        return cls(
            key=key,
            suite=suite,
            prompt_id=f.text("prompt_id", prompt.id),
            mode=parsed_mode,
            seed=f.integer("seed", None),
            prompt=prompt,
            prompt_hash=f.text("prompt_hash", ""),
            baseline=Generation.from_dict(gens["baseline"].data, gens["baseline"].where),
            speculative=Generation.from_dict(gens["speculative"].data, gens["speculative"].where),
            comparison=Comparison.from_dict(f.mapping("comparison"), f.name("comparison")),
            verdict=parse_verdict(data["verdict"], f.name("verdict")) if f.has("verdict") else None,
            rescore_drift=None if drift is None else Drift.from_dict(drift.data, drift.where),
            drift_placebo=None
            if placebo is None
            else ArgmaxFlips.from_dict(placebo.data, placebo.where),
            evidence={
                path: extra
                for path, g in gens.items()
                if (extra := _extra(g.data, Generation.KEYS))
            },
            extra=_extra(data, cls._KNOWN),
        )


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
            figures=_extra(data, cls._KNOWN),
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
            extra=_extra(data, cls._KNOWN),
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
            figures=_extra(data, cls._KNOWN),
        )


Record = HeaderRecord | ResultRecord | AnalysisRecord | EventRecord | RunRecord

_TYPES: dict[str, type[Record]] = {
    Kind.HEADER.value: HeaderRecord,
    Kind.RESULT.value: ResultRecord,
    Kind.ANALYSIS.value: AnalysisRecord,
    Kind.EVENT.value: EventRecord,
    Kind.RUN.value: RunRecord,
}


def parse_record(data: Any) -> Record:
    """The typed record of one parsed JSON line; `FieldError` names what is wrong."""
    f = Fields(data)
    kind = f.text("kind")
    cls = _TYPES.get(kind)
    if cls is None:
        f.fail("kind", f"{kind!r} is not one of {', '.join(_TYPES)}")
    return cls.from_dict(data)
