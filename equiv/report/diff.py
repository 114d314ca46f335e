"""One path's output cut into segments by the stored rapidfuzz opcodes on token IDs.

Equal runs stay one piece of text; changed runs keep their tokens, so each is highlighted and
carries its position and ID. Nothing is re-compared: the opcodes come from the results file.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["Segment", "Token", "segments"]

_SIDE_TAGS = {
    "baseline": ("equal", "replace", "delete"),
    "speculative": ("equal", "replace", "insert"),
}


@dataclass(frozen=True)
class Token:
    pos: int
    id: int
    text: str
    first: bool  # the first divergent position


@dataclass(frozen=True)
class Segment:
    tag: str  # equal | replace | insert | delete
    text: str
    tokens: tuple[Token, ...]  # empty for equal runs


def _valid(opcodes: Sequence[Any], n_src: int, n_dest: int) -> bool:
    try:
        src = [(int(op[1]), int(op[2])) for op in opcodes]
        dest = [(int(op[3]), int(op[4])) for op in opcodes]
    except (TypeError, ValueError, IndexError):
        return False
    for spans, n in ((src, n_src), (dest, n_dest)):
        at = 0
        for start, end in spans:
            if start != at or end < start:
                return False
            at = end
        if at != n:
            return False
    return all(str(op[0]) in ("equal", "replace", "insert", "delete") for op in opcodes)


def segments(record: Mapping[str, Any], side: str) -> tuple[Segment, ...]:
    """``side`` ("baseline" or "speculative") of a result record as diff segments; one equal
    segment of the whole text when the paths agree or the opcodes do not fit the tokens."""
    gen = record[side]
    tokens: list[int] = list(gen.get("tokens", []))
    pieces: list[str] = [str(p) for p in gen.get("pieces", [])]
    comparison = record.get("comparison") or {}
    opcodes = comparison.get("opcodes") or []
    n_other = len(record["speculative" if side == "baseline" else "baseline"].get("tokens", []))
    sizes = (len(tokens), n_other) if side == "baseline" else (n_other, len(tokens))
    if (
        comparison.get("identical", True)
        or len(pieces) != len(tokens)
        or not _valid(opcodes, *sizes)
    ):
        return (Segment("equal", str(gen.get("text", "".join(pieces))), ()),)
    divergence = comparison.get("divergence") or {}
    first = divergence.get("position")
    lo, hi = (1, 2) if side == "baseline" else (3, 4)
    out: list[Segment] = []
    for op in opcodes:
        tag, start, end = str(op[0]), int(op[lo]), int(op[hi])
        if tag not in _SIDE_TAGS[side] or start == end:
            continue
        text = "".join(pieces[start:end])
        if tag == "equal":
            out.append(Segment(tag, text, ()))
            continue
        toks = tuple(Token(i, tokens[i], pieces[i], i == first) for i in range(start, end))
        out.append(Segment(tag, text, toks))
    return tuple(out)
