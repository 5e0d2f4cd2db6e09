"""Assemble an HTML page from Plotly figures and tables; the one writer of every trainsim report.

Where the page gets plotly.js from is chosen when it is written (:class:`PlotlyJs`): inlined
(default, works offline; ~4.8 MB per page), from the plotly CDN, or from one ``plotly.min.js``
written beside the reports. Figures are kept as :class:`plotly.graph_objects.Figure` objects until
then (``Report.figures``), and their HTML ids are numbered, so the same report renders the same bytes.
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sim.atomic import write_text_atomic
from sim.report.format import fmt_value

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
PLOTLY_BUNDLE = "plotly.min.js"
FIGURE_CONFIG = {"displaylogo": False, "responsive": True}


class PlotlyJs(StrEnum):
    """Where a report loads plotly.js from."""

    INLINE = "inline"        # embedded in every page (offline, ~4.8 MB each)
    CDN = "cdn"              # a <script src> to cdn.plot.ly (needs the network when viewed)
    DIRECTORY = "directory"  # plotly.min.js written once beside the reports


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
        """A table of rows (dicts); numbers are formatted compactly, booleans as yes/no."""
        if not rows:
            return
        cols = list(columns or rows[0].keys())
        head = "".join(f"<th>{html.escape(c).replace('_', '_<wbr>')}</th>" for c in cols)  # may wrap at _
        body = "".join("<tr>" + "".join(f"<td>{html.escape(fmt_value(r.get(c)))}</td>" for c in cols) + "</tr>"
                       for r in rows)
        self.parts.append(f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")

    def figure(self, fig: go.Figure) -> None:
        """A Plotly figure."""
        self.parts.append(fig)

    def render(self, plotly_js: PlotlyJs = PlotlyJs.INLINE) -> str:
        """The complete HTML document; the first figure carries the plotly.js loader."""
        import plotly.graph_objects as go

        body, figures = [], 0
        for part in self.parts:
            if isinstance(part, go.Figure):
                include = _include_plotlyjs(plotly_js) if figures == 0 else False
                body.append(part.to_html(full_html=False, include_plotlyjs=include, div_id=f"figure-{figures}",
                                         config=FIGURE_CONFIG))
                figures += 1
            else:
                body.append(part)
        title = html.escape(self.title)
        return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{title}</title>"
                f"<style>{STYLE}</style></head><body><h1>{title}</h1>{''.join(body)}</body></html>")

    def write(self, path: str | Path, plotly_js: PlotlyJs = PlotlyJs.INLINE) -> Path:
        """Write the document atomically (and, for ``directory``, plotly.min.js beside it)."""
        target = write_text_atomic(path, self.render(plotly_js))
        if PlotlyJs(plotly_js) is PlotlyJs.DIRECTORY and self.figures:
            write_plotly_bundle(target.parent)
        return target


def _include_plotlyjs(plotly_js: PlotlyJs) -> bool | str:
    """Plotly's ``include_plotlyjs`` value for a choice (``directory`` loads ./plotly.min.js)."""
    choice = PlotlyJs(plotly_js)
    return True if choice is PlotlyJs.INLINE else choice.value


def write_plotly_bundle(directory: Path) -> Path:
    """plotly.min.js (the version plotly.py ships) in ``directory``, rewritten only if it differs."""
    from plotly.offline import get_plotlyjs

    path = directory / PLOTLY_BUNDLE
    source = get_plotlyjs()
    if path.is_file() and path.read_text(encoding="utf-8", errors="replace") == source:
        return path
    return write_text_atomic(path, source)
