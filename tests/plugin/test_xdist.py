"""Under pytest-xdist: workers run the checks, the controller alone sums up and reports: each
control once, each worker's model load apart from the checks' time."""

import pytest

from equiv.pytest.plugin import FAIL_ON_OPTION, REPORT_OPTION

pytest_plugins = ["pytester"]


def test_two_workers_one_report_with_every_check(project):
    project.pytester.makepyfile(
        test_hand="def test_hand(equiv_check):\n    assert equiv_check('all the same').equivalent\n"
    )
    result = project.pytester.runpytest_subprocess(
        *project.args,
        "-n",
        "2",
        "-p",
        "no:cacheprovider",
        REPORT_OPTION,
        "report",
        FAIL_ON_OPTION,
        project.NOT_EQUIVALENT,
    )
    result.assert_outcomes(passed=2, failed=2)
    result.stdout.fnmatch_lines(["*first divergence at token 2*", "*= equiv =*", "labels: *"])
    out = result.stdout.str()
    assert out.count("equiv report: ") == 2 + ("report.html" in out)  # results, summary.json
    lines = project.results()
    assert sum(r["kind"] == "header" for r in lines) == 1
    keys = sorted(r["key"] for r in lines if r["kind"] == "result")
    assert keys[1:] == ["s/bug::temp0", "s/drift::temp0", "s/same::temp0"]
    assert keys[0].startswith("check/test_hand_")
    assert 1 <= sum(r.get("event") == "determinism" for r in lines) <= 2  # one per busy worker
    assert len(project.loads()) in (2, 4)  # each worker loads the models once
    # The control once in the summary, the model loads apart from the checks' own time.
    assert len([line for line in out.splitlines() if line.startswith("control determinism")]) == 1
    result.stdout.fnmatch_lines(
        ["set-up: models loaded in * s (gw*), apart from the checks' time *"]
    )
    workers = out.count(" s (gw")
    assert workers == len(project.loads()) // 2
    assert result.ret == pytest.ExitCode.TESTS_FAILED
