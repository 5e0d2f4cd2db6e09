"""DeepSpeed ZeRO-3's parameter fetches, module by module (``zero3_unit="module"``).

DeepSpeed's ``PartitionedParameterCoordinator`` (deepspeed/runtime/zero/partitioned_param_coordinator.py
@v0.6.2) runs, before each submodule, ``fetch_sub_module``; after it, ``release_sub_module``:

- fetch: all-gather the submodule's parameters not yet available and wait for them; then, once the
  trace of the first step is complete, prefetch the next parameters of that trace: at most
  ``min(stage3_max_live_parameters - n_available, stage3_prefetch_bucket_size)`` elements, where
  ``n_available`` counts the gathered parameters alive (this submodule's included). The loop adds
  whole parameters while the count is below the limit, so one parameter goes whenever the limit
  is positive, none when this submodule alone (with what else is alive) reaches the live limit.
- release: free the submodule's parameters unless one of them is used again within
  ``stage3_max_reuse_distance`` elements of the trace (``__params_to_release``: walk the next
  submodules, adding their elements, while the running total has not passed the distance).

With full recomputation a layer's backward runs its forward again (each submodule fetched) and
then the backward hooks fetch the submodules in reverse; a parameter released after the
recomputation is gathered a third time. Parameters below ``stage3_param_persistence_threshold``
(1e5 elements) stay whole and are never gathered: ``persistent_parameters`` marks ``ds_numel <
persistence_threshold`` (stage3.py @v0.6.2 l.1053).

A fetch of two or more partitioned parameters (a weight and a bias of at least 1e5 elements:
fc1's with an FFN width of 1e5 or more) takes ``all_gather_coalesced``'s general branch
(partition_parameters.py @v0.6.2 l.862-890): one all-gather into a flat buffer laid out rank by
rank, then ``AllGatherCoalescedHandle.wait`` (l.515-545), on the all-gather stream the compute
stream then waits for, rebuilds each parameter with ``torch.cat`` of its world-size pieces: one
device copy of the gathered parameters (``ModuleFetch.coalesced``). A fetch of one parameter
gathers into the parameter's own buffer (l.844-861), no copy.

Defaults (deepspeed/runtime/zero/constants.py @v0.6.2): live 1e9, reuse 1e9, prefetch bucket 5e7,
persistence 1e5 elements. Units: parameters (elements) on one TP rank.
"""

from __future__ import annotations

from dataclasses import dataclass

from core.taskgraph import Op
from core.vocab import Kind, Lane, OpClass, Phase
from schedules.model import ModelSpec
from schedules.plan import ParallelPlan

PERSISTENCE_THRESHOLD = 100_000
"""DeepSpeed ZeRO-3 keeps parameters of fewer elements than this whole on every rank
(``stage3_param_persistence_threshold``, default 1e5): norms and biases are never gathered."""


def layer_modules(model: ModelSpec, tp: int) -> list[tuple[str, float]]:
    """A dense layer's weight matrices as DeepSpeed ZeRO-3 fetches them, (name, parameters on one
    TP rank) each: the QKV projection (or the query, key and value projections apart:
    ``model.fused_qkv``), the output and MLP projections."""
    h, f = model.hidden_size, model.ffn
    up = model.ffn_inputs
    attention = [("qkv", h * (h + 2 * model.kv_size) / tp)] if model.fused_qkv else [
        ("q", h * h / tp), ("k", h * model.kv_size / tp), ("v", h * model.kv_size / tp)]
    return [*attention, ("proj", h * h / tp), ("fc1", up * h * f / tp), ("fc2", h * f / tp)]


def layer_biases(model: ModelSpec, tp: int) -> dict[str, float]:
    """Elements of each weight matrix's bias on one TP rank (:func:`layer_modules`' names; none
    without ``model.bias``): column-parallel QKV and fc1 biases are split over TP, the row-parallel
    projections' (proj, fc2) are whole."""
    if not model.bias:
        return {}
    h, f = model.hidden_size, model.ffn
    attention = {"qkv": (h + 2 * model.kv_size) / tp} if model.fused_qkv else {
        "q": h / tp, "k": model.kv_size / tp, "v": model.kv_size / tp}
    return {**attention, "proj": float(h), "fc1": model.ffn_inputs * f / tp, "fc2": float(h)}


def coalesced_fetch(model: ModelSpec, tp: int, module: str) -> bool:
    """Does ``module``'s fetch gather its bias with its weight (the bias is not persistent)?"""
    return layer_biases(model, tp).get(module, 0.0) >= PERSISTENCE_THRESHOLD


def split_copy(label: str, gathered: float, layer: int) -> tuple[Op, ...]:
    """A coalesced fetch's ``torch.cat`` (module docstring), the last op of its all-gather task
    (the all-gather stream): the ``gathered`` bytes read once and written once. Kind "other": the
    memory timeline does not count it as a message buffer (its output replaces the gathered
    buffer, which the gather's span holds)."""
    return (Op(Lane.DP, Kind.OTHER, f"{label}.split", OpClass.ELEMENTWISE, bytes=2 * gathered, layer=layer),)


@dataclass(frozen=True)
class ModuleFetch:
    """One all-gather of a submodule's weight before it runs.

    Attributes:
        name: the submodule ("qkv", "proj", "fc1", "fc2"), with ".recompute" for the gathers of
            the recomputed forward.
        params: its parameters on one TP rank.
        prefetched: issued by the previous submodule's fetch (it runs under compute) rather than
            by the submodule's own (the compute stream waits for the whole gather).
        coalesced: the submodule's bias is partitioned too, so the fetch takes
            ``all_gather_coalesced``'s flat-buffer branch and its ``torch.cat`` copy (module docstring).
    """

    name: str
    params: float
    prefetched: bool
    coalesced: bool = False


@dataclass(frozen=True)
class _Use:
    module: str
    params: float
    tag: str
    layer: int = 0  # which of the trace's layers (its parameters are its own)


def _pass_trace(model: ModelSpec, plan: ParallelPlan, phase: str) -> list[_Use]:
    """The submodules one layer's pass runs, in order (forward; or recompute + backward)."""
    modules = [(n, p) for n, p in layer_modules(model, plan.tp) if p * plan.tp >= PERSISTENCE_THRESHOLD]
    forward = [_Use(n, p, "") for n, p in modules]
    if phase == Phase.F:
        return forward
    backward = [_Use(n, p, ".backward") for n, p in reversed(modules)]
    if plan.recompute == "full":
        return [_Use(u.module, u.params, ".recompute") for u in forward] + backward
    return backward


def _kept(trace: list[_Use], i: int, reuse_distance: float) -> bool:
    """Does ``release_sub_module`` keep trace[i]'s parameters (used again within the distance)?"""
    traversed = 0.0
    for use in trace[i + 1:]:
        if traversed > reuse_distance:
            return False
        if (use.module, use.layer) == (trace[i].module, trace[i].layer):
            return True
        traversed += use.params
    return False


def module_fetches(model: ModelSpec, plan: ParallelPlan, phase: str) -> tuple[ModuleFetch, ...]:
    """The all-gathers of one layer's pass of ``phase`` ("F" or "B"), in order (module docstring).

    Every layer is alike, so the pass is read as the second of two consecutive layers' passes
    (the first one's last fetches decide what this one's first fetch finds prefetched).
    """
    one = _pass_trace(model, plan, phase)
    trace = one + [_Use(u.module, u.params, u.tag, layer=1) for u in one]
    n = len(one)
    live = plan.zero3_max_live_params
    needs = [True] * len(trace)  # a use needs a gather unless its parameters were kept alive
    kept_alive: dict[tuple[str, int], float] = {}  # kept parameters, alive until their next use
    prefetched = [False] * len(trace)
    for i, use in enumerate(trace):
        if (use.module, use.layer) in kept_alive:
            needs[i] = False
            del kept_alive[(use.module, use.layer)]
        available = use.params + sum(kept_alive.values())
        limit = min(live - available, plan.zero3_prefetch_bucket_params)
        taken = 0.0
        for j in range(i + 1, len(trace)):
            if taken >= limit:
                break
            prefetched[j] = True
            taken += trace[j].params
        if _kept(trace, i, plan.zero3_max_reuse_distance):
            kept_alive[(use.module, use.layer)] = use.params
    return tuple(ModuleFetch(trace[i].module + trace[i].tag.replace(".backward", ""), trace[i].params,
                             prefetched[i], coalesced_fetch(model, plan.tp, trace[i].module))
                 for i in range(n, 2 * n) if needs[i])

