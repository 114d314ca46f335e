"""``equiv minimize``: shrink a diverging temp-0 prompt to a short one that still diverges.

Delta debugging (Zeller's ``ddmin``) over the prompt's lines, then over its words, with the run's
own configuration rebuilt from the results header and one pair of engines; each candidate is one
test (a baseline and a speculative generation, compared token by token). The number of tests is
bounded; the result is a one-line JSONL suite for ``equiv run --suite FILE`` in a bug report.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Generic, TypeVar

from equiv.errors import ConfigError, EquivError
from equiv.records import Comparison, Divergence, ResultRecord, ResultsFile

if TYPE_CHECKING:
    from equiv.config import RunConfig
    from equiv.prompts import Prompt

__all__ = ["DdminResult", "MinimizeResult", "ddmin", "minimize_file", "minimize_text"]

T = TypeVar("T")
DEFAULT_MAX_TESTS = 60


@dataclass(frozen=True)
class DdminResult(Generic[T]):
    items: tuple[T, ...]
    tests: int  # calls of the predicate (cached repeats are free)
    exhausted: bool  # stopped by the test budget, so possibly not 1-minimal


class _Exhausted(Exception):
    pass


def _chunks(seq: tuple[int, ...], n: int) -> list[tuple[int, ...]]:
    size, extra = divmod(len(seq), n)
    out, start = [], 0
    for k in range(n):
        end = start + size + (1 if k < extra else 0)
        out.append(seq[start:end])
        start = end
    return out


def ddmin(
    items: Sequence[T], test: Callable[[tuple[T, ...]], bool], *, max_tests: int
) -> DdminResult[T]:
    """A 1-minimal subsequence of ``items`` on which ``test`` holds (assumed to hold on all).

    At most ``max_tests`` calls of ``test``; when the budget runs out, the smallest passing
    subsequence found so far is returned with ``exhausted`` set.
    """
    cache: dict[tuple[int, ...], bool] = {}
    calls = 0

    def check(idx: tuple[int, ...]) -> bool:
        nonlocal calls
        if idx not in cache:
            if calls >= max_tests:
                raise _Exhausted
            calls += 1
            cache[idx] = bool(test(tuple(items[i] for i in idx)))
        return cache[idx]

    current = tuple(range(len(items)))
    n = 2
    exhausted = False
    try:
        while len(current) >= 2:
            chunks = _chunks(current, n)
            found = next((c for c in chunks if check(c)), None)
            if found is not None:
                current, n = found, 2
                continue
            complements = (
                tuple(i for k, c in enumerate(chunks) if k != j for i in c) for j in range(n)
            )
            found = next((c for c in complements if n > 2 and check(c)), None)
            if found is not None:
                current, n = found, max(n - 1, 2)
                continue
            if n >= len(current):
                break
            n = min(2 * n, len(current))
    except _Exhausted:
        exhausted = True
    return DdminResult(tuple(items[i] for i in current), calls, exhausted)


def minimize_text(
    text: str, diverges: Callable[[str], bool], *, max_tests: int
) -> tuple[str, int, bool]:
    """Shrink ``text`` by lines, then by words (each with its leading whitespace).

    Returns the shortest text found, the tests used and whether the budget ran out.
    """
    used = 0
    exhausted = False
    for split in (lambda t: t.splitlines(keepends=True), lambda t: re.findall(r"\s*\S+|\s+", t)):
        parts = split(text)
        if len(parts) < 2 or exhausted:
            continue
        result = ddmin(parts, lambda ps: diverges("".join(ps)), max_tests=max_tests - used)
        text, used, exhausted = "".join(result.items), used + result.tests, result.exhausted
    return text, used, exhausted


@dataclass(frozen=True)
class MinimizeResult:
    key: str
    original: str
    minimal: str
    original_tokens: int
    minimal_tokens: int
    tests: int
    max_tests: int
    exhausted: bool
    divergence: Divergence | None
    out: Path
    command: str

    def lines(self) -> list[str]:
        budget = " (budget used up: may shrink further with --max-tests)" if self.exhausted else ""
        div = self.divergence
        position, base, spec = (
            (div.position, div.baseline_text, div.speculative_text) if div else (None, None, None)
        )
        return [
            f"{self.key}: {self.original_tokens} -> {self.minimal_tokens} prompt tokens "
            f"({len(self.original)} -> {len(self.minimal)} characters)",
            f"tests: {self.tests} of {self.max_tests} ({2 * self.tests} model calls){budget}",
            f"minimal prompt: {self.minimal!r}",
            f"diverges at token {position}: baseline {base!r} vs speculative {spec!r}",
            f"suite: {self.out}",
            f"reproduce: {self.command}",
        ]


def _find(results: ResultsFile, key: str) -> ResultRecord:
    key = key if "::" in key else f"{key}::temp0"
    if not key.endswith("::temp0"):
        raise ConfigError(f"key {key!r} is not a temp-0 result; minimize needs 'suite/id::temp0'")
    found = results.read().results
    for record in found:
        if record.key == key:
            if record.comparison.identical:
                raise ConfigError(
                    f"{key} did not diverge in {results.path}; pick a key whose outputs differ "
                    "(the report lists them under 'only mismatches')"
                )
            return record
    keys = [r.key for r in found if not r.comparison.identical]
    raise ConfigError(
        f"no result {key!r} in {results.path}; diverging keys there: {', '.join(keys) or 'none'}"
    )


def _reproduce(config: RunConfig, suite: Path, max_tokens: int) -> str:
    args = ["equiv", "run", "--suite", str(suite), "--max-tokens", str(max_tokens)]
    for name, spec in (("--target", config.target), ("--draft", config.draft)):
        if spec.provenance in ("user", "user (speculative only)"):
            args += [name, spec.path]
    d = config.draft_config
    args += ["--draft-max", str(d.draft_max), "--draft-min", str(d.draft_min)]
    args += ["--draft-p-min", str(d.p_min), "--n-ctx", str(config.n_ctx)]
    args += ["--n-batch", str(config.n_batch), "--n-ubatch", str(config.n_ubatch)]
    args += ["--threads", str(config.n_threads)]
    if config.flash_attn:
        args.append("--flash-attn")
    if config.engine != "llamacpp":
        args += ["--engine", config.engine]
    for name, value in config.engine_options:
        if name != "log_dir":
            args += [f"--{name.replace('_', '-')}", str(value)]
    return shlex.join(args)


def _temp0_record(results_path: str | Path, key: str) -> tuple[ResultRecord, RunConfig]:
    """The record of ``key`` in a temp-0 results file, and the run's configuration."""
    from equiv.config import Mode, RunConfig

    results = ResultsFile(results_path)
    if not results.exists():
        raise ConfigError(
            f"results file {str(results_path)!r} does not exist; pass a results.jsonl"
        )
    record = _find(results, key)
    config = RunConfig.from_dict(results.header().config)
    if config.mode is not Mode.TEMP0:
        raise ConfigError(f"{results_path} is a sampling run; minimize needs a temp-0 run")
    return record, config


def _write_suite(path: Path, prompt: Prompt, prompt_id: str, max_tokens: int | None) -> None:
    """The minimal prompt as a one-line suite (no suite of its own: the file is one)."""
    data = prompt.to_dict()
    data.update(id=f"{prompt_id[:28]}_min", max_tokens=max_tokens, tags=["minimized"])
    data.pop("suite", None)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, ensure_ascii=False) + "\n", encoding="utf-8")


def _with_text(prompt: Prompt, text: str) -> Prompt:
    """The prompt with its text (a chat's last message) replaced."""
    if prompt.messages is None:
        return replace(prompt, text=text)
    return replace(prompt, messages=(*prompt.messages[:-1], (prompt.messages[-1][0], text)))


def minimize_file(
    results_path: str | Path,
    key: str,
    *,
    max_tests: int = DEFAULT_MAX_TESTS,
    out: str | Path | None = None,
) -> MinimizeResult:
    """Minimize the prompt of ``key`` in a results file with the run's own configuration."""
    from equiv.run.execute import open_runner
    from equiv.verdicts.temp0.compare import compare

    if max_tests < 1:
        raise ConfigError(f"--max-tests {max_tests}: give a count >= 1 (e.g. 60)")
    record, config = _temp0_record(results_path, key)
    prompt = record.prompt
    max_tokens = config.max_tokens or prompt.max_tokens
    original = prompt.text if prompt.text is not None else (prompt.messages or (("", ""),))[-1][1]

    def make(text: str) -> Prompt:
        return _with_text(prompt, text)

    runner = open_runner(config, None, Path(results_path).with_name("minimize.jsonl"))
    seen: dict[str, tuple[int, Comparison]] = {}
    room = max_tokens + config.draft_config.draft_max + 1

    def diverges(text: str) -> bool:
        if not text.strip():
            return False
        tokens = runner.baseline.prompt_tokens(make(text))
        if len(tokens) + room > config.n_ctx:
            return False
        base, spec = runner.generate_pair(tokens, seed=None, max_tokens=max_tokens)
        seen[text] = (len(tokens), compare(base, spec))
        return not seen[text][1].identical

    try:
        if not diverges(original):
            raise EquivError(
                f"{record.key} diverged in {results_path} but not when re-run here (another "
                "machine, build or thread count?); minimize on the machine that produced it"
            )
        minimal, tests, exhausted = minimize_text(original, diverges, max_tests=max_tests - 1)
    finally:
        runner.close()
    path = Path(out) if out else Path(results_path).with_name(f"minimal-{prompt.id}.jsonl")
    _write_suite(path, make(minimal), prompt.id, max_tokens)
    divergence = seen[minimal][1].divergence
    return MinimizeResult(
        key=record.key,
        original=original,
        minimal=minimal,
        original_tokens=seen[original][0],
        minimal_tokens=seen[minimal][0],
        tests=tests + 1,
        max_tests=max_tests,
        exhausted=exhausted,
        divergence=divergence,
        out=path,
        command=_reproduce(config, path, max_tokens),
    )
