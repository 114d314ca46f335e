"""Token-level comparison of a baseline and a speculative generation.

Equal or not, bit for bit on token IDs; where they part, the first divergent position with both
candidates, both paths' top-k and the margin between the two candidates in each path; an edit
distance with opcodes (rapidfuzz, on token IDs); and the logit drift between the two paths over
the positions where both saw the same context. Calls no model. The types it fills
(`Comparison`, `Divergence`, `Drift`) are records: `equiv.records.comparison`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import numpy as np
import numpy.typing as npt
from rapidfuzz.distance import Indel, Levenshtein

from equiv.records import Comparison, Divergence, Drift, Generation
from equiv.records.comparison import token_namer
from equiv.verdicts.temp0.drift import drift_metrics

__all__ = ["Comparison", "Divergence", "Drift", "compare", "drift", "token_namer"]


def drift(a: npt.NDArray[np.float32], b: npt.NDArray[np.float32]) -> Drift:
    """Drift between two stacks of logits rows of equal shape (n, vocab), n >= 1, rounded as
    the results file keeps it (each row's KL included, for run-level percentiles)."""
    return drift_metrics(a, b, rows=True).rounded()


def _common_prefix(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


_T = TypeVar("_T")


def _at(seq: tuple[_T, ...], i: int) -> _T | None:
    return seq[i] if i < len(seq) else None


def compare(
    baseline: Generation,
    speculative: Generation,
    *,
    token_text: Callable[[int], str] | None = None,
) -> Comparison:
    """Compare two generations of the same prompt; uses their logits rows when present.
    ``token_text`` (the engine's) names the candidates at a divergence that no path emitted."""
    a, b = baseline.tokens, speculative.tokens
    prefix = _common_prefix(a, b)
    identical = a == b
    opcodes = tuple(
        (op.tag, op.src_start, op.src_end, op.dest_start, op.dest_end)
        for op in Levenshtein.opcodes(list(a), list(b))
    )
    divergence = None if identical else _divergence(baseline, speculative, prefix, token_text)
    # Rows 0..prefix were computed by both paths on identical context (the token at `prefix`
    # is chosen from row `prefix`, whose context is the common prefix).
    shared = min(prefix + 1, len(a), len(b))
    drift_result = None
    if baseline.logits is not None and speculative.logits is not None and shared > 0:
        drift_result = drift(baseline.logits[:shared], speculative.logits[:shared])
    return Comparison(
        identical=identical,
        n_baseline=len(a),
        n_speculative=len(b),
        common_prefix=prefix,
        token_similarity=round(float(Indel.normalized_similarity(list(a), list(b))), 6),
        edit_distance=int(Levenshtein.distance(list(a), list(b))),
        opcodes=opcodes,
        divergence=divergence,
        drift=drift_result,
    )


def _divergence(
    baseline: Generation,
    speculative: Generation,
    pos: int,
    token_text: Callable[[int], str] | None = None,
) -> Divergence:
    bt: int | None = _at(baseline.tokens, pos)
    st: int | None = _at(speculative.tokens, pos)
    rows_b, rows_s = baseline.logits, speculative.logits
    margin_b = margin_s = delta = None
    if (
        bt is not None
        and st is not None
        and rows_b is not None
        and rows_s is not None
        and pos < rows_b.shape[0]
        and pos < rows_s.shape[0]
    ):
        rb, rs = rows_b[pos], rows_s[pos]
        margin_b = round(float(rb[bt]) - float(rb[st]), 6)
        margin_s = round(float(rs[st]) - float(rs[bt]), 6)
        delta = round(float(np.abs(rb.astype(np.float64) - rs).max()), 6)
    return Divergence(
        position=pos,
        baseline_token=bt,
        speculative_token=st,
        baseline_text=_at(baseline.pieces, pos),
        speculative_text=_at(speculative.pieces, pos),
        baseline_top=_at(baseline.alternatives, pos),
        speculative_top=_at(speculative.alternatives, pos),
        margin_baseline=margin_b,
        margin_speculative=margin_s,
        delta_logit_at_divergence=delta,
        top_texts=_top_texts(baseline, speculative, pos, token_text),
    )


def _top_texts(
    baseline: Generation,
    speculative: Generation,
    pos: int,
    token_text: Callable[[int], str] | None,
) -> tuple[tuple[int, str], ...]:
    ids: dict[int, None] = {}
    for gen in (baseline, speculative):
        alts = _at(gen.alternatives, pos)
        ids.update(dict.fromkeys(alts.ids if alts is not None else ()))
    if token_text is None:
        return ()
    return tuple((tid, token_text(tid)) for tid in ids)
