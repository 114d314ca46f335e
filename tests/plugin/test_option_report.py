"""--equiv-report DIR: the session's results file (with summary.json and the HTML page),
written once."""

import importlib.util
import json

from equiv.pytest.plugin import FAIL_ON_OPTION, REPORT_OPTION

pytest_plugins = ["pytester"]


def test_report_holds_a_header_every_check_and_the_controls(project):
    project.pytester.makepyfile(
        test_hand="""
        def test_hand(equiv_check):
            assert equiv_check("a hand written prompt").equivalent
        """
    )
    result = project.pytester.runpytest(
        *project.args, REPORT_OPTION, "report", FAIL_ON_OPTION, project.NOT_EQUIVALENT
    )
    lines = project.results()
    assert lines[0]["kind"] == "header"
    assert lines[0]["config"]["engine"] == "fake_engine:make_engine"
    assert sum(r["kind"] == "header" for r in lines) == 1
    keys = sorted(r["key"] for r in lines if r["kind"] == "result")
    assert keys[1:] == ["s/bug::temp0", "s/drift::temp0", "s/same::temp0"]
    assert keys[0].startswith("check/test_hand_")
    assert [r["event"] for r in lines if r["kind"] == "event"] == ["determinism"]
    records = {r["key"]: r for r in lines if r["kind"] == "result"}
    assert records["s/bug::temp0"]["comparison"]["divergence"]["position"] == 2  # failed, kept
    html = project.report / "report.html"
    assert html.is_file() is (importlib.util.find_spec("equiv.report") is not None)
    result.stdout.fnmatch_lines(["equiv report: *results.jsonl", "equiv report: *summary.json"])
    summary = json.loads((project.report / "summary.json").read_text(encoding="utf-8"))
    labels = [project.label(r) for r in project.calls(result).values() if r.user_properties]
    assert summary["prompts"] == len(labels) == 4
    assert summary["labels"] == {
        label: labels.count(label)
        for label in ("equivalent", "numeric-drift", "sampler-bug", "misconfiguration",
                      "inconclusive")
    }  # fmt: skip
    assert summary["drift"]["kl_p999"] is not None
    event = next(r for r in lines if r["kind"] == "event")
    assert summary["controls"] == [{"event": "determinism", "ok": True, "detail": event["detail"]}]


def test_a_second_session_replaces_the_results(project):
    project.pytester.runpytest(*project.args, REPORT_OPTION, "report")
    project.pytester.runpytest(*project.args, REPORT_OPTION, "report", "-k", "same")
    lines = project.results()
    assert [r["key"] for r in lines if r["kind"] == "result"] == ["s/same::temp0"]
