"""--junitxml: test case names, the label as a property, the failure message as pytest shows it."""

import xml.etree.ElementTree as ET

from equiv.pytest.plugin import FAIL_ON_OPTION

pytest_plugins = ["pytester"]


def test_junit_xml_has_the_cases_labels_and_failure_message(project):
    project.pytester.runpytest(
        *project.args, "--junitxml=junit.xml", FAIL_ON_OPTION, project.NOT_EQUIVALENT
    )
    root = ET.parse(project.pytester.path / "junit.xml").getroot()
    cases = {f"{c.get('classname')}::{c.get('name')}": c for c in root.iter("testcase")}
    assert set(cases) == {"equiv.s/same::temp0", "equiv.s/drift::temp0", "equiv.s/bug::temp0"}
    same, div = cases["equiv.s/same::temp0"], cases["equiv.s/bug::temp0"]
    assert same.find("failure") is None
    assert _properties(same) == {
        "equiv_label": "equivalent",
        "equiv_setup_s": _properties(same)["equiv_setup_s"],  # the first: the models' load
    }
    assert float(_properties(same)["equiv_setup_s"]) >= 0
    assert "equiv_setup_s" not in _properties(div)
    label = _properties(div)["equiv_label"]
    failure = div.find("failure")
    assert failure is not None
    assert failure.get("message", "").startswith(f"{label}: ")
    assert "first divergence at token 2" in (failure.text or "")
    assert f"fails the test: {label} is in --equiv-fail-on" in (failure.text or "")


def _properties(case):
    return {p.get("name"): p.get("value") for p in case.iter("property")}
