"""Judging a sampling run: each prompt on its seeds at its share of the level, and the run on
every prompt's seeds pooled (`equiv.verdicts.sampling.run_verdict`), each judgement written to
the results file as it is made. The runner decides when to judge (`equiv.run.runner`); what a
judgement is, is here."""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from equiv.config import Mode
from equiv.errors import EngineError
from equiv.records import RUN_KEY, AnalysisRecord, ResultRecord, RunRecord, analysis_key
from equiv.records.verdict import Label
from equiv.run.plan import PlanItem
from equiv.verdicts.sampling.pooled import PooledAnalysis, is_reported
from equiv.verdicts.sampling.prompt_analysis import analyze
from equiv.verdicts.sampling.run_batched import RunBatched, confirm
from equiv.verdicts.sampling.run_verdict import (
    POOLED_SHARE,
    RUN_STOPPING,
    RunJudgement,
    judge_run,
)
from equiv.verdicts.sampling.samples import PathSample, Sample
from equiv.verdicts.sampling.verdict import classify_sampling, needs_batched_evidence
from equiv.verdicts.stats.sequential import STOPPING_LABELS, Look, Stopping, run_schedule

if TYPE_CHECKING:
    from equiv.run.runner import Runner

__all__ = ["RUN_BATCHED_SEEDS", "SamplingJudge", "group_by_prompt"]

#: Over HTTP, the seeds of each prompt whose speculative samples the run's batched follow-up
#: re-scores (the first ones: chosen before any data).
RUN_BATCHED_SEEDS = 32


def group_by_prompt(items: Sequence[PlanItem]) -> dict[str, list[PlanItem]]:
    """The plan's items by prompt key, each prompt's in plan (seed) order."""
    out: dict[str, list[PlanItem]] = {}
    for item in items:
        out.setdefault(item.prompt.key, []).append(item)
    return out


class SamplingJudge:
    """The judgements of one sampling run over ``runner``'s engines and results file: each
    prompt at ``prompt_alpha`` (times a look's share), the run pooled at the pooled share of
    the run's level where ``pool``."""

    def __init__(self, runner: Runner, *, prompt_alpha: float, pool: bool, prompts: int) -> None:
        self.runner = runner
        self.prompt_alpha = prompt_alpha
        self.pool = pool
        config = runner.config
        #: a sampling run's looks (`run_schedule`: a pooled run may look first at fewer seeds);
        #: none at temperature 0 (no seeds)
        sampling = config.mode is Mode.SAMPLING
        self.looks = (
            run_schedule(len(config.seeds), config.looks, prompts, pooled=pool) if sampling else ()
        )
        #: each sample's speculative path re-scored batched by the run's follow-up, by result
        #: key: a later look re-scores only the seeds it adds
        self._batched: dict[str, PathSample] = {}

    def recorded_run(self, runs: Sequence[RunRecord]) -> RunJudgement | None:
        """The run's answer where the file holds it already (a resumed run)."""
        record = next((r for r in runs if r.key == RUN_KEY), None)
        return None if record is None else RunJudgement.of(record)

    def analyze_all(self, items: Sequence[PlanItem]) -> list[AnalysisRecord]:
        """One analysis record per prompt whose seeds are all done and not yet analysed, then
        the run's pooled answer over all of them, if not recorded yet."""
        contents = self.runner.results.read()
        analysed = {a.key for a in contents.analyses}
        done = {r.key: r for r in contents.results}
        out = []
        by_prompt = group_by_prompt(items)
        for key, group in by_prompt.items():
            if analysis_key(key) not in analysed:
                record = self.judge_prompt(group, done)
                if record is not None:
                    self.runner.results.append_analysis(record)
                    out.append(record)
        complete = all(item.key in done for item in items)  # else the answer waits
        if self.pool and complete and self.recorded_run(contents.runs) is None:
            labels = Counter(a.judged.label for a in self.runner.results.read().analyses)
            self.runner.results.append_run(
                self.judge_run_at(by_prompt, done, labels, None).record()
            )
        return out

    @property
    def has_logits(self) -> bool:
        """Both paths report the rows they sampled from (in process)."""
        caps = self.runner.baseline.capabilities, self.runner.speculative.capabilities
        return caps[0].full_logits and caps[1].full_logits

    def judge_prompt(
        self, group: Sequence[PlanItem], done: Mapping[str, ResultRecord]
    ) -> AnalysisRecord | None:
        """The analysis of one prompt over the seeds of ``group`` (their results in ``done``,
        the file's by key), not yet written; None where a seed is missing."""
        key = group[0].prompt.key
        samples = [Sample.of(done[i.key]) for i in group if i.key in done]
        if len(samples) < len(group):
            return None
        has_logits = self.has_logits
        alpha = self.prompt_alpha * self._share(len(group))
        analysis = analyze(samples, alpha=alpha, has_logits=has_logits)
        if not has_logits and needs_batched_evidence(analysis):
            # The prompt's tokens only where they are used: the follow-up re-scores.
            prompt = (
                self.runner.tokenize(group[:1])[key] if self.runner.evidence.can_rescore else []
            )
            batched = self.runner.evidence.batched(prompt, samples, alpha=alpha)
            analysis = dataclasses.replace(analysis, batched=batched)
        verdict = classify_sampling(
            analysis, differences=self.runner.differences, has_logits=has_logits
        )
        record = AnalysisRecord(
            key=analysis_key(key),
            suite=group[0].prompt.suite,
            prompt_id=group[0].prompt.id,
            tests=tuple(t.to_dict() for t in analysis.tests),
            verdict=verdict,
            figures=analysis.figures(),
        )
        return AnalysisRecord.from_dict(record.to_dict())  # as the file holds it

    def _share(self, seeds: int) -> float:
        """The share of a level that the look judging ``seeds`` seeds tests at (1 without
        looks)."""
        return next(look.share for look in self.looks if look.seeds >= seeds)

    def finish_prompt(
        self, record: AnalysisRecord, look: Look, *, by_run: bool, paused: bool = False
    ) -> AnalysisRecord:
        """A sequential prompt's analysis with where it stopped, appended to the file;
        ``by_run``: the run's pooled answer stopped it, not its own; ``paused``: the run gave
        its seeds after ``look`` to more informative prompts (`equiv.run.looks`)."""
        verdict = record.judged
        stopping = Stopping(
            look=look.index,
            looks=look.of,
            seeds=look.seeds,
            budget=len(self.runner.config.seeds),
            alpha=self.prompt_alpha * look.share,
            conclusive=verdict.label in STOPPING_LABELS,
            paused=paused and verdict.label not in STOPPING_LABELS,
        )
        why = stopping.reason
        if stopping.paused:
            why = (
                f"{why}: the run gave its later seeds to the prompts whose positions carry more "
                "of the pooled tests' information"
            )
        if by_run:
            why = f"{why}; the run stopped here: its pooled answer is conclusive"
        record = dataclasses.replace(
            record,
            verdict=dataclasses.replace(verdict, reason=f"{verdict.reason} ({why})"),
            figures={**record.figures, "stopping": stopping.to_dict()},
        )
        record = AnalysisRecord.from_dict(record.to_dict())
        self.runner.results.append_analysis(record)
        return record

    def judge_run_at(
        self,
        by_prompt: Mapping[str, Sequence[PlanItem]],
        done: Mapping[str, ResultRecord],
        labels: Counter[Label],
        look: Look | None,
    ) -> RunJudgement:
        """The run's answer over every prompt's seeds done up to ``look`` (all without looks):
        its tests at the pooled share of the run's level at this look, its bounds at the whole
        of it; over HTTP with the batched follow-up where a pooled test rejects."""
        seeds = look.seeds if look is not None else len(self.runner.config.seeds)
        samples = {
            key: [Sample.of(done[i.key]) for i in group[:seeds] if i.key in done]
            for key, group in by_prompt.items()
        }
        level = self.runner.config.alpha * (look.share if look is not None else 1.0)
        alpha = level * POOLED_SHARE
        has_logits, differences = self.has_logits, self.runner.differences
        run = judge_run(
            samples,
            labels,
            alpha=alpha,
            has_logits=has_logits,
            differences=differences,
            bound_alpha=level,
        )
        # confirmed already: by a prompt's own follow-up, or by the rows the server reported
        rejects = run.pooled.believed().rejected()
        confirmed = labels.get(Label.SAMPLER_BUG, 0) > 0 or any(is_reported(t) for t in rejects)
        if not has_logits and rejects and not confirmed and not differences:
            batched = self._run_batched(by_prompt, samples, run.pooled)
            run = judge_run(
                samples,
                labels,
                alpha=alpha,
                has_logits=has_logits,
                differences=differences,
                batched=batched,
                bound_alpha=level,
            )
        index, of = (look.index, look.of) if look is not None else (1, 1)
        stopping = Stopping(
            look=index,
            looks=of,
            seeds=seeds,
            budget=len(self.runner.config.seeds),
            alpha=alpha,
            conclusive=run.verdict.label in RUN_STOPPING,
        )
        return dataclasses.replace(run, stopping=stopping)

    def _run_batched(
        self,
        by_prompt: Mapping[str, Sequence[PlanItem]],
        samples: Mapping[str, Sequence[Sample]],
        pooled: PooledAnalysis,
    ) -> RunBatched:
        """Over HTTP, after a pooled test rejected: the first `RUN_BATCHED_SEEDS` seeds of each
        pooled prompt (fixed before any data, so the choice cannot favour a verdict), their
        speculative samples re-scored batched and compared with the placebo, pooled
        (`equiv.verdicts.sampling.run_batched`). A sample is re-scored once in a run: a later
        look asks only for the seeds it adds."""
        if not self.runner.evidence.can_rescore:
            return RunBatched(error="the servers cannot re-score batched")
        scored: list[Sample] = []
        try:
            for key, group in samples.items():
                if key in pooled.left_out or not group:
                    continue
                scored += self._batched_prompt(by_prompt[key][:1], group[:RUN_BATCHED_SEEDS])
        except EngineError as exc:
            return RunBatched(error=str(exc).splitlines()[0])
        finally:
            self.runner.evidence.take_cost()
        return confirm(scored, alpha=pooled.alpha)

    def _batched_prompt(self, first: Sequence[PlanItem], samples: Sequence[Sample]) -> list[Sample]:
        """One prompt's ``samples`` with their speculative tokens re-scored batched, each asked
        of the server once in the run (kept in ``_batched``)."""
        missing = [s for s in samples if s.key not in self._batched]
        if missing:
            prompt = self.runner.tokenize(first)[first[0].prompt.key]
            for sample in missing:
                scored = self.runner.evidence.batched_path(prompt, sample.speculative)
                self._batched[sample.key] = scored
        return [s.with_path("speculative", self._batched[s.key]) for s in samples]
