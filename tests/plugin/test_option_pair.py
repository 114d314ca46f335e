"""--equiv-pair: a built-in pair by name, refused beside a model path."""

from equiv.pytest.plugin import option_name

pytest_plugins = ["pytester"]


def test_pair_hybrid_beside_a_target_fails_the_checks_with_the_way_out(project):
    assert option_name("target") in project.args
    result = project.pytester.runpytest(*project.args, option_name("pair"), "hybrid")
    assert result.ret != 0
    result.stdout.fnmatch_lines(
        ["*pair 'hybrid' names both models, but --target 'target.gguf' was given too*"]
    )
    assert project.loads() == []  # refused before any model was loaded


def test_an_unknown_pair_is_a_usage_error(project):
    result = project.pytester.runpytest(*project.args, option_name("pair"), "mamba")
    assert result.ret == 4
    result.stderr.fnmatch_lines(["*--equiv-pair: invalid choice: 'mamba'*"])
