"""Run-level figures derived once from the result records, shared by the CLI, report and plugin.

They add up the figures of each `Generation` (`equiv.records.generation`: draft counts, decode
tokens and seconds); the rates (acceptance, tokens/s, speed-up) are taken from the sums here.
``summary.json``'s figures are taken from a `Summary` in `equiv.verdicts.runs.run_summary`.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from equiv.json_types import JSONDict, json_float
from equiv.records import (
    RUN_KEY,
    AnalysisRecord,
    EventRecord,
    Generation,
    ResultRecord,
    ResultsContents,
    ResultsFile,
    RunRecord,
    decode_rate,
    speedup,
)
from equiv.records import Control as RunControl
from equiv.records.verdict import Label, Verdict
from equiv.verdicts.quality.paired import (
    DEFAULT_MARGIN_POINTS,
    Quality,
    quality,
    samples_from_records,
)
from equiv.verdicts.quality.pass_rates import QUALITY_ALPHA
from equiv.verdicts.runs.drift import RunDrift, run_drift
from equiv.verdicts.sampling.run_verdict import RunJudgement, judge_results
from equiv.verdicts.temp0.classify import run_verdict
from equiv.verdicts.temp0.divergence_rate import DivergenceRate, divergence_rate

__all__ = ["SuiteSummary", "Summary", "summarize", "summarize_file"]


@dataclass
class SuiteSummary:
    """Counts and speeds of one suite (or of the whole run, as suite ``all``)."""

    suite: str
    prompts: int = 0
    identical: int = 0
    diverged: int = 0
    drafted: int = 0
    accepted: int = 0
    baseline_tokens: int = 0
    baseline_decode_s: float = 0.0
    speculative_tokens: int = 0
    speculative_decode_s: float = 0.0
    labels: Counter[str] = field(default_factory=Counter)
    rounds: int = 0
    aggregated: bool = False  # some draft counts came per request, without rounds (servers)
    draft_s: float = 0.0

    @property
    def acceptance(self) -> float | None:
        return self.accepted / self.drafted if self.drafted else None

    @property
    def baseline_tps(self) -> float:
        return decode_rate(self.baseline_tokens, self.baseline_decode_s)

    @property
    def speculative_tps(self) -> float:
        return decode_rate(self.speculative_tokens, self.speculative_decode_s)

    def add(self, record: ResultRecord) -> None:
        """A result record: temp-0 records count as prompts; sampling seeds only add speed."""
        if record.mode.value == "temp0":
            self.prompts += 1
            self.labels[record.judged.label.value] += 1
            if record.comparison.identical:
                self.identical += 1
            else:
                self.diverged += 1
        self.add_generations(record.baseline, record.speculative)

    def add_generations(self, baseline: Generation, speculative: Generation) -> None:
        """One prompt's speeds and draft counts (every mode, every seed)."""
        self.drafted += speculative.drafted
        self.accepted += speculative.accepted
        self.rounds += speculative.rounds
        self.aggregated |= speculative.per_request
        self.draft_s += speculative.draft_s
        self.baseline_tokens += baseline.decode_tokens
        self.baseline_decode_s += baseline.t_decode_s
        self.speculative_tokens += speculative.decode_tokens
        self.speculative_decode_s += speculative.t_decode_s

    @property
    def mean_accepted(self) -> float | None:
        """Accepted draft tokens per drafting round (unknown where counts came per request)."""
        return self.accepted / self.rounds if self.rounds and not self.aggregated else None

    @property
    def cost_ratio(self) -> float | None:
        """c: draft seconds per drafted token over target seconds per plain decoded token.
        Rounds that drafted nothing still cost a draft evaluation, so c is, if anything, high."""
        if not self.drafted or not self.baseline_tps or not self.draft_s:
            return None  # no drafting, or the engine did not time its draft model
        return (self.draft_s / self.drafted) * self.baseline_tps

    @property
    def predicted_speedup(self) -> float | None:
        """Leviathan et al. (2023), eq. for the walltime improvement: (1 - a^(g+1)) /
        ((1 - a)(g c + 1)), with a the acceptance rate, g the mean drafted tokens per round."""
        a, c = self.acceptance, self.cost_ratio
        if a is None or c is None or not self.rounds or self.aggregated:
            return None
        g = self.drafted / self.rounds
        expected = g + 1 if a >= 1 else (1 - a ** (g + 1)) / (1 - a)
        return expected / (g * c + 1)

    @property
    def measured_speedup(self) -> float | None:
        return speedup(self.baseline_tps, self.speculative_tps)

    def add_analysis(self, record: AnalysisRecord) -> None:
        """A sampling-mode prompt: its verdict over all seeds."""
        self.prompts += 1
        self.labels[record.judged.label.value] += 1

    def to_dict(self) -> JSONDict:
        return {
            **self.__dict__,
            "labels": dict(self.labels),
            "acceptance": self.acceptance,
            "baseline_tps": self.baseline_tps,
            "speculative_tps": self.speculative_tps,
            "mean_accepted": self.mean_accepted,
            "cost_ratio": self.cost_ratio,
            "predicted_speedup": self.predicted_speedup,
            "measured_speedup": self.measured_speedup,
        }


@dataclass
class Summary:
    suites: dict[str, SuiteSummary] = field(default_factory=dict)
    total: SuiteSummary = field(default_factory=lambda: SuiteSummary("all"))
    events: list[EventRecord] = field(default_factory=list)

    differences: list[str] = field(default_factory=list)
    # Graded prompts: one answer per mode present (temp 0 first), see equiv.verdicts.quality.paired.
    quality: tuple[Quality, ...] = ()
    # Every row both paths computed on the same context, pooled (llama-perplexity's figures).
    drift: RunDrift | None = None
    # Temp 0: the divergences' rate against the placebo's drift flips (None: no placebo).
    divergence_rate: DivergenceRate | None = None
    # Temp > 0: the run's own answer from every prompt's evidence pooled (None: not sampled).
    run: RunJudgement | None = None
    # The first path failure on a prompt no rerun has finished since (`RunControl.ENGINE_FAILURE`).
    unfinished: EventRecord | None = None

    @property
    def quality_lines(self) -> list[str]:
        """The quality line of each mode, or a note that no prompt was graded."""
        if not self.quality:
            return ["quality: no graded prompts in this run (add a grader: prompts/README.md)"]
        if len(self.quality) == 1:
            return [self.quality[0].line]
        return [
            q.line.replace("quality:", "quality (temp 0):" if q.temp0 else "quality (sampling):")
            for q in self.quality
        ]

    @property
    def quality_drop(self) -> bool:
        """Graded prompts pass significantly less often on the speculative path."""
        return any(q.total.difference.significant_drop for q in self.quality)

    @property
    def verdict(self) -> Verdict:
        """The run's label: at temp > 0 the pooled answer (`run`), else the prompts' labels
        by `RUN_PRECEDENCE` with, at temp 0, the divergence rate. A run a path's failure cut
        short is inconclusive until a rerun finishes it."""
        if self.unfinished is not None:
            path = self.unfinished.extra.get("path", "a")
            return Verdict(
                Label.INCONCLUSIVE,
                f"the run did not finish: the {path} path failed on {self.unfinished.key} "
                "(control engine-failure); rerun with --resume",
            )
        if self.run is not None:
            return self.run.verdict
        labels = [label for label, n in self.total.labels.items() for _ in range(n)]
        return run_verdict(labels, self.differences, self.divergence_rate)

    @property
    def conclusion(self) -> str:
        """The run's label and a one-line reason, with the label counts and acceptance."""
        t = self.total
        if t.prompts == 0:
            return "no results yet"
        counts = ", ".join(
            f"{t.labels[label.value]} {label.value}" for label in Label if t.labels[label.value]
        )
        acc = f"; draft acceptance {t.acceptance:.2f}" if t.acceptance is not None else ""
        verdict = self.verdict
        return f"{verdict.label.value.upper()}: {verdict.reason} ({counts}{acc})"

    @property
    def failed_controls(self) -> list[EventRecord]:
        return [e for e in self.events if e.failed]


def summarize(
    records: Iterable[ResultRecord],
    events: Iterable[EventRecord] = (),
    analyses: Iterable[AnalysisRecord] = (),
    *,
    differences: Iterable[str] = (),
    quality_margin: float = DEFAULT_MARGIN_POINTS,
    runs: Iterable[RunRecord] = (),
    run_alpha: float | None = None,
    has_logits: bool = True,
) -> Summary:
    """The figures of typed records (a plugin worker's plain data is read as records by
    `equiv.pytest.session.Check.from_dict`). At temp > 0 the run's answer is the one its
    `RunRecord` holds; where none was written (a pytest session checks a prompt at a time) and
    the run's level ``run_alpha`` is given, it is judged here from the results
    (`judge_results`)."""
    summary = Summary(events=list(events), differences=list(differences))
    results = list(records)
    analysed = list(analyses)
    summary.quality = _quality(results, quality_margin)
    for record in results:
        summary.suites.setdefault(record.suite, SuiteSummary(record.suite)).add(record)
        summary.total.add(record)
    summary.drift = run_drift(r.comparison.drift for r in results)
    summary.events = _settled(summary.events, {r.key for r in results})
    summary.unfinished = next(
        (e for e in summary.events if e.event == RunControl.ENGINE_FAILURE.value and e.failed), None
    )
    summary.divergence_rate = divergence_rate(results)
    recorded = next((r for r in runs if r.key == RUN_KEY), None)
    if recorded is not None:
        summary.run = RunJudgement.of(recorded)
    elif run_alpha is not None:
        summary.run = judge_results(
            results,
            analysed,
            alpha=run_alpha,
            has_logits=has_logits,
            differences=summary.differences,
        )
    for analysis in analysed:
        summary.suites.setdefault(analysis.suite, SuiteSummary(analysis.suite)).add_analysis(
            analysis
        )
        summary.total.add_analysis(analysis)
    return summary


def _quality(results: list[ResultRecord], margin_points: float) -> tuple[Quality, ...]:
    """The quality of each mode whose graded prompts have a usable sample (temp 0 first)."""
    graded = samples_from_records(results)
    by_mode = [
        (True, [s for s in graded if s.seed is None]),
        (False, [s for s in graded if s.seed is not None]),
    ]
    # A run "dropped" when either mode's answer does: with both modes graded, each answers at
    # half the level (Bonferroni), so the run's drop has a false-alarm rate of QUALITY_ALPHA.
    modes = [(temp0, samples) for temp0, samples in by_mode if any(s.usable for s in samples)]
    alpha = QUALITY_ALPHA / max(len(modes), 1)
    return tuple(
        q
        for temp0, samples in modes
        if (q := quality(samples, temp0=temp0, margin_points=margin_points, alpha=alpha))
        is not None
    )


def _settled(events: Iterable[EventRecord], finished: set[str]) -> list[EventRecord]:
    """The events, each path failure (`RunControl.ENGINE_FAILURE`) on a prompt that a rerun has
    finished since passing (it stays on record; the run no longer fails a control for it)."""
    return [
        dataclasses.replace(e, ok=True, detail=f"{e.detail} A rerun has finished it since.")
        if e.event == RunControl.ENGINE_FAILURE.value and e.failed and e.key in finished
        else e
        for e in events
    ]


def summarize_file(results: ResultsFile | ResultsContents) -> Summary:
    """The summary of a results file (read once), or of what was read from one."""
    contents = results.read() if isinstance(results, ResultsFile) else results
    header = contents.header
    config = header.config if header is not None else {}
    return summarize(
        contents.results,
        contents.events,
        contents.analyses,
        differences=header.differences if header is not None else (),
        quality_margin=json_float(config.get("quality_margin", DEFAULT_MARGIN_POINTS)),
        runs=contents.runs,
    )
