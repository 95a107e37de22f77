"""Stop 52 (helper I): Mamba2 hybrids (Granite-4.0-H, GraniteMoeHybrid) priced on vLLM V1 as
the Gated DeltaNet family is; Bamba, Nemotron-H and the other Mamba hybrids stay refused."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from tuner.core.catalog import get_model, load_gpus, model_from_config_dict
from tuner.core.config import ServingConfig, check_model_config
from tuner.core.errors import TunerError
from tuner.core.memory import hybrid_layout
from tuner.core.workload import Workload
from tuner.predictors.features import BatchFeatures
from tuner.predictors.hybrid import ESTIMATED, linear_part, scan_seconds
from tuner.predictors.sources import resolve_cost_model
from tuner.sim.simulator import InfeasibleConfig, simulate

# Granite-4.0-H-Tiny's layer order: attention at 5, 15, 25, 35
LAYERS = ["attention" if i % 10 == 5 else "mamba" for i in range(40)]
GRANITE = {"architectures": ["GraniteMoeHybridForCausalLM"], "model_type": "granitemoehybrid",
           "num_hidden_layers": 40, "hidden_size": 1536, "num_attention_heads": 12,
           "num_key_value_heads": 4, "intermediate_size": 512, "shared_intermediate_size": 1024,
           "num_local_experts": 64, "num_experts_per_tok": 6, "vocab_size": 100352,
           "tie_word_embeddings": True, "mamba_n_heads": 48, "mamba_d_head": 64,
           "mamba_d_state": 128, "mamba_n_groups": 1, "mamba_d_conv": 4, "mamba_expand": 2,
           "layer_types": LAYERS}


def spec(cfg):
    return model_from_config_dict(cfg, where="c.json", name="g", source="test")


@pytest.fixture(scope="module")
def tiny():
    return get_model("granite-4.0-h-tiny")


def _vllm_mamba2_state_bytes(tp, n_groups=1, heads=48, head_dim=64, d_state=128, conv=4,
                             intermediate=3072):
    """vLLM's MambaStateShapeCalculator.mamba2_state_shape (0.32), both states at 2 bytes."""
    extra = 0 if n_groups % tp == 0 else tp - n_groups  # extra_groups_for_head_shards
    conv_dim = intermediate + 2 * (n_groups + extra) * d_state
    return ((conv_dim // tp) * (conv - 1) + (heads // tp) * head_dim * d_state) * 2


def test_catalog_entry_is_the_model_card(tiny):
    assert (tiny.num_layers, tiny.num_kv_layers, tiny.linear_attention_layers) == (40, 4, 36)
    assert tiny.is_mamba2 and tiny.linear_mixer_label == "Mamba2"
    assert (tiny.num_experts, tiny.experts_per_token, tiny.moe_intermediate_size) == (64, 6, 512)
    assert (tiny.num_shared_experts, tiny.shared_expert_intermediate_size) == (1, 1024)
    assert abs(tiny.num_params / 7e9 - 1) < 0.02  # the card's "7B"
    # only the 4 attention layers keep KV: 4 x 4 KV heads x (128 + 128) x 2 bytes
    assert tiny.kv_bytes_per_token(16) == 4 * 4 * 256 * 2


@pytest.mark.parametrize("tp", [1, 2, 4])
def test_state_bytes_as_vllm_sizes_them(tiny, tp):
    assert tiny.linear_state_bytes_per_layer_rank(tp) == _vllm_mamba2_state_bytes(tp)


def test_groups_replicated_only_where_tp_does_not_divide_them():
    m = spec({**GRANITE, "mamba_n_groups": 4})
    assert m.linear_state_bytes_per_layer_rank(2) == _vllm_mamba2_state_bytes(2, n_groups=4)
    assert m.linear_state_bytes_per_layer_rank(4) == _vllm_mamba2_state_bytes(4, n_groups=4)


def test_mixer_params_as_vllm_builds_them(tiny):
    # in_proj 1536 -> 2 x 3072 + 2 x 128 + 48, conv1d 3328 x 4, out_proj 3072 -> 1536
    assert tiny.linear_in_proj_outputs == 6448
    assert tiny.linear_mixer_params_per_layer == 1536 * 6448 + 3328 * 4 + 3072 * 1536


@pytest.mark.parametrize("kinds", [("attention", "mamba"), ("full_attention", "linear_attention")])
def test_layer_types_both_namings_and_auto_head_dim(kinds):
    attn, mamba = kinds
    cfg = {**GRANITE, "layer_types": [attn if t == "attention" else mamba for t in LAYERS],
           "mamba_d_head": "auto"}
    m = spec(cfg)
    assert (m.num_kv_layers, m.linear_attention_layers, m.linear_value_head_dim) == (4, 36, 64)


def test_all_attention_granite_is_a_plain_decoder():
    # Granite-4.0-Micro: a GraniteMoeHybrid config with mamba_* keys and only attention layers;
    # its MLP is the shared_mlp (vLLM granitemoehybrid.py)
    cfg = {**GRANITE, "layer_types": ["attention"] * 40, "num_local_experts": 0,
           "num_experts_per_tok": 0, "intermediate_size": 8192, "shared_intermediate_size": 8192}
    m = spec(cfg)
    assert not m.is_hybrid and not m.is_moe and m.intermediate_size == 8192


@pytest.mark.parametrize("change, words", [
    ({"layer_types": ["mamba"] * 40}, "no attention layer"),
    ({"layer_types": LAYERS[:39]}, "layer_types lists 39"),
    ({"layer_types": ["attention", "shared"] * 20}, "shared"),
    ({"mamba_d_head": 32}, "mamba_expand x hidden_size"),
    ({"layer_types": None}, "no layer_types"),
])
def test_bad_granite_configs_refused_in_one_line(change, words):
    with pytest.raises(TunerError, match=words) as err:
        spec({**GRANITE, **change})
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("cfg", [
    {**GRANITE, "architectures": ["BambaForCausalLM"], "model_type": "bamba",
     "layer_types": None, "attn_layer_indices": [5, 15, 25, 35], "num_local_experts": 0},
    {**GRANITE, "architectures": ["NemotronHForCausalLM"], "model_type": "nemotron_h",
     "layer_types": None, "num_local_experts": 0, "hybrid_override_pattern": "MEM*" * 10},
])
def test_other_mamba_hybrids_still_refused(cfg):
    with pytest.raises(TunerError, match="Mamba") as err:
        spec(cfg)
    assert "\n" not in str(err.value) and "not modelled" in str(err.value)


def test_tp_that_cannot_shard_the_mixer_is_refused(tiny):
    odd = dataclasses.replace(tiny, linear_num_key_heads=3)  # 3 groups: tp 2 divides neither
    assert odd.linear_tp_refusal(2) and tiny.linear_tp_refusal(2) is None
    with pytest.raises(TunerError, match="Mamba2"):
        check_model_config(ServingConfig(gpu="H100", tp=2), odd)


def test_linear_part_gemm_shapes_match_in_proj(tiny):
    lin = linear_part(tiny)
    assert lin.num_heads * lin.head_dim == 3072  # out_proj 3072 -> 1536
    # the fused QKV stand-in has in_proj's 6448 outputs to within one KV head pair
    assert abs((lin.num_heads + 2 * lin.num_kv_heads) * lin.head_dim - 6448) <= 2 * 64


def test_scan_roofline_is_the_ssd_not_the_delta_rule(tiny):
    gpu = load_gpus()["H100"]
    f = BatchFeatures.single(prefill_tokens=8192)
    ssd = scan_seconds(tiny, gpu, 1, f)[0]
    gdn = scan_seconds(dataclasses.replace(tiny, linear_mixer=""), gpu, 1, f)[0]
    # per head 4 x 128 x 64 + 2 x 256 x 64 (+ groups, conv) vs 6 x 128 x 64 + 2 x 64 x 192
    assert ssd > 0 and ssd != gdn


def test_cost_model_names_the_mixer_and_labels_the_estimate(tiny):
    gpu = load_gpus()["H100"]
    cm = resolve_cost_model(tiny, gpu, ServingConfig(gpu="H100", tp=1))
    f = BatchFeatures.single(decodes=64, kv_tokens=64 * 2000)
    parts = cm.breakdown(f)
    assert ESTIMATED in parts and parts[ESTIMATED][0] > 0
    assert "36 Mamba2 layers" in cm.provenance.detail and "ESTIMATE" in cm.provenance.detail
    assert "Gated DeltaNet" not in cm.provenance.detail
    assert np.isclose(cm.iteration_time_s(f)[0], sum(v[0] for v in parts.values()))


def _job(n=64):
    return Workload(prompt_tokens=np.full(n, 800, dtype=np.int64),
                    output_tokens=np.full(n, 50, dtype=np.int64))


def test_simulation_pages_the_mamba_state(tiny):
    gpu = load_gpus()["H100"]
    cfg = ServingConfig(gpu="H100", tp=1, max_running=32)
    lay = hybrid_layout(tiny, cfg)
    # 4 attention layers, 36 Mamba2: groups of 4, one attention group, 9 state groups
    assert (lay.group_layers, lay.attention_groups, lay.state_groups) == (4, 1, 9)
    assert lay.state_bytes_per_request == 36 * _vllm_mamba2_state_bytes(1)
    r = simulate(_job(), tiny, gpu, cfg, resolve_cost_model(tiny, gpu, cfg))
    assert r.makespan_s > 0 and r.memory.state_blocks_per_request == 9


def test_sglang_refusal_names_mamba2(tiny):
    gpu = load_gpus()["H100"]
    cm = resolve_cost_model(tiny, gpu, ServingConfig(gpu="H100", tp=1))
    with pytest.raises(InfeasibleConfig, match=r"hybrid \(Mamba2\) model"):
        simulate(_job(8), tiny, gpu, ServingConfig(gpu="H100", tp=1, engine="sglang"), cm)
