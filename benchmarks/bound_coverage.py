"""The pooled temperature bound: how often its ``1 - 2 alpha`` interval holds the true ``λ - 1``,
and how wide it is: equiv's (the top token's indicator and the PIT's normal score combined,
`equiv.verdicts.sampling.placebo.quasi_tempering`), the normal scores' alone (equiv's until
stop 40), and the one the tokens' likelihood scores would give (``Σ s / Σ F`` over the recorded
``chain_score``, the same cluster-robust t interval), which carries all of the tempered family's
information (its width is the limit) but not, at low temperature, its level.

Each simulated run is ``--prompts`` prompts x ``--seeds`` samples x ``--tokens`` tokens: every
prompt a random first-order chain over ``--vocab`` tokens (logits N(0, ``--scale``)), sampled
through equiv's own chain at ``--temp`` (top-k 40, top-p 0.95, min-p 0.05 unless given) and
then tempered by ``--power`` (the true λ: 1 for a correct sampler). The bound is the one-sample
design's (`equiv.verdicts.sampling.pooled`, in process), at the pooled level ``--alpha``; with
``--design vs-placebo`` the difference speculative minus placebo that a run over HTTP bounds
where its re-scoring is not exact (the same rows stand in for the re-scored ones; the placebo's
true effect is 0, so the truth is the same):

    python benchmarks/bound_coverage.py --runs 400 --temp 0.2 --power 1.0
    python benchmarks/bound_coverage.py --runs 400 --temp 0.2 --power 1.1
    python benchmarks/bound_coverage.py --runs 400 --temp 0.2 --power 1.1 --design vs-placebo

Misses are counted by side: an interval below the truth (at λ 1.1, a colder sampler, it would
call the deployment within the margin too soon) and above it.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
from scipy import stats as sps

from equiv.config import SamplingConfig
from equiv.verdicts.sampling.pit_tests import tokens_of, top_derivatives
from equiv.verdicts.sampling.placebo import cluster_ratio, tempering
from equiv.verdicts.sampling.pooled import Design, pool
from equiv.verdicts.sampling.pooled_bounds import Bound, Effect, bounds
from equiv.verdicts.sampling.samples import Sample
from equiv.verdicts.stats import randomized_pit

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from simulated_chain import sample_pair, sample_path  # type: ignore[import-not-found]  # tests/


def _run(index: int, args: argparse.Namespace, sampling: SamplingConfig) -> dict[str, list[Sample]]:
    out = {}
    for p in range(args.prompts):
        rng = np.random.default_rng([index, p, 2027])
        logits = rng.normal(0.0, args.scale, (args.vocab, args.vocab)).astype(np.float32)
        key = f"sim/p{p}"
        if args.pairing == "seed":
            pairs = [
                sample_pair(rng, logits, args.tokens, sampling, drift=args.drift, power=args.power)
                for _ in range(args.seeds)
            ]
        else:
            pairs = [
                (
                    sample_path(rng, logits, args.tokens, sampling),
                    sample_path(rng, logits, args.tokens, sampling, power=args.power),
                )
                for _ in range(args.seeds)
            ]
        out[key] = [Sample(f"{key}::sampling::seed{s}", *pair) for s, pair in enumerate(pairs)]
    return out


def _temperature(run: dict[str, list[Sample]], alpha: float, design: Design) -> Bound:
    """equiv's own bound: one sample as in process, or the difference from the placebo."""
    if design is Design.OWN_ROWS:
        found = pool(run, alpha=alpha, has_logits=True).bounds
    else:
        records = [s for samples in run.values() for s in samples]
        data = {path: tokens_of(records, path, "chain_pit") for path in ("speculative", "baseline")}
        tops = {path: top_derivatives(records, path, "chain_pit") for path in data}
        found = bounds(records, data, tops, alpha, own_rows=False)
    return next(b for b in found if b.effect is Effect.TEMPERATURE)


def _by_scores(run: dict[str, list[Sample]], alpha: float) -> tuple[float, float]:
    """The interval of ``Σ s / Σ F`` over the speculative samples' likelihood scores, samples
    as clusters (Student's t, as equiv's)."""
    s, f, ids = [], [], []
    for samples in run.values():
        for sample in samples:
            for score, info, *_ in sample.speculative.scores["chain_score"]:
                s.append(score)
                f.append(info)
                ids.append(sample.key)
    theta, var, m = cluster_ratio(s, f, ids)
    half = float(sps.t.isf(alpha, max(m - 1, 1))) * var**0.5
    return theta - half, theta + half


def _by_normal(run: dict[str, list[Sample]], alpha: float, seed: int) -> tuple[float, float]:
    """The interval of the PIT's normal scores alone (`equiv.verdicts.sampling.placebo.
    tempering`: equiv's bound until stop 40), samples as clusters."""
    rng = np.random.default_rng(seed)
    pits: list[tuple[float, float, float]] = []
    k: list[float] = []
    ids: list[str] = []
    for samples in run.values():
        for sample in samples:
            path = sample.speculative
            pits.extend(path.pits["chain_pit"])
            k.extend(path.sensitivities["chain_sensitivity"])
            ids.extend([sample.key] * len(path.tokens))
    arr = np.asarray(pits)
    u = randomized_pit(arr[:, 0], arr[:, 1], rng)
    theta, var, m, _ = tempering(u, k, ids)
    half = float(sps.t.isf(alpha, max(m - 1, 1))) * var**0.5
    return theta - half, theta + half


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--first", type=int, default=0, help="the first run's index (to split)")
    parser.add_argument("--prompts", type=int, default=6)
    parser.add_argument("--seeds", type=int, default=16)
    parser.add_argument("--tokens", type=int, default=24)
    parser.add_argument("--vocab", type=int, default=32)
    parser.add_argument("--scale", type=float, default=2.5)
    parser.add_argument("--temp", type=float, default=0.2)
    parser.add_argument("--min-p", type=float, default=0.05)
    parser.add_argument("--power", type=float, default=1.0, help="the true λ")
    parser.add_argument("--alpha", type=float, default=0.005)
    parser.add_argument(
        "--pairing",
        choices=("seed", "none"),
        default="seed",
        help="seed: a seed's two paths draw from one random stream, as llama.cpp's do (equiv's "
        "bound then takes the placebo as a control variate); none: independent streams",
    )
    parser.add_argument(
        "--drift", type=float, default=0.0, help="sd of the speculative rows' noise (paired)"
    )
    parser.add_argument(
        "--design",
        type=Design,
        choices=(Design.OWN_ROWS, Design.VS_PLACEBO),
        default=Design.OWN_ROWS,
        help="own-rows: the speculative samples' own effect (in process); vs-placebo: their "
        "difference from the placebo's (over HTTP, the re-scoring not exact)",
    )
    args = parser.parse_args()
    sampling = SamplingConfig(temp=args.temp, min_p=args.min_p)
    truth = args.power - 1.0
    started = time.perf_counter()
    names = ("equiv", "normal", "scores")
    below = dict.fromkeys(names, 0)  # the interval below the truth
    above = dict.fromkeys(names, 0)
    width: dict[str, list[float]] = {name: [] for name in names}
    for i in range(args.first, args.first + args.runs):
        run = _run(i, args, sampling)
        bound = _temperature(run, args.alpha, args.design)
        intervals = {
            "equiv": (bound.low, bound.high),
            "normal": _by_normal(run, args.alpha, i),
            "scores": _by_scores(run, args.alpha),
        }
        for name, (low, high) in intervals.items():
            below[name] += high < truth
            above[name] += low > truth
            width[name].append((high - low) / 2)
    n = args.runs
    print(
        f"{n} runs of {args.prompts} prompts x {args.seeds} seeds x {args.tokens} tokens, temp "
        f"{args.temp}, min-p {args.min_p}, true λ {args.power}, pairing {args.pairing}, drift "
        f"{args.drift}, design {args.design}; the "
        f"{1 - 2 * args.alpha:.0%} "
        f"interval (alpha {args.alpha}) ({time.perf_counter() - started:.0f} s):"
    )
    for name in names:
        misses = below[name] + above[name]
        upper = float(sps.beta.ppf(0.95, misses + 1, n - misses)) if misses < n else 1.0
        print(
            f"- {name}: misses {misses}/{n} ({below[name]} below the truth, {above[name]} "
            f"above; one-sided 95 % bound {upper:.3f}, allowed {2 * args.alpha:.3f}); "
            f"half-width {np.mean(width[name]):.4f} on average"
        )


if __name__ == "__main__":
    main()
