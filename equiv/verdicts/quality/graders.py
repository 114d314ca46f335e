"""Task graders: is one generated answer right? (Format in prompts/README.md, "Graded prompts".)

A prompt may carry a ``grader``: an expected answer (``exact``, ``regex``, ``number`` with a
tolerance) or, for code, Python unit tests run against the completed program in a sandbox
(`equiv.verdicts.quality.sandbox`). Each answer gets a `Grade`: ``pass``, ``fail`` (with the reason
the answer is wrong), or ``error`` when the grader itself cannot judge (it does not parse, its tests
import a module that is missing): errors are left out of the statistics, never counted against
either path. Nothing here raises for a bad grader or a bad answer; the run goes on.
"""

from __future__ import annotations

import enum
import functools
import json
import math
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from equiv.json_types import JSONObject, json_float
from equiv.verdicts.quality.sandbox import RESULT_FILE, Limits, run_python

__all__ = [
    "ExactGrader",
    "Grade",
    "Grader",
    "InvalidGrader",
    "NumberGrader",
    "Outcome",
    "PythonGrader",
    "RegexGrader",
    "extract_program",
    "grade",
    "grade_pair",
    "parse_grader",
]

_REASON_CHARS = 300


class Outcome(str, enum.Enum):
    PASS = "pass"
    FAIL = "fail"
    ERROR = "error"  # the grader could not judge; not counted for either path


@dataclass(frozen=True)
class Grade:
    """One answer's grade and the reason, in words a person can check."""

    outcome: Outcome
    reason: str

    @property
    def passed(self) -> bool:
        return self.outcome is Outcome.PASS

    @property
    def graded(self) -> bool:
        return self.outcome is not Outcome.ERROR

    def to_dict(self) -> dict[str, str]:
        return {"outcome": self.outcome.value, "reason": self.reason}

    @classmethod
    def from_dict(cls, data: JSONObject) -> Grade:
        return cls(Outcome(data["outcome"]), str(data.get("reason", "")))


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _REASON_CHARS else text[: _REASON_CHARS - 3] + "..."


def _cut(text: str, stop: tuple[str, ...]) -> str:
    """The answer up to the first of the ``stop`` strings (the model often runs on)."""
    end = len(text)
    for s in stop:
        i = text.find(s)
        if i >= 0:
            end = min(end, i)
    return text[:end]


@dataclass(frozen=True)
class ExactGrader:
    """The first non-empty line, stripped of whitespace and a trailing period, equals ``answer``."""

    answer: str
    case_sensitive: bool = False
    stop: tuple[str, ...] = ()

    def grade(self, completion: str) -> Grade:
        lines = [ln.strip() for ln in _cut(completion, self.stop).splitlines() if ln.strip()]
        got = lines[0].removesuffix(".").strip() if lines else ""
        want = self.answer.strip()
        same = got == want if self.case_sensitive else got.casefold() == want.casefold()
        if same:
            return Grade(Outcome.PASS, f"answer {want!r}")
        return Grade(Outcome.FAIL, _short(f"expected {want!r}, got {got!r}"))


@dataclass(frozen=True)
class RegexGrader:
    """``pattern`` matches somewhere in the answer (``re.search``; anchor it to be strict)."""

    pattern: str
    ignore_case: bool = False
    stop: tuple[str, ...] = ()

    def grade(self, completion: str) -> Grade:
        flags = re.IGNORECASE if self.ignore_case else 0
        text = _cut(completion, self.stop)
        found = re.search(self.pattern, text, flags)
        if found:
            return Grade(Outcome.PASS, _short(f"/{self.pattern}/ matched {found.group(0)!r}"))
        return Grade(Outcome.FAIL, _short(f"/{self.pattern}/ does not match {text.strip()!r}"))


_NUMBER = re.compile(r"(?<![\w.])[-−]?\d[\d,]*(?:\.\d+)?|(?<![\w.])[-−]?\.\d+")
_PICKS = ("first", "last", "any")


def numbers_in(text: str) -> list[float]:
    """The numbers written in ``text``: ``-1,234.5`` is -1234.5; a comma between digits groups."""
    out = []
    for m in _NUMBER.finditer(text):
        raw = m.group(0).replace("−", "-").replace(",", "")
        try:
            out.append(float(raw))
        except ValueError:
            continue
    return out


@dataclass(frozen=True)
class NumberGrader:
    """A number in the answer (the ``first``, the ``last`` or ``any``) is within ``tolerance``
    (absolute) of ``answer``."""

    answer: float
    tolerance: float = 0.0
    pick: str = "first"
    stop: tuple[str, ...] = ()

    def grade(self, completion: str) -> Grade:
        found = numbers_in(_cut(completion, self.stop))
        want = f"{self.answer:g}" + (f" +/- {self.tolerance:g}" if self.tolerance else "")
        if not found:
            return Grade(Outcome.FAIL, f"expected {want}, the answer holds no number")
        chosen = {"first": found[:1], "last": found[-1:], "any": found}[self.pick]
        for x in chosen:
            if abs(x - self.answer) <= self.tolerance + 1e-9 * max(1.0, abs(self.answer)):
                return Grade(Outcome.PASS, f"{self.pick} number {x:g} is {want}")
        shown = ", ".join(f"{x:g}" for x in chosen[:5])
        return Grade(Outcome.FAIL, f"expected {want}, {self.pick} number: {shown}")


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
        return None, _short(f"not valid Python: {exc.msg} (line {exc.lineno})")
    except (ValueError, MemoryError, RecursionError, OverflowError) as exc:
        return None, _short(f"not valid Python: {exc}")
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
            return Grade(Outcome.ERROR, _short(f"the tests cannot run: {text}; fix the grader"))
        phase = "the program" if report.get("phase") == "program" else "a test"
        return Grade(Outcome.FAIL, _short(f"{phase} raised {text}"))
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
        _short(f"exited with status {result.returncode} before the tests finished: {tail[0]}"),
    )


@dataclass(frozen=True)
class InvalidGrader:
    """A grader spec that does not parse: every answer of its prompt grades ``error``."""

    reason: str


Grader = ExactGrader | RegexGrader | NumberGrader | PythonGrader | InvalidGrader

_FIELDS: dict[str, dict[str, tuple[type, ...]]] = {
    "exact": {"answer": (str,), "case_sensitive": (bool,), "stop": (list,)},
    "regex": {"pattern": (str,), "ignore_case": (bool,), "stop": (list,)},
    "number": {"answer": (int, float), "tolerance": (int, float), "pick": (str,), "stop": (list,)},
    "python": {"tests": (str,), "timeout_s": (int, float), "include_prompt": (bool,)},
}
_REQUIRED = {"exact": "answer", "regex": "pattern", "number": "answer", "python": "tests"}


def _check(spec: JSONObject) -> str | None:
    """Why a grader spec is invalid, or None."""
    kind = spec.get("type")
    if kind not in _FIELDS:
        return f"grader type {kind!r} is unknown; use one of {', '.join(_FIELDS)}"
    fields = _FIELDS[kind]
    unknown = sorted(set(spec) - set(fields) - {"type"})
    if unknown:
        return f"{kind} grader: unknown field(s) {', '.join(unknown)}; known: {', '.join(fields)}"
    if _REQUIRED[kind] not in spec:
        return f"{kind} grader needs {_REQUIRED[kind]!r}"
    for name, types in fields.items():
        value = spec.get(name)
        if value is None:
            continue
        bad_bool = isinstance(value, bool) and bool not in types
        if bad_bool or not isinstance(value, types):
            return f"{kind} grader: {name} must be {'/'.join(t.__name__ for t in types)}"
        if isinstance(value, list) and not all(isinstance(s, str) and s for s in value):
            return f"{kind} grader: stop must be a list of non-empty strings, got {value!r}"
    if kind == "regex":
        try:
            re.compile(str(spec["pattern"]))  # a string: checked above
        except re.error as exc:
            return f"regex grader: pattern {spec['pattern']!r} does not compile ({exc})"
    if kind == "number":
        if not math.isfinite(json_float(spec["answer"])):  # a number: checked above
            return f"number grader: answer {spec['answer']!r} must be finite"
        tol = spec.get("tolerance", 0)
        if not (math.isfinite(json_float(tol)) and json_float(tol) >= 0):
            return f"number grader: tolerance {tol!r} must be a finite number >= 0"
        if spec.get("pick", "first") not in _PICKS:
            return f"number grader: pick {spec['pick']!r} must be one of {', '.join(_PICKS)}"
    if kind == "python":
        timeout = spec.get("timeout_s", 2.0)
        if not 0 < json_float(timeout) <= 60:
            return f"python grader: timeout_s {timeout!r} must lie in (0, 60]"
        try:
            compile(str(spec["tests"]), "tests.py", "exec", dont_inherit=True)
        except SyntaxError as exc:
            return f"python grader: the tests are not valid Python ({exc.msg}, line {exc.lineno})"
    return None


def parse_grader(spec: Any, *, chat: bool = False) -> Grader:
    """A grader from its JSON spec; never raises: a bad spec becomes an `InvalidGrader`."""
    if not isinstance(spec, Mapping):
        return InvalidGrader(f"grader must be a JSON object with a 'type', got {spec!r}")
    problem = _check(spec)
    if problem is not None:
        return InvalidGrader(problem)
    kind = spec["type"]
    stop = tuple(spec.get("stop", ()))
    if kind == "exact":
        return ExactGrader(spec["answer"], bool(spec.get("case_sensitive", False)), stop)
    if kind == "regex":
        return RegexGrader(spec["pattern"], bool(spec.get("ignore_case", False)), stop)
    if kind == "number":
        return NumberGrader(
            float(spec["answer"]),
            float(spec.get("tolerance", 0.0)),
            str(spec.get("pick", "first")),
            stop,
        )
    return PythonGrader(
        spec["tests"],
        float(spec.get("timeout_s", 2.0)),
        bool(spec.get("include_prompt", not chat)),
    )


def grade(grader: Grader, completion: str, prompt_text: str | None = None) -> Grade:
    """Grade one answer; ``prompt_text`` is the completion prompt's text (None for chat)."""
    if isinstance(grader, InvalidGrader):
        return Grade(Outcome.ERROR, f"invalid grader: {grader.reason}")
    if isinstance(grader, PythonGrader):
        return grader.grade(completion, prompt_text)
    return grader.grade(completion)


def grade_pair(
    spec: Any, prompt_text: str | None, baseline: str, speculative: str
) -> dict[str, dict[str, str]]:
    """Both paths' grades of one prompt x seed, as the result record holds them (``grades``).

    ``spec`` is the prompt's grader spec (`equiv.prompts.Prompt.grader_spec`); ``prompt_text``
    its completion text (None for a chat prompt).
    """
    grader = parse_grader(spec, chat=prompt_text is None)
    first = grade(grader, baseline, prompt_text).to_dict()
    # Identical outputs (every equivalent temp-0 prompt) get one grade: a grader is a pure
    # function of the text, and generated code then runs once, not twice.
    second = first if speculative == baseline else grade(grader, speculative, prompt_text).to_dict()
    return {"baseline": first, "speculative": second}
