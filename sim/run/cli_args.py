"""The run-level flags (``--tokens``, ``--reliability``) shared by ``simulate`` and ``explore``."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the run-level model is imported by the runs that ask for it (--tokens, --reliability)
    from sim.run.inputs import ReliabilityInputs


class _ReliabilityAction(argparse._StoreAction):
    """``--reliability``: its help names the presets, which are loaded when the help is printed."""

    @property  # type: ignore[override]
    def help(self) -> str:
        from sim.run.presets import PRESETS

        return (f"failure rates, restart and checkpoint policy: a preset ({', '.join(PRESETS)}) or a TOML file "
                "with a [reliability] table (default: the job or cluster file's table, else meta-rsc1)")

    @help.setter
    def help(self, value: str | None) -> None:
        """argparse sets the help it was given (None): the property above makes it."""


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``--tokens`` and ``--reliability``; with neither, output stays as without them."""
    g = parser.add_argument_group("training run (days, dollars, energy under failures)")
    g.add_argument("--tokens", type=float, metavar="N",
                   help="tokens to train: adds the run-level prediction (days P10/P50/P90, ETTR, interruptions, "
                        "GPU-hours, dollars, MWh)")
    g.add_argument("--reliability", metavar="PRESET|FILE", action=_ReliabilityAction)


def wants_run(args: argparse.Namespace) -> bool:
    """Did the user ask for the run-level prediction?"""
    return getattr(args, "tokens", None) is not None or getattr(args, "reliability", None) is not None


def run_inputs(args: argparse.Namespace) -> tuple[ReliabilityInputs, float]:
    """The reliability inputs and the token count the flags (and job/cluster files) give."""
    if args.tokens is None:
        raise ValueError(f"reliability={args.reliability!r} needs --tokens N (the tokens to train)")
    from sim.run.reliability_file import resolve_reliability

    files: list[Any] = [getattr(args, "config", None), getattr(args, "cluster", None)]
    return resolve_reliability(args.reliability, *files), args.tokens
