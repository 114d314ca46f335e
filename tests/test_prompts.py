import json
from pathlib import Path

import pytest

from equiv.errors import PromptError
from equiv.prompts import Prompt, builtin_suite_dir, load_suites, resolve_suite


def test_builtin_suites_hold_at_least_40_unique_prompts():
    prompts = load_suites()
    keys = [p.key for p in prompts]
    assert len(prompts) >= 40
    assert len(set(keys)) == len(keys)
    suites = {p.suite for p in prompts}
    assert {"code", "reasoning", "chat", "multilingual", "long"} <= suites


def test_builtin_suites_cover_chat_and_russian():
    prompts = load_suites()
    assert any(p.messages for p in prompts if p.suite == "chat")
    assert any("\u0400" <= ch <= "\u04ff" for p in prompts for ch in p.display)


def test_suite_by_name_and_by_path_agree():
    by_name = load_suites(["code"])
    by_path = load_suites([str(builtin_suite_dir() / "code.jsonl")])
    assert by_name == by_path


def test_unknown_suite_names_the_known_ones():
    with pytest.raises(PromptError, match=r"unknown suite 'nope'.*code"):
        resolve_suite("nope")


def _write(tmp_path: Path, *lines: str) -> Path:
    path = tmp_path / "mine.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_own_suite_is_named_after_its_file(tmp_path):
    path = _write(tmp_path, json.dumps({"id": "a", "text": "hi", "max_tokens": 4}))
    (prompt,) = load_suites([str(path)])
    assert prompt.key == "mine/a"
    assert prompt.max_tokens == 4


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("{not json", r"mine.jsonl:1: not valid JSON"),
        ('{"id": "a"}', "exactly one of 'text' or 'messages'"),
        ('{"id": "a", "text": "x", "messages": []}', "exactly one of"),
        ('{"id": "Bad Id", "text": "x"}', r"id must match .*'Bad Id'"),
        ('{"id": "a", "text": "x", "max_tokens": 0}', "max_tokens must be a positive integer"),
        ('{"id": "a", "messages": [{"role": "bot", "content": "x"}]}', "role"),
        ('{"id": "a", "text": ""}', "non-empty"),
    ],
)
def test_bad_prompt_lines_name_the_problem(tmp_path, line, message):
    path = _write(tmp_path, line)
    with pytest.raises(PromptError, match=message):
        load_suites([str(path)])


def test_duplicate_ids_are_refused(tmp_path):
    line = json.dumps({"id": "a", "text": "x"})
    path = _write(tmp_path, line, line)
    with pytest.raises(PromptError, match="duplicate prompt id 'a'"):
        load_suites([str(path)])


def test_prompt_round_trips_through_dict():
    prompt = Prompt(suite="s", id="a", messages=(("user", "hi"),), max_tokens=3, tags=("t",))
    assert Prompt.from_dict(prompt.to_dict()) == prompt


def test_a_suite_with_a_utf8_byte_order_mark_is_read(tmp_path):
    path = tmp_path / "mine.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps({"id": "a", "text": "hi"}).encode() + b"\n")
    (prompt,) = load_suites([str(path)])
    assert (prompt.key, prompt.text) == ("mine/a", "hi")


def test_a_utf16_suite_or_a_non_utf8_byte_gets_equivs_own_hint(tmp_path):
    path = tmp_path / "mine.jsonl"
    path.write_text(json.dumps({"id": "a", "text": "hi"}) + "\n", encoding="utf-16")
    with pytest.raises(PromptError, match=r"is UTF-16 .* re-save it as UTF-8"):
        load_suites([str(path)])
    path.write_bytes(b'{"id": "a", "text": "hi"}\n{"id": "b", "text": "h\xe9"}\n')
    with pytest.raises(PromptError, match=r"mine.jsonl:2: not UTF-8 \(byte 0xe9\)"):
        load_suites([str(path)])


def test_an_unknown_role_is_named(tmp_path):
    line = json.dumps({"id": "a", "messages": [{"role": "user", "content": "x"}, {"role": "bot"}]})
    with pytest.raises(PromptError, match="message 2 has role 'bot', which is not one of"):
        load_suites([str(_write(tmp_path, line))])
    line = json.dumps({"id": "a", "messages": [{"content": "x"}]})
    with pytest.raises(PromptError, match="message 1 has no role; give one of assistant"):
        load_suites([str(_write(tmp_path, line))])


def test_a_line_separator_inside_a_json_string_does_not_split_the_line(tmp_path):
    line = json.dumps({"id": "a", "text": "one\u2028two\x85three"}, ensure_ascii=False)
    (prompt,) = load_suites([str(_write(tmp_path, line))])
    assert prompt.text == "one\u2028two\x85three"


def test_the_content_hash_follows_what_the_engines_see():
    prompt = Prompt(suite="s", id="a", text="hi", max_tokens=3, tags=("t",))
    same = Prompt(suite="other", id="b", text="hi", max_tokens=3)
    assert prompt.content_hash == same.content_hash  # suite, id and tags do not change output
    assert prompt.content_hash != Prompt(suite="s", id="a", text="hi!", max_tokens=3).content_hash
    assert prompt.content_hash != Prompt(suite="s", id="a", text="hi", max_tokens=4).content_hash
    chat = Prompt(suite="s", id="a", messages=(("user", "hi"),), max_tokens=3)
    assert chat.content_hash != prompt.content_hash
