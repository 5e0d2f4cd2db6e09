"""What a row's simulation took for granted: assumptions, approximations, and rows it cannot run."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Note:
    """One setting: a short ``code`` for tables and the full ``text``.

    An *assumption* fills a setting the source leaves unstated with a documented default; an
    *approximation* runs a stated setting as the nearest one the plan can express.
    """

    code: str
    text: str


class Unexpressible(Exception):
    """A row today's plan cannot express; the message is the one-line reason naming the feature."""
