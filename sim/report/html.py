"""Assemble an HTML page from Plotly figures and tables; the one writer of every trainsim report.

Where the page gets plotly.js from is chosen when it is written (:class:`PlotlyJs`, see
:mod:`sim.report.plotly_js`): by default from one versioned copy in ``trainsim-assets/`` beside the
report (offline, written once), inlined (one self-contained ~4.8 MB file), or from the plotly CDN. Figures are kept as :class:`plotly.graph_objects.Figure` objects until
then (``Report.figures``), and their HTML ids are numbered, so the same report renders the same bytes.
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sim.atomic import check_output, write_text_atomic
from sim.report.format import fmt_value
from sim.report.plotly_js import PlotlyJs, include_value, write_bundle

if TYPE_CHECKING:  # plotly is imported when a report is made, not by the commands that only parse --plotly-js
    import plotly.graph_objects as go

STYLE = """
body { font-family: system-ui, sans-serif; margin: 24px; color: #222; }
h1 { font-size: 22px; } h2 { font-size: 17px; margin-top: 28px; }
table { border-collapse: collapse; font-size: 13px; margin: 8px 0 16px; }
th, td { border: 1px solid #ddd; padding: 4px 10px; text-align: right; }
th { background: #f4f4f4; } td:first-child, th:first-child { text-align: left; }
.note { color: #555; font-size: 13px; max-width: 980px; }
"""
FIGURE_CONFIG = {"displaylogo": False, "responsive": True}
__all__ = ["PlotlyJs", "Report"]


@dataclass
class Report:
    """A report under construction: a title and ordered sections (HTML strings or figures)."""

    title: str
    parts: list[str | go.Figure] = field(default_factory=list)

    @property
    def figures(self) -> list[go.Figure]:
        """The figures added so far, in order."""
        import plotly.graph_objects as go

        return [p for p in self.parts if isinstance(p, go.Figure)]

    def heading(self, text: str) -> None:
        """A section heading."""
        self.parts.append(f"<h2>{html.escape(text)}</h2>")

    def note(self, text: str) -> None:
        """A paragraph of explanatory text."""
        self.parts.append(f'<p class="note">{html.escape(text)}</p>')

    def table(self, rows: Sequence[Mapping[str, Any]], columns: Sequence[str] | None = None) -> None:
        """A table of rows (dicts); numbers are formatted compactly, booleans as yes/no. Without
        ``columns``: every key any row has, in the order they first appear (a key a row lacks is
        an empty cell)."""
        if not rows:
            return
        cols = list(columns or dict.fromkeys(k for r in rows for k in r))
        head = "".join(f"<th>{html.escape(c).replace('_', '_<wbr>')}</th>" for c in cols)  # may wrap at _
        body = "".join("<tr>" + "".join(f"<td>{html.escape(fmt_value(r.get(c)))}</td>" for c in cols) + "</tr>"
                       for r in rows)
        self.parts.append(f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")

    def figure(self, fig: go.Figure) -> None:
        """A Plotly figure."""
        self.parts.append(fig)

    def render(self, plotly_js: PlotlyJs = PlotlyJs.ASSETS) -> str:
        """The complete HTML document; the first figure carries the plotly.js loader."""
        import plotly.graph_objects as go

        body, figures = [], 0
        for part in self.parts:
            if isinstance(part, go.Figure):
                include = include_value(plotly_js) if figures == 0 else False
                body.append(part.to_html(full_html=False, include_plotlyjs=include, div_id=f"figure-{figures}",
                                         config=FIGURE_CONFIG))
                figures += 1
            else:
                body.append(part)
        title = html.escape(self.title)
        return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{title}</title>"
                f"<style>{STYLE}</style></head><body><h1>{title}</h1>{''.join(body)}</body></html>")

    def write(self, path: str | Path, plotly_js: PlotlyJs = PlotlyJs.ASSETS) -> Path:
        """Write the document atomically, and first the plotly.js file it loads, if any, beside it
        (``assets``, ``directory``: see :func:`sim.report.plotly_js.write_bundle`), so a failure
        leaves the previous page. The page's path is checked before anything is written
        (:func:`sim.atomic.check_output`: its directory must exist)."""
        page, html_text = Path(path), self.render(plotly_js)
        check_output(page)
        if self.figures:
            write_bundle(page.parent, PlotlyJs(plotly_js))
        return write_text_atomic(page, html_text)
