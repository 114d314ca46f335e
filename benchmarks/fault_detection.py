"""Sampled tokens needed to detect each injected sampler fault, and the false-positive rate of the
correct engines.

For every engine (the reference sampler with each fault, the correct reference sampler, and the
llama-cpp-python speculative path) one prompt is sampled at temp 0.8 over many seeds, once. Each
subset of seeds is then judged exactly as a run judges a prompt (`analyze` at alpha =
0.01, Holm within the prompt, then `classify_sampling`); "flagged" means the label
``sampler-bug``.

- Power at a budget of n tokens: the share of R random subsets of whole seeds holding about n
  tokens that are flagged (subsampling from one pool). Reported: the smallest budget with power
  >= 0.95, with every test (the reference engine reports its judgements, so the acceptance and
  residual stages are tested on their own) and with the emitted-token tests only (what a
  black-box engine allows: the judgement evidence is removed before judging).
- False positives: the pool is cut into disjoint groups of seeds (independent runs of about
  200 tokens each); reported: flagged / groups with a one-sided 95 % Clopper-Pearson upper
  bound. For a correct engine the rate must stay <= alpha.
- The limit (issue 22): the emitted tokens the Neyman-Pearson test needs for the same power at
  the same alpha. That test knows, at every position of the pool, the correct distribution p
  (the target's row through the chain) and the faulty one f (`output_distribution` of the
  engine's rule with the draft's row there, exactly as the reference engine sampled; a bonus
  token after a fully accepted draft is p under both). Its statistic is the sum of the tokens'
  log-likelihood ratios log f(x)/p(x), here clipped to +-`CLIP` (a valid test, so its count is
  an upper bound on the limit), by the normal approximation of the sum given the positions:
  n = ((z_(1-alpha) s0 + z_power s1) / (m1 - m0))**2. A fault that emits tokens the correct
  sampler cannot (p(x) = 0) is seen by the first such token; where that needs fewer tokens the
  limit is that count. `off_by_one` records the wrong rows by construction, so it has no limit.

    python benchmarks/fault_detection.py [--prompt chat/haiku_autumn] [--seeds 48] [--max-tokens 24]

``--pooled P1,P2,...``: the run's pooled answer instead (issue 32). Every engine samples each
of the prompts named for ``--seeds`` seeds; a subset is the same random seeds on every prompt
(a run with fewer seeds), judged as the run judges itself (`judge_run` at alpha x
`POOLED_SHARE`: the pooled tests of the emitted tokens against the placebo, which see no
judgement evidence, so both power columns are the same test); the Neyman-Pearson limit is over
all the prompts' positions; false positives are disjoint groups of seeds on all prompts. With
``--unit sample`` the subsets are of single samples, whatever their prompt (a run whose prompts
have different numbers of seeds): a budget's step is then one sample, not one seed of every
prompt, for the faults whose limit is below one seed's tokens. ``--no-cut`` samples from whole rows
(no top-k, top-p or min-p), where a leaked draft token is never outside the chain's support.

    python benchmarks/fault_detection.py --pooled chat/haiku_autumn,chat/cpu_explain,... \
        --seeds 24 --max-tokens 24
"""

from __future__ import annotations

import argparse
import dataclasses
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats as sps

from equiv.config import DraftConfig, Mode, RunConfig, SamplingConfig
from equiv.engines import EngineFactory, load_factory
from equiv.engines.acceptance_rules import Rule, output_distribution
from equiv.engines.reference import ReferenceEngine, _probs
from equiv.models.pair import resolve_pair
from equiv.prompts import load_suites
from equiv.records import Generation
from equiv.records.verdict import Label
from equiv.run.plan import plan
from equiv.run.runner import Runner
from equiv.verdicts.sampling.prompt_analysis import analyze
from equiv.verdicts.sampling.run_verdict import POOLED_SHARE, judge_run
from equiv.verdicts.sampling.samples import Sample
from equiv.verdicts.sampling.support import outside
from equiv.verdicts.sampling.verdict import classify_sampling

ENGINES = [
    "reference:greedy",
    "reference:top2",
    "reference:no_max",
    "reference:no_norm",
    "reference:wrong_temp",
    "reference:off_by_one",
    "reference:correct",
    "llamacpp",
]
#: temp 0.8 with llama.cpp's default cut-offs (top-k 40, top-p 0.95, min-p 0.05); ``--no-cut``
#: samples from the whole vocabulary, where no token is outside the chain's support.
SAMPLING = SamplingConfig(temp=0.8)
NO_CUT = SamplingConfig(temp=0.8, top_k=0, top_p=1.0, min_p=0.0)
BUDGETS = [25, 50, 100, 200, 400, 800, 1600, 3200]
ALPHA = 0.01
GROUP_TOKENS = 200
STAGE_PIT = "residual_pit"  # with ``acceptance``: the judgement evidence
POWER = 0.95
CLIP = 20.0  # the log-likelihood ratio's clip, in nats
#: A mean log-likelihood-ratio gap below this is rounding (f = p): no fault to see.
GAP_NONE = 1e-9


@dataclasses.dataclass
class Moments:
    """Per emitted position of the pool: the clipped log-likelihood ratio's mean and variance
    under the correct (0) and the faulty (1) distribution, and the faulty mass on tokens the
    correct sampler cannot emit."""

    m0: list[float] = dataclasses.field(default_factory=list)
    v0: list[float] = dataclasses.field(default_factory=list)
    m1: list[float] = dataclasses.field(default_factory=list)
    v1: list[float] = dataclasses.field(default_factory=list)
    impossible: list[float] = dataclasses.field(default_factory=list)

    def add(self, p: np.ndarray, f: np.ndarray, q: np.ndarray | None = None) -> None:
        """One drafted position: the correct distribution ``p``, the faulty ``f``, and the
        draft's ``q`` there (unused here; `score_efficiency.Positions` keeps it)."""
        live = p > 0
        self.impossible.append(float(f[~live].sum()))
        pl, fl = p[live], f[live]
        with np.errstate(divide="ignore"):
            llr = np.clip(np.log(fl) - np.log(pl), -CLIP, CLIP)
        for m, v, w in (
            (self.m0, self.v0, pl / pl.sum()),
            (self.m1, self.v1, fl / max(fl.sum(), 1e-300)),
        ):
            mean = float(w @ llr)
            m.append(mean)
            v.append(max(0.0, float(w @ (llr - mean) ** 2)))

    def bonus(self) -> None:
        for values in (self.m0, self.v0, self.m1, self.v1, self.impossible):
            values.append(0.0)

    def limit(self, alpha: float = ALPHA, power: float = POWER) -> tuple[float, str]:
        """(tokens, how): the smaller of the normal approximation and the impossible-token count."""
        gap = float(np.mean(self.m1) - np.mean(self.m0))
        z = sps.norm.ppf(1 - alpha) * np.sqrt(np.mean(self.v0)) + sps.norm.ppf(power) * np.sqrt(
            np.mean(self.v1)
        )
        normal = float((z / gap) ** 2) if gap > GAP_NONE else float("inf")
        pi = float(np.mean(self.impossible))
        first = float(np.log(1 - power) / np.log1p(-pi)) if pi > 0 else float("inf")
        return (first, "impossible token") if first < normal else (normal, "llr")


class _Recorded:
    """A speculative reference engine that adds each generation's positions to ``moments``."""

    def __init__(self, inner: ReferenceEngine, moments: Moments) -> None:
        self.inner, self.moments = inner, moments

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def generate(self, *args: Any, **kwargs: Any) -> Generation:
        out = self.inner.generate(*args, **kwargs)
        _add(self.moments, self.inner, out, kwargs["sampling"])
        return out


def _recording(engine: str, moments: Moments) -> EngineFactory:
    """`engine`'s factory, recording the limit's moments (see the module docstring)."""
    factory = load_factory(engine)

    def make(config: RunConfig, *, speculative: bool) -> Any:
        made = factory(config, speculative=speculative)
        if speculative and isinstance(made, ReferenceEngine) and made.rule is not Rule.OFF_BY_ONE:
            return _Recorded(made, moments)
        return made

    return make


def _add(
    moments: Moments, engine: ReferenceEngine, out: Generation, sampling: SamplingConfig
) -> None:
    judged = {j.pos: j for j in out.judgements}
    assert out.logits is not None
    for pos in range(len(out.tokens)):
        j = judged.get(pos)
        if j is None:
            moments.bonus()
            continue
        p = _probs(out.logits[pos], sampling, sampling.temp)
        q = _probs(j.draft_row, sampling, sampling.temp)
        wrong = (
            _probs(j.draft_row, sampling, sampling.temp * 2)
            if engine.rule is Rule.WRONG_TEMP
            else None
        )
        moments.add(p, output_distribution(engine.rule, p, q, q_wrong=wrong), q)


def sample_pool(
    engine: str,
    prompt_key: str,
    seeds: int,
    max_tokens: int,
    tmp: Path,
    moments: Moments,
    sampling: SamplingConfig = SAMPLING,
) -> list[Sample]:
    pools = sample_pools(engine, [prompt_key], seeds, max_tokens, tmp, moments, sampling)
    return pools[prompt_key]


def sample_pools(
    engine: str,
    keys: Sequence[str],
    seeds: int,
    max_tokens: int,
    tmp: Path,
    moments: Moments,
    sampling: SamplingConfig = SAMPLING,
) -> dict[str, list[Sample]]:
    pair = resolve_pair()
    config = RunConfig(
        target=pair.target,
        draft=pair.draft,
        mode=Mode.SAMPLING,
        sampling=sampling,
        seeds=tuple(range(1, seeds + 1)),
        max_tokens=max_tokens,
        draft_config=DraftConfig(draft_max=4),
    )
    prompts = [p for p in load_suites() if p.key in keys]
    path = tmp / f"{engine.replace(':', '_')}.jsonl"
    with Runner(config, _recording(engine, moments), path, controls=False) as runner:
        runner.run(plan(prompts, config))
        out: dict[str, list[Sample]] = {key: [] for key in keys}
        for record in runner.results.read().results:
            out[record.prompt.key].append(Sample.of(record))
        return out


def pooled_flagged(pools: dict[str, list[Sample]], seeds: Sequence[int]) -> bool:
    """Whether the run's pooled answer over these seeds (indices) of every prompt is
    ``sampler-bug``."""
    by_prompt = {key: [pool[i] for i in seeds] for key, pool in pools.items()}
    judged = judge_run(by_prompt, Counter(), alpha=ALPHA * POOLED_SHARE, has_logits=True)
    return judged.verdict.label is Label.SAMPLER_BUG


def pooled_needed_by_sample(
    pools: dict[str, list[Sample]], rng: np.random.Generator, reps: int
) -> tuple[str, str]:
    """The fewest tokens with power >= 0.95 over random subsets of the pool's samples (a run
    whose prompts have different numbers of seeds, as one with seeds where the evidence is):
    the subsets' mean token count at the smallest size that reaches it; beside it the same for
    the oracle that convicts on the first token the chain cannot emit, on the same subsets, up
    to that size (the subsets drawn are those of the test alone, so later engines' are too)."""
    units = [(key, i) for key, pool in pools.items() for i in range(len(pool))]
    oracle = ""
    for k in (1, 2, 3, 4, 5, 6, 8, 10, 12, 14, 16, 20, 24, 28, 32, 40, 48, 64, 80, 96):
        if k > len(units):
            break
        hits, seen, tokens = 0, 0, 0
        tries = reps if k < len(units) else 1  # the whole pool is one subset
        for _ in range(tries):
            by_prompt: dict[str, list[Sample]] = {}
            for j in rng.choice(len(units), size=k, replace=False):
                key, i = units[j]
                by_prompt.setdefault(key, []).append(pools[key][i])
            tokens += sum(tokens_of(v) for v in by_prompt.values())
            judged = judge_run(by_prompt, Counter(), alpha=ALPHA * POOLED_SHARE, has_logits=True)
            hits += judged.verdict.label is Label.SAMPLER_BUG
            seen += any(_impossible(s) for v in by_prompt.values() for s in v)
        if not oracle and seen / tries >= POWER:
            oracle = str(round(tokens / tries))
        if hits / tries >= POWER:
            return str(round(tokens / tries)), oracle or f"> {round(tokens / tries)}"
    over = f"> {sum(tokens_of(p) for p in pools.values())}"
    return over, oracle or over


def _beyond_rounding(pools: dict[str, list[Sample]]) -> str:
    """How many of the pool's speculative tokens lie outside the chain's support, and how many
    of those beyond rounding (what the support test counts against 1e-6)."""
    spec = [s.speculative for pool in pools.values() for s in pool]
    out = sum(int(outside(p.pits["chain_pit"]).sum()) for p in spec)
    far = sum(len(p.far_outside or ()) for p in spec)
    return f"{far} of {out} outside beyond rounding"


def _impossible(sample: Sample) -> bool:
    """Whether the speculative sample holds a token its chain cannot emit under the rows it
    sampled from (the reference engine samples with equiv's chain: exactly, not by rounding)."""
    return bool(outside(sample.speculative.pits["chain_pit"]).any())


def pooled_needed(pools: dict[str, list[Sample]], rng: np.random.Generator, reps: int) -> str:
    """The fewest tokens (on all prompts together) with power >= 0.95, over seed subsets."""
    seeds = min(len(p) for p in pools.values())
    total = sum(tokens_of(p) for p in pools.values())
    for k in (2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64):
        if k > seeds:
            break
        hits = sum(
            pooled_flagged(pools, rng.choice(seeds, size=k, replace=False).tolist())
            for _ in range(reps if k < seeds else 1)
        )
        if hits / (reps if k < seeds else 1) >= POWER:
            return str(round(total * k / seeds))
    return f"> {total}"


def pooled_false_positives(pools: dict[str, list[Sample]], group: int) -> str:
    seeds = min(len(p) for p in pools.values())
    groups = [list(range(i, i + group)) for i in range(0, seeds - group + 1, group)]
    hits = sum(pooled_flagged(pools, g) for g in groups)
    upper = float(sps.beta.ppf(0.95, hits + 1, len(groups) - hits)) if hits < len(groups) else 1.0
    return f"{hits}/{len(groups)} (95% upper bound {upper:.2f})"


def black_box(pool: Sequence[Sample]) -> list[Sample]:
    """The samples without the judgement evidence: what an engine that reports none allows."""
    out = []
    for sample in pool:
        spec = sample.speculative
        pits = {k: v for k, v in spec.pits.items() if k != STAGE_PIT}
        blind = dataclasses.replace(spec, pits=pits, acceptance=None)
        out.append(dataclasses.replace(sample, speculative=blind))
    return out


def flagging_tests(records: Sequence[Sample]) -> list[str]:
    """The tests behind a sampler-bug verdict on these samples (empty: not flagged)."""
    analysis = analyze(records, alpha=ALPHA)
    if classify_sampling(analysis).label is not Label.SAMPLER_BUG:
        return []
    rejected = [t.name for t in analysis.tests if t.p_adjusted < ALPHA]
    return rejected or ["drift"]


def flagged(records: Sequence[Sample]) -> bool:
    return bool(flagging_tests(records))


def tokens_of(records: Sequence[Sample]) -> int:
    return sum(len(r.speculative.tokens) for r in records)


def power_at(pool: Sequence[Sample], budget: int, rng: np.random.Generator, reps: int) -> float:
    k = max(2, round(budget * len(pool) / tokens_of(pool)))
    if k > len(pool):
        return float("nan")
    hits = 0
    for _ in range(reps):
        pick = rng.choice(len(pool), size=k, replace=False)
        hits += flagged([pool[i] for i in pick])
    return hits / reps


def needed(pool: Sequence[Sample], rng: np.random.Generator, reps: int) -> str:
    total = tokens_of(pool)
    for budget in BUDGETS:
        if budget > total:
            break
        if power_at(pool, budget, rng, reps) >= 0.95:
            return str(budget)
    return f"> {total}"


def false_positives(pool: Sequence[Sample]) -> str:
    k = max(2, round(GROUP_TOKENS * len(pool) / tokens_of(pool)))
    groups = [pool[i : i + k] for i in range(0, len(pool) - k + 1, k)]
    why = [flagging_tests(g) for g in groups]
    hits = sum(bool(w) for w in why)
    upper = float(sps.beta.ppf(0.95, hits + 1, len(groups) - hits)) if hits < len(groups) else 1.0
    names = sorted({name for w in why for name in w})
    by = f"; by {', '.join(names)}" if names else ""
    return f"{hits}/{len(groups)} (95% upper bound {upper:.2f}{by})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompt", default="chat/haiku_autumn")
    parser.add_argument("--seeds", type=int, default=48)
    parser.add_argument("--max-tokens", type=int, default=24)
    parser.add_argument("--reps", type=int, default=40)
    parser.add_argument("--engines", default=",".join(ENGINES))
    parser.add_argument("--pooled", help="prompt keys, comma-separated: judge the run pooled")
    parser.add_argument(
        "--unit",
        choices=("seed", "sample"),
        default="seed",
        help="--pooled: subsets of whole seeds (every prompt), or of single samples",
    )
    parser.add_argument(
        "--no-cut", action="store_true", help="no top-k, top-p or min-p (whole rows)"
    )
    args = parser.parse_args()
    rng = np.random.default_rng(2026)
    sampling = NO_CUT if args.no_cut else SAMPLING
    cut = ", no cut-offs" if args.no_cut else ""
    if args.pooled:
        pooled_main(args, rng, sampling, cut)
        return
    print(
        f"prompt {args.prompt}, temp 0.8{cut}, draft-max 4, {args.seeds} seeds x <= "
        f"{args.max_tokens}"
    )
    head = "engine | pool (tokens) | tokens for power >= 0.95 | same, emitted tokens only"
    limit = f"Neyman-Pearson limit at power {POWER}"
    print(f"| {head} | {limit} | ratio | flagged runs of ~{GROUP_TOKENS} tokens | time |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    with tempfile.TemporaryDirectory() as tmp:
        for engine in args.engines.split(","):
            t0 = time.perf_counter()
            moments = Moments()
            pool = sample_pool(
                engine, args.prompt, args.seeds, args.max_tokens, Path(tmp), moments, sampling
            )
            full = needed(pool, rng, args.reps)
            blind = needed(black_box(pool), rng, args.reps)
            fp = false_positives(pool)
            np_text, ratio = "-", "-"
            if moments.m0:
                n, how = moments.limit()
                np_text = f"{n:.0f} ({how})" if np.isfinite(n) else "none (no fault visible)"
                if np.isfinite(n) and full.isdigit():
                    ratio = f"{int(full) / max(n, 1.0):.1f}x"
            print(
                f"| {engine} | {tokens_of(pool)} | {full} | {blind} | {np_text} | {ratio} | {fp} | "
                f"{time.perf_counter() - t0:.0f} s |",
                flush=True,
            )


def pooled_main(
    args: argparse.Namespace, rng: np.random.Generator, sampling: SamplingConfig, cut: str
) -> None:
    keys = args.pooled.split(",")
    print(
        f"{len(keys)} prompts, temp 0.8{cut}, draft-max 4, {args.seeds} seeds x <= "
        f"{args.max_tokens}"
    )
    print(
        "| engine | pool (tokens) | tokens for power >= 0.95 (pooled, emitted tokens) | "
        f"Neyman-Pearson limit at power {POWER} | ratio | the first impossible token "
        "(`--unit sample`) | flagged disjoint 4-seed runs | time |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    with tempfile.TemporaryDirectory() as tmp:
        for engine in args.engines.split(","):
            t0 = time.perf_counter()
            moments = Moments()
            pools = sample_pools(
                engine, keys, args.seeds, args.max_tokens, Path(tmp), moments, sampling
            )
            oracle = "-"
            if args.unit == "seed":
                need = pooled_needed(pools, rng, args.reps)
            else:
                need, oracle = pooled_needed_by_sample(pools, rng, args.reps)
                oracle += f" ({_beyond_rounding(pools)})"
            fp = pooled_false_positives(pools, 4)
            np_text, ratio = "-", "-"
            if moments.m0:
                n, how = moments.limit()
                np_text = f"{n:.0f} ({how})" if np.isfinite(n) else "none (no fault visible)"
                if np.isfinite(n) and need.isdigit():
                    ratio = f"{int(need) / max(n, 1.0):.1f}x"
            total = sum(tokens_of(p) for p in pools.values())
            print(
                f"| {engine} | {total} | {need} | {np_text} | {ratio} | {oracle} | {fp} | "
                f"{time.perf_counter() - t0:.0f} s |",
                flush=True,
            )


if __name__ == "__main__":
    main()
