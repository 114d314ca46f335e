"""One codec for equiv's frozen records: a dataclass to the JSON the results file holds, and back.

`encode` writes a dataclass field by field, in the order of its fields: Enums as their values,
tuples as arrays, mappings as objects, nested records the same way. `decode` reads it back by the
field types, checking each value and naming the field on any error (`FieldError`): a field
missing from the JSON takes its default (files written before it existed), an unknown key is
ignored. Fields typed as JSON (`equiv.json_types`) are taken as they are, an object checked to be
one.

Two field options, given as ``field(metadata=...)``:

- ``ROUND: n``: a float written rounded to ``n`` decimals (the figures files hold);
- ``OMIT: value``: the key left out where the field holds ``value`` (a default that files
  written before it do not have).

Records whose file form is not their fields one to one (a header that merges its extra keys in,
a result whose evidence sits beside each generation) keep their own ``to_dict``/``from_dict``
and use this codec for their parts.
"""

from __future__ import annotations

import dataclasses
import enum
import math
import sys
import types
import typing
from collections.abc import Mapping, Sequence
from functools import cache
from typing import Any, TypeVar, Union

from equiv.json_types import JSONDict, JSONValue
from equiv.records.fields import FieldError

__all__ = ["OMIT", "ROUND", "decode", "encode"]

T = TypeVar("T")

ROUND = "equiv.codec.round"
OMIT = "equiv.codec.omit"


class _Raw:
    """The type of a field declared as JSON: taken as it is."""


class _RawObject:
    """The type of a field declared as a JSON object: checked to be one, then taken as it is."""


_ALIASES = {"JSONValue": _Raw, "JSONScalar": _Raw, "JSONObject": _RawObject, "JSONDict": _RawObject}


@cache
def _hints(cls: type) -> dict[str, Any]:
    """The field types of ``cls``, its JSON aliases read as `_Raw`/`_RawObject`."""
    module = sys.modules[cls.__module__]
    return typing.get_type_hints(cls, globalns={**vars(module), **_ALIASES})


def _plain(value: Any, digits: int | None) -> JSONValue:
    if isinstance(value, enum.Enum):
        return _plain(value.value, digits)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return encode(value)
    if isinstance(value, float) and digits is not None and math.isfinite(value):
        return round(value, digits)
    if isinstance(value, Mapping):
        return {str(k): _plain(v, digits) for k, v in value.items()}
    if isinstance(value, tuple | list):
        return [_plain(v, digits) for v in value]
    if value is None or isinstance(value, str | int | float | bool):
        return value
    raise TypeError(f"cannot encode {type(value).__name__} as JSON")


def encode(record: object) -> JSONDict:
    """``record`` (a dataclass instance) as the JSON object the file holds."""
    out: JSONDict = {}
    for f in dataclasses.fields(record):  # type: ignore[arg-type]
        value = getattr(record, f.name)
        if OMIT in f.metadata and value == f.metadata[OMIT]:
            continue
        out[f.name] = _plain(value, f.metadata.get(ROUND))
    return out


def _found(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, Mapping):
        return "an object"
    if isinstance(value, list | tuple):
        return "an array"
    return f"{type(value).__name__} {value!r}"[:80]


def _value(kind: Any, data: Any, where: str) -> Any:
    """``data`` read as ``kind``, or `FieldError` at ``where``."""
    origin = typing.get_origin(kind)
    args = typing.get_args(kind)
    if kind is _Raw or kind is Any:
        return data
    if origin in (Union, types.UnionType):
        if data is None and type(None) in args:
            return None
        others = [a for a in args if a is not type(None)]
        if len(others) == 1:
            return _value(others[0], data, where)
        for option in others:  # the first that reads it
            try:
                return _value(option, data, where)
            except FieldError:
                continue
        raise FieldError(where, f"expected {kind}, found {_found(data)}")
    if kind is _RawObject or origin in (Mapping, dict) or kind is dict:
        if not isinstance(data, Mapping):
            raise FieldError(where, f"expected an object, found {_found(data)}")
        if kind is _RawObject or not args:
            return data
        return {str(k): _value(args[1], v, f"{where}.{k}") for k, v in data.items()}
    if origin in (tuple, Sequence, list) or kind in (tuple, list):
        if not isinstance(data, list | tuple):
            raise FieldError(where, f"expected an array, found {_found(data)}")
        if (len(args) == 2 and args[1] is Ellipsis) or origin in (Sequence, list):
            items = [_value(args[0], v, f"{where}[{i}]") for i, v in enumerate(data)]
        elif args:
            if len(args) != len(data):
                raise FieldError(where, f"expected {len(args)} items, found {len(data)}")
            pairs = enumerate(zip(args, data, strict=True))
            items = [_value(a, v, f"{where}[{i}]") for i, (a, v) in pairs]
        else:
            items = list(data)
        return items if origin is list else tuple(items)
    if isinstance(kind, type) and dataclasses.is_dataclass(kind):
        return decode(kind, data, where)
    if isinstance(kind, type) and issubclass(kind, enum.Enum):
        try:
            return kind(data)
        except ValueError:
            allowed = ", ".join(str(m.value) for m in kind)
            raise FieldError(where, f"{_found(data)} is not one of {allowed}") from None
    return _scalar(kind, data, where)


def _scalar(kind: Any, data: Any, where: str) -> Any:
    if kind is bool:
        if isinstance(data, bool):
            return data
    elif kind is int:
        if isinstance(data, int) and not isinstance(data, bool):
            return data
    elif kind is float:
        if isinstance(data, int | float) and not isinstance(data, bool):
            return float(data)
    elif kind is str:
        if isinstance(data, str):
            return data
    else:
        raise TypeError(f"{where}: the codec cannot read type {kind!r}")
    return _fail(kind, data, where)


def _fail(kind: type, data: Any, where: str) -> Any:
    words = {bool: "a boolean", int: "an integer", float: "a number", str: "a string"}
    raise FieldError(where, f"expected {words[kind]}, found {_found(data)}")


def decode(cls: type[T], data: Any, where: str = "") -> T:
    """The record of type ``cls`` (a dataclass) that ``data`` holds; `FieldError` names the field
    that is missing or of the wrong type (``where``: the object's own dotted path)."""
    if not isinstance(data, Mapping):
        raise FieldError(where or cls.__name__, f"expected an object, found {_found(data)}")
    hints = _hints(typing.cast(type, cls))
    values: dict[str, Any] = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        if not f.init:
            continue
        name = f"{where}.{f.name}" if where else f.name
        if f.name not in data:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise FieldError(name, "missing")
            continue
        values[f.name] = _value(hints[f.name], data[f.name], name)
    return cls(**values)
