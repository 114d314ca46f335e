"""Task graders: expected answers and Python unit tests run against the completed program."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from equiv.verdicts.quality.graders import (
    ExactGrader,
    InvalidGrader,
    NumberGrader,
    Outcome,
    PythonGrader,
    RegexGrader,
    extract_program,
    grade,
    grade_pair,
    numbers_in,
    parse_grader,
)

FIB = "def fib(n):\n    if n <"
FIB_TESTS = {"type": "python", "tests": "assert fib(1) == 1\nassert fib(10) == 55\n"}
RIGHT = " 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n"


def _outcome(spec: object, completion: str, prompt: str | None = None) -> Outcome:
    return grade(parse_grader(spec, chat=prompt is None), completion, prompt).outcome


# -- expected answers ------------------------------------------------------------------------------


def test_exact_compares_the_first_line_without_case_or_a_final_period() -> None:
    assert _outcome({"type": "exact", "answer": "Paris"}, "\n  paris.\nIt is big.") is Outcome.PASS
    assert _outcome({"type": "exact", "answer": "Paris"}, "Paris is the capital") is Outcome.FAIL
    spec = {"type": "exact", "answer": "Paris", "case_sensitive": True}
    assert _outcome(spec, "paris") is Outcome.FAIL


def test_regex_searches_and_stop_cuts_the_run_on() -> None:
    spec = {"type": "regex", "pattern": r"\bCarl\b", "stop": ["\nQ:"]}
    assert _outcome(spec, " Carl.\nQ: who else?") is Outcome.PASS
    assert _outcome(spec, " Ben.\nQ: Is Carl older?") is Outcome.FAIL


@pytest.mark.parametrize(
    ("text", "numbers"),
    [
        ("17 + 25 = 42", [17.0, 25.0, 42.0]),
        ("costs -1,234.5 dollars", [-1234.5]),
        ("x2 and v1.2 and 3.", [3.0]),
        ("−7 (a Unicode minus)", [-7.0]),
    ],
)
def test_numbers_in_text(text: str, numbers: list[float]) -> None:
    assert numbers_in(text) == numbers


def test_number_picks_first_last_or_any_within_tolerance() -> None:
    first = {"type": "number", "answer": 42}
    assert _outcome(first, " 42\nQ: What is 1 + 1?\nA: 2") is Outcome.PASS
    assert _outcome(first, " 17 + 25 = 42") is Outcome.FAIL
    assert _outcome({**first, "pick": "last"}, " 17 + 25 = 42") is Outcome.PASS
    assert _outcome({**first, "pick": "any"}, " 17 + 25 = 42 + 1 = 43") is Outcome.PASS
    assert _outcome({"type": "number", "answer": 3.14, "tolerance": 0.01}, "3.141") is Outcome.PASS
    g = grade(parse_grader(first), "no idea")
    assert g.outcome is Outcome.FAIL
    assert "holds no number" in g.reason


# -- bad graders: a reason per sample, never an exception ----------------------------------------


@pytest.mark.parametrize(
    ("spec", "reason"),
    [
        ("42", "must be a JSON object"),
        ({"type": "fuzzy"}, "grader type 'fuzzy' is unknown"),
        ({"type": "regex", "pattern": "("}, "does not compile"),
        ({"type": "number", "answer": 1, "tol": 1}, "unknown field(s) tol"),
        ({"type": "number"}, "needs 'answer'"),
        ({"type": "number", "answer": True}, "answer must be int/float"),
        ({"type": "number", "answer": 1, "tolerance": -1}, "tolerance -1"),
        ({"type": "number", "answer": 1, "pick": "middle"}, "pick 'middle'"),
        ({"type": "exact", "answer": "x", "stop": [""]}, "non-empty strings"),
        ({"type": "python", "tests": "assert f(1) =="}, "tests are not valid Python"),
        ({"type": "python", "tests": "pass", "timeout_s": 0}, "timeout_s 0"),
    ],
)
def test_a_bad_grader_grades_every_answer_error_with_its_reason(spec: object, reason: str) -> None:
    grader = parse_grader(spec)
    assert isinstance(grader, InvalidGrader)
    g = grade(grader, "anything", "prompt")
    assert g.outcome is Outcome.ERROR
    assert reason in g.reason


def test_parsed_graders_have_their_types() -> None:
    assert isinstance(parse_grader({"type": "exact", "answer": "a"}), ExactGrader)
    assert isinstance(parse_grader({"type": "regex", "pattern": "a"}), RegexGrader)
    assert isinstance(parse_grader({"type": "number", "answer": 1}), NumberGrader)
    code = parse_grader({"type": "python", "tests": "pass"}, chat=True)
    assert isinstance(code, PythonGrader)
    assert not code.include_prompt, "a chat answer is graded without the prompt"


# -- extracting the program ------------------------------------------------------------------------


def test_the_longest_compiling_line_prefix_is_the_program() -> None:
    program, how = extract_program(FIB, RIGHT + "\nprint(fib(\n")
    assert program == FIB + RIGHT + "\n"
    assert how == "dropped 1 trailing line(s)"


def test_a_fence_the_model_writes_ends_a_code_prompt() -> None:
    program, _ = extract_program(FIB, RIGHT + "```\n\nExplanation: def (")
    assert program == FIB + RIGHT


def test_a_chat_answer_uses_its_first_fenced_block() -> None:
    answer = "Sure!\n```python\ndef sq(x):\n    return x * x\n```\nThis squares x."
    assert extract_program("", answer)[0] == "def sq(x):\n    return x * x\n"


def test_a_prompt_that_opens_a_fence_is_continued_inside_it() -> None:
    prompt = "Write is_even.\n\n```python\n"
    program, _ = extract_program(prompt, "def is_even(n):\n    return n % 2 == 0\n```\nDone")
    assert program == "def is_even(n):\n    return n % 2 == 0\n"


def test_output_that_is_not_python_fails_with_the_syntax_error() -> None:
    program, why = extract_program(FIB, " ( ( (")
    assert program is None
    assert why.startswith("not valid Python: '(' was never closed")


# -- unit tests in the sandbox ---------------------------------------------------------------------


def test_a_right_program_passes_and_a_wrong_one_fails_at_its_assert() -> None:
    assert _outcome(FIB_TESTS, RIGHT, FIB) is Outcome.PASS
    wrong = grade(
        parse_grader(FIB_TESTS), "= 2:\n        return n\n" + RIGHT.split("\n", 2)[2], FIB
    )
    assert wrong.outcome is Outcome.FAIL
    assert wrong.reason == "a test raised AssertionError at tests.py:2"


@pytest.mark.parametrize(
    ("tail", "reason"),
    [
        ("while True:\n    pass\n", "crashed with SIGXCPU (CPU limit)"),
        ("import time\ntime.sleep(60)\n", "did not finish within 10 s of wall clock (killed)"),
        ("import os\nos._exit(0)\n", "exited with status 0 before the tests finished"),
        ("import sys\nsys.exit(3)\n", "the program raised SystemExit: 3 at program.py:"),
        ("x = bytearray(8 * 1024**3)\n", "the program raised MemoryError at program.py:"),
        ("import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)\n", "crashed with SIGSEGV"),
        ("import no_such_module_xyz\n", "the program raised ModuleNotFoundError"),
    ],
)
def test_a_program_that_hangs_exits_or_crashes_fails_that_sample(tail: str, reason: str) -> None:
    spec = {**FIB_TESTS, "timeout_s": 1}
    g = grade(parse_grader(spec), RIGHT + tail, FIB)
    assert g.outcome is Outcome.FAIL
    assert reason in g.reason


def test_tests_that_import_something_missing_are_a_grader_error_not_a_failure() -> None:
    spec = {"type": "python", "tests": "import no_such_module_xyz\nassert fib(1) == 1\n"}
    g = grade(parse_grader(spec), RIGHT, FIB)
    assert g.outcome is Outcome.ERROR
    assert "No module named 'no_such_module_xyz'" in g.reason
    assert "fix the grader" in g.reason


def test_grade_pair_records_both_paths() -> None:
    pair = grade_pair(FIB_TESTS, FIB, RIGHT, " ( (")
    assert pair["baseline"]["outcome"] == "pass"
    assert pair["speculative"]["outcome"] == "fail"
    assert pair["speculative"]["reason"].startswith("not valid Python")


# -- on the real model: grades recorded, the quality line printed, the report's section ------------


@pytest.mark.model
def test_a_graded_run_records_grades_and_prints_the_quality_line(tmp_path: Path) -> None:
    out = tmp_path / "run"
    keys = ["code/py_is_palindrome", "reasoning/fill_mul"]
    argv = [sys.executable, "-m", "equiv", "run", "--out", str(out), "--quality-margin", "10"]
    for key in keys:
        argv += ["--prompt", key]
    argv += ["--max-tokens", "12"]  # enough for both answers: ' s == s[::-1]', ' 63'
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=1800, check=False)
    assert proc.returncode == 0, proc.stderr
    lines = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    results = [r for r in lines if r["kind"] == "result"]
    assert sorted(f"{r['suite']}/{r['prompt_id']}" for r in results) == sorted(keys)
    for r in results:
        for path in ("baseline", "speculative"):
            assert r["grades"][path]["outcome"] in ("pass", "fail"), r["grades"]
            assert r["grades"][path]["reason"]
    assert lines[0]["config"]["quality_margin"] == 10
    passed = sum(r["grades"]["baseline"]["outcome"] == "pass" for r in results)
    assert f"quality: {passed}/2 baseline vs " in " ".join(proc.stdout.split())
    html = (out / "report.html").read_text()
    assert "Does the difference matter?" in html
    assert "pass rate per suite" in html
