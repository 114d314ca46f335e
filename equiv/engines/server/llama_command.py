"""The command line of a llama-server that equiv starts: how this build spells the flags equiv
sets (read from its ``--help``: ``--spec-draft-n-max`` today, ``--draft-max`` before), and each
path's flags: the same context, threads, batch sizes and seed on both, the draft's settings on the
speculative server only.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from equiv.config import RunConfig
from equiv.engines.server.spec_types import build_types, chosen_types, reads_draft_file
from equiv.errors import ConfigError
from equiv.models.gguf import read_gguf_info

__all__ = ["ServerFlags", "detect_flags", "llama_server_argv", "split_draft"]

# GGUF files without tokenizer.chat_template get llama.cpp's built-in template of their family,
# as the in-process engine does (equiv.engines.llamacpp), so chat prompts render alike.
_BUILTIN_TEMPLATES = {"gemma": "gemma", "gemma2": "gemma", "gemma3": "gemma", "llama": "llama3"}

_FLAGS_CACHE: dict[tuple[str, int], ServerFlags] = {}


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
