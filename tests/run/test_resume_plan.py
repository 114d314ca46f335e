"""What a run over a results file still has to do (`equiv.run.resume.plan_resume`): a pure
function of the file's contents and the plan, tested here without a model or a file."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from equiv.config import Mode, ModelSpec, RunConfig, SamplingConfig
from equiv.errors import ConfigError
from equiv.prompts import Prompt
from equiv.records import (
    RUN_KEY,
    Comparison,
    EventRecord,
    Generation,
    HeaderRecord,
    Label,
    ResultRecord,
    ResultsContents,
    Verdict,
)
from equiv.run.plan import PlanItem, plan
from equiv.run.resume import ResumePlan, plan_resume

PATH = Path("out/results.jsonl")
PROMPTS = [Prompt("chat", "a", text="one"), Prompt("chat", "b", text="two")]


def _config(mode: Mode = Mode.TEMP0, **changes: object) -> RunConfig:
    config = RunConfig(
        target=ModelSpec("/models/target.gguf"),
        draft=ModelSpec("/models/draft.gguf"),
        mode=mode,
        sampling=SamplingConfig(temp=0.8 if mode is Mode.SAMPLING else 0.0),
        seeds=(1, 2),
    )
    return dataclasses.replace(config, **changes)


def _generation(path: str) -> Generation:
    return Generation(
        path=path,
        prompt_tokens=(1, 2),
        tokens=(3, 4),
        pieces=("c", "d"),
        text="cd",
        stop_reason="length",
        alternatives=(),
        t_prompt_s=0.0,
        t_decode_s=0.0,
    )


def _result(item: PlanItem, *, failed: bool = False, prompt: Prompt | None = None) -> ResultRecord:
    verdict = Verdict(Label.EQUIVALENT, "token IDs identical")
    evidence = {}
    if failed and item.mode is Mode.TEMP0:
        verdict = Verdict(Label.INCONCLUSIVE, "re-scoring failed", {"rescore_failed": True})
    elif failed:
        evidence = {"speculative": {"rescore_error": "the server timed out"}}
    return ResultRecord(
        key=item.key,
        suite=item.prompt.suite,
        prompt_id=item.prompt.id,
        mode=item.mode,
        seed=item.seed,
        prompt=prompt or item.prompt,
        baseline=_generation("baseline"),
        speculative=_generation("speculative"),
        comparison=Comparison(True, 2, 2, 2, 1.0, 0, (("equal", 0, 2, 0, 2),), None, None),
        verdict=verdict if item.mode is Mode.TEMP0 else None,
        evidence=evidence,
    )


def _contents(config: RunConfig, *records: ResultRecord | EventRecord) -> ResultsContents:
    header = HeaderRecord(config=config.to_dict())
    return ResultsContents(PATH, header, (header, *records))


def _plan(contents: ResultsContents, items: list[PlanItem], **options: object) -> ResumePlan:
    kwargs: dict = {
        "resume": True,
        "config": _config(items[0].mode),
        "controls": True,
        "can_redo": lambda mode: True,
        **options,
    }
    return plan_resume(contents, items, **kwargs)


def test_a_missing_file_is_fresh_and_every_item_and_control_is_due():
    items = plan(PROMPTS, _config())
    left = _plan(ResultsContents(PATH, None, ()), items, resume=False)
    assert left == ResumePlan(
        fresh=True, redo=frozenset(), todo=tuple(items), determinism=True, self_draft=True
    )


def test_a_header_alone_is_fresh_resume_or_not():
    items = plan(PROMPTS, _config())
    for resume in (True, False):
        left = _plan(_contents(_config()), items, resume=resume)
        assert left.fresh
        assert left.todo == tuple(items)


def test_results_without_resume_are_refused():
    items = plan(PROMPTS, _config())
    with pytest.raises(ConfigError, match="already holds results; pass --resume"):
        _plan(_contents(_config(), _result(items[0])), items, resume=False)


def test_another_configuration_is_refused_naming_the_setting():
    items = plan(PROMPTS, _config())
    contents = _contents(_config(max_tokens=7), _result(items[0]))
    with pytest.raises(ConfigError, match=r"differs in: max_tokens"):
        _plan(contents, items)


def test_a_changed_prompt_is_refused_naming_its_key():
    items = plan(PROMPTS, _config())
    old = dataclasses.replace(PROMPTS[0], text="another text")
    with pytest.raises(ConfigError, match=r"the prompt of chat/a::temp0 changed"):
        _plan(_contents(_config(), _result(items[0], prompt=old)), items)


def test_done_results_are_left_out_in_plan_order():
    items = plan(PROMPTS, _config(Mode.SAMPLING))
    assert [i.key for i in items] == [
        "chat/a::seed1",
        "chat/a::seed2",
        "chat/b::seed1",
        "chat/b::seed2",
    ]
    contents = _contents(_config(Mode.SAMPLING), _result(items[1]), _result(items[2]))
    left = _plan(contents, items)
    assert not left.fresh
    assert left.redo == frozenset()
    assert left.todo == (items[0], items[3])


def test_controls_are_due_until_recorded_and_never_without_controls():
    items = plan(PROMPTS, _config())
    done = _result(items[0])
    assert _plan(_contents(_config(), done), items).determinism
    event = EventRecord(event="determinism", detail="identical", ok=True, key=items[0].key)
    left = _plan(_contents(_config(), done, event), items)
    assert not left.determinism
    assert left.self_draft
    self_draft = EventRecord(event="self-draft", detail="0.99", ok=True)
    assert not _plan(_contents(_config(), done, event, self_draft), items).self_draft
    left = _plan(_contents(_config(), done), items, controls=False)
    assert not left.determinism
    assert not left.self_draft


@pytest.mark.parametrize("mode", [Mode.TEMP0, Mode.SAMPLING])
def test_a_result_whose_rescoring_failed_is_redone_with_its_prompts_analysis(mode):
    items = plan(PROMPTS, _config(mode))
    contents = _contents(_config(mode), *(_result(i, failed=i is items[0]) for i in items))
    left = _plan(contents, items)
    # A sampled result was also read by the run's pooled answer: that is redone with it.
    pooled = {RUN_KEY} if mode is Mode.SAMPLING else set()
    assert left.redo == {items[0].key, "chat/a::sampling", *pooled}
    assert left.todo == (items[0],)


def test_a_failed_result_is_kept_where_rescoring_cannot_run_now():
    items = plan(PROMPTS, _config())
    asked = []

    def cannot(mode: Mode) -> bool:
        asked.append(mode)
        return False

    contents = _contents(_config(), *(_result(i, failed=True) for i in items))
    left = _plan(contents, items, can_redo=cannot)
    assert asked == [Mode.TEMP0, Mode.TEMP0]
    assert left.redo == frozenset()
    assert left.todo == ()


def test_a_failed_result_outside_this_runs_items_is_not_redone():
    items = plan(PROMPTS, _config())
    contents = _contents(_config(), *(_result(i, failed=True) for i in items))
    left = _plan(contents, items[1:])
    assert left.redo == {items[1].key, "chat/b::sampling"}
    assert left.todo == (items[1],)
