"""Comparing two runs of the same plan: what changed, with honest intervals, and a CI gate."""

import json

import pytest

from equiv.cli.main import main
from equiv.records import HeaderRecord, ResultRecord, ResultsFile
from equiv.verdicts.runs.compare import Gate, RunRecords, compare_runs

FIXTURE = "tests/fixtures/temp0_results.jsonl"


def _run(name="A"):
    return RunRecords.from_file(ResultsFile(FIXTURE), name=name)


def _modified():
    """Run B: one prompt newly a sampler bug, one identical prompt newly diverged (its baseline
    output changed), a different thread count, and the baseline twice as slow."""
    a = _run()
    results = [r.to_dict() for r in a.results]
    diverged = next(r for r in results if not r["comparison"]["identical"])
    diverged["verdict"] = {**diverged["verdict"], "label": "sampler-bug", "reason": "injected"}
    same = next(r for r in results if r["comparison"]["identical"])
    same["comparison"]["identical"] = False
    same["baseline"]["tokens"] = [*same["baseline"]["tokens"][:-1], 7]
    same["verdict"] = {"label": "numeric-drift", "reason": "a flip", "evidence": {}}
    for r in results:
        r["baseline"]["t_decode_s"] *= 2
    header = a.header.to_dict()
    header["config"]["n_threads"] = 4
    typed = [ResultRecord.from_dict(r) for r in results]
    run_b = RunRecords("B", HeaderRecord.from_dict(header), typed, a.analyses, a.events)
    return a, run_b, diverged["key"], same["key"]


def test_an_unchanged_run_shows_no_change_and_passes_every_gate():
    a = _run()
    c = compare_runs(a, _run("B"))
    assert (c.changes, c.setup, c.only_a, c.only_b) == ((), (), (), ())
    assert c.common == 7
    for shift in (c.drift, c.acceptance, c.baseline_speed, c.speculative_speed):
        assert shift.a == shift.b
        assert not shift.significant
    assert c.failures(Gate.CHANGED) == []


def test_label_changes_new_divergences_and_outputs_are_named():
    a, b, bug_key, flipped_key = _modified()
    c = compare_runs(a, b)
    by_key = {ch.key: ch for ch in c.changes}
    assert set(by_key) == {bug_key, flipped_key}
    assert by_key[bug_key].label_b == "sampler-bug"
    assert by_key[bug_key].worse
    flipped = by_key[flipped_key]
    assert (flipped.diverged_a, flipped.diverged_b) == (False, True)
    assert flipped.baseline_changed
    assert not flipped.speculative_changed
    assert "new divergence" in flipped.line
    assert "baseline output changed" in flipped.line
    assert c.setup == ("config.n_threads: 2 -> 4",)
    assert len(c.failures(Gate.WORSE)) == 2
    assert c.failures(Gate.NEVER) == []


def test_a_real_slowdown_is_significant_and_its_interval_holds_it():
    a, b, _, _ = _modified()
    c = compare_runs(a, b)
    speed = c.baseline_speed
    assert speed.change == pytest.approx(0.5)
    assert speed.low <= 0.5 <= speed.high
    assert speed.significant
    assert "a real change" in speed.line
    assert not c.speculative_speed.significant  # untouched
    assert c.speculative_speed.change == pytest.approx(1.0)


def test_compare_cli_gates_prints_json_and_writes_a_page(tmp_path, capsys):
    _a, b, bug_key, _ = _modified()
    folder = tmp_path / "new"
    results = ResultsFile(folder / "results.jsonl")
    results.write_header(b.header)
    for r in b.results:
        results.append_result(r)
    for e in b.events:
        results.append_event(e)
    page = tmp_path / "compare.html"
    code = main(["compare", FIXTURE, str(folder), "--json", "--html", str(page)])
    out, err = capsys.readouterr()
    assert code == 1
    data = json.loads(out)
    assert data["gate"] == "worse"
    assert any(bug_key in f for f in data["failures"])
    assert data["shifts"]["baseline_speed"]["significant"] is True
    assert "compare: FAILS --fail-on worse" in err
    html = page.read_text(encoding="utf-8")
    assert "FAILS" in html
    assert bug_key in html
    assert main(["compare", FIXTURE, str(folder), "--fail-on", "never", "-q"]) == 0
    assert "compare: passes --fail-on never" in capsys.readouterr().out


def test_compare_refuses_what_is_not_a_run(tmp_path, capsys):
    assert main(["compare", FIXTURE, str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err
    assert "nope" in err
    assert "results.jsonl" in err
    assert main(["compare", FIXTURE, "tests/fixtures/sampling_results.jsonl"]) == 2
    assert "share no prompt" in capsys.readouterr().err


def test_long_header_values_are_cut_where_they_differ():
    from equiv.verdicts.runs.setup_differences import setup_differences

    vnni = {"system_info": "CPU : SSE3 = 1 | AVX = 1 | AVX_VNNI = 1 | " + "X" * 80}
    plain = {"system_info": "CPU : SSE3 = 1 | AVX = 1 | " + "X" * 80}
    a = HeaderRecord(config={}, fingerprints={"baseline": vnni})
    b = HeaderRecord(config={}, fingerprints={"baseline": plain})
    (line,) = setup_differences(a, b)
    assert line.startswith("fingerprints.baseline.system_info: ")
    assert "AVX_VNNI" in line.split(" -> ")[0]
    assert "AVX_VNNI" not in line.split(" -> ")[1]


def test_equiv_report_of_two_runs_writes_their_comparison(tmp_path, capsys):
    out = tmp_path / "two.html"
    assert main(["report", FIXTURE, FIXTURE, "-o", str(out)]) == 0
    assert f"report: {out}" in capsys.readouterr().out
    html = out.read_text(encoding="utf-8")
    assert "What changed from A to B" in html
    assert "No label, divergence or output changed." in html
