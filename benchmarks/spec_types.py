"""Each speculative type of llama-server on the bundled target, as equiv checks it (issue 33):
its temp-0 labels and temp > 0 run answer, the server's acceptance, the speed-up and the wall.

One ``equiv run --engine server --server-bin B`` per type and mode, run one after another (each
starts its own two servers); the figures come from each run's summary.json. n-gram types get
small n-gram sizes (the bundled model's answers are short); ``mtp`` is ``--pair mtp``, the tiny
deepseek2 model drafting with its own head; ``inferred`` is ``-md`` without ``--spec-type``.

    python benchmarks/spec_types.py --server-bin B [--types draft-simple,ngram-mod,...] \\
        [--prompt 'code/py_*'] [--max-tokens 32] [--seeds 8]
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

NGRAM_TYPES = ("ngram-mod", "ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-cache")
TYPES = ("draft-simple", *NGRAM_TYPES, "mtp")
#: n-gram sizes that draft within short answers (the defaults need 12-24-token matches).
NGRAM_ARGS = {
    "ngram-mod": "--spec-ngram-mod-n-match 3 --spec-ngram-mod-n-min 1 --spec-ngram-mod-n-max 6",
    "ngram-simple": "--spec-ngram-simple-size-n 3 --spec-ngram-simple-size-m 6",
    "ngram-map-k": "--spec-ngram-map-k-size-n 3 --spec-ngram-map-k-size-m 6",
    "ngram-map-k4v": "--spec-ngram-map-k4v-size-n 3 --spec-ngram-map-k4v-size-m 6",
}


def _argv(kind: str, args: argparse.Namespace, mode: str, out: Path) -> list[str]:
    argv = [sys.executable, "-m", "equiv", "run", "--engine", "server"]
    argv += ["--server-bin", args.server_bin, "--mode", mode, "--out", str(out)]
    argv += ["--max-tokens", str(args.max_tokens), "--prompt", args.prompt]
    if mode == "sampling":
        argv += ["--temp", str(args.temp), "--seeds", str(args.seeds), "--top-k", "40"]
    if kind == "mtp":
        return [*argv, "--pair", "mtp"]
    argv += ["--server-spec-type", kind]
    if kind in NGRAM_ARGS:
        argv += ["--server-draft-args", NGRAM_ARGS[kind]]
    return argv


def _row(kind: str, mode: str, summary: dict[str, Any], wall: float) -> str:
    speed = summary.get("speed") or {}
    labels = ", ".join(f"{n} {k}" for k, n in summary["labels"].items() if n)
    run = f"**{summary['verdict']['label']}**"
    need = re.search(r"about (\d+) seeds", summary["verdict"]["reason"])
    if need:  # the pooled answer's own estimate of the seeds a prompt that would decide it
        run += f" (about {need.group(1)} seeds)"
    acc, up = speed.get("acceptance"), speed.get("measured_speedup")
    drafted = speed.get("drafted")
    cells = [
        kind,
        mode,
        run,
        labels,
        "-" if acc is None else f"{acc:.2f} ({speed.get('accepted')} / {drafted})",
        "-" if up is None else f"{up:.2f}x",
        f"{wall:.0f} s",
    ]
    return "| " + " | ".join(cells) + " |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server-bin", required=True)
    parser.add_argument("--types", default=",".join(TYPES))
    parser.add_argument("--modes", default="temp0,sampling")
    parser.add_argument("--prompt", default="code/py_*")
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--temp", type=float, default=0.8)
    parser.add_argument("--seeds", type=int, default=8)
    args = parser.parse_args()
    print(f"prompts {args.prompt}, {args.max_tokens} tokens; sampling: temp {args.temp}, "
          f"{args.seeds} seeds, top-k 40")  # fmt: skip
    print("| type | mode | run | labels | acceptance (accepted / drafted) | speed-up | wall |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    with tempfile.TemporaryDirectory(prefix="equiv-spec-types-") as tmp:
        for kind in args.types.split(","):
            for mode in args.modes.split(","):
                out = Path(tmp) / f"{kind}-{mode}"
                started = time.perf_counter()
                done = subprocess.run(_argv(kind, args, mode, out), capture_output=True, text=True)
                wall = time.perf_counter() - started
                path = out / "summary.json"
                if not path.is_file():
                    tail = (done.stderr or done.stdout).strip().splitlines()[-1:]
                    print(f"| {kind} | {mode} | exit {done.returncode}: {' '.join(tail)} |")
                    continue
                print(_row(kind, mode, json.loads(path.read_text()), wall), flush=True)


if __name__ == "__main__":
    main()
