"""equiv minimize: ddmin as a pure function, and one real shrink of a diverging prompt."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from equiv.cli.main import main
from equiv.errors import ConfigError
from equiv.run.minimize import ddmin, minimize_file, minimize_text


def test_ddmin_finds_the_two_needed_items() -> None:
    calls: list[tuple[int, ...]] = []

    def needs_3_and_7(items: tuple[int, ...]) -> bool:
        calls.append(items)
        return 3 in items and 7 in items

    result = ddmin(list(range(10)), needs_3_and_7, max_tests=100)
    assert result.items == (3, 7)
    assert not result.exhausted
    assert result.tests == len(calls) == len(set(calls))  # no candidate tested twice


def test_ddmin_single_item_and_budget() -> None:
    assert ddmin(["x"], lambda _: True, max_tests=5).items == ("x",)
    result = ddmin(list(range(32)), lambda items: 5 in items, max_tests=2)
    assert result.exhausted
    assert result.tests == 2
    assert 5 in result.items  # what it returns still passes


def test_minimize_text_by_lines_then_words() -> None:
    text = "alpha beta\ngamma bug delta\nepsilon\n"
    minimal, tests, exhausted = minimize_text(text, lambda t: "bug" in t, max_tests=50)
    assert minimal.strip() == "bug"
    assert tests <= 50
    assert not exhausted


def test_minimize_refuses_an_identical_result(tmp_path: Path) -> None:
    results = tmp_path / "results.jsonl"
    fixture = Path(__file__).parents[1] / "fixtures" / "temp0_results.jsonl"
    header, *lines = (json.loads(line) for line in fixture.read_text().splitlines())
    record = next(r for r in lines if r["kind"] == "result" and r["comparison"]["identical"])
    record = {**record, "key": "code/a::temp0"}
    results.write_text("\n".join(json.dumps(r) for r in (header, record)) + "\n")
    with pytest.raises(ConfigError, match="did not diverge"):
        minimize_file(results, "code/a::temp0")
    with pytest.raises(ConfigError, match="not a temp-0 result"):
        minimize_file(results, "code/a::seed1")
    with pytest.raises(ConfigError, match="no result 'code/b::temp0'"):
        minimize_file(results, "code/b")


@pytest.mark.model
def test_minimize_a_divergence_by_construction(tmp_path: Path) -> None:
    """The off-by-one reference verifier diverges on any CPU: minimize shrinks its prompt to one
    that still diverges, and says how to rerun it with the same engine."""
    out = tmp_path / "run"
    argv = ["run", "--engine", "reference:off_by_one", "--prompt", "code/fib_lt"]
    assert main([*argv, "--max-tokens", "16", "--out", str(out)]) == 0
    result = minimize_file(out / "results.jsonl", "code/fib_lt::temp0", max_tests=4)
    assert len(result.minimal) <= len(result.original)
    assert result.minimal_tokens <= result.original_tokens
    assert result.divergence is not None  # the minimal prompt diverged when last tested
    assert result.tests <= 4
    assert "--engine reference:off_by_one" in result.command
    (line,) = result.out.read_text().splitlines()
    assert json.loads(line)["text"] == result.minimal


def test_minimize_a_real_divergence(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], engines: Any, real_divergences: Any
) -> None:
    """A divergence of the real pair, wherever this CPU's near-ties put one, still diverges
    after minimizing, on fresh engines of the same configuration."""
    record = real_divergences.require()[0]
    suite = tmp_path / "minimal.jsonl"
    argv = ["minimize", str(real_divergences.path), "--key", record.key, "--max-tests", "3"]
    assert main([*argv, "--out", str(suite)]) == 0
    print(capsys.readouterr().out)
    original = record.prompt.text
    (line,) = suite.read_text().splitlines()
    minimal = json.loads(line)
    assert len(minimal["text"]) <= len(original)
    # Re-run the minimal prompt on fresh engines of the same configuration: it still diverges.
    from equiv.prompts import load_suites
    from equiv.verdicts.temp0.compare import compare

    baseline, speculative = engines
    (prompt,) = load_suites([str(suite)])
    tokens = baseline.prompt_tokens(prompt)
    sampling = baseline.config.sampling
    base = baseline.generate(tokens, sampling=sampling, seed=None, max_tokens=24)
    spec = speculative.generate(tokens, sampling=sampling, seed=None, max_tokens=24)
    assert not compare(base, spec).identical
