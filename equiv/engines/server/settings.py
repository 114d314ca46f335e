"""Settings of the server engine: where the two paths' servers are, or the binary to start them.

They come from the run's ``config.engine_options`` (``--server-bin``, ``--baseline-url``, ...:
the server options of `equiv.options`), and when those name no server, from the environment
(``EQUIV_SERVER_BIN``, ``EQUIV_BASELINE_URL``, ``EQUIV_SPECULATIVE_URL``, ``EQUIV_SERVER_API``,
``EQUIV_SERVER_CONCURRENCY``).
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from equiv.config import Mode, RunConfig, Setting
from equiv.engines.server.options import OPTIONS
from equiv.errors import ConfigError

__all__ = [
    "APIS",
    "AUTO_CONCURRENCY",
    "ServerSettings",
    "settings_for",
    "speculative_url",
]

APIS = ("auto", "llama", "openai")
# A server batches concurrent requests together, and its kernels are not batch-invariant: the
# same greedy request to llama-server gave different tokens with another request beside it
# (9 of 27 prompts, benchmarks/server_throughput.py). A bit-exact temp-0 comparison sends one
# request at a time; sampling tests compare distributions and keep several in flight.
AUTO_CONCURRENCY = {Mode.TEMP0: 1, Mode.SAMPLING: 4}
# The options that name the servers (a binary, vLLM's model, the URLs), as the option table
# marks them; `equiv.options.build` reads the same marks to decide whose models they are.
_SERVER_OPTIONS = tuple(opt.dest for opt in OPTIONS if opt.env or opt.serves_models)
_ENV = {opt.dest: opt.env for opt in OPTIONS if opt.env}  # EQUIV_SERVER_BIN, EQUIV_*_URL


@dataclass(frozen=True)
class ServerSettings:
    """Where the two paths' servers are, or what to start them from: a llama-server binary, or
    vLLM's model directory (and the Python that has vLLM)."""

    server_bin: str | None = None
    vllm_model: str | None = None  # start vLLM servers of this model (--vllm-model)
    vllm_python: str | None = None  # ... with this Python (None: the one running equiv)
    vllm_spec_config: str | None = None  # the speculative one's --speculative-config (JSON)
    baseline_url: str | None = None
    speculative_url: str | None = None
    api: str = "auto"
    model: str | None = None  # the "model" of OpenAI requests (default: the first served)
    concurrency: int | None = None  # None: AUTO_CONCURRENCY by mode
    timeout_s: float = 600.0
    start_timeout_s: float = 300.0
    log_dir: str | None = None
    retries: int = 4
    backoff_s: float = 0.25
    extra_args: str = ""  # more llama-server flags for both paths (--server-args)
    draft_args: str = ""  # ... for the speculative server only (--server-draft-args)
    spec_type: str | None = None  # its --spec-type (--server-spec-type; None: draft-simple)

    def __post_init__(self) -> None:
        self._check_sources()
        if self.vllm_model:
            self._check_vllm()
        elif self.vllm_python or self.vllm_spec_config:
            raise ConfigError(
                "--vllm-python/--vllm-spec-config are for the vLLM servers equiv starts: give "
                "--vllm-model DIR too, or set them on the running servers yourself"
            )
        if self.api not in APIS:
            raise ConfigError(f"--server-api {self.api!r} is not one of {', '.join(APIS)}")
        if self.server_bin and self.api == "openai":
            raise ConfigError("--server-bin starts llama-server: use --server-api llama or auto")
        if self.concurrency is not None and self.concurrency < 1:
            raise ConfigError(
                f"--server-concurrency {self.concurrency} must be >= 1 (default: 1 at temp 0, "
                "4 in sampling mode)"
            )
        if (self.extra_args or self.draft_args) and not self.starts_servers:
            raise ConfigError(
                "--server-args/--server-draft-args are flags for a server equiv starts: give "
                "--server-bin or --vllm-model too, or set them on the running servers yourself"
            )
        if self.spec_type and not self.server_bin:
            raise ConfigError(
                "--server-spec-type is a flag of the llama-server equiv starts: give "
                "--server-bin too (vLLM's drafter: --vllm-spec-config)"
            )
        for name, text in (
            ("--server-args", self.extra_args),
            ("--server-draft-args", self.draft_args),
        ):
            try:
                shlex.split(text)
            except ValueError as exc:
                raise ConfigError(f"{name} {text!r} cannot be split into flags ({exc})") from None
        if self.timeout_s <= 0:
            raise ConfigError(f"--server-timeout {self.timeout_s} must be > 0 seconds")

    def _check_sources(self) -> None:
        """Exactly one of: a llama-server binary, a vLLM model, both URLs."""
        urls = (self.baseline_url, self.speculative_url)
        sources = {
            "--server-bin": bool(self.server_bin),
            "--vllm-model": bool(self.vllm_model),
            "--baseline-url/--speculative-url": any(urls),
        }
        given = [name for name, named in sources.items() if named]
        if len(given) > 1:
            raise ConfigError(
                f"{' and '.join(given)} name the servers twice: --server-bin starts llama-server, "
                "--vllm-model starts vLLM, the URLs reach running servers; give one of them"
            )
        if not self.starts_servers and not all(urls):
            raise ConfigError(
                f"the server engine needs --server-bin PATH, --vllm-model DIR, or both "
                f"--baseline-url and --speculative-url (got baseline {self.baseline_url!r}, "
                f"speculative {self.speculative_url!r})"
            )

    def _check_vllm(self) -> None:
        if self.api == "llama":
            raise ConfigError("--vllm-model starts vLLM: use --server-api openai or auto")
        if self.vllm_spec_config is not None:
            from equiv.engines.server.vllm_command import parse_spec_config

            parse_spec_config(self.vllm_spec_config)  # a ConfigError naming the value

    @property
    def starts_servers(self) -> bool:
        """equiv starts both paths' servers (llama-server or vLLM), rather than reaching them."""
        return bool(self.server_bin or self.vllm_model)

    @classmethod
    def from_options(
        cls, values: Mapping[str, Setting], *, log_dir: str | Path | None
    ) -> ServerSettings:
        """From a run's engine options (`RunConfig.engine_options`, keyed by option ``dest``)."""

        def text(key: str) -> str | None:
            value = values.get(key)
            return None if value is None else str(value)

        timeout, concurrency = values.get("server_timeout"), values.get("server_concurrency")
        return cls(
            server_bin=text("server_bin"),
            vllm_model=text("vllm_model"),
            vllm_python=text("vllm_python"),
            vllm_spec_config=text("vllm_spec_config"),
            baseline_url=text("baseline_url"),
            speculative_url=text("speculative_url"),
            api=text("server_api") or "auto",
            model=text("server_model"),
            concurrency=None if concurrency is None else int(concurrency),
            timeout_s=cls.timeout_s if timeout is None else float(timeout),
            extra_args=text("server_args") or "",
            draft_args=text("server_draft_args") or "",
            spec_type=text("server_spec_type"),
            log_dir=None if log_dir is None else str(log_dir),
        )

    @classmethod
    def from_env(cls) -> ServerSettings:
        env = os.environ
        concurrency = env.get("EQUIV_SERVER_CONCURRENCY")
        if concurrency is not None and not concurrency.isdigit():
            raise ConfigError(
                f"EQUIV_SERVER_CONCURRENCY={concurrency!r} is not a count; unset it or give e.g. 4"
            )
        return cls(
            server_bin=env.get(_ENV["server_bin"]),
            baseline_url=env.get(_ENV["baseline_url"]),
            speculative_url=env.get(_ENV["speculative_url"]),
            api=env.get("EQUIV_SERVER_API", "auto"),
            concurrency=None if concurrency is None else int(concurrency),
        )

    def in_flight(self, mode: Mode) -> int:
        """Requests in flight per server: as given, else `AUTO_CONCURRENCY` for the mode."""
        return self.concurrency or AUTO_CONCURRENCY[mode]


def settings_for(config: RunConfig) -> ServerSettings:
    """The server settings of a run: its ``engine_options`` when they name servers, else the
    environment (`ServerSettings.from_env`)."""
    options = dict(config.engine_options)
    if _names_servers(options):
        log_dir = options.get("log_dir")
        return ServerSettings.from_options(
            options, log_dir=None if log_dir is None else str(log_dir)
        )
    return ServerSettings.from_env()


def _names_servers(options: Mapping[str, Setting]) -> bool:
    return any(options.get(name) for name in _SERVER_OPTIONS)


def speculative_url(config: RunConfig) -> str | None:
    """The running speculative server a run of ``--engine server`` reaches, if it reaches one
    (its draft is then the server's own, not a file equiv derived)."""
    return settings_for(config).speculative_url
