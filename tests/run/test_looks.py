"""A pooled sampling run in looks on the real default pair (`equiv.run.looks`): after the first
look the seeds go to the prompts whose positions carry the pooled tests' information, chosen
from the file; the others are paused on the seeds they have and say so."""

import pytest

from equiv.config import DraftConfig, Mode, RunConfig, SamplingConfig
from equiv.engines import load_factory
from equiv.prompts import load_suites
from equiv.records import ResultsFile
from equiv.run.plan import plan
from equiv.run.runner import Runner
from equiv.verdicts.sampling.allocation import informative
from equiv.verdicts.sampling.run_verdict import POOLED_SHARE, RunJudgement
from equiv.verdicts.sampling.samples import Sample
from equiv.verdicts.stats.sequential import Stopping, run_schedule

pytestmark = pytest.mark.model

#: Open-ended prompts beside ones whose continuation is close to fixed at temp 0.3.
PROMPTS = (
    "chat/haiku_autumn",
    "chat/cpu_explain",
    "code/py_gcd",
    "code/sql_having",
    "reasoning/train_arrival",
    "multilingual/de_berlin",
)


def test_later_rounds_go_to_the_informative_prompts_and_the_others_say_they_were_paused(
    model_pair, tmp_path
):
    config = RunConfig(
        target=model_pair.target,
        draft=model_pair.draft,
        mode=Mode.SAMPLING,
        sampling=SamplingConfig(temp=0.3),
        seeds=tuple(range(1, 17)),
        max_tokens=12,
        draft_config=DraftConfig(draft_max=4),
        looks=2,
        n_threads=1,
    )
    first, last = run_schedule(16, 2, len(PROMPTS), pooled=True)
    assert (first.seeds, last.seeds) == (8, 16)
    prompts = [p for p in load_suites() if p.key in PROMPTS]
    path = tmp_path / "r.jsonl"
    with Runner(config, load_factory("llamacpp"), path) as runner:
        runner.run(plan(prompts, config))
    contents = ResultsFile(path).read()
    seeds: dict[str, list[int]] = {}
    for record in contents.results:
        seeds.setdefault(record.prompt.key, []).append(record.seed)
    # the choice, made again from the file's first-look samples alone
    at_first = {
        key: [Sample.of(r) for r in contents.results if r.prompt.key == key and r.seed <= 8]
        for key in seeds
    }
    kept = informative(at_first, has_logits=True)
    (run,) = contents.runs
    went_on = {key for key, got in seeds.items() if len(got) > 8}
    stopped = Stopping.from_dict(run.figures["stopping"])
    if stopped.look == 2:
        assert went_on == kept
    # the tests at the pooled share of the look's level, the bounds at the whole of it
    look = (first, last)[stopped.look - 1]
    pooled = RunJudgement.of(run).pooled
    assert pooled.bounds_level == pytest.approx(config.alpha * look.share)
    assert stopped.alpha == pooled.alpha == pytest.approx(pooled.bounds_level * POOLED_SHARE)
    assert all(sorted(got) == list(range(1, len(got) + 1)) for got in seeds.values())
    for analysis in contents.analyses:
        stop = Stopping.from_dict(analysis.figures["stopping"])
        key = analysis.key.removesuffix("::sampling")
        assert stop.seeds == len(seeds[key])
        assert stop.paused == (key not in went_on and not stop.conclusive and stop.look == 1)
        if stop.paused:
            assert "gave its later seeds to the prompts" in analysis.judged.reason
    assert len(contents.analyses) == len(PROMPTS)
    with Runner(config, load_factory("llamacpp"), path) as runner:
        assert runner.run(plan(prompts, config), resume=True) == []
