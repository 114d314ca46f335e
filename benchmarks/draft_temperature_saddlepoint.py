"""A candidate for ``draft-temperature`` (issue 32), not equiv's test: the sum of its score
(`equiv.verdicts.sampling.rule_scores.score_rows`, the wrong-temperature rule's derivative in
the draft's exponent, over p) judged by a saddlepoint p-value rather than a normal tail or a
bet. Each position's cumulant generating function ``K_i(t) = log E_p exp(t s_i)`` is exact from
its row, so the tail of the sum follows its rare tokens where a normal tail cannot; the
Lugannani-Rice formula gives ``P(S >= s)``, the test is two-sided (the smaller tail, doubled).

- ``--level``: simulated correct runs on rows as a rejection sampler meets them (a target row
  over 24 tokens and a draft row near it, as `draft_temperature_level.py` drew them at cab99b5),
  with rows near certainty whose rare token (1e-5) scores about 300 of the row's standard
  deviations; rejections against the number expected, at the levels a run tests at.
- otherwise its power on the reference engine's ``wrong_temp`` pool (6 prompts x 16 seeds x 24
  tokens on the real pair, sampled as `fault_detection.py --pooled` samples it): 400 random
  subsets of whole samples a size, as `draft_temperature_power.py` drew them at cab99b5 for
  the e-value, each sample's tokens drawn afresh from the faulty distribution at its positions,
  at the pooled tests' first Holm step (alpha x `POOLED_SHARE` / 7) and at alpha.

    python benchmarks/draft_temperature_saddlepoint.py --level
    python benchmarks/draft_temperature_saddlepoint.py --reps 400
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import numpy.typing as npt
from fault_detection import ALPHA, POWER, sample_pools
from scipy import stats as sps
from scipy.optimize import brentq
from scipy.special import logsumexp
from score_efficiency import Positions, rule_scores

from equiv.verdicts.sampling.rule_scores import score_rows
from equiv.verdicts.sampling.run_verdict import POOLED_SHARE

FloatArray = npt.NDArray[np.float64]
PROMPTS = (
    "chat/haiku_autumn,chat/cpu_explain,multilingual/de_berlin,multilingual/ru_fairy_tale,"
    "reasoning/train_arrival,code/py_binary_search"
)
POOLED_LEVEL = ALPHA * POOLED_SHARE / 7
VOCAB = 24
#: tokens a sample of the pool
TOKENS = 24
RARE = 1e-5
#: (ordinary rows a run, rows near certainty a run, runs, two-sided alpha)
DESIGNS = (
    (400, 0, 50000, POOLED_LEVEL),
    (100, 4000, 50000, POOLED_LEVEL),
    (50, 40000, 20000, ALPHA),
    (50, 40000, 50000, POOLED_LEVEL),
    (400, 0, 100000, 1.2e-4),
)


class Rows:
    """Distinct rows (``probs``, ``scores``: one row each, zero-padded) whose counts make a
    run: the sum's cumulant generating function and its first two derivatives at ``t``."""

    def __init__(self, probs: FloatArray, scores: FloatArray) -> None:
        live = probs > 0
        self.logp = np.where(live, np.log(np.where(live, probs, 1.0)), -np.inf)
        self.scores = np.where(live, scores, 0.0)

    def cgf(self, t: float, counts: FloatArray, sign: float = 1.0) -> tuple[float, float, float]:
        """At ``t``, of the sum of ``sign`` times the scores (``K_{-S}(t) = K_S(-t)``)."""
        tilted = self.logp + (sign * t) * self.scores
        norm = logsumexp(tilted, axis=1)
        w = np.exp(tilted - norm[:, None])
        mean = (w * self.scores).sum(axis=1)
        var = (w * self.scores**2).sum(axis=1) - mean**2
        return float(counts @ norm), sign * float(counts @ mean), float(counts @ var)

    def upper(self, counts: FloatArray, total: float, sign: float = 1.0) -> float:
        """``P(sign S >= total)`` by Lugannani-Rice (the normal tail within 1e-3 sd of the
        mean)."""
        _, mean, var = self.cgf(0.0, counts, sign)
        if var <= 0:
            return 1.0
        z = (total - mean) / np.sqrt(var)
        if abs(z) < 1e-3:
            return float(sps.norm.sf(z))
        side = 1.0 if total > mean else -1.0
        edge = side / np.sqrt(var)
        while (self.cgf(edge, counts, sign)[1] - total) * side < 0:
            edge *= 2
            if abs(edge) > 1e12:  # beyond every score: the sum cannot reach it
                return 0.0 if side > 0 else 1.0
        t = brentq(lambda u: self.cgf(u, counts, sign)[1] - total, min(0.0, edge), max(0.0, edge))
        k, _, v = self.cgf(t, counts, sign)
        w = np.sign(t) * np.sqrt(max(2 * (t * total - k), 0.0))
        if abs(w) < 1e-8:
            return float(sps.norm.sf(z))
        return float(sps.norm.sf(w) + sps.norm.pdf(w) * (1 / (t * np.sqrt(v)) - 1 / w))

    def two_sided(self, counts: FloatArray, total: float) -> float:
        lower = self.upper(counts, -total, sign=-1.0)
        return min(1.0, 2 * min(self.upper(counts, total), lower))


def _row(rng: np.random.Generator) -> tuple[FloatArray, FloatArray]:
    logits = rng.normal(0.0, 2.5, VOCAB)
    p = np.exp(logits) / np.exp(logits).sum()
    q = np.exp((logits + rng.normal(0.0, 1.5, VOCAB)) / 0.8)
    q = np.where(q >= 0.02 * q.max(), q, 0.0)
    return p, score_rows(p, q / q.sum())[2]


def level(rng: np.random.Generator, distinct: int = 300) -> None:
    made = [_row(rng) for _ in range(distinct)]
    near = np.zeros(VOCAB)
    near[:2] = 1 - RARE, RARE
    draft = np.zeros(VOCAB)
    draft[:3] = 0.999, 1e-3 - 1e-12, 1e-12
    certain = score_rows(near, draft)[2]
    probs = np.vstack([p for p, _ in made] + [near])
    scores = np.vstack([s for _, s in made] + [certain])
    rows, cum = Rows(probs, scores), np.cumsum(probs, axis=1)
    print(
        "| ordinary rows | rows near certainty | runs | alpha (two-sided) | rejections | expected |"
    )
    print("| --- | --- | --- | --- | --- | --- |")
    for n, n_certain, runs, alpha in DESIGNS:
        hits = 0
        for _ in range(runs):
            which = rng.integers(0, distinct, n)
            tokens = np.minimum((cum[which] < rng.random((n, 1))).sum(axis=1), VOCAB - 1)
            rare = int((rng.random(n_certain) < RARE).sum())
            total = (
                scores[which, tokens].sum() + certain[1] * rare + certain[0] * (n_certain - rare)
            )
            counts = np.bincount(which, minlength=distinct + 1).astype(np.float64)
            counts[distinct] += n_certain
            hits += rows.two_sided(counts, float(total)) < alpha
        print(
            f"| {n} | {n_certain} | {runs} | {alpha:.2g} | {hits} | {runs * alpha:g} |", flush=True
        )


def power(rng: np.random.Generator, reps: int) -> None:
    positions = Positions()
    with tempfile.TemporaryDirectory() as tmp:
        sample_pools("reference:wrong_temp", PROMPTS.split(","), 16, TOKENS, Path(tmp), positions)
    limit, how = positions.limit()
    width = max(len(u[0]) for u in positions.union if u is not None)
    probs, faulty, scores = (np.zeros((len(positions.union), width)) for _ in range(3))
    for i, kept in enumerate(positions.union):
        if kept is None:  # a bonus token: p under both
            probs[i, 0] = faulty[i, 0] = 1.0
            continue
        p, f, q = kept
        probs[i, : p.size], faulty[i, : p.size] = p / p.sum(), f / f.sum()
        scores[i, : p.size] = rule_scores(p, q)["draft_temp"]
    print(
        f"wrong_temp: {len(positions.union)} positions; Neyman-Pearson limit at alpha {ALPHA}, "
        f"power {POWER}: {limit:.0f} tokens ({how})"
    )
    samples = len(positions.union) // TOKENS  # each sample's positions in turn, all full
    if samples * TOKENS != len(positions.union):
        raise SystemExit(f"{len(positions.union)} positions are not {TOKENS} a sample")
    rows, cum = Rows(probs, scores), np.cumsum(faulty, axis=1)
    print(f"| samples | tokens | power at {POOLED_LEVEL:.2g} | power at {ALPHA:g} |")
    print("| --- | --- | --- | --- |")
    for k in (8, 12, 16, 20, 24, 28, 32, 36, 40):
        hits = np.zeros(2)
        for _ in range(reps):
            chosen = rng.choice(samples, size=k, replace=False)
            which = (chosen[:, None] * TOKENS + np.arange(TOKENS)).reshape(-1)
            drawn = (cum[which] < rng.random((which.size, 1))).sum(axis=1)
            tokens = np.minimum(drawn, width - 1)
            counts = np.bincount(which, minlength=len(positions.union)).astype(np.float64)
            p_value = rows.two_sided(counts, float(scores[which, tokens].sum()))
            hits += [p_value <= POOLED_LEVEL, p_value <= ALPHA]
        print(f"| {k} | {k * TOKENS} | {hits[0] / reps:.3f} | {hits[1] / reps:.3f} |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--level", action="store_true", help="the level on simulated runs")
    parser.add_argument("--reps", type=int, default=400)
    args = parser.parse_args()
    start = time.perf_counter()
    rng = np.random.default_rng(5)
    if args.level:
        level(rng)
    else:
        power(rng, args.reps)
    print(f"{time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
