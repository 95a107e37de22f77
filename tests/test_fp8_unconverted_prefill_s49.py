"""FP8 checkpoints that keep some projections at 16 bits (config.json modules_to_not_convert /
ignore; Meta's Llama-3.1-405B-Instruct-FP8 keeps every attention projection and the first
and last MLPs in BF16): those GEMMs run at the 16-bit tensor rate, not the FP8 one, in every
timing model (measured kernel tables, spec-sheet roofline, transferred profiles); checkpoints
without such modules price exactly as before, and the physical limit stays below the
prediction."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tuner.core.catalog import get_model, load_gpus, load_models, unconverted_split
from tuner.core.config import ServingConfig
from tuner.core.workload import Workload
from tuner.predictors.aic import MeasuredTableCostModel, _quant_ratio
from tuner.predictors.aic_tables import KernelTables
from tuner.predictors.devices import gpu_specs
from tuner.predictors.features import BatchFeatures
from tuner.predictors.fitted import transferred_cost_model
from tuner.predictors.opmath import (
    linear_dims,
    quantized_bytes_per_param,
    unconverted_shares,
    weight_bytes_per_param,
)
from tuner.predictors.roofline import RooflineCostModel
from tuner.predictors.sources import cost_model_for
from tuner.sim.simulator import simulate

GPUS = load_gpus()
H100 = GPUS["H100"]
LLAMA_8B = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
            "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
            "intermediate_size": 14336, "vocab_size": 128256, "max_position_embeddings": 8192}
FP8 = {"quant_method": "compressed-tensors",
       "config_groups": {"g": {"weights": {"num_bits": 8, "type": "float"}}}}
ATTN_OPS, MLP_OPS = ("linear.qkv", "linear.o"), ("linear.gate_up", "linear.down")


def _ckpt(tmp_path, name, quant):
    d = tmp_path / name
    d.mkdir()
    (d / "config.json").write_text(json.dumps({**LLAMA_8B, "quantization_config": quant}))
    return get_model(str(d))


@pytest.fixture
def ckpts(tmp_path):
    """(attention kept at BF16, every projection FP8) 8B checkpoints."""
    return (_ckpt(tmp_path, "attn16", {**FP8, "ignore": ["lm_head", "re:.*self_attn.*"]}),
            _ckpt(tmp_path, "allfp8", {**FP8, "ignore": ["lm_head"]}))


def _prefill(tokens: float) -> BatchFeatures:
    a = np.array([[tokens, tokens * tokens, 0.0, 0.0, 0.0, 1.0]])
    return BatchFeatures(*(a[:, i] for i in range(6)))


def test_the_split_by_projection_kind_is_said_and_read(monkeypatch, tmp_path, ckpts):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))  # nothing cached: the name decides
    meta = get_model("meta-llama/Llama-3.1-405B-Instruct-FP8")
    # every attention projection; the first and last of 126 layers' MLPs
    assert unconverted_split(meta.checkpoint_quantization) == pytest.approx((1.0, 2 / 126),
                                                                            abs=1e-4)
    assert unconverted_shares(meta, 8) == unconverted_split(meta.checkpoint_quantization)
    assert unconverted_shares(meta, 16) == (0.0, 0.0)
    assert quantized_bytes_per_param(meta, 8) == 1.0  # the share's 2 bytes priced apart
    attn16, allfp8 = ckpts
    assert unconverted_shares(attn16, 8) == (1.0, 0.0)
    assert unconverted_shares(allfp8, 8) == (0.0, 0.0)
    # a scheme that says only the total: that share for both kinds
    assert unconverted_split("fp8, 25.00 % of matmul weights at 16 bits (x)") == (0.25, 0.25)
    assert unconverted_split("fp8") == (0.0, 0.0)


def test_measured_tables_run_16_bit_projections_on_the_bf16_table(ckpts):
    tables = KernelTables.load("H100")
    attn16, allfp8 = ckpts
    a = MeasuredTableCostModel.build(attn16, H100, tables, weight_bits=8)
    b = MeasuredTableCostModel.build(allfp8, H100, tables, weight_bits=8)
    m = np.exp(a.log_m)
    bm = tables.gemm_m_grid("bf16")
    extra = 0.0
    for op in ATTN_OPS:
        k, n = linear_dims(op, attn16)
        bf16 = np.exp(np.interp(np.log(m), np.log(bm), np.log(tables.gemm_s(n, k, "bf16"))))
        extra = extra + bf16 - tables.gemm_s(n, k, "fp8")
    np.testing.assert_allclose(np.exp(a.log_linear_s) - np.exp(b.log_linear_s), extra,
                               rtol=1e-9, atol=1e-15)
    # an 8k-token prefill step: the BF16 attention projections cost measurably more
    f = _prefill(8192.0)
    assert a.gpu_breakdown(f)["linear"][0] > 1.05 * b.gpu_breakdown(f)["linear"][0]
    assert "16-bit projections" in a.describe() and "16-bit projections" not in b.describe()


def test_the_roofline_runs_16_bit_flops_at_the_16_bit_rate(ckpts):
    attn16, allfp8 = ckpts
    a = RooflineCostModel.from_specs(H100, attn16, weight_bits=8)
    b = RooflineCostModel.from_specs(H100, allfp8, weight_bits=8)
    tokens = 16384.0  # compute-bound
    f = _prefill(tokens)
    pa = sum(np.prod(linear_dims(op, attn16)) for op in ATTN_OPS)
    pm = sum(np.prod(linear_dims(op, attn16)) for op in MLP_OPS)
    eff = a.compute_efficiency
    want = 2.0 * tokens * (pa / (H100.peak_flops * eff) + pm / (H100.fp8_tflops * 1e12 * eff))
    assert a.breakdown(f)["linear"][0] == pytest.approx(32 * want, rel=1e-12)
    assert b.breakdown(f)["linear"][0] == pytest.approx(
        32 * 2.0 * tokens * (pa + pm) / (H100.fp8_tflops * 1e12 * eff), rel=1e-12)


def test_transferred_profiles_run_16_bit_projections_at_the_16_bit_peak(ckpts):
    curve = {"latency_s": 0.0, "peak_flops": 1e12, "peak_bytes_per_s": 1e11, "degree": 0,
             "coef": [float(np.log(0.5))], "z_mean": [0.0, 0.0], "z_std": [1.0, 1.0],
             "z_min": [-10.0, -10.0], "z_max": [10.0, 10.0]}
    fit = {"efficiency": {c: curve for c in ("gemm", "elementwise", "attn.prefill",
                                             "attn.decode")}}
    specs = gpu_specs(H100)
    fp8 = H100.fp8_tflops * 1e12
    attn16, allfp8 = ckpts
    a, b = (transferred_cost_model(fit, m, specs, description="t", weight_bits=8,
                                   gemm_peak_flops=fp8) for m in (attn16, allfp8))
    x = np.array([16384.0])  # compute-bound: FLOPs / peak / efficiency
    for op in ATTN_OPS:
        k, n = linear_dims(op, attn16)
        flops = 2.0 * x * k * n
        assert a.tables[op](x)[0] == pytest.approx(flops[0] / specs.peak_flops / 0.5, rel=1e-9)
        assert b.tables[op](x)[0] == pytest.approx(flops[0] / fp8 / 0.5, rel=1e-9)
    # the FP8 MLPs read 1 byte a weight in both (not the checkpoint's mean of 1.x): a
    # one-token (memory-bound) step takes as long
    for op in MLP_OPS:
        assert a.tables[op](np.array([1.0]))[0] == pytest.approx(
            b.tables[op](np.array([1.0]))[0], rel=1e-12)
        assert a.tables[op](x)[0] == pytest.approx(b.tables[op](x)[0], rel=1e-12)


def test_checkpoints_without_16_bit_projections_price_exactly_as_before(ckpts):
    """The formulas as they were before the 16-bit share was priced, evaluated by hand:
    equal to the last bit for 16-bit weights, an all-FP8 checkpoint and W4."""
    tables = KernelTables.load("H100")
    _, allfp8 = ckpts
    llama = load_models()["llama-3-8b"]
    shapes = [linear_dims(op, llama) for op in (*ATTN_OPS, *MLP_OPS)]
    for model, bits, dt in ((llama, 16, "bf16"), (allfp8, 8, "fp8")):
        cm = MeasuredTableCostModel.build(model, H100, tables, weight_bits=bits)
        old = sum(tables.gemm_s(n, k, dt) for k, n in shapes)
        assert np.array_equal(cm.log_linear_s, np.log(old))
    cm = MeasuredTableCostModel.build(llama, H100, tables, weight_bits=4)
    m = tables.gemm_m_grid("bf16")
    wq = weight_bytes_per_param(llama, 4)
    old = sum(tables.gemm_s(n, k, "bf16") * _quant_ratio(m, n, k, 4, wq, H100) for k, n in shapes)
    assert np.array_equal(cm.log_linear_s, np.log(old))
    # the roofline: max(FLOPs at the weights' rate, bytes) of the whole layer, as it was
    f = _prefill(4096.0)
    for model, bits in ((llama, 16), (allfp8, 8), (llama, 8), (llama, 4)):
        rf = RooflineCostModel.from_specs(H100, model, weight_bits=bits)
        assert getattr(rf, "unconverted_attention", 0.0) == 0.0
        params, width = rf._linear_params_per_layer, (
            2 * rf.hidden_size + (rf.num_heads + 2 * rf.num_kv_heads) * rf.head_dim
            + 3 * rf.intermediate_size)
        old = 32 * np.maximum(2.0 * params * f.prefill_tokens / rf._gemm_flops_per_s,
                              (params * rf._weight_bytes_per_param
                               + f.prefill_tokens * 2.0 * width) / rf._bw)
        assert np.array_equal(rf.breakdown(f)["linear"], old)


@pytest.mark.parametrize("mode", ["auto", "roofline"])
def test_the_physical_limit_stays_below_a_prefill_heavy_prediction(monkeypatch, tmp_path, mode):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    meta = get_model("meta-llama/Llama-3.1-405B-Instruct-FP8")
    w = Workload(prompt_tokens=np.full(64, 6000), output_tokens=np.full(64, 8))
    cfg = ServingConfig(gpu="H100", tp=8, weight_bits=8)
    res = simulate(w, meta, H100, cfg, cost_model_for(meta, mode=mode)(H100, cfg), startup_s=0)
    assert res.schedule_lower_bound_s < res.schedule_s
