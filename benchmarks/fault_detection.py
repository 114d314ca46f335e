"""Sampled tokens needed to detect each injected sampler fault, and the false-positive rate of the
correct engines.

For every engine (the reference sampler with each fault, the correct reference sampler, and the
llama-cpp-python speculative path) one prompt is sampled at temp 0.8 over many seeds, once. Power
at a budget of n tokens is then estimated by subsampling: R random subsets of whole seeds holding
about n tokens are judged as the classifier would (the speculative path's sampler-consistency
tests, Holm over the two at alpha = 0.01, or a mean KL above 0.1 nats between the rows its
sampler used and the target's re-scoring), and the share flagged is the estimated power.
Reported: the smallest budget with estimated power >= 0.95, and the rejection rate over random
half-pool subsets: for the correct engines that is the false-positive rate, which must stay
<= alpha (the subsets overlap, so it is an indication, not R independent trials).

    python benchmarks/fault_detection.py [--prompt chat/haiku_autumn] [--seeds 48] [--max-tokens 24]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from equiv.classify import KL_NOT_TARGET
from equiv.config import DraftConfig, Mode, RunConfig, SamplingConfig
from equiv.engines import load_factory
from equiv.models import resolve_pair
from equiv.prompts import load_suites
from equiv.runner import Runner, plan
from equiv.stats import holm, pit_uniformity_test, randomized_pit, top_token_test

ENGINES = [
    "reference:greedy",
    "reference:top2",
    "reference:no_max",
    "reference:no_norm",
    "reference:wrong_temp",
    "reference:off_by_one",
    "reference:correct",
    "llamacpp",
]
BUDGETS = [50, 100, 200, 400, 800, 1600, 3200]
ALPHA = 0.01


def sample_pool(engine: str, prompt_key: str, seeds: int, max_tokens: int, tmp: Path) -> list[Any]:
    pair = resolve_pair()
    config = RunConfig(
        target=pair.target,
        draft=pair.draft,
        mode=Mode.SAMPLING,
        sampling=SamplingConfig(temp=0.8),
        seeds=tuple(range(1, seeds + 1)),
        max_tokens=max_tokens,
        draft_config=DraftConfig(draft_max=4),
    )
    prompts = [p for p in load_suites() if p.key == prompt_key]
    path = tmp / f"{engine.replace(':', '_')}.jsonl"
    with Runner(config, load_factory(engine), path, controls=False) as runner:
        runner.run(plan(prompts, config))
        records = runner.results.results()
    # Per seed: the chain evidence, and the KL between the rows used and the target's re-scoring.
    return [
        (np.asarray(r["speculative"]["chain_pit"], dtype=float), r["rescore_drift"]["kl_mean"])
        for r in records
    ]


def rejects(pool: list[Any], rng: np.random.Generator) -> bool:
    """What the classifier calls a sampler bug: a consistency test rejects (Holm over the two at
    alpha), or the rows the sampler used are not the target's (mean KL > KL_NOT_TARGET)."""
    if np.mean([kl for _, kl in pool]) > KL_NOT_TARGET:
        return True
    arr = np.concatenate([pits for pits, _ in pool])
    u = randomized_pit(arr[:, 0], arr[:, 1], rng)
    p_values = [
        pit_uniformity_test(u, alpha=ALPHA).p_value,
        top_token_test(arr[:, 0] == 0.0, arr[:, 2], alpha=ALPHA).p_value,
    ]
    return min(holm(p_values)) < ALPHA


def power_at(pool: list[Any], budget: int, rng: np.random.Generator, reps: int) -> float:
    per_seed = float(np.mean([len(p) for p, _ in pool]))
    k = max(1, round(budget / per_seed))
    if k > len(pool):
        return float("nan")
    hits = 0
    for _ in range(reps):
        pick = rng.choice(len(pool), size=k, replace=False)
        hits += rejects([pool[i] for i in pick], rng)
    return hits / reps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompt", default="chat/haiku_autumn")
    parser.add_argument("--seeds", type=int, default=48)
    parser.add_argument("--max-tokens", type=int, default=24)
    parser.add_argument("--reps", type=int, default=200)
    parser.add_argument("--engines", default=",".join(ENGINES))
    args = parser.parse_args()
    rng = np.random.default_rng(2026)
    print(f"prompt {args.prompt}, temp 0.8, {args.seeds} seeds x <= {args.max_tokens} tokens")
    print(
        f"{'engine':24} {'pool':>6} {'tokens needed (power>=0.95)':>28} {'reject rate (half)':>19}"
    )
    with tempfile.TemporaryDirectory() as tmp:
        for engine in args.engines.split(","):
            t0 = time.perf_counter()
            pool = sample_pool(engine, args.prompt, args.seeds, args.max_tokens, Path(tmp))
            n_tokens = sum(len(p) for p, _ in pool)
            needed = next(
                (b for b in BUDGETS if b <= n_tokens and power_at(pool, b, rng, 40) >= 0.95),
                None,
            )
            full = power_at(pool, n_tokens // 2, rng, args.reps)
            label = f"{needed}" if needed else f"> {n_tokens} (not reached)"
            print(
                f"{engine:24} {n_tokens:>6} {label:>28} {full:>19.3f}"
                f"   ({time.perf_counter() - t0:.0f} s)",
                flush=True,
            )


if __name__ == "__main__":
    main()
