"""The GGUF header, parsed from a memory map: keys, values and tensor positions, without weights.

Arrays the caller does not need are stepped over, not decoded (`gguf.GGUFReader` takes ~8 s on a
262,144-token vocabulary); tensor data is only checked to lie inside the file. What the keys mean
is `equiv.models.gguf`'s business; this module knows the file format.
"""

from __future__ import annotations

import math
import mmap
import os
import struct
from pathlib import Path
from typing import NamedTuple

import gguf

from equiv.errors import ModelError

__all__ = ["TENSORS", "TOKENS", "Array", "MetaValue", "PathLike", "scan"]

PathLike = str | os.PathLike[str]
_STRING, _ARRAY = 8, 9  # gguf.GGUFValueType; the scalar types map to struct formats:
_SCALARS = dict(zip((0, 1, 2, 3, 4, 5, 6, 7, 10, 11, 12), "BbHhIif?Qqd", strict=True))
#: The key of the token texts.
TOKENS = "tokenizer.ggml.tokens"
#: Not a GGUF key: where `scan` puts the tensor names.
TENSORS = "\0tensor names"


class _Corrupt(Exception):
    """The header does not parse; the message says where."""


class Array(NamedTuple):
    """An array `scan` stepped over: its item type, length and where its first item lies."""

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
    """A cursor over the header of a memory-mapped GGUF file."""

    def __init__(self, buf: mmap.mmap) -> None:
        self.buf, self.pos, self.size, self.order = buf, 4, len(buf), "<"
        self.types: dict[str, int] = {}
        self.tensor_names: frozenset[str] = frozenset()

    def decode(self, arr: Array) -> list[object]:
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

    def scalar(self, fmt: str) -> int | float:
        """The next value, of struct format ``fmt`` (``?`` gives a bool, an int)."""
        st = struct.Struct(self.order + fmt)
        if self.pos + st.size > self.size:
            raise _Corrupt(f"the header runs past the end of the file at byte {self.pos:,}")
        self.pos += st.size
        value: int | float = st.unpack_from(self.buf, self.pos - st.size)[0]
        return value

    def unpack(self, fmt: str) -> int:
        """The next unsigned integer (``I`` or ``Q``): a version, a count, a type or an offset."""
        value = self.scalar(fmt)
        assert isinstance(value, int), fmt
        return value

    def raw_string(self) -> bytes:
        n = self.unpack("Q")
        if self.pos + n > self.size:
            raise _Corrupt(f"a {n:,}-byte string at byte {self.pos:,} runs past the end")
        self.pos += n
        return bytes(self.buf[self.pos - n : self.pos])

    def value(self, vtype: int) -> object:
        if vtype in _SCALARS:
            return self.scalar(_SCALARS[vtype])
        if vtype == _STRING:
            return self.raw_string().decode("utf-8")
        if vtype != _ARRAY:
            raise _Corrupt(f"unknown value type {vtype} at byte {self.pos:,}")
        item_type, count = self.unpack("I"), self.unpack("Q")
        arr = Array(item_type, count, self.pos)
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
            block, type_size = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType(ttype)]
            end = data_start + offset + math.prod(dims) * type_size // block
            if end > self.size:
                raise _Corrupt(f"tensor {name!r} data ends at byte {end:,}, past the end of file")
        tokens = kv.get(TOKENS)
        if not want_tokens or not isinstance(tokens, Array) or tokens.item_type != _STRING:
            return kv, None
        u64, buf, pos, texts = struct.Struct(self.order + "Q"), self.buf, tokens.offset, []
        for _ in range(tokens.n):  # invalid UTF-8 survives as surrogates: compare by byte
            n = u64.unpack_from(buf, pos)[0]
            texts.append(bytes(buf[pos + 8 : pos + 8 + n]).decode("utf-8", "surrogateescape"))
            pos += 8 + n
        return kv, texts


def scan(
    path: PathLike, *, want_tokens: bool, copy_prefix: str | None = None
) -> tuple[Path, dict[str, object], list[str] | None]:
    """The header's keys and values (arrays as `Array` positions), the token texts if wanted;
    keys under ``copy_prefix`` come back whole, as `MetaValue`; the tensor names under
    `TENSORS`."""
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
                kv[TENSORS] = parser.tensor_names
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


def _meta(parser: _Parser, key: str, value: object) -> MetaValue:
    vtype = gguf.GGUFValueType(parser.types[key])
    if isinstance(value, Array):
        return MetaValue(vtype, parser.decode(value), gguf.GGUFValueType(value.item_type))
    return MetaValue(vtype, value)
