"""Property: arbitrary bytes, truncations and edits of real results files, given to ``equiv report``
and to a ``--resume``, never give a traceback and never drop a record in silence. Every line is
either a record, a named problem (line number and field), or the torn last line that a resume
redoes; a file that cannot be a results file at all is a named error (exit 7)."""

from __future__ import annotations

import contextlib
import io
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from markupsafe import escape

from equiv.cli.main import main
from equiv.config import ModelSpec, RunConfig
from equiv.errors import EquivError, ResultsError
from equiv.prompts import Prompt
from equiv.records import ResultsContents, ResultsFile
from equiv.report.text import plain
from equiv.run.plan import plan
from equiv.run.runner import Runner

TESTS = Path(__file__).parents[1]
TEMP0 = TESTS / "fixtures" / "temp0_results.jsonl"
SETTINGS = settings(
    max_examples=int(os.environ.get("EQUIV_FUZZ_EXAMPLES", "60")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)


def _edits(original: bytes) -> st.SearchStrategy[bytes]:
    """The original cut short, with a slice replaced, bytes inserted or removed, a byte
    flipped, or lines repeated, dropped or swapped; or any bytes at all."""
    n = len(original)
    lines = original.split(b"\n")
    position = st.integers(0, n)
    junk = st.binary(max_size=40)

    def replace(at: int, size: int, data: bytes) -> bytes:
        return original[:at] + data + original[at + size :]

    def flip(at: int, bit: int) -> bytes:
        at = min(at, n - 1)
        return original[:at] + bytes([original[at] ^ (1 << bit)]) + original[at + 1 :]

    def relines(order: list[int]) -> bytes:
        return b"\n".join(lines[i] for i in order)

    return st.one_of(
        st.builds(lambda k: original[:k], position),
        st.builds(replace, position, st.integers(0, 200), junk),
        st.builds(flip, position, st.integers(0, 7)),
        st.builds(relines, st.lists(st.integers(0, len(lines) - 1), max_size=2 * len(lines))),
        st.binary(max_size=3000),
    )


@contextlib.contextmanager
def _quiet() -> Iterator[io.StringIO]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        yield err


def _accounted(path: Path, contents: ResultsContents) -> None:
    """Every non-blank line is a record, a named problem, or the torn last line."""
    lines = [line for line in path.read_bytes().split(b"\n") if line.strip()]
    assert len(contents.records) + len(contents.problems) + contents.torn == len(lines)
    assert all(p.line >= 1 and str(p).startswith(f"line {p.line}") for p in contents.problems)


def _read(path: Path) -> ResultsContents | None:
    try:
        contents = ResultsFile(path).read()
    except ResultsError:
        return None
    _accounted(path, contents)
    return contents


@SETTINGS
@given(data=_edits(TEMP0.read_bytes()))
def test_report_of_a_damaged_file_names_what_it_cannot_read(data: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path, out = Path(tmp) / "results.jsonl", Path(tmp) / "report.html"
        path.write_bytes(data)
        contents = _read(path)
        with _quiet() as err:
            code = main(["report", str(path), "-o", str(out)])
        assert "Traceback" not in err.getvalue()
        if contents is None or contents.header is None:
            assert code == 7, err.getvalue()
            assert "equiv: error:" in err.getvalue()
            return
        assert code == 0, err.getvalue()
        html = out.read_text(encoding="utf-8")
        for record in contents.results:
            assert str(escape(plain(record.key))) in html
        if contents.problems:
            shown = f"{contents.unreadable} of {contents.lines} line(s) of the results file"
            assert shown in html
            assert f"{contents.unreadable} of {contents.lines} line(s)" in err.getvalue()


# -- resuming a damaged file ----------------------------------------------------------------------

PROMPTS = [
    Prompt(suite="s", id=name, text=text, max_tokens=5)
    for name, text in (("a", "café"), ("b", "naïve"), ("c", "fin"))
]


def _factory(config: RunConfig, *, speculative: bool) -> object:
    from integrity_engine import make_engine

    return make_engine(config, speculative=speculative)


@pytest.fixture(scope="module")
def original(tmp_path_factory: pytest.TempPathFactory) -> tuple[RunConfig, bytes]:
    """A real results file of three prompts, written by the runner."""
    import sys

    sys.path.insert(0, str(TESTS))
    folder = tmp_path_factory.mktemp("original")
    config = RunConfig(target=ModelSpec("t.gguf"), draft=ModelSpec("d.gguf"), engine="integrity")
    with Runner(config, _factory, folder / "results.jsonl") as runner:  # type: ignore[arg-type]
        runner.run(plan(PROMPTS, config))
    return config, (folder / "results.jsonl").read_bytes()


@SETTINGS
@given(st.data())
def test_resume_of_a_damaged_file_finishes_or_names_why_and_drops_nothing(
    original: tuple[RunConfig, bytes], data: st.DataObject
) -> None:
    config, whole = original
    damaged = data.draw(_edits(whole))
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "results.jsonl"
        path.write_bytes(damaged)
        before = _read(path)
        refused: EquivError | None = None
        try:
            with Runner(config, _factory, path) as runner:  # type: ignore[arg-type]
                runner.run(plan(PROMPTS, config), resume=True)
        except EquivError as exc:
            refused = exc
        if refused is not None:
            # Only a file that is not a results file, or of another run, is refused.
            assert isinstance(refused, ResultsError) or "cannot resume" in str(refused), refused
            assert path.read_bytes() == damaged  # and then nothing was written
            return
        after = _read(path)
        assert after is not None
        assert after.header is not None
        assert after.done_keys >= {item.key for item in plan(PROMPTS, config)}
        assert not after.torn
        if before is not None and not before.replaceable:
            # Append-only: what could be read before is still there, and every line that could
            # not be read is still named. (A header alone, or a torn first line, is replaced.)
            assert after.records[: len(before.records)] == before.records
            assert [p.line for p in after.problems] == [p.line for p in before.problems]
            last = [line for line in path.read_bytes().split(b"\n") if line.strip()][-1]
            json.loads(last)  # a whole last line
