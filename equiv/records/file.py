"""The JSONL results file, the run's source of truth: read once into typed records, appended to
one whole line at a time.

The file holds one header line, then one line per finished result (and analysis, and event),
each appended with a single ``write`` and fsynced as it finishes, so a crash or Ctrl-C loses
nothing finished and ``--resume`` skips what is done. Reports are rendered from this file alone.

Reading never raises on a damaged line: `ResultsFile.read` returns the typed records and, for
each line it could not use, a `LineProblem` naming the line, the field and what is wrong. A torn
last line (a crash in the middle of a write: no newline, not a whole record) is set apart as
``torn``: it is not a problem, its result is simply redone, and the next append cuts it off.
Only a file that cannot be a results file at all (no header, a newer schema) raises
`ResultsError`.

A failed append (the disk full, ...) cuts the file back to where it was, so no torn line is left
behind, and raises `DiskFullError` (or `ResultsError` for another I/O error).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from equiv.errors import DiskFullError, ResultsError
from equiv.records.fields import FieldError
from equiv.records.kinds import (
    OLDEST_SCHEMA,
    SCHEMA_VERSION,
    AnalysisRecord,
    EventRecord,
    HeaderRecord,
    Kind,
    Record,
    ResultRecord,
    RunRecord,
    parse_record,
)

__all__ = ["LineProblem", "ResultsContents", "ResultsFile"]

_NO_SPACE = {errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)}


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
    _by_kind: dict[Kind, list[Any]] = field(default_factory=dict, repr=False, compare=False)

    def _of(self, kind: Kind) -> list[Any]:
        if kind not in self._by_kind:
            self._by_kind[kind] = [r for r in self.records if r.kind is kind]
        return self._by_kind[kind]

    @property
    def results(self) -> list[ResultRecord]:
        return self._of(Kind.RESULT)

    @property
    def analyses(self) -> list[AnalysisRecord]:
        return self._of(Kind.ANALYSIS)

    @property
    def events(self) -> list[EventRecord]:
        return self._of(Kind.EVENT)

    @property
    def runs(self) -> list[RunRecord]:
        """The run's own answers (at most one a mode: `RunRecord`)."""
        return self._of(Kind.RUN)

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


def _key_of(data: Any) -> str | None:
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


class ResultsFile:
    """An append-only JSONL file: a header line, then one line per finished record.

    The file is parsed once per change: `read` keeps what it read, and an append by this object
    adds its record to what was read instead of reading everything again.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._cache: tuple[tuple[int, int, int], ResultsContents] | None = None

    # -- reading -----------------------------------------------------------------------------
    def exists(self) -> bool:
        return self.path.is_file() and self.path.stat().st_size > 0

    def _stamp(self) -> tuple[int, int, int]:
        st = self.path.stat()
        return (st.st_ino, st.st_size, st.st_mtime_ns)

    def read(self) -> ResultsContents:
        """The typed records and the problems of every line; a missing file reads as empty.

        Raises `ResultsError` for a file that is not an equiv results file at all (its first
        line is not a header) or is of a schema this equiv does not read.
        """
        if not self.path.exists():
            return ResultsContents(self.path, None, ())
        if self.path.is_dir():
            raise ResultsError(f"{self.path} is a directory, not a results file")
        stamp = self._stamp()
        if self._cache is not None and self._cache[0] == stamp:
            return self._cache[1]
        contents = self._parse(self.path.read_bytes())
        self._cache = (stamp, contents)
        return contents

    def _parse(self, data: bytes) -> ResultsContents:
        chunks = data.split(b"\n")
        last = len(chunks) - 1  # chunks[last] is what follows the last newline (b"" if none)
        records: list[Record] = []
        problems: list[LineProblem] = []
        header: HeaderRecord | None = None
        seen: dict[str, int] = {}
        torn = False
        size = len(data)
        for index, raw in enumerate(chunks):
            lineno = index + 1
            if not raw.strip():
                continue
            got = _line_record(raw, lineno, partial=index == last)
            if got is None:  # the last line, cut short by a crash: the run resumes before it
                torn, size = True, len(data) - len(raw)
                continue
            if isinstance(got, LineProblem):
                problems.append(got)
                continue
            record = got
            if isinstance(record, HeaderRecord):
                if header is not None or records or problems:
                    problems.append(
                        LineProblem(lineno, "a header, but not on the first line", "kind")
                    )
                    continue
                self._check_schema(record, lineno)
                header = record
            elif header is None and not records and not problems:
                raise ResultsError(
                    f"{self.path} has no header line (line {lineno} is a {record.kind} record); "
                    "it is not an equiv results file, or it was cut before the first line: "
                    "start a new run"
                )
            if isinstance(record, ResultRecord | AnalysisRecord):
                tag = f"{record.kind}:{record.key}"
                if tag in seen:
                    problems.append(
                        LineProblem(
                            lineno,
                            f"a second {record.kind} for this key (the first is line "
                            f"{seen[tag]}, which counts); two runs wrote to one file?",
                            "key",
                            record.key,
                        )
                    )
                    continue
                seen[tag] = lineno
            records.append(record)
        return ResultsContents(
            self.path,
            header,
            tuple(records),
            tuple(problems),
            torn=torn,
            lines=len(chunks) if chunks[last] else last,
            size=size,
        )

    def _check_schema(self, header: HeaderRecord, lineno: int) -> None:
        if not OLDEST_SCHEMA <= header.schema <= SCHEMA_VERSION:
            newer = header.schema > SCHEMA_VERSION
            raise ResultsError(
                f"{self.path} line {lineno}: schema {header.schema} is "
                + (
                    f"newer than this equiv reads ({OLDEST_SCHEMA} to {SCHEMA_VERSION}); "
                    "upgrade equiv to read it"
                    if newer
                    else f"not a version equiv ever wrote ({OLDEST_SCHEMA} to {SCHEMA_VERSION})"
                )
            )

    def header(self) -> HeaderRecord:
        contents = self.read()
        if contents.header is None:
            first = contents.problems[0] if contents.problems else None
            why = f" ({first})" if first is not None and first.line == 1 else ""
            raise ResultsError(
                f"{self.path} has no readable header line{why}; it is not an equiv results "
                "file (or it was cut before the first line): start a new run"
            )
        return contents.header

    def records(self) -> Iterator[Record]:
        yield from self.read().records

    def results(self) -> list[ResultRecord]:
        return list(self.read().results)

    def analyses(self) -> list[AnalysisRecord]:
        return list(self.read().analyses)

    def runs(self) -> list[RunRecord]:
        return list(self.read().runs)

    def events(self) -> list[EventRecord]:
        return list(self.read().events)

    def done_keys(self) -> set[str]:
        return self.read().done_keys

    # -- writing -----------------------------------------------------------------------------
    def cut_torn(self) -> bool:
        """Cut off a torn last line (a record never written whole: a resumed run redoes it);
        whether there was one. For the process that holds the results lock."""
        contents = self.read()
        if not contents.torn:
            return False
        try:
            os.truncate(self.path, contents.size)
        except OSError as exc:
            raise self._write_error(exc) from None
        self._cache = None
        return True

    def drop(self, keys: Collection[str]) -> int:
        """Rewrite the file without the results, analyses and run answers of ``keys`` (a resumed
        run redoes them) and without a torn last line; every other line is kept byte for byte,
        unreadable ones included. Atomic: a new file, fsynced, renamed over the old one, so a
        crash leaves either file whole. For the process that holds the results lock. Returns
        lines dropped."""
        wanted = set(keys)
        try:
            lines = self.path.read_bytes().split(b"\n")
        except OSError as exc:
            raise self._write_error(exc) from None
        kept: list[bytes] = []
        dropped = 0
        for raw in lines[:-1]:  # the last piece: b"" after a final newline, else a torn line
            try:
                data = json.loads(raw)
            except ValueError:
                data = None
            if (
                isinstance(data, dict)
                and data.get("kind") in (Kind.RESULT.value, Kind.ANALYSIS.value, Kind.RUN.value)
                and data.get("key") in wanted
            ):
                dropped += 1
                continue
            kept.append(raw + b"\n")
        tmp = self.path.with_name(self.path.name + ".tmp")
        try:
            with tmp.open("wb") as fh:
                fh.writelines(kept)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, self.path)
            with contextlib.suppress(OSError):  # the rename itself, on file systems that allow
                dir_fd = os.open(self.path.parent, os.O_RDONLY)
                try:
                    os.fsync(dir_fd)
                finally:
                    os.close(dir_fd)
        except OSError as exc:
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise self._write_error(exc) from None
        self._cache = None
        return dropped

    def append(self, record: Record) -> None:
        """Append one record as one line: written whole and fsynced, or not at all."""
        data = record.to_dict()
        try:
            line = json.dumps(data, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate in some text: escape it as JSON does
            line = json.dumps(data, ensure_ascii=True, separators=(",", ":")).encode("ascii")
        self._write(line + b"\n", record)

    def _write(self, line: bytes, record: Record) -> None:
        before = self.read()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise self._write_error(exc) from None
        try:
            end = os.lseek(fd, 0, os.SEEK_END)
            start = end
            if before.torn:
                start = before.size  # cut off the torn last line: its result is redone
            elif end > 0:
                os.lseek(fd, end - 1, os.SEEK_SET)
                if os.read(fd, 1) != b"\n":  # a line torn outside this process's knowledge
                    line = b"\n" + line
            try:
                if start != end:
                    os.ftruncate(fd, start)
                os.lseek(fd, start, os.SEEK_SET)
                view = memoryview(line)
                while view:
                    view = view[os.write(fd, view) :]
                os.fsync(fd)
            except OSError as exc:
                # Leave the file as it was before this record: no torn line behind.
                try:
                    os.ftruncate(fd, start)
                    os.fsync(fd)
                except OSError:
                    pass
                raise self._write_error(exc) from None
        finally:
            os.close(fd)
        self._extend(before, record, start, len(line))

    def _extend(self, before: ResultsContents, record: Record, start: int, written: int) -> None:
        """Add the record just written to what was read, so the next read need not parse."""
        try:
            stamp = self._stamp()
        except OSError:
            self._cache = None
            return
        if before.size != start or before.problems:
            self._cache = None
            return
        header = record if isinstance(record, HeaderRecord) else before.header
        lines = before.lines - (1 if before.torn else 0) + 1
        contents = ResultsContents(
            self.path,
            header,
            (*before.records, record),
            (),
            torn=False,
            lines=lines,
            size=start + written,
        )
        self._cache = (stamp, contents)

    def _write_error(self, exc: OSError) -> Exception:
        done = len(self._cache[1].results) if self._cache is not None else 0
        if exc.errno in _NO_SPACE:
            return DiskFullError(
                f"no space left on the device writing {self.path} ({exc.strerror}); the file "
                f"is intact up to its last whole record ({done} finished result(s) kept). "
                "Free some space and rerun with --resume"
            )
        return ResultsError(
            f"cannot write {self.path}: {exc.strerror or exc}; finished results are kept. "
            "Fix the cause and rerun with --resume"
        )

    def write_header(self, header: HeaderRecord) -> HeaderRecord:
        """Start the file with ``header``. Replaces a file that holds a header and nothing
        else (a run that stopped before its first result: nothing is lost)."""
        if self.path.exists():
            if not self.read().replaceable:
                raise ResultsError(f"{self.path} already holds results; it is not replaced")
            self.path.unlink()
            self._cache = None
        self.append(header)
        return header

    def append_result(self, record: ResultRecord) -> ResultRecord:
        self.append(record)
        return record

    def append_analysis(self, record: AnalysisRecord) -> AnalysisRecord:
        """A prompt's distribution tests over all its seeds (sampling mode)."""
        self.append(record)
        return record

    def append_run(self, record: RunRecord) -> RunRecord:
        """The run's own answer over all its prompts (sampling mode), once it has decided."""
        self.append(record)
        return record

    def append_event(self, record: EventRecord) -> EventRecord:
        """Run-level facts found while running (controls, warnings)."""
        self.append(record)
        return record
