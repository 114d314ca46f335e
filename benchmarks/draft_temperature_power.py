"""The ``draft-temperature`` test's power on the reference engine's ``wrong_temp`` fault (issue
32), pooled over random subsets of single samples: many more subsets a size than
`fault_detection.py --pooled` draws, so the tokens it needs for power 0.95 are a figure rather
than a step.

The pool is sampled on the real pair as `fault_detection.py --pooled` samples it (the same
prompts, seeds and positions), and each sample's recorded ``rule_score`` entries hold, at every
judged position, what the test reads (`equiv.verdicts.sampling.rule_scores.temperature_entry`).
Then, with no further sampling, over ``--reps`` random subsets a size, the test
(`equiv.verdicts.sampling.rule_scores.score_test`, its PITs randomized afresh each subset) at
the pooled tests' level (alpha times `POOLED_SHARE`, Holm's first step over the seven tests)
and at alpha itself; and how many subsets summed the score at some positions (a subset whose
scores' Lyapunov ratio is above its cap takes the normal scores everywhere).

    python benchmarks/draft_temperature_power.py --reps 400
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import numpy.typing as npt
from fault_detection import ALPHA, POWER, Moments, sample_pools

from equiv.verdicts.sampling.rule_scores import WIDTH, Direction, score_test
from equiv.verdicts.sampling.run_verdict import POOLED_SHARE

FloatArray = npt.NDArray[np.float64]
PROMPTS = (
    "chat/haiku_autumn,chat/cpu_explain,multilingual/de_berlin,multilingual/ru_fairy_tale,"
    "reasoning/train_arrival,code/py_binary_search"
)
#: The pooled family's size (`equiv.verdicts.sampling.pooled`, in process with draft rows).
POOLED_TESTS = 7
SIZES = (4, 6, 8, 10, 12, 14, 16, 18, 20, 24, 28, 32, 40)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", default=PROMPTS)
    parser.add_argument("--seeds", type=int, default=16)
    parser.add_argument("--max-tokens", type=int, default=24)
    parser.add_argument("--engine", default="reference:wrong_temp")
    parser.add_argument("--reps", type=int, default=400)
    args = parser.parse_args()
    start = time.perf_counter()
    moments = Moments()
    with tempfile.TemporaryDirectory() as tmp:
        keys = args.prompts.split(",")
        pools = sample_pools(args.engine, keys, args.seeds, args.max_tokens, Path(tmp), moments)
    columns = Direction.DRAFT_TEMPERATURE.columns
    units: list[tuple[int, FloatArray]] = []  # (tokens, the test's entries)
    for pool in pools.values():
        for sample in pool:
            entries = np.asarray(sample.speculative.rule_scores or (), dtype=np.float64)
            units.append((len(sample.speculative.tokens), entries.reshape(-1, WIDTH)[:, columns]))
    limit, how = moments.limit()
    print(
        f"{args.engine}: {len(units)} samples, {sum(n for n, _ in units)} tokens; "
        f"Neyman-Pearson limit at alpha {ALPHA}, power {POWER}: {limit:.0f} tokens ({how})"
    )
    levels = {"the pooled level": ALPHA * POOLED_SHARE / POOLED_TESTS, "alpha": ALPHA}
    names = " | ".join(f"power at {name} ({level:.2g})" for name, level in levels.items())
    print(f"| samples | tokens | {names} | subsets that summed scores |")
    print("| --- " * (3 + len(levels)) + "|")
    rng = np.random.default_rng(0)
    for size in SIZES:
        if size > len(units):
            break
        hits = np.zeros(len(levels))
        tokens = summed = 0
        for _ in range(args.reps):
            chosen = [units[j] for j in rng.choice(len(units), size=size, replace=False)]
            tokens += sum(n for n, _ in chosen)
            entries = np.concatenate([e for _, e in chosen])
            result = score_test(entries, ALPHA, rng)  # one randomization, judged at each level
            hits += [result.p_value <= level for level in levels.values()]
            summed += "the score at 0 positions" not in result.detail
        power = " | ".join(f"{h / args.reps:.3f}" for h in hits)
        print(f"| {size} | {tokens / args.reps:.0f} | {power} | {summed / args.reps:.2f} |")
    print(f"{time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
