"""A lossy temp-0 speculative path that reports no rows, for the run-level divergence-rate tests:
``--engine relaxed_engine:make_engine`` with this directory on PYTHONPATH.

The draft (the real draft GGUF) proposes up to ``draft_max`` greedy tokens; the target (the real
target GGUF) evaluates them in one batch, as verification does, and accepts a drafted token when
it is one of the target's **two** best there, a "relaxed acceptance", the lossy rule some servers
offer for speed. The first refused token is replaced by the target's argmax, and a fully accepted
draft gets the argmax of the last row. ``make_lossy`` is lossier, for the tests: the draft
*samples* its proposals at temperature 1 (as a draft with its own sampler does; the generator is
seeded from the prompt, so a rerun repeats it) and the target accepts any of its **three** best.
A draft this close to the target proposes a token other than the target's argmax only near a
tie, which is machine-dependent; sampling makes it propose one within a few tokens on any CPU.
Like a server, it reports neither the rows it used nor its acceptance decisions, so each
divergence alone looks like the target's runner-up at a near-tie; only their rate gives it away.
The baseline is plain llama.cpp.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from equiv.config import RunConfig, SamplingConfig
from equiv.engines.base import Capabilities
from equiv.engines.llama_load import load_llama
from equiv.engines.llamacpp import LlamaCppEngine, _last_row
from equiv.records import DraftStep, Generation, TokenAlternatives
from equiv.records.generation import top_k

__all__ = ["RelaxedEngine", "make_engine", "make_lossy"]


class RelaxedEngine(LlamaCppEngine):
    capabilities = Capabilities(full_logits=False, deterministic_seed=True, rescoring=True)

    def __init__(self, config: RunConfig, *, top: int = 2, draft_temp: float | None = None) -> None:
        self.top = top
        self.draft_temp = draft_temp
        config = config.for_path(speculative=True)
        self.config = config
        self.path = "speculative"
        self._draft = None
        self._draft_llm = load_llama(config.draft.path, config, logits_all=False)
        self.llm = load_llama(config.target.path, config, logits_all=True)
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
        rng = np.random.default_rng([len(prompt_tokens), *prompt_tokens[-16:]])
        steps: list[DraftStep] = []
        while len(emitted) < max_tokens and not self._is_eog(emitted[-1]):
            past = n_prompt + len(emitted) - 1  # the last emitted token is not evaluated yet
            draft.n_tokens = past
            draft.eval([emitted[-1]])
            drafts: list[int] = []
            for _ in range(min(self.config.draft_config.draft_max, max_tokens - len(emitted))):
                drafts.append(self._propose(_last_row(draft), rng))
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

    def _propose(self, row: np.ndarray, rng: np.random.Generator) -> int:
        """The draft's greedy token, or one sampled at ``draft_temp``."""
        if self.draft_temp is None:
            return int(np.argmax(row))
        z = (row - row.max()) / self.draft_temp
        p = np.exp(z.astype(np.float64))
        return int(rng.choice(len(p), p=p / p.sum()))

    def fingerprint(self) -> dict[str, Any]:
        fp = super().fingerprint()
        fp["logits_all"] = False  # as the baseline's: the rows are not reported
        return fp


def make_engine(
    config: RunConfig, *, speculative: bool, top: int = 2, draft_temp: float | None = None
) -> Any:
    """The baseline is plain llama.cpp; the speculative path accepts the target's ``top`` best."""
    if not speculative:
        return LlamaCppEngine(config, speculative=False)
    return RelaxedEngine(config, top=top, draft_temp=draft_temp)


def make_lossy(config: RunConfig, *, speculative: bool) -> Any:
    """A sampling draft and top-3 acceptance, for the tests: it diverges within a few tokens on
    any CPU, so a few prompts decide."""
    return make_engine(config, speculative=speculative, top=3, draft_temp=1.0)
