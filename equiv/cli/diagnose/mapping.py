"""A llama.cpp command line mapped onto an equiv run: the option values it stands for, the
user's own llama-server to run when there is one (with the user's flags passed through), and the
``equiv run`` command line a user copies to rerun it."""

from __future__ import annotations

import os
import shlex
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from equiv.cli.diagnose.command import RANDOM_SEED, LlamaCommand
from equiv.engines.server.spec_types import INFERRED
from equiv.errors import ConfigError
from equiv.json_types import json_float

if TYPE_CHECKING:
    from equiv.options.table import OptionValue, OptionValues

__all__ = [
    "MAX_LOCAL_CTX",
    "RunMapping",
    "map_to_run",
    "pass_through",
    "run_command",
    "user_server",
]

#: The local default pair is small; a user's long context is capped to this on it.
MAX_LOCAL_CTX = 8192


@dataclass(frozen=True)
class RunMapping:
    """The equiv run values a command line maps to, and what was said about the mapping."""

    values: dict[str, OptionValue]
    notes: tuple[str, ...] = ()
    runs: str = ""  # what equiv runs: the user's llama-server, or llama-cpp-python in process

    @property
    def user_temp(self) -> float:
        return json_float(self.values.get("temp", 0.8))  # llama.cpp's default temperature


_SAMPLING = ("draft_max", "draft_min", "draft_p_min", "temp", "top_k", "top_p", "min_p")
_DIRECT = (*_SAMPLING, "repeat_penalty", "n_batch", "n_ubatch")


def map_to_run(
    cmd: LlamaCommand, *, cpu_count: int | None = None, server_bin: str | None = None
) -> RunMapping:
    """Option values for `equiv.options.build.build_config` (``mode`` is set by the caller).

    When the command line names a llama-server binary that exists (or ``server_bin`` is given,
    or a llama-cli / llama-speculative has a llama-server beside it), the run starts *that*
    binary with the user's flags (`user_server`); otherwise llama-cpp-python runs in process.
    """
    values: dict[str, OptionValue] = {}
    notes: list[str] = []
    binary, runs = user_server(cmd, server_bin=server_bin)
    if binary is not None:
        shared, draft_only = pass_through(cmd)
        values.update(engine="server", server_bin=binary)
        if shared:
            values["server_args"] = shlex.join(shared)
        if draft_only:
            values["server_draft_args"] = shlex.join(draft_only)
    target, draft = cmd.text("model"), cmd.text("model_draft")
    if target and Path(target).is_file():
        values["target"] = target
        if draft and Path(draft).is_file():
            values["draft"] = draft
        elif draft:
            notes.append(f"{Path(draft).name} is not here; using a draft requantized from {target}")
    else:
        what = f"{Path(target).name} is not here" if target else "no -m model given"
        notes.append(f"{what}; checking the same setup on the local default pair")
    notes.extend(_speculative_type(cmd, values, own_server=binary is not None))
    for key in _DIRECT:
        if (value := cmd.get(key)) is not None:
            values[key] = value
    if n_ctx := cmd.integer("n_ctx"):
        n_ctx //= max(cmd.parallel, 1)
        if cmd.parallel > 1:
            notes.append(f"llama-server splits -c between -np slots: {n_ctx} per request")
        if "target" not in values and n_ctx > MAX_LOCAL_CTX:
            notes.append(f"n_ctx {n_ctx} capped at {MAX_LOCAL_CTX} on the local pair")
            n_ctx = MAX_LOCAL_CTX
        values["n_ctx"] = n_ctx
    cores = cpu_count or os.cpu_count() or 1
    threads = cmd.integer("threads")
    if threads and threads > 0:
        values["threads"] = min(threads, cores)
        if threads > cores:
            notes.append(f"-t {threads} lowered to this machine's {cores} cores")
    if (cmd.text("flash_attn") or "off").lower() in ("on", "1", "true"):
        values["flash_attn"] = True
    seed = cmd.integer("seed")
    if cmd.seed_fixed and seed is not None and 0 < seed < RANDOM_SEED:
        values["seed_start"] = seed
    return RunMapping(values, tuple(notes), runs)


def _speculative_type(
    cmd: LlamaCommand, values: dict[str, OptionValue], *, own_server: bool
) -> list[str]:
    """The user's speculative type, as written: on their llama-server it is passed through
    (``--server-spec-type``; no ``--spec-type`` stays none, so a server that then does not
    speculate is found); in process only draft-model speculation can run."""
    spec_type = cmd.text("spec_type")
    default = cmd.words and "--spec-default" in cmd.words
    if own_server:
        if spec_type is not None:
            values["server_spec_type"] = spec_type
        elif cmd.text("model_draft") or default:
            values["server_spec_type"] = INFERRED
            return (
                []
                if default
                else [
                    "no --spec-type given: your llama-server is run without one, as you run it "
                    "(builds whose default type is none do not speculate with -md alone)"
                ]
            )
        return []
    if spec_type not in (None, "none", "draft-simple") or default:
        written = f"--spec-type {spec_type}" if spec_type else "--spec-default (ngram-mod)"
        return [
            f"{written} runs only on llama-server: checked in process as draft-model "
            "speculation; pass --server-bin PATH to check it as you run it"
        ]
    return []


#: Programs of a llama.cpp build directory that have a llama-server beside them to run instead.
_BUILD_PROGRAMS = ("llama-cli", "llama-speculative", "llama-speculative-simple", "main")
#: The user's flags that change numerics and that equiv does not set itself: passed to the user's
#: llama-server as written (draft-only ones to the speculative server only). Switches take no value.
_PASS_SHARED = frozenset(
    {"-ngl", "--gpu-layers", "--n-gpu-layers", "-ctk", "--cache-type-k", "-ctv", "--cache-type-v",
     "-sm", "--split-mode", "-ts", "--tensor-split", "-mg", "--main-gpu", "-dev", "--device",
     "--no-mmap", "--mlock", "--numa", "--no-kv-offload", "-nkvo", "--jinja"}
)  # fmt: skip
_PASS_DRAFT = frozenset(
    {"-ngld", "--gpu-layers-draft", "--n-gpu-layers-draft", "-devd", "--device-draft",
     "-ctkd", "--cache-type-k-draft", "-ctvd", "--cache-type-v-draft", "--spec-default",
     "--spec-ngram-mod-n-min", "--spec-ngram-mod-n-max", "--spec-ngram-mod-n-match",
     *(f"--spec-ngram-{kind}-{what}" for kind in ("simple", "map-k", "map-k4v")
       for what in ("size-n", "size-m", "min-hits"))}
)  # fmt: skip
_SWITCHES = frozenset(
    {"--no-mmap", "--mlock", "--no-kv-offload", "-nkvo", "--jinja", "--spec-default"}
)


def user_server(cmd: LlamaCommand, *, server_bin: str | None = None) -> tuple[str | None, str]:
    """The user's own llama-server binary to run, and a sentence saying what equiv runs."""
    if server_bin:
        given = Path(server_bin).expanduser()
        if not given.is_file():
            raise ConfigError(
                f"--server-bin {server_bin!r} does not exist; give the path of your llama-server"
            )
        return str(
            given.resolve()
        ), f"running your llama-server {given} (--server-bin) with your flags"
    if not cmd.program_path:
        return None, _IN_PROCESS + "; pass --server-bin PATH to check your own build"
    written = cmd.program_path
    found = shutil.which(written) if "/" not in written else written
    path = Path(found).expanduser().resolve() if found else None
    if path is not None and path.is_file() and cmd.program in ("llama-server", "server"):
        return str(path), f"running your llama-server {path} with your flags"
    if path is not None and path.is_file() and cmd.program in _BUILD_PROGRAMS:
        sibling = path.parent / "llama-server"
        if sibling.is_file():
            return str(sibling), (
                f"your command runs {cmd.program}; equiv runs the llama-server of the same build "
                f"({sibling}: the same kernels) with your flags, one server per path"
            )
    why = (
        f"{written} is not a file here"
        if path is None or not path.is_file()
        else (f"{cmd.program} has no llama-server beside it")
    )
    return None, f"{why}: {_IN_PROCESS}; pass --server-bin PATH to check your own build"


_IN_PROCESS = (
    "running llama-cpp-python in process, whose llama.cpp build and backend may differ from "
    "yours (so may its drift)"
)


def pass_through(cmd: LlamaCommand) -> tuple[list[str], list[str]]:
    """The user's flags for their llama-server that equiv does not set (`_PASS_SHARED`), and
    those for the speculative server only (`_PASS_DRAFT`), as written."""
    shared: list[str] = []
    draft: list[str] = []
    words = cmd.words
    i = 0
    while i < len(words):
        name = words[i].partition("=")[0]
        into = shared if name in _PASS_SHARED else draft if name in _PASS_DRAFT else None
        takes_value = "=" not in words[i] and name not in _SWITCHES and i + 1 < len(words)
        if into is not None:
            into.append(words[i])
            if takes_value:
                into.append(words[i + 1])
        i += 2 if into is not None and takes_value else 1
    return shared, draft


def run_command(values: OptionValues, *, mode: str, out: Path | str) -> list[str]:
    """The ``equiv run`` command line (argv, from ``run``) of mapped option values: what a
    user copies to rerun one part of a diagnosis."""
    from equiv.options.table import given, run_options

    argv = ["run", "--mode", mode]
    for opt in run_options():
        value = values.get(opt.dest)
        if value is None or opt.name == "mode" or value is False:
            continue
        if opt.flag:
            argv.append(f"--{opt.name}")
        elif opt.multiple:
            for item in given(value):
                argv += [f"--{opt.name}", str(item)]
        else:
            argv += [f"--{opt.name}", str(value)]
    return [*argv, "--out", str(out)]
