"""Results integrity under crashes, concurrency, full disks and damaged files (issue 14), on the
command line with a model-free engine (``integrity_engine.py``): real processes where the case is
about processes (a second run, kill -9), in-process runs elsewhere.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from equiv.cli.main import main
from equiv.records import ResultsFile
from equiv.records import file as records_file

TESTS = Path(__file__).parents[1]
PROMPTS = [
    {"id": "a", "text": "café au lait", "max_tokens": 6},
    {"id": "b", "text": "crème brûlée", "max_tokens": 6},
    {"id": "c", "messages": [{"role": "user", "content": "déjà vu?"}], "max_tokens": 6},
]
KEYS = {f"s/{p['id']}::temp0" for p in PROMPTS}


class Setup:
    """A suite of three prompts, a tiny GGUF pair and the `equiv run` arguments that use them."""

    def __init__(self, tmp_path: Path, make_gguf: Callable[..., Path]) -> None:
        self.tmp = tmp_path
        self.suite = tmp_path / "s.jsonl"
        self.write_suite(PROMPTS)
        target, draft = make_gguf("target.gguf"), make_gguf("draft.gguf")
        self.args = [
            "run",
            "--engine",
            "integrity_engine:make_engine",
            "--target",
            str(target),
            "--draft",
            str(draft),
            "--suite",
            str(self.suite),
        ]
        self.out = tmp_path / "out"
        self.results = self.out / "results.jsonl"

    def write_suite(self, prompts: list[dict]) -> None:
        text = "".join(json.dumps(p, ensure_ascii=False) + "\n" for p in prompts)
        self.suite.write_text(text, encoding="utf-8")

    def run(self, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, str]:
        code = main([*self.args, "--out", str(self.out), *extra])
        return code, capsys.readouterr().err

    def report(self, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
        code = main(["report", str(self.results), "-o", str(self.tmp / "report.html")])
        return code, capsys.readouterr().err

    def html(self) -> str:
        return (self.tmp / "report.html").read_text(encoding="utf-8")

    def env(self, **extra: object) -> dict[str, str]:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(TESTS), env.get("PYTHONPATH")]))
        env.update({k: str(v) for k, v in extra.items()})
        return env

    @property
    def gate(self) -> Path:
        return self.tmp / "gate"

    def start(self, *extra: str, hold_after: int) -> subprocess.Popen[str]:
        """`equiv run` in its own process, whose engine calls after the first ``hold_after``
        wait until `gate` exists."""
        return subprocess.Popen(
            [sys.executable, "-m", "equiv", *self.args, "--out", str(self.out), *extra],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=self.env(EQUIV_TEST_HOLD_AFTER=hold_after, EQUIV_TEST_GATE=self.gate),
            cwd=self.tmp,
        )


@pytest.fixture
def setup(tmp_path: Path, make_gguf: Callable[..., Path], monkeypatch: pytest.MonkeyPatch) -> Setup:
    monkeypatch.syspath_prepend(str(TESTS))
    monkeypatch.delenv("EQUIV_TEST_HOLD_AFTER", raising=False)
    return Setup(tmp_path, make_gguf)


def _wait_for(condition: Callable[[], bool], timeout: float = 60.0) -> None:
    end = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > end:
            raise AssertionError("timed out waiting")
        time.sleep(0.01)


def _kinds(path: Path) -> list[str]:
    """The kinds of the file's finished lines: a line still being written (no newline yet) is
    skipped, since a poll may read it between the writer's chunks."""
    lines = path.read_text(encoding="utf-8").split("\n")[:-1]
    return [json.loads(line)["kind"] for line in lines]


def _whole(path: Path) -> None:
    """Every line of the file is a record: nothing torn, nothing unreadable."""
    contents = ResultsFile(path).read()
    assert contents.problems == ()
    assert not contents.torn
    assert {r.key for r in contents.results} == KEYS
    assert len(contents.results) == len(KEYS)


# -- 1. one run at a time ------------------------------------------------------------------------


def test_a_second_run_on_a_directory_in_use_is_refused_naming_the_holder(setup, capsys):
    # The first run holds the directory with a header and one result (both paths of the first
    # prompt), its determinism control waiting.
    first = setup.start(hold_after=2)
    try:
        _wait_for(lambda: setup.results.is_file() and "result" in _kinds(setup.results))
        second = subprocess.run(
            [sys.executable, "-m", "equiv", *setup.args, "--out", str(setup.out), "--resume"],
            capture_output=True,
            text=True,
            env=setup.env(),
            cwd=setup.tmp,
            timeout=120,
        )
        assert second.returncode == 8, second.stderr
        assert f"is in use by PID {first.pid}" in second.stderr
        assert "Traceback" not in second.stderr
        assert _kinds(setup.results) == ["header", "result"]  # the second wrote nothing
    finally:
        setup.gate.touch()
        _, err = first.communicate(timeout=120)
    assert first.returncode == 0, err
    _whole(setup.results)
    assert _kinds(setup.results).count("event") == 1  # one determinism control, one run
    assert setup.run(capsys, "--resume")[0] == 0  # the lock went with its process


# -- 2. controls after a crash ------------------------------------------------------------------


def test_kill_9_after_the_first_result_then_resume_runs_the_determinism_control(setup, capsys):
    run = setup.start(hold_after=2)  # the control's generate call waits
    try:
        _wait_for(lambda: setup.results.is_file() and "result" in _kinds(setup.results))
        run.send_signal(signal.SIGKILL)
    finally:
        run.communicate(timeout=60)
    assert _kinds(setup.results) == ["header", "result"]  # killed before its control
    code, err = setup.run(capsys, "--resume")
    assert code == 0, err
    _whole(setup.results)
    (event,) = ResultsFile(setup.results).read().events
    assert (event.event, event.ok) == ("determinism", True)


# -- 3. a prompt that changed --------------------------------------------------------------------


def test_resume_refuses_a_prompt_whose_text_changed_and_names_it(setup, capsys):
    assert setup.run(capsys)[0] == 0
    setup.write_suite([PROMPTS[0], {**PROMPTS[1], "text": "crème brûlée, again"}, PROMPTS[2]])
    code, err = setup.run(capsys, "--resume")
    assert code == 2
    assert "the prompt of s/b::temp0 changed since its result was recorded" in err
    setup.write_suite(PROMPTS)
    assert setup.run(capsys, "--resume")[0] == 0
    _whole(setup.results)


# -- 4. a failed up-front check leaves nothing behind ----------------------------------------------


def test_a_failed_up_front_check_writes_nothing_and_blocks_nothing(setup, capsys):
    code, err = setup.run(capsys, "--n-ctx", "16")
    assert code == 5
    assert "n_ctx" in err
    assert not setup.results.exists()
    code, err = setup.run(capsys)
    assert code == 0, err
    _whole(setup.results)


def test_a_header_only_file_left_by_an_earlier_run_is_replaced(setup, capsys):
    assert setup.run(capsys)[0] == 0
    header = json.loads(setup.results.read_text(encoding="utf-8").splitlines()[0])
    header["config"]["n_ctx"] = 16  # what an earlier, stopped run wrote
    for extra in ((), ("--resume",)):
        setup.results.write_text(json.dumps(header) + "\n", encoding="utf-8")
        code, err = setup.run(capsys, *extra)
        assert code == 0, err
        _whole(setup.results)


# -- 5. and 6. a damaged results file ------------------------------------------------------------


def test_a_torn_last_line_inside_a_utf8_character_is_skipped_and_redone(setup, capsys):
    assert setup.run(capsys)[0] == 0
    data = setup.results.read_bytes()
    lines = data.split(b"\n")
    assert b'"kind":"result"' in lines[-2]  # the last line is a result
    start = len(data) - len(lines[-2]) - 1
    cut = start + lines[-2].index("é".encode()) + 1  # inside the two bytes of é
    setup.results.write_bytes(data[:cut])
    code, err = setup.report(capsys)
    assert code == 0, err
    assert "could not be read" not in err
    assert "cut by a crash" in setup.html()
    code, err = setup.run(capsys, "--resume")
    assert code == 0, err
    _whole(setup.results)


def test_a_non_utf8_byte_in_a_line_is_named_by_report_and_resume(setup, capsys):
    assert setup.run(capsys)[0] == 0
    lines = setup.results.read_bytes().split(b"\n")
    lines[1] = lines[1].replace("é".encode(), b"\xff", 1)
    setup.results.write_bytes(b"\n".join(lines))
    code, err = setup.report(capsys)
    assert code == 0
    assert "1 of 5 line(s)" in err
    assert "line 2: not UTF-8 (byte 0xff" in err
    assert "1 of 5 line(s) of the results file could not be read" in setup.html()
    code, err = setup.run(capsys, "--resume")  # that result is redone; the line is named
    assert code == 0, err
    assert "line 2: not UTF-8" in err
    contents = ResultsFile(setup.results).read()
    assert {r.key for r in contents.results} == KEYS
    assert [p.line for p in contents.problems] == [2]


@pytest.mark.parametrize(
    ("edit", "named"),
    [
        (lambda r: r.pop("baseline"), "): baseline: missing"),
        (lambda r: r.pop("key"), "line 2: key: missing"),
        (lambda r: r["comparison"].update(identical="yes"), "comparison.identical: expected"),
    ],
)
def test_a_record_without_a_field_is_named_and_counted(setup, capsys, edit, named):
    assert setup.run(capsys)[0] == 0
    lines = setup.results.read_text(encoding="utf-8").splitlines()
    record = json.loads(lines[1])
    edit(record)
    lines[1] = json.dumps(record, ensure_ascii=False)
    setup.results.write_text("\n".join(lines) + "\n", encoding="utf-8")
    code, err = setup.report(capsys)
    assert code == 0
    assert named in err
    assert "1 of 5 line(s) of the results file could not be read" in setup.html()
    code, err = setup.run(capsys, "--resume")
    assert code == 0, err
    assert {r.key for r in ResultsFile(setup.results).read().results} == KEYS


def test_invalid_json_in_the_middle_is_named_not_dropped(setup, capsys):
    assert setup.run(capsys)[0] == 0
    lines = setup.results.read_text(encoding="utf-8").splitlines()
    lines[2] = lines[2][: len(lines[2]) // 2]
    setup.results.write_text("\n".join(lines) + "\n", encoding="utf-8")
    code, err = setup.report(capsys)
    assert code == 0
    assert "line 3: not valid JSON" in err
    assert "line 3: not valid JSON" in setup.html()


@pytest.mark.parametrize("command", ["report", "resume"])
def test_another_schema_or_a_binary_file_is_a_named_error(setup, capsys, command):
    assert setup.run(capsys)[0] == 0
    lines = setup.results.read_text(encoding="utf-8").splitlines()
    header = json.loads(lines[0])
    header["schema"] = 99
    setup.results.write_text("\n".join([json.dumps(header), *lines[1:]]) + "\n", encoding="utf-8")
    code, err = setup.report(capsys) if command == "report" else setup.run(capsys, "--resume")
    assert code == 7
    assert "schema 99 is newer than this equiv reads" in err
    setup.results.write_bytes(os.urandom(2048).replace(b"\n", b"") + b"\n\x00\xff")
    code, err = setup.report(capsys) if command == "report" else setup.run(capsys, "--resume")
    assert code == 7
    assert "not an equiv results file" in err
    assert "Traceback" not in err


# -- 7. the disk full ----------------------------------------------------------------------------


def test_disk_full_is_a_named_error_leaves_no_torn_line_and_resume_finishes(
    setup, capsys, monkeypatch
):
    real_write = os.write
    writes = {"n": 0}

    def write(fd: int, data: bytes) -> int:
        writes["n"] += 1
        if writes["n"] == 3:  # the second result: half of it, then the disk is full
            return real_write(fd, bytes(data[: len(data) // 2]))
        if writes["n"] > 3:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, data)

    monkeypatch.setattr(records_file.os, "write", write)
    code, err = setup.run(capsys)
    assert code == 9, err
    assert "no space left on the device" in err
    assert "rerun with --resume" in err
    assert "Traceback" not in err
    contents = ResultsFile(setup.results).read()
    assert contents.problems == ()
    assert not contents.torn
    assert _kinds(setup.results) == ["header", "result"]
    monkeypatch.setattr(records_file.os, "write", real_write)
    code, err = setup.run(capsys, "--resume")
    assert code == 0, err
    _whole(setup.results)


# -- 9. and 10. options checked before any model loads -------------------------------------------


def test_out_naming_a_file_is_refused_before_the_models_load(setup, capsys, tmp_path):
    taken = tmp_path / "taken"
    taken.write_text("not a directory")
    args = ["run", "--target", str(tmp_path / "missing.gguf"), "--out", str(taken)]
    assert main(args) == 2  # not 3: the model file was never looked at
    assert "is a file; --out names a directory" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("option", "named"),
    [
        (["--temp", "inf"], "temp=inf is not a finite number"),
        (["--temp", "nan"], "temp=nan is not a finite number"),
        (["--temp", "-1"], "temp=-1.0 is negative"),
        (["--top-p", "1.5"], "top_p=1.5 is outside (0, 1]"),
        (["--min-p", "-0.5"], "min_p=-0.5 is outside [0, 1]"),
        (["--repeat-penalty", "inf"], "repeat_penalty=inf is not a finite number"),
    ],
)
@pytest.mark.parametrize("mode", ["temp0", "sampling"])
def test_sampling_values_are_checked_in_every_mode(capsys, tmp_path, option, named, mode):
    missing = str(tmp_path / "missing.gguf")
    code = main(["run", "--mode", mode, "--target", missing, "--out", str(tmp_path), *option])
    err = capsys.readouterr().err
    assert code == 2, err  # before the model file is looked at (that would be 3)
    assert named in err
