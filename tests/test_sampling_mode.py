"""Sampling mode (temperature > 0) on the real default pair."""

import pytest

from equiv.config import DraftConfig, Mode, RunConfig, SamplingConfig
from equiv.engines import load_factory
from equiv.prompts import load_suites
from equiv.records import ResultsFile
from equiv.records.verdict import Label, verdict_of
from equiv.run.plan import plan
from equiv.run.runner import Runner

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
    seeds = [r for r in records if "baseline" in r]
    (analysis,) = [r for r in records if "tests" in r]
    assert [r["seed"] for r in seeds] == list(config.seeds)
    for record in seeds:
        for path in ("baseline", "speculative"):
            pits = record[path]["chain_pit"]
            assert len(pits) == len(record[path]["tokens"])
            assert all(0 <= mass <= 1 and 0 < p <= top <= 1 for mass, p, top in pits)
    assert all("rescore_drift" in r for r in seeds)
    for record in seeds:  # the same scorer as the baseline: the target, one token at a time
        assert len(record["speculative"]["target_pit"]) == len(record["speculative"]["tokens"])
    assert analysis["drift"]["kl_mean"] < 0.1  # batching drift, not another model
    verdict = verdict_of(analysis)
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
        (single,) = [r for r in runner.run(items) if "baseline" in r]
    third = next(r for r in many if r.get("seed") == 3)
    assert single["baseline"]["tokens"] == third["baseline"]["tokens"]
    assert single["speculative"]["tokens"] == third["speculative"]["tokens"]


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
    (analysis,) = [r for r in records if "tests" in r]
    verdict = verdict_of(analysis)
    assert verdict.label is Label.SAMPLER_BUG, verdict.reason
    assert "accept/reject decisions break min(1, p/q)" in verdict.reason
    assert sum(len(r["speculative"]["tokens"]) for r in records if "speculative" in r) <= 200


def test_the_correct_reference_sampler_passes_every_stage(model_pair, tmp_path):
    config = _config(model_pair, seeds=6, max_tokens=24)
    records = _run(config, "reference:correct", tmp_path / "r.jsonl")
    (analysis,) = [r for r in records if "tests" in r]
    seeds = [r for r in records if "speculative" in r]
    for record in seeds:
        spec = record["speculative"]
        decisions = spec["acceptance"]
        accepted = sum(s[2] for s in spec["draft_steps"])
        # every accepted draft token is an emitted token; each rejection drew one replacement
        assert sum(d[1] for d in decisions) <= accepted
        assert len(spec["residual_pit"]) == sum(1 for d in decisions if not d[1])
        assert all(0 <= a <= 1 and q > 0 for a, _, q in decisions)
    tests = {t["name"]: t for t in analysis["tests"]}
    forced = tests["acceptance-forced:speculative"]
    assert forced["n"] > 50
    assert forced["statistic"] == 0  # no forced decision went wrong
    assert verdict_of(analysis).label is not Label.SAMPLER_BUG, verdict_of(analysis).reason
