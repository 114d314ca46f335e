"""Terminal views of a run: the summary table and the controls."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.table import Table

from equiv.summary import SuiteSummary, Summary

__all__ = ["print_summary"]


def _row(s: SuiteSummary) -> list[str]:
    acc = f"{s.acceptance:.3f}" if s.acceptance is not None else "-"
    speedup = (
        f"{s.speculative_tps / s.baseline_tps:.2f}x"
        if s.baseline_tps and s.speculative_tps
        else "-"
    )
    return [
        s.suite,
        str(s.prompts),
        str(s.identical),
        str(s.diverged),
        acc,
        f"{s.baseline_tps:.1f}",
        f"{s.speculative_tps:.1f}",
        speedup,
    ]


def print_summary(summary: Summary, console: Console, *, results_path: Path | None = None) -> None:
    table = Table(title="equiv: baseline vs speculative at temp 0")
    for name in (
        "suite",
        "prompts",
        "equivalent",
        "diverged",
        "acceptance",
        "base tok/s",
        "spec tok/s",
        "speed-up",
    ):
        table.add_column(name, justify="left" if name == "suite" else "right")
    for suite in summary.suites.values():
        table.add_row(*_row(suite))
    table.add_section()
    table.add_row(*_row(summary.total), style="bold")
    console.print(table)
    for event in summary.events:
        mark = "[green]ok[/]" if event.get("ok") else "[red]FAILED[/]"
        console.print(f"control {event['event']}: {mark} - {event['detail']}", highlight=False)
    console.print(f"[bold]{summary.conclusion}[/]", highlight=False)
    if results_path is not None:
        console.print(f"results: {results_path}", highlight=False)
