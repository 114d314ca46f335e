"""Starting one path's server: llama-server from ``--server-bin``
(`equiv.engines.server.llama_command`) or vLLM from ``--vllm-model``
(`equiv.engines.server.vllm_command`), as a `ServerProcess`, with what the fingerprint records of
its command line.
"""

from __future__ import annotations

import shlex
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from equiv.config import RunConfig
from equiv.engines.server.llama_command import detect_flags, llama_server_argv, split_draft
from equiv.engines.server.process import ServerProcess
from equiv.engines.server.settings import ServerSettings
from equiv.engines.server.vllm_command import (
    drafts_with_model,
    spec_config,
    split_vllm_draft,
    vllm_argv,
    vllm_env,
)

__all__ = ["Started", "rescore_candidates", "start_server"]

VLLM_START_S = 900.0  # vLLM loads and profiles its model before /health answers


@dataclass(frozen=True)
class Started:
    """A server equiv started for one path, and its command line: the flags both paths share,
    the speculative server's own, the server's version, whether it drafts from a model file."""

    process: ServerProcess
    shared_argv: tuple[str, ...]
    draft_flags: tuple[str, ...]
    version: str | None
    drafts_from_file: bool


def start_server(
    config: RunConfig, settings: ServerSettings, *, speculative: bool, slots: int
) -> Started | None:
    """This path's server as the settings say (None: the settings name running servers)."""
    path = "speculative" if speculative else "baseline"
    if settings.server_bin:
        return _start_llama(settings.server_bin, config, settings, path=path, slots=slots)
    if settings.vllm_model:
        return _start_vllm(settings.vllm_model, config, settings, path=path, slots=slots)
    return None


def _start_llama(
    binary: str, config: RunConfig, settings: ServerSettings, *, path: str, slots: int
) -> Started:
    flags = detect_flags(binary)
    argv = llama_server_argv(
        str(Path(binary).expanduser().resolve()),  # "./llama-server" stays a path
        flags, config, speculative=path == "speculative", slots=slots,
        extra=shlex.split(settings.extra_args), draft_extra=shlex.split(settings.draft_args),
        spec_type=settings.spec_type,
    )  # fmt: skip
    shared, own = split_draft(argv, flags)
    process = ServerProcess.start(
        argv, log_path=_log_path(settings, "llama-server", path),
        timeout_s=settings.start_timeout_s,
    )  # fmt: skip
    return Started(process, tuple(shared), tuple(own), flags.version, "--model-draft" in own)


def _start_vllm(
    model: str, config: RunConfig, settings: ServerSettings, *, path: str, slots: int
) -> Started:
    spec = spec_config(settings.vllm_spec_config, config)
    argv = vllm_argv(
        settings.vllm_python or sys.executable, model, config,
        speculative=path == "speculative", slots=slots, logprobs=rescore_candidates(config),
        spec=spec, extra=shlex.split(settings.extra_args),
        draft_extra=shlex.split(settings.draft_args),
    )  # fmt: skip
    shared, own = split_vllm_draft(argv)
    process = ServerProcess.start(
        argv, log_path=_log_path(settings, "vllm", path),
        timeout_s=max(settings.start_timeout_s, VLLM_START_S), name="vLLM",
        env=vllm_env(path == "speculative"),
    )  # fmt: skip
    # the version is the server's own word (/version), read once it answers
    return Started(process, tuple(shared), tuple(own), None, drafts_with_model(spec))


def _log_path(settings: ServerSettings, server: str, path: str) -> Path:
    log_dir = Path(settings.log_dir or tempfile.mkdtemp(prefix="equiv-server-"))
    return log_dir / f"{server}-{path}.log"


def rescore_candidates(config: RunConfig) -> int:
    """K of the scoring requests: enough candidates to cover the sampler chain's whole support
    when it has a top_k (then its probabilities are exact), and at least ``top_k_record``."""
    top_k = config.sampling.top_k
    return max(config.top_k_record, top_k if top_k > 0 else 0)
