"""A simulated prompt's samples through equiv's real sampler chain, for the tests of the
sampling statistics: a first-order chain over a small vocabulary (each token's row of
``logits`` gives the next), sampled with a seeded numpy generator, with the evidence a run
records in process (`chain_evidence`). A faulty path samples from the chain tempered colder
(``wrong_temp``), with extra mass on the top token (``greedy``), or now and then emits a token
outside the chain's support (``outside``: `OUTSIDE_RATE` of its tokens, as a sampler that
ignores a cut-off)."""

from __future__ import annotations

import dataclasses

import numpy as np
import numpy.typing as npt

from equiv.config import SamplingConfig
from equiv.engines.acceptance_rules import Rule, accept_probability, residual
from equiv.engines.chain import chain_distribution
from equiv.records import Judgement
from equiv.verdicts.sampling.samples import PathSample
from equiv.verdicts.sampling.support import far_outside
from equiv.verdicts.sampling.token_evidence import chain_evidence, judgement_evidence

__all__ = [
    "OUTSIDE_RATE",
    "faulty",
    "sample_drafted",
    "sample_drifted",
    "sample_pair",
    "sample_path",
]

#: The share of ``outside``'s tokens drawn from outside the chain's support.
OUTSIDE_RATE = 0.01


def faulty(
    probs: npt.NDArray[np.float64], fault: str, power: float = 1.0
) -> npt.NDArray[np.float64]:
    """The distribution a faulty sampler draws from instead of ``probs``; ``power`` tempers it
    further (``p ** power``, the true λ of a simulated run)."""
    if power != 1.0:
        tempered = np.power(faulty(probs, fault), power)
        return tempered / tempered.sum()
    if fault == "wrong_temp":  # about 18 % colder
        tempered = np.power(probs, 1 / 0.85)
        return tempered / tempered.sum()
    if fault == "greedy":  # the top token 10 % of the time on top of the chain
        mixed = 0.9 * probs
        mixed[np.argmax(probs)] += 0.1
        return mixed
    return probs


def sample_path(
    rng: np.random.Generator,
    logits: npt.NDArray[np.float32],
    n: int,
    sampling: SamplingConfig,
    fault: str = "none",
    power: float = 1.0,
) -> PathSample:
    """``n`` tokens from token 0 on, with their evidence (`faulty`: ``fault`` and ``power``)."""
    tokens: list[int] = []
    rows = []
    prev = 0
    for _ in range(n):
        ids, probs = chain_distribution(logits[prev], tokens, sampling)
        token = int(ids[rng.choice(ids.size, p=faulty(probs, fault, power))])
        outside = np.setdiff1d(np.arange(logits.shape[1]), ids[probs > 0])
        if fault == "outside" and outside.size and rng.random() < OUTSIDE_RATE:
            token = int(rng.choice(outside))  # a cut-off ignored: a token the chain cannot emit
        tokens.append(token)
        rows.append(logits[prev])
        prev = token
    return _evidence(rows, tokens, sampling)


def sample_drifted(
    rng: np.random.Generator,
    logits: npt.NDArray[np.float32],
    n: int,
    sampling: SamplingConfig,
    scale: float,
) -> tuple[PathSample, PathSample]:
    """A correct sampler on drifted rows: ``n`` tokens drawn from each row's logits times
    ``scale`` (hotter below 1, as numeric drift may make a server's rows), with their evidence
    under those rows (what the server reports) and under the plain rows (what re-scoring by
    plain decoding reads), in that order."""
    own = sample_path(rng, logits * np.float32(scale), n, sampling)
    prev = (0, *own.tokens[:-1])
    return own, _evidence([logits[i] for i in prev], list(own.tokens), sampling)


def _far(positions: list[int] | None) -> tuple[int, ...] | None:
    return None if positions is None else tuple(positions)


def _evidence(rows: list, tokens: list[int], sampling: SamplingConfig) -> PathSample:
    evidence = chain_evidence(np.asarray(rows), tokens, sampling)
    return PathSample(
        tokens=tuple(tokens),
        pits={"chain_pit": tuple(map(tuple, evidence.pits))},
        sensitivities={"chain_sensitivity": tuple(evidence.sensitivities)},
        scores={"chain_score": tuple(map(tuple, evidence.scores))},
        far_outside=_far(far_outside(np.asarray(rows), tokens, evidence.pits, sampling)),
    )


def sample_pair(
    rng: np.random.Generator,
    logits: npt.NDArray[np.float32],
    n: int,
    sampling: SamplingConfig,
    fault: str = "none",
    drift: float = 0.0,
    power: float = 1.0,
) -> tuple[PathSample, PathSample]:
    """A seed's baseline and speculative samples as llama.cpp draws them: one uniform a token
    from one stream, the token the first whose cumulative probability (most probable first)
    reaches it. The speculative path samples from rows moved by ``drift`` (normal noise, its
    numeric drift: those are the rows it reports) and with ``fault`` and ``power`` (`faulty`)."""
    tokens: tuple[list[int], list[int]] = ([], [])
    rows: tuple[list, list] = ([], [])
    prev = [0, 0]
    for _ in range(n):
        u = rng.random()
        noise = rng.normal(0.0, drift, logits.shape[1]).astype(np.float32) if drift else 0.0
        for path in (0, 1):
            row = logits[prev[path]] + (noise if path else 0.0)
            ids, probs = chain_distribution(row, tokens[path], sampling)
            probs = faulty(probs, fault, power) if path else probs
            order = np.lexsort((ids, -probs))
            cum = np.cumsum(probs[order])
            token = int(ids[order][min(int(np.searchsorted(cum, u * cum[-1])), cum.size - 1)])
            tokens[path].append(token)
            rows[path].append(row)
            prev[path] = token
    baseline, speculative = (_evidence(rows[i], tokens[i], sampling) for i in (0, 1))
    return baseline, speculative


def _dense(ids: npt.NDArray[np.intp], probs: npt.NDArray[np.float64], size: int):
    out = np.zeros(size)
    out[ids] = probs
    return out


def sample_drafted(
    rng: np.random.Generator,
    logits: npt.NDArray[np.float32],
    draft: npt.NDArray[np.float32],
    n: int,
    sampling: SamplingConfig,
    rule: Rule = Rule.CORRECT,
) -> PathSample:
    """``n`` tokens from token 0 on as a rejection sampler emits them with acceptance ``rule``
    (`equiv.engines.acceptance_rules`), every position drafted from ``draft``'s row (``logits``
    the target's); ``wrong_temp`` reads the draft's row at twice its temperature. The evidence
    is a run's in process, the judgements' included (`judgement_evidence`)."""
    tokens: list[int] = []
    rows, judgements = [], []
    hot = dataclasses.replace(sampling, temp=2 * sampling.temp)
    for pos in range(n):
        prev = tokens[-1] if tokens else 0
        p = _dense(*chain_distribution(logits[prev], tokens, sampling), logits.shape[1])
        q = _dense(*chain_distribution(draft[prev], tokens, sampling), logits.shape[1])
        extra = {}
        if rule is Rule.WRONG_TEMP:
            wrong = chain_distribution(draft[prev], tokens, hot)
            extra["q_wrong"] = _dense(*wrong, logits.shape[1])
        proposed = int(rng.choice(q.size, p=q))
        accepted = rng.random() < accept_probability(rule, p, q, proposed, **extra)
        r = residual(rule, p, q, **extra)
        token = proposed if accepted else int(rng.choice(r.size, p=r / r.sum()))
        judgements.append(Judgement(pos, proposed, bool(accepted), draft[prev]))
        tokens.append(token)
        rows.append(logits[prev])
    sample = _evidence(rows, tokens, sampling)
    rule_scores = judgement_evidence(np.asarray(rows), tokens, judgements, sampling)["rule_score"]
    return dataclasses.replace(sample, rule_scores=tuple(map(tuple, rule_scores)))
