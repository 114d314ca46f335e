"""What a test valid at every look costs against the Neyman-Pearson limit (issue 32): the
``draft-temperature`` test's power on the reference engine's ``wrong_temp`` fault, pooled over
random subsets of single samples, beside an oracle that knows the fault's exponent.

The pool is sampled on the real pair as `fault_detection.py --pooled` samples it (the same
prompts, seeds and positions), and each sample's recorded ``rule_score`` entries give, at every
judged position, the log-likelihood ratio ``log out_k(x) / p(x)`` of each exponent k of
`equiv.verdicts.sampling.rule_scores.EXPONENTS`. Then, with no further sampling, over ``--reps``
random subsets a size:

- **mixture**: equiv's e-value, the mean over the exponents of each one's product, rejecting
  where it reaches ``1 / level``;
- **oracle**: the product of the one exponent ``--oracle`` alone (the fault reads the draft at
  twice its temperature, k = 1/2), rejecting where it reaches ``1 / level`` — the likelihood
  ratio's own e-process, the best a test valid at every look can do when it knows the fault;

each at the pooled tests' level (alpha times `POOLED_SHARE`, Holm's first step over the seven
tests) and at alpha itself. The limit the other benchmarks quote is a fixed-sample test's, one
look, with its threshold at the null's quantile of the log-likelihood ratio rather than at
``log(1 / level)``.

    python benchmarks/anytime_cost.py --reps 400
"""

from __future__ import annotations

import argparse
import math
import tempfile
import time
from pathlib import Path

import numpy as np
import numpy.typing as npt
from fault_detection import ALPHA, POWER, Moments, sample_pools
from scipy.special import logsumexp

from equiv.verdicts.sampling.rule_scores import EXPONENTS, WIDTH, Direction
from equiv.verdicts.sampling.run_verdict import POOLED_SHARE

FloatArray = npt.NDArray[np.float64]
PROMPTS = (
    "chat/haiku_autumn,chat/cpu_explain,multilingual/de_berlin,multilingual/ru_fairy_tale,"
    "reasoning/train_arrival,code/py_binary_search"
)
#: The pooled family's size (`equiv.verdicts.sampling.pooled`, in process with draft rows).
POOLED_TESTS = 7
SIZES = (8, 12, 16, 20, 24, 28, 32, 36, 40, 48)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", default=PROMPTS)
    parser.add_argument("--seeds", type=int, default=16)
    parser.add_argument("--max-tokens", type=int, default=24)
    parser.add_argument("--engine", default="reference:wrong_temp")
    parser.add_argument("--oracle", type=float, default=0.5, help="the oracle's exponent k")
    parser.add_argument("--reps", type=int, default=400)
    args = parser.parse_args()
    oracle = EXPONENTS.index(args.oracle)
    start = time.perf_counter()
    moments = Moments()
    with tempfile.TemporaryDirectory() as tmp:
        keys = args.prompts.split(",")
        pools = sample_pools(args.engine, keys, args.seeds, args.max_tokens, Path(tmp), moments)
    units: list[tuple[int, FloatArray]] = []  # (tokens, each exponent's log-product)
    for pool in pools.values():
        for sample in pool:
            entries = np.asarray(sample.speculative.rule_scores or (), dtype=np.float64)
            columns = Direction.DRAFT_TEMPERATURE.columns
            logs = entries.reshape(-1, WIDTH)[:, columns].sum(axis=0)
            units.append((len(sample.speculative.tokens), logs))
    limit, how = moments.limit()
    print(
        f"{args.engine}: {len(units)} samples, {sum(n for n, _ in units)} tokens; "
        f"Neyman-Pearson limit at alpha {ALPHA}, power {POWER}: {limit:.0f} tokens ({how})"
    )
    levels = {"pooled": ALPHA * POOLED_SHARE / POOLED_TESTS, "alpha": ALPHA}
    print(
        "| samples | tokens | "
        + " | ".join(
            f"{test} at {name} ({level:.2g})"
            for name, level in levels.items()
            for test in ("mixture", f"oracle k={args.oracle:g}")
        )
        + " |"
    )
    print("| --- " * (2 + 2 * len(levels)) + "|")
    rng = np.random.default_rng(0)
    for size in SIZES:
        if size > len(units):
            break
        hits = np.zeros(2 * len(levels))
        tokens = 0
        for _ in range(args.reps):
            chosen = [units[j] for j in rng.choice(len(units), size=size, replace=False)]
            tokens += sum(n for n, _ in chosen)
            logs = np.sum([u for _, u in chosen], axis=0)
            mixture = float(logsumexp(logs)) - math.log(len(logs))
            for i, level in enumerate(levels.values()):
                hits[2 * i] += mixture >= -math.log(level)
                hits[2 * i + 1] += logs[oracle] >= -math.log(level)
        power = " | ".join(f"{h / args.reps:.3f}" for h in hits)
        print(f"| {size} | {tokens / args.reps:.0f} | {power} |")
    print(f"{time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
