"""The tiny recurrent ``hybrid`` pair: built deterministically, loaded by llama.cpp, not
degenerate, and verified by llama-server through its checkpoint-and-replay path."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gguf
import numpy as np
import pytest

from equiv.config import RunConfig, SamplingConfig
from equiv.models.tiny_gguf import _Writer
from equiv.models.tiny_recurrent import TinyPair, build_tiny_recurrent_pair

llama_cpp = pytest.importorskip("llama_cpp")

pytestmark = pytest.mark.model

GREEDY = SamplingConfig(temp=0.0)
PROMPTS = (
    "The capital of France is",
    "def binary_search(xs, x):\n",
    "Once upon a time, there was a little",
    "Q: What is 17 * 3?\nA:",
)
N_TOKENS = 32


def _sha(path: str | Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def tiny() -> TinyPair:
    from equiv.models.pair import resolve_pair

    pair = resolve_pair(pair="hybrid")  # cached: seconds the first time, then free
    return TinyPair(pair.target, pair.draft)


@pytest.fixture(scope="module")
def loaded(tiny: TinyPair) -> Iterator[tuple[Any, Any]]:
    target, draft = (
        llama_cpp.Llama(model_path=p, logits_all=True, n_ctx=256, seed=1, verbose=False)
        for p in (tiny.target.path, tiny.draft.path)
    )
    yield target, draft
    target.close()
    draft.close()


@pytest.fixture(scope="module")
def greedy_runs(loaded: tuple[Any, Any]) -> list[tuple[list[int], list[int], np.ndarray]]:
    """(prompt tokens, greedy tokens, the target's row for each) for every prompt."""
    target, _ = loaded
    runs = []
    for text in PROMPTS:
        prompt = target.tokenize(text.encode())
        target.reset()
        out: list[int] = []
        for token in target.generate(prompt, temp=0.0):
            out.append(int(token))
            if len(out) == N_TOKENS:
                break
        rows = np.array(target.scores[len(prompt) - 1 : len(prompt) - 1 + len(out)])
        runs.append((prompt, out, rows))
    return runs


# -- the files -------------------------------------------------------------------------------------


def test_builds_the_same_bytes_every_time(tiny, tmp_path):
    from equiv.models.pair import default_target

    again = build_tiny_recurrent_pair(default_target(), tmp_path)
    assert Path(again.target.path).name == Path(tiny.target.path).name
    assert _sha(again.target.path) == _sha(tiny.target.path)
    assert _sha(again.draft.path) == _sha(tiny.draft.path)
    assert not list(tmp_path.glob("*.tmp*"))


def test_fast_array_packing_writes_what_gguf_writes(tmp_path):
    fast, slow = _Writer(tmp_path / "a.gguf", "mamba"), gguf.GGUFWriter(tmp_path / "b", "mamba")
    arrays = [
        ([b"<pad>", "\u2581the".encode(), b"\xff"], gguf.GGUFValueType.STRING),
        ([-1000.0, 0.5, -3.25], gguf.GGUFValueType.FLOAT32),
        ([3, 1, 6], gguf.GGUFValueType.INT32),
    ]
    for value, item in arrays:
        for add_vtype in (True, False):
            args = (value, gguf.GGUFValueType.ARRAY, add_vtype, item)
            assert fast._pack_val(*args) == slow._pack_val(*args)


def test_target_is_recurrent_and_both_share_the_gemma_vocabulary(tiny, loaded):
    from equiv.models.vocab_compat import require_vocab_compat

    target, draft = loaded
    assert llama_cpp.llama_model_is_recurrent(target._model.model)
    assert not llama_cpp.llama_model_is_recurrent(draft._model.model)
    assert target.n_vocab() == draft.n_vocab() == 262144
    assert require_vocab_compat(tiny.target.path, tiny.draft.path).compatible
    text = "def binary_search(xs, x):"
    assert target.tokenize(text.encode()) == draft.tokenize(text.encode())
    assert len(target.tokenize(text.encode())) < len(text) / 2  # real subwords, not bytes


def test_chat_prompts_render_as_llama_cpp_renders_them_for_gemma():
    """The pair's own chat template gives, for every built-in chat prompt, the text llama.cpp's
    built-in ``gemma`` template gives the bundled Gemma 3 (a system message joins the first user
    turn)."""
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter

    from equiv.engines.chat import apply_builtin_template
    from equiv.models.tiny_gguf import GEMMA_CHAT_TEMPLATE
    from equiv.prompts import load_suites

    render = Jinja2ChatFormatter(template=GEMMA_CHAT_TEMPLATE, eos_token="<eos>", bos_token="<bos>")
    chats = [p for p in load_suites() if p.messages is not None]
    assert any(role == "system" for p in chats for role, _ in p.messages or ())
    for prompt in chats:
        assert prompt.messages is not None
        messages: Any = [{"role": r, "content": c} for r, c in prompt.messages]
        ours = render(messages=messages).prompt
        assert ours == apply_builtin_template("gemma", prompt.messages), prompt.key


def test_resolve_pair_names_the_hybrid_pair(tiny):
    from equiv.errors import ConfigError
    from equiv.models.pair import cache_dir, resolve_pair

    assert Path(tiny.target.path).parent == cache_dir() / "tiny"
    with pytest.raises(ConfigError, match="names both models"):
        resolve_pair(tiny.target.path, pair="hybrid")
    with pytest.raises(ConfigError, match="'mamba' is not one of"):
        resolve_pair(pair="mamba")


# -- not degenerate --------------------------------------------------------------------------------


def test_greedy_text_moves_on(greedy_runs, loaded):
    target, _ = loaded
    for _, out, _ in greedy_runs:
        assert len(out) == N_TOKENS
        assert len(set(out)) >= N_TOKENS * 3 // 4, target.detokenize(out)


def test_next_token_distribution_is_peaky_but_not_one_hot(greedy_runs):
    rows = np.concatenate([r for _, _, r in greedy_runs]).astype(np.float32)
    top2 = np.sort(rows, axis=1)[:, -2:]
    near_ties = float(np.mean(top2[:, 1] - top2[:, 0] < 1.0))
    z = rows / 0.8
    z -= z.max(axis=1, keepdims=True)
    p = np.exp(z)
    p /= p.sum(axis=1, keepdims=True)
    entropy = float(np.mean(-(p * np.log(np.where(p > 0, p, 1.0))).sum(axis=1)))
    # measured on this pair: 0.23 and 0.47 nats
    assert near_ties < 0.35, near_ties
    assert 0.2 < entropy < 1.5, entropy


def test_draft_agrees_with_the_target_often_but_not_always(greedy_runs, loaded):
    _, draft = loaded
    agree = []
    for prompt, out, _ in greedy_runs:
        draft.reset()
        draft.eval(prompt + out[:-1])
        rows = np.array(draft.scores[len(prompt) - 1 : len(prompt) - 1 + len(out)])
        agree.extend(rows.argmax(axis=1) == np.array(out))
    assert 0.4 < float(np.mean(agree)) < 0.9  # measured: 0.66


# -- through equiv's engines -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_config(tiny: TinyPair) -> RunConfig:
    return RunConfig(target=tiny.target, draft=tiny.draft, max_tokens=16, n_ctx=512)


def _prompt_tokens(engine: Any) -> list[int]:
    from equiv.prompts import load_suites

    prompt = next(p for p in load_suites() if p.key == "code/fib_lt")
    return list(engine.prompt_tokens(prompt))


def test_in_process_baseline_is_greedy_and_repeatable(tiny_config):
    from equiv.engines.llamacpp import make_engine

    engine = make_engine(tiny_config, speculative=False)
    try:
        tokens = _prompt_tokens(engine)
        first = engine.generate(tokens, sampling=GREEDY, seed=None, max_tokens=16)
        second = engine.generate(tokens, sampling=GREEDY, seed=None, max_tokens=16)
    finally:
        engine.close()
    assert first.n_tokens == 16
    assert first.tokens == second.tokens
    assert first.logits is not None
    assert all(row[t] == row.max() for t, row in zip(first.tokens, first.logits, strict=True))


@pytest.fixture(scope="module")
def in_process(tiny_config: RunConfig) -> Iterator[tuple[Any, Any]]:
    """The tiny pair's baseline and speculative engines, loaded once."""
    from equiv.engines.llamacpp import make_engine

    baseline = make_engine(tiny_config, speculative=False)
    speculative = make_engine(tiny_config, speculative=True)
    yield baseline, speculative
    speculative.close()
    baseline.close()


def _suite_tokens(engine: Any, keys: tuple[str, ...]) -> list[list[int]]:
    from equiv.prompts import load_suites

    by_key = {p.key: p for p in load_suites()}
    return [list(engine.prompt_tokens(by_key[key])) for key in keys]


#: Prompts of every kind (chat ones through the pair's Gemma chat template).
KEYS = ("code/fib_lt", "chat/capital_france", "multilingual/de_berlin", "reasoning/add_two_digit")


def test_in_process_speculative_verifies_by_checkpoint_and_replay_at_temp0(in_process):
    """Greedy through checkpoint and replay: every emitted token is the argmax of the row it was
    chosen from, drafts were rejected and replayed, and the output is the baseline's up to a
    first difference that only a near-tie explains (the two rows' own difference exceeds the
    baseline's margin there): where, if anywhere, a near-tie flips is this CPU's business."""
    baseline, speculative = in_process
    assert not speculative.rolls_back
    assert speculative.fingerprint()["verify"] == "checkpoint and replay (as llama-server)"
    replays = 0
    for tokens in _suite_tokens(speculative, KEYS):
        spec = speculative.generate(tokens, sampling=GREEDY, seed=None, max_tokens=32)
        base = baseline.generate(tokens, sampling=GREEDY, seed=None, max_tokens=32)
        assert spec.logits is not None
        assert base.logits is not None
        assert spec.n_tokens == 32
        for k, (token, row) in enumerate(zip(spec.tokens, spec.logits, strict=True)):
            assert row[token] == row.max(), k
        for replay in speculative.last_replays:
            assert replay.accepted < replay.drafted
            assert 0 <= replay.pos < spec.n_tokens
        replays += len(speculative.last_replays)
        steps = spec.draft_steps
        assert steps
        assert all(s.accepted <= s.drafted for s in steps)
        assert sum(s.drafted for s in steps) > sum(s.accepted for s in steps) > 0
        if spec.tokens != base.tokens:
            pairs = zip(spec.tokens, base.tokens, strict=True)
            d = next(i for i, (a, b) in enumerate(pairs) if a != b)
            moved = float(np.abs(spec.logits[d] - base.logits[d]).max())
            row = base.logits[d]
            assert row[base.tokens[d]] - row[spec.tokens[d]] <= 2 * moved, (d, moved)
    assert replays > 0


def test_a_checkpoint_restores_the_state_bit_for_bit(in_process):
    from equiv.engines.replay import Checkpoint

    _, speculative = in_process
    llm = speculative.llm
    prompt = _suite_tokens(speculative, KEYS[:1])[0]
    llm.reset()
    llm.eval(prompt)
    checkpoint = Checkpoint(llm, partial=True)
    continuation = [int(t) for t in np.argsort(llm.scores[len(prompt) - 1])[-3:]]
    llm.eval(continuation)
    first = np.array(llm.scores[len(prompt) : len(prompt) + 3])
    llm.eval(continuation[::-1])  # the state moves on: a recurrent state cannot drop these
    checkpoint.restore(llm)
    assert llm.n_tokens == len(prompt)
    assert checkpoint.tokens == tuple(prompt)
    llm.eval(continuation)
    assert np.array_equal(np.array(llm.scores[len(prompt) : len(prompt) + 3]), first)


def test_rescoring_a_recurrent_target_gives_back_the_rows_it_generated_from(tiny):
    """Sampling mode keeps the prompt's prefix as a checkpoint for every seed and for
    re-scoring: single-token re-scoring of the baseline's own tokens is its rows bit for bit,
    and batched re-scoring (the speculative path's) works on a state that cannot roll back."""
    from equiv.config import Mode
    from equiv.engines.llamacpp import make_engine

    config = RunConfig(
        target=tiny.target,
        draft=tiny.draft,
        mode=Mode.SAMPLING,
        sampling=SamplingConfig(temp=0.8),
        seeds=(1, 2),
        max_tokens=12,
        n_ctx=512,
    )
    sampling = config.sampling
    baseline = make_engine(config, speculative=False)
    try:
        tokens = _suite_tokens(baseline, KEYS[:2])
        runs = [
            (t, baseline.generate(t, sampling=sampling, seed=seed, max_tokens=12))
            for t in tokens
            for seed in (1, 2)
        ]
        for prompt, run in runs[::-1]:  # another prompt's state in between each time
            assert np.array_equal(baseline.rescore(prompt, run.tokens, batched=False), run.logits)
    finally:
        baseline.close()
    speculative = make_engine(config, speculative=True)
    try:
        prompt, run = runs[0]
        spec = speculative.generate(prompt, sampling=sampling, seed=1, max_tokens=12)
        batched = speculative.rescore(prompt, spec.tokens, batched=True)
        again = speculative.rescore(prompt, spec.tokens, batched=True)
        single = speculative.rescore(prompt, run.tokens, batched=False)
    finally:
        speculative.close()
    assert np.array_equal(batched, again)
    assert float(np.abs(batched - spec.logits).max()) < 1e-2
    assert float(np.abs(single - run.logits).max()) < 1e-2


def test_the_reference_sampler_restores_a_recurrent_target_after_a_rejection(tiny_config):
    """The textbook rejection sampler on the tiny pair, greedy and at 0.8: it runs past its
    rejections (it used to decode behind the state) and each token is its row's argmax at 0."""
    from equiv.engines.reference import make_engine

    engine = make_engine(tiny_config, speculative=True)
    try:
        assert engine.fingerprint()["verify"].startswith("checkpoint")
        tokens = _suite_tokens(engine, KEYS[:1])[0]
        greedy = engine.generate(tokens, sampling=GREEDY, seed=None, max_tokens=24)
        hot = engine.generate(tokens, sampling=SamplingConfig(temp=0.8), seed=3, max_tokens=24)
    finally:
        engine.close()
    assert greedy.logits is not None
    assert greedy.n_tokens == hot.n_tokens == 24
    assert all(r[t] == r.max() for t, r in zip(greedy.tokens, greedy.logits, strict=True))
    assert any(s.accepted < s.drafted for s in greedy.draft_steps)
    assert any(not j.accepted for j in hot.judgements)


# -- llama-server: the checkpoint-and-replay path --------------------------------------------------

#: tools/server/server-context.cpp, at debug verbosity: once at load for a target whose memory
#: cannot drop a tail, and once per partly accepted draft, before the accepted tokens are replayed.
USES_CHECKPOINTS = "speculative decoding will use checkpoints"
RESTORES = "restoring speculative checkpoint"


@pytest.mark.server
def test_llama_server_restores_and_replays_for_the_recurrent_target(tiny_config, tmp_path):
    from llama_server import server_bin

    from equiv.engines.server.engine import ServerEngine
    from equiv.engines.server.settings import ServerSettings

    settings = ServerSettings(
        server_bin=server_bin(), log_dir=str(tmp_path), concurrency=1, draft_args="-lv 5"
    )
    baseline = ServerEngine(tiny_config, speculative=False, settings=settings)
    try:
        speculative = ServerEngine(tiny_config, speculative=True, settings=settings)
        try:
            tokens = _prompt_tokens(baseline)
            base = baseline.generate(tokens, sampling=GREEDY, seed=None, max_tokens=16)
            spec = speculative.generate(tokens, sampling=GREEDY, seed=None, max_tokens=16)
        finally:
            speculative.close()
    finally:
        baseline.close()
    assert spec.tokens == base.tokens
    log = (tmp_path / "llama-server-speculative.log").read_text(errors="replace")
    assert USES_CHECKPOINTS in log
    assert log.count(RESTORES) > 0
