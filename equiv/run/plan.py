"""The plan of a run: which prompts, in which mode, with which seeds and token budget."""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence
from dataclasses import dataclass

from equiv.config import Mode, RunConfig
from equiv.errors import PromptError
from equiv.prompts import Prompt, load_suites

__all__ = ["PlanItem", "plan", "select_prompts"]


@dataclass(frozen=True)
class PlanItem:
    """One generation pair to run: a prompt, the mode, a seed (None at temp 0), a budget."""

    prompt: Prompt
    mode: Mode
    seed: int | None
    max_tokens: int

    @property
    def key(self) -> str:
        suffix = "temp0" if self.seed is None else f"seed{self.seed}"
        return f"{self.prompt.key}::{suffix}"


def plan(prompts: Sequence[Prompt], config: RunConfig) -> list[PlanItem]:
    """Prompts x (temp 0 | seeds), in suite order."""
    seeds: Sequence[int | None] = (None,) if config.mode is Mode.TEMP0 else config.seeds
    return [
        PlanItem(p, config.mode, seed, config.max_tokens or p.max_tokens)
        for p in prompts
        for seed in seeds
    ]


def select_prompts(suites: Sequence[str], globs: Sequence[str]) -> list[Prompt]:
    """The prompts of ``suites`` whose key (``suite/id``) matches one of ``globs`` (all if none)."""
    prompts = load_suites(suites)
    if globs:
        prompts = [p for p in prompts if any(fnmatch.fnmatchcase(p.key, g) for g in globs)]
        if not prompts:
            raise PromptError(
                f"no prompt matches --prompt {', '.join(globs)}; keys look like "
                "'code/fib_lt' (suite/id)"
            )
    return prompts
