"""Keeping a native library's chatter off the terminal (and out of pytest's captured output)."""

from __future__ import annotations

import contextlib
import io
import os
from collections.abc import Iterator

__all__ = ["LOG_ENV", "quiet_stderr"]

#: Set (to anything but ``0`` or empty) to see llama.cpp's own log lines.
LOG_ENV = "EQUIV_LLAMA_LOG"


@contextlib.contextmanager
def quiet_stderr() -> Iterator[None]:
    """llama.cpp prints model-loading chatter on fd 2, and llama-cpp-python's log callback
    prints llama.cpp's warnings (``llama_kv_cache_iswa: ...``) to ``sys.stderr``; keep both off
    the terminal for equiv's own output, unless ``EQUIV_LLAMA_LOG`` asks for them."""
    if os.environ.get(LOG_ENV, "") not in ("", "0"):
        yield
        return
    try:
        saved = os.dup(2)
    except OSError:  # pragma: no cover - no fd 2
        with contextlib.redirect_stderr(io.StringIO()):
            yield
        return
    with open(os.devnull, "w") as devnull, contextlib.redirect_stderr(io.StringIO()):
        os.dup2(devnull.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
