"""Sampled tokens needed to detect each injected sampler fault, and the false-positive rate of the
correct engines.

For every engine (the reference sampler with each fault, the correct reference sampler, and the
llama-cpp-python speculative path) one prompt is sampled at temp 0.8 over many seeds, once. Each
subset of seeds is then judged exactly as a run judges a prompt (`analyze` at alpha =
0.01, Holm within the prompt, then `classify_sampling`); "flagged" means the label
``sampler-bug``.

- Power at a budget of n tokens: the share of R random subsets of whole seeds holding about n
  tokens that are flagged (subsampling from one pool). Reported: the smallest budget with power
  >= 0.95, with every test (the reference engine reports its judgements, so the acceptance and
  residual stages are tested on their own) and with the emitted-token tests only (what a
  black-box engine allows: the judgement evidence is removed before judging).
- False positives: the pool is cut into disjoint groups of seeds (independent runs of about
  200 tokens each); reported: flagged / groups with a one-sided 95 % Clopper-Pearson upper
  bound. For a correct engine the rate must stay <= alpha.

    python benchmarks/fault_detection.py [--prompt chat/haiku_autumn] [--seeds 48] [--max-tokens 24]
"""

from __future__ import annotations

import argparse
import dataclasses
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from scipy import stats as sps

from equiv.config import DraftConfig, Mode, RunConfig, SamplingConfig
from equiv.engines import load_factory
from equiv.models.pair import resolve_pair
from equiv.prompts import load_suites
from equiv.records.verdict import Label
from equiv.run.plan import plan
from equiv.run.runner import Runner
from equiv.verdicts.prompt_analysis import analyze
from equiv.verdicts.samples import Sample
from equiv.verdicts.sampling_verdict import classify_sampling

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
BUDGETS = [25, 50, 100, 200, 400, 800, 1600, 3200]
ALPHA = 0.01
GROUP_TOKENS = 200
STAGE_PIT = "residual_pit"  # with ``acceptance``: the judgement evidence


def sample_pool(
    engine: str, prompt_key: str, seeds: int, max_tokens: int, tmp: Path
) -> list[Sample]:
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
        return [Sample.of(r) for r in runner.results.read().results]


def black_box(pool: Sequence[Sample]) -> list[Sample]:
    """The samples without the judgement evidence: what an engine that reports none allows."""
    out = []
    for sample in pool:
        spec = sample.speculative
        pits = {k: v for k, v in spec.pits.items() if k != STAGE_PIT}
        blind = dataclasses.replace(spec, pits=pits, acceptance=None)
        out.append(dataclasses.replace(sample, speculative=blind))
    return out


def flagging_tests(records: Sequence[Sample]) -> list[str]:
    """The tests behind a sampler-bug verdict on these samples (empty: not flagged)."""
    analysis = analyze(records, alpha=ALPHA)
    if classify_sampling(analysis).label is not Label.SAMPLER_BUG:
        return []
    rejected = [t.name for t in analysis.tests if t.p_adjusted < ALPHA]
    return rejected or ["drift"]


def flagged(records: Sequence[Sample]) -> bool:
    return bool(flagging_tests(records))


def tokens_of(records: Sequence[Sample]) -> int:
    return sum(len(r.speculative.tokens) for r in records)


def power_at(pool: Sequence[Sample], budget: int, rng: np.random.Generator, reps: int) -> float:
    k = max(2, round(budget * len(pool) / tokens_of(pool)))
    if k > len(pool):
        return float("nan")
    hits = 0
    for _ in range(reps):
        pick = rng.choice(len(pool), size=k, replace=False)
        hits += flagged([pool[i] for i in pick])
    return hits / reps


def needed(pool: Sequence[Sample], rng: np.random.Generator, reps: int) -> str:
    total = tokens_of(pool)
    for budget in BUDGETS:
        if budget > total:
            break
        if power_at(pool, budget, rng, reps) >= 0.95:
            return str(budget)
    return f"> {total}"


def false_positives(pool: Sequence[Sample]) -> str:
    k = max(2, round(GROUP_TOKENS * len(pool) / tokens_of(pool)))
    groups = [pool[i : i + k] for i in range(0, len(pool) - k + 1, k)]
    why = [flagging_tests(g) for g in groups]
    hits = sum(bool(w) for w in why)
    upper = float(sps.beta.ppf(0.95, hits + 1, len(groups) - hits)) if hits < len(groups) else 1.0
    names = sorted({name for w in why for name in w})
    by = f"; by {', '.join(names)}" if names else ""
    return f"{hits}/{len(groups)} (95% upper bound {upper:.2f}{by})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompt", default="chat/haiku_autumn")
    parser.add_argument("--seeds", type=int, default=48)
    parser.add_argument("--max-tokens", type=int, default=24)
    parser.add_argument("--reps", type=int, default=40)
    parser.add_argument("--engines", default=",".join(ENGINES))
    args = parser.parse_args()
    rng = np.random.default_rng(2026)
    print(f"prompt {args.prompt}, temp 0.8, draft-max 4, {args.seeds} seeds x <= {args.max_tokens}")
    head = "engine | pool (tokens) | tokens for power >= 0.95 | same, emitted tokens only"
    print(f"| {head} | flagged runs of ~{GROUP_TOKENS} tokens | time |")
    print("| --- | --- | --- | --- | --- | --- |")
    with tempfile.TemporaryDirectory() as tmp:
        for engine in args.engines.split(","):
            t0 = time.perf_counter()
            pool = sample_pool(engine, args.prompt, args.seeds, args.max_tokens, Path(tmp))
            full = needed(pool, rng, args.reps)
            blind = needed(black_box(pool), rng, args.reps)
            fp = false_positives(pool)
            print(
                f"| {engine} | {tokens_of(pool)} | {full} | {blind} | {fp} | "
                f"{time.perf_counter() - t0:.0f} s |",
                flush=True,
            )


if __name__ == "__main__":
    main()
