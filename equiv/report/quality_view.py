"""The report's quality section: pass rates of both paths, the flips, and the paired tests, as
`equiv.verdicts.quality.paired` computed them from the grades in the results file. Computes
nothing new.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from markupsafe import Markup

from equiv.json_types import json_object
from equiv.records import ResultRecord
from equiv.report.svg import grouped_chart
from equiv.verdicts.quality.graders import Grade
from equiv.verdicts.quality.paired import Quality, SuiteQuality
from equiv.verdicts.quality.pass_rates import Rate

__all__ = ["FlipRow", "QualitySection", "QualityView", "quality_view"]


@dataclass(frozen=True)
class FlipRow:
    """A temp-0 prompt graded differently on the two paths."""

    prompt: str
    anchor: str | None
    worse: bool
    label: str
    baseline: str  # the grade's reason
    speculative: str


@dataclass(frozen=True)
class RateRow:
    """One suite (or prompt, or the whole run): both paths' pass rates and the tests."""

    name: str
    baseline: str
    speculative: str
    worse: int | None
    better: int | None
    mcnemar_p: str
    answer: str


@dataclass(frozen=True)
class QualitySection:
    title: str
    line: str
    drop: bool
    rows: tuple[RateRow, ...]
    prompts: tuple[RateRow, ...]  # sampling: per prompt over its seeds
    flips: tuple[FlipRow, ...]
    errors: tuple[tuple[str, str], ...]
    chart: Markup | None


@dataclass(frozen=True)
class QualityView:
    sections: tuple[QualitySection, ...]
    note: str  # shown when nothing was graded


def _rate(r: Rate, alpha: float) -> str:
    if not r.n:
        return "-"
    level = f"{100 * (1 - 2 * alpha):g} % CI"
    return f"{r.passed}/{r.n} ({100 * r.value:.1f} %, {level} {100 * r.low:.0f}-{100 * r.high:.0f})"


def _row(s: SuiteQuality, temp0: bool) -> RateRow:
    return RateRow(
        name=s.suite,
        baseline=_rate(s.baseline, s.difference.alpha),
        speculative=_rate(s.speculative, s.difference.alpha),
        worse=s.worse if temp0 else None,
        better=s.better if temp0 else None,
        mcnemar_p="-" if s.mcnemar_p is None else f"{s.mcnemar_p:.3g}",
        answer=s.difference.sentence,
    )


def _grades(records: Iterable[ResultRecord]) -> dict[str, tuple[str, str]]:
    """suite/id of temp-0 records -> both paths' grades, as "outcome: reason"."""
    out = {}
    for r in records:
        if r.seed is not None:
            continue
        try:
            grades = json_object(r.extra["grades"])
            pair = [Grade.from_dict(json_object(grades[p])) for p in ("baseline", "speculative")]
        except (KeyError, TypeError, ValueError):
            continue
        shown = [f"{g.outcome.value}: {g.reason}" for g in pair]
        out[f"{r.suite}/{r.prompt_id}"] = (shown[0], shown[1])
    return out


def _section(
    q: Quality, title: str, anchors: Mapping[str, str], reasons: Mapping[str, tuple[str, str]]
) -> QualitySection:
    rows = (*(_row(s, q.temp0) for s in q.suites), _row(q.total, q.temp0))
    alpha = q.total.difference.alpha
    if q.temp0:
        names = [s.suite for s in q.suites]
        rates = [(s.baseline.value, s.speculative.value) for s in q.suites]
    else:
        names = [p.prompt for p in q.prompts]
        rates = [(p.baseline.value, p.speculative.value) for p in q.prompts]
    chart = grouped_chart(
        names,
        (
            ("baseline", [100 * b for b, _ in rates], "s-obs"),
            ("speculative", [100 * s for _, s in rates], "d-spec"),
        ),
        title="pass rate per suite (%)" if q.temp0 else "pass rate per prompt over seeds (%)",
    )
    return QualitySection(
        title=title,
        line=q.line,
        drop=q.total.difference.significant_drop,
        rows=rows,
        prompts=tuple(
            RateRow(
                p.prompt, _rate(p.baseline, alpha), _rate(p.speculative, alpha), None, None, "-", ""
            )
            for p in q.prompts
        ),
        flips=tuple(
            FlipRow(
                prompt=f.prompt,
                anchor=anchors.get(f.prompt),
                worse=f.worse,
                label=f.label or "inconclusive",
                baseline=reasons.get(f.prompt, ("", ""))[0],
                speculative=reasons.get(f.prompt, ("", ""))[1],
            )
            for f in q.flips
        ),
        errors=q.errors,
        chart=chart,
    )


def quality_view(
    qualities: Iterable[Quality],
    records: Iterable[ResultRecord],
    anchors: Mapping[str, str],
) -> QualityView:
    """``anchors``: suite/id of temp-0 prompts -> their card's anchor in the report."""
    reasons = _grades(records)
    sections = tuple(
        _section(q, "Temperature 0" if q.temp0 else "Sampling (temperature > 0)", anchors, reasons)
        for q in qualities
    )
    note = (
        ""
        if sections
        else "No prompt in this run carries a grader, so quality was not measured "
        "(prompts/README.md, Graded prompts)."
    )
    return QualityView(sections=sections, note=note)
