"""The verdict of a diagnosis in plain words, with the next step, worded from the summaries
the runs wrote (no statistics are computed here)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from equiv.json_types import json_float
from equiv.verdicts.verdict_evidence import PowerEvidence

if TYPE_CHECKING:
    from equiv.records.kinds import AnalysisRecord
    from equiv.verdicts.runs.summary import Summary

__all__ = ["seeds_needed", "verdict_lines"]


def seeds_needed(analyses: Sequence[AnalysisRecord], seeds: int) -> int | None:
    """Seeds per prompt at which every inconclusive prompt's test reaches the power its verdict
    asks for, from the tokens the classifier said it needs (None when it did not say)."""
    from equiv.records.verdict import Label

    needed = []
    for record in analyses:
        verdict = record.judged
        power = PowerEvidence.of(verdict.evidence)
        if verdict.label is not Label.INCONCLUSIVE or power is None:
            continue
        if power.tokens_needed and power.tokens:
            needed.append(math.ceil(seeds * power.tokens_needed / power.tokens))
    return max(needed) if needed else None


def _pooled_line(sampling: Summary, user_temp: float, seeds: int | None) -> str:
    """The run's pooled answer at the user's temperature, in the words of a bug report."""
    assert sampling.run is not None
    verdict, pooled = sampling.verdict, sampling.run.pooled
    where = f"at temp {user_temp:g}, pooled over {pooled.prompts} prompts"
    if verdict.label.value == "equivalent":
        return (
            f"{where}: no significant difference, and every effect is bounded within its "
            f"margin ({verdict.reason}): what you see between runs is sampling variance"
        )
    need = pooled.seeds_needed()
    if verdict.label.value == "inconclusive" and need is not None:
        return f"{where}: inconclusive, {verdict.reason}; rerun with --seeds {need} (now {seeds})"
    return f"{where}: {verdict.label}: {verdict.reason}"


def verdict_lines(
    temp0: Summary,
    sampling: Summary | None,
    *,
    draft_max: int,
    user_temp: float,
    analyses: Sequence[AnalysisRecord],
    seeds: int | None = None,
    not_speculating: str | None = None,
) -> list[str]:
    """Plain-language verdict and next steps from the runs' `Summary` objects (``seeds``: the
    seeds per prompt the sampling run used, to say how many would decide; ``not_speculating``:
    the header's speculation problem,
    `equiv.verdicts.temp0.misconfiguration.speculation_problem`)."""
    lines = []
    if not_speculating:
        lines.append(
            "speculation was never checked: " + not_speculating.removeprefix("speculating: ")
        )
    lines += _temp0_lines(temp0)
    if sampling is not None and sampling.run is not None:
        lines.append(_pooled_line(sampling, user_temp, seeds))
    elif sampling is not None:
        lines.append(_per_prompt_line(sampling, user_temp, analyses, seeds))
    if temp0.total.acceptance is not None:
        lines.append(_acceptance_line(temp0.total.acceptance, draft_max))
    return lines + _quality_lines(temp0, sampling)


def _temp0_lines(temp0: Summary) -> list[str]:
    t, verdict = temp0.total, temp0.verdict
    lines = [f"temp-0 outputs identical on {t.identical} of {t.prompts} prompts"]
    if t.diverged:
        lines.append(f"  {temp0.conclusion}")
    if verdict.label.value in ("sampler-bug", "misconfiguration"):
        lines.append(f"  next: read the evidence per prompt in the report; {verdict.reason}")
    elif t.diverged:
        lines.append(
            "  next: numeric drift is expected on CPUs (batched verification vs one-token "
            "decoding); it is not a bug in speculative decoding"
        )
    return lines


def _per_prompt_line(
    sampling: Summary, user_temp: float, analyses: Sequence[AnalysisRecord], seeds: int | None
) -> str:
    """A sampling run without a run-level answer (written before equiv pooled): its prompts'."""
    p_values = [
        json_float(t["p_adjusted"])
        for record in analyses
        for t in record.tests
        if "p_adjusted" in t
    ]
    powers = [PowerEvidence.of(r.judged.evidence) for r in analyses]
    known = [p.power for p in powers if p is not None]
    stats = [f"smallest adjusted p = {min(p_values):.2g}"] if p_values else []
    if known and len(known) == len(powers):
        stats.append(f"power {min(known):.2f} for Cohen's w >= 0.1")
    detail = f" ({'; '.join(stats)})" if stats else ""
    label = sampling.verdict.label.value
    if label == "equivalent":
        return (
            f"at temp {user_temp:g} no significant difference on {sampling.total.prompts} "
            f"prompts{detail}: what you see between runs is sampling variance"
        )
    if label == "inconclusive":
        more = seeds_needed(analyses, seeds) if seeds else None
        how = (
            f"rerun with --seeds {more} (now {seeds}) or a larger --max-tokens"
            if more
            else "rerun with more --seeds or a larger --max-tokens"
        )
        return f"at temp {user_temp:g} no test rejects, but the evidence is thin{detail}: {how}"
    return f"at temp {user_temp:g}: {sampling.conclusion}{detail}"


def _acceptance_line(acc: float, draft_max: int) -> str:
    # Expected tokens per target pass at a per-token acceptance (Leviathan et al., eq. 1).
    per_pass = (1 - acc ** (draft_max + 1)) / (1 - acc) if acc < 1 else draft_max + 1.0
    line = (
        f"draft-max {draft_max} gives acceptance {acc:.2f}: about {per_pass:.1f} tokens per "
        f"target pass (at most {draft_max + 1})"
    )
    if acc < 0.6 and draft_max > 4:
        line += "; try --draft-max 4"
    return line


def _quality_lines(temp0: Summary, sampling: Summary | None) -> list[str]:
    """The last line answers the user's question: did quality drop, by how much at most (at
    the user's temperature when they sample, else at temp 0)."""
    graded = [q for s in (sampling, temp0) if s is not None for q in s.quality]
    if not graded:
        return [
            "did quality drop? not measured: none of these prompts carries a grader "
            "(the built-in suites do; prompts/README.md, Graded prompts)"
        ]
    return [*(q.line for q in reversed(graded)), graded[0].answer_line]
