"""Quantized checkpoints that keep some matmul weights at 16 bits (config.json's
modules_to_not_convert / ignore; Meta's FBGEMM FP8 405B keeps every attention projection and
the first and last MLPs in BF16): the memory plan holds them at 2 bytes and the decode step
reads them at 2 bytes."""

import json

import pytest

from tuner.core.catalog import GPU, get_model, load_gpus, unconverted_share, weight_bytes_per_param
from tuner.core.config import ServingConfig
from tuner.core.memory import plan_memory

LLAMA_8B = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
            "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
            "intermediate_size": 14336, "vocab_size": 128256, "max_position_embeddings": 8192}
ATTN_PER_LAYER = 4096 * 4096 * 2 + 4096 * 1024 * 2
MLP_PER_LAYER = 3 * 4096 * 14336


def _ckpt(tmp_path, name, quant):
    d = tmp_path / name
    d.mkdir()
    (d / "config.json").write_text(json.dumps({**LLAMA_8B, "quantization_config": quant}))
    return get_model(str(d))


def test_fbgemm_modules_to_not_convert_are_counted_at_16_bits(tmp_path):
    kept = [f"model.layers.{i}.self_attn.{p}_proj" for i in range(32) for p in "qkvo"]
    kept += [f"model.layers.{i}.mlp.{p}_proj" for i in (0, 31) for p in ("gate", "up", "down")]
    m = _ckpt(tmp_path, "meta-style", {"quant_method": "fbgemm_fp8", "activation_scale_ub": 1200.0,
                                       "modules_to_not_convert": kept})
    total = 32 * (ATTN_PER_LAYER + MLP_PER_LAYER)
    want = (32 * ATTN_PER_LAYER + 2 * MLP_PER_LAYER) / total
    assert unconverted_share(m.checkpoint_quantization) == pytest.approx(want, abs=1e-4)
    assert m.weight_bytes_per_param(8) == pytest.approx((1 - want) * 1.0 + want * 2.0, abs=1e-4)
    plain = _ckpt(tmp_path, "all-fp8", {"quant_method": "fbgemm_fp8"})
    assert unconverted_share(plain.checkpoint_quantization) == 0.0
    # the memory plan holds the BF16 layers: more weight bytes, less KV on the same GPU
    gpu: GPU = load_gpus()["H100"]
    cfg = ServingConfig(gpu="H100", weight_bits=8)
    a, b = plan_memory(m, gpu, cfg), plan_memory(plain, gpu, cfg)
    extra = want * total * 1.0  # one more byte per kept weight
    assert a.weight_bytes - b.weight_bytes == pytest.approx(extra, rel=1e-3)
    assert a.kv_capacity_tokens < b.kv_capacity_tokens


def test_compressed_tensors_ignore_lists_and_regexes(tmp_path):
    head_only = _ckpt(tmp_path, "nm", {"quant_method": "compressed-tensors", "ignore": ["lm_head"],
                                       "config_groups": {"g": {"weights": {"num_bits": 8,
                                                                           "type": "float"}}}})
    assert "16 bits" not in head_only.checkpoint_quantization  # lm_head is 16-bit anyway
    attn = _ckpt(tmp_path, "re", {"quant_method": "compressed-tensors",
                                  "ignore": ["lm_head", "re:.*self_attn.*"],
                                  "config_groups": {"g": {"weights": {"num_bits": 8,
                                                                      "type": "float"}}}})
    share = ATTN_PER_LAYER / (ATTN_PER_LAYER + MLP_PER_LAYER)
    assert unconverted_share(attn.checkpoint_quantization) == pytest.approx(share, abs=1e-4)


def test_metas_405b_fp8_by_name_keeps_attention_in_bf16(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))  # nothing cached: the name decides
    meta = get_model("meta-llama/Llama-3.1-405B-Instruct-FP8")
    other = get_model("NousResearch/Hermes-3-Llama-3.1-405B-FP8")
    assert "Meta's FBGEMM FP8 list" in meta.checkpoint_quantization
    assert unconverted_share(other.checkpoint_quantization) == 0.0
    # per GPU at TP 8: ~56.7 GiB (attention and 2 MLPs at BF16) against 47.7 GiB all FP8
    assert meta.weight_bytes(8) / 8 / 2**30 == pytest.approx(56.7, abs=0.1)
    assert other.weight_bytes(8) / 8 / 2**30 == pytest.approx(47.7, abs=0.1)


def test_the_decode_step_reads_the_16_bit_share_at_2_bytes():
    assert weight_bytes_per_param(8, "fp8, 25.00 % of matmul weights at 16 bits (x)") == 1.25
    assert weight_bytes_per_param(16, "fp8, 25.00 % of matmul weights at 16 bits (x)") == 2.0
    assert weight_bytes_per_param(8, "fp8") == 1.0
