"""Where a report loads plotly.js from, and the one copy of it written beside reports.

By default (:attr:`PlotlyJs.ASSETS`) the library is written once into ``trainsim-assets/`` next to
the report, under a versioned name (``trainsim-assets/plotly-4.1.1.min.js`` for plotly.py 7.1.0),
and every page in that directory loads it by a relative URL: pages stay small (tens to hundreds of
kB rather than 4.8 MB each), open offline, and reports written later by another plotly version get
their own file instead of breaking older pages. ``inline`` gives one self-contained file.
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path

from sim.atomic import write_text_atomic

ASSET_DIR = "trainsim-assets"
LEGACY_BUNDLE = "plotly.min.js"  # the name --plotly-js directory writes (beside the page itself)


class PlotlyJs(StrEnum):
    """Where a report loads plotly.js from."""

    ASSETS = "assets"        # trainsim-assets/plotly-<version>.min.js beside the reports, written once (default)
    INLINE = "inline"        # embedded in the page: one self-contained file (~4.8 MB)
    CDN = "cdn"              # a <script src> to cdn.plot.ly (needs the network when viewed)
    DIRECTORY = "directory"  # plotly.min.js beside the reports (unversioned; rewritten on a version change)


def bundle_name(choice: PlotlyJs) -> str | None:
    """The page-relative URL of the file a choice needs beside the report (None: no file)."""
    from plotly.offline import get_plotlyjs_version

    if choice is PlotlyJs.ASSETS:
        return f"{ASSET_DIR}/plotly-{get_plotlyjs_version()}.min.js"
    return LEGACY_BUNDLE if choice is PlotlyJs.DIRECTORY else None


def include_value(choice: PlotlyJs) -> bool | str:
    """Plotly's ``include_plotlyjs`` argument for a choice (a URL ending in .js is loaded from there)."""
    choice = PlotlyJs(choice)
    if choice is PlotlyJs.INLINE:
        return True
    return bundle_name(choice) or choice.value


def write_bundle(report_dir: Path, choice: PlotlyJs) -> Path | None:
    """The plotly.js file a page in ``report_dir`` loads under ``choice`` (None if it needs none):
    written atomically, or left alone when the same bytes are already there. ``trainsim-assets/``
    is created inside ``report_dir``, which must exist; a non-directory of that name is an error."""
    from plotly.offline import get_plotlyjs

    name = bundle_name(PlotlyJs(choice))
    if name is None:
        return None
    path = report_dir / name
    if path.parent != report_dir:
        _make_asset_dir(path.parent)
    source = get_plotlyjs()
    if path.is_file() and path.stat().st_size == len(source.encode()) and path.read_text(encoding="utf-8", errors="replace") == source:
        return path
    return write_text_atomic(path, source)


def _make_asset_dir(directory: Path) -> None:
    """Create the asset directory (its parent must exist); one-line error if the name is taken by a file."""
    if directory.exists() and not directory.is_dir():
        raise ValueError(f"cannot write plotly.js into {directory}: it exists and is not a directory "
                         "(remove it, or use --plotly-js inline)")
    directory.mkdir(exist_ok=True)
