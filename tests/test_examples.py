"""The example outputs in README.md and docs/ (scripts/examples.py): every marked block is there
and its command still parses with the current CLI. Nothing is run, no model is loaded."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "examples.py"


@pytest.fixture(scope="module")
def examples() -> ModuleType:
    spec = importlib.util.spec_from_file_location("equiv_examples", SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def _page(tmp_path: Path, command: str, name: str = "compare") -> Path:
    page = tmp_path / "page.md"
    page.write_text(f"Lead-in:\n\n<!-- example {name}: {command} -->\n```\nold output\n```\n")
    return page


def test_every_example_is_marked_and_its_command_parses(examples):
    pages = examples.markdown_files()
    assert examples.ROOT / "README.md" in pages
    assert examples.check(pages) == []
    assert {block.name for block in examples.blocks(pages)} == set(examples.EXAMPLES)


def test_a_bad_option_names_its_block(examples, tmp_path):
    page = _page(tmp_path, "equiv run --max-tokens 8 && equiv compare a b --no-such-option")
    (problem,) = examples.check([page], every=False)
    assert problem.startswith(f"{page}:3: example 'compare': equiv compare a b --no-such-option: ")
    assert "unrecognized arguments: --no-such-option" in problem


def test_a_bad_value_and_a_bad_plugin_option_fail(examples, tmp_path):
    bad_value = _page(tmp_path, "equiv run --mode nope")
    assert "invalid choice: 'nope'" in examples.check([bad_value], every=False)[0]
    bad_plugin = _page(tmp_path, "pytest --equiv-prompt code/fib_lt --equiv-no-such 1")
    (problem,) = examples.check([bad_plugin], every=False)
    assert "unknown pytest option(s) --equiv-no-such" in problem
    good_plugin = _page(tmp_path, "pytest -x --equiv-engine reference:off_by_one --equiv-prompt a")
    assert examples.check([good_plugin], every=False) == []


def test_a_command_shown_to_be_typed_must_parse_too(examples, tmp_path):
    page = tmp_path / "page.md"
    page.write_text(
        "```bash\npip install equiv && equiv run --seeds 4 \\\n  --no-such-option  # a comment\n"
        "equiv compare a b\n```\n"
    )
    (problem,) = examples.check([page], every=False)
    assert problem.startswith(f"{page}:2: equiv run --seeds 4 --no-such-option: ")


def test_a_missing_or_unknown_example_fails(examples, tmp_path):
    page = _page(tmp_path, "equiv compare a b", name="no-such-example")
    problems = examples.check([page])
    assert f"{page}:3: unknown example 'no-such-example' (not in EXAMPLES)" in problems
    assert "example 'run-code-16' is marked nowhere" in problems


def test_a_block_is_rewritten_between_its_fences_only(examples, tmp_path):
    page = _page(tmp_path, "equiv compare a b")
    page.write_text(page.read_text() + "\n<!-- example compare: equiv compare c d -->\n```\n```\n")
    text = page.read_text()
    for block in reversed(list(examples.blocks([page]))):
        text = text[: block.start] + f"new {block.command}\n" + text[block.end :]
    assert text.count("new equiv compare") == 2
    assert "old output" not in text
    assert text.endswith("```\nnew equiv compare c d\n```\n")


def test_an_excerpt_runs_from_its_first_line_to_its_last(examples):
    cut = examples.Example(first="^quality: ", last="prompts would")
    output = "a\nquality: 1/2  \n3 prompts would\nZ: done\n"
    assert examples.excerpt(cut, output) == "quality: 1/2\n3 prompts would\n"
    keys = examples.Example(keys=("b",))
    assert examples.excerpt(keys, '{"a": 1, "b": [2]}') == '{\n  "b": [\n    2\n  ]\n}\n'
    with pytest.raises(ValueError, match="no line of this output matches 'prompts would'"):
        examples.excerpt(cut, "quality: 1/2\nEQUIVALENT: done\n")  # the output changed its words
