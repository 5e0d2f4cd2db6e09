"""What event names mean: NCCL kernels, collective calls, compute op classes, dtype sizes, phase
annotations.

Collective kinds use the Timeline vocabulary (all_reduce, all_gather, reduce_scatter,
all_to_all, broadcast, send, recv; anything else is "other"). Sources:
- NCCL kernel names: ``ncclKernel_<Coll>_<Algo>_<Proto>_<Op>_<type>`` (NCCL <= 2.18) and
  ``ncclDevKernel_<Coll>_<Algo>_<Proto>`` (>= 2.19); HTA classifies ``^nccl.*Kernel`` as comm.
- CPU-side names: ``c10d::allreduce_``, ``nccl:all_to_all``, ``gloo:all_reduce``, and the
  ``Collective name`` arg (``allreduce``, ``_allgather_base``, ``alltoall_base`` ...).
"""

from __future__ import annotations

import re

NCCL_KERNEL_RE = re.compile(r"^nccl.*Kernel")
_NCCL_COLL_RE = re.compile(r"^nccl(?:Dev)?Kernel_([A-Za-z]+)")
MEMORY_KERNEL_RE = re.compile(r"^(Memcpy|Memset|dma)")
_GEMM_RE = re.compile(r"gemm|matmul|linear|mm(?:backward|_|\b)|cutlass|cublas|xmma|wgmma|"
                      r"(?:ampere|volta|turing|hopper|sm\d\d)_|[sh]884|1688|16816", re.I)
_ATTN_RE = re.compile(r"attention|attn|flash|fmha|sdpa|softmax", re.I)
CALL_PREFIXES = ("c10d::", "_c10d_functional::", "c10d_functional::", "nccl:", "gloo:")
COMM_RANGE_PREFIXES = (*CALL_PREFIXES, "record_param_comms")

_KERNEL_KIND = {
    "AllReduce": "all_reduce", "AllGather": "all_gather", "ReduceScatter": "reduce_scatter",
    "Broadcast": "broadcast", "Send": "send", "Recv": "recv",
}
# Normalised CPU-side collective names (see normalise_collective) -> Timeline kind.
_CALL_KIND = {
    "allreduce": "all_reduce", "allgather": "all_gather",
    "reducescatter": "reduce_scatter", "reducescattertensor": "reduce_scatter",
    "alltoall": "all_to_all", "alltoallv": "all_to_all", "alltoallsingle": "all_to_all",
    "broadcast": "broadcast", "send": "send", "recv": "recv", "recvanysource": "recv",
}
NOT_COMM_CALLS = frozenset({"wraptensorautograd"})  # normalised names
_SUFFIXES = ("coalesced", "base", "tensor", "into", "single")

# Bytes per element of the dtype spellings seen in traces ("Input type", "dtype" args).
DTYPE_BYTES = {
    "float": 4, "float32": 4, "c10::float": 4, "double": 8, "float64": 8,
    "half": 2, "float16": 2, "c10::half": 2, "bfloat16": 2, "c10::bfloat16": 2,
    "long": 8, "long int": 8, "int64": 8, "int64_t": 8, "int": 4, "int32": 4, "unsigned int": 4,
    "short": 2, "int16": 2, "signed char": 1, "unsigned char": 1, "char": 1, "int8": 1,
    "uint8": 1, "bool": 1, "byte": 1, "c10::float8_e4m3fn": 1, "c10::float8_e5m2": 1,
    "float8_e4m3fn": 1, "float8_e5m2": 1, "complexfloat": 8, "complexdouble": 16,
}

_FWD_RE = re.compile(r"forward", re.IGNORECASE)
_BWD_RE = re.compile(r"backward|^autograd::engine::evaluate_function", re.IGNORECASE)
_OPT_RE = re.compile(r"^Optimizer\.step#|^## optimizer ##$|^trainsim:optimizer$")


def is_nccl_kernel(name: str) -> bool:
    """A NCCL communication kernel (HTA's rule ``^nccl.*Kernel``)."""
    return NCCL_KERNEL_RE.match(name) is not None


def is_memory_kernel(name: str) -> bool:
    """A memcpy/memset/DMA activity by name (HTA's rule)."""
    return MEMORY_KERNEL_RE.match(name) is not None


def is_comm_range_name(name: str) -> bool:
    """A CPU range of a collective call (c10d / functional op, record_param_comms, nccl:/gloo:).

    Helpers in those namespaces that do not communicate (``_wrap_tensor_autograd``) are not.
    """
    return name.startswith(COMM_RANGE_PREFIXES) and normalise_collective(name) not in NOT_COMM_CALLS


def kernel_collective(name: str) -> str:
    """The collective in a NCCL kernel name ("AllReduce", "SendRecv", ...), "" if none."""
    m = _NCCL_COLL_RE.match(name)
    return m.group(1) if m else ""


def kernel_kind(coll: str) -> str | None:
    """Timeline kind of a NCCL kernel collective; None when the CPU side must decide (SendRecv)."""
    return _KERNEL_KIND.get(coll)


def normalise_collective(name: str) -> str:
    """``c10d::_reduce_scatter_base_``, ``nccl:all_gather``, ``_allgather_base`` -> a bare key.

    Prefixes, underscores and the suffixes coalesced/base/tensor/into/single are removed, so
    ``all_gather_into_tensor_coalesced`` and ``_allgather_base`` both give ``allgather``.
    """
    for prefix in CALL_PREFIXES:
        if name.startswith(prefix):
            name = name[len(prefix):]
            break
    key = name.lower().replace("_", "")
    changed = True
    while changed:
        changed = False
        for suffix in _SUFFIXES:
            if key.endswith(suffix) and key != suffix:
                key, changed = key[: -len(suffix)], True
    return key


def call_kind(name: str) -> str | None:
    """Timeline kind of a CPU-side collective name, or None if it is not a known collective."""
    return _CALL_KIND.get(normalise_collective(name))


def dtype_bytes(dtype: object) -> int:
    """Bytes per element of a dtype spelling; 0 when unknown."""
    return DTYPE_BYTES.get(str(dtype).strip().lower(), 0)


def phase_of_range(name: str) -> str | None:
    """Which phase a torch/user range name implies: "optimizer", "bwd", "fwd" or None.

    ``Optimizer.step#...``, ``## optimizer ##``, ``trainsim:optimizer`` -> optimizer;
    ``... backward ...`` or ``autograd::engine::evaluate_function: ...`` -> bwd;
    ``... forward ...`` (e.g. ``DistributedDataParallel.forward``, ``## forward ##``) -> fwd.
    """
    if _OPT_RE.search(name):
        return "optimizer"
    if _BWD_RE.search(name):
        return "bwd"
    if _FWD_RE.search(name):
        return "fwd"
    return None


def op_class(name: str) -> str:
    """Compute op class of a kernel or CPU op name: gemm (cuBLAS/CUTLASS kernels, matmul ops and
    their autograd nodes), attention (flash / fused / SDPA kernels and softmax) or elementwise."""
    if _ATTN_RE.search(name):
        return "attention"
    if _GEMM_RE.search(name):
        return "gemm"
    return "elementwise"
