"""Second QA pass of stop 53: a vLLM V0 mixture-of-experts plan at dp > 1 (independent
replicas) exported as SGLang, and the multi-step refusal's advice in the search."""

from __future__ import annotations

import json

import pytest

from tuner.core.catalog import load_gpus, load_models
from tuner.core.config import ServingConfig


@pytest.fixture(scope="module")
def mixtral_h100():
    return load_models()["mixtral-8x7b"], load_gpus()["H100"]


def _config(**kw) -> ServingConfig:
    base = {"gpu": "H100", "engine": "vllm", "tp": 2, "dp": 2, "chunk_size": 16384,
            "max_running": 128, "block_size": 16}
    return ServingConfig(**(base | kw))


def test_v0_moe_replicas_export_as_independent_sglang_servers(mixtral_h100):
    """The prediction is dp servers each holding every expert (vLLM 0.6.0 has no data-parallel
    MoE engine): SGLang's --dp-size without DP attention, which is what that is."""
    from tuner.exports.sglang import sglang_server_args

    model, gpu = mixtral_h100
    opts, notes = sglang_server_args(_config(scheduler="vllm-v0"), model, gpu,
                                     max_model_len=5120, engine_version="0.6.0")
    o = dict(opts)
    assert o["tp-size"] == 2 and o["dp-size"] == 2 and "attn-dp-size" not in o
    assert o["max-running-requests"] == 128 and "schedule-conservativeness" not in o
    assert any("2 independent servers" in n for n in notes)
    assert not any("DP attention (--attn-dp-size" in n for n in notes)
    # V1 (the newest release): one engine, experts split over tp x dp = SGLang's DP attention
    v1, v1_notes = sglang_server_args(_config(), model, gpu, max_model_len=5120)
    v1 = dict(v1)
    assert v1["tp-size"] == 4 and v1["attn-dp-size"] == 2 and "dp-size" not in v1
    assert any("one server with DP attention" in n for n in v1_notes)


def test_every_sglang_format_carries_the_release(mixtral_h100):
    from tuner.exports.formats import render_export

    model, gpu = mixtral_h100
    config = _config(scheduler="vllm-v0")
    kw = {"max_model_len": 5120, "engine_version": "0.6.0", "num_scheduler_steps": 10}
    cmd = render_export("sglang", config, model, gpu, **kw)
    assert "--dp-size 2" in cmd and "--attn-dp-size" not in cmd
    offline = render_export("sglang-offline", config, model, gpu, **kw)
    assert "attn_dp_size" not in offline and "dp_size" in offline
    doc = json.loads(render_export("json", config, model, gpu, **kw))
    assert doc["sglang"]["server_args"]["dp-size"] == 2
    assert "attn-dp-size" not in doc["sglang"]["server_args"]


def test_the_multi_step_refusal_says_how_in_the_search_too():
    from tuner.core.engines import generation_of, multi_step_refusal

    why = multi_step_refusal(generation_of("0.6.0"), 10, True, 1)
    assert "--num-scheduler-steps 1" in why
    assert "scheduler: vllm-v0 in the --space file" in why and "simulate: --scheduler" in why
    why_pp = multi_step_refusal(generation_of("0.6.3"), 10, True, 2)
    assert why_pp and "scheduler: vllm-v0 in the --space file" in why_pp
