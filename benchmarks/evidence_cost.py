"""What the evidence stage costs per token: the configured chain over one row (`chain_evidence`),
on the rows a run meets.

A server's rows (the re-scoring's and a baseline's reported ones) hold its top K candidates and
``-inf`` elsewhere; in process the rows are dense. On a 2-core machine every millisecond the
judge spends is taken from the servers, so this cost is part of a server run's wall time.
Printed per row shape: milliseconds per position of `chain_evidence`, and, for comparison, of a
partition of the whole row (what the chain ran first before it kept a top-K row's finite
candidates alone: introselect degrades on the ties of ``-inf``).

    python benchmarks/evidence_cost.py [--vocab 262144] [--k 40] [--positions 200] [--temp 0.2]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np

from equiv.config import SamplingConfig
from equiv.verdicts.sampling.token_evidence import chain_evidence


def rows(kind: str, vocab: int, k: int, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` rows of ``vocab`` logits: dense (in process) or top-``k`` (a server's)."""
    if kind == "dense":
        return rng.normal(0.0, 3.0, (n, vocab)).astype(np.float32)
    out = np.full((n, vocab), -np.inf, dtype=np.float32)
    for row in out:
        row[rng.choice(vocab, k, replace=False)] = rng.normal(0.0, 3.0, k)
    return out


def per_position_ms(fn: Callable[[], object], n: int) -> float:
    started = time.perf_counter()
    fn()
    return (time.perf_counter() - started) / n * 1e3


def measure(r: np.ndarray, sampling: SamplingConfig) -> tuple[float, float]:
    """Milliseconds a position: `chain_evidence`, and a partition of each whole row."""
    tokens = [int(np.argmax(row)) for row in r]
    cut = r.shape[1] - max(sampling.top_k, 1)
    evidence = per_position_ms(lambda: chain_evidence(r, tokens, sampling), len(tokens))
    whole = per_position_ms(lambda: [np.partition(row, cut) for row in r], len(tokens))
    return evidence, whole


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--vocab", type=int, default=262_144, help="Gemma 3's vocabulary")
    parser.add_argument("--k", type=int, default=40, help="candidates a server row holds")
    parser.add_argument("--positions", type=int, default=200)
    parser.add_argument("--temp", type=float, default=0.2)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    sampling = SamplingConfig(temp=args.temp)
    print(f"chain: {sampling}; vocabulary {args.vocab:,}; {args.positions} positions")
    print("| rows | chain_evidence, ms a position | a whole-row partition, ms |")
    print("| --- | --- | --- |")
    for kind in ("top-K", "dense"):
        evidence, whole = measure(rows(kind, args.vocab, args.k, args.positions, rng), sampling)
        label = f"top-{args.k}, -inf elsewhere" if kind == "top-K" else "dense"
        print(f"| {label} | {evidence:.3f} | {whole:.3f} |")


if __name__ == "__main__":
    main()
