"""--equiv-mode: temp0, sampling, or both, on models loaded once."""

from equiv.pytest.plugin import MODE_BOTH, MODE_OPTION, REPORT_OPTION, ini_name, option_name

pytest_plugins = ["pytester"]


def test_both_modes_make_two_items_per_prompt_on_one_pair_of_engines(project):
    result = project.pytester.runpytest(
        *project.args, MODE_OPTION, MODE_BOTH, option_name("seeds"), "2", REPORT_OPTION, "report"
    )
    assert set(project.calls(result)) == {
        "equiv::s/same::temp0",
        "equiv::s/same::sampling",
        "equiv::s/drift::temp0",
        "equiv::s/drift::sampling",
        "equiv::s/bug::temp0",
        "equiv::s/bug::sampling",
    }
    assert project.loads() == ["baseline", "speculative"]  # the models loaded once
    sampling = [r for r in project.results(project.report / "sampling") if r["kind"] == "result"]
    assert sorted(r["key"] for r in sampling) == [
        "s/bug::seed1",
        "s/bug::seed2",
        "s/drift::seed1",
        "s/drift::seed2",
        "s/same::seed1",
        "s/same::seed2",
    ]
    temp0 = [r for r in project.results(project.report / "temp0") if r["kind"] == "result"]
    assert sorted(r["key"] for r in temp0) == ["s/bug::temp0", "s/drift::temp0", "s/same::temp0"]


def test_an_unknown_mode_in_the_ini_file_is_a_usage_error(project):
    project.pytester.makeini(f"[pytest]\n{ini_name('mode')} = greedy\n")
    result = project.pytester.runpytest(*project.args)
    assert result.ret == 4
    result.stderr.fnmatch_lines(["*equiv_mode = 'greedy'*temp0*sampling*both*"])
