"""A sampling run in looks (``looks`` > 1): the seeds in rounds over every prompt still running,
each prompt judged after each round and stopped at its first conclusive look, the run judged on
every prompt's seeds pooled and stopped, every prompt with it, where that answer is conclusive.

Every decision is a pure function of the file's results, and the run's answer is written before
the prompts it stops, so a resumed run decides as the interrupted one did. The runner runs each
round's seeds (``run_batch``); the judgements are `equiv.run.judging`'s.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable, Sequence

from equiv.config import RunConfig
from equiv.records import AnalysisRecord, ResultRecord, ResultsFile, analysis_key
from equiv.run.judging import SamplingJudge, group_by_prompt
from equiv.run.plan import PlanItem
from equiv.run.resume import ResumePlan
from equiv.verdicts.sampling.run_verdict import RUN_STOPPING
from equiv.verdicts.stats.sequential import schedule, stops

__all__ = ["run_in_looks"]


def run_in_looks(
    items: Sequence[PlanItem],
    left: ResumePlan,
    *,
    config: RunConfig,
    results: ResultsFile,
    judge: SamplingJudge,
    run_batch: Callable[[ResumePlan], list[ResultRecord]],
) -> tuple[list[ResultRecord], list[AnalysisRecord]]:
    """The new results and analyses of a sampling run with ``config.looks`` > 1: the seeds in
    rounds (`sequential.schedule`) over every prompt still running. After each round each such
    prompt is judged on the seeds it has and stops at the first look that `sequential.stops`
    it; the run is judged on every prompt's seeds pooled, and where that answer is conclusive
    (`RUN_STOPPING`) the run stops, every prompt with it (the last look always does).
    ``run_batch`` runs what ``left`` (narrowed to one round) has to do and returns its
    results."""
    by_prompt = group_by_prompt(items)
    contents = results.read()
    analysed = {a.key for a in contents.analyses}
    decided = judge.recorded_run(contents.runs)
    running = [key for key in by_prompt if analysis_key(key) not in analysed]
    todo = {item.key for item in left.todo}
    new: list[ResultRecord] = []
    analyses: list[AnalysisRecord] = []
    for look in schedule(len(config.seeds), config.looks):
        batch = [i for key in running for i in by_prompt[key][: look.seeds] if i.key in todo]
        if batch and decided is None:
            first = left.determinism and not new
            new += run_batch(dataclasses.replace(left, todo=tuple(batch), determinism=first))
            todo -= {i.key for i in batch}
        done = {r.key: r for r in results.read().results}  # once per look
        judged = {
            key: record
            for key in running
            if (record := judge.judge_prompt(by_prompt[key][: look.seeds], done)) is not None
        }
        if judge.pool and decided is None:
            labels = Counter(a.judged.label for a in results.read().analyses)
            labels.update(r.judged.label for r in judged.values())
            run = judge.judge_run_at(by_prompt, done, labels, look)
            if look.last or run.verdict.label in RUN_STOPPING:
                decided = run
                results.append_run(run.record())
        stopped = decided.stopping if decided is not None else None
        ends = stopped is not None and stopped.look == look.index
        for key, record in judged.items():
            if ends or stops(record.judged.label, look):
                by_run = ends and not stops(record.judged.label, look)
                analyses.append(judge.finish_prompt(record, look, by_run=by_run))
                running.remove(key)
        if ends:
            break
    return new, analyses
