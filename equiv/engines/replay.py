"""Speculative decoding in process on a target that cannot roll back: checkpoint and replay, as
llama-server does it.

A recurrent (Mamba, RWKV) or hybrid target keeps one state per sequence, not an entry per token,
so it cannot drop the tail of a rejected draft: ``llama_memory_seq_rm`` refuses, and
llama-cpp-python's ``draft_model`` hook then decodes behind its state (``llama_decode returned
-1``). llama-server verifies drafts for such a target on another path (``use_ckpt_tgt`` and
``spec_is_replay`` in ``tools/server/server-context.cpp``), and `decode` follows it step by step:

1. a draft is proposed for the context plus the last emitted token; before it is verified, the
   target's sequence state is saved (a `Checkpoint`) and the sampler cloned, its RNG included;
2. the last emitted token and the draft are evaluated in one batch, and each row is sampled in
   turn, a draft token kept while the sample equals it (``common_sampler_sample_and_accept_n``);
3. every draft token kept: they and the sample after them (the bonus) are emitted;
4. some rejected: nothing is emitted; the checkpoint and the sampler are restored, and the kept
   tokens (the accepted draft tokens and the target's own sample after them) are verified as
   the next draft: the *replay*. Its batch is shorter, so its rows may differ from the first
   batch's in the last bits; its samples are what is emitted. A replay that itself keeps only part
   of its tokens is restored and replayed again.

Because the sampler is restored, a replay draws the same random numbers as the verification it
repeats: on equal rows it emits the same tokens, and each emitted token is a sample of the
row it is recorded with, as on every other path. The draft model is the engine's own
(`equiv.engines.draft.GGUFDraftModel`), so drafting rounds are recorded as on the rolling-back
path. This module knows llama-cpp-python's ``Llama`` and its sampler, not the engine.
"""

from __future__ import annotations

import ctypes
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import llama_cpp
import numpy as np
import numpy.typing as npt

from equiv.errors import EngineError

if TYPE_CHECKING:
    from llama_cpp._internals import LlamaContext

__all__ = ["Checkpoint", "Decoded", "Replay", "Sampler", "cannot_roll_back", "decode"]

#: llama-cpp-python evaluates every batch as sequence 0.
_SEQ = 0


class Sampler(Protocol):
    """A target's sampler chain as `decode` uses it (llama-cpp-python's ``LlamaSampler``)."""

    def sample(self, ctx: LlamaContext, idx: int = -1) -> int: ...

    def clone(self) -> Sampler: ...

    def close(self) -> None: ...


def cannot_roll_back(llm: llama_cpp.Llama) -> bool:
    """Whether ``llm``'s memory is recurrent or hybrid: it cannot drop a sequence's tail, so a
    rejected draft is undone from a checkpoint instead (llama-server's seq_rm type ``FULL``)."""
    model = llm.model
    hybrid = getattr(llama_cpp, "llama_model_is_hybrid", None)
    return bool(llama_cpp.llama_model_is_recurrent(model)) or bool(
        hybrid is not None and hybrid(model)
    )


class Checkpoint:
    """The state of a ``Llama``'s sequence, saved with the tokens it holds, to be restored.

    ``partial``: only the part that cannot roll back (the recurrent state of a hybrid model),
    as llama-server's speculative checkpoints (``LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY``); the
    attention cache is then cut back to the saved length on restore. Without it, the whole state.
    """

    def __init__(self, llm: llama_cpp.Llama, *, partial: bool) -> None:
        self.flags = (
            llama_cpp.LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY
            if partial
            else llama_cpp.LLAMA_STATE_SEQ_FLAGS_NONE
        )
        size = int(llama_cpp.llama_state_seq_get_size_ext(llm.ctx, _SEQ, self.flags))
        self.data = (ctypes.c_uint8 * size)()
        written = llama_cpp.llama_state_seq_get_data_ext(llm.ctx, self.data, size, _SEQ, self.flags)
        if written != size:
            raise EngineError(
                f"llama.cpp saved {written} of {size} bytes of the target's state for a "
                "checkpoint; this llama-cpp-python cannot verify drafts on a recurrent target"
            )
        self.tokens: tuple[int, ...] = tuple(int(t) for t in llm.input_ids[: llm.n_tokens])

    @property
    def size(self) -> int:
        return len(self.data)

    def restore(self, llm: llama_cpp.Llama) -> None:
        """Put the saved state back: ``llm`` then holds exactly ``tokens``."""
        read = llama_cpp.llama_state_seq_set_data_ext(
            llm.ctx, self.data, len(self.data), _SEQ, self.flags
        )
        if read == 0:
            raise EngineError(
                f"llama.cpp refused to restore a checkpoint of {self.size} bytes "
                f"({len(self.tokens)} tokens) of the target's state"
            )
        n = len(self.tokens)
        memory = llama_cpp.llama_get_memory(llm.ctx)
        if not llama_cpp.llama_memory_seq_rm(memory, _SEQ, n, -1):
            raise EngineError(f"llama.cpp could not cut the restored state back to {n} tokens")
        llm.input_ids[:n] = self.tokens
        llm.n_tokens = n
        llm._requires_eval = True  # the context's logits are not this state's


@dataclass(frozen=True)
class Replay:
    """A partly accepted draft: at output position ``pos`` the target kept ``accepted`` of
    ``drafted`` tokens; the checkpoint was restored and the kept tokens replayed. ``replay``
    counts the verifications of this step before it (0: the first verification rejected)."""

    pos: int
    drafted: int
    accepted: int
    replay: int = 0


@dataclass
class Decoded:
    """What a decode loop emitted (`decode`, or the engine's plain one): ``rows[k]`` is the row
    ``tokens[k]`` was sampled from."""

    tokens: list[int]
    rows: npt.NDArray[np.float32]
    stop_reason: str
    t_first: float
    replays: list[Replay] = field(default_factory=list)
    checkpoints: int = 0
    checkpoint_bytes: int = 0  # the largest checkpoint


def decode(
    llm: llama_cpp.Llama,
    draft: Callable[[npt.NDArray[np.intc]], npt.NDArray[np.intc]],
    make_sampler: Callable[[], Sampler],
    *,
    n_prompt: int,
    max_tokens: int,
    is_eog: Callable[[int], bool],
) -> Decoded:
    """Generate after a prompt ``llm`` has just evaluated (its last row is the context's last
    output), verifying ``draft``'s proposals by checkpoint and replay; see the module docstring.

    ``llm`` must compute every row of a batch (``logits_all``); ``make_sampler`` gives the
    target's sampler chain (a llama-cpp-python ``LlamaSampler``, cloneable).
    """
    run = _Decoding(llm, draft, make_sampler, max_tokens=max_tokens, is_eog=is_eog)
    try:
        done = run.emit(int(run.sampler.sample(llm._ctx, -1)), llm.scores[n_prompt - 1])
        run.out.t_first = time.perf_counter()
        while not done:
            done = run.step()
    finally:
        run.close()
    run.out.rows = run.rows[: len(run.out.tokens)]
    return run.out


class _Decoding:
    """One `decode` under way: what it emitted, the target's sampler and the clone saved before a
    verification, the checkpoint of the target, and the kept tokens still to replay."""

    def __init__(
        self,
        llm: llama_cpp.Llama,
        draft: Callable[[npt.NDArray[np.intc]], npt.NDArray[np.intc]],
        make_sampler: Callable[[], Sampler],
        *,
        max_tokens: int,
        is_eog: Callable[[int], bool],
    ) -> None:
        self.llm, self.draft, self.max_tokens, self.is_eog = llm, draft, max_tokens, is_eog
        self.rows = np.empty((max_tokens, llm.n_vocab()), dtype=np.float32)
        self.out = Decoded(
            tokens=[], rows=self.rows, stop_reason="length", t_first=time.perf_counter()
        )
        self.sampler = make_sampler()
        self.saved: Sampler | None = None
        self.checkpoint: Checkpoint | None = None
        self.replay: list[int] = []

    def emit(self, token: int, row: npt.NDArray[np.float32]) -> bool:
        """Record one token; True when generation ends with it."""
        tokens = self.out.tokens
        self.rows[len(tokens)] = row
        tokens.append(token)
        if self.is_eog(token):
            self.out.stop_reason = "eos"
            return True
        return len(tokens) >= self.max_tokens

    def step(self) -> bool:
        """Draft (or replay the kept tokens), verify, emit what was kept; True when generation
        ends."""
        llm = self.llm
        last, n_past = self.out.tokens[-1], llm.n_tokens
        proposed = self.replay or self._propose(last, n_past)
        if not proposed:  # nothing drafted: one token, as plain decoding
            llm.eval([last])
            return self.emit(int(self.sampler.sample(llm._ctx, -1)), llm.scores[n_past])
        kept = self._verify(last, proposed)
        if len(kept) <= len(proposed):  # a rejection: restore, then replay what was kept
            self._restore(proposed, kept)
            return False
        assert self.saved is not None
        self.saved.close()
        self.saved, self.replay = None, []
        done = False
        for i, token in enumerate(kept):
            done = self.emit(token, llm.scores[n_past + i])
            if done:
                break
        return done

    def _propose(self, last: int, n_past: int) -> list[int]:
        """The draft for the context plus ``last``; a checkpoint of the target is saved before
        a draft is verified."""
        llm, out = self.llm, self.out
        ids = np.array([*llm.input_ids[:n_past].tolist(), last], dtype=np.intc)
        proposed = [int(t) for t in self.draft(ids)]
        if proposed:
            self.checkpoint = Checkpoint(llm, partial=True)
            out.checkpoints += 1
            out.checkpoint_bytes = max(out.checkpoint_bytes, self.checkpoint.size)
        return proposed

    def _verify(self, last: int, proposed: list[int]) -> list[int]:
        """``last`` and ``proposed`` in one batch, each row sampled in turn: the draft tokens
        kept while the sample equals them, and the sample after them (the sampler is cloned
        first, to be restored on a rejection)."""
        assert self.checkpoint is not None
        llm, sampler = self.llm, self.sampler
        self.saved = sampler.clone()
        llm.eval([last, *proposed])
        kept: list[int] = []
        for i in range(len(proposed) + 1):
            kept.append(int(sampler.sample(llm._ctx, i)))
            if i == len(proposed) or kept[-1] != proposed[i]:
                break
        return kept

    def _restore(self, proposed: list[int], kept: list[int]) -> None:
        """After a rejection: the checkpoint and the saved sampler back, ``kept`` to replay."""
        pos, replays = len(self.out.tokens), self.out.replays
        rounds = sum(1 for r in replays if r.pos == pos)
        if rounds > len(proposed) + 1:
            raise EngineError(
                f"the replay at output position {pos} did not settle after {rounds} rounds: the "
                "target's rows change between batches that should give the same"
            )
        replays.append(Replay(pos, len(proposed), len(kept) - 1, rounds))
        assert self.checkpoint is not None
        assert self.saved is not None
        self.checkpoint.restore(self.llm)
        self.sampler.close()
        self.sampler, self.saved = self.saved, None
        self.replay = kept

    def close(self) -> None:
        self.sampler.close()
        if self.saved is not None:
            self.saved.close()
