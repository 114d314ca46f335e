"""Text made safe and visible: every character a reader could not see, or that changes how the
text around it is shown, becomes a printed escape, never the raw character.

Escaped, by Unicode category (`unicodedata`, the Python's own Unicode version): every control
(Cc) but tab and newline, format character (Cf: zero-width characters, soft hyphen, every bidi
mark, embedding, override and isolate, the Arabic letter mark, tag characters, the BOM), private
use (Co), lone surrogate (Cs), line and paragraph separator (Zl, Zp) and space separator (Zs)
other than the plain space; and the default-ignorable characters of other categories, which
render as nothing (variation selectors, combining grapheme joiner, Hangul fillers, Mongolian
free variation selectors), the unassigned default-ignorables (U+E0000-E0FFF, U+FFF0-FFF8), and
U+FFFD (a tokenizer's invalid UTF-8).

`plain` is for any context (attributes included): a str with escapes as text. `visible` is for
element content: escaped HTML with each escape in a ``<span class="esc">``, so that a literal
backslash sequence in model output cannot pass for one.
"""

from __future__ import annotations

import functools
import re
import unicodedata

from markupsafe import Markup, escape

__all__ = ["is_special", "plain", "token_text", "visible"]

_CATEGORIES = frozenset({"Cc", "Cf", "Co", "Cs", "Zl", "Zp", "Zs"})
_KEPT = frozenset("\t\n ")
# Default_Ignorable_Code_Point (Unicode's DerivedCoreProperties) outside the categories above.
_IGNORABLE = (
    (0x034F, 0x034F),  # combining grapheme joiner
    (0x115F, 0x1160),  # Hangul choseong / jungseong fillers
    (0x17B4, 0x17B5),  # Khmer inherent vowels
    (0x180B, 0x180F),  # Mongolian free variation selectors (and U+180E)
    (0x2065, 0x2065),  # unassigned, in the bidi-isolate block
    (0x3164, 0x3164),  # Hangul filler
    (0xFE00, 0xFE0F),  # variation selectors
    (0xFFA0, 0xFFA0),  # halfwidth Hangul filler
    (0xFFF0, 0xFFF8),  # unassigned specials
    (0x1BCA0, 0x1BCA3),  # shorthand format controls
    (0x1D173, 0x1D17A),  # musical symbol format controls
    (0xE0000, 0xE0FFF),  # tags, variation selectors supplement, unassigned ignorables
)
# Characters that may need an escape: anything but printable ASCII, tab and newline.
_CANDIDATE = re.compile("[^\t\n\x20-\x7e]")
_NAMES = {"\ufffd": "invalid UTF-8 (U+FFFD)", "\x00": "NUL", "\x1b": "ESC", "\r": "CR"}


@functools.lru_cache(maxsize=8192)
def is_special(char: str) -> bool:
    """Whether ``char`` (one character) is shown as an escape."""
    if char in _KEPT:
        return False
    if char == "\ufffd" or unicodedata.category(char) in _CATEGORIES:
        return True
    o = ord(char)
    return any(lo <= o <= hi for lo, hi in _IGNORABLE)


def _code(char: str) -> str:
    o = ord(char)
    if o < 0x100:
        return f"\\x{o:02x}"
    return f"\\u{o:04x}" if o < 0x10000 else f"\\U{o:08x}"


def _specials(text: str) -> list[re.Match[str]]:
    return [m for m in _CANDIDATE.finditer(text) if is_special(m.group())]


def plain(text: str) -> str:
    """``text`` with every special character replaced by its escape (``\\x00``, ``\\u2028``,
    ``\\U000e0041``)."""
    return _CANDIDATE.sub(lambda m: _code(m.group()) if is_special(m.group()) else m.group(), text)


def _span(char: str) -> str:
    name = _NAMES.get(char, f"U+{ord(char):04X}")
    return f'<span class="esc" title="{name}">{_code(char)}</span>'


def visible(text: str, *, mark_newlines: bool = False) -> Markup:
    """HTML for ``text``: escaped, specials as marked escapes, newlines kept (and shown as ``↵``
    before the break when ``mark_newlines``, for a changed token that is only whitespace)."""
    out: list[str] = []
    last = 0
    for m in _specials(text):
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
