"""A `RunConfig` from merged option values: the sampling values checked before any model file
is read, the model pair resolved, engine options and speculative-path overrides typed.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import TYPE_CHECKING

from equiv.config import (
    DEFAULT_PAIR,
    DraftConfig,
    Mode,
    ModelSpec,
    RunConfig,
    SamplingConfig,
    Setting,
    validate_sampling,
)
from equiv.errors import ConfigError
from equiv.options.config_file import (
    integer,
    maybe_integer,
    maybe_text,
    merge_toml,
    number,
    text,
)
from equiv.options.table import OptionValue, OptionValues, given, on_off, run_options, split_list

if TYPE_CHECKING:
    from equiv.models.pair import ModelPair

__all__ = ["build_config", "engine_options", "spec_overrides"]


def spec_overrides(entries: OptionValue) -> tuple[tuple[str, Setting], ...]:
    """``["n_ctx=1024", "temp=0.7"]`` -> ``(("n_ctx", 1024), ("temp", 0.7))``, each value of the
    type its run option has (``RunConfig`` then refuses a key it cannot override)."""
    by_dest = {o.dest: o for o in run_options()}
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
    for opt in run_options():
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


def _mtp_spec_type(v: OptionValues) -> str:
    """The ``mtp`` pair drafts with the target's own head, which only llama-server runs."""
    if text(v, "engine").partition(":")[0] != "server":
        raise ConfigError(
            "pair 'mtp' drafts with the target's own MTP head, which llama-server runs and "
            "llama-cpp-python does not: add --engine server --server-bin PATH "
            "(scripts/build_llama_server.sh builds one)"
        )
    return maybe_text(v, "server_spec_type") or "draft-mtp"


def _checked_sampling(v: OptionValues) -> SamplingConfig:
    """The sampler chain of the values. Every sampling value is checked whatever the mode
    (temp 0 ignores them, but a value no run could use is a mistake to point out)."""
    temp, top_k, top_p = number(v, "temp"), integer(v, "top_k"), number(v, "top_p")
    min_p, repeat_penalty = number(v, "min_p"), number(v, "repeat_penalty")
    validate_sampling(
        temp=temp,
        top_k=top_k,
        top_p=top_p,
        min_p=min_p,
        typical_p=1.0,
        repeat_penalty=repeat_penalty,
    )
    return SamplingConfig(
        temp=temp, top_k=top_k, top_p=top_p, min_p=min_p, repeat_penalty=repeat_penalty
    )


def _mode(v: OptionValues) -> Mode:
    try:
        return Mode(v["mode"])
    except ValueError:
        raise ConfigError(
            f"mode {v['mode']!r} is not one of {', '.join(m.value for m in Mode)}; "
            "'both' is for the pytest plugin (--equiv-mode both)"
        ) from None


def _pair(v: OptionValues, options: tuple[tuple[str, Setting], ...]) -> ModelPair:
    """The models: the given or built-in pair; for servers whose models are their own (running
    ones, or vLLM's from a model directory), the servers' draft unless --draft names its file,
    and no model file at all unless --target names the target's."""
    from equiv.models.pair import ModelPair, resolve_pair  # reads GGUF files: only when run

    target, draft, name = maybe_text(v, "target"), maybe_text(v, "draft"), text(v, "pair")
    engine = text(v, "engine").partition(":")[0]
    served = name == DEFAULT_PAIR and _servers_bring_models(dict(options), engine)
    if served and target is None:
        if draft is not None:
            raise ConfigError(
                f"--draft {draft} names a draft for a target equiv has no file of: the servers' "
                "models are their own; drop --draft, or give --target with the served GGUF too"
            )
        return ModelPair(ModelSpec.of_server(), ModelSpec.of_server(), vocab=None)
    return resolve_pair(
        target, draft, draft_quant=text(v, "draft_quant"), pair=name, served_draft=served
    )


def _servers_bring_models(options: dict[str, Setting], engine: str) -> bool:
    """Whether the engine's options (else, where none names its servers, the environment they
    name) point at servers that bring their own models (`Option.serves_models`)."""
    naming = [o for o in run_options() if o.engine == engine and (o.env or o.serves_models)]
    named = [o for o in naming if options.get(o.dest)]
    if not named:
        named = [o for o in naming if o.env and os.environ.get(o.env)]
    return bool(named) and all(o.serves_models for o in named)


def build_config(
    values: OptionValues, *, workdir: str | Path | None = None
) -> tuple[RunConfig, ModelPair]:
    """A `RunConfig` from merged option values; resolves (and if needed derives) the models.
    ``workdir``: the run's results directory (an engine may keep its logs there)."""
    v = merge_toml(values)
    chain = _checked_sampling(v)  # before any model file is read
    if text(v, "pair") == "mtp":
        v = {**v, "server_spec_type": _mtp_spec_type(v)}
    options = engine_options(v, text(v, "engine"), workdir=workdir)
    pair = _pair(v, options)
    mode = _mode(v)
    sampling = SamplingConfig(temp=0.0) if mode is Mode.TEMP0 else chain
    seeds: tuple[int, ...] = ()
    if mode is Mode.SAMPLING:
        start = integer(v, "seed_start")
        seeds = tuple(range(start, start + integer(v, "seeds")))
    threads = maybe_integer(v, "threads")
    extra = {} if threads is None else {"n_threads": threads}
    config = RunConfig(
        target=pair.target,
        draft=pair.draft,
        suites=tuple(given(v["suite"])),
        mode=mode,
        sampling=sampling,
        draft_config=DraftConfig(
            draft_max=integer(v, "draft_max"),
            draft_min=integer(v, "draft_min"),
            p_min=number(v, "draft_p_min"),
        ),
        seeds=seeds,
        max_tokens=maybe_integer(v, "max_tokens"),
        n_ctx=integer(v, "n_ctx"),
        n_batch=integer(v, "n_batch"),
        n_ubatch=integer(v, "n_ubatch"),
        flash_attn=bool(v["flash_attn"]),
        engine=text(v, "engine"),
        alpha=number(v, "alpha"),
        looks=integer(v, "looks"),
        quality_margin=number(v, "quality_margin"),
        engine_options=options,
        spec_overrides=spec_overrides(v["spec"]),
        **extra,
    )
    return config, pair
