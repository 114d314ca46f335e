"""The evidence each sampled token carries, from the rows its sampler used (or the target's
re-scored rows): what a result record holds beside its generation at temperature > 0.

- `chain_pit`: per emitted token, under the configured sampler chain, the probability mass ranked
  before it, its probability, and the top token's probability: enough for the randomized PIT of
  the one-sample *sampler consistency* test (`equiv.verdicts.sampling.pit_tests`);
- `chain_sensitivity`: each position's sensitivity to the temperature, for the temperature test;
- `chain_score`: each position's likelihood score for the temperature, its variance, the
  derivative of the top token's probability in the temperature (the pooled temperature bound
  weighs the top token's indicator by it, `equiv.verdicts.sampling.placebo.quasi_tempering`),
  and what that bound's residuals are expected to read at its margins;
- `judgement_evidence`: each stage of a rejection sampler, for engines that report judgements;
- `top_k_rows`: rows rebuilt from a server's top-K log-probabilities where they hold the chain's
  whole support;
- `reported_evidence`: over HTTP, the tokens whose sampled-from row the server reported, under
  those rows (llama-server: the tokens it sampled outside a speculative step).

Pure functions of rows and tokens; no model is called here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple, TypedDict

import numpy as np
import numpy.typing as npt
from scipy.special import ndtri

from equiv.config import SamplingConfig
from equiv.engines.chain import chain_distribution, on_one_support, penalised, pit_position
from equiv.json_types import JSONDict
from equiv.records import Judgement, TokenAlternatives
from equiv.verdicts.sampling.rule_scores import position_scores

__all__ = [
    "MARGIN_POWERS",
    "TEMPERATURE_MARGIN",
    "PathEvidence",
    "ReportedEvidence",
    "TokenEvidence",
    "chain_evidence",
    "chain_pit",
    "chain_sensitivity",
    "evidence_json",
    "judgement_evidence",
    "reported_evidence",
    "reported_positions",
    "top_k_rows",
]


#: The temperature bound's margin in ``λ - 1`` (`equiv.verdicts.sampling.pooled_bounds.MARGINS`).
TEMPERATURE_MARGIN = 0.1
#: The tempered family's powers at the temperature bound's margins, where each token's scores
#: say what the bound's estimator's residuals are expected to read (`TokenEvidence.scores`).
MARGIN_POWERS = (1.0 - TEMPERATURE_MARGIN, 1.0 + TEMPERATURE_MARGIN)


class PathEvidence(TypedDict, total=False):
    """What a sampled result holds per path beside its generation (the keys of the record's
    JSON, in the order the evidence stage adds them): the chain's PIT and sensitivity of each
    token under the rows the path used, a rejection sampler's judgements, the same under the
    target's single-token re-scoring, or why that re-scoring failed."""

    chain_pit: list[list[float]]
    chain_sensitivity: list[float]
    chain_score: list[list[float]]
    chain_far: list[int]
    reported_pit: list[list[float]]
    reported_sensitivity: list[float]
    reported_score: list[list[float]]
    reported_positions: list[int]
    acceptance: list[list[float]]
    rule_score: list[list[float]]
    residual_pit: list[list[float]]
    target_pit: list[list[float]]
    target_sensitivity: list[float]
    target_score: list[list[float]]
    rescore_error: str


class ReportedEvidence(NamedTuple):
    """`reported_evidence`: the positions kept (indices into the sample's tokens) and their
    evidence, in order."""

    positions: list[int]
    evidence: TokenEvidence


class TokenEvidence(NamedTuple):
    """What each emitted token carries under one set of rows (`chain_evidence`)."""

    pits: list[list[float]]
    sensitivities: list[float]
    #: ``[s, F, t, ...]`` per token: ``s = log p(x) - E_p[log p]``, the likelihood score of the
    #: tempered family ``p ** λ`` at λ = 1, ``F = Var_p(log p)``, its variance (the
    #: information), ``t = p_top (log p_top - E_p[log p])``, the derivative of the top token's
    #: probability in λ (what the pooled temperature bound weighs the top token by), then for
    #: each λ of `MARGIN_POWERS` the means under ``p ** λ`` of the top token's indicator less
    #: ``p_top`` and of the PIT's normal score (what the bound's estimator reads at its
    #: margins; files written before hold the first three)
    scores: list[list[float]]

    def at(self, positions: Sequence[int]) -> TokenEvidence:
        """The evidence of these positions alone, in their order."""
        return TokenEvidence(
            [self.pits[i] for i in positions],
            [self.sensitivities[i] for i in positions],
            [self.scores[i] for i in positions],
        )


def evidence_json(evidence: PathEvidence) -> JSONDict:
    """The evidence as the result record holds it, in the order its keys were added. Each of
    `PathEvidence`'s fields is a string or a list of numbers (mypy sees a TypedDict's values
    only as ``object``: checked here, shallowly)."""
    data: JSONDict = {}
    for key, value in evidence.items():
        if not isinstance(value, str | list):
            raise TypeError(f"evidence {key!r}: expected a string or a list, found {value!r}")
        data[key] = value
    return data


def _index(ids: npt.NDArray[np.intp], token: int) -> int | None:
    """``token``'s index in the ascending ``ids``, or None where it is not among them."""
    where = int(np.searchsorted(ids, token))
    return where if where < ids.size and ids[where] == token else None


def _pit(ids: npt.NDArray[np.intp], probs: npt.NDArray[np.float64], token: int) -> list[float]:
    """``[mass_before, p_token, p_top]``; a token outside the candidates had probability 0, so
    all the mass ranks before it."""
    where = _index(ids, token)
    mass, p = pit_position(probs, where) if where is not None else (1.0, 0.0)
    return [round(mass, 9), round(p, 9), round(float(probs.max()), 9)]


def chain_pit(
    rows: npt.NDArray[np.float32], tokens: Sequence[int], sampling: SamplingConfig
) -> list[list[float]]:
    """``[mass_before, p_token, p_top]`` of every emitted token under the configured chain
    (``p_top``: the probability of the chain's most probable token)."""
    return chain_evidence(rows, tokens, sampling).pits


def chain_evidence(
    rows: npt.NDArray[np.float32], tokens: Sequence[int], sampling: SamplingConfig
) -> TokenEvidence:
    """`chain_pit`, `chain_sensitivity` and the likelihood scores of every emitted token, from
    one pass of the chain over each row (the chain is most of their cost: a partition of the
    whole vocabulary)."""
    out = TokenEvidence([], [], [])
    for i, (row, token) in enumerate(zip(rows, tokens, strict=True)):
        _add(out, row, tokens[:i], int(token), sampling)
    return out


def _add(
    out: TokenEvidence,
    row: npt.NDArray[np.float32],
    history: Sequence[int],
    token: int,
    sampling: SamplingConfig,
) -> None:
    """One position's PIT entry, sensitivity and scores, appended to ``out``."""
    ids, probs = chain_distribution(row, history, sampling)
    out.pits.append(_pit(ids, probs, token))
    sensitivity, score = _tempering(ids, probs, token)
    out.sensitivities.append(sensitivity)
    out.scores.append(score)


def reported_positions(
    alternatives: Sequence[TokenAlternatives],
    tokens: Sequence[int],
    sampling: SamplingConfig,
    whole: Callable[[int], bool],
) -> list[int]:
    """The positions whose sampled-from row a server reported (``Capabilities.sampled_rows``)
    and that the one-sample tests may count. A position counts where its row holds at least the
    chain's ``top_k`` candidates (its whole support: the probabilities are exact) and every
    candidate is ``whole`` (its bytes complete UTF-8 on their own). llama-server sends no row
    for a token that leaves a character unfinished, so where a candidate could, whether the row
    came depends on the token drawn: such a position is left out, reported or not. Otherwise
    which positions are reported depends on what came before (llama-server: whether it drafted
    there), not on the draw, so under H0 each counted token is a draw from its row and the
    one-sample tests hold. So too where the text before ends inside a character: llama-server
    judges a text finished by its last 4 bytes, so a position counts only after 4 tokens known
    whole (or the sample's start). None count under a repetition penalty: the server's window
    holds the prompt, equiv's not."""
    k = sampling.top_k
    if k <= 0 or penalised(sampling):
        return []
    return [
        i
        for i, alt in enumerate(alternatives[: len(tokens)])
        if len(alt.ids) >= k
        and all(whole(c) for c in alt.ids)
        and all(whole(t) for t in tokens[max(0, i - 4) : i])
    ]


def reported_evidence(
    alternatives: Sequence[TokenAlternatives],
    tokens: Sequence[int],
    sampling: SamplingConfig,
    whole: Callable[[int], bool],
) -> ReportedEvidence:
    """`chain_evidence` of the tokens at `reported_positions`, under the rows the server
    reported, in order; the other positions are left out."""
    out = ReportedEvidence(
        reported_positions(alternatives, tokens, sampling, whole), TokenEvidence([], [], [])
    )
    for i in out.positions:
        alt, token = alternatives[i], int(tokens[i])
        row = np.full(1 + max(*alt.ids, token), -np.inf, dtype=np.float32)
        row[list(alt.ids)] = alt.logits
        _add(out.evidence, row, tokens[:i], token, sampling)
    return out


def _phi_of_quantile(x: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """φ(Φ⁻¹(x)), 0 at x = 0 and 1."""
    q = ndtri(x)
    out: npt.NDArray[np.float64] = np.exp(-0.5 * q * q) / np.sqrt(2.0 * np.pi)
    return out


def chain_sensitivity(
    rows: npt.NDArray[np.float32], tokens: Sequence[int], sampling: SamplingConfig
) -> list[float]:
    """Each emitted position's sensitivity to the temperature, for the temperature test
    (`equiv.verdicts.stats.temperature_test`): ``k = d/dλ E_λ[Z] at λ = 1``, where ``Z`` is the
    normal score of the position's randomized PIT and ``p_λ(x) ∝ p(x)**λ`` tempers the chain's
    distribution ``p`` (λ > 1 colder). ``k = Σ_x p(x) (log p(x) - E_p[log p]) E[Z | x]``, with
    ``E[Z | x] = (φ(Φ⁻¹(a)) - φ(Φ⁻¹(b))) / p(x)`` over the token's PIT interval ``[a, b]`` (tokens
    ranked as in `equiv.engines.chain.pit_position`). It depends on the row, not on the token
    drawn, so it can weigh the position. 0 where the chain leaves one token, or where the token
    is outside the chain's support (the PIT counts that)."""
    return chain_evidence(rows, tokens, sampling).sensitivities


def _tempering(
    ids: npt.NDArray[np.intp], probs: npt.NDArray[np.float64], token: int
) -> tuple[float, list[float]]:
    """One position's `chain_sensitivity` and scores (`TokenEvidence.scores`), from the chain's
    candidates and probabilities; ``0`` and zeros where the chain leaves one token or the token
    lies outside its support (the PIT and the support test count that)."""
    keep = probs > 0
    ids, probs = ids[keep], probs[keep]
    where = _index(ids, token)
    if ids.size < 2 or where is None:
        return 0.0, [0.0] * (3 + 2 * len(MARGIN_POWERS))
    order = np.lexsort((ids, -probs))  # probability descending, ties by ascending id
    p = probs[order]
    upper = np.clip(np.cumsum(p), 0.0, 1.0)
    lower = np.clip(upper - p, 0.0, 1.0)
    density = _phi_of_quantile(lower) - _phi_of_quantile(upper)
    logp = np.log(p)
    centred = logp - float(np.dot(p, logp))
    k = float(np.dot(centred, density))  # Σ p · centred · E[Z | x]
    s = float(centred[int(np.flatnonzero(order == where)[0])])
    info = float(np.dot(p, centred * centred))
    moves = []
    for power in MARGIN_POWERS:  # what the residuals' means move to under p ** power
        tempered = np.power(p, power)
        tempered /= tempered.sum()
        moves += [float(tempered[0] - p[0]), float(np.dot(tempered / p, density))]
    scores = [s, info, float(p[0] * centred[0]), *moves]
    return round(k, 9), [round(x, 9) for x in scores]


def top_k_rows(
    alternatives: Sequence[TokenAlternatives], tokens: Sequence[int], sampling: SamplingConfig
) -> npt.NDArray[np.float32] | None:
    """Rows rebuilt from a server's top-K log-probabilities (``-inf`` elsewhere) when every row
    holds at least the chain's ``top_k`` candidates: then they hold the chain's whole support
    and its probabilities are exact. None otherwise (no top_k, or fewer candidates recorded)."""
    k = sampling.top_k
    if k <= 0 or len(alternatives) < len(tokens) or not tokens:
        return None
    if any(len(alt.ids) < k for alt in alternatives[: len(tokens)]):
        return None
    width = 1 + max(max(max(alt.ids) for alt in alternatives[: len(tokens)]), max(tokens))
    rows = np.full((len(tokens), width), -np.inf, dtype=np.float32)
    for i, alt in enumerate(alternatives[: len(tokens)]):
        rows[i, list(alt.ids)] = alt.logits
    return rows


def judgement_evidence(
    rows: npt.NDArray[np.float32],
    tokens: Sequence[int],
    judgements: Sequence[Judgement],
    sampling: SamplingConfig,
) -> PathEvidence:
    """Each stage of a rejection sampler, from the rows it used (``Capabilities.judgements``).

    With p the target's and q the draft's distribution under the configured chain:

    - ``acceptance``: ``[a, accepted, q(x)]`` per judged draft token x, ``a = min(1, p(x) /
      q(x))`` the probability the rule accepts it with (1 where q(x) = 0);
    - ``residual_pit``: ``[mass_before, p, p_top]`` of each replacement drawn after a rejection,
      under ``norm(max(0, p - q))`` (p itself where that is all zero);
    - ``rule_score``: the emitted token's scores toward the faulty rules of
      `equiv.verdicts.sampling.rule_scores` at each judged position.
    """
    acceptance: list[list[float]] = []
    residual: list[list[float]] = []
    rule: list[list[float]] = []
    for j in judgements:
        p_ids, p = chain_distribution(rows[j.pos], tokens[: j.pos], sampling)
        q_ids, q = chain_distribution(j.draft_row, tokens[: j.pos], sampling)
        ids, pp, qq = on_one_support(p_ids, p, q_ids, q)
        where = _index(ids, j.token)
        px, qx = (float(pp[where]), float(qq[where])) if where is not None else (0.0, 0.0)
        a = min(1.0, px / qx) if qx > 0 else 1.0
        acceptance.append([round(a, 12), float(j.accepted), round(qx, 12)])
        rule.append(position_scores(pp, qq, _index(ids, tokens[j.pos])))
        if not j.accepted:
            r = np.maximum(pp - qq, 0.0)
            r = r / r.sum() if r.sum() > 0 else pp
            residual.append(_pit(ids, r, int(tokens[j.pos])))
    return PathEvidence(acceptance=acceptance, rule_score=rule, residual_pit=residual)
