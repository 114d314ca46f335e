"""The run's batched follow-up on a real deployment: which design holds its level where the only
difference is numeric drift, and which finds a faulty sampler?

Two llama-servers are started as equiv starts them (the target alone; target + draft), with the
fault proxy of the test suite (`tests/fault_proxy.py`) in front of the speculative one where
``--fault`` names a fault. `equiv run` samples through them; then *every* sample of both paths
is re-scored batched on the baseline server, as the run's follow-up does after a pooled
rejection, and three designs are asked whatever the run said:

- the run's (`equiv.verdicts.sampling.run_batched.confirm`): the speculative samples under
  batched rows against the placebo under single-token rows (two samples);
- one sample against the batched rows alone, the placebo's samples against the same rows as its
  check;
- one sample against the rows of each position's own evaluation: the single-token rows where
  llama-server reported a row (it does only for a token sampled outside a speculative step),
  the batched rows elsewhere (`_shaped`).

On a correct deployment (``--fault none``) no test of the speculative samples may reject.

    python benchmarks/batched_followup.py --server-bin B --fault none \\
        -- --mode sampling --temp 0.2 --suite code --prompt 'code/py_*' --seeds 4

Everything after ``--`` is passed to `equiv run` as it is (``--baseline-url``,
``--speculative-url``, ``--out`` and ``--server-concurrency`` are added).
"""

from __future__ import annotations

import dataclasses
import subprocess
import tempfile
import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from fault_proxy_run import deployment, parse, run_command  # benchmarks/fault_proxy_run.py

from equiv.config import RunConfig
from equiv.prompts import load_suites
from equiv.records import ResultsFile
from equiv.run.evidence import Evidence
from equiv.verdicts.sampling.analysis_record import ScoredTest
from equiv.verdicts.sampling.pit_tests import adjusted
from equiv.verdicts.sampling.pooled import against_rows
from equiv.verdicts.sampling.run_batched import confirm
from equiv.verdicts.sampling.run_verdict import POOLED_SHARE
from equiv.verdicts.sampling.samples import PathSample, Sample


def _show(name: str, tests: Sequence[ScoredTest], alpha: float) -> None:
    print(f"{name}:")
    for t in tests:
        flag = "REJECTS" if t.p_adjusted < alpha else "passes"
        power = "" if t.power is None else f", power {t.power:.2f}"
        print(f"  {t.name}: p_adj {t.p_adjusted:.3g} ({flag} at {alpha:.3g}{power})")


def _shaped(sample: PathSample, reported: Sequence[bool]) -> PathSample:
    """``sample`` with ``shaped_*`` entries: each position under the rows of the evaluation
    that sampled it. llama-server (`tools/server/server-context.cpp`) reports a row only for a
    token it sampled outside a speculative step, from a one-token decode (the prompt's last row
    for the first token); a speculative step's tokens come from its verification batch."""

    def pick(field: Mapping[str, tuple[Any, ...]], kind: str) -> dict[str, tuple[Any, ...]]:
        single, batched = field.get(f"target_{kind}"), field.get(f"batched_{kind}")
        if single is None or batched is None or len(single) != len(batched):
            return {}
        shaped = tuple(s if r else b for s, b, r in zip(single, batched, reported, strict=False))
        return {f"shaped_{kind}": shaped}

    return dataclasses.replace(
        sample,
        pits={**sample.pits, **pick(sample.pits, "pit")},
        sensitivities={**sample.sensitivities, **pick(sample.sensitivities, "sensitivity")},
        scores={**sample.scores, **pick(sample.scores, "score")},
    )


def main() -> None:
    args = parse(__doc__, fault="none", slots=1)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(args.out) if args.out else Path(tmp) / "run"
        with deployment(args, tmp) as (baseline, speculative, proxy):
            run_args = ["--server-concurrency", str(args.slots), *args.run_args]
            command = run_command(baseline, proxy, out, run_args)
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
            reported: dict[str, tuple[bool, ...]] = {}
            for result in results.results():
                by_prompt[result.key.split("::")[0]].append(Sample.of(result))
                reported[result.key] = tuple(bool(a.ids) for a in result.speculative.alternatives)
            started = time.perf_counter()
            scored: list[Sample] = []
            for key, samples in by_prompt.items():
                ids = baseline.prompt_tokens(prompts[key])
                for sample in samples:
                    for path in ("baseline", "speculative"):
                        sample = sample.with_path(
                            path, evidence.batched_path(ids, sample.path(path))
                        )
                    shaped = _shaped(sample.speculative, reported[sample.key])
                    scored.append(sample.with_path("speculative", shaped))
            print(f"re-scored batched: {len(scored)} samples x 2 paths in ", end="")
            print(f"{time.perf_counter() - started:.0f} s")
    alpha = run_config.alpha * POOLED_SHARE
    for name, path in (
        (
            "the placebo against the batched rows (the one-sample design's instrument check)",
            "baseline",
        ),
        ("the speculative samples against the batched rows (one sample)", "speculative"),
    ):
        _show(name, adjusted(against_rows(scored, path, "batched_pit", alpha, "batched")), alpha)
    rows = sum(sum(r) for r in reported.values())
    _show(
        f"the speculative samples against the rows of each position's evaluation (one sample; "
        f"single-token where llama-server reported a row: {rows} of "
        f"{sum(map(len, reported.values()))} positions, batched elsewhere)",
        adjusted(against_rows(scored, "speculative", "shaped_pit", alpha, "shaped")),
        alpha,
    )
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
