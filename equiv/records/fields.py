"""Typed access to the fields of one JSON object, naming the field on any error.

Every record of the results file is read through `Fields`: a missing field or a value of the
wrong type raises `FieldError` with the field's dotted path (``baseline.tokens``) and what was
found, which `equiv.records.reader` turns into "line N: field: message".
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, NoReturn

from equiv.errors import describe
from equiv.json_types import JSONObject

__all__ = ["REQUIRED", "FieldError", "Fields", "describe"]


class FieldError(ValueError):
    """A field that is missing or holds a value of the wrong type or range."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


class _Required:
    def __repr__(self) -> str:
        return "REQUIRED"


#: The default of a field that must be present.
REQUIRED: Any = _Required()


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


class Fields:
    """The fields of one JSON object; ``where`` is its own dotted path (empty at the top)."""

    __slots__ = ("data", "where")

    def __init__(self, data: Any, where: str = "") -> None:
        if not isinstance(data, Mapping):
            raise FieldError(where or "record", f"expected an object, found {describe(data)}")
        self.data: JSONObject = data
        self.where = where

    def name(self, key: str) -> str:
        return f"{self.where}.{key}" if self.where else key

    def fail(self, key: str, message: str) -> NoReturn:
        raise FieldError(self.name(key), message)

    def has(self, key: str) -> bool:
        """Present and not null."""
        return self.data.get(key) is not None

    def _value(self, key: str, default: Any) -> Any:
        value = self.data.get(key)
        if value is None:
            if default is REQUIRED:
                self.fail(key, "missing" if key not in self.data else "is null")
            return default
        return value

    def _wrong(self, key: str, expected: str, value: Any) -> NoReturn:
        self.fail(key, f"expected {expected}, found {describe(value)}")

    def text(self, key: str, default: Any = REQUIRED) -> Any:
        value = self._value(key, default)
        if value is not default and not isinstance(value, str):
            self._wrong(key, "a string", value)
        return value

    def integer(self, key: str, default: Any = REQUIRED, *, minimum: int | None = None) -> Any:
        value = self._value(key, default)
        if value is default:
            return value
        if not _is_int(value):
            self._wrong(key, "an integer", value)
        if minimum is not None and value < minimum:
            self.fail(key, f"expected an integer >= {minimum}, found {value}")
        return value

    def number(self, key: str, default: Any = REQUIRED, *, finite: bool = False) -> Any:
        value = self._value(key, default)
        if value is default:
            return value
        if not _is_number(value):
            self._wrong(key, "a number", value)
        if finite and not math.isfinite(value):
            self.fail(key, f"expected a finite number, found {value!r}")
        return float(value)

    def flag(self, key: str, default: Any = REQUIRED) -> Any:
        value = self._value(key, default)
        if value is not default and not isinstance(value, bool):
            self._wrong(key, "true or false", value)
        return value

    def obj(self, key: str, default: Any = REQUIRED) -> Any:
        """A nested object as `Fields` (``default`` when absent or null)."""
        value = self._value(key, default)
        if value is default:
            return value
        return Fields(value, self.name(key))

    def array(self, key: str, default: Any = REQUIRED) -> Any:
        value = self._value(key, default)
        if value is not default and not isinstance(value, list | tuple):
            self._wrong(key, "a list", value)
        return value

    def ints(self, key: str, default: Any = REQUIRED) -> Any:
        """A list of integers, as a tuple."""
        value = self.array(key, default)
        if value is default:
            return value
        for i, item in enumerate(value):
            if not _is_int(item):
                self.fail(f"{key}[{i}]", f"expected an integer, found {describe(item)}")
        return tuple(value)

    def numbers(self, key: str, default: Any = REQUIRED) -> Any:
        """A list of numbers, as a tuple of floats."""
        value = self.array(key, default)
        if value is default:
            return value
        for i, item in enumerate(value):
            if not _is_number(item):
                self.fail(f"{key}[{i}]", f"expected a number, found {describe(item)}")
        return tuple(float(x) for x in value)

    def strs(self, key: str, default: Any = REQUIRED) -> Any:
        """A list of strings, as a tuple."""
        value = self.array(key, default)
        if value is default:
            return value
        for i, item in enumerate(value):
            if not isinstance(item, str):
                self.fail(f"{key}[{i}]", f"expected a string, found {describe(item)}")
        return tuple(value)

    def mapping(self, key: str, default: Any = REQUIRED) -> Any:
        """A nested object as a plain dict, unchecked inside."""
        value = self._value(key, default)
        if value is not default and not isinstance(value, Mapping):
            self._wrong(key, "an object", value)
        return value if value is default else dict(value)
