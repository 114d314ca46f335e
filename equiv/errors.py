"""The exception tree. Every error equiv raises on purpose derives from `EquivError`.

    EquivError                  exit code 2 unless a subclass says otherwise
    ├── ConfigError             a bad option or config value (exit 2)
    ├── ModelError              a model file that cannot be used (exit 3)
    │   └── VocabMismatchError  draft and target cannot share token IDs (exit 4)
    ├── PromptError             a prompt suite or prompt that cannot be run (exit 5)
    ├── EngineError             an engine failed while generating (exit 6)
    │   └── PathFailedError     one path failed on a prompt; recorded as a finding first
    └── ResultsError            a results file that cannot be read or written (exit 7)
        ├── ResultsLockedError  another equiv process is using the results (exit 8)
        └── DiskFullError       no space left to write results; finished ones kept (exit 9)

Every message names the offending value and the way out.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = [
    "ConfigError",
    "DiskFullError",
    "EngineError",
    "EquivError",
    "ModelError",
    "PathFailedError",
    "PromptError",
    "ResultsError",
    "ResultsLockedError",
    "VocabMismatchError",
    "describe",
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


class PathFailedError(EngineError):
    """One path's engine failed on a prompt (``path``: "baseline" or "speculative"; ``key``:
    the result's key; ``cause``: the engine's own message). The runner writes it to the results
    file as a failed ``engine-failure`` control before the run stops."""

    def __init__(self, message: str, *, path: str, key: str, cause: str) -> None:
        super().__init__(message)
        self.path = path
        self.key = key
        self.cause = cause


class ResultsError(EquivError):
    """A results file is not one (no header, a newer schema), or cannot be written."""

    exit_code = 7


class ResultsLockedError(ResultsError):
    """Another equiv process holds the results directory (its PID is named)."""

    exit_code = 8


class DiskFullError(ResultsError):
    """No space left while appending to the results file; the file is left whole."""

    exit_code = 9


def describe(value: object) -> str:
    """A value found where another was expected, in words: ``the string '4'``, ``null``."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"the boolean {'true' if value else 'false'}"
    if isinstance(value, int | float):
        return f"the number {value!r}"
    if isinstance(value, str):
        text = value if len(value) <= 40 else value[:37] + "..."
        return f"the string {text!r}"
    if isinstance(value, list | tuple):
        return f"a list of {len(value)}"
    if isinstance(value, Mapping):
        return "an object"
    return f"a {type(value).__name__}"
