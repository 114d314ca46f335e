"""The equiv_check fixture: hand-written prompts on the session's models, loaded once."""

import xml.etree.ElementTree as ET

from equiv.pytest.session import Check

pytest_plugins = ["pytester"]

HAND_WRITTEN = """
import pytest

def test_text(equiv_check):
    check = equiv_check("all the same", max_tokens=3)
    assert check.equivalent
    assert check.label == "equivalent"
    assert check.record.baseline.n_tokens == 3

def test_chat_messages(equiv_check):
    assert equiv_check([{"role": "user", "content": "hi"}]).equivalent

def test_divergence(equiv_check):
    check = equiv_check("a sampler bug")
    assert check.equivalent, check

def test_bad_mode(equiv_check):
    equiv_check("x", mode="greedy")
"""


def test_fixture_checks_share_one_pair_of_models_and_explain_a_divergence(project):
    project.pytester.makepyfile(test_hand=HAND_WRITTEN)
    # Without an --equiv-* option the suite adds no items; the fixture still works, with the
    # engine and models named in [tool.equiv].
    project.pytester.makepyprojecttoml(
        '[tool.equiv]\nengine = "fake_engine:make_engine"\n'
        'target = "target.gguf"\ndraft = "draft.gguf"\n'
    )
    result = project.pytester.runpytest()
    calls = project.calls(result)
    assert list(calls) == [
        f"test_hand.py::test_{n}" for n in ("text", "chat_messages", "divergence", "bad_mode")
    ]
    assert calls["test_hand.py::test_text"].passed
    assert calls["test_hand.py::test_chat_messages"].passed
    assert project.loads() == ["baseline", "speculative"]  # one load for the session
    text = calls["test_hand.py::test_divergence"].longreprtext
    label = project.label(calls["test_hand.py::test_divergence"])
    assert "<equiv check/test_divergence_" in text
    assert f": {label} (evidence: str(check))>" in text
    # The explanation in full, under its own heading (the assertion's repr is cut at 240).
    assert "equiv: check/test_divergence_" in text
    assert f"\n{label}: " in text
    assert "first divergence at token 2 (48 baseline / 48 speculative tokens)" in text
    assert "evidence: " in text
    assert (
        "mode 'greedy' is not one of temp0, sampling"
        in calls["test_hand.py::test_bad_mode"].longreprtext
    )
    result.stdout.fnmatch_lines(["*= equiv =*", "labels: *equivalent*"])


README_PATTERN = """
def test_support_greeting(equiv_check):
    check = equiv_check("a sampler bug", max_tokens=4)
    assert check.label not in ("sampler-bug", "misconfiguration", "numeric-drift"), check

def test_with_str(equiv_check):
    check = equiv_check("a sampler bug", max_tokens=4)
    assert check.equivalent, str(check)
"""


def test_the_documented_assert_pattern_shows_the_full_explanation(project):
    project.pytester.makepyfile(test_readme=README_PATTERN)
    result = project.pytester.runpytest(
        *project.args, "-k", "test_support or test_with", "--junitxml=junit.xml"
    )
    calls = project.calls(result)
    for name in ("test_support_greeting", "test_with_str"):
        report = calls[f"test_readme.py::{name}"]
        assert report.failed
        text = report.longreprtext
        (data,) = report.equiv_checks
        explanation = Check.from_dict(data).explanation
        assert len(explanation) > 240  # longer than pytest shows of a repr
        for line in explanation.splitlines():  # every line, untruncated
            assert line.strip() in text, line
        assert text.count("first divergence at token 2 (") == 1  # once, not twice
    root = ET.parse(project.pytester.path / "junit.xml").getroot()
    failures = [c.find("failure") for c in root.iter("testcase")]
    assert len(failures) == 2
    assert all("first divergence at token 2 (" in (f.text or "") for f in failures)
