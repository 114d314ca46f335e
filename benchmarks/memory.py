"""Peak memory of an in-process temp-0 run against the context size.

    python benchmarks/memory.py [--n-ctx 2048 8192] [--max-tokens 32] [--every-row] [--threads N]

For each n_ctx, a fresh process loads the default pair (baseline and speculative engines, as
`equiv run` does), fills the context with a prompt (the long suite's texts, repeated) and
generates ``--max-tokens`` tokens on both paths, then re-scores them batched and single-token as
the classifier does. It prints the peak resident set (VmHWM) and its parts at the end: anonymous
memory (KV caches, compute buffers, logits rows) and file-backed pages (the GGUF weights, mapped
once per loaded model). ``--every-row`` evaluates the prompt with an output row per token, as
equiv did before (llama-cpp-python's ``Llama.eval`` with ``logits_all``), for the comparison.
``--threads`` sets llama.cpp's threads (default: every core); the peak does not depend on it,
so a measurement can share the machine with a 1-thread job without the two spinning.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import subprocess
import sys
import time


def _status() -> dict[str, int]:
    wanted = ("VmHWM", "VmRSS", "RssAnon", "RssFile")
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            name, _, value = line.partition(":")
            if name in wanted:
                out[name] = int(value.split()[0]) // 1024  # MiB
    return out


def child(n_ctx: int, max_tokens: int, every_row: bool, threads: int | None) -> None:
    from equiv.config import RunConfig
    from equiv.engines.llamacpp import LlamaCppEngine, make_engine
    from equiv.models.pair import resolve_pair
    from equiv.prompts import load_suites

    if every_row:

        def eval_prompt(self: LlamaCppEngine, prompt_tokens: list[int]) -> None:
            self.llm.reset()
            self.llm.eval(list(prompt_tokens))

        LlamaCppEngine._eval_prompt = eval_prompt  # type: ignore[method-assign,assignment]

    pair = resolve_pair()
    config = RunConfig(target=pair.target, draft=pair.draft, n_ctx=n_ctx, max_tokens=max_tokens)
    if threads:
        config = dataclasses.replace(config, n_threads=threads)
    loaded = time.perf_counter()
    baseline = make_engine(config, speculative=False)
    speculative = make_engine(config, speculative=True)
    after_load = _status()
    budget = n_ctx - max_tokens - config.draft_config.draft_max - 8
    texts = [p.text or "" for p in load_suites(["long"])]
    text = ""
    while len(baseline.llm.tokenize(text.encode(), add_bos=True)) < budget:
        text += texts[len(text) % len(texts)] + "\n\n"
    tokens = baseline.llm.tokenize(text.encode(), add_bos=True)[:budget]
    started = time.perf_counter()
    base = baseline.generate(tokens, sampling=config.sampling, seed=None, max_tokens=max_tokens)
    speculative.generate(tokens, sampling=config.sampling, seed=None, max_tokens=max_tokens)
    speculative.rescore(tokens, base.tokens, batched=True)
    baseline.rescore(tokens, base.tokens, batched=False)
    end = _status()
    print(
        json.dumps(
            {
                "n_ctx": n_ctx,
                "prompt_tokens": len(tokens),
                "every_row": every_row,
                "load_s": round(started - loaded, 1),
                "run_s": round(time.perf_counter() - started, 1),
                "after_load_mib": after_load["VmRSS"],
                "peak_mib": end["VmHWM"],
                "anon_mib": end["RssAnon"],
                "file_mib": end["RssFile"],
            }
        ),
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n-ctx", type=int, nargs="+", default=[2048, 8192])
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--every-row", action="store_true")
    parser.add_argument("--threads", type=int, help="llama.cpp threads (default: every core)")
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.max_tokens, args.every_row, args.threads)
        return
    print(f"{'n_ctx':>6} {'prompt':>7} {'peak MiB':>9} {'anon':>6} {'file':>6} {'run s':>6}")
    for n_ctx in args.n_ctx:
        cmd = [
            sys.executable,
            __file__,
            "--child",
            str(n_ctx),
            "--max-tokens",
            str(args.max_tokens),
        ]
        cmd += ["--every-row"] if args.every_row else []
        cmd += ["--threads", str(args.threads)] if args.threads else []
        out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
        r = json.loads(out.strip().splitlines()[-1])
        print(
            f"{r['n_ctx']:>6} {r['prompt_tokens']:>7} {r['peak_mib']:>9} {r['anon_mib']:>6} "
            f"{r['file_mib']:>6} {r['run_s']:>6}",
            flush=True,
        )


if __name__ == "__main__":
    main()
