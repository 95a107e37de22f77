"""s51: a multimodal checkpoint's vision tower counts in the weights the engine loads.

vLLM builds the vision tower for a text-only job too (the 0.11 wheel's gemma3_mm.py makes
SiglipVisionModel unconditionally; from 0.15 `_mark_tower_model` skips it only when
--limit-mm-per-prompt zeroes every modality of the tower, which tuner's exports now set where
the release skips it: tests/test_vlm_text_only_s51.py; the vLLM plans here are pinned to
releases that build it), and SGLang likewise. tuner named the tower in a note only, so the
memory plan overstated a VLM's KV capacity by its bytes (Qwen2.5-VL-7B: ~0.68 B params,
1.3 GiB, ~24K tokens on an H100).
ModelSpec.vision_params now carries it, read from vision_config, counted at 16 bits in the
memory plan (vLLM and SGLang), the start-up load and `tuner models`' weights, never in the
parameters or the compute.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from tuner.cli.catalogs import _weights_text
from tuner.core import sglang as sg
from tuner.core.catalog import GIB, get_gpu, get_model, load_gpus, model_from_config_dict
from tuner.core.config import ServingConfig
from tuner.core.memory import plan_memory
from tuner.core.startup import startup_for

GPUS = load_gpus()
# releases that build the tower for a text-only job whatever the limits: Qwen2.5-VL's before
# 0.11, Gemma-3's through 0.14 (memory.VLLM_TOWER_SKIP)
BUILDS_QWEN_TOWER, BUILDS_GEMMA_TOWER = "0.10.2", "0.14.0"

# Qwen2.5-VL-7B-Instruct's config.json: its decoder and vision_config fields
QWEN25_VL_7B = {
    "architectures": ["Qwen2_5_VLForConditionalGeneration"], "model_type": "qwen2_5_vl",
    "hidden_size": 3584, "num_hidden_layers": 28, "num_attention_heads": 28,
    "num_key_value_heads": 4, "intermediate_size": 18944, "vocab_size": 152064,
    "max_position_embeddings": 128000, "tie_word_embeddings": False,
    "vision_config": {"depth": 32, "hidden_size": 1280, "intermediate_size": 3420,
                      "hidden_act": "silu", "patch_size": 14, "in_channels": 3,
                      "temporal_patch_size": 2, "spatial_merge_size": 2,
                      "out_hidden_size": 3584},
}
# SigLIP-400M as Gemma-3 ships it: 27 layers of 1152 wide, a 4304-wide GELU MLP, 14x14 patches
SIGLIP_PARAMS = 27 * (4 * 1152 ** 2 + 2 * 1152 * 4304) + 3 * 14 * 14 * 1152


def qwen_vl() -> object:
    return model_from_config_dict(QWEN25_VL_7B, where="config.json", name="qwen2.5-vl-7b",
                                  source="test")


def qwen_plan(m, gpu, cfg):
    return plan_memory(m, gpu, cfg, engine_version=BUILDS_QWEN_TOWER)


def text_only(m):
    return replace(m, vision_params=0)


def test_the_tower_is_read_from_vision_config_and_left_out_of_the_parameters():
    q = qwen_vl()
    assert q.vision_params / 1e9 == pytest.approx(0.68, abs=0.01)
    assert q.num_params / 7.615e9 == pytest.approx(1.0, abs=0.005)  # the text decoder's
    assert q.vision_weight_bytes == 2.0 * q.vision_params  # 16-bit
    g = get_model("gemma-3-27b")
    assert g.vision_params == SIGLIP_PARAMS
    assert g.num_params / 1e9 == pytest.approx(27.01, abs=0.01)
    no_tower = {k: v for k, v in QWEN25_VL_7B.items() if k != "vision_config"}
    assert model_from_config_dict(no_tower, where="c", name="t", source="t").vision_params == 0
    assert get_model("llama-3-8b").vision_params == 0


def test_the_vllm_plan_holds_the_tower_on_the_gpu_and_loses_its_kv():
    q, gpu = qwen_vl(), get_gpu("H100", GPUS)
    for tp in (1, 2):
        cfg = ServingConfig(gpu="H100", tp=tp)
        new, old = qwen_plan(q, gpu, cfg), qwen_plan(text_only(q), gpu, cfg)
        assert new.weight_bytes - old.weight_bytes == pytest.approx(q.vision_weight_bytes / tp)
        lost = old.kv_capacity_tokens - new.kv_capacity_tokens
        assert lost == pytest.approx(q.vision_weight_bytes / tp / new.kv_bytes_per_token,
                                     abs=cfg.block_size)
    # ~1.27 GiB at 56 KiB per token: ~23.5K tokens fewer on one H100
    cfg = ServingConfig(gpu="H100")
    assert (qwen_plan(text_only(q), gpu, cfg).kv_capacity_tokens
            - qwen_plan(q, gpu, cfg).kv_capacity_tokens) > 23_000


def test_the_tower_is_never_offloaded():
    q, gpu = qwen_vl(), get_gpu("H100", GPUS)
    cfg = ServingConfig(gpu="H100", weight_offload_fraction=0.5)
    new, old = qwen_plan(q, gpu, cfg), qwen_plan(text_only(q), gpu, cfg)
    assert new.weight_offloaded_bytes == old.weight_offloaded_bytes
    assert new.weight_bytes - old.weight_bytes == pytest.approx(q.vision_weight_bytes)


def test_gemma_3_27b_on_an_h100_holds_the_siglip_tower():
    g, gpu = get_model("gemma-3-27b"), get_gpu("H100", GPUS)
    cfg = ServingConfig(gpu="H100")
    new = plan_memory(g, gpu, cfg, mean_request_tokens=4000,
                      engine_version=BUILDS_GEMMA_TOWER)
    old = plan_memory(text_only(g), gpu, cfg, mean_request_tokens=4000,
                      engine_version=BUILDS_GEMMA_TOWER)
    assert (new.weight_bytes - old.weight_bytes) / GIB == pytest.approx(0.77, abs=0.01)
    assert new.kv_capacity_tokens < old.kv_capacity_tokens


def test_sglang_holds_the_tower_too():
    q, gpu = qwen_vl(), get_gpu("H100", GPUS)
    cfg = ServingConfig(gpu="H100", engine="sglang", gpu_memory_utilization=0.85)
    new, old = sg.plan_memory_sglang(q, gpu, cfg), sg.plan_memory_sglang(text_only(q), gpu, cfg)
    assert new.weight_bytes - old.weight_bytes == pytest.approx(q.vision_weight_bytes)
    assert new.kv_capacity_tokens < old.kv_capacity_tokens


def test_start_up_reads_the_tower_and_models_shows_it():
    q, gpu = qwen_vl(), get_gpu("H100", GPUS)
    cfg = ServingConfig(gpu="H100")
    # vLLM 0.10.2 builds Qwen2.5-VL's tower; SGLang always does; vLLM 0.11+ skips it under
    # the zero image/video limits tuner exports (an architecture not read: from 0.15)
    for c, version in ((cfg, "0.10.2"), (ServingConfig(gpu="H100", engine="sglang"), None)):
        new, old = startup_for(q, gpu, c, version), startup_for(text_only(q), gpu, c, version)
        assert new.weight_bytes - old.weight_bytes == pytest.approx(q.vision_weight_bytes)
        assert new.weights_load_s > old.weights_load_s
    new, old = startup_for(q, gpu, cfg, "0.15.0"), startup_for(text_only(q), gpu, cfg, "0.15.0")
    assert new.weight_bytes == old.weight_bytes
    g = get_model("gemma-3-27b")
    assert _weights_text(g)[0] == _weights_text(text_only(g))[0].replace("50.3", "51.1")
    assert _weights_text(g)[0].startswith("51.1")


def test_models_json_carries_the_tower_the_table_counts():
    from tuner.cli.catalogs import _model_row
    from tuner.core.catalog import load_models

    m = load_models()["gemma-3-27b"]
    row = _model_row(m)
    assert row["vision_weight_bytes"] == m.vision_weight_bytes > 0
