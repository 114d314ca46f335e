"""The results lock: one process per results file, named when another holds it, gone with its
process however that process ends."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from equiv.errors import ConfigError, ResultsLockedError
from equiv.run.lock import ResultsLock, check_out_dir, lock_path

HOLD = textwrap.dedent(
    """
    import sys, time
    from equiv.run.lock import ResultsLock
    lock = ResultsLock(sys.argv[1]).acquire()
    print("held", flush=True)
    time.sleep(60)
    """
)


def _holder(results: Path) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(results)], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_another_process_holding_the_lock_is_named(tmp_path):
    results = tmp_path / "results.jsonl"
    holder = _holder(results)
    try:
        with pytest.raises(ResultsLockedError, match=f"in use by PID {holder.pid} ") as caught:
            ResultsLock(results).acquire()
        assert "choose another --out directory" in str(caught.value)
        assert caught.value.exit_code == 8
    finally:
        holder.send_signal(signal.SIGKILL)  # kill -9: the lock goes with the process
        holder.communicate()
    assert lock_path(results).is_file()  # left by the killed process: harmless
    with ResultsLock(results) as lock:
        assert lock.held
        assert lock_path(results).read_text().split("\n")[0] == str(os.getpid())
    assert not lock_path(results).exists()  # released: nothing left behind


def test_a_second_lock_in_one_process_is_refused_and_release_is_idempotent(tmp_path):
    results = tmp_path / "results.jsonl"
    first = ResultsLock(results).acquire()
    with pytest.raises(ResultsLockedError, match=f"PID {os.getpid()}"):
        ResultsLock(results).acquire()
    first.release()
    first.release()
    ResultsLock(results).acquire().release()


def test_the_lock_is_free_as_soon_as_its_holder_exits(tmp_path):
    results = tmp_path / "results.jsonl"
    holder = _holder(results)
    holder.terminate()
    holder.communicate()
    deadline = time.monotonic() + 10
    while True:
        try:
            ResultsLock(results).acquire().release()
            break
        except ResultsLockedError:
            assert time.monotonic() < deadline
            time.sleep(0.05)


def test_out_must_be_a_directory(tmp_path):
    taken = tmp_path / "file"
    taken.write_text("x")
    with pytest.raises(ConfigError, match="is a file; --out names a directory"):
        check_out_dir(taken)
    with pytest.raises(ConfigError, match="is a file, not a directory"):
        check_out_dir(taken / "below")
    (tmp_path / "d" / "results.jsonl").mkdir(parents=True)
    with pytest.raises(ConfigError, match=r"results\.jsonl is not a file"):
        check_out_dir(tmp_path / "d")
    assert check_out_dir(tmp_path / "new") == tmp_path / "new"


def test_a_lock_file_removed_by_its_holder_is_not_taken_by_mistake(tmp_path, monkeypatch):
    """A run that opened the lock file just before its holder removed it locks a file no longer
    at the path: it must see that, and take the file that is there now."""
    results = tmp_path / "results.jsonl"
    real_open = ResultsLock._open
    stale = tmp_path / "stale"
    opened = []

    def open_stale_first(self):
        if not opened:  # the file its holder removes as it lets go
            opened.append(os.open(stale, os.O_RDWR | os.O_CREAT))
            stale.unlink()
            return opened[0]
        return real_open(self)

    monkeypatch.setattr(ResultsLock, "_open", open_stale_first)
    lock = ResultsLock(results).acquire()
    assert opened  # the stale file was tried first
    assert os.fstat(lock._fd).st_ino == os.stat(lock_path(results)).st_ino
    monkeypatch.setattr(ResultsLock, "_open", real_open)
    with pytest.raises(ResultsLockedError):
        ResultsLock(results).acquire()
    lock.release()
