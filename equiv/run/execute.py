"""The one way a plan is run: engines from the registry, a runner over a results file, the plan
run (or resumed), the summary read back from the file. The command line (``equiv run``,
``equiv diagnose``), the pytest plugin and ``equiv minimize`` all set up through here.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from equiv.config import RunConfig
from equiv.engines.base import Engine
from equiv.engines.registry import load_factory
from equiv.json_types import JSONDict
from equiv.prompts import Prompt
from equiv.run.plan import plan
from equiv.run.runner import ProgressFn, Runner
from equiv.verdicts.runs.summary import Summary, summarize_file

if TYPE_CHECKING:
    from equiv.models.pair import ModelPair

__all__ = ["RunOutcome", "open_runner", "run_plan"]


@dataclass(frozen=True)
class RunOutcome:
    """How a run ended: its results file, and its summary unless it was interrupted."""

    results_path: Path
    summary: Summary | None
    finished: int  # results in the file (all of them, resumed ones included)

    @property
    def interrupted(self) -> bool:
        return self.summary is None


def open_runner(
    config: RunConfig,
    pair: ModelPair | None,
    results_path: str | Path,
    *,
    argv: Sequence[str] = (),
    engines: tuple[Engine, Engine] | None = None,
    controls: bool = True,
) -> Runner:
    """A `Runner` over ``results_path`` with both engines of ``config.engine`` (or ``engines``,
    already built, to share), its header carrying the vocabulary check and the command line."""
    extra: JSONDict = {"argv": list(argv)}
    if pair is not None and pair.vocab is not None:
        extra["vocab"] = pair.vocab.to_dict()
    factory = load_factory(config.engine) if engines is None else None
    return Runner(
        config, factory, results_path, extra_header=extra, controls=controls, engines=engines
    )


def run_plan(
    config: RunConfig,
    pair: ModelPair | None,
    prompts: Sequence[Prompt],
    out: str | Path,
    *,
    resume: bool = False,
    argv: Sequence[str] = (),
    on_result: ProgressFn | None = None,
    runner: Runner | None = None,
) -> RunOutcome:
    """Run ``prompts`` under ``config`` into ``out/results.jsonl`` (continuing it with
    ``resume``); Ctrl-C keeps every finished result and returns an interrupted outcome.
    ``runner``: an open runner to use (its engines already loaded), else one is opened here."""
    results_path = Path(out) / "results.jsonl"
    items = plan(prompts, config)
    own = runner is None
    active = runner or open_runner(config, pair, results_path, argv=argv)
    try:
        active.run(items, resume=resume, command=shlex.join(["equiv", *argv]), on_result=on_result)
    except KeyboardInterrupt:
        return RunOutcome(results_path, None, len(active.results.done_keys()))
    finally:
        if own:
            active.close()
    return RunOutcome(results_path, summarize_file(active.results), len(active.results.done_keys()))
