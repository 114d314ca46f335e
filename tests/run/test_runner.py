"""Running plans end to end on the real default pair."""

import pytest

from equiv.config import ModelSpec, RunConfig
from equiv.engines.acceptance_rules import Rule
from equiv.engines.llamacpp import make_engine
from equiv.engines.reference import factory_for
from equiv.errors import ConfigError, EngineError, PromptError
from equiv.prompts import load_suites
from equiv.records import ResultsFile
from equiv.run.runner import SELF_DRAFT_MIN_ACCEPTANCE, Runner, plan

pytestmark = pytest.mark.model


def _prompts(keys):
    by_key = {p.key: p for p in load_suites()}
    return [by_key[k] for k in keys if k in by_key]


def test_a_temp0_run_gives_one_result_per_prompt(real_divergences):
    records, results = real_divergences.records, real_divergences.results
    assert [r.key for r in records] == [f"{k}::temp0" for k in real_divergences.scanned]
    assert results.done_keys() == {r.key for r in records}
    for record in records:
        same = record.baseline.tokens == record.speculative.tokens
        assert record.comparison.identical is same
        assert record.baseline.prompt_tokens == record.speculative.prompt_tokens
    header = results.header()
    assert header.fingerprints["baseline"]["target_sha256"]
    (determinism,) = [e for e in results.events() if e.event == "determinism"]
    assert determinism.ok is True


def test_divergence_records_are_consistent(real_divergences):
    for record in real_divergences.require():
        comparison = record.comparison
        div = comparison.divergence
        assert div is not None
        pos = div.position
        assert pos == comparison.common_prefix
        assert record.baseline.tokens[:pos] == record.speculative.tokens[:pos]
        assert div.baseline_token != div.speculative_token
        # At temp 0 each path took its own argmax: its token leads the other's in its own row.
        assert div.margin_baseline is not None
        assert div.margin_baseline >= 0
        assert div.margin_speculative is not None
        assert div.margin_speculative >= 0
        assert div.baseline_top is not None
        assert div.speculative_top is not None
        assert div.baseline_top.ids[0] == div.baseline_token
        assert div.speculative_top.ids[0] == div.speculative_token
        assert comparison.edit_distance >= 1
        assert any(op[0] != "equal" for op in comparison.opcodes)
        assert comparison.drift is not None
        assert comparison.drift.rows == pos + 1


def test_resume_after_an_interruption_redoes_nothing(temp0_config, tmp_path):
    path = tmp_path / "results.jsonl"
    items = plan(_prompts(["code/fib_lt", "code/py_last_n"]), temp0_config)
    assert len(items) == 2

    def interrupt(item, record, done, total):
        raise KeyboardInterrupt

    with Runner(temp0_config, make_engine, path) as runner:
        with pytest.raises(KeyboardInterrupt):
            runner.run(items, on_result=interrupt)
        assert runner.results.done_keys() == {items[0].key}
        with pytest.raises(ConfigError, match="--resume"):
            runner.run(items)
        new = runner.run(items, resume=True)
    assert [r.key for r in new] == [items[1].key]
    results = ResultsFile(path)
    assert sorted(r.key for r in results.results()) == sorted(i.key for i in items)
    assert sum(1 for r in results.records() if r.kind == "header") == 1


def test_resume_with_another_configuration_is_refused(temp0_config, tmp_path):
    path = tmp_path / "results.jsonl"
    items = plan(_prompts(["code/fib_lt"]), temp0_config)
    with Runner(temp0_config, make_engine, path) as runner:
        runner.run(items)
    other = RunConfig(target=temp0_config.target, draft=temp0_config.draft, max_tokens=8)
    with Runner(other, make_engine, path) as runner, pytest.raises(ConfigError, match="max_tokens"):
        runner.run(plan(_prompts(["code/fib_lt"]), other), resume=True)


def test_self_draft_accepts_nearly_everything(model_pair, tmp_path):
    config = RunConfig(
        target=model_pair.target, draft=ModelSpec(model_pair.target.path), max_tokens=32
    )
    assert config.self_draft
    path = tmp_path / "results.jsonl"
    with Runner(config, make_engine, path) as runner:
        runner.run(plan(_prompts(["code/fib_lt", "code/py_binary_search"]), config))
    (event,) = [e for e in ResultsFile(path).events() if e.event == "self-draft"]
    assert event.extra["acceptance"] >= SELF_DRAFT_MIN_ACCEPTANCE
    assert event.ok is True


def test_prompt_longer_than_the_context_is_refused_before_running(model_pair, tmp_path):
    config = RunConfig(target=model_pair.target, draft=model_pair.draft, n_ctx=256)
    long_prompt = load_suites(["long"])[0]
    path = tmp_path / "results.jsonl"
    message = rf"{long_prompt.key}.*n_ctx is 256.*--n-ctx"
    with Runner(config, make_engine, path) as runner, pytest.raises(PromptError, match=message):
        runner.run(plan([long_prompt], config))
    assert ResultsFile(path).results() == []


class _RescoringTimesOut:
    """The off-by-one reference engine (its speculative path reads the wrong row, so it diverges
    by construction, on any CPU) whose re-scoring of the prompts in ``failing`` fails, as a
    server's does when it times out in the middle of re-scoring; ``generated`` counts
    generations."""

    failing: frozenset[tuple[int, ...]] = frozenset()
    generated = 0

    def __init__(self, config, *, speculative):
        self.inner = factory_for(Rule.OFF_BY_ONE)(config, speculative=speculative)

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def generate(self, *args, **kwargs):
        type(self).generated += 1
        return self.inner.generate(*args, **kwargs)

    def rescore(self, prompt_tokens, tokens, *, batched):
        if tuple(prompt_tokens) in type(self).failing:
            raise EngineError("the baseline server did not answer within 5 s")
        return self.inner.rescore(prompt_tokens, tokens, batched=batched)


def test_resume_redoes_the_results_whose_rescoring_failed(temp0_config, tmp_path):
    from equiv.records.verdict import Label

    path = tmp_path / "results.jsonl"
    items = plan(_prompts(["code/fib_lt", "code/py_last_n", "code/py_gcd"]), temp0_config)
    with Runner(temp0_config, _RescoringTimesOut, path) as runner:
        tokens = runner.tokenize(items)
        _RescoringTimesOut.failing = frozenset(tuple(tokens[i.prompt.key]) for i in items[:2])
        runner.run(items)
    first = {r.key: r for r in ResultsFile(path).results()}
    failed = {k for k, r in first.items() if r.rescore_failed}
    assert failed, "the off-by-one verifier did not diverge on either prompt"
    assert failed <= {i.key for i in items[:2]}
    for key in failed:  # kept, labelled with the reason, not guessed
        assert first[key].judged.label is Label.INCONCLUSIVE
        assert "did not answer within 5 s" in first[key].judged.reason
        assert "--resume redoes it" in first[key].judged.reason

    _RescoringTimesOut.generated = 0
    try:
        # A resume of other prompts leaves these alone (they are redone when they are asked).
        others = [item for item in items if item.key not in failed]
        with Runner(temp0_config, _RescoringTimesOut, path) as runner:
            runner.run(others, resume=True)
        assert _RescoringTimesOut.generated == 0
        assert {r.key for r in ResultsFile(path).results() if r.rescore_failed} == failed
        _RescoringTimesOut.failing = frozenset()
        with Runner(temp0_config, _RescoringTimesOut, path) as runner:
            runner.run(items, resume=True)
    finally:
        _RescoringTimesOut.failing = frozenset()
    results = ResultsFile(path)
    assert not results.read().problems  # one result per key: the failed ones were replaced
    again = {r.key: r for r in results.results()}
    assert set(again) == set(first)
    assert _RescoringTimesOut.generated == 2 * len(failed)  # only the failed ones, both paths
    for key, record in again.items():
        assert not record.rescore_failed
        if key in failed:
            assert record.judged.label is Label.SAMPLER_BUG, record.judged.reason
        else:
            assert record.to_dict() == first[key].to_dict()  # untouched
