"""One frozen view per result record (a prompt x mode x seed), read from the results file.
Computes nothing new: labels come from `equiv.verdicts.labels.verdict_of`, differences from the
opcodes and divergence the run stored, token text from the pieces the run emitted.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from equiv.report.diff import Segment, segments
from equiv.report.header import fmt
from equiv.verdicts.labels import Label, Verdict, verdict_of

__all__ = [
    "LABELS",
    "PromptView",
    "evidence_rows",
    "number",
    "prompt_view",
    "record_verdict",
    "token_texts",
]

LABELS = tuple(label.value for label in Label)
_SHOWN = {
    "common_prefix": "common prefix",
    "token_similarity": "token similarity",
    "edit_distance": "edit distance",
}
_NAMES = {
    "positions": "rows compared",
    "max_abs_delta_logit": "max |Δlogit|",
    "mean_kl": "mean KL",
    "max_kl": "max KL",
    "top1_agreement": "top-1 agreement",
}


@dataclass(frozen=True)
class TopRow:
    rank: int
    id: int
    text: str | None
    logit: float
    baseline_pick: bool
    speculative_pick: bool


@dataclass(frozen=True)
class DivergenceView:
    position: int
    baseline: tuple[int | None, str | None]
    speculative: tuple[int | None, str | None]
    baseline_top: tuple[TopRow, ...]
    speculative_top: tuple[TopRow, ...]
    margin_baseline: float | None
    margin_speculative: float | None
    delta: float | None


@dataclass(frozen=True)
class PathView:
    name: str
    n_tokens: int
    stop_reason: str
    tps: float | None
    t_prompt_s: float | None
    drafted: int | None
    accepted: int | None
    acceptance: float | None
    segments: tuple[Segment, ...]


@dataclass(frozen=True)
class PromptView:
    anchor: str
    key: str
    suite: str
    mode: str
    seed: int | None
    label: str
    reason: str
    evidence: tuple[tuple[str, str], ...]
    prompt_text: str | None
    messages: tuple[tuple[str, str], ...]
    identical: bool
    baseline: PathView
    speculative: PathView
    divergence: DivergenceView | None
    drift: tuple[tuple[str, str], ...]
    comparison: tuple[tuple[str, str], ...]
    similarity: float | None
    max_delta_logit: float | None
    mean_kl: float | None
    grades: tuple[tuple[str, str, str], ...] = ()  # (path, outcome, reason) of graded prompts


def _grades(record: Mapping[str, Any]) -> tuple[tuple[str, str, str], ...]:
    grades = record.get("grades")
    if not isinstance(grades, Mapping):
        return ()
    return tuple(
        (path, str(g.get("outcome", "?")), str(g.get("reason", "")))
        for path in ("baseline", "speculative")
        if isinstance(g := grades.get(path), Mapping)
    )


def number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and math.isfinite(value) else None


def evidence_rows(evidence: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    return tuple((str(k), fmt(v)) for k, v in evidence.items())


def record_verdict(record: Mapping[str, Any]) -> Verdict:
    try:
        if record.get("kind") == "analysis":
            if record.get("verdict"):
                return Verdict.from_dict(record["verdict"])
            return Verdict(Label.INCONCLUSIVE, "no verdict recorded for this analysis")
        return verdict_of(record)
    except (KeyError, TypeError, ValueError) as exc:
        return Verdict(Label.INCONCLUSIVE, f"unreadable verdict in the results file ({exc!r})")


def _path(record: Mapping[str, Any], side: str) -> PathView:
    gen: Mapping[str, Any] = record.get(side) or {}
    tokens = gen.get("tokens") or []
    decode = number(gen.get("t_decode_s"))
    n = len(tokens) - 1  # the first token's time is prompt evaluation, as in summarize
    steps = [s for s in gen.get("draft_steps") or [] if not s[3]]
    drafted = sum(int(s[1]) for s in steps) if side == "speculative" else None
    accepted = sum(int(s[2]) for s in steps) if side == "speculative" else None
    return PathView(
        name=side,
        n_tokens=len(tokens),
        stop_reason=str(gen.get("stop_reason", "-")),
        tps=n / decode if decode and n > 0 else None,
        t_prompt_s=number(gen.get("t_prompt_s")),
        drafted=drafted,
        accepted=accepted,
        acceptance=accepted / drafted if drafted and accepted is not None else None,
        segments=segments(record, side) if record.get(side) else (),
    )


def _top(
    top: Mapping[str, Any] | None, picks: tuple[int | None, int | None], vocab: Mapping[int, str]
) -> tuple[TopRow, ...]:
    if not top:
        return ()
    rows = []
    for rank, (tid, logit) in enumerate(
        zip(top.get("ids", []), top.get("logits", []), strict=False)
    ):
        tid = int(tid)
        rows.append(
            TopRow(rank + 1, tid, vocab.get(tid), float(logit), tid == picks[0], tid == picks[1])
        )
    return tuple(rows)


def _divergence(comparison: Mapping[str, Any], vocab: Mapping[int, str]) -> DivergenceView | None:
    d = comparison.get("divergence")
    if not d:
        return None
    picks = (d.get("baseline_token"), d.get("speculative_token"))
    # Candidates no path emitted: their text as the engine gave it at the divergence.
    vocab = {**{int(i): str(t) for i, t in d.get("top_texts") or ()}, **vocab}
    return DivergenceView(
        position=int(d.get("position", 0)),
        baseline=(picks[0], d.get("baseline_text")),
        speculative=(picks[1], d.get("speculative_text")),
        baseline_top=_top(d.get("baseline_top"), picks, vocab),
        speculative_top=_top(d.get("speculative_top"), picks, vocab),
        margin_baseline=number(d.get("margin_baseline")),
        margin_speculative=number(d.get("margin_speculative")),
        delta=number(d.get("delta_logit_at_divergence")),
    )


def prompt_view(
    anchor: str,
    record: Mapping[str, Any],
    vocab: Mapping[int, str],
    verdict: Verdict | None = None,
) -> PromptView:
    """The view of one result record; ``verdict`` overrides the record's own (a seed record
    shows its prompt's distribution verdict)."""
    verdict = verdict or record_verdict(record)
    prompt: Mapping[str, Any] = record.get("prompt") or {}
    comparison: Mapping[str, Any] = record.get("comparison") or {}
    drift: Mapping[str, Any] = comparison.get("drift") or {}
    return PromptView(
        anchor=anchor,
        key=str(record.get("key", anchor)),
        suite=str(record.get("suite", "")),
        mode=str(record.get("mode", "")),
        seed=record.get("seed"),
        label=verdict.label.value,
        reason=verdict.reason,
        evidence=evidence_rows(verdict.evidence),
        prompt_text=str(prompt["text"]) if prompt.get("text") is not None else None,
        messages=tuple(
            (str(m.get("role", "")), str(m.get("content", "")))
            for m in prompt.get("messages") or []
        ),
        identical=bool(comparison.get("identical", False)),
        baseline=_path(record, "baseline"),
        speculative=_path(record, "speculative"),
        divergence=_divergence(comparison, vocab),
        drift=tuple((_NAMES.get(k, k), fmt(v)) for k, v in drift.items()),
        comparison=tuple((n, fmt(comparison[k])) for k, n in _SHOWN.items() if k in comparison),
        similarity=number(comparison.get("token_similarity")),
        max_delta_logit=number(drift.get("max_abs_delta_logit")),
        mean_kl=number(drift.get("mean_kl")),
        grades=_grades(record),
    )


def token_texts(records: Sequence[Mapping[str, Any]]) -> dict[int, str]:
    """Token text for every ID some path emitted: what the pieces give, and no more."""
    vocab: dict[int, str] = {}
    for r in records:
        for side in ("baseline", "speculative"):
            gen = r.get(side) or {}
            vocab.update(zip(gen.get("tokens", []), gen.get("pieces", []), strict=False))
    return vocab
