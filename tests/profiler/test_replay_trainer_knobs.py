"""The trainer's what-if validation knobs: ``--slow-rank`` keeps a CPU rank busy (it spins, as a
slower processor would), ``--slow-comm dp:SECONDS`` delays each collective's completion without
holding up the next one, and both flags validate and round-trip through the worker command line."""

from __future__ import annotations

import argparse
import os
import socket
import threading
import time

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")

from profiler.trainer.actions import hold  # noqa: E402
from profiler.trainer.args import add_train_arguments, config_from_args, config_to_argv  # noqa: E402
from profiler.trainer.torch_compat import DelayLine  # noqa: E402


def parse(*argv: str) -> object:
    parser = argparse.ArgumentParser()
    add_train_arguments(parser)
    return config_from_args(parser.parse_args(list(argv)))


def test_hold_on_a_cpu_rank_spins_for_the_time() -> None:
    wall, cpu = time.perf_counter(), time.thread_time()
    hold(torch.device("cpu"), 0.05)
    assert time.perf_counter() - wall >= 0.05
    assert time.thread_time() - cpu >= 0.03  # busy, not asleep


def test_slow_comm_flag_validates_and_round_trips() -> None:
    config = parse("--dp", "2", "--zero", "3", "--slow-comm", "dp:0.02")
    assert (config.slow_comm_dim, config.slow_comm_s) == ("dp", 0.02)  # type: ignore[attr-defined]
    assert parse(*config_to_argv(config)) == config  # type: ignore[arg-type]
    for argv, word in ((["--dp", "2", "--zero", "1", "--slow-comm", "dp:0.02"], "zero 2 or 3"),
                       (["--dp", "2", "--zero", "3", "--slow-comm", "tp:0.02"], "slow_comm_dim='tp'"),
                       (["--dp", "2", "--zero", "3", "--slow-comm", "dp:0"], "seconds > 0"),
                       (["--dp", "2", "--zero", "3", "--slow-comm", "0.02"], "expected DIM:SECONDS")):
        with pytest.raises(ValueError, match=word) as err:
            parse(*argv)
        assert "\n" not in str(err.value)


@pytest.fixture
def gloo_world() -> object:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=0, world_size=1)
    yield None
    dist.destroy_process_group()


def test_delay_line_delays_each_completion_independently(gloo_world: object) -> None:
    line = DelayLine(0.2)
    tensors = [torch.full((4,), float(k)) for k in range(3)]
    start = time.perf_counter()
    works = [line.delayed(dist.all_reduce(t, async_op=True)) for t in tensors]
    done_at = []
    for w in works:
        w.wait()
        done_at.append(time.perf_counter() - start)
    assert min(done_at) >= 0.2
    assert max(done_at) < 0.2 + 0.15  # not 0.6: the delays overlap, like a link's latency
    assert [t.tolist() for t in tensors] == [[float(k)] * 4 for k in range(3)]
    assert threading.active_count() < 50
