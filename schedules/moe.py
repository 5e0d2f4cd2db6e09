"""Mixture-of-experts layers in the model spec: :class:`MoESpec`, parameter counts, all-to-all volume.

A :class:`schedules.model.ModelSpec` with ``moe=MoESpec(...)`` replaces the MLP of its MoE layers
by a router (a linear h -> experts), ``num_experts`` routed experts of which each token uses
``top_k``, and ``num_shared_experts`` experts every token uses (DeepSeekMoE). Experts are MLPs of
the model's ``ffn_kind`` (SwiGLU: 3 matrices) and width ``expert_ffn_size``. Layers before
``first_dense_layers`` keep the dense MLP of width ``ModelSpec.ffn_hidden_size``. FLOPs are in
:mod:`schedules.flops`.

Attention is ModelSpec's unless ``attention`` (a :class:`schedules.attention.AttentionSpec`)
states another geometry (heads wider than h/heads, or MLA), as the MoE presets need.

Units: parameter counts are elements; bytes are bytes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from core.errors import build_checked, invalid, require_positive_int
from core.vocab import Runtime
from schedules.attention import AttentionSpec, attention_params

if TYPE_CHECKING:
    from schedules.model import ModelSpec


MOE_ROUTINGS = ("uniform", "round-robin")
ROPE_SCALINGS = ("none", "yarn")


@dataclass(frozen=True, kw_only=True)
class MoESpec:
    """The mixture-of-experts part of a model.

    Attributes:
        num_experts: routed experts per MoE layer (E).
        top_k: routed experts each token is sent to.
        expert_ffn_size: inner width of one expert's MLP.
        num_shared_experts: experts every token goes through, beside the routed ones.
        shared_ffn_size: inner width of one shared expert (None: ``expert_ffn_size``).
        first_dense_layers: the first k layers keep the dense MLP (DeepSeek-V3: 3).
        moe_layer_step: after those, layer i (0-based) is MoE iff (i + 1) % step == 0 (the
            Hugging Face Qwen2-MoE/Llama-4 convention; 1: every layer, 2: every second one).
        router_bias: the router linear has a bias (GPT-OSS) or a per-expert score bias
            (DeepSeek-V3's ``e_score_correction_bias``): E parameters.
        expert_bias: expert linears have biases (GPT-OSS).
        activation_clamp: the experts' gated activation clamps its inputs to this limit (GPT-OSS:
            ``swiglu_limit`` 7.0; None: no clamp).
        capacity_factor: tokens an expert may take, as a multiple of its even share
            (top_k x tokens / E); None: no limit, no token is dropped.
        attention: attention geometry when it is not ModelSpec's (None: ModelSpec's).
        routing: which experts a token's top-k are, as far as where they live matters (DeepEP's
            per-node copies, :func:`sim.placement.deepep_volume`): "uniform" (drawn uniformly
            without replacement: a balanced learned router, or Megatron-Core's
            ``moe_router_force_load_balancing``, which replaces the logits by random ones:
            megatron/core/transformer/moe/router.py ``apply_random_logits`` @ b0cc2706, the
            Megatron-LM of Megatron-Bridge v0.3.0) or "round-robin" (NeMo AutoModel's
            ``FakeBalancedGate``: token i takes experts (i·k + j) mod E, j < k, consecutive:
            nemo_automodel/components/moe/layers.py @ 01926a5c).
        rope_scaling: "yarn" for YaRN-scaled RoPE (GPT-OSS: ``rope_scaling.rope_type`` "yarn",
            factor 32, huggingface.co/openai/gpt-oss-120b config.json), which Megatron-Core runs
            unfused (:meth:`schedules.moe_ops.MoEShape.rope`); "none": plain RoPE (fused).
    """

    num_experts: int
    top_k: int
    expert_ffn_size: int
    num_shared_experts: int = 0
    shared_ffn_size: int | None = None
    first_dense_layers: int = 0
    moe_layer_step: int = 1
    router_bias: bool = False
    expert_bias: bool = False
    capacity_factor: float | None = None
    attention: AttentionSpec | None = None
    routing: str = "uniform"
    activation_clamp: float | None = None
    rope_scaling: str = "none"

    def __post_init__(self) -> None:
        for name in ("num_experts", "top_k", "expert_ffn_size", "moe_layer_step"):
            require_positive_int(f"moe.{name}", getattr(self, name))
        if self.top_k > self.num_experts:
            raise invalid("moe.top_k", self.top_k, f"expected <= num_experts={self.num_experts}")
        _require_count("moe.num_shared_experts", self.num_shared_experts)
        _require_count("moe.first_dense_layers", self.first_dense_layers)
        if self.shared_ffn_size is not None:
            require_positive_int("moe.shared_ffn_size", self.shared_ffn_size)
        cf = self.capacity_factor
        if cf is not None and (isinstance(cf, bool) or not isinstance(cf, (int, float)) or not cf > 0):
            raise invalid("moe.capacity_factor", cf, "expected a number > 0, or None for no limit")
        clamp = self.activation_clamp
        if clamp is not None and (isinstance(clamp, bool) or not isinstance(clamp, (int, float)) or not clamp > 0):
            raise invalid("moe.activation_clamp", clamp, "expected a number > 0, or None for no clamp")
        if self.routing not in MOE_ROUTINGS:
            raise invalid("moe.routing", self.routing, f"expected one of {', '.join(MOE_ROUTINGS)}")
        if self.rope_scaling not in ROPE_SCALINGS:
            raise invalid("moe.rope_scaling", self.rope_scaling, f"expected one of {', '.join(ROPE_SCALINGS)}")
        if isinstance(self.attention, dict):
            object.__setattr__(self, "attention", AttentionSpec(**self.attention))

    @property
    def shared_ffn(self) -> int:
        """Inner width of one shared expert."""
        return self.shared_ffn_size or self.expert_ffn_size


def _require_count(field: str, value: Any) -> None:
    """Raise unless ``value`` is an int >= 0."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise invalid(field, value, "expected an integer >= 0")


def moe_spec(value: MoESpec | dict[str, Any] | None) -> MoESpec | None:
    """``ModelSpec.moe`` from what a caller passed: a spec, its ``asdict`` form (JSON), or None."""
    if value is None or isinstance(value, MoESpec):
        return value
    if isinstance(value, dict):
        return build_checked(MoESpec, value, "moe")
    raise invalid("moe", value, "expected a MoESpec, a dict of its fields, or None")


def attention_of(model: ModelSpec) -> AttentionSpec:
    """The model's attention geometry (ModelSpec's h/heads-wide heads unless the MoE spec says)."""
    if model.moe is not None and model.moe.attention is not None:
        return model.moe.attention
    return AttentionSpec(head_dim=model.head_dim)


def is_moe_layer(model: ModelSpec, layer: int) -> bool:
    """Whether 0-based ``layer`` is an MoE layer (False for every layer of a dense model)."""
    moe = model.moe
    return moe is not None and layer >= moe.first_dense_layers and (layer + 1) % moe.moe_layer_step == 0


def moe_layers(model: ModelSpec) -> list[int]:
    """0-based indices of the MoE layers."""
    return [i for i in range(model.num_layers) if is_moe_layer(model, i)]


def mlp_params(model: ModelSpec, ffn: int, *, bias: bool) -> int:
    """Parameters of one MLP of inner width ``ffn`` (SwiGLU: 3 matrices, GELU: 2)."""
    h, inputs = model.hidden_size, model.ffn_inputs
    matrices = (inputs + 1) * h * ffn
    return matrices + ((inputs * ffn + h) if bias else 0)


def router_params(model: ModelSpec) -> int:
    """The router: a linear h -> E (plus E biases if ``router_bias``)."""
    moe = moe_of(model)
    return model.hidden_size * moe.num_experts + (moe.num_experts if moe.router_bias else 0)


def expert_params(model: ModelSpec) -> int:
    """One routed expert."""
    moe = moe_of(model)
    return mlp_params(model, moe.expert_ffn_size, bias=moe.expert_bias)


def shared_expert_params(model: ModelSpec) -> int:
    """All shared experts of one MoE layer."""
    moe = moe_of(model)
    return moe.num_shared_experts * mlp_params(model, moe.shared_ffn, bias=moe.expert_bias)


def ffn_params(model: ModelSpec, layer: int, *, active: bool = False) -> int:
    """The feed-forward part of ``layer``: dense MLP, or router + routed + shared experts
    (``active``: only the ``top_k`` routed experts one token uses)."""
    if not is_moe_layer(model, layer):
        return mlp_params(model, model.ffn, bias=model.bias)
    moe = moe_of(model)
    routed = (moe.top_k if active else moe.num_experts) * expert_params(model)
    return router_params(model) + routed + shared_expert_params(model)


def layer_params(model: ModelSpec, layer: int, *, active: bool = False) -> int:
    """Parameters of transformer block ``layer``: its two norms, attention and FFN part."""
    norms = 2 * model.norm_params()
    return norms + attention_params(model, attention_of(model)) + ffn_params(model, layer, active=active)


def total_params(model: ModelSpec) -> int:
    """Every parameter of the model: embedding, all layers (all experts), final norm and head."""
    layers = sum(layer_params(model, i) for i in range(model.num_layers))
    return model.embedding_params() + layers + model.head_params()


def active_params(model: ModelSpec, *, input_embedding: bool = True) -> int:
    """Parameters one token's forward pass uses: every non-expert parameter plus ``top_k``
    routed experts per MoE layer.

    ``input_embedding``: count the whole input embedding table. Publishers differ: Mistral
    (Mixtral) and Qwen count it; DeepSeek (README_WEIGHTS.md: "36.6B (including 0.9B for the
    output Head)") and OpenAI (gpt-oss model card) count the output head but not the input
    embedding, of which a token reads one row.
    """
    layers = sum(layer_params(model, i, active=True) for i in range(model.num_layers))
    embedding = model.embedding_params() if input_embedding else 0
    return embedding + layers + model.head_params()


def all_to_all_bytes_per_token(moe: MoESpec, *, hidden_size: int, ep: int,
                               bytes_per_element: float) -> float:
    """Bytes one token sends to other expert-parallel ranks in one direction (dispatch; the
    combine returns as many): ``top_k x hidden x bytes x (EP - 1) / EP``.

    Each of the token's ``top_k`` copies goes to the rank of its expert; with experts spread
    evenly over ``ep`` ranks and uniform routing, a fraction (EP - 1)/EP of them leave the rank.
    Copies bound for the same remote rank are counted separately (no per-rank deduplication).
    """
    require_positive_int("ep", ep)
    require_positive_int("hidden_size", hidden_size)
    if moe.num_experts % ep:
        raise invalid("ep", ep, f"must divide moe.num_experts={moe.num_experts}")
    return moe.top_k * hidden_size * bytes_per_element * (ep - 1) / ep


class ExpertPlan(Protocol):
    """The fields of a :class:`schedules.plan.ParallelPlan` its experts are checked against."""

    @property
    def ep(self) -> int: ...
    @property
    def etp(self) -> int: ...
    @property
    def tp(self) -> int: ...
    @property
    def sequence_parallel(self) -> bool: ...
    @property
    def zero3_gather(self) -> str: ...
    @property
    def framework(self) -> str: ...
    @property
    def per_param_zero3(self) -> bool: ...


def check_expert_plan(model: ModelSpec, plan: ExpertPlan) -> None:
    """Raise a one-line error for expert-parallel fields the model's layers cannot take: a dense
    model takes none; an MoE model's experts and expert FFN must divide by ``ep`` and ``etp``."""
    moe = model.moe
    if moe is not None and plan.per_param_zero3:
        raise invalid("zero3_gather", plan.zero3_gather, f"DeepSpeed's per-parameter collectives are modelled for "
                      f"dense models (model {model.name!r} has experts)")
    if moe is None:
        if plan.ep > 1 or plan.etp > 1:
            field, value = ("ep", plan.ep) if plan.ep > 1 else ("etp", plan.etp)
            raise invalid(field, value, f"model {model.name!r} is dense (no experts): expert parallelism needs "
                          "an MoE model")
        return
    if moe.num_experts % plan.ep:
        raise invalid("ep", plan.ep, f"must divide the model's num_experts={moe.num_experts}")
    if moe.expert_ffn_size % plan.etp:
        raise invalid("etp", plan.etp, f"must divide the expert FFN size {moe.expert_ffn_size}")
    if plan.tp > 1 and not plan.sequence_parallel and plan.framework == Runtime.MEGATRON:
        raise invalid("sequence_parallel", False, "an MoE model with tp > 1 needs sequence parallelism "
                      "(Megatron-Core's MoE layers require it)")


def moe_of(model: ModelSpec) -> MoESpec:
    """``model.moe``, or a one-line error for a dense model (for code that only MoE layers reach)."""
    if model.moe is None:
        raise invalid("moe", None, f"model {model.name!r} has no MoE layers")
    return model.moe
