"""The llama-cpp-python engine on the real default pair."""

import numpy as np
import pytest

from equiv.config import SamplingConfig
from equiv.prompts import load_suites

pytestmark = pytest.mark.model

GREEDY = SamplingConfig(temp=0.0)


def _prompt(key: str):
    return next(p for p in load_suites() if p.key == key)


@pytest.mark.parametrize("path", [0, 1], ids=["baseline", "speculative"])
def test_each_token_is_the_argmax_of_the_row_recorded_for_it(engines, path):
    """At temp 0 the sampler takes the argmax, so a misaligned logits row would show here."""
    engine = engines[path]
    tokens = engine.prompt_tokens(_prompt("code/py_binary_search"))
    gen = engine.generate(tokens, sampling=GREEDY, seed=None, max_tokens=24)
    assert gen.logits is not None
    assert gen.logits.shape == (gen.n_tokens, engine.llm.n_vocab())
    assert gen.n_tokens > 0
    for token, row, alt in zip(gen.tokens, gen.logits, gen.alternatives, strict=True):
        assert row[token] == row.max()
        assert alt.ids[0] == token
        assert alt.logits[0] == pytest.approx(float(row.max()), abs=1e-4)


def test_speculative_path_records_its_drafting_rounds(engines):
    _, speculative = engines
    tokens = speculative.prompt_tokens(_prompt("code/fib_lt"))
    gen = speculative.generate(tokens, sampling=GREEDY, seed=None, max_tokens=24)
    assert gen.draft_steps, "the draft model was never asked"
    for step in gen.draft_steps:
        assert 0 <= step.accepted <= step.drafted <= speculative.config.draft_config.draft_max
        assert 0 <= step.pos <= gen.n_tokens
    assert gen.acceptance_rate is not None
    assert gen.acceptance_rate > 0.5  # a requantized copy of the target agrees most of the time


def test_baseline_has_no_draft_and_is_repeatable(engines):
    baseline, _ = engines
    tokens = baseline.prompt_tokens(_prompt("reasoning/pencils_word_problem"))
    first = baseline.generate(tokens, sampling=GREEDY, seed=None, max_tokens=16)
    second = baseline.generate(tokens, sampling=GREEDY, seed=None, max_tokens=16)
    assert first.draft_steps == ()
    assert first.tokens == second.tokens
    assert np.array_equal(first.logits, second.logits)


def test_chat_prompts_get_the_gemma_template_with_one_bos(engines):
    baseline, speculative = engines
    chat = next(p for p in load_suites(["chat"]) if p.messages)
    tokens = baseline.prompt_tokens(chat)
    assert tokens == speculative.prompt_tokens(chat)
    bos = baseline.llm.token_bos()
    assert tokens[0] == bos
    assert tokens.count(bos) == 1
    text = baseline.llm.detokenize(tokens, special=True).decode()
    assert "<start_of_turn>user" in text
    assert text.rstrip().endswith("<start_of_turn>model")


def test_fingerprints_name_what_differs_between_paths(engines):
    baseline, speculative = engines
    fb, fs = baseline.fingerprint(), speculative.fingerprint()
    assert fb["target_sha256"] == fs["target_sha256"]
    assert fb["target_quant"] == "Q4_K_M"
    assert (fb["logits_all"], fs["logits_all"]) == (False, True)
    assert "draft_sha256" in fs
    assert "draft_sha256" not in fb
