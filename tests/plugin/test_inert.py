"""Without an equiv option, ini key or fixture, the plugin does nothing and loads nothing."""

pytest_plugins = ["pytester"]

HEAVY = ("llama_cpp", "equiv.run.runner", "equiv.pytest.session", "equiv.engines.llamacpp")


def test_inert_without_options(pytester):
    pytester.makeconftest(
        f"""
        import sys

        def pytest_unconfigure(config):  # after every hook of the session has run
            print("heavy modules:", [m for m in {HEAVY!r} if m in sys.modules])
        """
    )
    pytester.makepyfile("def test_plain():\n    assert True\n")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["heavy modules: []"])
    assert "equiv::" not in result.stdout.str()
    assert "= equiv =" not in result.stdout.str()


def test_a_tool_equiv_table_alone_adds_no_tests(pytester):
    """[tool.equiv] configures; it does not add the suite's items."""
    pytester.makepyprojecttoml('[tool.equiv]\nsuite = ["code"]\nmax_tokens = 4\n')
    pytester.makepyfile("def test_plain():\n    assert True\n")
    result = pytester.runpytest()
    result.assert_outcomes(passed=1)
    assert "= equiv =" not in result.stdout.str()
