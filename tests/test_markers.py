"""The test suite's own promise: ``pytest -m "not model"`` loads no model."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).parent


def test_no_test_outside_the_model_marker_uses_the_real_pair():
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", "not model", str(TESTS)],
        capture_output=True,
        text=True,
        check=True,
        cwd=TESTS.parent,
    ).stdout
    collected = [line for line in out.splitlines() if "::" in line]
    assert collected, out
    # The tests that once loaded the pair without the marker are now deselected.
    for known in (
        "test_cli.py::test_unknown_suite_is_a_prompt_error",
        "test_engine_server.py::test_the_cli_exits_6_on_an_unreachable_server",
    ):
        assert _defined(known), f"{known} is gone from {TESTS}: name a test that exists"
        assert not any(known in line for line in collected), known
    assert any(TESTS.rglob("test_runner.py"))
    assert not any("test_runner.py::" in line for line in collected)


def _defined(known: str) -> bool:
    """Whether ``file::name`` names a test function in a file of that name in any folder of the
    tests (they mirror the package)."""
    file, name = known.split("::")
    return any(f"def {name}(" in path.read_text(encoding="utf-8") for path in TESTS.rglob(file))
