"""Engines: the only place that touches an inference library."""

from equiv.engines.base import Capabilities, Engine, EngineFactory, load_factory

__all__ = ["Capabilities", "Engine", "EngineFactory", "load_factory"]
