"""One copy of a GGUF's weights per process: `load_llama` shares a loaded model between the
`Llama` objects on one file, frees it with the last of them, and changes no output."""

from __future__ import annotations

import dataclasses
import os
import shutil
from typing import Any

import numpy as np
import pytest

from equiv.config import RunConfig
from equiv.engines.llama_load import load_llama, reset, shared_models
from equiv.errors import ModelError

llama_cpp = pytest.importorskip("llama_cpp")

pytestmark = pytest.mark.model

PROMPT = b"The capital of France is"


@pytest.fixture(scope="module")
def config(tmp_path_factory: pytest.TempPathFactory) -> RunConfig:
    """The tiny pair, its draft copied to a file of this module's own: other tests' open models
    (session fixtures) never share it, so the counts below are this module's alone."""
    from equiv.models.pair import resolve_pair

    pair = resolve_pair(pair="hybrid")  # tiny files, built in seconds and cached
    own = tmp_path_factory.mktemp("llama_load") / "draft.gguf"
    shutil.copyfile(pair.draft.path, own)
    draft = dataclasses.replace(pair.draft, path=str(own))
    return RunConfig(target=pair.target, draft=draft, n_ctx=256, n_threads=1)


def _users(path: str) -> int:
    return shared_models().get(os.path.realpath(path), 0)


def _greedy(llm: Any, n: int = 12) -> tuple[list[int], np.ndarray]:
    """``n`` greedy tokens after `PROMPT`, and the row of the first."""
    llm.reset()
    tokens = llm.tokenize(PROMPT, add_bos=True)
    llm.eval(tokens)
    first = np.array(llm.scores[len(tokens) - 1], copy=True)
    out = []
    for _ in range(n):
        token = int(np.argmax(llm.scores[llm.n_tokens - 1]))
        out.append(token)
        llm.eval([token])
    return out, first


def test_two_contexts_on_one_file_share_its_model_until_the_last_closes(config: RunConfig) -> None:
    path = config.draft.path
    assert _users(path) == 0
    first = load_llama(path, config, logits_all=True)
    second = load_llama(path, config, logits_all=False)
    try:
        assert _users(path) == 2
        assert first._model._inner is second._model._inner  # one llama_model, two contexts
        assert first._ctx.ctx != second._ctx.ctx
        first.close()
        assert _users(path) == 1
        # the survivor still runs on the shared weights after the first one closed
        tokens = second.tokenize(PROMPT, add_bos=True)
        second.eval(tokens)
        assert np.isfinite(second.scores[0]).all()
    finally:
        first.close()
        second.close()
    assert _users(path) == 0


def test_a_shared_model_gives_the_rows_and_tokens_of_a_model_of_its_own(config: RunConfig) -> None:
    # a model of its own: another keyword (one that changes nothing) is never shared
    own = load_llama(config.draft.path, config, logits_all=True, use_mlock=False)
    other = load_llama(config.draft.path, config, logits_all=True)
    shared = load_llama(config.draft.path, config, logits_all=True)
    try:
        tokens_own, row_own = _greedy(own)
        tokens_shared, row_shared = _greedy(shared)
        assert tokens_shared == tokens_own
        assert np.array_equal(row_shared, row_own)  # bit for bit
        assert shared._model._inner is other._model._inner
        assert not hasattr(own._model, "_inner")
    finally:
        for llm in (own, other, shared):
            llm.close()


def test_other_model_keywords_load_a_model_of_their_own(config: RunConfig) -> None:
    plain = load_llama(config.draft.path, config, logits_all=False)
    separate = load_llama(config.draft.path, config, logits_all=False, vocab_only=True)
    try:
        assert _users(config.draft.path) == 1  # only `plain` is shared
        assert separate._model is not plain._model
    finally:
        plain.close()
        separate.close()
    assert _users(config.draft.path) == 0


def test_a_file_that_is_not_a_model_is_a_clear_error(config: RunConfig, tmp_path: Any) -> None:
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"GGUF not really")
    with pytest.raises(ModelError, match="could not load") as info:
        load_llama(str(bad), config, logits_all=False)
    assert str(bad) in str(info.value)
    assert _users(str(bad)) == 0


def test_reset_gives_back_the_rows_of_the_last_prompt_and_changes_none(config: RunConfig) -> None:
    llm = load_llama(config.draft.path, config, logits_all=True)
    try:
        tokens, row = _greedy(llm)
        old = llm.scores
        reset(llm)
        assert llm.n_tokens == 0
        assert llm.scores is not old  # a fresh buffer
        assert llm.scores.shape == old.shape
        again_tokens, again_row = _greedy(llm)
        assert again_tokens == tokens
        assert np.array_equal(again_row, row)  # bit for bit after the reset
    finally:
        llm.close()


@pytest.mark.parametrize("amx", [True, False])
def test_a_build_with_the_amx_kernels_loads_without_extra_buffer_types(
    config: RunConfig, monkeypatch: pytest.MonkeyPatch, amx: bool
) -> None:
    """Where llama.cpp has its AMX kernels (they segfault on some hosts: scripts/amx_check.py)
    every model loads without the extra buffer types, shared or not; elsewhere with llama.cpp's
    default (with them)."""
    from equiv.engines import llama_load

    monkeypatch.setattr(llama_load, "AMX", amx)
    shared = load_llama(config.draft.path, config, logits_all=True)
    alone = load_llama(config.draft.path, config, logits_all=True, use_mlock=False)
    try:
        for llm in (shared, alone):
            assert llm.model_params.use_extra_bufts is (not amx)
            _greedy(llm, n=2)  # and it decodes
    finally:
        shared.close()
        alone.close()
