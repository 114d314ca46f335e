"""Does the difference matter? Paired quality statistics of graded prompts, as pure functions.

Input: one `GradedSample` per graded prompt x seed, with both paths' grades (see
`equiv.verdicts.quality.graders`). Samples where either grade is ``error`` (the grader could not
judge) are counted and left out. Per suite and over all: both paths' pass rates, the flips (temp 0),
each prompt's rates (temp > 0), and the paired difference with its equivalence test; those
statistics (intervals, tests, power) are in `equiv.verdicts.quality.pass_rates`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from equiv.json_types import JSONDict, json_object
from equiv.records import ResultRecord
from equiv.verdicts.quality.grade import Grade, Outcome
from equiv.verdicts.quality.pass_rates import (
    QUALITY_ALPHA,
    Difference,
    QualityAnswer,
    Rate,
    exact_mcnemar,
    paired_difference,
    stratified_difference,
    wilson,
)

__all__ = [
    "DEFAULT_MARGIN_POINTS",
    "Flip",
    "GradedSample",
    "PromptQuality",
    "Quality",
    "SuiteQuality",
    "quality",
    "samples_from_records",
]

DEFAULT_MARGIN_POINTS = 3.0


@dataclass(frozen=True)
class GradedSample:
    """Both paths' grades of one prompt (temp 0) or one prompt x seed (sampling)."""

    prompt: str  # suite/id
    suite: str
    seed: int | None
    baseline: Outcome
    speculative: Outcome
    label: str | None = None  # the divergence label of this prompt (temp 0)
    error: str = ""  # why a grader could not judge (either path)

    @property
    def usable(self) -> bool:
        return Outcome.ERROR not in (self.baseline, self.speculative)


@dataclass(frozen=True)
class Flip:
    """A temp-0 prompt passed on one path only; ``worse``: passed on the baseline only."""

    prompt: str
    worse: bool
    label: str | None

    def to_dict(self) -> JSONDict:
        return {"prompt": self.prompt, "worse": self.worse, "label": self.label}


@dataclass(frozen=True)
class PromptQuality:
    """One prompt's pass rates over its seeds (sampling)."""

    prompt: str
    baseline: Rate
    speculative: Rate


@dataclass(frozen=True)
class SuiteQuality:
    """Graded samples of one suite (or ``all``): pass rates, flips and tests."""

    suite: str
    baseline: Rate
    speculative: Rate
    worse: int  # samples passed only on the baseline
    better: int  # samples passed only on the speculative path
    mcnemar_p: float | None  # temp 0 only
    difference: Difference


@dataclass(frozen=True)
class Quality:
    """The quality answer of a run."""

    temp0: bool
    suites: tuple[SuiteQuality, ...]
    total: SuiteQuality
    flips: tuple[Flip, ...]
    prompts: tuple[PromptQuality, ...]  # sampling only
    errors: tuple[tuple[str, str], ...]  # (sample, reason) the grader could not judge

    @property
    def answer_line(self) -> str:
        """Did quality drop, and by how much at most: the user's question in one line."""
        t, d = self.total, self.total.difference
        worst = 100 * max(0.0, -d.low)
        conf = f"{100 * (1 - d.alpha):g} %"
        rates = (
            f"pass rate {100 * t.baseline.value:.1f} % without the draft, "
            f"{100 * t.speculative.value:.1f} % with it ({t.baseline.n} graded samples)"
        )
        answer = d.answer
        if answer is QualityAnswer.DROP:
            head = (
                f"yes, by {-100 * d.estimate:.1f} points (by at most {worst:.1f} points, at {conf})"
            )
        elif answer is QualityAnswer.NO_LOSS:
            head = (
                f"no: any drop is under {worst:.1f} points, within the "
                f"{100 * d.margin:g}-point margin, at {conf}"
            )
        elif answer is QualityAnswer.RISE:
            head = f"no: it rose by {100 * d.estimate:.1f} points"
        else:
            more = f"; about {d.needed} {d.unit} would tell" if d.needed else ""
            head = (
                f"not significantly, but a drop of up to {worst:.1f} points is not ruled out "
                f"at {conf}{more}"
            )
        return f"did quality drop? {head}; {rates}"

    @property
    def line(self) -> str:
        """The one-line quality summary printed by the terminal, diagnose and the report."""
        t = self.total
        counts = (
            f"{t.baseline.passed}/{t.baseline.n} baseline vs "
            f"{t.speculative.passed}/{t.speculative.n} speculative pass"
        )
        if self.temp0:
            labels = sorted({f.label or "?" for f in self.flips})
            flips = f"; {t.worse} got worse, {t.better} better" + (
                f" ({', '.join(labels)})" if labels else ""
            )
            test = f", exact McNemar p = {t.mcnemar_p:.2g}" if t.mcnemar_p is not None else ""
            head = f"{counts}{flips}{test}"
        else:
            head = (
                f"{counts} ({100 * t.baseline.value:.1f} % vs "
                f"{100 * t.speculative.value:.1f} % over {len(self.prompts)} prompts)"
            )
        errors = f"; {len(self.errors)} ungradable" if self.errors else ""
        return f"quality: {head}{errors}: {t.difference.sentence}"


def _suite(
    name: str, samples: Sequence[GradedSample], temp0: bool, margin: float, alpha: float
) -> SuiteQuality:
    base = sum(s.baseline is Outcome.PASS for s in samples)
    spec = sum(s.speculative is Outcome.PASS for s in samples)
    worse = sum(s.baseline is Outcome.PASS and s.speculative is not Outcome.PASS for s in samples)
    better = sum(s.speculative is Outcome.PASS and s.baseline is not Outcome.PASS for s in samples)
    if temp0:
        diff = paired_difference(len(samples), worse, better, margin=margin, alpha=alpha)
        p: float | None = exact_mcnemar(worse, better)
    else:
        by_prompt: dict[str, list[int]] = {}
        for s in samples:
            c = by_prompt.setdefault(s.prompt, [0, 0, 0, 0])
            c[0] += s.baseline is Outcome.PASS
            c[1] += 1
            c[2] += s.speculative is Outcome.PASS
            c[3] += 1
        strata = [(c[0], c[1], c[2], c[3]) for c in by_prompt.values()]
        diff = stratified_difference(strata, margin=margin, alpha=alpha)
        p = None
    n = len(samples)
    return SuiteQuality(
        name, wilson(base, n, 1 - 2 * alpha), wilson(spec, n, 1 - 2 * alpha), worse, better, p, diff
    )


def quality(
    samples: Iterable[GradedSample],
    *,
    temp0: bool,
    margin_points: float = DEFAULT_MARGIN_POINTS,
    alpha: float = QUALITY_ALPHA,
) -> Quality | None:
    """The quality answer of graded samples; None when no sample could be graded.
    ``margin_points``: a run's `RunConfig.quality_margin`, which the configuration checked."""
    all_samples = list(samples)
    usable = [s for s in all_samples if s.usable]
    errors = tuple(
        (s.prompt + ("" if s.seed is None else f" seed {s.seed}"), s.error or "grader error")
        for s in all_samples
        if not s.usable
    )
    if not usable:
        return None
    margin = margin_points / 100
    suites: dict[str, list[GradedSample]] = {}
    for s in usable:
        suites.setdefault(s.suite, []).append(s)
    flips = tuple(
        Flip(s.prompt, s.baseline is Outcome.PASS, s.label)
        for s in usable
        if temp0 and (s.baseline is Outcome.PASS) != (s.speculative is Outcome.PASS)
    )
    prompts: list[PromptQuality] = []
    if not temp0:
        by_prompt: dict[str, list[GradedSample]] = {}
        for s in usable:
            by_prompt.setdefault(s.prompt, []).append(s)
        for key, group in by_prompt.items():
            n = len(group)
            prompts.append(
                PromptQuality(
                    key,
                    wilson(sum(s.baseline is Outcome.PASS for s in group), n, 1 - 2 * alpha),
                    wilson(sum(s.speculative is Outcome.PASS for s in group), n, 1 - 2 * alpha),
                )
            )
    return Quality(
        temp0=temp0,
        suites=tuple(_suite(k, v, temp0, margin, alpha) for k, v in suites.items()),
        total=_suite("all", usable, temp0, margin, alpha),
        flips=flips,
        prompts=tuple(prompts),
        errors=errors,
    )


def samples_from_records(records: Iterable[ResultRecord]) -> list[GradedSample]:
    """The graded samples of result records (those that carry ``grades``)."""
    out = []
    for r in records:
        try:
            grades = json_object(r.extra["grades"])
            gb = Grade.from_dict(json_object(grades["baseline"]))
            gs = Grade.from_dict(json_object(grades["speculative"]))
        except (KeyError, TypeError, ValueError):
            continue
        error = next((g.reason for g in (gb, gs) if g.outcome is Outcome.ERROR), "")
        out.append(
            GradedSample(
                prompt=f"{r.suite}/{r.prompt_id}",
                suite=r.suite,
                seed=r.seed,
                baseline=gb.outcome,
                speculative=gs.outcome,
                label=None if r.verdict is None else r.verdict.label.value,
                error=error,
            )
        )
    return out
