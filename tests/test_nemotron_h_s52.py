"""Stop 52 (helper N): the dense Nemotron-H family (NemotronHForCausalLM: 'M' Mamba2, '*'
attention and '-' MLP blocks, one sublayer each) priced on vLLM V1 as a Mamba2 hybrid; the MoE
Nemotron-3 ('E' blocks) refused in one line."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest

from tuner.core.arch_support import release_refusal
from tuner.core.catalog import config_notes, get_model, load_gpus, model_from_config_dict
from tuner.core.config import ServingConfig
from tuner.core.errors import TunerError
from tuner.core.memory import hybrid_layout
from tuner.core.workload import Workload
from tuner.predictors.sources import resolve_cost_model
from tuner.sim.simulator import simulate

# nvidia/NVIDIA-Nemotron-Nano-9B-v2's shape (56 blocks: 27 Mamba2, 4 attention, 25 MLP; 40
# heads of 128 although 4480 / 40 is 112), as public code quotes its config.json
NANO_9B_V2 = {
    "architectures": ["NemotronHForCausalLM"], "model_type": "nemotron_h",
    "num_hidden_layers": 56, "hidden_size": 4480, "intermediate_size": 15680,
    "num_attention_heads": 40, "num_key_value_heads": 8, "head_dim": 128,
    "vocab_size": 131072, "max_position_embeddings": 131072, "mlp_hidden_act": "relu2",
    "hybrid_override_pattern": "M-M-M-MM-M-M-M*-M-M-M*-M-M-M-M*-M-M-M-M*-M-MM-M-M-M-M-M-",
    "mamba_num_heads": 128, "mamba_head_dim": 80, "n_groups": 8, "ssm_state_size": 128,
    "conv_kernel": 4, "tie_word_embeddings": False,
}


def spec(cfg):
    return model_from_config_dict(copy.deepcopy(cfg), where="c.json", name="n", source="test")


@pytest.fixture(scope="module")
def h8b():
    return get_model("nemotron-h-8b-base-8k")


def test_catalog_entry_is_the_model_card(h8b):
    h = 4096
    # one layer a mixer block: 24 Mamba2 + 4 attention; the 24 MLP blocks spread over them
    assert (h8b.num_layers, h8b.linear_attention_layers, h8b.num_kv_layers) == (28, 24, 4)
    assert h8b.is_mamba2 and not h8b.is_moe and h8b.head_dim == 128
    assert 28 * h8b.dense_mlp_params == 24 * 2 * h * 21504  # up + down of 24 blocks
    mamba = h * (2 * 8192 + 2 * 8 * 128 + 128) + (8192 + 2 * 8 * 128) * 4 + 8192 * h
    attn = h * 32 * 128 * 2 + 2 * h * 8 * 128
    assert h8b.linear_params_total == 4 * attn + 24 * mamba + 24 * 2 * h * 21504
    assert abs(h8b.num_params / 8e9 - 1) < 0.02  # the card's "8B" (tuner: 8.10e9)
    assert h8b.kv_bytes_per_token(16) == 4 * 8 * 256 * 2  # only the attention blocks


def test_state_and_raised_block_as_vllm_sizes_them(h8b):
    # mamba2_state_shape: conv (8192 + 2 x 8 x 128) x 3, temporal 128 x 64 x 128, 2 bytes
    state = ((8192 + 2 * 8 * 128) * 3 + 128 * 64 * 128) * 2
    assert h8b.linear_state_bytes_per_layer_rank(1) == state
    lay = hybrid_layout(h8b, ServingConfig(gpu="H100", tp=1))
    page_token = 2 * 8 * 128 * 2
    assert lay.block_size_tokens == 16 * -(-state // (16 * page_token)) == 528
    assert (lay.group_layers, lay.attention_groups, lay.state_groups) == (4, 1, 6)
    assert lay.state_bytes_per_request == 24 * state


def test_nano_v2_heads_widths_and_counts():
    m = spec(NANO_9B_V2)
    assert (m.num_layers, m.linear_attention_layers, m.num_kv_layers) == (31, 27, 4)
    assert m.head_dim == 128 and m.linear_value_head_dim == 80
    assert m.intermediate_size == round(2 * 15680 * 25 / (3 * 31))
    # fewer than 0.01 % off the 25 up + down projections after rounding
    assert abs(31 * m.dense_mlp_params / (25 * 2 * 4480 * 15680) - 1) < 1e-4
    # a silent head_dim: the remote-code attention_head_dim, not hidden / heads
    cfg = {k: v for k, v in NANO_9B_V2.items() if k != "head_dim"}
    assert spec({**cfg, "attention_head_dim": 128}).head_dim == 128


def test_layers_block_type_spelling_and_ssm_dtype():
    kinds = {"M": "mamba", "*": "attention", "-": "mlp"}
    blocks = [kinds[c] for c in NANO_9B_V2["hybrid_override_pattern"]]
    cfg = {k: v for k, v in NANO_9B_V2.items() if k != "hybrid_override_pattern"}
    m = spec({**cfg, "layers_block_type": blocks})
    assert m == spec(NANO_9B_V2)
    assert spec({**NANO_9B_V2, "mamba_ssm_cache_dtype": "float32"}).linear_ssm_state_bits == 32
    assert m.linear_ssm_state_bits == 16


@pytest.mark.parametrize("change, words", [
    ({"hybrid_override_pattern": "MEM*" * 14, "n_routed_experts": 128,
      "num_experts_per_tok": 6}, "MoE blocks"),
    ({"hybrid_override_pattern": "M-M*" * 13}, "52 blocks"),
    ({"hybrid_override_pattern": "M*" * 28}, "0 MLP"),
    ({"hybrid_override_pattern": "M-MX" * 14}, "X"),
])
def test_what_is_not_priced_is_refused_in_one_line(change, words):
    with pytest.raises(TunerError, match=words) as err:
        spec({**NANO_9B_V2, **change})
    assert "\n" not in str(err.value)


def test_note_says_how_the_blocks_are_priced():
    notes = " ".join(config_notes(NANO_9B_V2))
    assert "27 Mamba2 and 4 attention blocks" in notes and "25 MLP blocks" in notes
    assert "ESTIMATE" in notes and "not one tuner knows" not in notes


def test_release_floor_is_the_wheel_registry(h8b):
    assert release_refusal(h8b, "0.9.0") and "0.9.1" in release_refusal(h8b, "0.9.0")
    assert release_refusal(h8b, "0.9.1") is None


def test_simulation_runs_and_pages_the_state(h8b):
    gpu = load_gpus()["H100"]
    cfg = ServingConfig(gpu="H100", tp=1, max_running=32)
    job = Workload(prompt_tokens=np.full(48, 800, dtype=np.int64),
                   output_tokens=np.full(48, 50, dtype=np.int64))
    cm = resolve_cost_model(h8b, gpu, cfg)
    assert "24 Mamba2 layers" in cm.provenance.detail
    r = simulate(job, h8b, gpu, cfg, cm)
    assert r.makespan_s > 0 and r.memory.state_blocks_per_request == 6


def test_shipped_config_is_the_public_one():
    from tuner.core.catalog import _catalog_config
    raw, _ = _catalog_config("nemotron-h-8b-base-8k.json")
    assert json.loads(json.dumps(raw))["hybrid_override_pattern"].count("*") == 4
