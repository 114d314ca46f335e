"""Running a generated Python program in a separate, limited process.

What the isolation does (all of it best effort, none of it a security boundary):

- a fresh ``python -I`` process (no user site, no ``PYTHON*`` variables, script dir not on the
  path) whose environment holds only ``PATH``, ``HOME`` (the temp dir) and ``LC_ALL``;
- its working directory is a new, empty temporary directory, deleted afterwards;
- limits set by the child itself with ``resource.setrlimit`` before any generated code runs:
  address space (``RLIMIT_AS``), CPU seconds (``RLIMIT_CPU``), open files (``RLIMIT_NOFILE``) and
  the size of any file written (``RLIMIT_FSIZE``; stdout and stderr go to files, so this caps
  them too). They are set in the child, not in a ``preexec_fn``, because the runner keeps prompts
  in flight on threads and ``preexec_fn`` is not safe in a threaded parent;
- a wall-clock limit: the whole process group is killed when it runs out;
- no network where the platform allows it: the child runs under ``unshare --net`` (with
  ``--map-root-user`` for an unprivileged user) when a probe shows that works; otherwise it keeps
  the network and `SandboxResult.isolation` says so.

What it does not do: it does not hide the file system (the program can read what the user can,
and write outside its directory), it does not limit the number of processes, and a program that
inspects its own harness can forge a pass. It keeps a model's accidental mistakes (an endless
loop, a huge allocation, a crash, a stray ``rm``-free file write) from taking the run down; it is
not a jail for hostile code.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

__all__ = ["RESULT_FILE", "Limits", "SandboxResult", "network_isolation", "run_python"]

#: A file in the program's directory whose content comes back as `SandboxResult.result`.
RESULT_FILE = ".result"

_OUTPUT_CHARS = 4000  # of stdout / stderr kept in a result


@dataclass(frozen=True)
class Limits:
    """Resource limits of one sandboxed program."""

    timeout_s: float = 5.0  # wall clock, start-up included
    memory_mb: int = 1024
    open_files: int = 64
    file_size_mb: int = 4
    cpu_s: float | None = None  # CPU seconds of the program (default: the wall-clock limit)

    def preamble(self) -> str:
        """Python source that applies the limits in the child before anything else runs."""
        cpu = math.ceil(self.cpu_s if self.cpu_s is not None else self.timeout_s) + 1
        mem = self.memory_mb * 1024 * 1024
        fsize = self.file_size_mb * 1024 * 1024
        return (
            "import resource as _r\n"
            f"_r.setrlimit(_r.RLIMIT_AS, ({mem}, {mem}))\n"
            f"_r.setrlimit(_r.RLIMIT_CPU, ({cpu}, {cpu + 1}))\n"  # SIGXCPU, then SIGKILL
            f"_r.setrlimit(_r.RLIMIT_NOFILE, ({self.open_files}, {self.open_files}))\n"
            f"_r.setrlimit(_r.RLIMIT_FSIZE, ({fsize}, {fsize}))\n"
            "del _r\n"
        )


@dataclass(frozen=True)
class SandboxResult:
    """How a sandboxed program ended: exit status (negative: killed by that signal)."""

    returncode: int
    stdout: str
    stderr: str
    timed_out: bool
    wall_s: float
    isolation: str
    result: str = ""  # what the program wrote to RESULT_FILE in its directory, if anything

    @property
    def signal_name(self) -> str | None:
        if self.returncode >= 0:
            return None
        try:
            return signal.Signals(-self.returncode).name
        except ValueError:
            return f"signal {-self.returncode}"


_PROBES: tuple[tuple[str, ...], ...] = (
    ("unshare", "--net"),
    ("unshare", "--net", "--map-root-user"),
)


@functools.lru_cache(maxsize=1)
def network_isolation() -> tuple[tuple[str, ...], str]:
    """The command prefix that cuts the network here, and a sentence saying what it does."""
    if not sys.platform.startswith("linux"):
        return (), f"network not isolated (no unshare on {sys.platform})"
    if shutil.which("unshare") is None:
        return (), "network not isolated (the unshare command is not installed)"
    for prefix in _PROBES:
        try:
            probe = subprocess.run(
                [*prefix, "true"], capture_output=True, timeout=10, check=False, env={}
            )
        except (OSError, subprocess.TimeoutExpired):
            continue
        if probe.returncode == 0:
            return prefix, f"no network ({' '.join(prefix)})"
    return (), "network not isolated (unshare --net is not permitted for this user)"


def _tail(path: Path) -> str:
    """The last few thousand characters of a file the program wrote (empty if none)."""
    try:
        with path.open("rb") as fh:
            fh.seek(max(0, path.stat().st_size - _OUTPUT_CHARS * 4))
            data = fh.read()
    except OSError:
        return ""
    return data.decode("utf-8", errors="replace")[-_OUTPUT_CHARS:]


def run_python(
    files: Mapping[str, str],
    main: str,
    *,
    limits: Limits = Limits(),
    stdin: str = "",
) -> SandboxResult:
    """Write ``files`` into an empty temp dir and run ``main`` (one of them) there, limited.

    The limits' preamble is prepended to ``main``. Never raises for anything the program does:
    a crash, a hang or a limit shows in the result.
    """
    if main not in files:
        raise ValueError(f"main script {main!r} is not among the files {sorted(files)}")
    prefix, isolation = network_isolation()
    with tempfile.TemporaryDirectory(prefix="equiv-sandbox-") as tmp:
        work = Path(tmp)
        for name, text in files.items():
            body = limits.preamble() + text if name == main else text
            (work / name).write_text(body, encoding="utf-8")
        out_path, err_path = work / ".stdout", work / ".stderr"
        env = {"PATH": os.defpath, "HOME": tmp, "LC_ALL": "C.UTF-8"}
        cmd = [*prefix, sys.executable, "-I", main]
        start = time.monotonic()
        timed_out = False
        with out_path.open("wb") as out, err_path.open("wb") as err:
            proc = subprocess.Popen(
                cmd,
                cwd=tmp,
                env=env,
                stdin=subprocess.PIPE,
                stdout=out,
                stderr=err,
                start_new_session=True,
            )
            try:
                proc.communicate(stdin.encode("utf-8"), timeout=limits.timeout_s)
            except subprocess.TimeoutExpired:
                timed_out = True
            finally:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGKILL)  # the program's children too
                proc.wait()
        return SandboxResult(
            returncode=proc.returncode,
            stdout=_tail(out_path),
            stderr=_tail(err_path),
            timed_out=timed_out,
            wall_s=time.monotonic() - start,
            isolation=isolation,
            result=_tail(work / RESULT_FILE),
        )
