"""The whole run as the report shows it, from the results file alone: the conclusion and label
counts, per-suite figures (`equiv.verdicts.runs.summary.summarize`), controls, configuration, every
prompt and analysis, and the overview charts. Computes nothing new.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypedDict, cast

from markupsafe import Markup

from equiv.config import Mode
from equiv.json_types import JSONObject, JSONValue, json_float
from equiv.records import AnalysisRecord, EventRecord, ResultRecord, ResultsFile, analysis_key
from equiv.records.verdict import Label, Verdict
from equiv.report.analysis import MAX_EXAMPLES, AnalysisView, analysis_view, sampling_verdict
from equiv.report.header import Environment, environment, fmt
from equiv.report.prompt_view import LABELS, PromptView, prompt_view, token_texts
from equiv.report.quality_view import QualityView, quality_view
from equiv.report.redact import NOTE, Redactor, make_redactor
from equiv.report.svg import Bar, Strip, bar_chart, strip_chart
from equiv.verdicts.quality.paired import DEFAULT_MARGIN_POINTS
from equiv.verdicts.runs.summary import SuiteSummary, summarize

__all__ = ["RunView", "SuiteRow", "load_run"]


class IndexEntry(TypedDict):
    """One card of the report as its script filters them (embedded as JSON)."""

    id: str
    suite: str
    label: str
    same: bool


@dataclass(frozen=True)
class RunView:
    name: str
    created: str
    conclusion: str
    worst: str
    rate: str  # temp 0: the divergence rate against the placebo's, or empty
    pooled: tuple[str, ...]  # temp > 0: the run's pooled tests and bounds, a line each
    label_counts: tuple[tuple[str, int], ...]
    suites: tuple[SuiteRow, ...]
    events: tuple[tuple[str, bool | None, str], ...]
    differences: tuple[str, ...]
    unread: int  # lines of the results file that could not be read (each in `problems`)
    problems: tuple[str, ...]  # "line N (key): field: what is wrong", one per unread line
    lines: int  # lines in the results file
    torn: bool  # the last line was cut by a crash; `--resume` redoes its result
    command: str
    env: Environment
    header_json: str
    prompts: tuple[PromptView, ...]
    analyses: tuple[AnalysisView, ...]
    charts: tuple[tuple[str, str, Markup], ...]
    index: tuple[IndexEntry, ...]
    suite_names: tuple[str, ...]
    redacted: bool
    note: str
    quality: QualityView


@dataclass(frozen=True)
class SuiteRow:
    suite: str
    prompts: int
    labels: tuple[tuple[str, int], ...]  # the non-zero counts, in label order
    acceptance: float | None
    baseline_tps: float
    speculative_tps: float
    speedup: float | None


def _suite_row(s: SuiteSummary) -> SuiteRow:
    return SuiteRow(
        suite=s.suite,
        prompts=s.prompts,
        labels=tuple((label, s.labels[label]) for label in LABELS if s.labels.get(label)),
        acceptance=s.acceptance,
        baseline_tps=s.baseline_tps,
        speculative_tps=s.speculative_tps,
        speedup=s.measured_speedup,
    )


def _bars(prompts: Sequence[PromptView], value: Callable[[PromptView], float | None]) -> list[Bar]:
    """One bar a prompt where ``value`` has one, coloured by its label."""
    return [
        Bar(p.key, v, f"lbl-{p.label}", f"#{p.anchor}")
        for p in prompts
        if (v := value(p)) is not None
    ]


def _strips(prompts: Sequence[PromptView]) -> list[Strip]:
    """One strip a diverged prompt: each path's margin at the first divergence against the
    drift at that row."""
    return [
        Strip(
            p.key.removesuffix("::temp0"),
            p.divergence.delta,
            (
                ("baseline margin", p.divergence.margin_baseline),
                ("speculative margin", p.divergence.margin_speculative),
            ),
            f"#{p.anchor}",
        )
        for p in prompts
        if p.divergence is not None
    ]


def _charts(prompts: Sequence[PromptView]) -> tuple[tuple[str, str, Markup], ...]:
    acc = _bars(prompts, lambda p: p.speculative.acceptance)
    dl = _bars(prompts, lambda p: p.max_delta_logit)
    kl = _bars(prompts, lambda p: p.mean_kl)
    strips = _strips(prompts)
    out = [
        (
            "Draft acceptance per prompt",
            "accepted / drafted tokens; bar colour is the label",
            bar_chart(
                acc,
                title="draft acceptance per prompt",
                y_max=1.0,
                x_label="prompt (one bar each)",
                y_label="acceptance",
            ),
        ),
        (
            "Logit drift per prompt: max |Δlogit|",
            "over the rows both paths computed on identical context",
            bar_chart(
                dl,
                title="max |delta logit| per prompt",
                x_label="prompt (one bar each)",
                y_label="max |Δlogit|",
            ),
        ),
        (
            "Logit drift per prompt: mean KL",
            "KL(baseline ‖ speculative), softmax at temperature 1",
            bar_chart(
                kl,
                title="mean KL per prompt",
                x_label="prompt (one bar each)",
                y_label="mean KL (nats)",
            ),
        ),
        (
            "Margin at the first divergence",
            "each path's lead of its own token over the other's, in its own logits, against "
            "the max |Δlogit| between the paths at that row: a margin inside the grey bar is a "
            "near-tie that drift can flip",
            strip_chart(
                strips,
                title="margin at divergence",
                reach_name="max |Δlogit| at the row",
                legend=(("baseline margin", "d-base"), ("speculative margin", "d-spec")),
                x_label="logit units (own token's lead, or |Δlogit|)",
            ),
        ),
    ]
    return tuple((t, c, m) for t, c, m in out if m is not None)


def _analyses(
    analyses: Sequence[AnalysisRecord],
    seeds: Sequence[ResultRecord],
    vocab: Mapping[int, str],
) -> tuple[AnalysisView, ...]:
    """One view per sampled prompt: its analysis record (or a note that there is none yet)
    with a few of its seed records, those whose outputs differ first."""
    by_prompt = {(a.suite, a.prompt_id): a for a in analyses}
    groups: dict[tuple[str, str], list[ResultRecord]] = {}
    for r in seeds:
        groups.setdefault((r.suite, r.prompt_id), []).append(r)
    views = []
    for i, key in enumerate(dict.fromkeys([*by_prompt, *groups])):
        analysis = by_prompt.get(key)
        group = groups.get(key, [])
        picked = sorted(group, key=lambda r: r.comparison.identical)
        examples = [
            prompt_view(f"a{i}s{j}", r, vocab, sampling_verdict(analysis, r.seed))
            for j, r in enumerate(picked[:MAX_EXAMPLES])
        ]
        record = analysis or AnalysisRecord(
            key=analysis_key(f"{key[0]}/{key[1]}"),
            suite=key[0],
            prompt_id=key[1],
            verdict=Verdict(
                Label.INCONCLUSIVE,
                f"no distribution analysis recorded yet for {len(group)} seed record(s): the "
                "run may have been interrupted; rerun with --resume",
            ),
        )
        views.append(analysis_view(i, record, vocab, examples, len(group)))
    return tuple(views)


def _index(prompts: Sequence[PromptView], views: Sequence[AnalysisView]) -> tuple[IndexEntry, ...]:
    """The report's index: every temp-0 prompt, then every sampled one."""
    return (
        *(IndexEntry(id=p.anchor, suite=p.suite, label=p.label, same=p.identical) for p in prompts),
        *(
            IndexEntry(id=a.anchor, suite=a.suite, label=a.label, same=a.label == "equivalent")
            for a in views
        ),
    )


def _redacted(event: EventRecord, redactor: Redactor) -> EventRecord:
    """``event`` with its detail and extra redacted (the redactor maps a dict to a dict)."""
    extra = cast(JSONObject, redactor(dict(event.extra)))
    return dataclasses.replace(event, detail=str(redactor(event.detail)), extra=extra)


def load_run(results_path: str | Path, *, redact: bool = True) -> RunView:
    """Everything the report shows, from the results file alone."""
    results = ResultsFile(results_path)
    header_record = results.header()  # a file without one is not a results file: ResultsError
    contents = results.read()
    rows, analyses = contents.results, contents.analyses
    redactor = make_redactor(header_record.to_dict(), enabled=redact)
    header = cast(JSONObject, redactor(header_record.to_dict()))  # a dict, redacted
    events = [_redacted(e, redactor) for e in contents.events]
    differences = [str(d) for d in cast("list[JSONValue]", header.get("differences") or [])]
    margin = json_float(header_record.config.get("quality_margin", DEFAULT_MARGIN_POINTS))
    summary = summarize(
        rows,
        events,
        analyses,
        differences=differences,
        quality_margin=margin,
        runs=contents.runs,
    )
    vocab = token_texts(rows)
    prompts = tuple(
        prompt_view(f"p{i}", r, vocab)
        for i, r in enumerate(r for r in rows if r.mode is not Mode.SAMPLING)
    )
    views = _analyses(analyses, [r for r in rows if r.mode is Mode.SAMPLING], vocab)
    name = str(redactor(Path(results_path).resolve().parent.name))
    return RunView(
        name=name,
        created=fmt(header.get("created")),
        conclusion=summary.conclusion,
        worst=summary.verdict.label.value if summary.total.prompts else "inconclusive",
        rate="" if summary.divergence_rate is None else summary.divergence_rate.line,
        pooled=() if summary.run is None else summary.run.pooled.lines(),
        label_counts=tuple((label, summary.total.labels.get(label, 0)) for label in LABELS),
        suites=(*(_suite_row(s) for s in summary.suites.values()), _suite_row(summary.total)),
        differences=tuple(differences),
        unread=contents.unreadable,
        problems=tuple(str(redactor(str(p))) for p in contents.problems),
        lines=contents.lines,
        torn=contents.torn,
        events=tuple((e.event, e.ok, e.detail) for e in summary.events),
        command=str(header.get("command", "")),
        env=environment(header),
        header_json=json.dumps(header, indent=1, ensure_ascii=False),
        prompts=prompts,
        analyses=views,
        charts=_charts(prompts),
        index=_index(prompts, views),
        suite_names=tuple(dict.fromkeys([*(p.suite for p in prompts), *(a.suite for a in views)])),
        redacted=redact,
        note=NOTE if redact else "Paths are shown unredacted (--no-redact).",
        quality=quality_view(
            summary.quality,
            rows,
            {p.key.removesuffix("::temp0"): p.anchor for p in prompts},
        ),
    )
