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
        assert not any(known in line for line in collected), known
    assert not any("test_runner.py::" in line for line in collected)
