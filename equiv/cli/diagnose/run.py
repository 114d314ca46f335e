"""A diagnosis run: temp 0, and the user's temperature when they sample, each with progress,
its summary.json and report.html, the ``equiv run`` command that reruns it, and the verdict."""

from __future__ import annotations

import shlex
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from equiv.cli.diagnose.mapping import RunMapping, run_command
from equiv.cli.diagnose.verdict import verdict_lines
from equiv.options.table import given

if TYPE_CHECKING:
    from rich.console import Console

    from equiv.options.option import OptionValue
    from equiv.verdicts.runs.summary import Summary

__all__ = ["DEFAULT_PROMPTS", "execute"]

#: A small spread over the built-in suites, so a diagnosis finishes in a few minutes on a CPU.
_SOME = ("code/fib_lt", "code/py_binary_search", "reasoning/add_two_digit", "chat/capital_france")
DEFAULT_PROMPTS = (*_SOME, "multilingual/de_berlin", "multilingual/ru_capital")


def execute(
    mapping: RunMapping,
    *,
    prompts: Sequence[str],
    max_tokens: int | None,
    seeds: int,
    out: Path,
    looks: int = 1,
    echo: Callable[[str], None] = print,
    console: Console | None = None,
) -> int:
    """Run temp 0 and (if the user samples) the user's temperature, with progress on
    ``console`` (stderr by default); write each run's summary.json and report.html; echo the
    ``equiv run`` command that reruns each, and the verdict. ``looks`` > 1: the sampling run
    stops each prompt at its first conclusive look (``seeds`` is its budget)."""
    from equiv.options.config_file import integer, merge_toml
    from equiv.records import ResultsFile

    values: dict[str, OptionValue] = {
        "temp": mapping.user_temp,
        **mapping.values,
        "prompt": list(prompts),
    }
    values["max_tokens"] = max_tokens
    modes = ["temp0"] + (["sampling"] if mapping.user_temp > 0 else [])
    summaries: dict[str, Summary] = {}
    not_speculating: str | None = None
    for mode in modes:
        sampled = mode == "sampling"
        run_values: dict[str, OptionValue] = {
            **values,
            "mode": mode,
            "seeds": seeds if sampled else None,
            "looks": looks if sampled and looks > 1 else None,
        }
        summaries[mode], not_speculating = _run_mode(run_values, mode, out, echo, console)
        if not_speculating:  # sampling it would compare two plain runs again
            break
    if not_speculating and "sampling" not in summaries and mapping.user_temp > 0:
        echo(f"  not sampling at temp {mapping.user_temp:g}: nothing speculative to compare")
    temp0 = summaries["temp0"]
    sampling = summaries.get("sampling")
    analyses = ResultsFile(out / "sampling" / "results.jsonl").read().analyses if sampling else []
    echo("")
    for line in verdict_lines(
        temp0,
        sampling,
        draft_max=integer(merge_toml(values), "draft_max"),
        user_temp=mapping.user_temp,
        analyses=analyses,
        seeds=seeds,
        not_speculating=not_speculating,
    ):
        echo(line)
    failed = temp0.failed_controls + (sampling.failed_controls if sampling else [])
    return 1 if failed else 0


def _run_mode(
    run_values: dict[str, OptionValue],
    mode: str,
    out: Path,
    echo: Callable[[str], None],
    console: Console | None,
) -> tuple[Summary, str | None]:
    """One mode's run with progress, its summary.json and report.html: its summary, and the
    header's speculation problem (`equiv.verdicts.temp0.misconfiguration.speculation_problem`)."""
    from rich.console import Console

    from equiv.cli.progress import Progress
    from equiv.options.build import build_config
    from equiv.records import ResultsFile
    from equiv.report import write_report
    from equiv.report.summary_json import write_summary
    from equiv.run.execute import run_plan
    from equiv.run.plan import plan, select_prompts
    from equiv.verdicts.temp0.misconfiguration import speculation_problem

    config, pair = build_config(run_values, workdir=out / mode)
    chosen = select_prompts(config.suites, given(run_values["prompt"]))
    total = len(plan(chosen, config))
    argv = run_command(run_values, mode=mode, out=out / mode)
    echo(f"running {mode}: {total} generation pair(s) -> {out / mode}")
    echo(f"  the same run by hand: equiv {shlex.join(argv)}")
    with Progress(console or Console(stderr=True), total=total) as progress:
        outcome = run_plan(config, pair, chosen, out / mode, argv=argv, on_result=progress.update)
    if outcome.summary is None:
        raise KeyboardInterrupt
    echo(f"  summary: {write_summary(outcome.results_path)}")
    echo(f"  report: {write_report(outcome.results_path, out / mode / 'report.html')}")
    header = ResultsFile(outcome.results_path).read().header
    fingerprints = header.fingerprints if header is not None else {}
    problem = speculation_problem(
        fingerprints.get("baseline", {}), fingerprints.get("speculative", {})
    )
    return outcome.summary, problem
