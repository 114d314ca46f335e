"""equiv: prove or disprove that speculative decoding leaves a model's output unchanged.

The public API, re-exported from the modules that own each name (import from here; the module
layout below may move). Names load on first use, so ``import equiv`` (which the pytest plugin
does in every session) stays as light as the standard library.

Every error equiv raises on purpose derives from `EquivError`; the tree, with the command
line's exit code of each class, is drawn in `equiv.errors`.
"""

from __future__ import annotations

import importlib
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING

from equiv.errors import (
    ConfigError,
    EngineError,
    EquivError,
    ModelError,
    PathFailedError,
    PromptError,
    VocabMismatchError,
)

if TYPE_CHECKING:
    from equiv.config import Mode, RunConfig, SamplingConfig
    from equiv.engines.base import Capabilities, Engine, EngineFactory, Rescoring
    from equiv.engines.registry import load_factory
    from equiv.prompts import Prompt, load_suites
    from equiv.records import Generation, ResultsFile
    from equiv.records.verdict import Label, Verdict
    from equiv.report.html import render_report, write_report
    from equiv.run.execute import RunOutcome, open_runner, run_plan
    from equiv.verdicts.runs.summary import Summary

try:
    __version__ = version("equiv")
except PackageNotFoundError:  # a source tree that was never installed
    __version__ = "0+unknown"

# Public name -> the module that owns it.
_LAZY = {
    "Capabilities": "equiv.engines.base",
    "Engine": "equiv.engines.base",
    "EngineFactory": "equiv.engines.base",
    "Generation": "equiv.records",
    "Label": "equiv.records.verdict",
    "Mode": "equiv.config",
    "Prompt": "equiv.prompts",
    "Rescoring": "equiv.engines.base",
    "ResultsFile": "equiv.records",
    "RunConfig": "equiv.config",
    "RunOutcome": "equiv.run.execute",
    "SamplingConfig": "equiv.config",
    "Summary": "equiv.verdicts.runs.summary",
    "Verdict": "equiv.records.verdict",
    "load_factory": "equiv.engines.registry",
    "load_suites": "equiv.prompts",
    "open_runner": "equiv.run.execute",
    "render_report": "equiv.report.html",
    "run_plan": "equiv.run.execute",
    "write_report": "equiv.report.html",
}

__all__ = [
    "Capabilities",
    "ConfigError",
    "Engine",
    "EngineError",
    "EngineFactory",
    "EquivError",
    "Generation",
    "Label",
    "Mode",
    "ModelError",
    "PathFailedError",
    "Prompt",
    "PromptError",
    "Rescoring",
    "ResultsFile",
    "RunConfig",
    "RunOutcome",
    "SamplingConfig",
    "Summary",
    "Verdict",
    "VocabMismatchError",
    "__version__",
    "load_factory",
    "load_suites",
    "open_runner",
    "render_report",
    "run_plan",
    "write_report",
]


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'equiv' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
