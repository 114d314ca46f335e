"""Checks one prompt x mode at a time on models loaded once: what the pytest plugin runs.

A `CheckSession` owns one `Runner` per mode over a single pair of engines, so the models load
once whatever the modes; each gives a `Check` (`equiv.pytest.check`: its records as plain data,
its verdict, and the action a `Policy` gives that verdict, with the lines `describe` writes).
Over the whole session: why it fails (`problems`), its end in a few lines (`summary_lines`), and
`write_results`, which merges the checks into one results file per mode. No pytest here.
"""

from __future__ import annotations

import dataclasses
import shlex
import shutil
import tempfile
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from equiv.engines.base import Engine
from equiv.errors import ConfigError, EquivError
from equiv.json_types import json_float
from equiv.prompts import Prompt
from equiv.pytest.check import Check, Policy, describe, divergence_line
from equiv.records import AnalysisRecord, EventRecord, ResultRecord
from equiv.records.verdict import Label
from equiv.run.plan import plan
from equiv.run.runner import Runner
from equiv.verdicts.quality.paired import DEFAULT_MARGIN_POINTS

if TYPE_CHECKING:
    from equiv.options.table import OptionValues
    from equiv.verdicts.runs.summary import Summary

__all__ = [
    "Check",
    "CheckSession",
    "Policy",
    "control_lines",
    "describe",
    "divergence_line",
    "problems",
    "summary_lines",
    "write_results",
]


class CheckSession:
    """Runs checks on models loaded on first use, once: every mode shares the same engines.

    ``values`` are merged option values (`equiv.options.config_file.merge_toml`); the runners
    write to a private temporary directory, removed by `close`.
    """

    def __init__(self, values: OptionValues, policy: Policy, *, argv: Sequence[str] = ()) -> None:
        self.values, self.policy, self.argv = dict(values), policy, list(argv)
        self._runners: dict[str, Runner] = {}
        self._engines: tuple[Engine, Engine] | None = None
        self._error: Exception | None = None
        self._tmp: str | None = None
        # How many prompts share the run's alpha in sampling mode (set from the collected suite).
        self.family_size: int | None = None
        self.setup_s: float | None = None  # seconds the models took to load, once loaded

    def runner(self, mode: str) -> Runner:
        if self._error is not None:
            raise self._error  # the models failed to load once: fail every check fast
        if mode not in self._runners:
            start = time.perf_counter()
            loads = self._engines is None
            try:
                self._runners[mode] = self._make_runner(mode)
            except Exception as exc:
                self._error = exc
                raise
            if loads:
                self.setup_s = time.perf_counter() - start
        return self._runners[mode]

    def _make_runner(self, mode: str) -> Runner:
        from equiv.options.build import build_config
        from equiv.run.execute import open_runner

        self._tmp = self._tmp or tempfile.mkdtemp(prefix="equiv-checks-")
        config, pair = build_config({**self.values, "mode": mode}, workdir=self._tmp)
        runner = open_runner(
            config, pair, Path(self._tmp) / f"{mode}.jsonl", argv=self.argv, engines=self._engines
        )
        self._engines = (runner.baseline, runner.speculative)
        return runner

    def check(self, mode: str, prompt: Prompt, *, max_tokens: int | None = None) -> Check:
        """Run ``prompt`` in ``mode`` (every seed in sampling mode) and judge it."""
        if mode not in ("temp0", "sampling"):
            raise ConfigError(f"mode {mode!r} is not one of temp0, sampling")
        runner = self.runner(mode)
        items = plan([prompt], runner.config)
        if max_tokens is not None:
            items = [dataclasses.replace(i, max_tokens=max_tokens) for i in items]
        seen = len(runner.results.read().records)
        ran = runner.run(
            items,
            resume=True,
            command=shlex.join(self.argv),
            family_size=self.family_size,
            pool=False,  # the session's pooled answer is judged over all its checks at the end
        )
        if not ran:
            raise EquivError(
                f"{items[0].key} was already checked in this session (a rerun?); "
                "equiv checks each prompt once per session"
            )
        # The file is the source of truth: results, then what else the run appended (controls,
        # and in sampling mode the prompt's analysis, whose verdict speaks for all its seeds).
        contents = runner.results.read()
        new = contents.records[seen - runner.dropped :]  # less what the run redid in place
        records = [r for r in new if isinstance(r, ResultRecord)]
        extras = [r for r in new if isinstance(r, EventRecord | AnalysisRecord)]
        judged: list[ResultRecord | AnalysisRecord] = [
            x for x in extras if isinstance(x, AnalysisRecord) and x.verdict is not None
        ] or list(records)
        verdicts = [r.judged for r in judged]
        action, index = self.policy.judge(verdicts)
        return Check(
            key=f"{prompt.key}::{mode}",
            mode=mode,
            action=action,
            verdict=verdicts[index],
            record=judged[index],
            records=tuple(records),
            header=runner.results.header(),
            extras=tuple(extras),
        )

    def close(self) -> None:
        """Let go of every runner's results lock, close both engines (each even if the other's
        close fails) and remove the session's temporary directory, whatever fails on the way."""
        try:
            for runner in self._runners.values():
                runner.lock.release()
            if self._engines is not None:
                baseline, speculative = self._engines
                try:
                    baseline.close()
                finally:
                    speculative.close()
        finally:
            if self._tmp is not None:
                shutil.rmtree(self._tmp, ignore_errors=True)


def problems(checks: Sequence[Check], policy: Policy) -> list[str]:
    """Why the session fails as a whole: a failed control, or too much numeric drift."""
    found = list(  # once each, however many xdist workers saw it
        dict.fromkeys(
            f"control {e.event} FAILED: {e.detail}" for c in checks for e in c.events if e.failed
        )
    )
    drift = sum(c.label is Label.NUMERIC_DRIFT for c in checks)
    rate = policy.max_drift_rate
    if rate is not None and checks and drift > rate * len(checks):
        found.append(
            f"numeric-drift on {drift} of {len(checks)} check(s) ({drift / len(checks):.2f}) "
            f"is above the allowed rate {rate}"
        )
    summaries = _summaries(checks)
    for mode, summary in summaries.items():
        run = summary.run
        # A sampler fault is the deployment's: the answer pooled over every check fails the
        # session where its label does, even where no check failed on its own evidence.
        if run is not None and run.verdict.label in policy.fail_on:
            found.append(
                f"{mode}: pooled over the session, {run.verdict.label}: {run.verdict.reason}"
            )
    if policy.fail_on_quality_drop:
        for mode, summary in summaries.items():
            if summary.quality_drop:
                found.extend(
                    f"{mode}: graded prompts pass significantly less often with the draft; {line}"
                    for line in summary.quality_lines
                )
    return found


def _summaries(checks: Sequence[Check]) -> dict[str, Summary]:
    """Each mode's run summary, from its checks' records (the quality margin from the header);
    at temp > 0 with the session's pooled answer over all its prompts."""
    from equiv.verdicts.runs.summary import summarize

    out = {}
    for mode in sorted({c.mode for c in checks}):
        group = [c for c in checks if c.mode == mode]
        header = group[0].header
        margin = header.config.get("quality_margin", DEFAULT_MARGIN_POINTS)
        alpha = json_float(header.config.get("alpha", 0.01))
        out[mode] = summarize(
            [r for c in group for r in c.records],
            [e for c in group for e in c.events],
            [x for c in group for x in c.extras if isinstance(x, AnalysisRecord)],
            quality_margin=json_float(margin),
            differences=header.differences,
            run_alpha=alpha if mode == "sampling" else None,
            has_logits=header.has_logits,
        )
    return out


def write_results(checks: Iterable[Check], out: Path) -> list[Path]:
    """One results file per mode (``out/results.jsonl``, or ``out/<mode>/`` for two modes),
    with ``summary.json`` and ``report.html`` beside it; the files written."""
    from equiv.records import ResultsFile
    from equiv.report import write_report
    from equiv.report.summary_json import write_summary

    by_mode: dict[str, list[Check]] = {}
    for c in checks:
        by_mode.setdefault(c.mode, []).append(c)
    written: list[Path] = []
    for mode, group in sorted(by_mode.items()):
        folder = out if len(by_mode) == 1 else out / mode
        results = ResultsFile(folder / "results.jsonl")
        results.path.unlink(missing_ok=True)
        results.write_header(group[0].header)
        for c in group:
            for record in (*c.records, *c.extras):
                results.append(record)
        run = _summaries(group)[mode].run
        if run is not None:  # the session's pooled answer, as `equiv run` writes its own
            results.append_run(run.record())
        written.append(results.path)
        written.append(write_summary(results.path))
        written.append(write_report(results.path, folder / "report.html"))
    return written


def control_lines(events: Iterable[EventRecord]) -> list[str]:
    """Each control once, however many processes ran it (under pytest-xdist each worker checks
    its own models): ``control determinism: ok - ... (run by each of 2 workers)``."""
    runs = Counter((e.event, "ok" if e.ok else "FAILED", e.detail) for e in events)
    return [
        f"control {event}: {status} - {detail}" + (f" ({n} runs, one per worker)" if n > 1 else "")
        for (event, status, detail), n in runs.items()
    ]


def summary_lines(checks: Sequence[Check]) -> list[str]:
    """The session's end in a few lines: label counts, controls, each mode's conclusion and,
    where prompts were graded, its quality line."""
    counts = Counter(c.label.value for c in checks)
    lines = ["labels: " + ", ".join(f"{n} {label}" for label, n in counts.items())]
    for mode, summary in _summaries(checks).items():
        lines.extend(control_lines(summary.events))
        if summary.drift is not None:
            lines.append(f"{mode}: {summary.drift.line}")
        if summary.divergence_rate is not None:
            lines.append(f"{mode}: {summary.divergence_rate.line}")
        lines.append(f"{mode}: {summary.conclusion}")
        if summary.quality:
            lines.extend(f"{mode}: {line}" for line in summary.quality_lines)
    return lines
