"""Option values from their three sources: the command line's (or the plugin's) win over a
TOML config file's (``config``), which win over the defaults. A TOML value is checked against its
option as the command line would check it; `number`, `integer`, `text` (and their ``maybe_``
forms, None where not given) read a merged value as its option's type.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Mapping
from typing import Any

from equiv.config import load_toml
from equiv.errors import ConfigError, describe
from equiv.options.table import (
    PLUGIN_OPTIONS,
    Option,
    OptionValue,
    OptionValues,
    run_options,
    split_list,
)

__all__ = ["integer", "maybe_integer", "maybe_number", "maybe_text", "merge_toml", "number", "text"]


def merge_toml(
    values: OptionValues, options: tuple[Option, ...] | None = None
) -> dict[str, OptionValue]:
    """Explicit values win over the TOML file named by ``config``, which wins over defaults;
    read them typed with `number`, `integer`, `text` (or `equiv.options.table.given`).
    ``options``: those to merge (default: `equiv.options.table.run_options`)."""
    if options is None:
        options = run_options()
    merged: dict[str, OptionValue] = {}
    toml: dict[str, Any] = {}
    if values.get("config"):
        toml = {k.replace("-", "_"): v for k, v in load_toml(str(values["config"])).items()}
    toml = _spec_from_toml(toml, values.get("config"))
    known = {o.dest for o in options}
    unknown = sorted(set(toml) - known - {o.dest for o in PLUGIN_OPTIONS})
    if unknown:
        raise ConfigError(f"unknown option(s) in {values['config']!r}: {', '.join(unknown)}")
    by_dest = {o.dest: o for o in (*run_options(), *PLUGIN_OPTIONS)}
    for key, value in toml.items():
        toml[key] = _toml_value(by_dest[key], key, value, str(values["config"]))
    for opt in options:
        value = values.get(opt.dest)
        if value is None:
            value = toml.get(opt.dest)
        if value is None:
            value = opt.default
        if opt.multiple:
            value = split_list(value)
        if opt.dest == "spec" and values.get("spec"):  # per key: the command line adds to TOML
            value = [*split_list(toml.get("spec")), *value]
        merged[opt.dest] = value
    return merged


# -- merged values, typed: each option's converter (or the TOML check) made it of its type -----
def _wrong(dest: str, expected: str, value: OptionValue) -> ConfigError:
    return ConfigError(f"option {dest} must be {expected}, found {describe(value)}")


def maybe_number(values: OptionValues, dest: str) -> float | None:
    """A numeric option's value as given (an integer stays an integer), or None."""
    value = values.get(dest)
    if value is None or (isinstance(value, int | float) and not isinstance(value, bool)):
        return value
    raise _wrong(dest, "a number", value)


def number(values: OptionValues, dest: str) -> float:
    value = maybe_number(values, dest)
    if value is None:
        raise _wrong(dest, "a number", value)
    return value


def maybe_integer(values: OptionValues, dest: str) -> int | None:
    value = values.get(dest)
    if value is None or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    raise _wrong(dest, "an integer", value)


def integer(values: OptionValues, dest: str) -> int:
    value = maybe_integer(values, dest)
    if value is None:
        raise _wrong(dest, "an integer", value)
    return value


def maybe_text(values: OptionValues, dest: str) -> str | None:
    value = values.get(dest)
    if value is None or isinstance(value, str):
        return value
    raise _wrong(dest, "a string", value)


def text(values: OptionValues, dest: str) -> str:
    value = maybe_text(values, dest)
    if value is None:
        raise _wrong(dest, "a string", value)
    return value


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
    kind = opt.kind
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


def _spec_from_toml(toml: dict[str, Any], where: OptionValue) -> dict[str, Any]:
    """``[tool.equiv.speculative]`` (a table) and ``spec_overrides = [["n_ctx", 1024]]`` (pairs)
    as ``spec`` entries ``KEY=VALUE``."""
    entries = split_list(toml.get("spec"))
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


def _toml_text(value: object) -> str:
    return ("on" if value else "off") if isinstance(value, bool) else str(value)
