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
    result.assert_outcomes(failed=3)
    result.stdout.fnmatch_lines(["*equiv: error: target model: *missing.gguf*"])
