"""The comparison of two runs as one self-contained page (``equiv compare --html FILE``): the
gate, the setup that differs, the drift, acceptance and speed shifts with their intervals, and
the prompts that changed. The same jinja2 environment (autoescape, escaping finalizer) and
stylesheet as the run report; no script, so the CSP allows none."""

from __future__ import annotations

from pathlib import Path

from markupsafe import Markup

from equiv import __version__
from equiv.report.html import _asset, _environment, _sha256
from equiv.verdicts.runs.compare import Gate, RunComparison

__all__ = ["render_compare_report", "write_compare_report"]


def render_compare_report(comparison: RunComparison, *, gate: Gate = Gate.WORSE) -> str:
    css = _asset("report.css")
    csp = (
        f"default-src 'none'; style-src '{_sha256(css)}'; script-src 'none'; img-src 'none'; "
        "base-uri 'none'; form-action 'none'"
    )
    c = comparison
    return (
        _environment()
        .get_template("compare.html.jinja")
        .render(
            c=c,
            shifts=(c.drift, c.acceptance, c.baseline_speed, c.speculative_speed),
            failures=c.failures(gate),
            gate=gate.value,
            version=__version__,
            csp=csp,
            css=Markup(css),
        )
    )


def write_compare_report(comparison: RunComparison, out: Path, *, gate: Gate = Gate.WORSE) -> Path:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render_compare_report(comparison, gate=gate), encoding="utf-8")
    return out
