"""One frozen view per result record (a prompt x mode x seed), read from the results file.
Computes nothing new: labels come from the typed record (`ResultRecord.judged`), speeds and draft
counts from its `Generation`, differences from the opcodes and divergence the run stored, token
text from the pieces the run emitted.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from equiv.json_types import JSONObject
from equiv.records import AnalysisRecord, Divergence, Drift, ResultRecord, TokenAlternatives
from equiv.records.verdict import Label, Verdict
from equiv.report.diff import Segment, segments
from equiv.report.header import fmt

__all__ = [
    "LABELS",
    "PromptView",
    "drift_rows",
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
    "rows": "rows compared",
    "max_abs_logit_delta": "max |Δlogit|",
    "kl_mean": "mean KL",
    "kl_p99": "KL, 99th percentile",
    "kl_max": "max KL",
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


def _grades(record: JSONObject) -> tuple[tuple[str, str, str], ...]:
    grades = record.get("grades")
    if not isinstance(grades, Mapping):
        return ()
    return tuple(
        (path, str(g.get("outcome", "?")), str(g.get("reason", "")))
        for path in ("baseline", "speculative")
        if isinstance(g := grades.get(path), Mapping)
    )


def number(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) and math.isfinite(value) else None


def evidence_rows(evidence: JSONObject) -> tuple[tuple[str, str], ...]:
    return tuple((str(k), fmt(v)) for k, v in evidence.items())


def record_verdict(record: ResultRecord | AnalysisRecord) -> Verdict:
    """The verdict a record carries (a plain one where it carries none)."""
    return record.judged


def _path(record: ResultRecord, side: str) -> PathView:
    gen = record.generation(side)
    spec = side == "speculative"
    return PathView(
        name=side,
        n_tokens=gen.n_tokens,
        stop_reason=gen.stop_reason,
        tps=gen.tokens_per_s or None,
        t_prompt_s=number(gen.t_prompt_s),
        drafted=gen.drafted if spec else None,
        accepted=gen.accepted if spec else None,
        acceptance=gen.acceptance_rate if spec else None,
        segments=segments(record, side),
    )


def _top(
    top: TokenAlternatives | None,
    picks: tuple[int | None, int | None],
    vocab: Mapping[int, str],
) -> tuple[TopRow, ...]:
    if top is None:
        return ()
    return tuple(
        TopRow(rank + 1, tid, vocab.get(tid), logit, tid == picks[0], tid == picks[1])
        for rank, (tid, logit) in enumerate(zip(top.ids, top.logits, strict=True))
    )


def _divergence(d: Divergence | None, vocab: Mapping[int, str]) -> DivergenceView | None:
    if d is None:
        return None
    picks = (d.baseline_token, d.speculative_token)
    # Candidates no path emitted: their text as the engine gave it at the divergence.
    vocab = {**dict(d.top_texts), **vocab}
    return DivergenceView(
        position=d.position,
        baseline=(picks[0], d.baseline_text),
        speculative=(picks[1], d.speculative_text),
        baseline_top=_top(d.baseline_top, picks, vocab),
        speculative_top=_top(d.speculative_top, picks, vocab),
        margin_baseline=number(d.margin_baseline),
        margin_speculative=number(d.margin_speculative),
        delta=number(d.delta_logit_at_divergence),
    )


def drift_rows(drift: Drift | None) -> tuple[tuple[str, str], ...]:
    """A drift's figures for a table, each with its name as a person reads it."""
    if drift is None:
        return ()
    return tuple((_NAMES.get(k, k), fmt(v)) for k, v in drift.to_dict().items() if v is not None)


def prompt_view(
    anchor: str,
    record: ResultRecord,
    vocab: Mapping[int, str],
    verdict: Verdict | None = None,
) -> PromptView:
    """The view of one result record; ``verdict`` overrides the record's own (a seed record
    shows its prompt's distribution verdict)."""
    verdict = verdict or record_verdict(record)
    prompt = record.prompt
    comparison = record.comparison
    drift = comparison.drift
    shown = comparison.to_dict()
    return PromptView(
        anchor=anchor,
        key=record.key,
        suite=record.suite,
        mode=record.mode.value,
        seed=record.seed,
        label=verdict.label.value,
        reason=verdict.reason,
        evidence=evidence_rows(verdict.evidence),
        prompt_text=prompt.text,
        messages=prompt.messages or (),
        identical=comparison.identical,
        baseline=_path(record, "baseline"),
        speculative=_path(record, "speculative"),
        divergence=_divergence(comparison.divergence, vocab),
        drift=drift_rows(drift),
        comparison=tuple((n, fmt(shown[k])) for k, n in _SHOWN.items()),
        similarity=number(comparison.token_similarity),
        max_delta_logit=None if drift is None else number(drift.max_abs_logit_delta),
        mean_kl=None if drift is None else number(drift.kl_mean),
        grades=_grades(record.extra),
    )


def token_texts(records: Sequence[ResultRecord]) -> dict[int, str]:
    """Token text for every ID some path emitted: what the pieces give, and no more."""
    vocab: dict[int, str] = {}
    for r in records:
        for gen in (r.baseline, r.speculative):
            vocab.update(zip(gen.tokens, gen.pieces, strict=True))
    return vocab
