"""Assemble a self-contained HTML page from Plotly figures and tables (plotly.js inlined once)."""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import plotly.graph_objects as go

from sim.atomic import write_text_atomic

STYLE = """
body { font-family: system-ui, sans-serif; margin: 24px; color: #222; }
h1 { font-size: 22px; } h2 { font-size: 17px; margin-top: 28px; }
table { border-collapse: collapse; font-size: 13px; margin: 8px 0 16px; }
th, td { border: 1px solid #ddd; padding: 4px 10px; text-align: right; }
th { background: #f4f4f4; } td:first-child, th:first-child { text-align: left; }
.note { color: #555; font-size: 13px; max-width: 980px; }
"""


@dataclass
class Report:
    """A report under construction: a title and ordered sections."""

    title: str
    parts: list[str] = field(default_factory=list)
    _plotly_included: bool = False

    def heading(self, text: str) -> None:
        """A section heading."""
        self.parts.append(f"<h2>{html.escape(text)}</h2>")

    def note(self, text: str) -> None:
        """A paragraph of explanatory text."""
        self.parts.append(f'<p class="note">{html.escape(text)}</p>')

    def table(self, rows: Sequence[Mapping[str, Any]], columns: Sequence[str] | None = None) -> None:
        """A table of rows (dicts); numbers are formatted compactly."""
        if not rows:
            return
        cols = list(columns or rows[0].keys())
        head = "".join(f"<th>{html.escape(c)}</th>" for c in cols)
        body = "".join("<tr>" + "".join(f"<td>{html.escape(_fmt(r.get(c)))}</td>" for c in cols) + "</tr>" for r in rows)
        self.parts.append(f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")

    def figure(self, fig: go.Figure) -> None:
        """A Plotly figure (the first one carries plotly.js inline)."""
        include = not self._plotly_included
        self._plotly_included = True
        self.parts.append(fig.to_html(full_html=False, include_plotlyjs=include,
                                      config={"displaylogo": False, "responsive": True}))

    def render(self) -> str:
        """The complete HTML document."""
        title = html.escape(self.title)
        return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{title}</title>"
                f"<style>{STYLE}</style></head><body><h1>{title}</h1>{''.join(self.parts)}</body></html>")

    def write(self, path: str | Path) -> Path:
        """Write the document atomically."""
        return write_text_atomic(path, self.render())


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return "" if value is None else str(value)
