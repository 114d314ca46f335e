"""Temperature > 0: the evidence each sample carries, and the tests over one prompt's seeds.

Per emitted token the engine reports the logits row its sampler used; `chain_pit` turns that row
and the configured sampler chain into two floats (the probability mass ranked before the token,
and the token's probability), enough for the randomized PIT of the one-sample *sampler
consistency* test. `analyze_prompt` pools all seeds of one prompt and runs:

- the speculative samples against the placebo, the baseline's samples scored by the same
  instrument (`equiv.verdicts.placebo`): the tests that may decide ``sampler-bug``;
- sampler consistency, per path, against the instrument's rows alone (``stats.pit_uniformity_
  test``, ``stats.top_token_test``, ``stats.temperature_test``): recorded, never decisive, since
  re-scored rows are not exactly the rows a server sampled from;
- baseline vs speculative, two-sample: first-token distribution (chi-square on merged bins),
  sequence log-likelihood under one re-scoring for both paths, length (KS) and distinct-2
  (distinct token bigrams / bigrams: repetition; Mann-Whitney);
- the stages of a rejection sampler, for engines that report their judgements (`_stage_tests`);
- same-seed agreement (informational: llama-cpp-python spends one random draw per token on both
  paths, so equal seeds give equal text unless the logits differ);
- drift: KL and |Δlogit| between the rows the speculative sampler used and the target's own
  single-token re-scoring of the same tokens (recorded by the runner for every seed).

Pure functions of records; no model is called here.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
from scipy.special import ndtri

from equiv.config import SamplingConfig
from equiv.records import Drift, Judgement
from equiv.verdicts.chain import PENALTY_WINDOW, chain_distribution, pit_position
from equiv.verdicts.fidelity import Fidelity
from equiv.verdicts.placebo import pit_vs_placebo, temperature_vs_placebo, top_token_vs_placebo
from equiv.verdicts.stats import (
    TestResult,
    acceptance_rate_test,
    chi2_two_sample,
    forced_decisions_test,
    holm,
    ks_two_sample,
    mann_whitney,
    pit_uniformity_test,
    randomized_pit,
    temperature_test,
    top_token_test,
)

__all__ = [
    "PENALTY_WINDOW",
    "PIT_BINS",
    "analyze_prompt",
    "batched_vs_placebo",
    "chain_distribution",
    "chain_evidence",
    "chain_pit",
    "chain_sensitivity",
    "judgement_evidence",
    "pipeline",
    "top_k_rows",
]

PIT_BINS = 10
DEGENERATE = 1.0 - 1e-9  # a chain distribution whose top token holds all the mass


def _pit(ids: npt.NDArray[np.intp], probs: npt.NDArray[np.float64], token: int) -> list[float]:
    """``[mass_before, p_token, p_top]``; a token outside the candidates had probability 0, so
    all the mass ranks before it."""
    where = int(np.searchsorted(ids, token))
    if where < ids.size and ids[where] == token:
        mass, p = pit_position(probs, where)
    else:
        mass, p = 1.0, 0.0
    return [round(mass, 9), round(p, 9), round(float(probs.max()), 9)]


def chain_pit(
    rows: npt.NDArray[np.float32], tokens: Sequence[int], sampling: SamplingConfig
) -> list[list[float]]:
    """``[mass_before, p_token, p_top]`` of every emitted token under the configured chain
    (``p_top``: the probability of the chain's most probable token)."""
    return chain_evidence(rows, tokens, sampling)[0]


def chain_evidence(
    rows: npt.NDArray[np.float32], tokens: Sequence[int], sampling: SamplingConfig
) -> tuple[list[list[float]], list[float]]:
    """`chain_pit` and `chain_sensitivity` of every emitted token, from one pass of the chain
    over each row (the chain is most of their cost: a partition of the whole vocabulary)."""
    pits, sensitivities = [], []
    for i, (row, token) in enumerate(zip(rows, tokens, strict=True)):
        ids, probs = chain_distribution(row, tokens[:i], sampling)
        pits.append(_pit(ids, probs, int(token)))
        sensitivities.append(_sensitivity(ids, probs, int(token)))
    return pits, sensitivities


def _phi_of_quantile(x: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """φ(Φ⁻¹(x)), 0 at x = 0 and 1."""
    q = ndtri(x)
    out: npt.NDArray[np.float64] = np.exp(-0.5 * q * q) / np.sqrt(2.0 * np.pi)
    return out


def chain_sensitivity(
    rows: npt.NDArray[np.float32], tokens: Sequence[int], sampling: SamplingConfig
) -> list[float]:
    """Each emitted position's sensitivity to the temperature, for the temperature test
    (`equiv.verdicts.stats.temperature_test`): ``k = d/dλ E_λ[Z] at λ = 1``, where ``Z`` is the
    normal score of the position's randomized PIT and ``p_λ(x) ∝ p(x)**λ`` tempers the chain's
    distribution ``p`` (λ > 1 colder). ``k = Σ_x p(x) (log p(x) - E_p[log p]) E[Z | x]``, with
    ``E[Z | x] = (φ(Φ⁻¹(a)) - φ(Φ⁻¹(b))) / p(x)`` over the token's PIT interval ``[a, b]`` (tokens
    ranked as in `equiv.verdicts.chain.pit_position`). It depends on the row, not on the token
    drawn, so it can weigh the position. 0 where the chain leaves one token, or where the token
    is outside the chain's support (the PIT counts that)."""
    return chain_evidence(rows, tokens, sampling)[1]


def _sensitivity(ids: npt.NDArray[np.intp], probs: npt.NDArray[np.float64], token: int) -> float:
    """`chain_sensitivity` of one position, from the chain's candidates and probabilities."""
    keep = probs > 0
    ids, probs = ids[keep], probs[keep]
    where = int(np.searchsorted(ids, token))
    if ids.size < 2 or where >= ids.size or ids[where] != token:
        return 0.0
    order = np.lexsort((ids, -probs))  # probability descending, ties by ascending id
    p = probs[order]
    upper = np.clip(np.cumsum(p), 0.0, 1.0)
    lower = np.clip(upper - p, 0.0, 1.0)
    density = _phi_of_quantile(lower) - _phi_of_quantile(upper)
    logp = np.log(p)
    centred = logp - float(np.dot(p, logp))
    return round(float(np.dot(centred, density)), 9)  # Σ p · centred · E[Z | x]


def top_k_rows(
    alternatives: Sequence[Any], tokens: Sequence[int], sampling: SamplingConfig
) -> npt.NDArray[np.float32] | None:
    """Rows rebuilt from a server's top-K log-probabilities (``-inf`` elsewhere) when every row
    holds at least the chain's ``top_k`` candidates: then they hold the chain's whole support
    and its probabilities are exact. None otherwise (no top_k, or fewer candidates recorded)."""
    k = sampling.top_k
    if k <= 0 or len(alternatives) < len(tokens) or not tokens:
        return None
    if any(len(alt.ids) < k for alt in alternatives[: len(tokens)]):
        return None
    width = 1 + max(max(max(alt.ids) for alt in alternatives[: len(tokens)]), max(tokens))
    rows = np.full((len(tokens), width), -np.inf, dtype=np.float32)
    for i, alt in enumerate(alternatives[: len(tokens)]):
        rows[i, list(alt.ids)] = alt.logits
    return rows


def judgement_evidence(
    rows: npt.NDArray[np.float32],
    tokens: Sequence[int],
    judgements: Sequence[Judgement],
    sampling: SamplingConfig,
) -> dict[str, list[list[float]]]:
    """Each stage of a rejection sampler, from the rows it used (``Capabilities.judgements``).

    With p the target's and q the draft's distribution under the configured chain:

    - ``acceptance``: ``[a, accepted, q(x)]`` per judged draft token x, ``a = min(1, p(x) /
      q(x))`` the probability the rule accepts it with (1 where q(x) = 0);
    - ``residual_pit``: ``[mass_before, p, p_top]`` of each replacement drawn after a rejection,
      under ``norm(max(0, p - q))`` (p itself where that is all zero).
    """
    acceptance: list[list[float]] = []
    residual: list[list[float]] = []
    for j in judgements:
        p_ids, p = chain_distribution(rows[j.pos], tokens[: j.pos], sampling)
        q_ids, q = chain_distribution(j.draft_row, tokens[: j.pos], sampling)
        ids = np.union1d(p_ids, q_ids)
        pp = np.zeros(ids.size)
        qq = np.zeros(ids.size)
        pp[np.searchsorted(ids, p_ids)] = p
        qq[np.searchsorted(ids, q_ids)] = q
        where = int(np.searchsorted(ids, j.token))
        known = where < ids.size and ids[where] == j.token
        px, qx = (float(pp[where]), float(qq[where])) if known else (0.0, 0.0)
        a = min(1.0, px / qx) if qx > 0 else 1.0
        acceptance.append([round(a, 12), float(j.accepted), round(qx, 12)])
        if not j.accepted:
            r = np.maximum(pp - qq, 0.0)
            r = r / r.sum() if r.sum() > 0 else pp
            residual.append(_pit(ids, r, int(tokens[j.pos])))
    return {"acceptance": acceptance, "residual_pit": residual}


def _pit_values(
    records: Sequence[Mapping[str, Any]], path: str, seed: int, key: str = "chain_pit"
) -> Any:
    """Randomized PIT values of the emitted tokens, leaving out positions where the chain left a
    single token: there u would be the uniform V alone, pure noise that only dilutes the test
    (dropping them conditions on the distribution, not on the draw, so H0 still holds)."""
    pits = [t for r in records for t in r[path].get(key, []) if t[2] < DEGENERATE]
    if not pits:
        return np.empty(0)
    arr = np.asarray(pits, dtype=np.float64)
    return randomized_pit(arr[:, 0], arr[:, 1], np.random.default_rng(seed))


def _top_token(
    records: Sequence[Mapping[str, Any]], path: str, alpha: float, key: str = "chain_pit"
) -> TestResult:
    pits = np.asarray([t for r in records for t in r[path].get(key, [])], dtype=float)
    if pits.size == 0:
        return top_token_test([], [], alpha=alpha)
    # The emitted token is the top one exactly when no mass ranks before it.
    return top_token_test(pits[:, 0] == 0.0, pits[:, 2], alpha=alpha)


def _stage_tests(
    records: Sequence[Mapping[str, Any]], alpha: float, seed: int, effect_w: float
) -> list[TestResult]:
    """The rejection sampler's stages on their own, for engines that report judgements: the
    accept/reject decisions against ``min(1, p/q)``, and the replacements against the residual."""
    if not any("acceptance" in r["speculative"] for r in records):
        return []
    rows = [t for r in records for t in r["speculative"].get("acceptance", [])]
    arr = np.asarray(rows, dtype=np.float64).reshape(-1, 3)
    a, accepted, q_token = arr[:, 0], arr[:, 1], arr[:, 2]
    u = _pit_values(records, "speculative", seed, key="residual_pit")
    forced = forced_decisions_test(a, accepted, q_token, alpha=alpha)
    return [
        _renamed(forced, "acceptance-forced:speculative"),
        _renamed(acceptance_rate_test(a, accepted, alpha=alpha), "acceptance-rate:speculative"),
        _renamed(
            pit_uniformity_test(u, alpha=alpha, bins=PIT_BINS, effect_w=effect_w),
            "residual:speculative",
        ),
    ]


def _loglik(record: Mapping[str, Any], path: str, key: str) -> float | None:
    """The sample's log-likelihood under the rows and chain of its PIT entries ``key``."""
    pits = record[path].get(key)
    if pits is None:
        return None
    return float(sum(np.log(max(t[1], 1e-300)) for t in pits))


def _distinct2(tokens: Sequence[int]) -> float | None:
    """Distinct bigrams / bigrams of one sample (repetition: a loop scores low); None below 2."""
    pairs = list(itertools.pairwise(tokens))
    return len(set(pairs)) / len(pairs) if pairs else None


def _pit_hist(u: Any) -> dict[str, list[float]]:
    counts, _ = np.histogram(u, bins=PIT_BINS, range=(0.0, 1.0))
    return {"observed": counts.tolist(), "expected": [len(u) / PIT_BINS] * PIT_BINS}


def _first_tokens(records: Sequence[Mapping[str, Any]], path: str) -> Counter[int]:
    return Counter(int(r[path]["tokens"][0]) for r in records if r[path]["tokens"])


def _drift_summary(records: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """The seeds' re-scoring drifts pooled into one `Drift` (means of the means, maxima of the
    maxima), with the number of samples it pools."""
    drifts = [Drift.from_dict(r["rescore_drift"]) for r in records if r.get("rescore_drift")]
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
    return {"samples": len(drifts), **pooled.to_dict()}


def analyze_prompt(
    records: Sequence[Mapping[str, Any]],
    *,
    alpha: float,
    effect_w: float = 0.1,
    has_logits: bool = True,
) -> dict[str, Any]:
    """The tests over one prompt's seed records, Holm-adjusted within the prompt at ``alpha``.

    ``alpha`` is the prompt's share of the run's family-wise level (the runner divides by the
    number of prompts: Bonferroni across prompts, Holm within). Both paths' samples are scored by
    one instrument (`pipeline`): in process the rows each path reported; over HTTP the target's
    single-token rows re-scored on the baseline server, for the baseline's samples (the
    *placebo*) exactly as for the speculative ones. The decision family (``tests``): the
    speculative samples against the placebo (`equiv.verdicts.placebo`), the rejection
    sampler's stages where the engine reports them, and the two-sample tests of the outputs.
    Beside it, each path's one-sample tests against the instrument's rows (``placebo.tests``
    for the baseline, ``consistency`` for the speculative path), each Holm-adjusted among its own.
    """
    pit_seed = _pit_seed(records)
    keys = pipeline(records, has_logits)
    u = {
        path: _pit_values(records, path, pit_seed + i, key=key)
        for i, (path, key) in enumerate(keys.items())
    }
    one_sample = {
        path: _adjusted(_consistency(records, path, key, alpha, effect_w, u[path], path))
        for path, key in keys.items()
    }
    tests: list[TestResult] = []
    if len(keys) == 2:
        tests += _vs_placebo(records, keys["speculative"], keys["baseline"], alpha, effect_w, "")
    tests.extend(_stage_tests(records, alpha, pit_seed, effect_w))
    first = {path: _first_tokens(records, path) for path in ("baseline", "speculative")}
    tests.append(
        _renamed(
            chi2_two_sample(
                first["baseline"], first["speculative"], alpha=alpha, effect_w=effect_w
            ),
            "first-token:two-sample",
        )
    )
    lengths = {p: [len(r[p]["tokens"]) for r in records] for p in ("baseline", "speculative")}
    # Both paths' samples under one scorer: the target's single-token re-scoring where both
    # have it (in process too: the speculative path's own rows are batched), else the pipeline.
    scorer = pipeline(records, has_logits=False) if len(pipeline(records, False)) == 2 else keys
    if len(scorer) == 2:
        scored = {p: [_loglik(r, p, scorer[p]) for r in records] for p in scorer}
        logliks = {p: [x for x in xs if x is not None] for p, xs in scored.items()}
        tests.append(
            _renamed(
                mann_whitney(logliks["baseline"], logliks["speculative"], alpha=alpha),
                "log-likelihood:two-sample",
            )
        )
    if len(set(lengths["baseline"] + lengths["speculative"])) > 1:
        tests.append(
            _renamed(
                ks_two_sample(lengths["baseline"], lengths["speculative"], alpha=alpha),
                "length:two-sample",
            )
        )
    distinct = {
        p: [d for r in records if (d := _distinct2(r[p]["tokens"])) is not None] for p in lengths
    }
    if len(set(distinct["baseline"] + distinct["speculative"])) > 1:
        tests.append(
            _renamed(
                mann_whitney(distinct["baseline"], distinct["speculative"], alpha=alpha),
                "distinct-2:two-sample",
            )
        )
    same = sum(r["baseline"]["tokens"] == r["speculative"]["tokens"] for r in records)
    errors = [
        f"{path}: {r[path]['rescore_error']}"
        for r in records
        for path in ("baseline", "speculative")
        if "rescore_error" in r[path]
    ]
    return {
        **({"rescore_errors": errors} if errors else {}),
        "samples": len(records),
        "alpha": alpha,
        "pipeline": keys,
        "tests": _adjusted(tests),
        "placebo": _placebo(records, keys, one_sample.get("baseline"), has_logits, alpha),
        "consistency": one_sample.get("speculative", []),
        "same_seed_agreement": same / len(records),
        "drift": _drift_summary(records),
        "charts": {
            "pit_hist": {path: _pit_hist(values) for path, values in u.items()},
            "first_token": {
                path: {str(tok): n for tok, n in counts.most_common(12)}
                for path, counts in first.items()
            },
        },
    }


def _adjusted(tests: Sequence[TestResult]) -> list[dict[str, Any]]:
    """The tests as records, each with its Holm-adjusted p-value among ``tests``."""
    adjusted = holm([t.p_value for t in tests])
    return [{**t.to_dict(), "p_adjusted": p} for t, p in zip(tests, adjusted, strict=True)]


def _placebo(
    records: Sequence[Mapping[str, Any]],
    keys: Mapping[str, str],
    tests: list[dict[str, Any]] | None,
    has_logits: bool,
    alpha: float,
) -> dict[str, Any]:
    """The placebo's own record: the baseline's one-sample tests through the speculative
    samples' pipeline, the re-scoring's fidelity, and over HTTP the baseline against the rows
    the server reported while sampling (``own_rows``: the premise that it samples from them);
    ``error`` where it could not be formed."""
    fidelity = Fidelity.pooled(
        Fidelity.from_dict(r["rescore_fidelity"]) for r in records if r.get("rescore_fidelity")
    )
    out: dict[str, Any] = {"fidelity": None if fidelity is None else fidelity.to_dict()}
    if tests is None or "speculative" not in keys:
        missing = [p for p in ("baseline", "speculative") if p not in keys]
        out["error"] = (
            f"the {' and the '.join(missing)} samples were not scored by the instrument "
            "(re-scoring not offered, or it failed), so the speculative samples cannot be "
            "compared with a placebo"
        )
        return out
    out["tests"] = tests
    out["instrument"] = (
        "the rows each path reported (in process)"
        if has_logits
        else "the target's single-token rows re-scored on the baseline server"
    )
    if not has_logits and all("chain_pit" in r["baseline"] for r in records):
        u = _pit_values(records, "baseline", _pit_seed(records) + 5)
        effect_w = 0.1
        out["own_rows"] = _adjusted(
            _consistency(records, "baseline", "chain_pit", alpha, effect_w, u, "baseline")
        )
    return out


def _tokens(
    records: Sequence[Mapping[str, Any]], path: str, key: str
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.intp], npt.NDArray[np.float64] | None]:
    """One path's PIT entries under ``key`` as an (n, 3) array, the sample (record) each token
    belongs to, and the sensitivities beside them (None where a record lacks them)."""
    sens_key = key.replace("_pit", "_sensitivity")
    pits = [t for r in records for t in r[path].get(key, [])]
    ids = np.asarray([i for i, r in enumerate(records) for _ in r[path].get(key, [])], np.intp)
    sens = None
    if all(sens_key in r[path] for r in records):
        paired = (zip(r[path].get(key, []), r[path][sens_key], strict=True) for r in records)
        sens = np.asarray([k for pairs in paired for _, k in pairs], dtype=np.float64)
    return np.asarray(pits, dtype=np.float64).reshape(-1, 3), ids, sens


def _vs_placebo(
    records: Sequence[Mapping[str, Any]],
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
    seed = _pit_seed(records) + 7
    data = {
        "speculative": _tokens(records, "speculative", spec_key),
        "baseline": _tokens(records, "baseline", base_key),
    }
    rngs = {path: np.random.default_rng(seed + i) for i, path in enumerate(data)}
    u = {
        path: randomized_pit(pits[:, 0], pits[:, 1], rngs[path])
        for path, (pits, _, _) in data.items()
    }
    name = f"vs-placebo{suffix}"

    def live(path: str) -> tuple[Any, Any]:
        keep = data[path][0][:, 2] < DEGENERATE
        return u[path][keep], data[path][1][keep]

    out = [
        _renamed(
            pit_vs_placebo(live("speculative"), live("baseline"), alpha=alpha, effect_w=effect_w),
            f"pit:{name}",
        )
    ]
    top = {path: (p[:, 0] == 0.0, p[:, 2], ids) for path, (p, ids, _) in data.items()}
    out.append(
        _renamed(
            top_token_vs_placebo(top["speculative"], top["baseline"], alpha=alpha),
            f"top-token:{name}",
        )
    )
    weighed = {
        path: (u[path], sens, ids) for path, (_, ids, sens) in data.items() if sens is not None
    }
    if len(weighed) == 2:
        out.append(
            _renamed(
                temperature_vs_placebo(weighed["speculative"], weighed["baseline"], alpha=alpha),
                f"temperature:{name}",
            )
        )
    return out


def batched_vs_placebo(
    records: Sequence[Mapping[str, Any]], *, alpha: float, effect_w: float = 0.1
) -> list[dict[str, Any]]:
    """Over HTTP, where the speculative samples differ from the placebo under single-token rows:
    the speculative samples re-scored *batched*, as draft verification evaluates them
    (``batched_pit``, ``batched_sensitivity``), against the placebo under single-token rows, as
    plain decoding evaluates (``target_pit``). Each path is scored under re-scored rows of its
    own evaluation shape, so numeric drift between the shapes cancels and only a sampler fault
    (and the re-scoring's error on each) is left. Holm-adjusted among themselves at ``alpha``.
    """
    return _adjusted(_vs_placebo(records, "batched_pit", "target_pit", alpha, effect_w, "-batched"))


def _pit_seed(records: Sequence[Mapping[str, Any]]) -> int:
    """The randomized PIT's seed: fixed by the prompt and its number of samples."""
    return sum(str(records[0]["key"]).split("::")[0].encode()) + len(records)


def _consistency(
    records: Sequence[Mapping[str, Any]],
    path: str,
    key: str,
    alpha: float,
    effect_w: float,
    u: Any,
    label: str,
) -> list[TestResult]:
    """One path's sampler-consistency tests on the PIT entries under ``key`` (and the
    sensitivities beside them): PIT uniformity over ``u``, the top-token count, and the
    temperature test where every record has its sensitivities; each named ``<test>:<label>``."""
    result = pit_uniformity_test(u, alpha=alpha, bins=PIT_BINS, effect_w=effect_w)
    tests = [_renamed(result, f"sampler-consistency:{label}")]
    tests.append(_renamed(_top_token(records, path, alpha, key), f"top-token:{label}"))
    sens_key = key.replace("_pit", "_sensitivity")
    if all(key in r[path] and sens_key in r[path] for r in records):
        seed = _pit_seed(records) + 3 + (path == "speculative")  # each path its own draws
        tests.append(
            _renamed(
                _temperature(records, path, (key, sens_key), alpha, seed), f"temperature:{label}"
            )
        )
    return tests


def pipeline(records: Sequence[Mapping[str, Any]], has_logits: bool) -> dict[str, str]:
    """Which PIT entries each path's samples are scored by: the same instrument for both. In
    process the rows each path reported (``chain_pit``); over HTTP the target's single-token rows
    re-scored on the baseline server (``target_pit``), for the baseline's samples (the placebo)
    as for the speculative ones. A path whose records lack them (re-scoring not offered or
    failed) is left out."""
    key = "chain_pit" if has_logits else "target_pit"
    return {
        path: key
        for path in ("baseline", "speculative")
        if records and all(key in r[path] for r in records)
    }


def _temperature(
    records: Sequence[Mapping[str, Any]],
    path: str,
    keys: tuple[str, str],
    alpha: float,
    seed: int,
) -> TestResult:
    """The temperature test on every emitted position: its randomized PIT and its sensitivity."""
    pits, _, sens = _tokens(records, path, keys[0])
    assert sens is not None  # asked only where every record has its sensitivities
    u = randomized_pit(pits[:, 0], pits[:, 1], np.random.default_rng(seed))
    return temperature_test(u, sens, alpha=alpha)


def _renamed(result: TestResult, name: str) -> TestResult:
    return dataclasses.replace(result, name=name)
