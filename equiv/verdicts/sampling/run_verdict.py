"""The run's verdict at temperature > 0, from the pooled analysis (`pooled.pool`) and the
prompts' own labels. In order:

- ``misconfiguration`` when the two paths' fingerprints differ;
- ``inconclusive`` when no prompt could be pooled (no placebo anywhere: re-scoring not offered
  or failed on every prompt);
- ``inconclusive`` where a pooled test is one-sample (in process, or over HTTP with the
  re-scoring measured exact) and the placebo's samples fail it against their own rows (the
  instrument does not reproduce the engine's sampler), unless a prompt's own comparison with
  the placebo says ``sampler-bug``; where they fail only the tests against the rows a server
  reported, those are left out (`PooledAnalysis.believed`) and the rest judged;
- ``sampler-bug`` when a pooled test rejects at the pooled level: in process (the speculative
  samples against the rows they were sampled from) at once, and so over HTTP where a test
  against the rows the speculative server reported sampling from rejects (`pooled.REPORTED`);
  over HTTP otherwise (against the re-scored
  single-token rows, or against the placebo's samples) only if a prompt's own verdict is
  ``sampler-bug`` (its batched follow-up included) or the speculative samples re-scored
  *batched*, as verification evaluates them, still differ from the placebo (the pooled batched
  follow-up, `equiv.verdicts.sampling.run_batched`); ``numeric-drift`` if they then agree and
  that comparison had the power, ``inconclusive`` if not or if it could not be asked;
- ``sampler-bug`` when a prompt's own verdict is (each prompt judged at its share of the other
  half of the run's level);
- ``numeric-drift`` when prompts differ only by numeric drift (their own verdicts);
- ``equivalent`` when nothing rejects and every bound lies within its margin;
- ``inconclusive`` otherwise, with the seeds that would bring the bounds within their margins.

The run's level is ``alpha``: half of it for the pooled tests, half shared by the prompts, so by
the union bound a correct deployment is called ``sampler-bug`` with probability at most
``alpha`` (at every look of a sequential run: `equiv.verdicts.stats.sequential`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from equiv.config import Mode
from equiv.json_types import JSONDict, json_object
from equiv.records import AnalysisRecord, ResultRecord, RunRecord
from equiv.records.verdict import Label, Verdict
from equiv.verdicts.sampling.pooled import Design, PooledAnalysis, is_reported, pool
from equiv.verdicts.sampling.run_batched import RunBatched
from equiv.verdicts.sampling.samples import Sample
from equiv.verdicts.stats.sequential import Stopping
from equiv.verdicts.temp0.misconfiguration import misconfiguration

__all__ = [
    "POOLED_SHARE",
    "RUN_STOPPING",
    "RunJudgement",
    "classify_run",
    "judge_results",
    "judge_run",
]

#: The pooled tests' share of the run's level; the prompts share the rest.
POOLED_SHARE = 0.5
#: The run verdicts that stop a sequential run at an early look (the last look always does).
RUN_STOPPING = frozenset({Label.SAMPLER_BUG, Label.EQUIVALENT, Label.MISCONFIGURATION})


def _evidence(labels: Counter[Label]) -> JSONDict:
    """The verdict's own evidence: the prompts' labels counted (the pooled tests and bounds are
    the run record's, `RunJudgement`)."""
    return {"labels": {label.value: n for label, n in labels.items() if n}}


def _where(pooled: PooledAnalysis) -> str:
    if not pooled.carriers:
        return ""
    shown = ", ".join(f"{key} (p {p:.2g})" for key, p in pooled.carriers)
    return f"; the evidence is strongest in {shown}"


def _scope(pooled: PooledAnalysis) -> str:
    out = (
        f"{pooled.prompts} prompt(s), {pooled.samples} samples, {pooled.tokens} speculative "
        f"tokens pooled"
    )
    if pooled.prompts == 1:
        out += " (one prompt: nothing is pooled across prompts)"
    if pooled.left_out:
        out += f"; {len(pooled.left_out)} prompt(s) left out without a placebo"
    return out


_DIFFER = {
    Design.OWN_ROWS: "are not draws from the rows they were sampled from (the placebo's are)",
    Design.EXACT_RESCORED: "are not draws from the target's single-token rows, re-scored "
    "exactly (the placebo's are)",
    Design.VS_PLACEBO: "differ from the placebo's",
}


#: What the tests against the rows a server reported sampling from say where they reject.
_REPORTED = (
    "are not draws from the rows the speculative server reported sampling them from, where it "
    "reported one (the placebo's are from its own)"
)


def _instrument_broken(pooled: PooledAnalysis, n_bug: int, own: str, ev: JSONDict) -> Verdict:
    """Rule 3: the placebo rejects its own rows, so no pooled test is believed."""
    broken = pooled.instrument_rejected()
    shown = "; ".join(f"{t.name} p = {t.p_adjusted:.2g}: {t.summary}" for t in broken)
    rows = (
        "the rows they were sampled from under equiv's chain"
        if pooled.design is Design.OWN_ROWS or all(is_reported(t) for t in broken)
        else "the target's re-scored rows under equiv's chain"
    )
    why = (
        f"pooled over the run ({_scope(pooled)}), the placebo's own samples are not draws from "
        f"{rows} ({shown}): the instrument does not reproduce this engine's sampler, so no "
        "pooled test is believed"
    )
    if n_bug:
        return Verdict(Label.SAMPLER_BUG, f"{why}; but {own}, against the placebo", ev)
    return Verdict(Label.INCONCLUSIVE, why, ev)


def _pooled_rejects(
    pooled: PooledAnalysis,
    *,
    n_bug: int,
    own: str,
    ev: JSONDict,
    has_logits: bool,
    batched: RunBatched | None,
) -> Verdict:
    """Rule 4: a pooled test rejects; over HTTP it needs a confirmation."""
    rejects = pooled.rejected()
    own_rows = [t for t in rejects if is_reported(t)]
    shown = "; ".join(
        f"{t.name} p = {t.p_adjusted:.2g} (Holm, alpha {pooled.alpha:.2g}): {t.summary}"
        for t in rejects
    )
    differ = _DIFFER[pooled.design] if len(own_rows) < len(rejects) else _REPORTED
    found = f"pooled over the run ({_scope(pooled)}), the speculative samples {differ}: {shown}"
    found += _where(pooled)
    if has_logits:
        return Verdict(Label.SAMPLER_BUG, found, ev)
    if own_rows:  # no re-scoring and no drift between these tokens and their rows
        return Verdict(
            Label.SAMPLER_BUG,
            f"{found}; the tests against the rows the speculative server reported sampling "
            "from reject, and nothing but its sampler comes between a token and that row",
            ev,
        )
    if n_bug:  # each confirmed on its own, batched follow-up included
        return Verdict(Label.SAMPLER_BUG, f"{found}; and {own}", ev)
    label, why = (batched or RunBatched()).answer(pooled.alpha, [t.kind for t in rejects])
    return Verdict(label, f"{found}; {why}", ev)


def _nothing_rejects(pooled: PooledAnalysis, n_drift: int, ev: JSONDict) -> Verdict:
    """Rules 6-8: no test of the sampler rejects: drift, bounds within, or more seeds."""
    scope = _scope(pooled)
    bounds = "; ".join(b.line for b in pooled.bounds)
    if n_drift:
        return Verdict(
            Label.NUMERIC_DRIFT,
            f"no pooled test of the sampler rejects ({scope}; {bounds}), but {n_drift} "
            "prompt(s)' outputs differ by numeric drift",
            ev,
        )
    if pooled.bounds and all(b.within for b in pooled.bounds):
        return Verdict(
            Label.EQUIVALENT,
            f"no pooled test rejects at alpha {pooled.alpha:.2g} and every effect is bounded "
            f"within its margin ({scope}; {bounds})",
            ev,
        )
    need = pooled.seeds_needed()
    if need is None:
        more = "an estimate lies at its margin, or a path has under 2 samples: more seeds will tell"
    else:
        more = f"about {need} seeds a prompt would bring them within"
    return Verdict(
        Label.INCONCLUSIVE,
        f"no pooled test rejects, but not every effect is bounded within its margin ({scope}; "
        f"{bounds}): {more}",
        ev,
    )


def classify_run(
    pooled: PooledAnalysis,
    *,
    prompt_labels: Counter[Label],
    differences: Sequence[str] = (),
    has_logits: bool = True,
    batched: RunBatched | None = None,
) -> Verdict:
    """The run's verdict (the rules in order: this module's docstring)."""
    believed = pooled.believed()
    verdict = _classify(believed, prompt_labels, differences, has_logits, batched)
    if believed is pooled:
        return verdict
    shown = "; ".join(
        f"placebo {t.name} p = {t.p_adjusted:.2g}"
        for t in pooled.instrument_rejected()
        if is_reported(t)
    )
    why = (
        f"{verdict.reason}; the tests against the rows the servers reported sampling from are "
        f"left out: the placebo's own samples fail them ({shown})"
    )
    return Verdict(verdict.label, why, verdict.evidence)


def _classify(
    pooled: PooledAnalysis,
    prompt_labels: Counter[Label],
    differences: Sequence[str],
    has_logits: bool,
    batched: RunBatched | None,
) -> Verdict:
    ev = _evidence(prompt_labels)
    if differences:
        return misconfiguration(differences, "the pooled tests were not asked")
    if pooled.prompts == 0:
        return Verdict(
            Label.INCONCLUSIVE,
            f"no prompt could be pooled: {len(pooled.left_out)} prompt(s) have no placebo "
            "(re-scoring not offered, or it failed)",
            ev,
        )
    n_bug = prompt_labels.get(Label.SAMPLER_BUG, 0)
    own = f"{n_bug} prompt(s) show a sampler fault on their own"
    if pooled.instrument_rejected():
        return _instrument_broken(pooled, n_bug, own, ev)
    if pooled.rejected():
        return _pooled_rejects(
            pooled, n_bug=n_bug, own=own, ev=ev, has_logits=has_logits, batched=batched
        )
    if n_bug:
        return Verdict(
            Label.SAMPLER_BUG,
            f"no pooled test rejects ({_scope(pooled)}), but {own} (a fault on few prompts "
            "dilutes in the pool)",
            ev,
        )
    return _nothing_rejects(pooled, prompt_labels.get(Label.NUMERIC_DRIFT, 0), ev)


@dataclass(frozen=True)
class RunJudgement:
    """The run's answer with what it rests on, as its `RunRecord` holds it: the pooled tests
    and bounds, over HTTP the batched follow-up, and in a sequential run where it stopped."""

    pooled: PooledAnalysis
    verdict: Verdict
    batched: RunBatched | None = None
    stopping: Stopping | None = None

    def record(self) -> RunRecord:
        figures: JSONDict = {"pooled": self.pooled.to_dict()}
        if self.batched is not None:
            figures["batched"] = self.batched.to_dict()
        if self.stopping is not None:
            figures["stopping"] = self.stopping.to_dict()
        return RunRecord(verdict=self.verdict, figures=figures)

    @classmethod
    def of(cls, record: RunRecord) -> RunJudgement:
        """A run record's judgement, as the file holds it."""
        figures = record.figures
        batched = figures.get("batched")
        stopping = figures.get("stopping")
        return cls(
            pooled=PooledAnalysis.from_dict(json_object(figures["pooled"])),
            verdict=record.verdict,
            batched=None if batched is None else RunBatched.from_dict(json_object(batched)),
            stopping=None if stopping is None else Stopping.from_dict(json_object(stopping)),
        )


def judge_run(
    by_prompt: Mapping[str, Sequence[Sample]],
    prompt_labels: Counter[Label],
    *,
    alpha: float,
    has_logits: bool,
    differences: Sequence[str] = (),
    batched: RunBatched | None = None,
    bound_alpha: float | None = None,
) -> RunJudgement:
    """The pooled analysis of ``by_prompt`` (prompt key -> its samples), its tests at the
    pooled level ``alpha`` and its bounds at ``bound_alpha`` (`pool`), and the run's verdict
    from it and the prompts' labels."""
    pooled = pool(by_prompt, alpha=alpha, has_logits=has_logits, bound_alpha=bound_alpha)
    verdict = classify_run(
        pooled,
        prompt_labels=prompt_labels,
        differences=differences,
        has_logits=has_logits,
        batched=batched,
    )
    return RunJudgement(pooled, verdict, batched)


def judge_results(
    results: Iterable[ResultRecord],
    analyses: Iterable[AnalysisRecord],
    *,
    alpha: float,
    has_logits: bool,
    differences: Sequence[str] = (),
) -> RunJudgement | None:
    """The run's answer from a file's sampled results and prompt analyses alone, where the run
    recorded none itself (a pytest session, which checks one prompt at a time): the pooled
    tests at the run's level ``alpha`` times `POOLED_SHARE`, the bounds at ``alpha``, without
    a batched follow-up. None where nothing was sampled."""
    by_prompt: dict[str, list[Sample]] = {}
    for record in results:
        if record.mode is Mode.SAMPLING:
            by_prompt.setdefault(record.prompt.key, []).append(Sample.of(record))
    if not by_prompt:
        return None
    labels = Counter(a.judged.label for a in analyses)
    return judge_run(
        by_prompt,
        labels,
        alpha=alpha * POOLED_SHARE,
        has_logits=has_logits,
        differences=differences,
        bound_alpha=alpha,
    )
