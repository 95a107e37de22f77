"""Review of stop 54's changes (helper H11): bugs found in the day's new code paths."""

from __future__ import annotations

import math

import pytest

from tests.test_offload import GPUS, linear_link
from tuner.core.catalog import get_gpu, get_model
from tuner.core.config import ServingConfig
from tuner.core.memory import (
    kv_bytes_per_token_per_layer_rank,
    plan_memory,
    weight_bytes_per_rank,
)
from tuner.search.storage import _sha, _unlabelled
from tuner.sim import offload as off


@pytest.mark.parametrize("version, scheme", [(None, "vllm-uva"), ("0.8.0", "vllm-copy")])
def test_vllm_weight_offload_counts_the_stage_layers(version, scheme):
    """With pipeline parallelism a rank holds its stage's layers (weight_bytes_per_rank): half
    of a PP-2 stage of llama-3-8b (16 of its 32 layers) is 8 whole layers of the stage's
    weights / 16, not 16 layers of half that size. The copy scheme's GPU buffer is one such
    layer."""
    m, g = get_model("llama-3-8b"), get_gpu("A10", GPUS)
    cfg = ServingConfig(gpu="A10", pp=2, weight_offload_fraction=0.5)
    stage_layers = math.ceil(m.num_layers / 2)
    # a stage's decoder layers (the larger of embedding and LM head left out: vLLM offloads
    # decoder layers only)
    layer = (weight_bytes_per_rank(m, cfg) - 2 * max(m.embedding_params, m.lm_head_params)
             ) / stage_layers
    ctx = off.OffloadContext.build(m, g, cfg, transfer=linear_link(1e9), engine_version=version)
    assert ctx.weight_scheme == scheme
    assert ctx.weight_offloaded_layers == pytest.approx(0.5 * weight_bytes_per_rank(m, cfg)
                                                         / layer)
    assert 8 < ctx.weight_offloaded_layers < stage_layers
    assert ctx.weight_layer_bytes == pytest.approx(layer)
    plan = plan_memory(m, g, cfg, engine_version=version)
    assert plan.weight_offload_scheme == scheme
    assert plan.offload_staging_bytes == pytest.approx(layer if scheme == "vllm-copy" else 0.0)


def test_mla_cache_before_071_is_what_the_offload_moves():
    """vLLM before 0.7.1 caches an MLA model's full K / V (12,288 bytes per token and layer
    for DeepSeek-V3 at TP 8, 16-bit): the offloaded layers' KV moved over the link is the
    memory plan's, not the latent the newer releases cache (1,152)."""
    m, g = get_model("deepseek-v3"), get_gpu("H200", GPUS)
    cfg = ServingConfig(gpu="H200", tp=8, weight_bits=8, kv_offload_layers=4)
    for version in ("0.7.0", None):
        held = kv_bytes_per_token_per_layer_rank(m, 16, 8, version, g, "vllm")
        ctx = off.OffloadContext.build(m, g, cfg, engine_version=version)
        assert ctx.kv_bytes_per_token_layer == pytest.approx(held)
        assert ctx.kv_elems_per_token_layer == pytest.approx(held / 2.0)
    assert kv_bytes_per_token_per_layer_rank(m, 16, 8, "0.7.0") == pytest.approx(12288.0)


def test_network_words_do_not_block_a_resume():
    """A stored study's GPU spec compared without the words about its prices
    (storage._unlabelled): an instance's network label and source are words too; its
    network_gbps is a figure and still counts."""
    inst = {"name": "p5.48xlarge", "gpus": 8, "usd_per_h": 98.32, "source": "a", "date": "d",
            "network_gbps": 3200.0, "network_label": "p5.48xlarge 3,200 Gbps (aws, read x)",
            "network_source": "aws docs"}
    spec = {"name": "H100", "billing": {"provider": "aws", "instances": [inst]}}
    reworded = {"name": "H100", "billing": {"provider": "aws", "instances": [
        inst | {"network_label": "p5.48xlarge 3,200 Gbps (aws, read y)",
                "network_source": "aws page"}]}}
    refigured = {"name": "H100", "billing": {"provider": "aws", "instances": [
        inst | {"network_gbps": 1600.0}]}}
    assert _sha(_unlabelled(spec)) == _sha(_unlabelled(reworded))
    assert _sha(_unlabelled(spec)) != _sha(_unlabelled(refigured))
