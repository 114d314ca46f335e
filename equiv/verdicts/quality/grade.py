"""One answer's grade: ``pass``, ``fail`` (with the reason the answer is wrong) or ``error`` (the
grader itself could not judge, left out of the statistics), as every grader returns it
(`equiv.verdicts.quality.graders`) and the result record holds it."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from equiv.json_types import JSONObject

__all__ = ["Grade", "Outcome", "short_reason"]

_REASON_CHARS = 300


class Outcome(str, enum.Enum):
    PASS = "pass"
    FAIL = "fail"
    ERROR = "error"  # the grader could not judge; not counted for either path


@dataclass(frozen=True)
class Grade:
    """One answer's grade and the reason, in words a person can check."""

    outcome: Outcome
    reason: str

    @property
    def passed(self) -> bool:
        return self.outcome is Outcome.PASS

    @property
    def graded(self) -> bool:
        return self.outcome is not Outcome.ERROR

    def to_dict(self) -> dict[str, str]:
        return {"outcome": self.outcome.value, "reason": self.reason}

    @classmethod
    def from_dict(cls, data: JSONObject) -> Grade:
        return cls(Outcome(data["outcome"]), str(data.get("reason", "")))


def short_reason(text: str) -> str:
    """``text`` on one line, cut to 300 characters: a reason a report can show."""
    text = " ".join(text.split())
    return text if len(text) <= _REASON_CHARS else text[: _REASON_CHARS - 3] + "..."
