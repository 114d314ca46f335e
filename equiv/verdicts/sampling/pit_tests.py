"""The PIT tests over one sampled prompt's pooled seeds, each sample a record of evidence
(`equiv.verdicts.sampling.token_evidence`):

- the speculative samples against the placebo, the baseline's samples scored by the same
  instrument (`equiv.verdicts.sampling.placebo`): the tests that may decide ``sampler-bug``
  (`vs_placebo`), and over HTTP their batched follow-up (`batched_vs_placebo`);
- sampler consistency, per path, against the instrument's rows alone (PIT uniformity, top-token
  count, temperature: `consistency`);
- the stages of a rejection sampler, for engines that report their judgements (`stage_tests`).

`pipeline` says which PIT entries are the instrument. Pure functions of the samples
(`equiv.verdicts.sampling.samples.Sample`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from equiv.verdicts.sampling.analysis_record import ScoredTest
from equiv.verdicts.sampling.placebo import (
    pit_vs_placebo,
    temperature_vs_placebo,
    top_token_vs_placebo,
)
from equiv.verdicts.sampling.samples import Sample
from equiv.verdicts.stats import (
    TestResult,
    acceptance_rate_test,
    forced_decisions_test,
    holm,
    pit_uniformity_test,
    randomized_pit,
    temperature_test,
    top_token_test,
)

__all__ = [
    "DEGENERATE",
    "PIT_BINS",
    "adjusted",
    "batched_vs_placebo",
    "consistency",
    "pipeline",
    "pit_seed",
    "pit_values",
    "renamed",
    "stage_tests",
    "tokens_of",
    "top_derivatives",
    "vs_placebo",
]

PIT_BINS = 10
DEGENERATE = 1.0 - 1e-9  # a chain distribution whose top token holds all the mass


def pipeline(records: Sequence[Sample], has_logits: bool) -> dict[str, str]:
    """Which PIT entries each path's samples are scored by: the same instrument for both. In
    process the rows each path reported (``chain_pit``); over HTTP the target's single-token rows
    re-scored on the baseline server (``target_pit``), for the baseline's samples (the placebo)
    as for the speculative ones. A path whose records lack them (re-scoring not offered or
    failed) is left out."""
    key = "chain_pit" if has_logits else "target_pit"
    return {
        path: key
        for path in ("baseline", "speculative")
        if records and all(key in r.path(path).pits for r in records)
    }


def pit_seed(records: Sequence[Sample]) -> int:
    """The randomized PIT's seed: fixed by the prompt and its number of samples."""
    return sum(records[0].key.split("::")[0].encode()) + len(records)


def pit_values(
    records: Sequence[Sample], path: str, seed: int, key: str = "chain_pit"
) -> npt.NDArray[np.float64]:
    """Randomized PIT values of the emitted tokens, leaving out positions where the chain left a
    single token: there u would be the uniform V alone, pure noise that only dilutes the test
    (dropping them conditions on the distribution, not on the draw, so H0 still holds)."""
    pits = [t for r in records for t in r.path(path).pits.get(key, ()) if t[2] < DEGENERATE]
    if not pits:
        return np.empty(0)
    arr = np.asarray(pits, dtype=np.float64)
    return randomized_pit(arr[:, 0], arr[:, 1], np.random.default_rng(seed))


def consistency(
    records: Sequence[Sample],
    path: str,
    key: str,
    alpha: float,
    effect_w: float,
    u: npt.NDArray[np.float64],
    label: str,
) -> list[TestResult]:
    """One path's sampler-consistency tests on the PIT entries under ``key`` (and the
    sensitivities beside them): PIT uniformity over ``u``, the top-token count, and the
    temperature test where every record has its sensitivities; each named ``<test>:<label>``."""
    result = pit_uniformity_test(u, alpha=alpha, bins=PIT_BINS, effect_w=effect_w)
    tests = [renamed(result, f"sampler-consistency:{label}")]
    tests.append(renamed(_top_token(records, path, alpha, key), f"top-token:{label}"))
    sens_key = key.replace("_pit", "_sensitivity")
    if all(key in r.path(path).pits and sens_key in r.path(path).sensitivities for r in records):
        seed = pit_seed(records) + 3 + (path == "speculative")  # each path its own draws
        tests.append(
            renamed(
                _temperature(records, path, (key, sens_key), alpha, seed), f"temperature:{label}"
            )
        )
    return tests


def _top_token(
    records: Sequence[Sample], path: str, alpha: float, key: str = "chain_pit"
) -> TestResult:
    pits = np.asarray([t for r in records for t in r.path(path).pits.get(key, ())], dtype=float)
    if pits.size == 0:
        return top_token_test([], [], alpha=alpha)
    # The emitted token is the top one exactly when no mass ranks before it.
    return top_token_test(pits[:, 0] == 0.0, pits[:, 2], alpha=alpha)


def _temperature(
    records: Sequence[Sample],
    path: str,
    keys: tuple[str, str],
    alpha: float,
    seed: int,
) -> TestResult:
    """The temperature test on every emitted position: its randomized PIT and its sensitivity."""
    pits, _, sens = tokens_of(records, path, keys[0])
    assert sens is not None  # asked only where every record has its sensitivities
    u = randomized_pit(pits[:, 0], pits[:, 1], np.random.default_rng(seed))
    return temperature_test(u, sens, alpha=alpha)


def vs_placebo(
    records: Sequence[Sample],
    spec_key: str,
    base_key: str,
    alpha: float,
    effect_w: float,
    suffix: str,
) -> list[TestResult]:
    """The speculative samples under ``spec_key`` against the placebo (the baseline's samples
    under ``base_key``), each sample a cluster: PIT histograms (positions the chain leaves one
    token out), top-token excess, temperature; named ``<test>:vs-placebo`` (with ``suffix``).
    Each path and test draws its own randomization of the PIT."""
    seed = pit_seed(records) + 7
    data = {
        "speculative": tokens_of(records, "speculative", spec_key),
        "baseline": tokens_of(records, "baseline", base_key),
    }
    rngs = {path: np.random.default_rng(seed + i) for i, path in enumerate(data)}
    u = {
        path: randomized_pit(pits[:, 0], pits[:, 1], rngs[path])
        for path, (pits, _, _) in data.items()
    }
    name = f"vs-placebo{suffix}"

    def live(path: str) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.intp]]:
        keep = data[path][0][:, 2] < DEGENERATE
        return u[path][keep], data[path][1][keep]

    out = [
        renamed(
            pit_vs_placebo(live("speculative"), live("baseline"), alpha=alpha, effect_w=effect_w),
            f"pit:{name}",
        )
    ]
    top = {path: (p[:, 0] == 0.0, p[:, 2], ids) for path, (p, ids, _) in data.items()}
    out.append(
        renamed(
            top_token_vs_placebo(top["speculative"], top["baseline"], alpha=alpha),
            f"top-token:{name}",
        )
    )
    weighed = {
        path: (u[path], sens, ids) for path, (_, ids, sens) in data.items() if sens is not None
    }
    if len(weighed) == 2:
        out.append(
            renamed(
                temperature_vs_placebo(weighed["speculative"], weighed["baseline"], alpha=alpha),
                f"temperature:{name}",
            )
        )
    return out


def tokens_of(
    records: Sequence[Sample], path: str, key: str
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.intp], npt.NDArray[np.float64] | None]:
    """One path's PIT entries under ``key`` as an (n, 3) array, the sample (record) each token
    belongs to, and the sensitivities beside them (None where a record lacks them)."""
    sens_key = key.replace("_pit", "_sensitivity")
    samples = [r.path(path) for r in records]
    pits = [t for s in samples for t in s.pits.get(key, ())]
    ids = np.asarray([i for i, s in enumerate(samples) for _ in s.pits.get(key, ())], np.intp)
    sens = None
    if all(sens_key in s.sensitivities for s in samples):
        paired = (zip(s.pits.get(key, ()), s.sensitivities[sens_key], strict=True) for s in samples)
        sens = np.asarray([k for pairs in paired for _, k in pairs], dtype=np.float64)
    return np.asarray(pits, dtype=np.float64).reshape(-1, 3), ids, sens


def top_derivatives(
    records: Sequence[Sample], path: str, key: str
) -> npt.NDArray[np.float64] | None:
    """One path's ``t`` per token under ``key`` (the third entry of its ``_score``: the top
    token's probability's derivative in λ), in `tokens_of`'s order; None where a record lacks
    it (written before equiv recorded it)."""
    score_key = key.replace("_pit", "_score")
    samples = [r.path(path) for r in records]
    tops: list[float] = []
    for s in samples:
        scores = s.scores.get(score_key)
        if scores is None or len(scores) != len(s.pits.get(key, ())):
            return None
        if any(len(score) < 3 for score in scores):
            return None
        tops.extend(score[2] for score in scores)
    return np.asarray(tops, dtype=np.float64)


def margin_moves(records: Sequence[Sample], path: str, key: str) -> npt.NDArray[np.float64] | None:
    """One path's per-token means of the temperature residuals under the tempered family at
    the bound's margins (the last four entries of its ``_score``, `TokenEvidence.scores`) as
    an (n, 4) array in `tokens_of`'s order; None where a record lacks them."""
    score_key = key.replace("_pit", "_score")
    moves: list[Sequence[float]] = []
    for sample in (r.path(path) for r in records):
        scores = sample.scores.get(score_key)
        if scores is None or len(scores) != len(sample.pits.get(key, ())):
            return None
        if any(len(score) < 7 for score in scores):
            return None
        moves.extend(score[3:7] for score in scores)
    return np.asarray(moves, dtype=np.float64).reshape(-1, 4)


def batched_vs_placebo(
    records: Sequence[Sample], *, alpha: float, effect_w: float = 0.1
) -> list[ScoredTest]:
    """Over HTTP, where the speculative samples differ from the placebo under single-token rows:
    the speculative samples re-scored *batched*, as draft verification evaluates them
    (``batched_pit``, ``batched_sensitivity``), against the placebo under single-token rows, as
    plain decoding evaluates (``target_pit``). Each path is scored under re-scored rows of its
    own evaluation shape, so numeric drift between the shapes cancels and only a sampler fault
    (and the re-scoring's error on each) is left. Holm-adjusted among themselves at ``alpha``.
    """
    return adjusted(vs_placebo(records, "batched_pit", "target_pit", alpha, effect_w, "-batched"))


def stage_tests(
    records: Sequence[Sample], alpha: float, seed: int, effect_w: float
) -> list[TestResult]:
    """The rejection sampler's stages on their own, for engines that report judgements: the
    accept/reject decisions against ``min(1, p/q)``, and the replacements against the residual."""
    if all(r.speculative.acceptance is None for r in records):
        return []
    rows = [t for r in records for t in r.speculative.acceptance or ()]
    arr = np.asarray(rows, dtype=np.float64).reshape(-1, 3)
    a, accepted, q_token = arr[:, 0], arr[:, 1], arr[:, 2]
    u = pit_values(records, "speculative", seed, key="residual_pit")
    forced = forced_decisions_test(a, accepted, q_token, alpha=alpha)
    return [
        renamed(forced, "acceptance-forced:speculative"),
        renamed(acceptance_rate_test(a, accepted, alpha=alpha), "acceptance-rate:speculative"),
        renamed(
            pit_uniformity_test(u, alpha=alpha, bins=PIT_BINS, effect_w=effect_w),
            "residual:speculative",
        ),
    ]


def adjusted(tests: Sequence[TestResult]) -> list[ScoredTest]:
    """The tests, each with its Holm-adjusted p-value among ``tests``."""
    p_adjusted = holm([t.p_value for t in tests])
    return [ScoredTest.of(t, p) for t, p in zip(tests, p_adjusted, strict=True)]


def renamed(result: TestResult, name: str) -> TestResult:
    return dataclasses.replace(result, name=name)
