"""vLLM's start-up profile follows the model runner each release picks for the model
(tuner.core.memory.MRV2_DEFAULTS, read in the 0.22.0 - 0.33.0 wheels' vllm/config/vllm.py)."""

from dataclasses import replace

import pytest

from tuner.core.catalog import get_gpu, get_model, load_gpus
from tuner.core.config import ServingConfig
from tuner.core.memory import PROFILE_RUNS, model_runner_key, plan_memory, profile_run_for

V1 = "v1"
V2 = "v2"
LLAMA, QWEN3, GEMMA3 = "LlamaForCausalLM", "Qwen3ForCausalLM", "Gemma3ForConditionalGeneration"


def runner(version, arch=(), moe=False, quantized=False):
    return profile_run_for(version, moe, arch, quantized).runner


@pytest.mark.parametrize("version,arch,moe,quantized,want", [
    ("0.21.0", (QWEN3,), False, False, V1),  # the release before: no default V2
    ("0.22.0", (QWEN3,), False, False, V2),  # 0.22.0's list: Qwen3 only
    ("0.22.0", (LLAMA,), False, False, V1),
    ("0.22.0", (QWEN3,), False, True, V1),  # quantized checkpoint
    ("0.23.0", (LLAMA,), False, False, V2),  # Llama / Mistral join in 0.23
    ("0.23.0", (GEMMA3,), False, False, V1),  # dense, not listed
    ("0.23.0", ("Phi3ForCausalLM",), False, False, V1),
    ("0.23.0", (LLAMA,), False, True, V1),
    ("0.24.0", (LLAMA,), False, True, V2),  # 0.24 drops the MoE / quantized condition
    ("0.24.0", ("Qwen2MoeForCausalLM",), True, False, V2),
    ("0.24.0", (GEMMA3,), False, False, V1),
    ("0.24.0", ("Qwen3MoeForCausalLM",), True, False, V1),
    ("0.25.0", (GEMMA3,), False, False, V2),  # every dense model from 0.25
    ("0.25.0", (GEMMA3,), False, True, V2),
    ("0.25.0", ("Qwen3MoeForCausalLM",), True, False, V1),  # an unlisted MoE keeps V1
    ("0.25.0", ("DeepseekV2ForCausalLM",), True, False, V2),
    ("0.28.0", ("DeepseekV3ForCausalLM",), True, True, V1),
    ("0.29.0", ("DeepseekV3ForCausalLM",), True, True, V2),  # every model from 0.29
    ("0.33.0", ("GptOssForCausalLM",), True, True, V2),
])
def test_each_release_picks_the_model_runner_as_its_config_does(version, arch, moe,
                                                                 quantized, want):
    assert runner(version, arch, moe, quantized) == want


def test_the_rows_of_each_runner():
    assert profile_run_for("0.23.0", False, (GEMMA3,)) == profile_run_for("0.19.0")
    v2 = profile_run_for("0.22.0", False, (QWEN3,))
    assert v2.sampler_bytes_per_logit == 2.0 and not v2.cuda_graphs_in_budget
    assert profile_run_for("0.28.0", False, (GEMMA3,)) == v2
    v29 = profile_run_for("0.29.0", True, ())
    assert v29.sampler_bytes_per_logit == 2.0 and v29.cuda_graphs_in_budget
    # 0.33 samples a warm-up pass over every sampling step: the sampler reserve is back
    v33 = profile_run_for("0.33.0")
    assert v33 == profile_run_for(None) == PROFILE_RUNS[-1]
    assert v33.sampler_bytes_per_logit == 14.0 and v33.cuda_graphs_in_budget
    assert profile_run_for("0.32.0") == v29


def test_catalog_models_carry_their_architecture():
    assert model_runner_key(get_model("gemma-3-4b")) == ((GEMMA3,), False, False)
    assert model_runner_key(get_model("qwen3-8b")) == ((QWEN3,), False, False)
    archs, moe, quantized = model_runner_key(get_model("deepseek-v3"))
    assert archs == ("DeepseekV3ForCausalLM",) and moe and quantized
    assert model_runner_key(None) == ((), False, False)


def test_kv_capacity_of_an_unlisted_dense_model_on_0_23():
    """Gemma-3-4B on an RTX 4090 under 0.23 keeps the V1 runner's Triton sampler reserve and
    its CUDA graphs (before: priced as model runner V2, greedy and graphs outside)."""
    gpus = load_gpus()
    m, g = get_model("gemma-3-4b"), get_gpu("RTX4090", gpus)
    cfg = ServingConfig(gpu="RTX4090", chunk_size=2048, max_running=256)
    tokens = plan_memory(m, g, cfg, engine_version="0.23.0").kv_capacity_tokens
    assert tokens == plan_memory(m, g, cfg, engine_version="0.22.0").kv_capacity_tokens
    assert tokens == GEMMA_0_23_TOKENS
    # a listed model of the same shape gets the V2 runner's smaller reserve
    llama_shaped = replace(m, name="llama-3.1-8b")  # catalog name -> LlamaForCausalLM
    assert plan_memory(llama_shaped, g, cfg, engine_version="0.23.0").kv_capacity_tokens \
        > tokens
    assert plan_memory(m, g, cfg, engine_version="0.25.0").kv_capacity_tokens > tokens


GEMMA_0_23_TOKENS = 94_672  # 105,264 before the fix (priced as model runner V2); 88,768
# while s51 counted its 0.77 GiB SigLIP tower on 0.23 too, which skips it for the text-only job
# tuner's exports ask for (--limit-mm-per-prompt, tests/test_vlm_text_only_s51.py)
