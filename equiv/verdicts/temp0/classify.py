"""The verdict and its evidence, for each prompt x mode and for the run.

Rules (also in docs/verdicts.md, each with the evidence it needs):

Misconfiguration first: when the two paths' fingerprints differ in anything that can change
output (target file or quant, context or batch sizes, threads, flash attention, KV type, chat
template, sampler settings, library version), the two runs were not the same experiment and every
result is ``misconfiguration``, with each difference explained
(`equiv.verdicts.temp0.misconfiguration`).

Temperature 0, at the first divergent position d (tokens a from the baseline, b from the
speculative path). The target is evaluated over the baseline's first max(d + 1, 32) tokens one
token at a time (S: the baseline's own rows, or re-scored) and in one batch (B, re-scored), as
plain decoding and draft verification evaluate it. At every one of those positions j except d,
drift moved the gaps between plausible candidates by ``M_j = max_c |(S_j[t] - S_j[c]) - (B_j[t]
- B_j[c])|`` (t the top token of S_j, c its runner-up: a drift flip is the runner-up overtaking
the top token, so that is the gap whose movement matters); the *calibrated bound* is
2 x max_j M_j (`DriftBound`; not the whole row's largest difference, which sits in the tail of a
large vocabulary and says nothing about the two tokens in question):

- ``sampler-bug`` if the speculative path emitted b although its own row prefers another token
  (margin < -1e-4), or if the row it says it used is not the target's (max |Δlogit| from B_d above
  max(4 x the S/B drift at d, 1.0) with a different argmax), or if the target prefers a by more
  than the calibrated bound (``S_d[a] - S_d[b] > bound``, B_d preferring a too): no numeric drift
  explains b, with or without the speculative path's rows;
- ``numeric-drift`` if the target's batched row itself prefers b, or the gap is within the
  bound: a near-tie;
- ``inconclusive`` when neither rows nor re-scoring are available, re-scoring failed, b lies
  outside a server's recorded top-K by less than the bound, or fewer than 4 positions calibrate.

Temperature > 0: `equiv.verdicts.sampling.verdict`, from comparisons with the placebo.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import replace

import numpy as np
import numpy.typing as npt

from equiv.errors import EngineError
from equiv.json_types import JSONDict
from equiv.records import Comparison, Generation
from equiv.records.verdict import RUN_PRECEDENCE, Label, Verdict
from equiv.verdicts.temp0.divergence_rate import DivergenceRate
from equiv.verdicts.temp0.drift_bound import (
    CALIBRATION_POSITIONS,
    MIN_CALIBRATION,
    DriftBound,
    drift_bound,
    gap_movements,
    top_of,
)
from equiv.verdicts.temp0.misconfiguration import _WHY as _WHY  # read by tests/test_api.py
from equiv.verdicts.temp0.misconfiguration import (
    fingerprint_differences,
    misconfiguration,
    speculation_problem,
)
from equiv.verdicts.verdict_evidence import RescoredGaps, RunEvidence, Temp0Evidence

__all__ = [
    "Rescorer",
    "classify_temp0",
    "fingerprint_differences",
    "misconfiguration",
    "run_verdict",
    "speculation_problem",
]

OWN_ARGMAX_TOL = 1e-4

Rescorer = Callable[[Sequence[int], Sequence[int], bool], npt.NDArray[np.float32]]


def _without_rows(
    baseline: Generation, ev: Temp0Evidence, *, name: Callable[[int], str] = str
) -> Verdict:
    """What the baseline's own top-k at the divergence says, when nothing else is known (a
    server: no rows, no re-scoring, and no probabilities for speculative-step tokens)."""
    d, a, b = ev.position, ev.baseline_token, ev.speculative_token
    why = "no logits rows and no re-scoring available"
    alts = baseline.alternatives[d] if d < len(baseline.alternatives) else None
    if alts is None or a not in alts.ids:
        return Verdict(Label.INCONCLUSIVE, why, ev.to_dict())
    if b not in alts.ids:
        return Verdict(
            Label.INCONCLUSIVE,
            f"{why}; the speculative token {name(b)} is not among the baseline's top "
            f"{len(alts.ids)} at token {d}: far from a tie",
            replace(ev, outside_baseline_top=True).to_dict(),
        )
    rank = alts.ids.index(b)
    gap = alts.logits[alts.ids.index(a)] - alts.logits[rank]
    return Verdict(
        Label.INCONCLUSIVE,
        f"{why}; on the baseline's row at token {d} the speculative token {name(b)} is "
        f"{gap:.4f} below {name(a)} (rank {rank + 1}): "
        + ("a near-tie, as batching drift flips" if gap < 1.0 else "wider than drift usually is"),
        replace(ev, baseline_gap=gap).to_dict(),
    )


def classify_temp0(
    comparison: Comparison,
    baseline: Generation,
    speculative: Generation,
    *,
    differences: Sequence[str] = (),
    rescore: Rescorer | None = None,
) -> Verdict:
    if differences:
        same = "outputs identical" if comparison.identical else "outputs differ"
        return misconfiguration(differences, same)
    div = comparison.divergence
    if comparison.identical or div is None:
        return Verdict(
            Label.EQUIVALENT,
            f"token IDs identical over {comparison.n_baseline} tokens",
            {"drift": comparison.drift.to_dict() if comparison.drift is not None else None},
        )
    d, a, b = div.position, div.baseline_token, div.speculative_token
    if a is None or b is None:
        return Verdict(Label.INCONCLUSIVE, f"one path ended at token {d}; nothing to compare")
    name = div.token_name  # 'text' (id N): reasons name tokens by their text
    ev = Temp0Evidence(d, a, b, div.margin_baseline, div.margin_speculative)
    rows = speculative.logits
    used = rows[d] if rows is not None and d < rows.shape[0] else None
    if used is not None and float(used[b]) < float(used.max()) - OWN_ARGMAX_TOL:
        return Verdict(
            Label.SAMPLER_BUG,
            f"at token {d} the speculative path emitted {name(b)} although its own logits "
            f"prefer {name(int(used.argmax()))} by {float(used.max() - used[b]):.4f}",
            replace(ev, own_argmax=int(used.argmax())).to_dict(),
        )
    if rescore is None:
        if used is not None and (div.margin_baseline or 0) >= -OWN_ARGMAX_TOL:
            return Verdict(
                Label.NUMERIC_DRIFT,
                f"at token {d} each path emitted its own argmax (margins "
                f"{div.margin_baseline:.4f} and {div.margin_speculative:.4f}); the target "
                "could not be re-scored to size the drift",
                ev.to_dict(),
            )
        return _without_rows(baseline, ev, name=name)
    try:
        single_rows, batched_rows = _calibration_rows(baseline, d, rescore)
    except EngineError as exc:
        return Verdict(
            Label.INCONCLUSIVE,
            f"re-scoring the target at token {d} failed ({exc}); the generations are kept and "
            "--resume redoes it",
            replace(ev, rescore_failed=True).to_dict(),
        )
    return _temp0_rule(ev, used, single_rows, batched_rows, name=name)


def _calibration_rows(
    baseline: Generation, d: int, rescore: Rescorer
) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.float32]]:
    """The target's single-token and batched rows over the baseline's first
    ``max(d + 1, CALIBRATION_POSITIONS)`` tokens: position d and the positions that calibrate
    what drift does to the gaps between candidates. Single-token rows are the baseline's own
    (full rows, or the top-k it recorded) where it has them, else re-scored. The rows are not
    copied (32 full rows are 32 MB): the rule reads a few candidates of each."""
    n = min(len(baseline.tokens), max(d + 1, CALIBRATION_POSITIONS))
    tokens = list(baseline.tokens[:n])
    batched = np.asarray(rescore(baseline.prompt_tokens, tokens, True))
    if baseline.logits is not None and baseline.logits.shape[0] >= n:
        single = baseline.logits[:n]
    elif len(baseline.alternatives) >= n and all(alt.ids for alt in baseline.alternatives[:n]):
        single = np.full(batched.shape, -np.inf, dtype=np.float32)
        for i, alt in enumerate(baseline.alternatives[:n]):
            single[i, list(alt.ids)] = alt.logits
    else:
        single = np.asarray(rescore(baseline.prompt_tokens, tokens, False))
    return single, batched


def _outside_top_k(
    d: int,
    na: str,
    nb: str,
    floor: float,
    top: int,
    calibration: DriftBound | None,
    ev: JSONDict,
) -> Verdict:
    """The rule where the speculative token ``nb`` lies outside a server's recorded top
    ``top`` single-token candidates, the target preferring ``na`` by more than ``floor``."""
    if calibration is not None and floor > calibration.bound:
        return Verdict(
            Label.SAMPLER_BUG,
            f"at token {d} the speculative token {nb} is not among the target's top {top} "
            f"(single-token): the target prefers {na} by more than {floor:.4f}, beyond the "
            f"{calibration.bound:.4f} that evaluation-path drift moves a gap between candidates "
            f"here ({calibration.describe()})",
            ev,
        )
    return Verdict(
        Label.INCONCLUSIVE,
        f"at token {d} the speculative token {nb} is outside the target's recorded top {top}; "
        "raise --top-k-record to see how far",
        ev,
    )


def _calibrated(
    d: int,
    na: str,
    nb: str,
    gap_single: float,
    gap_batched: float,
    calibration: DriftBound | None,
    ev: JSONDict,
) -> Verdict:
    """The rule where both rows rank ``na`` first: a near-tie within what drift moves a gap
    between candidates here, or a token the speculative path should not have emitted."""
    if calibration is None:
        return Verdict(
            Label.INCONCLUSIVE,
            f"at token {d} the target prefers {na} over {nb} by {gap_single:.4f}, but the baseline "
            f"has too few tokens (< {MIN_CALIBRATION} other positions) to calibrate what drift "
            "does to such gaps; raise --max-tokens",
            ev,
        )
    if gap_single <= calibration.bound + OWN_ARGMAX_TOL:
        return Verdict(
            Label.NUMERIC_DRIFT,
            f"near-tie at token {d}: the target prefers {na} over {nb} by {gap_single:.4f} "
            f"(single-token) and {gap_batched:.4f} (batched), within the {calibration.bound:.4f} "
            f"that evaluation-path drift moves a gap between candidates here "
            f"({calibration.describe()})",
            ev,
        )
    return Verdict(
        Label.SAMPLER_BUG,
        f"at token {d} the target prefers {na} over {nb} by {gap_single:.4f} (single-token) and "
        f"{gap_batched:.4f} (batched), beyond the {calibration.bound:.4f} that evaluation-path "
        f"drift moves a gap between candidates here ({calibration.describe()}); the speculative "
        "path should not have emitted it",
        ev,
    )


def _temp0_rule(
    at: Temp0Evidence,
    used: npt.NDArray[np.float32] | None,
    single_rows: npt.NDArray[np.float32],
    batched_rows: npt.NDArray[np.float32],
    *,
    name: Callable[[int], str] = str,
) -> Verdict:
    """The calibrated temp-0 rule at the divergence ``at`` (module docstring). ``name`` gives a
    token as reasons show it."""
    d, a, b = at.position, at.baseline_token, at.speculative_token
    na, nb = name(a), name(b)
    # Position d in float64 (two rows); the calibration positions read only their candidates.
    single = single_rows[d].astype(np.float64)
    batched = batched_rows[d].astype(np.float64)
    both = np.isfinite(single) & np.isfinite(batched)
    drift_d = float(np.abs(single[both] - batched[both]).max()) if both.any() else 0.0
    gap_batched = float(batched[a] - batched[b])
    calibration = drift_bound(
        np.delete(gap_movements(single_rows, batched_rows), d) if len(single_rows) > 1 else []
    )
    gaps = RescoredGaps(gap_batched, drift_d, calibration, _rows_evidence(single, batched, a, b))
    if used is not None:
        deviation = float(np.abs(used.astype(np.float64)[both] - batched[both]).max())
        gaps = replace(gaps, used_row_deviation=deviation)
        if deviation > max(4 * drift_d, 1.0) and int(used.argmax()) != int(batched.argmax()):
            return Verdict(
                Label.SAMPLER_BUG,
                f"at token {d} the logits the speculative sampler used are not the target's: "
                f"max |Δlogit| {deviation:.3f} from the target's batched re-scoring, while "
                f"batching moves them by {drift_d:.3f} (a row read from the wrong position?)",
                replace(at, rescored=gaps).to_dict(),
            )
    # The batched row first: where the target, evaluated as verification does, itself prefers b,
    # b is what drift gives, even when b lies outside a server's recorded single-token top K.
    known = np.isfinite(single[b])
    gap_single = float(single[a] - single[b]) if known else None
    floor = None if known else float(single[a] - single[np.isfinite(single)].min())
    gaps = replace(gaps, gap_single=gap_single, gap_single_at_least=floor)
    ev = replace(at, rescored=gaps).to_dict()  # the verdict's evidence from here on
    single_gap = f"{gap_single:.4f}" if gap_single is not None else f"more than {floor:.4f}"
    if gap_batched <= OWN_ARGMAX_TOL:
        return Verdict(
            Label.NUMERIC_DRIFT,
            f"at token {d} the target itself, evaluated in a batch as verification does, prefers "
            f"{nb} (gap {gap_batched:.4f}) where single-token evaluation prefers {na} by "
            f"{single_gap}: numeric drift between the evaluation paths",
            ev,
        )
    if floor is not None:  # a server's row: b is not among its top K
        return _outside_top_k(d, na, nb, floor, int(np.isfinite(single).sum()), calibration, ev)
    assert gap_single is not None
    return _calibrated(d, na, nb, gap_single, gap_batched, calibration, ev)


def _rows_evidence(
    single: npt.NDArray[np.float64], batched: npt.NDArray[np.float64], a: int, b: int
) -> dict[str, list[list[float]]]:
    """The target's top candidates at the divergence, single-token and batched (evidence)."""

    def top(row: npt.NDArray[np.float64]) -> list[list[float]]:
        order = top_of(row, np.flatnonzero(np.isfinite(row)), 8)
        ids = [*order.tolist(), *(t for t in (a, b) if t not in order and np.isfinite(row[t]))]
        return [[int(t), round(float(row[t]), 5)] for t in ids]

    return {"single_token": top(single), "batched": top(batched)}


def run_verdict(
    labels: Sequence[str], differences: Sequence[str] = (), rate: DivergenceRate | None = None
) -> Verdict:
    """One label for the whole run, from the per-prompt labels and, at temp 0, the rate of
    divergences against the placebo's (`equiv.verdicts.temp0.divergence_rate`): more divergences
    than drift can make is a sampler bug even where each one alone is a near-tie."""
    counts = Counter(labels)
    ev = RunEvidence(dict(counts), tuple(differences), rate).to_dict()
    if rate is not None and rate.excess and not counts.get(Label.MISCONFIGURATION.value):
        return Verdict(
            Label.SAMPLER_BUG,
            f"the speculative path diverges more often than numeric drift can make it "
            f"diverge ({rate.divergences} divergences in {rate.exposure} positions, "
            f"{rate.flips} drift flips in {rate.positions}; p = {rate.p_value:.2g}): a lossy "
            "acceptance rule, such as one that accepts the target's runner-up, even where "
            "each divergence alone is a near-tie",
            ev,
        )
    total = len(labels)
    for label in RUN_PRECEDENCE:
        if counts.get(label.value):
            n = counts[label.value]
            reason = {
                Label.MISCONFIGURATION: "the two paths were not set up as the same experiment",
                Label.SAMPLER_BUG: f"{n} of {total} prompt(s) show tokens the speculative path's "
                "logits do not support: a sampler-implementation bug",
                Label.NUMERIC_DRIFT: f"{n} of {total} prompt(s) differ only by numeric drift "
                "(near-ties flipped by batched vs single-token kernels); no sampler bug found",
                Label.INCONCLUSIVE: f"{n} of {total} prompt(s) lack the evidence for a verdict",
                Label.EQUIVALENT: f"all {total} prompt(s) equivalent",
            }[label]
            return Verdict(label, reason, ev)
    return Verdict(Label.INCONCLUSIVE, "no results", ev)
