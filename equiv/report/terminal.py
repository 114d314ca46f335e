"""Terminal views of a run: the summary table, the controls and the conclusion."""

from __future__ import annotations

from pathlib import Path

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from equiv.records.verdict import Label
from equiv.verdicts.runs.summary import SuiteSummary, Summary

__all__ = ["print_prompts", "print_summary", "print_sweep", "summary_table"]

_LABEL_STYLE = {
    Label.EQUIVALENT: "green",
    Label.NUMERIC_DRIFT: "yellow",
    Label.SAMPLER_BUG: "red",
    Label.MISCONFIGURATION: "magenta",
    Label.INCONCLUSIVE: "blue",
}


def _labels(s: SuiteSummary) -> Text:
    """The labels a suite got, one per line, each in its colour (none: a dash)."""
    text = Text()
    for label in Label:
        if n := s.labels.get(label.value, 0):
            text.append("\n" if text else "")
            text.append(f"{n} {label.value}", style=_LABEL_STYLE[label])
    return text or Text("-")


def _row(s: SuiteSummary) -> list[Text | str]:
    acc = f"{s.acceptance:.3f}" if s.acceptance is not None else "-"
    speedup = f"{s.measured_speedup:.2f}x" if s.measured_speedup is not None else "-"
    base = f"{s.baseline_tps:.1f}" if s.baseline_tps else "-"
    spec = f"{s.speculative_tps:.1f}" if s.speculative_tps else "-"
    return [Text(s.suite), str(s.prompts), _labels(s), acc, base, spec, speedup]


def summary_table(summary: Summary) -> Table:
    """One row per suite and a total: prompts, their labels (one per line), draft acceptance,
    decode speed of both paths and the speed-up. Made to read well in 80 columns."""
    table = Table(title="equiv: baseline vs speculative", box=box.SIMPLE_HEAD, padding=(0, 1))
    table.add_column("suite", overflow="fold", max_width=16)
    table.add_column("prompts", justify="right")
    table.add_column("labels", no_wrap=True)
    table.add_column("accept", justify="right")
    table.add_column("tok/s\nbase", justify="right")
    table.add_column("tok/s\nspec", justify="right")
    table.add_column("speed-\nup", justify="right")
    for suite in summary.suites.values():
        table.add_row(*_row(suite))
    table.add_section()
    table.add_row(*_row(summary.total), style="bold")
    return table


def print_summary(summary: Summary, console: Console, *, results_path: Path | None = None) -> None:
    console.print(summary_table(summary))
    if summary.drift is not None:
        console.print(summary.drift.line, highlight=False, markup=False)
    if summary.divergence_rate is not None:
        console.print(summary.divergence_rate.line, highlight=False, markup=False)
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
    # Text, not markup: details, differences and reasons carry file names and model text.
    for event in summary.events:
        control = Text(f"control {event.event}: ")
        control.append(*(("ok", "green") if event.ok else ("FAILED", "red")))
        console.print(control.append(f" - {event.detail}"), highlight=False)
    for difference in summary.differences:
        setup = Text("setup differs", style="magenta").append(f": {difference}", style="default")
        console.print(setup, highlight=False)
    for line in summary.quality_lines:
        console.print(
            line, style="red" if summary.quality_drop else None, highlight=False, markup=False
        )
    if summary.run is not None:
        for line in summary.run.pooled.lines():
            console.print(Text(line), highlight=False)
    style = _LABEL_STYLE[summary.verdict.label]
    console.print(Text(summary.conclusion, style=f"bold {style}"), highlight=False)
    if results_path is not None:
        console.print(Text(f"results: {results_path}"), highlight=False)


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


def print_prompts(results_path: Path, console: Console) -> None:
    """``-v``: each judged prompt's label and reason, one line each (model text escaped)."""
    from equiv.config import Mode
    from equiv.records import AnalysisRecord, ResultRecord, ResultsFile

    contents = ResultsFile(results_path).read()
    judged: list[ResultRecord | AnalysisRecord] = [
        r for r in contents.results if r.mode is Mode.TEMP0
    ]
    for record in [*judged, *contents.analyses]:
        verdict = record.judged
        line = Text(f"{record.key}  ")
        line.append(verdict.label.value, style=_LABEL_STYLE[verdict.label])
        line.append(f"  {verdict.reason}")
        console.print(line, highlight=False)
