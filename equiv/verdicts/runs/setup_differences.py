"""Two runs' headers compared (`equiv compare`): the setup entries that differ, named by their
dotted place in the file (fingerprints and config included), and a change of machine, in words."""

from __future__ import annotations

from collections.abc import Mapping

from equiv.json_types import JSONDict, JSONObject, JSONValue
from equiv.records import HeaderRecord

__all__ = ["machine_change", "setup_differences"]


# Header entries that differ between any two runs and say nothing about the setup.
_VOLATILE = ("created", "command", "argv", "kind", "schema", "python", "servers")


def _flatten(data: JSONObject, prefix: str = "") -> JSONDict:
    flat: JSONDict = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(_flatten(value, name + "."))
        else:
            flat[name] = value
    return flat


def machine_change(a: HeaderRecord, b: HeaderRecord) -> str | None:
    """``machine: ...`` where the two headers name machines whose numerics may differ (CPU, SIMD
    features, GPU, llama.cpp build); None where they agree or a header predates the record."""
    if a.machine is None or b.machine is None:
        return None
    changes = a.machine.changes(b.machine)
    if not changes:
        return None
    return (
        f"machine: {'; '.join(changes)} (near-ties flip where each machine's kernels put them: "
        "divergences may move between prompts with both runs right)"
    )


def setup_differences(a: HeaderRecord, b: HeaderRecord) -> tuple[str, ...]:
    """Header entries that differ, as ``name: A -> B`` named by their dotted place in the file
    (fingerprints and config included); a change of machine first, in words
    (`machine_change`), then its fields with the rest."""
    fa = _flatten({k: v for k, v in a.to_dict().items() if k not in _VOLATILE})
    fb = _flatten({k: v for k, v in b.to_dict().items() if k not in _VOLATILE})
    machine = machine_change(a, b)
    fields = [
        f"{k}: {_change(fa.get(k), fb.get(k))}"
        for k in sorted(set(fa) | set(fb))
        if fa.get(k) != fb.get(k)
    ]
    return tuple([machine, *fields] if machine else fields)


def _change(a: JSONValue, b: JSONValue, room: int = 60) -> str:
    """``A -> B``, long values cut to the part where they differ."""
    ta, tb = ("(none)" if v is None else str(v) for v in (a, b))
    if max(len(ta), len(tb)) <= room:
        return f"{ta} -> {tb}"
    head = next((i for i, (x, y) in enumerate(zip(ta, tb, strict=False)) if x != y), 0)
    start = max(head - 10, 0)

    def cut(text: str) -> str:
        part = text[start : start + room]
        return ("..." if start else "") + part + ("..." if start + room < len(text) else "")

    return f"{cut(ta)} -> {cut(tb)}"
