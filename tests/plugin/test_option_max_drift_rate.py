"""--equiv-max-drift-rate: the session fails when too many checks are numeric-drift, and says so
everywhere CI looks: the summary line, the exit status, the junit counts (``equiv::session``)."""

import xml.etree.ElementTree as ET

import pytest

from equiv.pytest.plugin import FAIL_ON_OPTION, MAX_DRIFT_RATE_OPTION, SESSION_ITEM

pytest_plugins = ["pytester"]


def _labels(project, result):
    calls = project.calls(result)
    return sorted(project.label(r) for k, r in calls.items() if k != SESSION_ITEM)


def test_the_session_fails_when_drift_exceeds_the_rate(project):
    """The fake engine's ``drift`` prompt is a designed near-tie (logits 0.02 apart, each path
    its own argmax): one numeric-drift of three checks is above a rate of 0."""
    result = project.pytester.runpytest(
        *project.args, f"{FAIL_ON_OPTION}=", MAX_DRIFT_RATE_OPTION, "0", "--junitxml=junit.xml"
    )
    assert _labels(project, result) == ["equivalent", "numeric-drift", "sampler-bug"]
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.assert_outcomes(passed=3, failed=1)
    result.stdout.fnmatch_lines(
        [
            "equiv fails the session: numeric-drift on * is above *",
            f"FAILED {SESSION_ITEM} - equiv fails the session: numeric-drift on *",
            "*= 1 failed, 3 passed in *",
        ]
    )
    suite = ET.parse(project.pytester.path / "junit.xml").getroot().find("testsuite")
    assert suite is not None
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("4", "1", "0")
    failure = _cases(project)["equiv::session"].find("failure")
    assert failure is not None
    assert failure.get("message", "").startswith("equiv fails the session: numeric-drift on ")
    assert any("numeric-drift on" in p for p in _session_failures(project))  # and a property


def test_the_session_passes_when_drift_is_within_the_rate(project):
    result = project.pytester.runpytest(
        *project.args, f"{FAIL_ON_OPTION}=", MAX_DRIFT_RATE_OPTION, "0.5", "--junitxml=junit.xml"
    )
    assert _labels(project, result) == ["equivalent", "numeric-drift", "sampler-bug"]
    assert result.ret == pytest.ExitCode.OK
    result.assert_outcomes(passed=3)
    assert SESSION_ITEM not in project.calls(result)
    assert "equiv fails the session" not in result.stdout.str()
    assert _session_failures(project) == []
    suite = ET.parse(project.pytester.path / "junit.xml").getroot().find("testsuite")
    assert suite is not None
    assert (suite.get("tests"), suite.get("failures")) == ("3", "0")


@pytest.mark.parametrize("verbosity", [[], ["-v"]])
def test_the_failed_session_is_named_once_and_not_drawn_as_progress(project, verbosity):
    result = project.pytester.runpytest(
        *project.args, *verbosity, f"{FAIL_ON_OPTION}=", MAX_DRIFT_RATE_OPTION, "0"
    )
    out = result.stdout.str()
    assert "numeric-drift" in out
    assert out.count(f"FAILED {SESSION_ITEM}") == 1
    assert "[133%]" not in out  # 3 collected items and this one: progress ends at 100 %
    assert f"_ {SESSION_ITEM} _" in out  # its own entry under FAILURES
    assert result.ret == pytest.ExitCode.TESTS_FAILED


def _cases(project):
    root = ET.parse(project.pytester.path / "junit.xml").getroot()
    return {f"{c.get('classname')}::{c.get('name')}": c for c in root.iter("testcase")}


def _session_failures(project):
    root = ET.parse(project.pytester.path / "junit.xml").getroot()
    props = root.iter("property")
    return [p.get("value") for p in props if p.get("name") == "equiv_session_failure"]


def test_a_rate_outside_zero_one_is_a_usage_error(project):
    result = project.pytester.runpytest(*project.args, MAX_DRIFT_RATE_OPTION, "1.5")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*max drift rate 1.5*[0, 1]*"])
