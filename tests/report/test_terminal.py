"""The terminal summary reads well at 80 columns: whole headers and label names, no line past
80, and names from a results file printed as they are (no markup)."""

from rich.console import Console

from equiv.records import ResultRecord, ResultsFile
from equiv.records.verdict import Label
from equiv.report.terminal import print_summary
from equiv.verdicts.runs.summary import summarize, summarize_file

FIXTURE = "tests/fixtures/temp0_results.jsonl"


def _render(summary, width=80):
    console = Console(width=width, record=True, color_system=None)
    print_summary(summary, console, results_path=None)
    return console.export_text()


def _every_label_summary():
    """The fixture's records, relabelled so that every label shows, in a suite with a long
    name and one whose name is rich markup."""
    records = [r.to_dict() for r in ResultsFile(FIXTURE).results()]
    for record, label in zip(records, [*Label, *Label], strict=False):
        record["verdict"] = {"label": label.value, "reason": "x", "evidence": {}}
    records[0]["suite"] = "a-suite-with-a-rather-long-name.jsonl"
    records[1]["suite"] = "[bold red]boom[/]"
    return summarize([ResultRecord.from_dict(r) for r in records])


def test_every_line_fits_80_columns_with_whole_words():
    text = _render(_every_label_summary())
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 80
    assert "…" not in text
    for label in Label:  # each label's name in full, never cut
        assert label.value in text
    for header in ("suite", "prompts", "labels", "accept", "tok/s", "speed-"):
        assert header in text
    assert "[bold" in text
    assert "red]boom[/]" in text


def test_the_summary_shows_run_level_drift_and_the_conclusion():
    summary = summarize_file(ResultsFile(FIXTURE))
    text = _render(summary)
    assert "drift over 79 shared rows of 7 prompt(s): mean KL" in text
    assert summary.conclusion.split()[0] in text
    assert max(len(line) for line in text.splitlines()) <= 80
