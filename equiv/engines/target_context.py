"""The target's context in process: what is evaluated into its KV cache, what is kept there
between calls, and re-scoring on it (teacher forcing).

A prompt is evaluated with the output row of its last token only; in sampling mode the prompt
minus its last token stays in the cache for every seed, restored from a checkpoint when the
target cannot roll back (`equiv.engines.replay`). `TargetContext` is the base of the in-process
engines (`equiv.engines.llamacpp.LlamaCppEngine`), which set its attributes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from equiv.config import Mode, RunConfig
from equiv.engines.draft import last_row
from equiv.engines.llama_load import reset
from equiv.engines.replay import Checkpoint
from equiv.errors import EngineError

if TYPE_CHECKING:
    import llama_cpp

__all__ = ["TargetContext"]


class TargetContext:
    """The target ``llm``'s KV cache, as an engine over llama-cpp-python keeps it."""

    config: RunConfig
    llm: llama_cpp.Llama
    #: False for a recurrent or hybrid target: rejected drafts are undone from checkpoints.
    rolls_back: bool
    #: Sampling mode: evaluate each prompt once and reuse it for every seed (`_cache_prefix`).
    reuse_prompt_state: bool
    _prefix: Checkpoint | None  # the prompt minus its last token (no roll back)
    _n_vocab: int

    def _cache_prefix(self, prompt_tokens: Sequence[int]) -> None:
        """The prompt minus its last token in the KV cache, evaluated (without output rows) only
        when the cache does not hold it already.

        Sampling: llama-cpp-python's prefix matching then re-evaluates only the last prompt
        token before each seed's decode, so every seed (the first included) starts from the same
        KV cache and the same single-token row, and an extra seed costs only its own decode.
        Batched re-scoring: the batch goes on top of the prompt this path just generated from.
        """
        llm = self.llm
        head = list(prompt_tokens[:-1])
        if not self.rolls_back:
            self._restore_prefix(head)
            return
        if llm.n_tokens >= len(head) and llm.input_ids[: len(head)].tolist() == head:
            return
        reset(llm)
        if head:
            self._eval_without_rows(head)

    def _restore_prefix(self, head: list[int]) -> None:
        """`_cache_prefix` for a target that cannot roll back: the state after ``head`` exactly,
        restored from a checkpoint saved when ``head`` was first evaluated."""
        llm = self.llm
        if llm.n_tokens == len(head) and llm.input_ids[: len(head)].tolist() == head:
            return
        if self._prefix is not None and self._prefix.tokens == tuple(head):
            self._prefix.restore(llm)
            return
        reset(llm)
        self._prefix = None
        if head:
            self._eval_without_rows(head)
            self._prefix = Checkpoint(llm, partial=False)

    def _eval_without_rows(self, tokens: Sequence[int]) -> None:
        """Evaluate into the KV cache with the output row of each batch's last token only, even
        with logits_all (a prompt of 1,400 tokens would otherwise compute and copy 1.4 GB of
        logits nobody reads). The batches are the ones `Llama.eval` forms, so the hidden states,
        and the last token's row, are bit for bit those of an evaluation with every row."""
        llm = self.llm
        saved = llm._logits_all
        llm._logits_all = False
        try:
            llm.eval(list(tokens))
        finally:
            llm._logits_all = saved

    def _eval_prompt(self, prompt_tokens: Sequence[int]) -> None:
        """The whole prompt afresh, as llama-server evaluates it: one output row, its last.

        With logits_all the row is stored where `Llama.generate` and the decode loop read it
        (``scores[n_prompt - 1]``), and `Llama.generate` then finds the prompt cached and samples
        from it. Memory stays independent of the prompt's length x the vocabulary.
        """
        llm = self.llm
        reset(llm)
        self._eval_without_rows(prompt_tokens)
        if llm._logits_all:
            llm.scores[len(prompt_tokens) - 1] = last_row(llm)

    def rescore(
        self, prompt_tokens: Sequence[int], tokens: Sequence[int], *, batched: bool
    ) -> npt.NDArray[np.float32]:
        """The target's logits rows for ``tokens`` after ``prompt_tokens`` (teacher forcing).

        Row i is the distribution of tokens[i]. ``batched=False`` evaluates the continuation one
        token at a time (as plain decoding does); ``batched=True`` evaluates prompt and
        continuation in one pass with every row computed (as draft verification does), which
        only the speculative path's context can (it has logits_all). Single-token re-scoring
        evaluates the prompt exactly as this engine's `generate` does in the current mode, so
        re-scoring the baseline's own tokens reproduces its rows bit for bit.
        """
        llm = self.llm
        n_prompt, n = len(prompt_tokens), len(tokens)
        rows = np.empty((n, self._n_vocab), dtype=np.float32)
        if not batched and self.config.mode is Mode.SAMPLING and self.reuse_prompt_state:
            self._cache_prefix(prompt_tokens)
            llm.n_tokens = n_prompt - 1
            llm.eval([prompt_tokens[-1]])
            return self._single_token_rows(tokens, rows)
        if batched:
            if not llm._logits_all:
                raise EngineError("batched re-scoring needs the speculative path (logits_all)")
            # As verification does: one batch with every row computed, on top of the prompt's
            # KV (usually in the cache already: this path just generated from the same prompt).
            self._cache_prefix(prompt_tokens)
            llm.n_tokens = n_prompt - 1  # eval drops the KV cache from here on
            llm.eval([prompt_tokens[-1], *tokens[:-1]])
            rows[:] = llm.scores[n_prompt - 1 : n_prompt - 1 + n]
            return rows
        self._eval_prompt(prompt_tokens)
        return self._single_token_rows(tokens, rows)

    def _single_token_rows(
        self, tokens: Sequence[int], rows: npt.NDArray[np.float32]
    ) -> npt.NDArray[np.float32]:
        llm = self.llm
        for i in range(len(tokens)):
            rows[i] = llm.scores[llm.n_tokens - 1] if llm._logits_all else last_row(llm)
            if i + 1 < len(tokens):
                llm.eval([tokens[i]])
        return rows
