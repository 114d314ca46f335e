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

This module holds the hooks, the items and the fixture; the settings are read by
`equiv.pytest.settings`, the controller's side is `equiv.pytest.reporter`, and the checks run in
`equiv.pytest.session`.
"""

from __future__ import annotations

import hashlib
import itertools
import re
import warnings
from collections.abc import Callable, Generator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import pytest

from equiv.pytest.reporter import CHECKS_ATTR, SESSION_ITEM, SETUP_ATTR, Reporter
from equiv.pytest.settings import (
    MODE_BOTH,
    Settings,
    choices,
    ini_name,
    option_name,
    options,
    options_without_packages,
    read_settings,
)

if TYPE_CHECKING:
    from _pytest._code.code import TerminalRepr, TracebackStyle

    from equiv.json_types import JSONDict
    from equiv.prompts import Prompt
    from equiv.pytest.session import Check, CheckSession

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
_IniType = Literal["bool", "linelist", "string"]


class EquivFailure(AssertionError):
    """A check whose label is in ``--equiv-fail-on``; its message is what pytest shows."""


class EquivWarning(UserWarning):
    """A check whose label is in ``--equiv-warn-on``."""


class _State:
    """One process's equiv state: whether it was asked for, its settings, its models."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.requested = any(
            config.getoption("equiv_" + o.dest) is not None
            or config.getini(ini_name(o.name)) not in (None, [])
            for o in options()
        )
        self._settings: Settings | None = None
        self._session: CheckSession | None = None
        self.family_size: int | None = None  # the collected suite's prompts (sampling alpha)
        self.setup_reported = False

    @property
    def settings(self) -> Settings:
        if self._settings is None:
            self._settings = read_settings(self.config)
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
_CHECKS = pytest.StashKey[list["Check"]]()


def _record(node: pytest.Item, check: Check) -> None:
    node.stash.setdefault(_CHECKS, []).append(check)
    node.user_properties.append(("equiv_label", check.label.value))


def _error_text(excinfo: pytest.ExceptionInfo[BaseException]) -> str | None:
    """An `EquivError` names the value and the way out: no traceback."""
    from equiv.errors import EquivError

    return f"equiv: error: {excinfo.value}" if isinstance(excinfo.value, EquivError) else None


# -- collection: one item per prompt x mode --------------------------------------------------
class EquivSuite(pytest.Collector):
    """The virtual node ``equiv`` that holds the suite's items."""

    def collect(self) -> list[pytest.Item | pytest.Collector]:
        from equiv.options.table import given
        from equiv.run.plan import select_prompts

        state = self.config.stash[_STATE]
        s = state.settings
        prompts = select_prompts(given(s.values["suite"]), given(s.values["prompt"]))
        state.family_size = len(prompts)
        return [
            EquivItem.from_parent(self, name=f"{p.key}::{mode}", prompt=p, mode=mode)
            for p in prompts
            for mode in s.modes
        ]

    def repr_failure(  # type: ignore[override]
        self, excinfo: pytest.ExceptionInfo[BaseException]
    ) -> str | TerminalRepr:
        return _error_text(excinfo) or super().repr_failure(excinfo)


class EquivItem(pytest.Item):
    """One prompt x mode: baseline and speculative runs, compared and labelled."""

    # kwargs: pytest's node arguments (parent, name, ...), passed through (a pytest edge)
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

    def repr_failure(
        self, excinfo: pytest.ExceptionInfo[BaseException], style: TracebackStyle | None = None
    ) -> str | TerminalRepr:
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
        data: JSONDict = {"id": f"{slug}_{digest}_{next(calls)}"}
        data["text" if isinstance(prompt, str) else "messages"] = prompt
        session = request.config.stash[_STATE].session
        result = session.check(mode, Prompt.from_dict(data, suite="check"), max_tokens=max_tokens)
        _record(node, result)
        return result

    return check


# -- hooks -----------------------------------------------------------------------------------
def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("equiv", "equiv: speculative decoding must leave the output unchanged")
    from equiv.errors import ConfigError

    try:
        every = options()  # gathers the engines' options: a package's may fail to load
    except ConfigError as exc:
        # The plugin loads in every pytest run of this environment: a broken package must not
        # stop runs that never use equiv. Its options are left out, and it is named.
        warnings.warn(f"equiv: {exc}; its --equiv-* options are left out", stacklevel=1)
        every = options_without_packages()
    for opt in every:
        name, helptext = option_name(opt.name), opt.help
        kind: dict[str, object] = {"action": "store_true"}  # argparse keywords
        if opt.multiple:
            kind = {"action": "append", "metavar": opt.metavar}
        elif not opt.flag:
            kind = {"type": opt.type, "metavar": opt.metavar, "choices": choices(opt)}
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
        config.pluginmanager.register(Reporter(lambda: state.settings), "equiv-reporter")


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
        setattr(report, SETUP_ATTR, {"seconds": state.loaded_s, "worker": _worker(item.config)})
        item.user_properties.append(("equiv_setup_s", f"{state.loaded_s:.1f}"))  # in junit
    checks = item.stash.get(_CHECKS, None)
    if checks and report.failed and not isinstance(item, EquivItem):
        _explain(report, checks, call.excinfo)
    if checks:  # plain data, so pytest-xdist carries them from a worker to the controller
        setattr(report, CHECKS_ATTR, [c.to_dict() for c in checks])
        checks.clear()
    return report


def _explain(
    report: pytest.TestReport,
    checks: Sequence[Check],
    excinfo: pytest.ExceptionInfo[BaseException] | None,
) -> None:
    """A failing test that used ``equiv_check`` shows each check that is not equivalent in full,
    under its own heading, unless the failure message already holds it (``assert ..., check``
    gives pytest the repr, which it cuts at 240 characters)."""
    message = str(excinfo.value) if excinfo is not None else ""
    add = getattr(report.longrepr, "addsection", None)
    for check in checks:
        shown = all(line.strip() in message for line in check.explanation.splitlines())
        if add is not None and not check.equivalent and not shown:
            add(f"equiv: {check.key}", check.explanation)


def pytest_report_teststatus(
    report: pytest.TestReport, config: pytest.Config
) -> tuple[str, str, tuple[str, Mapping[str, bool]]] | None:
    if report.nodeid == SESSION_ITEM and report.failed:  # no progress letter after [100%]
        return "failed", "", ("FAILED", {"red": True})
    checks = getattr(report, CHECKS_ATTR, None) or ()
    labels = sorted({c["verdict"]["label"] for c in checks} - {"equivalent"})
    if labels and report.passed:
        return "passed", ".", (f"PASSED ({', '.join(labels)})", {"green": True})
    return None
