"""One process at a time per results file: an exclusive lock held for a run's whole life.

`ResultsLock` takes ``flock(LOCK_EX | LOCK_NB)`` on ``<results>.lock`` beside the results file
and writes its PID and command line into it. A second run on the same results (another
``equiv run --resume``, a plugin session, ``equiv minimize``) gets `ResultsLockedError` naming
the process that holds it, at once, before any model loads. The operating system releases the
lock when its process ends, however it ends (kill -9 included), so a stale lock file never
blocks anything: the next run takes the lock on it. A run that ends normally removes the file.

`check_out_dir` is the up-front check of an ``--out`` directory, before anything is loaded.
"""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path
from types import TracebackType

from equiv.errors import ConfigError, ResultsError, ResultsLockedError

try:  # POSIX; equiv's command line needs it anyway (resource, signals)
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

__all__ = ["ResultsLock", "check_out_dir", "lock_path"]


def lock_path(results_path: str | Path) -> Path:
    path = Path(results_path)
    return path.with_name(path.name + ".lock")


def _holder(text: str) -> str:
    """Who holds a lock, from the lock file's text: "PID 123 (equiv run ...)"."""
    first, _, command = text.strip().partition("\n")
    if not first.isdigit():
        return "another process (its PID is not recorded yet)"
    return f"PID {first}" + (f" ({command.strip()[:200]})" if command.strip() else "")


class ResultsLock:
    """An exclusive lock on one results file (a context manager; `release` is idempotent)."""

    def __init__(self, results_path: str | Path) -> None:
        self.results_path = Path(results_path)
        self.path = lock_path(results_path)
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> ResultsLock:
        if self._fd is not None:
            return self
        if fcntl is None:  # pragma: no cover - no advisory locks on this platform
            return self
        while True:
            fd = self._open()
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                try:
                    text = os.pread(fd, 4096, 0).decode("utf-8", "replace")
                finally:
                    os.close(fd)
                raise ResultsLockedError(
                    f"{self.results_path} is in use by {_holder(text)}: two runs cannot write "
                    "one results file. Wait for that run to finish (or stop it), or choose "
                    "another --out directory"
                ) from None
            # The holder before us removes the file as it lets go: a lock on a file no longer
            # at this path locks nothing, so take the one that is there now.
            try:
                same = os.stat(self.path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        command = " ".join(sys.argv)[:500]
        with contextlib.suppress(OSError):  # the lock holds without the note (a full disk)
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n{command}\n".encode("utf-8", "replace"), 0)
        self._fd = fd
        return self

    def _open(self) -> int:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            return os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise ResultsError(
                f"cannot create the lock file {self.path}: {exc.strerror or exc}; "
                "check that the --out directory is writable"
            ) from None

    def release(self) -> None:
        """Remove the lock file and let go (a lock file left by a killed process is harmless:
        the next run takes it)."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        with contextlib.suppress(OSError):
            os.unlink(self.path)  # while held: nobody can have taken it meanwhile
        os.close(fd)  # closing the last descriptor releases the flock

    def __enter__(self) -> ResultsLock:
        return self.acquire()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()

    def __del__(self) -> None:
        if self._fd is not None:
            os.close(self._fd)


def check_out_dir(out: str | Path) -> Path:
    """An ``--out`` directory that can hold a run, checked before any model loads: not a file,
    and its ``results.jsonl`` not a directory."""
    path = Path(out)
    if path.exists() and not path.is_dir():
        raise ConfigError(
            f"--out {str(path)!r} is a file; --out names a directory for results.jsonl and "
            "report.html: pass a directory (it is created if missing)"
        )
    results = path / "results.jsonl"
    if results.exists() and not results.is_file():
        raise ConfigError(
            f"{results} is not a file; move it away or choose another --out directory"
        )
    for parent in (path, *path.parents):
        if parent.exists():
            if not parent.is_dir():
                raise ConfigError(
                    f"--out {str(path)!r}: {str(parent)!r} is a file, not a directory"
                )
            break
    return path
