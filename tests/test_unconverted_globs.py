"""Exclusion lists written as "*" wildcards (gpt-oss's "model.layers.*.self_attn"): the
attention projections of an MXFP4 checkpoint stay BF16, as the checkpoint holds them, so the
planned weights match OpenAI's published checkpoint sizes."""

from dataclasses import replace

import numpy as np
import pytest

from tuner.core.catalog import _module_matches, load_models, unconverted_share

GIB = 1024**3


def test_wildcards_match_the_module_or_a_parent_of_it():
    assert _module_matches("model.layers.7.self_attn.q_proj", "model.layers.*.self_attn")
    assert _module_matches("model.layers.7.self_attn", "model.layers.*.self_attn")
    assert not _module_matches("model.layers.7.mlp.down_proj", "model.layers.*.self_attn")
    assert not _module_matches("model.layers.7.self_attn_x.q_proj", "model.layers.*.self_attn")
    # plain names keep their old meaning
    assert _module_matches("model.layers.0.mlp.up_proj", "model.layers.0.mlp")
    assert not _module_matches("model.layers.10.mlp.up_proj", "model.layers.1.mlp")


# OpenAI, gpt-oss-120b & gpt-oss-20b model card (2025-08-05), Table 1 "Checkpoint Size":
# 60.8 GiB and 12.8 GiB (MoE weights in MXFP4, the rest in BF16)
@pytest.mark.parametrize("name,card_gib", [("gpt-oss-120b", 60.8), ("gpt-oss-20b", 12.8)])
def test_gpt_oss_weights_match_the_model_cards_checkpoint_size(name, card_gib):
    spec = load_models()[name]
    assert unconverted_share(spec.checkpoint_quantization) > 0  # its attention, at 16 bits
    gib = spec.weight_bytes(spec.checkpoint_bits) / GIB
    # before the wildcard was read: 59.4 GiB for the 120b (-2.4 %), attention at 4.25 bits
    assert gib == pytest.approx(card_gib, rel=0.01), gib


def test_roofline_reads_bf16_attention_at_two_bytes_and_experts_at_their_own():
    # a one-token decode step is memory-bound: its attention projections read 2 bytes a
    # weight, the routed experts MXFP4's 4.25 bits (before: both the mean, ~0.55 B)
    from tuner.core.catalog import load_gpus
    from tuner.predictors.features import BatchFeatures
    from tuner.predictors.opmath import quantized_bytes_per_param
    from tuner.predictors.roofline import RooflineCostModel

    spec = load_models()["gpt-oss-120b"]
    gpu = load_gpus()["H100"]
    cm = RooflineCostModel.from_specs(gpu, spec, tp=1, weight_bits=4)
    plain = replace(cm, unconverted_attention=0.0, quantized_weight_bytes_per_param=0.0)
    assert cm.quantized_weight_bytes_per_param == pytest.approx(
        quantized_bytes_per_param(spec, 4))
    assert cm.quantized_weight_bytes_per_param < cm.weight_bytes_per_param
    one = BatchFeatures(*(np.array([v], dtype=float) for v in (0, 0, 0, 1, 1000, 1)))
    a, b = cm.breakdown(one), plain.breakdown(one)
    attn_params = spec.num_layers * cm._attention_params_per_layer
    extra_s = attn_params * (2.0 - cm.weight_bytes_per_param) / cm._bw
    # the dense part of the step (attention projections, router) reads the BF16 bytes more
    assert a["linear"][0] - b["linear"][0] == pytest.approx(extra_s, rel=0.02)
