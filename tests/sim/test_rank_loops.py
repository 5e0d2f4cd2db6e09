"""Host and copy costs of calls built by a loop over the ranks (sim/rank_loops.py), and the chain
of concurrent ops beside compute (sim/costing.py)."""

from __future__ import annotations

import pytest

from core.taskgraph import Op
from core.vocab import Kind
from sim.costing import layout_ops
from sim.host_sync import CPP_LAUNCH_HOST_S
from sim.rank_loops import (
    A_GATHER_S,
    A_RS_S,
    B_GATHER_LOOP_S,
    B_RS_LOOP_S,
    rank_copies_s,
    rank_loop_s,
)
from topo.device_presets import get_device
from topo.host_overheads import EAGER_OP_HOST_S


def test_gather_call_at_eight_ranks_is_deepspeed_1069s_measurement() -> None:
    """DeepSpeed #1069 (one p4d, 8 ranks, 2021): "the pre_launch typically takes 130us, the launch
    takes 250us about" per parameter all-gather."""
    assert rank_loop_s(Kind.ALL_GATHER, 8, 1) == pytest.approx(130e-6 + 250e-6)
    assert rank_loop_s(Kind.REDUCE_SCATTER, 8, 1) == pytest.approx(250e-6 + 8 * B_RS_LOOP_S)


def test_loops_grow_by_the_measured_cost_per_rank() -> None:
    """bench/zero3_2021_host.py (torch 2.13, this machine): 2.74-2.79 us per rank for the all-gather
    loop, 2.42-2.46 us for the reduce-scatter loop; plus one C++ copy launch per rank (1 us)."""
    assert 2.7e-6 <= B_GATHER_LOOP_S <= 2.85e-6 and 2.4e-6 <= B_RS_LOOP_S <= 2.5e-6
    slope = rank_loop_s(Kind.ALL_GATHER, 2240, 1) - rank_loop_s(Kind.ALL_GATHER, 1120, 1)
    assert slope == pytest.approx(1120 * (B_GATHER_LOOP_S + CPP_LAUNCH_HOST_S))
    assert rank_loop_s(Kind.REDUCE_SCATTER, 1, 3) == pytest.approx(3 * (A_RS_S + B_RS_LOOP_S + CPP_LAUNCH_HOST_S))
    assert A_GATHER_S > 0 and A_RS_S > 0
    assert rank_loop_s(Kind.OTHER, 1024, 5) == pytest.approx(5 * EAGER_OP_HOST_S)


def test_unknown_loop_kind_is_one_line_error() -> None:
    with pytest.raises(ValueError, match="kind='send' is invalid"):
        rank_loop_s(Kind.SEND, 8, 1)


def test_list_api_copies_are_one_kernel_per_rank() -> None:
    device = get_device("a100-80gb")
    tiny = rank_copies_s(device, 1024, 1024.0, "bf16") - rank_copies_s(device, 512, 1024.0, "bf16")
    assert tiny == pytest.approx(512 * device.kernel_overhead_s)


def _op(lane: str, concurrent: bool = False, beside: int = 1) -> Op:
    return Op(lane, Kind.OTHER, lane, "fixed", concurrent=concurrent, beside=beside)


def test_a_chain_of_concurrent_ops_runs_in_stream_order_beside_the_compute() -> None:
    """Beside 10 s of compute: a gather (3 s) then its copies (4 s) on one stream, a host loop (5 s)
    meanwhile, then a reduce-scatter (1 s) after both: it starts at 7 s; the task takes 10 s."""
    ops = [_op("compute"), _op("comm.dp", True), _op("comm.dp", True), _op("host", True), _op("comm.dp", True)]
    costed = layout_ops(ops, [10.0, 3.0, 4.0, 5.0, 1.0])
    assert [s.offset_s for s in costed.segments] == [0.0, 0.0, 3.0, 0.0, 7.0]
    assert costed.duration_s == 10.0
    longer = layout_ops(ops, [10.0, 3.0, 4.0, 9.0, 2.0])  # the host's loop holds the reduce-scatter back
    assert longer.segments[-1].offset_s == 9.0 and longer.duration_s == 11.0


def test_a_lone_concurrent_op_is_unchanged_by_the_chain_rule() -> None:
    ops = [_op("compute"), _op("compute"), _op("comm.dp", True, beside=2), _op("compute")]
    costed = layout_ops(ops, [2.0, 3.0, 7.0, 1.0])
    assert [s.offset_s for s in costed.segments] == [0.0, 2.0, 0.0, 7.0]
