"""The report flags every command that writes HTML shares: --report, --no-report, --plotly-js.

Rule: a command writes its report to ``--report PATH``; without it, to its default file, except
with ``--json`` (machine output: no file appears unless asked for) or ``--no-report``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from sim.report.plotly_js import PlotlyJs  # not sim.report.html: the html module only for a report

PLOTLY_JS_HELP = ("where the HTML loads plotly.js from: assets (default; one copy in trainsim-assets/ "
                  "beside the report, shared by every report there; offline), inline (one self-contained "
                  "file, ~4.8 MB), cdn (cdn.plot.ly; needs the network to view) or directory (plotly.min.js "
                  "beside the report)")


def plotly_js_choice(text: str) -> PlotlyJs:
    """The --plotly-js value; a bad one names the valid ones."""
    try:
        return PlotlyJs(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is invalid: expected {', '.join(PlotlyJs)}") from None


def add_plotly_js_argument(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """``--plotly-js assets|inline|cdn|directory`` (default assets)."""
    parser.add_argument("--plotly-js", type=plotly_js_choice, default=PlotlyJs.ASSETS,
                        metavar="{" + ",".join(PlotlyJs) + "}", help=PLOTLY_JS_HELP)


def add_report_arguments(parser: argparse.ArgumentParser, default: str) -> None:
    """``--report PATH`` / ``--no-report`` (exclusive) and ``--plotly-js``; see :func:`report_path`."""
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--report", metavar="HTML",
                       help=f"HTML report path (default {default}; with --json, none unless given)")
    group.add_argument("--no-report", action="store_true", help="do not write the HTML report")
    add_plotly_js_argument(parser)
    parser.set_defaults(report_default=default)


def report_path(args: argparse.Namespace) -> Path | None:
    """Where to write the report, or None: --report if given; else nothing with --json or
    --no-report; else the command's default file."""
    if getattr(args, "report", None):
        return Path(args.report)
    if getattr(args, "no_report", False) or getattr(args, "json", False):
        return None
    return Path(args.report_default)
