"""The JSONL results file, the run's source of truth: read once into typed records, appended to
one whole line at a time.

The file holds one header line, then one line per finished result (and analysis, and event),
each appended with a single ``write`` and fsynced as it finishes, so a crash or Ctrl-C loses
nothing finished and ``--resume`` skips what is done. Reports are rendered from this file alone.

`ResultsFile.read` returns what `equiv.records.reader` makes of the file: the typed records and,
for each line it could not use, a `LineProblem`; a torn last line (a crash in the middle of a
write) is redone, and the next append cuts it off. Only a file that cannot be a results file at
all (no header, a newer schema) raises `ResultsError`.

A failed append (the disk full, ...) cuts the file back to where it was, so no torn line is left
behind, and raises `DiskFullError` (or `ResultsError` for another I/O error).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
from collections.abc import Collection, Iterator
from pathlib import Path

from equiv.errors import DiskFullError, ResultsError
from equiv.records.header import HeaderRecord
from equiv.records.kinds import AnalysisRecord, EventRecord, Kind, RunRecord
from equiv.records.reader import LineProblem, Record, ResultsContents, parse_contents
from equiv.records.result import ResultRecord

__all__ = ["LineProblem", "ResultsContents", "ResultsFile"]

_NO_SPACE = {errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)}


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
        contents = parse_contents(self.path, self.path.read_bytes())
        self._cache = (stamp, contents)
        return contents

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
