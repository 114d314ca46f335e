"""One path's output cut into segments by the stored rapidfuzz opcodes on token IDs.

Equal runs stay one piece of text; changed runs keep their tokens, so each is highlighted and
carries its position and ID. Nothing is re-compared: the opcodes come from the results file.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from equiv.records import ResultRecord

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


def _valid(opcodes: Sequence[tuple[str, int, int, int, int]], n_src: int, n_dest: int) -> bool:
    """The opcodes tile both sequences exactly (a file edited by hand may say otherwise)."""
    for spans, n in (
        ([(op[1], op[2]) for op in opcodes], n_src),
        ([(op[3], op[4]) for op in opcodes], n_dest),
    ):
        at = 0
        for start, end in spans:
            if start != at or end < start:
                return False
            at = end
        if at != n:
            return False
    return True


def segments(record: ResultRecord, side: str) -> tuple[Segment, ...]:
    """``side`` ("baseline" or "speculative") of a result record as diff segments; one equal
    segment of the whole text when the paths agree or the opcodes do not fit the tokens."""
    gen = record.generation(side)
    tokens, pieces = gen.tokens, gen.pieces
    comparison = record.comparison
    opcodes = comparison.opcodes
    n_other = record.generation("speculative" if side == "baseline" else "baseline").n_tokens
    sizes = (len(tokens), n_other) if side == "baseline" else (n_other, len(tokens))
    if comparison.identical or not _valid(opcodes, *sizes):
        return (Segment("equal", gen.text, ()),)
    first = comparison.divergence.position if comparison.divergence is not None else None
    out: list[Segment] = []
    for tag, i1, i2, j1, j2 in opcodes:
        start, end = (i1, i2) if side == "baseline" else (j1, j2)
        if tag not in _SIDE_TAGS[side] or start == end:
            continue
        text = "".join(pieces[start:end])
        if tag == "equal":
            out.append(Segment(tag, text, ()))
            continue
        toks = tuple(Token(i, tokens[i], pieces[i], i == first) for i in range(start, end))
        out.append(Segment(tag, text, toks))
    return tuple(out)
