"""Entry point of the ``trainsim`` command: builds the parser and dispatches subcommands.

Simulator commands live in :mod:`sim.cli`; other packages (the profiler) add theirs through the
``trainsim.commands`` entry-point group, so ``sim`` never imports upward. A run of one of the
simulator's commands registers that command alone: it imports neither the others nor the
plugins (their imports were ~0.2 s of every ``trainsim simulate``).
"""

from __future__ import annotations

import argparse
import gc
import logging
import sys
import traceback
from collections.abc import Sequence

from sim.cli.errors import EXIT_BUG, EXIT_INTERRUPTED, EXIT_USAGE, OneLineParser
from sim.gc_pause import own_process

SIM_COMMANDS = ("simulate", "compare", "schedule", "presets", "explore")


def build_parser(commands: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The ``trainsim`` parser with every registered subcommand, or with only ``commands`` (some
    of :data:`SIM_COMMANDS`; no plugin is loaded then)."""
    parser = OneLineParser(
        prog="trainsim",
        description="Simulate, profile and compare distributed LLM training steps.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress to stderr")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in SIM_COMMANDS if commands is None else commands:
        if name not in SIM_COMMANDS:
            raise ValueError(f"command {name!r} is not one of trainsim's own: {', '.join(SIM_COMMANDS)}")
        module = __import__(f"sim.cli.cmd_{name}", fromlist=["register"])
        module.register(sub)
    if commands is not None:
        return parser
    from importlib.metadata import entry_points

    for ep in sorted(entry_points(group="trainsim.commands"), key=lambda e: e.name):
        try:
            register = ep.load()
        except ImportError as exc:  # a broken or stale plugin must not take the simulator down
            logging.getLogger(__name__).warning("command %s unavailable: %s", ep.name, exc)
            continue
        register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``trainsim`` and return its exit code: 0 on success; 2 for a user error (bad flag,
    file, value, a plan too large for this machine), printed as one line on stderr; 1 for a bug
    in trainsim, one line too (``-v`` adds the traceback); 130 when interrupted. Argparse's
    exits (``-h``, usage errors) are returned, not raised.

    Run as the ``trainsim`` program (``argv`` None), the objects left when the command is done
    are moved out of the cyclic collector's sight (``gc.freeze``): they live until the process
    exits, and the collector's passes over them at interpreter shutdown (~80 ms with numpy and
    pandas loaded) would find only the parser's few cycles, which the exit releases anyway; and
    explore freezes what each plan leaves alive (:func:`sim.gc_pause.freeze_survivors`). A caller
    passing ``argv`` keeps its collector as it was."""
    words = list(sys.argv[1:] if argv is None else argv)
    if argv is None:
        own_process()  # explore may keep its caches out of the collector's passes (sim.gc_pause)
    try:
        code = _main(words)
    except KeyboardInterrupt:  # before the command runs: loading the parser and the plugins
        print(f"{_prog(words)}: interrupted", file=sys.stderr)
        code = EXIT_INTERRUPTED
    if argv is None:
        gc.freeze()
    return code


def _main(argv: list[str]) -> int:
    command = _sim_command(argv)
    parser = build_parser(None if command is None else [command])
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    try:
        return int(args.func(args) or 0)
    except (ValueError, OSError) as exc:
        print(f"trainsim {args.command}: error: {_one_line(exc)}", file=sys.stderr)
        return EXIT_USAGE
    except ModuleNotFoundError as exc:  # an optional extra that is not installed
        print(f"trainsim {args.command}: error: {_missing_module(exc)}", file=sys.stderr)
        return EXIT_USAGE
    except (MemoryError, RecursionError) as exc:
        print(f"trainsim {args.command}: error: out of {'memory' if isinstance(exc, MemoryError) else 'stack'} "
              "(the input is too large or too deeply nested)", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print(f"trainsim {args.command}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as exc:  # a bug: one line, the traceback with -v
        if args.verbose:
            traceback.print_exc()
        print(f"trainsim {args.command}: internal error (a trainsim bug, please report it): "
              f"{type(exc).__name__}: {_one_line(exc)[:300]} (rerun with -v for the traceback)", file=sys.stderr)
        return EXIT_BUG


def _prog(argv: Sequence[str]) -> str:
    """``trainsim COMMAND`` (the first word that is not an option), or ``trainsim``."""
    command = next((w for w in argv if not w.startswith("-")), None)
    return f"trainsim {command}" if command else "trainsim"


def _sim_command(argv: Sequence[str]) -> str | None:
    """The simulator command ``argv`` runs (its first word after the top-level options), or None
    (help, a plugin's command, a typo: the full parser answers those)."""
    for word in argv:
        if word in ("-v", "--verbose"):
            continue
        return word if word in SIM_COMMANDS else None
    return None


EXTRAS = {"torch": "torch", "dask": "distributed", "distributed": "distributed"}
"""Top-level module -> the trainsim extra that installs it (pyproject.toml)."""


def _missing_module(exc: ModuleNotFoundError) -> str:
    """What to install for a missing optional module."""
    module = (exc.name or str(exc)).split(".")[0]
    if module in EXTRAS:
        return f"this command needs {module}, which is not installed: pip install 'trainsim[{EXTRAS[module]}]'"
    return f"this command needs the Python module {module!r}, which is not installed (pip install {module})"


def _one_line(exc: BaseException) -> str:
    """The exception's message on one line (file errors include the path, shortened when long)."""
    if isinstance(exc, OSError) and (exc.filename or exc.strerror):
        name = str(exc.filename or "")
        name = name if len(name) <= 80 else name[:79] + "…"
        return f"{exc.strerror or exc}: {name}" if name else str(exc.strerror)
    return " ".join(str(exc).split())


if __name__ == "__main__":
    sys.exit(main())
