"""Engines: the only place that touches an inference library.

The contract is `equiv.engines.base`; engines are found by name through `equiv.engines.registry`.
"""

from equiv.engines.base import (
    BatchRescoring,
    Capabilities,
    Concurrent,
    Engine,
    EngineFactory,
    RescoreCost,
    RescoreCosting,
    Rescoring,
    ServerBacked,
    check_engine,
)
from equiv.engines.registry import available, build_engine, load_factory

__all__ = [
    "BatchRescoring",
    "Capabilities",
    "Concurrent",
    "Engine",
    "EngineFactory",
    "RescoreCost",
    "RescoreCosting",
    "Rescoring",
    "ServerBacked",
    "available",
    "build_engine",
    "check_engine",
    "load_factory",
]
