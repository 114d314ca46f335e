"""A lossy temp-0 speculative path that reports no rows, for the run-level divergence-rate tests:
``--engine relaxed_engine:make_engine`` with this directory on PYTHONPATH.

The draft (the real draft GGUF) proposes up to ``draft_max`` greedy tokens; the target (the real
target GGUF) evaluates them in one batch, as verification does, and accepts a drafted token when
it is one of the target's **two** best there (``make_top3``: three), a "relaxed acceptance",
the lossy rule some servers offer for speed. The first refused token is replaced by the target's
argmax, and a fully accepted draft gets the argmax of the last row. Like a server, it reports
neither the rows it used nor its acceptance decisions, so each divergence alone looks like the
target's runner-up at a near-tie; only their rate gives it away. The baseline is plain llama.cpp.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from equiv.config import RunConfig, SamplingConfig
from equiv.engines.base import Capabilities
from equiv.engines.llamacpp import LlamaCppEngine, _last_row, _load_llama
from equiv.records import DraftStep, Generation, TokenAlternatives
from equiv.records.generation import top_k

__all__ = ["RelaxedEngine", "make_engine", "make_top3"]


class RelaxedEngine(LlamaCppEngine):
    capabilities = Capabilities(full_logits=False, deterministic_seed=True, rescoring=True)

    def __init__(self, config: RunConfig, *, top: int = 2) -> None:
        self.top = top
        config = config.for_path(speculative=True)
        self.config = config
        self.path = "speculative"
        self._draft = None
        self._draft_llm = _load_llama(config.draft.path, config, logits_all=False)
        self.llm = _load_llama(config.target.path, config, logits_all=True)
        self._init_vocab()

    def generate(
        self,
        prompt_tokens: Sequence[int],
        *,
        sampling: SamplingConfig,
        seed: int | None,
        max_tokens: int,
    ) -> Generation:
        target, draft = self.llm, self._draft_llm
        n_prompt = len(prompt_tokens)
        self._check_fits(n_prompt, max_tokens)
        t0 = time.perf_counter()
        self._eval_prompt(prompt_tokens)
        emitted = [int(np.argmax(target.scores[n_prompt - 1]))]
        t_first = time.perf_counter()
        draft.reset()
        draft.eval(list(prompt_tokens))
        steps: list[DraftStep] = []
        while len(emitted) < max_tokens and not self._is_eog(emitted[-1]):
            past = n_prompt + len(emitted) - 1  # the last emitted token is not evaluated yet
            draft.n_tokens = past
            draft.eval([emitted[-1]])
            drafts: list[int] = []
            for _ in range(min(self.config.draft_config.draft_max, max_tokens - len(emitted))):
                drafts.append(int(np.argmax(_last_row(draft))))
                draft.eval([drafts[-1]])
            target.n_tokens = past
            target.eval([emitted[-1], *drafts])
            rows = target.scores[past : past + len(drafts) + 1]
            accepted = 0
            while accepted < len(drafts) and drafts[accepted] in top_k(rows[accepted], self.top):
                accepted += 1
            out = [*drafts[:accepted], int(np.argmax(rows[accepted]))]
            steps.append(DraftStep(len(emitted), len(drafts), accepted))
            for token in out:
                emitted.append(token)
                if self._is_eog(token) or len(emitted) >= max_tokens:
                    break
        stop = "eos" if self._is_eog(emitted[-1]) else "length"
        text = bytes(target.detokenize(emitted, special=True)).decode("utf-8", errors="replace")
        return Generation(
            path=self.path,
            prompt_tokens=tuple(int(t) for t in prompt_tokens),
            tokens=tuple(emitted),
            pieces=tuple(self.token_text(t) for t in emitted),
            text=text,
            stop_reason=stop,
            alternatives=tuple(TokenAlternatives((), ()) for _ in emitted),
            t_prompt_s=t_first - t0,
            t_decode_s=time.perf_counter() - t_first,
            draft_steps=tuple(steps),
            seed=seed,
        )

    def fingerprint(self) -> dict[str, Any]:
        fp = super().fingerprint()
        fp["logits_all"] = False  # as the baseline's: the rows are not reported
        return fp


def make_engine(config: RunConfig, *, speculative: bool, top: int = 2) -> Any:
    """The baseline is plain llama.cpp; the speculative path accepts the target's ``top`` best."""
    if not speculative:
        return LlamaCppEngine(config, speculative=False)
    return RelaxedEngine(config, top=top)


def make_top3(config: RunConfig, *, speculative: bool) -> Any:
    """A lossier rule for the tests: it diverges early on any CPU, so a few prompts decide."""
    return make_engine(config, speculative=speculative, top=3)
