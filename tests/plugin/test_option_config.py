"""Values from [tool.equiv], --equiv-config, the ini file and the command line, in that order of
increasing precedence."""

from equiv.pytest.plugin import CONFIG_OPTION, MAX_TOKENS_OPTION, REPORT_OPTION, ini_name

pytest_plugins = ["pytester"]


def _tokens(project):
    return {len(r["baseline"]["tokens"]) for r in project.results() if r["kind"] == "result"}


def _tool_equiv(max_tokens):
    return (
        "[tool.equiv]\n"
        'engine = "fake_engine:make_engine"\ntarget = "target.gguf"\ndraft = "draft.gguf"\n'
        f'suite = ["s.jsonl"]\nmax_tokens = {max_tokens}\nreport = "report"\n'
    )


def test_tool_equiv_configures_and_an_ini_key_turns_the_suite_on(project):
    project.pytester.makepyprojecttoml(
        _tool_equiv(5) + f'\n[tool.pytest.ini_options]\n{ini_name("prompt")} = ["s/same"]\n'
    )
    result = project.pytester.runpytest()
    assert list(project.calls(result)) == ["equiv::s/same::temp0"]
    assert _tokens(project) == {5}


def test_the_command_line_beats_the_ini_file_which_beats_the_toml(project):
    project.pytester.makepyprojecttoml(
        _tool_equiv(5) + f'\n[tool.pytest.ini_options]\n{ini_name("max-tokens")} = "3"\n'
    )
    project.pytester.runpytest()
    assert _tokens(project) == {3}
    project.pytester.runpytest(MAX_TOKENS_OPTION, "2")
    assert _tokens(project) == {2}


def test_equiv_config_names_another_toml_file(project):
    (project.pytester.path / "equiv.toml").write_text(_tool_equiv(6), encoding="utf-8")
    project.pytester.runpytest(CONFIG_OPTION, "equiv.toml", REPORT_OPTION, "report")
    assert _tokens(project) == {6}


def test_an_unknown_key_in_tool_equiv_is_a_usage_error(project):
    project.pytester.makepyprojecttoml(_tool_equiv(5) + "fail_onn = []\n")
    result = project.pytester.runpytest(*project.args)
    assert result.ret == 4
    result.stderr.fnmatch_lines(["*unknown option(s) in *pyproject.toml*: fail_onn*"])
