"""QA h3: model configs and GPU / profile inputs that were miscounted or mislabelled.

Llama-4's interleaved MoE and shared expert, hybrid linear-attention / Mamba models refused,
non-gated MLPs (StarCoder2, GPT-NeoX, Phi-2, Nemotron) counted with two matrices, quantized
repo names kept at their precision offline, quantization-scale bytes per scheme, mllama and
vision-tower notes, GeForce / RTX cards not taken for an RTX PRO 6000, a --profile folder that
does not apply set aside (the shipped tables kept), and "does not exist" for a missing one.

The configs are the published config.json fields (transcribed); reference counts are worked
out by hand from them.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.test_models_catalog import _offline_empty_cache
from tests.test_predictors import synth_profile
from tuner.core.catalog import (
    GIB,
    get_model,
    load_gpus,
    load_models,
    model_from_config_dict,
    model_from_hf_config,
    scale_bytes_per_weight,
    shape_note,
)
from tuner.core.config import ServingConfig
from tuner.core.errors import TunerError
from tuner.core.memory import plan_memory
from tuner.predictors.devices import match_gpu
from tuner.predictors.features import BatchFeatures
from tuner.predictors.opmath import flops_bytes
from tuner.predictors.sources import load_cost_model, resolve

REPO = Path(__file__).resolve().parents[1]
SHIPPED = REPO / "predictors" / "data" / "tiny-llama-cpu"
GPUS = load_gpus()
TINY = get_model("tiny-llama")


def spec(cfg: dict, name: str = "x"):
    return model_from_config_dict(cfg, where=name, name=name, source=name)


def _llama4(experts: int, interleave: int) -> dict:
    return {
        "architectures": ["Llama4ForConditionalGeneration"], "model_type": "llama4",
        "text_config": {
            "attention_chunk_size": 8192, "head_dim": 128, "hidden_act": "silu",
            "hidden_size": 5120, "interleave_moe_layer_step": interleave,
            "intermediate_size": 8192, "intermediate_size_mlp": 16384,
            "max_position_embeddings": 1048576, "model_type": "llama4_text",
            "no_rope_layers": [], "num_attention_heads": 40, "num_experts_per_tok": 1,
            "num_hidden_layers": 48, "num_key_value_heads": 8, "num_local_experts": experts,
            "tie_word_embeddings": False, "use_qk_norm": True, "vocab_size": 202048},
        "vision_config": {"hidden_size": 1408, "num_hidden_layers": 34,
                          "model_type": "llama4_vision_model"},
    }


MAVERICK, SCOUT = _llama4(128, 2), _llama4(16, 1)

QWEN3_NEXT = {
    "architectures": ["Qwen3NextForCausalLM"], "model_type": "qwen3_next",
    "decoder_sparse_step": 1, "full_attention_interval": 4, "head_dim": 256,
    "hidden_act": "silu", "hidden_size": 2048, "intermediate_size": 5120,
    "linear_conv_kernel_dim": 4, "linear_key_head_dim": 128, "linear_num_key_heads": 16,
    "linear_num_value_heads": 32, "linear_value_head_dim": 128,
    "max_position_embeddings": 262144, "mlp_only_layers": [], "moe_intermediate_size": 512,
    "num_attention_heads": 16, "num_experts": 512, "num_experts_per_tok": 10,
    "num_hidden_layers": 48, "num_key_value_heads": 2, "shared_expert_intermediate_size": 512,
    "tie_word_embeddings": False, "vocab_size": 151936,
}

JAMBA_MINI = {
    "architectures": ["JambaForCausalLM"], "model_type": "jamba", "attn_layer_offset": 4,
    "attn_layer_period": 8, "expert_layer_offset": 1, "expert_layer_period": 2,
    "hidden_size": 4096, "intermediate_size": 14336, "mamba_d_conv": 4, "mamba_d_state": 16,
    "mamba_dt_rank": 256, "mamba_expand": 2, "max_position_embeddings": 262144,
    "num_attention_heads": 32, "num_experts": 16, "num_experts_per_tok": 2,
    "num_hidden_layers": 32, "num_key_value_heads": 8, "tie_word_embeddings": False,
    "vocab_size": 65536,
}

STARCODER2_15B = {
    "architectures": ["Starcoder2ForCausalLM"], "model_type": "starcoder2",
    "hidden_act": "gelu_pytorch_tanh", "hidden_size": 6144, "intermediate_size": 24576,
    "max_position_embeddings": 16384, "mlp_type": "default", "norm_type": "layer_norm",
    "num_attention_heads": 48, "num_hidden_layers": 40, "num_key_value_heads": 4,
    "sliding_window": 4096, "use_bias": True, "vocab_size": 49152,
}

LLAMA_31_8B = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
    "hidden_size": 4096, "intermediate_size": 14336, "max_position_embeddings": 131072,
    "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
    "tie_word_embeddings": False, "vocab_size": 128256,
}

QWEN25_7B = {
    "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_act": "silu",
    "hidden_size": 3584, "intermediate_size": 18944, "max_position_embeddings": 32768,
    "max_window_layers": 28, "num_attention_heads": 28, "num_hidden_layers": 28,
    "num_key_value_heads": 4, "sliding_window": 131072, "tie_word_embeddings": False,
    "use_sliding_window": False, "vocab_size": 152064,
}

MLLAMA_11B = {
    "architectures": ["MllamaForConditionalGeneration"], "model_type": "mllama",
    "text_config": {
        "cross_attention_layers": [3, 8, 13, 18, 23, 28, 33, 38], "hidden_act": "silu",
        "hidden_size": 4096, "intermediate_size": 14336, "max_position_embeddings": 131072,
        "model_type": "mllama_text_model", "num_attention_heads": 32, "num_hidden_layers": 40,
        "num_key_value_heads": 8, "tie_word_embeddings": False, "vocab_size": 128256},
    "vision_config": {
        "hidden_size": 1280, "image_size": 560, "intermediate_size": 5120,
        "model_type": "mllama_vision_model", "num_attention_heads": 16,
        "num_global_layers": 8, "num_hidden_layers": 32, "patch_size": 14,
        "vision_output_dim": 7680},
}

MISTRAL_SMALL_31 = {
    "architectures": ["Mistral3ForConditionalGeneration"], "model_type": "mistral3",
    "text_config": {
        "head_dim": 128, "hidden_act": "silu", "hidden_size": 5120, "intermediate_size": 32768,
        "max_position_embeddings": 131072, "model_type": "mistral", "num_attention_heads": 32,
        "num_hidden_layers": 40, "num_key_value_heads": 8, "sliding_window": None,
        "vocab_size": 131072},
    "vision_config": {
        "head_dim": 64, "hidden_act": "silu", "hidden_size": 1024, "image_size": 1540,
        "intermediate_size": 4096, "model_type": "pixtral", "num_attention_heads": 16,
        "num_channels": 3, "num_hidden_layers": 24, "patch_size": 14},
}


# ---- 1. Llama-4: interleaved MoE layers, dense layers at intermediate_size_mlp, shared expert
@pytest.mark.parametrize("cfg, total_b, active_b, dense", [
    (MAVERICK, 400.7, 17.17, 24),  # MoE on every 2nd layer: 24 MoE + 24 dense
    (SCOUT, 107.8, 17.17, 0),  # MoE on every layer
])
def test_llama4_counts_match_the_published_sizes(cfg, total_b, active_b, dense):
    m = spec(cfg)
    assert m.num_params / 1e9 == pytest.approx(total_b, rel=0.01)
    assert m.active_params_per_token / 1e9 == pytest.approx(active_b, rel=0.01)
    assert m.num_dense_layers == dense and m.num_moe_layers == 48 - dense
    assert m.intermediate_size == 16384  # the dense layers' intermediate_size_mlp
    # one always-on shared expert as wide as a routed one
    assert (m.num_shared_experts, m.shared_expert_intermediate_size) == (1, 8192)
    assert m.moe_intermediate_size == 8192


def test_llama4_maverick_fits_on_8_h200_at_bf16():
    m = spec(MAVERICK)
    plan = plan_memory(m, GPUS["H200"], ServingConfig(gpu="H200", tp=8))
    assert plan.fits, plan.reason
    assert plan.weight_bytes / GIB == pytest.approx(93.3, rel=0.03)  # ~746 GiB / 8


def test_llama4_moe_layers_listed_explicitly_win():
    cfg = json.loads(json.dumps(MAVERICK))
    cfg["text_config"]["moe_layers"] = [1, 3, 5]
    assert spec(cfg).num_moe_layers == 3


# ---- 2. hybrid Mamba models: refused in one line, never priced as attention (Gated DeltaNet
# hybrids such as Qwen3-Next are priced since stop 52: tests/test_hybrid_models_s52.py)
def test_qwen3_next_loads_as_a_hybrid():
    m = spec(QWEN3_NEXT)
    assert (m.num_kv_layers, m.linear_attention_layers) == (12, 36)


@pytest.mark.parametrize("cfg, words", [
    (JAMBA_MINI, ("JambaForCausalLM", "hybrid", "4 of its 32 layers", "Mamba", "8x")),
    ({**LLAMA_31_8B, "architectures": ["SomeHybrid"], "num_hidden_layers": 4,
      "layer_types": ["mamba", "full_attention", "mamba", "full_attention"]},
     ("SomeHybrid", "2 of its 4 layers", "mamba")),
    ({**LLAMA_31_8B, "num_hidden_layers": 4, "layer_types": ["linear_attention"] * 3
      + ["full_attention"]}, ("1 of its 4 layers", "linear_attention")),
    ({**LLAMA_31_8B, "architectures": ["NemotronHForCausalLM"], "model_type": "nemotron_h",
      "hybrid_override_pattern": "M-M*-M-M*-"}, ("hybrid_override_pattern has 10 blocks",
                                                   "num_hidden_layers is 32")),
])
def test_hybrid_models_are_refused_by_name(cfg, words):
    with pytest.raises(TunerError) as err:
        spec(cfg, "cfg.json")
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith("cfg.json: ")
    for w in words:
        assert w in msg, (w, msg)


def test_attention_only_layer_types_still_load():
    gpt = spec({**LLAMA_31_8B, "num_hidden_layers": 4, "sliding_window": 128,
                "layer_types": ["sliding_attention", "full_attention"] * 2})
    assert gpt.num_window_layers == 2
    models = load_models()  # gemma-3 / gpt-oss shipped configs carry layer patterns
    assert models["gpt-oss-20b"].num_window_layers > 0 and "gemma-3-27b" in models


# ---- 3. non-gated MLPs: two matrices in the counts and in every predictor's FLOPs ---------------
def test_starcoder2_counts_two_mlp_matrices():
    m = spec(STARCODER2_15B)
    assert m.num_params / 1e9 == pytest.approx(15.96, rel=0.01)  # not 22.0
    assert m.weight_bytes(16) / GIB == pytest.approx(29.7, rel=0.01)
    h, w = 6144, 24576
    assert m.dense_mlp_params == pytest.approx(2 * h * w, rel=1e-4)
    # the predictors' MLP (gate_up + down GEMMs) does 2 FLOPs per weight of the 2 matrices
    up = flops_bytes("linear.gate_up", m, tokens=1)[0] + flops_bytes("linear.down", m,
                                                                      tokens=1)[0]
    assert float(up) == pytest.approx(2 * 2 * h * w, rel=1e-4)
    assert "not gated" in (shape_note_of(m, STARCODER2_15B) or "")


def shape_note_of(m, cfg: dict, tmp: Path | None = None) -> str | None:
    """shape_note of a spec read from a config.json file holding `cfg`."""
    import tempfile

    d = Path(tmp or tempfile.mkdtemp())
    (d / "config.json").write_text(json.dumps(cfg))
    return shape_note(model_from_hf_config(d / "config.json"))


@pytest.mark.parametrize("cfg, params_b", [
    # GPT-NeoX-20B: 44 layers, 6144 wide, 4x MLP, 50432 vocab -> ~20.5 B
    ({"architectures": ["GPTNeoXForCausalLM"], "model_type": "gpt_neox", "hidden_act": "gelu",
      "hidden_size": 6144, "intermediate_size": 24576, "num_attention_heads": 64,
      "num_hidden_layers": 44, "vocab_size": 50432, "tie_word_embeddings": False}, 20.5),
    # Phi-2: 32 layers, 2560 wide, 10240 MLP, 51200 vocab -> ~2.78 B
    ({"architectures": ["PhiForCausalLM"], "model_type": "phi", "hidden_act": "gelu_new",
      "hidden_size": 2560, "intermediate_size": 10240, "num_attention_heads": 32,
      "num_hidden_layers": 32, "vocab_size": 51200, "tie_word_embeddings": False}, 2.78),
    # Minitron-8B (Nemotron, squared ReLU): 32 x (58.7 M attention + 2 x 4096 x 16384 MLP)
    # + 2 x 256000 x 4096 embeddings = 8.27 B (three MLP matrices would make it 10.4 B)
    ({"architectures": ["NemotronForCausalLM"], "model_type": "nemotron", "hidden_act": "relu2",
      "hidden_size": 4096, "intermediate_size": 16384, "num_attention_heads": 48,
      "num_key_value_heads": 8, "head_dim": 128, "num_hidden_layers": 32,
      "vocab_size": 256000, "tie_word_embeddings": False}, 8.27),
])
def test_other_non_gated_architectures(cfg, params_b):
    m = spec(cfg)
    assert m.num_params / 1e9 == pytest.approx(params_b, rel=0.02)
    h, w = cfg["hidden_size"], cfg["intermediate_size"]
    assert m.dense_mlp_params == pytest.approx(2 * h * w, rel=1e-3)


def test_gated_models_keep_their_width_and_an_unknown_architecture_is_noted(tmp_path):
    m = spec(LLAMA_31_8B)
    assert m.intermediate_size == 14336 and m.num_params / 1e9 == pytest.approx(8.03, rel=0.005)
    assert shape_note_of(m, LLAMA_31_8B, tmp_path) is None
    odd = {**LLAMA_31_8B, "architectures": ["FancyNewForCausalLM"]}
    (tmp_path / "o").mkdir()
    note = shape_note_of(spec(odd), odd, tmp_path / "o")
    assert note and "FancyNewForCausalLM" in note and "not one tuner knows" in note


# ---- 4. quantized repo names offline keep their precision (or are refused) ----------------------
@pytest.mark.parametrize("repo, base, bits", [
    ("casperhansen/llama-3-70b-instruct-awq", "llama-3-70b", 4),
    ("RedHatAI/Llama-3.3-70B-Instruct-quantized.w8a8", "llama-3.3-70b", 8),
    ("Qwen/Qwen2.5-7B-Instruct-AWQ", "qwen2.5-7b", 4),
    ("Qwen/Qwen2.5-7B-Instruct-GPTQ-Int4", "qwen2.5-7b", 4),
    ("Qwen/Qwen2.5-7B-Instruct-GPTQ-Int8", "qwen2.5-7b", 8),
    ("someone/Llama-3.1-8B-Instruct-quantized.w4a16", "llama-3.1-8b", 4),
])
def test_a_quantized_repo_name_keeps_its_precision_offline(repo, base, bits, tmp_path,
                                                           monkeypatch):
    _offline_empty_cache(tmp_path, monkeypatch)
    models = load_models()
    m = get_model(repo, models)
    assert m.num_params == models[base].num_params and m.checkpoint_bits == bits
    assert m.weight_bytes(bits) < 0.6 * models[base].weight_bytes(16)
    note = shape_note(m)
    assert note and "assumed from the name" in note and f"{bits}-bit" in note


def test_awq_70b_fits_one_a100_and_awq_7b_weighs_what_its_checkpoint_does(tmp_path,
                                                                          monkeypatch):
    _offline_empty_cache(tmp_path, monkeypatch)
    m = get_model("casperhansen/llama-3-70b-instruct-awq")
    plan = plan_memory(m, GPUS["A100-80G"], ServingConfig(gpu="A100-80G", weight_bits=4))
    assert plan.fits, plan.reason
    assert plan.weight_bytes / GIB == pytest.approx(37.1, rel=0.03)
    q = get_model("Qwen/Qwen2.5-7B-Instruct-AWQ")
    assert q.weight_bytes(q.checkpoint_bits) / 1e9 == pytest.approx(5.57, rel=0.02)  # not 15.2


@pytest.mark.parametrize("repo", [
    "someone/Llama-3.1-8B-Instruct-quantized",  # quantized, bits unsaid
    "someone/llama-3-8b-bnb",
    "someone/Llama-3.1-8B-Instruct-int4-int8",  # the name disagrees with itself
])
def test_a_quantized_name_without_clear_bits_is_refused(repo, tmp_path, monkeypatch):
    _offline_empty_cache(tmp_path, monkeypatch)
    with pytest.raises(TunerError, match=f"No config.json for '{repo}'.*offline"):
        get_model(repo)


# ---- 5. GeForce / RTX cards are not an RTX PRO 6000 ---------------------------------------------
@pytest.mark.parametrize("device, memory_bytes, want", [
    ("NVIDIA GeForce RTX 3090", 25_438_126_080, None),
    ("NVIDIA RTX A6000", 51_041_271_808, None),
    ("NVIDIA RTX 6000 Ada Generation", 51_527_024_640, None),
    ("NVIDIA GeForce RTX 5090", 34_190_917_632, None),
    ("NVIDIA GeForce RTX 4090", 25_250_627_584, "RTX4090"),
    ("NVIDIA RTX PRO 6000 Blackwell Server Edition", 102_000_000_000, "RTX-PRO-6000"),
    ("NVIDIA RTX PRO 6000 Blackwell Workstation Edition", 102_600_000_000, "RTX-PRO-6000"),
    ("NVIDIA RTX PRO 6000 Blackwell", 51_000_000_000, None),  # half its memory: another part
    ("NVIDIA A100-PCIE-40GB", 42_500_000_000, None),  # the catalog's PCIe A100 is 80 GB
    ("NVIDIA A100 80GB", 85_000_000_000, "A100-80G"),
])
def test_device_names_match_only_their_own_part(device, memory_bytes, want):
    assert match_gpu(device, memory_bytes, GPUS) == want


# ---- 6. a --profile folder that does not apply is set aside, the shipped tables kept -----------
def _times(cm) -> np.ndarray:
    f = BatchFeatures.single(prefill_tokens=512, decodes=8, kv_tokens=4000)
    return cm.iteration_time_s(f)


def test_a_cpu_profile_does_not_drop_the_h100_tables():
    cfg = ServingConfig(gpu="H100")
    plain = resolve(TINY, GPUS["H100"], cfg, calibrated=False)
    folder = resolve(TINY, GPUS["H100"], cfg, profile=SHIPPED, calibrated=False)
    assert folder.source == plain.source == "tables"
    assert folder.cost_model.provenance.kind == "tables"
    assert np.allclose(_times(folder.cost_model), _times(plain.cost_model))
    text = str(folder.cost_model.provenance)
    assert "--profile set aside" in text and "no GPU profile in" in text
    # the loader's own auto mode says and does the same
    direct = load_cost_model(SHIPPED, TINY, GPUS["H100"], cfg)
    assert direct.provenance.kind == "tables" and "set aside" in direct.describe()


@pytest.fixture(scope="module")
def a10_tiny(tmp_path_factory):
    return synth_profile(tmp_path_factory.mktemp("prof") / "a10", "A10", noise=0.02, seed=2)


def test_another_models_gpu_profile_is_not_transferred(a10_tiny):
    llama = get_model("llama-3.2-1b")
    cfg = ServingConfig(gpu="H100")
    plain = resolve(llama, GPUS["H100"], cfg, calibrated=False)
    folder = resolve(llama, GPUS["H100"], cfg, profile=a10_tiny.parent, calibrated=False)
    assert folder.cost_model.provenance.kind == plain.cost_model.provenance.kind == "tables"
    assert np.allclose(_times(folder.cost_model), _times(plain.cost_model))
    assert "llama-3.2-1b's shapes" in str(folder.cost_model.provenance)
    # the same model's GPU profile still stands in for the tables (transferred from the A10)
    tiny = resolve(TINY, GPUS["H100"], cfg, profile=a10_tiny.parent, calibrated=False)
    assert tiny.source == "transfer" and "transferred to H100" in str(tiny.cost_model.provenance)
    # asked for on purpose (--profile-mode transfer), another model's profile says so
    forced = resolve(llama, GPUS["H100"], cfg, profile=a10_tiny.parent, mode="transfer",
                     calibrated=False)
    assert "profiled at tiny-llama's shapes, not llama-3.2-1b's" in str(
        forced.cost_model.provenance)


# ---- 7. quantization scales: per scheme, not 4 bytes per 128 weights everywhere ---------------
def test_fp8_scale_overhead_follows_the_scheme():
    ds = get_model("deepseek-v3")  # FP8 in 128x128 blocks: 4 B per 16384 weights
    assert ds.weight_bytes(8) / GIB == pytest.approx(626.8, rel=0.002)  # not 646.1
    per_tensor = spec({**LLAMA_31_8B, "quantization_config": {
        "activation_scheme": "dynamic", "quant_method": "fp8"}})
    assert per_tensor.weight_bytes(8) / 1e9 == pytest.approx(9.08, rel=0.003)  # not 9.30
    # vLLM's online FP8 of the 16-bit checkpoint is per tensor too
    assert spec(LLAMA_31_8B).weight_bytes(8) == pytest.approx(per_tensor.weight_bytes(8))
    assert spec(LLAMA_31_8B).weight_bytes(16) == pytest.approx(2 * 8.030e9, rel=0.001)


@pytest.mark.parametrize("group", [128, 64, 32])
def test_awq_gptq_groups_carry_a_scale_and_a_packed_zero(group):
    for method in ("awq", "gptq"):
        m = spec({**QWEN25_7B, "quantization_config": {
            "bits": 4, "group_size": group, "quant_method": method}})
        assert m.checkpoint_quantization == f"{method}, 4-bit, group {group}"
        linear = m.linear_params_total
        head = 2.0 * (m.embedding_params + m.lm_head_params + m.norm_params)
        assert m.weight_bytes(4) == pytest.approx(linear * (0.5 + 2.5 / group) + head)
    assert scale_bytes_per_weight(8, "gptq, 8-bit, group 128") == pytest.approx(3 / 128)
    assert scale_bytes_per_weight(4, "mxfp4") == pytest.approx(1 / 32)
    assert scale_bytes_per_weight(4, "modelopt NVFP4") == pytest.approx(1 / 16)
    assert scale_bytes_per_weight(16, "awq, 4-bit") == 0.0


def test_moe_replicas_drop_experts_at_the_bytes_they_were_counted_at():
    ds = get_model("deepseek-v3")
    one = plan_memory(ds, GPUS["H200"], ServingConfig(gpu="H200", tp=8, weight_bits=8,
                                                      block_size=64))
    two = plan_memory(ds, GPUS["H200"], ServingConfig(gpu="H200", tp=8, dp=2, weight_bits=8,
                                                      block_size=64))
    experts = ds.num_moe_layers * ds.num_experts * ds.expert_params * (1 + 4 / 16384)
    assert one.weight_bytes - two.weight_bytes == pytest.approx(experts / 8 / 2, rel=1e-6)


# ---- 8. mllama cross-attention and vision towers: said, with the encoder's size ---------------
def test_mllama_and_vision_encoders_are_noted(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "c").mkdir()
    mllama = spec(MLLAMA_11B)
    note = shape_note_of(mllama, MLLAMA_11B, tmp_path / "a")
    assert note and "8 cross-attention layers (of 40)" in note and "~25 %" in note
    assert "vLLM 0.11" in note and "vision encoder (~0.79 B params" in note
    mistral = spec(MISTRAL_SMALL_31)
    assert mistral.num_params / 1e9 == pytest.approx(23.57, rel=0.005)  # text stack as before
    note = shape_note_of(mistral, MISTRAL_SMALL_31, tmp_path / "b")
    assert note and "vision encoder (~0.40 B params" in note
    note = shape_note_of(spec(SCOUT), SCOUT, tmp_path / "c")
    assert note and "not given in vision_config" in note and "chunked local attention" in note


# ---- 9. a missing --profile folder "does not exist" in every command -----------------------------
def _tuner(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tuner.cli", *map(str, args)],
                          capture_output=True, text=True, timeout=120)


def test_a_missing_profile_folder_does_not_exist_for_cost_and_transfer(tmp_path):
    nope = tmp_path / "nope"
    for args in (("cost", "-m", "tiny-llama", "--profile", nope, "--tokens", "10"),
                 ("transfer", SHIPPED, nope), ("transfer", nope, SHIPPED)):
        r = _tuner(*args)
        assert r.returncode != 0 and "Traceback" not in r.stderr
        assert f"Profile folder {nope} does not exist" in r.stderr, r.stderr
    (tmp_path / "empty").mkdir()
    r = _tuner("cost", "-m", "tiny-llama", "--profile", tmp_path / "empty", "--tokens", "10")
    assert r.returncode != 0 and "holds no profile" in r.stderr


def test_models_command_prints_the_shape_note(tmp_path):
    """`tuner models -m CONFIG` says what the shape approximates, as simulate and search do."""
    d = tmp_path / "starcoder2"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(STARCODER2_15B))
    r = subprocess.run([sys.executable, "-m", "tuner.cli", "models", "-m", str(d), "--json"],
                       capture_output=True, text=True, timeout=120, cwd=REPO)
    assert r.returncode == 0, r.stderr
    (row,) = json.loads(r.stdout).values()
    assert "not gated" in row["shape_note"]
    r = subprocess.run([sys.executable, "-m", "tuner.cli", "models", "-m", "llama-3-8b",
                        "--json"], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert json.loads(r.stdout)["llama-3-8b"]["shape_note"] is None
