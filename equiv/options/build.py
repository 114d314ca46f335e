"""A `RunConfig` from merged option values: the sampling values checked before any model file
is read, the model pair resolved, engine options and speculative-path overrides typed.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from equiv.config import (
    DraftConfig,
    Mode,
    RunConfig,
    SamplingConfig,
    Setting,
    validate_sampling,
)
from equiv.errors import ConfigError
from equiv.options.config_file import merge_toml
from equiv.options.table import RUN_OPTIONS, OptionValues, on_off, split_list

if TYPE_CHECKING:
    from equiv.models.pair import ModelPair

__all__ = ["build_config", "engine_options", "spec_overrides"]


def spec_overrides(entries: Any) -> tuple[tuple[str, Setting], ...]:
    """``["n_ctx=1024", "temp=0.7"]`` -> ``(("n_ctx", 1024), ("temp", 0.7))``, each value of the
    type its run option has (``RunConfig`` then refuses a key it cannot override)."""
    by_dest = {o.dest: o for o in RUN_OPTIONS}
    by_dest["n_threads"] = by_dest["threads"]
    out: list[tuple[str, Setting]] = []
    for entry in split_list(entries):
        key, sep, raw = entry.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or not key:
            raise ConfigError(f"--spec {entry!r}: give KEY=VALUE, e.g. --spec n_ctx=1024")
        opt = by_dest.get(key)
        try:
            if opt is not None and opt.flag:
                value: Setting = on_off(raw)
            elif opt is not None:
                value = opt.type(raw.strip())
            else:  # a sampling field without a run option of its own (typical_p, ...)
                value = float(raw)
        except (ValueError, TypeError, argparse.ArgumentTypeError) as exc:
            raise ConfigError(f"--spec {entry!r}: {exc}") from None
        out.append(("n_threads" if key == "threads" else key, value))
    return tuple(out)


def engine_options(
    values: OptionValues, engine: str, *, workdir: str | Path | None = None
) -> tuple[tuple[str, Setting], ...]:
    """The options of ``engine`` among merged option values, as `RunConfig.engine_options`;
    an option of another engine given a value is an error. ``workdir`` (where the run writes)
    lets an engine keep its logs beside the results."""
    name = engine.partition(":")[0]
    own: list[tuple[str, Setting]] = []
    for opt in RUN_OPTIONS:
        if opt.engine is None:
            continue
        value = values.get(opt.dest)
        if opt.engine == name:
            if isinstance(value, list):  # no engine option is repeatable
                raise TypeError(f"--{opt.name}: one value expected, found {value!r}")
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
    values: OptionValues, *, workdir: str | Path | None = None
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

    pair = resolve_pair(v["target"], v["draft"], draft_quant=v["draft_quant"], pair=v["pair"])
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
        looks=v["looks"],
        quality_margin=v["quality_margin"],
        engine_options=engine_options(v, v["engine"], workdir=workdir),
        spec_overrides=spec_overrides(v["spec"]),
        **extra,
    )
    return config, pair
