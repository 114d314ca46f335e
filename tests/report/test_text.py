"""The report's escaping: every character a reader cannot see, or that changes how the text
around it is shown, becomes a visible escape, chosen by Unicode category, and nothing else
changes."""

from __future__ import annotations

import html
import re
import sys
import unicodedata

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from equiv.report.text import is_special, plain, token_text, visible

CATEGORIES = {"Cc", "Cf", "Co", "Cs", "Zl", "Zp", "Zs"}
BIDI_CONTROLS = "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
INVISIBLE = (
    "\u00ad\u034f\u061c\u115f\u1160\u180e\u200b\u2060\u2061\u2064\u3164\ufe00\ufe0f\ufeff"
    "\ufff9\U000e0001\U000e0041\U000e007f\U000e0100\U0001d173"
)
ESCAPE = re.compile(r"\\x[0-9a-f]{2}|\\u[0-9a-f]{4}|\\U[0-9a-f]{8}")

# Text as model output and hostile prompts hold it: any code point, lone surrogates included.
texts = st.text(alphabet=st.characters(codec=None, min_codepoint=0, max_codepoint=sys.maxunicode))


def _must_escape(char: str) -> bool:
    return char not in "\t\n " and unicodedata.category(char) in CATEGORIES


def test_the_characters_of_the_issue_are_escaped():
    assert plain("\u061c\U000e0041\u00ad") == "\\u061c\\U000e0041\\xad"
    for char in "\u180e\ufe0f\u2066\u2069\U000e0000\U000e007f":
        assert plain(char) != char


@pytest.mark.parametrize("char", list(BIDI_CONTROLS + INVISIBLE))
def test_every_bidi_control_and_invisible_character_is_escaped(char):
    assert is_special(char)
    assert ESCAPE.fullmatch(plain(char))
    assert char not in str(visible(char))


def test_tab_newline_space_and_ordinary_text_pass_as_they_are():
    text = "a\tb\nc d — ü, 日本語, ру́сский, 😀 🇫🇷, x̃"
    assert plain(text) == text
    assert str(visible(text)) == html.escape(text, quote=True).replace("&#x27;", "&#39;")


@settings(max_examples=400)
@given(texts)
def test_plain_escapes_exactly_the_special_characters(text):
    out = plain(text)
    assert not any(_must_escape(c) for c in out)
    assert not any(is_special(c) for c in out)
    expected = "".join(
        ESCAPE.fullmatch(plain(c)) and plain(c) if is_special(c) else c for c in text
    )
    assert out == expected


@settings(max_examples=400)
@given(texts)
def test_visible_html_shows_no_special_character_and_loses_no_text(text):
    out = str(visible(text))
    assert not any(is_special(c) for c in out)
    # Each special character became a marked escape; the rest reads back as it was.
    shown = re.sub(r'<span class="esc" title="[^"]*">([^<]*)</span>', r"\1", out)
    assert html.unescape(shown) == plain(text)
    assert not any(is_special(c) for c in str(token_text(text)))


@settings(max_examples=200)
@given(st.characters(codec=None))
def test_every_character_of_the_escaped_categories_is_special(char):
    if _must_escape(char):
        assert is_special(char)
