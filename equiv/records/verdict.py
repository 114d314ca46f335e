"""The labels equiv gives and the verdict that carries one with its evidence.

Every result record (one prompt x mode) gets exactly one `Verdict` under the key ``verdict``;
the classifier (``equiv/verdicts/temp0/classify.py``) decides it. Readers (report, plugin, CLI) use
only this. Defined beside the records that hold them (a result's verdict is part of the record),
so that `equiv.records` needs nothing above it: the one home of `Label` and `Verdict`.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from equiv.json_types import JSONDict, JSONObject, json_object

__all__ = ["RUN_PRECEDENCE", "SEVERITY", "Label", "Verdict", "verdict_of"]


class Label(str, enum.Enum):
    """Why (or whether) the speculative path's output differs from the baseline's."""

    EQUIVALENT = "equivalent"
    NUMERIC_DRIFT = "numeric-drift"
    SAMPLER_BUG = "sampler-bug"
    MISCONFIGURATION = "misconfiguration"
    INCONCLUSIVE = "inconclusive"

    def __str__(self) -> str:
        return self.value


#: Two orders of the labels, for two questions, kept here side by side.
#:
#: `RUN_PRECEDENCE`: which label names a whole run whose prompts got several
#: (`equiv.verdicts.temp0.classify.run_verdict`): the first one present. A misconfiguration first,
#: since it makes every other comparison of the run meaningless; then a sampler bug, the finding
#: a user must act on; then numeric drift, a finding that explains the differences; then
#: inconclusive (some prompts could not be judged, none showed anything); equivalent last.
RUN_PRECEDENCE: tuple[Label, ...] = (
    Label.MISCONFIGURATION,
    Label.SAMPLER_BUG,
    Label.NUMERIC_DRIFT,
    Label.INCONCLUSIVE,
    Label.EQUIVALENT,
)
#: `SEVERITY`: how bad a prompt's label is when two runs are compared (`equiv compare`): a move
#: up this scale is a regression. Here inconclusive ranks *above* numeric drift, the one place
#: the two orders differ: a prompt whose differences were explained (drift) and now cannot be
#: judged has lost evidence, which a gate must flag; naming a run, an explained difference says
#: more than an unjudged one. Misconfiguration and sampler bug are equally bad as changes.
SEVERITY: dict[Label, int] = {
    Label.EQUIVALENT: 0,
    Label.NUMERIC_DRIFT: 1,
    Label.INCONCLUSIVE: 2,
    Label.MISCONFIGURATION: 3,
    Label.SAMPLER_BUG: 3,
}


@dataclass(frozen=True)
class Verdict:
    """A label, one plain-language sentence saying why, and the numbers a human can check."""

    label: Label
    reason: str
    evidence: JSONObject = field(default_factory=dict)

    @property
    def equivalent(self) -> bool:
        return self.label is Label.EQUIVALENT

    @property
    def rescore_failed(self) -> bool:
        """The temp-0 rule could not re-score the divergence (``rescore_failed`` of
        `equiv.verdicts.verdict_evidence.Temp0Evidence`, the one key of the evidence read at
        this level: a resumed run redoes such a result). Readers above ``records`` take the
        whole typed evidence with that module's ``from_dict``."""
        return self.evidence.get("rescore_failed") is True

    def to_dict(self) -> JSONDict:
        return {"label": self.label.value, "reason": self.reason, "evidence": dict(self.evidence)}

    @classmethod
    def from_dict(cls, data: JSONObject) -> Verdict:
        evidence = dict(json_object(data.get("evidence", {})))
        return cls(Label(data["label"]), str(data["reason"]), evidence)


def verdict_of(record: JSONObject) -> Verdict:
    """The verdict of a result record; records from before classification get a plain one."""
    if record.get("verdict"):
        return Verdict.from_dict(json_object(record["verdict"]))
    if json_object(record["comparison"])["identical"]:
        return Verdict(Label.EQUIVALENT, "token IDs identical")
    return Verdict(Label.INCONCLUSIVE, "outputs differ; not classified yet")
