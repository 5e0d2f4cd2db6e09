"""Memory formulas against the ZeRO paper and Korthikanti et al. 2022."""

import pytest

from schedules.memory import ActivationConfig, layer_activation_bytes, model_state_bytes
from schedules.model import ModelSpec

PSI = 7.5e9


@pytest.mark.parametrize("n", [1, 2, 8, 64, 1024])
def test_zero_model_states_match_paper(n):
    # Rajbhandari et al. 2020, Fig. 1 (K = 12): 16Ψ, 4Ψ + 12Ψ/N, 2Ψ + 14Ψ/N, 16Ψ/N.
    expected = {0: 16 * PSI, 1: 4 * PSI + 12 * PSI / n, 2: 2 * PSI + 14 * PSI / n, 3: 16 * PSI / n}
    for stage, want in expected.items():
        assert model_state_bytes(PSI, stage, n).total == pytest.approx(want, rel=1e-12)


# A GPT layer with dropout, MHA, 4h GELU MLP, standard (non-flash) attention: the paper's setting.
GPT = ModelSpec(num_layers=2, hidden_size=2048, num_heads=16, vocab_size=1000, seq_len=2048)
S, B, H, A = 2048, 2, 2048, 16


@pytest.mark.parametrize("t", [1, 2, 4, 8])
def test_korthikanti_activation_formulas(t):
    def act(**kw):
        return layer_activation_bytes(GPT, B, ActivationConfig(tp=t, flash_attention=False, **kw))
    sbh = S * B * H
    # Eq. 2 (t=1) / eq. 3: sbh (10 + 24/t + 5 a s / (h t))
    assert act() == pytest.approx(sbh * (10 + 24 / t + 5 * A * S / (H * t)))
    # Eq. 4 (TP + SP): sbh/t (34 + 5 a s / h)
    assert act(sequence_parallel=True) == pytest.approx(sbh / t * (34 + 5 * A * S / H))
    # Eq. 5 (TP + SP + selective recomputation): 34 sbh / t
    assert act(sequence_parallel=True, recompute="selective") == pytest.approx(34 * sbh / t)
    # Full recomputation keeps only the layer input: 2 sbh (sharded by t with SP).
    assert act(sequence_parallel=True, recompute="full") == pytest.approx(2 * sbh / t)


def test_flash_attention_drops_the_quadratic_term():
    flash = layer_activation_bytes(GPT, B, ActivationConfig(flash_attention=True))
    lse = 4 * A * S * B  # fp32 log-sum-exp per row
    assert flash == pytest.approx(34 * S * B * H + lse)


@pytest.mark.parametrize("t", [1, 4])
def test_te_fp8_keeps_the_fp8_cast_of_each_weight_matmul_input(t):
    """Transformer Engine v1.8 saves the FP8 cast of a matmul's input for the weight gradient
    (linear.py saved_inputmat / inputmat_t, layernorm_linear.py and layernorm_mlp.py ln_out as
    uint8, gelu_out in FP8): the QKV input, the attention context, the first MLP input and the
    GeLU output (fc2's input) drop from 2 to 1 byte per element, 3sbh + 4sbh/t in all (with
    sequence parallelism the replicated ones are sharded)."""
    def act(**kw):
        return layer_activation_bytes(GPT, B, ActivationConfig(tp=t, flash_attention=False, **kw))
    sbh = S * B * H
    assert act() - act(matmul_input_bytes=1) == pytest.approx(2 * sbh + sbh / t + 4 * sbh / t)


def test_only_te_fp8_plans_save_fp8_inputs():
    from schedules.memory import plan_activation_config
    from schedules.plan import ParallelPlan

    assert plan_activation_config(ParallelPlan(dtype="fp8")).matmul_input_bytes == 1
    assert plan_activation_config(ParallelPlan(dtype="bf16")).matmul_input_bytes == 2
    assert plan_activation_config(ParallelPlan(dtype="fp8", framework="torch")).matmul_input_bytes == 2
