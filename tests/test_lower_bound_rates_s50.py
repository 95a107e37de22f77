"""The physical limit under FP8 weights counts each GEMM at the rate it runs at (issue #24,
stop 50): the checkpoint's 16-bit layers (modules_to_not_convert) and the LM head at the 16-bit
peak, the quantized GEMMs and the attention at the FP8 peak. Stop 49 priced all of them at the
FP8 peak: a valid bound, looser than it needs to be. It stays a lower bound of every prediction
(tests/test_lower_bound.py holds that for the catalog; here the checkpoints that keep layers at
16 bits)."""

from __future__ import annotations

import numpy as np
import pytest

from tuner.core.catalog import get_model, load_gpus, load_models
from tuner.core.config import ServingConfig
from tuner.core.workload import Workload
from tuner.predictors.opmath import unconverted_shares
from tuner.predictors.sources import cost_model_for
from tuner.sim.simulator import lower_bound_s, simulate

GPUS = load_gpus()
MODELS = load_models()


def _one_peak_bound(w: Workload, m, g, cfg) -> float:
    """Stop 49's compute term: every FLOP at one peak (FP8 under FP8 weights)."""
    p, d = w.prompt_tokens.astype(float), w.output_tokens.astype(float)
    attn = 2.0 * m.num_heads * (m.head_dim + m.value_head_dim) * m.num_layers
    flops = ((p + np.maximum(d - 1, 0)) * m.active_linear_params_total * 2
             + d * m.lm_head_params * 2 + 0.5 * p * p * attn).sum()
    peak = g.fp8_tflops * 1e12 if cfg.weight_bits == 8 and g.fp8_tflops else g.peak_flops
    return flops / (peak * cfg.num_gpus)


@pytest.fixture
def meta_405b_fp8(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    m = get_model("meta-llama/Llama-3.1-405B-Instruct-FP8")
    assert unconverted_shares(m, 8) != (0.0, 0.0)  # its first and last layers stay 16-bit
    return m


@pytest.mark.parametrize("gpu", ["H100", "H200"])
@pytest.mark.parametrize("mode", ["auto", "roofline"])
def test_the_16_bit_share_is_priced_at_the_16_bit_peak(meta_405b_fp8, gpu, mode):
    m, g = meta_405b_fp8, GPUS[gpu]
    # prefill-heavy, so that the compute term is the bound
    w = Workload(prompt_tokens=np.full(64, 6000), output_tokens=np.full(64, 8))
    cfg = ServingConfig(gpu=gpu, tp=8, weight_bits=8)
    bound = lower_bound_s(w, m, g, cfg)
    attn16, mlp16 = unconverted_shares(m, 8)
    p, d = 6000.0 * 64, 8.0 * 64
    through = p + 7.0 * 64
    gemm16 = (attn16 * m.num_layers * m.attention_params_per_layer
              + mlp16 * m.num_dense_layers * m.dense_mlp_params)
    pairs = 64 * 0.5 * 6000.0 ** 2 * 2.0 * m.num_heads * (m.head_dim + m.value_head_dim) \
        * m.num_layers
    fast = through * (m.active_linear_params_total - gemm16) * 2 + pairs
    slow = through * gemm16 * 2 + d * m.lm_head_params * 2
    assert bound == pytest.approx(fast / (g.fp8_tflops * 8e12) + slow / (g.bf16_tflops * 8e12),
                                  rel=1e-9)
    assert bound > _one_peak_bound(w, m, g, cfg) * 1.01  # tighter than stop 49's
    res = simulate(w, m, g, cfg, cost_model_for(m, mode=mode)(g, cfg), startup_s=0)
    assert res.schedule_lower_bound_s <= res.schedule_s


@pytest.mark.parametrize("model", ["llama-3-8b", "qwen2.5-72b", "mixtral-8x7b"])
def test_an_all_fp8_or_16_bit_model_only_moves_its_lm_head(model):
    """Without 16-bit layers only the LM head moves to the 16-bit peak under FP8; under
    16-bit weights the bound is stop 49's."""
    m, g = MODELS[model], GPUS["H100"]
    w = Workload(prompt_tokens=np.full(32, 4000), output_tokens=np.full(32, 4))
    for bits in (16, 8):
        cfg = ServingConfig(gpu="H100", tp=8, weight_bits=bits)
        head = (32 * 4 * m.lm_head_params * 2) / (cfg.num_gpus * 1e12)
        extra = head / g.bf16_tflops - head / g.fp8_tflops if bits == 8 else 0.0
        assert lower_bound_s(w, m, g, cfg) == pytest.approx(
            _one_peak_bound(w, m, g, cfg) + extra, rel=1e-9)
