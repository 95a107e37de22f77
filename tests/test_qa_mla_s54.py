"""QA of MLA / DeepSeek-style models as vLLM serves them (session 54, helper H8): what one
tensor-parallel rank really holds of an MLA model (vLLM's deepseek_v2.py replicates the q / kv
down-projection, the router and the sparse-attention indexer, and adds a 16-bit copy of
kv_b_proj for the absorbed decode), and the physical limit never above the prediction for MLA
plans on the GPUs these models run on."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tuner.core.catalog import GIB, get_model, load_gpus
from tuner.core.config import ServingConfig
from tuner.core.memory import mla_rank_extra_bytes, plan_memory, weight_bytes_per_rank
from tuner.core.workload import Workload
from tuner.predictors.sources import cost_model_for
from tuner.sim.simulator import InfeasibleConfig, simulate

GPUS = load_gpus()
FP8_BLOCK = 1.0 + 4.0 / (128 * 128)  # an FP8 weight and its share of the 128x128 block's scale


def _by_hand_extra_bytes(sparse: bool, tp: int) -> float:
    """DeepSeek-V3(.2)'s layers as vLLM 0.32's deepseek_v2.py builds them, per GPU at TP `tp`
    beyond 1/tp of the checkpoint: hidden 7168, q_lora 1536, kv_lora 512, rope 64, 128 heads of
    nope 128 / v 128, 61 layers of which 58 MoE with 256 experts."""
    fused_qkv_a = 7168 * (1536 + 512 + 64) * FP8_BLOCK * (1 - 1 / tp)  # disable_tp=True
    w_uk_w_uv = 512 * 128 * (128 + 128) * 2.0 / tp  # 16-bit copy of the rank's kv_b_proj
    router = 7168 * 256 * (2.0 - FP8_BLOCK / tp)  # GateLinear: replicated, no quant_config
    indexer = (1536 * 64 * 128 * FP8_BLOCK  # wq_b, ReplicatedLinear at FP8
               + 7168 * (128 + 64) * 2.0) if sparse else 0.0  # wk_weights_proj, 16-bit
    return 61 * (fused_qkv_a + w_uk_w_uv + indexer) + 58 * router


@pytest.mark.parametrize("name, sparse", [("deepseek-v3", False), ("deepseek-v3.2", True)])
@pytest.mark.parametrize("tp", [1, 4, 8])
def test_a_rank_holds_the_replicated_mla_layers(name, sparse, tp):
    m = get_model(name)
    cfg = ServingConfig(gpu="H200", tp=tp, weight_bits=8, block_size=64)
    extra = _by_hand_extra_bytes(sparse, tp)
    assert mla_rank_extra_bytes(m, cfg) == pytest.approx(extra, rel=1e-9)
    assert weight_bytes_per_rank(m, cfg) == pytest.approx(m.weight_bytes(8) / tp + extra,
                                                          rel=1e-9)
    # a pipeline stage holds its layers' share of them
    two = ServingConfig(gpu="H100", tp=tp, pp=2, weight_bits=8, block_size=64)
    assert mla_rank_extra_bytes(m, two) == pytest.approx(extra * 31 / 61, rel=1e-9)


def test_at_tp_8_a_v3_rank_holds_about_1_2_gib_more_and_v3_2_about_2():
    cfg = ServingConfig(gpu="H200", tp=8, weight_bits=8, block_size=64)
    v3, v32 = (mla_rank_extra_bytes(get_model(n), cfg) / GIB
               for n in ("deepseek-v3", "deepseek-v3.2"))
    assert 1.1 < v3 < 1.25 and 1.95 < v32 < 2.1
    # a GQA model holds its share alone
    assert mla_rank_extra_bytes(get_model("llama-3.1-70b"), cfg) == 0.0


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_the_kv_cache_gets_what_the_replicated_layers_leave(engine):
    """On 8 x RTX PRO 6000 DeepSeek-V3.2 (FP8) leaves a few GiB for the cache: the 2 GiB
    of replicated layers per GPU are most of it."""
    from tuner.core.sglang import plan_memory_sglang

    m, g = get_model("deepseek-v3.2"), GPUS["RTX-PRO-6000"]
    cfg = ServingConfig(gpu="RTX-PRO-6000", tp=8, weight_bits=8, kv_bits=8, engine=engine,
                        block_size=64 if engine == "vllm" else 1)
    plan = (plan_memory(m, g, cfg) if engine == "vllm" else plan_memory_sglang(m, g, cfg))
    share = m.weight_bytes(8) / 8
    assert plan.weight_bytes == pytest.approx(share + mla_rank_extra_bytes(m, cfg), rel=1e-9)
    assert plan.weight_bytes - share > 1.9 * GIB


# --- a quantized MLA checkpoint's 16-bit projections are counted ----------------------------

def test_an_int4_mla_checkpoint_keeps_its_ignored_projections_at_16_bits():
    """Kimi-K2-Thinking's INT4 checkpoint (compressed-tensors, group 32) quantizes only the
    routed experts: its ignore list keeps "re:.*self_attn.*" (the MLA projections),
    "re:.*shared_experts.*" and the dense MLPs at 16 bits. On DeepSeek-V3's shape (the same
    module names) those were counted at 4 bits: the MLA projections matched no module."""
    import json
    from pathlib import Path

    from tuner.core.catalog import model_from_config_dict

    cfg = json.loads((Path(__file__).parents[1] / "tuner" / "core" / "data" / "configs"
                      / "deepseek-v3.json").read_text())
    cfg["quantization_config"] = {
        "quant_method": "compressed-tensors", "format": "pack-quantized",
        "config_groups": {"group_0": {"targets": ["Linear"], "weights": {
            "num_bits": 4, "type": "int", "strategy": "group", "group_size": 32,
            "symmetric": True}}},
        "ignore": ["lm_head", "re:.*self_attn.*", "re:.*shared_experts.*",
                   "re:.*mlp\\.(gate|up|gate_up|down)_proj.*"]}
    m = model_from_config_dict(cfg, where="x", name="x", source="x")
    kept = (61 * m.attention_params_per_layer  # q_a, q_b, kv_a, kv_b, o of every layer
            + 58 * 3 * 7168 * 2048  # the MoE layers' shared expert
            + 3 * 3 * 7168 * 18432)  # the 3 dense layers' MLPs
    assert m.attention_params_per_layer == 7168 * 1536 + 1536 * 128 * 192 + 7168 * 576 \
        + 512 * 128 * 256 + 128 * 128 * 7168
    assert "attention projections 100.00 %, dense MLPs 100.00 %" in m.checkpoint_quantization
    share = kept / m.linear_params_total
    assert f"{100 * share:.2f} % of matmul weights at 16 bits" in m.checkpoint_quantization
    four_bit = 0.5 + 2.0 / 32  # an INT4 weight + its group's FP16 scale (symmetric)
    assert m.weight_bytes_per_param(4) == pytest.approx(
        (1 - share) * four_bit + share * 2.0, rel=1e-3)  # the share is printed to 0.01 %


# --- vLLM before 0.7.1 cached every head's K and V, not the latent ---------------------------

def test_vllm_before_0_7_1_caches_per_head_k_and_v():
    """Neural Magic's post on vLLM 0.7.1's MLA (2025-02-04) measures DeepSeek on 8 x H200:
    54,560 KV tokens under v0.7.0, 512,000 under v0.7.1. Before 0.7.1 DeepseekV2Attention
    caches 128 / tp heads of K (192) and V padded to 192; from 0.7.1 the 576-value latent."""
    from tuner.core.memory import kv_bytes_per_token_per_layer_rank

    m, g = get_model("deepseek-v3"), GPUS["H200"]
    assert kv_bytes_per_token_per_layer_rank(m, 16, 8, "0.7.0") == 16 * (192 + 192) * 2
    assert kv_bytes_per_token_per_layer_rank(m, 16, 8, "0.7.1") == 576 * 2
    assert kv_bytes_per_token_per_layer_rank(m, 16, 8) == 576 * 2  # the newest
    cfg = ServingConfig(gpu="H200", tp=8, weight_bits=8, block_size=64)
    old, new = (plan_memory(m, g, cfg, engine_version=v).kv_capacity_tokens
                for v in ("0.7.0", "0.7.1"))
    assert old == pytest.approx(54_560, rel=0.15)  # the published v0.7.0 capacity
    assert 9 < new / old < 11  # published: 9.4x (0.7.1 held more besides: see the report)


# --- the physical limit stays below the prediction for MLA plans --------------------------

MLA_PLANS = [  # (gpu, tp, pp): where DeepSeek's FP8 checkpoint fits, one machine or two
    ("H200", 8, 1), ("B200", 8, 1), ("B200", 4, 1), ("B300", 8, 1), ("GB200", 4, 2),
    ("H100", 8, 2), ("RTX-PRO-6000", 8, 1), ("H200", 4, 2), ("MI300X", 8, 1)]


@settings(derandomize=True, max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(model=st.sampled_from(["deepseek-v3", "deepseek-v3.2"]),
       plan=st.sampled_from(MLA_PLANS), kv_bits=st.sampled_from([16, 8]),
       ep=st.booleans(), dp=st.sampled_from([1, 2]),
       mode=st.sampled_from(["auto", "roofline"]), long=st.booleans(),
       n=st.integers(1, 60), seed=st.integers(0, 2**16))
def test_no_mla_prediction_beats_the_physical_limit(model, plan, kv_bits, ep, dp, mode, long,
                                                   n, seed):
    gpu, tp, pp = plan
    m, g = get_model(model), GPUS[gpu]
    rng = np.random.default_rng(seed)
    # long prompts: V3.2's indexer reads every cached key, its attention the top 2,048
    lo, hi = (8000, 30000) if long else (1, 3000)
    w = Workload(prompt_tokens=rng.integers(lo, hi, n), output_tokens=rng.integers(1, 900, n))
    try:
        cfg = ServingConfig(gpu=gpu, tp=tp, pp=pp, dp=dp, weight_bits=8, kv_bits=kv_bits,
                            expert_parallel=ep, block_size=64)
        res = simulate(w, m, g, cfg, cost_model_for(m, None, mode)(g, cfg), startup_s=0)
    except InfeasibleConfig:
        return
    assert res.schedule_lower_bound_s <= res.schedule_s * (1 + 1e-9), (
        res.schedule_lower_bound_s, res.schedule_s, res.provenance)
