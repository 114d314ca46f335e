"""What each verdict rule gathers as evidence, typed while the rule runs.

A rule builds one of these (`Temp0Evidence` at temperature 0, `SamplingEvidence` above it,
`RunEvidence` for the whole run); its ``to_dict`` is the verdict's ``evidence`` as results files
hold it (same keys, in the same order, rounded as before). A key a rule did not reach is absent,
not None: ``to_dict`` writes only what the rule found.

Each reads back with ``from_dict`` (a `FieldError` names a damaged key), equal to what was
written up to the rounding ``to_dict`` does, with two more exceptions: a batched gap that was not
finite (written as null) reads back as infinite, and the temperature test of `PowerEvidence`, of
which only the power is written, reads back as that power alone (`TestPower`). Keys that files
written before them lack read as their defaults. A verdict keeps its evidence as the file holds
it (`equiv.records.verdict.Verdict`); readers take the typed record from it (``from_dict``, or
`PowerEvidence.of` where a rule may not have reached the power).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from equiv.json_types import JSONDict, JSONObject, JSONValue, json_list, json_object
from equiv.records.codec import decode
from equiv.records.fields import FieldError, Fields, describe

if TYPE_CHECKING:  # classify imports this module; from_dict imports them where it reads them
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
    "TestPower",
]

#: The target's top candidates at a divergence, ``[[token, logit], ...]`` per evaluation path.
TargetRows = dict[str, list[list[float]]]


def _round6(value: float | None) -> float | None:
    return None if value is None else round(value, 6)


def _number(value: JSONValue, where: str) -> float:
    """A number as written (an integer stays one, so it writes back unchanged)."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return value
    raise FieldError(where, f"expected a number, found {describe(value)}")


def _target_rows(data: JSONValue, where: str) -> TargetRows:
    """``target_rows`` as written: per path, ``[token, logit]`` pairs of numbers."""
    rows: TargetRows = {}
    for path, pairs in Fields(data, where).data.items():
        at = f"{where}.{path}"
        rows[path] = [
            [_number(x, f"{at}[{i}]") for x in json_list(pair)]
            for i, pair in enumerate(json_list(pairs))
        ]
    return rows


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

    @classmethod
    def from_dict(cls, data: JSONObject, where: str = "evidence") -> RescoredGaps:
        """The re-scored gaps of a temp-0 verdict's evidence (the keys `Temp0Evidence` holds
        beside its own); a batched gap written as null (not finite) reads as infinite."""
        from equiv.verdicts.temp0.drift_bound import DriftBound

        f = Fields(data, where)
        bound = data.get("drift_bound")
        return cls(
            gap_batched=f.number("gap_batched", math.inf),
            drift_at_divergence=f.number("drift_at_divergence"),
            drift_bound=None if bound is None else decode(DriftBound, bound, f.name("drift_bound")),
            target_rows=_target_rows(data.get("target_rows", {}), f.name("target_rows")),
            used_row_deviation=f.number("used_row_deviation", None),
            gap_single=f.number("gap_single", None),
            gap_single_at_least=f.number("gap_single_at_least", None),
        )


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

    @classmethod
    def from_dict(cls, data: JSONObject, where: str = "evidence") -> Temp0Evidence:
        """A temp-0 verdict's evidence as the file holds it; `FieldError` names a damaged key."""
        f = Fields(data, where)
        outside = "baseline_gap" in data and data["baseline_gap"] is None
        return cls(
            position=f.integer("position"),
            baseline_token=f.integer("baseline_token"),
            speculative_token=f.integer("speculative_token"),
            margin_baseline=f.number("margin_baseline", None),
            margin_speculative=f.number("margin_speculative", None),
            own_argmax=f.integer("own_argmax", None),
            baseline_gap=f.number("baseline_gap", None),
            outside_baseline_top=outside,
            rescore_failed=f.flag("rescore_failed", False),
            rescored=RescoredGaps.from_dict(data, where) if "gap_batched" in data else None,
        )


@dataclass(frozen=True)
class BatchedFigures:
    """What a sampling verdict records of the batched follow-up: the tests that rejected, and
    each test's Holm-adjusted p."""

    rejected: tuple[str, ...]
    p_adjusted: Mapping[str, float]

    def to_dict(self) -> dict[str, list[str] | dict[str, float]]:
        return {"rejected": list(self.rejected), "p_adjusted": dict(self.p_adjusted)}

    @classmethod
    def from_dict(cls, data: JSONObject, where: str = "evidence.batched") -> BatchedFigures:
        return decode(cls, data, where)


@dataclass(frozen=True)
class TestPower:
    """A test of which a verdict's evidence writes the power alone (`PowerEvidence`'s
    temperature test, read back)."""

    __test__ = False  # not a pytest test class

    power: float | None


@dataclass(frozen=True)
class PowerEvidence:
    """The power behind ``equivalent`` (`sampling.verdict._power`): the comparison with the
    placebo at Holm's first step ``alpha``, the temperature test's own power where that test
    ran, and, where the power falls short, the effective tokens and about how many would do."""

    power: float
    alpha: float
    temperature: ScoredTest | TestPower | None = None
    tokens: int | None = None
    tokens_needed: int | None = None

    def to_dict(self) -> dict[str, float | None]:
        data: dict[str, float | None] = {"power": self.power, "power_alpha": self.alpha}
        if self.temperature is not None:
            data["temperature_power"] = self.temperature.power
        if self.tokens is not None:
            data.update(tokens=self.tokens, tokens_needed=self.tokens_needed)
        return data

    @classmethod
    def from_dict(cls, data: JSONObject, where: str = "evidence") -> PowerEvidence:
        """The power a verdict's evidence holds (beside the other keys of `SamplingEvidence`).
        Files written before ``power_alpha`` computed the power at the prompt's ``alpha``."""
        f = Fields(data, where)
        tokens = f.integer("tokens", None)
        return cls(
            power=f.number("power"),
            alpha=f.number("power_alpha") if "power_alpha" in data else f.number("alpha"),
            temperature=(
                TestPower(f.number("temperature_power", None))
                if "temperature_power" in data
                else None
            ),
            tokens=tokens,
            tokens_needed=None if tokens is None else f.integer("tokens_needed", None),
        )

    @classmethod
    def of(cls, evidence: JSONObject) -> PowerEvidence | None:
        """The power of a verdict's ``evidence``; None where its rule did not reach the power
        (a test rejected first, or the verdict is not a sampled prompt's)."""
        return cls.from_dict(evidence) if "power" in evidence else None


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

    @classmethod
    def from_dict(cls, data: JSONObject, where: str = "evidence") -> SamplingEvidence:
        """A sampled prompt's verdict evidence as the file holds it; `FieldError` names a damaged
        key. Files written before the placebo or the fidelity existed read with none."""
        from equiv.verdicts.sampling.analysis_record import PooledDrift
        from equiv.verdicts.sampling.fidelity import Fidelity

        f = Fields(data, where)
        drift, fidelity, batched = (data.get(k) for k in ("drift", "fidelity", "batched"))
        return cls(
            alpha=f.number("alpha"),
            rejected=f.strs("rejected", ()),
            same_seed_agreement=f.number("same_seed_agreement", 0.0),
            drift=None if drift is None else PooledDrift.from_dict(json_object(drift)),
            placebo_rejected=f.strs("placebo_rejected", ()),
            fidelity=None if fidelity is None else Fidelity.from_dict(json_object(fidelity)),
            limit=f.text("limit", None),
            followed_up="batched" in data,
            batched=None if batched is None else BatchedFigures.from_dict(json_object(batched)),
            power=PowerEvidence.of(data),
        )


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

    @classmethod
    def from_dict(cls, data: JSONObject, where: str = "evidence") -> RunEvidence:
        """A run verdict's evidence; the divergence rate's derived figures are computed again."""
        from equiv.verdicts.temp0.divergence_rate import DivergenceRate

        f = Fields(data, where)
        labels = Fields(f.mapping("counts"), f.name("counts"))
        counts = {label: labels.integer(label) for label in labels.data}
        rate = data.get("divergence_rate")
        return cls(
            counts=counts,
            differences=f.strs("differences", ()),
            divergence_rate=None
            if rate is None
            else decode(DivergenceRate, rate, f.name("divergence_rate")),
        )
