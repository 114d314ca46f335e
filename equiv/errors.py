"""The exception tree. Every error equiv raises on purpose derives from `EquivError`.

    EquivError                  exit code 2 unless a subclass says otherwise
    ├── ConfigError             a bad option or config value (exit 2)
    ├── ModelError              a model file that cannot be used (exit 3)
    │   └── VocabMismatchError  draft and target cannot share token IDs (exit 4)
    ├── PromptError             a prompt suite or prompt that cannot be run (exit 5)
    └── EngineError             an engine failed while generating (exit 6)

Every message names the offending value and the way out.
"""

from __future__ import annotations

__all__ = [
    "ConfigError",
    "EngineError",
    "EquivError",
    "ModelError",
    "PromptError",
    "VocabMismatchError",
]


class EquivError(Exception):
    """Base class of all errors equiv raises on purpose."""

    exit_code = 2


class ConfigError(EquivError):
    """An option or configuration value is invalid."""

    exit_code = 2


class ModelError(EquivError):
    """A model file is missing, not GGUF, truncated, or otherwise unusable."""

    exit_code = 3


class VocabMismatchError(ModelError):
    """The draft's vocabulary is not compatible with the target's."""

    exit_code = 4


class PromptError(EquivError):
    """A prompt suite is malformed, or a prompt does not fit the context."""

    exit_code = 5


class EngineError(EquivError):
    """An engine failed while generating."""

    exit_code = 6
