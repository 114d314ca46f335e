"""What each verdict rule gathers as evidence, typed while the rule runs.

A rule builds one of these (`Temp0Evidence` at temperature 0, `SamplingEvidence` above it,
`RunEvidence` for the whole run); its ``to_dict`` is the verdict's ``evidence`` as results files
hold it (same keys, in the same order, rounded as before), and every reader (report, plugin,
diagnose, resume) reads that. A key a rule did not reach is absent, not None: ``to_dict`` writes
only what the rule found.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from equiv.json_types import JSONDict

if TYPE_CHECKING:  # classify imports this module
    from equiv.verdicts.sampling.analysis_record import PooledDrift, ScoredTest
    from equiv.verdicts.sampling.fidelity import Fidelity
    from equiv.verdicts.temp0.divergence_rate import DivergenceRate
    from equiv.verdicts.temp0.drift_bound import DriftBound

__all__ = [
    "BatchedFigures",
    "PowerEvidence",
    "RescoredGaps",
    "RunEvidence",
    "SamplingEvidence",
    "Temp0Evidence",
]

#: The target's top candidates at a divergence, ``[[token, logit], ...]`` per evaluation path.
TargetRows = dict[str, list[list[float]]]


def _round6(value: float | None) -> float | None:
    return None if value is None else round(value, 6)


@dataclass(frozen=True)
class RescoredGaps:
    """What the target's re-scored rows say at a temp-0 divergence (`classify._temp0_rule`).

    ``gap_single`` and ``gap_single_at_least`` are None until the rule gets past the check of the
    row the speculative sampler used; then exactly one is set: the single-token gap, or, where the
    speculative token is outside a server's recorded top K, the least it can be.
    """

    gap_batched: float
    drift_at_divergence: float
    drift_bound: DriftBound | None
    target_rows: TargetRows
    used_row_deviation: float | None = None  # None: the speculative path reported no row
    gap_single: float | None = None
    gap_single_at_least: float | None = None

    def to_dict(self) -> JSONDict:
        gap = self.gap_batched
        data: JSONDict = {
            "gap_batched": round(gap, 6) if math.isfinite(gap) else None,
            "drift_at_divergence": round(self.drift_at_divergence, 6),
            "drift_bound": None if self.drift_bound is None else self.drift_bound.to_dict(),
            "target_rows": self.target_rows,
        }
        if self.used_row_deviation is not None:
            data["used_row_deviation"] = round(self.used_row_deviation, 6)
        if self.gap_single is not None or self.gap_single_at_least is not None:
            data["gap_single"] = _round6(self.gap_single)
        if self.gap_single_at_least is not None:
            data["gap_single_at_least"] = round(self.gap_single_at_least, 6)
        return data


@dataclass(frozen=True)
class Temp0Evidence:
    """The evidence of a temp-0 verdict at the first divergent position (`classify_temp0`): the
    two tokens and their margins, then what decided it, one of: the speculative path's own
    argmax (its row prefers another token), the baseline's top-k gap (no rows, no re-scoring;
    ``outside_baseline_top``: the speculative token is not among them), a failed re-scoring,
    or the re-scored gaps."""

    position: int
    baseline_token: int
    speculative_token: int
    margin_baseline: float | None
    margin_speculative: float | None
    own_argmax: int | None = None
    baseline_gap: float | None = None
    outside_baseline_top: bool = False
    rescore_failed: bool = False  # a resumed run redoes this result
    rescored: RescoredGaps | None = None

    def to_dict(self) -> JSONDict:
        data: JSONDict = {
            "position": self.position,
            "baseline_token": self.baseline_token,
            "speculative_token": self.speculative_token,
            "margin_baseline": self.margin_baseline,
            "margin_speculative": self.margin_speculative,
        }
        if self.own_argmax is not None:
            data["own_argmax"] = self.own_argmax
        if self.outside_baseline_top:
            data["baseline_gap"] = None
        elif self.baseline_gap is not None:
            data["baseline_gap"] = round(self.baseline_gap, 5)
        if self.rescore_failed:
            data["rescore_failed"] = True
        if self.rescored is not None:
            data.update(self.rescored.to_dict())
        return data


@dataclass(frozen=True)
class BatchedFigures:
    """What a sampling verdict records of the batched follow-up: the tests that rejected, and
    each test's Holm-adjusted p."""

    rejected: tuple[str, ...]
    p_adjusted: Mapping[str, float]

    def to_dict(self) -> dict[str, list[str] | dict[str, float]]:
        return {"rejected": list(self.rejected), "p_adjusted": dict(self.p_adjusted)}


@dataclass(frozen=True)
class PowerEvidence:
    """The power behind ``equivalent`` (`sampling.verdict._power`): the comparison with the
    placebo at Holm's first step ``alpha``, the temperature test's own power where that test
    ran, and, where the power falls short, the effective tokens and about how many would do."""

    power: float
    alpha: float
    temperature: ScoredTest | None = None
    tokens: int | None = None
    tokens_needed: int | None = None

    def to_dict(self) -> dict[str, float | None]:
        data: dict[str, float | None] = {"power": self.power, "power_alpha": self.alpha}
        if self.temperature is not None:
            data["temperature_power"] = self.temperature.power
        if self.tokens is not None:
            data.update(tokens=self.tokens, tokens_needed=self.tokens_needed)
        return data


@dataclass(frozen=True)
class SamplingEvidence:
    """The evidence of a temp > 0 verdict (`sampling.verdict.classify_sampling`): the tests that
    rejected, the placebo's and the instrument's state, then, where reached, the batched
    follow-up (``followed_up``; ``batched`` None where it could not be answered) or the power."""

    alpha: float
    rejected: tuple[str, ...]
    same_seed_agreement: float
    drift: PooledDrift | None
    placebo_rejected: tuple[str, ...]
    fidelity: Fidelity | None
    limit: str | None = None
    followed_up: bool = False
    batched: BatchedFigures | None = None
    power: PowerEvidence | None = None

    def to_dict(self) -> JSONDict:
        data: JSONDict = {
            "alpha": self.alpha,
            "rejected": list(self.rejected),
            "same_seed_agreement": self.same_seed_agreement,
            "drift": None if self.drift is None else self.drift.to_dict(),
            "placebo_rejected": list(self.placebo_rejected),
            "fidelity": None if self.fidelity is None else self.fidelity.to_dict(),
        }
        if self.limit:
            data["limit"] = self.limit
        if self.followed_up:
            data["batched"] = None if self.batched is None else self.batched.to_dict()
        if self.power is not None:
            data.update(self.power.to_dict())
        return data


@dataclass(frozen=True)
class RunEvidence:
    """The evidence of the run's verdict (`temp0.classify.run_verdict`): the per-prompt labels
    counted, the setup differences, and at temp 0 the divergence rate against the placebo's."""

    counts: Mapping[str, int]
    differences: tuple[str, ...] = ()
    divergence_rate: DivergenceRate | None = None

    def to_dict(self) -> JSONDict:
        data: JSONDict = {"counts": dict(self.counts), "differences": list(self.differences)}
        if self.divergence_rate is not None:
            data["divergence_rate"] = self.divergence_rate.to_dict()
        return data
