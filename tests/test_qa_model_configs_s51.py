"""QA s51: config.json files of architectures people run now, read as vLLM reads them.

Each config is the checkpoint's decoder fields (transformers' config class defaults where
they equal the checkpoint, the Hub file's values where they do not: GLM-4.5's head_dim 128,
Qwen3-30B-A3B's 48 layers). Reference sizes are the model cards' (rounded there), checked
against a count by hand from the module shapes in the comments; KV bytes are vLLM's KV spec
(K and V of every KV head, MLA's 576-wide latent; Llama-4's ChunkedLocalAttentionSpec).

Fixed here: ERNIE-4.5-MoE's moe_* keys (read as a 3.35 B dense model), Gemma-3n (a
misleading "intermediate_size must be a positive integer"), Llama-4's chunked attention (priced
as full attention although vLLM 0.14+ frees the blocks before a chunk; a warning for older
releases), MiniMax-M2 (flagged as unknown though its shape is right), transformers 5's
rope_parameters (the YaRN context and Llama 3.1's RoPE floor missed), a MiniMax-Text-01
lightning-attention config priced as softmax attention on every layer, and Qwen2.5-VL's
vision encoder size (temporal patch and merger left out).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tuner.core.arch_support import (
    CHUNKED_KV_FREED_SINCE,
    ROPE_LLAMA3,
    check_engine_runs,
    model_architecture,
    release_refusal,
)
from tuner.core.catalog import config_notes, model_from_config_dict, model_from_hf_config
from tuner.core.errors import TunerError
from tuner.core.memory import kv_bytes_per_request

REPO = Path(__file__).resolve().parents[1]


def spec(cfg: dict, name: str = "x"):
    return model_from_config_dict(cfg, where=name, name=name, source=name)


# ERNIE-4.5-21B-A3B (baidu/ERNIE-4.5-21B-A3B-PT config.json)
ERNIE_21B = {
    "architectures": ["Ernie4_5_MoeForCausalLM"], "model_type": "ernie4_5_moe",
    "hidden_size": 2560, "intermediate_size": 12288, "num_hidden_layers": 28,
    "num_attention_heads": 20, "num_key_value_heads": 4, "vocab_size": 103424,
    "max_position_embeddings": 131072, "tie_word_embeddings": True, "hidden_act": "silu",
    "moe_num_experts": 64, "moe_k": 6, "moe_intermediate_size": 1536,
    "moe_num_shared_experts": 2, "moe_layer_start_index": 1, "moe_layer_end_index": 27,
    "moe_layer_interval": 1, "torch_dtype": "bfloat16",
}
# ERNIE-4.5-300B-A47B: 3 dense layers, 51 MoE layers of 64 experts, top-8, no shared expert
ERNIE_300B = {**ERNIE_21B, "hidden_size": 8192, "num_hidden_layers": 54,
              "num_attention_heads": 64, "num_key_value_heads": 8, "intermediate_size": 28672,
              "moe_intermediate_size": 3584, "moe_k": 8, "moe_layer_start_index": 3,
              "moe_layer_end_index": 53, "moe_num_shared_experts": 0,
              "tie_word_embeddings": False}
# MiniMax-M2 (MiniMaxAI/MiniMax-M2): 62 layers of full attention + 256 experts, top-8
MINIMAX_M2 = {
    "architectures": ["MiniMaxM2ForCausalLM"], "model_type": "minimax_m2", "hidden_size": 3072,
    "intermediate_size": 1536, "num_hidden_layers": 62, "num_attention_heads": 48,
    "num_key_value_heads": 8, "head_dim": 128, "rotary_dim": 64, "num_local_experts": 256,
    "num_experts_per_tok": 8, "vocab_size": 200064, "max_position_embeddings": 196608,
    "tie_word_embeddings": False, "use_qk_norm": True, "torch_dtype": "bfloat16",
}
# GLM-4.5-Air (zai-org/GLM-4.5-Air): Glm4MoeConfig's defaults plus the file's head_dim 128
GLM45_AIR = {
    "architectures": ["Glm4MoeForCausalLM"], "model_type": "glm4_moe", "hidden_size": 4096,
    "intermediate_size": 10944, "num_hidden_layers": 46, "num_attention_heads": 96,
    "num_key_value_heads": 8, "head_dim": 128, "partial_rotary_factor": 0.5,
    "n_routed_experts": 128, "n_shared_experts": 1, "num_experts_per_tok": 8,
    "moe_intermediate_size": 1408, "first_k_dense_replace": 1, "num_nextn_predict_layers": 1,
    "vocab_size": 151552, "max_position_embeddings": 131072, "attention_bias": True,
    "tie_word_embeddings": False, "torch_dtype": "bfloat16",
}
GLM45 = {**GLM45_AIR, "hidden_size": 5120, "num_hidden_layers": 92, "intermediate_size": 12288,
         "moe_intermediate_size": 1536, "n_routed_experts": 160, "first_k_dense_replace": 3,
         "use_qk_norm": True}
# Qwen3-30B-A3B
QWEN3_30B = {
    "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "hidden_size": 2048,
    "intermediate_size": 6144, "num_hidden_layers": 48, "num_attention_heads": 32,
    "num_key_value_heads": 4, "head_dim": 128, "num_experts": 128, "num_experts_per_tok": 8,
    "moe_intermediate_size": 768, "decoder_sparse_step": 1, "mlp_only_layers": [],
    "vocab_size": 151936, "max_position_embeddings": 40960, "tie_word_embeddings": False,
}
# Phi-4-mini-instruct: partial rotary (0.75) changes neither parameters nor KV
PHI4_MINI = {
    "architectures": ["Phi3ForCausalLM"], "model_type": "phi3", "hidden_size": 3072,
    "intermediate_size": 8192, "num_hidden_layers": 32, "num_attention_heads": 24,
    "num_key_value_heads": 8, "vocab_size": 200064, "tie_word_embeddings": True,
    "partial_rotary_factor": 0.75, "max_position_embeddings": 131072,
}
# SmolLM3-3B: no_rope_layers drop RoPE on every 4th layer; each layer still keeps KV
SMOLLM3 = {
    "architectures": ["SmolLM3ForCausalLM"], "model_type": "smollm3", "hidden_size": 2048,
    "intermediate_size": 11008, "num_hidden_layers": 36, "num_attention_heads": 16,
    "num_key_value_heads": 4, "vocab_size": 128256, "tie_word_embeddings": True,
    "max_position_embeddings": 65536, "use_sliding_window": False, "sliding_window": None,
    "no_rope_layers": [1, 1, 1, 0] * 9,
}


def _scout(**text) -> dict:
    """Llama-4-Scout-17B-16E: 48 layers, 3 of every 4 chunked (8,192), the 4th NoPE + global."""
    t = {"model_type": "llama4_text", "hidden_size": 5120, "intermediate_size": 8192,
         "intermediate_size_mlp": 16384, "num_hidden_layers": 48, "num_attention_heads": 40,
         "num_key_value_heads": 8, "head_dim": 128, "num_local_experts": 16,
         "num_experts_per_tok": 1, "interleave_moe_layer_step": 1, "vocab_size": 202048,
         "attention_chunk_size": 8192, "max_position_embeddings": 10485760,
         "no_rope_layers": [], "tie_word_embeddings": False, **text}
    return {"architectures": ["Llama4ForConditionalGeneration"], "model_type": "llama4",
            "text_config": t,
            "vision_config": {"model_type": "llama4_vision_model", "hidden_size": 1408,
                              "intermediate_size": 5632, "num_hidden_layers": 34,
                              "patch_size": 14, "hidden_act": "gelu"}}


# (config, reference total parameters (card), reference active, KV bytes per token, 16-bit)
# hand counts: ERNIE-21B 28 x 15.7 M attention + 94.4 M dense + 27 x (64 x 11.8 M + 23.6 M
# shared) + 0.26 B tied embedding = 21.83 B; MiniMax-M2 62 x (44.0 M + 256 x 14.16 M) +
# 2 x 0.61 B = 228.7 B (the card's 230 B rounds it; its MTP modules vLLM does not load)
CASES = {
    "ernie-4.5-21b-a3b": (ERNIE_21B, 21.83e9, 3.35e9, 28 * 4 * 128 * 2 * 2),
    "ernie-4.5-300b-a47b": (ERNIE_300B, 300e9, 47e9 + 2 * 103424 * 8192, 54 * 8 * 128 * 4),
    "minimax-m2": (MINIMAX_M2, 230e9, 11.0e9, 62 * 8 * 128 * 4),
    # GLM-4.5(-Air): the cards' active figures leave the embedding and LM head out
    "glm-4.5-air": (GLM45_AIR, 106e9, 12e9 + 2 * 151552 * 4096, 46 * 8 * 128 * 4),
    "glm-4.5": (GLM45, 355e9, 32e9 + 2 * 151552 * 5120, 92 * 8 * 128 * 4),
    "qwen3-30b-a3b": (QWEN3_30B, 30.5e9, 3.3e9, 48 * 4 * 128 * 4),
    "phi-4-mini": (PHI4_MINI, 3.84e9, 3.84e9, 32 * 8 * 128 * 4),
    "smollm3-3b": (SMOLLM3, 3.08e9, 3.08e9, 36 * 4 * 128 * 4),
    # Scout's 109 B includes its ~0.8 B vision encoder, which the note names
    "llama-4-scout": (_scout(), 109e9 - 0.85e9, 17.2e9, 48 * 8 * 128 * 4),
}


@pytest.mark.parametrize("name", CASES)
def test_sizes_match_the_checkpoints(name):
    cfg, total, active, kv = CASES[name]
    m = spec(cfg, name)
    assert abs(m.num_params / total - 1) < 0.012, m.num_params
    assert abs(m.active_params_per_token / active - 1) < 0.03, m.active_params_per_token
    assert m.kv_bytes_per_token(16) == kv


def test_ernie_moe_read_as_moe():
    m = spec(ERNIE_21B)
    assert (m.num_experts, m.experts_per_token, m.num_moe_layers) == (64, 6, 27)
    assert (m.num_shared_experts, m.shared_expert_intermediate_size) == (2, 2 * 1536)
    # transformers' default end index -1 is the last layer (Ernie4_5_MoeConfig)
    assert spec({**ERNIE_21B, "moe_layer_end_index": -1}).num_moe_layers == 27
    assert spec({**ERNIE_21B, "moe_layer_interval": 2}).num_moe_layers == 14
    assert spec(ERNIE_300B).num_moe_layers == 51


def test_minimax_m2_is_a_known_architecture():
    assert config_notes(MINIMAX_M2) == []


def test_minimax_lightning_attention_refused():
    cfg = {"architectures": ["MiniMaxText01ForCausalLM"], "model_type": "minimax_text_01",
           "hidden_size": 6144, "intermediate_size": 9216, "num_hidden_layers": 8,
           "num_attention_heads": 64, "num_key_value_heads": 8, "vocab_size": 200064,
           "attn_type_list": [0, 0, 0, 0, 0, 0, 0, 1]}
    with pytest.raises(TunerError, match=r"only 1 of its 8 layers are attention \(the others "
                                         r"lightning"):
        spec(cfg)


GEMMA3N = {
    "architectures": ["Gemma3nForConditionalGeneration"], "model_type": "gemma3n",
    "text_config": {"model_type": "gemma3n_text", "hidden_size": 2048, "num_hidden_layers": 35,
                    "intermediate_size": [16384] * 35, "num_attention_heads": 8,
                    "num_key_value_heads": 2, "head_dim": 256, "vocab_size": 262400,
                    "num_kv_shared_layers": 15, "hidden_size_per_layer_input": 256},
    "vision_config": {"model_type": "gemma3n_vision"},
    "audio_config": {"model_type": "gemma3n_audio"},
}


def test_gemma3n_refused_with_the_reason(tmp_path):
    with pytest.raises(TunerError, match="Gemma3nForConditionalGeneration is not supported: "
                                         "its per-layer embeddings"):
        spec(GEMMA3N)
    # a text-only Gemma-3n config says so too, not "intermediate_size must be ..."
    text = {"architectures": ["Gemma3nForCausalLM"], **GEMMA3N["text_config"],
            "intermediate_size": 16384}
    with pytest.raises(TunerError, match="is not supported"):
        spec(text)
    (tmp_path / "config.json").write_text(json.dumps(GEMMA3N))
    r = subprocess.run([sys.executable, "-m", "tuner.cli", "models", "-m", str(tmp_path)],
                       capture_output=True, text=True, timeout=120, cwd=REPO)
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert "is not supported" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_per_layer_widths_refused():
    cfg = {**SMOLLM3, "architectures": ["OpenELMForCausalLM"], "model_type": "openelm",
           "intermediate_size": [4096] * 36}
    with pytest.raises(TunerError, match="intermediate_size differs by layer"):
        spec(cfg)


@pytest.mark.parametrize("text", [
    {},  # no_rope_layers [] -> transformers' default: every 4th layer NoPE
    {"no_rope_layers": [1, 1, 1, 0] * 12},
    {"layer_types": ["chunked_attention"] * 3 * 1 + ["full_attention"] + (
        ["chunked_attention"] * 3 + ["full_attention"]) * 11},
])
def test_llama4_chunked_layers_keep_at_most_a_chunk(text):
    m = spec(_scout(**text))
    assert (m.sliding_window, m.num_window_layers) == (8192, 36)
    per_layer = 8 * 128 * 2 * 2
    # vLLM 0.14+: the 12 global layers keep 32k tokens, the 36 chunked at most 8,192
    assert kv_bytes_per_request(m, 32768, 16) == per_layer * (12 * 32768 + 36 * 8192)
    (note,) = [n for n in config_notes(_scout(**text)) if "chunked" in n]
    assert "8,192-token chunks on 36 of 48 layers" in note and "before 0.14" in note


def test_llama4_old_release_warns_about_the_kv_it_keeps(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(_scout()))
    m = model_from_hf_config(tmp_path)
    note = check_engine_runs(m, "0.11.0")
    assert note and "vLLM before 0.14.0 keeps every token" in note
    assert check_engine_runs(m, CHUNKED_KV_FREED_SINCE) is None
    assert check_engine_runs(m, None) is None


def test_transformers5_rope_parameters_read():
    # Qwen3 as transformers 5 writes it: the YaRN fields under rope_parameters
    cfg = {**QWEN3_30B, "rope_parameters": {"rope_type": "yarn", "factor": 4.0,
                                            "original_max_position_embeddings": 32768,
                                            "rope_theta": 1e6}}
    assert spec(cfg).max_position == 131072


def test_transformers5_llama31_rope_floor(tmp_path):
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
           "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
           "num_key_value_heads": 8, "vocab_size": 128256, "max_position_embeddings": 131072,
           "rope_parameters": {"rope_type": "llama3", "factor": 8.0, "rope_theta": 500000.0,
                               "original_max_position_embeddings": 8192}}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    m = model_from_hf_config(tmp_path)
    assert ROPE_LLAMA3 in model_architecture(m).features
    assert "0.5.3.post1" in release_refusal(m, "0.5.3")


def test_qwen25vl_vision_note_counts_patch_merger():
    # Qwen2.5-VL-7B: 7.62 B decoder + 0.68 B vision = the card's 8.29 B
    text = {"hidden_size": 3584, "num_hidden_layers": 28, "num_attention_heads": 28,
            "num_key_value_heads": 4, "intermediate_size": 18944, "vocab_size": 152064,
            "max_position_embeddings": 128000, "tie_word_embeddings": False}
    cfg = {"architectures": ["Qwen2_5_VLForConditionalGeneration"], "model_type": "qwen2_5_vl",
           **text, "vision_config": {"depth": 32, "hidden_size": 1280, "intermediate_size": 3420,
                                     "hidden_act": "silu", "patch_size": 14, "in_channels": 3,
                                     "temporal_patch_size": 2, "spatial_merge_size": 2,
                                     "out_hidden_size": 3584}}
    m = spec(cfg)
    assert abs(m.num_params / 7.615e9 - 1) < 0.005
    (note,) = [n for n in config_notes(cfg) if "vision encoder" in n]
    assert "~0.68 B params" in note
