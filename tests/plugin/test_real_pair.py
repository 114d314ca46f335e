"""The plugin on the real default pair (Gemma 3 270M Q4_K_M, Q4_0 draft): two small runs."""

import xml.etree.ElementTree as ET

import pytest

from equiv.pytest.plugin import ENGINE_OPTION, MAX_TOKENS_OPTION, PROMPT_OPTION, REPORT_OPTION

pytest_plugins = ["pytester"]
pytestmark = pytest.mark.model

HAND_WRITTEN = """
def test_hand_written(equiv_check):
    check = equiv_check("def add(a, b):\\n    return", max_tokens=4)
    assert check.label.value != "sampler-bug", check
"""


def _junit(pytester):
    root = ET.parse(pytester.path / "junit.xml").getroot()
    return {f"{c.get('classname')}::{c.get('name')}": c for c in root.iter("testcase")}


def test_default_pair_passes_with_readable_ids(pytester, real_models):
    pytester.makepyfile(test_hand=HAND_WRITTEN)
    result = pytester.runpytest_subprocess(
        "-v", "-p", "no:cacheprovider", "--junitxml=junit.xml", REPORT_OPTION, "report",
        PROMPT_OPTION, "code/fib_lt", PROMPT_OPTION, "code/py_last_n", MAX_TOKENS_OPTION, "6",
    )  # fmt: skip
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(
        [
            "test_hand.py::test_hand_written PASSED*",
            "equiv::code/fib_lt::temp0 PASSED*",
            "equiv::code/py_last_n::temp0 PASSED*",
            "*= equiv =*",
            "labels: *",
            "temp0: *: * prompt(s) *",
        ]
    )
    lines = (pytester.path / "report" / "results.jsonl").read_text().splitlines()
    assert sum('"kind":"header"' in line for line in lines) == 1
    assert sum('"kind":"result"' in line for line in lines) == 3
    assert {"equiv.code/fib_lt::temp0", "equiv.code/py_last_n::temp0"} <= set(_junit(pytester))


def test_an_injected_sampler_fault_fails_with_a_clear_message(pytester, real_models):
    """The reference engine reading the target's logits one row off: the default policy fails
    it, and the message (in the terminal and the junit XML) says why in a few lines."""
    pytest.importorskip("equiv.engines.reference")
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "--junitxml=junit.xml",
        ENGINE_OPTION, "reference:off_by_one",
        PROMPT_OPTION, "code/fib_lt", MAX_TOKENS_OPTION, "4",
    )  # fmt: skip
    result.assert_outcomes(failed=1)
    case = _junit(pytester)["equiv.code/fib_lt::temp0"]
    label = {p.get("name"): p.get("value") for p in case.iter("property")}["equiv_label"]
    assert label in ("sampler-bug", "misconfiguration")  # the default --equiv-fail-on
    failure = case.find("failure")
    assert failure is not None
    text = failure.text or ""
    assert failure.get("message", "").startswith(f"{label}: ")
    assert "first divergence at token " in text
    assert "\n    baseline     '" in text
    assert "\n    speculative  '" in text
    assert f"fails the test: {label} is in --equiv-fail-on" in text
    assert len(text.splitlines()) <= 8
    result.stdout.fnmatch_lines([f"FAILED equiv::code/fib_lt::temp0 - {label}: *"])
