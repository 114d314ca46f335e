"""Sampling mode (temperature > 0) on the real default pair."""

import pytest

from equiv.config import DraftConfig, Mode, RunConfig, SamplingConfig
from equiv.engines import load_factory
from equiv.json_types import json_object
from equiv.prompts import load_suites
from equiv.records import PATHS, AnalysisRecord, ResultRecord, ResultsFile
from equiv.records.verdict import Label
from equiv.run.plan import plan
from equiv.run.runner import Runner
from equiv.verdicts.sampling.analysis_record import ScoredTest
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
    assert all(r.rescore_drift is not None for r in seeds)
    for record in seeds:  # the same scorer as the baseline: the target, one token at a time
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
    tests = {t.name: t for t in (ScoredTest.from_dict(t) for t in analysis.tests)}
    forced = tests["acceptance-forced:speculative"]
    assert forced.n > 50
    assert forced.statistic == 0  # no forced decision went wrong
    assert analysis.judged.label is not Label.SAMPLER_BUG, analysis.judged.reason
