"""``pytest --help`` lists every equiv option and ini key, from the one shared definition."""

import pytest

from equiv.options.table import PLUGIN_OPTIONS, RUN_OPTIONS
from equiv.pytest import plugin

pytest_plugins = ["pytester"]


def test_help_lists_every_equiv_option_and_ini_key(pytester):
    result = pytester.runpytest("--help")
    assert result.ret == 0
    text = result.stdout.str()
    assert "equiv: speculative decoding must leave the output unchanged" in text
    for opt in (*RUN_OPTIONS, *PLUGIN_OPTIONS):
        assert plugin.option_name(opt.name) in text
        assert plugin.ini_name(opt.name) in text
    assert "{temp0,sampling,both}" in text


@pytest.mark.parametrize(
    "constant",
    [name for name in plugin.__all__ if name.endswith("_OPTION")],
)
def test_exported_option_names_are_registered(constant):
    names = {plugin.option_name(o.name) for o in (*RUN_OPTIONS, *PLUGIN_OPTIONS)}
    assert getattr(plugin, constant) in names
