"""Engines: the only place that touches an inference library.

The contract is `equiv.engines.base`; engines are found by name through `equiv.engines.registry`.
"""

from equiv.engines.base import (
    Capabilities,
    Concurrent,
    Engine,
    EngineFactory,
    Rescoring,
    ServerBacked,
    check_engine,
)
from equiv.engines.registry import available, build_engine, load_factory

__all__ = [
    "Capabilities",
    "Concurrent",
    "Engine",
    "EngineFactory",
    "Rescoring",
    "ServerBacked",
    "available",
    "build_engine",
    "check_engine",
    "load_factory",
]
