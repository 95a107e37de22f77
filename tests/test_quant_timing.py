"""Kernel timing reads a quantized weight at the memory plan's bytes per weight.

The memory plan counts each matmul weight at its checkpoint scheme's bytes
(ModelSpec.weight_bytes_per_param: per-tensor FP8 1 B, block FP8 1 + 4/16,384 B, AWQ / GPTQ
bits/8 + (2 + bits/8)/group B); the timing models (roofline, opmath's flops/bytes, the measured
tables' roofline ratios for precisions without a measured kernel, MoE experts) must read the same
bytes from HBM, not a fixed 4/128 B of scales per weight. 16-bit weights stay at 2 B exactly.
"""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import pytest

from tuner.core.catalog import load_gpus, load_models
from tuner.predictors import aic
from tuner.predictors.features import BatchFeatures
from tuner.predictors.moe import MoEParallel, MoEShape
from tuner.predictors.opmath import LINEAR_OPS, flops_bytes, linear_dims, weight_bytes_per_param
from tuner.predictors.roofline import RooflineCostModel

GPUS = load_gpus()
MODELS = load_models()
LLAMA = MODELS["llama-3-8b"]  # a 16-bit checkpoint: vLLM quantizes it at load
FP8_PER_TENSOR = replace(LLAMA, checkpoint_bits=8, checkpoint_quantization="fp8")
AWQ_G64 = replace(LLAMA, checkpoint_bits=4, checkpoint_quantization="awq, 4-bit, group 64")
GPTQ_W8 = replace(LLAMA, checkpoint_bits=8, checkpoint_quantization="gptq, 8-bit, group 128")
DEEPSEEK = MODELS["deepseek-v3"]  # FP8 in 128x128 blocks


def _decodes(n: int) -> BatchFeatures:
    return BatchFeatures.single(decodes=n, kv_tokens=n)


def _weight_read_s(part: str, cm) -> float:
    """Seconds of `part` spent reading weights in a memory-bound decode step: its time is
    weights + tokens x activations there, so 2 t(1) - t(2) leaves the weights alone."""
    one = float(cm.breakdown(_decodes(1))[part][0])
    two = float(cm.breakdown(_decodes(2))[part][0])
    return 2.0 * one - two


# (model, weight bits, bytes per matmul weight the plan holds, scales included)
PLANS = [
    (FP8_PER_TENSOR, 8, 1.0),  # one scale per tensor: no per-weight share
    (LLAMA, 8, 1.0),  # vLLM's online FP8: per tensor too
    (AWQ_G64, 4, 0.5 + 2.5 / 64),  # FP16 scale + 4-bit zero per 64 weights
    (LLAMA, 4, 0.5 + 2.5 / 128),  # an unnamed 4-bit checkpoint: AWQ / GPTQ at group 128
    (GPTQ_W8, 8, 1.0 + 3.0 / 128),  # FP16 scale + 8-bit zero per 128 weights
    (DEEPSEEK, 8, 1.0 + 4.0 / (128 * 128)),  # one FP32 scale per 128x128 block
    (LLAMA, 16, 2.0),
]


@pytest.mark.parametrize("model, bits, per_weight", PLANS)
def test_the_timing_bytes_per_weight_are_the_memory_plans(model, bits, per_weight):
    assert model.weight_bytes_per_param(bits) == pytest.approx(per_weight, rel=1e-12)
    assert weight_bytes_per_param(model, bits) == model.weight_bytes_per_param(bits)
    rf = RooflineCostModel.from_specs(GPUS["H100"], model, weight_bits=bits)
    assert rf._weight_bytes_per_param == model.weight_bytes_per_param(bits)


@pytest.mark.parametrize("gpu", ["H100", "A100-80G"])
@pytest.mark.parametrize("tp", [1, 2])
@pytest.mark.parametrize("model, bits, per_weight", [p for p in PLANS if p[0] is not DEEPSEEK])
def test_a_roofline_decode_step_reads_the_planned_weight_bytes(model, bits, per_weight, tp, gpu):
    g = GPUS[gpu]
    rf = RooflineCostModel.from_specs(g, model, tp=tp, weight_bits=bits)
    read_bytes = _weight_read_s("linear", rf) * g.hbm_bytes_per_s * rf.bandwidth_efficiency
    # every layer's matmul weights on this rank, as the memory plan holds them
    planned = model.num_layers * model.linear_weight_bytes_per_layer(bits) / tp
    assert read_bytes == pytest.approx(planned, rel=1e-9)
    per_param = read_bytes / (model.num_layers * model.linear_params_per_layer / tp)
    assert per_param == pytest.approx(per_weight, rel=1e-9)


def test_block_fp8_deepseek_reads_its_block_scales_in_attention_and_experts():
    g = GPUS["H200"]
    per_weight = DEEPSEEK.weight_bytes_per_param(8)
    fp8 = RooflineCostModel.from_specs(g, DEEPSEEK, tp=8, weight_bits=8)
    bf16 = RooflineCostModel.from_specs(g, DEEPSEEK, tp=8, weight_bits=16)
    # MLA projections, router and shared experts: the FP8 weights over the BF16 ones
    ratio = _weight_read_s("linear", fp8) / _weight_read_s("linear", bf16)
    assert ratio == pytest.approx(per_weight / 2.0, rel=1e-9)
    # routed experts of one decode token: memory-bound, at the plan's bytes per weight
    _, expert_bytes = MoEShape.of(DEEPSEEK).expert_flops_bytes(
        1.0, MoEParallel(8, 1, False), weight_bytes=per_weight)
    moe_s = float(fp8.breakdown(_decodes(1))["moe_experts"][0])
    bw = g.hbm_bytes_per_s * fp8.bandwidth_efficiency
    assert moe_s == pytest.approx(DEEPSEEK.num_moe_layers * expert_bytes / bw, rel=1e-9)


@pytest.mark.parametrize("model, bits, per_weight", PLANS[:5] + PLANS[-1:])
def test_opmath_linear_bytes_follow_the_scheme_and_the_lm_head_stays_16_bit(model, bits,
                                                                           per_weight):
    tokens = 7.0
    for op in LINEAR_OPS:
        k, n = linear_dims(op, model)
        _, moved = flops_bytes(op, model, tokens=tokens, weight_bits=bits)
        assert moved == pytest.approx(k * n * per_weight + tokens * (k + n) * 2.0, rel=1e-12)
    k, n = linear_dims("lm_head", model)
    assert flops_bytes("lm_head", model, tokens=tokens, weight_bits=bits)[1] \
        == k * n * 2.0 + tokens * (k + n) * 2.0


def test_sixteen_bit_weights_are_read_at_exactly_two_bytes():
    shape = SimpleNamespace(**{k: getattr(LLAMA, k) for k in (
        "num_layers", "hidden_size", "num_heads", "num_kv_heads", "head_dim",
        "intermediate_size", "vocab_size")})  # duck-typed: no checkpoint scheme
    for model in (LLAMA, shape):
        for op in LINEAR_OPS:
            k, n = linear_dims(op, model)
            assert flops_bytes(op, model, tokens=3.0)[1] == k * n * 2.0 + 3.0 * (k + n) * 2.0
        assert weight_bytes_per_param(model, 16) == 2.0
        assert RooflineCostModel.from_specs(GPUS["H100"], model)._weight_bytes_per_param == 2.0


def test_a_roofline_without_a_scheme_reads_weights_as_vllm_quantizes_a_16_bit_checkpoint():
    hand = RooflineCostModel.from_specs(GPUS["H100"], LLAMA)
    assert replace(hand, weight_bits=8, weight_bytes_per_param=0.0)._weight_bytes_per_param == 1.0
    assert replace(hand, weight_bits=4, weight_bytes_per_param=0.0)._weight_bytes_per_param \
        == pytest.approx(0.5 + 2.5 / 128)


@pytest.mark.parametrize("model, bits, per_weight", [
    (FP8_PER_TENSOR, 8, 1.0), (AWQ_G64, 4, 0.5 + 2.5 / 64), (LLAMA, 4, 0.5 + 2.5 / 128)])
def test_measured_bf16_tables_scale_a_decode_gemm_by_the_planned_bytes(model, bits, per_weight):
    """A100 has no FP8 (nor INT4) GEMM table: W8 / W4 GEMMs are the measured BF16 time x the
    roofline ratio, memory-bound at one token: ~ the planned bytes per weight over 2."""
    g = GPUS["A100-80G"]
    quant = aic.table_cost_model(model, g, weight_bits=bits, engine=None)
    bf16 = aic.table_cost_model(model, g, weight_bits=16, engine=None)
    f = _decodes(1)
    ratio = float(quant.breakdown(f)["linear"][0] / bf16.breakdown(f)["linear"][0])
    # activations (2 (k + n) bytes per token) add < 0.2 % to the weights' bytes at one token
    assert ratio == pytest.approx(per_weight / 2.0, rel=3e-3)


def test_measured_moe_experts_without_a_kernel_table_read_the_planned_bytes():
    """Routed experts priced from the BF16 fused-MoE table x the roofline ratio: per-tensor FP8
    on A100 (no FP8 table) and DeepSeek-V3's block FP8 on H200 (the FP8 table is per tensor)."""
    qwen_fp8 = replace(MODELS["qwen3-30b-a3b"], checkpoint_bits=8, checkpoint_quantization="fp8")
    for model, gpu, tp in ((qwen_fp8, "A100-80G", 1), (DEEPSEEK, "H200", 8)):
        g = GPUS[gpu]
        quant = aic.table_cost_model(model, g, tp=tp, weight_bits=8, engine=None)
        bf16 = aic.table_cost_model(model, g, tp=tp, weight_bits=16, engine=None)
        assert quant is not None and bf16 is not None
        f = _decodes(1)
        ratio = float(quant.breakdown(f)["moe_experts"][0] / bf16.breakdown(f)["moe_experts"][0])
        assert ratio == pytest.approx(model.weight_bytes_per_param(8) / 2.0, rel=3e-3), model.name


def test_w8_experts_without_a_kernel_table_compute_at_the_gpus_fp8_rate():
    """The BF16-table x roofline path prices W8 experts as _quant_ratio prices W8 GEMMs: at FP8
    tensor rate where the GPU has FP8 (vLLM's block-FP8 fused MoE on Hopper), at BF16 rate
    where it has none (Marlin W8A16). A compute-bound prefill of DeepSeek-V3's block-FP8
    experts is then faster on H200 than on the same H200 without FP8; a memory-bound decode of
    one token reads the same bytes on both."""
    h200 = GPUS["H200"]
    no_fp8 = replace(h200, fp8_tflops=None)
    moe = MoEShape.of(DEEPSEEK)
    par = MoEParallel(8, 1, False)
    tables = aic.KernelTables.load("H200")
    got = {}
    for name, g in (("fp8", h200), ("none", no_fp8)):
        fields, notes, _ = aic._moe_curves(moe, par, tables, g, 8, False,
                                           DEEPSEEK.weight_bytes_per_param(8))
        got[name] = fields["log_moe_s"]
        assert any("roofline ratio" in n for n in notes)
    fp8_s, none_s = got["fp8"], got["none"]
    assert none_s[0] == pytest.approx(fp8_s[0], abs=1e-9)  # one token: bandwidth-bound
    assert fp8_s[-1] < none_s[-1] - 0.05  # the largest step: compute at FP8 rate (log s)
