"""The support test: tokens the configured chain cannot emit under the rows a path sampled from
(a top-k, top-p or min-p cut-off ignored, a residual without its clamp or its normalisation).

In process the rows are the logits each engine sampled from, so such a token is the sampler's,
unless equiv's chain, recomputed from those logits, misplaces a token at a cut-off by rounding.
Two counts tell the two apart:

- every token outside the support, tested against the instrument's tolerance for rounding
  (`SUPPORT_TOLERANCE` a token, 6 times a measured bound);
- the tokens outside by more than any rounding (`beyond_rounding`: still outside when top-p
  is loosened by `MASS_SLACK` and the token's own logit raised by `LOGIT_SLACK`), which a
  correct sampler cannot emit at all under those rows: tested against `FAR_TOLERANCE`, so that
  one of them convicts a run of a few hundred tokens (not counted under typical-p, where no
  loosening bounds what rounding does: `far_outside`).

The support test takes the smaller p-value of the two, doubled (Bonferroni); the placebo's
counts take the same test as the instrument's check, and a chain that is not the engine's puts
the placebo's tokens outside too (the far count's level rests on equiv's chain being the
engine's, which that check and the placebo runs of docs/verdicts.md measure). Over HTTP,
where re-scored rows are not the rows sampled from, the two paths' counts are compared
(`support_vs_placebo`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
from scipy import stats as sps

from equiv.config import SamplingConfig
from equiv.engines.chain import chain_distribution
from equiv.verdicts.stats import TestResult
from equiv.verdicts.stats.result import not_enough

__all__ = [
    "FAR_TOLERANCE",
    "LOGIT_SLACK",
    "MASS_SLACK",
    "SUPPORT_TOLERANCE",
    "beyond_rounding",
    "far_outside",
    "outside",
    "support_against_rows",
    "support_vs_placebo",
]

#: In process, the share of a correct sampler's tokens equiv's chain may put outside the support
#: of the rows it sampled from (a token at a cut-off within rounding): 6 times the 95 % bound of
#: none in 180,703 measured (docs/verdicts.md); over HTTP the paths are compared instead.
SUPPORT_TOLERANCE = 1e-4

#: How far rounding could move a token's logit (nats, before the temperature) or a cut-off's
#: mass (top-p) between equiv's chain in float64 and an engine's in float32: float32 logits of
#: size 30 hold 2e-6 (the logit slack is 5,000 times that), and a float32 cumulative sum over
#: a whole row of 262,144 probabilities is off by about 3e-5 typically and at most 1.6e-2 (the
#: bound n u); after top-k's 40 candidates by at most 2.4e-6.
LOGIT_SLACK = 1e-2
MASS_SLACK = 2e-2

#: The share of a correct sampler's tokens allowed outside the support by more than the slacks.
#: Under the rows it sampled from there are none: rounding cannot place them there, and a chain
#: that is not the engine's (another order of the cut-offs, another penalty window) puts the
#: placebo's tokens outside as well, where the instrument's check sees it. A stated allowance,
#: not a measurement (what was measured, none outside at all in 180,703 tokens and 12,284 under
#: tight cut-offs and a penalty, bounds the count: docs/verdicts.md), so that a p-value is a
#: number: one such token in n gives p = n x 1e-6 (2 n x 1e-6 once doubled).
FAR_TOLERANCE = 1e-6


def outside(pits: npt.ArrayLike) -> npt.NDArray[np.bool_]:
    """Which of these PIT entries' tokens lie outside the chain's support: probability 0 (the
    entry's second number; `equiv.verdicts.sampling.token_evidence`)."""
    mask: npt.NDArray[np.bool_] = np.asarray(pits, dtype=np.float64).reshape(-1, 3)[:, 1] == 0.0
    return mask


def beyond_rounding(
    row: npt.NDArray[np.float32], history: Sequence[int], token: int, sampling: SamplingConfig
) -> bool:
    """Whether ``token``, outside the chain's support under ``row``, stays outside when each
    cut-off is loosened by more than rounding: top-p raised by `MASS_SLACK`, the token's own
    logit by `LOGIT_SLACK` (top-k's boundary and its ties, min-p's threshold). A token whose
    logit in the engine's row is ``-inf`` stays outside. Not for typical-p (`far_outside`)."""
    loose = dataclasses.replace(sampling, top_p=min(1.0, sampling.top_p + MASS_SLACK))
    raised = np.array(row, copy=True)
    raised[token] += LOGIT_SLACK
    ids, probs = chain_distribution(raised, history, loose)
    where = int(np.searchsorted(ids, token))
    return not (where < ids.size and ids[where] == token and probs[where] > 0.0)


def far_outside(
    rows: npt.NDArray[np.float32],
    tokens: Sequence[int],
    pits: Sequence[Sequence[float]],
    sampling: SamplingConfig,
) -> list[int] | None:
    """The positions whose token is outside the chain's support (``p`` of its PIT entry 0) by
    more than rounding (`beyond_rounding`); the chain runs again only at those, which are rare.
    None under typical-p, which ranks tokens by their distance from the entropy: raising a
    token's logit can move it further out, and loosening typical-p can let in a token that
    tightens top-p or min-p, so no loosening bounds what rounding does there."""
    if sampling.typical_p < 1.0:
        return None
    at = [int(i) for i in np.flatnonzero(outside(pits))]
    return [i for i in at if beyond_rounding(rows[i], tokens[:i], int(tokens[i]), sampling)]


def support_vs_placebo(
    speculative: tuple[int, int], placebo: tuple[int, int], *, alpha: float
) -> TestResult:
    """Does the speculative path emit more tokens outside the chain's support than the placebo?
    Each path gives ``(outside, tokens)``. Given ``a + b`` tokens outside on both, ``a`` is
    binomial with the speculative share of tokens under H0: the exact one-sided p-value."""
    (a, n_s), (b, n_b) = speculative, placebo
    name = "support_vs_placebo"
    if min(n_s, n_b) < 1:
        return not_enough(name, alpha, n_s + n_b, "no tokens on a path")
    share = n_s / (n_s + n_b)
    p_value = float(sps.binom.sf(a - 1, a + b, share)) if a else 1.0
    detail = (
        f"tokens outside the chain's support: speculative {a} of {n_s}, placebo {b} of {n_b}; "
        f"exact binomial test of the speculative share of the {a + b} given {share:.3f}"
    )
    return TestResult(name, float(a), p_value, alpha, n_s + n_b, None, None, a / n_s, detail)


def support_against_rows(
    outside: int,
    tokens: int,
    *,
    alpha: float,
    far: tuple[int, int] | None = None,
    tolerance: float = SUPPORT_TOLERANCE,
) -> TestResult:
    """Does a path emit more tokens outside the chain's support than the instrument allows,
    under the very rows it sampled from? The exact one-sided binomial p-value of ``outside`` in
    ``tokens`` at ``tolerance``; where the records say how many of them lie beyond rounding
    (``far``: that many of the tokens of the records that count them; None where none does),
    the smaller of that and the binomial p-value of those at `FAR_TOLERANCE`, doubled."""
    beyond, counted = far if far is not None else (0, 0)
    if min(outside, tokens, beyond) < 0 or outside > tokens or beyond > min(outside, counted):
        raise ValueError(
            f"support counts out of order: {outside} outside of {tokens} tokens, {beyond} "
            f"beyond rounding of {counted} counted; each must be at most the one it is part of"
        )
    name = "support_against_rows"
    if tokens < 1:
        return not_enough(name, alpha, tokens, "no tokens")
    p_value = float(sps.binom.sf(outside - 1, tokens, tolerance)) if outside else 1.0
    detail = (
        f"tokens outside the chain's support: {outside} of {tokens}; exact binomial test "
        f"against the instrument's tolerance of {tolerance:g} a token"
    )
    if far is not None:
        p_far = float(sps.binom.sf(beyond - 1, counted, FAR_TOLERANCE)) if beyond else 1.0
        p_value = min(1.0, 2.0 * min(p_value, p_far))
        detail += (
            f"; {beyond} of them beyond rounding, of {counted} tokens counted, against "
            f"{FAR_TOLERANCE:g} a token (the smaller p-value, doubled)"
        )
    return TestResult(
        name, float(outside), p_value, alpha, tokens, None, None, outside / tokens, detail
    )
