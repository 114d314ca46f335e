"""A textbook speculative sampler over llama-cpp-python: ground truth, and faults on purpose.

The draft proposes up to ``draft_max`` tokens, each sampled from its own sampler chain (q); the
target evaluates them in one batch (p from each row through the same chain) and accepts each
with probability ``min(1, p(x) / q(x))``; on the first rejection it samples from
``norm(max(0, p - q))`` and stops; when all are accepted it adds a bonus token from the last row
(Leviathan et al. 2023; Chen et al. 2023). Its output distribution equals the target's exactly.

Fault-injected variants are chosen by name (``equiv.engines.acceptance_rules.Rule``):
``greedy`` (accept iff the draft token is the target's argmax, at temp > 0), ``no_max``,
``no_norm``, ``wrong_temp`` (the ratio uses the draft's probabilities at twice its
temperature), ``top2`` (a "relaxed acceptance" that accepts any of the target's two best tokens)
and ``off_by_one`` (p read from the previous row). They exist so that equiv's detectors can be
shown to catch each one.

Select with ``--engine reference`` (the correct rule) or ``--engine reference:greedy`` etc.
(``equiv.engines.reference:make_engine`` for the correct rule as a ``module:attr`` factory); the
baseline path is the plain llama-cpp-python engine. A target that cannot roll back (recurrent)
is saved before each verification and restored after a rejection (`equiv.engines.replay`).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from equiv.config import RunConfig, SamplingConfig
from equiv.engines.acceptance_rules import Rule, accept_probability, residual
from equiv.engines.base import Capabilities, EngineFactory
from equiv.engines.chain import chain_probs
from equiv.engines.draft import last_row
from equiv.engines.llama_load import load_llama, reset
from equiv.engines.llamacpp import LlamaCppEngine
from equiv.engines.replay import Checkpoint
from equiv.errors import ConfigError
from equiv.json_types import JSONDict
from equiv.records import DraftStep, Generation, Judgement, PathName

__all__ = ["RULE_FACTORIES", "ReferenceEngine", "factory_for", "make_engine"]


_Probs = npt.NDArray[np.float64]


def _probs(row: npt.NDArray[np.float32], sampling: SamplingConfig, temp: float) -> _Probs:
    return chain_probs(
        row,
        temp=temp,
        top_k=sampling.top_k,
        top_p=sampling.top_p,
        min_p=sampling.min_p,
        typical_p=sampling.typical_p,
    )


def _draw(probs: _Probs, rng: np.random.Generator) -> int:
    support = np.flatnonzero(probs)
    weights = probs[support] / probs[support].sum()
    return int(support[rng.choice(support.size, p=weights)])


@dataclass(frozen=True)
class _Drafted:
    """One drafting round: the tokens, the draft's row of each, q of each (and q at the wrong
    temperature, for `Rule.WRONG_TEMP` only)."""

    tokens: list[int] = field(default_factory=list)
    rows: list[npt.NDArray[np.float32]] = field(default_factory=list)
    q: list[_Probs] = field(default_factory=list)
    q_wrong: list[_Probs] = field(default_factory=list)


@dataclass
class _Verified:
    """What the target made of a round: the tokens it keeps (the accepted drafts, then a
    replacement or the bonus), the row each was decided on, and each draft token's judgement."""

    tokens: list[int] = field(default_factory=list)
    rows: list[npt.NDArray[np.float32]] = field(default_factory=list)
    judged: list[Judgement] = field(default_factory=list)
    accepted: int = 0


class ReferenceEngine(LlamaCppEngine):
    """The speculative path as a textbook rejection sampler with a chosen acceptance `Rule`."""

    capabilities = Capabilities(
        full_logits=True, deterministic_seed=True, rescoring=True, judgements=True
    )

    def __init__(self, config: RunConfig, *, rule: Rule = Rule.CORRECT) -> None:
        config = config.for_path(speculative=True)  # a user's per-path settings apply here too
        if config.sampling.repeat_penalty != 1.0 or config.sampling.frequency_penalty != 0.0:
            raise ConfigError(
                "the reference engine does not implement repetition penalties; "
                "use --repeat-penalty 1.0"
            )
        self.rule = rule
        self.config = config
        self.path: str = PathName.SPECULATIVE
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
        k_max = self.config.draft_config.draft_max
        self._check_fits(len(prompt_tokens), max_tokens)
        rng = np.random.default_rng(seed if seed is not None else 1)
        context = list(prompt_tokens[:-1])
        pending = [int(prompt_tokens[-1])]  # emitted (or prompt) tokens the target has not seen
        self._start(context)
        emitted: list[int] = []
        rows: list[npt.NDArray[np.float32]] = []
        steps: list[DraftStep] = []
        judged: list[Judgement] = []
        t0 = time.perf_counter()
        t_first = t0
        stop_reason = "length"
        while len(emitted) < max_tokens and stop_reason == "length":
            n = min(k_max, max_tokens - len(emitted))
            drafted = self._propose(context, pending, n, sampling, rng)
            kept = self._verify(context, pending, drafted, sampling, rng, pos=len(emitted))
            steps.append(DraftStep(len(emitted), len(drafted.tokens), kept.accepted))
            rows += kept.rows
            judged += kept.judged
            if not emitted:
                t_first = time.perf_counter()
            context += pending + kept.tokens[:-1]
            pending = [kept.tokens[-1]]
            stop_reason = self._emit(kept.tokens, emitted, max_tokens)
            del rows[len(emitted) :]
        t_end = time.perf_counter()
        stacked = np.stack(rows) if rows else np.empty((0, self._n_vocab), dtype=np.float32)
        return self._generation(
            prompt_tokens,
            emitted,
            stacked,
            stop_reason=stop_reason,
            seed=seed,
            t_prompt=t_first - t0,
            t_decode=t_end - t_first,
            draft_steps=tuple(steps),
            judgements=tuple(j for j in judged if j.pos < len(emitted)),
        )

    def _start(self, context: list[int]) -> None:
        """Both models reset and given the prompt minus its last token (the target: KV only)."""
        reset(self.llm)
        draft = self._draft_llm
        assert draft is not None
        reset(draft)  # (no score buffer to renew: the draft computes its last row only)
        if context:
            self._eval_without_rows(context)  # the target: KV only, no prompt rows
            draft.eval(context)

    def _propose(
        self,
        context: list[int],
        pending: list[int],
        n: int,
        sampling: SamplingConfig,
        rng: np.random.Generator,
    ) -> _Drafted:
        """``n`` tokens sampled from the draft's own chain after ``context + pending``, keeping
        each q."""
        draft = self._draft_llm
        assert draft is not None
        temp = sampling.temp
        wrong_temp = temp * 2 if temp > 0 else 1.0
        draft.n_tokens = len(context)
        draft.eval(pending)
        out = _Drafted()
        for _ in range(n):
            row = last_row(draft)
            out.rows.append(row.copy())
            out.q.append(_probs(row, sampling, temp))
            if self.rule is Rule.WRONG_TEMP:
                out.q_wrong.append(_probs(row, sampling, wrong_temp))
            out.tokens.append(_draw(out.q[-1], rng))
            draft.eval([out.tokens[-1]])
        return out

    def _verify(
        self,
        context: list[int],
        pending: list[int],
        drafted: _Drafted,
        sampling: SamplingConfig,
        rng: np.random.Generator,
        *,
        pos: int,
    ) -> _Verified:
        """One batch through the target; row j is the distribution of drafted token j.

        A target that cannot roll back is saved first and, on a rejection, restored and given
        the kept tokens again (llama-server's replay; the decisions stay these rows')."""
        target = self.llm
        checkpoint = None if self.rolls_back else Checkpoint(target, partial=True)
        target.n_tokens = len(context)
        target.eval(pending + drafted.tokens)
        base = len(context) + len(pending) - 1
        batch_rows = target.scores[base : base + len(drafted.tokens) + 1]
        kept = self._judge(batch_rows, drafted, sampling, rng, pos=pos)
        if checkpoint is not None and kept.accepted < len(drafted.tokens):
            checkpoint.restore(target)
            target.eval(pending + kept.tokens[:-1])
        return kept

    def _judge(
        self,
        batch_rows: npt.NDArray[np.float32],
        drafted: _Drafted,
        sampling: SamplingConfig,
        rng: np.random.Generator,
        *,
        pos: int,
    ) -> _Verified:
        """Each draft token accepted with the rule's probability; on the first rejection a token
        from the rule's residual, when all are accepted a bonus token from the last row."""
        temp, off = sampling.temp, self.rule is Rule.OFF_BY_ONE
        out = _Verified()
        for j, x in enumerate(drafted.tokens):
            p = _probs(batch_rows[j], sampling, temp)
            extra = {
                "q_wrong": drafted.q_wrong[j] if drafted.q_wrong else None,
                "p_wrong": _probs(batch_rows[max(j - 1, 0)], sampling, temp) if off else None,
            }
            used = batch_rows[max(j - 1, 0)] if off else batch_rows[j]
            a = accept_probability(self.rule, p, drafted.q[j], x, **extra)
            ok = bool(rng.random() < a)
            out.judged.append(Judgement(pos + j, x, ok, drafted.rows[j]))
            out.rows.append(used.copy())
            if not ok:
                out.tokens.append(_draw(residual(self.rule, p, drafted.q[j], **extra), rng))
                return out
            out.tokens.append(x)
            out.accepted += 1
        bonus = batch_rows[len(drafted.tokens)]  # every draft accepted
        out.tokens.append(_draw(_probs(bonus, sampling, temp), rng))
        out.rows.append(bonus.copy())
        return out

    def _emit(self, kept: list[int], emitted: list[int], max_tokens: int) -> str:
        """``kept`` onto ``emitted`` up to an end-of-generation token or ``max_tokens``; the stop
        reason so far."""
        for token in kept:
            emitted.append(token)
            if self._is_eog(token):
                return "eos"
            if len(emitted) >= max_tokens:
                break
        return "length"

    def fingerprint(self) -> JSONDict:
        fp = super().fingerprint()
        fp["engine"] = f"reference:{self.rule.value}"
        fp["logits_all"] = True
        if not self.rolls_back:
            fp["verify"] = "checkpoint, restore and replay of the kept tokens"
        return fp


def factory_for(rule: Rule) -> EngineFactory:
    """An engine factory whose speculative path uses ``rule``; the baseline is plain llama.cpp."""

    def make(config: RunConfig, *, speculative: bool) -> LlamaCppEngine:
        if not speculative:
            return LlamaCppEngine(config, speculative=False)
        return ReferenceEngine(config, rule=rule)

    make.__name__ = f"reference_{rule.value}"
    return make


RULE_FACTORIES: dict[str, EngineFactory] = {rule.value: factory_for(rule) for rule in Rule}
make_engine = RULE_FACTORIES["correct"]
