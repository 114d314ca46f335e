"""Result records and the JSONL results file, the run's source of truth.

The file holds one ``header`` record (configuration and both paths' fingerprints), then one
``result`` record per prompt x mode x seed, appended and flushed as each finishes, so a crash or
Ctrl-C loses nothing finished and ``--resume`` skips what is done. Reports are rendered from this
file alone.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from equiv.errors import ConfigError

__all__ = [
    "SCHEMA_VERSION",
    "DraftStep",
    "Generation",
    "Judgement",
    "ResultsFile",
    "TokenAlternatives",
]

SCHEMA_VERSION = 1
_TOP_WINDOW = 8.0  # logits below the row's maximum searched first for its top k
_TOP_MAX = 4096  # more candidates than this within the window: partition the row instead


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
        k = min(k, row.shape[0])
        # A logits row is peaked: its top k nearly always lie within a few logits of its maximum,
        # so two passes find them (and every tie at the k-th value) without partitioning the
        # whole vocabulary; the full partition is the fallback.
        top = np.flatnonzero(row >= row.max() - _TOP_WINDOW)
        if not k <= top.size <= _TOP_MAX:
            top = np.argpartition(row, -k)[-k:]
        order = top[np.lexsort((top, -row[top]))][:k]  # descending logit, ties by ascending id
        return cls(
            ids=tuple(int(i) for i in order),
            logits=tuple(round(float(row[i]), 5) for i in order),
        )

    def to_dict(self) -> dict[str, Any]:
        return {"ids": list(self.ids), "logits": list(self.logits)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TokenAlternatives:
        return cls(ids=tuple(data["ids"]), logits=tuple(data["logits"]))


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

    def to_dict(self) -> list[Any]:
        return [self.pos, self.drafted, self.accepted, self.truncated]

    @classmethod
    def from_dict(cls, data: list[Any]) -> DraftStep:
        return cls(int(data[0]), int(data[1]), int(data[2]), bool(data[3]))


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


@dataclass(frozen=True)
class Generation:
    """What one engine path produced for one prompt.

    ``logits`` holds the full rows the sampler used, one per emitted token, while the runner
    needs them (to inspect a divergence); it is never serialised, so memory does not grow with
    prompts x tokens.
    """

    path: str
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
    def tokens_per_s(self) -> float:
        """Decode speed, excluding the first token (which includes prompt evaluation)."""
        n = len(self.tokens) - 1
        return n / self.t_decode_s if n > 0 and self.t_decode_s > 0 else 0.0

    @property
    def drafted(self) -> int:
        return sum(s.drafted for s in self.draft_steps if not s.truncated)

    @property
    def accepted(self) -> int:
        return sum(s.accepted for s in self.draft_steps if not s.truncated)

    @property
    def acceptance_rate(self) -> float | None:
        """Accepted / drafted over the rounds that ended inside the generation."""
        return self.accepted / self.drafted if self.drafted else None

    def without_logits(self) -> Generation:
        return Generation(**{**self.__dict__, "logits": None, "judgements": ()})

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
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

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Generation:
        return cls(
            path=data["path"],
            prompt_tokens=tuple(data["prompt_tokens"]),
            tokens=tuple(data["tokens"]),
            pieces=tuple(data["pieces"]),
            text=data["text"],
            stop_reason=data["stop_reason"],
            alternatives=tuple(TokenAlternatives.from_dict(a) for a in data["alternatives"]),
            t_prompt_s=float(data["t_prompt_s"]),
            t_decode_s=float(data["t_decode_s"]),
            draft_steps=tuple(DraftStep.from_dict(s) for s in data.get("draft_steps", [])),
            draft_s=float(data.get("draft_s", 0.0)),
            seed=data.get("seed"),
        )


class ResultsFile:
    """An append-only JSONL file: a header line, then one line per finished result.

    Each record is written with a single ``write`` of one line, flushed and fsynced, so an
    interrupted run leaves at worst a torn last line, which reading skips.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def exists(self) -> bool:
        return self.path.is_file() and self.path.stat().st_size > 0

    def records(self) -> Iterator[dict[str, Any]]:
        with self.path.open(encoding="utf-8") as fh:
            for line in fh:
                line = line.strip()
                if not line:
                    continue
                try:
                    record = json.loads(line)
                except json.JSONDecodeError:
                    continue  # a line torn by a crash: the result is simply redone
                if isinstance(record, dict):
                    yield record

    def header(self) -> dict[str, Any]:
        for record in self.records():
            if record.get("kind") == "header":
                return record
            break
        raise ConfigError(
            f"{self.path} has no header line; it is not an equiv results file "
            "(or it was cut before the first line): start a new run"
        )

    def results(self) -> list[dict[str, Any]]:
        return [r for r in self.records() if r.get("kind") == "result"]

    def done_keys(self) -> set[str]:
        return {str(r["key"]) for r in self.results()}

    def _append(self, record: Mapping[str, Any]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        line = json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n"
        if self.path.is_file() and self.path.stat().st_size > 0:
            with self.path.open("rb") as fh:
                fh.seek(-1, os.SEEK_END)
                if fh.read(1) != b"\n":  # a torn line from a crash: start a fresh line
                    line = "\n" + line
        with self.path.open("a", encoding="utf-8") as fh:
            fh.write(line)
            fh.flush()
            os.fsync(fh.fileno())

    def write_header(self, header: Mapping[str, Any]) -> None:
        self._append({"kind": "header", "schema": SCHEMA_VERSION, **header})

    def append_result(self, record: Mapping[str, Any]) -> None:
        self._append({"kind": "result", **record})

    def append_analysis(self, record: Mapping[str, Any]) -> None:
        """A prompt's distribution tests over all its seeds (sampling mode)."""
        self._append({"kind": "analysis", **record})

    def analyses(self) -> list[dict[str, Any]]:
        return [r for r in self.records() if r.get("kind") == "analysis"]

    def append_event(self, record: Mapping[str, Any]) -> None:
        """Run-level facts found while running (controls, warnings)."""
        self._append({"kind": "event", **record})

    def events(self) -> list[dict[str, Any]]:
        return [r for r in self.records() if r.get("kind") == "event"]
