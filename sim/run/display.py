"""The human table of the run-level prediction (``simulate --tokens``); the CLI calls it."""

from __future__ import annotations

from typing import Any

from sim.cli.output import print_pairs

KEYS = ("reliability", "rates_count", "steps", "ettr", "interruptions", "mtti_h", "checkpoint_interval_s",
        "checkpoint_mode", "days_failure_free", "days_p10", "days_p50", "days_p90", "gpu_hours", "cost_usd",
        "energy_mwh", "energy_gpus_mwh", "energy_tdp_bound_mwh")


def print_run(run: dict[str, Any]) -> None:
    """Print the run object's headline numbers and where the time goes."""
    print_pairs(f"training run ({run['source']})", {k: run[k] for k in KEYS if k in run})
    print_pairs("where the wall time goes (shares)", run["breakdown"])
