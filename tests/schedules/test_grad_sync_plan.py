"""``plan.grad_sync``: the one-line errors where it is not modelled, and the published AutoModel
rows run with it (the facts and the simulated counts: tests/profiler/test_fsdp_pipelining_sync.py)."""

from __future__ import annotations

import pytest

from profiler.validate.published.frameworks import framework_for
from schedules.plan import ParallelPlan
from sim.cli.main import main

EVERY = "every-microbatch"


@pytest.mark.parametrize(("fields", "why"), [
    ({"framework": "megatron", "zero": 2}, "framework=megatron"),
    ({"framework": "torch", "zero": 1}, "zero=1"),
    ({"framework": "torch", "zero": 3, "overlap_grad_reduce": False}, "overlap_grad_reduce=False"),
    ({"framework": "torch", "zero": 2, "grad_sync": "sometimes"}, "expected one of"),
])
def test_grad_sync_is_refused_where_it_is_not_modelled(fields: dict[str, object], why: str) -> None:
    with pytest.raises(ValueError, match=r"grad_sync=.* is invalid: .*" + why):
        ParallelPlan(**{"grad_sync": EVERY, **fields})  # type: ignore[arg-type]


def test_a_split_backward_schedule_is_one_line_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    """FSDP's hooks under a B/W-split backward are not modelled: the command says so in one line."""
    assert main(["simulate", "--framework", "fsdp2", "--zero", "2", "--grad-sync", EVERY, "--schedule", "zb-h1",
                 "--layers", "4", "--no-report"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "grad_sync='every-microbatch' is invalid" in err and "zb-h1" in err


def test_automodel_rows_reduce_in_every_micro_batch() -> None:
    assert framework_for("NeMo AutoModel (FSDP2, TE, DeepEP)").overrides["grad_sync"] == EVERY
    assert "grad_sync" not in framework_for("Megatron-Bridge").overrides
