"""Mixture-of-experts rows of a published-runs file: the model preset and the expert-parallel plan.

A row names its architecture by ``moe_model``, a preset of :mod:`schedules.moe_presets`
(``deepseek-v3``, ``gpt-oss-120b``, ``qwen3-235b-a22b``, ``mixtral-8x7b``): an MoE model has
more dimensions than the format's dense keys (experts, top-k, expert width, MLA), so the preset
supplies them; the row's ``layers``, ``hidden`` and ``heads`` must agree with it (a row that
states other dimensions is not that model). ``ep`` and ``etp`` set the expert-parallel degrees
(default 1, assumed and listed). The NeMo performance pages force-balance the routing ("we
force-balance the token distribution among experts"; AutoModel's "fake balanced gate"), so the
rows run with ``moe_imbalance`` 1.0.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from profiler.validate.published.notes import Note, Unexpressible
from profiler.validate.published.rows import PublishedRow
from schedules.errors import UnknownNameError
from schedules.model import ModelSpec
from schedules.moe_presets import get_moe_model


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
    return dataclasses.replace(model, name=row.name, seq_len=row.seq_len)


def moe_plan_fields(row: PublishedRow, assumed: list[Note]) -> dict[str, Any]:
    """Expert-parallel plan fields of an MoE row (nothing for a dense one)."""
    if row.moe_model is None:
        return {}
    if row.ep is None:
        assumed.append(Note("ep", "expert parallelism not stated: ep 1"))
    return {"ep": row.ep or 1, "etp": row.etp or 1, "moe_imbalance": 1.0}
