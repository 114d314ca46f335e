"""Loading a GGUF into llama-cpp-python: one copy of a file's weights per process.

Why: the baseline and the speculative path each need a context of their own on the *same*
target (different output settings, different caches), and llama-cpp-python's `Llama` loads its
own model every time. Two loads of one file map it twice, and the resident pages count twice:
the bundled 253 MB target cost 506 MB of resident memory for one set of weights. llama.cpp
itself lets many contexts share one model (its weights are read-only during inference), so
`load_llama` hands a second `Llama` on the same file the model the first one loaded; the model is
freed when the last `Llama` using it is closed. Numerics do not change: each context still has
its own KV cache, compute buffers and threads over identical weights.

Where llama.cpp was built with its AMX kernels (`AMX`: an x86 CPU with AMX-INT8, built with
``-march=native``), every model loads without llama.cpp's extra buffer types (the AMX and
repacked weight layouts): on some hosts with AMX the AMX matrix multiply segfaults on the first
decode (llama.cpp issue 20824, `ggml_backend_amx_mul_mat`; seen here on a virtualized Xeon with
AMX-INT8, the bundled Q4_K_M target: `scripts/amx_check.py`). Both paths load alike, so the
comparison is unchanged; the machine record's llama.cpp line (``AMX_INT8 = 1``) says so.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from typing import Any

import llama_cpp
import numpy as np
from llama_cpp import _internals

from equiv.config import RunConfig
from equiv.errors import ModelError
from equiv.models.quiet import quiet_stderr

__all__ = ["AMX", "load_llama", "reset", "shared_models"]

#: llama.cpp here has its AMX kernels (built for a CPU with AMX-INT8): models load without the
#: extra buffer types (this module's docstring).
AMX = "AMX_INT8 = 1" in llama_cpp.llama_print_system_info().decode(errors="replace")

_lock = threading.RLock()
#: Loaded models by file identity: (the llama-cpp-python model wrapper, its user count).
_models: dict[tuple[str, int, int], list[Any]] = {}


class _SharedModel:
    """What a `Llama` holds as its model when the model is shared: the loaded wrapper, except
    that ``close`` frees it only when its last user closes. ``entry`` is the registry's
    ``[wrapper, users]``, already counting this user."""

    def __init__(self, key: tuple[str, int, int], entry: list[Any]) -> None:
        self._key, self._entry, self._inner = key, entry, entry[0]
        self._open = True

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def close(self) -> None:
        with _lock:
            if not self._open:
                return
            self._open = False
            self._entry[1] -= 1
            if self._entry[1] == 0:
                if _models.get(self._key) is self._entry:
                    del _models[self._key]
                self._inner.close()


def _identity(path: str) -> tuple[str, int, int]:
    st = os.stat(path)
    return (os.path.realpath(path), st.st_size, st.st_mtime_ns)


@contextlib.contextmanager
def _loading(key: tuple[str, int, int] | None) -> Iterator[None]:
    """While a `Llama` is constructed: without the extra buffer types where `AMX`, and, for
    ``key``, its model the shared one (loaded on first use). The lock keeps the swap of
    llama-cpp-python's model class to one construction; a model asked for by another thread
    meanwhile, or for another file, loads as usual. The user is counted before its proxy
    exists, so a garbage collection that closes an old `Llama` on the same file in between
    cannot free the model under it."""
    loader = _internals.LlamaModel
    constructing = threading.get_ident()

    def model(**kwargs: Any) -> Any:
        if threading.get_ident() != constructing:
            return loader(**kwargs)
        if AMX:
            kwargs["params"].use_extra_bufts = False
        path = kwargs.get("path_model")
        if key is None or not path or os.path.realpath(path) != key[0]:
            return loader(**kwargs)
        entry = _models.get(key)
        if entry is None:
            entry = [loader(**kwargs), 0]
            _models[key] = entry
        entry[1] += 1
        return _SharedModel(key, entry)

    with _lock:
        vars(_internals)["LlamaModel"] = model  # what llama.py's `Llama` calls to load
        try:
            yield
        finally:
            vars(_internals)["LlamaModel"] = loader


def shared_models() -> dict[str, int]:
    """The models loaded now, by path, with the number of `Llama` objects using each."""
    with _lock:
        return {key[0]: users for key, (_, users) in _models.items()}


def load_llama(path: str, config: RunConfig, *, logits_all: bool, **kwargs: Any) -> Any:
    """A `Llama` over ``path`` with the run's context settings; its weights are shared with any
    other open `Llama` on the same file (unless ``kwargs`` set more than the draft model: other
    keywords may change how the model itself loads)."""
    try:
        key = _identity(path) if set(kwargs) <= {"draft_model"} else None
        with quiet_stderr(), _loading(key):
            return llama_cpp.Llama(
                model_path=path,
                n_ctx=config.n_ctx,
                n_batch=config.n_batch,
                n_ubatch=config.n_ubatch,
                n_threads=config.n_threads,
                n_threads_batch=config.n_threads,
                flash_attn=config.flash_attn,
                logits_all=logits_all,
                seed=1,
                verbose=False,
                **kwargs,
            )
    except (ValueError, RuntimeError, OSError) as exc:
        raise ModelError(
            f"llama.cpp could not load {path!r} ({exc}); check that it is a complete GGUF file "
            f"of an architecture llama-cpp-python {llama_cpp.__version__} supports"
        ) from None


def reset(llm: Any) -> None:
    """``llm.reset()`` for a new prompt, with a fresh score buffer where it keeps every row.

    With ``logits_all`` llama-cpp-python stores each evaluated row at its absolute position in
    ``scores`` (n_ctx x vocabulary: 2 GiB of address space for Gemma at n_ctx 2048), and a page
    once written stays resident. Prompts of different lengths write rows at different
    positions, so over a run the resident part grew by about 80 MiB per long prompt. After a
    reset every row is evaluated again before it is read, so a new, untouched buffer changes
    nothing but the memory: the old one is returned to the system.
    """
    llm.reset()
    if llm._logits_all:
        llm.scores = np.ndarray(llm.scores.shape, dtype=np.single)
