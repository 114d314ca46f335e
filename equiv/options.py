"""The run options, defined once and shared by the command line and the pytest plugin.

Each `Option` becomes ``--name`` for ``equiv run`` and ``--equiv-name`` for pytest, and the same
key in a TOML config (``[tool.equiv]``, with dashes or underscores). `build_config` turns the values
into a `RunConfig`, resolving the model pair.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from equiv.config import (
    DEFAULT_DRAFT_QUANT,
    DRAFT_QUANTS,
    DraftConfig,
    Mode,
    RunConfig,
    SamplingConfig,
    load_toml,
    validate_quality_margin,
    validate_sampling,
)
from equiv.errors import ConfigError, describe

if TYPE_CHECKING:
    from equiv.models.pair import ModelPair

__all__ = [
    "PLUGIN_OPTIONS",
    "RUN_OPTIONS",
    "Option",
    "add_arguments",
    "build_config",
    "engine_options",
    "merge_toml",
    "spec_overrides",
]


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


def _on_off(text: str) -> bool:
    """llama.cpp's ``on|off`` (and ``true|false``, ``1|0``) for a switch."""
    value = text.strip().lower()
    if value in ("on", "true", "1", "yes"):
        return True
    if value in ("off", "false", "0", "no"):
        return False
    raise argparse.ArgumentTypeError(f"{text!r}: give on or off")


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
                type=_on_off,
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


def merge_toml(
    values: Mapping[str, Any], options: tuple[Option, ...] = RUN_OPTIONS
) -> dict[str, Any]:
    """Explicit values win over the TOML file named by ``config``, which wins over defaults."""
    merged: dict[str, Any] = {}
    toml: dict[str, Any] = {}
    if values.get("config"):
        toml = {k.replace("-", "_"): v for k, v in load_toml(values["config"]).items()}
    toml = _spec_from_toml(toml, values.get("config"))
    known = {o.dest for o in options}
    unknown = sorted(set(toml) - known - {o.dest for o in PLUGIN_OPTIONS})
    if unknown:
        raise ConfigError(f"unknown option(s) in {values['config']!r}: {', '.join(unknown)}")
    by_dest = {o.dest: o for o in (*RUN_OPTIONS, *PLUGIN_OPTIONS)}
    for key, value in toml.items():
        toml[key] = _toml_value(by_dest[key], key, value, values["config"])
    for opt in options:
        value = values.get(opt.dest)
        if value is None:
            value = toml.get(opt.dest)
        if value is None:
            value = opt.default
        if opt.multiple:
            value = _split_list(value)
        if opt.dest == "spec" and values.get("spec"):  # per key: the command line adds to TOML
            value = [*_split_list(toml.get("spec")), *value]
        merged[opt.dest] = value
    return merged


#: The TOML type each option's argparse converter expects: "integer", "number" or "string".
_KINDS: dict[Callable[[str], Any], str] = {
    int: "integer",
    _seeds: "integer",
    _concurrency: "integer",
    float: "number",
    _rate: "number",
    _margin: "number",
    str: "string",
}


def _toml_value(opt: Option, key: str, value: Any, path: str) -> Any:
    """A TOML value checked against its option's type, as the command line would check it; a
    wrong one names the key, the type expected and the value found."""
    where = f"config file {path!r}: {key}"

    def wrong(expected: str) -> ConfigError:
        example = f" (e.g. {key} = {opt.default!r})" if opt.default is not None else ""
        example = example.replace("'", '"')
        return ConfigError(f"{where} must be {expected}{example}, found {describe(value)}")

    if opt.flag:
        if not isinstance(value, bool):
            raise wrong("true or false")
        return value
    if opt.multiple:
        items = value if isinstance(value, list) else [value]
        if not all(isinstance(item, str) for item in items):
            raise wrong("a string or a list of strings")
        return value
    kind = _KINDS.get(opt.type, "string")
    if kind == "integer":
        ok = isinstance(value, int) and not isinstance(value, bool)
        expected = "an integer"
    elif kind == "number":
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        ok = ok and math.isfinite(value)
        expected = "a finite number"
    else:
        ok = isinstance(value, str)
        expected = "a string"
    if not ok:
        raise wrong(expected)
    if opt.choices is not None and value not in opt.choices:
        raise ConfigError(
            f"{where} must be one of {', '.join(opt.choices)}, found {describe(value)}"
        )
    if opt.type not in (int, float, str):
        try:
            opt.type(str(value))  # the range checks of the command line
        except (argparse.ArgumentTypeError, ValueError) as exc:
            raise ConfigError(f"{where}: {exc}") from None
    return value


#: TOML spellings of the speculative path's own settings, beside ``spec = ["n_ctx=1024"]``.
_SPEC_TABLE, _SPEC_PAIRS = "speculative", "spec_overrides"


def _spec_from_toml(toml: dict[str, Any], where: Any) -> dict[str, Any]:
    """``[tool.equiv.speculative]`` (a table) and ``spec_overrides = [["n_ctx", 1024]]`` (pairs)
    as ``spec`` entries ``KEY=VALUE``."""
    entries = _split_list(toml.get("spec"))
    table = toml.get(_SPEC_TABLE, {})
    if not isinstance(table, Mapping):
        raise ConfigError(
            f"speculative = {table!r} in {where!r}: make it a table, [tool.equiv.speculative]"
        )
    pairs = toml.get(_SPEC_PAIRS, [])
    bad = [p for p in pairs if not (isinstance(p, list | tuple) and len(p) == 2)]
    if not isinstance(pairs, list | tuple) or bad:
        raise ConfigError(
            f"spec_overrides = {pairs!r} in {where!r}: give [KEY, VALUE] pairs, e.g. "
            '[["n_ctx", 1024]]'
        )
    entries += [f"{k}={_toml_text(v)}" for k, v in [*table.items(), *pairs]]
    rest = {k: v for k, v in toml.items() if k not in (_SPEC_TABLE, _SPEC_PAIRS)}
    return {**rest, "spec": entries} if entries else rest


def _toml_text(value: Any) -> str:
    return ("on" if value else "off") if isinstance(value, bool) else str(value)


def spec_overrides(entries: Any) -> tuple[tuple[str, Any], ...]:
    """``["n_ctx=1024", "temp=0.7"]`` -> ``(("n_ctx", 1024), ("temp", 0.7))``, each value of the
    type its run option has (``RunConfig`` then refuses a key it cannot override)."""
    by_dest = {o.dest: o for o in RUN_OPTIONS}
    by_dest["n_threads"] = by_dest["threads"]
    out: list[tuple[str, Any]] = []
    for entry in _split_list(entries):
        key, sep, raw = entry.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or not key:
            raise ConfigError(f"--spec {entry!r}: give KEY=VALUE, e.g. --spec n_ctx=1024")
        opt = by_dest.get(key)
        try:
            if opt is not None and opt.flag:
                value: Any = _on_off(raw)
            elif opt is not None:
                value = opt.type(raw.strip())
            else:  # a sampling field without a run option of its own (typical_p, ...)
                value = float(raw)
        except (ValueError, TypeError, argparse.ArgumentTypeError) as exc:
            raise ConfigError(f"--spec {entry!r}: {exc}") from None
        out.append(("n_threads" if key == "threads" else key, value))
    return tuple(out)


def _split_list(value: Any) -> list[str]:
    if value is None:
        return []
    items = [value] if isinstance(value, str) else list(value)
    return [part.strip() for item in items for part in str(item).split(",") if part.strip()]


def engine_options(
    values: Mapping[str, Any], engine: str, *, workdir: str | Path | None = None
) -> tuple[tuple[str, Any], ...]:
    """The options of ``engine`` among merged option values, as `RunConfig.engine_options`;
    an option of another engine given a value is an error. ``workdir`` (where the run writes)
    lets an engine keep its logs beside the results."""
    name = engine.partition(":")[0]
    own: list[tuple[str, Any]] = []
    for opt in RUN_OPTIONS:
        if opt.engine is None:
            continue
        value = values.get(opt.dest)
        if opt.engine == name:
            if value is not None:
                own.append((opt.dest, value))
        elif value is not None and value != opt.default:
            raise ConfigError(
                f"--{opt.name} only applies to the {opt.engine} engine (the engine is "
                f"{engine!r}); add --engine {opt.engine} or drop --{opt.name}"
            )
    if own and workdir is not None:
        own.append(("log_dir", str(workdir)))
    return tuple(own)


def build_config(
    values: Mapping[str, Any], *, workdir: str | Path | None = None
) -> tuple[RunConfig, ModelPair]:
    """A `RunConfig` from merged option values; resolves (and if needed derives) the models.
    ``workdir``: the run's results directory (an engine may keep its logs there)."""
    v = merge_toml(values)
    # Every sampling value is checked whatever the mode (temp 0 ignores them, but a value no
    # run could use is a mistake to point out), before any model file is read.
    validate_sampling(
        temp=v["temp"],
        top_k=v["top_k"],
        top_p=v["top_p"],
        min_p=v["min_p"],
        typical_p=1.0,
        repeat_penalty=v["repeat_penalty"],
    )
    from equiv.models.pair import resolve_pair  # reads GGUF files: only when a run is configured

    pair = resolve_pair(v["target"], v["draft"], draft_quant=v["draft_quant"])
    try:
        mode = Mode(v["mode"])
    except ValueError:
        raise ConfigError(
            f"mode {v['mode']!r} is not one of {', '.join(m.value for m in Mode)}; "
            "'both' is for the pytest plugin (--equiv-mode both)"
        ) from None
    sampling = (
        SamplingConfig(temp=0.0)
        if mode is Mode.TEMP0
        else SamplingConfig(
            temp=v["temp"],
            top_k=v["top_k"],
            top_p=v["top_p"],
            min_p=v["min_p"],
            repeat_penalty=v["repeat_penalty"],
        )
    )
    seeds: tuple[int, ...] = ()
    if mode is Mode.SAMPLING:
        seeds = tuple(range(v["seed_start"], v["seed_start"] + v["seeds"]))
    extra = {} if v["threads"] is None else {"n_threads": v["threads"]}
    config = RunConfig(
        target=pair.target,
        draft=pair.draft,
        suites=tuple(v["suite"]),
        mode=mode,
        sampling=sampling,
        draft_config=DraftConfig(
            draft_max=v["draft_max"], draft_min=v["draft_min"], p_min=v["draft_p_min"]
        ),
        seeds=seeds,
        max_tokens=v["max_tokens"],
        n_ctx=v["n_ctx"],
        n_batch=v["n_batch"],
        n_ubatch=v["n_ubatch"],
        flash_attn=bool(v["flash_attn"]),
        engine=v["engine"],
        alpha=v["alpha"],
        quality_margin=v["quality_margin"],
        engine_options=engine_options(v, v["engine"], workdir=workdir),
        spec_overrides=spec_overrides(v["spec"]),
        **extra,
    )
    return config, pair
