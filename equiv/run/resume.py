"""Resuming: what a run still has to do, from the results file's contents and the plan alone.

`plan_resume` is pure: it reads no file and asks no engine. It refuses a resume that would mix
two experiments (another configuration, a prompt whose text changed) and says what is done, what
is redone (results whose re-scoring failed, with the analysis of their prompt), what is left,
and which controls are due. The runner then writes the file accordingly and runs what is left.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from equiv.config import Mode, RunConfig
from equiv.errors import ConfigError
from equiv.json_types import JSONObject
from equiv.records import RUN_KEY, Control, ResultsContents, analysis_key
from equiv.run.plan import PlanItem

__all__ = ["ResumePlan", "changed_settings", "plan_resume"]


@dataclass(frozen=True)
class ResumePlan:
    """What a run over a results file does.

    fresh: the file holds nothing to keep (no file, a header alone, a torn line alone): it is
        started anew with this run's header, ``--resume`` or not.
    redo: keys of the results, analyses and run answer dropped from the file to be redone.
    todo: the plan items to run, in plan order (the redone ones among them).
    determinism: the determinism control is due (controls on, and none recorded yet).
    self_draft: the self-draft control is due even if no result is added (none recorded yet).
    """

    fresh: bool
    redo: frozenset[str]
    todo: tuple[PlanItem, ...]
    determinism: bool
    self_draft: bool


def changed_settings(old: JSONObject, new: JSONObject) -> list[str]:
    """The settings in which a results file's configuration differs from ``new``. A setting
    the file's older equiv did not write yet counts as its default (what that run used)."""
    # A configuration this equiv cannot read is compared as written.
    with contextlib.suppress(ConfigError, KeyError, TypeError, ValueError):
        old = RunConfig.from_dict(old).to_dict()
    return sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))


def plan_resume(
    contents: ResultsContents,
    items: Sequence[PlanItem],
    *,
    resume: bool,
    config: RunConfig,
    controls: bool,
    can_redo: Callable[[Mode], bool],
) -> ResumePlan:
    """What is left of ``items`` over a file holding ``contents``, for a run of ``config``.
    ``can_redo(mode)``: whether a result of that mode whose re-scoring
    failed can be finished now. A `ConfigError` where the file cannot be continued: it holds
    results and ``resume`` is off, or they were run with another configuration or prompt."""
    fresh = contents.replaceable
    redo: set[str] = set()
    if not fresh:
        if not resume:
            raise ConfigError(
                f"{contents.path} already holds results; pass --resume to continue it, "
                "or choose another --out directory"
            )
        _check_config(contents, config)
        # Results whose re-scoring failed (a server timed out) are redone, with the analysis of
        # their prompt: their generations were kept, but their verdict is not finished. Only
        # this run's items, and only where re-scoring can now run.
        keys = {item.key for item in items}
        failed = [
            r for r in contents.results if r.key in keys and r.rescore_failed and can_redo(r.mode)
        ]
        redo = {r.key for r in failed} | {analysis_key(r.prompt.key) for r in failed}
        if any(r.mode is Mode.SAMPLING for r in failed):  # the run's pooled answer read them too
            redo.add(RUN_KEY)
    done = set() if fresh else contents.done_keys - redo
    if not fresh:
        _check_prompts(contents, items)
    events = {e.event for e in contents.events}
    return ResumePlan(
        fresh=fresh,
        redo=frozenset(redo),
        todo=tuple(item for item in items if item.key not in done),
        determinism=controls and Control.DETERMINISM.value not in events,
        self_draft=controls and Control.SELF_DRAFT.value not in events,
    )


def _check_config(contents: ResultsContents, config: RunConfig) -> None:
    old = contents.header.config if contents.header is not None else {}
    changed = changed_settings(old, config.to_dict())
    if changed:
        raise ConfigError(
            f"cannot resume {contents.path}: it was run with a different configuration "
            f"(differs in: {', '.join(changed)}); rerun with the same options, "
            "or start a new run in another --out directory"
        )


def _check_prompts(contents: ResultsContents, items: Sequence[PlanItem]) -> None:
    """A resumed run must not keep a result of a prompt whose text has changed since."""
    stored = {r.key: r for r in contents.results}
    changed = [
        item.key
        for item in items
        if item.key in stored and stored[item.key].prompt_hash != item.prompt.content_hash
    ]
    if changed:
        shown = ", ".join(changed[:5]) + (f" and {len(changed) - 5} more" if changed[5:] else "")
        raise ConfigError(
            f"cannot resume {contents.path}: the prompt of {shown} changed since its "
            "result was recorded (its text, messages or max_tokens differ); restore the "
            "suite, leave that prompt out (--prompt), or start a new run in another --out "
            "directory"
        )
