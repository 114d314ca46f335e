"""The runner: every prompt of a plan through the baseline and the speculative path, each result
appended to the results file the moment it is finished, so a rerun with ``resume`` continues.

The runner sequences the stages of a run: what is left to do (`equiv.run.resume`), the engines'
generations, the evidence a verdict needs (`equiv.run.evidence`: re-scoring, the placebo, the
chain's PIT of sampled tokens), the verdicts (`equiv.verdicts`: comparison, classification,
the analysis of a sampled prompt; a sampling run in looks, `equiv.run.looks`), the controls
(`equiv.run.controls`), and a typed record of each in the file.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from pathlib import Path

from equiv.config import Mode, RunConfig
from equiv.engines.base import Engine, EngineFactory, drafts_from_file, in_flight
from equiv.engines.registry import build_engine
from equiv.errors import EngineError, PathFailedError, PromptError
from equiv.json_types import JSONDict, JSONObject
from equiv.records import AnalysisRecord, Generation, HeaderRecord, ResultRecord, ResultsFile
from equiv.run.controls import (
    SELF_DRAFT_MIN_ACCEPTANCE,
    determinism_event,
    engine_failure_event,
    path_failed,
    self_draft_event,
)
from equiv.run.evidence import BatchOnce, Evidence, SampleEvidence
from equiv.run.header import run_header
from equiv.run.inflight import completed
from equiv.run.judging import SamplingJudge
from equiv.run.lock import ResultsLock
from equiv.run.looks import run_in_looks
from equiv.run.plan import PlanItem, plan
from equiv.run.resume import ResumePlan, plan_resume
from equiv.verdicts.quality.graders import grade_pair
from equiv.verdicts.sampling.run_verdict import POOLED_SHARE
from equiv.verdicts.temp0.classify import classify_temp0
from equiv.verdicts.temp0.compare import compare

__all__ = [
    "SELF_DRAFT_MIN_ACCEPTANCE",
    "PlanItem",
    "Runner",
    "plan",
]

#: ``on_result(item, record, done, total)``: each result as soon as it is in the file.
ProgressFn = Callable[[PlanItem, ResultRecord, int, int], None]


class Runner:
    """Owns the two engines of one run and the results file they fill."""

    def __init__(
        self,
        config: RunConfig,
        factory: EngineFactory | None,
        results_path: str | Path,
        *,
        extra_header: JSONObject | None = None,
        controls: bool = True,
        engines: tuple[Engine, Engine] | None = None,
    ) -> None:
        """``engines``: an already built (baseline, speculative) pair to share (the pytest
        plugin runs both modes on one pair, and passes no factory); else both are built by
        ``factory``."""
        self.config = config
        self.controls = controls
        self.results = ResultsFile(results_path)
        self.extra_header = extra_header or {}
        self.differences: list[str] = []
        self.dropped = 0  # records the last `run` removed to redo them (failed re-scoring)
        self._prompt_alpha = config.alpha
        if factory is None and engines is None:
            raise ValueError("a Runner needs an engine factory or a built pair of engines")
        # One process per results file for the runner's whole life, taken before any model
        # loads: a second run on the same file is refused at once, naming this process.
        self.lock = ResultsLock(results_path).acquire()
        try:
            if engines is None:
                assert factory is not None
                self.baseline = build_engine(factory, config, speculative=False)
                try:
                    self.speculative = build_engine(factory, config, speculative=True)
                except BaseException:
                    self.baseline.close()
                    raise
            else:
                self.baseline, self.speculative = engines
        except BaseException:
            self.lock.release()
            raise
        # Prompts in flight at once: engines that serve concurrent calls say how many.
        self.in_flight = min(in_flight(self.baseline), in_flight(self.speculative))
        self.evidence = Evidence(self.baseline, self.speculative, config)

    def close(self) -> None:
        """Close both engines (each even if the other's close fails), then let go of the lock."""
        try:
            try:
                self.baseline.close()
            finally:
                self.speculative.close()
        finally:
            self.lock.release()

    def __enter__(self) -> Runner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- preparation -------------------------------------------------------------------------
    def tokenize(self, items: Sequence[PlanItem]) -> dict[str, list[int]]:
        """Every prompt's tokens, checked against the context before anything runs."""
        n_ctx = self.config.n_ctx
        room = self.config.draft_config.draft_max + 1
        tokens: dict[str, list[int]] = {}
        for item in items:
            key = item.prompt.key
            if key in tokens:
                continue
            ids = self.baseline.prompt_tokens(item.prompt)
            if ids != self.speculative.prompt_tokens(item.prompt):
                raise PromptError(
                    f"prompt {key!r} tokenizes differently on the two paths; "
                    "the target of both must be the same model file"
                )
            need = len(ids) + item.max_tokens + room
            if need > n_ctx:
                raise PromptError(
                    f"prompt {key!r} has {len(ids)} tokens; with max_tokens {item.max_tokens} and "
                    f"draft_max {room - 1} it needs n_ctx >= {need}, but n_ctx is {n_ctx}. "
                    f"Raise --n-ctx to {need} or more, or lower --max-tokens; "
                    "equiv never truncates a prompt silently"
                )
            tokens[key] = ids
        return tokens

    # -- running -----------------------------------------------------------------------------
    def header(self, command: str = "") -> HeaderRecord:
        """This run's header (`run_header`); the paths' differences it names are kept."""
        header = run_header(
            self.config, self.baseline, self.speculative, command=command, extra=self.extra_header
        )
        self.differences = list(header.differences)
        return header

    def run(
        self,
        items: Sequence[PlanItem],
        *,
        resume: bool = False,
        command: str = "",
        on_result: ProgressFn | None = None,
        family_size: int | None = None,
        pool: bool = True,
    ) -> list[ResultRecord | AnalysisRecord]:
        """Run what is not done yet; returns the new result records, then the new analyses
        (sampling mode), as the file holds them.

        ``family_size`` is the number of prompts the prompts' half of the run's alpha is shared
        among in sampling mode (default: the prompts in ``items``); a caller that runs a suite
        one prompt at a time (the pytest plugin) passes the suite's size, and ``pool=False``:
        the run's pooled answer is then its own (`judge_results` over the whole session).
        """
        header = self.header(command)
        self.dropped = 0
        left = self._left(items, resume=resume)
        # Every up-front check before anything is written.
        prompt_tokens = self.tokenize(left.todo)
        self._start_file(left, header)
        # Sampling: half the run's alpha for the pooled tests, half shared among the prompts
        # (Bonferroni), Holm within each prompt.
        n_prompts = family_size or len({item.prompt.key for item in items})
        sampling = self.config.mode is Mode.SAMPLING
        prompt_alpha = self.config.alpha * (1 - POOLED_SHARE) / max(n_prompts, 1)
        self.judge = SamplingJudge(
            self, prompt_alpha=prompt_alpha, pool=pool and sampling, prompts=n_prompts
        )
        analyses: list[AnalysisRecord] = []
        if sampling and self.config.looks > 1:
            results, analyses = run_in_looks(
                items,
                left,
                results=self.results,
                judge=self.judge,
                run_batch=lambda step: self._run_todo(step, prompt_tokens, on_result),
            )
        else:
            results = self._run_todo(left, prompt_tokens, on_result)
        if left.determinism and not results:
            self._late_determinism_control(items)
        if sampling and self.config.looks == 1:
            analyses = self.judge.analyze_all(items)
        added: list[ResultRecord | AnalysisRecord] = [*results, *analyses]
        if (self.controls and added) or left.self_draft:
            self._self_draft_control()  # over every result, whenever results were added
        return added

    def _left(self, items: Sequence[PlanItem], *, resume: bool) -> ResumePlan:
        """What is left of ``items`` to do, given the file as it is (`plan_resume`)."""
        contents = self.results.read()
        if contents.header is None and not contents.replaceable:
            self.results.header()  # not a results file: ResultsError naming its first line
        return plan_resume(
            contents,
            items,
            resume=resume,
            config=self.config,
            controls=self.controls,
            can_redo=self.evidence.can_redo,
        )

    def _start_file(self, left: ResumePlan, header: HeaderRecord) -> None:
        """A fresh file gets this run's header; a resumed one loses what is redone."""
        if left.fresh:
            self.results.write_header(header)
        elif left.redo:
            self.dropped = self.results.drop(left.redo)  # and a torn last line with them
        else:
            self.results.cut_torn()  # a record a crash cut short: redone below, if a result

    def _run_todo(
        self, left: ResumePlan, prompt_tokens: dict[str, list[int]], on_result: ProgressFn | None
    ) -> list[ResultRecord]:
        """Each record is appended as soon as its prompt finishes (in completion order when
        several are in flight), so a crash or Ctrl-C loses no finished result. The first prompt
        and the determinism control run alone: a server's answer depends on what shares its
        batch, and the control asks whether the engine repeats itself, not that."""

        def run_item(item: PlanItem) -> ResultRecord:
            return self._run_item(item, prompt_tokens[item.prompt.key])

        todo = left.todo
        alone = 1 if left.determinism else 0
        finished = itertools.chain(
            completed(run_item, todo[:alone], 1), completed(run_item, todo[alone:], self.in_flight)
        )
        records: list[ResultRecord] = []
        try:
            for index, (item, record) in enumerate(finished):
                self.results.append_result(record)
                records.append(record)
                if index == 0 and left.determinism:
                    tokens = prompt_tokens[item.prompt.key]
                    self._determinism_control(item, tokens, record.baseline.tokens)
                if on_result is not None:
                    on_result(item, record, index + 1, len(todo))
        except PathFailedError as failure:
            # after the answers still in flight are written: the failure is a finding
            self.results.append_event(engine_failure_event(failure))
            raise
        return records

    def generate_pair(
        self, tokens: Sequence[int], *, seed: int | None, max_tokens: int, key: str = ""
    ) -> tuple[Generation, Generation]:
        """Both paths' generations for one prompt's tokens, each with its own sampling. An
        engine's failure is a `PathFailedError` naming the path, and whether the other path
        answered the same request (the baseline runs first)."""
        try:
            base = self.baseline.generate(
                tokens, sampling=self.config.sampling, seed=seed, max_tokens=max_tokens
            )
        except EngineError as exc:
            raise path_failed("baseline", key, exc, other_answered=False) from exc
        try:
            spec = self.speculative.generate(
                tokens,
                sampling=self.config.for_path(speculative=True).sampling,
                seed=seed,
                max_tokens=max_tokens,
            )
        except EngineError as exc:
            raise path_failed("speculative", key, exc, other_answered=True) from exc
        return base, spec

    def _run_item(self, item: PlanItem, tokens: list[int]) -> ResultRecord:
        """One prompt x seed through both paths, its evidence and (temp 0) its verdict."""
        base, spec = self.generate_pair(
            tokens, seed=item.seed, max_tokens=item.max_tokens, key=item.key
        )
        comparison = compare(base, spec, token_text=self.baseline.token_text)
        extra: JSONDict = {}
        if item.prompt.grader is not None:  # graded where recorded: reports need no model
            extra["grades"] = grade_pair(
                item.prompt.grader_spec, item.prompt.text, base.text, spec.text
            )
        verdict = placebo = None
        sampled = SampleEvidence()
        if item.mode is Mode.TEMP0:
            rescore = BatchOnce(self.evidence) if self.evidence.can_rescore else None
            verdict = classify_temp0(
                comparison, base, spec, differences=self.differences, rescore=rescore
            )
            if rescore is not None and base.tokens and not self.differences:
                placebo = self.evidence.drift_placebo(tokens, base, rescore)
        else:
            rescores = self.evidence.rescores(item.seed, base, spec)
            sampled = self.evidence.of_samples(tokens, base, spec, rescore=rescores)
            if sampled.fidelity is not None:
                extra["rescore_fidelity"] = sampled.fidelity.to_dict()
        if (cost := self.evidence.take_cost()) is not None:
            extra["rescore_cost"] = cost.to_dict()
        record = ResultRecord(
            key=item.key,
            suite=item.prompt.suite,
            prompt_id=item.prompt.id,
            mode=item.mode,
            seed=item.seed,
            prompt=item.prompt,
            baseline=base,
            speculative=spec,
            comparison=comparison,
            verdict=verdict,
            rescore_drift=sampled.drift,
            drift_placebo=placebo,
            evidence=sampled.paths,
            extra=extra,
        )
        # As the file holds it: the rows each path used dropped, its figures rounded.
        return ResultRecord.from_dict(record.to_dict())

    def _determinism_control(self, item: PlanItem, tokens: list[int], first: Sequence[int]) -> None:
        """The baseline run twice must give the same tokens, or no comparison means anything.
        ``first``: the tokens the baseline gave the first time."""
        again = self.baseline.generate(
            tokens, sampling=self.config.sampling, seed=item.seed, max_tokens=item.max_tokens
        )
        self.results.append_event(determinism_event(item.key, first, again.tokens))

    def _late_determinism_control(self, items: Sequence[PlanItem]) -> None:
        """Every result was there already, but the control was not (a crash right after the
        first result): run it on the first prompt that has a result."""
        stored = {r.key: r for r in self.results.read().results}
        first = next((i for i in items if i.key in stored), None)
        if first is not None:
            tokens = self.tokenize([first])[first.prompt.key]
            self._determinism_control(first, tokens, stored[first.key].baseline.tokens)

    def _self_draft_control(self) -> None:
        if not self.config.self_draft or self.config.mode is not Mode.TEMP0:
            return
        if not drafts_from_file(self.speculative):  # n-gram / MTP: the draft file is unused
            return
        self.results.append_event(self_draft_event(self.results.read().results))
