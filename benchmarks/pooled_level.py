"""The level and the power of the run's pooled answer (`equiv.verdicts.sampling.run_verdict`),
on simulated runs of several prompts, under the optional stopping `equiv run --looks` does.

A run is ``--prompts`` prompts, each a fresh random "language model" (a first-order chain over a
small vocabulary, `sequential_level.simulate`), sampled for up to ``--budget`` seeds x
``--tokens`` tokens on both paths through equiv's real sampler chain, with the evidence a run
records in process. The runs are independent: each prompt of each run has its own model and its
own random streams.

Each look (`run_schedule`: a run of many prompts may look first at a few seeds a prompt) is
judged as the runner judges it (`equiv.run.looks.run_in_looks`): every prompt still running
(from its first look with `MIN_SEEDS` seeds) by `analyze` + `classify_sampling` at its share
``alpha (1 - POOLED_SHARE) / P`` of the level (times the look's share), stopping at a verdict of
`STOPPING_LABELS`; the run by `judge_run`, its tests at ``alpha POOLED_SHARE`` and its bounds
at ``alpha`` (times the look's share), over every prompt's seeds so far, with the prompts'
labels; the run stops at a verdict of `RUN_STOPPING` or at the last look.
With ``--allocate`` each round after the first goes only to the prompts the runner would give it
(`equiv.verdicts.sampling.allocation.informative`), the others paused on the seeds they have.
``--scales`` gives the prompts' logits these deviations in turn (2.5: the default; 10: rows
as peaked as most of a code prompt's at a low temperature), so that prompts differ in what
they can tell.

- ``--fault none`` (both paths sample from the same rows): a false positive is a run-level
  ``sampler-bug``; the rate at the stop and its one-sided 95 % Clopper-Pearson upper bound are
  printed, with the labels and the seeds used.
- ``--drafted`` (with ``--fault none``): the speculative path a correct rejection sampler
  drafting from a noisy copy of each prompt's logits (`simulated_chain.sample_drafted`), so
  that the run also takes the tests aimed at acceptance rules
  (`equiv.verdicts.sampling.rule_scores`), as a run in process with judgements does.
- ``--fault wrong_temp`` / ``greedy``: the share of runs flagged and the tokens they used, and
  the Neyman-Pearson limit (the tokens the likelihood-ratio test that knows both distributions
  at every position needs for power 0.95 at ``alpha``).

    python benchmarks/pooled_level.py --runs 400 --prompts 6 --budget 32 --tokens 16 --looks 4
    python benchmarks/pooled_level.py --runs 100 --fault wrong_temp
    python benchmarks/pooled_level.py --runs 400 --scales 2.5,10,10 --allocate
    python benchmarks/pooled_level.py --runs 400 --drafted
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy import stats as sps
from sequential_level import SAMPLING, STRENGTH, VOCAB, np_limit_tokens, simulate

from equiv.engines.acceptance_rules import Rule
from equiv.records.verdict import Label
from equiv.verdicts.sampling.allocation import informative
from equiv.verdicts.sampling.prompt_analysis import analyze
from equiv.verdicts.sampling.run_verdict import POOLED_SHARE, RUN_STOPPING, judge_run
from equiv.verdicts.sampling.samples import Sample
from equiv.verdicts.sampling.verdict import classify_sampling
from equiv.verdicts.stats.sequential import MIN_SEEDS, run_schedule, stops

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from simulated_chain import sample_drafted, sample_path  # type: ignore[import-not-found]


@dataclass
class Outcome:
    label: Label
    look: int
    seeds: int  # seeds per prompt at the stop
    tokens: int  # speculative tokens the run used
    #: the pooled tests that rejected at the stop (none: a prompt's own verdict decided)
    rejected: tuple[str, ...] = ()


def one_run(prompts: dict[str, list[Sample]], looks: int, alpha: float, allocate: bool) -> Outcome:
    budget = len(next(iter(prompts.values())))
    prompt_alpha = alpha * (1 - POOLED_SHARE) / len(prompts)
    stopped: dict[str, tuple[Label, int]] = {}  # prompt -> (label, seeds) where it stopped
    have = dict.fromkeys(prompts, 0)  # the seeds each prompt has been given
    for look in run_schedule(budget, looks, len(prompts), pooled=True):
        running = [key for key in prompts if key not in stopped]
        chosen = running
        if allocate and look.index > 1 and len(running) > 1:
            keep = informative({k: prompts[k][: have[k]] for k in running}, has_logits=True)
            chosen = [k for k in running if k in keep]
        current = {}
        for key in chosen:
            have[key] = look.seeds
            if look.seeds < MIN_SEEDS and not look.last:
                continue  # only the run is judged at a look this small
            analysis = analyze(
                prompts[key][: look.seeds], alpha=prompt_alpha * look.share, has_logits=True
            )
            current[key] = classify_sampling(analysis, has_logits=True).label
        labels = Counter(label for label, _ in stopped.values()) + Counter(current.values())
        seen_by = {key: samples[: have[key]] for key, samples in prompts.items()}
        run = judge_run(
            seen_by,
            labels,
            alpha=alpha * POOLED_SHARE * look.share,
            has_logits=True,
            bound_alpha=alpha * look.share,
        )
        for key, label in current.items():
            if stops(label, look):
                stopped[key] = (label, look.seeds)
        if look.last or run.verdict.label in RUN_STOPPING:
            tokens = sum(len(s.speculative.tokens) for v in seen_by.values() for s in v)
            rejected = tuple(t.kind for t in run.pooled.rejected())
            return Outcome(run.verdict.label, look.index, look.seeds, tokens, rejected)
    raise AssertionError("the last look always stops")


def drafted(run: int, budget: int, tokens: int, scale: float) -> list[Sample]:
    """A prompt whose speculative path is a correct rejection sampler (`sample_drafted`)."""
    rng = np.random.default_rng([run, 20261207])
    logits = rng.normal(0.0, scale, size=(VOCAB, VOCAB)).astype(np.float32)
    draft = (logits + rng.normal(0.0, 1.5, logits.shape)).astype(np.float32)
    return [
        Sample(
            f"sim/run{run}::seed{seed}",
            sample_path(rng, logits, tokens, SAMPLING),
            sample_drafted(rng, logits, draft, tokens, SAMPLING, Rule.CORRECT),
        )
        for seed in range(1, budget + 1)
    ]


def _upper(k: int, n: int) -> float:
    return float(sps.beta.ppf(0.95, k + 1, n - k)) if k < n else 1.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=400)
    parser.add_argument("--prompts", type=int, default=6)
    parser.add_argument("--budget", type=int, default=32, help="seeds per prompt at most")
    parser.add_argument("--tokens", type=int, default=16, help="tokens per seed")
    parser.add_argument("--looks", type=int, default=4)
    parser.add_argument("--alpha", type=float, default=0.01)
    parser.add_argument("--fault", choices=("none", "wrong_temp", "greedy"), default="none")
    parser.add_argument("--strength", type=float, help="of the fault (default: STRENGTH)")
    parser.add_argument("--drafted", action="store_true", help="a rejection sampler, correct")
    parser.add_argument("--first-run", type=int, default=0, help="run ids start here")
    parser.add_argument(
        "--scales", default="2.5", help="the prompts' logit deviations, in turn (comma-separated)"
    )
    parser.add_argument(
        "--allocate", action="store_true", help="later rounds to the informative prompts only"
    )
    args = parser.parse_args()
    strength = STRENGTH[args.fault] if args.strength is None else args.strength
    looks = [
        look.seeds for look in run_schedule(args.budget, args.looks, args.prompts, pooled=True)
    ]
    scales = [float(x) for x in args.scales.split(",")]
    print(
        f"## {args.runs} runs of {args.prompts} prompts, fault {args.fault} ({strength}), "
        f"budget {args.budget} seeds x {args.tokens} tokens, looks at {looks} seeds, alpha "
        f"{args.alpha}, logit scales {scales}, allocation {'on' if args.allocate else 'off'}"
    )
    started = time.perf_counter()
    outcomes = []
    h0: list[float] = []
    h1: list[float] = []
    for i in range(args.runs):
        run = args.first_run + i
        prompts = {}
        for p in range(args.prompts):
            if args.drafted:
                scale = scales[p % len(scales)]
                prompts[f"sim/r{run}p{p}"] = drafted(
                    run * 1000 + p, args.budget, args.tokens, scale
                )
                continue
            samples, llr0, llr1 = simulate(
                run * 1000 + p,
                args.budget,
                args.tokens,
                args.fault,
                strength,
                scales[p % len(scales)],
            )
            prompts[f"sim/r{run}p{p}"] = samples
            h0 += llr0
            h1 += llr1
        outcomes.append(one_run(prompts, args.looks, args.alpha, args.allocate))
    wall = time.perf_counter() - started
    n = len(outcomes)
    labels = Counter(o.label.value for o in outcomes)
    bugs = labels.get(Label.SAMPLER_BUG.value, 0)
    by_look = Counter(o.look for o in outcomes)
    tokens = np.array([o.tokens for o in outcomes])
    print(f"run labels at the stop: {dict(labels)}")
    print(
        f"sampler-bug: {bugs}/{n} = {bugs / n:.4f} (one-sided 95 % upper bound "
        f"{_upper(bugs, n):.4f}); stopped at look {dict(sorted(by_look.items()))}; "
        f"speculative tokens used: mean {tokens.mean():.0f}, median {np.median(tokens):.0f} "
        f"of {args.prompts * args.budget * args.tokens}"
    )
    if args.fault == "none" and bugs:
        why = Counter(
            ", ".join(o.rejected) or "a prompt's own verdict"
            for o in outcomes
            if o.label is Label.SAMPLER_BUG
        )
        print(f"what flagged them: {dict(why)}")
    if args.fault != "none":
        flagged = [o.tokens for o in outcomes if o.label is Label.SAMPLER_BUG]
        if flagged:
            print(
                f"flagged runs used {np.mean(flagged):.0f} tokens on average, "
                f"95th percentile {np.percentile(flagged, 95):.0f}"
            )
        limit = np_limit_tokens(h0, h1, args.alpha, 0.95)
        print(f"Neyman-Pearson limit at alpha {args.alpha}, power 0.95: {limit:.0f} tokens")
    print(f"wall {wall:.0f} s")


if __name__ == "__main__":
    main()
