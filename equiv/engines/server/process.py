"""Starting and stopping llama.cpp's ``llama-server`` for the server engine.

equiv starts one server per path: the baseline without a draft, the speculative path with
``--model-draft``; both with the same context, threads, batch sizes and seed, on a free port of
127.0.0.1 only. Flag spellings differ between llama.cpp builds (``--spec-draft-n-max`` today,
``--draft-max`` before), so they are read from the binary's ``--help``. The server's output goes to
a log file in the results directory; a server that does not come up in time, or exits, is reported
with the tail of that log. Servers run in their own session (Ctrl-C reaches equiv, which then stops
them: terminate, then kill) and, on Linux, die with equiv even if it is killed outright.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from equiv.config import RunConfig
from equiv.engines.server.spec_types import build_types, chosen_types, reads_draft_file
from equiv.errors import ConfigError, EngineError
from equiv.models.gguf import read_gguf_info

__all__ = [
    "ServerFlags",
    "ServerProcess",
    "detect_flags",
    "free_port",
    "llama_server_argv",
    "log_tail",
    "split_draft",
]

# GGUF files without tokenizer.chat_template get llama.cpp's built-in template of their family,
# as the in-process engine does (equiv.engines.llamacpp), so chat prompts render alike.
_BUILTIN_TEMPLATES = {"gemma": "gemma", "gemma2": "gemma", "gemma3": "gemma", "llama": "llama3"}

_LIVE: set[ServerProcess] = set()
_LIVE_LOCK = threading.Lock()
_FLAGS_CACHE: dict[tuple[str, int], ServerFlags] = {}


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


@dataclass(frozen=True)
class ServerFlags:
    """How this llama-server build spells the options equiv sets (from ``--help``)."""

    version: str
    draft_max: str
    draft_min: str | None
    draft_p_min: str | None
    spec_types: tuple[str, ...]  # the build's --spec-type names; () where it has none
    flash_attn_value: bool  # "-fa on|off" (True) or a bare "-fa" switch (False)
    no_ui: str | None
    no_jinja: str | None  # built-in template names need the legacy (non-jinja) engine


def _first(help_text: str, *names: str) -> str | None:
    for name in names:
        if re.search(rf"(^|[\s,]){re.escape(name)}([\s,=]|$)", help_text, re.MULTILINE):
            return name
    return None


def detect_flags(binary: str) -> ServerFlags:
    """Read the flag spellings from ``binary --help`` (cached per binary and mtime)."""
    path = Path(binary).expanduser()
    if not path.is_file():
        raise ConfigError(
            f"--server-bin {binary!r} does not exist; build it with "
            "scripts/build_llama_server.sh (it prints the path) or give the path of llama-server"
        )
    key = (str(path.resolve()), path.stat().st_mtime_ns)
    if key in _FLAGS_CACHE:
        return _FLAGS_CACHE[key]
    try:
        helped = subprocess.run(
            [str(path.resolve()), "--help"], capture_output=True, text=True, timeout=60, check=False
        )
        versioned = subprocess.run(
            [str(path.resolve()), "--version"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ConfigError(
            f"--server-bin {binary!r} cannot be run ({exc}); give the path of an executable "
            "llama-server"
        ) from None
    text = helped.stdout + helped.stderr
    draft_max = _first(text, "--spec-draft-n-max", "--draft-max", "--draft")
    if "--model-draft" not in text or draft_max is None:
        raise ConfigError(
            f"--server-bin {binary!r} does not look like llama-server with speculative decoding "
            "(its --help lists no --model-draft / --draft-max); give the path of llama-server"
        )
    version_lines = (versioned.stdout + versioned.stderr).strip().splitlines()
    flags = ServerFlags(
        version=" | ".join(line for line in version_lines if line.strip())[:300],
        draft_max=draft_max,
        draft_min=_first(text, "--spec-draft-n-min", "--draft-min"),
        draft_p_min=_first(text, "--spec-draft-p-min", "--draft-p-min"),
        spec_types=build_types(text),
        flash_attn_value=bool(re.search(r"--flash-attn \[on\|off", text)),
        no_ui=_first(text, "--no-ui", "--no-webui"),
        no_jinja=_first(text, "--no-jinja"),
    )
    _FLAGS_CACHE[key] = flags
    return flags


def llama_server_argv(
    binary: str,
    flags: ServerFlags,
    config: RunConfig,
    *,
    speculative: bool,
    slots: int,
    extra: Sequence[str] = (),
    draft_extra: Sequence[str] = (),
    spec_type: str | None = None,
) -> list[str]:
    """The command line of one path's server (without ``--host``/``--port``).

    Both paths get the same context per slot, batch sizes, threads, flash-attention setting and
    seed; ``-c`` is ``n_ctx`` x ``slots`` because llama-server splits its context between slots.
    With several slots both servers work at once on this machine, so each gets at most half the
    cores: ggml's threads spin while they wait, and two 2-thread servers busy on 2 cores ran 10x
    slower than one at a time (benchmarks/server_throughput.py). ``extra``: the user's own flags
    for both paths (``--server-args``), before the draft's; ``draft_extra``: the speculative
    server's only (``--server-draft-args``), after the draft's settings; ``spec_type``: its
    ``--spec-type`` (`equiv.engines.server.spec_types.chosen_types`: draft-simple by default;
    n-gram and MTP types get no ``--model-draft``).
    """
    # Both paths check the speculative type, so neither server starts on one that cannot run.
    types = chosen_types(spec_type, flags.spec_types)
    info = read_gguf_info(config.target.path, with_sha256=False)
    if types and "draft-mtp" in types and not info.mtp_head:
        raise ConfigError(
            f"--server-spec-type {','.join(types)}: the target {config.target.path} has no MTP "
            "head (no nextn.eh_proj in its last block; llama-server would exit 'failed to "
            "create MTP context'): use a GGUF converted with its MTP layers (equiv check-draft "
            "TARGET tells), or another type"
        )
    half = max(1, (os.cpu_count() or 1) // 2)
    n = config.n_threads if slots == 1 else min(config.n_threads, half)
    threads = str(n)
    argv = [binary, "-m", config.target.path, "-c", str(config.n_ctx * slots)]
    argv += ["-np", str(slots), "-b", str(config.n_batch), "-ub", str(config.n_ubatch)]
    argv += ["-t", threads, "-tb", threads, "--seed", "1"]
    if flags.flash_attn_value:
        argv += ["-fa", "on" if config.flash_attn else "off"]
    elif config.flash_attn:
        argv += ["-fa"]
    if flags.no_ui:
        argv.append(flags.no_ui)
    if not info.chat_template and info.architecture in _BUILTIN_TEMPLATES:
        if flags.no_jinja:  # where jinja is the default, a template name would be taken literally
            argv.append(flags.no_jinja)
        argv += ["--chat-template", _BUILTIN_TEMPLATES[info.architecture]]
    argv += list(extra)
    if speculative:
        argv += _draft_argv(flags, config, types, draft_extra)
    return argv


def _draft_argv(
    flags: ServerFlags, config: RunConfig, types: tuple[str, ...] | None, extra: Sequence[str]
) -> list[str]:
    """The speculative server's own flags, from its draft-max flag on (`split_draft` cuts
    there): the draft file where the type reads one, the user's draft flags, the type."""
    draft = config.draft_config
    argv = [flags.draft_max, str(draft.draft_max)]
    if reads_draft_file(types):
        argv += ["--model-draft", config.draft.path]
    argv += list(extra)
    if types is not None:
        argv += ["--spec-type", ",".join(types)]
    if flags.draft_min:
        argv += [flags.draft_min, str(draft.draft_min)]
    if flags.draft_p_min:
        argv += [flags.draft_p_min, str(draft.p_min)]
    return argv


def split_draft(argv: list[str], flags: ServerFlags) -> tuple[list[str], list[str]]:
    """A `llama_server_argv` command line as (what both paths share, the speculative
    server's own flags: from its draft-max flag on)."""
    cut = argv.index(flags.draft_max) if flags.draft_max in argv else len(argv)
    return argv[:cut], argv[cut:]


def _resolve_prctl() -> Any:
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
    """A running llama-server on 127.0.0.1, its log, and how to stop it."""

    def __init__(self, argv: list[str], *, log_path: Path, port: int) -> None:
        self.argv = argv
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
                start_new_session=True,  # Ctrl-C goes to equiv, which stops the server itself
                preexec_fn=_die_with_parent if _PRCTL is not None else None,
            )
        except OSError as exc:
            self._log.close()
            raise ConfigError(
                f"cannot start {argv[0]!r} ({exc}); check --server-bin points to llama-server"
            ) from None
        with _LIVE_LOCK:
            _LIVE.add(self)

    @classmethod
    def start(
        cls, argv: list[str], *, log_path: Path, timeout_s: float, attempts: int = 3
    ) -> ServerProcess:
        """Start ``argv`` (without ``--host``/``--port``) on a free port and wait for /health.

        A port taken between choosing and binding it is retried on another port.
        """
        for attempt in range(attempts):
            port = free_port()
            argv_port = [*argv, "--host", "127.0.0.1", "--port", str(port)]
            server = cls(argv_port, log_path=log_path, port=port)
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
                raise EngineError(
                    f"llama-server exited with code {code} while starting; its log "
                    f"({self.log_path}) ends with:\n{log_tail(self.log_path)}\n"
                    "fix the cause above (model path, flags, memory) and rerun"
                )
            if _health_ok("127.0.0.1", self.port):
                if listens_on(self.proc.pid, self.port) is not False:
                    return
                raise EngineError(  # another process answered: retried on another port
                    f"port {self.port} was taken by another process (address already in use) "
                    f"before llama-server bound it"
                )
            if time.monotonic() > deadline:
                raise EngineError(
                    f"llama-server on {self.url} was not healthy after {timeout_s:.0f} s; its log "
                    f"({self.log_path}) ends with:\n{log_tail(self.log_path)}\n"
                    "a large model may need more time, or the server is stuck: see the log"
                )
            time.sleep(0.2)

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
