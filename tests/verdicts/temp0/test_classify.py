"""Each label produced by a real constructed scenario on gemma, never by hand-made records
(those tests are marked `model` by their fixtures); and a server's divergence without rows."""

import pytest

from equiv.config import RunConfig
from equiv.engines import load_factory
from equiv.prompts import load_suites
from equiv.records import Generation, ResultsFile, TokenAlternatives
from equiv.records.verdict import Label, verdict_of
from equiv.run.plan import plan
from equiv.run.runner import Runner
from equiv.verdicts.temp0.classify import classify_temp0
from equiv.verdicts.temp0.compare import compare
from equiv.verdicts.verdict_evidence import Temp0Evidence


def _prompts(keys):
    by_key = {p.key: p for p in load_suites()}
    return [by_key[k] for k in keys]


def _run(config, engine, tmp_path, keys):
    with Runner(config, load_factory(engine), tmp_path / "results.jsonl") as runner:
        runner.run(plan(_prompts(keys), config))
    contents = ResultsFile(tmp_path / "results.jsonl").read()
    assert contents.header is not None
    return contents.header.to_dict(), [r.to_dict() for r in contents.results]


def test_llama_cpp_speculative_divergences_are_numeric_drift(real_divergences):
    """Wherever this CPU's near-ties made the real pair diverge, the label is numeric drift."""
    diverged = real_divergences.require()
    for record in diverged:
        verdict = record.verdict
        assert verdict is not None
        assert verdict.label is Label.NUMERIC_DRIFT, verdict.reason
        ev = Temp0Evidence.from_dict(verdict.evidence)
        # Each path emitted its own argmax; the target's own gap was small and positive.
        assert ev.margin_baseline is not None
        assert ev.margin_baseline >= 0
        assert ev.margin_speculative is not None
        assert ev.margin_speculative >= 0
        assert ev.rescored is not None
        assert ev.rescored.gap_single is not None
        assert 0 <= ev.rescored.gap_single < 1.0
    for record in real_divergences.records:
        if record.comparison.identical:
            assert record.verdict is not None
            assert record.verdict.label is Label.EQUIVALENT


def test_logits_from_the_wrong_row_are_a_sampler_bug(temp0_config, tmp_path):
    _, records = _run(temp0_config, "reference:off_by_one", tmp_path, ["code/fib_lt"])
    (record,) = records
    assert not record["comparison"]["identical"]
    verdict = verdict_of(record)
    assert verdict.label is Label.SAMPLER_BUG, verdict.reason
    assert "not the target's" in verdict.reason


def test_correct_reference_sampler_at_temp0_is_not_a_sampler_bug(temp0_config, tmp_path):
    _, records = _run(temp0_config, "reference", tmp_path, ["code/fib_lt"])
    assert verdict_of(records[0]).label in (Label.EQUIVALENT, Label.NUMERIC_DRIFT)


def test_another_quant_of_the_target_is_a_misconfiguration(model_pair, tmp_path):
    config = RunConfig(
        target=model_pair.target,
        draft=model_pair.draft,
        max_tokens=12,
        spec_overrides=(("target", model_pair.draft.path), ("top_p", 0.5)),
    )
    header, records = _run(config, "llamacpp", tmp_path, ["code/fib_lt"])
    differences = header["differences"]
    assert any(d.startswith("target_sha256") for d in differences)
    assert any(d.startswith("target_quant: 'Q4_K_M' vs 'Q4_0'") for d in differences)
    assert any(d.startswith("sampling:") and "top_p" in d for d in differences)
    verdict = verdict_of(records[0])
    assert verdict.label is Label.MISCONFIGURATION
    assert "not the same experiment" in verdict.reason


def test_a_smaller_context_on_one_path_is_a_misconfiguration(model_pair, tmp_path):
    config = RunConfig(
        target=model_pair.target,
        draft=model_pair.draft,
        max_tokens=8,
        spec_overrides=(("n_ctx", 1024),),
    )
    header, records = _run(config, "llamacpp", tmp_path, ["code/fib_lt"])
    assert any("n_ctx: 2048 vs 1024" in d and "truncated" in d for d in header["differences"])
    assert verdict_of(records[0]).label is Label.MISCONFIGURATION


def test_the_reference_engine_applies_per_path_settings(model_pair, tmp_path):
    config = RunConfig(
        target=model_pair.target,
        draft=model_pair.draft,
        max_tokens=4,
        spec_overrides=(("n_ctx", 1024),),
    )
    header, records = _run(config, "reference", tmp_path, ["code/fib_lt"])
    assert header["fingerprints"]["speculative"]["n_ctx"] == 1024
    assert verdict_of(records[0]).label is Label.MISCONFIGURATION


def _served(tokens, alternatives):
    """A generation as the server engine records it: top-k log-probabilities, no rows."""
    return Generation(
        path="baseline",
        prompt_tokens=(1,),
        tokens=tuple(tokens),
        pieces=tuple(str(t) for t in tokens),
        text="",
        stop_reason="length",
        alternatives=tuple(alternatives),
        t_prompt_s=0.0,
        t_decode_s=0.1,
    )


@pytest.mark.parametrize(
    ("spec_alt", "expected"),
    [
        ((9, 7), "'7' (id 7) is 0.0800 below '5' (id 5) (rank 2): a near-tie"),
        ((9, 8), "not among the baseline's top"),
    ],
)
def test_without_rows_the_baseline_top_k_explains_a_divergence(spec_alt, expected):
    row = TokenAlternatives(ids=(5, 7, 6), logits=(-0.5, -0.58, -3.0))
    base = _served([4, 5], [TokenAlternatives((4, 1), (-0.1, -4.0)), row])
    spec = _served(
        [4, spec_alt[1]], [TokenAlternatives((4, 1), (-0.1, -4.0)), TokenAlternatives((), ())]
    )
    record = compare(base, spec)
    verdict = classify_temp0(record, base, spec)
    assert verdict.label is Label.INCONCLUSIVE  # the speculative row is unknown: no label
    assert expected in verdict.reason
