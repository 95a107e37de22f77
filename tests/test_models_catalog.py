"""Model catalog of current families (issue #16): published parameter counts, MoE / MLA /
sliding-window shapes, config.json parsing (local files, folders, the Hugging Face cache), the
KV and weight rules of the memory plan, and `tuner models` / `tuner simulate` on new models."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from tuner.cli.main import app
from tuner.core.catalog import (
    ModelSpec,
    get_model,
    load_models,
    model_aliases,
    model_from_hf_config,
)
from tuner.core.config import ServingConfig
from tuner.core.errors import TunerError
from tuner.core.memory import (
    kv_bytes_per_request,
    kv_bytes_per_token_per_layer_rank,
    kv_layer_fraction,
    plan_memory,
    window_kv_tokens,
)

CONFIGS = Path(__file__).resolve().parents[1] / "tuner" / "core" / "data" / "configs"
EXAMPLE_WORKLOAD = Path(__file__).resolve().parents[1] / "examples" / "arxiv.jsonl"
runner = CliRunner()


@pytest.fixture(scope="module")
def models() -> dict[str, ModelSpec]:
    return load_models()


# --- published parameter counts ------------------------------------------------------------
# (catalog name, published total, source). Counts by ModelSpec leave out biases and q/k norms
# (< 0.1 %); every figure below is the model publisher's own.
PUBLISHED_TOTALS = [
    # Meta model cards (huggingface.co/meta-llama/*: "Params"; safetensors totals 8,030,261,248
    # and 70,553,706,496)
    ("llama-3.1-8b", 8.03e9, "Meta Llama 3.1 model card / HF safetensors total"),
    ("llama-3.1-70b", 70.6e9, "Meta Llama 3.1 model card / HF safetensors total"),
    ("llama-3.3-70b", 70.6e9, "Meta Llama 3.3 model card / HF safetensors total"),
    ("llama-3.1-405b", 405.9e9, "Meta Llama 3.1 model card (405B) / HF safetensors total"),
    ("mistral-large-2407", 123e9, "Mistral Large 2 announcement: 123 billion parameters"),
    ("mixtral-8x22b", 141e9, "Mistral AI Mixtral 8x22B announcement: 141B total"),
    ("llama-3.2-1b", 1.24e9, "Meta Llama 3.2 model card (1.23B) / HF safetensors 1.24B"),
    ("llama-3.2-3b", 3.21e9, "Meta Llama 3.2 model card"),
    # Qwen2.5 model cards (huggingface.co/Qwen/Qwen2.5-*: "Number of Parameters")
    ("qwen2.5-7b", 7.61e9, "Qwen2.5-7B model card"),
    ("qwen2.5-14b", 14.7e9, "Qwen2.5-14B model card"),
    ("qwen2.5-32b", 32.5e9, "Qwen2.5-32B model card"),
    ("qwen2.5-72b", 72.7e9, "Qwen2.5-72B model card"),
    # Qwen3 model cards (huggingface.co/Qwen/Qwen3-*: "Number of Parameters")
    ("qwen3-8b", 8.2e9, "Qwen3-8B model card"),
    ("qwen3-14b", 14.8e9, "Qwen3-14B model card"),
    ("qwen3-32b", 32.8e9, "Qwen3-32B model card"),
    ("qwen3-30b-a3b", 30.5e9, "Qwen3-30B-A3B model card"),
    ("qwen3-30b-a3b-instruct-2507", 30.5e9, "Qwen3-30B-A3B-Instruct-2507 model card"),
    ("qwen3-235b-a22b", 235e9, "Qwen3-235B-A22B model card"),
    ("qwen3-next-80b-a3b", 80e9, "Qwen3-Next-80B-A3B-Instruct model card: 80B in total"),
    ("granite-4.0-h-tiny", 7e9, "Granite-4.0-H-Tiny model card: 7B parameters"),
    ("nemotron-h-8b-base-8k", 8e9, "Nemotron-H-8B-Base-8K model card: 8B parameters"),
    # Mistral AI, "Mixtral of experts" (mistral.ai/news/mixtral-of-experts, 2023-12-11)
    ("mixtral-8x7b", 46.7e9, "Mistral AI Mixtral announcement"),
    # HF safetensors total of mistralai/Mistral-Nemo-Base-2407 (Mistral: "12B")
    ("mistral-nemo-12b", 12.2e9, "HF safetensors total of Mistral-Nemo-Base-2407"),
    # Gemma 3 Technical Report (arXiv 2503.19786) Table 1: embedding + non-embedding
    # parameters of the text decoder (the 417M SigLIP vision encoder is NOT in the catalog
    # entry: the published "4B/12B/27B" totals include it)
    ("gemma-3-4b", 675e6 + 3209e6, "Gemma 3 tech report Table 1 (text decoder)"),
    ("gemma-3-12b", 1012e6 + 10759e6, "Gemma 3 tech report Table 1 (text decoder)"),
    ("gemma-3-27b", 1416e6 + 25600e6, "Gemma 3 tech report Table 1 (text decoder)"),
    # Microsoft phi-4 model card / HF safetensors total
    ("phi-4", 14.7e9, "microsoft/phi-4 HF safetensors total"),
    # OpenAI, gpt-oss-120b & gpt-oss-20b model card (2025-08-05), Table 1 "Total Parameters"
    ("gpt-oss-20b", 20.91e9, "OpenAI gpt-oss model card Table 1"),
    ("gpt-oss-120b", 116.83e9, "OpenAI gpt-oss model card Table 1"),
    # DeepSeek-V3 Technical Report (arXiv 2412.19437) §1: 671B total, 37B activated per token;
    # the HF repo's 685B adds the 14B multi-token-prediction module, which vLLM only loads for
    # speculative decoding and the catalog leaves out (num_nextn_predict_layers)
    ("deepseek-v3", 671e9, "DeepSeek-V3 tech report §1 (main model, without MTP)"),
    # 685B on its model card with DeepSeek-V3's 14B multi-token-prediction module; tuner does
    # not count the sparse-attention indexer's weights (~0.9B, 0.13 %)
    ("deepseek-v3.2", 671e9, "DeepSeek-V3.2 model card, less the 14B MTP module"),
    # existing entries keep their numbers
    ("llama-3-8b", 8.03e9, "Meta Llama 3 model card"),
    ("llama-3-70b", 70.6e9, "Meta Llama 3 model card"),
    ("mistral-7b", 7.25e9, "HF safetensors total of Mistral-7B-v0.3"),
]

# (catalog name, published active parameters per token, source)
PUBLISHED_ACTIVE = [
    ("mixtral-8x7b", 12.9e9, "Mistral AI Mixtral announcement"),
    ("mixtral-8x22b", 39e9, "Mistral AI Mixtral 8x22B announcement: 39B active"),
    ("qwen3-30b-a3b", 3.3e9, "Qwen3-30B-A3B model card: 3.3B activated"),
    ("qwen3-235b-a22b", 22e9, "Qwen3-235B-A22B model card: 22B activated"),
    ("deepseek-v3", 37e9, "DeepSeek-V3 tech report §1: 37B activated"),
    ("deepseek-v3.2", 37e9, "DeepSeek-V3.2: DeepSeek-V3's 37B activated, plus the indexer"),
]

# OpenAI's "Active Parameters" (model card Table 1) leave the input embedding out (it counts
# MLP + attention + unembedding: 0.64 + 19.12*4/32 + 0.58 = 3.61B); compared as such.
PUBLISHED_ACTIVE_WITHOUT_EMBEDDING = [
    ("gpt-oss-20b", 3.61e9, "OpenAI gpt-oss model card Table 1"),
    ("gpt-oss-120b", 5.13e9, "OpenAI gpt-oss model card Table 1"),
]

NEW_FAMILIES = {
    "llama-3.1-8b", "llama-3.1-70b", "llama-3.2-1b", "llama-3.2-3b", "llama-3.3-70b",
    "qwen2.5-7b", "qwen2.5-14b", "qwen2.5-32b", "qwen2.5-72b", "qwen3-8b", "qwen3-14b",
    "qwen3-32b", "qwen3-30b-a3b", "qwen3-30b-a3b-instruct-2507", "qwen3-235b-a22b",
    "mixtral-8x7b", "mistral-nemo-12b", "gemma-3-4b", "gemma-3-12b", "gemma-3-27b", "phi-4",
    "gpt-oss-20b", "gpt-oss-120b", "deepseek-v3", "llama-3.1-405b", "mistral-large-2407",
    "mixtral-8x22b", "deepseek-v3.2",
}


def test_every_catalog_model_has_a_published_total(models):
    assert NEW_FAMILIES <= set(models)
    checked = {name for name, _, _ in PUBLISHED_TOTALS}
    assert NEW_FAMILIES <= checked
    moe = {n for n, m in models.items() if m.is_moe}
    assert moe == {n for n, _, _ in PUBLISHED_ACTIVE + PUBLISHED_ACTIVE_WITHOUT_EMBEDDING} | {
        "qwen3-30b-a3b-instruct-2507",
        # its card's "3B activated" is the name's rounding (tuner counts 3.77e9 with the
        # embeddings), too coarse for the 2 % check
        "qwen3-next-80b-a3b",
        # its card's "1B active" is coarser still (tuner counts 1.47e9 with the embeddings)
        "granite-4.0-h-tiny"}


@pytest.mark.parametrize("name, published, source", PUBLISHED_TOTALS)
def test_total_params_match_published(models, name, published, source):
    assert models[name].num_params == pytest.approx(published, rel=0.02), source


@pytest.mark.parametrize("name, published, source", PUBLISHED_ACTIVE)
def test_active_params_match_published(models, name, published, source):
    m = models[name]
    assert m.active_params_per_token == pytest.approx(published, rel=0.02), source
    assert m.active_params_per_token < m.num_params


@pytest.mark.parametrize("name, published, source", PUBLISHED_ACTIVE_WITHOUT_EMBEDDING)
def test_gpt_oss_active_params_as_openai_counts_them(models, name, published, source):
    m = models[name]
    assert m.active_params_per_token - m.embedding_params == pytest.approx(published, rel=0.02)


def test_dense_models_are_all_active(models):
    for m in models.values():
        assert m.num_layers * m.linear_params_per_layer == m.linear_params_total
        if not m.is_moe:
            assert m.active_params_per_token == m.num_params
            assert m.active_linear_params_per_layer == m.linear_params_per_layer
        else:
            assert m.active_linear_params_per_layer < m.linear_params_per_layer


def test_existing_entries_keep_their_numbers(models):
    m = models["llama-3-8b"]
    assert m.num_params == 8_030_261_248  # HF safetensors total of Meta-Llama-3-8B
    assert m.kv_bytes_per_token(16) == 131072 and not m.is_moe and m.max_position == 8192
    assert models["llama-3.1-8b"].num_params == m.num_params
    assert models["llama-3.1-8b"].max_position == 131072


# --- shapes read from the shipped published configs -----------------------------------------


def test_moe_shapes(models):
    mx = models["mixtral-8x7b"]
    assert (mx.num_experts, mx.experts_per_token, mx.moe_intermediate_size) == (8, 2, 14336)
    q = models["qwen3-30b-a3b"]
    assert (q.num_experts, q.experts_per_token, q.moe_intermediate_size, q.head_dim) == \
        (128, 8, 768, 128)
    assert models["qwen3-30b-a3b-instruct-2507"].max_position == 262144
    ds = models["deepseek-v3"]
    assert (ds.num_experts, ds.experts_per_token, ds.num_shared_experts,
            ds.shared_expert_intermediate_size, ds.first_k_dense_layers) == (256, 8, 1, 2048, 3)
    assert (ds.num_moe_layers, ds.num_dense_layers, ds.intermediate_size) == (58, 3, 18432)


def test_mla_kv_is_one_latent_per_token(models):
    ds = models["deepseek-v3"]
    assert ds.is_mla and (ds.kv_lora_rank, ds.qk_rope_head_dim, ds.head_dim) == (512, 64, 192)
    # (512 + 64) values x 2 bytes x 61 layers; a GQA formula would give 2*128*192*2*61
    assert ds.kv_bytes_per_token(16) == 576 * 2 * 61
    # vLLM keeps the latent whole on every TP rank
    assert kv_bytes_per_token_per_layer_rank(ds, 16, tp=8) == 576 * 2
    assert ds.max_position == 163840  # YaRN: 4096 x 40


def test_sliding_window_shapes(models):
    g = models["gemma-3-12b"]
    assert (g.sliding_window, g.num_window_layers, g.num_layers) == (1024, 40, 48)
    assert (g.num_heads, g.num_kv_heads, g.head_dim, g.vocab_size) == (16, 8, 256, 262208)
    assert g.tie_embeddings and g.max_position == 131072
    g4 = models["gemma-3-4b"]  # heads, KV heads, head_dim, vocab from Gemma3TextConfig defaults
    assert (g4.num_heads, g4.num_kv_heads, g4.head_dim, g4.num_window_layers) == (8, 4, 256, 29)
    assert models["gemma-3-27b"].head_dim == 128
    o = models["gpt-oss-20b"]
    assert (o.sliding_window, o.num_window_layers, o.head_dim) == (128, 12, 64)
    assert o.max_position == 131072
    assert models["mixtral-8x7b"].sliding_window == 0  # "sliding_window": null


def test_shipped_configs_are_all_used():
    raw = yaml.safe_load((CONFIGS.parent / "models.yaml").read_text())["models"]
    used = {d["config"] for d in raw.values() if "config" in d}
    assert used == {p.name for p in CONFIGS.glob("*.json")}


# --- names ----------------------------------------------------------------------------------


@pytest.mark.parametrize("query, name", [
    ("Mixtral-8x7B", "mixtral-8x7b"),
    ("mistralai/Mixtral-8x7B-Instruct-v0.1", "mixtral-8x7b"),
    ("meta-llama/Llama-3.1-8B-Instruct", "llama-3.1-8b"),
    ("LLAMA-3.1-8B", "llama-3.1-8b"),
    ("Qwen/Qwen3-30B-A3B-Instruct-2507", "qwen3-30b-a3b-instruct-2507"),
    ("qwen/qwen3-30b-a3b", "qwen3-30b-a3b"),
    ("google/gemma-3-12b-it", "gemma-3-12b"),
    ("gpt-oss-120b", "gpt-oss-120b"),
    ("deepseek-ai/DeepSeek-R1", "deepseek-v3"),
    ("Meta-Llama-3-8B", "llama-3-8b"),
])
def test_entries_answer_to_hf_ids_and_short_names(models, query, name):
    assert get_model(query, models).name == name


def test_no_name_is_claimed_by_two_entries(models):
    raw = yaml.safe_load((CONFIGS.parent / "models.yaml").read_text())["models"]
    claims: dict[str, set[str]] = {}
    for name, d in raw.items():
        hf = d.get("hf_id", "")
        for alias in [name, hf, hf.rpartition("/")[2], *d.get("aliases", []),
                      *(a.rpartition("/")[2] for a in d.get("aliases", []))]:
            if alias:
                claims.setdefault(alias.lower(), set()).add(name)
    assert {a: n for a, n in claims.items() if len(n) > 1} == {}
    assert set(model_aliases(models).values()) == set(models)


# --- config.json: local files and folders -----------------------------------------------------

QWEN15_MOE = {  # Qwen/Qwen1.5-MoE-A2.7B config.json (shape fields as published)
    "architectures": ["Qwen2MoeForCausalLM"], "model_type": "qwen2_moe",
    "hidden_size": 2048, "intermediate_size": 5632, "max_position_embeddings": 8192,
    "moe_intermediate_size": 1408, "num_attention_heads": 16, "num_experts": 60,
    "num_experts_per_tok": 4, "num_hidden_layers": 24, "num_key_value_heads": 16,
    "shared_expert_intermediate_size": 5632, "decoder_sparse_step": 1,
    "tie_word_embeddings": False, "vocab_size": 151936, "use_sliding_window": False,
    "sliding_window": 32768,
}


def test_local_folder_config_equals_catalog_entry(tmp_path, models):
    folder = tmp_path / "Mixtral-local"
    folder.mkdir()
    (folder / "config.json").write_text((CONFIGS / "mixtral-8x7b.json").read_text())
    spec = get_model(str(folder), models)
    ref = models["mixtral-8x7b"]
    assert spec.source == str(folder / "config.json")
    assert spec.num_params == ref.num_params
    assert spec.active_params_per_token == ref.active_params_per_token
    assert spec.kv_bytes_per_token(16) == ref.kv_bytes_per_token(16)


def test_qwen_moe_shared_expert(tmp_path):
    # Qwen1.5-MoE-A2.7B: 14.3B total, 2.7B activated (Qwen blog "Qwen1.5-MoE: Matching 7B Model
    # Performance with 1/3 Activated Parameters", 2024-03-28)
    (tmp_path / "config.json").write_text(json.dumps(QWEN15_MOE))
    m = model_from_hf_config(tmp_path)
    assert (m.num_shared_experts, m.shared_expert_intermediate_size) == (1, 5632)
    assert m.sliding_window == 0  # use_sliding_window false
    assert m.num_params == pytest.approx(14.3e9, rel=0.02)
    assert m.active_params_per_token == pytest.approx(2.7e9, rel=0.02)


def test_rope_scaling_extends_context(tmp_path):
    cfg = dict(QWEN15_MOE, max_position_embeddings=32768,
               rope_scaling={"rope_type": "yarn", "factor": 4.0,
                             "original_max_position_embeddings": 32768})
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    assert model_from_hf_config(tmp_path).max_position == 131072
    cfg["rope_scaling"] = {"rope_type": "linear", "factor": 8.0}  # context already scaled
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    assert model_from_hf_config(tmp_path).max_position == 32768


def test_nested_text_config_and_window_rules(tmp_path):
    cfg = json.loads((CONFIGS / "gemma-3-12b.json").read_text())
    cfg["text_config"]["layer_types"] = ["sliding_attention"] * 47 + ["full_attention"]
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    m = model_from_hf_config(tmp_path)
    assert m.num_layers == 48 and m.num_window_layers == 47  # layer_types wins over pattern
    cfg["text_config"]["layer_types"] = ["sliding_attention"] * 3
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(TunerError, match="layer_types lists 3 layers"):
        model_from_hf_config(tmp_path)
    mistral_v01 = {"hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32,
                   "num_hidden_layers": 32, "num_key_value_heads": 8, "vocab_size": 32000,
                   "max_position_embeddings": 32768, "sliding_window": 4096}
    (tmp_path / "config.json").write_text(json.dumps(mistral_v01))
    m = model_from_hf_config(tmp_path)
    assert (m.sliding_window, m.num_window_layers) == (4096, 32)  # every layer slides


@pytest.mark.parametrize("change, message", [
    ({"num_experts_per_tok": None}, "num_experts_per_tok between 1 and 60"),
    ({"num_experts_per_tok": 61}, "num_experts_per_tok between 1 and 60"),
    ({"num_experts": -4}, "num_experts must be a non-negative integer"),
    ({"num_attention_heads": 12}, "multiple of num_key_value_heads"),
    ({"hidden_size": "2048"}, "hidden_size must be a positive integer"),
])
def test_bad_configs_give_one_line_errors(tmp_path, change, message):
    (tmp_path / "config.json").write_text(json.dumps({**QWEN15_MOE, **change}))
    with pytest.raises(TunerError, match=message) as err:
        model_from_hf_config(tmp_path)
    assert "\n" not in str(err.value)


def test_config_must_be_an_object(tmp_path):
    (tmp_path / "config.json").write_text("[1, 2]")
    with pytest.raises(TunerError, match="JSON object"):
        model_from_hf_config(tmp_path)


# --- Hugging Face ids: the local HF cache, offline -------------------------------------------


def _fake_hf_cache(root: Path, repo: str, config: dict) -> Path:
    """The snapshot layout huggingface_hub writes: models--OWNER--NAME/{refs/main,snapshots/REV}."""
    commit = "0123456789abcdef0123456789abcdef01234567"
    repo_dir = root / ("models--" + repo.replace("/", "--"))
    (repo_dir / "refs").mkdir(parents=True)
    (repo_dir / "refs" / "main").write_text(commit)
    snap = repo_dir / "snapshots" / commit
    snap.mkdir(parents=True)
    (snap / "config.json").write_text(json.dumps(config))
    return snap / "config.json"


def test_hf_id_read_from_local_cache_offline(tmp_path, monkeypatch, models):
    cache = tmp_path / "hf" / "hub"
    path = _fake_hf_cache(cache, "acme/Tiny-MoE", QWEN15_MOE)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.delenv("HUGGINGFACE_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.chdir(tmp_path)
    m = get_model("acme/Tiny-MoE", models)
    assert m.hf_id == m.name == "acme/Tiny-MoE" and m.source == str(path)
    assert m.num_experts == 60
    with pytest.raises(TunerError, match="No config.json for 'acme/missing'.*offline.*--model"):
        get_model("acme/missing", models)


def test_hf_id_falls_back_to_cache_when_the_hub_is_unreachable(tmp_path, monkeypatch, models):
    import huggingface_hub

    _fake_hf_cache(tmp_path / "hub", "acme/Tiny-MoE", QWEN15_MOE)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    calls = []

    def no_network(url, **kw):
        calls.append((url, kw.get("timeout")))
        raise ConnectionError("no route to host")

    def must_not_download(*a, **kw):  # the library would retry a dead network for ~25 s
        raise AssertionError("hf_hub_download called after the HEAD request failed")

    monkeypatch.setattr(huggingface_hub, "get_hf_file_metadata", no_network)
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", must_not_download)
    monkeypatch.chdir(tmp_path)
    assert get_model("acme/Tiny-MoE", models).num_experts == 60
    assert calls == [(huggingface_hub.hf_hub_url("acme/Tiny-MoE", "config.json"), 5)]
    with pytest.raises(TunerError, match="cannot reach the Hugging Face Hub"):
        get_model("acme/other", models)


def test_hf_download_result_is_used(tmp_path, monkeypatch, models):
    import huggingface_hub

    path = tmp_path / "downloaded" / "config.json"
    path.parent.mkdir()
    path.write_text((CONFIGS / "gpt-oss-20b.json").read_text())
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(huggingface_hub, "get_hf_file_metadata", lambda *a, **k: None)
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", lambda *a, **k: str(path))
    monkeypatch.chdir(tmp_path)
    m = get_model("someone/gpt-oss-finetune", models)
    assert m.num_params == models["gpt-oss-20b"].num_params and m.hf_id == "someone/gpt-oss-finetune"


def _offline_empty_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.delenv("HUGGINGFACE_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.chdir(tmp_path)


@pytest.mark.parametrize("repo, base, bits", [
    ("meta-llama/Meta-Llama-3.1-8B-Instruct-FP8", "llama-3.1-8b", 8),  # not an alias: FP8
    ("neuralmagic/Meta-Llama-3.1-70B-Instruct-FP8", "llama-3.1-70b", 8),
    ("NousResearch/Hermes-3-Llama-3.1-405B-FP8", "llama-3.1-405b", 8),  # a named fine-tune
    ("meta-llama/Llama-2-7b-chat-hf", "llama-2-7b", 16),
    ("someone/Qwen2.5-7B-Instruct-v2", "qwen2.5-7b", 16),
])
def test_an_unreadable_repo_named_after_a_catalog_model_takes_its_shape(
        repo, base, bits, tmp_path, monkeypatch, models):
    """Offline (or gated), a repo named after a catalog model is priced with that model's
    shape, its FP8 weights kept, and the source says the shape is assumed from the name."""
    _offline_empty_cache(tmp_path, monkeypatch)
    from tuner.core.catalog import shape_note

    m = get_model(repo, models)
    want = models[base]
    assert (m.num_params, m.num_layers, m.kv_bytes_per_token_per_layer(16)) == (
        want.num_params, want.num_layers, want.kv_bytes_per_token_per_layer(16))
    assert m.checkpoint_bits == bits and m.load_id == m.hf_id == repo
    note = shape_note(m)
    assert note and f"catalog {base}'s shape, assumed from the name {repo}" in note
    assert "offline" in note and ("FP8 weights" in note) == (bits == 8)
    assert shape_note(models[base]) is None


def test_a_repo_named_after_nothing_or_missing_is_still_refused(tmp_path, monkeypatch, models):
    from tuner.core import catalog

    _offline_empty_cache(tmp_path, monkeypatch)
    for repo in ("acme/Foo-7B", "meta-llama/Llama-3.2-11B-Vision-Instruct"):
        with pytest.raises(TunerError, match=f"No config.json for '{repo}'.*offline"):
            get_model(repo, models)

    def not_found(repo_id):  # the Hub answered: no such repo (a typo, not an offline machine)
        raise TunerError(f"No config.json for {repo_id!r}: no such repo on the Hugging Face Hub")

    monkeypatch.setattr(catalog, "hf_config_path", not_found)
    with pytest.raises(TunerError, match="no such repo"):
        get_model("meta-llama/Meta-Llama-3.1-8B-Instruct-FP8", models)


def test_the_lambda_runs_instruct_checkpoints_are_catalog_aliases(models):
    """The -Instruct repos of lambda-a100's index resolve offline, exactly, with no note."""
    for repo, base in (("meta-llama/Meta-Llama-3-8B-Instruct", "llama-3-8b"),
                       ("meta-llama/Meta-Llama-3-70B-Instruct", "llama-3-70b"),
                       ("mistralai/Mistral-7B-Instruct-v0.3", "mistral-7b"),
                       ("mistralai/Mistral-Nemo-Instruct-2407", "mistral-nemo-12b")):
        m = get_model(repo, models)
        assert m.name == base and m.checkpoint == repo and m.source == models[base].source


def test_simulate_says_when_the_shape_is_assumed(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from tuner.cli.main import app

    _offline_empty_cache(tmp_path, monkeypatch)
    wl = Path(__file__).resolve().parents[1] / "examples" / "arxiv.jsonl"
    r = CliRunner().invoke(app, ["simulate", "-w", str(wl), "-g", "H100", "-m",
                                 "neuralmagic/Meta-Llama-3.1-8B-Instruct-FP8"])
    assert r.exit_code == 0, r.output
    text = " ".join(r.output.split())
    assert "model: catalog llama-3.1-8b's shape, assumed from the name" in text
    assert "8-bit weights" in text


def test_unknown_plain_name_still_suggests(models, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(TunerError, match="Did you mean") as err:
        get_model("mixtral-8x7", models)
    assert "mixtral-8x7b" in str(err.value)


# --- memory plan: weights use total params, KV the MLA / window rules ------------------------


def test_window_kv_per_request(models):
    g = models["gemma-3-12b"]
    per_layer = g.kv_bytes_per_token_per_layer(16)
    assert window_kv_tokens(g, 5000) == 1024 and window_kv_tokens(g, 300) == 300
    assert kv_bytes_per_request(g, 5000, 16) == per_layer * (8 * 5000 + 40 * 1024)
    assert kv_bytes_per_request(g, 500, 16) == per_layer * 48 * 500
    # TP 2 halves the 8 KV heads; 24 of 48 layers (KV offload) keep half the window layers
    assert kv_bytes_per_request(g, 5000, 16, tp=2, layers=24) == \
        per_layer / 2 * (4 * 5000 + 20 * 1024)
    dense = models["llama-3-8b"]
    assert kv_bytes_per_request(dense, 5000, 16) == dense.kv_bytes_per_token(16) * 5000
    assert kv_layer_fraction(dense, 5000) == 1.0 and kv_layer_fraction(g, 0) == 1.0
    assert kv_layer_fraction(g, 4096) == pytest.approx((8 + 40 * 0.25) / 48)


def test_memory_plan_uses_total_weights_and_window_kv(models, gpus_h100):
    cfg = ServingConfig(gpu="H100", tp=2)
    mx = models["mixtral-8x7b"]
    plan = plan_memory(mx, gpus_h100, cfg, mean_request_tokens=3000)
    assert plan.weight_bytes == pytest.approx(mx.weight_bytes(16) / 2)
    assert plan.weight_bytes > 2 * 45e9 / 2  # every expert resident
    assert plan.kv_bytes_per_token == mx.kv_bytes_per_token(16) / 2

    g = models["gemma-3-12b"]
    short = plan_memory(g, gpus_h100, cfg, mean_request_tokens=500)
    long = plan_memory(g, gpus_h100, cfg, mean_request_tokens=8192)
    assert short.kv_bytes_per_token == g.kv_bytes_per_token(16) / 2  # all within the window
    assert long.kv_bytes_per_token == pytest.approx(
        kv_bytes_per_request(g, 8192, 16, tp=2) / 8192)
    assert long.kv_capacity_tokens > 1.8 * short.kv_capacity_tokens

    ds = models["deepseek-v3"]
    plan = plan_memory(ds, gpus_h100, ServingConfig(gpu="H100", tp=8, weight_bits=4))
    assert plan.kv_bytes_per_token == 576 * 2 * 61  # MLA latent, whole on each rank


@pytest.fixture(scope="module")
def gpus_h100():
    from tuner.core.catalog import get_gpu, load_gpus

    return get_gpu("H100", load_gpus())


# --- CLI ---------------------------------------------------------------------------------------


def test_models_command_shows_totals_active_kv_context_and_source():
    r = runner.invoke(app, ["models", "--json"])
    assert r.exit_code == 0, r.output
    cat = json.loads(r.stdout)
    mx = cat["mixtral-8x7b"]
    assert mx["num_params"] > 3 * mx["active_params_per_token"] > 0 and mx["is_moe"]
    assert mx["kv_bytes_per_token_16bit"] == 131072 and mx["context_tokens"] == 32768
    assert mx["source"] == "catalog (configs/mixtral-8x7b.json)"
    g = cat["gemma-3-12b"]
    assert g["kv_bytes_per_token_16bit_past_window"] == 8 * 2 * 8 * 256 * 2
    assert cat["llama-3-8b"]["source"] == "catalog (models.yaml)"
    r = runner.invoke(app, ["models"], env={"COLUMNS": "250"})
    assert r.exit_code == 0, r.output
    assert "deepseek-v3" in r.stdout and "MLA" in r.stdout and "256 top-8" in r.stdout


def test_models_command_shows_one_local_config(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(QWEN15_MOE))
    r = runner.invoke(app, ["models", "-m", str(tmp_path), "--json"])
    assert r.exit_code == 0, r.output
    (row,) = json.loads(r.stdout).values()
    assert row["source"] == str(tmp_path / "config.json") and row["num_experts"] == 60


@pytest.mark.parametrize("model", ["mixtral-8x7b", "gemma-3-12b", "local"])
def test_simulate_new_models_on_two_h100(model, tmp_path):
    if model == "local":
        (tmp_path / "config.json").write_text((CONFIGS / "gpt-oss-20b.json").read_text())
        model = str(tmp_path)
    r = runner.invoke(app, ["simulate", "-w", str(EXAMPLE_WORKLOAD), "-m", model, "-g", "H100",
                            "--tp", "2", "--json"])
    assert r.exit_code == 0, r.output
    res = json.loads(r.stdout)
    assert res["requests"] == 400 and res["makespan_s"] > 0 and res["kv_capacity_tokens"] > 0
    assert res["memory"]["fits"]
