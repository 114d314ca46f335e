"""What one engine path produced for one prompt, and the figures derived from it.

The draft counts (drafted, accepted, rounds), the decode speed and the speed-up are each computed
here and nowhere else: `Generation.drafted` / `accepted` / `rounds` / `decode_tokens`,
`decode_rate` (tokens per second) and `speedup`; the run's summary adds up the same properties.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import ClassVar, TypeAlias, cast

import numpy as np
import numpy.typing as npt

from equiv.json_types import JSONDict, JSONObject, JSONValue
from equiv.records.fields import FieldError, Fields, describe

__all__ = [
    "PATHS",
    "DraftStep",
    "Generation",
    "Judgement",
    "PathName",
    "TokenAlternatives",
    "decode_rate",
    "speedup",
    "top_k",
]


# Windows below the row's maximum searched in turn for its top k (a peaked row has fewer than k
# candidates within the first); more than _TOP_MAX candidates in one: partition the row instead.
_TOP_WINDOWS = (8.0, 16.0, 32.0, 64.0)
_TOP_MAX = 4096


def decode_rate(tokens: int, seconds: float) -> float:
    """Decode speed in tokens per second (0 when nothing was timed)."""
    return tokens / seconds if tokens > 0 and seconds > 0 else 0.0


def speedup(baseline_tps: float, speculative_tps: float) -> float | None:
    """The speculative path's decode speed over the baseline's (None where either is unknown)."""
    return speculative_tps / baseline_tps if baseline_tps and speculative_tps else None


# A row of logits (or log-probabilities), as an engine gives it (float32) or as equiv computes
# it (float64).
LogitsRow: TypeAlias = "npt.NDArray[np.float32] | npt.NDArray[np.float64]"


def top_k(row: LogitsRow, k: int) -> npt.NDArray[np.intp]:
    """The ids of a logits row's ``k`` largest values, descending, ties by ascending id.

    A logits row is peaked: its top k nearly always lie within a few logits of its maximum, so a
    comparison or two finds them (and every tie at the k-th value) without partitioning the
    whole vocabulary (100x the cost); the full partition is the fallback.
    """
    k = min(k, row.shape[0])
    peak = row.max()
    top = None
    for window in _TOP_WINDOWS:
        found = np.flatnonzero(row >= peak - window)
        if found.size >= k:
            top = found if found.size <= _TOP_MAX else None
            break
    if top is None:
        top = np.argpartition(row, -k)[-k:]
    return top[np.lexsort((top, -row[top]))][:k]


@dataclass(frozen=True)
class TokenAlternatives:
    """The top-k candidates (ids and raw logits, descending) of the row a token was sampled from."""

    ids: tuple[int, ...]
    logits: tuple[float, ...]

    @property
    def margin(self) -> float:
        """Logit gap between the best and second-best candidate: how close a near-tie was."""
        return self.logits[0] - self.logits[1] if len(self.logits) > 1 else float("inf")

    @classmethod
    def from_row(cls, row: npt.NDArray[np.float32], k: int) -> TokenAlternatives:
        order = top_k(row, k)
        return cls(
            ids=tuple(int(i) for i in order),
            logits=tuple(round(float(row[i]), 5) for i in order),
        )

    def to_dict(self) -> JSONDict:
        return {"ids": list(self.ids), "logits": list(self.logits)}

    @classmethod
    def from_dict(cls, data: JSONObject, where: str = "") -> TokenAlternatives:
        f = Fields(data, where)
        ids, logits = f.ints("ids"), f.numbers("logits")
        if len(ids) != len(logits):
            f.fail("logits", f"has {len(logits)} entries for {len(ids)} ids")
        return cls(ids=ids, logits=logits)


@dataclass(frozen=True)
class DraftStep:
    """One drafting round: at output position ``pos`` the draft proposed ``drafted`` tokens and
    the target kept ``accepted`` of them (``truncated`` when generation ended inside the round).
    ``pos == PER_REQUEST``: the counts of a whole request, from an engine that keeps no rounds."""

    PER_REQUEST: ClassVar[int] = -1

    pos: int
    drafted: int
    accepted: int
    truncated: bool = False

    def to_dict(self) -> list[JSONValue]:
        return [self.pos, self.drafted, self.accepted, self.truncated]

    @classmethod
    def from_dict(cls, data: JSONValue, where: str = "draft step") -> DraftStep:
        ok = isinstance(data, list | tuple) and len(data) == 4
        if ok:
            pos, drafted, accepted, truncated = cast("Sequence[JSONValue]", data)
            ints = (pos, drafted, accepted)
            ok = all(isinstance(x, int) and not isinstance(x, bool) for x in ints)
            ok = ok and isinstance(truncated, bool) and cast(int, drafted) >= 0
            ok = ok and cast(int, accepted) >= 0
        if not ok:
            raise FieldError(
                where,
                f"expected [pos, drafted, accepted, truncated], found {describe(data)}"
                + (f" {list(data)!r}"[:60] if isinstance(data, list | tuple) else ""),
            )
        pos, drafted, accepted, truncated = cast("tuple[int, int, int, bool]", data)
        return cls(int(pos), int(drafted), int(accepted), bool(truncated))


@dataclass(frozen=True)
class Judgement:
    """One draft token the target judged, from an engine that verifies by rejection sampling.

    The draft proposed ``token`` for output position ``pos``, sampling it from ``draft_row``
    (the draft's logits, through the configured chain); the target row is the generation's own
    ``logits[pos]``. ``accepted`` is the decision; after a rejection ``tokens[pos]`` is the
    replacement the engine drew. Held in memory only, like ``Generation.logits``.
    """

    pos: int
    token: int
    accepted: bool
    draft_row: npt.NDArray[np.float32] = field(repr=False)


class PathName(str, enum.Enum):
    """Which of the two paths: the target alone, or the target with its drafter. A ``str``, so
    it compares, hashes and serialises as its value."""

    BASELINE = "baseline"
    SPECULATIVE = "speculative"

    def __str__(self) -> str:
        return self.value


#: Both paths, baseline first (the order of every per-path table).
PATHS: tuple[PathName, ...] = (PathName.BASELINE, PathName.SPECULATIVE)


@dataclass(frozen=True)
class Generation:
    """What one engine path produced for one prompt.

    ``logits`` holds the full rows the sampler used, one per emitted token, while the runner
    needs them (to inspect a divergence); it is never serialised, so memory does not grow with
    prompts x tokens.
    """

    path: PathName
    prompt_tokens: tuple[int, ...]
    tokens: tuple[int, ...]
    pieces: tuple[str, ...]
    text: str
    stop_reason: str
    alternatives: tuple[TokenAlternatives, ...]
    t_prompt_s: float
    t_decode_s: float
    draft_steps: tuple[DraftStep, ...] = ()
    draft_s: float = 0.0  # wall time spent inside the draft model (speculative path)
    seed: int | None = None
    logits: npt.NDArray[np.float32] | None = field(default=None, compare=False, repr=False)
    judgements: tuple[Judgement, ...] = field(default=(), compare=False, repr=False)

    @property
    def n_tokens(self) -> int:
        return len(self.tokens)

    @property
    def decode_tokens(self) -> int:
        """Tokens decoded after the first (whose time is prompt evaluation)."""
        return max(len(self.tokens) - 1, 0)

    @property
    def tokens_per_s(self) -> float:
        """Decode speed, excluding the first token (which includes prompt evaluation)."""
        return decode_rate(self.decode_tokens, self.t_decode_s)

    @property
    def drafted(self) -> int:
        """Draft tokens proposed, over the rounds that ended inside the generation."""
        return sum(s.drafted for s in self.draft_steps if not s.truncated)

    @property
    def accepted(self) -> int:
        """Draft tokens the target kept, over the rounds that ended inside the generation."""
        return sum(s.accepted for s in self.draft_steps if not s.truncated)

    @property
    def rounds(self) -> int:
        """Drafting rounds that proposed something (unknown, 0, for per-request counts)."""
        return sum(1 for s in self.draft_steps if not s.truncated and s.pos >= 0 and s.drafted > 0)

    @property
    def per_request(self) -> bool:
        """Some draft counts came per request, without rounds (a server)."""
        return any(s.pos < 0 for s in self.draft_steps if not s.truncated)

    @property
    def acceptance_rate(self) -> float | None:
        """Accepted / drafted over the rounds that ended inside the generation."""
        return self.accepted / self.drafted if self.drafted else None

    def to_dict(self) -> JSONDict:
        return {
            "path": str(self.path),  # plain JSON: execnet (xdist) sends no enums
            "prompt_tokens": list(self.prompt_tokens),
            "tokens": list(self.tokens),
            "pieces": list(self.pieces),
            "text": self.text,
            "stop_reason": self.stop_reason,
            "alternatives": [a.to_dict() for a in self.alternatives],
            "t_prompt_s": round(self.t_prompt_s, 6),
            "t_decode_s": round(self.t_decode_s, 6),
            "draft_steps": [s.to_dict() for s in self.draft_steps],
            "draft_s": round(self.draft_s, 6),
            "seed": self.seed,
        }

    #: The keys `to_dict` writes; a record's other keys of a path are evidence kept beside it.
    KEYS: ClassVar[frozenset[str]] = frozenset(
        {
            "path",
            "prompt_tokens",
            "tokens",
            "pieces",
            "text",
            "stop_reason",
            "alternatives",
            "t_prompt_s",
            "t_decode_s",
            "draft_steps",
            "draft_s",
            "seed",
        }
    )

    @classmethod
    def from_dict(cls, data: JSONObject, where: str = "") -> Generation:
        f = Fields(data, where)
        tokens = f.ints("tokens")
        pieces = f.strs("pieces")
        if len(pieces) != len(tokens):
            f.fail("pieces", f"has {len(pieces)} entries for {len(tokens)} tokens")
        alternatives = f.array("alternatives")
        steps = f.array("draft_steps", [])
        return cls(
            path=PathName(f.text("path")),
            prompt_tokens=f.ints("prompt_tokens"),
            tokens=tokens,
            pieces=pieces,
            text=f.text("text"),
            stop_reason=f.text("stop_reason"),
            alternatives=tuple(
                TokenAlternatives.from_dict(a, f.name(f"alternatives[{i}]"))
                for i, a in enumerate(alternatives)
            ),
            t_prompt_s=f.number("t_prompt_s"),
            t_decode_s=f.number("t_decode_s"),
            draft_steps=tuple(
                DraftStep.from_dict(s, f.name(f"draft_steps[{i}]")) for i, s in enumerate(steps)
            ),
            draft_s=f.number("draft_s", 0.0),
            seed=f.integer("seed", None),
        )
