"""The pytest plugin: "speculative decoding leaves the output unchanged" as tests in a team's CI.

Inert unless asked. Importing it imports pytest and the standard library only; the options come
from `equiv.options` (shared with ``equiv run``), and the runner, the engines and llama-cpp-python
are imported when the first check runs. An ``--equiv-*`` option or an ``equiv_*`` ini key turns
every prompt x mode of the selected suites into a test item (``equiv::code/fib_lt::temp0``);
the ``equiv_check`` fixture checks prompts written in a test. Values come from, in order: the
command line, the ini file, the TOML named by ``--equiv-config`` (else ``[tool.equiv]`` of the
rootdir's pyproject.toml), the defaults. Relative paths are relative to the invocation directory.

Under pytest-xdist each worker loads the models once and ships its result records on its test
reports; only the controller sums them up, fails the session on a control or the drift rate, and
writes ``--equiv-report``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import re
import warnings
from collections.abc import Callable, Generator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import pytest

if TYPE_CHECKING:
    from equiv.options.table import Option
    from equiv.prompts import Prompt
    from equiv.pytest.session import Check, CheckSession, Policy

__all__ = [
    "CONFIG_OPTION",
    "ENGINE_OPTION",
    "FAIL_ON_OPTION",
    "MAX_DRIFT_RATE_OPTION",
    "MAX_TOKENS_OPTION",
    "MODE_BOTH",
    "MODE_OPTION",
    "PROMPT_OPTION",
    "REPORT_OPTION",
    "SESSION_ITEM",
    "SUITE_OPTION",
    "WARN_ON_OPTION",
    "EquivFailure",
    "EquivWarning",
    "equiv_check",
    "ini_name",
    "option_name",
]

CONFIG_OPTION = "--equiv-config"
SUITE_OPTION = "--equiv-suite"
PROMPT_OPTION = "--equiv-prompt"
MODE_OPTION = "--equiv-mode"
MAX_TOKENS_OPTION = "--equiv-max-tokens"
ENGINE_OPTION = "--equiv-engine"
REPORT_OPTION = "--equiv-report"
FAIL_ON_OPTION = "--equiv-fail-on"
WARN_ON_OPTION = "--equiv-warn-on"
MAX_DRIFT_RATE_OPTION = "--equiv-max-drift-rate"
#: ``--equiv-mode both`` runs every prompt at temp 0 and in sampling mode, on the same models.
MODE_BOTH = "both"
#: The test that fails when the session as a whole fails (a control, the drift rate).
SESSION_ITEM = "equiv::session"
_CHECKS_ATTR = "equiv_checks"  # the checks (plain data) a test report carries
_SETUP_ATTR = "equiv_setup"  # the model load a set-up report carries: seconds, worker
_IniType = Literal["bool", "linelist", "string"]


def option_name(name: str) -> str:
    """``max-tokens`` -> ``--equiv-max-tokens``."""
    return f"--equiv-{name}"


def ini_name(name: str) -> str:
    """``max-tokens`` -> ``equiv_max_tokens`` (pytest ini key)."""
    return "equiv_" + name.replace("-", "_")


class EquivFailure(AssertionError):
    """A check whose label is in ``--equiv-fail-on``; its message is what pytest shows."""


class EquivWarning(UserWarning):
    """A check whose label is in ``--equiv-warn-on``."""


# -- settings: command line, ini, TOML, defaults ---------------------------------------------
@dataclasses.dataclass(frozen=True)
class _Settings:
    values: dict[str, Any]  # merged option values, as `equiv.options.build.build_config` takes them
    modes: tuple[str, ...]
    policy: Policy
    report: Path | None


def _options() -> tuple[Option, ...]:
    from equiv.options.table import PLUGIN_OPTIONS, RUN_OPTIONS

    return (*RUN_OPTIONS, *PLUGIN_OPTIONS)


def _choices(opt: Option) -> tuple[str, ...] | None:
    return (*opt.choices, MODE_BOTH) if opt.choices and opt.name == "mode" else opt.choices


def _value(config: pytest.Config, opt: Option) -> Any:
    value = config.getoption("equiv_" + opt.dest)
    if value is not None:
        return value
    raw = config.getini(ini_name(opt.name))
    if raw is None or opt.flag or opt.multiple:
        return raw or None  # an unset key, a bool, a list (the empty list: unset)
    try:
        value = opt.type(raw)
    except (ValueError, TypeError) as exc:
        raise pytest.UsageError(f"ini {ini_name(opt.name)} = {raw!r}: {exc}") from None
    if (choices := _choices(opt)) and value not in choices:
        raise pytest.UsageError(f"ini {ini_name(opt.name)} = {raw!r}: choose from {choices}")
    return value


def _tool_equiv(rootpath: Path) -> str | None:
    """The rootdir's pyproject.toml if it has a ``[tool.equiv]`` table (`load_toml` gives the
    whole file, with its ``tool`` or ``project`` table, when it has none)."""
    from equiv.config import load_toml

    path = rootpath / "pyproject.toml"
    if path.is_file() and not {"tool", "project", "build-system"} & load_toml(path).keys():
        return str(path)
    return None


def _read_settings(config: pytest.Config) -> _Settings:
    from equiv.errors import EquivError
    from equiv.options.config_file import merge_toml
    from equiv.pytest.session import Policy
    from equiv.records.verdict import Label

    values = {opt.dest: _value(config, opt) for opt in _options()}
    here = config.invocation_params.dir
    try:
        values["config"] = values["config"] or _tool_equiv(config.rootpath)
        merged = merge_toml(values, _options())
    except EquivError as exc:
        raise pytest.UsageError(f"equiv: {exc}") from None
    modes = ("temp0", "sampling") if merged["mode"] == MODE_BOTH else (str(merged["mode"]),)
    if not set(modes) <= {"temp0", "sampling"}:
        raise pytest.UsageError(f"{MODE_OPTION} {merged['mode']!r}: use temp0, sampling or both")
    try:  # a label that is not one, a rate outside [0, 1]
        policy = Policy(
            fail_on=frozenset(Label(x) for x in merged["fail_on"]),
            warn_on=frozenset(Label(x) for x in merged["warn_on"]),
            max_drift_rate=merged["max_drift_rate"],
            fail_on_quality_drop=bool(merged["fail_on_quality_drop"]),
        )
    except (ValueError, EquivError) as exc:
        labels = ", ".join(label.value for label in Label)
        raise pytest.UsageError(f"equiv: {exc} (labels: {labels})") from None
    report = here / merged["report"] if merged["report"] else None
    return _Settings(values=merged, modes=modes, policy=policy, report=report)


class _State:
    """One process's equiv state: whether it was asked for, its settings, its models."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.requested = any(
            config.getoption("equiv_" + o.dest) is not None
            or config.getini(ini_name(o.name)) not in (None, [])
            for o in _options()
        )
        self._settings: _Settings | None = None
        self._session: CheckSession | None = None
        self.family_size: int | None = None  # the collected suite's prompts (sampling alpha)
        self.setup_reported = False

    @property
    def settings(self) -> _Settings:
        if self._settings is None:
            self._settings = _read_settings(self.config)
        return self._settings

    @property
    def session(self) -> CheckSession:
        """Created on the first check; it loads the models on its first run."""
        if self._session is None:
            from equiv.pytest.session import CheckSession

            argv = ["pytest", *self.config.invocation_params.args]
            self._session = CheckSession(self.settings.values, self.settings.policy, argv=argv)
            self._session.family_size = self.family_size
        return self._session

    @property
    def loaded_s(self) -> float | None:
        """Seconds this process took to load the models, once it has."""
        return None if self._session is None else self._session.setup_s

    def close(self) -> None:
        if self._session is not None:
            self._session.close()


def _worker(config: pytest.Config) -> str:
    """``gw0``... under pytest-xdist, else ``main``."""
    workerinput = getattr(config, "workerinput", None)
    return str(workerinput.get("workerid", "main")) if workerinput else "main"


_STATE = pytest.StashKey[_State]()
_CHECKS = pytest.StashKey[list[dict[str, Any]]]()


def _record(node: pytest.Item, check: Check) -> None:
    node.stash.setdefault(_CHECKS, []).append(check.to_dict())
    node.user_properties.append(("equiv_label", check.label.value))


def _error_text(excinfo: pytest.ExceptionInfo[BaseException]) -> str | None:
    """An `EquivError` names the value and the way out: no traceback."""
    from equiv.errors import EquivError

    return f"equiv: error: {excinfo.value}" if isinstance(excinfo.value, EquivError) else None


# -- collection: one item per prompt x mode --------------------------------------------------
class EquivSuite(pytest.Collector):
    """The virtual node ``equiv`` that holds the suite's items."""

    def collect(self) -> list[pytest.Item | pytest.Collector]:
        from equiv.run.plan import select_prompts

        state = self.config.stash[_STATE]
        s = state.settings
        prompts = select_prompts(s.values["suite"], s.values["prompt"])
        state.family_size = len(prompts)
        return [
            EquivItem.from_parent(self, name=f"{p.key}::{mode}", prompt=p, mode=mode)
            for p in prompts
            for mode in s.modes
        ]

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException]) -> Any:  # type: ignore[override]
        return _error_text(excinfo) or super().repr_failure(excinfo)


class EquivItem(pytest.Item):
    """One prompt x mode: baseline and speculative runs, compared and labelled."""

    def __init__(self, *, prompt: Prompt, mode: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.prompt, self.mode = prompt, mode
        self.add_marker("equiv")

    def setup(self) -> None:
        """Loads the models (once per process) in pytest's set-up phase: a check's call time is
        its own, and ``--durations`` shows the load apart."""
        self.config.stash[_STATE].session.runner(self.mode)

    def runtest(self) -> None:
        from equiv.pytest.session import divergence_line

        state = self.config.stash[_STATE]
        check = state.session.check(self.mode, self.prompt)
        _record(self, check)
        if check.action == "fail":
            labels = ",".join(sorted(state.settings.policy.fail_on))
            why = f"  fails the test: {check.label} is in {FAIL_ON_OPTION} {labels}"
            raise EquivFailure(f"{check}\n{why}")
        if check.action == "warn":
            line = divergence_line(check.record)
            warnings.warn(EquivWarning(f"{self.nodeid}: {check.label}; {line}"), stacklevel=1)

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> Any:
        if isinstance(excinfo.value, EquivFailure):
            return str(excinfo.value)
        return _error_text(excinfo) or super().repr_failure(excinfo, style)

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return self.path, None, f"equiv::{self.name}"


# -- the fixture -----------------------------------------------------------------------------
@pytest.fixture
def equiv_check(request: pytest.FixtureRequest) -> Callable[..., Check]:
    """``equiv_check(text_or_messages, *, max_tokens=None, mode="temp0") -> Check``.

    Runs the prompt through the baseline and speculative paths of the session's models (loaded
    on first use, once per session); ``assert equiv_check("def fib(n):").equivalent``.
    """
    node, calls = request.node, itertools.count(1)
    request.config.stash[_STATE].session.runner("temp0")  # load in the set-up phase, once

    def check(
        prompt: str | Sequence[Mapping[str, str]],
        *,
        max_tokens: int | None = None,
        mode: str = "temp0",
    ) -> Check:
        from equiv.prompts import Prompt

        slug = re.sub(r"[^a-z0-9_]+", "_", node.name.lower()).strip("_")[:20] or "check"
        digest = hashlib.sha256(node.nodeid.encode()).hexdigest()[:6]
        data: dict[str, Any] = {"id": f"{slug}_{digest}_{next(calls)}"}
        data["text" if isinstance(prompt, str) else "messages"] = prompt
        session = request.config.stash[_STATE].session
        result = session.check(mode, Prompt.from_dict(data, suite="check"), max_tokens=max_tokens)
        _record(node, result)
        return result

    return check


# -- hooks -----------------------------------------------------------------------------------
def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("equiv", "equiv: speculative decoding must leave the output unchanged")
    for opt in _options():
        name, helptext = option_name(opt.name), opt.help
        kind: dict[str, Any] = {"action": "store_true"}
        if opt.multiple:
            kind = {"action": "append", "metavar": opt.metavar}
        elif not opt.flag:
            kind = {"type": opt.type, "metavar": opt.metavar, "choices": _choices(opt)}
            helptext += "; both: each prompt in both" if opt.name == "mode" else ""
            helptext += f" [{opt.default}]" if opt.default is not None else ""
        group.addoption(name, dest="equiv_" + opt.dest, default=None, help=helptext, **kind)
        ini_type: _IniType = "bool" if opt.flag else "linelist" if opt.multiple else "string"
        parser.addini(ini_name(opt.name), f"{opt.help} (as {name})", type=ini_type, default=None)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "equiv: a check of equiv's (baseline vs speculative)")
    state = config.stash[_STATE] = _State(config)
    if state.requested:
        state.settings  # noqa: B018 - a bad value is a usage error now, not in every test
    if not hasattr(config, "workerinput"):  # only the controller (or a plain run) sums up
        config.pluginmanager.register(_Reporter(state), "equiv-reporter")


def pytest_unconfigure(config: pytest.Config) -> None:
    if _STATE in config.stash:
        config.stash[_STATE].close()


@pytest.hookimpl(tryfirst=True)  # before -k / -m deselection sees the items
def pytest_collection_modifyitems(
    session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
) -> None:
    if config.stash[_STATE].requested:  # collected as pytest does: counted, errors reported
        suite = EquivSuite.from_parent(session, name="equiv", nodeid="equiv")
        report = suite.ihook.pytest_make_collect_report(collector=suite)
        suite.ihook.pytest_collectreport(report=report)
        items.extend(i for i in report.result if isinstance(i, pytest.Item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if call.when == "setup" and call.excinfo is not None and report.failed:
        report.longrepr = _error_text(call.excinfo) or report.longrepr  # no traceback
    state = item.config.stash[_STATE]
    if call.when == "setup" and not state.setup_reported and state.loaded_s is not None:
        state.setup_reported = True  # the item whose set-up loaded the models says how long
        setattr(report, _SETUP_ATTR, {"seconds": state.loaded_s, "worker": _worker(item.config)})
        item.user_properties.append(("equiv_setup_s", f"{state.loaded_s:.1f}"))  # in junit
    checks = item.stash.get(_CHECKS, None)
    if checks and report.failed and not isinstance(item, EquivItem):
        _explain(report, checks, call.excinfo)
    if checks:  # plain data, so pytest-xdist carries them from a worker to the controller
        setattr(report, _CHECKS_ATTR, list(checks))
        checks.clear()
    return report


def _explain(
    report: pytest.TestReport,
    checks: Sequence[Mapping[str, Any]],
    excinfo: pytest.ExceptionInfo[BaseException] | None,
) -> None:
    """A failing test that used ``equiv_check`` shows each check that is not equivalent in full,
    under its own heading, unless the failure message already holds it (``assert ..., check``
    gives pytest the repr, which it cuts at 240 characters)."""
    from equiv.pytest.session import Check

    message = str(excinfo.value) if excinfo is not None else ""
    add = getattr(report.longrepr, "addsection", None)
    for data in checks:
        check = Check.from_dict(data)
        shown = all(line.strip() in message for line in check.explanation.splitlines())
        if add is not None and not check.equivalent and not shown:
            add(f"equiv: {check.key}", check.explanation)


def pytest_report_teststatus(
    report: pytest.TestReport, config: pytest.Config
) -> tuple[str, str, tuple[str, Mapping[str, bool]]] | None:
    if report.nodeid == SESSION_ITEM and report.failed:  # no progress letter after [100%]
        return "failed", "", ("FAILED", {"red": True})
    checks = getattr(report, _CHECKS_ATTR, None) or ()
    labels = sorted({c["verdict"]["label"] for c in checks} - {"equivalent"})
    if labels and report.passed:
        return "passed", ".", (f"PASSED ({', '.join(labels)})", {"green": True})
    return None


class _Reporter:
    """The controller's side: gathers every check, fails the session, writes the report."""

    def __init__(self, state: _State) -> None:
        self.state = state
        self.checks: list[Check] = []
        self.problems: list[str] = []
        self.written: list[str] = []
        self.setups: list[tuple[str, float]] = []  # (worker, seconds) of each model load

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if setup := getattr(report, _SETUP_ATTR, None):
            self.setups.append((str(setup["worker"]), float(setup["seconds"])))
        if data := getattr(report, _CHECKS_ATTR, None):
            from equiv.pytest.session import Check

            self.checks.extend(Check.from_dict(c) for c in data)

    @pytest.hookimpl(tryfirst=True)  # before --junitxml writes its file
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if not self.checks:
            return
        from equiv.pytest.session import problems, write_results

        s = self.state.settings
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

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
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


def _junit_writer(config: pytest.Config) -> Any:
    """pytest's --junitxml writer, when one is active. Its stash key lives in a private module:
    imported here, only at a session's end with equiv checks, and tolerated if it moves."""
    if not config.getoption("xmlpath", None):
        return None
    try:
        from _pytest import junitxml
    except ImportError:  # pragma: no cover - a pytest that reorganised its private modules
        return None
    key = getattr(junitxml, "xml_key", None)
    return None if key is None else config.stash.get(key, None)
