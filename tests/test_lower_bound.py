"""The physical limit T_o (BlendServe §2.3-2.4, tuner.sim.simulator.lower_bound_s) is a lower
bound: no prediction is ever faster than it, whatever the model (dense, MoE, MLA,
sliding-window), the GPU and its cost source (measured tables, transfer, roofline), the
parallelism and the precision (issue #24 item 3: DeepSeek's bound was above its prediction,
its MLA cache counted as 128 full K/V heads)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tuner.core.catalog import load_gpus, load_models
from tuner.core.config import ServingConfig
from tuner.core.workload import Workload
from tuner.predictors.sources import cost_model_for
from tuner.sim.simulator import InfeasibleConfig, lower_bound_s, simulate

MODELS = load_models()
GPUS = load_gpus()


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(model=st.sampled_from(sorted(MODELS)), gpu=st.sampled_from(sorted(GPUS)),
       tp=st.sampled_from([1, 2, 4, 8]), dp=st.sampled_from([1, 2]),
       weight_bits=st.sampled_from([16, 8]), kv_bits=st.sampled_from([16, 8]),
       ep=st.booleans(), n=st.integers(1, 120), seed=st.integers(0, 2**16))
def test_no_prediction_beats_the_physical_limit(model, gpu, tp, dp, weight_bits, kv_bits, ep,
                                                n, seed):
    m, g = MODELS[model], GPUS[gpu]
    rng = np.random.default_rng(seed)
    w = Workload(prompt_tokens=rng.integers(1, 3000, n), output_tokens=rng.integers(1, 900, n))
    try:
        cfg = ServingConfig(gpu=gpu, tp=tp, dp=dp, weight_bits=weight_bits, kv_bits=kv_bits,
                            expert_parallel=ep and m.is_moe)
        res = simulate(w, m, g, cfg, cost_model_for(m)(g, cfg), startup_s=0)
    except InfeasibleConfig:
        return
    assert res.schedule_lower_bound_s <= res.schedule_s * (1 + 1e-9), (
        res.schedule_lower_bound_s, res.schedule_s, res.provenance)


def test_the_mla_bound_reads_the_latent_cache():
    """DeepSeek-V3 caches one latent of kv_lora_rank + qk_rope_head_dim (576) per token and
    layer, not 128 heads of K and V: its memory term is that many bytes."""
    m, g = MODELS["deepseek-v3"], GPUS["H200"]
    assert m.is_mla
    w = Workload(prompt_tokens=np.array([1000]), output_tokens=np.array([101]))
    cfg = ServingConfig(gpu="H200", tp=8, weight_bits=8)
    # 100 decode steps reading 1001 .. 1100 tokens of 61 layers x 576 x 2 bytes
    kv = sum(range(1001, 1101)) * 61 * 576 * 2
    # 1100 tokens through the layers (the last sampled one is never fed back), logits for the
    # 101 sampled ones; a causal pair: QK^T over 128 heads of 192 and PV over 128 of 128
    # (the LM head stays 16-bit under FP8 weights: the 16-bit peak)
    flops = (1100 * m.active_linear_params_total * 2
             + 1000 ** 2 / 2 * 2 * 128 * (192 + 128) * m.num_layers)
    head = 101 * m.lm_head_params * 2
    expected = max(flops / (g.fp8_tflops * 1e12 * 8) + head / (g.bf16_tflops * 1e12 * 8),
                   kv / (g.hbm_bytes_per_s * 8))
    assert lower_bound_s(w, m, g, cfg) == pytest.approx(expected, rel=1e-9)
    # with 128 heads of 192 K + 128 V (the old count) the KV term alone would be ~70x
    assert kv * 70 < sum(range(1001, 1101)) * 61 * 128 * (192 + 128) * 2
