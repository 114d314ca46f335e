"""A sampling run in looks (``looks`` > 1): the seeds in rounds over every prompt still running,
each prompt judged after each round and stopped at its first conclusive look, the run judged on
every prompt's seeds pooled and stopped, every prompt with it, where that answer is conclusive.

In a pooled run each round after the first goes only to the prompts that carry the pooled
tests' information (`equiv.verdicts.sampling.allocation.informative`, chosen from the placebo's
rows alone); the others are *paused*: they keep the seeds they have and are judged on them when
the run stops.

Every decision is a pure function of the file's results, and the run's answer is written before
the prompts it stops, so a resumed run decides as the interrupted one did. The runner runs each
round's seeds (``run_batch``); the judgements are `equiv.run.judging`'s.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable, Mapping, Sequence

from equiv.records import AnalysisRecord, ResultRecord, ResultsFile, analysis_key
from equiv.run.judging import SamplingJudge, group_by_prompt
from equiv.run.plan import PlanItem
from equiv.run.resume import ResumePlan
from equiv.verdicts.sampling.allocation import informative
from equiv.verdicts.sampling.run_verdict import RUN_STOPPING, RunJudgement
from equiv.verdicts.sampling.samples import Sample
from equiv.verdicts.stats.sequential import MIN_SEEDS, Look, stops

__all__ = ["run_in_looks"]


class _Looks:
    """One sequential run's state between rounds: the prompts still running, the look each
    was last given seeds at, the items left to run, the run's answer once made."""

    def __init__(
        self,
        items: Sequence[PlanItem],
        left: ResumePlan,
        results: ResultsFile,
        judge: SamplingJudge,
    ) -> None:
        self.by_prompt = group_by_prompt(items)
        self.left, self.results, self.judge = left, results, judge
        contents = results.read()
        analysed = {a.key for a in contents.analyses}
        self.decided: RunJudgement | None = judge.recorded_run(contents.runs)
        self.running = [key for key in self.by_prompt if analysis_key(key) not in analysed]
        self.given: dict[str, Look] = {}  # each running prompt's last look with new seeds
        self.todo = {item.key for item in left.todo}
        self.new: list[ResultRecord] = []
        self.analyses: list[AnalysisRecord] = []

    def chosen(self, done: Mapping[str, ResultRecord]) -> list[str]:
        """The running prompts that get the next round: all at the first look, in a pooled run
        afterwards the informative ones among them (their samples so far, from the file)."""
        if not self.given or not self.judge.pool or len(self.running) < 2:
            return list(self.running)
        samples = {
            key: [Sample.of(done[i.key]) for i in self.seeds_of(key) if i.key in done]
            for key in self.running
        }
        keep = informative(samples, has_logits=self.judge.has_logits)
        return [key for key in self.running if key in keep]

    def seeds_of(self, key: str) -> list[PlanItem]:
        """The items of ``key`` up to the last look it was given seeds at."""
        look = self.given.get(key)
        return self.by_prompt[key][: look.seeds] if look is not None else []

    def round(self, look: Look, chosen: Sequence[str], run_batch: _RunBatch) -> None:
        """Run the seeds of ``look`` that the ``chosen`` prompts lack."""
        batch = [
            i for key in chosen for i in self.by_prompt[key][: look.seeds] if i.key in self.todo
        ]
        if batch and self.decided is None:
            first = self.left.determinism and not self.new
            step = dataclasses.replace(self.left, todo=tuple(batch), determinism=first)
            self.new += run_batch(step)
            self.todo -= {i.key for i in batch}
        for key in chosen:
            self.given[key] = look

    def judge_run(
        self, look: Look, judged: Mapping[str, AnalysisRecord], done: Mapping[str, ResultRecord]
    ) -> None:
        """The run's pooled answer at ``look`` over ``done`` (the file's results by key),
        written where it is conclusive or the last."""
        if not self.judge.pool or self.decided is not None:
            return
        by_prompt = {key: self.seeds_of(key) or group for key, group in self.by_prompt.items()}
        labels = Counter(a.judged.label for a in self.results.read().analyses)
        labels.update(r.judged.label for r in judged.values())
        run = self.judge.judge_run_at(by_prompt, done, labels, look)
        if look.last or run.verdict.label in RUN_STOPPING:
            self.decided = run
            self.results.append_run(run.record())

    def finish(
        self,
        look: Look,
        chosen: Sequence[str],
        judged: Mapping[str, AnalysisRecord],
        done: Mapping[str, ResultRecord],
    ) -> bool:
        """Write the analyses of the prompts that stop at ``look``; True where the run ends
        here (its answer stopped it at this look, or the last look), every prompt not judged
        at this look (paused, or the look too small) then judged on the seeds it has (its
        results in ``done``)."""
        stopped = self.decided.stopping if self.decided is not None else None
        ends = look.last or (stopped is not None and stopped.look == look.index)
        for key in list(self.running):
            record = judged.get(key)
            paused = key not in chosen
            if record is None and ends:  # paused, or not judged at a look this small
                record = self.judge.judge_prompt(self.seeds_of(key), done)
            if record is None or not (ends or stops(record.judged.label, look)):
                continue
            by_run = ends and not stops(record.judged.label, look)
            at = self.given[key]  # ``look`` itself where it was chosen
            self.analyses.append(self.judge.finish_prompt(record, at, by_run=by_run, paused=paused))
            self.running.remove(key)
        return ends


_RunBatch = Callable[[ResumePlan], list[ResultRecord]]


def run_in_looks(
    items: Sequence[PlanItem],
    left: ResumePlan,
    *,
    results: ResultsFile,
    judge: SamplingJudge,
    run_batch: _RunBatch,
) -> tuple[list[ResultRecord], list[AnalysisRecord]]:
    """The new results and analyses of a sampling run with ``--looks`` > 1: the seeds in
    rounds (the judge's looks, `sequential.run_schedule`) over the prompts still running
    (after the first, in a pooled run, the informative ones: `_Looks.chosen`). After each
    round each prompt given seeds is judged on the seeds it has (from its first look with
    `MIN_SEEDS` seeds) and stops at the first look that `sequential.stops` it; the run is
    judged on every prompt's seeds pooled, and where that answer is conclusive
    (`RUN_STOPPING`) the run stops, every prompt with it (the last look always does).
    ``run_batch`` runs what ``left`` (narrowed to one round) has to do and returns its
    results."""
    state = _Looks(items, left, results, judge)
    done = {r.key: r for r in results.read().results}
    for look in judge.looks:
        chosen = state.chosen(done)
        state.round(look, chosen, run_batch)
        done = {r.key: r for r in results.read().results}  # once per look
        judged = {
            key: record
            for key in chosen
            if look.seeds >= MIN_SEEDS or look.last
            if (record := judge.judge_prompt(state.seeds_of(key), done)) is not None
        }
        state.judge_run(look, judged, done)
        if state.finish(look, chosen, judged, done):
            break
    return state.new, state.analyses
