"""Training without fp32 master weights and the loss in the compute dtype (``ParallelPlan.master_weights``,
``loss_dtype``): NeMo AutoModel's bf16 model under ``torch.optim.Adam`` and its
``MaskedCrossEntropy(fp32_upcast=False)``, against the closed forms of what those hold and move."""

from __future__ import annotations

import pytest

from profiler.validate.published.frameworks import framework_for
from profiler.validate.published.jobs import job_for_row
from profiler.validate.published.rows import read_rows
from profiler.validate.published.run import validate_row
from schedules.memory import (
    ActivationConfig,
    fsdp_state_bytes,
    head_activation_bytes,
    head_working_bytes,
    model_state_bytes,
    optimizer_state_bytes,
    plan_activation_config,
)
from schedules.model_presets import get_model
from schedules.plan import ParallelPlan
from schedules.stage_ops import adam_bytes_per_param, head_ops
from sim.job import resolve_job

TORCH = dict(framework="torch", dp=8, zero=3, global_batch=8)
PSI = 1e9


def test_bf16_parameters_hold_half_the_fsdp_states() -> None:
    """FSDP2 with fp32 shards: params 4, grads 4, Adam 8 bytes over N (16/N, the ZeRO paper's stage 3);
    bf16 shards (no master copy): 2 + 2 + 4 = 8/N."""
    with_master = fsdp_state_bytes(PSI, 8)
    bf16 = fsdp_state_bytes(PSI, 8, storage_bytes=2)
    assert with_master.total == pytest.approx(16 * PSI / 8)
    assert (bf16.params, bf16.grads, bf16.optimizer) == pytest.approx((2 * PSI / 8, 2 * PSI / 8, 4 * PSI / 8))


def test_optimizer_states_follow_the_parameters_dtype() -> None:
    """fp32 master + momentum + variance = 12 bytes; without a master, Adam's two states in bf16 = 4."""
    assert optimizer_state_bytes(ParallelPlan(**TORCH)) == 12  # type: ignore[arg-type]
    plan = ParallelPlan(**TORCH, master_weights=False)  # type: ignore[arg-type]
    assert optimizer_state_bytes(plan) == 4
    states = model_state_bytes(PSI, 0, 1, grad_bytes=2, optimizer_bytes=optimizer_state_bytes(plan))
    assert states.total == pytest.approx(8 * PSI)  # 2 + 2 + 4, against the paper's 16


def test_the_optimizer_step_moves_half_the_bytes_in_bf16() -> None:
    plan = ParallelPlan(**TORCH, optimizer="foreach")  # type: ignore[arg-type]
    bf16 = ParallelPlan(**TORCH, optimizer="foreach", master_weights=False)  # type: ignore[arg-type]
    assert adam_bytes_per_param(bf16) == pytest.approx(adam_bytes_per_param(plan) / 2)


def test_a_loss_in_the_compute_dtype_keeps_bf16_logits() -> None:
    """The stored logits (log_softmax's output) and the backward's two logit-sized gradients are
    2 bytes per element instead of 4; the loss kernels touch bf16 logits with no upcast."""
    model = get_model("llama3-8b")
    fp32 = plan_activation_config(ParallelPlan(**TORCH))  # type: ignore[arg-type]
    bf16 = plan_activation_config(ParallelPlan(**TORCH, loss_dtype="compute"))  # type: ignore[arg-type]
    logits = model.seq_len * model.vocab_size
    assert head_activation_bytes(model, 1, fp32) - head_activation_bytes(model, 1, bf16) == pytest.approx(2 * logits)
    assert head_working_bytes(model, 1, fp32) == pytest.approx(2 * 4 * logits)
    assert head_working_bytes(model, 1, bf16) == pytest.approx(2 * 2 * logits)
    assert ActivationConfig().loss_bytes == 4

    def loss_bytes(plan: ParallelPlan) -> float:
        return sum(op.bytes for backward in (False, True) for op in head_ops(model, plan, backward)
                   if op.name.startswith("head.loss"))
    plan = ParallelPlan(**TORCH)  # type: ignore[arg-type]
    tokens_logits = plan.microbatch_size * logits
    assert loss_bytes(plan) == pytest.approx((3.5 + 5.5) * 4 * tokens_logits)  # upcast, log-softmax, nll
    assert loss_bytes(ParallelPlan(**TORCH, loss_dtype="compute")) == pytest.approx((3 + 2) * 2 * tokens_logits)  # type: ignore[arg-type]


def test_only_the_torch_runtime_trains_without_master_weights() -> None:
    with pytest.raises(ValueError, match="master_weights=False is invalid: .*framework=torch only"):
        ParallelPlan(master_weights=False)
    with pytest.raises(ValueError, match="loss_dtype='compute' is invalid"):
        ParallelPlan(loss_dtype="compute")
    with pytest.raises(ValueError, match="loss_dtype='bf16' is invalid"):
        ParallelPlan(framework="torch", loss_dtype="bf16")
    with pytest.raises(ValueError, match="master_weights='no' is invalid"):
        resolve_job({"framework": "torch", "master_weights": "no"})


def test_automodel_rows_train_bf16_parameters_with_a_bf16_loss() -> None:
    """AutoModel's initialize_weights casts the model to bf16 and its benchmark configs set
    MaskedCrossEntropy(fp32_upcast=False); its GPT-OSS-120B row ran on 80 GB H100s, so the
    simulated step must fit them (with fp32 master states it did not: 91 GiB)."""
    framework = framework_for("NeMo AutoModel (FSDP2, TE, DeepEP)")
    assert framework.overrides["master_weights"] is False and framework.overrides["loss_dtype"] == "compute"
    rows = {r.name: r for r in read_rows("docs/published-moe-runs.toml")}
    row = rows["automodel-h100x64-gpt-oss-120b-bf16"]
    plan = job_for_row(row).job.plan
    assert (plan.master_weights, plan.loss_dtype) == (False, "compute")
    result = validate_row(row)
    assert result.sim is not None and result.sim.fits_hbm
