"""The self-contained HTML report: one file, no request of any kind.

jinja2 with autoescape on, and a finalizer that prints special characters of every value as
escapes; CSS and the one script inlined and allowed by their sha256 hashes in a
Content-Security-Policy; the data the script needs as JSON in a ``<script
type="application/json">`` block that ``</script>`` in model output cannot end.
"""

from __future__ import annotations

import base64
import hashlib
import math
import os
from functools import cache
from importlib import resources
from pathlib import Path

import jinja2
from markupsafe import Markup

from equiv import __version__
from equiv.report.json import script_json
from equiv.report.run import load_run
from equiv.report.text import plain, token_text, visible

__all__ = ["render_report", "write_report"]


def _asset(name: str) -> str:
    return (resources.files("equiv.report") / "templates" / name).read_text(encoding="utf-8")


def _sha256(text: str) -> str:
    return "sha256-" + base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode()


def _finalize(value: object) -> object:
    """Every ``{{ }}`` value: a plain str has its special characters printed as escapes (then
    autoescape escapes it); Markup built by this package passes as is."""
    if isinstance(value, str) and not isinstance(value, Markup):
        return plain(value)
    return value


def _num(value: object, digits: int = 3) -> str:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return "-"
    return f"{value:.{digits}f}"


@cache
def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("equiv.report", "templates"),
        autoescape=True,
        finalize=_finalize,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["visible"] = visible
    env.filters["tok"] = token_text
    env.filters["num"] = _num
    return env


def render_report(results_path: str | os.PathLike[str], *, redact: bool = True) -> str:
    """The HTML report of a results file, as a string."""
    run = load_run(Path(results_path), redact=redact)
    css, js = _asset("report.css"), _asset("report.js")
    csp = (
        f"default-src 'none'; style-src '{_sha256(css)}'; script-src '{_sha256(js)}'; "
        "img-src 'none'; base-uri 'none'; form-action 'none'"
    )
    data = {"items": list(run.index)}
    return (
        _environment()
        .get_template("report.html.jinja")
        .render(
            run=run,
            version=__version__,
            csp=csp,
            css=Markup(css),
            js=Markup(js),
            data=script_json(data),
        )
    )


def write_report(
    results_path: str | os.PathLike[str],
    out_path: str | os.PathLike[str],
    *,
    redact: bool = True,
) -> Path:
    """Render the report of ``results_path`` into ``out_path`` (directories created); returns
    the path written."""
    out = Path(out_path)
    html = render_report(results_path, redact=redact)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(html, encoding="utf-8")
    return out
