"""The controller's side of the plugin: it gathers every check the test reports carry (from
pytest-xdist workers too), fails the session on a control or the drift rate, as the failed test
``equiv::session``, and writes ``--equiv-report``."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, cast

import pytest

if TYPE_CHECKING:
    from _pytest.junitxml import LogXML

    from equiv.pytest.session import Check
    from equiv.pytest.settings import Settings

__all__ = ["CHECKS_ATTR", "SESSION_ITEM", "SETUP_ATTR", "Reporter"]

#: The test that fails when the session as a whole fails (a control, the drift rate).
SESSION_ITEM = "equiv::session"
CHECKS_ATTR = "equiv_checks"  # the checks (plain data) a test report carries
SETUP_ATTR = "equiv_setup"  # the model load a set-up report carries: seconds, worker


class Reporter:
    """The controller's side: gathers every check, fails the session, writes the report."""

    def __init__(self, settings: Callable[[], Settings]) -> None:
        self.settings = settings  # read when the session ends
        self.checks: list[Check] = []
        self.problems: list[str] = []
        self.written: list[str] = []
        self.setups: list[tuple[str, float]] = []  # (worker, seconds) of each model load

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if setup := getattr(report, SETUP_ATTR, None):
            self.setups.append((str(setup["worker"]), float(setup["seconds"])))
        if data := getattr(report, CHECKS_ATTR, None):
            from equiv.pytest.session import Check

            self.checks.extend(Check.from_dict(c) for c in data)

    @pytest.hookimpl(tryfirst=True)  # before --junitxml writes its file
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if not self.checks:
            return
        from equiv.pytest.session import problems, write_results

        s = self.settings()
        self.problems = problems(self.checks, s.policy)
        if self.problems and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
        xml = _junit_writer(session.config)
        if xml is not None:  # CI that reads only the XML sees why the session failed
            for problem in self.problems:
                xml.add_global_property("equiv_session_failure", problem)
        if self.problems:  # counted as a failed test: summary line, exit status, junit counts
            _report_session_failure(session, self.problems)
        if s.report is not None:
            try:
                self.written = [str(p) for p in write_results(self.checks, s.report)]
            except Exception as exc:  # a report must not hide the test outcome
                self.written = [f"not written: {exc!r}"]

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if self.checks:
            from equiv.pytest.session import summary_lines

            terminalreporter.write_sep("=", "equiv")
            if self.setups:
                loads = ", ".join(f"{s:.1f} s ({w})" for w, s in sorted(self.setups))
                terminalreporter.write_line(
                    f"set-up: models loaded in {loads}, apart from the checks' time "
                    "(a set-up phase in pytest --durations)"
                )
            for line in summary_lines(self.checks):
                terminalreporter.write_line(line)
            for problem in self.problems:
                terminalreporter.write_line(f"equiv fails the session: {problem}", red=True)
            for line in self.written:
                terminalreporter.write_line(f"equiv report: {line}")


def _report_session_failure(session: pytest.Session, problems: Sequence[str]) -> None:
    """The session's failure as the failed test ``equiv::session``, reported the way pytest
    reports any test (set-up, call, teardown), so that the summary line, the exit status and
    the junit counts all say the session failed, with the reason as its failure message."""
    hook, location = session.config.hook, ("equiv", None, SESSION_ITEM)
    # One more test than collected: counted, so progress stays at 100 %, on a line of its own.
    session.testscollected += 1
    terminal = session.config.pluginmanager.get_plugin("terminalreporter")
    if terminal is not None:
        terminal.ensure_newline()
    text = "\n".join(f"equiv fails the session: {p}" for p in problems)
    properties = [("equiv_session_failure", p) for p in problems]
    for when, outcome in (("setup", "passed"), ("call", "failed"), ("teardown", "passed")):
        report = pytest.TestReport(
            SESSION_ITEM,
            location,
            {"equiv": 1},
            outcome,  # type: ignore[arg-type]
            text if outcome == "failed" else None,
            when,  # type: ignore[arg-type]
            user_properties=properties,  # junit reads a case's properties at its teardown
        )
        hook.pytest_runtest_logreport(report=report)


def _junit_writer(config: pytest.Config) -> LogXML | None:
    """pytest's --junitxml writer, when one is active. Its stash key lives in a private module:
    imported here, only at a session's end with equiv checks, and tolerated if it moves."""
    if not config.getoption("xmlpath", None):
        return None
    try:
        from _pytest import junitxml
    except ImportError:  # pragma: no cover - a pytest that reorganised its private modules
        return None
    key = getattr(junitxml, "xml_key", None)
    return None if key is None else cast("LogXML | None", config.stash.get(key, None))
