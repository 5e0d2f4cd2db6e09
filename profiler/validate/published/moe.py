"""Mixture-of-experts rows of a published-runs file: the model preset and the expert-parallel plan.

A row names its architecture by ``moe_model``, a preset of :mod:`schedules.moe_presets`
(``deepseek-v3``, ``gpt-oss-120b``, ``qwen3-235b-a22b``, ``mixtral-8x7b``): an MoE model has
more dimensions than the format's dense keys (experts, top-k, expert width, MLA), so the preset
supplies them; the row's ``layers``, ``hidden`` and ``heads`` must agree with it (a row that
states other dimensions is not that model). ``ep`` and ``etp`` set the expert-parallel degrees
(default 1, assumed and listed). The NeMo performance pages force-balance the routing ("we
force-balance the token distribution among experts"; AutoModel's "fake balanced gate"), so the
rows run with ``moe_imbalance`` 1.0; a row whose notes name AutoModel's fake balanced gate routes
round-robin (``MoESpec.routing``: token i takes experts (i·k + j) mod E, consecutive ones, which
matters to DeepEP's per-node copies).

A framework's recipe for one model may set plan fields its framework preset does not
(:data:`RECIPES`, each with its source at a commit): Megatron-Bridge's GPT-OSS performance recipes
reduce gradients in bf16 and recompute the layernorm and moe_act modules.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from core.errors import UnknownNameError
from profiler.validate.published.notes import Note, Unexpressible
from profiler.validate.published.rows import PublishedRow
from schedules.layer_kinds import layer_kind
from schedules.model import ModelSpec
from schedules.moe import moe_of
from schedules.moe_presets import get_moe_model


@dataclass(frozen=True)
class Recipe:
    """Plan fields a framework's recipe for one MoE model sets beyond the framework preset.

    Attributes:
        framework: lowercase substring of the row's ``framework`` text.
        moe_model: the :mod:`schedules.moe_presets` name.
        overrides: plan fields.
        source: where the recipe sets them (file at a commit).
    """

    framework: str
    moe_model: str
    overrides: Mapping[str, Any]
    source: str


RECIPES: tuple[Recipe, ...] = (
    Recipe("megatron-bridge", "gpt-oss-120b",
           MappingProxyType({"grad_reduce_dtype": "compute", "selective_recompute": "layernorm-moe-act"}),
           source="NVIDIA-NeMo/Megatron-Bridge:scripts/performance/configs/gpt_oss/gpt_oss_llm_pretrain.py "
                  "set_gpt_oss_common_configs: cfg.ddp.grad_reduce_in_fp32 = False, and the workload base "
                  "configs' recompute_modules=['layernorm', 'moe_act'] (the row's recompute), at tags v0.2.0 "
                  "(7af9601c9da746d21481194356295bfe23df3737, NeMo 25.11) and v0.3.0 "
                  "(21b02e0cfb2f8ff907e0d8baee0c5205876c6812, NeMo 26.02)"),
)


FAKE_BALANCED_GATE = "fake balanced gate"  # NeMo AutoModel's performance table: "Fake balanced gate is enabled"


def recipe_fields(row: PublishedRow) -> dict[str, Any]:
    """Plan fields of the first recipe matching the row's framework and MoE model (none: {})."""
    text = row.framework.lower()
    recipe = next((r for r in RECIPES if r.framework in text and r.moe_model == row.moe_model), None)
    return dict(recipe.overrides) if recipe is not None else {}


def moe_model(row: PublishedRow) -> ModelSpec | None:
    """The row's MoE preset at its sequence length (None for a dense row); Unexpressible when
    the preset is unknown or its dimensions differ from the row's."""
    if row.moe_model is None:
        return None
    try:
        model = get_moe_model(row.moe_model)
    except UnknownNameError as exc:
        raise Unexpressible(str(exc)) from None
    stated = {"layers": (row.layers, model.num_layers), "hidden": (row.hidden, model.hidden_size),
              "heads": (row.heads, model.num_heads)}
    for key, (value, preset) in stated.items():
        if value != preset:
            raise Unexpressible(f"{key} {value} differs from the {row.moe_model} preset's {preset}")
    if FAKE_BALANCED_GATE in (row.notes or "").lower():
        model = dataclasses.replace(model, moe=dataclasses.replace(moe_of(model), routing="round-robin"))
    return dataclasses.replace(model, name=row.name, seq_len=row.seq_len)


def moe_plan_fields(row: PublishedRow, model: ModelSpec, assumed: list[Note]) -> dict[str, Any]:
    """Expert-parallel plan fields of an MoE row (nothing for a dense one). Unstated expert tensor
    parallelism under TP is the model's TP default (Megatron-Core's ``--expert-tensor-parallel-size``
    defaults to TP: ``megatron/training/arguments.py`` @core_v0.10.0 l.259-260; the rule
    ``trainsim simulate`` applies, :meth:`schedules.layer_kinds.MoELayers.tp_plan_defaults`)."""
    if row.moe_model is None:
        return {}
    if row.ep is None:
        assumed.append(Note("ep", "expert parallelism not stated: ep 1"))
    etp = row.etp
    if etp is None:
        default = layer_kind(model).tp_plan_defaults(row.tp).get("etp", 1) if row.tp > 1 else 1
        etp = default if isinstance(default, int) else 1
        if row.tp > 1:
            assumed.append(Note("etp", f"expert tensor parallelism not stated: etp {etp}, Megatron-Core's default (TP)"))
    return {"ep": row.ep or 1, "etp": etp, "moe_imbalance": 1.0, **recipe_fields(row)}
