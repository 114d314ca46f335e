"""False positives of the sampling verdicts on placebo deployments: no speculative decoding at all.

The same deployment is given as both paths, so every `sampler-bug` it earns is equiv's own
instrument speaking. Over HTTP: one plain llama-server (no draft), started with equiv's own flags
for sampling runs, is the baseline *and* the speculative URL (``--in-flight`` requests at once).
In process: the target alone (llama-cpp-python, no draft) on both paths. Each prompt is one
independent run of ``--seeds`` seeds; the study counts its labels and gives, for `sampler-bug`,
the one-sided 95 % Clopper-Pearson upper bound of the rate over the prompt runs. Per prompt it
prints the comparison with the placebo (the decision), what the placebo itself says against the
re-scored rows, and the re-scoring fidelity.

    python benchmarks/placebo_study.py --server-bin PATH --temp 0.2 --in-flight 4 \
        --prompts code/rust_result_type,multilingual/de_berlin [--seeds 150] [--max-tokens 32]
    python benchmarks/placebo_study.py --in-process --temp 0.8 --prompts ... [--seeds 150]
"""

from __future__ import annotations

import argparse
import dataclasses
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from scipy import stats as sps

from equiv.config import Mode, RunConfig, SamplingConfig
from equiv.engines import load_factory
from equiv.engines.llamacpp import make_engine
from equiv.engines.server.engine import ServerEngine
from equiv.engines.server.settings import ServerSettings
from equiv.json_types import json_float
from equiv.models.pair import resolve_pair
from equiv.prompts import load_suites
from equiv.records import ResultsFile
from equiv.records.verdict import Label, verdict_of
from equiv.run.plan import plan
from equiv.run.runner import Runner
from equiv.verdicts.sampling.prompt_analysis import analyze
from equiv.verdicts.sampling.run_verdict import POOLED_SHARE, RunJudgement, judge_run
from equiv.verdicts.sampling.samples import Sample
from equiv.verdicts.sampling.verdict import classify_sampling

#: Added to the speculative path's seeds, so that its samples are independent of the baseline's
#: (with equal seeds one engine gives both paths the same tokens: a trivial placebo).
SEED_OFFSET = 1_000_003


class _Offset:
    """An engine whose seeds are shifted by ``offset`` (the other path of a placebo)."""

    def __init__(self, inner: Any, offset: int) -> None:
        self.inner, self.offset = inner, offset

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def generate(self, *args: Any, seed: int | None, **kwargs: Any) -> Any:
        return self.inner.generate(
            *args, seed=None if seed is None else seed + self.offset, **kwargs
        )


def _engines(
    config: RunConfig, args: argparse.Namespace, out: Path
) -> tuple[ServerEngine | None, Any, Any, RunConfig]:
    """(the server process's owner or None, baseline, speculative, config): the same deployment
    on both paths. Over HTTP both paths attach to the one server by URL, so their fingerprints
    are alike (an engine that started the server also reports its command line, which the run
    would rightly call another experiment)."""
    if args.in_process:
        pair = (make_engine(config, speculative=False), make_engine(config, speculative=False))
        pair[1].path = "speculative"
        return (None, *pair, config)
    settings = ServerSettings(
        server_bin=args.server_bin, log_dir=str(out / "logs"), concurrency=args.in_flight
    )
    server = ServerEngine(config, speculative=False, settings=settings)  # no draft
    options = (
        ("baseline_url", server.url),
        ("speculative_url", server.url),
        ("server_concurrency", args.in_flight),
    )
    placebo = dataclasses.replace(config, engine_options=options)
    try:
        attach = load_factory("server")
        return (
            server,
            attach(placebo, speculative=False),
            attach(placebo, speculative=True),
            placebo,
        )
    except BaseException:
        server.close()
        raise


def run(config: RunConfig, prompts: list[str], out: Path, args: argparse.Namespace) -> ResultsFile:
    chosen = [p for key in prompts for p in load_suites() if p.key == key]
    path = out / "results.jsonl"
    owner, baseline, speculative, config = _engines(config, args, out)
    if not args.same_seeds:
        speculative = _Offset(speculative, SEED_OFFSET)
    try:
        with Runner(config, None, path, controls=False, engines=(baseline, speculative)) as runner:
            runner.run(plan(chosen, config), resume=path.exists())
    finally:
        if owner is not None:
            owner.close()
    return ResultsFile(path)


def report(results: ResultsFile, wall: float) -> None:
    labels: Counter[str] = Counter()
    analyses: list[Any] = [a.to_dict() for a in results.analyses()]  # read as JSON
    for analysis in analyses:
        verdict = verdict_of(analysis)
        labels[verdict.label.value] += 1
        tests = {t["name"]: t for t in analysis["tests"]}
        decisive = ", ".join(
            f"{name.split(':')[0]} p_adj {t['p_adjusted']:.3g}"
            for name, t in tests.items()
            if name.endswith(":vs-placebo")
        )
        placebo = analysis.get("placebo") or {}
        alone = ", ".join(
            f"{t['name'].split(':')[0]} p_adj {t['p_adjusted']:.3g}"
            for t in placebo.get("tests") or []
        )
        print(f"- {analysis['key']}: **{verdict.label.value}**; vs placebo: {decisive}")
        print(f"  placebo against the re-scored rows alone: {alone or placebo.get('error')}")
        if placebo.get("fidelity"):
            print(f"  fidelity: {placebo['fidelity']}")
        agreement = analysis["same_seed_agreement"]
        print(f"  same-seed agreement {agreement:.2f}; {verdict.reason[:300]}")
    n = sum(labels.values())
    bugs = labels.get(Label.SAMPLER_BUG.value, 0)
    upper = float(sps.beta.ppf(0.95, bugs + 1, n - bugs)) if n > bugs else 1.0
    print(
        f"\n{n} prompt runs, {dict(labels)}; sampler-bug {bugs}/{n} "
        f"(one-sided 95 % upper bound {upper:.3f}); wall {wall:.0f} s"
    )
    for record in results.runs():  # the run's own answer, pooled over its prompts
        design = RunJudgement.of(record).pooled.design
        print(f"run ({design}): **{record.verdict.label.value}**; {record.verdict.reason}")


def reanalyze(path: Path) -> None:
    """The analyses of a kept results file, recomputed by this equiv (its seed records are
    pure data): what the current rules say of a run made before them."""
    contents = ResultsFile(path).read()
    assert contents.header is not None
    capabilities: list[Any] = list(contents.header.capabilities.values())  # read as JSON
    has_logits = all(c.get("full_logits") for c in capabilities)
    by_prompt: dict[str, list[Sample]] = {}
    for record in contents.results:
        by_prompt.setdefault(record.prompt.key, []).append(Sample.of(record))
    alpha = json_float(contents.header.config["alpha"]) * (1 - POOLED_SHARE) / len(by_prompt)
    labels: Counter[str] = Counter()
    for key, records in by_prompt.items():
        analysis = analyze(records, alpha=alpha, has_logits=has_logits)
        verdict = classify_sampling(analysis, has_logits=has_logits)
        labels[verdict.label.value] += 1
        tests = ", ".join(f"{t.name} p_adj {t.p_adjusted:.3g}" for t in analysis.tests[:3])
        print(f"- {key}: **{verdict.label.value}** ({len(records)} seeds); {tests}")
        print(f"  {verdict.reason[:400]}")
    print(f"\n{dict(labels)}")
    pooled = judge_run(
        by_prompt,
        Counter(Label(label) for label, n in labels.items() for _ in range(n)),
        alpha=json_float(contents.header.config["alpha"]) * POOLED_SHARE,
        has_logits=has_logits,
        bound_alpha=json_float(contents.header.config["alpha"]),
    )
    print(
        f"run (pooled, no batched follow-up): **{pooled.verdict.label.value}**; "
        f"{pooled.verdict.reason}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server-bin")
    parser.add_argument("--in-process", action="store_true")
    parser.add_argument("--temp", type=float, default=0.2)
    parser.add_argument("--seeds", type=int, default=150)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--in-flight", type=int, default=4)
    parser.add_argument("--prompts", default="code/rust_result_type,multilingual/de_berlin")
    parser.add_argument(
        "--threads", type=int, help="llama.cpp threads in process (default: every core)"
    )
    parser.add_argument("--keep", help="keep the results in this directory")
    parser.add_argument(
        "--same-seeds",
        action="store_true",
        help="give both paths the same seeds (one engine then repeats itself: a weak placebo)",
    )
    parser.add_argument("--analyze", help="only re-analyze this results.jsonl with this equiv")
    args = parser.parse_args()
    if args.analyze:
        reanalyze(Path(args.analyze))
        return
    if not args.in_process and not args.server_bin:
        parser.error("give --server-bin PATH (over HTTP) or --in-process")
    pair = resolve_pair()
    config = RunConfig(
        target=pair.target,
        draft=pair.draft,
        mode=Mode.SAMPLING,
        sampling=SamplingConfig(temp=args.temp),
        seeds=tuple(range(1, args.seeds + 1)),
        max_tokens=args.max_tokens,
        **({"n_threads": args.threads} if args.threads else {}),
    )
    where = "in process" if args.in_process else f"over HTTP, {args.in_flight} in flight"
    print(f"## placebo, {where}: temp {args.temp}, {args.seeds} seeds x {args.max_tokens} tokens")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(args.keep) if args.keep else Path(tmp)
        out.mkdir(parents=True, exist_ok=True)
        started = time.perf_counter()
        results = run(config, args.prompts.split(","), out, args)
        report(results, time.perf_counter() - started)


if __name__ == "__main__":
    main()
