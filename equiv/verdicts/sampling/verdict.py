"""The verdict at temperature > 0, from one prompt's analysis (`prompt_analysis.analyze`).

Every rule reads a comparison with the *placebo*: the baseline's own samples through the very
pipeline the speculative samples go through (the same rows, re-scored the same way). A test of
the speculative samples against rows alone measures the instrument as much as the sampler, so it
never decides ``sampler-bug`` by itself. Tests are Holm-adjusted within the prompt at the
prompt's share alpha/P of the run's level. In order:

- ``misconfiguration`` when the two paths' fingerprints differ;
- ``inconclusive`` when no placebo could be formed (re-scoring not offered or failed): without
  it neither a sampler bug nor equivalence can be shown;
- ``inconclusive`` when the placebo rejects its own rows in process (the rows an engine reports
  are not the rows it sampled from, so no test against them means anything);
- ``sampler-bug`` when a rejection sampler's stage rejects (engines that report their
  judgements, in process: each stage is read against the rows that very engine reports it used,
  not through re-scoring, so no instrument stands between);
- ``sampler-bug`` when a test of the speculative samples against the placebo rejects (PIT
  histograms, top-token excess, temperature), in process; over HTTP only if it rejects again
  with the speculative samples re-scored *batched*, as verification evaluates
  (`pit_tests.batched_vs_placebo`): ``numeric-drift`` if they then agree with the
  placebo and the same kind of test had the power to see it, ``inconclusive`` if not or if that
  could not be asked;
- ``sampler-bug`` when the logits the speculative sampler used are not the target's (mean KL to
  the target's re-scoring above `KL_NOT_TARGET` and 10 times what re-scoring the placebo moves);
- ``numeric-drift`` when only the two-sample tests of the outputs reject;
- ``inconclusive`` when the speculative samples alone reject the rows but the placebo does not
  and the comparison with it does not either: too little data to say which;
- ``equivalent`` when nothing rejects and the comparison with the placebo had power >= 0.8 for
  Cohen's w = 0.1 at Holm's first step alpha/m; else ``inconclusive`` with the tokens needed.

Where the placebo itself rejects its rows, the reason says what the instrument cannot see
(`limit`), with the measured re-scoring fidelity.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

from equiv.records.verdict import Label, Verdict
from equiv.verdicts.sampling.analysis_record import (
    BatchedEvidence,
    Placebo,
    PromptAnalysis,
    ScoredTest,
    find,
    rejected,
)
from equiv.verdicts.stats import chi2_power, min_detectable_w
from equiv.verdicts.temp0.misconfiguration import misconfiguration
from equiv.verdicts.verdict_evidence import BatchedFigures, PowerEvidence, SamplingEvidence

__all__ = [
    "KL_NOT_TARGET",
    "MIN_POWER",
    "STAGES",
    "VS_PLACEBO",
    "classify_sampling",
    "limit",
    "needs_batched_evidence",
]

MIN_POWER = 0.8
KL_NOT_TARGET = 0.1
#: The tests of the speculative samples against the placebo, by kind.
VS_PLACEBO = ("pit", "top-token", "temperature")
#: The stages of a rejection sampler, tested on their own when the engine reports judgements.
STAGES = {
    "acceptance-forced:speculative": "accept/reject decisions break min(1, p/q): it rejects "
    "draft tokens the rule must accept, or accepts ones it must reject",
    "acceptance-rate:speculative": "acceptance rate is not the one min(1, p/q) implies",
    "residual:speculative": "replacements after a rejection are not draws from norm(max(0, p - q))",
}


def _shown(test: ScoredTest, alpha: float) -> str:
    return (
        f"{test.name}: statistic {test.statistic:.2f}, Holm-adjusted p = "
        f"{test.p_adjusted:.2g} < alpha {alpha:.2g}, n = {test.n}; {test.summary}"
    )


def needs_batched_evidence(analysis: PromptAnalysis) -> bool:
    """Whether a test of the speculative samples against the placebo rejects at the prompt's
    level: over HTTP, where both are scored under single-token rows, `classify_sampling` then
    asks whether batched rows explain it (`PromptAnalysis.batched`)."""
    return any(
        t.p_adjusted < analysis.alpha
        for kind in VS_PLACEBO
        if (t := find(analysis.tests, f"{kind}:vs-placebo")) is not None
    )


def limit(placebo: Placebo, alpha: float) -> str | None:
    """What the instrument cannot see, where the placebo rejects the rows it is scored under:
    None where it does not."""
    rejects = rejected(placebo.tests or (), alpha)
    if not rejects:
        return None
    fid = placebo.fidelity
    measured = ""
    if fid:
        measured = (
            f"; {fid.line}: a sampler fault that moves the distribution by less than total "
            f"variation {fid.tv_mean:.3f} a token is not visible against these rows alone"
        )
    names = ", ".join(t.kind for t in rejects)
    return (
        f"the placebo (the baseline's own samples through the same pipeline) is rejected by its "
        f"rows ({names}; {rejects[0].summary}): the instrument here is off"
        f"{measured}; the verdict rests on the comparison with the placebo"
    )


def _batched_answer(
    evidence: BatchedEvidence | None, kind: str, alpha: float
) -> tuple[BatchedFigures | None, str, Label]:
    """What the speculative samples re-scored *batched* say against the placebo
    (`pit_tests.batched_vs_placebo`), after ``kind`` rejected under single-token rows:
    ``(figures, words, label)``. ``sampler-bug`` if a batched test rejects; ``numeric-drift`` if
    none does and the batched test of the same kind had the power to; else ``inconclusive``."""
    if evidence is None or not evidence.tests:
        why = (evidence.error if evidence else None) or "the target's batched rows were not asked"
        words = f"whether numeric drift explains it could not be checked: {why}"
        return None, words, Label.INCONCLUSIVE
    tests = evidence.tests
    names = [t.name for t in rejected(tests, alpha)]
    figures = BatchedFigures(tuple(names), {t.name: t.p_adjusted for t in tests})
    shown = ", ".join(f"{t.kind} p = {t.p_adjusted:.2g}" for t in tests)
    if names:
        return (
            figures,
            (
                f"and re-scored batched, as draft verification evaluates them, they still differ "
                f"from the placebo ({shown}): numeric drift does not explain it"
            ),
            Label.SAMPLER_BUG,
        )
    same = find(tests, f"{kind}:vs-placebo-batched")
    power = (same.power if same else None) or 0.0
    if power < MIN_POWER:
        return (
            figures,
            (
                f"re-scored batched, as draft verification evaluates them, they do not differ from "
                f"the placebo ({shown}), but the {kind} test there had power {power:.2f} only: "
                "whether numeric drift explains it is not shown"
            ),
            Label.INCONCLUSIVE,
        )
    return (
        figures,
        (
            f"but re-scored batched, as draft verification evaluates them, they agree with the "
            f"placebo (no test rejects at alpha {alpha:.2g}: {shown}; the {kind} test had power "
            f"{power:.2f}): the difference between single-token and batched evaluation, which a "
            "low temperature amplifies"
        ),
        Label.NUMERIC_DRIFT,
    )


def _power(analysis: PromptAnalysis) -> tuple[PowerEvidence, int, int, str]:
    """The power behind ``equivalent``: the comparison with the placebo's PIT histograms at
    Holm's first step, alpha / m, over its effective tokens. ``(evidence, n, df, what)``."""
    test = find(analysis.tests, "pit:vs-placebo")
    what = "comparison with the placebo (PIT)"
    n = test.n if test else 0
    df = (test.df if test else None) or 9
    level = analysis.alpha / max(len(analysis.tests), 1)
    ran = test is not None and n > 0 and test.df is not None
    power = chi2_power(n, df, alpha=level, w=0.1) if ran else 0.0  # a test without data: none
    temperature = find(analysis.tests, "temperature:vs-placebo")
    return PowerEvidence(power, level, temperature), n, df, what


def classify_sampling(
    analysis: PromptAnalysis,
    *,
    differences: Sequence[str] = (),
    has_logits: bool = True,
) -> Verdict:
    """The verdict of one sampled prompt (the rules in order: this module's docstring).
    ``analysis``: `prompt_analysis.analyze`'s, or `PromptAnalysis.from_dict` of the file's."""
    alpha = analysis.alpha
    tests = analysis.tests
    rejects = rejected(tests, alpha)
    placebo = analysis.placebo or Placebo(error="the analysis records no placebo")
    instrument = limit(placebo, alpha)
    ev = SamplingEvidence(
        alpha=alpha,
        rejected=tuple(t.name for t in rejects),
        same_seed_agreement=analysis.same_seed_agreement,
        drift=analysis.drift,
        placebo_rejected=tuple(t.name for t in rejected(placebo.tests or (), alpha)),
        fidelity=placebo.fidelity,
        limit=instrument,
    )
    note = f"; {instrument}" if instrument else ""
    if differences:
        return misconfiguration(differences, f"{len(rejects)} test(s) reject")
    if placebo.error is not None:
        names = ", ".join(t.name for t in rejects)
        found = f"the outputs differ ({names} reject at alpha {alpha:.2g}), but " if names else ""
        return Verdict(
            Label.INCONCLUSIVE,
            f"{found}{placebo.error}: without a placebo equiv can show neither a sampler bug "
            "nor equivalence",
            ev.to_dict(),
        )
    if instrument and has_logits:
        return Verdict(
            Label.INCONCLUSIVE,
            f"{instrument}: in process those are the rows the engine reports, so no test against "
            "them can be believed",
            ev.to_dict(),
        )
    decided = _rejection(analysis, ev, placebo, note, has_logits)
    return decided or _no_rejection(analysis, ev, placebo, note, rejects)


def _rejection(
    analysis: PromptAnalysis,
    ev: SamplingEvidence,
    placebo: Placebo,
    note: str,
    has_logits: bool,
) -> Verdict | None:
    """A stage of the rejection sampler, or a comparison with the placebo, that rejects; over
    HTTP the latter with its batched follow-up. None where none does."""
    alpha, tests = analysis.alpha, analysis.tests
    for name, what in STAGES.items():
        test = find(tests, name)
        if test is not None and test.p_adjusted < alpha:
            return Verdict(
                Label.SAMPLER_BUG,
                f"the speculative sampler's {what} ({_shown(test, alpha)})",
                ev.to_dict(),
            )
    for kind in VS_PLACEBO:
        test = find(tests, f"{kind}:vs-placebo")
        if test is None or test.p_adjusted >= alpha:
            continue
        found = (
            f"the speculative samples differ from the placebo's, both scored under "
            f"{placebo.instrument or 'the same rows'} ({_shown(test, alpha)})"
        )
        if has_logits:
            return Verdict(Label.SAMPLER_BUG, found + note, ev.to_dict())
        batched, why, label = _batched_answer(analysis.batched, kind, alpha)
        followed = replace(ev, followed_up=True, batched=batched)
        return Verdict(label, f"{found}; {why}{note}", followed.to_dict())
    return None


def _no_rejection(
    analysis: PromptAnalysis,
    ev: SamplingEvidence,
    placebo: Placebo,
    note: str,
    rejects: Sequence[ScoredTest],
) -> Verdict:
    """No comparison with the placebo rejects: the logits the sampler used, the output
    distributions' own difference (drift), the speculative samples alone, then the power."""
    alpha = analysis.alpha
    drift = analysis.drift
    fidelity = placebo.fidelity
    floor = max(KL_NOT_TARGET, 10 * fidelity.kl_mean) if fidelity else KL_NOT_TARGET
    if drift is not None and drift.drift.kl_mean > floor:
        return Verdict(
            Label.SAMPLER_BUG,
            f"the logits the speculative sampler used are not the target's: mean KL "
            f"{drift.drift.kl_mean:.3f} nats against the target's own re-scoring (re-scoring the "
            f"placebo moves rows by {fidelity.kl_mean if fidelity else 0:.4f}; batching drift "
            f"is typically < 0.01), top-1 agreement {drift.drift.top1_agreement:.2f}",
            ev.to_dict(),
        )
    if rejects:
        names = ", ".join(t.name for t in rejects)
        return Verdict(
            Label.NUMERIC_DRIFT,
            f"no test of the speculative samples against the placebo rejects, but the output "
            f"distributions differ "
            f"({names} reject at alpha {alpha:.2g}): the logits differ between the paths{note}",
            ev.to_dict(),
        )
    alone = rejected(analysis.consistency, alpha)
    if alone and not ev.placebo_rejected:
        return Verdict(
            Label.INCONCLUSIVE,
            f"the speculative samples alone reject the rows ({_shown(alone[0], alpha)}), but the "
            "comparison with the placebo does not: add seeds to tell a sampler fault from the "
            "instrument",
            ev.to_dict(),
        )
    return _by_power(analysis, ev, note)


def _by_power(analysis: PromptAnalysis, ev: SamplingEvidence, note: str) -> Verdict:
    """``equivalent`` where nothing rejected and the test had the power; else ``inconclusive``
    with how many tokens would give it."""
    alpha = analysis.alpha
    shown, n, df, what = _power(analysis)
    power, level = shown.power, shown.alpha
    errors = analysis.rescore_errors
    if errors:
        what += (
            f"; re-scoring failed for {len(errors)} of {analysis.samples} samples "
            f"({errors[0]}), so the tests against the placebo did not run"
        )
    if power >= MIN_POWER:
        return Verdict(
            Label.EQUIVALENT,
            f"no test rejects at alpha {alpha:.2g}; the {what} test over {n} effective tokens "
            f"had power "
            f"{power:.2f} for Cohen's w >= 0.1 at the Holm level {level:.2g}{note}",
            replace(ev, power=shown).to_dict(),
        )
    need = n
    while need < 10**7 and min_detectable_w(max(need, 1), df, alpha=level, power=MIN_POWER) > 0.1:
        need = max(2 * need, 16)
    short = replace(shown, tokens=n, tokens_needed=need)  # how many seeds would do
    samples = analysis.samples
    more = f" (about {math.ceil(samples * need / n)} seeds)" if n and samples else ""
    return Verdict(
        Label.INCONCLUSIVE,
        f"no test rejects, but the {what} test over {n} effective tokens has power only "
        f"{power:.2f} for w >= 0.1 at the Holm level {level:.2g}; about {need} would reach "
        f"{MIN_POWER}{more}: add seeds or max_tokens{note}",
        replace(ev, power=short).to_dict(),
    )
