"""The plugin's settings: the names of its options and ini keys, and their values read from, in
order, the command line, the ini file, the TOML named by ``--equiv-config`` (else ``[tool.equiv]``
of the rootdir's pyproject.toml), the defaults. Imports pytest and the standard library only;
equiv's own modules when the values are read."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from equiv.options.table import Option, OptionValues
    from equiv.pytest.session import Policy

__all__ = [
    "MODE_BOTH",
    "Settings",
    "choices",
    "ini_name",
    "option_name",
    "options",
    "read_settings",
]

#: ``--equiv-mode both`` runs every prompt at temp 0 and in sampling mode, on the same models.
MODE_BOTH = "both"


def option_name(name: str) -> str:
    """``max-tokens`` -> ``--equiv-max-tokens``."""
    return f"--equiv-{name}"


def ini_name(name: str) -> str:
    """``max-tokens`` -> ``equiv_max_tokens`` (pytest ini key)."""
    return "equiv_" + name.replace("-", "_")


@dataclasses.dataclass(frozen=True)
class Settings:
    """The session's option values, modes, fail/warn policy and report directory."""

    values: OptionValues  # merged, as `equiv.options.build.build_config` takes them
    modes: tuple[str, ...]
    policy: Policy
    report: Path | None


def options() -> tuple[Option, ...]:
    """Every option of the plugin: ``equiv run``'s and its own, from the one option table."""
    from equiv.options.table import PLUGIN_OPTIONS, run_options

    return (*run_options(), *PLUGIN_OPTIONS)


def options_without_packages() -> tuple[Option, ...]:
    """`options` without any package's engine options (a broken declaration must not break
    every pytest run in an environment where the plugin is installed)."""
    from equiv.options.table import PLUGIN_OPTIONS, builtin_run_options

    return (*builtin_run_options(), *PLUGIN_OPTIONS)


def choices(opt: Option) -> tuple[str, ...] | None:
    """The values an option takes in the plugin (``--equiv-mode`` also takes ``both``)."""
    return (*opt.choices, MODE_BOTH) if opt.choices and opt.name == "mode" else opt.choices


def _value(config: pytest.Config, opt: Option) -> Any:
    # pytest edge: getoption/getini are untyped; the option's own parser checks the text
    value = config.getoption("equiv_" + opt.dest)
    if value is not None:
        return value
    raw = config.getini(ini_name(opt.name))
    if raw is None or opt.flag or opt.multiple:
        return raw or None  # an unset key, a bool, a list (the empty list: unset)
    try:
        value = opt.type(raw)
    except (ValueError, TypeError) as exc:
        raise pytest.UsageError(f"ini {ini_name(opt.name)} = {raw!r}: {exc}") from None
    if (allowed := choices(opt)) and value not in allowed:
        raise pytest.UsageError(f"ini {ini_name(opt.name)} = {raw!r}: choose from {allowed}")
    return value


def _tool_equiv(rootpath: Path) -> str | None:
    """The rootdir's pyproject.toml if it has a ``[tool.equiv]`` table (`load_toml` gives the
    whole file, with its ``tool`` or ``project`` table, when it has none)."""
    from equiv.config import load_toml

    path = rootpath / "pyproject.toml"
    if path.is_file() and not {"tool", "project", "build-system"} & load_toml(path).keys():
        return str(path)
    return None


def read_settings(config: pytest.Config) -> Settings:
    """The session's settings; a value no run could use is a `pytest.UsageError`."""
    from equiv.errors import EquivError
    from equiv.options.config_file import maybe_number, maybe_text, merge_toml
    from equiv.options.table import given
    from equiv.pytest.session import Policy
    from equiv.records.verdict import Label

    values = {opt.dest: _value(config, opt) for opt in options()}
    here = config.invocation_params.dir
    try:
        values["config"] = values["config"] or _tool_equiv(config.rootpath)
        merged = merge_toml(values, options())
    except EquivError as exc:
        raise pytest.UsageError(f"equiv: {exc}") from None
    modes = ("temp0", "sampling") if merged["mode"] == MODE_BOTH else (str(merged["mode"]),)
    if not set(modes) <= {"temp0", "sampling"}:
        raise pytest.UsageError(
            f"{option_name('mode')} {merged['mode']!r}: use temp0, sampling or both"
        )
    try:  # a label that is not one, a rate outside [0, 1]
        policy = Policy(
            fail_on=frozenset(Label(x) for x in given(merged["fail_on"])),
            warn_on=frozenset(Label(x) for x in given(merged["warn_on"])),
            max_drift_rate=maybe_number(merged, "max_drift_rate"),
            fail_on_quality_drop=bool(merged["fail_on_quality_drop"]),
        )
    except (ValueError, EquivError) as exc:
        labels = ", ".join(label.value for label in Label)
        raise pytest.UsageError(f"equiv: {exc} (labels: {labels})") from None
    report = here / directory if (directory := maybe_text(merged, "report")) else None
    return Settings(values=merged, modes=modes, policy=policy, report=report)
