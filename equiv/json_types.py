"""The types of JSON-shaped data, for the places where equiv's own types meet JSON.

Inside the package, results are frozen dataclasses and Enums. JSON appears only at the edges:
a record's ``to_dict``/``from_dict``, a server's HTTP payload, a TOML file, an engine's
fingerprint (which the header records as it is). These aliases say so, and unlike ``Any`` they
make mypy check what is put in and ask for a check of what is taken out.

- `JSONValue`: a value ``json.dumps`` writes (a scalar, a sequence or a string-keyed mapping of
  JSON values); ``json.loads`` returns one of these too;
- `JSONObject`: a JSON object, read-only (what ``from_dict`` takes);
- `JSONDict`: a JSON object being built (what ``to_dict`` returns).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TypeAlias

__all__ = [
    "JSONDict",
    "JSONObject",
    "JSONScalar",
    "JSONValue",
    "json_float",
    "json_int",
    "json_list",
    "json_object",
]

JSONScalar: TypeAlias = str | int | float | bool | None
JSONValue: TypeAlias = "JSONScalar | Sequence[JSONValue] | Mapping[str, JSONValue]"
JSONObject: TypeAlias = "Mapping[str, JSONValue]"
JSONDict: TypeAlias = "dict[str, JSONValue]"


def _found(value: JSONValue) -> str:
    return "null" if value is None else type(value).__name__


def json_object(value: JSONValue) -> JSONObject:
    """``value`` as a JSON object; `TypeError` (as ``dict(value)`` would raise) if it is not one."""
    if isinstance(value, Mapping):
        return value
    raise TypeError(f"expected a JSON object, found {_found(value)}")


def json_list(value: JSONValue) -> Sequence[JSONValue]:
    """``value`` as a JSON array; `TypeError` if it is not one (a string is not)."""
    if isinstance(value, Sequence) and not isinstance(value, str):
        return value
    raise TypeError(f"expected a JSON array, found {_found(value)}")


def json_int(value: JSONValue) -> int:
    """``int(value)`` of a JSON scalar; `TypeError` for null, an array or an object, as
    ``int`` itself raises."""
    if isinstance(value, str | int | float):
        return int(value)
    raise TypeError(f"expected a number, found {_found(value)}")


def json_float(value: JSONValue) -> float:
    """``float(value)`` of a JSON scalar; `TypeError` for null, an array or an object, as
    ``float`` itself raises."""
    if isinstance(value, str | int | float):
        return float(value)
    raise TypeError(f"expected a number, found {_found(value)}")
