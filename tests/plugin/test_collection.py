"""Items: one per prompt x mode, readable ids under the virtual node ``equiv``."""

from equiv.pytest.plugin import PROMPT_OPTION

pytest_plugins = ["pytester"]


def test_collect_only_shows_the_ids_and_keywords_select_them(project):
    result = project.pytester.runpytest(*project.args, "--collect-only", "-q")
    result.stdout.fnmatch_lines(
        ["equiv::s/same::temp0", "equiv::s/drift::temp0", "equiv::s/bug::temp0", "3 tests*"]
    )
    result = project.pytester.runpytest(*project.args, "-k", "bug", "-m", "equiv")
    assert list(project.calls(result)) == ["equiv::s/bug::temp0"]
    assert project.loads() == ["baseline", "speculative"]


def test_no_prompt_matches_is_an_error_that_names_the_glob(project):
    result = project.pytester.runpytest(*project.args, PROMPT_OPTION, "s/nope*")
    assert result.ret == 2  # interrupted: an error during collection
    result.stdout.fnmatch_lines(["*equiv: error: no prompt matches --prompt s/nope**"])
    assert "Traceback" not in result.stdout.str()


def test_a_model_that_cannot_load_fails_every_item_with_the_reason(project):
    args = [a if a != "target.gguf" else "missing.gguf" for a in project.args]
    result = project.pytester.runpytest(*args)
    result.assert_outcomes(errors=3)  # in the set-up phase, where the models load
    result.stdout.fnmatch_lines(["*equiv: error: target model: *missing.gguf*"])


def test_the_model_load_is_set_up_time_not_a_checks_call_time(project):
    result = project.pytester.runpytest(*project.args, "--junitxml=junit.xml")
    reports = result.reprec.getreports("pytest_runtest_logreport")
    setups = [r for r in reports if r.when == "setup" and hasattr(r, "equiv_setup")]
    assert [r.nodeid for r in setups] == ["equiv::s/same::temp0"]  # the first item's set-up
    result.stdout.fnmatch_lines(
        ["set-up: models loaded in * s (main), apart from the checks' time *"]
    )
    junit = (project.pytester.path / "junit.xml").read_text(encoding="utf-8")
    assert junit.count('name="equiv_setup_s"') == 1
