"""Text made safe and visible: control characters, invisible and bidi characters, lone surrogates
and U+FFFD (a tokenizer's invalid UTF-8) become printed escapes, never raw characters.

`plain` is for any context (attributes included): a str with escapes as text. `visible` is for
element content: escaped HTML with each escape in a ``<span class="esc">``, so that a literal
backslash sequence in model output cannot pass for one.
"""

from __future__ import annotations

import re

from markupsafe import Markup, escape

__all__ = ["plain", "token_text", "visible"]

# C0 controls but tab and newline, DEL and C1, zero-width and direction marks, line/paragraph
# separators, bidi embeddings/overrides/isolates, BOM, the replacement character, lone surrogates.
_SPECIAL = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff\ufffd\ud800-\udfff]"
)
_NAMES = {"\ufffd": "invalid UTF-8 (U+FFFD)", "\x00": "NUL", "\x1b": "ESC", "\r": "CR"}


def _code(char: str) -> str:
    o = ord(char)
    return f"\\x{o:02x}" if o < 0x100 else f"\\u{o:04x}"


def plain(text: str) -> str:
    """``text`` with every special character replaced by its escape (``\\x00``, ``\\u2028``)."""
    return _SPECIAL.sub(lambda m: _code(m.group()), text)


def _span(char: str) -> str:
    name = _NAMES.get(char, f"U+{ord(char):04X}")
    return f'<span class="esc" title="{name}">{_code(char)}</span>'


def visible(text: str, *, mark_newlines: bool = False) -> Markup:
    """HTML for ``text``: escaped, specials as marked escapes, newlines kept (and shown as ``↵``
    before the break when ``mark_newlines``, for a changed token that is only whitespace)."""
    out: list[str] = []
    last = 0
    for m in _SPECIAL.finditer(text):
        out.append(str(escape(text[last : m.start()])))
        out.append(_span(m.group()))
        last = m.end()
    out.append(str(escape(text[last:])))
    html = "".join(out)
    if mark_newlines:
        html = html.replace("\n", '<span class="nl">↵</span>\n')
    return Markup(html)


def token_text(text: str) -> Markup:
    """A single token for a table cell: as `visible`, newline and tab drawn as ``↵`` and ``→``,
    inside a box whose edges show leading and trailing spaces."""
    html = str(visible(text)).replace("\n", '<span class="nl">↵</span>')
    html = html.replace("\t", '<span class="nl">→</span>')
    return Markup(f'<code class="tok">{html}</code>')
