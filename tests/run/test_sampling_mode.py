"""Sampling mode (temperature > 0) on the real default pair."""

from typing import ClassVar

import pytest

from equiv.config import DraftConfig, Mode, RunConfig, SamplingConfig
from equiv.engines import load_factory
from equiv.json_types import json_object
from equiv.prompts import load_suites
from equiv.records import PATHS, AnalysisRecord, ResultRecord, ResultsFile
from equiv.records.verdict import Label
from equiv.run.evidence import RESCORED_SEEDS
from equiv.run.judging import group_by_prompt
from equiv.run.plan import plan
from equiv.run.runner import Runner
from equiv.verdicts.sampling.analysis_record import ScoredTest
from equiv.verdicts.sampling.pooled import pool
from equiv.verdicts.sampling.samples import Sample

pytestmark = pytest.mark.model

PROMPT = "chat/haiku_autumn"  # open-ended: many tokens with real choice at temp 0.8


def _config(model_pair, seeds, max_tokens=16):
    return RunConfig(
        target=model_pair.target,
        draft=model_pair.draft,
        mode=Mode.SAMPLING,
        sampling=SamplingConfig(temp=0.8),
        seeds=tuple(range(1, seeds + 1)),
        max_tokens=max_tokens,
        draft_config=DraftConfig(draft_max=4),
    )


def _run(config, engine, path, **kwargs):
    prompts = [p for p in load_suites() if p.key == PROMPT]
    with Runner(config, load_factory(engine), path) as runner:
        return runner.run(plan(prompts, config), **kwargs)


def test_llama_cpp_sampling_records_evidence_and_is_not_flagged(model_pair, tmp_path):
    config = _config(model_pair, seeds=6)
    records = _run(config, "llamacpp", tmp_path / "r.jsonl")
    seeds = [r for r in records if isinstance(r, ResultRecord)]
    (analysis,) = [r for r in records if isinstance(r, AnalysisRecord)]
    assert [r.seed for r in seeds] == list(config.seeds)
    for record in seeds:
        sample = Sample.of(record)
        for path in PATHS:
            pits = sample.path(path).pits["chain_pit"]
            assert len(pits) == len(record.generation(path).tokens)
            assert all(0 <= mass <= 1 and 0 < p <= top <= 1 for mass, p, top in pits)
            assert sample.path(path).far_outside == ()  # counted, and none
    # The drift is measured on the first seeds: the target's rows, one token at a time.
    rescored = seeds[:RESCORED_SEEDS]
    assert all(r.rescore_drift is not None for r in rescored)
    assert all(r.rescore_drift is None for r in seeds[RESCORED_SEEDS:])
    for record in rescored:
        spec = Sample.of(record).speculative
        assert len(spec.pits["target_pit"]) == len(spec.tokens)
    assert json_object(analysis.figures["drift"])["kl_mean"] < 0.1  # drift, not another model
    verdict = analysis.judged
    assert verdict.label is not Label.SAMPLER_BUG, verdict.reason
    assert verdict.label is not Label.EQUIVALENT  # 6 x 16 tokens cannot have the power


def test_state_reuse_gives_the_same_samples_as_a_fresh_evaluation(model_pair, tmp_path):
    """Reusing the evaluated prompt must not change a seed's output: seed 3 alone equals seed 3
    after seeds 1 and 2."""
    many = _run(_config(model_pair, seeds=3), "llamacpp", tmp_path / "a.jsonl")
    alone = _config(model_pair, seeds=3)
    prompts = [p for p in load_suites() if p.key == PROMPT]
    items = [i for i in plan(prompts, alone) if i.seed == 3]
    with Runner(alone, load_factory("llamacpp"), tmp_path / "b.jsonl") as runner:
        (single,) = [r for r in runner.run(items) if isinstance(r, ResultRecord)]
    third = next(r for r in many if isinstance(r, ResultRecord) and r.seed == 3)
    assert single.baseline.tokens == third.baseline.tokens
    assert single.speculative.tokens == third.speculative.tokens


def test_analysis_is_written_after_a_resumed_run(model_pair, tmp_path):
    config = _config(model_pair, seeds=3, max_tokens=8)
    path = tmp_path / "r.jsonl"

    def stop_after_first(item, record, done, total):
        if done == 1:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        _run(config, "llamacpp", path, on_result=stop_after_first)
    assert ResultsFile(path).analyses() == []
    _run(config, "llamacpp", path, resume=True)
    results = ResultsFile(path)
    assert len(results.results()) == 3
    (analysis,) = results.analyses()
    assert analysis.figures["samples"] == 3


def test_greedy_acceptance_at_temp_08_is_a_sampler_bug_within_200_tokens(model_pair, tmp_path):
    """The reference sampler with greedy acceptance (accept only the target's argmax, resample
    from the target otherwise) over 6 seeds x 24 tokens of one prompt: its decisions reject draft
    tokens that min(1, p/q) must accept."""
    config = _config(model_pair, seeds=6, max_tokens=24)
    records = _run(config, "reference:greedy", tmp_path / "r.jsonl")
    (analysis,) = [r for r in records if isinstance(r, AnalysisRecord)]
    verdict = analysis.judged
    assert verdict.label is Label.SAMPLER_BUG, verdict.reason
    assert "accept/reject decisions break min(1, p/q)" in verdict.reason
    samples = [r for r in records if isinstance(r, ResultRecord)]
    assert sum(len(r.speculative.tokens) for r in samples) <= 200


def test_the_correct_reference_sampler_passes_every_stage(model_pair, tmp_path):
    config = _config(model_pair, seeds=6, max_tokens=24)
    records = _run(config, "reference:correct", tmp_path / "r.jsonl")
    (analysis,) = [r for r in records if isinstance(r, AnalysisRecord)]
    seeds = [r for r in records if isinstance(r, ResultRecord)]
    for record in seeds:
        spec = Sample.of(record).speculative
        decisions = spec.acceptance
        assert decisions is not None
        accepted = sum(s.accepted for s in record.speculative.draft_steps)
        # every accepted draft token is an emitted token; each rejection drew one replacement
        assert sum(d[1] for d in decisions) <= accepted
        assert len(spec.pits["residual_pit"]) == sum(1 for d in decisions if not d[1])
        assert all(0 <= a <= 1 and q > 0 for a, _, q in decisions)
        assert spec.rule_scores is not None
        assert len(spec.rule_scores) == len(decisions)
    tests = {t.name: t for t in (ScoredTest.from_dict(t) for t in analysis.tests)}
    forced = tests["acceptance-forced:speculative"]
    assert forced.n > 50
    assert forced.statistic == 0  # no forced decision went wrong
    pooled = pool({PROMPT: [Sample.of(r) for r in seeds]}, alpha=0.005, has_logits=True)
    kinds = ("draft-leak", "relaxed-acceptance", "draft-temperature")
    rules = [t for t in pooled.tests if t.kind in kinds]
    assert len(rules) == 3, pooled.lines()
    assert all(t.n > 50 and t.p_value >= 0.005 for t in rules), pooled.lines()
    assert analysis.judged.label is not Label.SAMPLER_BUG, analysis.judged.reason


class _CountsBatched:
    """The llama.cpp engine, counting the batched re-scorings asked of it."""

    asked: ClassVar[list[tuple[int, ...]]] = []

    def __init__(self, config, *, speculative):
        self.inner = load_factory("llamacpp")(config, speculative=speculative)

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def rescore(self, prompt_tokens, tokens, *, batched):
        if batched:
            type(self).asked.append(tuple(tokens))
        return self.inner.rescore(prompt_tokens, tokens, batched=batched)


def test_the_runs_batched_follow_up_rescores_each_sample_once(model_pair, tmp_path):
    """A later look asks the follow-up again over the seeds so far: only the new ones are
    re-scored, and the answer over the others is the one asked before."""
    config = _config(model_pair, seeds=3, max_tokens=8)
    prompts = [p for p in load_suites() if p.key == PROMPT]
    items = plan(prompts, config)
    path = tmp_path / "r.jsonl"
    with Runner(config, _CountsBatched, path) as runner:
        runner.run(items)
        samples = [Sample.of(r) for r in ResultsFile(path).results()]
        pooled = pool({PROMPT: samples}, alpha=0.005, has_logits=False)
        by_prompt = group_by_prompt(items)
        _CountsBatched.asked = []
        first = runner.judge._run_batched(by_prompt, {PROMPT: samples[:2]}, pooled)
        assert _CountsBatched.asked == [s.speculative.tokens for s in samples[:2]]
        again = runner.judge._run_batched(by_prompt, {PROMPT: samples}, pooled)
        assert _CountsBatched.asked[2:] == [samples[2].speculative.tokens]  # the new seed only
        assert first.error is None
        assert again.error is None
        assert (first.samples, again.samples) == (2, 3)
        third = runner.judge._run_batched(by_prompt, {PROMPT: samples[:2]}, pooled)
        assert repr(third) == repr(first)  # the same rows, so the same tests
        assert len(_CountsBatched.asked) == 3
