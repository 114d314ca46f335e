"""GGUF metadata without loading weights: what a model file says about itself.

The header is parsed by `equiv.models.gguf_header` (arrays stepped over, tensor data only checked
to lie inside the file); this module reads the keys equiv needs into a `GGUFInfo`, the token
texts, and the ``tokenizer.*`` keys another file needs to carry the same vocabulary. Whether one
file's vocabulary may draft for another's is `equiv.models.vocab_compat`.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, TypeVar

import gguf

from equiv.errors import ModelError
from equiv.json_types import JSONDict, JSONObject
from equiv.models.gguf_header import TENSORS, TOKENS, Array, MetaValue, PathLike, scan

__all__ = [
    "GGUFInfo",
    "MetaValue",
    "read_gguf_info",
    "read_token_texts",
    "read_tokenizer_kv",
]

_T = TypeVar("_T")
_QUANTS = {t.value: t.name.split("_", 1)[1] for t in gguf.LlamaFileType if t.name != "GUESSED"}


@dataclass(frozen=True)
class GGUFInfo:
    """What a GGUF file says about itself; token texts come from `read_token_texts`."""

    path: str
    size_bytes: int
    sha256: str | None  # None when read with with_sha256=False
    architecture: str
    name: str | None
    file_type: int | None
    quant: str | None
    vocab_model: str
    vocab_pre: str | None
    vocab_size: int
    bos_id: int | None
    eos_id: int | None
    add_bos: bool | None
    add_eos: bool | None
    context_length: int | None
    nextn_predict_layers: int | None
    chat_template: str | None
    mtp_head: bool = False  # the last block has nextn.eh_proj: llama.cpp infers draft-mtp

    @property
    def inferred_spec_type(self) -> str | None:
        """The speculative type llama.cpp infers when this file is given as ``-md`` without
        ``--spec-type`` (``common_speculative_types_from_gguf``: an MTP head, else none)."""
        return "draft-mtp" if self.mtp_head else None

    def to_dict(self) -> JSONDict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: JSONObject) -> GGUFInfo:
        # JSON edge: the fields as written (the header records what the file said)
        kwargs: dict[str, Any] = {f.name: data.get(f.name) for f in fields(cls)}
        kwargs["mtp_head"] = bool(data.get("mtp_head", False))  # absent before issue 33
        return cls(**kwargs)


@functools.lru_cache(maxsize=64)
def _sha256(resolved: str, size: int, mtime_ns: int) -> str:
    digest = hashlib.sha256()
    with open(resolved, "rb") as f:
        while block := f.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def _get(kv: Mapping[str, object], key: str, kind: type[_T], path: Path) -> _T | None:
    value = kv.get(key)
    if value is None:
        return None
    if isinstance(value, kind) and not (kind is int and isinstance(value, bool)):
        return value
    shown = f"an array of {value.n:,} items" if isinstance(value, Array) else repr(value)
    raise ModelError(
        f"{str(path)!r}: key {key} is {shown}, expected {kind.__name__}; the converter that "
        "wrote it is broken, convert the model again"
    )


def read_gguf_info(path: PathLike, *, with_sha256: bool = True) -> GGUFInfo:
    """Read a GGUF file's metadata, not its weights; cached by (path, size, mtime), so the
    fingerprint of every run and every header does not rescan a 262,144-token vocabulary."""
    try:
        stat = Path(path).stat()
    except OSError:  # missing or unreadable: the uncached read names the problem
        return _read_gguf_info(str(path), with_sha256)
    return _cached_gguf_info(str(path), stat.st_size, stat.st_mtime_ns, with_sha256)


@functools.lru_cache(maxsize=64)
def _cached_gguf_info(path: str, size: int, mtime_ns: int, with_sha256: bool) -> GGUFInfo:
    return _read_gguf_info(path, with_sha256)


def _read_gguf_info(path: str, with_sha256: bool) -> GGUFInfo:
    p, kv, _ = scan(path, want_tokens=False)
    tokens = kv.get(TOKENS)
    if not isinstance(tokens, Array):
        raise ModelError(
            f"{str(p)!r} has no tokenizer (no {TOKENS} key); equiv needs the model's vocabulary,"
            " convert the model again with its tokenizer files next to the weights"
        )
    arch = _get(kv, "general.architecture", str, p)
    if arch is None:
        raise ModelError(f"{str(p)!r} has no general.architecture key; convert the model again")
    stat, file_type = p.stat(), _get(kv, "general.file_type", int, p)
    return GGUFInfo(
        path=str(p),
        size_bytes=stat.st_size,
        sha256=_sha256(str(p.resolve()), stat.st_size, stat.st_mtime_ns) if with_sha256 else None,
        architecture=arch,
        name=_get(kv, "general.name", str, p),
        file_type=file_type,
        quant=None if file_type is None else _QUANTS.get(file_type),
        vocab_model=_get(kv, "tokenizer.ggml.model", str, p) or "",
        vocab_pre=_get(kv, "tokenizer.ggml.pre", str, p),
        vocab_size=tokens.n,
        bos_id=_get(kv, "tokenizer.ggml.bos_token_id", int, p),
        eos_id=_get(kv, "tokenizer.ggml.eos_token_id", int, p),
        add_bos=_get(kv, "tokenizer.ggml.add_bos_token", bool, p),
        add_eos=_get(kv, "tokenizer.ggml.add_eos_token", bool, p),
        context_length=_get(kv, f"{arch}.context_length", int, p),
        nextn_predict_layers=_get(kv, f"{arch}.nextn_predict_layers", int, p),
        chat_template=_get(kv, "tokenizer.chat_template", str, p),
        mtp_head=_has_mtp_head(kv, arch, p),
    )


def _has_mtp_head(kv: Mapping[str, object], arch: str, path: Path) -> bool:
    """llama.cpp's test (``common_speculative_types_from_gguf``): the last block of the file has
    a ``nextn.eh_proj`` tensor."""
    blocks = _get(kv, f"{arch}.block_count", int, path)
    names = kv.get(TENSORS)
    return (
        blocks is not None
        and isinstance(names, frozenset)
        and f"blk.{blocks - 1}.nextn.eh_proj.weight" in names
    )


def read_token_texts(path: PathLike) -> list[str]:
    """The text of every token id, as stored in ``tokenizer.ggml.tokens``."""
    p, _, texts = scan(path, want_tokens=True)
    if texts is None:
        raise ModelError(f"{str(p)!r} has no tokenizer (no {TOKENS} string array)")
    return texts


def read_tokenizer_kv(path: PathLike) -> dict[str, MetaValue]:
    """Every ``tokenizer.*`` key of a GGUF file with its stored type, arrays decoded: what another
    file needs to carry the same vocabulary (a few tenths of a second for 262,144 tokens)."""
    p, kv, _ = scan(path, want_tokens=False, copy_prefix="tokenizer.")
    if TOKENS not in kv:
        raise ModelError(f"{str(p)!r} has no tokenizer (no {TOKENS} string array)")
    return {k: v for k, v in kv.items() if isinstance(v, MetaValue)}
