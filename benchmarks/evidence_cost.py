"""What the evidence stage costs per token: the configured chain over one row (`chain_evidence`),
on the rows a run meets.

A server's rows (the re-scoring's and a baseline's reported ones) hold its top K candidates and
``-inf`` elsewhere; in process the rows are dense. On a 2-core machine every millisecond the
judge spends is taken from the servers, so this cost is part of a server run's wall time.
Printed per row shape: milliseconds per position of `chain_evidence`, and, for comparison, of a
partition of the whole row (what the chain ran first before it kept a top-K row's finite
candidates alone: introselect degrades on the ties of ``-inf``; and before it partitioned only
the logits near a dense row's maximum, `equiv.engines.chain.top_k_candidates`). Dense rows are
random normal ones (as flat as no model's: most logits lie near the top) and, with
``--model``, the bundled target's own rows over a code and a German answer (llama-cpp-python).

    python benchmarks/evidence_cost.py [--vocab 262144] [--k 40] [--positions 200] [--temp 0.2]
        [--model]
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


#: Text the target's own rows are read over (`model_rows`): a code answer and a German one.
TEXTS = (
    "<start_of_turn>user\nWrite a Python function that returns the n-th Fibonacci number."
    "<end_of_turn>\n<start_of_turn>model\nHere is a simple function:\n\n```python\n"
    "def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n```",
    "<start_of_turn>user\nWas ist die Hauptstadt von Deutschland?<end_of_turn>\n"
    "<start_of_turn>model\nDie Hauptstadt von Deutschland ist Berlin. Berlin ist eine lebendige "
    "Stadt mit einer reichen Geschichte, vielen Museen und einer berühmten Mauer.",
)


def model_rows() -> np.ndarray:
    """The bundled target's rows at every position of `TEXTS` (float32, its whole vocabulary)."""
    import llama_cpp

    from equiv.models.pair import resolve_pair

    llm = llama_cpp.Llama(
        resolve_pair().target.path, n_ctx=512, logits_all=True, verbose=False, n_threads=2
    )
    out = []
    for text in TEXTS:
        tokens = llm.tokenize(text.encode(), add_bos=True, special=True)
        llm.reset()
        llm.eval(tokens)
        out.append(np.array(llm.scores[: len(tokens)], dtype=np.float32))
    llm.close()
    return np.concatenate(out)


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
    parser.add_argument("--model", action="store_true", help="also the target's own rows")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    sampling = SamplingConfig(temp=args.temp)
    print(f"chain: {sampling}; vocabulary {args.vocab:,}; {args.positions} positions")
    print("| rows | chain_evidence, ms a position | a whole-row partition, ms |")
    print("| --- | --- | --- |")
    for kind in ("top-K", "dense"):
        evidence, whole = measure(rows(kind, args.vocab, args.k, args.positions, rng), sampling)
        label = f"top-{args.k}, -inf elsewhere" if kind == "top-K" else "dense, random normal"
        print(f"| {label} | {evidence:.3f} | {whole:.3f} |")
    if args.model:
        target = model_rows()
        evidence, whole = measure(target, sampling)
        print(f"| dense, the target's ({len(target)} positions) | {evidence:.3f} | {whole:.3f} |")


if __name__ == "__main__":
    main()
