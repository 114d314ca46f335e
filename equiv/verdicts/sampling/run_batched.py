"""The run's batched follow-up over HTTP: a pooled test rejected under the target's
single-token rows; is that numeric drift (a correct speculative path samples from the rows
verification computes in a batch) or a fault of the sampler?

The speculative samples of the first seeds of each pooled prompt are re-scored *batched*, as
verification evaluates them (`equiv.run.evidence.Evidence.batched_path`), and compared with the
placebo's samples under the single-token rows (`equiv.verdicts.sampling.pit_tests.
batched_vs_placebo`): each path under rows of its own evaluation shape, so drift between the
shapes cancels. ``sampler-bug`` where that comparison rejects too.

Why not one sample, as the pooled tests are where re-scoring is exact: the speculative samples
against the batched rows alone, the placebo's samples re-scored batched as that instrument's
check? Measured on llama-server (`benchmarks/batched_followup.py`, temp 0.2, 11 code prompts x 4
seeds): a speculative path's rows are a mix of single-token steps and verification batches, and
the placebo's samples already come within p 0.0066 of failing the batched rows (top-token, at
alpha 0.005), a *correct* speculative path's within p 0.06, the greedy fault proxy's only at p
0.11: against batched rows alone a correct deployment looks as wrong as a faulty one, and a
passing instrument check would not bound that. Against the placebo the correct deployment gives
p = 1 on every test and the fault proxy 0.077.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from equiv.json_types import JSONDict, JSONObject
from equiv.records.codec import decode, encode
from equiv.records.verdict import Label
from equiv.verdicts.sampling.analysis_record import ScoredTest
from equiv.verdicts.sampling.pit_tests import batched_vs_placebo
from equiv.verdicts.sampling.samples import Sample
from equiv.verdicts.sampling.verdict import MIN_POWER

__all__ = ["RunBatched", "confirm"]


@dataclass(frozen=True)
class RunBatched:
    """Over HTTP, after a pooled test rejected: the speculative samples re-scored batched
    against the placebo, pooled over the prompts (``tests``, at the pooled level), or why that
    could not be asked."""

    tests: tuple[ScoredTest, ...] = ()
    error: str | None = None
    samples: int = 0

    def to_dict(self) -> JSONDict:
        return encode(self)

    @classmethod
    def from_dict(cls, data: JSONObject) -> RunBatched:
        return decode(cls, data, "batched")

    def answer(self, alpha: float, kinds: Sequence[str]) -> tuple[Label, str]:
        """What the follow-up says of a pooled rejection by tests of ``kinds`` at ``alpha``:
        ``sampler-bug`` where it rejects too, ``numeric-drift`` where it does not and had the
        power, ``inconclusive`` otherwise; with the clause that says why."""
        if not self.tests:
            why = self.error or "the target's batched rows were not asked"
            return (
                Label.INCONCLUSIVE,
                f"whether numeric drift explains it could not be checked: {why}",
            )
        rejects = [t for t in self.tests if t.p_adjusted < alpha]
        shown = ", ".join(f"{t.kind} p = {t.p_adjusted:.2g}" for t in self.tests)
        agree = f"they agree with the placebo ({shown})"
        over = f"re-scored batched, as draft verification evaluates them ({self.samples} samples)"
        if rejects:
            return Label.SAMPLER_BUG, (
                f"and {over}, they still differ from the placebo ({shown}): numeric drift does "
                "not explain it"
            )
        powers = [t.power or 0.0 for t in self.tests if t.kind in kinds]
        if not powers or min(powers) < MIN_POWER:
            return Label.INCONCLUSIVE, (
                f"{over}, {agree}, but that comparison had power "
                f"{min(powers, default=0.0):.2f} only: whether numeric drift explains it is not "
                "shown"
            )
        return Label.NUMERIC_DRIFT, (
            f"but {over}, {agree} (power {min(powers):.2f}): the difference between "
            "single-token and batched evaluation"
        )


def confirm(scored: Sequence[Sample], *, alpha: float) -> RunBatched:
    """The follow-up's tests over ``scored`` (samples whose speculative path carries
    ``batched_pit``) at the pooled level ``alpha``."""
    tests = batched_vs_placebo(scored, alpha=alpha)
    return RunBatched(tuple(tests), samples=len(scored))
