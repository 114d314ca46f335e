"""One check of the pytest plugin: a prompt x mode judged, its records as plain data
(pytest-xdist ships them from a worker to the controller), its verdict, and the action a
`Policy` gives that verdict; `describe` and `divergence_line` write the lines a failing check
shows. No pytest here, and no engine: `equiv.pytest.session` runs the checks.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from equiv.errors import ConfigError
from equiv.json_types import JSONDict, JSONObject, json_list, json_object
from equiv.records import (
    AnalysisRecord,
    Divergence,
    EventRecord,
    Generation,
    HeaderRecord,
    ResultRecord,
    parse_record,
)
from equiv.records.verdict import Label, Verdict

__all__ = ["FAIL", "PASS", "WARN", "Check", "Policy", "describe", "divergence_line"]

FAIL, WARN, PASS = "fail", "warn", "pass"


@dataclass(frozen=True)
class Policy:
    """Which labels fail a check or warn, and how much numeric drift a session may show."""

    fail_on: frozenset[Label] = frozenset({Label.SAMPLER_BUG, Label.MISCONFIGURATION})
    warn_on: frozenset[Label] = frozenset()
    max_drift_rate: float | None = None
    fail_on_quality_drop: bool = False  # graded prompts pass significantly less on speculative

    def __post_init__(self) -> None:
        rate = self.max_drift_rate
        if rate is not None and not (isinstance(rate, int | float) and 0 <= rate <= 1):
            raise ConfigError(f"max drift rate {rate!r} is not a fraction in [0, 1]; e.g. 0.1")

    def judge(self, verdicts: Sequence[Verdict]) -> tuple[str, int]:
        """The action and the index of the verdict that decides it: the first that fails, else
        the first that warns, else the first that is not equivalent, else the first."""
        for action, labels in ((FAIL, self.fail_on), (WARN, self.warn_on - self.fail_on)):
            for i, verdict in enumerate(verdicts):
                if verdict.label in labels:
                    return action, i
        return PASS, next((i for i, v in enumerate(verdicts) if not v.equivalent), 0)


@dataclass(frozen=True)
class Check:
    """One prompt x mode, checked: ``.label``, ``.reason``, ``.equivalent``, and the records."""

    key: str
    mode: str
    action: str
    verdict: Verdict
    record: ResultRecord | AnalysisRecord  # what the verdict is about (sampling: the analysis)
    records: tuple[ResultRecord, ...]
    header: HeaderRecord
    extras: tuple[EventRecord | AnalysisRecord, ...] = ()  # what else the run appended

    @property
    def events(self) -> list[EventRecord]:
        """Controls (determinism, self-draft) run during this check."""
        return [x for x in self.extras if isinstance(x, EventRecord)]

    @property
    def label(self) -> Label:
        return self.verdict.label

    @property
    def reason(self) -> str:
        return self.verdict.reason

    @property
    def equivalent(self) -> bool:
        """True when every verdict judged is `equivalent` (the one shown is the first that is
        not, see `Policy.judge`)."""
        return self.verdict.equivalent

    @property
    def explanation(self) -> str:
        """The full explanation: label and reason, the first divergence, the evidence."""
        return "\n".join(describe(self.verdict, self.record))

    def __str__(self) -> str:
        return self.explanation

    def __repr__(self) -> str:
        # Short on purpose: pytest cuts an assertion message's repr at 240 characters, so the
        # plugin prints the explanation in full under a failing test instead (and str() has it).
        return f"<equiv {self.key}: {self.label} (evidence: str(check))>"

    def to_dict(self) -> JSONDict:
        """Plain data (pytest-xdist ships it from a worker to the controller)."""
        return {
            "key": self.key,
            "mode": self.mode,
            "action": self.action,
            "verdict": self.verdict.to_dict(),
            "record": self.record.to_dict(),
            "records": [r.to_dict() for r in self.records],
            "header": self.header.to_dict(),
            "extras": [x.to_dict() for x in self.extras],
        }

    @classmethod
    def from_dict(cls, data: JSONObject) -> Check:
        record = parse_record(data["record"])
        header = parse_record(data["header"])
        extras = [parse_record(x) for x in json_list(data["extras"])]
        assert isinstance(record, ResultRecord | AnalysisRecord)
        assert isinstance(header, HeaderRecord)
        return cls(
            key=str(data["key"]),
            mode=str(data["mode"]),
            action=str(data["action"]),
            verdict=Verdict.from_dict(json_object(data["verdict"])),
            record=record,
            records=tuple(
                ResultRecord.from_dict(json_object(r)) for r in json_list(data["records"])
            ),
            header=header,
            extras=tuple(x for x in extras if isinstance(x, EventRecord | AnalysisRecord)),
        )


def describe(verdict: Verdict, record: ResultRecord | AnalysisRecord) -> list[str]:
    """A few lines a human reads: label and reason, the first divergence, the evidence."""
    lines = [f"{verdict.label}: {verdict.reason}"]
    # An analysis record (sampling) has no divergence of its own.
    comparison = record.comparison if isinstance(record, ResultRecord) else None
    div = comparison.divergence if comparison is not None else None
    if isinstance(record, ResultRecord) and comparison is not None and div is not None:
        pos = div.position
        seed = "" if record.seed is None else f", seed {record.seed}"
        before = (record.prompt.text or "") + "".join(record.baseline.pieces[:pos])
        lines.append(
            f"  first divergence at token {pos} ({comparison.n_baseline} baseline / "
            f"{comparison.n_speculative} speculative tokens{seed}), after {before[-40:]!r}:"
        )
        for path in ("baseline", "speculative"):
            lines.append(f"    {path:<12} " + _side(div, path, record.generation(path)))
        parts = []
        if div.delta_logit_at_divergence is not None:
            parts.append(f"max |delta logit| {div.delta_logit_at_divergence:.4f} at that row")
        if (drift := comparison.drift) is not None:
            parts.append(
                f"over the {drift.rows} shared rows max |delta logit| "
                f"{drift.max_abs_logit_delta:.4f}, mean KL {drift.kl_mean:.2e}, "
                f"top-1 agreement {drift.top1_agreement:.3f}"
            )
        if parts:
            lines.append("  " + "; ".join(parts))
    evidence = [
        f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={str(v)[:40]}"
        for k, v in verdict.evidence.items()
        if v is None or isinstance(v, str | int | float | bool)
    ]
    if evidence:
        lines.append("  evidence: " + ", ".join(evidence[:6]))
    return lines


def _side(div: Divergence, path: str, gen: Generation) -> str:
    if path == "baseline":
        token, text, margin, other = (
            div.baseline_token,
            div.baseline_text,
            div.margin_baseline,
            div.speculative_text,
        )
    else:
        token, text, margin, other = (
            div.speculative_token,
            div.speculative_text,
            div.margin_speculative,
            div.baseline_text,
        )
    if token is None:
        return f"ended after {gen.n_tokens} tokens ({gen.stop_reason})"
    shown = f"{text!r} (id {token})"
    if margin is None:
        return shown
    if margin < 0:  # the path did not pick its own favourite of the two
        return f"{shown} trailed {other!r} by {-margin:.4f} in its own logits"
    return f"{shown} led {other!r} by {margin:.4f} in its own logits"


def divergence_line(record: ResultRecord | AnalysisRecord) -> str:
    """The first divergence in one line (empty when the outputs are identical)."""
    div = record.comparison.divergence if isinstance(record, ResultRecord) else None
    if div is None:
        return ""
    b, s = div.baseline_text, div.speculative_text
    return f"first divergence at token {div.position}: baseline {b!r}, speculative {s!r}"
