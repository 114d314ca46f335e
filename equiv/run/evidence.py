"""Gathering evidence: the stage between the engines and the verdicts.

Beyond the two generations, a verdict needs evidence that only the engines can give: the target
re-scoring tokens (`equiv.engines.base.Rescoring`) single-token on the baseline path, batched on
`equiv.engines.base.batch_rescorer`, and what that cost (`RescoreCosting`). `Evidence` holds the
two engines and the configuration and gathers, per result:

- at temp 0, the re-scoring the classifier asks for at a divergence (`Evidence.rescore`) and the
  placebo, the baseline's tokens re-scored in one batch (`Evidence.drift_placebo`); one result's
  classifier and placebo share a `BatchOnce`, so the batch both ask for is evaluated once;
- at temp > 0, each sample's chain PIT under the rows its path used, a rejection sampler's
  judgements, both paths' samples re-scored single-token (the speculative ones to test, the
  baseline's as their placebo) with the drift and the re-scoring's fidelity
  (`Evidence.of_samples`; in process, where the rows sampled from are at hand, on the first
  `RESCORED_SEEDS` seeds only);

and per sampled prompt the batched follow-up (`Evidence.batched`). The numbers themselves are
computed by `equiv.verdicts`; a failed re-scoring is recorded, never raised.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from equiv.config import Mode, RunConfig
from equiv.engines.base import (
    Engine,
    RescoreCost,
    batch_rescorer,
    piece_bytes,
    rescore_cost,
    rescorer,
)
from equiv.errors import ConfigError, EngineError
from equiv.json_types import JSONObject
from equiv.records import ArgmaxFlips, Drift, Generation
from equiv.verdicts.sampling.analysis_record import BatchedEvidence
from equiv.verdicts.sampling.fidelity import Fidelity, rescore_fidelity
from equiv.verdicts.sampling.pit_tests import batched_vs_placebo
from equiv.verdicts.sampling.samples import PathSample, Sample
from equiv.verdicts.sampling.support import far_outside
from equiv.verdicts.sampling.token_evidence import (
    PathEvidence,
    ReportedEvidence,
    TokenEvidence,
    chain_evidence,
    evidence_json,
    judgement_evidence,
    reported_evidence,
    reported_positions,
    top_k_rows,
)
from equiv.verdicts.temp0.drift import drift_metrics

__all__ = ["RESCORED_SEEDS", "BatchOnce", "Evidence", "SampleEvidence", "whole_piece"]

#: In process each path's samples are tested against the rows they were sampled from, so the
#: target's single-token re-scoring only measures the speculative rows' drift and the
#: re-scoring's fidelity: properties of the deployment, measured on each prompt's first seeds.
#: A re-scored token costs a one-token evaluation, as much as generating it.
RESCORED_SEEDS = 4


def whole_piece(data: bytes) -> bool:
    """Whether a token's bytes are complete UTF-8 on their own (empty: unknown, so not)."""
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return bool(data)


@dataclass(frozen=True)
class SampleEvidence:
    """One sampled result's evidence: per path what its record holds beside the generation
    (``chain_pit``, ``target_pit``, ``acceptance``, ``rescore_error``, ...), the drift between
    the speculative rows and their re-scoring, and the re-scoring's fidelity on the baseline."""

    paths: Mapping[str, JSONObject] = field(default_factory=dict)
    drift: Drift | None = None
    fidelity: Fidelity | None = None


class BatchOnce:
    """`Evidence.rescore` for one result, with its last batched call kept: the temp-0 classifier
    and the placebo ask for the same batch (the baseline's tokens after the prompt) whenever the
    classifier's calibration covers the whole generation, and get the rows of one evaluation.
    Bit for bit what a second call returns in process (the engine is deterministic); over HTTP
    the rows of one request, not of two. Lives as long as the result: the rows (a row per token
    x the vocabulary) are not held past it."""

    def __init__(self, evidence: Evidence) -> None:
        self._evidence = evidence
        self._key: tuple[tuple[int, ...], tuple[int, ...]] | None = None
        self._rows: npt.NDArray[np.float32] | None = None

    def __call__(
        self, prompt: Sequence[int], tokens: Sequence[int], batched: bool
    ) -> npt.NDArray[np.float32]:
        if not batched:
            return self._evidence.rescore(prompt, tokens, False)
        key = (tuple(int(t) for t in prompt), tuple(int(t) for t in tokens))
        if key != self._key or self._rows is None:
            self._key, self._rows = None, None  # a failed call keeps nothing
            self._rows = self._evidence.rescore(prompt, tokens, True)
            self._key = key
        return self._rows


class Evidence:
    """The evidence-gathering stage of one run: its two engines and its configuration."""

    def __init__(self, baseline: Engine, speculative: Engine, config: RunConfig) -> None:
        self.baseline = baseline
        self.speculative = speculative
        self.config = config

    # -- re-scoring --------------------------------------------------------------------------
    @property
    def batcher(self) -> Engine:
        """The engine that re-scores batched: the baseline where it can (a server: evidence
        from the path not under test), else the speculative path (in process, only its context
        evaluates batches as verification does)."""
        return batch_rescorer(self.baseline, self.speculative)

    def rescore(
        self, prompt: Sequence[int], tokens: Sequence[int], batched: bool
    ) -> npt.NDArray[np.float32]:
        """The target's rows for ``tokens``: single-token on the baseline path, batched on
        `batcher` (an `equiv.verdicts.temp0.classify.Rescorer`)."""
        engine = rescorer(self.batcher if batched else self.baseline)
        if engine is None:
            raise ConfigError("re-scoring asked of an engine that does not offer it")
        return engine.rescore(prompt, tokens, batched=batched)

    @property
    def can_rescore(self) -> bool:
        """Whether the target can be re-scored both ways (single-token and batched)."""
        return rescorer(self.baseline) is not None and rescorer(self.batcher) is not None

    def can_redo(self, mode: Mode) -> bool:
        """Whether a result of ``mode`` whose re-scoring failed can be finished now (temp 0:
        both ways; sampling: the baseline's single-token rows)."""
        if mode is Mode.TEMP0:
            return self.can_rescore
        return rescorer(self.baseline) is not None

    def take_cost(self) -> RescoreCost | None:
        """What this thread's re-scoring cost since last asked, for engines that count it
        (servers); None where no row was asked (rows reused from earlier requests count)."""
        total = rescore_cost((self.baseline, self.speculative))
        return total if total is not None and (total.requests or total.rows) else None

    # -- temp 0 ------------------------------------------------------------------------------
    def drift_placebo(
        self, prompt: Sequence[int], base: Generation, rescore: BatchOnce | None = None
    ) -> ArgmaxFlips | None:
        """Temp 0's placebo (`ArgmaxFlips`): the baseline's tokens re-scored in one batch (by
        ``rescore`` where the classifier may have asked for it already). A failed re-scoring
        leaves the result without one; the run-level rate pools the rest."""
        try:
            rows = (rescore or BatchOnce(self))(prompt, base.tokens, True)
        except EngineError:
            return None
        return ArgmaxFlips.of(base.tokens, rows)

    # -- temp > 0 ----------------------------------------------------------------------------
    def rescores(self, seed: int | None, base: Generation, spec: Generation) -> bool:
        """Whether a sample's tokens are re-scored: over HTTP always (the re-scored rows are the
        instrument); in process, where both paths carry the rows they sampled from, for the
        first `RESCORED_SEEDS` of the run's seeds only."""
        if base.logits is None or spec.logits is None:
            return True
        seeds = self.config.seeds
        return seed not in seeds or seeds.index(seed) < RESCORED_SEEDS

    def of_samples(
        self, prompt: Sequence[int], base: Generation, spec: Generation, *, rescore: bool = True
    ) -> SampleEvidence:
        """Both samples' evidence: the chain's PIT under the rows each path used (a server's
        baseline: its top-K where it covers the chain), the judgements of a rejection sampler,
        and (``rescore``, `rescores`) both samples re-scored by the target one token at a time,
        exactly as the baseline evaluates: the speculative one to test, the baseline's as its
        placebo (the same instrument on a sample whose rows are known), with the re-scoring's
        fidelity there."""
        paths = {
            path: self._own_rows(gen, path)
            for gen, path in ((base, "baseline"), (spec, "speculative"))
        }
        if spec.logits is not None and self.speculative.capabilities.judgements:
            sampling = self.config.for_path(speculative=True).sampling
            paths["speculative"].update(
                judgement_evidence(spec.logits, spec.tokens, spec.judgements, sampling)
            )
        drift = fidelity = None
        if rescore and rescorer(self.baseline) is not None:
            for gen, path in ((spec, "speculative"), (base, "baseline")):
                if not gen.tokens:  # nothing to score: an empty sample keeps the placebo whole
                    paths[path].update(
                        PathEvidence(target_pit=[], target_sensitivity=[], target_score=[])
                    )
                    continue
                try:
                    target = self.rescore(prompt, gen.tokens, False)
                except EngineError as exc:  # the generations are kept; the analysis says why
                    paths[path]["rescore_error"] = str(exc).splitlines()[0]
                    break
                scored = chain_evidence(target, gen.tokens, self.config.sampling)
                paths[path].update(
                    PathEvidence(
                        target_pit=scored.pits,
                        target_sensitivity=scored.sensitivities,
                        target_score=scored.scores,
                    )
                )
                if path == "speculative" and gen.logits is not None:
                    drift = drift_metrics(gen.logits, target)
                if path == "baseline":
                    fidelity = self._fidelity(gen, target)
        return SampleEvidence({p: evidence_json(e) for p, e in paths.items() if e}, drift, fidelity)

    def _own_rows(self, gen: Generation, path: str) -> PathEvidence:
        """A sample's evidence under the rows its path sampled from: ``chain_*`` where every
        row is known (in process; a server's baseline, whose top K covers the chain), and
        ``reported_*`` at the positions a server reported the row of (`reported_evidence`)."""
        sampling = self.config.for_path(speculative=path == "speculative").sampling
        out = PathEvidence()
        rows = gen.logits
        if rows is None and path == "baseline":  # a server: its top-K covers the chain
            rows = top_k_rows(gen.alternatives, gen.tokens, sampling)
        chain = None if rows is None else chain_evidence(rows, gen.tokens, sampling)
        if chain is not None:
            out.update(
                PathEvidence(
                    chain_pit=chain.pits,
                    chain_sensitivity=chain.sensitivities,
                    chain_score=chain.scores,
                )
            )
        if chain is not None and gen.logits is not None:  # the very rows it sampled from
            far = far_outside(gen.logits, gen.tokens, chain.pits, sampling)
            if far is not None:
                out["chain_far"] = far
        pieces = piece_bytes(self.baseline if path == "baseline" else self.speculative)
        if gen.logits is None and pieces is not None:
            known = pieces

            def whole(token: int) -> bool:
                return whole_piece(known.candidate_bytes(token))

            args = (gen.alternatives, gen.tokens, sampling, whole)
            if chain is None:
                reported = reported_evidence(*args)
            else:  # the chain ran over these very rows (a server's baseline): keep its figures
                kept = reported_positions(*args)
                reported = ReportedEvidence(kept, chain.at(kept))
            out.update(
                PathEvidence(
                    reported_pit=reported.evidence.pits,
                    reported_sensitivity=reported.evidence.sensitivities,
                    reported_score=reported.evidence.scores,
                    reported_positions=reported.positions,
                )
            )
        return out

    def _fidelity(self, base: Generation, target: npt.NDArray[np.float32]) -> Fidelity | None:
        """The re-scoring's fidelity against the rows the baseline reported while sampling."""
        sampling = self.config.sampling
        reported = base.logits
        if reported is None:
            reported = top_k_rows(base.alternatives, base.tokens, sampling)
        if reported is None:
            return None
        return rescore_fidelity(reported, target, base.tokens, sampling)

    def batched(
        self, prompt: Sequence[int], samples: Sequence[Sample], *, alpha: float
    ) -> BatchedEvidence:
        """Over HTTP the speculative samples were compared with the placebo under the target's
        single-token rows; where that rejects, re-score them batched (as verification evaluates)
        and compare again: the evidence that tells numeric drift from a sampler bug. Asked only
        then: it costs one request per token. ``prompt``: the prompt's tokens (unused, and may
        be empty, where the engines cannot re-score batched)."""
        if not self.can_rescore:
            return BatchedEvidence(error="the servers cannot re-score batched")
        try:
            scored = self.batched_samples(prompt, samples)
        except EngineError as exc:
            evidence = BatchedEvidence(error=str(exc).splitlines()[0])
        else:
            evidence = BatchedEvidence(tests=tuple(batched_vs_placebo(scored, alpha=alpha)))
        return dataclasses.replace(evidence, rescore_cost=self.take_cost())

    def batched_samples(self, prompt: Sequence[int], samples: Sequence[Sample]) -> list[Sample]:
        """The samples with their speculative tokens re-scored batched (``batched_pit``,
        ``batched_sensitivity``, ``batched_score``); `EngineError` where a request fails."""
        return [
            s.with_path("speculative", self.batched_path(prompt, s.speculative)) for s in samples
        ]

    def batched_path(self, prompt: Sequence[int], sample: PathSample) -> PathSample:
        """One path's sample with its tokens re-scored batched; `EngineError` where a request
        fails."""
        tokens = list(sample.tokens)
        rows = self.rescore(prompt, tokens, True) if tokens else None
        none = TokenEvidence([], [], [])
        evidence = none if rows is None else chain_evidence(rows, tokens, self.config.sampling)
        return sample.scored("batched", evidence)
