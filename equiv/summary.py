"""Run-level figures derived once from the result records, shared by the CLI, report and plugin."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["SuiteSummary", "Summary", "summarize"]


@dataclass
class SuiteSummary:
    """Counts and speeds of one suite (or of the whole run, as suite ``all``)."""

    suite: str
    prompts: int = 0
    identical: int = 0
    diverged: int = 0
    drafted: int = 0
    accepted: int = 0
    baseline_tokens: int = 0
    baseline_decode_s: float = 0.0
    speculative_tokens: int = 0
    speculative_decode_s: float = 0.0

    @property
    def acceptance(self) -> float | None:
        return self.accepted / self.drafted if self.drafted else None

    @property
    def baseline_tps(self) -> float:
        return self.baseline_tokens / self.baseline_decode_s if self.baseline_decode_s else 0.0

    @property
    def speculative_tps(self) -> float:
        s = self.speculative_decode_s
        return self.speculative_tokens / s if s else 0.0

    def add(self, record: Mapping[str, Any]) -> None:
        self.prompts += 1
        if record["comparison"]["identical"]:
            self.identical += 1
        else:
            self.diverged += 1
        for step in record["speculative"]["draft_steps"]:
            if not step[3]:
                self.drafted += step[1]
                self.accepted += step[2]
        for path in ("baseline", "speculative"):
            gen = record[path]
            n = max(len(gen["tokens"]) - 1, 0)  # the first token's time is prompt evaluation
            setattr(self, f"{path}_tokens", getattr(self, f"{path}_tokens") + n)
            setattr(self, f"{path}_decode_s", getattr(self, f"{path}_decode_s") + gen["t_decode_s"])

    def to_dict(self) -> dict[str, Any]:
        return {
            **self.__dict__,
            "acceptance": self.acceptance,
            "baseline_tps": self.baseline_tps,
            "speculative_tps": self.speculative_tps,
        }


@dataclass
class Summary:
    suites: dict[str, SuiteSummary] = field(default_factory=dict)
    total: SuiteSummary = field(default_factory=lambda: SuiteSummary("all"))
    events: list[dict[str, Any]] = field(default_factory=list)

    @property
    def conclusion(self) -> str:
        t = self.total
        if t.prompts == 0:
            return "no results yet"
        acc = f"; draft acceptance {t.acceptance:.2f}" if t.acceptance is not None else ""
        if t.diverged == 0:
            return (
                f"speculative output identical to baseline on all {t.prompts} prompt(s) at "
                f"temp 0{acc}"
            )
        return (
            f"speculative output diverged from baseline on {t.diverged} of {t.prompts} "
            f"prompt(s) at temp 0{acc}"
        )

    @property
    def failed_controls(self) -> list[dict[str, Any]]:
        return [e for e in self.events if e.get("ok") is False]


def summarize(
    records: Iterable[Mapping[str, Any]], events: Iterable[Mapping[str, Any]] = ()
) -> Summary:
    summary = Summary(events=[dict(e) for e in events])
    for record in records:
        suite = str(record["suite"])
        summary.suites.setdefault(suite, SuiteSummary(suite)).add(record)
        summary.total.add(record)
    return summary
