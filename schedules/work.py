"""What a pipeline action costs, as ops: from a model (the simulator) or from unit times (the
schedule playground). The task-graph builder asks a ``Work`` for the ops of each block."""

from __future__ import annotations

import itertools
from functools import cached_property, lru_cache
from typing import Protocol

from core.groups import PP, TP
from core.taskgraph import Op
from core.vocab import Kind, Lane, OpClass, Phase, phase_kind
from schedules.actions import Action
from schedules.fp8 import FP8, FPROP_ROLES, amax_sync_op, quantize_layer
from schedules.layer_kinds import layer_kind, stored_layer_bytes
from schedules.layer_ops import (
    LayerShape,
    backward_ops,
    backward_weight_ops,
    forward_ops,
)
from schedules.memory import FP32_BYTES
from schedules.microbatch_syncs import loss_report_ops, timer_sync_ops
from schedules.model import ModelSpec
from schedules.plan import ParallelPlan
from schedules.stage_ops import (
    activation_message_bytes,
    embedding_ops,
    full_message_bytes,
    head_ops,
    optimizer_ops,
)
from schedules.stages import StageInfo

GRAD_ACCUMULATE_TOUCHES = 3  # grad += new: read both, write one (passes over the gradient bytes)


class Work(Protocol):
    """Source of the ops of each block, pipeline send and optimizer step."""

    steps_optimizer: bool
    """Does the step end with an optimizer update (and the synchronisations before it,
    :mod:`schedules.step_end_syncs`)? False for the schedule playground's unit times."""

    def block_ops(self, stage: StageInfo, phase: str, layers: tuple[int, ...], first: bool,
                  last: bool) -> tuple[Op, ...]: ...

    def send_op(self, action: Action, name: str) -> Op:
        """The op of pipeline message ``name`` sending ``action``'s output: the same for every
        stage (one message size per model and plan; the builder makes it once per label)."""
        ...

    def recv_gather_ops(self) -> tuple[Op, ...]:
        """What a received pipeline message costs before its action can use it: Megatron-LM's
        all-gather of the 1/tp pieces over TP (``plan.scatter_gather_p2p``); the same for every
        message."""
        ...

    def optimizer_ops(self, params_local: float, buffer_params: float) -> tuple[Op, ...]:
        """The optimizer step over the rank's ``params_local`` (sharded) parameters, with the
        gradient buffer of its ``buffer_params`` (unsharded) local parameters."""
        ...

    def grad_accumulate_ops(self, stage: StageInfo, phase: str, layers: tuple[int, ...], first: bool,
                            last: bool, stored: bool) -> tuple[Op, ...]: ...


class ModelWork:
    """Ops from a transformer model under a parallel plan (FLOPs and bytes; priced later)."""

    steps_optimizer = True

    def __init__(self, model: ModelSpec, plan: ParallelPlan, split_backward: bool) -> None:
        self.model, self.plan, self.split = model, plan, split_backward
        self.kind = layer_kind(model)
        self._shapes: dict[int, LayerShape] = {}
        self.block_ops = lru_cache(maxsize=None)(self._block_ops)  # type: ignore[method-assign]
        self._layer = lru_cache(maxsize=None)(self._layer_ops)

    def _block_ops(self, stage: StageInfo, phase: str, layers: tuple[int, ...], first: bool,
                   last: bool) -> tuple[Op, ...]:
        """Ops of one block of a pass; the embedding/head sit at the pass's two ends."""
        m, p = self.model, self.plan
        body = tuple(itertools.chain.from_iterable(self._layer(layer, phase) for layer in layers))
        if phase == Phase.F:
            head = embedding_ops(m, p, backward=False) if stage.first and first else ()
            tail = head_ops(m, p, backward=False) if stage.last and last else ()
        elif phase == Phase.B:
            head = head_ops(m, p, backward=True) if stage.last and first else ()
            tail = embedding_ops(m, p, backward=True) if stage.first and last else ()
        else:
            head = tail = ()
        sync = amax_sync_op(p, body[0].kind, self._quantized_gemms(stage), phase == Phase.B) if last and body \
            and phase != Phase.W else ()
        kind = phase_kind(phase, self.split)
        timer = timer_sync_ops(p, kind, layers[0]) if first and layers and phase != Phase.W else ()
        loss = loss_report_ops(p, kind) if phase == Phase.F and stage.last and last else ()
        return timer + head + body + tail + loss + sync

    def _quantized_gemms(self, stage: StageInfo) -> int:
        """FP8 forward GEMMs of ``stage``'s blocks (what a delayed recipe's amax sync covers)."""
        return sum(op.dtype == FP8 and op.gemm_role in FPROP_ROLES
                   for layer in stage.layers for op in self._layer(layer, "F"))

    def layer_shape(self, layer: int) -> LayerShape:
        """Block ``layer``'s shape: a dense model's blocks are alike; an MoE model's differ
        (dense or MoE feed-forward, its attention geometry: :mod:`schedules.attention_ops`)."""
        key = 0 if self.kind.alike else layer
        if key not in self._shapes:
            self._shapes[key] = self.kind.shape(self.model, self.plan, layer)
        return self._shapes[key]

    def _layer_ops(self, layer: int, phase: str) -> tuple[Op, ...]:
        """Block ``layer``'s ops of a pass, its quantized GEMMs in FP8 under an FP8 plan."""
        return quantize_layer(self.plan, self._unquantized_ops(layer, phase), layer, self.model.num_layers)

    def _unquantized_ops(self, layer: int, phase: str) -> tuple[Op, ...]:
        shape = self.layer_shape(layer)
        if phase == Phase.F:
            return self._torch_moe(forward_ops(self.plan, shape, layer)) + self.layer_offload_ops(layer, phase)
        if phase == Phase.B:
            return self.layer_offload_ops(layer, phase) + self._torch_moe(
                backward_ops(self.plan, shape, layer, split=self.split))
        return backward_weight_ops(self.plan, shape, layer)

    def _torch_moe(self, ops: tuple[Op, ...]) -> tuple[Op, ...]:
        """A block's ops as the runtime issues them (:meth:`schedules.layer_kinds.MoELayers.runtime_calls`)."""
        return self.kind.runtime_calls(self.model, self.plan, ops)

    def layer_offload_ops(self, layer: int, phase: str) -> tuple[Op, ...]:
        """DeepSpeed's CPU checkpointing (``activation_offload_unit="layer"``): the copy of block
        ``layer``'s stored activations to the host at the end of its forward, and back at the
        start of its backward, on the compute stream: ``CheckpointFunction`` copies with a
        blocking ``.to`` in its forward and backward (deepspeed/runtime/activation_checkpointing/
        checkpointing.py @v0.6.2, ``copy_to_device`` / ``move_to_device``), so the layer's compute
        waits for them. Priced at the host link's device-to-host / host-to-device bandwidth."""
        p = self.plan
        if p.activation_copies != "layer" or phase not in (Phase.F, Phase.B):
            return ()
        size = stored_layer_bytes(self.model, p, layer)
        name, op_class = (("ckpt_to_host", OpClass.PCIE_TO_HOST) if phase == Phase.F
                          else ("ckpt_to_device", OpClass.PCIE_TO_DEVICE))
        return (Op(Lane.COMPUTE, phase_kind(phase, self.split), f"L{layer}.{name}", op_class, bytes=size, layer=layer),)

    def send_op(self, action: Action, name: str) -> Op:
        """A pipeline send of one micro-batch's activations (F) or their gradients (B)."""
        return Op(Lane.PP, Kind.SEND, name, OpClass.P2P, bytes=self.message_bytes, dim=PP)

    def recv_gather_ops(self) -> tuple[Op, ...]:
        """The all-gather over TP of a whole pipeline message (:func:`schedules.stage_ops.full_message_bytes`),
        one tuple shared by every receive (prices are cached by it)."""
        return self._recv_gather

    @cached_property
    def _recv_gather(self) -> tuple[Op, ...]:
        return (Op(Lane.TP, Kind.ALL_GATHER, "p2p.gather", OpClass.ALL_GATHER,
                   bytes=full_message_bytes(self.model, self.plan), dim=TP),)

    @cached_property
    def message_bytes(self) -> float:
        """Bytes of one pipeline message (:func:`schedules.stage_ops.activation_message_bytes`)."""
        return activation_message_bytes(self.model, self.plan)

    def optimizer_ops(self, params_local: float, buffer_params: float) -> tuple[Op, ...]:
        """Adam over this rank's (sharded) parameters, and the zeroing of its gradient buffer."""
        return optimizer_ops(self.plan, params_local, buffer_params)

    def grad_accumulate_ops(self, stage: StageInfo, phase: str, layers: tuple[int, ...], first: bool,
                            last: bool, stored: bool) -> tuple[Op, ...]:
        """Adding one micro-batch's weight gradients of a block into the ones the step keeps
        (``stored``: earlier micro-batches of the step produced this block's gradients), as
        ``plan.grad_accumulation_kind`` says (op class "elementwise", bytes = passes over the
        block's local gradients):

        - "fused": nothing (Megatron-LM's ``gradient_accumulation_fusion``: the weight-gradient
          GEMM writes ``main_grad`` with beta = 1);
        - "autograd": eager autograd's ``AccumulateGrad``, ``grad += new`` in the compute dtype,
          read both and write one (3 passes), only when ``stored``;
        - "fp32-copy": DeepSpeed's ``BF16_Optimizer.update_hp_grads`` after every backward, the
          first micro-batch's too (its fp32 buffer is zeroed at the step's end,
          ``clear_hp_grads``): per gradient ``lp.grad.to(fp32)`` (read 2, write 4 bytes) then
          ``hp_grad.add_`` (read 4 + 4, write 4), bf16_optimizer.py @v0.6.5 l.390-407.

        The layers' gradients come from W when the schedule splits backward, else from B; the
        embedding's and head's from B, in the blocks that run them."""
        if not self.plan.accumulates_gradients(stored):
            return ()
        grad_phase = "W" if self.split else "B"
        params = len(layers) * stage.layer_params_local if phase == grad_phase else 0.0
        if phase == Phase.B:
            params += (stage.head_params_local if stage.last and first else 0.0) + (
                stage.embedding_params_local if stage.first and last else 0.0)
        if params <= 0:
            return ()
        e = self.plan.element_bytes
        touches = (e + FP32_BYTES + GRAD_ACCUMULATE_TOUCHES * FP32_BYTES  # the cast, then the fp32 add
                   if self.plan.grad_accumulation_kind == "fp32-copy" else GRAD_ACCUMULATE_TOUCHES * e)
        name = f"L{layers[0]}.grad_accumulate" if len(layers) == 1 else "grad_accumulate"
        return (Op(Lane.COMPUTE, phase_kind(phase, self.split), name,
                   OpClass.ELEMENTWISE, bytes=touches * params,
                   layer=layers[0] if len(layers) == 1 else -1),)


@lru_cache(maxsize=4)
def model_work(model: ModelSpec, plan: ParallelPlan, split_backward: bool) -> ModelWork:
    """The :class:`ModelWork` of ``model`` under ``plan``, shared by the task graphs a process
    builds for them (its ops are pure functions of the three, and its caches of blocks' and
    layers' ops were about half of building a small graph); the last few kept."""
    return ModelWork(model, plan, split_backward)


class UnitWork:
    """Fixed times per pipeline rank's share of the model (the schedule playground).

    ``forward_s``, ``backward_s`` (full backward) and ``backward_weight_s`` (its weight-gradient
    part, used when the schedule splits backward into B and W) are per pipeline rank; with vpp
    chunks each chunk takes 1/vpp of them. Sends take ``p2p_s``; there is no optimizer step.
    """

    steps_optimizer = False

    def __init__(self, forward_s: float, backward_s: float, backward_weight_s: float, vpp: int,
                 split_backward: bool, p2p_s: float = 0.0) -> None:
        b_input = backward_s - backward_weight_s if split_backward else backward_s
        self.ops = {
            "F": (Op(Lane.COMPUTE, Kind.FWD, "F", OpClass.FIXED, duration_s=forward_s / vpp),),
            "B": (Op(Lane.COMPUTE, phase_kind(Phase.B, split_backward), "B", OpClass.FIXED, duration_s=b_input / vpp),),
            "W": (Op(Lane.COMPUTE, Kind.BWD_WEIGHT, "W", OpClass.FIXED, duration_s=backward_weight_s / vpp),),
        }
        self.p2p_s = p2p_s

    def block_ops(self, stage: StageInfo, phase: str, layers: tuple[int, ...], first: bool,
                  last: bool) -> tuple[Op, ...]:
        """The fixed-time op of this phase."""
        return self.ops[phase]

    def send_op(self, action: Action, name: str) -> Op:
        """A send of fixed duration."""
        return Op(Lane.PP, Kind.SEND, name, OpClass.FIXED, duration_s=self.p2p_s, dim=PP)

    def recv_gather_ops(self) -> tuple[Op, ...]:
        """Unit times include everything."""
        return ()

    def optimizer_ops(self, params_local: float, buffer_params: float) -> tuple[Op, ...]:
        """No optimizer in the playground."""
        return ()

    def grad_accumulate_ops(self, stage: StageInfo, phase: str, layers: tuple[int, ...], first: bool,
                            last: bool, stored: bool) -> tuple[Op, ...]:
        """Unit times include everything."""
        return ()
