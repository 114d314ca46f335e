"""The controls a run records as events: facts about the engines, not about speculative
decoding, that decide whether the run's comparisons mean anything.

- determinism: the baseline run twice on the first prompt gives the same tokens;
- self-draft: a draft that is the target itself is accepted almost always
  (`SELF_DRAFT_MIN_ACCEPTANCE`);
- engine failure: a path failed on a prompt (`path_failed`, the finding its error is).

Each is an `EventRecord` made here from what the runner saw; the runner asks the engines and
appends the event.
"""

from __future__ import annotations

from collections.abc import Sequence

from equiv.errors import EngineError, PathFailedError
from equiv.records import Control, EventRecord, ResultRecord
from equiv.verdicts.runs.summary import summarize

__all__ = [
    "SELF_DRAFT_MIN_ACCEPTANCE",
    "determinism_event",
    "engine_failure_event",
    "path_failed",
    "self_draft_event",
]

SELF_DRAFT_MIN_ACCEPTANCE = 0.98


def determinism_event(key: str, first: Sequence[int], again: Sequence[int]) -> EventRecord:
    """The determinism control on the result ``key``: the tokens the baseline gave the
    ``first`` time and ``again``."""
    ok = list(again) == list(first)
    detail = "baseline repeated on the first prompt gave identical tokens"
    if not ok:
        detail = (
            "baseline repeated on the first prompt gave DIFFERENT tokens: the engine is "
            "not deterministic, so differences cannot be blamed on speculative decoding"
        )
    return EventRecord(event=Control.DETERMINISM.value, ok=ok, key=key, detail=detail)


def self_draft_event(results: Sequence[ResultRecord]) -> EventRecord:
    """The self-draft control over every result of the run: the draft's acceptance."""
    rate = summarize(results).total.acceptance
    ok = rate is not None and rate >= SELF_DRAFT_MIN_ACCEPTANCE
    detail = "self-draft drafted no tokens"
    if rate is not None:
        detail = f"self-draft acceptance {rate:.4f} (needs >= {SELF_DRAFT_MIN_ACCEPTANCE})"
    return EventRecord(
        event=Control.SELF_DRAFT.value, ok=ok, detail=detail, extra={"acceptance": rate}
    )


def engine_failure_event(failure: PathFailedError) -> EventRecord:
    """A path's failure on a prompt, as the failed control the file records."""
    return EventRecord(
        event=Control.ENGINE_FAILURE.value,
        ok=False,
        key=failure.key,
        detail=str(failure),
        extra={"path": failure.path, "cause": failure.cause},
    )


def path_failed(path: str, key: str, exc: EngineError, *, other_answered: bool) -> PathFailedError:
    """The finding of one path's failure, and what the rerun does."""
    cause = str(exc)
    where = f" on {key}" if key else ""
    if other_answered:
        finding = (
            f"the speculative path failed{where}, where the baseline answered the same "
            "request: a fault of the speculative deployment"
        )
    else:
        finding = f"the baseline path failed{where}: not a finding about speculative decoding"
    return PathFailedError(
        f"{finding}. Its error: {cause.rstrip('.')}. Every finished result is kept; what was not "
        "run is inconclusive: restart the server and rerun with --resume to finish.",
        path=path,
        key=key,
        cause=cause,
    )
