"""Entry point of the ``trainsim`` command: builds the parser and dispatches subcommands.

Simulator commands live in :mod:`sim.cli`; other packages (the profiler) add theirs through the
``trainsim.commands`` entry-point group, so ``sim`` never imports upward.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from importlib.metadata import entry_points

from sim.cli.errors import EXIT_USAGE, OneLineParser

SIM_COMMANDS = ("simulate", "compare", "schedule", "presets", "explore")


def build_parser() -> argparse.ArgumentParser:
    """The full ``trainsim`` parser with every registered subcommand."""
    parser = OneLineParser(
        prog="trainsim",
        description="Simulate, profile and compare distributed LLM training steps.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress to stderr")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in SIM_COMMANDS:
        module = __import__(f"sim.cli.cmd_{name}", fromlist=["register"])
        module.register(sub)
    for ep in sorted(entry_points(group="trainsim.commands"), key=lambda e: e.name):
        try:
            register = ep.load()
        except ImportError as exc:  # a broken or stale plugin must not take the simulator down
            logging.getLogger(__name__).warning("command %s unavailable: %s", ep.name, exc)
            continue
        register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``trainsim``; user errors print one line to stderr and return exit code 2."""
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    try:
        return int(args.func(args) or 0)
    except (ValueError, FileNotFoundError, IsADirectoryError, PermissionError) as exc:
        print(f"trainsim {args.command}: error: {_one_line(exc)}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print(f"trainsim {args.command}: interrupted", file=sys.stderr)
        return 130


def _one_line(exc: BaseException) -> str:
    """The exception's message on one line (file errors include the path)."""
    if isinstance(exc, OSError) and exc.filename:
        return f"{exc.strerror or exc}: {exc.filename}"
    return " ".join(str(exc).split())


if __name__ == "__main__":
    sys.exit(main())
