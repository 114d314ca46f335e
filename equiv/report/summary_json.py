"""``summary.json``: a run's verdict and figures for a machine (labels and their rates, controls,
speed, drift percentiles, the quality line where prompts were graded), rendered from the results
file alone, beside it. ``equiv run --json`` prints the same object."""

from __future__ import annotations

import json
import os
from pathlib import Path

from equiv.json_types import JSONValue
from equiv.records import ResultsFile
from equiv.report.json import finite
from equiv.verdicts.runs.run_summary import RunSummary, run_summary
from equiv.verdicts.runs.summary import summarize_file

__all__ = ["SUMMARY_NAME", "strict_json", "summary_json", "summary_of", "write_summary"]

SUMMARY_NAME = "summary.json"


def summary_of(results_path: str | os.PathLike[str]) -> RunSummary:
    """The `RunSummary` of a results file, naming the file and the run's mode and command."""
    results = ResultsFile(Path(results_path))
    header = results.header()
    return run_summary(
        summarize_file(results),
        results=str(results_path),
        mode=header.config.get("mode"),
        command=header.command,
        equiv=header.equiv,
    )


def strict_json(data: JSONValue) -> str:
    """JSON text a strict parser reads: NaN and infinities become null."""
    return json.dumps(finite(data), indent=2, allow_nan=False) + "\n"


def summary_json(summary: RunSummary) -> str:
    """The JSON text of ``summary``."""
    return strict_json(summary.to_dict())


def write_summary(
    results_path: str | os.PathLike[str], out_path: str | os.PathLike[str] | None = None
) -> Path:
    """Write ``summary.json`` beside ``results_path`` (or to ``out_path``); the path written."""
    out = Path(out_path) if out_path is not None else Path(results_path).with_name(SUMMARY_NAME)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(summary_json(summary_of(results_path)), encoding="utf-8")
    return out
