"""QA pass over the hybrid models (Qwen3-Next / Qwen3.5 Gated DeltaNet, Granite-4.0-H Mamba2):
the physical limit stays below every prediction and the memory plan within the GPU for the
hybrids (tests/test_lower_bound.py samples all catalog models, so a hybrid is rarely drawn),
vLLM's raised block and state bytes by hand, and the notes `tuner models` prints."""

from __future__ import annotations

import copy

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tuner.core.catalog import (
    _catalog_config,
    config_notes,
    load_gpus,
    load_models,
    model_from_config_dict,
)
from tuner.core.config import ServingConfig
from tuner.core.memory import hybrid_layout
from tuner.core.workload import Workload
from tuner.predictors.sources import cost_model_for
from tuner.sim.simulator import InfeasibleConfig, simulate

MODELS = load_models()
GPUS = load_gpus()

_TYPES = (["linear_attention"] * 3 + ["full_attention"]) * 8
#: Qwen3.5-9B's text config (public shapes), the multimodal checkpoint's layout
QWEN35_9B = {
    "architectures": ["Qwen3_5ForConditionalGeneration"], "model_type": "qwen3_5",
    "text_config": {
        "model_type": "qwen3_5_text", "hidden_size": 4096, "num_hidden_layers": 32,
        "layer_types": _TYPES, "full_attention_interval": 4, "head_dim": 256,
        "num_attention_heads": 16, "num_key_value_heads": 4, "linear_num_key_heads": 16,
        "linear_num_value_heads": 32, "linear_key_head_dim": 128, "linear_value_head_dim": 128,
        "linear_conv_kernel_dim": 4, "intermediate_size": 12288, "vocab_size": 248320,
        "max_position_embeddings": 262144, "mamba_ssm_dtype": "float32",
        "attn_output_gate": True, "hidden_act": "silu", "dtype": "bfloat16",
        "tie_word_embeddings": False},
    "vision_config": {"depth": 27, "hidden_size": 1152, "intermediate_size": 4304,
                      "num_heads": 16, "patch_size": 16, "spatial_merge_size": 2,
                      "temporal_patch_size": 2, "out_hidden_size": 4096,
                      "hidden_act": "gelu_pytorch_tanh", "in_channels": 3},
}


def _qwen35():
    return model_from_config_dict(copy.deepcopy(QWEN35_9B), where="qwen3.5-9b.json",
                                  name="qwen3.5-9b", source="test")


HYBRIDS = {n: m for n, m in MODELS.items() if m.is_hybrid}
HYBRIDS["qwen3.5-9b"] = _qwen35()


def test_the_catalog_holds_both_hybrid_families():
    assert {"qwen3-next-80b-a3b", "granite-4.0-h-tiny"} <= set(HYBRIDS)
    assert HYBRIDS["granite-4.0-h-tiny"].is_mamba2


@settings(max_examples=60, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(model=st.sampled_from(sorted(HYBRIDS)), gpu=st.sampled_from(sorted(GPUS)),
       tp=st.sampled_from([1, 2, 4, 8]), dp=st.sampled_from([1, 2]),
       weight_bits=st.sampled_from([16, 8]), kv_bits=st.sampled_from([16, 8]),
       n=st.integers(1, 60), seed=st.integers(0, 2**16))
def test_no_hybrid_prediction_beats_the_physical_limit(model, gpu, tp, dp, weight_bits,
                                                       kv_bits, n, seed):
    m, g = HYBRIDS[model], GPUS[gpu]
    rng = np.random.default_rng(seed)
    w = Workload(prompt_tokens=rng.integers(1, 3000, n), output_tokens=rng.integers(1, 600, n))
    try:
        cfg = ServingConfig(gpu=gpu, tp=tp, dp=dp, weight_bits=weight_bits, kv_bits=kv_bits)
        res = simulate(w, m, g, cfg, cost_model_for(m)(g, cfg), startup_s=0)
    except InfeasibleConfig:
        return
    assert res.schedule_lower_bound_s <= res.schedule_s * (1 + 1e-9), (
        res.schedule_lower_bound_s, res.schedule_s)
    plan = res.memory
    lay = hybrid_layout(m, cfg)
    # the pool (whole blocks of every attention group) plus what the plan takes before it stays
    # within the usable memory
    pool = plan.kv_capacity_blocks * lay.attention_groups * lay.block_bytes
    used = plan.weight_bytes + plan.activation_bytes + plan.runtime_overhead_bytes + pool
    assert used <= plan.usable_bytes * (1 + 1e-9)
    assert plan.kv_capacity_tokens == plan.kv_capacity_blocks * plan.block_size_tokens


@pytest.mark.parametrize("name, tp, block", [
    # vLLM logs "Setting attention block size to 544 tokens" for Qwen3-Next at TP 2 (its
    # padding 1.49 %), 272 at TP 4; Qwen3.5-9B's fp32 temporal state: 528 at TP 1
    ("qwen3-next-80b-a3b", 1, 544), ("qwen3-next-80b-a3b", 2, 544),
    ("qwen3-next-80b-a3b", 4, 272), ("qwen3.5-9b", 1, 528), ("granite-4.0-h-tiny", 1, 400),
])
def test_the_raised_block_and_state_bytes_by_hand(name, tp, block):
    m = HYBRIDS[name]
    cfg = ServingConfig(gpu="H100", tp=tp)
    kh, vh = m.linear_num_key_heads, m.linear_num_value_heads
    dk, dv = m.linear_key_head_dim, m.linear_value_head_dim
    ssm_bytes = 4 if name == "qwen3.5-9b" else 2
    if m.is_mamba2:  # conv: intermediate + 2 x groups x d_state (one group, replicated)
        conv = (vh * dv / tp + 2 * max(kh, tp) / tp * dk) * (m.linear_conv_kernel_dim - 1) * 2
    else:  # vLLM: (2 x key heads x key dim + value heads x value dim) / tp x (kernel - 1)
        conv = (2 * kh * dk + vh * dv) / tp * (m.linear_conv_kernel_dim - 1) * 2
    state = conv + vh / tp * dk * dv * ssm_bytes
    assert m.linear_state_bytes_per_layer_rank(tp) == pytest.approx(state)
    kv_heads = max(m.num_kv_heads // tp, 1)
    page_token = 2 * kv_heads * m.head_dim * 2
    assert block == 16 * -(-state // (16 * page_token))
    assert hybrid_layout(m, cfg).block_size_tokens == block


def test_granite_note_names_its_mamba2_layers():
    """`tuner models -m granite-4.0-h-tiny` said its architecture "is not one tuner knows;
    priced as a Llama-style decoder (attention and a gated MLP on every layer)", though tuner
    prices it as a Mamba2 hybrid."""
    raw, _ = _catalog_config("granite-4.0-h-tiny.json")
    notes = " ".join(config_notes(raw))
    assert "not one tuner knows" not in notes
    assert "Llama-style" not in notes
    assert "Mamba2" in notes and "36 of its 40 layers" in notes


def _shared_prefix_workload(n: int = 40) -> Workload:
    return Workload(prompt_tokens=np.full(n, 1500), output_tokens=np.full(n, 50),
                    prefix_ids=np.zeros(n, dtype=np.int64), prefix_tokens=np.full(n, 1200))


@pytest.mark.parametrize("version, cached", [("0.10.2", False), ("0.11.0", False),
                                             (None, True)])
def test_vllm_0_10_2_and_0_11_0_cache_no_prefix_of_a_hybrid(version, cached):
    """vLLM 0.10.2 / 0.11.0 log "Hybrid or mamba-based model detected: disabling prefix
    caching" for Qwen3-Next: `tuner simulate --engine-version 0.10.2` served 1,084,736 of
    examples/shared_system_prompt.jsonl's 1,396,493 prompt tokens from the prefix cache."""
    m, g = MODELS["qwen3-next-80b-a3b"], GPUS["H100"]
    cfg = ServingConfig(gpu="H100", tp=4)
    res = simulate(_shared_prefix_workload(), m, g, cfg, cost_model_for(m)(g, cfg),
                   startup_s=0, engine_version=version)
    assert (res.cached_prompt_tokens > 0) is cached
    # a model whose layers all attend keeps its cache on 0.10.2
    if version == "0.10.2":
        d = MODELS["qwen3-30b-a3b"]
        res = simulate(_shared_prefix_workload(), d, g, cfg, cost_model_for(d)(g, cfg),
                       startup_s=0, engine_version=version)
        assert res.cached_prompt_tokens > 0


@pytest.mark.parametrize("version, mixer_model, off", [
    ("0.11.0", "granite-4.0-h-tiny", True),    # every hybrid off
    ("0.11.1", "qwen3-next-80b-a3b", True),    # qwen3_next.py: no SupportsMambaPrefixCaching
    ("0.12.0", "qwen3-next-80b-a3b", True),
    ("0.12.0", "granite-4.0-h-tiny", False),   # granitemoehybrid.py supports it
    ("0.13.0", "qwen3-next-80b-a3b", False),   # no disabling branch from 0.13.0
    (None, "qwen3-next-80b-a3b", False),
])
def test_which_releases_cache_a_hybrids_prefixes(version, mixer_model, off):
    """Read in the wheels: 0.11.1 / 0.12.0 disable prefix caching for a hybrid class without
    SupportsMambaPrefixCaching (Qwen3-Next) and keep it for Granite-4.0-H; 0.13.0 keeps it."""
    from tuner.sim.simulator import hybrid_prefix_caching_off

    assert hybrid_prefix_caching_off(MODELS[mixer_model], "vllm", version) is off
    assert not hybrid_prefix_caching_off(MODELS["llama-3-8b"], "vllm", version)
