"""Temperature > 0: the analysis of one sampled prompt over all its seeds (`analyze`).

Per emitted token each record carries its evidence (`equiv.verdicts.sampling.token_evidence`);
`analyze` pools all seeds of one prompt (`Sample`s) and runs:

- the speculative samples against the placebo, the baseline's samples scored by the same
  instrument (`equiv.verdicts.sampling.placebo`): the tests that may decide ``sampler-bug``;
- sampler consistency, per path, against the instrument's rows alone (``stats.pit_uniformity_
  test``, ``stats.top_token_test``, ``stats.temperature_test``): recorded, never decisive, since
  re-scored rows are not exactly the rows a server sampled from;
- baseline vs speculative, two-sample: first-token distribution (chi-square on merged bins),
  sequence log-likelihood under one re-scoring for both paths, length (KS) and distinct-2
  (distinct token bigrams / bigrams: repetition; Mann-Whitney);
- the stages of a rejection sampler, for engines that report their judgements;
- same-seed agreement (informational: llama-cpp-python spends one random draw per token on both
  paths, so equal seeds give equal text unless the logits differ);
- drift: KL and |Δlogit| between the rows the speculative sampler used and the target's own
  single-token re-scoring of the same tokens (recorded by the runner for every seed over HTTP,
  for the first `equiv.run.evidence.RESCORED_SEEDS` in process).

The PIT tests themselves are in `equiv.verdicts.sampling.pit_tests`. Pure functions of records; no
model is called here.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Mapping, Sequence

import numpy as np
import numpy.typing as npt

from equiv.records import Drift
from equiv.verdicts.sampling.analysis_record import (
    Charts,
    Placebo,
    PooledDrift,
    PromptAnalysis,
    ScoredTest,
)
from equiv.verdicts.sampling.fidelity import Fidelity
from equiv.verdicts.sampling.pit_tests import (
    PIT_BINS,
    adjusted,
    consistency,
    pipeline,
    pit_seed,
    pit_values,
    renamed,
    stage_tests,
    vs_placebo,
)
from equiv.verdicts.sampling.samples import Sample
from equiv.verdicts.stats import TestResult, chi2_two_sample, ks_two_sample, mann_whitney

__all__ = ["analyze"]


def _loglik(record: Sample, path: str, key: str) -> float | None:
    """The sample's log-likelihood under the rows and chain of its PIT entries ``key``."""
    pits = record.path(path).pits.get(key)
    if pits is None:
        return None
    return float(sum(np.log(max(t[1], 1e-300)) for t in pits))


def _distinct2(tokens: Sequence[int]) -> float | None:
    """Distinct bigrams / bigrams of one sample (repetition: a loop scores low); None below 2."""
    pairs = list(itertools.pairwise(tokens))
    return len(set(pairs)) / len(pairs) if pairs else None


def _pit_hist(u: npt.NDArray[np.float64]) -> dict[str, list[float]]:
    counts, _ = np.histogram(u, bins=PIT_BINS, range=(0.0, 1.0))
    return {"observed": counts.tolist(), "expected": [len(u) / PIT_BINS] * PIT_BINS}


def _first_tokens(records: Sequence[Sample], path: str) -> Counter[int]:
    return Counter(r.path(path).tokens[0] for r in records if r.path(path).tokens)


def _drift_summary(records: Sequence[Sample]) -> PooledDrift | None:
    """The seeds' re-scoring drifts pooled into one `Drift` (means of the means, maxima of the
    maxima), with the number of samples it pools."""
    drifts = [r.rescore_drift for r in records if r.rescore_drift is not None]
    if not drifts:
        return None
    p99 = [d.kl_p99 for d in drifts if d.kl_p99 is not None]
    pooled = Drift(
        rows=sum(d.rows for d in drifts),
        kl_mean=float(np.mean([d.kl_mean for d in drifts])),
        kl_p99=max(p99) if p99 else None,
        kl_max=max(d.kl_max for d in drifts),
        max_abs_logit_delta=max(d.max_abs_logit_delta for d in drifts),
        top1_agreement=float(np.mean([d.top1_agreement for d in drifts])),
    )
    return PooledDrift(len(drifts), pooled)


def _logliks(records: Sequence[Sample], keys: Mapping[str, str]) -> dict[str, list[float]] | None:
    """Both paths' log-likelihoods under one scorer, the target's single-token rows: their
    re-scoring where every sample has it on both paths; in process (``keys``: each path's own
    rows) the baseline's own rows, which are those rows (plain decoding), beside the speculative
    samples that were re-scored (the first seeds: its own rows are batched, another
    instrument), or each path's own rows where none was; over HTTP with a re-scoring missing,
    none."""
    both = pipeline(records, has_logits=False)
    scorer = {p: (records, key) for p, key in both.items()}
    if len(both) < 2 and keys.get("baseline") == "chain_pit":
        rescored = [r for r in records if "target_pit" in r.speculative.pits]
        scorer = {"baseline": (records, "chain_pit")}
        scorer["speculative"] = (rescored, "target_pit") if rescored else (records, "chain_pit")
    if len(scorer) < 2:
        return None
    scored = {p: [_loglik(r, p, key) for r in chosen] for p, (chosen, key) in scorer.items()}
    return {p: [x for x in xs if x is not None] for p, xs in scored.items()}


def _output_tests(
    records: Sequence[Sample],
    keys: Mapping[str, str],
    first: Mapping[str, Counter[int]],
    alpha: float,
    effect_w: float,
) -> list[TestResult]:
    """The two-sample tests of the outputs: first tokens, log-likelihoods under one scorer,
    lengths and distinct bigrams (each only where it can tell the paths apart)."""
    tests = [
        renamed(
            chi2_two_sample(
                first["baseline"], first["speculative"], alpha=alpha, effect_w=effect_w
            ),
            "first-token:two-sample",
        )
    ]
    lengths = {p: [len(r.path(p).tokens) for r in records] for p in ("baseline", "speculative")}
    logliks = _logliks(records, keys)
    if logliks is not None:
        tests.append(
            renamed(
                mann_whitney(logliks["baseline"], logliks["speculative"], alpha=alpha),
                "log-likelihood:two-sample",
            )
        )
    if len(set(lengths["baseline"] + lengths["speculative"])) > 1:
        tests.append(
            renamed(
                ks_two_sample(lengths["baseline"], lengths["speculative"], alpha=alpha),
                "length:two-sample",
            )
        )
    distinct = {
        p: [d for r in records if (d := _distinct2(r.path(p).tokens)) is not None] for p in lengths
    }
    if len(set(distinct["baseline"] + distinct["speculative"])) > 1:
        tests.append(
            renamed(
                mann_whitney(distinct["baseline"], distinct["speculative"], alpha=alpha),
                "distinct-2:two-sample",
            )
        )
    return tests


def analyze(
    records: Sequence[Sample],
    *,
    alpha: float,
    effect_w: float = 0.1,
    has_logits: bool = True,
) -> PromptAnalysis:
    """The tests over one prompt's seed records, Holm-adjusted within the prompt at ``alpha``.

    ``alpha`` is the prompt's share of the run's family-wise level (the runner divides by the
    number of prompts: Bonferroni across prompts, Holm within). Both paths' samples are scored by
    one instrument (`pipeline`): in process the rows each path reported; over HTTP the target's
    single-token rows re-scored on the baseline server, for the baseline's samples (the
    *placebo*) exactly as for the speculative ones. The decision family (``tests``): the
    speculative samples against the placebo (`equiv.verdicts.sampling.pit_tests.vs_placebo`), the
    rejection sampler's stages where the engine reports them, and the two-sample tests of the
    outputs. Beside it, each path's one-sample tests against the instrument's rows
    (``placebo.tests`` for the baseline, ``consistency`` for the speculative path), each
    Holm-adjusted among its own.
    """
    seed = pit_seed(records)
    keys = pipeline(records, has_logits)
    u = {
        path: pit_values(records, path, seed + i, key=key)
        for i, (path, key) in enumerate(keys.items())
    }
    one_sample = {
        path: adjusted(consistency(records, path, key, alpha, effect_w, u[path], path))
        for path, key in keys.items()
    }
    tests: list[TestResult] = []
    if len(keys) == 2:
        tests += vs_placebo(records, keys["speculative"], keys["baseline"], alpha, effect_w, "")
    tests.extend(stage_tests(records, alpha, seed, effect_w))
    first = {path: _first_tokens(records, path) for path in ("baseline", "speculative")}
    tests += _output_tests(records, keys, first, alpha, effect_w)
    same = sum(r.baseline.tokens == r.speculative.tokens for r in records)
    return PromptAnalysis(
        rescore_errors=tuple(
            f"{path}: {error}"
            for r in records
            for path in ("baseline", "speculative")
            if (error := r.path(path).rescore_error) is not None
        ),
        samples=len(records),
        alpha=alpha,
        pipeline=keys,
        tests=tuple(adjusted(tests)),
        placebo=_placebo(records, keys, one_sample.get("baseline"), has_logits, alpha),
        consistency=tuple(one_sample.get("speculative", [])),
        same_seed_agreement=same / len(records),
        drift=_drift_summary(records),
        charts=Charts(
            pit_hist={path: _pit_hist(values) for path, values in u.items()},
            first_token={
                path: {str(tok): n for tok, n in counts.most_common(12)}
                for path, counts in first.items()
            },
        ),
    )


def _placebo(
    records: Sequence[Sample],
    keys: Mapping[str, str],
    tests: list[ScoredTest] | None,
    has_logits: bool,
    alpha: float,
) -> Placebo:
    """The placebo's own record: the baseline's one-sample tests through the speculative
    samples' pipeline, the re-scoring's fidelity, and over HTTP the baseline against the rows
    the server reported while sampling (``own_rows``: the premise that it samples from them);
    ``error`` where it could not be formed."""
    pooled = Fidelity.pooled(r.rescore_fidelity for r in records if r.rescore_fidelity)
    # as the file holds it: rounded
    fidelity = None if pooled is None else Fidelity.from_dict(pooled.to_dict())
    if tests is None or "speculative" not in keys:
        missing = [p for p in ("baseline", "speculative") if p not in keys]
        return Placebo(
            fidelity=fidelity,
            error=(
                f"the {' and the '.join(missing)} samples were not scored by the instrument "
                "(re-scoring not offered, or it failed), so the speculative samples cannot be "
                "compared with a placebo"
            ),
        )
    instrument = (
        "the rows each path reported (in process)"
        if has_logits
        else "the target's single-token rows re-scored on the baseline server"
    )
    own_rows = None
    if not has_logits and all("chain_pit" in r.baseline.pits for r in records):
        u = pit_values(records, "baseline", pit_seed(records) + 5)
        effect_w = 0.1
        own_rows = tuple(
            adjusted(consistency(records, "baseline", "chain_pit", alpha, effect_w, u, "baseline"))
        )
    return Placebo(fidelity, tests=tuple(tests), instrument=instrument, own_rows=own_rows)
