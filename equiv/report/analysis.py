"""Views of ``analysis`` records (temperature > 0): each distribution test's statistic, p-value
(and Holm-adjusted p where recorded), alpha and power, the record's other figures, and its charts
(observed vs expected) drawn as SVG bars; plus a few of the prompt's seed records as examples,
since one card per seed would not fit in a report. Records are read generically: a missing field
shows as "-", a chart of an unknown shape is left out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import cast

from markupsafe import Markup

from equiv.json_types import JSONObject, JSONValue, json_list
from equiv.records import AnalysisRecord
from equiv.records.verdict import Label, Verdict
from equiv.report.header import fmt
from equiv.report.prompt_view import PromptView, evidence_rows, number, record_verdict
from equiv.report.svg import grouped_chart

__all__ = ["MAX_EXAMPLES", "AnalysisView", "TestView", "analysis_view", "sampling_verdict"]

#: Seed records shown in full per analysed prompt (those that differ first).
MAX_EXAMPLES = 2
_SERIES = {"baseline": "d-base", "speculative": "d-spec", "observed": "s-obs", "expected": "s-exp"}
_SKIP = frozenset(
    {"kind", "key", "suite", "prompt_id", "mode", "tests", "verdict", "charts", "consistency"}
)


@dataclass(frozen=True)
class TestView:
    name: str
    statistic: str
    p_value: str
    p_adjusted: str
    alpha: str
    n: str
    df: str
    power: str
    effect: str
    detail: str
    rejects: bool  # the (adjusted, where recorded) p-value is below alpha


@dataclass(frozen=True)
class AnalysisView:
    anchor: str
    key: str
    suite: str
    label: str
    reason: str
    evidence: tuple[tuple[str, str], ...]
    figures: tuple[tuple[str, str], ...]
    tests: tuple[TestView, ...]
    charts: tuple[tuple[str, Markup], ...]  # (caption, svg)
    examples: tuple[PromptView, ...]
    seeds: int


def _test(data: JSONObject) -> TestView:
    p = number(data.get("p_adjusted", data.get("p_value")))
    alpha = number(data.get("alpha"))
    return TestView(
        name=fmt(data.get("name")),
        statistic=fmt(data.get("statistic")),
        p_value=fmt(data.get("p_value")),
        p_adjusted=fmt(data.get("p_adjusted")),
        alpha=fmt(data.get("alpha")),
        n=fmt(data.get("n")),
        df=fmt(data.get("df")),
        power=fmt(data.get("power")),
        effect=fmt(data.get("effect")),
        detail=fmt(data.get("detail")),
        rejects=p is not None and alpha is not None and p < alpha,
    )


def _category(name: str, vocab: Mapping[int, str]) -> str:
    """A category as shown: a token ID becomes its text where some output emitted it."""
    return vocab.get(int(name), f"#{name}") if name.isdigit() else name


def _charts(
    name: str, chart: JSONValue, vocab: Mapping[int, str]
) -> list[tuple[str, Markup | None]]:
    """Charts of one entry of an analysis record's ``charts``: ``{"observed": [...],
    "expected": [...]}``, ``{path: {"observed": ..., "expected": ...}}`` (one chart per path), or
    ``{series: {category: count}}`` (token IDs as categories); anything else draws nothing."""
    title = name.replace("_", " ")
    if not isinstance(chart, Mapping):
        return []
    if isinstance(chart.get("observed"), list):
        obs = cast("list[JSONValue]", chart["observed"])
        exp = cast("Sequence[JSONValue]", chart.get("expected") or [])  # a list, as written
        cats = [str(i + 1) for i in range(max(len(obs), len(exp)))]
        series = [
            ("observed", [number(v) for v in obs], "s-obs"),
            ("expected", [number(v) for v in exp], "s-exp"),
        ]
        chart_svg = grouped_chart(
            cats, series, title=title, x_label="bin", y_label="count (tokens)"
        )
        return [(f"{title}: observed vs expected", chart_svg)]
    groups = {str(k): v for k, v in chart.items() if isinstance(v, Mapping)}
    if groups and all(isinstance(g.get("observed"), list) for g in groups.values()):
        return [c for g, sub in groups.items() for c in _charts(f"{name} ({g})", sub, vocab)]
    if not groups:
        return []
    totals: dict[str, float] = {}
    for counts in groups.values():
        for cat, v in counts.items():
            totals[str(cat)] = totals.get(str(cat), 0.0) + (number(v) or 0.0)
    cats = sorted(totals, key=lambda c: -totals[c])[:20]
    series = [
        (g, [number(counts.get(c)) for c in cats], _SERIES.get(g, f"s-{i % 2}"))
        for i, (g, counts) in enumerate(groups.items())
    ]
    labels = [_category(c, vocab) for c in cats]
    caption = f"{title}: {' vs '.join(groups)} (most frequent {len(cats)})"
    chart_svg = grouped_chart(labels, series, title=title, x_label="token", y_label="count")
    return [(caption, chart_svg)]


def sampling_verdict(analysis: AnalysisRecord | None, seed: int | None) -> Verdict:
    """The label a seed record is shown with: its prompt's distribution test decides, not the
    seed (outputs of two samplers differ at temperature > 0 without anything being wrong)."""
    if analysis is None:
        return Verdict(Label.INCONCLUSIVE, f"seed {seed}: no distribution analysis recorded yet")
    verdict = record_verdict(analysis)
    return Verdict(verdict.label, f"seed {seed}, one sample of the test above: {verdict.reason}")


def _figure_rows(record: AnalysisRecord) -> list[tuple[str, str]]:
    """The record's figures as ``(name, value)`` rows, nested tables flattened into their
    names (the placebo's tests go to the tests table instead)."""
    figures: list[tuple[str, str]] = []
    for key, value in record.figures.items():
        if key in _SKIP:
            continue
        if key == "placebo" and isinstance(value, Mapping):
            value = {k: v for k, v in value.items() if k != "tests"}
        if isinstance(value, Mapping):
            for k, v in value.items():
                if isinstance(v, Mapping):
                    figures.extend(
                        (f"{key} {k} {kk}".replace("_", " "), fmt(vv)) for kk, vv in v.items()
                    )
                else:
                    figures.append((f"{key} {k}".replace("_", " "), fmt(v)))
        else:
            figures.append((key.replace("_", " "), fmt(value)))
    return figures


def analysis_view(
    i: int,
    record: AnalysisRecord,
    vocab: Mapping[int, str],
    examples: Sequence[PromptView] = (),
    seeds: int = 0,
) -> AnalysisView:
    verdict = record_verdict(record)
    charts = record.figures.get("charts")
    charts = charts if isinstance(charts, Mapping) else {}
    drawn = [c for k, v in charts.items() for c in _charts(str(k), v, vocab)]
    placebo = record.figures.get("placebo")
    placebo = placebo if isinstance(placebo, Mapping) else {}
    consistency = record.figures.get("consistency")
    # Each path's one-sample tests against the instrument's rows alone: shown, never decisive.
    one_sample = [*json_list(placebo.get("tests") or []), *json_list(consistency or [])]
    figures = _figure_rows(record)
    if "same_seed_agreement" in record.figures:
        figures.append(
            (
                "same seed agreement, read as",
                "no evidence either way: a server's plain and speculative paths need not share "
                "a random stream per seed",
            )
        )
    if one_sample:
        figures.append(
            (
                "one-sample tests",
                "each path against the instrument's rows alone (Holm-adjusted among its own); "
                "the baseline's is the placebo: never a sampler-bug by itself",
            )
        )
    return AnalysisView(
        anchor=f"a{i}",
        key=record.key,
        suite=record.suite,
        label=verdict.label.value,
        reason=verdict.reason,
        evidence=evidence_rows(verdict.evidence),
        figures=tuple(figures),
        tests=tuple(_test(t) for t in [*record.tests, *one_sample] if isinstance(t, Mapping)),
        charts=tuple((caption, svg) for caption, svg in drawn if svg is not None),
        examples=tuple(examples),
        seeds=seeds,
    )
