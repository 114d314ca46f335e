"""The level and the savings of sequential sampling runs (``--looks``), on simulated prompts.

Each run is one prompt of a fresh random "language model" (a first-order chain over a small
vocabulary: every previous token has its own logits row, drawn anew per run), sampled for
``--budget`` seeds x ``--tokens`` tokens on both paths through the real sampler chain of equiv
(`equiv.engines.chain`), with the evidence a run records in process (`chain_evidence`). The
runs are independent: each has its own model and its own random streams.

- **Level** (``--fault none``: both paths sample from the same rows): a false positive is any
  rejecting label (``sampler-bug`` or ``numeric-drift``). Counted two ways: at the look where
  the run stops (the procedure as `equiv run --looks` runs it), and the stronger event that
  *any* look rejects when every look is judged (an analyst who peeks at every round and stops at
  the first rejection). Both must stay <= alpha; the one-sided 95 % Clopper-Pearson upper bound
  is printed. The fixed-size test of all seeds is judged on the same runs.
- **Savings** (``--fault wrong_temp`` or ``greedy``: the speculative path draws from the
  chain's distribution tempered to ``p ** (1 / strength)`` on its support (default 0.85: about
  18 % colder), or takes the chain's top token with probability ``strength`` (default 0.1) and
  draws from the chain otherwise): the share flagged ``sampler-bug`` and the seeds used,
  sequential against fixed-size at every look's size, and the tokens the Neyman-Pearson test
  would need (the limit: it knows both distributions at every position).

Every judgement is `analyze` + `classify_sampling` at the look's alpha (`schedule`), exactly as
the runner judges a look.

    python benchmarks/sequential_level.py --runs 400 --budget 64 --looks 4
    python benchmarks/sequential_level.py --runs 100 --budget 128 --fault wrong_temp
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass

import numpy as np
from scipy import stats as sps

from equiv.config import SamplingConfig
from equiv.engines.chain import chain_distribution
from equiv.records.verdict import Label
from equiv.verdicts.sampling.prompt_analysis import analyze
from equiv.verdicts.sampling.samples import PathSample, Sample
from equiv.verdicts.sampling.token_evidence import chain_evidence
from equiv.verdicts.sampling.verdict import classify_sampling
from equiv.verdicts.stats.sequential import schedule, stops

VOCAB = 48
REJECTING = (Label.SAMPLER_BUG, Label.NUMERIC_DRIFT)
SAMPLING = SamplingConfig(temp=0.8)


STRENGTH = {"none": 0.0, "wrong_temp": 0.85, "greedy": 0.1}


def faulty(probs: np.ndarray, fault: str, strength: float) -> np.ndarray:
    """The distribution a faulty sampler draws from, given the chain's ``probs``: the same
    (``none``), tempered on the chain's support (``wrong_temp``: ``p ** (1 / strength)``
    renormalized, colder for strength < 1), or the top token with probability ``strength``
    on top of the chain (``greedy``). Same support as the chain, so the likelihood ratio is
    finite."""
    if fault == "wrong_temp":
        tempered: np.ndarray = np.power(probs, 1.0 / strength)
        return tempered / float(tempered.sum())
    if fault == "greedy":
        mixed = (1.0 - strength) * probs
        mixed[np.argmax(probs)] += strength
        return mixed
    return probs


@dataclass
class SimPath:
    sample: PathSample
    llr: list[float]  # log f(x) - log g(x) of each token: faulty against correct


def _path(
    rng: np.random.Generator,
    logits: np.ndarray,
    tokens_n: int,
    fault: str,
    strength: float,
    *,
    draw_faulty: bool,
) -> SimPath:
    """One path's sample: ``tokens_n`` tokens drawn from the chain (or from the faulty sampler
    where ``draw_faulty``), with the evidence under the configured chain and the log-likelihood
    ratio of each token."""
    tokens: list[int] = []
    rows, llr = [], []
    prev = 0
    for _ in range(tokens_n):
        row = logits[prev]
        ids, probs = chain_distribution(row, tokens, SAMPLING)
        wrong = faulty(probs, fault, strength)
        where = int(rng.choice(ids.size, p=wrong if draw_faulty else probs))
        llr.append(float(np.log(wrong[where]) - np.log(probs[where])))
        token = int(ids[where])
        tokens.append(token)
        rows.append(row)
        prev = token
    evidence = chain_evidence(np.asarray(rows), tokens, SAMPLING)
    sample = PathSample(
        tokens=tuple(tokens),
        pits={"chain_pit": tuple((a, b, c) for a, b, c in evidence.pits)},
        sensitivities={"chain_sensitivity": tuple(evidence.sensitivities)},
        scores={"chain_score": tuple(tuple(score) for score in evidence.scores)},
    )
    return SimPath(sample, llr)


def simulate(
    run: int, budget: int, tokens_n: int, fault: str, strength: float, scale: float = 2.5
) -> tuple[list[Sample], list[float], list[float]]:
    """A run's samples, and the likelihood ratios of the correct (baseline) and the faulty
    (speculative) path's tokens; the logits N(0, ``scale``) (larger: more peaked rows)."""
    rng = np.random.default_rng([run, 20261202])
    logits = rng.normal(0.0, scale, size=(VOCAB, VOCAB)).astype(np.float32)
    samples, h0, h1 = [], [], []
    for seed in range(1, budget + 1):
        base = _path(rng, logits, tokens_n, fault, strength, draw_faulty=False)
        spec = _path(rng, logits, tokens_n, fault, strength, draw_faulty=fault != "none")
        samples.append(Sample(f"sim/run{run}::seed{seed}", base.sample, spec.sample))
        h0 += base.llr
        h1 += spec.llr
    return samples, h0, h1


def np_limit_tokens(h0: list[float], h1: list[float], alpha: float, power: float) -> float:
    """Tokens the Neyman-Pearson test needs (it knows the correct and the faulty distribution
    at every position: the sum of the tokens' log-likelihood ratios), at ``alpha`` and
    ``power``, by the normal approximation of that sum: ``n = ((z_(1-alpha) s0 + z_power s1) /
    (m1 - m0))**2`` with the ratio's mean and deviation per token under each hypothesis."""
    a, b = np.asarray(h0), np.asarray(h1)
    gap = float(b.mean() - a.mean())
    if gap <= 0:
        return float("inf")
    z = float(sps.norm.ppf(1 - alpha)) * float(a.std()) + float(sps.norm.ppf(power)) * float(
        b.std()
    )
    return (z / gap) ** 2


def judge(samples: list[Sample], alpha: float) -> Label:
    analysis = analyze(samples, alpha=alpha, has_logits=True)
    return classify_sampling(analysis, has_logits=True).label


@dataclass
class Outcome:
    stop_label: Label
    stop_seeds: int
    any_rejects: bool
    fixed_label: Label
    # fixed-size labels at every look's seed count, at the whole alpha (faults only)
    fixed_at: dict[int, Label]


def one_run(samples: list[Sample], looks: int, alpha: float, every_size: bool) -> Outcome:
    stop: tuple[Label, int] | None = None
    any_rejects = False
    fixed_at: dict[int, Label] = {}
    for look in schedule(len(samples), looks):
        label = judge(samples[: look.seeds], alpha * look.share)
        any_rejects |= label in REJECTING
        if stop is None and stops(label, look):
            stop = (label, look.seeds)
        if every_size and not look.last:
            fixed_at[look.seeds] = judge(samples[: look.seeds], alpha)
    assert stop is not None
    fixed_at[len(samples)] = judge(samples, alpha)
    return Outcome(stop[0], stop[1], any_rejects, fixed_at[len(samples)], fixed_at)


def _upper(k: int, n: int) -> float:
    return float(sps.beta.ppf(0.95, k + 1, n - k)) if k < n else 1.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=400)
    parser.add_argument("--budget", type=int, default=64, help="seeds per run at most")
    parser.add_argument("--tokens", type=int, default=32, help="tokens per seed")
    parser.add_argument("--looks", type=int, default=4)
    parser.add_argument("--alpha", type=float, default=0.01)
    parser.add_argument("--fault", choices=("none", "wrong_temp", "greedy"), default="none")
    parser.add_argument("--strength", type=float, help="of the fault (default: STRENGTH)")
    parser.add_argument("--first-run", type=int, default=0, help="run ids start here")
    args = parser.parse_args()
    plan_ = schedule(args.budget, args.looks)
    strength = STRENGTH[args.fault] if args.strength is None else args.strength
    print(
        f"## {args.runs} runs, fault {args.fault} ({strength}), budget {args.budget} seeds x "
        f"{args.tokens} tokens, looks at {[look.seeds for look in plan_]} seeds, alpha {args.alpha}"
    )
    started = time.perf_counter()
    outcomes = []
    h0: list[float] = []
    h1: list[float] = []
    for i in range(args.runs):
        run = args.first_run + i
        samples, llr0, llr1 = simulate(run, args.budget, args.tokens, args.fault, strength)
        h0 += llr0
        h1 += llr1
        outcomes.append(one_run(samples, args.looks, args.alpha, args.fault != "none"))
    wall = time.perf_counter() - started
    n = len(outcomes)
    stop_rej = sum(o.stop_label in REJECTING for o in outcomes)
    any_rej = sum(o.any_rejects for o in outcomes)
    fixed_rej = sum(o.fixed_label in REJECTING for o in outcomes)
    bugs = sum(o.stop_label is Label.SAMPLER_BUG for o in outcomes)
    fixed_bugs = sum(o.fixed_label is Label.SAMPLER_BUG for o in outcomes)
    seeds = np.array([o.stop_seeds for o in outcomes])
    labels = {label.value: sum(o.stop_label is label for o in outcomes) for label in Label}
    fixed = {label.value: sum(o.fixed_label is label for o in outcomes) for label in Label}
    print(f"sequential labels: { {k: v for k, v in labels.items() if v} }")
    print(f"fixed-size labels: { {k: v for k, v in fixed.items() if v} }")
    print(
        f"rejecting at the stop: {stop_rej}/{n} (95 % upper {_upper(stop_rej, n):.4f}); "
        f"any look rejects: {any_rej}/{n} (upper {_upper(any_rej, n):.4f}); "
        f"fixed-size: {fixed_rej}/{n} (upper {_upper(fixed_rej, n):.4f})"
    )
    print(
        f"sampler-bug: sequential {bugs}/{n}, fixed {fixed_bugs}/{n}; seeds used: mean "
        f"{seeds.mean():.1f} of {args.budget} (tokens {seeds.mean() * args.tokens:.0f} of "
        f"{args.budget * args.tokens}), by look {np.unique(seeds, return_counts=True)}"
    )
    if args.fault != "none":
        for size in sorted(outcomes[0].fixed_at):
            flagged = sum(o.fixed_at[size] is Label.SAMPLER_BUG for o in outcomes)
            print(
                f"fixed-size at {size} seeds ({size * args.tokens} tokens): sampler-bug "
                f"{flagged}/{n} = {flagged / n:.2f}"
            )
        limit = np_limit_tokens(h0, h1, args.alpha, 0.95)
        print(
            f"Neyman-Pearson limit at alpha {args.alpha}, power 0.95: {limit:.0f} tokens "
            f"(per token: log-likelihood ratio {np.mean(h0):.4f} +- {np.std(h0):.4f} correct, "
            f"{np.mean(h1):.4f} +- {np.std(h1):.4f} faulty)"
        )
    print(f"wall {wall:.0f} s")


if __name__ == "__main__":
    main()
