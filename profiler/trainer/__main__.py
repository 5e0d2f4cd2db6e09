"""The per-rank worker that torchrun starts: ``python -m profiler.trainer <flags> --out DIR``.

It reads the rank from torchrun's environment, initialises the process group (gloo on CPU,
NCCL on CUDA), trains and records. If the rank fails, it writes a one-line error record to
``DIR/errors/rank<N>.json`` (read by the launcher) before exiting non-zero.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path

from profiler.trainer.args import add_train_arguments, config_from_args
from profiler.trainer.files import ERRORS_DIR, PIDS_DIR, write_json

log = logging.getLogger("profiler.trainer")


def build_parser() -> argparse.ArgumentParser:
    """Flags of the worker: the run flags plus the output directory."""
    parser = argparse.ArgumentParser(prog="python -m profiler.trainer",
                                     description="One rank of a trainsim trainer run (torchrun).")
    add_train_arguments(parser)
    parser.add_argument("--out", required=True, help="directory for traces and the manifest")
    parser.add_argument("--collective-timeout-s", type=float, default=600.0,
                        help="timeout of every collective (seconds)")
    return parser


def write_error(out_dir: Path, rank: int, exc: BaseException) -> None:
    """Record ``exc`` as this rank's one-line error (type, message, unix time); a record that
    cannot be written (full disk) is logged instead: the launcher still sees the exit code."""
    message = " ".join(str(exc).split()) or exc.__class__.__name__
    try:
        (out_dir / ERRORS_DIR).mkdir(exist_ok=True)  # the recording's own layout
        write_json(out_dir / ERRORS_DIR / f"rank{rank}.json",
                   {"rank": rank, "type": exc.__class__.__name__, "message": message[:500],
                    "time_unix_s": time.time()})
    except OSError as failed:
        log.error("rank %d: cannot write its error record: %s", rank, failed)


def init_distributed(device: str, timeout_s: float) -> None:
    """Initialise the default process group from torchrun's environment."""
    import torch
    import torch.distributed as dist

    use_cuda = device == "cuda" or (device == "auto" and torch.cuda.is_available())
    if use_cuda:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group(backend="nccl" if use_cuda else "gloo",
                            timeout=timedelta(seconds=timeout_s))


def main(argv: Sequence[str] | None = None) -> int:
    """Run one rank; returns the exit code."""
    args = build_parser().parse_args(argv)
    rank = int(os.environ.get("RANK", "0"))
    out_dir = Path(args.out)
    logging.basicConfig(level=logging.INFO if rank == 0 else logging.WARNING,
                        format=f"[rank{rank}] %(message)s", stream=sys.stderr)
    (out_dir / PIDS_DIR).mkdir(parents=True, exist_ok=True)
    (out_dir / PIDS_DIR / f"rank{rank}.pid").write_text(str(os.getpid()))
    try:
        config = config_from_args(args)
        init_distributed(config.device, args.collective_timeout_s)
        from profiler.trainer.train import train

        result = train(config, out_dir=out_dir)
        log.info("losses %s", " ".join(f"{loss:.5f}" for loss in result.losses))
    except BaseException as exc:
        write_error(out_dir, rank, exc)
        _shutdown(finished=False)
        raise
    _shutdown(finished=True)
    return 0


def _shutdown(finished: bool) -> None:
    """Destroy the process group if one was created; after a finished run, first wait for every
    rank to finish (a rank tearing down gloo while a slower peer still uses its connections can
    abort that peer: "terminate called without an active exception", SIGABRT)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        if finished:
            dist.barrier()
        dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
