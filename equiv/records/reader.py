"""Reading a results file: each line as the typed record of its kind, or the `LineProblem` that
says why not, and the whole file as `ResultsContents`.

Reading never raises on a damaged line: each line it cannot use becomes a `LineProblem` naming
the line, the field and what is wrong. A torn last line (a crash in the middle of a write: no
newline, not a whole record) is set apart as ``torn``: it is not a problem, its result is simply
redone. Only a file that cannot be a results file at all (no header, a newer schema) raises
`ResultsError`.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from equiv.errors import ResultsError
from equiv.json_types import JSONValue
from equiv.records.fields import FieldError, Fields
from equiv.records.header import HeaderRecord
from equiv.records.kinds import (
    OLDEST_SCHEMA,
    SCHEMA_VERSION,
    AnalysisRecord,
    EventRecord,
    Kind,
    RunRecord,
)
from equiv.records.result import ResultRecord

__all__ = ["LineProblem", "Record", "ResultsContents", "parse_contents", "parse_record"]

Record = HeaderRecord | ResultRecord | AnalysisRecord | EventRecord | RunRecord

_TYPES: dict[str, type[Record]] = {
    Kind.HEADER.value: HeaderRecord,
    Kind.RESULT.value: ResultRecord,
    Kind.ANALYSIS.value: AnalysisRecord,
    Kind.EVENT.value: EventRecord,
    Kind.RUN.value: RunRecord,
}


def parse_record(data: JSONValue) -> Record:
    """The typed record of one parsed JSON line; `FieldError` names what is wrong."""
    f = Fields(data)
    kind = f.text("kind")
    cls = _TYPES.get(kind)
    if cls is None:
        f.fail("kind", f"{kind!r} is not one of {', '.join(_TYPES)}")
    return cls.from_dict(f.data)


@dataclass(frozen=True)
class LineProblem:
    """A line of the results file that could not be used, and why."""

    line: int
    message: str
    field: str | None = None
    key: str | None = None  # the record's key, where it could be read

    def __str__(self) -> str:
        where = f"line {self.line}" + (f" ({self.key})" if self.key else "")
        return (
            f"{where}: {self.field}: {self.message}" if self.field else f"{where}: {self.message}"
        )


@dataclass(frozen=True)
class ResultsContents:
    """Everything a results file holds, read once: the typed records in file order, and the
    lines that could not be read."""

    path: Path
    header: HeaderRecord | None
    records: tuple[Record, ...]
    problems: tuple[LineProblem, ...] = ()
    torn: bool = False  # the last line was cut by a crash; its result is redone
    lines: int = 0  # lines in the file, the torn one included
    size: int = 0  # bytes in the file up to the end of its last whole line

    @functools.cached_property
    def results(self) -> list[ResultRecord]:
        return [r for r in self.records if isinstance(r, ResultRecord)]

    @functools.cached_property
    def analyses(self) -> list[AnalysisRecord]:
        return [r for r in self.records if isinstance(r, AnalysisRecord)]

    @functools.cached_property
    def events(self) -> list[EventRecord]:
        return [r for r in self.records if isinstance(r, EventRecord)]

    @functools.cached_property
    def runs(self) -> list[RunRecord]:
        """The run's own answers (at most one a mode: `RunRecord`)."""
        return [r for r in self.records if isinstance(r, RunRecord)]

    @property
    def done_keys(self) -> set[str]:
        return {r.key for r in self.results}

    @property
    def unreadable(self) -> int:
        """Lines that could not be read (the torn last line not counted: it is redone)."""
        return len(self.problems)

    @property
    def header_only(self) -> bool:
        """A header and nothing else: a run that stopped before its first result."""
        return self.header is not None and len(self.records) == 1 and not self.problems

    @property
    def replaceable(self) -> bool:
        """Nothing worth keeping: no file, a header alone, or only a line torn by a crash."""
        return self.header_only or (not self.records and not self.problems)


def _decode_error(raw: bytes, exc: UnicodeDecodeError) -> str:
    return f"not UTF-8 (byte 0x{raw[exc.start]:02x} at column {exc.start + 1})"


def _key_of(data: JSONValue) -> str | None:
    key = data.get("key") if isinstance(data, Mapping) else None
    return key if isinstance(key, str) else None


def _line_record(raw: bytes, lineno: int, *, partial: bool) -> Record | LineProblem | None:
    """One line of the file as a record, or what is wrong with it; None where it is the last
    line, without its newline, and unreadable (torn by a crash)."""
    try:
        data = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        return None if partial else LineProblem(lineno, _decode_error(raw, exc))
    except json.JSONDecodeError as exc:
        if partial:
            return None
        return LineProblem(lineno, f"not valid JSON: {exc.msg}, column {exc.colno}")
    except RecursionError:
        return LineProblem(lineno, "not valid JSON (nested too deeply)")
    try:
        return parse_record(data)
    except FieldError as exc:
        if partial and not isinstance(data, dict):
            return None
        return LineProblem(lineno, exc.message, exc.field, _key_of(data))
    except (ValueError, TypeError, KeyError, AttributeError) as exc:  # a check missed
        why = f"not a record equiv can read ({type(exc).__name__}: {exc})"
        return LineProblem(lineno, why, None, _key_of(data))


def _check_schema(path: Path, header: HeaderRecord, lineno: int) -> None:
    if not OLDEST_SCHEMA <= header.schema <= SCHEMA_VERSION:
        newer = header.schema > SCHEMA_VERSION
        raise ResultsError(
            f"{path} line {lineno}: schema {header.schema} is "
            + (
                f"newer than this equiv reads ({OLDEST_SCHEMA} to {SCHEMA_VERSION}); "
                "upgrade equiv to read it"
                if newer
                else f"not a version equiv ever wrote ({OLDEST_SCHEMA} to {SCHEMA_VERSION})"
            )
        )


class _Lines:
    """The records and problems of a file as its lines are read in order."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.records: list[Record] = []
        self.problems: list[LineProblem] = []
        self.header: HeaderRecord | None = None
        self.seen: dict[str, int] = {}  # kind:key -> the line that counts

    def add(self, record: Record, lineno: int) -> None:
        """``record``, read from line ``lineno``, kept, or set apart as a problem."""
        if isinstance(record, HeaderRecord):
            if self.header is not None or self.records or self.problems:
                self.problems.append(
                    LineProblem(lineno, "a header, but not on the first line", "kind")
                )
                return
            _check_schema(self.path, record, lineno)
            self.header = record
        elif self.header is None and not self.records and not self.problems:
            raise ResultsError(
                f"{self.path} has no header line (line {lineno} is a {record.kind} record); "
                "it is not an equiv results file, or it was cut before the first line: "
                "start a new run"
            )
        if isinstance(record, ResultRecord | AnalysisRecord):
            tag = f"{record.kind}:{record.key}"
            if tag in self.seen:
                self.problems.append(
                    LineProblem(
                        lineno,
                        f"a second {record.kind} for this key (the first is line "
                        f"{self.seen[tag]}, which counts); two runs wrote to one file?",
                        "key",
                        record.key,
                    )
                )
                return
            self.seen[tag] = lineno
        self.records.append(record)


def parse_contents(path: Path, data: bytes) -> ResultsContents:
    """The contents of the results file ``path`` whose bytes are ``data``.

    Raises `ResultsError` for a file that is not an equiv results file at all (its first line
    is not a header) or is of a schema this equiv does not read.
    """
    chunks = data.split(b"\n")
    last = len(chunks) - 1  # chunks[last] is what follows the last newline (b"" if none)
    read = _Lines(path)
    torn = False
    size = len(data)
    for index, raw in enumerate(chunks):
        lineno = index + 1
        if not raw.strip():
            continue
        got = _line_record(raw, lineno, partial=index == last)
        if got is None:  # the last line, cut short by a crash: the run resumes before it
            torn, size = True, len(data) - len(raw)
        elif isinstance(got, LineProblem):
            read.problems.append(got)
        else:
            read.add(got, lineno)
    return ResultsContents(
        path,
        read.header,
        tuple(read.records),
        tuple(read.problems),
        torn=torn,
        lines=len(chunks) if chunks[last] else last,
        size=size,
    )
