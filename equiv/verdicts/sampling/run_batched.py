"""The run's batched follow-up over HTTP: a pooled test rejected under the target's
single-token rows; is that numeric drift (a correct speculative path samples from the rows
verification computes in a batch) or a fault of the sampler?

The speculative samples are re-scored *batched*, as verification evaluates them
(`equiv.run.evidence.Evidence.batched_path`), and asked again, in the pooled tests' design
(`equiv.verdicts.sampling.pooled.Design`):

- **one sample** (`Design.EXACT_RESCORED`: the re-scoring reproduces the rows the baseline
  sampled from): the speculative samples against the batched rows, by the same pooled tests
  (PIT, top token, temperature; Holm). The placebo judges this instrument too: its samples,
  drawn from the single-token rows, are re-scored batched and must pass the same tests. Where
  they do, the difference between single-token and batched evaluation is below what the tests
  see at this size, and so is the difference between the batched re-scoring and verification's
  own batches (both batches on a cached prefix; they differ only in the batch's length): a
  rejection of the speculative samples is then not drift. Where the placebo fails, the drift is
  visible, and the follow-up is the comparison below instead.
- **two samples** (`Design.VS_PLACEBO`, or where the placebo failed the batched rows): the
  speculative samples under the batched rows against the placebo's under the single-token rows
  (`equiv.verdicts.sampling.pit_tests.batched_vs_placebo`): each path under rows of its own
  evaluation shape, so drift between the shapes cancels.

The one-sample comparison has about twice the information of the two-sample one for the same
samples (the placebo's noise is not added): it is what makes a fault confirmable at the look the
pooled tests find it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from equiv.json_types import JSONDict, JSONObject
from equiv.records.codec import decode, encode
from equiv.records.verdict import Label
from equiv.verdicts.sampling.analysis_record import ScoredTest
from equiv.verdicts.sampling.pit_tests import adjusted, batched_vs_placebo
from equiv.verdicts.sampling.pooled import against_rows
from equiv.verdicts.sampling.samples import Sample
from equiv.verdicts.sampling.verdict import MIN_POWER

__all__ = ["BATCHED_KEY", "RunBatched", "confirm"]

#: The PIT entries of a sample re-scored batched (`equiv.verdicts.sampling.samples.PathSample`).
BATCHED_KEY = "batched_pit"


@dataclass(frozen=True)
class RunBatched:
    """Over HTTP, after a pooled test rejected: the samples re-scored batched, pooled over the
    prompts (``tests``, at the pooled level), or why that could not be asked.

    one_sample: the tests are the speculative samples against the batched rows (else against
    the placebo); instrument: the placebo's samples against the batched rows, where asked (a
    test that rejects there sent the follow-up to the comparison with the placebo)."""

    tests: tuple[ScoredTest, ...] = ()
    error: str | None = None
    samples: int = 0
    one_sample: bool = False
    instrument: tuple[ScoredTest, ...] = ()

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
        if self.one_sample:
            differ = f"they fail the tests against those rows ({shown}), which the placebo passes"
            agree = f"they pass the tests against those rows ({shown}), as the placebo does"
        else:
            placebo = ", ".join(
                f"{t.kind} p = {t.p_adjusted:.2g}" for t in self.instrument if t.p_adjusted < alpha
            )
            visible = (
                f"the placebo's samples are not draws from the batched rows either ({placebo}), "
                "so compared with the placebo "
                if placebo
                else ""
            )
            differ = f"{visible}they still differ from it ({shown})"
            agree = f"{visible}they agree with it ({shown})"
        over = f"re-scored batched, as draft verification evaluates them ({self.samples} samples)"
        if rejects:
            return Label.SAMPLER_BUG, f"and {over}, {differ}: numeric drift does not explain it"
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


def confirm(scored: Sequence[Sample], *, alpha: float, one_sample: bool) -> RunBatched:
    """The follow-up's tests over ``scored`` (samples with ``batched_pit`` on the paths asked:
    both where ``one_sample``, the speculative one otherwise) at the pooled level ``alpha``."""
    instrument: tuple[ScoredTest, ...] = ()
    if one_sample:
        instrument = tuple(
            adjusted(against_rows(scored, "baseline", BATCHED_KEY, alpha, "batched"))
        )
        if not any(t.p_adjusted < alpha for t in instrument):
            tests = adjusted(against_rows(scored, "speculative", BATCHED_KEY, alpha, "batched"))
            return RunBatched(
                tuple(tests), samples=len(scored), one_sample=True, instrument=instrument
            )
    tests = batched_vs_placebo(scored, alpha=alpha)
    return RunBatched(tuple(tests), samples=len(scored), instrument=instrument)
