"""``equiv compare RUN_A RUN_B``: what changed between two runs of the same plan. Thin: read both
results files, `equiv.verdicts.runs.compare.compare_runs`, print, exit 1 when the gate trips."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

from equiv.errors import ConfigError

if TYPE_CHECKING:
    import argparse

    from equiv.verdicts.runs.compare import RunComparison

__all__ = ["cmd_compare", "load_comparison", "results_path"]

EXIT_GATE = 1


def results_path(text: str) -> Path:
    """A run named by its results.jsonl or the folder that holds it."""
    path = Path(text)
    if path.is_dir():
        path = path / "results.jsonl"
    if not path.is_file():
        raise ConfigError(
            f"{text!r} is not a results file or a folder with results.jsonl; "
            "pass what equiv run --out wrote (e.g. reports/20261130-120000)"
        )
    return path


def load_comparison(run_a: str, run_b: str) -> RunComparison:
    """The comparison of two runs named by their results files or folders; an error naming the
    run when one holds no results or the two share no prompt."""
    from equiv.records import ResultsFile
    from equiv.verdicts.runs.compare import RunRecords, compare_runs

    path_a, path_b = results_path(run_a), results_path(run_b)
    records_a = RunRecords.from_file(ResultsFile(path_a), name=str(path_a))
    records_b = RunRecords.from_file(ResultsFile(path_b), name=str(path_b))
    if not (records_a.results or records_a.analyses) or not (
        records_b.results or records_b.analyses
    ):
        empty = path_a if not (records_a.results or records_a.analyses) else path_b
        raise ConfigError(f"{str(empty)!r} holds no results yet; finish it with --resume first")
    comparison = compare_runs(records_a, records_b)
    if comparison.common == 0:
        raise ConfigError(
            f"{str(path_a)!r} and {str(path_b)!r} share no prompt: they are not runs of the "
            "same plan; rerun one with the other's --suite/--prompt/--mode"
        )
    return comparison


def cmd_compare(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.text import Text

    from equiv.report.summary_json import strict_json
    from equiv.verdicts.runs.compare import Gate

    comparison = load_comparison(args.run_a, args.run_b)
    gate = Gate(args.fail_on)
    failures = comparison.failures(gate)
    human = Console(stderr=True) if args.json else Console(highlight=False)
    if args.html:
        from equiv.report.compare_view import write_compare_report

        page = write_compare_report(comparison, Path(args.html), gate=gate)
        human.print(Text(f"report: {page}"))
    if args.json:
        sys.stdout.write(strict_json(comparison.to_dict(gate)))
    lines = comparison.lines()
    if args.quiet:
        lines = lines[:2]
    elif not args.verbose:  # the first 20 changed keys; -v lists them all
        changed = [i for i, line in enumerate(lines) if line.startswith(("  worse", "  change"))]
        if len(changed) > 20:
            cut = changed[20]
            lines = [
                *lines[:cut],
                f"  ... {len(changed) - 20} more (-v lists them)",
                *lines[changed[-1] + 1 :],
            ]
    for line in lines:
        style = "red" if line.startswith("  worse") else None
        human.print(Text(line, style=style or ""))
    verdict = f"FAILS --fail-on {gate}" if failures else f"passes --fail-on {gate}"
    human.print(
        Text(
            f"compare: {verdict}" + (f" ({len(failures)} reason(s))" if failures else ""),
            style="red" if failures else "green",
        )
    )
    return EXIT_GATE if failures else 0
