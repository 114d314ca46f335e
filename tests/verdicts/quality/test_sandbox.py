"""The sandbox that runs generated code: limits, time-outs, an empty dir, a bare environment."""

from __future__ import annotations

import json
import os
import time

import pytest

from equiv.verdicts.quality.sandbox import RESULT_FILE, Limits, network_isolation, run_python


def test_runs_in_an_empty_directory_with_a_bare_environment() -> None:
    result = run_python(
        {
            "main.py": (
                "import os, json\n"
                f"open({RESULT_FILE!r}, 'w').write(json.dumps("
                "{'cwd': os.getcwd(), 'files': sorted(os.listdir('.')),"
                " 'env': dict(os.environ)}))\n"
            )
        },
        "main.py",
    )
    seen = json.loads(result.result)
    assert result.returncode == 0, result.stderr
    assert os.path.basename(seen["cwd"]).startswith("equiv-sandbox-")
    assert seen["files"] == sorted([".stdout", ".stderr", RESULT_FILE, "main.py"])
    assert set(seen["env"]) <= {"PATH", "HOME", "LC_ALL", "LC_CTYPE"}
    assert not os.path.exists(seen["cwd"]), "the temp dir is removed afterwards"


def test_a_hung_program_is_killed_at_the_wall_clock_limit() -> None:
    start = time.monotonic()
    result = run_python(
        {"main.py": "import time\nwhile True:\n    time.sleep(0.05)\n"},
        "main.py",
        limits=Limits(timeout_s=0.5),
    )
    assert result.timed_out
    assert time.monotonic() - start < 5


def test_its_children_die_with_it() -> None:
    source = (
        "import subprocess, sys\n"
        "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)'])\n"
        f"open({RESULT_FILE!r}, 'w').write(str(p.pid))\n"
        "p.wait()\n"
    )
    result = run_python({"main.py": source}, "main.py", limits=Limits(timeout_s=5.0))
    assert result.timed_out
    pid = int(result.result)
    time.sleep(0.2)
    assert _state(pid) in {"gone", "Z", "X"}, "killed (a zombie until its new parent reaps it)"


def _state(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return "gone"


def test_memory_limit_turns_a_huge_allocation_into_memoryerror() -> None:
    source = (
        "try:\n    x = bytearray(4 * 1024**3)\n    r = 'allocated'\n"
        "except MemoryError:\n    r = 'MemoryError'\n"
        f"open({RESULT_FILE!r}, 'w').write(r)\n"
    )
    result = run_python({"main.py": source}, "main.py", limits=Limits(memory_mb=512))
    assert result.result == "MemoryError"


def test_file_size_limit_stops_endless_output() -> None:
    result = run_python(
        {"main.py": "while True:\n    print('x' * 10000)\n"},
        "main.py",
        limits=Limits(timeout_s=10, file_size_mb=1),
    )
    assert not result.timed_out
    assert result.returncode != 0
    assert len(result.stdout) <= 4000


def test_a_crash_is_a_result_not_an_exception() -> None:
    result = run_python(
        {"main.py": "import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)\n"}, "main.py"
    )
    assert result.signal_name == "SIGSEGV"


def test_no_network_where_unshare_works() -> None:
    prefix, isolation = network_isolation()
    if not prefix:
        pytest.skip(f"this machine cannot isolate the network: {isolation}")
    source = (
        "import socket\n"
        "names = sorted(n for _, n in socket.if_nameindex())\n"
        f"open({RESULT_FILE!r}, 'w').write(','.join(names))\n"
    )
    result = run_python({"main.py": source}, "main.py")
    assert result.result == "lo", "only the loopback device exists in the new namespace"
    assert "no network" in result.isolation


def test_main_must_be_one_of_the_files() -> None:
    with pytest.raises(ValueError, match=r"'missing\.py' is not among the files"):
        run_python({"main.py": ""}, "missing.py")
