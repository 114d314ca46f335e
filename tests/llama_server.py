"""What the real llama-server tests share: the binary (or a skip saying how to build it) and the
built-in prompts by key."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from equiv.models.pair import cache_dir
from equiv.prompts import Prompt, load_suites

LLAMA_CPP_PYTHON = "0.3.36"  # the pinned binding whose vendored llama.cpp the binary is built from


def server_bin() -> str:
    """``$EQUIV_LLAMA_SERVER``, else scripts/build_llama_server.sh's cached binary; a skip when
    neither exists (CI builds it and sets the variable)."""
    given = os.environ.get("EQUIV_LLAMA_SERVER")
    path = Path(given) if given else cache_dir() / f"llama-server-{LLAMA_CPP_PYTHON}/llama-server"
    if not path.is_file():
        pytest.skip(f"no llama-server at {path}: run scripts/build_llama_server.sh")
    return str(path)


def prompts(keys: list[str]) -> list[Prompt]:
    """The built-in prompts named by ``keys`` (``suite/id``), in that order."""
    by_key = {p.key: p for p in load_suites()}
    return [by_key[k] for k in keys]
