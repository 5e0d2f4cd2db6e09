"""The ``trainsim`` program's entry point: Ctrl-C while the CLI itself is still being imported
(its first ~50 ms) prints one line and exits 130, like an interrupt at any later moment, instead
of a traceback from the middle of an import. Imports nothing until called.

numpy's BLAS (OpenBLAS) runs on one thread unless ``OPENBLAS_NUM_THREADS`` says otherwise: its
thread pool, started when numpy is imported, cost ~45 ms of CPU of every ~0.29 s ``trainsim
simulate --json`` (2 cores, ``bench/startup_speed.py``), and the simulator's arrays are too small
for threaded BLAS to pay (the sweep's parallelism is its worker processes)."""

from __future__ import annotations

import os
import sys

BLAS_THREADS = "OPENBLAS_NUM_THREADS"


def main() -> int:
    """Import and run :func:`sim.cli.main.main` (numpy's BLAS on one thread unless the
    environment sets :data:`BLAS_THREADS`)."""
    os.environ.setdefault(BLAS_THREADS, "1")  # read once, when numpy loads OpenBLAS
    try:
        from sim.cli.main import main as run
    except KeyboardInterrupt:
        print("trainsim: interrupted", file=sys.stderr)
        return 130  # sim.cli.errors.EXIT_INTERRUPTED, not imported: the interrupt may have cut that import
    return run()
