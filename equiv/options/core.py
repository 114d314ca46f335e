"""The core options: those of every run, whatever its engine, and the converters that check
their values (`seed_count`, `look_count`, the quality margin), shared by every command that
takes them. `equiv.options.table` adds the plugin's options and those the engines declare.
"""

from __future__ import annotations

import argparse

from equiv.config import (
    BUILTIN_PAIRS,
    DEFAULT_DRAFT_QUANT,
    DEFAULT_PAIR,
    DRAFT_QUANTS,
    Mode,
    validate_quality_margin,
)
from equiv.errors import ConfigError
from equiv.options.option import Option

__all__ = ["CORE_OPTIONS", "look_count", "seed_count"]


def _margin(text: str) -> float:
    try:
        value = float(text)
        validate_quality_margin(value)
    except (ValueError, ConfigError):
        raise argparse.ArgumentTypeError(
            f"--quality-margin {text}: give percentage points in (0, 100), e.g. 3"
        ) from None
    return value


def seed_count(text: str) -> int:
    """``--seeds``: a count >= 1 (argparse's type, shared by every command that takes it)."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"--seeds {value}: give a count >= 1 (e.g. 64)")
    return value


def look_count(text: str) -> int:
    """``--looks``: a count >= 1 (argparse's type, shared by every command that takes it)."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(
            f"--looks {value}: give a count >= 1 (1: one test of every seed; 4: stop early)"
        )
    return value


#: The options of every run, whatever its engine; `run_options` adds the engines' own.
CORE_OPTIONS: tuple[Option, ...] = (
    Option(
        "config", "TOML file with these options ([tool.equiv] table or top level)", metavar="TOML"
    ),
    Option(
        "pair",
        "a built-in pair instead of --target/--draft: "
        + "; ".join(f"{name}: {what}" for name, what in BUILTIN_PAIRS.items()),
        default=DEFAULT_PAIR,
        choices=tuple(BUILTIN_PAIRS),
    ),
    Option(
        "target",
        "target GGUF (default: the bundled Gemma 3 270M Q4_K_M)",
        metavar="GGUF",
        aliases=("-m", "--model"),
    ),
    Option(
        "draft",
        "draft GGUF (default: the target requantized to --draft-quant)",
        metavar="GGUF",
        aliases=("-md", "--model-draft"),
    ),
    Option(
        "draft-quant",
        "quant type of the derived default draft",
        default=DEFAULT_DRAFT_QUANT,
        choices=tuple(DRAFT_QUANTS),
    ),
    Option(
        "suite",
        "suite name or .jsonl path; repeatable (default: all built-in suites)",
        metavar="SUITE",
        multiple=True,
    ),
    Option(
        "prompt",
        "only prompts whose suite/id matches this glob; repeatable",
        metavar="GLOB",
        multiple=True,
    ),
    Option(
        "mode",
        "temp0: bit-for-bit at temperature 0; sampling: distributions over seeds",
        default="temp0",
        choices=tuple(m.value for m in Mode),
    ),
    Option(
        "max-tokens",
        "override every prompt's max_tokens",
        type=int,
        metavar="N",
        aliases=("-n", "--n-predict"),
    ),
    Option(
        "draft-max",
        "most tokens drafted per step (llama.cpp --draft-max)",
        type=int,
        default=16,
        metavar="N",
    ),
    Option(
        "draft-min",
        "fewest tokens worth drafting (llama.cpp --draft-min)",
        type=int,
        default=0,
        metavar="N",
    ),
    Option(
        "draft-p-min",
        "stop drafting below this draft probability (llama.cpp --draft-p-min)",
        type=float,
        default=0.75,
        metavar="P",
    ),
    Option(
        "n-ctx",
        "context size of both paths",
        type=int,
        default=2048,
        metavar="N",
        aliases=("-c", "--ctx-size"),
    ),
    Option(
        "n-batch",
        "logical batch size",
        type=int,
        default=512,
        metavar="N",
        aliases=("-b", "--batch-size"),
    ),
    Option(
        "n-ubatch",
        "physical batch size",
        type=int,
        default=512,
        metavar="N",
        aliases=("-ub", "--ubatch-size"),
    ),
    Option("threads", "CPU threads (default: all cores)", type=int, metavar="N", aliases=("-t",)),
    Option(
        "flash-attn",
        "flash attention on both paths (llama.cpp's -fa on|off also works)",
        flag=True,
        aliases=("-fa",),
    ),
    Option(
        "temp",
        "sampling temperature (sampling mode)",
        type=float,
        default=0.8,
        metavar="T",
        aliases=("--temperature",),
    ),
    Option("top-k", "top-k (0 disables)", type=int, default=40, metavar="K"),
    Option("top-p", "top-p in (0, 1]", type=float, default=0.95, metavar="P"),
    Option("min-p", "min-p in [0, 1]", type=float, default=0.05, metavar="P"),
    Option("repeat-penalty", "repeat penalty (1 = none)", type=float, default=1.0, metavar="R"),
    Option(
        "seeds",
        "number of seeds per prompt in sampling mode",
        type=seed_count,
        default=32,
        metavar="N",
    ),
    Option(
        "looks",
        "sampling mode: judge each prompt this many times as its seeds accumulate and stop it "
        "at the first conclusive look (--seeds is then a budget; alpha is spent over the "
        "looks); 1 judges every seed once",
        type=look_count,
        default=1,
        metavar="K",
    ),
    Option(
        "seed-start",
        "first seed (seeds are consecutive; 0 is refused: it means random)",
        type=int,
        default=1,
        metavar="S",
        aliases=("-s", "--seed"),
    ),
    Option(
        "alpha",
        "family-wise significance level of the sampling tests over the whole run",
        type=float,
        default=0.01,
        metavar="A",
    ),
    Option(
        "quality-margin",
        "graded prompts: the largest pass-rate change, in percentage points, that still counts "
        "as no quality change (equivalence test)",
        type=_margin,
        default=3.0,
        metavar="POINTS",
    ),
    Option(
        "spec",
        "a setting of the speculative path only, KEY=VALUE (n_ctx=1024, temp=0.7, "
        "target=other.gguf, ...): reproduce two deployments that differ; repeatable. TOML: a "
        "[tool.equiv.speculative] table",
        metavar="KEY=VALUE",
        multiple=True,
    ),
    Option(
        "engine",
        "'llamacpp', 'server' (HTTP), 'reference[:fault]' or a user factory 'module:attr'",
        default="llamacpp",
        metavar="ENGINE",
    ),
)
