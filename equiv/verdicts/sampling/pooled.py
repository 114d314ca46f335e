"""Temperature > 0 at run level: one answer for the deployment, from every prompt's evidence
pooled (`pool`, then `equiv.verdicts.sampling.run_verdict.classify_run`).

A sampler fault is a fault of the deployment, not of one prompt. Under H0 (the speculative path
samples as plain decoding does) each emitted token's residual under the instrument's rows has mean
0 given its context, so per-sample sums add over seeds *and* prompts: the run is one sample of
samples, each sample a cluster. Two designs, by what the instrument is:

- `Design.OWN_ROWS`, in process: each path's samples are scored under the rows it reported,
  the logits its engine sampled from, so the speculative samples are tested against them
  directly (one sample: half the variance of a comparison with the placebo, whose own residuals
  add their noise and nothing else). The *placebo* (the baseline's samples through the very same
  pipeline) judges the instrument: the same tests on it must not reject, or the run is
  ``inconclusive`` (equiv's chain, recomputed from the logits, does not reproduce the engine's
  own sampler) and no pooled test is believed.
- `Design.EXACT_RESCORED`, over HTTP where the re-scoring is measured exact: both paths are
  scored under the target's single-token rows re-scored on the baseline server, and where the
  baseline's re-scored rows are, at every position of the run, the rows its server reported
  sampling from (`equiv.verdicts.sampling.fidelity.Fidelity.exact`: one request in flight,
  forced decoding), the re-scored rows are plain decoding's own, and the speculative samples
  are tested against them as in process, the placebo's same tests judging the instrument.
- `Design.VS_PLACEBO`, over HTTP otherwise: the re-scoring is not exact (another batch,
  another cache state: several requests in flight), so every test is the speculative samples
  against the placebo's (`equiv.verdicts.sampling.placebo`): an error the instrument makes on
  both cancels, and the instrument alone cannot reject.

Over HTTP, where the servers report the rows tokens were sampled from (llama-server: outside a
speculative step), those speculative tokens are also tested against them (``:reported``), the
placebo's against its own as their check: nothing but the sampler lies between (rule 4).

The tests:

- ``pit``: the randomized PITs' histograms (omnibus: any change of shape);
- ``top-token``: the top token emitted in excess of what the rows imply (greedy-ish acceptance,
  a too-cold sampler, "relaxed" acceptance of the runner-up);
- ``temperature``: ``λ - 1`` of the tempered family ``p ** λ`` (a wrong temperature anywhere);
- ``support``: tokens the configured chain cannot emit under the rows (a top-k/top-p/min-p cut-off
  ignored, a residual without its clamp or its normalisation): in process an exact binomial
  test of the count against the instrument's tolerance, and of the tokens outside beyond
  rounding, which a correct sampler cannot emit (`equiv.verdicts.sampling.support`), the
  placebo's own its check; over HTTP an exact conditional binomial test of the two paths' counts.
- ``draft-leak``, ``relaxed-acceptance``, ``draft-temperature``: in process, where a rejection
  sampler reports the draft's rows, bets on scores aimed at those faults
  (`equiv.verdicts.sampling.rule_scores`).

They are Holm-adjusted among themselves at the run's pooled level. Beside each directed test a
*bound* with its ``1 - 2 alpha`` confidence interval (the two one-sided tests of TOST at
``alpha``), in units a user reads: the speculative samples' own effect (one-sample designs) or
the difference speculative minus placebo (`Design.VS_PLACEBO`). The margins are the smallest
effects that matter (`equiv.verdicts.sampling.pooled_bounds.MARGINS`): each is below the
mildest reference fault that the sequential benchmark injects (``wrong_temp``: 18 % colder,
``greedy`` at 0.1: the top token about 3 points more often), so ``equivalent`` excludes them.

Prompts whose samples were not scored by the instrument on both paths (re-scoring not offered or
failed) are left out of the pool and counted. Pure functions of the samples; no model is called.
"""

from __future__ import annotations

import dataclasses
import enum
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from equiv.json_types import JSONDict, JSONObject
from equiv.records import PATHS
from equiv.records.codec import OMIT, decode, encode
from equiv.verdicts.sampling.analysis_record import ScoredTest
from equiv.verdicts.sampling.drift_shift import DriftShift, drift_shift
from equiv.verdicts.sampling.fidelity import Fidelity
from equiv.verdicts.sampling.pit_tests import (
    adjusted,
    consistency,
    pipeline,
    pit_seed,
    pit_values,
    tokens_of,
    top_derivatives,
    vs_placebo,
)
from equiv.verdicts.sampling.pooled_bounds import Bound, PathData
from equiv.verdicts.sampling.pooled_bounds import bounds as bounds_of
from equiv.verdicts.sampling.rule_scores import rule_tests
from equiv.verdicts.sampling.samples import Sample
from equiv.verdicts.sampling.support import outside, support_against_rows, support_vs_placebo
from equiv.verdicts.stats import TestResult

__all__ = [
    "REPORTED",
    "Design",
    "PooledAnalysis",
    "against_rows",
    "is_reported",
    "pool",
]

#: Over HTTP, the PIT entries of the tokens whose sampled-from row the server reported
#: (`equiv.verdicts.sampling.token_evidence.reported_evidence`).
REPORTED = "reported_pit"


def is_reported(test: ScoredTest) -> bool:
    """Whether ``test`` is one of the tests against the rows a server reported sampling from."""
    return test.name.endswith(":reported")


class Design(str, enum.Enum):
    """What the pooled tests compare: in process each path's samples against the rows it
    sampled from, over HTTP against the re-scored rows where those are measured exact (one
    sample each, the placebo's own tests judging the instrument); over HTTP otherwise the
    speculative samples against the placebo's under one re-scoring (two samples)."""

    OWN_ROWS = "own-rows"
    EXACT_RESCORED = "exact-rescored"
    VS_PLACEBO = "vs-placebo"

    def __str__(self) -> str:
        return self.value

    @property
    def one_sample(self) -> bool:
        """The speculative samples are tested against rows, not against the placebo."""
        return self is not Design.VS_PLACEBO

    @classmethod
    def of(cls, records: Sequence[Sample], has_logits: bool) -> Design:
        """The design the instrument allows: `OWN_ROWS` in process; over HTTP
        `EXACT_RESCORED` where every sample's re-scoring was measured on the baseline and is
        exact over the run's positions together, else `VS_PLACEBO`."""
        if has_logits:
            return cls.OWN_ROWS
        measured = [s.rescore_fidelity for s in records]
        parts = [f for f in measured if f is not None]
        if len(parts) < len(measured):
            return cls.VS_PLACEBO
        fidelity = Fidelity.pooled(parts)
        return cls.EXACT_RESCORED if fidelity is not None and fidelity.exact else cls.VS_PLACEBO


@dataclass(frozen=True)
class PooledAnalysis:
    """The run's pooled tests and bounds at one level.

    prompts: the prompts pooled; left_out: the keys of those without the evidence; samples and
    tokens: what was pooled (tokens per path); seeds: the most seeds any pooled prompt has."""

    alpha: float
    prompts: int
    samples: int
    tokens: int
    seeds: int
    tests: tuple[ScoredTest, ...] = ()
    bounds: tuple[Bound, ...] = ()
    left_out: tuple[str, ...] = ()
    #: the prompts whose own comparison with the placebo is strongest, smallest p first
    carriers: tuple[tuple[str, float], ...] = ()
    #: what the tests compare; records written before it read as `Design.VS_PLACEBO`
    design: Design = Design.VS_PLACEBO
    #: the placebo's (the baseline's) one-sample tests under its own rows (in process, exact
    #: re-scoring, the rows a server reported): one that rejects says the instrument does not
    #: reproduce the engine's sampler
    instrument: tuple[ScoredTest, ...] = ()
    #: over HTTP, what the re-scored rows move the temperature estimate by (`drift_shift`)
    drift: DriftShift | None = dataclasses.field(default=None, metadata={OMIT: None})
    #: the bounds' level where it is not ``alpha`` (`pool`); records written before it: alpha
    bound_alpha: float | None = dataclasses.field(default=None, metadata={OMIT: None})

    @property
    def bounds_level(self) -> float:
        """The ``alpha`` of the bounds' ``1 - 2 alpha`` intervals."""
        return self.alpha if self.bound_alpha is None else self.bound_alpha

    def rejected(self) -> list[ScoredTest]:
        return [t for t in self.tests if t.p_adjusted < self.alpha]

    def instrument_rejected(self) -> list[ScoredTest]:
        return [t for t in self.instrument if t.p_adjusted < self.alpha]

    def believed(self) -> PooledAnalysis:
        """Without the ``:reported`` tests where the placebo fails them on its own rows (the
        others stand: their Holm family counted the ones left out)."""
        if not any(is_reported(t) for t in self.instrument_rejected()):
            return self
        return dataclasses.replace(
            self,
            tests=tuple(t for t in self.tests if not is_reported(t)),
            instrument=tuple(t for t in self.instrument if not is_reported(t)),
        )

    def seeds_needed(self) -> int | None:
        """The seeds a prompt that would bring every bound within its margin, if the estimates
        stayed where they are; None where one is at or past its margin, where a path has fewer
        than 2 samples (no interval), or where all are within."""
        factors = [b.seeds_factor() for b in self.bounds if not b.within]
        if not factors or any(f is None for f in factors):
            return None
        return math.ceil(self.seeds * max(f for f in factors if f is not None))

    def lines(self) -> tuple[str, ...]:
        """What was pooled, each test with its Holm p, and each bound: a line each, for the
        terminal and the report."""
        left = f", {len(self.left_out)} left out (no placebo)" if self.left_out else ""
        head = (
            f"pooled over {self.prompts} prompt(s){left}: {self.samples} samples, "
            f"{self.tokens} speculative tokens, alpha {self.alpha:.3g}"
        )
        if self.bounds_level != self.alpha:
            head += f", the bounds at 1 - 2 x {self.bounds_level:.3g}"
        tests = [f"{t.name}: Holm p {t.p_adjusted:.3g}; {t.summary}" for t in self.tests]
        placebo = [
            f"placebo {t.name} (the instrument's check): Holm p {t.p_adjusted:.3g}"
            for t in self.instrument
        ]
        drift = () if self.drift is None else (self.drift.line,)
        return (head, *tests, *placebo, *(b.line for b in self.bounds), *drift)

    def to_dict(self) -> JSONDict:
        return encode(self)

    @classmethod
    def from_dict(cls, data: JSONObject) -> PooledAnalysis:
        return decode(cls, data, "pooled")


def _support(
    data: PathData, records: Sequence[Sample], alpha: float, design: Design
) -> tuple[TestResult, list[TestResult]]:
    """The support test (`support_against_rows` in process, the placebo's own its check;
    otherwise `support_vs_placebo`) and the placebo's check, named ``support:pooled``."""
    counts = [(int(outside(pits).sum()), len(pits)) for pits, _, _ in data.values()]
    if design is not Design.OWN_ROWS:
        result = support_vs_placebo(counts[0], counts[1], alpha=alpha)
        return dataclasses.replace(result, name="support:pooled"), []
    spec, placebo = (
        support_against_rows(*c, alpha=alpha, far=_far(records, path))
        for c, path in zip(counts, data, strict=True)
    )
    return dataclasses.replace(spec, name="support:pooled"), [
        dataclasses.replace(placebo, name="support:pooled")
    ]


def _far(records: Sequence[Sample], path: str) -> tuple[int, int] | None:
    """A path's tokens outside the chain's support beyond rounding, and the tokens of the
    records that count them (files written before equiv did, typical-p: not); None where none
    does."""
    counted = [r.path(path) for r in records if r.path(path).far_outside is not None]
    tokens = sum(len(p.pits.get("chain_pit", ())) for p in counted)
    if not tokens:
        return None
    return sum(len(p.far_outside or ()) for p in counted), tokens


def _carriers(
    by_prompt: Mapping[str, Sequence[Sample]], key: str, alpha: float
) -> tuple[tuple[str, float], ...]:
    """The three prompts whose own comparison with the placebo is strongest (smallest
    unadjusted p over their tests): where the pooled evidence lives."""
    smallest = []
    for prompt, samples in by_prompt.items():
        tests = vs_placebo(samples, key, key, alpha, 0.1, "")
        smallest.append((prompt, min(t.p_value for t in tests)))
    return tuple(sorted(smallest, key=lambda x: x[1])[:3])


def against_rows(
    records: Sequence[Sample], path: str, key: str, alpha: float, label: str = "pooled"
) -> list[TestResult]:
    """One path's samples against the rows under ``key`` (one sample each: PIT uniformity,
    top-token count, temperature), named ``pit:<label>`` and so on."""
    seed = pit_seed(records) + 13 + (path == "speculative")  # each path its own draws
    u = pit_values(records, path, seed, key)
    tests = consistency(records, path, key, alpha, 0.1, u, label)
    # the PIT's test goes by "pit", as the comparison with the placebo does
    return [
        dataclasses.replace(t, name=t.name.replace("sampler-consistency", "pit")) for t in tests
    ]


def pool(
    by_prompt: Mapping[str, Sequence[Sample]],
    *,
    alpha: float,
    has_logits: bool,
    bound_alpha: float | None = None,
) -> PooledAnalysis:
    """The pooled tests (at ``alpha``) and bounds (at ``bound_alpha``, ``alpha`` if not given;
    a run passes its whole level, which no prompt's test shares) over every prompt's samples.

    In process (``has_logits``) each path's samples are scored under the rows it reported, the
    logits its engine sampled from; over HTTP under the target's re-scored rows. Where those
    rows are the ones sampled from (in process, or over HTTP where the baseline's re-scoring is
    measured exact: `Design.of`) the speculative samples are tested against them directly (one
    sample: half the variance of a comparison with the placebo), and the placebo's samples by
    the same tests judge the instrument (equiv's chain recomputed from those rows against the
    engine's own sampler). Otherwise the speculative samples are compared with the placebo's
    (`Design.VS_PLACEBO`). The support test is one-sample in process (the count, and the count
    beyond rounding: `equiv.verdicts.sampling.support`), a comparison with the placebo's count
    otherwise."""
    key = "chain_pit" if has_logits else "target_pit"
    level = alpha if bound_alpha is None else bound_alpha
    pooled = {p: s for p, s in by_prompt.items() if s and len(pipeline(s, has_logits)) == 2}
    left_out = tuple(p for p in by_prompt if p not in pooled)
    records = [s for samples in pooled.values() for s in samples]
    seeds = max((len(s) for s in pooled.values()), default=0)
    design = Design.of(records, has_logits)
    if not records:
        return PooledAnalysis(alpha, 0, 0, 0, 0, left_out=left_out, design=design)
    tests, checks, reported, drift = _tests(records, design, key, alpha, has_logits, level)
    # Each path's tokens once, for the support test and the bounds (speculative first).
    data = {path: tokens_of(records, path, key) for path in ("speculative", "baseline")}
    tops = {path: top_derivatives(records, path, key) for path in data}
    support, support_check = _support(data, records, alpha, design)
    tests.append(support)
    checks += support_check
    return PooledAnalysis(
        alpha=alpha,
        prompts=len(pooled),
        samples=len(records),
        tokens=len(data["speculative"][0]),
        seeds=seeds,
        tests=tuple(adjusted(tests)),
        bounds=bounds_of(records, data, tops, level, own_rows=design.one_sample, key=key),
        left_out=left_out,
        carriers=_carriers(pooled, key, alpha),
        design=design,
        instrument=(*adjusted(checks), *adjusted(reported)),
        drift=drift,
        bound_alpha=bound_alpha,
    )


def _tests(
    records: Sequence[Sample],
    design: Design,
    key: str,
    alpha: float,
    has_logits: bool,
    level: float,
) -> tuple[list[TestResult], list[TestResult], list[TestResult], DriftShift | None]:
    """The pooled tests but the support's, the placebo's checks of the instrument (one-sample
    designs), the placebo's own against its reported rows, and the drift shift (over HTTP where
    the servers reported rows; at the bounds' ``level``)."""
    checks: list[TestResult] = []  # the placebo's, judging the instrument
    if design.one_sample:
        tests, checks = (against_rows(records, p, key, alpha) for p in ("speculative", "baseline"))
        tests += rule_tests(records, alpha) if has_logits else []  # the draft's rows at hand
    else:
        tests = [
            dataclasses.replace(t, name=t.name.replace("vs-placebo", "pooled"))
            for t in vs_placebo(records, key, key, alpha, 0.1, "")
        ]
    reported: list[TestResult] = []  # the placebo's against its reported rows, its own family
    drift = None
    if not has_logits and _has_reported(records):
        tests += against_rows(records, "speculative", REPORTED, alpha, label="reported")
        reported = against_rows(records, "baseline", REPORTED, alpha, label="reported")
        drift = drift_shift(records, alpha=level)
    return tests, checks, reported, drift


def _has_reported(records: Sequence[Sample]) -> bool:
    """Every sample carries the rows its servers reported, and some were kept on each path
    (which were depends on the rows, not on the draws)."""
    if not all(REPORTED in r.path(p).pits for r in records for p in PATHS):
        return False
    return all(any(r.path(p).pits[REPORTED] for r in records) for p in PATHS)
