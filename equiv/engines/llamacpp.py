"""llama-cpp-python in process: the baseline (target alone) and the speculative path (target with
a GGUF draft plugged into llama-cpp-python's own ``draft_model`` hook).

Why the baseline evaluates with ``logits_all=False``: that is plain decoding as users run it
(llama-cli and llama-server compute only the last row). The speculative path must use
``logits_all=True`` (llama-cpp-python verifies drafted tokens from the rows of one batch, and sizes
its score buffer from that flag), so its output layer multiplies every row of each batch. Making the
baseline ``logits_all=True`` too would hide part of the real difference between the two
deployments; equiv compares them as deployed and lets the classifier measure the drift.

A target that cannot roll back (recurrent or hybrid memory) cannot take llama-cpp-python's
``draft_model`` path, which drops a rejected draft's tail from the cache: its speculative path
verifies drafts by checkpoint and replay, as llama-server does (`equiv.engines.replay`), and its
prompt prefix is kept as a checkpoint for the seeds of a sampling run and for re-scoring.
"""

from __future__ import annotations

import ctypes
import time
from collections.abc import Sequence
from typing import TypedDict

import llama_cpp
import numpy as np
import numpy.typing as npt

from equiv.config import Mode, RunConfig, SamplingConfig
from equiv.engines.base import Capabilities
from equiv.engines.draft import GGUFDraftModel, PromptLookupDraft, last_row
from equiv.engines.llama_load import load_llama
from equiv.engines.prompt_format import PromptFormat
from equiv.engines.replay import Decoded, Replay, Sampler, cannot_roll_back, decode
from equiv.engines.target_context import TargetContext
from equiv.errors import EngineError
from equiv.json_types import JSONDict
from equiv.models.gguf import read_gguf_info
from equiv.prompts import Prompt
from equiv.records import DraftStep, Generation, Judgement, PathName, TokenAlternatives

__all__ = ["DRAFTERS", "GGUFDraftModel", "LlamaCppEngine", "make_engine"]


#: The drafters of ``--engine llamacpp[:variant]``: a GGUF draft model, or llama-cpp-python's
#: prompt lookup (n-gram drafts from the context: the in-process counterpart of llama-server's
#: ngram types).
DRAFT_MODEL, PROMPT_LOOKUP = "draft-model", "prompt-lookup"

#: The context's last output row (kept under this name for engines built on this module).
_last_row = last_row


class LlamaCppEngine(TargetContext):
    """One path over llama-cpp-python: ``speculative`` plugs in a `GGUFDraftModel`; the target's
    KV cache and re-scoring on it are `TargetContext`'s."""

    capabilities = Capabilities(full_logits=True, deterministic_seed=True, rescoring=True)
    reuse_prompt_state = True

    def __init__(self, config: RunConfig, *, speculative: bool, drafter: str = DRAFT_MODEL) -> None:
        config = config.for_path(speculative=speculative)
        self.config = config
        self.path: str = PathName.SPECULATIVE if speculative else PathName.BASELINE
        self.drafter = drafter
        #: equiv.engines.base.SelfDrafting: prompt lookup reads no draft file
        self.drafts_from_file = drafter == DRAFT_MODEL
        self._draft: GGUFDraftModel | PromptLookupDraft | None = None
        self._draft_llm: llama_cpp.Llama | None = None
        if speculative and drafter == PROMPT_LOOKUP:
            self._draft = PromptLookupDraft(config.draft_config)
        elif speculative:
            self._draft_llm = load_llama(config.draft.path, config, logits_all=False)
            self._draft = GGUFDraftModel(self._draft_llm, config.draft_config)
        self.llm = load_llama(
            config.target.path, config, logits_all=speculative, draft_model=self._draft
        )
        self._init_vocab()

    def _init_vocab(self) -> None:
        self._init_memory()
        self._init_tokens()

    def _init_memory(self) -> None:
        self.rolls_back = not cannot_roll_back(self.llm)
        self._prefix = None
        #: The partly accepted drafts of the last `generate` (checkpoint-and-replay path only).
        self.last_replays: tuple[Replay, ...] = ()
        self.last_checkpoints = 0

    def _init_tokens(self) -> None:
        self._vocab = llama_cpp.llama_model_get_vocab(self.llm.model)
        self._n_vocab = self.llm.n_vocab()
        self._format = PromptFormat(self.llm, self.config.target.path)

    # -- prompts -----------------------------------------------------------------------------
    def prompt_tokens(self, prompt: Prompt) -> list[int]:
        return self._format.tokens(prompt)

    def token_text(self, token: int) -> str:
        raw: bytes = self.llm.detokenize([token], special=True)
        return raw.decode("utf-8", errors="replace")

    # -- generation --------------------------------------------------------------------------
    def generate(
        self,
        prompt_tokens: Sequence[int],
        *,
        sampling: SamplingConfig,
        seed: int | None,
        max_tokens: int,
    ) -> Generation:
        self._check_fits(len(prompt_tokens), max_tokens)
        if self._draft is not None:
            self._draft.calls.clear()
            self._draft.seconds = 0.0
        self.llm.set_seed(seed if seed is not None else 1)
        if self.config.mode is Mode.SAMPLING and self.reuse_prompt_state:
            self._cache_prefix(prompt_tokens)
        else:
            self._eval_prompt(prompt_tokens)  # temp 0: afresh, as a user's first request
        t0 = time.perf_counter()
        if self._draft is not None and not self.rolls_back:
            out = self._decode_replaying(prompt_tokens, sampling, max_tokens)
        else:
            out = self._decode(prompt_tokens, sampling, max_tokens, t0=t0)
        t_end = time.perf_counter()
        return self._generation(
            prompt_tokens,
            out.tokens,
            out.rows,
            stop_reason=out.stop_reason,
            seed=seed,
            t_prompt=out.t_first - t0,
            t_decode=t_end - out.t_first,
            draft_steps=self._draft_steps(len(prompt_tokens), out.tokens),
            draft_s=self._draft.seconds if self._draft is not None else 0.0,
        )

    def _decode(
        self, prompt_tokens: Sequence[int], sampling: SamplingConfig, max_tokens: int, *, t0: float
    ) -> Decoded:
        """llama-cpp-python's own loop (`Llama.generate`, the draft model in its hook), from a
        prompt `generate` has evaluated; each token with the row it was sampled from."""
        llm, n_prompt = self.llm, len(prompt_tokens)
        rows = np.empty((max_tokens, self._n_vocab), dtype=np.float32)
        out = Decoded(tokens=[], rows=rows, stop_reason="length", t_first=t0)
        gen = llm.generate(list(prompt_tokens), **_chain_settings(sampling), reset=True)
        try:
            for token in gen:
                k = len(out.tokens)
                if k == 0:
                    out.t_first = time.perf_counter()
                # The row the sampler just used: with logits_all it is stored at the position
                # of the last token before this one; without, it is the context's last row.
                rows[k] = llm.scores[n_prompt - 1 + k] if self._draft else _last_row(llm)
                out.tokens.append(int(token))
                if self._is_eog(token):
                    out.stop_reason = "eos"
                    break
                if len(out.tokens) >= max_tokens:
                    break
        except (RuntimeError, ctypes.ArgumentError) as exc:
            raise EngineError(
                f"llama.cpp failed while generating on the {self.path} path: {exc}"
            ) from None
        finally:
            gen.close()
        out.rows = rows[: len(out.tokens)]
        return out

    def _decode_replaying(
        self, prompt_tokens: Sequence[int], sampling: SamplingConfig, max_tokens: int
    ) -> Decoded:
        """The speculative path of a target that cannot roll back (`equiv.engines.replay`), from
        a prompt `generate` has evaluated (in sampling mode, all but its last token)."""
        llm, draft = self.llm, self._draft
        assert draft is not None
        n_prompt = len(prompt_tokens)
        if llm.n_tokens < n_prompt:  # sampling: the last prompt token, as Llama.generate does
            llm.eval([prompt_tokens[-1]])

        def make_sampler() -> Sampler:
            sampler: Sampler = llm._init_sampler(**_chain_settings(sampling))
            return sampler

        try:
            out = decode(
                llm,
                draft,
                make_sampler,
                n_prompt=n_prompt,
                max_tokens=max_tokens,
                is_eog=self._is_eog,
            )
        except (RuntimeError, ctypes.ArgumentError) as exc:
            raise EngineError(
                f"llama.cpp failed while generating on the {self.path} path (checkpoint and "
                f"replay): {exc}"
            ) from None
        self.last_replays = tuple(out.replays)
        self.last_checkpoints = out.checkpoints
        return out

    def _check_fits(self, n_prompt: int, max_tokens: int) -> None:
        """The runner checks every prompt up front; this guards direct callers of `generate`."""
        draft_max = self.config.draft_config.draft_max
        if n_prompt + max_tokens + draft_max + 1 > self.llm.n_ctx():
            raise EngineError(
                f"{n_prompt} prompt tokens + max_tokens {max_tokens} + draft_max {draft_max} "
                f"do not fit n_ctx {self.llm.n_ctx()}; raise n_ctx or lower max_tokens"
            )

    def _is_eog(self, token: int) -> bool:
        return bool(llama_cpp.llama_vocab_is_eog(self._vocab, token))

    def _generation(
        self,
        prompt_tokens: Sequence[int],
        tokens: list[int],
        rows: npt.NDArray[np.float32],
        *,
        stop_reason: str,
        seed: int | None,
        t_prompt: float,
        t_decode: float,
        draft_steps: tuple[DraftStep, ...],
        draft_s: float = 0.0,
        judgements: tuple[Judgement, ...] = (),
    ) -> Generation:
        """A `Generation` from what a decode loop collected; rows[i] is the row of tokens[i]."""
        # Sampling runs keep only top-2 per token on disk: seeds x tokens would otherwise swell it.
        k_rec = self.config.top_k_record if self.config.mode is Mode.TEMP0 else 2
        text = bytes(self.llm.detokenize(tokens, special=True)).decode("utf-8", errors="replace")
        return Generation(
            path=PathName(self.path),
            prompt_tokens=tuple(int(t) for t in prompt_tokens),
            tokens=tuple(tokens),
            pieces=tuple(self.token_text(t) for t in tokens),
            text=text,
            stop_reason=stop_reason,
            alternatives=tuple(TokenAlternatives.from_row(row, k_rec) for row in rows),
            t_prompt_s=t_prompt,
            t_decode_s=t_decode,
            draft_steps=draft_steps,
            draft_s=draft_s,
            seed=seed,
            logits=rows,
            judgements=judgements,
        )

    def _draft_steps(self, n_prompt: int, tokens: Sequence[int]) -> tuple[DraftStep, ...]:
        """Accepted counts, from what the target finally emitted after each drafting call."""
        if self._draft is None:
            return ()
        steps = []
        for n_ctx_at_call, drafted in self._draft.calls:
            pos = n_ctx_at_call - n_prompt
            accepted = 0
            for offset, tok in enumerate(drafted):
                if pos + offset >= len(tokens) or tokens[pos + offset] != tok:
                    break
                accepted += 1
            truncated = accepted < len(drafted) and pos + accepted >= len(tokens)
            steps.append(DraftStep(pos, len(drafted), accepted, truncated))
        return tuple(steps)

    # -- facts -------------------------------------------------------------------------------
    def fingerprint(self) -> JSONDict:
        cfg = self.config
        target = read_gguf_info(cfg.target.path)
        fp: JSONDict = {
            "engine": "llamacpp",
            "path": str(self.path),
            "llama_cpp_python": llama_cpp.__version__,
            "system_info": llama_cpp.llama_print_system_info().decode(errors="replace").strip(),
            "target_sha256": target.sha256,
            "target_quant": target.quant,
            "n_ctx": cfg.n_ctx,
            "n_batch": cfg.n_batch,
            "n_ubatch": cfg.n_ubatch,
            "n_threads": cfg.n_threads,
            "flash_attn": cfg.flash_attn,
            "kv_type": "f16",
            "logits_all": self._draft is not None,
            "chat_template": self._format.template_id,
            "sampler_chain": "penalties,top_k,typical,top_p,min_p,temp,dist",
            "sampling": cfg.sampling.to_dict(),
            "seed_policy": "explicit seeds 1..2**32-2 (0 refused: random in llama-cpp-python)",
        }
        if not self.rolls_back:
            fp["target_memory"] = "recurrent: no roll back"
            if self._draft is not None:
                fp["verify"] = "checkpoint and replay (as llama-server)"
        if isinstance(self._draft, GGUFDraftModel):
            draft = read_gguf_info(cfg.draft.path)
            fp["draft_sha256"] = draft.sha256
            fp["draft_quant"] = draft.quant
        if self._draft is not None:
            draft_config: JSONDict = cfg.draft_config.to_dict()
            if isinstance(self._draft, PromptLookupDraft):  # (a draft model's is as before)
                draft_config["drafter"] = PROMPT_LOOKUP
                draft_config["max_ngram_size"] = self._draft.max_ngram_size
            fp["draft_config"] = draft_config
        return fp

    def close(self) -> None:
        for llm in (self.llm, self._draft_llm):
            if llm is not None:
                llm.close()


class _ChainSettings(TypedDict):
    temp: float
    top_k: int
    top_p: float
    min_p: float
    typical_p: float
    repeat_penalty: float
    frequency_penalty: float
    presence_penalty: float


def _chain_settings(sampling: SamplingConfig) -> _ChainSettings:
    """llama-cpp-python's sampler-chain arguments for ``sampling`` (generate, the replay loop)."""
    return {
        "temp": sampling.temp,
        "top_k": sampling.top_k,
        "top_p": sampling.top_p,
        "min_p": sampling.min_p,
        "typical_p": sampling.typical_p,
        "repeat_penalty": sampling.repeat_penalty,
        "frequency_penalty": sampling.frequency_penalty,
        "presence_penalty": sampling.presence_penalty,
    }


def make_engine(config: RunConfig, *, speculative: bool) -> LlamaCppEngine:
    """The built-in engine factory: a GGUF draft model (``--engine llamacpp``)."""
    return LlamaCppEngine(config, speculative=speculative)


def make_prompt_lookup_engine(config: RunConfig, *, speculative: bool) -> LlamaCppEngine:
    """``--engine llamacpp:prompt-lookup``: llama-cpp-python's n-gram prompt lookup drafts."""
    return LlamaCppEngine(config, speculative=speculative, drafter=PROMPT_LOOKUP)


#: The variants of ``--engine llamacpp`` (the first is the default).
DRAFTERS = {DRAFT_MODEL: make_engine, PROMPT_LOOKUP: make_prompt_lookup_engine}
