"""Keeping a native library's chatter off the terminal."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

__all__ = ["quiet_stderr"]


@contextlib.contextmanager
def quiet_stderr() -> Iterator[None]:
    """llama.cpp prints model-loading chatter on fd 2; keep the terminal for equiv's own output."""
    try:
        saved = os.dup(2)
    except OSError:  # pragma: no cover - no fd 2
        yield
        return
    with open(os.devnull, "w") as devnull:
        os.dup2(devnull.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
