"""equiv: prove or disprove that speculative decoding leaves a model's output unchanged."""

from equiv.errors import (
    ConfigError,
    EngineError,
    EquivError,
    ModelError,
    PromptError,
    VocabMismatchError,
)

__version__ = "0.1.0"

__all__ = [
    "ConfigError",
    "EngineError",
    "EquivError",
    "ModelError",
    "PromptError",
    "VocabMismatchError",
    "__version__",
]
