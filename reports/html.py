"""Self-contained HTML cost report of one search.

``render_report(context, out_path) -> Path`` writes ONE HTML file that opens offline: plotly.js
is inlined, figures are embedded as JSON, nothing is fetched from the network. The page reads well
in light and dark mode (``prefers-color-scheme``) and in print. The file is written atomically
(:func:`tuner.core.io.write_atomic`), so a failure never leaves a half-written report.

The context is a :class:`reports.context.ReportContext` (its dataclasses are the schema);
:mod:`reports.views` turns it into what the template shows, :mod:`reports.figures` draws.
"""

from __future__ import annotations

from pathlib import Path

import jinja2

from tuner.core.io import write_atomic
from tuner.reports.context import ReportContext
from tuner.reports.views import view


def _environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.PackageLoader("tuner.reports", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )


def render_html(context: ReportContext) -> str:
    """The report as an HTML string."""
    return _environment().get_template("report.html.j2").render(**view(context))


def render_report(context: ReportContext, out_path: str | Path) -> Path:
    """Render the report and write it atomically to ``out_path``; return the path."""
    return write_atomic(out_path, render_html(context))


__all__ = ["render_html", "render_report"]
