"""Token-level comparison of a baseline and a speculative generation.

Equal or not, bit for bit on token IDs; where they part, the first divergent position with both
candidates, both paths' top-k and the margin between the two candidates in each path; an edit
distance with opcodes (rapidfuzz, on token IDs); and the logit drift between the two paths over
the positions where both saw the same context. Calls no model.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
from rapidfuzz.distance import Indel, Levenshtein

from equiv.records import Generation, TokenAlternatives
from equiv.verdicts.stats import drift_metrics

__all__ = ["Comparison", "Divergence", "Drift", "compare", "drift", "token_namer"]


@dataclass(frozen=True)
class Drift:
    """How far apart the two paths' logits are over rows computed on identical context.

    KL is KL(baseline || speculative) of the softmax at temperature 1, the figure llama.cpp's
    ``llama-perplexity --kl-divergence`` reports; ``top1_agreement`` is the share of rows whose
    argmax agrees.
    """

    positions: int
    max_abs_delta_logit: float
    mean_kl: float
    max_kl: float
    top1_agreement: float
    # Each row's KL (4 significant digits), so that a run's percentiles pool every row.
    kl_rows: tuple[float, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "kl_rows": list(self.kl_rows)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Drift:
        return cls(**{**data, "kl_rows": tuple(data.get("kl_rows", ()))})


def drift(a: npt.NDArray[np.float32], b: npt.NDArray[np.float32]) -> Drift:
    """Drift between two stacks of logits rows of equal shape (n, vocab), n >= 1."""
    m = drift_metrics(a, b, rows=True)
    return Drift(
        positions=m.n,
        max_abs_delta_logit=round(m.max_abs_logit_delta, 6),
        mean_kl=round(m.kl_mean, 9),
        max_kl=round(m.kl_max, 9),
        top1_agreement=round(m.top1_agreement, 6),
        kl_rows=m.kl_rows,
    )


@dataclass(frozen=True)
class Divergence:
    """The first position where the two token sequences differ.

    ``margin_*`` is, in each path's own logits, how far its chosen token led the other path's
    token: a small positive margin in both is a near-tie that numeric noise can flip. ``None``
    where a path ended before this position or its row is not available.
    """

    position: int
    baseline_token: int | None
    speculative_token: int | None
    baseline_text: str | None
    speculative_text: str | None
    baseline_top: TokenAlternatives | None
    speculative_top: TokenAlternatives | None
    margin_baseline: float | None
    margin_speculative: float | None
    delta_logit_at_divergence: float | None
    # The text of every ID in both top-k lists (emitted or not), so that reasons and the
    # report name candidates by their text as well as their ID.
    top_texts: tuple[tuple[int, str], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        data = dict(self.__dict__)
        for key in ("baseline_top", "speculative_top"):
            alt = data[key]
            data[key] = alt.to_dict() if alt is not None else None
        data["top_texts"] = [list(pair) for pair in self.top_texts]
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Divergence:
        values = dict(data)
        for key in ("baseline_top", "speculative_top"):
            if values.get(key) is not None:
                values[key] = TokenAlternatives.from_dict(values[key])
        values["top_texts"] = tuple((int(i), str(t)) for i, t in values.get("top_texts", ()))
        return cls(**values)

    def token_name(self, token: int) -> str:
        return token_namer(self.to_dict())(token)


def token_namer(divergence: Mapping[str, Any]) -> Callable[[int], str]:
    """A recorded divergence's way of naming a token: ``'text' (id N)``, the text as a Python
    literal (control characters and quotes show as escapes); ``id N`` where no text is known."""
    texts = {int(i): str(t) for i, t in divergence.get("top_texts") or ()}
    for side in ("baseline", "speculative"):
        tid, text = divergence.get(f"{side}_token"), divergence.get(f"{side}_text")
        if tid is not None and text is not None:
            texts.setdefault(int(tid), str(text))

    def name(token: int) -> str:
        return f"{texts[token]!r} (id {token})" if token in texts else f"id {token}"

    return name


@dataclass(frozen=True)
class Comparison:
    identical: bool
    n_baseline: int
    n_speculative: int
    common_prefix: int
    token_similarity: float
    edit_distance: int
    opcodes: tuple[tuple[str, int, int, int, int], ...]
    divergence: Divergence | None
    drift: Drift | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "identical": self.identical,
            "n_baseline": self.n_baseline,
            "n_speculative": self.n_speculative,
            "common_prefix": self.common_prefix,
            "token_similarity": self.token_similarity,
            "edit_distance": self.edit_distance,
            "opcodes": [list(op) for op in self.opcodes],
            "divergence": self.divergence.to_dict() if self.divergence else None,
            "drift": self.drift.to_dict() if self.drift else None,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Comparison:
        return cls(
            identical=data["identical"],
            n_baseline=data["n_baseline"],
            n_speculative=data["n_speculative"],
            common_prefix=data["common_prefix"],
            token_similarity=data["token_similarity"],
            edit_distance=data["edit_distance"],
            opcodes=tuple(
                (str(op[0]), int(op[1]), int(op[2]), int(op[3]), int(op[4]))
                for op in data["opcodes"]
            ),
            divergence=Divergence.from_dict(data["divergence"]) if data["divergence"] else None,
            drift=Drift.from_dict(data["drift"]) if data.get("drift") else None,
        )


def _common_prefix(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def _at(seq: tuple[Any, ...], i: int) -> Any:
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
