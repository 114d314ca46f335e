"""The ``draft-temperature`` test's level on correct runs (issue 32): its p-value is a normal
approximation (`equiv.verdicts.sampling.rule_scores`), so its level is measured here, in the
regimes where the approximation could fail.

Rows as a rejection sampler meets them: a target row p (logits N(0, 2.5) over 24 tokens) and a
draft row q near it (noisy logits at temperature 0.8, cut below 2 % of its top, as min-p cuts),
plus, with ``--certain``, rows near certainty whose rare token (probability 1e-5) scores about
a hundred of the row's standard deviations. A correct run draws every token from p. Each run
is one test at each level; the table gives the rejections against the number expected, and how
many runs summed the score at some positions (the rest took the normal scores everywhere).

    python benchmarks/draft_temperature_level.py
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import numpy.typing as npt

from equiv.verdicts.sampling.rule_scores import Direction, position_scores, score_test

FloatArray = npt.NDArray[np.float64]
VOCAB = 24
#: (positions a run, rows near certainty a run, runs, alpha)
DESIGNS = (
    (150, 0, 5000, 0.01),
    (400, 0, 5000, 0.01),
    (400, 0, 20000, 0.001),
    (10, 4000, 2000, 0.01),
    (200, 4000, 2000, 0.01),
)


def _rows(rng: np.random.Generator) -> tuple[FloatArray, FloatArray]:
    logits = rng.normal(0.0, 2.5, VOCAB)
    p = np.exp(logits) / np.exp(logits).sum()
    q = np.exp((logits + rng.normal(0.0, 1.5, VOCAB)) / 0.8)
    q = np.where(q >= 0.02 * q.max(), q, 0.0)
    return p, q / q.sum()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=300, help="ordinary rows to draw runs from")
    args = parser.parse_args()
    start = time.perf_counter()
    rng = np.random.default_rng(5)
    column = Direction.DRAFT_TEMPERATURE.columns
    rows = [_rows(rng) for _ in range(args.rows)]
    every = np.stack([[position_scores(p, q, x)[column] for x in range(VOCAB)] for p, q in rows])
    cum = np.cumsum([p for p, _ in rows], axis=1)
    rare = 1e-5
    near = np.asarray([1 - rare, rare, 0.0])
    certain = np.asarray(
        [position_scores(near, np.asarray([0.999, 1e-3 - 1e-12, 1e-12]), x)[column] for x in (0, 1)]
    )
    print("| positions | rows near certainty | runs | alpha | rejections | expected | summed |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for n, n_certain, runs, alpha in DESIGNS:
        hits = summed = 0
        for _ in range(runs):
            which = rng.integers(0, args.rows, n)
            tokens = np.minimum((cum[which] < rng.random((n, 1))).sum(axis=1), VOCAB - 1)
            rare_draws = (rng.random(n_certain) < rare).astype(int)
            entries = np.concatenate([every[which, tokens], certain[rare_draws]])
            result = score_test(entries, alpha, rng)
            hits += result.rejects
            summed += "the score at 0 positions" not in result.detail
        print(f"| {n} | {n_certain} | {runs} | {alpha:g} | {hits} | {runs * alpha:g} | {summed} |")
    print(f"{time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
