"""Reports rendered from a results file alone: a self-contained HTML page (`render_report`,
`write_report`). They show what the file holds and compute nothing new."""

from equiv.report.html import render_report, write_report

__all__ = ["render_report", "write_report"]
