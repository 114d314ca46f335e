"""Run-level figures: acceptance, rounds, and Leviathan et al.'s prediction only where known."""

import dataclasses
from pathlib import Path

from equiv.records import Control, DraftStep, EventRecord, ResultsFile
from equiv.records.verdict import Label
from equiv.verdicts.runs.summary import summarize

FIXTURE = Path(__file__).parents[2] / "fixtures" / "temp0_results.jsonl"


def _record(steps, draft_s):
    """A recorded temp-0 result (identical outputs) with these draft rounds and draft time."""
    record = next(r for r in ResultsFile(FIXTURE).results() if r.comparison.identical)
    spec = dataclasses.replace(
        record.speculative, draft_steps=tuple(DraftStep(*s) for s in steps), draft_s=draft_s
    )
    return dataclasses.replace(record, speculative=spec)


def test_rounds_give_the_mean_accepted_and_a_prediction():
    total = summarize([_record([[0, 4, 3, False], [4, 4, 4, False]], 0.05)]).total
    assert total.acceptance == 7 / 8
    assert total.mean_accepted == 3.5
    assert total.cost_ratio is not None
    assert total.predicted_speedup is not None


def test_per_request_counts_give_acceptance_but_no_rounds_and_no_prediction():
    """A server reports draft_n and draft_n_accepted per request: no rounds, no draft time."""
    total = summarize([_record([[-1, 8, 7, False]], 0.0)]).total
    assert total.acceptance == 7 / 8
    assert total.mean_accepted is None
    assert total.cost_ratio is None
    assert total.predicted_speedup is None


def test_a_path_that_failed_leaves_the_run_inconclusive_until_a_rerun_finishes_the_prompt():
    record = _record([], 0.0)
    failure = EventRecord(
        event=Control.ENGINE_FAILURE.value,
        ok=False,
        key="code/other",
        detail="the speculative path failed on code/other",
        extra={"path": "speculative"},
    )
    cut = summarize([record], [failure])
    assert cut.verdict.label is Label.INCONCLUSIVE
    assert "the speculative path failed on code/other" in cut.verdict.reason
    assert "--resume" in cut.verdict.reason
    assert [e.event for e in cut.failed_controls] == ["engine-failure"]
    # the rerun wrote the prompt's result: the failure stays on record, passed; the verdict is
    # the run's own
    finished = summarize([record, dataclasses.replace(record, key="code/other")], [failure])
    assert finished.unfinished is None
    assert finished.verdict == summarize([record, record]).verdict
    assert finished.failed_controls == []
    (settled,) = finished.events
    assert settled.ok is True
    assert settled.detail.startswith(failure.detail)
    assert "A rerun has finished it since." in settled.detail
