"""The header record, the first line of a results file: what was run, on what, and how the two
paths differ (the configuration, both paths' fingerprints and capabilities, the machine, and
what else the run knew: vocabulary, argv, servers, ...)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar

from equiv.json_types import JSONDict, JSONObject, JSONValue
from equiv.records.fields import Fields
from equiv.records.kinds import SCHEMA_VERSION, Kind, unknown_fields
from equiv.records.machine import Machine

__all__ = ["HeaderRecord"]


@dataclass(frozen=True)
class HeaderRecord:
    """The first line: what was run, on what, and how the two paths differ."""

    kind: ClassVar[Kind] = Kind.HEADER
    _KNOWN: ClassVar[frozenset[str]] = frozenset(
        {
            "kind",
            "schema",
            "equiv",
            "created",
            "command",
            "python",
            "config",
            "fingerprints",
            "differences",
            "capabilities",
            "machine",
        }
    )

    config: JSONObject
    schema: int = SCHEMA_VERSION
    equiv: str = ""
    created: str = ""
    command: str = ""
    python: str = ""
    fingerprints: Mapping[str, JSONObject] = field(default_factory=dict)
    differences: tuple[str, ...] = ()
    capabilities: JSONObject = field(default_factory=dict)
    machine: Machine | None = None  # None in files written before equiv recorded it
    extra: JSONObject = field(default_factory=dict)  # vocab, argv, servers, ...

    @property
    def has_logits(self) -> bool:
        """Both paths reported the rows they sampled from (in process), per the capabilities
        recorded."""
        caps = [self.capabilities.get(path) for path in ("baseline", "speculative")]
        return all(isinstance(c, dict) and c.get("full_logits") is True for c in caps)

    def get(self, key: str, default: JSONValue = None) -> JSONValue:
        """A field by its name in the file (known or extra)."""
        return self.to_dict().get(key, default)

    def to_dict(self) -> JSONDict:
        return {
            "kind": Kind.HEADER.value,
            "schema": self.schema,
            "equiv": self.equiv,
            "created": self.created,
            "command": self.command,
            "python": self.python,
            "config": dict(self.config),
            "fingerprints": {k: dict(v) for k, v in self.fingerprints.items()},
            "differences": list(self.differences),
            "capabilities": dict(self.capabilities),
            **({"machine": self.machine.to_dict()} if self.machine else {}),
            **self.extra,
        }

    @classmethod
    def from_dict(cls, data: JSONObject, where: str = "") -> HeaderRecord:
        f = Fields(data, where)
        schema = f.integer("schema")
        prints = f.obj("fingerprints", None)
        fingerprints: dict[str, JSONDict] = {}
        if prints is not None:
            fingerprints = {k: prints.mapping(k) for k in prints.data}
        machine = f.obj("machine", None)
        return cls(
            config=f.mapping("config"),
            schema=schema,
            equiv=f.text("equiv", ""),
            created=f.text("created", ""),
            command=f.text("command", ""),
            python=f.text("python", ""),
            fingerprints=fingerprints,
            differences=f.strs("differences", ()),
            capabilities=f.mapping("capabilities", {}),
            machine=None if machine is None else Machine.from_dict(machine.data, "machine"),
            extra=unknown_fields(data, cls._KNOWN),
        )
