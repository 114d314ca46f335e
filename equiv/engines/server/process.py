"""Starting and stopping the servers equiv starts itself (llama-server, vLLM), whatever their
command line (`equiv.engines.server.llama_command`, `equiv.engines.server.vllm_command`).

Each runs on a free port of 127.0.0.1 only, and is ready when ``/health`` answers 200. Its output
goes to a log file in the results directory; a server that does not come up in time, or exits, is
reported with the tail of that log. Servers run in their own session (Ctrl-C reaches equiv, which
then stops them: terminate, then kill) and, on Linux, die with equiv even if it is killed
outright.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import http.client
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from equiv.errors import ConfigError, EngineError

__all__ = ["ServerProcess", "free_port", "listens_on", "log_tail"]

_LIVE: set[ServerProcess] = set()
_LIVE_LOCK = threading.Lock()


def free_port() -> int:
    """A TCP port of 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def log_tail(path: Path, lines: int = 30) -> str:
    """The last ``lines`` lines of a log file ('' when there is none)."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def _resolve_prctl() -> Any:  # a ctypes foreign function (untyped edge), or None
    """libc's prctl, looked up once in the parent: the child, forked from a threaded process,
    then only calls it (no library loading between fork and exec)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


_PRCTL = _resolve_prctl()


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    """Linux: SIGTERM the server when the thread that started it (equiv's main thread) dies."""
    _PRCTL(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def _listening_inodes(port: int) -> set[str] | None:
    """Inodes of the sockets listening on 127.0.0.1:``port`` (Linux /proc/net/tcp); None where
    that cannot be read."""
    try:
        lines = Path("/proc/net/tcp").read_text(encoding="ascii").splitlines()[1:]
    except OSError:
        return None
    want = f"0100007F:{port:04X}"
    return {f[9] for f in (line.split() for line in lines) if f[1] == want and f[3] == "0A"}


def _socket_inodes(pid: int) -> set[str]:
    """The inodes of the sockets process ``pid`` holds open (empty where /proc will not say)."""
    found = set()
    with contextlib.suppress(OSError):
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
                if link.startswith("socket:["):
                    found.add(link[8:-1])
    return found


def _process_tree(pid: int) -> set[int]:
    """``pid`` and its descendants (a wrapper script's llama-server is its child)."""
    tree: set[int] = set()
    todo = [pid]
    while todo:
        current = todo.pop()
        if current in tree:
            continue
        tree.add(current)
        for children in Path(f"/proc/{current}/task").glob("*/children"):
            with contextlib.suppress(OSError, ValueError):
                todo.extend(int(c) for c in children.read_text().split())
    return tree


def listens_on(pid: int, port: int) -> bool | None:
    """Whether process ``pid`` (or one of its descendants) holds the socket listening on
    127.0.0.1:``port``: a /health answer on a port another server took first (another test
    worker's, between `free_port` and this server's bind) is not this server's. False only when
    another process is seen holding it; None where /proc cannot tell."""
    inodes = _listening_inodes(port)
    if not inodes:
        return None
    tree = _process_tree(pid)
    if any(_socket_inodes(p) & inodes for p in tree):
        return True
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) not in tree and _socket_inodes(int(entry)) & inodes:
            return False
    return None


class ServerProcess:
    """A running server on 127.0.0.1 (``name``: llama-server, vLLM), its log, and how to stop
    it."""

    def __init__(
        self,
        argv: list[str],
        *,
        log_path: Path,
        port: int,
        name: str = "llama-server",
        env: dict[str, str] | None = None,
    ) -> None:
        self.argv = argv
        self.name = name
        self.log_path = log_path
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = log_path.open("ab")
        try:
            self.proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=self._log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,  # Ctrl-C goes to equiv, which stops the server itself
                preexec_fn=_die_with_parent if _PRCTL is not None else None,
            )
        except OSError as exc:
            self._log.close()
            raise ConfigError(
                f"cannot start {argv[0]!r} ({exc}); check the path of {name} you gave"
            ) from None
        with _LIVE_LOCK:
            _LIVE.add(self)

    @classmethod
    def start(
        cls,
        argv: list[str],
        *,
        log_path: Path,
        timeout_s: float,
        attempts: int = 3,
        name: str = "llama-server",
        env: dict[str, str] | None = None,
    ) -> ServerProcess:
        """Start ``argv`` (without ``--host``/``--port``) on a free port and wait for /health.

        A port taken between choosing and binding it is retried on another port.
        """
        for attempt in range(attempts):
            port = free_port()
            argv_port = [*argv, "--host", "127.0.0.1", "--port", str(port)]
            server = cls(argv_port, log_path=log_path, port=port, name=name, env=env)
            try:
                server.wait_healthy(timeout_s)
                return server
            except EngineError as exc:
                server.stop()
                taken = "taken by another process" in str(exc)
                bind_failed = taken or re.search(
                    r"bind|address already in use", log_tail(log_path), re.I
                )
                if not bind_failed or attempt == attempts - 1:
                    raise
            except BaseException:  # Ctrl-C while loading: never leave a server behind
                server.stop()
                raise
        raise AssertionError("unreachable")  # pragma: no cover

    def wait_healthy(self, timeout_s: float) -> None:
        """Poll ``/health`` until it answers 200; raise EngineError with the log tail if not."""
        deadline = time.monotonic() + timeout_s
        while True:
            code = self.proc.poll()
            if code is not None:
                raise EngineError(self._exit_message(code))
            if _health_ok("127.0.0.1", self.port):
                if listens_on(self.proc.pid, self.port) is not False:
                    return
                raise EngineError(  # another process answered: retried on another port
                    f"port {self.port} was taken by another process (address already in use) "
                    f"before {self.name} bound it"
                )
            if time.monotonic() > deadline:
                raise EngineError(
                    f"{self.name} on {self.url} was not healthy after {timeout_s:.0f} s; its log "
                    f"({self.log_path}) ends with:\n{log_tail(self.log_path)}\n"
                    "a large model may need more time, or the server is stuck: see the log"
                )
            time.sleep(0.2)

    def _exit_message(self, code: int) -> str:
        tail = log_tail(self.log_path)
        if not tail.strip():  # nothing said: the command itself is the first suspect
            return (
                f"{self.name} exited with code {code} while starting and wrote nothing to its "
                f"log ({self.log_path}); the command was: {shlex.join(self.argv)}\ncheck that "
                f"it runs {self.name} (the binary or Python you gave) and rerun"
            )
        return (
            f"{self.name} exited with code {code} while starting; its log ({self.log_path}) "
            f"ends with:\n{tail}\nfix the cause above (model path, flags, memory) and rerun"
        )

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self, grace_s: float = 10.0) -> None:
        """Terminate its process group (a wrapper script's llama-server too), wait up to
        ``grace_s``, then kill it. Safe to call twice."""
        if self.proc.poll() is None:
            self._signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                self._signal(signal.SIGKILL)
                self.proc.wait(timeout=grace_s)
        # What the group left behind once its leader ended (a wrapper's child): ended too.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self._log.close()
        with _LIVE_LOCK:
            _LIVE.discard(self)

    def _signal(self, sig: signal.Signals) -> None:
        """``sig`` to the server's process group (it leads one: ``start_new_session``)."""
        try:
            os.killpg(self.proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(sig)


def _health_ok(host: str, port: int) -> bool:
    conn = http.client.HTTPConnection(host, port, timeout=2)
    try:
        conn.request("GET", "/health")
        resp = conn.getresponse()
        body = resp.read()
    except (OSError, http.client.HTTPException):
        return False
    finally:
        conn.close()
    if resp.status != 200:
        return False
    if not body.strip():  # vLLM: an empty 200 once it serves (llama-server: 503 while loading)
        return True
    try:
        return bool(json.loads(body).get("status") == "ok")
    except (ValueError, AttributeError):
        return False


@atexit.register
def _stop_all() -> None:
    """Whatever happens to the run, no server outlives equiv."""
    with _LIVE_LOCK:
        live = list(_LIVE)
    for server in live:
        server.stop(grace_s=5.0)
