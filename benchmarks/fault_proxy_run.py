"""A faulty deployment through the user's own command: how long `equiv run` takes to say
`sampler-bug` of it, and what it says.

Two llama-servers are started as equiv starts them (the target alone; target + draft), and the
fault proxy of the test suite (`tests/fault_proxy.py`: a greedy-ish verifier, or a sampler at
the wrong temperature) stands in front of the speculative one. Then the command a user runs,
with the two URLs, is timed from start to its answer:

    python benchmarks/fault_proxy_run.py --server-bin B --fault greedy --rate 1.0 \
        -- --mode sampling --temp 0.2 --suite code --seeds 64 --looks 4

Everything after ``--`` is passed to `equiv run` as it is (``--baseline-url``,
``--speculative-url`` and ``--out`` are added). The servers' start is not timed: the command's
own wall time is what a user waits for once their servers are up.
"""

from __future__ import annotations

import argparse
import contextlib
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from equiv.config import RunConfig
from equiv.engines.server.engine import ServerEngine
from equiv.engines.server.settings import ServerSettings
from equiv.models.pair import resolve_pair
from equiv.records import ResultsFile

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from fault_proxy import FaultProxy  # type: ignore[import-not-found]  # tests/fault_proxy.py


def parse(doc: str, *, fault: str, slots: int) -> argparse.Namespace:
    """The options of a benchmark on a faulty deployment (its own ``--out`` included) and
    ``run_args``: everything after ``--``, for `equiv run`."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--server-bin", required=True)
    parser.add_argument("--fault", choices=("greedy", "wrong_temp", "none"), default=fault)
    parser.add_argument("--rate", type=float, default=1.0, help="greedy: share replaced")
    parser.add_argument("--proxy-temp", type=float, default=0.4, help="wrong_temp: redraw at")
    parser.add_argument("--slots", type=int, default=slots, help="slots of each server")
    parser.add_argument("--out", help="keep the run here")
    parser.add_argument("run_args", nargs=argparse.REMAINDER, help="-- then equiv run's options")
    args = parser.parse_args()
    args.run_args = [a for a in args.run_args if a != "--"]
    return args


@contextlib.contextmanager
def deployment(
    args: argparse.Namespace, tmp: str
) -> Iterator[tuple[ServerEngine, ServerEngine, FaultProxy]]:
    """The baseline and speculative llama-servers as equiv starts them, and the fault proxy
    (``args.fault``; ``none``: it passes everything) in front of the speculative one."""
    pair = resolve_pair()
    config = RunConfig(target=pair.target, draft=pair.draft)
    settings = ServerSettings(
        server_bin=args.server_bin, log_dir=str(Path(tmp) / "logs"), concurrency=args.slots
    )
    baseline = ServerEngine(config, speculative=False, settings=settings)
    try:
        speculative = ServerEngine(config, speculative=True, settings=settings)
        try:
            fault = None if args.fault == "none" else args.fault
            with FaultProxy(
                speculative.url, fault=fault, rate=args.rate, temp=args.proxy_temp
            ) as proxy:
                yield baseline, speculative, proxy
        finally:
            speculative.close()
    finally:
        baseline.close()


def run_command(baseline: ServerEngine, proxy: FaultProxy, out: Path, args: list[str]) -> list[str]:
    """`equiv run` against the two URLs, writing to ``out``."""
    return [
        sys.executable, "-m", "equiv", "run", "--engine", "server",
        "--baseline-url", baseline.url, "--speculative-url", proxy.url,
        "--out", str(out), "-q", *args,
    ]  # fmt: skip


def main() -> None:
    args = parse(__doc__, fault="greedy", slots=4)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(args.out) if args.out else Path(tmp) / "run"
        with deployment(args, tmp) as (baseline, _, proxy):
            command = run_command(baseline, proxy, out, args.run_args)
            print("$", " ".join(command[2:]), flush=True)
            started = time.perf_counter()
            done = subprocess.run(command, check=False)
            wall = time.perf_counter() - started
            print(f"exit {done.returncode}; wall {wall:.0f} s; tokens replaced {proxy.faults}")
        for record in ResultsFile(out / "results.jsonl").runs():
            print(f"run: **{record.verdict.label.value}**; {record.verdict.reason}")


if __name__ == "__main__":
    main()
