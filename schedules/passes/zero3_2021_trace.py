"""What DeepSpeed 2021's ZeRO-3 does at each submodule of a layer's pass: which weights it
gathers (itself, or ahead as a prefetch), whether it synchronizes the device, which gradient
tensors it reduce-scatters. The ops that follow are :mod:`schedules.passes.zero3_2021`'s.

The code is ``deepspeed/runtime/zero/stage3.py`` and ``partition_parameters.py`` at v0.5.0
(2021-08-17; the same logic from v0.3.13, 2021-03-16, to v0.5.10; v0.6.0 replaced it):

- ``pre_sub_module_forward_function`` / ``pre_sub_module_backward_function``:
  ``fetch_sub_module`` then ``prefetch_next_sub_modules`` then ``increment_step``.
- ``fetch_sub_module``: parameters NOT_AVAILABLE are gathered now (``_all_gather(...,
  async_op=True)``); if any was gathered or is INFLIGHT, ``_synchronize_communication`` waits
  every in-flight handle, ``comm_stream.synchronize()`` and ``torch.cuda.synchronize()``, and
  marks every in-flight parameter AVAILABLE. Then, for every parameter of the submodule (those
  below the persistence threshold too), ``print_rank_0(f"... norm={param.norm()}", force=False)``:
  the f-string is built whatever ``force`` says, so each parameter's norm is computed and formatted
  (``Tensor.__format__`` of a 0-d tensor calls ``.item()``: a device-to-host copy) — from
  ZeRO-Infinity (#976, 2021-04-18: v0.3.15) until DeepSpeed PR #1188 ("Removing the norm
  computation in debug printing", merged 2021-10-31, first released in v0.6.0).
- ``prefetch_next_sub_modules``: only "if there is no current prefetching in flight" and the
  gathered parameters alive are below ``max_available_parameters_in_numel``
  (``stage3_max_live_parameters``): ``get_params_to_prefetch`` walks the trace from the current
  submodule and takes NOT_AVAILABLE parameters until their elements reach ``numel``
  (``stage3_prefetch_bucket_size``), each gathered by its own ``_allgather_param``.
- ``_allgather_param``: ``torch.zeros`` of the whole weight, ``torch.cuda.synchronize()``, a
  Python loop over the ranks, one list-API ``all_gather`` per parameter.
- ``release_sub_module``: a parameter is freed unless ``_keep_for_later``: the submodule is used
  again within ``stage3_max_reuse_distance`` elements of the trace.
- Gradients: every parameter's hook (``reduce_ready_partitions_and_remove_grads``) puts its
  gradient in the bucket; ``reduce_ipg_grads`` reduce-scatters each parameter of the bucket with
  its own list-API ``reduce_scatter`` (``_reduce_scatter_gradients``), in every micro-batch's
  backward. Stated approximation: each tensor's reduce-scatter is issued at the next submodule's
  backward (the bucket of ``reduce_bucket_size`` = 5e8 elements is flushed when a gradient that
  does not fit arrives; a layer of a 175B model fills it at every weight).

Stated approximations: the layer's parameters are the weight modules of
:func:`schedules.passes.zero3_fetch.layer_modules` (a fused QKV as Megatron builds it, or query, key
and value apart), each with its bias, the norms counted with the weight they feed (the first norm
with QKV or the query, the second with the MLP's input projection); the trace is read in steady state (the middle of three consecutive
layers' passes). Units: parameters (elements) on one TP rank.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

from core.vocab import Phase
from schedules.model import ModelSpec
from schedules.passes.zero3_fetch import PERSISTENCE_THRESHOLD, layer_modules
from schedules.plan import ParallelPlan

MAX_TRACE_LAYERS = 64
"""Layers of the trace :func:`pass_events` walks at most (a prefetch bucket spanning more layers
than this is cut at the trace's end)."""


@dataclass(frozen=True)
class Use:
    """One submodule's run in a pass: ``module`` of ``layer`` ("" tag: forward, ".recompute",
    ".backward"), its weight's ``params`` and its parameter tensors ``tensors`` (elements each;
    the weight first), whether ZeRO-3 gathers its weight (at least the persistence threshold)."""

    module: str
    layer: int
    tag: str
    params: float
    tensors: tuple[float, ...]
    gathered: bool


@dataclass(frozen=True)
class UseEvents:
    """What the hooks around one use do.

    Attributes:
        use: the submodule's run.
        sync: the fetch synchronizes the device (it gathered the weight, or the weight was in flight).
        own: weights (elements) the fetch gathers itself before the submodule runs.
        prefetched: weights gathered ahead after the fetch, in order (each after a device
            synchronize; the last runs beside the submodule's compute).
        reduced: gradient tensors (elements) reduce-scattered while the submodule runs.
    """

    use: Use
    sync: bool
    own: tuple[float, ...]
    prefetched: tuple[float, ...]
    reduced: tuple[float, ...]


def _tensors(model: ModelSpec, tp: int) -> dict[str, tuple[float, ...]]:
    """Each weight module's parameter tensors on one TP rank: the weight, its bias (column-parallel
    biases split over TP, row-parallel ones whole), the norm that feeds it (counted with the
    first module it feeds)."""
    h, f, kv = model.hidden_size, model.ffn, model.kv_size
    biases = {"qkv": (h + 2 * kv) / tp, "q": h / tp, "k": kv / tp, "v": kv / tp, "proj": h,
              "fc1": model.ffn_inputs * f / tp, "fc2": h}
    norm = (float(h),) * (2 if model.norm == "layernorm" else 1)
    return {name: (params, *((float(biases[name]),) if model.bias else ()),
                   *(norm if name in ("qkv", "q", "fc1") else ()))
            for name, params in layer_modules(model, tp)}


def layer_uses(model: ModelSpec, plan: ParallelPlan, phase: str, layer: int) -> list[Use]:
    """The submodules one layer's pass of ``phase`` runs, in order: forward; or, in a backward,
    the recomputed forward (full recomputation) and the modules in reverse."""
    tensors = _tensors(model, plan.tp)
    modules = [(name, params) for name, params in layer_modules(model, plan.tp)]

    def use(name: str, params: float, tag: str) -> Use:
        return Use(name, layer, tag, params, tensors[name], params * plan.tp >= PERSISTENCE_THRESHOLD)
    if phase == Phase.F:
        return [use(n, p, "") for n, p in modules]
    backward = [use(n, p, ".backward") for n, p in reversed(modules)]
    if plan.recompute == "full":
        return [use(n, p, ".recompute") for n, p in modules] + backward
    return backward


def _kept(trace: list[Use], i: int, reuse_distance: float) -> bool:
    """``_keep_for_later``: is trace[i]'s submodule used again within ``reuse_distance`` elements?"""
    traversed = 0.0
    for later in trace[i + 1:]:
        if (later.module, later.layer) == (trace[i].module, trace[i].layer):
            return traversed < reuse_distance
        traversed += later.params
    return False


class _Walker:
    """The coordinator's state over a trace (statuses, live elements, prefetch in flight)."""

    def __init__(self, trace: list[Use], plan: ParallelPlan) -> None:
        self.trace, self.plan = trace, plan
        self.status: dict[tuple[str, int], str] = {}  # "inflight" | "available"; absent: not available
        self.live = 0.0
        self.in_flight = False

    def step(self, i: int, reduced: tuple[float, ...]) -> UseEvents:
        use, key = self.trace[i], (self.trace[i].module, self.trace[i].layer)
        own: tuple[float, ...] = ()
        state = self.status.get(key) if use.gathered else "available"
        if state is None:
            own = (use.params,)
            self.live += use.params
        sync = state != "available"
        if sync:
            self.status = {k: "available" for k in self.status}
            self.status[key] = "available"
            self.in_flight = False
        prefetched = self._prefetch(i)
        if use.gathered and not _kept(self.trace, i, self.plan.zero3_max_reuse_distance):
            del self.status[key]
            self.live -= use.params
        return UseEvents(use, sync, own, prefetched, reduced)

    def _prefetch(self, i: int) -> tuple[float, ...]:
        if self.in_flight or self.live >= self.plan.zero3_max_live_params:
            return ()
        taken: list[float] = []
        for later in self.trace[i:]:
            key = (later.module, later.layer)
            if later.gathered and key not in self.status:
                self.status[key] = "inflight"
                self.live += later.params
                taken.append(later.params)
                if sum(taken) >= self.plan.zero3_prefetch_bucket_params:
                    break
        self.in_flight = bool(taken)
        return tuple(taken)


@lru_cache(maxsize=64)
def pass_events(model: ModelSpec, plan: ParallelPlan, phase: str) -> tuple[UseEvents, ...]:
    """The events of one layer's pass of ``phase`` ("F" or "B"), in order, read in steady state:
    layer 1 of a trace of consecutive layers' passes long enough that a prefetch from layer 1
    never reaches its end (:data:`MAX_TRACE_LAYERS` at most)."""
    gathered = sum(p for _, p in layer_modules(model, plan.tp) if p * plan.tp >= PERSISTENCE_THRESHOLD)
    ahead = math.ceil(plan.zero3_prefetch_bucket_params / gathered) if gathered else 0
    trace = [u for layer in range(min(MAX_TRACE_LAYERS, 3 + ahead)) for u in layer_uses(model, plan, phase, layer)]
    walker = _Walker(trace, plan)
    events: list[UseEvents] = []
    pending: tuple[float, ...] = ()
    for i, use in enumerate(trace):
        events.append(walker.step(i, pending))
        pending = use.tensors if use.tag == ".backward" else ()
    return tuple(e for e in events if e.use.layer == 1)
