"""How each runtime runs a matmul that a sequence-parallel TP collective overlaps
(``tp_comm_overlap``): Transformer Engine's userbuffers for the megatron runtime, torch's async
TP (symmetric-memory fused ops) for the torch runtime; :mod:`schedules.layer_comm` cuts the
overlapped pairs by these rules.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Literal


@dataclass(frozen=True, kw_only=True)
class TpOverlapGemm:
    """How a stack runs one matmul that a sequence-parallel TP collective overlaps
    (``tp_comm_overlap``): as ``chunks`` GEMM kernels (0: the TP size), each a 1/chunks slice of
    the matmul's ``axis`` ("m": token rows, "n": output columns), issued round-robin on
    ``streams`` CUDA streams; ``chunks`` = 1 with ``pipelined`` False: the matmul runs whole and
    the collective beside it is not chunked (a "bulk" overlap). ``one_producer``: the stack
    overlaps a reduce-scatter only when one matmul produces its input (a sum of several, as the
    input gradient of separate q, k, v projections is, runs the collective after them).
    ``own_chunk``: one chunk (the rank's own shard) needs no communication; False: every chunk
    is communicated after its GEMM, the last one after the whole matmul."""

    chunks: int
    axis: Literal["m", "n"] = "m"
    streams: int = 1
    pipelined: bool = True
    one_producer: bool = False
    own_chunk: bool = True

    def resolved(self, tp: int) -> int:
        """The chunk count for a TP group of ``tp`` ranks."""
        return tp if self.chunks == 0 else self.chunks


TP_OVERLAP_ROLES = ("ag_fprop", "rs_fprop", "ag_dgrad", "rs_dgrad")
"""The overlapped (collective, matmul) pairs of a sequence-parallel block: the all-gathered input
of qkv/fc1 forward, the reduce-scattered output of proj/fc2 forward, the all-gathered output
gradient of proj/fc2 backward (input gradient) and the reduce-scattered input gradient of qkv/fc1."""

TP_OVERLAP_GEMMS: Mapping[str, Mapping[str, TpOverlapGemm]] = MappingProxyType({
    # Transformer Engine userbuffers (Megatron-Core r0.8.0 _initialize_tp_communicators passes
    # ub_cfgs={} unless --tp-comm-overlap-cfg, so TE's defaults hold): initialize_ub in
    # transformer_engine/pytorch/module/base.py@e79d915a (v1.9; the same defaults v1.7-v1.11)
    # sets "ring_exchange" for qkv_fprop, fc1_fprop, proj_dgrad, fc2_dgrad, "pipeline" with
    # num_splits=4 for proj_fprop, fc2_fprop and "bulk" for qkv_dgrad, fc1_dgrad (and wgrad).
    # csrc/comm_gemm_overlap.h@e79d915a: split_overlap_ag_p2p runs tp GEMMs, one per token chunk
    # received around the ring; split_overlap_rs (gemm_overlap false) runs num_splits GEMMs, each
    # on 1/num_splits of the weight's output rows (strided reduce-scatter of each, the last one
    # after the last GEMM: every chunk is communicated); both issue
    # the chunk GEMMs round-robin on _stream_compute (_NUM_MAX_UB_STREAMS = 3 streams). Bulk
    # overlap runs the whole GEMM beside the collective (it hides under the wgrad GEMM).
    "megatron": MappingProxyType({
        "ag_fprop": TpOverlapGemm(chunks=0, axis="m", streams=3),
        "rs_fprop": TpOverlapGemm(chunks=4, axis="n", streams=3, own_chunk=False),
        "ag_dgrad": TpOverlapGemm(chunks=0, axis="m", streams=3),
        "rs_dgrad": TpOverlapGemm(chunks=1, pipelined=False),
    }),
    # torch async TP (torchtitan enable_async_tensor_parallel: inductor's micro_pipeline_tp
    # rewrites all_gather->mm and mm->reduce_scatter into symm_mem ops);
    # torch/distributed/_symmetric_memory/__init__.py (v2.5 through 006b161f; the torchtitan
    # 2025-06 benchmark ran torch 38410cf9 in between): fused_all_gather_matmul consumes the
    # gathered input in group_size shards, one mm per shard and weight
    # (_pipelined_all_gather_and_consume); fused_matmul_reduce_scatter produces group_size row
    # chunks, one mm each (_pipelined_produce_and_all2all); both alternate the chunks between
    # the current and a backend stream ("allows for computation/computation overlapping,
    # greatly reducing quantization inefficiency"). The fusion pass
    # (torch/_inductor/fx_passes/micro_pipeline_tp.py) groups every mm whose lhs is the gathered
    # tensor into one fused_all_gather_matmul (fuse_all_gather_matmul, _find_consumer_matmuls),
    # and fuses a reduce_scatter only when an mm (or reshape-mm-reshape) produces its input
    # (_find_producer_matmul): the input gradient of separate q/k/v or w1/w3 is their sum, whose
    # reduce-scatter is not fused.
    "torch": MappingProxyType({
        "ag_fprop": TpOverlapGemm(chunks=0, axis="m", streams=2),
        "rs_fprop": TpOverlapGemm(chunks=0, axis="m", streams=2),
        "ag_dgrad": TpOverlapGemm(chunks=0, axis="m", streams=2),
        "rs_dgrad": TpOverlapGemm(chunks=0, axis="m", streams=2, one_producer=True),
    }),
})
"""Per runtime (``ParallelPlan.framework``) and overlapped pair, how its matmul is decomposed."""
