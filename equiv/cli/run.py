"""`equiv run`: one run (or a sweep of --draft-max values) from the option table to the
results file, its summary, its report and the terminal."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from equiv import __version__
from equiv.errors import EngineError, EquivError
from equiv.options.build import build_config
from equiv.options.table import OptionValue, OptionValues, given

if TYPE_CHECKING:
    from rich.console import Console

    from equiv.verdicts.runs.summary import Summary

__all__ = ["EXIT_CONTROL_FAILED", "EXIT_INTERRUPTED", "cmd_run", "warn_unreadable"]

EXIT_CONTROL_FAILED = 1
EXIT_INTERRUPTED = 130


def _results_dir(out: str | None, resume: bool) -> Path:
    if out:
        return Path(out)
    reports = Path("reports")
    if resume:
        runs = sorted(p.parent for p in reports.glob("*/results.jsonl"))
        if not runs:
            raise EquivError("--resume: no earlier run under reports/; pass --out DIR")
        return runs[-1]
    return reports / time.strftime("%Y%m%d-%H%M%S")


def cmd_run(args: argparse.Namespace, argv: Sequence[str]) -> int:
    values: dict[str, OptionValue] = vars(args)
    sweep = values.get("sweep_draft_max")
    if not sweep:
        return _run_once(values, argv, _results_dir(args.out, args.resume), args.resume)[0]
    from equiv.report.terminal import print_sweep

    base = _results_dir(args.out, args.resume)
    rows = []
    for n in _int_list(str(sweep)):
        code, summary = _run_once(
            {**values, "draft_max": n, "json": False, "stderr": args.json},
            argv,
            base / f"draft-max-{n}",
            args.resume,
        )
        if summary is None:
            return code
        rows.append((n, summary))
    print_sweep(rows, _console(bool(args.json)))
    if args.json:  # each draft-max value's summary.json, in one object
        from equiv.json_types import JSONDict
        from equiv.report.summary_json import strict_json, summary_of

        runs = {str(n): summary_of(base / f"draft-max-{n}" / "results.jsonl") for n, _ in rows}
        data: JSONDict = {"sweep": "draft_max", "runs": {n: r.to_dict() for n, r in runs.items()}}
        sys.stdout.write(strict_json(data))
    return 0


def _console(json_out: bool) -> Console:
    """Where the human-readable summary goes: stderr when stdout carries JSON; a pipe or a log
    gets 80 columns, which the summary table is made to fit."""
    from rich.console import Console

    if json_out:
        return Console(stderr=True, highlight=False)
    return Console(highlight=False) if sys.stdout.isatty() else Console(width=80, highlight=False)


def _int_list(text: str) -> list[int]:
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise EquivError(
            f"--sweep-draft-max {text!r}: give whole numbers, e.g. 1,2,4,8,16"
        ) from None
    if not values or min(values) < 1:
        raise EquivError(f"--sweep-draft-max {text!r}: give values >= 1, e.g. 1,2,4,8,16")
    return values


def _run_once(
    values: OptionValues, argv: Sequence[str], out: Path, resume: bool
) -> tuple[int, Summary | None]:
    from rich.console import Console

    from equiv.cli.progress import Progress
    from equiv.engines.server.settings import speculative_url
    from equiv.run.execute import run_plan
    from equiv.run.lock import check_out_dir
    from equiv.run.plan import plan, select_prompts

    console = Console(stderr=True)
    check_out_dir(out)  # before any model loads
    warn_unreadable(out / "results.jsonl")
    config, pair = build_config(values, workdir=out)
    prompts = select_prompts(config.suites, given(values.get("prompt")))
    # Paths are text, not markup: a folder named "[q4]" must print as it is.
    served = "the servers' own (equiv reads no model file)"
    target = served if pair.target.served else pair.target.path
    console.print(f"equiv {__version__}  target {target}", markup=False)
    drafted = f"{pair.draft.path} ({pair.draft.provenance})"
    if pair.draft.served:  # a running server's, or the vLLM equiv starts with its spec config
        url = speculative_url(config)
        where = f"at {url}" if url else "started by equiv"
        drafted = f"the speculative server's own, {where} (equiv loads no draft)"
    console.print(f"draft {drafted}", markup=False)
    try:
        with Progress(console, total=len(plan(prompts, config))) as progress:
            outcome = run_plan(
                config, pair, prompts, out, resume=resume, argv=argv, on_result=progress.update
            )
            if outcome.summary is None:
                progress.stop()
    except EngineError:
        _write_what_finished(out / "results.jsonl", out, console)
        raise
    if outcome.summary is None:
        console.print(
            f"interrupted: {outcome.finished} finished result(s) kept in "
            f"{outcome.results_path}; rerun with --resume --out {out} to continue",
            markup=False,
            style="yellow",
        )
        return EXIT_INTERRUPTED, None
    return _print_outcome(values, outcome.summary, outcome.results_path, out)


def _print_outcome(
    values: OptionValues, summary: Summary, results: Path, out: Path
) -> tuple[int, Summary | None]:
    """A finished run's summary, report and terminal lines; the exit code and the summary."""
    import resource

    from equiv.report.terminal import print_prompts, print_summary

    json_out = bool(values.get("json"))
    human = _console(json_out or bool(values.get("stderr")))  # stdout: JSON only
    summary_path, report_path = _write_files(results, out)
    if values.get("quiet"):
        human.print(summary.conclusion, markup=False)
        human.print(f"results: {results}", markup=False)
    else:
        print_summary(summary, human, results_path=results)
    if values.get("verbose"):
        print_prompts(results, human)
    human.print(f"summary: {summary_path}", markup=False)
    human.print(f"report: {report_path}", markup=False)
    if not values.get("quiet"):
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        human.print(f"peak memory (RSS, both paths in one process): {peak:.0f} MiB")
    if json_out:
        sys.stdout.write(summary_path.read_text(encoding="utf-8"))
    return (EXIT_CONTROL_FAILED if summary.failed_controls else 0), summary


def _write_what_finished(results: Path, out: Path, console: Console) -> None:
    """A run an engine's failure stopped: the summary and report of what finished, for the bug
    report (a path's failure on a prompt is a failed control, and the verdict says the run did
    not finish). A failure to write them is a warning: the engine's error is the one to report."""
    if not results.is_file():
        return
    try:
        summary, report = _write_files(results, out)
    except (EquivError, OSError) as exc:
        console.print(f"could not write the summary of what finished: {exc}", markup=False)
        return
    console.print(f"what finished: {summary}, {report}", markup=False)


def _write_files(results: Path, out: Path) -> tuple[Path, Path]:
    """summary.json beside the results, report.html in ``out``; their paths."""
    from equiv.report import write_report
    from equiv.report.summary_json import write_summary

    return write_summary(results), write_report(results, out / "report.html")


def warn_unreadable(path: Path) -> None:
    """Say on stderr which lines of a results file cannot be read (the report lists them all)."""
    from equiv.records import ResultsFile

    if not path.is_file():
        return
    contents = ResultsFile(path).read()
    if contents.problems:
        first = contents.problems[0]
        more = f" (and {contents.unreadable - 1} more)" if contents.unreadable > 1 else ""
        print(
            f"equiv: warning: {contents.unreadable} of {contents.lines} line(s) of {path} could "
            f"not be read and are not counted: {first}{more}",
            file=sys.stderr,
        )
