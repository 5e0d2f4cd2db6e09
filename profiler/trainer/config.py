"""The trainer's run configuration: model, parallel degrees, schedule and step settings.

Torch-free so that the CLI can validate flags (and print a launch command) without torch.
The pipeline schedule names are the trainsim names; :data:`SCHEDULES` maps each one to the
``torch.distributed.pipelining`` class that runs it and to how its virtual stages are placed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any

from core.errors import (
    build_checked,
    invalid,
    named_under,
    require_choice,
    require_nonnegative_int,
    require_positive_int,
)
from core.settings import is_real
from core.vocab import Offload
from profiler.trainer.moe_config import check_moe
from schedules.model import ModelSpec
from schedules.plan import ParallelPlan, check_plan, stage_layers


@dataclass(frozen=True, kw_only=True)
class ScheduleInfo:
    """How a trainsim schedule name runs in torch.

    Attributes:
        torch_class: class name in ``torch.distributed.pipelining``.
        multi: a multi-stage-per-rank schedule (``PipelineScheduleMulti``).
        style: stage placement, "loop" (rank r holds r, r+pp, ...) or "v" (r and 2pp-1-r).
        vpp: required chunks per rank, or None if any vpp >= 2 works.
        plan_name: the closest :class:`schedules.plan.ParallelPlan` schedule (for validation).
        split_backward: backward is split into input (B) and weight (W) gradient actions.
    """

    torch_class: str
    multi: bool
    style: str = "loop"
    vpp: int | None = None
    plan_name: str = "1f1b"
    split_backward: bool = False


SCHEDULES: dict[str, ScheduleInfo] = {
    "gpipe": ScheduleInfo(torch_class="ScheduleGPipe", multi=False, vpp=1, plan_name="gpipe"),
    "1f1b": ScheduleInfo(torch_class="Schedule1F1B", multi=False, vpp=1, plan_name="1f1b"),
    "interleaved": ScheduleInfo(torch_class="ScheduleInterleaved1F1B", multi=True,
                                plan_name="interleaved"),
    "zb-h1": ScheduleInfo(torch_class="ScheduleInterleavedZeroBubble", multi=True, vpp=1,
                          plan_name="zb-h1", split_backward=True),
    "interleaved-zb": ScheduleInfo(torch_class="ScheduleInterleavedZeroBubble", multi=True,
                                   plan_name="interleaved", split_backward=True),
    "zbv": ScheduleInfo(torch_class="ScheduleZBVZeroBubble", multi=True, style="v", vpp=2,
                        plan_name="dualpipev", split_backward=True),
    "dualpipev": ScheduleInfo(torch_class="ScheduleDualPipeV", multi=True, style="v", vpp=2,
                              plan_name="dualpipev", split_backward=True),
}
DEVICES = ("auto", "cpu", "cuda")
DTYPES = ("auto", "fp32", "bf16")
RECOMPUTE = ("none", "full")
OPTIMIZERS = ("adamw", "sgd")
OFFLOADS = (Offload.NONE, Offload.OPTIMIZER)


@dataclass(frozen=True, kw_only=True)
class TrainConfig:
    """One trainer run.

    Attributes:
        model: the architecture (a :class:`schedules.model.ModelSpec`; its ``seq_len`` is used).
        tp, pp, dp: tensor (+sequence), pipeline and data parallel degrees; world = tp*pp*dp.
        vpp: model chunks (virtual stages) per pipeline rank.
        schedule: a key of :data:`SCHEDULES`.
        zero: 0 replicated DP, 1 optimizer states sharded, 2 + grads (FSDP2 without
            resharding after forward), 3 + params (FSDP2).
        microbatch_size: sequences per micro-batch.
        global_batch: sequences per optimizer step over all DP replicas.
        steps: measured (profiled) steps.
        warmup_steps: steps run before the measured ones (not recorded).
        recompute: activation checkpointing per transformer block: none | full.
        device: auto | cpu | cuda (auto: cuda if available).
        dtype: auto | fp32 | bf16 compute (bf16 autocast; auto: bf16 on CUDA if supported).
        optimizer: adamw (no weight decay) | sgd (plain; its update is proportional to the
            gradient, so tests can see a wrongly scaled gradient, which Adam normalises away).
        lr: learning rate (fixed).
        seed: seeds the weights and the synthetic token stream.
        slow_rank, slow_factor: rank whose forward/backward compute is made ``slow_factor``
            times slower (what-if validation); None for none.
        slow_comm_dim, slow_comm_s: every collective of this mesh dim completes ``slow_comm_s``
            seconds later, as over a link with that much more latency (what-if validation;
            "dp" with ZeRO-2/3, whose FSDP2 all-gathers and reduce-scatters take a custom
            communication hook); None for none.
        fail_rank: debug: this rank raises after its last step (tests failure handling).
        offload: none | optimizer. "optimizer" is FSDP2's ``CPUOffloadPolicy``: the sharded
            parameters, their gradients and the optimizer states live in host memory and the
            optimizer steps on the CPU; parameters are copied to the device before their
            all-gather, gradients to the host after their reduce-scatter. Needs FSDP2, i.e.
            dp >= 2 and zero 2 or 3. On a CPU device the copies are no-ops (already on the host).
        ep: expert-parallel degree (MoE models): the dp ranks split into groups of ``ep`` that
            share each layer's experts out (see :mod:`profiler.trainer.moe_parallel`); divides dp.
    """

    model: ModelSpec
    tp: int = 1
    pp: int = 1
    dp: int = 1
    vpp: int = 1
    schedule: str = "1f1b"
    zero: int = 0
    microbatch_size: int = 1
    global_batch: int = 1
    steps: int = 3
    warmup_steps: int = 0
    recompute: str = "none"
    device: str = "auto"
    dtype: str = "auto"
    optimizer: str = "adamw"
    lr: float = 3e-3
    seed: int = 0
    slow_rank: int | None = None
    slow_factor: float = 1.0
    slow_comm_dim: str | None = None
    slow_comm_s: float = 0.0
    fail_rank: int | None = None
    offload: str = "none"
    ep: int = 1

    def __post_init__(self) -> None:
        for name in ("tp", "pp", "dp", "vpp", "ep", "microbatch_size", "global_batch", "steps"):
            require_positive_int(name, getattr(self, name))
        if isinstance(self.warmup_steps, bool) or not isinstance(self.warmup_steps, int) \
                or self.warmup_steps < 0:
            raise invalid("warmup_steps", self.warmup_steps, "expected an integer >= 0")
        require_choice("schedule", self.schedule, SCHEDULES)
        require_choice("zero", self.zero, (0, 1, 2, 3))
        require_choice("recompute", self.recompute, RECOMPUTE)
        require_choice("device", self.device, DEVICES)
        require_choice("dtype", self.dtype, DTYPES)
        require_choice("optimizer", self.optimizer, OPTIMIZERS)
        self._check_offload()
        _require("lr", self.lr, lambda v: v > 0, "expected a positive float")
        require_nonnegative_int("seed", self.seed)
        self._check_ranks()
        self._check_schedule()
        self._check_model()
        check_moe(self.model, ep=self.ep, dp=self.dp, zero=self.zero, offload=self.offload)

    def _check_offload(self) -> None:
        require_choice("offload", self.offload, OFFLOADS)
        if self.offload != Offload.NONE and (self.dp < 2 or self.zero < 2):
            raise invalid("offload", self.offload, "needs FSDP2 (dp >= 2 and zero 2 or 3), got "
                          f"dp={self.dp} zero={self.zero} (use none, or dp >= 2 with --zero 2/3)")

    def _check_ranks(self) -> None:
        for name in ("slow_rank", "fail_rank"):
            rank = getattr(self, name)
            if rank is not None:
                require_nonnegative_int(name, rank)
            if rank is not None and not rank < self.world_size:
                raise invalid(name, rank, f"expected a rank in 0..{self.world_size - 1}")
        _require("slow_factor", self.slow_factor, lambda v: v >= 1.0, "expected a factor >= 1")
        self._check_slow_comm()

    def _check_slow_comm(self) -> None:
        _require("slow_comm_s", self.slow_comm_s, lambda v: v >= 0, "expected seconds >= 0")
        if self.slow_comm_dim is None:
            return
        if self.slow_comm_dim != "dp" or self.dp < 2 or self.zero < 2:
            raise invalid("slow_comm_dim", self.slow_comm_dim,
                          "expected dp, with dp >= 2 and --zero 2 or 3 (FSDP2 collectives)")
        _require("slow_comm_s", self.slow_comm_s, lambda v: v > 0, "expected seconds > 0")

    def _check_schedule(self) -> None:
        info = SCHEDULES[self.schedule]
        if self.pp == 1 and info.multi:
            raise invalid("schedule", self.schedule, "needs pp >= 2; with pp=1 use gpipe or 1f1b")
        if info.vpp is not None and self.vpp != info.vpp:
            raise invalid("vpp", self.vpp, f"schedule {self.schedule} runs exactly vpp={info.vpp}")
        if info.vpp is None and self.vpp < 2:
            raise invalid("vpp", self.vpp, f"schedule {self.schedule} needs vpp >= 2")
        if self.global_batch % (self.dp * self.microbatch_size):
            raise invalid("global_batch", self.global_batch,
                          f"must be divisible by dp*microbatch_size = {self.dp * self.microbatch_size}")
        if info.split_backward and self.zero == 3 and self.dp > 1:
            raise invalid("zero", self.zero, f"schedule {self.schedule} splits backward into input "
                          "and weight passes, and with ZeRO-3 (FSDP resharding after forward) "
                          "torch 2.13 gets the weight gradients wrong; use --zero 2")
        if self.schedule in ("1f1b", "dualpipev") and self.num_microbatches < self.num_stages:
            raise invalid("global_batch", self.global_batch,
                          f"{self.schedule} needs micro-batches ({self.num_microbatches}) >= "
                          f"pipeline stages ({self.num_stages})")

    def _check_model(self) -> None:
        check_plan(self.model, self.plan())
        if self.model.kv_heads % self.tp:
            raise invalid("tp", self.tp, f"must divide num_kv_heads={self.model.kv_heads} "
                          "(the trainer splits KV heads over TP)")
        if self.model.seq_len % self.tp:
            raise invalid("tp", self.tp, f"must divide seq_len={self.model.seq_len} "
                          "(sequence parallelism)")
        if self.model.tied_embeddings and self.pp > 1:
            raise invalid("pp", self.pp, f"model {self.model.name} ties its embeddings; the "
                          "trainer supports tied embeddings only with pp=1")

    @property
    def world_size(self) -> int:
        """Processes (devices): tp * pp * dp."""
        return self.tp * self.pp * self.dp

    @property
    def num_stages(self) -> int:
        """Virtual pipeline stages: pp * vpp."""
        return self.pp * self.vpp

    @property
    def num_microbatches(self) -> int:
        """Micro-batches per pipeline per step: global_batch / (dp * microbatch_size)."""
        return self.global_batch // (self.dp * self.microbatch_size)

    @property
    def total_steps(self) -> int:
        """Steps run: warm-up plus measured."""
        return self.warmup_steps + self.steps

    def rank_stages(self, pp_rank: int) -> list[int]:
        """Virtual stages held by pipeline rank ``pp_rank``, ascending (its chunks in order)."""
        if SCHEDULES[self.schedule].style == "v":
            return [pp_rank, 2 * self.pp - 1 - pp_rank]
        return [pp_rank + chunk * self.pp for chunk in range(self.vpp)]

    def stage_layer_ranges(self) -> list[range]:
        """Global layer indices of each virtual stage, in pipeline order."""
        ranges, start = [], 0
        for count in stage_layers(self.model, self.plan()):
            ranges.append(range(start, start + count))
            start += count
        return ranges

    def plan(self) -> ParallelPlan:
        """The equivalent simulator plan (schedule mapped to its closest simulator name)."""
        return ParallelPlan(tp=self.tp, pp=self.pp, dp=self.dp, vpp=self.vpp,
                            microbatch_size=self.microbatch_size, global_batch=self.global_batch,
                            zero=self.zero, sequence_parallel=self.tp > 1,
                            recompute=self.recompute, schedule=SCHEDULES[self.schedule].plan_name)

    def to_dict(self) -> dict[str, object]:
        """Flat JSON-ready dict: the model spec fields under ``model`` plus the run fields."""
        data = asdict(self)
        data.update(self._derived())
        return data

    def _derived(self) -> dict[str, object]:
        """The keys :meth:`to_dict` adds, which follow from the others."""
        return {"world_size": self.world_size, "num_microbatches": self.num_microbatches,
                "sequence_parallel": self.tp > 1, "seq_len": self.model.seq_len}

    @classmethod
    def from_dict(cls, data: Any) -> TrainConfig:
        """The config a :meth:`to_dict` (a run manifest's ``config``) holds; an unknown or
        missing key, a bad value or a derived key that disagrees (``world_size`` other than
        tp x pp x dp ...) is one ValueError naming the key (``config.<key>``)."""
        if not isinstance(data, Mapping):
            raise invalid("config", data, "expected an object of the trainer's run fields")
        own = {f.name for f in fields(cls)}
        derived = ("world_size", "num_microbatches", "sequence_parallel", "seq_len")
        unknown = sorted(set(data) - own - set(derived))
        if unknown:
            raise ValueError(f"unknown config key {unknown[0]!r}; valid: {', '.join([*sorted(own), *derived])}")
        if "model" not in data:
            raise ValueError("config.model is missing: the run's model (a ModelSpec's fields)")
        model = build_checked(ModelSpec, data["model"], "config.model")
        try:
            config = cls(**{k: v for k, v in data.items() if k in own and k != "model"}, model=model)
        except ValueError as exc:
            raise named_under("config", exc) from None
        for key, expected in config._derived().items():
            if key in data and data[key] != expected:
                raise invalid(f"config.{key}", data[key], f"expected {expected!r}, as the other keys give")
        return config


def _require(field: str, value: Any, ok: Callable[[float], bool], valid: str) -> None:
    """Raise ``invalid(field, value, valid)`` unless ``value`` is a finite real number that ``ok`` accepts."""
    if not (is_real(value) and ok(value)):
        raise invalid(field, value, valid)
