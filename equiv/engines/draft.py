"""The drafters of the in-process speculative path, behind llama-cpp-python's ``draft_model``
hook: a GGUF draft model drafting as llama.cpp's draft sampler does, or llama-cpp-python's own
prompt lookup (n-gram drafting from the context, no second model). Each records its calls
(context length, tokens drafted) and the seconds it spent, from which the engine counts what was
accepted."""

from __future__ import annotations

import time
from typing import Any

import llama_cpp
import numpy as np
import numpy.typing as npt
from llama_cpp.llama_speculative import LlamaDraftModel, LlamaPromptLookupDecoding

from equiv.config import DraftConfig
from equiv.records.generation import top_k

__all__ = ["PROMPT_LOOKUP_NGRAM", "GGUFDraftModel", "PromptLookupDraft", "last_row"]

#: llama-cpp-python's default longest n-gram looked up (``LlamaPromptLookupDecoding``).
PROMPT_LOOKUP_NGRAM = 2

# llama.cpp's draft sampler keeps the top 10 before it reads p (common/speculative.cpp).
_DRAFT_TOP_N = 10


def last_row(llm: Any) -> npt.NDArray[np.float32]:
    ptr = llama_cpp.llama_get_logits_ith(llm.ctx, -1)
    return np.ctypeslib.as_array(ptr, shape=(llm.n_vocab(),))


class GGUFDraftModel(LlamaDraftModel):
    """A GGUF draft model behind llama-cpp-python's ``draft_model`` hook, drafting as llama.cpp.

    It keeps its own KV cache across calls and evaluates only the tokens it has not seen; proposes
    up to ``draft_max`` greedy tokens; stops when the top token's probability (softmax over the
    top 10, as llama.cpp's draft sampler) falls below ``p_min``; returns nothing when fewer than
    ``draft_min`` tokens were drafted. Every call is recorded in ``calls``.
    """

    def __init__(self, llm: Any, config: DraftConfig) -> None:
        self.llm = llm
        self.config = config
        self.calls: list[tuple[int, tuple[int, ...]]] = []
        self.seconds = 0.0  # time spent drafting (prompt evaluation excluded), for the cost ratio

    def __call__(self, input_ids: npt.NDArray[np.intc], /, **kwargs: Any) -> npt.NDArray[np.intc]:
        started = time.perf_counter()
        llm = self.llm
        ids = input_ids.tolist()
        cached = llm.input_ids[: llm.n_tokens].tolist()
        keep = 0
        for a, b in zip(cached, ids, strict=False):
            if a != b:
                break
            keep += 1
        keep = min(keep, len(ids) - 1)  # re-evaluate at least the last token to get its logits
        llm.n_tokens = keep  # Llama.eval drops the KV cache from n_tokens on
        llm.eval(ids[keep:])
        if len(ids) - keep > 2:  # the prompt itself: a per-prompt cost, not a drafting step
            started = time.perf_counter()
        budget = min(self.config.draft_max, llm.n_ctx() - len(ids) - 1)
        drafted: list[int] = []
        while len(drafted) < budget:
            row = last_row(llm)
            top = top_k(row, _DRAFT_TOP_N)  # descending, lowest id first on ties
            logits = row[top].astype(np.float64)
            probs = np.exp(logits - logits.max())
            probs /= probs.sum()
            best = int(top[0])
            if float(probs.max()) < self.config.p_min:
                break
            drafted.append(best)
            if len(drafted) < budget:
                llm.eval([best])
        if len(drafted) < self.config.draft_min:
            drafted = []
        self.calls.append((len(ids), tuple(drafted)))
        self.seconds += time.perf_counter() - started
        return np.array(drafted, dtype=np.intc)


class PromptLookupDraft(LlamaPromptLookupDecoding):
    """llama-cpp-python's prompt lookup (the last 1..``max_ngram_size`` tokens matched earlier
    in the context, up to ``draft_max`` tokens that followed there), recording its calls as
    `GGUFDraftModel` does."""

    def __init__(self, config: DraftConfig, max_ngram_size: int = PROMPT_LOOKUP_NGRAM) -> None:
        super().__init__(max_ngram_size=max_ngram_size, num_pred_tokens=config.draft_max)
        self.calls: list[tuple[int, tuple[int, ...]]] = []
        self.seconds = 0.0

    def __call__(self, input_ids: npt.NDArray[np.intc], /, **kwargs: Any) -> npt.NDArray[np.intc]:
        started = time.perf_counter()
        drafted = np.asarray(super().__call__(input_ids, **kwargs), dtype=np.intc)
        self.calls.append((len(input_ids), tuple(int(t) for t in drafted)))
        self.seconds += time.perf_counter() - started
        return drafted
