"""Errors a user causes: printed as one line, exit code 2, no traceback."""

from __future__ import annotations

import argparse
from typing import NoReturn


class UsageError(ValueError):
    """Bad input from the user (flag, config file, trace). The message is one line."""


EXIT_USAGE = 2
EXIT_BUG = 1  # an exception trainsim did not expect: a bug, reported on one line
EXIT_INTERRUPTED = 130  # Ctrl-C (SIGINT): 128 + 2, as a shell reports a process it interrupted


class OneLineParser(argparse.ArgumentParser):
    """An argument parser whose errors (unknown flag, bad choice, missing value) are one line on
    stderr and exit code 2, like every other user error (argparse's default prints the whole
    usage block first). Subcommand parsers made by ``add_subparsers`` inherit it."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} -h)\n")
