"""The result record: one prompt x mode x seed, both generations and their comparison, the
verdict (temperature 0) and, per path, the evidence beside each generation (sampling mode)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar

from equiv.config import Mode
from equiv.errors import PromptError
from equiv.json_types import JSONDict, JSONObject
from equiv.prompts import Prompt
from equiv.records.comparison import ArgmaxFlips, Comparison, Drift
from equiv.records.fields import FieldError, Fields
from equiv.records.generation import Generation
from equiv.records.kinds import Kind, parse_verdict, unknown_fields
from equiv.records.verdict import Label, Verdict

__all__ = ["ResultRecord"]


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
        return self.verdict is not None and self.verdict.rescore_failed

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
                if (extra := unknown_fields(g.data, Generation.KEYS))
            },
            extra=unknown_fields(data, cls._KNOWN),
        )
