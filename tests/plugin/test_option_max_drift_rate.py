"""--equiv-max-drift-rate: the session fails when too many checks are numeric-drift."""

import xml.etree.ElementTree as ET

import pytest

from equiv.pytest.plugin import FAIL_ON_OPTION, MAX_DRIFT_RATE_OPTION

pytest_plugins = ["pytester"]


def test_the_session_fails_exactly_when_drift_exceeds_the_rate(project):
    result = project.pytester.runpytest(
        *project.args, f"{FAIL_ON_OPTION}=", MAX_DRIFT_RATE_OPTION, "0", "--junitxml=junit.xml"
    )
    labels = [project.label(r) for r in project.calls(result).values()]
    result.assert_outcomes(passed=3)
    drift = labels.count("numeric-drift")
    if drift:  # whatever the classifier called the fake divergence, the rule must hold
        assert result.ret == pytest.ExitCode.TESTS_FAILED
        result.stdout.fnmatch_lines(["equiv fails the session: numeric-drift on * is above *"])
        assert any("numeric-drift on" in p for p in _session_failures(project))  # CI sees it too
    else:
        assert result.ret == pytest.ExitCode.OK
        assert "equiv fails the session" not in result.stdout.str()
        assert _session_failures(project) == []


def _session_failures(project):
    root = ET.parse(project.pytester.path / "junit.xml").getroot()
    props = root.iter("property")
    return [p.get("value") for p in props if p.get("name") == "equiv_session_failure"]


def test_a_rate_outside_zero_one_is_a_usage_error(project):
    result = project.pytester.runpytest(*project.args, MAX_DRIFT_RATE_OPTION, "1.5")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*max drift rate 1.5*[0, 1]*"])
