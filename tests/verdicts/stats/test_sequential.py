"""Sequential sampling runs: looks at the seeds as they accumulate, alpha spent over the looks."""

import dataclasses

import pytest

from equiv.config import DraftConfig, Mode, RunConfig, SamplingConfig
from equiv.engines import load_factory
from equiv.errors import ConfigError
from equiv.prompts import load_suites
from equiv.records import ResultsFile
from equiv.records.verdict import Label
from equiv.run.plan import plan
from equiv.run.runner import Runner
from equiv.verdicts.runs.summary import summarize_file
from equiv.verdicts.sampling.prompt_analysis import analyze
from equiv.verdicts.sampling.samples import Sample
from equiv.verdicts.sampling.verdict import classify_sampling
from equiv.verdicts.stats.sequential import MIN_SEEDS, Stopping, schedule, stops


@pytest.mark.parametrize("budget", [1, 7, 8, 15, 16, 31, 64, 150, 600, 601])
@pytest.mark.parametrize("looks", [1, 2, 4, 8])
def test_the_looks_spend_exactly_alpha_and_end_at_the_budget(budget, looks):
    plan_ = schedule(budget, looks)
    assert sum(look.share for look in plan_) == pytest.approx(1.0)
    assert plan_[-1].seeds == budget
    assert plan_[-1].last
    assert not any(look.last for look in plan_[:-1])
    assert 1 <= len(plan_) <= looks
    sizes = [look.seeds for look in plan_]
    assert sizes == sorted(set(sizes))  # strictly more seeds at every look
    assert all(n >= MIN_SEEDS for n in sizes) or len(plan_) == 1
    assert [look.index for look in plan_] == list(range(1, len(plan_) + 1))
    assert all(look.of == len(plan_) for look in plan_)
    if len(plan_) > 1:  # half the level kept for the last look
        assert plan_[-1].share == pytest.approx(0.5)


def test_the_looks_double_up_to_the_budget():
    assert [look.seeds for look in schedule(600, 4)] == [75, 150, 300, 600]
    assert [look.seeds for look in schedule(150, 4)] == [19, 38, 75, 150]
    assert [look.seeds for look in schedule(12, 4)] == [12]  # too few seeds to look twice


@pytest.mark.parametrize(("budget", "looks", "name"), [(0, 4, "seeds=0"), (10, 0, "looks=0")])
def test_a_schedule_without_seeds_or_looks_is_refused(budget, looks, name):
    with pytest.raises(ConfigError, match=name):
        schedule(budget, looks)


def test_stopping_round_trips_and_says_why():
    stop = Stopping(look=2, looks=4, seeds=38, budget=150, alpha=0.0017, conclusive=True)
    assert Stopping.from_dict(stop.to_dict()) == stop
    assert "look 2 of 4 after 38 of 150 seeds (conclusive" in stop.reason
    spent = dataclasses.replace(stop, look=4, seeds=150, conclusive=False)
    assert "budget spent" in spent.reason


@pytest.mark.parametrize("label", list(Label))
def test_only_a_verdict_more_seeds_cannot_overturn_stops_a_prompt_early(label):
    first, last = schedule(64, 4)[0], schedule(64, 4)[-1]
    overturnable = label in (Label.NUMERIC_DRIFT, Label.INCONCLUSIVE)
    assert stops(label, first) is not overturnable
    assert stops(label, last)  # the last look judges whatever it says


def test_a_config_without_looks_is_refused(model_pair):
    with pytest.raises(ConfigError, match="looks=0 must be >= 1"):
        RunConfig(target=model_pair.target, draft=model_pair.draft, looks=0)


PROMPT = "chat/haiku_autumn"


@pytest.mark.model
def test_a_gross_fault_stops_early_and_a_rerun_decides_the_same(model_pair, tmp_path):
    """Greedy acceptance at temp 0.8 (the reference sampler's fault that 6 seeds x 24 tokens
    expose) with a budget of 32 seeds in 3 looks: the prompt stops before the budget, the file
    holds only the seeds it judged, the decision is reproduced from the file alone, and a
    resumed run adds nothing."""
    config = RunConfig(
        target=model_pair.target,
        draft=model_pair.draft,
        mode=Mode.SAMPLING,
        sampling=SamplingConfig(temp=0.8),
        seeds=tuple(range(1, 33)),
        max_tokens=24,
        draft_config=DraftConfig(draft_max=4),
        looks=3,
    )
    prompts = [p for p in load_suites() if p.key == PROMPT]
    path = tmp_path / "r.jsonl"
    with Runner(config, load_factory("reference:greedy"), path) as runner:
        runner.run(plan(prompts, config))
    (analysis,) = ResultsFile(path).analyses()
    stop = Stopping.from_dict(analysis.figures["stopping"])
    assert analysis.judged.label is Label.SAMPLER_BUG, analysis.judged.reason
    assert stop.conclusive
    assert stop.seeds < 32
    assert stop.looks == 3
    assert stop.reason in analysis.judged.reason
    results = ResultsFile(path).results()
    assert [r.seed for r in results] == list(range(1, stop.seeds + 1))
    # the decision is a pure function of the file: the same tests at the look's alpha
    again = analyze([Sample.of(r) for r in results], alpha=stop.alpha, has_logits=True)
    assert classify_sampling(again, has_logits=True).label is Label.SAMPLER_BUG
    with Runner(config, load_factory("reference:greedy"), path) as runner:
        assert runner.run(plan(prompts, config), resume=True) == []
    assert len(ResultsFile(path).results()) == stop.seeds

    # interrupted inside the first round, resumed: the same seeds, the same decision
    again_path = tmp_path / "again.jsonl"

    def interrupt(item, record, done, total):
        if done == 5:
            raise KeyboardInterrupt

    factory = load_factory("reference:greedy")
    with Runner(config, factory, again_path) as runner, pytest.raises(KeyboardInterrupt):
        runner.run(plan(prompts, config), on_result=interrupt)
    assert ResultsFile(again_path).analyses() == []
    with Runner(config, load_factory("reference:greedy"), again_path) as runner:
        runner.run(plan(prompts, config), resume=True)
    (resumed,) = ResultsFile(again_path).analyses()
    assert resumed.figures["stopping"] == analysis.figures["stopping"]
    assert resumed.judged.label is analysis.judged.label
    tokens = [r.speculative.tokens for r in ResultsFile(again_path).results()]
    assert tokens == [r.speculative.tokens for r in results]


PROMPTS = ("chat/haiku_autumn", "chat/cpu_explain", "multilingual/de_berlin")


@pytest.mark.model
def test_the_run_stops_at_its_first_conclusive_pooled_look_and_a_resume_decides_the_same(
    model_pair, tmp_path
):
    """Greedy acceptance on three prompts, 32 seeds in 3 looks: the run's pooled answer is
    written first, every prompt stops at the same look (those whose own answer was not
    conclusive say that the run stopped them), and a rerun of the interrupted run writes the
    same answer from the same seeds."""
    config = RunConfig(
        target=model_pair.target,
        draft=model_pair.draft,
        mode=Mode.SAMPLING,
        sampling=SamplingConfig(temp=0.8),
        seeds=tuple(range(1, 33)),
        max_tokens=16,
        draft_config=DraftConfig(draft_max=4),
        looks=3,
    )
    prompts = [p for p in load_suites() if p.key in PROMPTS]
    path = tmp_path / "r.jsonl"
    with Runner(config, load_factory("reference:greedy"), path) as runner:
        runner.run(plan(prompts, config))
    contents = ResultsFile(path).read()
    (run,) = contents.runs
    stop = Stopping.from_dict(run.figures["stopping"])
    assert run.verdict.label is Label.SAMPLER_BUG, run.verdict.reason
    assert stop.conclusive
    assert stop.seeds < 32  # stopped before the budget
    kinds = [r.kind.value for r in contents.records]
    assert kinds.index("run") < kinds.index("analysis")  # the answer before what it stops
    assert len(contents.analyses) == 3
    for analysis in contents.analyses:
        stopping = Stopping.from_dict(analysis.figures["stopping"])
        # a prompt paused at an earlier look (the run's seeds went to more informative ones)
        # stopped there; every other at the run's look
        assert stopping.look == stop.look or (stopping.paused and stopping.look < stop.look)
        if analysis.judged.label is not Label.SAMPLER_BUG:
            assert "the run stopped here" in analysis.judged.reason
    assert {r.seed for r in contents.results} == set(range(1, stop.seeds + 1))
    summary = summarize_file(ResultsFile(path))
    assert summary.verdict == run.verdict
    with Runner(config, load_factory("reference:greedy"), path) as runner:
        assert runner.run(plan(prompts, config), resume=True) == []

    again = tmp_path / "again.jsonl"

    def interrupt(item, record, done, total):
        if done == 7:
            raise KeyboardInterrupt

    factory = load_factory("reference:greedy")
    with Runner(config, factory, again) as runner, pytest.raises(KeyboardInterrupt):
        runner.run(plan(prompts, config), on_result=interrupt)
    assert ResultsFile(again).runs() == []
    with Runner(config, load_factory("reference:greedy"), again) as runner:
        runner.run(plan(prompts, config), resume=True)
    (resumed,) = ResultsFile(again).runs()
    assert resumed == run
