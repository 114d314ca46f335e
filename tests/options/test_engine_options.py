"""Engine options declared by the engine: the server's in `equiv.engines.server.options`, a
package's through the ``equiv.engine_options`` entry-point group, gathered by `run_options`."""

from __future__ import annotations

import argparse
import importlib.metadata
from collections.abc import Iterator

import pytest

from equiv.cli.main import build_parser, main
from equiv.engines.server.options import OPTIONS as SERVER_OPTIONS
from equiv.errors import ConfigError
from equiv.options.build import engine_options
from equiv.options.config_file import merge_toml
from equiv.options.table import (
    CORE_OPTIONS,
    ENGINE_OPTIONS_GROUP,
    Option,
    add_arguments,
    run_options,
)

#: The server's options, in the order of ``equiv run --help`` before engines declared them.
SERVER_NAMES = [
    "server-bin",
    "vllm-model",
    "vllm-python",
    "vllm-spec-config",
    "server-args",
    "server-draft-args",
    "server-spec-type",
    "baseline-url",
    "speculative-url",
    "server-api",
    "server-model",
    "server-concurrency",
    "server-timeout",
]

WIDGET_OPTIONS = (
    Option("widget-host", "--engine widget: the widget's address", metavar="HOST", engine="widget"),
    Option("widget-depth", "--engine widget: lookahead", type=int, default=2, engine="widget"),
)


class _EntryPoint:
    """What `importlib.metadata.entry_points` yields: a name, a value, and `load`."""

    def __init__(self, name: str, loaded: object) -> None:
        self.name, self.value, self.dist = name, f"{name}_pkg:OPTIONS", None
        self._loaded = loaded

    def load(self) -> object:
        if isinstance(self._loaded, Exception):
            raise self._loaded
        return self._loaded


@pytest.fixture
def declare(monkeypatch: pytest.MonkeyPatch) -> Iterator[object]:
    """``declare(name, loaded)``: the entry point ``name`` of the engine-options group loads
    ``loaded`` (raised, if an exception); the gathered options are forgotten before and after."""

    def _declare(name: str, loaded: object) -> None:
        def entry_points(*, group: str) -> list[_EntryPoint]:
            return [_EntryPoint(name, loaded)] if group == ENGINE_OPTIONS_GROUP else []

        monkeypatch.setattr(importlib.metadata, "entry_points", entry_points)
        run_options.cache_clear()

    run_options.cache_clear()
    yield _declare
    run_options.cache_clear()


def test_the_server_declares_its_options_which_follow_the_core_ones():
    assert [o.name for o in SERVER_OPTIONS] == SERVER_NAMES
    assert all(o.engine == "server" for o in SERVER_OPTIONS)
    assert not any(o.engine for o in CORE_OPTIONS)
    assert run_options()[: len(CORE_OPTIONS)] == CORE_OPTIONS
    assert run_options()[len(CORE_OPTIONS) : len(CORE_OPTIONS) + len(SERVER_OPTIONS)] == (
        SERVER_OPTIONS
    )
    kinds = {o.name: o.kind for o in SERVER_OPTIONS if o.type is not str}
    assert kinds == {"server-concurrency": "integer", "server-timeout": "number"}


def test_the_old_name_run_options_still_imports():
    from equiv.options.table import RUN_OPTIONS

    assert run_options() == RUN_OPTIONS


def test_an_entry_point_engine_brings_its_options_to_equiv_run(declare):
    declare("widget", WIDGET_OPTIONS)
    assert run_options()[-2:] == WIDGET_OPTIONS
    values = vars(build_parser().parse_args(["run", "--engine", "widget", "--widget-host", "h:1"]))
    assert values["widget_host"] == "h:1"
    merged = merge_toml(values)
    assert merged["widget_depth"] == 2
    assert engine_options(merged, "widget") == (("widget_host", "h:1"), ("widget_depth", 2))
    # the server's options stay the server's
    assert engine_options(merge_toml({"server_bin": "/x"}), "server") == (
        ("server_bin", "/x"),
        ("server_api", "auto"),
        ("server_timeout", 600.0),
    )


def test_an_engine_option_given_to_another_engine_is_refused(declare):
    declare("widget", WIDGET_OPTIONS)
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    values = merge_toml(vars(parser.parse_args(["--widget-host", "h:1"])))
    with pytest.raises(ConfigError, match="--widget-host only applies to the widget engine"):
        engine_options(values, "llamacpp")


@pytest.mark.parametrize(
    ("loaded", "why"),
    [
        (ImportError("No module named 'widget_pkg'"), "cannot be loaded .*No module named"),
        ([WIDGET_OPTIONS[0]], "not a tuple of Option"),
        (("widget-host",), "not a tuple of Option"),
        ((Option("widget-host", "h"),), "option 'widget-host' has no engine="),
        ((Option("n-ctx", "mine", engine="widget"),), "'n-ctx' clashes with an option of equiv"),
        ((Option("model", "mine", engine="widget"),), "'model' clashes with an option of equiv"),
        ((Option("server-bin", "mine", engine="widget"),), "clashes with an option of"),
    ],
)
def test_a_bad_declaration_is_a_config_error_naming_the_entry_point(declare, loaded, why):
    declare("widget", loaded)
    with pytest.raises(ConfigError, match=why) as caught:
        run_options()
    assert "entry point 'widget' = 'widget_pkg:OPTIONS' of group 'equiv.engine_options'" in str(
        caught.value
    )


def test_equiv_run_reports_a_bad_declaration_without_a_traceback(declare, capsys):
    declare("widget", RuntimeError("boom"))
    assert main(["run", "--engine", "widget"]) == ConfigError.exit_code
    err = capsys.readouterr().err
    assert "equiv: error: entry point 'widget'" in err
    assert "RuntimeError: boom" in err
    assert "Traceback" not in err


class _Recorder:
    """Enough of pytest's `Parser` for `pytest_addoption`: the option names it adds."""

    def __init__(self) -> None:
        self.names: list[str] = []

    def getgroup(self, *_: object) -> _Recorder:
        return self

    def addoption(self, name: str, **_: object) -> None:
        self.names.append(name)

    def addini(self, *_: object, **__: object) -> None:
        pass


def test_the_pytest_plugin_outlives_a_broken_declaration_and_names_it(declare):
    from equiv.pytest import plugin

    declare("widget", RuntimeError("boom"))
    recorder = _Recorder()
    with pytest.warns(UserWarning, match="entry point 'widget'.*RuntimeError: boom.*left out"):
        plugin.pytest_addoption(recorder)  # type: ignore[arg-type]
    assert "--equiv-server-bin" in recorder.names  # the built-in engine's options stay
    assert "--equiv-n-ctx" in recorder.names
    assert not any("widget" in name for name in recorder.names)
