"""Requests per second equiv sustains against llama-server, and whether llama-server's greedy
answers depend on what shares their batch.

1. Throughput: a sampling plan (prompts x seeds, both paths) through the runner, with 1 and with
   N prompts in flight (llama-server started by equiv with as many slots). Reported: requests/s
   (two per plan item), generated tokens/s, and the wall time of the run (servers already up).
2. Batch invariance: greedy answers of the baseline server (N slots) to each prompt sent alone,
   then to all prompts sent N at a time. Reported: prompts whose tokens differ. This is why
   `--server-concurrency` defaults to 1 at temp 0.

    python benchmarks/server_throughput.py --server-bin PATH [--in-flight 4] [--seeds 8]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from equiv.config import Mode, RunConfig, SamplingConfig
from equiv.engines import load_factory
from equiv.engines.server.engine import ServerEngine
from equiv.engines.server.settings import ServerSettings
from equiv.models.pair import resolve_pair
from equiv.prompts import load_suites
from equiv.records import ResultsFile
from equiv.run.inflight import completed
from equiv.run.plan import plan
from equiv.run.runner import Runner

PROMPTS = ["code/fib_lt", "chat/capital_france", "chat/haiku_autumn", "reasoning/add_two_digit"]


def throughput(config: RunConfig, server_bin: str, in_flight: int, tmp: Path) -> str:
    options = (("server_bin", server_bin), ("server_concurrency", in_flight), ("log_dir", str(tmp)))
    config = replace(config, engine="server", engine_options=options)
    prompts = [p for p in load_suites() if p.key in PROMPTS]
    path = tmp / f"r{in_flight}.jsonl"
    with Runner(config, load_factory("server"), path, controls=False) as runner:
        started = time.perf_counter()
        runner.run(plan(prompts, config))
        wall = time.perf_counter() - started
    results = ResultsFile(path).read().results
    tokens = sum(r.baseline.n_tokens + r.speculative.n_tokens for r in results)
    return (
        f"| {in_flight} | {len(results)} | {2 * len(results) / wall:.2f} | "
        f"{tokens / wall:.1f} | {wall:.1f} s |"
    )


def batch_invariance(config: RunConfig, server_bin: str, in_flight: int, tmp: Path) -> str:
    settings = ServerSettings(server_bin=server_bin, concurrency=in_flight, log_dir=str(tmp))
    engine = ServerEngine(replace(config, mode=Mode.TEMP0), speculative=False, settings=settings)
    try:
        prompts = [engine.prompt_tokens(p) for p in load_suites() if p.suite in ("code", "chat")]

        def greedy(tokens: list[int]) -> tuple[int, ...]:
            gen = engine.generate(tokens, sampling=SamplingConfig(), seed=None, max_tokens=32)
            return gen.tokens

        alone = [greedy(t) for t in prompts]
        together = dict(completed(lambda i: greedy(prompts[i]), range(len(prompts)), in_flight))
    finally:
        engine.close()
    differ = sum(alone[i] != together[i] for i in range(len(prompts)))
    return (
        f"greedy answers, alone vs {in_flight} in flight: {differ} of {len(prompts)} prompts differ"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server-bin", required=True)
    parser.add_argument("--in-flight", type=int, default=4)
    parser.add_argument("--seeds", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=16)
    args = parser.parse_args()
    pair = resolve_pair()
    config = RunConfig(
        target=pair.target,
        draft=pair.draft,
        mode=Mode.SAMPLING,
        sampling=SamplingConfig(temp=0.8),
        seeds=tuple(range(1, args.seeds + 1)),
        max_tokens=args.max_tokens,
    )
    print(f"{len(PROMPTS)} prompts x {args.seeds} seeds x <= {args.max_tokens} tokens, temp 0.8")
    print("| prompts in flight | plan items | requests/s | tokens/s | wall |")
    print("| --- | --- | --- | --- | --- |")
    with tempfile.TemporaryDirectory() as tmp:
        for in_flight in (1, args.in_flight):
            print(throughput(config, args.server_bin, in_flight, Path(tmp)), flush=True)
        print(batch_invariance(config, args.server_bin, args.in_flight, Path(tmp)))


if __name__ == "__main__":
    main()
