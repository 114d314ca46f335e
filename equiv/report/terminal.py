"""Terminal views of a run: the summary table, the controls and the conclusion."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.table import Table

from equiv.verdicts.labels import Label
from equiv.verdicts.summary import SuiteSummary, Summary

__all__ = ["print_summary", "print_sweep"]

_LABEL_STYLE = {
    Label.EQUIVALENT: "green",
    Label.NUMERIC_DRIFT: "yellow",
    Label.SAMPLER_BUG: "red",
    Label.MISCONFIGURATION: "magenta",
    Label.INCONCLUSIVE: "blue",
}


def _row(s: SuiteSummary) -> list[str]:
    acc = f"{s.acceptance:.3f}" if s.acceptance is not None else "-"
    speedup = (
        f"{s.speculative_tps / s.baseline_tps:.2f}x"
        if s.baseline_tps and s.speculative_tps
        else "-"
    )
    labels = [str(s.labels.get(label.value, 0)) for label in Label]
    return [
        s.suite,
        str(s.prompts),
        *labels,
        acc,
        f"{s.baseline_tps:.1f}",
        f"{s.speculative_tps:.1f}",
        speedup,
    ]


def print_summary(summary: Summary, console: Console, *, results_path: Path | None = None) -> None:
    table = Table(title="equiv: baseline vs speculative")
    table.add_column("suite")
    table.add_column("prompts", justify="right")
    for label in Label:
        table.add_column(label.value, justify="right", style=_LABEL_STYLE[label])
    for name in ("acceptance", "base tok/s", "spec tok/s", "speed-up"):
        table.add_column(name, justify="right")
    for suite in summary.suites.values():
        table.add_row(*_row(suite))
    table.add_section()
    table.add_row(*_row(summary.total), style="bold")
    console.print(table)
    t = summary.total
    if t.measured_speedup is not None:
        line = (
            f"speed: {t.baseline_tps:.1f} tok/s plain, {t.speculative_tps:.1f} tok/s speculative "
            f"(measured {t.measured_speedup:.2f}x)"
        )
        if t.predicted_speedup is not None:
            line += (
                f"; {t.mean_accepted:.2f} draft tokens accepted per round, draft cost ratio "
                f"c = {t.cost_ratio:.2f}, Leviathan et al. predict {t.predicted_speedup:.2f}x"
            )
        else:
            line += "; the engine reports no drafting rounds or draft time, so no prediction"
        console.print(line, highlight=False)
    for event in summary.events:
        mark = "[green]ok[/]" if event.get("ok") else "[red]FAILED[/]"
        console.print(f"control {event['event']}: {mark} - {event['detail']}", highlight=False)
    for difference in summary.differences:
        console.print(f"[magenta]setup differs[/]: {difference}", highlight=False)
    for line in summary.quality_lines:
        console.print(
            line, style="red" if summary.quality_drop else None, highlight=False, markup=False
        )
    style = _LABEL_STYLE[summary.verdict.label]
    console.print(f"[bold {style}]{summary.conclusion}[/]", highlight=False)
    if results_path is not None:
        console.print(f"results: {results_path}", highlight=False)


def print_sweep(rows: list[tuple[int, Summary]], console: Console | None = None) -> None:
    """One line per draft-max value: acceptance, accepted length, speed-ups, labels."""
    console = console or Console(width=150)
    table = Table(title="equiv: draft-max sweep")
    for name in (
        "draft-max",
        "acceptance",
        "accepted/round",
        "c",
        "predicted",
        "measured",
        "labels",
    ):
        table.add_column(name, justify="right")
    for n, summary in rows:
        t = summary.total

        def fmt(x: float | None, spec: str = ".2f") -> str:
            return "-" if x is None else format(x, spec)

        labels = ", ".join(f"{k} {v}" for k, v in sorted(t.labels.items()))
        table.add_row(
            str(n),
            fmt(t.acceptance, ".3f"),
            fmt(t.mean_accepted),
            fmt(t.cost_ratio),
            fmt(t.predicted_speedup) + "x",
            fmt(t.measured_speedup) + "x",
            labels,
        )
    console.print(table)
