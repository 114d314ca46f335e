"""JSON for embedding in a ``<script type="application/json">`` block.

``<``, ``>`` and ``&`` are written as ``\\u003c``..., so ``</script>`` or ``<!--`` in model
output cannot end the block; everything outside ASCII (U+2028/2029 and lone surrogates
included) is ``\\uXXXX``; non-finite numbers become null, so ``JSON.parse`` never fails.
"""

from __future__ import annotations

import json
import math

from markupsafe import Markup

__all__ = ["finite", "script_json"]

_UNSAFE = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}


def finite(value: object) -> object:
    """``value`` with every NaN and infinity (in dicts, lists and tuples) as None: JSON has
    neither, and a figure that could not be computed is null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite(v) for v in value]
    return value


def script_json(value: object) -> Markup:
    """``value`` as JSON text that is inert inside a script element."""
    text = json.dumps(finite(value), ensure_ascii=True, separators=(",", ":"), allow_nan=False)
    for char, code in _UNSAFE.items():
        text = text.replace(char, code)
    return Markup(text)
