"""Stop 52: Gated DeltaNet hybrids (Qwen3-Next, Qwen3.5) priced on vLLM V1, Mamba refused."""

from __future__ import annotations

import numpy as np
import pytest

from tuner.core.catalog import get_model, load_gpus, model_from_config_dict
from tuner.core.config import ServingConfig
from tuner.core.errors import TunerError
from tuner.core.memory import hybrid_layout, plan_memory
from tuner.core.workload import Workload
from tuner.predictors.features import BatchFeatures
from tuner.predictors.hybrid import ESTIMATED, linear_part
from tuner.predictors.sources import resolve_cost_model
from tuner.sim.simulator import InfeasibleConfig, simulate

QWEN35 = {"architectures": ["Qwen3_5ForConditionalGeneration"], "model_type": "qwen3_5",
          "text_config": {"model_type": "qwen3_5_text", "num_hidden_layers": 64,
                          "hidden_size": 5120, "intermediate_size": 17408,
                          "num_attention_heads": 24, "num_key_value_heads": 4, "head_dim": 256,
                          "vocab_size": 248320, "linear_num_key_heads": 16,
                          "linear_num_value_heads": 48, "linear_key_head_dim": 128,
                          "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4,
                          "mamba_ssm_dtype": "float32",
                          "layer_types": ["full_attention" if i % 4 == 3 else "linear_attention"
                                          for i in range(64)]}}


@pytest.fixture(scope="module")
def qnext():
    return get_model("qwen3-next-80b-a3b")


def test_catalog_entry_shape(qnext):
    assert (qnext.num_layers, qnext.num_kv_layers, qnext.linear_attention_layers) == (48, 12, 36)
    assert 79e9 < qnext.num_params < 81.5e9  # "80B"
    # only the 12 attention layers keep KV: 12 x 2 heads x (256 + 256) x 2 bytes
    assert qnext.kv_bytes_per_token(16) == 12 * 2 * 512 * 2


def test_state_bytes_as_vllm_sizes_them(qnext):
    # gated_delta_net_state_shape at tp 4: conv (8192 / 4) x 3, temporal (32 / 4) x 128 x 128
    assert qnext.linear_state_bytes_per_layer_rank(4) == (2048 * 3 + 8 * 128 * 128) * 2


def test_block_raised_like_vllm(qnext):
    # attention page 1 token = 2 x 1 KV head x 256 x 2 B = 1024 B; 16 x ceil(274432 / 16384)
    lay = hybrid_layout(qnext, ServingConfig(gpu="H100", tp=4))
    assert (lay.block_size_tokens, lay.group_layers, lay.attention_groups,
            lay.state_groups) == (272, 12, 1, 3)


def test_qwen35_reads_layer_types_and_fp32_state():
    m = model_from_config_dict(QWEN35, where="q.json", name="q", source="test")
    assert (m.num_kv_layers, m.linear_attention_layers, m.linear_ssm_state_bits) == (16, 48, 32)


def test_mamba_hybrid_still_refused_in_one_line():
    cfg = {"architectures": ["NemotronHForCausalLM"], "model_type": "nemotron_h",
           "num_hidden_layers": 8, "hidden_size": 64, "num_attention_heads": 4,
           "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 100,
           "hybrid_override_pattern": "MEM*MEM*"}  # Nemotron-3's MoE blocks
    with pytest.raises(TunerError) as err:
        model_from_config_dict(cfg, where="n.json", name="n", source="test")
    assert "\n" not in str(err.value) and "Mamba" in str(err.value)


def test_plan_pool_is_every_block_state_charged_by_scheduler(qnext):
    gpu = load_gpus()["H100"]
    cfg = ServingConfig(gpu="H100", tp=4, max_running=256)
    p = plan_memory(qnext, gpu, cfg, mean_request_tokens=1500)
    assert p.fits and p.block_size_tokens == 272 and p.state_blocks_per_request == 3
    lay = hybrid_layout(qnext, cfg)
    pool = int(p.kv_bytes // lay.block_bytes)
    assert p.kv_capacity_blocks == pool  # the scheduler charges the state blocks (stop 52)
    assert p.kv_capacity_tokens == p.kv_capacity_blocks * 272


def test_linear_part_gemm_shapes_match_in_proj(qnext):
    lin = linear_part(qnext)
    # in_proj_qkvz: 2 x 16 x 128 + 2 x 32 x 128 = 12288 outputs; out_proj 4096 -> 2048
    assert (lin.num_heads + 2 * lin.num_kv_heads) * lin.head_dim == 12288
    assert lin.num_heads * lin.head_dim == 4096


def test_cost_model_labels_the_scan_estimate(qnext):
    gpu = load_gpus()["H100"]
    cm = resolve_cost_model(qnext, gpu, ServingConfig(gpu="H100", tp=4))
    f = BatchFeatures.single(decodes=64, kv_tokens=64 * 2000)
    parts = cm.breakdown(f)
    assert ESTIMATED in parts and parts[ESTIMATED][0] > 0
    assert "ESTIMATE" in cm.provenance.detail
    assert np.isclose(cm.iteration_time_s(f)[0], sum(v[0] for v in parts.values()))


def _job(n=64):
    return Workload(prompt_tokens=np.full(n, 800, dtype=np.int64),
                    output_tokens=np.full(n, 50, dtype=np.int64))


def test_simulation_charges_state_pages(qnext):
    gpu = load_gpus()["H100"]
    cfg = ServingConfig(gpu="H100", tp=4, max_running=32)
    cm = resolve_cost_model(qnext, gpu, cfg)
    r = simulate(_job(), qnext, gpu, cfg, cm)
    assert r.makespan_s > 0 and r.memory.state_blocks_per_request == 3


@pytest.mark.parametrize("kw, words", [
    (dict(engine_version="0.10.1"), "0.10.2"),
])
def test_refused_where_it_cannot_run(qnext, kw, words):
    gpu = load_gpus()["H100"]
    cfg = ServingConfig(gpu="H100", tp=4, **({"engine": kw["engine"]} if "engine" in kw else {}))
    cm = resolve_cost_model(qnext, gpu, ServingConfig(gpu="H100", tp=4))
    with pytest.raises(InfeasibleConfig, match=words):
        simulate(_job(8), qnext, gpu, cfg, cm,
                 **({"engine_version": kw["engine_version"]} if "engine_version" in kw else {}))
