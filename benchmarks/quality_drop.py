"""Can the quality test see a real drop? Graded prompts through a correct and a faulty
speculative path, judged exactly as a run judges them (`equiv.verdicts.runs.summary.summarize`).

For each engine the graded prompts run through the usual `Runner` (the baseline is plain
llama-cpp-python; the speculative path is the engine named): at temp 0 once, or at
``--temp`` over ``--seeds`` seeds. Printed per engine: both paths' pass counts, the flips (temp
0), the exact McNemar p, the difference with its TOST interval, the quality answer, and how many
prompts (temp 0) or seeds per prompt (temp > 0) a change as large as the one observed needs to
be found significant with 80 % power (one-sided, 5 %).

    python benchmarks/quality_drop.py --mode temp0 --engines llamacpp $P --out /tmp/q/t0
    python benchmarks/quality_drop.py --mode temp0 --draft-max 2 --engines reference:off_by_one \\
        --baseline-from /tmp/q/t0/llamacpp-temp0.jsonl $P --out /tmp/q/off   # speculative only
    python benchmarks/quality_drop.py --mode sampling --seeds 16 --draft-max 2 \\
        --engines llamacpp --prompt 'code/py_*' --out /tmp/q/s

with ``P`` the ``--prompt`` globs of benchmarks/README.md. ``--join-only`` grades what an
interrupted speculative-only run logged.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import tempfile
import time
from pathlib import Path

from equiv.config import DraftConfig, Mode, RunConfig, SamplingConfig
from equiv.engines import load_factory
from equiv.models.pair import resolve_pair
from equiv.prompts import Prompt, load_suites
from equiv.records import ResultsFile
from equiv.run.plan import PlanItem, plan
from equiv.run.runner import Runner
from equiv.verdicts.quality.graders import Outcome, grade_pair
from equiv.verdicts.quality.paired import GradedSample, Quality, quality
from equiv.verdicts.runs.summary import summarize_file


def graded_prompts(globs: list[str]) -> list[Prompt]:
    prompts = [p for p in load_suites() if p.grader is not None]
    if globs:
        prompts = [p for p in prompts if any(fnmatch.fnmatch(p.key, g) for g in globs)]
    if not prompts:
        raise SystemExit(f"no graded prompt matches {globs}")
    return prompts


def run_engine(
    engine: str, prompts: list[Prompt], args: argparse.Namespace, out: Path
) -> tuple[Quality, float]:
    config = make_config(engine, args)
    path = out / f"{engine.replace(':', '_')}-{args.mode}.jsonl"
    start = time.perf_counter()
    with Runner(config, load_factory(engine), path, controls=False) as runner:
        runner.run(plan(prompts, config))
    seconds = time.perf_counter() - start
    summary = summarize_file(ResultsFile(path))
    if not summary.quality:
        raise SystemExit(f"{engine}: nothing could be graded")
    return summary.quality[0], seconds


def make_config(engine: str, args: argparse.Namespace) -> RunConfig:
    pair = resolve_pair()
    sampling = args.mode == "sampling"
    return RunConfig(
        target=pair.target,
        draft=pair.draft,
        mode=Mode.SAMPLING if sampling else Mode.TEMP0,
        sampling=SamplingConfig(temp=args.temp) if sampling else SamplingConfig(temp=0.0),
        seeds=tuple(range(1, args.seeds + 1)) if sampling else (),
        draft_config=DraftConfig(draft_max=args.draft_max),
        engine=engine,
        quality_margin=args.margin,
    )


def run_speculative_only(
    engine: str, prompts: list[Prompt], args: argparse.Namespace, out: Path
) -> tuple[Quality, float]:
    """Only the speculative path of ``engine``, against the baseline answers of an earlier run
    (``--baseline-from``: the same plain llama-cpp-python baseline, same prompts, temp 0 or the
    same seeds). Half the generations and no classification (flips carry no label)."""
    config = make_config(engine, args)
    start = time.perf_counter()
    items = plan(prompts, config)
    texts: dict[str, str] = {}
    path = out / f"{engine.replace(':', '_')}-{args.mode}-speculative.jsonl"
    if args.join_only:  # grade what an interrupted run logged, nothing more
        logged = [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x]
        texts = {r["key"]: r["text"] for r in logged}
        items = [i for i in items if i.key in texts]
    else:
        texts = _generate(engine, config, items, path)
    return _judge(items, texts, args), time.perf_counter() - start


def _generate(engine: str, config: RunConfig, items: list[PlanItem], path: Path) -> dict[str, str]:
    texts: dict[str, str] = {}
    spec = load_factory(engine)(config, speculative=True)
    try:
        with path.open("w", encoding="utf-8") as log:
            for item in items:
                gen = spec.generate(
                    spec.prompt_tokens(item.prompt),
                    sampling=config.for_path(speculative=True).sampling,
                    seed=item.seed,
                    max_tokens=item.max_tokens,
                )
                texts[item.key] = gen.text
                log.write(json.dumps({"key": item.key, "text": gen.text}) + "\n")
                log.flush()
    finally:
        spec.close()
    return texts


def _judge(items: list[PlanItem], texts: dict[str, str], args: argparse.Namespace) -> Quality:
    """Both paths' grades and the quality answer; the baseline answers are read only now (the
    run that makes them may still have been going while the speculative path ran)."""
    baseline = {r.key: r.baseline.text for r in ResultsFile(args.baseline_from).results()}
    samples = []
    for item in items:
        if item.key not in baseline and args.join_only:
            continue  # both runs were interrupted: grade what both have
        if item.key not in baseline:
            raise SystemExit(f"{item.key} is not in {args.baseline_from}; run it there first")
        grades = grade_pair(
            item.prompt.grader_spec, item.prompt.text, baseline[item.key], texts[item.key]
        )
        samples.append(
            GradedSample(
                item.prompt.key,
                item.prompt.suite,
                item.seed,
                Outcome(grades["baseline"]["outcome"]),
                Outcome(grades["speculative"]["outcome"]),
            )
        )
    q = quality(samples, temp0=args.mode == "temp0", margin_points=args.margin)
    if q is None:
        raise SystemExit("nothing could be graded")
    return q


def row(engine: str, q: Quality, seconds: float) -> str:
    t, d = q.total, q.total.difference
    flips = f"{t.worse} / {t.better}" if q.temp0 else "-"
    p = f"{t.mcnemar_p:.2g}" if t.mcnemar_p is not None else "-"
    ci = f"{100 * d.estimate:+.1f} ({100 * d.low:+.1f} to {100 * d.high:+.1f})"
    detect = f"{d.to_detect} {d.unit}" if d.to_detect is not None else "-"
    return (
        f"| {engine} | {t.baseline.passed}/{t.baseline.n} | {t.speculative.passed}/"
        f"{t.speculative.n} | {flips} | {p} | {ci} | {d.answer.value} | {detect} | "
        f"{seconds:.0f} s |"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--engines", default="llamacpp,reference:correct,reference:off_by_one")
    ap.add_argument("--mode", choices=("temp0", "sampling"), default="temp0")
    ap.add_argument("--seeds", type=int, default=16)
    ap.add_argument("--temp", type=float, default=0.8)
    ap.add_argument("--draft-max", type=int, default=4)
    ap.add_argument("--margin", type=float, default=3.0, help="quality margin, points")
    ap.add_argument("--prompt", action="append", default=[], help="glob of suite/id")
    ap.add_argument("--out", type=Path, help="keep the results files here")
    ap.add_argument(
        "--baseline-from",
        type=Path,
        help="results.jsonl of an earlier run of the same prompts: run only the speculative path",
    )
    ap.add_argument(
        "--join-only",
        action="store_true",
        help="with --baseline-from: grade the speculative answers already logged in --out",
    )
    args = ap.parse_args()
    prompts = graded_prompts(args.prompt)
    out = args.out or Path(tempfile.mkdtemp(prefix="equiv-quality-"))
    out.mkdir(parents=True, exist_ok=True)
    print(f"{len(prompts)} graded prompts, {args.mode}, results in {out}", flush=True)
    print(
        "| engine (speculative path) | baseline pass | speculative pass | worse / better | "
        "McNemar p | difference, points (TOST interval) | answer | to detect it | wall |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |", flush=True)
    lines = []
    for engine in args.engines.split(","):
        run = run_speculative_only if args.baseline_from else run_engine
        q, seconds = run(engine, prompts, args, out)
        print(row(engine, q, seconds), flush=True)
        lines.append(f"{engine}: {q.line}\n  {q.answer_line}")
        lines.extend(
            f"  {p.prompt}: baseline {p.baseline.passed}/{p.baseline.n}, "
            f"speculative {p.speculative.passed}/{p.speculative.n}"
            for p in q.prompts
        )
        if q.flips:
            lines.append(
                "  flips: "
                + ", ".join(
                    f"{f.prompt} ({'worse' if f.worse else 'better'}, {f.label})" for f in q.flips
                )
            )
    print("\n".join(lines))


if __name__ == "__main__":
    main()
