"""GGUF metadata without loading weights, and llama.cpp's draft/target vocabulary rules.

Parses the header from a memory map, stepping over arrays it does not need (`gguf.GGUFReader`
takes ~8 s on a 262,144-token vocabulary); tensor data is only checked to lie inside the file.
"""

from __future__ import annotations

import functools
import hashlib
import math
import mmap
import os
import struct
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

import gguf

from equiv.errors import ModelError, VocabMismatchError
from equiv.json_types import JSONDict, JSONObject, json_list, json_object

__all__ = [
    "SPEC_VOCAB_CHECK_START_TOKEN_ID",
    "SPEC_VOCAB_MAX_SIZE_DIFFERENCE",
    "GGUFInfo",
    "VocabReport",
    "check_vocab_compat",
    "read_gguf_info",
    "read_token_texts",
    "read_tokenizer_kv",
    "require_vocab_compat",
]

#: llama.cpp ``common/speculative.cpp``: the most the two vocab sizes may differ by.
SPEC_VOCAB_MAX_SIZE_DIFFERENCE = 128
#: llama.cpp ``common/speculative.cpp``: token texts are compared from this id on.
SPEC_VOCAB_CHECK_START_TOKEN_ID = 5

PathLike = str | os.PathLike[str]
_T = TypeVar("_T")
_STRING, _ARRAY = 8, 9  # gguf.GGUFValueType; the scalar types map to struct formats:
_SCALARS = dict(zip((0, 1, 2, 3, 4, 5, 6, 7, 10, 11, 12), "BbHhIif?Qqd", strict=True))
_TOKENS = "tokenizer.ggml.tokens"
_TENSORS = "\0tensor names"  # not a GGUF key: where `_scan` puts the tensor names
_QUANTS = {t.value: t.name.split("_", 1)[1] for t in gguf.LlamaFileType if t.name != "GUESSED"}

# llama_vocab::impl::load: tokenizer.ggml.model -> (llama_vocab_type, and the defaults the
# file's keys override: bos id, eos id, add_bos, add_eos)
# fmt: off
_VOCABS: dict[str, tuple[str, int | None, int | None, bool, bool]] = {
    "llama": ("SPM", 1, 2, True, False), "bert": ("WPM", 101, None, True, False),
    "gpt2": ("BPE", 11, 11, False, False), "hybriddna": ("BPE", 11, 11, False, False),
    "whitespace": ("BPE", 11, 11, False, False), "gemma4": ("BPE", None, None, False, False),
    "t5": ("UGM", None, 1, False, True), "rwkv": ("RWKV", None, None, False, False),
    "plamo2": ("PLAMO2", 1, 2, False, False),
}
# BPE pre-tokenizers (tokenizer.ggml.pre) that turn add_bos on, drop the BOS id, force add_bos
_PRE_ADD_BOS = frozenset({"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral",
                          "midm-2.0", "lfm2", "jina-v5-nano", "tekken", "chameleon"})
_PRE_NO_BOS = frozenset({"glm4", "chatglm-bpe"})
_PRE_FORCE_BOS = frozenset({"gemma4", "granite-embed-multi-311m"})
# fmt: on


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
    def from_dict(cls, data: Mapping[str, Any]) -> GGUFInfo:
        kwargs: dict[str, Any] = {f.name: data.get(f.name) for f in fields(cls)}
        kwargs["mtp_head"] = bool(data.get("mtp_head", False))  # absent before issue 33
        return cls(**kwargs)


@dataclass(frozen=True)
class VocabReport:
    """Whether llama.cpp accepts `draft` as a draft for `target`; notes never fail the pair."""

    compatible: bool
    reasons: tuple[str, ...]
    notes: tuple[str, ...]
    target: GGUFInfo
    draft: GGUFInfo

    def to_dict(self) -> JSONDict:
        return {**asdict(self), "reasons": list(self.reasons), "notes": list(self.notes)}

    @classmethod
    def from_dict(cls, data: JSONObject) -> VocabReport:
        target = GGUFInfo.from_dict(json_object(data["target"]))
        draft = GGUFInfo.from_dict(json_object(data["draft"]))
        reasons = tuple(str(r) for r in json_list(data["reasons"]))
        notes = tuple(str(n) for n in json_list(data.get("notes", ())))
        return cls(bool(data["compatible"]), reasons, notes, target, draft)


class _Corrupt(Exception):
    """The header does not parse; the message says where."""


class _Array(NamedTuple):
    item_type: int
    n: int
    offset: int  # of the first element


class MetaValue(NamedTuple):
    """One metadata value as stored, to be written again (`gguf.GGUFWriter.add_key_value`):
    string arrays as lists of raw bytes, numeric arrays as lists of numbers."""

    type: gguf.GGUFValueType
    value: object
    item_type: gguf.GGUFValueType | None = None


class _Parser:
    def __init__(self, buf: mmap.mmap) -> None:
        self.buf, self.pos, self.size, self.order = buf, 4, len(buf), "<"
        self.types: dict[str, int] = {}
        self.tensor_names: frozenset[str] = frozenset()

    def decode(self, arr: _Array) -> list[object]:
        """The items of an array that `value` stepped over (strings as raw bytes)."""
        if arr.item_type in _SCALARS:
            fmt = f"{self.order}{arr.n}{_SCALARS[arr.item_type]}"
            return list(struct.unpack_from(fmt, self.buf, arr.offset))
        if arr.item_type != _STRING:
            raise _Corrupt(f"an array of type {arr.item_type} is not one equiv copies")
        u64, buf, pos = struct.Struct(self.order + "Q"), self.buf, arr.offset
        items: list[object] = []
        for _ in range(arr.n):
            n = u64.unpack_from(buf, pos)[0]
            items.append(bytes(buf[pos + 8 : pos + 8 + n]))
            pos += 8 + n
        return items

    def unpack(self, fmt: str) -> Any:
        st = struct.Struct(self.order + fmt)
        if self.pos + st.size > self.size:
            raise _Corrupt(f"the header runs past the end of the file at byte {self.pos:,}")
        self.pos += st.size
        return st.unpack_from(self.buf, self.pos - st.size)[0]

    def raw_string(self) -> bytes:
        n = self.unpack("Q")
        if self.pos + n > self.size:
            raise _Corrupt(f"a {n:,}-byte string at byte {self.pos:,} runs past the end")
        self.pos += n
        return bytes(self.buf[self.pos - n : self.pos])

    def value(self, vtype: int) -> object:
        if vtype in _SCALARS:
            return self.unpack(_SCALARS[vtype])
        if vtype == _STRING:
            return self.raw_string().decode("utf-8")
        if vtype != _ARRAY:
            raise _Corrupt(f"unknown value type {vtype} at byte {self.pos:,}")
        item_type, count = self.unpack("I"), self.unpack("Q")
        arr = _Array(item_type, count, self.pos)
        if item_type in _SCALARS:
            self.pos += count * struct.calcsize(_SCALARS[item_type])
        elif item_type == _STRING:  # the hot loop: 262,144 token texts to step over
            u64, buf, pos = struct.Struct(self.order + "Q"), self.buf, self.pos
            for _ in range(count):
                pos += 8 + u64.unpack_from(buf, pos)[0]
            self.pos = pos
        else:
            for _ in range(count):
                self.value(item_type)
        if self.pos > self.size:
            raise _Corrupt(f"an array of {count:,} items runs past the end of the file")
        return arr

    def scan(self, *, want_tokens: bool) -> tuple[dict[str, object], list[str] | None]:
        """Parse the header, check every tensor's data lies in the file, decode token texts."""
        version = self.unpack("I")
        if version & 0xFFFF == 0 and version:  # written on a big-endian machine
            self.pos, self.order = 4, ">"
            version = self.unpack("I")
        if version not in (2, 3):
            raise _Corrupt(f"GGUF version {version} is not one equiv reads (2 or 3)")
        n_tensors, n_kv = self.unpack("Q"), self.unpack("Q")
        kv: dict[str, object] = {}
        for _ in range(n_kv):
            key = self.raw_string().decode("utf-8")
            self.types[key] = vtype = self.unpack("I")
            kv[key] = self.value(vtype)
        tensors = []
        for _ in range(n_tensors):
            name = self.raw_string().decode("utf-8", "replace")
            dims = [self.unpack("Q") for _ in range(self.unpack("I"))]
            tensors.append((name, dims, self.unpack("I"), self.unpack("Q")))
        self.tensor_names = frozenset(t[0] for t in tensors)
        align = kv.get("general.alignment", gguf.GGUF_DEFAULT_ALIGNMENT)
        if not isinstance(align, int) or align <= 0 or align & (align - 1):
            raise _Corrupt(f"general.alignment is {align!r}, not a power of two")
        data_start = -(-self.pos // align) * align
        for name, dims, ttype, offset in tensors:
            if ttype not in gguf.GGML_QUANT_SIZES:
                raise _Corrupt(f"tensor {name!r} has unknown type {ttype}")
            block, type_size = gguf.GGML_QUANT_SIZES[ttype]
            end = data_start + offset + math.prod(dims) * type_size // block
            if end > self.size:
                raise _Corrupt(f"tensor {name!r} data ends at byte {end:,}, past the end of file")
        tokens = kv.get(_TOKENS)
        if not want_tokens or not isinstance(tokens, _Array) or tokens.item_type != _STRING:
            return kv, None
        u64, buf, pos, texts = struct.Struct(self.order + "Q"), self.buf, tokens.offset, []
        for _ in range(tokens.n):  # invalid UTF-8 survives as surrogates: compare by byte
            n = u64.unpack_from(buf, pos)[0]
            texts.append(bytes(buf[pos + 8 : pos + 8 + n]).decode("utf-8", "surrogateescape"))
            pos += 8 + n
        return kv, texts


def _scan(
    path: PathLike, *, want_tokens: bool, copy_prefix: str | None = None
) -> tuple[Path, dict[str, object], list[str] | None]:
    """The header's keys and values (arrays as `_Array` positions), the token texts if wanted;
    keys under ``copy_prefix`` come back whole, as `MetaValue`; the tensor names under
    `_TENSORS`."""
    p = Path(path)
    if not p.exists():
        raise ModelError(f"model file {str(p)!r} does not exist; pass the path of a .gguf file")
    if p.is_dir():
        found = ", ".join(sorted(x.name for x in p.glob("*.gguf"))[:5])
        raise ModelError(
            f"{str(p)!r} is a directory, not a model file{f' (it holds {found})' if found else ''};"
            " pass the path of a .gguf file"
        )
    try:
        with p.open("rb") as f:
            if (magic := f.read(4)) != b"GGUF":
                what = f"starts with {magic!r}" if len(magic) == 4 else f"has {len(magic)} bytes"
                raise ModelError(
                    f"{str(p)!r} is not a GGUF file: it {what}, a GGUF file starts with b'GGUF';"
                    " pass a .gguf model (convert others with llama.cpp's convert_hf_to_gguf.py)"
                )
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
                parser = _Parser(buf)
                kv, texts = parser.scan(want_tokens=want_tokens)
                kv[_TENSORS] = parser.tensor_names
                if copy_prefix is not None:
                    copied = {k: v for k, v in kv.items() if k.startswith(copy_prefix)}
                    kv = {k: _meta(parser, k, v) for k, v in copied.items()}
                return p, kv, texts
    except (_Corrupt, struct.error, UnicodeDecodeError, ValueError, OverflowError) as exc:
        raise ModelError(
            f"{str(p)!r} is truncated or corrupt: {exc} (file size {p.stat().st_size:,} bytes); "
            "download or convert it again"
        ) from None
    except OSError as exc:
        raise ModelError(f"cannot read model file {str(p)!r}: {exc}; check permissions") from exc


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
    shown = f"an array of {value.n:,} items" if isinstance(value, _Array) else repr(value)
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
    p, kv, _ = _scan(path, want_tokens=False)
    tokens = kv.get(_TOKENS)
    if not isinstance(tokens, _Array):
        raise ModelError(
            f"{str(p)!r} has no tokenizer (no {_TOKENS} key); equiv needs the model's vocabulary,"
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
    names = kv.get(_TENSORS)
    return (
        blocks is not None
        and isinstance(names, frozenset)
        and f"blk.{blocks - 1}.nextn.eh_proj.weight" in names
    )


def read_token_texts(path: PathLike) -> list[str]:
    """The text of every token id, as stored in ``tokenizer.ggml.tokens``."""
    p, _, texts = _scan(path, want_tokens=True)
    if texts is None:
        raise ModelError(f"{str(p)!r} has no tokenizer (no {_TOKENS} string array)")
    return texts


def read_tokenizer_kv(path: PathLike) -> dict[str, MetaValue]:
    """Every ``tokenizer.*`` key of a GGUF file with its stored type, arrays decoded: what another
    file needs to carry the same vocabulary (a few tenths of a second for 262,144 tokens)."""
    p, kv, _ = _scan(path, want_tokens=False, copy_prefix="tokenizer.")
    if _TOKENS not in kv:
        raise ModelError(f"{str(p)!r} has no tokenizer (no {_TOKENS} string array)")
    return {k: v for k, v in kv.items() if isinstance(v, MetaValue)}


def _meta(parser: _Parser, key: str, value: object) -> MetaValue:
    vtype = gguf.GGUFValueType(parser.types[key])
    if isinstance(value, _Array):
        return MetaValue(vtype, parser.decode(value), gguf.GGUFValueType(value.item_type))
    return MetaValue(vtype, value)


def _specials(info: GGUFInfo) -> tuple[bool, int | None, bool, int | None]:
    """(add_bos, bos, add_eos, eos) as llama.cpp's vocab loader ends up with them."""
    _, bos, eos, add_bos, add_eos = _VOCABS.get(info.vocab_model, ("", 1, 2, False, False))
    pre = "gemma4" if info.vocab_model == "gemma4" else info.vocab_pre
    if _vocab_type(info) == "BPE":
        add_bos = pre in _PRE_ADD_BOS
        bos = None if pre in _PRE_NO_BOS else bos
    n = info.vocab_size  # a default id out of range is dropped, a file id out of range ignored
    bos = next((i for i in (info.bos_id, bos) if i is not None and i < n), None)
    eos = next((i for i in (info.eos_id, eos) if i is not None and i < n), None)
    add_bos = add_bos if info.add_bos is None else info.add_bos
    add_eos = add_eos if info.add_eos is None else info.add_eos
    return add_bos or pre in _PRE_FORCE_BOS, bos, add_eos, eos


def _vocab_type(info: GGUFInfo) -> str:
    return _VOCABS[info.vocab_model][0] if info.vocab_model in _VOCABS else info.vocab_model


def _special_reason(
    what: str, t: tuple[bool, int | None], d: tuple[bool, int | None], notes: list[str]
) -> list[str]:
    (t_add, t_id), (d_add, d_id) = t, d
    if t_add != d_add:
        return [f"add_{what.lower()} differs: target {t_add}, draft {d_add}"]
    if t_id != d_id and t_add:
        return [f"{what} ids differ: target {t_id}, draft {d_id} (both add {what})"]
    if t_id != d_id:
        notes.append(
            f"{what} ids differ (target {t_id}, draft {d_id}) but neither model adds {what}: "
            "current llama.cpp accepts this, older builds compared the ids and refuse the pair"
        )
    return []


def check_vocab_compat(
    target_path: PathLike, draft_path: PathLike, *, with_sha256: bool = True
) -> VocabReport:
    """Apply llama.cpp's ``common_speculative_are_compatible`` (``common/speculative.cpp``).

    Refused when the vocab types (``tokenizer.ggml.model``) differ; add_bos differs, or both add
    BOS with different ids; the same for EOS; the sizes differ by more than
    ``SPEC_VOCAB_MAX_SIZE_DIFFERENCE`` (128); or a token text differs for an id from
    ``SPEC_VOCAB_CHECK_START_TOKEN_ID`` (5) up to the smaller size. BOS/EOS are what llama.cpp's
    loader would use (its per-type defaults where the file is silent). Lists every reason.
    """
    target = read_gguf_info(target_path, with_sha256=with_sha256)
    notes: list[str] = []
    if target.nextn_predict_layers:
        notes.append(
            f"target has {target.nextn_predict_layers} multi-token-prediction layers; llama.cpp's "
            "built-in MTP speculative path is the alternative to a separate draft"
        )
    if Path(target.path).resolve() == Path(draft_path).resolve():
        notes.append("target and draft are the same file")
        return VocabReport(True, (), tuple(notes), target, target)
    draft = read_gguf_info(draft_path, with_sha256=with_sha256)
    reasons: list[str] = []
    if _vocab_type(target) != _vocab_type(draft):
        reasons.append(
            f"vocab types differ: target {target.vocab_model!r} ({_vocab_type(target)}), "
            f"draft {draft.vocab_model!r} ({_vocab_type(draft)})"
        )
    ts, ds = _specials(target), _specials(draft)
    reasons += _special_reason("BOS", ts[:2], ds[:2], notes)
    reasons += _special_reason("EOS", ts[2:], ds[2:], notes)
    n_t, n_d = target.vocab_size, draft.vocab_size
    sizes = f"(target {n_t:,}, draft {n_d:,})"
    if abs(n_t - n_d) > SPEC_VOCAB_MAX_SIZE_DIFFERENCE:
        reasons.append(
            f"vocab sizes differ by {abs(n_t - n_d):,} {sizes}; llama.cpp allows at most "
            f"{SPEC_VOCAB_MAX_SIZE_DIFFERENCE}"
        )
    elif n_t != n_d:
        notes.append(
            f"vocab sizes differ by {abs(n_t - n_d):,} {sizes}, within llama.cpp's allowance; ids"
            f" {min(n_t, n_d):,}+ exist only in the {'draft' if n_d > n_t else 'target'}"
        )
    t_texts, d_texts = read_token_texts(target.path), read_token_texts(draft.path)
    start, stop = SPEC_VOCAB_CHECK_START_TOKEN_ID, min(n_t, n_d)
    if t_texts[start:stop] != d_texts[start:stop]:
        i = next(i for i in range(start, stop) if t_texts[i] != d_texts[i])
        reasons.append(
            f"token {i:,} differs: target {t_texts[i]!r}, draft {d_texts[i]!r} (first mismatch)"
        )
    return VocabReport(not reasons, tuple(reasons), tuple(notes), target, draft)


def require_vocab_compat(
    target_path: PathLike, draft_path: PathLike, *, with_sha256: bool = True
) -> VocabReport:
    """`check_vocab_compat`, raising `VocabMismatchError` that lists every reason."""
    report = check_vocab_compat(target_path, draft_path, with_sha256=with_sha256)
    if not report.compatible:
        raise VocabMismatchError(
            f"draft {report.draft.path!r} cannot be used with target {report.target.path!r}: "
            + "; ".join(report.reasons)
            + ". Use a draft from the same model family, converted with the same tokenizer"
        )
    return report
