"""The HTML report, rendered from recorded results (fixtures from real runs): what it shows,
inert on hostile output, self-contained, redacted by default, small. Opened in a real browser in
``test_report_browser.py``."""

from __future__ import annotations

import base64
import hashlib
import json
import re
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from markupsafe import escape

from equiv.cli.main import main
from equiv.records import ResultsFile
from equiv.records.verdict import verdict_of
from equiv.report import render_report
from equiv.report.analysis import MAX_EXAMPLES
from equiv.report.json import script_json
from equiv.report.text import plain, visible
from equiv.verdicts.runs.summary import summarize_file

FIXTURES = Path(__file__).parents[1] / "fixtures"
TEMP0 = FIXTURES / "temp0_results.jsonl"
HOSTILE = FIXTURES / "hostile_results.jsonl"
SAMPLING = FIXTURES / "sampling_results.jsonl"


class Page(HTMLParser):
    """Every start tag with its attributes, and the text of each script and style element."""

    def __init__(self, html: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.scripts: list[tuple[dict[str, str | None], str]] = []
        self.styles: list[str] = []
        self._open: str | None = None
        self.feed(html)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        if tag == "script":
            self.scripts.append((dict(attrs), ""))
            self._open = tag
        elif tag == "style":
            self.styles.append("")
            self._open = tag

    def handle_endtag(self, tag: str) -> None:
        self._open = None

    def handle_data(self, data: str) -> None:
        if self._open == "script":
            attrs, text = self.scripts[-1]
            self.scripts[-1] = (attrs, text + data)
        elif self._open == "style":
            self.styles[-1] += data

    def by_id(self, ident: str) -> dict[str, str | None]:
        return next(attrs for _, attrs in self.tags if attrs.get("id") == ident)


def _records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def _write(path: Path, records: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def _sha(text: str) -> str:
    return "sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode()


@pytest.fixture(scope="module")
def temp0_html() -> str:
    return render_report(TEMP0)


@pytest.fixture(scope="module")
def hostile_html() -> str:
    return render_report(HOSTILE)


# -- content ---------------------------------------------------------------------------------------


def test_report_shows_conclusion_counts_config_and_command(temp0_html: str) -> None:
    records = _records(TEMP0)
    header = records[0]
    results = [r for r in records if r["kind"] == "result"]
    diverged = [r for r in results if not r["comparison"]["identical"]]
    assert len(results) >= 6
    assert len(diverged) >= 2
    conclusion = summarize_file(ResultsFile(TEMP0)).conclusion
    assert f'<h1 class="banner w-numeric-drift" id="conclusion">{escape(conclusion)}</h1>' in (
        temp0_html
    )
    labels = [verdict_of(r).label.value for r in results]
    assert "numeric-drift" in labels
    for label in ("equivalent", "numeric-drift", "sampler-bug", "misconfiguration"):
        assert f"{label}: {labels.count(label)}<" in temp0_html
    for r in diverged:
        assert str(escape(r["verdict"]["reason"])) in temp0_html
    for r in results:
        assert r["key"] in temp0_html
    prints = header["fingerprints"]["speculative"]
    for value in (prints["target_sha256"], prints["draft_sha256"], "Q4_K_M", "Q4_0", "AVX2"):
        assert value in temp0_html
    assert "llama-cpp-python" in temp0_html
    assert prints["llama_cpp_python"] in temp0_html
    assert "equiv run --prompt &#39;code/*&#39;" in temp0_html  # the command, escaped
    assert "determinism" in temp0_html


def test_diff_spans_follow_the_stored_opcodes(temp0_html: str) -> None:
    page = Page(temp0_html)
    for i, record in enumerate(r for r in _records(TEMP0) if r["kind"] == "result"):
        ops = record["comparison"]["opcodes"]
        want = {
            tag: sum(max(op[2] - op[1], op[4] - op[3]) for op in ops if op[0] == tag)
            for tag in ("replace", "insert", "delete")
        }
        html = temp0_html.split(f'id="p{i}"')[1].split('class="card"')[0]
        spans = re.findall(r'<span class="t (replace|insert|delete)(?: first)?" title=', html)
        if record["comparison"]["identical"]:
            assert spans == []
            continue
        # a replace of unequal length counts its tokens on each side
        sides = sum(op[2] - op[1] + op[4] - op[3] for op in ops if op[0] == "replace")
        assert spans.count("replace") == sides
        assert spans.count("insert") == want["insert"]
        assert spans.count("delete") == want["delete"]
        div = record["comparison"]["divergence"]
        assert f"First divergence at token {div['position']}" in html
        assert f"{div['margin_baseline']:.4f}" in html
        assert f"{div['margin_speculative']:.4f}" in html
        for logit in div["baseline_top"]["logits"] + div["speculative_top"]["logits"]:
            assert f"{logit:.5f}" in html
        assert re.search(r'class="t (replace|insert|delete) first"', html)
    assert page.by_id("p0")["class"] == "card"


def test_charts_are_inline_svg_with_links(temp0_html: str) -> None:
    svgs = re.findall(r"<svg .*?</svg>", temp0_html, flags=re.S)
    assert len(svgs) >= 4  # acceptance, margin, max |Δlogit|, mean KL
    assert all('xmlns="http://www.w3.org/2000/svg"' in s for s in svgs)
    assert 'href="#p' in "".join(svgs)


def test_sampling_analysis_records_render_tests_and_charts(tmp_path: Path) -> None:
    records = _records(TEMP0)
    base = next(r for r in records if r["kind"] == "result")
    sampled = {**base, "key": "code/x::seed1", "mode": "sampling", "seed": 1, "prompt_id": "x"}
    test = {
        "name": "chi-square GOF",
        "statistic": 12.5,
        "p_value": 0.0004,
        "alpha": 0.01,
        "n": 400,
        "df": 7,
        "power": 0.93,
        "effect": 0.3,
        "detail": "w=0.3",
    }
    analysis = {
        "kind": "analysis",
        "key": "code/x::sampling",
        "suite": "code",
        "prompt_id": "x",
        "tests": [test, {"name": "KS on PIT", "p_value": float("nan")}],
        "verdict": {"label": "sampler-bug", "reason": "GOF rejects", "evidence": {"p": 0.0004}},
        "charts": {
            "pit_hist": {"observed": [3, 5, 9, 1], "expected": [4.5, 4.5, 4.5, 4.5]},
            "first_token": {"baseline": {"a": 5, "<b>": 2}, "speculative": {"a": 1, "c": 6}},
            "broken": [1, 2],
        },
    }
    bare = {"kind": "analysis", "key": "chat/y::sampling", "suite": "chat", "prompt_id": "y"}
    html = render_report(_write(tmp_path / "r.jsonl", [*records, sampled, analysis, bare]))
    assert "chi-square GOF" in html
    assert "0.0004" in html
    assert "0.93" in html
    assert "sampler-bug: 1<" in html
    assert "no verdict recorded" in html
    assert "pit hist" in html
    assert "first token" in html
    assert "&lt;b&gt;" in html
    assert '<tr class="rejects"><td>chi-square GOF' in html  # p < alpha is flagged


def test_real_sampling_run_shows_its_analyses_and_a_few_seeds() -> None:
    records = _records(SAMPLING)
    analyses = [r for r in records if r["kind"] == "analysis"]
    seeds = [r for r in records if r["kind"] == "result"]
    assert analyses
    assert all(r["mode"] == "sampling" for r in seeds)
    html = render_report(SAMPLING)
    labels = [r["verdict"]["label"] for r in analyses]
    for label in set(labels):
        assert f"{label}: {labels.count(label)}<" in html  # one label per prompt, not per seed
    for a in analyses:
        assert a["key"] in html
        for test in a["tests"]:
            assert test["name"] in html
    shown = re.findall(r'<section class="card" id="a\d+s\d+">', html)
    assert len(shown) == min(len(seeds), MAX_EXAMPLES * len(analyses))
    assert html.count("observed vs expected") >= len(analyses)
    assert "No temperature-0 prompt in this run." in html


def test_inconsistent_fields_render_and_unreadable_lines_are_named(tmp_path: Path) -> None:
    records = _records(TEMP0)
    results = [r for r in records if r["kind"] == "result"]
    bad = json.loads(json.dumps(next(r for r in results if not r["comparison"]["identical"])))
    bad["comparison"]["opcodes"] = [["equal", 0, 99, 0, 99]]  # does not tile the tokens
    bad["comparison"]["drift"] = None
    bad["comparison"]["divergence"]["baseline_top"] = None
    wrong = {**results[0], "verdict": {"label": "no-such-label", "reason": "?"}}
    bare = {"kind": "result", "key": "k", "suite": "s", "baseline": {}, "speculative": {}}
    html = render_report(_write(tmp_path / "r.jsonl", [records[0], bad, wrong, bare]))
    assert str(escape(bad["key"])) in html  # shown, its text whole where the opcodes do not fit
    assert "2 of 4 line(s) of the results file could not be read" in html
    label_error = "verdict.label: 'no-such-label' is not one of equivalent"
    assert str(escape(f"line 3 ({wrong['key']}): {label_error}")) in html
    assert str(escape("line 4 (k): prompt: missing")) in html


# -- security --------------------------------------------------------------------------------------

ALLOWED_TAGS = {
    "html",
    "head",
    "meta",
    "title",
    "style",
    "body",
    "header",
    "div",
    "b",
    "span",
    "main",
    "h1",
    "h2",
    "h3",
    "section",
    "table",
    "tr",
    "th",
    "td",
    "ul",
    "li",
    "pre",
    "p",
    "a",
    "figure",
    "figcaption",
    "br",
    "svg",
    "line",
    "text",
    "rect",
    "circle",
    "g",
    "details",
    "summary",
    "form",
    "label",
    "input",
    "select",
    "option",
    "code",
    "footer",
    "script",
}


def test_hostile_output_is_inert(hostile_html: str) -> None:
    page = Page(hostile_html)
    assert {tag for tag, _ in page.tags} <= ALLOWED_TAGS
    for tag, attrs in page.tags:
        assert not [a for a in attrs if a.startswith("on")], (tag, attrs)
        assert tag != "img"
    assert len(page.scripts) == 2
    data_attrs, data = page.scripts[0]
    assert data_attrs == {"type": "application/json", "id": "report-data"}
    assert "<" not in data
    assert ">" not in data
    assert "&" not in data
    items = json.loads(data)["items"]
    assert items[0]["suite"] == 'chat"><b onmouseover=alert(1)>'
    assert page.scripts[1][0] == {}  # our own script, no attributes
    assert "<script>alert" not in hostile_html
    assert "<script>document" not in hostile_html
    assert "</textarea>" not in hostile_html
    assert "<img" not in hostile_html
    assert "<svg onload" not in hostile_html
    assert "<!--" not in hostile_html
    assert not re.search(r"<[^>]*onerror=", hostile_html)


def test_special_characters_render_as_visible_escapes(hostile_html: str) -> None:
    for raw in ("\x00", "\x1b", "\u2028", "\ufffd"):
        assert raw not in hostile_html
    for shown in ("\\x00", "\\x1b", "\\u2028", "\\ufffd", "\\ud800"):
        assert f">{shown}</span>" in hostile_html
    hostile_html.encode("utf-8")  # no lone surrogate left
    assert visible("a\x00<b>").startswith('a<span class="esc"')
    assert plain("x\u202ey\ud800") == "x\\u202ey\\ud800"


def test_script_json_cannot_end_its_block() -> None:
    text = str(script_json({"s": "</script><!--\u2028&", "n": float("inf")}))
    assert "<" not in text
    assert ">" not in text
    assert "&" not in text
    assert "\u2028" not in text
    assert json.loads(text) == {"s": "</script><!--\u2028&", "n": None}


def test_csp_allows_exactly_the_inlined_style_and_script(temp0_html: str) -> None:
    page = Page(temp0_html)
    csp = next(
        a["content"] for t, a in page.tags if a.get("http-equiv") == "Content-Security-Policy"
    )
    assert csp is not None
    assert "default-src 'none'" in csp
    assert "unsafe-inline" not in csp
    assert f"style-src '{_sha(page.styles[0])}'" in csp
    assert f"script-src '{_sha(page.scripts[1][1])}'" in csp


def test_no_external_reference_of_any_kind(temp0_html: str) -> None:
    for tag, attrs in Page(temp0_html).tags:
        assert "src" not in attrs, tag
        href = attrs.get("href")
        assert href is None or href.startswith("#"), href
    assert "url(" not in temp0_html
    assert "@import" not in temp0_html
    assert not re.search(r"(src|href|action)=[\"']?(https?:)?//", temp0_html)


def _with_header(tmp_path: Path, **changes: Any) -> Path:
    records = _records(TEMP0)
    records[0] = {**records[0], **changes}
    return _write(tmp_path / "results.jsonl", records)


def test_paths_and_user_names_redacted_by_default(tmp_path: Path) -> None:
    records = _records(TEMP0)
    config = records[0]["config"]
    config = {
        **config,
        "target": {**config["target"], "path": "/home/alice/m/target.gguf"},
        "draft": {**config["draft"], "path": "/srv/models/secret-dir/draft.gguf"},
    }
    path = _with_header(
        tmp_path,
        config=config,
        command="equiv run --out /home/alice/runs/r1 --note alice",
        environment={"OMP_NUM_THREADS": "4", "AWS_SECRET_ACCESS_KEY": "hunter2"},
    )
    html = render_report(path)
    assert "alice" not in html
    assert "/srv/models" not in html
    assert "secret-dir" not in html
    assert "~/m/target.gguf" in html
    assert "…/draft.gguf" in html
    assert "--out ~/runs/r1" in html
    assert "hunter2" not in html
    assert "AWS_SECRET" not in html
    assert "OMP_NUM_THREADS" in html
    assert "redacted" in html
    kept = render_report(path, redact=False)
    assert "/home/alice/m/target.gguf" in kept
    assert "/srv/models/secret-dir/draft.gguf" in kept


# -- size and CLI ----------------------------------------------------------------------------------


def test_fifty_prompt_report_is_under_two_megabytes(tmp_path: Path) -> None:
    records = _records(TEMP0)
    results = [r for r in records if r["kind"] == "result"]
    many = [{**results[i % len(results)], "key": f"s/p{i}::temp0"} for i in range(50)]
    size = len(render_report(_write(tmp_path / "r.jsonl", [records[0], *many])).encode())
    assert size < 2_000_000, size


def test_cli_report_writes_html(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "sub" / "report.html"
    assert main(["report", str(TEMP0), "-o", str(out)]) == 0
    html = out.read_text(encoding="utf-8")
    assert html.startswith("<!DOCTYPE html>")
    assert "--out …/fx2" in html  # the fixture's run wrote to /tmp/fx2
    assert str(out) in capsys.readouterr().out
    assert main(["report", str(TEMP0), "-o", str(out), "--no-redact"]) == 0
    assert "--out /tmp/fx2" in out.read_text(encoding="utf-8")
    assert main(["report", str(tmp_path / "nope.jsonl")]) == 2
    assert "does not exist" in capsys.readouterr().err


@pytest.mark.model
def test_equiv_run_writes_the_report_beside_the_results(tmp_path: Path) -> None:
    out = tmp_path / "run"
    args = ["run", "--prompt", "code/fib_lt", "--max-tokens", "4", "--out", str(out)]
    assert main(args) == 0
    html = (out / "report.html").read_text(encoding="utf-8")
    assert "code/fib_lt::temp0" in html
    assert str(tmp_path) not in html  # redacted by default
