"""Task graders: is one generated answer right? (Format in prompts/README.md, "Graded prompts".)

A prompt may carry a ``grader``: an expected answer (``exact``, ``regex``, ``number`` with a
tolerance) or, for code, Python unit tests run against the completed program in a sandbox
(`equiv.verdicts.quality.python_grader`). Each answer gets a `Grade`: ``pass``, ``fail`` (with
the reason the answer is wrong), or ``error`` when the grader itself cannot judge (it does not
parse, its tests import a module that is missing): errors are left out of the statistics, never
counted against either path. Nothing here raises for a bad grader or a bad answer; the run goes on.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass

from equiv.json_types import JSONObject, JSONValue, json_float, json_list
from equiv.verdicts.quality.grade import Grade, Outcome, short_reason
from equiv.verdicts.quality.python_grader import PythonGrader, extract_program

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
        return Grade(Outcome.FAIL, short_reason(f"expected {want!r}, got {got!r}"))


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
            return Grade(Outcome.PASS, short_reason(f"/{self.pattern}/ matched {found.group(0)!r}"))
        return Grade(
            Outcome.FAIL, short_reason(f"/{self.pattern}/ does not match {text.strip()!r}")
        )


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


def parse_grader(spec: JSONValue, *, chat: bool = False) -> Grader:
    """A grader from its JSON spec; never raises: a bad spec becomes an `InvalidGrader`."""
    if not isinstance(spec, Mapping):
        return InvalidGrader(f"grader must be a JSON object with a 'type', got {spec!r}")
    problem = _check(spec)
    if problem is not None:
        return InvalidGrader(problem)
    kind = spec["type"]
    # The types were checked above: the conversions below change no value.
    stop = tuple(str(s) for s in json_list(spec.get("stop", ())))
    if kind == "exact":
        return ExactGrader(str(spec["answer"]), bool(spec.get("case_sensitive", False)), stop)
    if kind == "regex":
        return RegexGrader(str(spec["pattern"]), bool(spec.get("ignore_case", False)), stop)
    if kind == "number":
        return NumberGrader(
            json_float(spec["answer"]),
            json_float(spec.get("tolerance", 0.0)),
            str(spec.get("pick", "first")),
            stop,
        )
    return PythonGrader(
        str(spec["tests"]),
        json_float(spec.get("timeout_s", 2.0)),
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
    spec: JSONValue, prompt_text: str | None, baseline: str, speculative: str
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
