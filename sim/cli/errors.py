"""Errors a user causes: printed as one line, exit code 2, no traceback."""

from __future__ import annotations


class UsageError(ValueError):
    """Bad input from the user (flag, config file, trace). The message is one line."""


EXIT_USAGE = 2
