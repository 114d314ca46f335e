"""A session that equiv fails counts as a failure everywhere CI looks: a failed control (here the
determinism control on a nondeterministic engine) fails ``equiv::session``, with its reason, in
the summary line, the exit status and the junit counts, alone and under pytest-xdist."""

import xml.etree.ElementTree as ET

import pytest

from equiv.pytest.plugin import SESSION_ITEM, SUITE_OPTION

pytest_plugins = ["pytester"]


def _flaky_first(project, second="all the same"):
    (project.pytester.path / "f.jsonl").write_text(
        f'{{"id": "flaky", "text": "a flaky engine"}}\n{{"id": "two", "text": "{second}"}}\n',
        encoding="utf-8",
    )
    return [a if a != "s.jsonl" else "f.jsonl" for a in project.args]


def test_a_failed_control_fails_the_session_item(project):
    args = _flaky_first(project)
    assert SUITE_OPTION in args
    result = project.pytester.runpytest(*args, "--junitxml=junit.xml", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(
        [
            "control determinism: FAILED - *",
            f"FAILED {SESSION_ITEM} - equiv fails the session: control determinism FAILED*",
            "*= 1 failed, 2 passed in *",
        ]
    )
    root = ET.parse(project.pytester.path / "junit.xml").getroot()
    suite = root.find("testsuite")
    assert suite is not None
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("3", "1", "0")
    failed = [c for c in root.iter("testcase") if c.find("failure") is not None]
    assert [(c.get("classname"), c.get("name")) for c in failed] == [("equiv", "session")]
    assert "not deterministic" in (failed[0].find("failure").text or "")


def test_under_xdist_the_controller_fails_the_session_once(project):
    args = _flaky_first(project, "flaky again")  # whichever a worker runs first, it is flaky
    result = project.pytester.runpytest_subprocess(
        *args, "-n", "2", "-p", "no:cacheprovider", "--junitxml=junit.xml"
    )
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    out = result.stdout.str()
    assert out.count(f"FAILED {SESSION_ITEM}") == 1
    suite = ET.parse(project.pytester.path / "junit.xml").getroot().find("testsuite")
    assert suite is not None
    assert suite.get("failures") == "1"
