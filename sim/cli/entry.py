"""The ``trainsim`` program's entry point: Ctrl-C while the CLI itself is still being imported
(its first ~50 ms) prints one line and exits 130, like an interrupt at any later moment, instead
of a traceback from the middle of an import. Imports nothing until called."""

from __future__ import annotations

import sys


def main() -> int:
    """Import and run :func:`sim.cli.main.main`."""
    try:
        from sim.cli.main import main as run
    except KeyboardInterrupt:
        print("trainsim: interrupted", file=sys.stderr)
        return 130  # sim.cli.errors.EXIT_INTERRUPTED, not imported: the interrupt may have cut that import
    return run()
