"""The cost of one more seed: 32 seeds on one prompt with and without prompt-state reuse.

With reuse (the default in sampling mode) the prompt minus its last token is evaluated once and
every seed decodes from there; without, every seed evaluates the whole prompt again. The goal:
the marginal wall time of a seed <= 1.2 x its pure decode time (the engine's own t_decode_s),
both paths together, as the runner does them (chain evidence included).

    python benchmarks/seed_cost.py [--prompt long/long_story] [--seeds 32] [--max-tokens 16]
"""

from __future__ import annotations

import argparse
import time

from equiv.config import Mode, RunConfig, SamplingConfig
from equiv.engines.llamacpp import LlamaCppEngine
from equiv.models.pair import resolve_pair
from equiv.prompts import load_suites
from equiv.verdicts.sampling.token_evidence import chain_pit


def run(
    engines: list[LlamaCppEngine], tokens: list[int], config: RunConfig, reuse: bool
) -> tuple[float, float]:
    wall = decode = 0.0
    for engine in engines:
        engine.reuse_prompt_state = reuse
        engine.llm.reset()
    for seed in config.seeds:
        t0 = time.perf_counter()
        for engine in engines:
            gen = engine.generate(
                tokens, sampling=config.sampling, seed=seed, max_tokens=config.max_tokens or 16
            )
            assert gen.logits is not None
            chain_pit(gen.logits, gen.tokens, config.sampling)
            decode += gen.t_decode_s
        wall += time.perf_counter() - t0
    return wall, decode


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompt", default="long/long_story")
    parser.add_argument("--seeds", type=int, default=32)
    parser.add_argument("--max-tokens", type=int, default=16)
    args = parser.parse_args()
    pair = resolve_pair()
    config = RunConfig(
        target=pair.target,
        draft=pair.draft,
        mode=Mode.SAMPLING,
        sampling=SamplingConfig(temp=0.8),
        seeds=tuple(range(1, args.seeds + 1)),
        max_tokens=args.max_tokens,
    )
    prompt = next(p for p in load_suites() if p.key == args.prompt)
    engines = [LlamaCppEngine(config, speculative=s) for s in (False, True)]
    tokens = engines[0].prompt_tokens(prompt)
    print(f"prompt {args.prompt}: {len(tokens)} tokens, {args.seeds} seeds x {args.max_tokens}")
    for reuse in (True, False):
        wall, decode = run(engines, tokens, config, reuse)
        n = len(config.seeds)
        print(
            f"reuse={reuse!s:5}  wall {wall:7.2f} s  per seed {wall / n:.3f} s  "
            f"pure decode per seed {decode / n:.3f} s  ratio {wall / decode:.2f}"
        )
    for engine in engines:
        engine.close()


if __name__ == "__main__":
    main()
