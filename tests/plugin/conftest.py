"""Plugin tests: a pytester project wired to a fake engine (fast), and the real model cache."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

# numpy and scipy are imported once out here: pytester's in-process runs drop the modules they
# imported, and their C extensions cannot be imported twice in one process.
import numpy  # noqa: F401
import pytest
import scipy.stats  # noqa: F401

from equiv.pytest.plugin import ENGINE_OPTION, MAX_TOKENS_OPTION, SUITE_OPTION, option_name

# Read before pytester points HOME at its own directory.
REAL_CACHE = os.environ.get("EQUIV_CACHE") or str(Path.home() / ".cache" / "equiv")
FAKE_ENGINE = Path(__file__).with_name("fake_engine.py")


@dataclass
class Project:
    """A pytester directory whose equiv options name the fake engine and its suite: ``s/same``
    (both paths agree), ``s/drift`` and ``s/bug`` (they part at token 2, see fake_engine.py)."""

    #: Every label but `equivalent`: in --equiv-fail-on, any divergence fails, whatever the
    #: classifier calls it.
    NOT_EQUIVALENT: ClassVar[str] = "inconclusive,numeric-drift,sampler-bug,misconfiguration"

    pytester: pytest.Pytester
    args: list[str]
    log: Path
    report: Path = field(init=False)

    def __post_init__(self) -> None:
        self.report = self.pytester.path / "report"

    def loads(self) -> list[str]:
        """The engines the fake factory built: two per model load."""
        return self.log.read_text().split() if self.log.exists() else []

    @staticmethod
    def calls(result: pytest.RunResult) -> dict[str, pytest.TestReport]:
        """nodeid -> the call-phase report, of an in-process run."""
        reports = result.reprec.getreports("pytest_runtest_logreport")  # type: ignore[attr-defined]
        return {r.nodeid: r for r in reports if r.when == "call"}

    @staticmethod
    def label(report: pytest.TestReport) -> str:
        """The label the plugin gave a check (its junit property ``equiv_label``)."""
        return str(dict(report.user_properties)["equiv_label"])

    def results(self, folder: Path | None = None) -> list[dict[str, Any]]:
        path = (folder or self.report) / "results.jsonl"
        return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


@pytest.fixture
def project(
    pytester: pytest.Pytester, make_gguf: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> Project:
    shutil.copy(FAKE_ENGINE, pytester.path / "fake_engine.py")
    pytester.syspathinsert()
    monkeypatch.setenv("PYTHONPATH", str(pytester.path))  # for subprocesses and xdist workers
    for name, title in (("target.gguf", "tiny target"), ("draft.gguf", "tiny draft")):
        shutil.move(make_gguf(name, name=title), pytester.path / name)
    suite = pytester.path / "s.jsonl"
    suite.write_text(
        '{"id": "same", "text": "all the same"}\n'
        '{"id": "drift", "text": "we drift apart"}\n'
        '{"id": "bug", "text": "a sampler bug"}\n',
        encoding="utf-8",
    )
    log = pytester.path / "loads.log"
    monkeypatch.setenv("FAKE_ENGINE_LOG", str(log))
    args = [
        ENGINE_OPTION,
        "fake_engine:make_engine",
        option_name("target"),
        "target.gguf",
        option_name("draft"),
        "draft.gguf",
        SUITE_OPTION,
        "s.jsonl",
        MAX_TOKENS_OPTION,
        "4",
    ]
    return Project(pytester, args, log)


@pytest.fixture
def real_models(monkeypatch: pytest.MonkeyPatch, model_pair: Any) -> None:
    """The default pair, assembled once in the real cache, for pytester's subprocesses."""
    monkeypatch.setenv("EQUIV_CACHE", REAL_CACHE)
