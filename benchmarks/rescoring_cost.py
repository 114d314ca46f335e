"""Re-scoring on llama-server: what it costs, and what it buys at temp > 0.

1. Per request: one sample of ``--sample-tokens`` tokens re-scored on the baseline server, one
   token at a time on the cached prefix (single-token: ``cache_prompt: true``) and cold
   (batched: every prefix evaluated from scratch): requests, tokens evaluated, wall time.
2. A sampling run over ``--prompts`` at ``--temp`` with ``--seeds`` seeds through two
   llama-servers started by equiv (``--server-concurrency`` slots each, prompts in flight): the
   verdict of each prompt with its power, the run's wall time, and the share of it spent in
   re-scoring (the sum over items of the wall time of their scoring requests; with several
   items in flight that sum can exceed the time they overlap, so the share is an upper bound).

    python benchmarks/rescoring_cost.py --server-bin PATH [--temp 0.8] [--seeds 64]
        [--prompts chat/capital_france,code/fib_lt,...] [--max-tokens 48] [--concurrency 4]
        [--threads N] [--no-reuse: ask every single-token row, as before rows were reused]
"""

from __future__ import annotations

import argparse
import dataclasses
import tempfile
import time
from pathlib import Path
from typing import Any

from equiv.config import Mode, RunConfig, SamplingConfig
from equiv.engines import load_factory
from equiv.engines.server import rescore
from equiv.engines.server.engine import ServerEngine
from equiv.engines.server.settings import ServerSettings
from equiv.models.pair import resolve_pair
from equiv.prompts import load_suites
from equiv.records import ResultsFile
from equiv.records.verdict import verdict_of
from equiv.run.plan import plan
from equiv.run.runner import Runner

PROMPTS = "chat/capital_france,code/fib_lt,reasoning/add_two_digit,multilingual/de_berlin"


def per_request(config: RunConfig, server_bin: str, prompt_key: str, n: int, log: Path) -> None:
    settings = ServerSettings(server_bin=server_bin, log_dir=str(log))
    engine = ServerEngine(config, speculative=False, settings=settings)
    try:
        prompt = next(p for p in load_suites() if p.key == prompt_key)
        tokens = engine.prompt_tokens(prompt)
        sample = engine.generate(
            tokens, sampling=SamplingConfig(temp=0.8), seed=1, max_tokens=n
        ).tokens
        print(f"## per request: {len(sample)} tokens after a {len(tokens)}-token prompt")
        for batched in (False, True):
            engine.take_rescore_cost()
            started = time.perf_counter()
            engine.rescore(tokens, sample, batched=batched)
            wall = time.perf_counter() - started
            cost = engine.take_rescore_cost()
            print(
                f"{'batched (cold)' if batched else 'single-token (cached prefix)'}: "
                f"{cost.requests} requests, {cost.tokens_evaluated} tokens evaluated, "
                f"{wall:.2f} s wall ({1000 * wall / len(sample):.1f} ms per position; server "
                f"{1000 * cost.server_s / len(sample):.1f} ms), rows off path {cost.rows_off_path}"
            )
    finally:
        engine.close()


def sampling_run(config: RunConfig, prompts: list[str], out: Path) -> None:
    by_key = {p.key: p for p in load_suites()}
    chosen = [by_key[k] for k in prompts]
    started = time.perf_counter()
    with Runner(config, load_factory("server"), out / "results.jsonl", controls=False) as runner:
        runner.run(plan(chosen, config))
    wall = time.perf_counter() - started
    results = ResultsFile(out / "results.jsonl")
    records: list[Any] = [r.to_dict() for r in results.results()]  # read as JSON
    rescore_s = sum(r.get("rescore_cost", {}).get("wall_s", 0.0) for r in records)
    requests = sum(r.get("rescore_cost", {}).get("requests", 0) for r in records)
    reused = sum(r.get("rescore_cost", {}).get("rows_reused", 0) for r in records)
    rows = sum(r.get("rescore_cost", {}).get("rows", 0) for r in records)
    tokens = sum(len(r["speculative"]["tokens"]) + len(r["baseline"]["tokens"]) for r in records)
    print(
        f"\n## sampling run: temp {config.sampling.temp}, {len(config.seeds)} seeds x "
        f"{len(prompts)} prompts, max_tokens {config.max_tokens}: {tokens} tokens generated, "
        f"wall {wall:.0f} s; re-scoring {requests} requests for {rows} rows ({reused} reused: "
        f"{requests / max(len(records), 1):.1f} requests per seed), {rescore_s:.0f} s summed "
        f"over items (<= {rescore_s / wall:.0%} of the wall time)"
    )
    analyses: list[Any] = [a.to_dict() for a in results.analyses()]  # read as JSON
    for analysis in analyses:
        verdict = verdict_of(analysis)
        tests = {t["name"]: t for t in analysis["tests"]}
        spec = tests.get("pit:vs-placebo", {})
        temp = tests.get("temperature:vs-placebo", {})
        power = verdict.evidence.get("power")  # at Holm's first step, as the verdict uses it
        print(
            f"  {analysis['key']}: {verdict.label.value} (PIT n={spec.get('n')}, power "
            f"{power or 0:.2f} for w=0.1 at alpha/m; temperature test power "
            f"{temp.get('power') or 0:.2f} for a 10% error, p_adj {temp.get('p_adjusted')})"
        )
        print(f"      {verdict.reason[:200]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server-bin", required=True)
    parser.add_argument("--temp", type=float, default=0.8)
    parser.add_argument("--seeds", type=int, default=64)
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--prompts", default=PROMPTS)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--sample-tokens", type=int, default=64)
    parser.add_argument("--skip-per-request", action="store_true")
    parser.add_argument("--threads", type=int, help="llama-server threads (default: every core)")
    parser.add_argument(
        "--no-reuse",
        action="store_true",
        help="ask every single-token row, even of a context asked before (the old behaviour)",
    )
    args = parser.parse_args()
    if args.no_reuse:
        rescore.CACHE_ROWS = 0
    pair = resolve_pair()
    prompts = args.prompts.split(",")
    with tempfile.TemporaryDirectory() as tmp:
        base = RunConfig(
            target=pair.target,
            draft=pair.draft,
            max_tokens=args.max_tokens,
            **({"n_threads": args.threads} if args.threads else {}),
        )
        if not args.skip_per_request:
            per_request(base, args.server_bin, prompts[0], args.sample_tokens, Path(tmp))
        options = (
            ("server_bin", args.server_bin),
            ("server_concurrency", args.concurrency),
            ("log_dir", str(Path(tmp) / "logs")),
        )
        config = dataclasses.replace(
            base,
            mode=Mode.SAMPLING,
            sampling=SamplingConfig(temp=args.temp),
            seeds=tuple(range(1, args.seeds + 1)),
            engine_options=options,
        )
        sampling_run(config, prompts, Path(tmp))


if __name__ == "__main__":
    main()
