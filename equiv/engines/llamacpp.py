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
from typing import Any

import llama_cpp
import numpy as np
import numpy.typing as npt
from llama_cpp.llama_chat_format import Jinja2ChatFormatter

from equiv.config import Mode, RunConfig, SamplingConfig
from equiv.engines.base import Capabilities
from equiv.engines.chat import BUILTIN_TEMPLATES, apply_builtin_template
from equiv.engines.draft import GGUFDraftModel, PromptLookupDraft, last_row
from equiv.engines.llama_load import load_llama, reset
from equiv.engines.replay import Checkpoint, Replay, cannot_roll_back, decode
from equiv.errors import EngineError, ModelError
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


class LlamaCppEngine:
    """One path over llama-cpp-python: ``speculative`` plugs in a `GGUFDraftModel`."""

    capabilities = Capabilities(full_logits=True, deterministic_seed=True, rescoring=True)
    # Sampling mode: evaluate each prompt once and reuse it for every seed (see _cache_prefix).
    reuse_prompt_state = True

    def __init__(self, config: RunConfig, *, speculative: bool, drafter: str = DRAFT_MODEL) -> None:
        config = config.for_path(speculative=speculative)
        self.config = config
        self.path: str = PathName.SPECULATIVE if speculative else PathName.BASELINE
        self.drafter = drafter
        #: equiv.engines.base.SelfDrafting: prompt lookup reads no draft file
        self.drafts_from_file = drafter == DRAFT_MODEL
        self._draft: GGUFDraftModel | PromptLookupDraft | None = None
        self._draft_llm: Any = None
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
        #: False for a recurrent or hybrid target: rejected drafts are undone from checkpoints.
        self.rolls_back = not cannot_roll_back(self.llm)
        self._prefix: Checkpoint | None = None  # the prompt minus its last token (no roll back)
        #: The partly accepted drafts of the last `generate` (checkpoint-and-replay path only).
        self.last_replays: tuple[Replay, ...] = ()
        self.last_checkpoints = 0

    def _init_tokens(self) -> None:
        self._vocab = llama_cpp.llama_model_get_vocab(self.llm.model)
        self._add_bos = bool(llama_cpp.llama_vocab_get_add_bos(self._vocab))
        self._n_vocab: int = self.llm.n_vocab()
        template = self.llm.metadata.get("tokenizer.chat_template")
        arch = self.llm.metadata.get("general.architecture", "")
        self._template: str | None = template
        self._builtin_template = None if template else BUILTIN_TEMPLATES.get(arch)
        self._formatter: Jinja2ChatFormatter | None = None
        if template:
            specials = self.llm._model
            self._formatter = Jinja2ChatFormatter(
                template=template,
                eos_token=specials.token_get_text(self.llm.token_eos()),
                bos_token=specials.token_get_text(self.llm.token_bos()),
            )

    # -- prompts -----------------------------------------------------------------------------
    def prompt_tokens(self, prompt: Prompt) -> list[int]:
        if prompt.messages is None:
            assert prompt.text is not None
            return list(self.llm.tokenize(prompt.text.encode("utf-8"), add_bos=True))
        if self._formatter is not None:
            messages: Any = [{"role": r, "content": c} for r, c in prompt.messages]
            rendered = self._formatter(messages=messages).prompt
        elif self._builtin_template is not None:
            rendered = apply_builtin_template(self._builtin_template, prompt.messages)
        else:
            raise ModelError(
                f"prompt {prompt.key!r} is a chat but {self.config.target.path!r} has no chat "
                "template (tokenizer.chat_template) and llama.cpp has no built-in one for its "
                "architecture; give the prompt as 'text' instead"
            )
        ids = list(self.llm.tokenize(rendered.encode("utf-8"), add_bos=False, special=True))
        # Jinja templates usually write the BOS text themselves, llama.cpp's built-in ones never:
        # either way the model gets exactly one BOS when its vocabulary asks for one.
        bos = self.llm.token_bos()
        if self._add_bos and (not ids or ids[0] != bos):
            ids.insert(0, bos)
        return ids

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
        llm = self.llm
        n_prompt = len(prompt_tokens)
        self._check_fits(n_prompt, max_tokens)
        if self._draft is not None:
            self._draft.calls.clear()
            self._draft.seconds = 0.0
        llm.set_seed(seed if seed is not None else 1)
        if self.config.mode is Mode.SAMPLING and self.reuse_prompt_state:
            self._cache_prefix(prompt_tokens)
        else:
            self._eval_prompt(prompt_tokens)  # temp 0: afresh, as a user's first request
        if self._draft is not None and not self.rolls_back:
            return self._generate_replaying(
                prompt_tokens, sampling=sampling, seed=seed, max_tokens=max_tokens
            )
        rows = np.empty((max_tokens, self._n_vocab), dtype=np.float32)
        tokens: list[int] = []
        stop_reason = "length"
        t0 = time.perf_counter()
        t_first = t0
        gen = llm.generate(
            list(prompt_tokens),
            **_chain_settings(sampling),
            reset=True,
        )
        try:
            for token in gen:
                k = len(tokens)
                if k == 0:
                    t_first = time.perf_counter()
                # The row the sampler just used: with logits_all it is stored at the position
                # of the last token before this one; without, it is the context's last row.
                rows[k] = llm.scores[n_prompt - 1 + k] if self._draft else _last_row(llm)
                tokens.append(int(token))
                if self._is_eog(token):
                    stop_reason = "eos"
                    break
                if len(tokens) >= max_tokens:
                    break
        except (RuntimeError, ctypes.ArgumentError) as exc:
            raise EngineError(
                f"llama.cpp failed while generating on the {self.path} path: {exc}"
            ) from None
        finally:
            gen.close()
        t_end = time.perf_counter()
        return self._generation(
            prompt_tokens,
            tokens,
            rows[: len(tokens)],
            stop_reason=stop_reason,
            seed=seed,
            t_prompt=t_first - t0,
            t_decode=t_end - t_first,
            draft_steps=self._draft_steps(n_prompt, tokens),
            draft_s=self._draft.seconds if self._draft is not None else 0.0,
        )

    def _generate_replaying(
        self,
        prompt_tokens: Sequence[int],
        *,
        sampling: SamplingConfig,
        seed: int | None,
        max_tokens: int,
    ) -> Generation:
        """The speculative path of a target that cannot roll back (`equiv.engines.replay`), from
        a prompt `generate` has evaluated (in sampling mode, all but its last token)."""
        llm, draft = self.llm, self._draft
        assert draft is not None
        n_prompt = len(prompt_tokens)
        t0 = time.perf_counter()
        if llm.n_tokens < n_prompt:  # sampling: the last prompt token, as Llama.generate does
            llm.eval([prompt_tokens[-1]])

        def make_sampler() -> Any:
            return llm._init_sampler(
                **_chain_settings(sampling),
            )

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
        t_end = time.perf_counter()
        self.last_replays = tuple(out.replays)
        self.last_checkpoints = out.checkpoints
        return self._generation(
            prompt_tokens,
            out.tokens,
            out.rows,
            stop_reason=out.stop_reason,
            seed=seed,
            t_prompt=out.t_first - t0,
            t_decode=t_end - out.t_first,
            draft_steps=self._draft_steps(n_prompt, out.tokens),
            draft_s=draft.seconds,
        )

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
            llm.scores[len(prompt_tokens) - 1] = _last_row(llm)

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
            rows[i] = llm.scores[llm.n_tokens - 1] if llm._logits_all else _last_row(llm)
            if i + 1 < len(tokens):
                llm.eval([tokens[i]])
        return rows

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
            "chat_template": _sha(self._template) or f"builtin:{self._builtin_template}",
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


def _chain_settings(sampling: SamplingConfig) -> dict[str, float]:
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


def _sha(text: str | None) -> str | None:
    if text is None:
        return None
    import hashlib

    return hashlib.sha256(text.encode()).hexdigest()[:16]


def make_engine(config: RunConfig, *, speculative: bool) -> LlamaCppEngine:
    """The built-in engine factory: a GGUF draft model (``--engine llamacpp``)."""
    return LlamaCppEngine(config, speculative=speculative)


def make_prompt_lookup_engine(config: RunConfig, *, speculative: bool) -> LlamaCppEngine:
    """``--engine llamacpp:prompt-lookup``: llama-cpp-python's n-gram prompt lookup drafts."""
    return LlamaCppEngine(config, speculative=speculative, drafter=PROMPT_LOOKUP)


#: The variants of ``--engine llamacpp`` (the first is the default).
DRAFTERS = {DRAFT_MODEL: make_engine, PROMPT_LOOKUP: make_prompt_lookup_engine}
