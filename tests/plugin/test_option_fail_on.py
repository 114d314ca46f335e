"""--equiv-fail-on: the labels that fail a check; a failure says why in a few lines."""

import pytest

from equiv.pytest.plugin import FAIL_ON_OPTION, ini_name

pytest_plugins = ["pytester"]


def test_default_fails_only_sampler_bugs_and_misconfigurations(project):
    result = project.pytester.runpytest(*project.args)
    calls = project.calls(result)
    assert set(calls) == {"equiv::s/same::temp0", "equiv::s/drift::temp0", "equiv::s/bug::temp0"}
    assert project.label(calls["equiv::s/same::temp0"]) == "equivalent"
    for report in calls.values():
        fails = project.label(report) in ("sampler-bug", "misconfiguration")
        assert report.failed is fails, report.longreprtext


def test_every_divergence_fails_with_its_label_and_first_divergence(project):
    result = project.pytester.runpytest(*project.args, FAIL_ON_OPTION, project.NOT_EQUIVALENT)
    calls = project.calls(result)
    assert calls["equiv::s/same::temp0"].passed
    assert calls["equiv::s/drift::temp0"].failed
    failed = calls["equiv::s/bug::temp0"]
    assert failed.failed
    text = failed.longreprtext
    label = project.label(failed)
    assert text.startswith(f"{label}: ")
    assert "first divergence at token 2" in text
    assert "baseline     't5' (id 5)" in text
    assert "speculative  't6' (id 6)" in text
    assert f"fails the test: {label} is in {FAIL_ON_OPTION}" in text
    assert len(text.splitlines()) <= 8, text  # a few lines, not a wall of numbers
    assert "Traceback" not in text
    result.stdout.fnmatch_lines([f"FAILED equiv::s/bug::temp0 - {label}: *"])
    assert result.ret == pytest.ExitCode.TESTS_FAILED


def test_fail_on_as_an_ini_key(project):
    project.pytester.makeini(f"[pytest]\n{ini_name('fail-on')} = {project.NOT_EQUIVALENT}\n")
    result = project.pytester.runpytest(*project.args)
    assert project.calls(result)["equiv::s/drift::temp0"].failed


def test_an_empty_fail_on_fails_nothing(project):
    result = project.pytester.runpytest(*project.args, f"{FAIL_ON_OPTION}=")
    assert result.ret == pytest.ExitCode.OK
    result.assert_outcomes(passed=3)


def test_a_word_that_is_no_label_is_a_usage_error(project):
    result = project.pytester.runpytest(*project.args, FAIL_ON_OPTION, "sampler_bug")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*'sampler_bug' is not a valid Label*sampler-bug*"])
