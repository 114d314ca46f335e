"""The Python grader: unit tests run against the program the model completed.

The program is found in the answer (`extract_program`: a fenced block of a chat answer, or the
prompt's code and its completion, cut to the longest run of whole lines that compiles), then run
with the grader's tests in a sandbox (`equiv.verdicts.quality.sandbox`) under a harness that
reports, one JSON line, how far it got: a test that imports a missing module is the grader's
``error``, anything else that stops the tests is the answer's ``fail``.
"""

from __future__ import annotations

import functools
import json
import re
import secrets
from dataclasses import dataclass

from equiv.verdicts.quality.grade import Grade, Outcome, short_reason
from equiv.verdicts.quality.sandbox import RESULT_FILE, Limits, run_python

__all__ = ["PythonGrader", "extract_program"]

_FENCE = re.compile(r"```[\w+#.-]*[ \t]*\n(.*?)(?:```|\Z)", re.DOTALL)


def _compiles(source: str) -> bool:
    try:
        compile(source, "<program>", "exec", dont_inherit=True)
    except (SyntaxError, ValueError, MemoryError, RecursionError, OverflowError):
        return False
    return True


def extract_program(prefix: str, completion: str) -> tuple[str | None, str]:
    """The program the model completed, and how it was found.

    ``prefix + completion`` (``prefix`` is the prompt text, or empty for chat prompts). In a chat
    answer, or after a prompt that opens a fenced code block, the first fenced block with model
    output in it; after a code prompt, the text before any fence the model writes. The model
    usually runs on past the program, so the longest run of whole lines from the start that
    compiles is the program; ``None`` (with the syntax error) when no line prefix that includes
    any of the completion compiles.
    """
    full = prefix + completion
    source, start = full, 0
    if not prefix or prefix.count("```") % 2 == 1:  # chat answer, or the prompt opened a fence
        for m in _FENCE.finditer(full):
            if m.end() > len(prefix):
                source, start = m.group(1), m.start(1)
                break
    elif "```" in completion:  # code prompt: a fence the model writes ends the program
        source = full[: len(prefix) + completion.index("```")]
    lines = source.splitlines(keepends=True)
    floor = max(0, len(prefix) - start)  # source chars that are prompt, not model output
    used = 0
    for k in range(len(lines), 0, -1):
        candidate = "".join(lines[:k])
        if len(candidate) <= floor:
            break
        if _compiles(candidate):
            used = k
            break
    if used:
        dropped = len(lines) - used
        how = "whole output" if not dropped else f"dropped {dropped} trailing line(s)"
        return "".join(lines[:used]), how
    try:
        compile(source, "<program>", "exec", dont_inherit=True)
    except SyntaxError as exc:
        return None, short_reason(f"not valid Python: {exc.msg} (line {exc.lineno})")
    except (ValueError, MemoryError, RecursionError, OverflowError) as exc:
        return None, short_reason(f"not valid Python: {exc}")
    return None, "no Python code in the answer"


# The harness runs the program, then the tests, in one namespace, and writes one JSON line to
# RESULT_FILE (opened before any generated code runs). Exit codes are not trusted: a program
# that exits early never reaches the line that writes "pass".
_HARNESS = """
import json, sys, traceback
_nonce = sys.stdin.readline().strip()
_out = open({result!r}, "w", encoding="utf-8")
def _report(status, phase, detail):
    _out.write(json.dumps({{"nonce": _nonce, "status": status, "phase": phase,
                            "detail": detail}}))
    _out.flush()
def _explain(exc):
    tb = traceback.extract_tb(exc.__traceback__)
    where = next((f"{{f.filename}}:{{f.lineno}}" for f in reversed(tb)
                  if f.filename in ("program.py", "tests.py")), "")
    text = f"{{type(exc).__name__}}: {{exc}}".rstrip(": ")
    return f"{{text}} at {{where}}" if where else text
_ns = {{"__name__": "program"}}
for _phase, _file in (("program", "program.py"), ("tests", "tests.py")):
    try:
        with open(_file, encoding="utf-8") as _fh:
            _code = compile(_fh.read(), _file, "exec", dont_inherit=True)
        exec(_code, _ns)
    except BaseException as _exc:
        _kind = "import" if isinstance(_exc, ImportError) else type(_exc).__name__
        _report("raised", _phase, {{"kind": _kind, "text": _explain(_exc)}})
        raise SystemExit(1)
_report("ok", "tests", {{}})
"""


@dataclass(frozen=True)
class PythonGrader:
    """Unit tests (Python statements, usually ``assert``) run after the completed program.

    ``include_prompt``: the program is the prompt text plus the completion (completion prompts
    that end mid-code); otherwise the completion alone (chat prompts that answer with code).
    """

    tests: str
    timeout_s: float = 2.0
    include_prompt: bool = True

    def grade(self, completion: str, prompt_text: str | None) -> Grade:
        prefix = prompt_text if self.include_prompt and prompt_text is not None else ""
        program, how = extract_program(prefix, completion)
        if program is None:
            return Grade(Outcome.FAIL, how)
        return _run_tests(program, self.tests, self.timeout_s)


@functools.lru_cache(maxsize=2048)  # identical programs (most temp-0 pairs) run once
def _run_tests(program: str, tests: str, timeout_s: float) -> Grade:
    nonce = secrets.token_hex(8)
    result = run_python(
        {
            "harness.py": _HARNESS.format(result=RESULT_FILE),
            "program.py": program,
            "tests.py": tests,
        },
        "harness.py",
        # The grader's time is CPU time; the wall clock only stops a program that sleeps or
        # waits, generously, so that a loaded machine never fails a correct program.
        limits=Limits(timeout_s=max(10.0, 5 * timeout_s), cpu_s=timeout_s),
        stdin=nonce + "\n",
    )
    try:
        report = json.loads(result.result)
        ok = report.get("nonce") == nonce
    except (json.JSONDecodeError, AttributeError):
        report, ok = {}, False
    if ok and report.get("status") == "ok":
        return Grade(Outcome.PASS, f"tests passed ({result.isolation})")
    if ok and report.get("status") == "raised":
        detail = report.get("detail", {})
        text = str(detail.get("text", ""))
        if report.get("phase") == "tests" and detail.get("kind") == "import":
            return Grade(
                Outcome.ERROR, short_reason(f"the tests cannot run: {text}; fix the grader")
            )
        phase = "the program" if report.get("phase") == "program" else "a test"
        return Grade(Outcome.FAIL, short_reason(f"{phase} raised {text}"))
    if result.timed_out:
        wall = max(10.0, 5 * timeout_s)
        return Grade(Outcome.FAIL, f"did not finish within {wall:g} s of wall clock (killed)")
    if result.signal_name is not None:
        why = {"SIGXCPU": "CPU limit", "SIGXFSZ": "file size limit", "SIGKILL": "killed"}
        name = result.signal_name
        return Grade(Outcome.FAIL, f"crashed with {name} ({why.get(name, 'signal')})")
    tail = result.stderr.strip().splitlines()[-1:] or ["no message"]
    return Grade(
        Outcome.FAIL,
        short_reason(
            f"exited with status {result.returncode} before the tests finished: {tail[0]}"
        ),
    )
