"""Typed records and the results file: every kind of line parsed once into a frozen record, each
validated (a bad line is named by line number and field, never dropped in silence), schema 1
files read, a torn last line set apart and cut off by the next append, a failed append leaving
the file as it was."""

from __future__ import annotations

import dataclasses
import errno
import json
import os
from pathlib import Path

import pytest

from equiv.errors import DiskFullError, ResultsError
from equiv.records import (
    SCHEMA_VERSION,
    AnalysisRecord,
    DraftStep,
    Drift,
    EventRecord,
    Generation,
    HeaderRecord,
    Kind,
    ResultRecord,
    ResultsFile,
    TokenAlternatives,
    parse_record,
)
from equiv.records import file as records_file

FIXTURES = Path(__file__).parents[1] / "fixtures"
TEMP0 = FIXTURES / "temp0_results.jsonl"
SAMPLING = FIXTURES / "sampling_results.jsonl"
HOSTILE = FIXTURES / "hostile_results.jsonl"


def _generation() -> Generation:
    return Generation(
        path="speculative",
        prompt_tokens=(2, 5),
        tokens=(7, 8, 9),
        pieces=("a", "b", "c"),
        text="abc",
        stop_reason="length",
        alternatives=(TokenAlternatives((7, 1), (2.0, 1.5)),) * 3,
        t_prompt_s=0.1,
        t_decode_s=0.4,
        draft_steps=(DraftStep(1, 4, 2), DraftStep(3, 4, 0, truncated=True)),
    )


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def _write(path: Path, lines: list[object]) -> Path:
    path.write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")
    return path


# -- records -----------------------------------------------------------------------------------


def test_generation_round_trips_and_counts_drafts():
    gen = _generation()
    again = Generation.from_dict(json.loads(json.dumps(gen.to_dict())))
    assert again == gen
    assert gen.acceptance_rate == 0.5  # the truncated round is not counted
    assert (gen.drafted, gen.accepted, gen.rounds, gen.per_request) == (4, 2, 1, False)
    assert gen.decode_tokens == 2  # the first token's time is prompt evaluation
    assert gen.tokens_per_s == pytest.approx(2 / 0.4)


def test_alternatives_from_row_are_sorted_with_ties_by_id():
    import numpy as np

    row = np.array([0.5, 3.0, 3.0, -1.0, 2.0], dtype=np.float32)
    alt = TokenAlternatives.from_row(row, 3)
    assert alt.ids == (1, 2, 4)
    assert alt.margin == 0.0


@pytest.mark.parametrize("fixture", [TEMP0, SAMPLING, HOSTILE])
def test_schema_1_files_read_whole_and_every_record_round_trips(fixture):
    contents = ResultsFile(fixture).read()
    assert contents.header is not None
    assert contents.header.schema == 1
    assert contents.problems == ()
    assert not contents.torn
    assert len(contents.records) == len(fixture.read_text().splitlines())
    for record in contents.records:
        assert isinstance(record.kind, Kind)
        assert parse_record(json.loads(json.dumps(record.to_dict()))) == record


def test_schema_1_drift_names_are_read_and_written_as_one_type():
    (record, *_) = ResultsFile(TEMP0).read().results
    raw = next(r for r in _lines(TEMP0) if r.get("key") == record.key)
    old = raw["comparison"]["drift"]
    drift = record.comparison.drift
    assert isinstance(drift, Drift)
    assert drift.rows == old["positions"]
    assert drift.kl_mean == old["mean_kl"]
    assert drift.max_abs_logit_delta == old["max_abs_delta_logit"]
    written = record.to_dict()["comparison"]["drift"]
    assert set(written) == {
        "rows",
        "kl_mean",
        "kl_p99",
        "kl_max",
        "max_abs_logit_delta",
        "top1_agreement",
    }
    sampled = ResultsFile(SAMPLING).read().results[0]
    assert isinstance(sampled.rescore_drift, Drift)  # stats' names (n, kl_mean, ...) in schema 1


def test_a_result_records_its_prompt_hash_and_schema_1_derives_it():
    record = ResultsFile(TEMP0).read().results[0]
    assert "prompt_hash" not in next(r for r in _lines(TEMP0) if r.get("kind") == "result")
    assert record.prompt_hash == record.prompt.content_hash
    assert record.to_dict()["prompt_hash"] == record.prompt.content_hash
    changed = dataclasses.replace(record.prompt, max_tokens=record.prompt.max_tokens + 1)
    assert changed.content_hash != record.prompt.content_hash


def test_unknown_keys_are_kept():
    raw = next(r for r in _lines(TEMP0) if r.get("kind") == "result")
    raw = {**raw, "grades": {"baseline": {"outcome": "pass"}}}
    raw["speculative"] = {**raw["speculative"], "chain_pit": [[0.1, 0.2, 0.3]]}
    record = ResultRecord.from_dict(raw)
    assert record.extra["grades"] == {"baseline": {"outcome": "pass"}}
    assert record.to_dict()["speculative"]["chain_pit"] == [[0.1, 0.2, 0.3]]


def test_events_and_analyses_are_typed():
    contents = ResultsFile(SAMPLING).read()
    assert all(isinstance(a, AnalysisRecord) and a.verdict for a in contents.analyses)
    (event,) = contents.events
    assert event == EventRecord("determinism", event.detail, ok=True, key=event.key)
    assert isinstance(contents.header, HeaderRecord)


# -- validation: line and field named ----------------------------------------------------------


def _named(tmp_path: Path, edit) -> str:
    lines = _lines(TEMP0)
    edit(lines[1])
    contents = ResultsFile(_write(tmp_path / "r.jsonl", lines)).read()
    (problem,) = contents.problems
    assert problem.line == 2
    assert len(contents.records) == len(lines) - 1
    return str(problem)


def test_a_missing_field_is_named_with_its_line(tmp_path):
    text = _named(tmp_path, lambda r: r.pop("baseline"))
    assert text.startswith("line 2 (")
    assert text.endswith("): baseline: missing")
    assert _named(tmp_path, lambda r: r.pop("key")) == "line 2: key: missing"


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (lambda r: r["baseline"].update(tokens="7 8"), "baseline.tokens: expected a list"),
        (lambda r: r["baseline"]["tokens"].insert(0, "x"), "baseline.tokens[0]: expected an int"),
        (lambda r: r["comparison"].update(identical=1), "comparison.identical: expected true or"),
        (lambda r: r.update(mode="greedy"), "mode: 'greedy' is not one of temp0, sampling"),
        (lambda r: r["verdict"].update(label="fine"), "verdict.label: 'fine' is not one of"),
        (lambda r: r.update(kind="resultz"), "kind: 'resultz' is not one of header, result"),
        (lambda r: r["speculative"]["draft_steps"].insert(0, [1, 2]), "draft_steps[0]: expected"),
    ],
)
def test_a_wrong_type_is_named_with_field_and_value(tmp_path, edit, expected):
    assert expected in _named(tmp_path, edit)


def test_a_wrong_type_names_what_it_found(tmp_path):
    assert "found the string '7 8'" in _named(
        tmp_path, lambda r: r["baseline"].update(tokens="7 8")
    )


def test_invalid_json_and_non_utf8_in_the_middle_are_named(tmp_path):
    data = TEMP0.read_bytes().split(b"\n")
    data[2] = data[2][:40]  # cut short, and not the last line
    data[3] = data[3].replace(b'"suite"', b'"su\xffite"', 1)
    path = tmp_path / "r.jsonl"
    path.write_bytes(b"\n".join(data))
    contents = ResultsFile(path).read()
    assert [p.line for p in contents.problems] == [3, 4]
    assert "not valid JSON" in str(contents.problems[0])
    assert "not UTF-8 (byte 0xff at column" in str(contents.problems[1])
    assert not contents.torn


def test_a_second_result_for_one_key_is_named_and_the_first_counts(tmp_path):
    lines = _lines(TEMP0)
    path = _write(tmp_path / "r.jsonl", [*lines, lines[1]])
    contents = ResultsFile(path).read()
    (problem,) = contents.problems
    assert problem.line == len(lines) + 1
    assert "the first is line 2, which counts" in str(problem)
    assert len(contents.results) == len([r for r in lines if r["kind"] == "result"])


@pytest.mark.parametrize(
    ("schema", "message"),
    [(SCHEMA_VERSION + 1, "newer than this equiv reads"), (0, "not a version equiv ever")],
)
def test_a_header_of_another_schema_is_refused(tmp_path, schema, message):
    lines = _lines(TEMP0)
    lines[0]["schema"] = schema
    with pytest.raises(ResultsError, match=f"line 1: schema {schema} is {message}"):
        ResultsFile(_write(tmp_path / "r.jsonl", lines)).read()


def test_a_file_without_header_is_refused(tmp_path):
    lines = _lines(TEMP0)[1:]
    with pytest.raises(ResultsError, match="no header line"):
        ResultsFile(_write(tmp_path / "r.jsonl", lines)).header()
    path = tmp_path / "binary.jsonl"
    path.write_bytes(bytes(range(128, 256)) * 4 + b"\n" + bytes(range(256)))
    with pytest.raises(ResultsError, match=r"no readable header line \(line 1: not UTF-8"):
        ResultsFile(path).header()


# -- torn lines and appends ---------------------------------------------------------------------


def _results_copy(tmp_path: Path) -> ResultsFile:
    path = tmp_path / "r.jsonl"
    path.write_bytes(TEMP0.read_bytes())
    return ResultsFile(path)


def test_a_torn_last_line_is_set_apart_and_the_next_append_cuts_it_off(tmp_path):
    results = _results_copy(tmp_path)
    whole = results.read()
    event = EventRecord("note", "after the crash")
    line = json.dumps({"kind": "result", "key": "s/b::temp0", "text": "é"}, ensure_ascii=False)
    cut = line.encode()[: line.encode().index("é".encode()) + 1]  # inside the UTF-8 character
    with results.path.open("ab") as fh:
        fh.write(cut)
    torn = results.read()
    assert torn.torn
    assert torn.problems == ()
    assert torn.records == whole.records
    results.append(event)
    assert (
        results.path.read_bytes()
        == TEMP0.read_bytes() + json.dumps(event.to_dict(), separators=(",", ":")).encode() + b"\n"
    )
    again = ResultsFile(results.path).read()
    assert not again.torn
    assert again.problems == ()
    assert again.records == (*whole.records, event)


def test_a_whole_last_record_without_its_newline_counts(tmp_path):
    results = _results_copy(tmp_path)
    results.path.write_bytes(results.path.read_bytes().rstrip(b"\n"))
    contents = results.read()
    assert not contents.torn
    assert len(contents.records) == 9
    results.append(EventRecord("note", "x"))
    assert len(ResultsFile(results.path).read().records) == 10


def test_what_is_read_after_appends_is_what_a_fresh_read_finds(tmp_path):
    results = ResultsFile(tmp_path / "r.jsonl")
    source = ResultsFile(TEMP0).read()
    for record in source.records:
        results.append(record)
        assert results.read() == ResultsFile(results.path).read()
    assert results.read().records == source.records


def test_a_failed_append_leaves_the_file_as_it_was(tmp_path, monkeypatch):
    results = _results_copy(tmp_path)
    before = results.path.read_bytes()
    real_write = os.write
    calls = []

    def half_then_full(fd, data):
        calls.append(len(data))
        if len(calls) == 1:
            return real_write(fd, bytes(data[: len(data) // 2]))  # a partial write
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(records_file.os, "write", half_then_full)
    with pytest.raises(DiskFullError, match="no space left on the device") as caught:
        results.append(EventRecord("note", "x" * 1000))
    assert "8 finished result(s) kept" in str(caught.value) or "finished result" in str(
        caught.value
    )
    assert results.path.read_bytes() == before  # the half line is gone
    monkeypatch.setattr(records_file.os, "write", real_write)
    results.append(EventRecord("note", "after space was freed"))
    contents = ResultsFile(results.path).read()
    assert contents.problems == ()
    assert contents.records[-1].detail == "after space was freed"


def test_a_header_alone_is_replaced_but_results_are_not(tmp_path):
    results = ResultsFile(tmp_path / "r.jsonl")
    header = ResultsFile(TEMP0).header()
    results.write_header(header)
    assert results.read().header_only
    results.write_header(dataclasses.replace(header, command="again"))
    assert results.header().command == "again"
    results.append(ResultsFile(TEMP0).read().results[0])
    with pytest.raises(ResultsError, match="already holds results"):
        results.write_header(header)


def test_drop_rewrites_the_file_without_those_results_and_keeps_every_other_line(tmp_path):
    """What a resumed run does to results whose re-scoring failed: their lines (and their
    prompt's analysis) go, every other line stays byte for byte, a damaged line included, and a
    torn last line goes too."""
    import shutil

    path = tmp_path / "results.jsonl"
    shutil.copy(Path(__file__).parents[1] / "fixtures" / "sampling_results.jsonl", path)
    original = path.read_bytes().splitlines(keepends=True)
    damaged = b'{"kind": "result", "key": "x"\n'  # not a whole record: kept, never guessed
    torn = b'{"kind":"result","key":"code/fib_lt::seed9","sui'
    path.write_bytes(b"".join(original[:3]) + damaged + b"".join(original[3:]) + torn)
    gone = {"code/fib_lt::seed2", "code/fib_lt::sampling"}
    results = ResultsFile(path)
    assert results.drop(gone) == 2
    kept = path.read_bytes().splitlines(keepends=True)
    assert kept == [
        *original[:3],
        damaged,
        *(line for line in original[3:] if json.loads(line).get("key") not in gone),
    ]
    contents = results.read()
    assert not contents.torn
    assert "code/fib_lt::seed2" not in contents.done_keys
    assert "code/fib_lt::seed3" in contents.done_keys
    assert [a.key for a in contents.analyses] == ["chat/capital_france::sampling"]
    assert not list(tmp_path.glob("*.tmp"))
