"""--equiv-warn-on: labels that pass with a warning instead of failing."""

import pytest

from equiv.pytest.plugin import FAIL_ON_OPTION, WARN_ON_OPTION

pytest_plugins = ["pytester"]


def test_warned_labels_pass_with_a_warning_and_say_so(project):
    result = project.pytester.runpytest(
        *project.args,
        "-v",
        f"{FAIL_ON_OPTION}=",
        WARN_ON_OPTION,
        project.NOT_EQUIVALENT,
        "-W",  # this session runs with filterwarnings = error, which would make it fail
        "always::equiv.pytest.plugin.EquivWarning",
    )
    assert result.ret == pytest.ExitCode.OK
    label = project.label(project.calls(result)["equiv::s/bug::temp0"])
    result.stdout.fnmatch_lines(
        [
            f"*equiv::s/bug::temp0 PASSED ({label})*",
            "*EquivWarning: equiv::s/bug::temp0: "
            f"{label}; first divergence at token 2: baseline 't5', speculative 't6'",
        ]
    )
