"""One option of the option table: its name, help, converter and default, and the TOML type its
converter expects. Engines declare their own options with it (`equiv.options.table` gathers
them), so it imports nothing of the package.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TypeAlias

__all__ = ["Option", "OptionValue", "OptionValues"]


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
    type: Callable[[str], str | int | float | bool] = str  # a scalar parser
    default: OptionValue = None
    metavar: str | None = None
    choices: tuple[str, ...] | None = None
    flag: bool = False  # a store_true switch
    multiple: bool = False  # may be given several times (and as a comma list)
    engine: str | None = None  # an option of this engine only: it goes to config.engine_options
    # llama.cpp's spellings of the same option, accepted by ``equiv run`` so a user pastes their
    # flags (``-c 4096 -t 8 -fa on``); the pytest plugin keeps to ``--equiv-<name>``.
    aliases: tuple[str, ...] = ()
    # the environment variable the engine reads where no option of its own names its servers
    env: str | None = None
    # a value names servers that bring their own models (running servers, vLLM's directory):
    # the run then reads no model file unless --target/--draft name one
    serves_models: bool = False

    @property
    def dest(self) -> str:
        return self.name.replace("-", "_")

    @property
    def kind(self) -> str:
        """The TOML type this option's value must have: "integer", "number" or "string", from
        its converter (``int``, ``float``, or a function annotated ``-> int`` or ``-> float``)."""
        returns: object = self.type
        if not isinstance(returns, type):
            returns = getattr(self.type, "__annotations__", {}).get("return")
        return _KINDS.get(returns, "string")


#: The TOML type of a converter's result (a type, or its name in a postponed annotation).
_KINDS: dict[object, str] = {int: "integer", "int": "integer", float: "number", "float": "number"}
