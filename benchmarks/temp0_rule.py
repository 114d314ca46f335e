"""The calibrated temp-0 rule on the default pair: its false positives on the correct paths, and
relaxed acceptance at temp 0 with and without the speculative path's rows.

1. Correct paths: the default suite (or ``--prompts N`` of it) at temp 0 through the real
   llama-cpp-python pair (``--engine llamacpp``) and, with ``--server-bin``, through two real
   llama-servers started by equiv. Every divergence is labelled by the rule; "false positive" is
   a real divergence labelled ``sampler-bug`` (each prompt is an independent run).
2. Relaxed acceptance: a verifier that accepts the target's runner-up when the draft proposes it.
   At temp 0 such a verifier follows the baseline until the first position where the real
   draft's greedy token (the draft model evaluated over the baseline's own prefix) is the
   target's runner-up; there it emits the runner-up, and the target continues greedily from
   there. That trace is built from the real models, then labelled twice: with the rows the
   faulty verifier used (the target's own rows) and without any rows (as from a server).

    python benchmarks/temp0_rule.py [--prompts 71] [--max-tokens N] [--server-bin PATH]
"""

from __future__ import annotations

import argparse
import dataclasses
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from equiv.config import RunConfig, SamplingConfig
from equiv.engines import load_factory
from equiv.engines.llama_load import load_llama
from equiv.models.pair import resolve_pair
from equiv.prompts import load_suites
from equiv.records import PathName, ResultsFile
from equiv.records.verdict import verdict_of
from equiv.run.plan import plan
from equiv.run.runner import Runner
from equiv.verdicts.temp0.classify import classify_temp0
from equiv.verdicts.temp0.compare import compare


def correct_paths(config: RunConfig, prompts: list[Any], engine: str, out: Path) -> None:
    started = time.perf_counter()
    with Runner(config, load_factory(engine), out / "results.jsonl", controls=False) as runner:
        runner.run(plan(prompts, config))
    wall = time.perf_counter() - started
    records: list[Any] = [r.to_dict() for r in ResultsFile(out / "results.jsonl").results()]
    diverged = [r for r in records if not r["comparison"]["identical"]]
    labels = Counter(verdict_of(r).label.value for r in diverged)
    cost = [r["rescore_cost"] for r in records if "rescore_cost" in r]
    found: list[Any] = [verdict_of(r).evidence.get("drift_bound") for r in diverged]
    bounds = [b["bound"] for b in found if b]
    print(f"\n## {engine}: {len(records)} prompts, {len(diverged)} diverged, wall {wall:.0f} s")
    print(f"labels of the divergences: {dict(labels)}")
    if bounds:
        q = np.percentile(bounds, [0, 50, 100])
        print(f"calibrated bound per divergence: min {q[0]:.3f}, median {q[1]:.3f}, max {q[2]:.3f}")
    if cost:
        rescore_s = sum(c["wall_s"] for c in cost)
        print(
            f"re-scoring: {sum(c['requests'] for c in cost)} requests, "
            f"{sum(c['tokens_evaluated'] for c in cost)} tokens evaluated, {rescore_s:.1f} s wall "
            f"= {rescore_s / wall:.0%} of the run's wall time; rows off path: "
            f"{sum(c['rows_off_path'] for c in cost)}"
        )
    for record in diverged:
        verdict = verdict_of(record)
        print(f"  {record['prompt_id']}: {verdict.label.value}: {verdict.reason[:150]}")


def relaxed(config: RunConfig, prompts: list[Any]) -> None:
    """Relaxed-acceptance traces from the real models, labelled with and without rows."""
    factory = load_factory("llamacpp")
    with (
        tempfile.TemporaryDirectory() as tmp,
        Runner(config, factory, Path(tmp) / "r.jsonl", controls=False) as runner,
    ):
        draft = load_llama(config.draft.path, config, logits_all=True)
        base_engine = runner.baseline
        counts: Counter[str] = Counter()
        gaps = []
        for prompt in prompts:
            tokens = base_engine.prompt_tokens(prompt)
            base = base_engine.generate(
                tokens, sampling=SamplingConfig(), seed=1,
                max_tokens=config.max_tokens or prompt.max_tokens or 64,
            )  # fmt: skip
            assert base.logits is not None
            draft.reset()
            draft.eval([*tokens, *base.tokens[:-1]])
            d_rows = draft.scores[len(tokens) - 1 : len(tokens) - 1 + base.n_tokens]
            where = None
            for i, row in enumerate(base.logits):
                runner_up = int(np.argsort(-row, kind="stable")[1])
                if int(np.argmax(d_rows[i])) == runner_up:
                    where = (i, runner_up)
                    break
            if where is None:
                counts["draft never proposes the runner-up"] += 1
                continue
            d, b = where
            rest = base_engine.generate(
                [*tokens, *base.tokens[:d], b], sampling=SamplingConfig(), seed=1,
                max_tokens=max(base.n_tokens - d - 1, 1),
            )  # fmt: skip
            assert rest.logits is not None
            spec_rows = np.concatenate([base.logits[: d + 1], rest.logits])
            spec = dataclasses.replace(
                base, path=PathName.SPECULATIVE, tokens=(*base.tokens[:d], b, *rest.tokens),
                pieces=(), text="", logits=spec_rows, alternatives=(), draft_steps=(),
            )  # fmt: skip
            record = compare(base, spec)
            gap = float(base.logits[d][base.tokens[d]] - base.logits[d][b])
            gaps.append(gap)
            for rows in ("with rows", "without rows"):
                shown = spec if rows == "with rows" else dataclasses.replace(spec, logits=None)
                verdict = classify_temp0(record, base, shown, rescore=runner.evidence.rescore)
                counts[f"{rows}: {verdict.label.value}"] += 1
                drift: Any = verdict.evidence.get("drift_bound") or {}
                bound = drift.get("bound")
                print(f"  {prompt.key} {rows}: token {d}, gap {gap:.3f}, bound {bound}: "
                      f"{verdict.label.value}")  # fmt: skip
        draft.close()
    print(f"\n## relaxed acceptance at temp 0 over {len(prompts)} prompts: {dict(counts)}")
    if gaps:
        print(f"gaps the relaxed verifier flipped: {np.round(sorted(gaps), 3).tolist()}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=71)
    parser.add_argument("--max-tokens", type=int, help="default: each prompt's own")
    parser.add_argument("--server-bin")
    parser.add_argument("--skip-inprocess", action="store_true")
    parser.add_argument("--skip-relaxed", action="store_true")
    args = parser.parse_args()
    pair = resolve_pair()
    config = RunConfig(target=pair.target, draft=pair.draft, max_tokens=args.max_tokens)
    prompts = load_suites()[: args.prompts]
    with tempfile.TemporaryDirectory() as tmp:
        if not args.skip_inprocess:
            correct_paths(config, prompts, "llamacpp", Path(tmp) / "llamacpp")
        if args.server_bin:
            options = (("server_bin", args.server_bin), ("log_dir", str(Path(tmp) / "logs")))
            served = dataclasses.replace(config, engine_options=options)
            correct_paths(served, prompts, "server", Path(tmp) / "server")
    if not args.skip_relaxed:
        relaxed(config, prompts)


if __name__ == "__main__":
    main()
