"""Stop 52 (helper R): the width vLLM keeps a Mamba2 hybrid's temporal (SSM) state at, by
release, as the wheels' model_executor/models/config.py set it: Nemotron-H has no hook through
0.12.0 (the model dtype), the config's mamba_ssm_cache_dtype else float16 from 0.13.0
(vllm#29978), else float32 from 0.20.0 (vllm#39032); GraniteMoeHybrid and Qwen3-Next have no
hook ("auto": the model dtype) on any release."""

from __future__ import annotations

import copy
import dataclasses
import json
import math

import pytest

from tuner.core.catalog import _catalog_config, get_model, load_gpus, model_from_config_dict
from tuner.core.config import ServingConfig
from tuner.core.memory import hybrid_layout, plan_memory
from tuner.exports.vllm import vllm_engine_args

# nemotron-h-8b-base-8k per layer (vLLM mamba2_state_shape): conv (8192 + 2 x 8 x 128) x 3 at
# 16 bits, temporal 128 heads x 64 x 128; its 4 attention layers' page, 8 KV heads x 128 x 2
CONV_BYTES = (8192 + 2 * 8 * 128) * 3 * 2
TEMPORAL = 128 * 64 * 128
PAGE_TOKEN_BYTES = 2 * 8 * 128 * 2


def _state(bits):
    return CONV_BYTES + TEMPORAL * bits // 8


def _block(bits):
    return 16 * math.ceil(_state(bits) / (16 * PAGE_TOKEN_BYTES))


@pytest.fixture(scope="module")
def h8b():
    return get_model("nemotron-h-8b-base-8k")


@pytest.fixture(scope="module")
def h100():
    return load_gpus()["H100"]


def _h8b_named(dtype):
    raw, _ = _catalog_config("nemotron-h-8b-base-8k.json")
    raw = {**copy.deepcopy(raw), "mamba_ssm_cache_dtype": dtype}
    return model_from_config_dict(raw, where="c.json", name="n", source="test")


def _plan(model, gpu, version):
    return plan_memory(model, gpu, ServingConfig(gpu="H100", tp=1), mean_request_tokens=1000,
                       engine_version=version)


# (release, state bits of a silent config): before the hook, the hook's float16, float32
@pytest.mark.parametrize("version, bits", [
    ("0.10.2", 16), ("0.12.0", 16), ("0.13.0", 16), ("0.19.1", 16), ("0.20.0", 32),
    ("0.33.0", 32), (None, 32)])
def test_nemotron_h_silent_config_state_by_release(h8b, h100, version, bits):
    plan = _plan(h8b, h100, version)
    assert plan.state_bytes_per_request == 24 * _state(bits)
    assert plan.block_size_tokens == _block(bits) == {16: 528, 32: 1040}[bits]
    assert plan.state_blocks_per_request == 6  # 24 Mamba2 layers in groups of 4


@pytest.mark.parametrize("dtype, version, bits", [
    ("float32", "0.12.0", 16),  # no hook: the model dtype, whatever the config says
    ("float32", "0.13.0", 32), ("float32", None, 32),
    ("bfloat16", "0.19.1", 16), ("bfloat16", None, 16)])  # a named 16-bit dtype is kept
def test_nemotron_h_named_dtype_by_release(h100, dtype, version, bits):
    plan = _plan(_h8b_named(dtype), h100, version)
    assert plan.state_bytes_per_request == 24 * _state(bits)
    assert plan.block_size_tokens == _block(bits)


def test_newest_pool_holds_fewer_blocks_of_the_larger_page(h8b, h100):
    # the same KV bytes paged at the float32 state's block: about half the blocks, the
    # attention tokens they hold about equal, fewer requests of the mean length at once
    old, new = _plan(h8b, h100, "0.19.1"), _plan(h8b, h100, None)
    assert new.kv_capacity_blocks < 0.55 * old.kv_capacity_blocks
    assert abs(new.kv_capacity_tokens / old.kv_capacity_tokens - 1) < 0.01
    assert new.max_concurrent_requests < 0.75 * old.max_concurrent_requests


@pytest.mark.parametrize("name, tp", [("granite-4.0-h-tiny", 1), ("qwen3-next-80b-a3b", 4)])
def test_granite_and_qwen3_next_state_is_the_model_dtype_on_every_release(h100, name, tp):
    model = get_model(name)
    cfg = ServingConfig(gpu="H100", tp=tp)
    want = hybrid_layout(model, cfg)  # the spec's 16 bits
    assert model.linear_ssm_state_bits == 16
    for version in ("0.13.0", "0.19.1", None):
        plan = plan_memory(model, h100, cfg, mean_request_tokens=1000, engine_version=version)
        assert plan.fits and (plan.block_size_tokens, plan.state_bytes_per_request) == \
            (want.block_size_tokens, want.state_bytes_per_request)


def test_a_spec_stored_before_the_fields_keeps_its_bits(h8b, h100):
    # a study's stored spec has neither field: its linear_ssm_state_bits on every release
    old = dataclasses.replace(h8b, linear_ssm_dtype="", linear_ssm_dtype_rule="")
    assert _plan(old, h100, None).block_size_tokens == 528
    assert json.loads(json.dumps(dataclasses.asdict(h8b)))["linear_ssm_dtype_rule"] == "nemotron_h"


@pytest.mark.parametrize("version, block", [("0.12.0", 528), (None, 1040)])
def test_export_note_names_the_release_block(h8b, h100, version, block):
    cfg = ServingConfig(gpu="H100", tp=1, block_size=16)
    _, notes = vllm_engine_args(cfg, h8b, h100, max_model_len=8192, engine_version=version)
    assert any(f"raises its attention block to {block} tokens" in n for n in notes)
