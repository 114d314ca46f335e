"""The run options, defined once and shared by the command line and the pytest plugin.

Each `Option` becomes ``--name`` for ``equiv run`` and ``--equiv-name`` for pytest, and the same
key in a TOML config (``[tool.equiv]``, with dashes or underscores). Its converter checks a value
as the command line, the ini file and the TOML config all need it checked.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeAlias

from equiv.config import (
    BUILTIN_PAIRS,
    DEFAULT_DRAFT_QUANT,
    DEFAULT_PAIR,
    DRAFT_QUANTS,
    Mode,
    validate_quality_margin,
)
from equiv.errors import ConfigError

__all__ = [
    "PLUGIN_OPTIONS",
    "RUN_OPTIONS",
    "Option",
    "OptionValue",
    "OptionValues",
    "add_arguments",
    "given",
    "on_off",
    "split_list",
]


#: One option's value: what its converter made of the command line, the ini file or the TOML
#: config (a flag's bool, a number, a string), a list of strings for an option given several
#: times, None where it was not given.
OptionValue: TypeAlias = str | int | float | bool | list[str] | None
#: Option values by their ``dest`` (``vars(args)`` of ``equiv run``, the plugin's options);
#: `equiv.options.config_file.merge_toml` merges a TOML config and the defaults in.
OptionValues: TypeAlias = Mapping[str, OptionValue]


@dataclass(frozen=True)
class Option:
    name: str
    help: str
    type: Callable[[str], Any] = str
    default: Any = None
    metavar: str | None = None
    choices: tuple[str, ...] | None = None
    flag: bool = False  # a store_true switch
    multiple: bool = False  # may be given several times (and as a comma list)
    engine: str | None = None  # an option of this engine only: it goes to config.engine_options
    # llama.cpp's spellings of the same option, accepted by ``equiv run`` so a user pastes their
    # flags (``-c 4096 -t 8 -fa on``); the pytest plugin keeps to ``--equiv-<name>``.
    aliases: tuple[str, ...] = ()

    @property
    def dest(self) -> str:
        return self.name.replace("-", "_")

    @property
    def kind(self) -> str:
        """The TOML type this option's value must have: "integer", "number" or "string"."""
        return _KINDS.get(self.type, "string")


def _margin(text: str) -> float:
    try:
        value = float(text)
        validate_quality_margin(value)
    except (ValueError, ConfigError):
        raise argparse.ArgumentTypeError(
            f"--quality-margin {text}: give percentage points in (0, 100), e.g. 3"
        ) from None
    return value


def _seeds(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"--seeds {value}: give a count >= 1 (e.g. 64)")
    return value


def _looks(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(
            f"--looks {value}: give a count >= 1 (1: one test of every seed; 4: stop early)"
        )
    return value


def _concurrency(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"--server-concurrency {value}: give a count >= 1")
    return value


RUN_OPTIONS: tuple[Option, ...] = (
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
        "seeds", "number of seeds per prompt in sampling mode", type=_seeds, default=32, metavar="N"
    ),
    Option(
        "looks",
        "sampling mode: judge each prompt this many times as its seeds accumulate and stop it "
        "at the first conclusive look (--seeds is then a budget; alpha is spent over the "
        "looks); 1 judges every seed once",
        type=_looks,
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
    # -- the server engine (equiv.engines.server.engine) -------------------------------------------
    Option(
        "server-bin",
        "--engine server: start llama-server from this binary",
        metavar="PATH",
        engine="server",
    ),
    Option(
        "server-args",
        "--engine server with --server-bin: more llama-server flags for both paths, quoted "
        "(e.g. '-ngl 99 -ctk q8_0'; equiv sets model, context, slots, batch, threads, seed)",
        metavar="FLAGS",
        engine="server",
    ),
    Option(
        "server-draft-args",
        "--engine server with --server-bin: more flags for the speculative server only "
        "(e.g. '-ngld 99')",
        metavar="FLAGS",
        engine="server",
    ),
    Option(
        "baseline-url",
        "--engine server: a running server for the baseline",
        metavar="URL",
        engine="server",
    ),
    Option(
        "speculative-url",
        "--engine server: a running server with a draft model",
        metavar="URL",
        engine="server",
    ),
    Option(
        "server-api",
        "llama (llama-server /completion), openai (/v1/completions), auto: llama if /props answers",
        default="auto",
        choices=("auto", "llama", "openai"),
        engine="server",
    ),
    Option(
        "server-model",
        "model name of OpenAI requests (default: first served)",
        metavar="M",
        engine="server",
    ),
    Option(
        "server-concurrency",
        "requests in flight per server (and llama-server slots); default 1 at temp 0 (servers "
        "are not batch-invariant), 4 in sampling mode",
        type=_concurrency,
        metavar="N",
        engine="server",
    ),
    Option(
        "server-timeout",
        "seconds to wait for one answer",
        type=float,
        default=600.0,
        metavar="S",
        engine="server",
    ),
)


def _rate(text: str) -> float:
    value = float(text)
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"max drift rate {value}: give a fraction in [0, 1]")
    return value


#: Options of the pytest plugin only (``--equiv-<name>``, ini ``equiv_<dest>``); a TOML config may
#: hold them too (``equiv run`` ignores them). The plugin's ``--equiv-mode`` also takes ``both``.
PLUGIN_OPTIONS: tuple[Option, ...] = (
    Option("report", "write results.jsonl (and report.html) of the session to DIR", metavar="DIR"),
    Option(
        "fail-on",
        "labels that fail a test (comma list) [sampler-bug,misconfiguration]",
        default="sampler-bug,misconfiguration",
        metavar="LABELS",
        multiple=True,
    ),
    Option(
        "warn-on", "labels that pass with a warning (comma list)", metavar="LABELS", multiple=True
    ),
    Option(
        "max-drift-rate",
        "fail the session when more than this fraction of checks are numeric-drift",
        type=_rate,
        metavar="RATE",
    ),
    Option(
        "fail-on-quality-drop",
        "fail the session when graded prompts pass significantly less often on the speculative "
        "path (one-sided test at level 0.05)",
        flag=True,
    ),
)


def on_off(text: str) -> bool:
    """llama.cpp's ``on|off`` (and ``true|false``, ``1|0``) for a switch."""
    value = text.strip().lower()
    if value in ("on", "true", "1", "yes"):
        return True
    if value in ("off", "false", "0", "no"):
        return False
    raise argparse.ArgumentTypeError(f"{text!r}: give on or off")


#: The TOML type each option's argparse converter expects: "integer", "number" or "string".
_KINDS: dict[Callable[[str], Any], str] = {
    int: "integer",
    _seeds: "integer",
    _looks: "integer",
    _concurrency: "integer",
    float: "number",
    _rate: "number",
    _margin: "number",
    str: "string",
}


def split_list(value: Any) -> list[str]:
    """A repeatable option's value (a string, a list of them, or None) as its items: comma lists
    split, blanks dropped."""
    if value is None:
        return []
    items = [value] if isinstance(value, str) else list(value)
    return [part.strip() for item in items for part in str(item).split(",") if part.strip()]


def given(value: OptionValue) -> list[str]:
    """A repeatable option's value as given, unsplit (`split_list` splits comma lists)."""
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return value
    raise TypeError(f"expected a string or a list of strings, found {value!r}")


def add_arguments(
    parser: argparse.ArgumentParser, options: tuple[Option, ...] = RUN_OPTIONS
) -> None:
    for opt in options:
        names = (f"--{opt.name}", *opt.aliases)
        if opt.flag:
            parser.add_argument(
                *names,
                nargs="?",
                const=True,
                type=on_off,
                metavar="on|off",
                default=None,
                help=opt.help,
            )
        elif opt.multiple:
            parser.add_argument(*names, action="append", metavar=opt.metavar, help=opt.help)
        else:
            parser.add_argument(
                *names,
                type=opt.type,
                metavar=opt.metavar,
                choices=opt.choices,
                default=None,
                help=f"{opt.help}" + (f" [{opt.default}]" if opt.default else ""),
            )
