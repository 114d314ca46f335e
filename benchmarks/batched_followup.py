"""The run's batched follow-up on a real deployment: does its one-sample test hold its level
where the only difference is numeric drift, and does it find a faulty sampler?

Two llama-servers are started as equiv starts them (the target alone; target + draft), with the
fault proxy of the test suite (`tests/fault_proxy.py`) in front of the speculative one where
``--fault`` names a fault. `equiv run` samples through them; then *every* sample of both paths
is re-scored batched on the baseline server, as the run's follow-up does after a pooled
rejection, and the follow-up's tests are asked whatever the run said
(`equiv.verdicts.sampling.run_batched.confirm`): the placebo's samples against the batched
rows, the speculative samples against the same rows (a one-sample design, not the run's), and the
run's two-sample comparison with the placebo. On a correct deployment (``--fault none``) no test
of the speculative samples may reject: what moves them is the difference between the batched
re-scoring and the rows the speculative path sampled from (a mix of single-token steps and
verification batches), which the one-sample design does not cancel.

    python benchmarks/batched_followup.py --server-bin B --fault none \\
        -- --mode sampling --temp 0.2 --suite code --prompt 'code/py_*' --seeds 16

Everything after ``--`` is passed to `equiv run` as it is (``--baseline-url``,
``--speculative-url``, ``--out`` and ``--server-concurrency 1`` are added).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

from equiv.config import RunConfig
from equiv.engines.server.engine import ServerEngine
from equiv.engines.server.settings import ServerSettings
from equiv.models.pair import resolve_pair
from equiv.prompts import load_suites
from equiv.records import ResultsFile
from equiv.run.evidence import Evidence
from equiv.verdicts.sampling.analysis_record import ScoredTest
from equiv.verdicts.sampling.pit_tests import adjusted
from equiv.verdicts.sampling.pooled import against_rows
from equiv.verdicts.sampling.run_batched import confirm
from equiv.verdicts.sampling.run_verdict import POOLED_SHARE
from equiv.verdicts.sampling.samples import Sample

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from fault_proxy import FaultProxy  # type: ignore[import-not-found]  # tests/fault_proxy.py


def _show(name: str, tests: Sequence[ScoredTest], alpha: float) -> None:
    print(f"{name}:")
    for t in tests:
        flag = "REJECTS" if t.p_adjusted < alpha else "passes"
        power = "" if t.power is None else f", power {t.power:.2f}"
        print(f"  {t.name}: p_adj {t.p_adjusted:.3g} ({flag} at {alpha:.3g}{power})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server-bin", required=True)
    parser.add_argument("--fault", choices=("greedy", "wrong_temp", "none"), default="none")
    parser.add_argument("--rate", type=float, default=1.0, help="greedy: share replaced")
    parser.add_argument("--out", help="keep the run's directory here")
    parser.add_argument("run_args", nargs=argparse.REMAINDER, help="-- then equiv run's options")
    args = parser.parse_args()
    passed = [a for a in args.run_args if a != "--"]
    pair = resolve_pair()
    config = RunConfig(target=pair.target, draft=pair.draft)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(args.out) if args.out else Path(tmp) / "run"
        settings = ServerSettings(
            server_bin=args.server_bin, log_dir=str(Path(tmp) / "logs"), concurrency=1
        )
        baseline = ServerEngine(config, speculative=False, settings=settings)
        speculative = ServerEngine(config, speculative=True, settings=settings)
        fault = None if args.fault == "none" else args.fault
        try:
            with FaultProxy(speculative.url, fault=fault, rate=args.rate) as proxy:
                command = [
                    sys.executable, "-m", "equiv", "run", "--engine", "server",
                    "--baseline-url", baseline.url, "--speculative-url", proxy.url,
                    "--server-concurrency", "1", "--out", str(out), "-q", *passed,
                ]  # fmt: skip
                print("$", " ".join(command[2:]), flush=True)
                started = time.perf_counter()
                subprocess.run(command, check=False, stdout=subprocess.DEVNULL)
                print(f"run: {time.perf_counter() - started:.0f} s; replaced {proxy.faults}")
            results = ResultsFile(out / "results.jsonl")
            for record in results.runs():
                print(f"the run's answer: {record.verdict.label.value}; {record.verdict.reason}")
            run_config = RunConfig.from_dict(results.header().config)
            evidence = Evidence(baseline, speculative, run_config)
            prompts = {p.key: p for p in load_suites()}
            by_prompt: dict[str, list[Sample]] = defaultdict(list)
            for result in results.results():
                by_prompt[result.key.split("::")[0]].append(Sample.of(result))
            started = time.perf_counter()
            scored: list[Sample] = []
            for key, samples in by_prompt.items():
                ids = baseline.prompt_tokens(prompts[key])
                for sample in samples:
                    for path in ("baseline", "speculative"):
                        sample = sample.with_path(
                            path, evidence.batched_path(ids, sample.path(path))
                        )
                    scored.append(sample)
            print(f"re-scored batched: {len(scored)} samples x 2 paths in ", end="")
            print(f"{time.perf_counter() - started:.0f} s")
        finally:
            baseline.close()
            speculative.close()
    alpha = run_config.alpha * POOLED_SHARE
    for name, path in (
        (
            "the placebo against the batched rows (the one-sample design's instrument check)",
            "baseline",
        ),
        ("the speculative samples against the batched rows (one sample)", "speculative"),
    ):
        _show(name, adjusted(against_rows(scored, path, "batched_pit", alpha, "batched")), alpha)
    followup = confirm(scored, alpha=alpha)
    _show(
        "the speculative samples against the placebo (two samples, the run's)",
        followup.tests,
        alpha,
    )
    label, why = followup.answer(alpha, ["top-token"])
    print(f"where the pooled top-token test rejected, the follow-up says: {label.value}; {why}")


if __name__ == "__main__":
    main()
