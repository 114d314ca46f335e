"""The run options, defined once and shared by the command line and the pytest plugin.

Each `Option` becomes ``--name`` for ``equiv run`` and ``--equiv-name`` for pytest, and the same
key in a TOML config (``[tool.equiv]``, with dashes or underscores). Its converter checks a value
as the command line, the ini file and the TOML config all need it checked.

``RUN_OPTIONS`` (`run_options`) are the core options (`CORE_OPTIONS`, from `equiv.options.core`)
and then the options each engine declares: the built-in engines' (the server's in
`equiv.engines.server.options`), then those a package declares in the ``equiv.engine_options``
entry-point group.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import importlib
import importlib.metadata
from collections.abc import Iterable

from equiv.errors import ConfigError
from equiv.options.core import CORE_OPTIONS, look_count, seed_count
from equiv.options.option import Option, OptionValue, OptionValues

__all__ = [
    "CORE_OPTIONS",
    "ENGINE_OPTIONS_GROUP",
    "PLUGIN_OPTIONS",
    "RUN_OPTIONS",
    "Option",
    "OptionValue",
    "OptionValues",
    "add_arguments",
    "given",
    "look_count",
    "on_off",
    "run_options",
    "seed_count",
    "shared",
    "split_list",
]


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


#: The entry-point group where a package declares its engine's options: each entry point names a
#: tuple of `Option`, each with ``engine="<the engine's name>"``.
ENGINE_OPTIONS_GROUP = "equiv.engine_options"
# The built-in engines' options, named by strings (as `equiv.engines.registry` names the engines)
# and imported only when asked for: the option table imports no engine.
_BUILTIN_ENGINE_OPTIONS = {"server": "equiv.engines.server.options:OPTIONS"}
_FIX = (
    "the entry point must name a tuple of equiv.options.table.Option, each with "
    "engine='<its engine>' and a name no other option has"
)


def builtin_run_options() -> tuple[Option, ...]:
    """`CORE_OPTIONS` and the built-in engines' options: `run_options` without any package's
    (what the pytest plugin falls back to when a package's declaration is broken)."""
    return tuple(_builtin({}))


def _builtin(taken: dict[str, str]) -> list[Option]:
    options = list(CORE_OPTIONS)
    ours = (*CORE_OPTIONS, *PLUGIN_OPTIONS)
    taken.update({name: "an option of equiv" for o in ours for name in _names(o)})
    for target in _BUILTIN_ENGINE_OPTIONS.values():
        module, _, attr = target.partition(":")
        options += _checked(getattr(importlib.import_module(module), attr), target, taken)
    return options


@functools.cache
def run_options() -> tuple[Option, ...]:
    """The options of ``equiv run`` (and ``--equiv-*`` in pytest): `CORE_OPTIONS`, then each
    engine's own, the built-in engines' first, then those of the `ENGINE_OPTIONS_GROUP` entry
    points. A declaration that cannot be loaded, or that clashes, is a `ConfigError`."""
    taken: dict[str, str] = {}
    options = _builtin(taken)
    for ep in importlib.metadata.entry_points(group=ENGINE_OPTIONS_GROUP):
        where = f"entry point {ep.name!r} = {ep.value!r} of group {ENGINE_OPTIONS_GROUP!r}"
        dist = getattr(ep, "dist", None)
        package = f"the package {dist.name!r}" if dist is not None else "the package declaring it"
        try:
            declared = ep.load()
        except Exception as exc:  # a third-party import may fail in any way: named, no traceback
            raise ConfigError(
                f"{where} cannot be loaded ({type(exc).__name__}: {exc}); fix or uninstall "
                f"{package}"
            ) from None
        options += _checked(declared, where, taken)
    return tuple(options)


def _names(opt: Option) -> tuple[str, ...]:
    """The spellings of ``opt`` on the command line, and its ``dest`` (its TOML and ini key)."""
    return (opt.dest, f"--{opt.name}", *opt.aliases)


def _checked(declared: object, where: str, taken: dict[str, str]) -> tuple[Option, ...]:
    """``declared``, the engine options named by ``where``, once known to be a tuple of `Option`
    of an engine whose names are free; ``taken`` then holds their names too."""
    if not isinstance(declared, tuple) or not all(isinstance(o, Option) for o in declared):
        raise ConfigError(f"{where} names {declared!r:.80}, not a tuple of Option; {_FIX}")
    for opt in declared:
        if opt.engine is None:
            raise ConfigError(f"{where}: option {opt.name!r} has no engine=...; {_FIX}")
        for name in _names(opt):
            if name in taken:
                raise ConfigError(
                    f"{where}: option {opt.name!r} clashes with {taken[name]} ({name!r}); "
                    "rename it, e.g. with the engine's name in front"
                )
            taken[name] = f"an option of {where}"
    return declared


#: `run_options`, as a name to import; declared here, gathered by `__getattr__` when first read.
RUN_OPTIONS: tuple[Option, ...]


def __getattr__(name: str) -> tuple[Option, ...]:
    """``RUN_OPTIONS``: `run_options`, gathered when first asked for (an engine's declaration
    that fails is then an error of the command, not of an import)."""
    if name == "RUN_OPTIONS":
        return run_options()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def on_off(text: str) -> bool:
    """llama.cpp's ``on|off`` (and ``true|false``, ``1|0``) for a switch."""
    value = text.strip().lower()
    if value in ("on", "true", "1", "yes"):
        return True
    if value in ("off", "false", "0", "no"):
        return False
    raise argparse.ArgumentTypeError(f"{text!r}: give on or off")


def split_list(value: OptionValue | Iterable[object]) -> list[str]:
    """A repeatable option's value (a string, a list of them, or None) as its items: comma lists
    split, blanks dropped."""
    if value is None:
        return []
    if isinstance(value, str):
        items: list[object] = [value]
    elif isinstance(value, Iterable):
        items = list(value)
    else:
        raise TypeError(f"expected a string or a list of strings, found {value!r}")
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


def shared(*names: str, **defaults: OptionValue) -> tuple[Option, ...]:
    """The table's options ``names`` (by ``--name``) for another command than ``equiv run``:
    the same help and converter (so ``diagnose --seeds 0`` is refused as ``run --seeds 0`` is),
    that command's ``defaults`` by ``dest``, and none of llama.cpp's aliases (the command's own
    llama.cpp flags follow its ``--``)."""
    table = {opt.name: opt for opt in CORE_OPTIONS}
    unknown = [n for n in names if n not in table]
    if unknown:
        raise ValueError(f"no such options in the table: {unknown}")
    out = []
    for name in names:
        opt = dataclasses.replace(table[name], aliases=())
        if opt.dest in defaults:
            opt = dataclasses.replace(opt, default=defaults[opt.dest])
        out.append(opt)
    return tuple(out)


def add_arguments(
    parser: argparse.ArgumentParser,
    options: tuple[Option, ...] | None = None,
    *,
    with_defaults: bool = False,
) -> None:
    """``options`` (default: `run_options`) as arguments of ``parser``. Their defaults stay
    None (``equiv run`` merges the TOML config and the defaults in later) unless
    ``with_defaults``."""
    for opt in run_options() if options is None else options:
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
                default=opt.default if with_defaults else None,
                help=f"{opt.help}" + (f" [{opt.default}]" if opt.default else ""),
            )
