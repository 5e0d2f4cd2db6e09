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


def _busy_loop_share(seconds: float) -> float:
    """CPU time per wall-clock second a bare busy loop gets on this thread right now (1.0 on an
    idle core, less when other processes share it)."""
    wall, cpu = time.perf_counter(), time.thread_time()
    until = wall + seconds
    while time.perf_counter() < until:
        pass
    return (time.thread_time() - cpu) / (time.perf_counter() - wall)


def test_hold_on_a_cpu_rank_spins_for_the_time() -> None:
    """``hold`` lasts its time and keeps the core busy (not asleep): its CPU share is compared
    with a bare busy loop's measured just before it, so other load on the machine lowers both
    alike; best of 5 tries (a sleeping hold gets ~0 CPU in every try)."""
    shares = []
    for _ in range(5):
        bare = _busy_loop_share(0.05)
        wall, cpu = time.perf_counter(), time.thread_time()
        hold(torch.device("cpu"), 0.05)
        elapsed = time.perf_counter() - wall
        assert elapsed >= 0.05
        shares.append(((time.thread_time() - cpu) / elapsed, bare))
        if bare > 0.05 and shares[-1][0] >= 0.6 * bare:
            break
    assert any(bare > 0.05 and held >= 0.6 * bare for held, bare in shares), shares  # busy, not asleep


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
    """Three works on a 0.5 s delay line all complete 0.5 s after they finish, together (the
    delays overlap, like a link's latency): in series they would end at 1.0 s and 1.5 s. The
    bound, one delay of slack, holds on a loaded machine; best of 3 tries all the same."""
    delay_s = 0.5
    attempts = []
    for _ in range(3):
        line = DelayLine(delay_s)
        tensors = [torch.full((4,), float(k)) for k in range(3)]
        start = time.perf_counter()
        works = [line.delayed(dist.all_reduce(t, async_op=True)) for t in tensors]
        done_at = []
        for w in works:
            w.wait()
            done_at.append(time.perf_counter() - start)
        assert min(done_at) >= delay_s
        assert [t.tolist() for t in tensors] == [[float(k)] * 4 for k in range(3)]
        attempts.append(max(done_at))
        if attempts[-1] < 2 * delay_s:
            break
    assert min(attempts) < 2 * delay_s, attempts  # not 3 * delay_s: the delays overlap
    assert threading.active_count() < 50
