"""How close each directed statistic can come to the Neyman-Pearson limit, fault by fault: the
ceiling on what any detector built from the rows (and the draft's rows) can reach (issue 32).

The reference engine's faults are sampled on the real pair exactly as `fault_detection.py` does
(the same prompts, seeds and positions); at every drafted position the correct distribution p,
the faulty one f and the draft's q are kept. Then, with no further sampling:

- **fixed-sample tokens** a one-sided sum test of each score needs for power 0.95 at ``alpha``
  (normal approximation from the scores' means and variances under p and under f, pooled over
  the positions, as `fault_detection.Moments.limit` does for the log-likelihood ratio, which is
  the Neyman-Pearson limit): ``top`` (the top token emitted minus p_top, the pooled top-token
  test's statistic), ``temp`` (``log p(x) - E_p log p``, the temperature's score), ``leak``
  (``q(x)/p(x) - 1``, the score against emitting ``(1 - e) p + e q``, the pooled ``draft-leak``
  test's), and the two other scores of `equiv.verdicts.sampling.rule_scores` (their own
  p-values are bets; here their sums):
  ``relaxed`` (``out_top2(x) / p(x) - 1``) and ``draft_temp`` (the derivative in the exponent of
  the verifier's draft row); and ``draft_temp_pit``, a fixed-sample test of that direction whose
  increments stay Gaussian: the normal scores ``Φ⁻¹(u)`` of the randomized PIT with each row's
  tokens ranked by ``draft_temp``, weighed by ``c = d/dk E_k[Φ⁻¹(u)]`` (as the pooled
  ``temperature`` test weighs its own; exact moments of the truncated normal, no sampling);
- **the tilt's share of the limit**: the best exponential tilt ``p(x) exp(θ·φ(x)) / Z`` of every
  row with features φ = (log p, the ranks 1-3, log q/p), one θ for all positions, fitted with
  f known (an oracle: no detector learns θ for free). Its per-token growth over KL(f || p) is
  the share of the likelihood ratio's evidence that any statistic built from these features can
  see; tokens needed scale as its inverse.

    python benchmarks/score_efficiency.py --prompts chat/haiku_autumn,multilingual/de_berlin \
        --seeds 8 --engines reference:greedy,reference:wrong_temp,reference:top2
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import numpy.typing as npt
from fault_detection import ALPHA, POWER, Moments, sample_pools
from scipy import stats as sps
from scipy.optimize import minimize
from scipy.special import logsumexp

from equiv.verdicts.sampling.rule_scores import score_rows

FloatArray = npt.NDArray[np.float64]
SCORES = ("top", "temp", "leak")
RULE_SCORES = ("relaxed", "draft_temp")
PIT = "draft_temp_pit"


class Positions(Moments):
    """`Moments`, and every drafted position's (p, f, q) on p's support (None: a bonus token,
    p under both)."""

    def __init__(self) -> None:
        super().__init__()
        self.kept: list[tuple[FloatArray, FloatArray, FloatArray] | None] = []
        self.union: list[tuple[FloatArray, FloatArray, FloatArray] | None] = []

    def add(self, p: np.ndarray, f: np.ndarray, q: np.ndarray | None = None) -> None:
        super().add(p, f, q)
        assert q is not None
        live = p > 0
        pl = p[live] / p[live].sum()
        fl = f[live] / max(float(f[live].sum()), 1e-300)
        ql = q[live] / q[live].sum() if q[live].sum() > 0 else pl
        self.kept.append((pl, fl, ql))
        both = (p > 0) | (q > 0)
        self.union.append((p[both], f[both], q[both]))

    def bonus(self) -> None:
        super().bonus()
        self.kept.append(None)
        self.union.append(None)


def scores(p: FloatArray, q: FloatArray) -> dict[str, FloatArray]:
    """Each score at every token of one position's support (mean 0 under p)."""
    top = np.zeros_like(p)
    top[np.argmax(p)] = 1.0
    logp = np.log(p)
    return {"top": top - p.max(), "temp": logp - p @ logp, "leak": q / p - 1.0}


def rule_scores(p: FloatArray, q: FloatArray) -> dict[str, FloatArray]:
    """`score_rows` on the union of p's and q's supports (mean 0 under p); the draft leak's is
    `scores`'s ``leak``, on p's support."""
    _, relaxed, draft_temp = score_rows(p, q)
    return dict(zip(RULE_SCORES, (relaxed, draft_temp), strict=True))


def pit_moments(p: FloatArray, q: FloatArray) -> tuple[float, FloatArray, FloatArray]:
    """``draft_temp_pit`` at one position: the weight c, and each token's ``E[Φ⁻¹(u) | x]`` and
    ``E[Φ⁻¹(u)² | x]`` over its interval of u, the tokens ranked by ``draft_temp``."""
    live = p > 0
    pl, s = p[live], score_rows(p, q)[2][live]
    order = np.argsort(s, kind="stable")
    edges = np.clip(np.concatenate([[0.0], np.cumsum(pl[order])]), 0.0, 1.0)
    z = sps.norm.ppf(edges)
    dens = sps.norm.pdf(z)
    with np.errstate(invalid="ignore"):  # z = ±inf at the ends, where z φ(z) is 0
        zd = np.where(np.isfinite(z), z * dens, 0.0)
    width = np.diff(edges)
    width = np.where(width > 0, width, 1.0)  # an empty interval's token is never drawn
    first, second = np.zeros(p.size), np.ones(p.size)
    at = np.flatnonzero(live)[order]
    first[at] = (dens[:-1] - dens[1:]) / width
    second[at] = 1.0 + (zd[:-1] - zd[1:]) / width
    return float(p[live] @ (first[live] * s)), first, second


def fixed_sample_tokens(positions: Positions, name: str) -> float:
    """Tokens for power `POWER` at `ALPHA` of the one-sided sum test of score ``name``."""
    m0: list[float] = []
    v0: list[float] = []
    m1: list[float] = []
    v1: list[float] = []
    rule = name in (*RULE_SCORES, PIT)
    for kept in positions.union if rule else positions.kept:
        if kept is None:
            for values in (m0, v0, m1, v1):
                values.append(0.0)
            continue
        p, f, q = kept
        if name == PIT:
            c, first, second = pit_moments(p, q)
            for m, v, w in ((m0, v0, p), (m1, v1, f)):
                mean = float(w @ first)
                m.append(c * mean)
                v.append(c * c * (float(w @ second) - mean**2))
            continue
        s = (rule_scores if rule else scores)(p, q)[name]
        for m, v, w in ((m0, v0, p), (m1, v1, f)):
            mean = float(w @ s)
            m.append(mean)
            v.append(float(w @ (s - mean) ** 2))
    gap = abs(float(np.mean(m1) - np.mean(m0)))
    z = float(sps.norm.ppf(1 - ALPHA)) * np.sqrt(np.mean(v0)) + float(
        sps.norm.ppf(POWER)
    ) * np.sqrt(np.mean(v1))
    return float((z / gap) ** 2) if gap > 1e-12 else float("inf")


def _features(p: FloatArray, q: FloatArray) -> FloatArray:
    rank = np.empty(p.size, dtype=np.intp)
    rank[np.argsort(-p)] = np.arange(p.size)
    logp = np.log(p)
    cols = [logp - p @ logp, *((rank == r).astype(float) for r in range(3))]
    cols.append(np.clip(np.log(np.maximum(q, 1e-12)) - logp, -10.0, 10.0))
    return np.stack(cols, axis=1)


def tilt_share(positions: Positions) -> tuple[float, float]:
    """(the oracle tilt's growth per token, KL(f || p) per token), over all positions."""
    data = [(np.log(p), f, _features(p, q)) for p, f, q in filter(None, positions.kept)]
    n = len(positions.kept)
    kl = sum(float(f @ np.log(np.where(f > 0, f, 1.0) / np.exp(lp))) for lp, f, _ in data) / n

    def loss(theta: FloatArray) -> float:
        total = sum(float(f @ (x @ theta)) - float(logsumexp(lp + x @ theta)) for lp, f, x in data)
        return -total / n

    fit = minimize(loss, np.zeros(data[0][2].shape[1]), method="BFGS")
    return -float(fit.fun), kl


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", default="chat/haiku_autumn,multilingual/de_berlin")
    parser.add_argument("--seeds", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=24)
    parser.add_argument("--engines", default="reference:greedy,reference:wrong_temp,reference:top2")
    args = parser.parse_args()
    keys = args.prompts.split(",")
    print(f"{len(keys)} prompts, temp 0.8, draft-max 4, {args.seeds} seeds x <= {args.max_tokens}")
    names = (*SCORES, *RULE_SCORES, PIT)
    cols = " | ".join(f"`{s}` (ratio)" for s in names)
    print(f"| engine | positions | Neyman-Pearson limit | {cols} | oracle tilt / KL | time |")
    print("| --- | --- | --- | " + "--- | " * len(names) + "--- | --- |")
    with tempfile.TemporaryDirectory() as tmp:
        for engine in args.engines.split(","):
            t0 = time.perf_counter()
            positions = Positions()
            sample_pools(engine, keys, args.seeds, args.max_tokens, Path(tmp), positions)
            limit, _ = positions.limit()
            each = []
            for name in names:
                n = fixed_sample_tokens(positions, name)
                each.append(f"{n:.0f} ({n / limit:.1f}x)")
            growth, kl = tilt_share(positions)
            print(
                f"| {engine} | {len(positions.kept)} | {limit:.0f} | {' | '.join(each)} | "
                f"{growth / kl:.0%} | {time.perf_counter() - t0:.0f} s |",
                flush=True,
            )


if __name__ == "__main__":
    main()
