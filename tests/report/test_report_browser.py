"""The HTML report in a real headless Chromium (Debian's ``chromium``, which CI installs): it
loads with no console message at all (an error or a Content-Security-Policy violation would
log one), the filters work, no script from the data runs, and a screenshot is taken."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from equiv.report import write_report

FIXTURES = Path(__file__).parents[1] / "fixtures"
TEMP0 = FIXTURES / "temp0_results.jsonl"
HOSTILE = FIXTURES / "hostile_results.jsonl"

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(sys.platform != "linux", reason="Chromium tests run on Linux"),
]


class Tags(HTMLParser):
    """Every start tag of a page with its attributes."""

    def __init__(self, html: str) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.feed(html)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def by_id(self, ident: str) -> dict[str, str | None]:
        return next(attrs for _, attrs in self.tags if attrs.get("id") == ident)


def _results() -> list[dict[str, Any]]:
    lines = TEMP0.read_text(encoding="utf-8").splitlines()
    return [r for r in map(json.loads, lines) if r["kind"] == "result"]


def _chromium(tmp_path: Path, url: str, *mode: str) -> tuple[str, list[str]]:
    """Run headless Chromium on ``url`` with ``mode`` (``--dump-dom`` or ``--screenshot=...``):
    its stdout and every console message it logged."""
    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    if binary is None:
        why = "chromium is not installed: apt-get install -y chromium (as .ci/run does)"
        if os.environ.get("EQUIV_REQUIRE_BROWSER"):  # CI installs it: a missing browser fails
            pytest.fail(why)
        pytest.skip(why)
    profile = tmp_path / f"profile-{len(list(tmp_path.glob('profile-*')))}"
    args = [
        binary, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        "--disable-extensions", "--no-first-run", "--no-default-browser-check", "--mute-audio",
        "--hide-scrollbars", f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0",
        "--window-size=1280,2000", *mode, url,
    ]  # fmt: skip
    proc = subprocess.run(args, capture_output=True, text=True, timeout=90, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    console = [line for line in proc.stderr.splitlines() if ":CONSOLE" in line]
    return proc.stdout, console


def test_browser_loads_cleanly_and_screenshot(tmp_path: Path) -> None:
    report = write_report(TEMP0, tmp_path / "report.html")
    shot = tmp_path / "report.png"
    _, console = _chromium(tmp_path, report.as_uri(), f"--screenshot={shot}")
    assert console == []  # no error, no CSP violation, no message of any kind
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert shot.stat().st_size > 20_000
    dom, console = _chromium(tmp_path, report.as_uri(), "--dump-dom")
    assert console == []
    results = _results()
    assert f'data-shown="{len(results)}"' in dom  # the script ran; nothing filtered
    assert f"{len(results)} of {len(results)} shown" in dom
    assert '<form class="filters" id="filters">' in dom  # shown once the script runs


@pytest.mark.parametrize(
    ("query", "keep"),
    [
        ("?mismatch=1", lambda r: not r["comparison"]["identical"]),
        (
            "?label=equivalent&suite=code",
            lambda r: r["comparison"]["identical"] and r["suite"] == "code",
        ),
    ],
)
def test_browser_filters(
    tmp_path: Path, query: str, keep: Callable[[dict[str, Any]], bool]
) -> None:
    report = write_report(TEMP0, tmp_path / "report.html")
    dom, console = _chromium(tmp_path, report.as_uri() + query, "--dump-dom")
    assert console == []
    results = _results()
    page = Tags(dom)
    for i, record in enumerate(results):
        for ident in (f"p{i}", f"row-p{i}"):
            hidden = "hidden" in page.by_id(ident)
            assert hidden is not keep(record), (ident, record["key"], query)
    assert f'data-shown="{sum(map(keep, results))}"' in dom


def test_browser_runs_no_script_from_the_data(tmp_path: Path) -> None:
    report = write_report(HOSTILE, tmp_path / "hostile.html")
    dom, console = _chromium(tmp_path, report.as_uri(), "--dump-dom")
    assert console == []  # an injected script would at least log a CSP violation
    assert "<title>equiv report" in dom
    assert "<title>PWNED" not in dom
    assert "data-pwned" not in dom.split("<body")[1].split(">")[0]
    assert 'data-shown="1"' in dom  # our own script did run
    assert not any(tag in ("img", "textarea") for tag, _ in Tags(dom).tags)


def test_browser_charts_have_axis_names_and_settings_read_plainly(tmp_path: Path) -> None:
    report = write_report(TEMP0, tmp_path / "report.html")
    dom, console = _chromium(tmp_path, report.as_uri(), "--dump-dom")
    assert console == []
    axes = [
        attrs for tag, attrs in Tags(dom).tags if tag == "text" and attrs.get("class") == "axis"
    ]
    assert len(axes) >= 6  # x and y of the three bar charts (and the strip chart's x)
    for name in ("acceptance", "max |Δlogit|", "mean KL (nats)", "prompt (one bar each)"):
        assert f">{name}</text>" in dom
    assert "all built-in suites" in dom
    assert "none: temp 0 runs each prompt once" in dom
    assert "<td>[]</td>" not in dom
    assert '"mono">[]<' not in dom


def test_browser_top_k_shows_the_text_of_a_token_no_path_emitted(tmp_path: Path) -> None:
    """A divergence whose top-k holds a candidate neither path emitted: its text, recorded by
    the engine, is shown (escaped), not a dash."""
    from equiv.records import SCHEMA_VERSION, HeaderRecord, ResultRecord, ResultsFile

    lines = [json.loads(x) for x in TEMP0.read_text(encoding="utf-8").splitlines()]
    header = next(r for r in lines if r["kind"] == "header")
    record = next(r for r in lines if r["kind"] == "result" and r["comparison"]["divergence"])
    div = record["comparison"]["divergence"]
    emitted = {t for side in ("baseline", "speculative") for t in record[side]["tokens"]}
    unseen = next(t for t in div["speculative_top"]["ids"] if t not in emitted)
    div["top_texts"] = [[unseen, "<b>never emitted</b>"]]
    path = tmp_path / "one" / "results.jsonl"
    results = ResultsFile(path)
    results.write_header(HeaderRecord.from_dict({**header, "schema": SCHEMA_VERSION}))
    results.append_result(ResultRecord.from_dict(record))
    report = write_report(path, tmp_path / "one.html")
    dom, console = _chromium(tmp_path, report.as_uri(), "--dump-dom")
    assert console == []
    assert "&lt;b&gt;never emitted&lt;/b&gt;" in dom  # shown, as text
    assert "<b>never emitted</b>" not in dom


def test_browser_compare_page_loads_cleanly(tmp_path: Path) -> None:
    from equiv.records import ResultsFile
    from equiv.report.compare_view import write_compare_report
    from equiv.verdicts.runs.compare import Gate, RunRecords, compare_runs

    run = RunRecords.from_file(ResultsFile(TEMP0), name="<i>kept</i>")
    page = write_compare_report(compare_runs(run, run), tmp_path / "c.html", gate=Gate.WORSE)
    dom, console = _chromium(tmp_path, page.as_uri(), "--dump-dom")
    assert console == []
    assert "passes --fail-on worse" in dom
    assert "&lt;i&gt;kept&lt;/i&gt;" in dom
    assert "within noise" in dom
