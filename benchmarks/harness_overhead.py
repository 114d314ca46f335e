"""Harness overhead: equiv's temp-0 wall time / plain llama-cpp-python generation time.

Both sides generate the same prompts and the same number of tokens on the same two paths
(baseline: target alone; speculative: target + the GGUF draft adapter), in the same process, with
the same loaded models. The plain side only pulls tokens out of ``Llama.generate``; equiv's side is
``Runner.run`` (recording rows, top-k, comparing, drift, classifying divergences with their
re-scoring, appending JSONL). Goal: ratio <= 1.05. The temp-0 placebo control (the baseline's
tokens re-scored in one batch, `Evidence.drift_placebo`) is timed inside the runner and its own
time printed beside the ratio, with the ratio it leaves without it.

Grading is timed on its own: a graded prompt's generated program runs in the sandbox for as long
as the program takes (a binary search that never ends runs until its grader's CPU limit), a cost
of the prompt's tests, not of the harness. The harness is measured on the prompts without their
graders; then the same answers are graded once, fresh, and that time is printed beside it.

    python benchmarks/harness_overhead.py [--prompts 'code/*'] [--max-tokens 32] [--repeat 3]
                                          [--threads N]

``--threads`` sets llama.cpp's threads on both sides (default: every core); with 1 the ratio can
be measured on one free core beside a 1-thread job.
"""

from __future__ import annotations

import argparse
import dataclasses
import fnmatch
import resource
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import llama_cpp

from equiv.config import RunConfig
from equiv.engines.llamacpp import LlamaCppEngine, make_engine
from equiv.models.pair import resolve_pair
from equiv.prompts import load_suites
from equiv.run.plan import plan
from equiv.run.runner import Runner
from equiv.verdicts.quality import graders, python_grader


def _time_placebo(runner: Runner) -> list[float]:
    """Time each of the runner's temp-0 placebo batches (a control, like the determinism
    control this benchmark turns off: its cost is printed on its own). On a prompt that diverged
    the classifier asked for the same batch first, and the placebo's own time is near 0."""
    times: list[float] = []
    inner = runner.evidence.drift_placebo

    def timed(*args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return inner(*args, **kwargs)
        finally:
            times.append(time.perf_counter() - t0)

    runner.evidence.drift_placebo = timed  # type: ignore[method-assign]
    return times


def plain_generate(engine: LlamaCppEngine, tokens: list[int], n: int) -> int:
    """Pull exactly n tokens (or up to EOG) out of llama-cpp-python, recording nothing."""
    llm = engine.llm
    vocab = llama_cpp.llama_model_get_vocab(llm.model)
    llm.reset()
    out = 0
    gen = llm.generate(tokens, temp=0.0, reset=True)
    for token in gen:
        out += 1
        if llama_cpp.llama_vocab_is_eog(vocab, token) or out >= n:
            break
    gen.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", default="code/*", help="globs of prompt keys, comma-separated")
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--threads", type=int, help="llama.cpp threads (default: every core)")
    args = parser.parse_args()

    pair = resolve_pair()
    config = RunConfig(target=pair.target, draft=pair.draft, max_tokens=args.max_tokens)
    if args.threads:
        config = dataclasses.replace(config, n_threads=args.threads)
    globs = args.prompts.split(",")
    chosen = [p for p in load_suites() if any(fnmatch.fnmatchcase(p.key, g) for g in globs)]
    prompts = [dataclasses.replace(p, grader=None) for p in chosen]  # graded below, on their own
    items = plan(prompts, config)
    plain_times: list[float] = []
    equiv_times: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        # Controls off: the determinism control would add a generation the plain side lacks.
        runner = Runner(config, make_engine, Path(tmp) / "warmup.jsonl", controls=False)
        engines: list[Any] = [runner.baseline, runner.speculative]
        placebo_times = _time_placebo(runner)
        runner.run(items[:1])  # warm caches and page in the weights
        placebo_times.clear()
        tokens = runner.tokenize(items)
        for rep in range(args.repeat):
            # equiv: the real runner, fresh results file each repetition
            runner.results.path = Path(tmp) / f"r{rep}.jsonl"
            t0 = time.perf_counter()
            records: list[Any] = list(runner.run(items))  # read as JSON
            equiv_times.append(time.perf_counter() - t0)
            # plain: the same prompts and token counts through llama-cpp-python alone
            t0 = time.perf_counter()
            for item, record in zip(items, records, strict=True):
                ids = tokens[item.prompt.key]
                for engine, path in zip(engines, ("baseline", "speculative"), strict=True):
                    plain_generate(engine, ids, len(record[path]["tokens"]))
            plain_times.append(time.perf_counter() - t0)
        runner.close()
    # Grading the last repetition's answers, once, with no answer graded before.
    python_grader._run_tests.cache_clear()
    original = {p.key: p for p in chosen}
    graded = [(original[r["suite"] + "/" + r["prompt_id"]], r) for r in records]
    graded = [(p, r) for p, r in graded if p.grader is not None]
    t0 = time.perf_counter()
    for prompt, record in graded:
        graders.grade_pair(
            prompt.grader_spec,
            prompt.text,
            record["baseline"]["text"],
            record["speculative"]["text"],
        )
    grading = time.perf_counter() - t0
    ratio = statistics.median(e / p for e, p in zip(equiv_times, plain_times, strict=True))
    placebo = sum(placebo_times) / args.repeat
    without = statistics.median(
        (e - placebo) / p for e, p in zip(equiv_times, plain_times, strict=True)
    )
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"prompts: {len(items)}  max_tokens: {args.max_tokens}  repeats: {args.repeat}")
    print(f"plain llama-cpp-python: median {statistics.median(plain_times):.2f} s")
    print(f"equiv runner:           median {statistics.median(equiv_times):.2f} s")
    print(f"overhead ratio:         {ratio:.3f}  (goal <= 1.05; the median of the repetitions')")
    print(
        f"  the temp-0 placebo control's own time: {placebo:.2f} s a repetition; "
        f"without it {without:.3f}"
    )
    each = ", ".join(f"{e:.2f}/{p:.2f}" for e, p in zip(equiv_times, plain_times, strict=True))
    print(f"  each repetition (equiv/plain s): {each}")
    print(f"grading, on its own:    {grading:.2f} s for {len(graded)} graded prompts")
    diverged = [r["key"].split("::")[0] for r in records if not r["comparison"]["identical"]]
    print(f"diverged (re-scored by the temp-0 rule): {len(diverged)} of {len(records)}")
    print(f"  {','.join(diverged)}")
    print(f"peak RSS:               {peak:.0f} MiB")


if __name__ == "__main__":
    main()
