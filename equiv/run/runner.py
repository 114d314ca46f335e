"""The runner: every prompt of a plan through the baseline and the speculative path, each result
appended to the results file the moment it is finished, so a rerun with ``resume`` continues.

The runner asks the engines, records what they produced, gathers the evidence a verdict needs
where it is needed (re-scoring at a divergence, the chain's PIT of sampled tokens) and hands it to
`equiv.verdicts` to compare and classify; the tests and rules themselves live there.
"""

from __future__ import annotations

import contextlib
import itertools
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from equiv import __version__
from equiv.config import Mode, RunConfig
from equiv.engines.base import Engine, EngineFactory, in_flight, rescorer, server_facts
from equiv.engines.registry import build_engine
from equiv.errors import ConfigError, EngineError, PromptError
from equiv.records import (
    ArgmaxFlips,
    Control,
    EventRecord,
    Generation,
    ResultsContents,
    ResultsFile,
)
from equiv.records.machine import Machine
from equiv.run.inflight import completed
from equiv.run.lock import ResultsLock
from equiv.run.plan import PlanItem, plan
from equiv.verdicts.classify import classify_temp0, fingerprint_differences
from equiv.verdicts.compare import compare
from equiv.verdicts.drift import drift_metrics
from equiv.verdicts.fidelity import rescore_fidelity
from equiv.verdicts.graders import grade_pair
from equiv.verdicts.pit_tests import batched_vs_placebo
from equiv.verdicts.prompt_analysis import analyze_prompt
from equiv.verdicts.sampling_verdict import classify_sampling, needs_batched_evidence
from equiv.verdicts.summary import summarize
from equiv.verdicts.token_evidence import chain_evidence, judgement_evidence, top_k_rows

__all__ = [
    "SELF_DRAFT_MIN_ACCEPTANCE",
    "PlanItem",
    "Runner",
    "plan",
]

SELF_DRAFT_MIN_ACCEPTANCE = 0.98


def changed_settings(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """The settings in which a results file's configuration differs from ``new``. A setting
    the file's older equiv did not write yet counts as its default (what that run used)."""
    # A configuration this equiv cannot read is compared as written.
    with contextlib.suppress(ConfigError, KeyError, TypeError, ValueError):
        old = RunConfig.from_dict(old).to_dict()
    return sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))


ProgressFn = Callable[[PlanItem, dict[str, Any], int, int], None]


class Runner:
    """Owns the two engines of one run and the results file they fill."""

    def __init__(
        self,
        config: RunConfig,
        factory: EngineFactory | None,
        results_path: str | Path,
        *,
        extra_header: dict[str, Any] | None = None,
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

    def _check_resume(self, header: dict[str, Any]) -> None:
        changed = changed_settings(self.results.header().config, header["config"])
        if changed:
            raise ConfigError(
                f"cannot resume {self.results.path}: it was run with a different configuration "
                f"(differs in: {', '.join(changed)}); rerun with the same options, "
                "or start a new run in another --out directory"
            )

    # -- running -----------------------------------------------------------------------------
    def header(self, command: str = "") -> dict[str, Any]:
        fingerprints = {
            "baseline": self.baseline.fingerprint(),
            "speculative": self.speculative.fingerprint(),
        }
        self.differences = fingerprint_differences(
            fingerprints["baseline"], fingerprints["speculative"]
        )
        servers = {
            engine.path: facts
            for engine in (self.baseline, self.speculative)
            if (facts := server_facts(engine)) is not None
        }
        # The machine the numerics ran on, with the in-process build's llama.cpp system info.
        system_info = next(
            (str(f["system_info"]) for f in fingerprints.values() if f.get("system_info")), ""
        )
        return {
            "equiv": __version__,
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "command": command,
            "python": sys.version.split()[0],
            "machine": Machine.here(system_info=system_info).to_dict(),
            "config": self.config.to_dict(),
            "fingerprints": fingerprints,
            "differences": self.differences,
            "capabilities": {
                "baseline": self.baseline.capabilities.to_dict(),
                "speculative": self.speculative.capabilities.to_dict(),
            },
            **({"servers": servers} if servers else {}),
            **self.extra_header,
        }

    def run(
        self,
        items: Sequence[PlanItem],
        *,
        resume: bool = False,
        command: str = "",
        on_result: ProgressFn | None = None,
        family_size: int | None = None,
    ) -> list[dict[str, Any]]:
        """Run what is not done yet; returns the new result (and analysis) records.

        ``family_size`` is the number of prompts the run's alpha is shared among in sampling
        mode (default: the prompts in ``items``); a caller that runs a suite one prompt at a
        time (the pytest plugin) passes the suite's size.
        """
        header = self.header(command)
        self.dropped = 0
        contents = self.results.read()
        if contents.header is None and not contents.replaceable:
            self.results.header()  # not a results file: ResultsError naming its first line
        # A file with a header and nothing else (a run stopped by an up-front check, or before
        # its first result) holds nothing to keep: it is replaced, --resume or not.
        fresh = contents.replaceable
        if not fresh:
            if not resume:
                raise ConfigError(
                    f"{self.results.path} already holds results; pass --resume to continue it, "
                    "or choose another --out directory"
                )
            self._check_resume(header)
        # Results whose re-scoring failed (a server timed out) are redone, with the analysis of
        # their prompt: their generations were kept, but their verdict is not finished.
        # Only this run's items, and only where re-scoring can now run (temp 0: both rows;
        # sampling: the baseline's single-token rows).
        redo: set[str] = set()
        if not fresh:
            keys = {item.key for item in items}
            failed = [
                r
                for r in contents.results
                if r.key in keys and r.rescore_failed and self._can_redo(r.mode)
            ]
            redo = {r.key for r in failed} | {f"{r.prompt.key}::sampling" for r in failed}
        done = set() if fresh else contents.done_keys - redo
        todo = [item for item in items if item.key not in done]
        # Every up-front check before anything is written.
        if not fresh:
            self._check_prompts(items, contents)
        prompt_tokens = self.tokenize(todo)
        determinism = self.controls and not any(
            e.event == Control.DETERMINISM for e in contents.events
        )
        if fresh:
            self.results.write_header(header)
        elif redo:
            self.dropped = self.results.drop(redo)  # and a torn last line with them
        else:
            self.results.cut_torn()  # a record a crash cut short: redone below, if a result
        # Sampling: alpha is shared among the prompts (Bonferroni), Holm within each prompt.
        n_prompts = family_size or len({item.prompt.key for item in items})
        self._prompt_alpha = self.config.alpha / max(n_prompts, 1)
        records: list[dict[str, Any]] = []

        def run_item(item: PlanItem) -> dict[str, Any]:
            return self._run_item(item, prompt_tokens[item.prompt.key])

        # Each record is appended as soon as its prompt finishes (in completion order when
        # several are in flight), so a crash or Ctrl-C loses no finished result. The first
        # prompt and the determinism control run alone: a server's answer depends on what shares
        # its batch, and the control asks whether the engine repeats itself, not that.
        alone = 1 if determinism else 0
        finished = itertools.chain(
            completed(run_item, todo[:alone], 1), completed(run_item, todo[alone:], self.in_flight)
        )
        for index, (item, record) in enumerate(finished):
            self.results.append_result(record)
            records.append(record)
            if index == 0 and determinism:
                tokens = prompt_tokens[item.prompt.key]
                self._determinism_control(item, tokens, record["baseline"]["tokens"])
                determinism = False
            if on_result is not None:
                on_result(item, record, index + 1, len(todo))
        if determinism:
            # Every result was there already, but the control was not (a crash right after the
            # first result): run it on the first prompt that has a result.
            stored = {r.key: r for r in self.results.read().results}
            first = next((i for i in items if i.key in stored), None)
            if first is not None:
                tokens = self.tokenize([first])[first.prompt.key]
                self._determinism_control(first, tokens, stored[first.key].baseline.tokens)
        if self.config.mode is Mode.SAMPLING:
            records.extend(self._analyze(items))
        if self.controls and (
            records or not any(e.event == Control.SELF_DRAFT for e in contents.events)
        ):
            self._self_draft_control()  # over every result, whenever results were added
        return records

    def _batcher(self) -> Engine:
        """The engine that re-scores batched: the baseline where it can (a server: evidence
        from the path not under test), else the speculative path (in process, only its context
        evaluates batches as verification does)."""
        batches = getattr(self.baseline, "rescores_batched", False)
        return self.baseline if batches else self.speculative

    def _rescore(self, prompt: Sequence[int], tokens: Sequence[int], batched: bool) -> Any:
        """The target's rows for ``tokens``: single-token on the baseline path, batched on
        `_batcher`."""
        engine = rescorer(self._batcher() if batched else self.baseline)
        if engine is None:
            raise ConfigError("re-scoring asked of an engine that does not offer it")
        return engine.rescore(prompt, tokens, batched=batched)

    def _can_redo(self, mode: Mode) -> bool:
        """Whether a result of ``mode`` whose re-scoring failed can be finished now."""
        if mode is Mode.TEMP0:
            return self._can_rescore()
        return rescorer(self.baseline) is not None

    def _can_rescore(self) -> bool:
        return rescorer(self.baseline) is not None and rescorer(self._batcher()) is not None

    def _rescore_cost(self, record: dict[str, Any]) -> None:
        """Record what this item's re-scoring cost, for engines that count it (servers)."""
        costs = [
            take()
            for engine in {id(e): e for e in (self.baseline, self.speculative)}.values()
            if callable(take := getattr(engine, "take_rescore_cost", None))
        ]
        total = sum(costs[1:], costs[0]) if costs else None
        if total is not None and total.requests:
            record["rescore_cost"] = total.to_dict()

    def generate_pair(
        self, tokens: Sequence[int], *, seed: int | None, max_tokens: int
    ) -> tuple[Generation, Generation]:
        """Both paths' generations for one prompt's tokens, each with its own sampling."""
        base = self.baseline.generate(
            tokens, sampling=self.config.sampling, seed=seed, max_tokens=max_tokens
        )
        spec = self.speculative.generate(
            tokens,
            sampling=self.config.for_path(speculative=True).sampling,
            seed=seed,
            max_tokens=max_tokens,
        )
        return base, spec

    def _run_item(self, item: PlanItem, tokens: list[int]) -> dict[str, Any]:
        base, spec = self.generate_pair(tokens, seed=item.seed, max_tokens=item.max_tokens)
        comparison = compare(base, spec, token_text=self.baseline.token_text)
        record: dict[str, Any] = {
            "key": item.key,
            "suite": item.prompt.suite,
            "prompt_id": item.prompt.id,
            "mode": item.mode.value,
            "seed": item.seed,
            "prompt": item.prompt.to_dict(),
            "prompt_hash": item.prompt.content_hash,
            "baseline": base.to_dict(),
            "speculative": spec.to_dict(),
            "comparison": comparison.to_dict(),
        }
        if item.prompt.grader is not None:  # graded where recorded: reports need no model
            record["grades"] = grade_pair(
                item.prompt.grader_spec, item.prompt.text, base.text, spec.text
            )
        if item.mode is Mode.TEMP0:
            rescore = self._rescore if self._can_rescore() else None
            verdict = classify_temp0(
                comparison, base, spec, differences=self.differences, rescore=rescore
            )
            record["verdict"] = verdict.to_dict()
            if rescore is not None and base.tokens and not self.differences:
                self._drift_placebo(record, tokens, base)
            self._rescore_cost(record)
            return record
        for gen, path in ((base, "baseline"), (spec, "speculative")):
            sampling = self.config.for_path(speculative=path == "speculative").sampling
            rows = gen.logits
            if rows is None and path == "baseline":  # a server: its top-K covers the chain
                rows = top_k_rows(gen.alternatives, gen.tokens, sampling)
            if rows is not None:
                pits, sensitivities = chain_evidence(rows, gen.tokens, sampling)
                record[path]["chain_pit"] = pits
                record[path]["chain_sensitivity"] = sensitivities
        if spec.logits is not None and self.speculative.capabilities.judgements:
            sampling = self.config.for_path(speculative=True).sampling
            record["speculative"].update(
                judgement_evidence(spec.logits, spec.tokens, spec.judgements, sampling)
            )
        # Both paths' samples are re-scored by the target one token at a time, exactly as the
        # baseline evaluates: the speculative ones to test, the baseline's as their placebo (the
        # same instrument on samples whose rows are known), with the re-scoring's fidelity there.
        if rescorer(self.baseline) is not None:
            for gen, path in ((spec, "speculative"), (base, "baseline")):
                if not gen.tokens:  # nothing to score: an empty sample keeps the placebo whole
                    record[path].update(target_pit=[], target_sensitivity=[])
                elif not self._rescore_sample(record, tokens, gen, path):
                    break
        self._rescore_cost(record)
        return record

    def _drift_placebo(
        self, record: dict[str, Any], prompt: Sequence[int], base: Generation
    ) -> None:
        """Temp 0's placebo (`ArgmaxFlips`): the baseline's tokens re-scored in one batch. A
        failed re-scoring leaves the result without one; the run-level rate pools the rest."""
        try:
            rows = self._rescore(prompt, base.tokens, True)
        except EngineError:
            return
        record["drift_placebo"] = ArgmaxFlips.of(base.tokens, rows).to_dict()

    def _rescore_sample(
        self, record: dict[str, Any], prompt: Sequence[int], gen: Generation, path: str
    ) -> bool:
        """Re-score one path's sample single-token and record its PIT under those rows; for the
        speculative path the drift from the rows it used, for the baseline the re-scoring's
        fidelity against the rows it reported. False where re-scoring failed (recorded)."""
        sampling = self.config.sampling
        try:
            target = self._rescore(prompt, gen.tokens, False)
        except EngineError as exc:  # the generations are kept; the analysis says why
            record[path]["rescore_error"] = str(exc).splitlines()[0]
            return False
        pits, sensitivities = chain_evidence(target, gen.tokens, sampling)
        record[path]["target_pit"] = pits
        record[path]["target_sensitivity"] = sensitivities
        if path == "speculative" and gen.logits is not None:
            record["rescore_drift"] = drift_metrics(gen.logits, target).to_dict()
        if path == "baseline":
            reported = gen.logits
            if reported is None:
                reported = top_k_rows(gen.alternatives, gen.tokens, sampling)
            if reported is not None:
                fidelity = rescore_fidelity(reported, target, gen.tokens, sampling)
                record["rescore_fidelity"] = fidelity.to_dict()
        return True

    def _analyze(self, items: Sequence[PlanItem]) -> list[dict[str, Any]]:
        """One analysis record per prompt whose seeds are all done and not yet analysed."""
        contents = self.results.read()
        done = {r.key: r for r in contents.results}
        analysed = {a.key for a in contents.analyses}
        has_logits = self.baseline.capabilities.full_logits and (
            self.speculative.capabilities.full_logits
        )
        out = []
        by_prompt: dict[str, list[PlanItem]] = {}
        for item in items:
            by_prompt.setdefault(item.prompt.key, []).append(item)
        for key, group in by_prompt.items():
            seed_records = [done[i.key].to_dict() for i in group if i.key in done]
            akey = f"{key}::sampling"
            if akey in analysed or len(seed_records) < len(group):
                continue
            analysis = analyze_prompt(seed_records, alpha=self._prompt_alpha, has_logits=has_logits)
            if not has_logits and needs_batched_evidence(analysis):
                analysis["batched"] = self._batched_evidence(group[0], seed_records)
            verdict = classify_sampling(
                analysis, differences=self.differences, has_logits=has_logits
            )
            record = {
                "key": akey,
                "suite": group[0].prompt.suite,
                "prompt_id": group[0].prompt.id,
                "mode": "sampling",
                **analysis,
                "verdict": verdict.to_dict(),
            }
            self.results.append_analysis(record)
            out.append(record)
        return out

    def _batched_evidence(
        self, item: PlanItem, seed_records: Sequence[dict[str, Any]]
    ) -> dict[str, Any]:
        """Over HTTP the speculative samples were compared with the placebo under the target's
        single-token rows; where that rejects, re-score them batched (as verification evaluates)
        and compare again: the evidence that tells numeric drift from a sampler bug. Asked only
        then: it costs one request per token."""
        if not self._can_rescore():
            return {"error": "the servers cannot re-score batched"}
        prompt = self.tokenize([item])[item.prompt.key]
        sampling = self.config.sampling
        scored = []
        try:
            for record in seed_records:
                tokens = record["speculative"]["tokens"]
                rows = self._rescore(prompt, tokens, True) if tokens else None
                pits, sensitivities = (
                    ([], []) if rows is None else chain_evidence(rows, tokens, sampling)
                )
                extra = {"batched_pit": pits, "batched_sensitivity": sensitivities}
                scored.append({**record, "speculative": {**record["speculative"], **extra}})
        except EngineError as exc:
            evidence: dict[str, Any] = {"error": str(exc).splitlines()[0]}
        else:
            evidence = {"tests": batched_vs_placebo(scored, alpha=self._prompt_alpha)}
        self._rescore_cost(evidence)
        return evidence

    def _determinism_control(self, item: PlanItem, tokens: list[int], first: Sequence[int]) -> None:
        """The baseline run twice must give the same tokens, or no comparison means anything.
        ``first``: the tokens the baseline gave the first time."""
        again = self.baseline.generate(
            tokens, sampling=self.config.sampling, seed=item.seed, max_tokens=item.max_tokens
        )
        ok = list(again.tokens) == list(first)
        detail = "baseline repeated on the first prompt gave identical tokens"
        if not ok:
            detail = (
                "baseline repeated on the first prompt gave DIFFERENT tokens: the engine is "
                "not deterministic, so differences cannot be blamed on speculative decoding"
            )
        self.results.append_event(
            EventRecord(event=Control.DETERMINISM.value, ok=ok, key=item.key, detail=detail)
        )

    def _check_prompts(self, items: Sequence[PlanItem], contents: ResultsContents) -> None:
        """A resumed run must not keep a result of a prompt whose text has changed since."""
        stored = {r.key: r for r in contents.results}
        changed = [
            item.key
            for item in items
            if item.key in stored and stored[item.key].prompt_hash != item.prompt.content_hash
        ]
        if changed:
            shown = ", ".join(changed[:5]) + (
                f" and {len(changed) - 5} more" if changed[5:] else ""
            )
            raise ConfigError(
                f"cannot resume {self.results.path}: the prompt of {shown} changed since its "
                "result was recorded (its text, messages or max_tokens differ); restore the "
                "suite, leave that prompt out (--prompt), or start a new run in another --out "
                "directory"
            )

    def _self_draft_control(self) -> None:
        if not self.config.self_draft or self.config.mode is not Mode.TEMP0:
            return
        rate = summarize(self.results.read().results).total.acceptance
        ok = rate is not None and rate >= SELF_DRAFT_MIN_ACCEPTANCE
        self.results.append_event(
            {
                "event": "self-draft",
                "ok": ok,
                "acceptance": rate,
                "detail": f"self-draft acceptance {rate:.4f} (needs >= {SELF_DRAFT_MIN_ACCEPTANCE})"
                if rate is not None
                else "self-draft drafted no tokens",
            }
        )
