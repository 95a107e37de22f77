"""tuner.deploy: ServingConfig -> vLLM engine args / YAML / JSON, and back."""

from __future__ import annotations

import json
import math
import os

import numpy as np
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tuner.catalog import GIB, GPU, ModelSpec
from tuner.config import ORDERINGS, SCHEDULERS, ServingConfig
from tuner.deploy import (
    CONFIG_COMMENT_PREFIX,
    from_vllm_yaml,
    to_json,
    to_vllm_yaml,
    vllm_engine_args,
    write_atomic,
)
from tuner.errors import TunerError

LLAMA = ModelSpec(
    name="llama-3-8b", num_layers=32, hidden_size=4096, num_heads=32, num_kv_heads=8,
    head_dim=128, intermediate_size=14336, vocab_size=128256, max_position=8192,
    hf_id="meta-llama/Meta-Llama-3-8B-Instruct",
)
NO_HF = ModelSpec(
    name="tiny", num_layers=2, hidden_size=64, num_heads=4, num_kv_heads=2, head_dim=16,
    intermediate_size=128, vocab_size=1000,
)


def _gpu(name: str, memory_gib: float, fp8: float | None) -> GPU:
    return GPU(
        name=name, memory_gib=memory_gib, bf16_tflops=125.0, fp32_tflops=31.0, hbm_gbps=600.0,
        pcie_gen=4, host_link_gbps=25.0, host_ram_gib=64.0, cpu_cores=8, tdp_w=150.0,
        price_usd_per_h=1.0, price_source="test", price_date="2025-01-01", fp8_tflops=fp8,
    )


A10 = _gpu("A10", 24.0, None)
L40S = _gpu("L40S", 48.0, 733.0)
GPUS = {"A10": A10, "L40S": L40S}


def args_for(cfg: ServingConfig, *, gpu: GPU = A10, model: ModelSpec = LLAMA, mml: int = 4096,
             **kw):
    return vllm_engine_args(cfg, model, gpu, max_model_len=mml, **kw)


# --- mapping --------------------------------------------------------------------------------


def test_default_config_mapping():
    args, comments = args_for(ServingConfig(gpu="A10"))
    assert args == {
        "model": "meta-llama/Meta-Llama-3-8B-Instruct",
        "tensor_parallel_size": 1,
        "max_num_batched_tokens": 8192,
        "max_num_seqs": 256,
        "enable_chunked_prefill": True,
        "gpu_memory_utilization": 0.9,
        "block_size": 16,
        "max_model_len": 4096,
        "kv_cache_dtype": "auto",
    }
    assert comments == []


def test_parallelism_and_budget_mapping():
    cfg = ServingConfig(gpu="L40S", tp=4, dp=2, chunk_size=2048, max_running=64,
                        gpu_memory_utilization=0.85, block_size=32, scheduler="sarathi")
    args, _ = args_for(cfg, gpu=L40S, mml=8192)
    assert args["tensor_parallel_size"] == 4
    assert args["data_parallel_size"] == 2
    assert args["max_num_batched_tokens"] == 2048
    assert args["max_num_seqs"] == 64
    assert args["gpu_memory_utilization"] == 0.85
    assert args["block_size"] == 32
    assert args["max_model_len"] == 8192
    assert args["enable_chunked_prefill"] is True
    assert "data_parallel_size" not in args_for(ServingConfig(gpu="A10", dp=1))[0]


@pytest.mark.parametrize("scheduler", SCHEDULERS)
def test_chunked_prefill_by_scheduler(scheduler):
    args, _ = args_for(ServingConfig(gpu="A10", scheduler=scheduler, chunk_size=8192))
    assert args["enable_chunked_prefill"] is (not scheduler.startswith("vllm-v0"))


def test_v0_with_small_budget_warns_about_max_model_len():
    _, comments = args_for(ServingConfig(gpu="A10", scheduler="vllm-v0", chunk_size=2048),
                           mml=4096)
    assert any("max-num-batched-tokens >= max-model-len" in c for c in comments)


def test_model_without_hf_id_uses_name_and_says_so():
    args, comments = args_for(ServingConfig(gpu="A10"), model=NO_HF)
    assert args["model"] == "tiny"
    assert any("Hugging Face id" in c for c in comments)


def test_kv_bits_mapping():
    assert args_for(ServingConfig(gpu="A10", kv_bits=8))[0]["kv_cache_dtype"] == "fp8"
    args, comments = args_for(ServingConfig(gpu="A10", kv_bits=4))
    assert "kv_cache_dtype" not in args
    assert any("4-bit KV" in c and "fp8" in c for c in comments)


def test_weight_bits_mapping():
    args, comments = args_for(ServingConfig(gpu="L40S", weight_bits=8), gpu=L40S)
    assert args["quantization"] == "fp8" and comments == []
    args, comments = args_for(ServingConfig(gpu="A10", weight_bits=8), gpu=A10)
    assert "quantization" not in args
    assert any("INT8 (W8A16)" in c for c in comments)
    args, comments = args_for(ServingConfig(gpu="L40S", weight_bits=4), gpu=L40S)
    assert "quantization" not in args
    assert any("AWQ/GPTQ" in c and "marlin" in c for c in comments)
    assert "quantization" not in args_for(ServingConfig(gpu="A10"))[0]


def test_cpu_offload_gb_per_gpu_rounded_up():
    wb = LLAMA.weight_bytes(16)
    args, _ = args_for(ServingConfig(gpu="A10", weight_offload_fraction=0.25))
    expected = math.ceil(0.25 * wb / GIB * 10) / 10
    assert args["cpu_offload_gb"] == pytest.approx(expected)
    assert args["cpu_offload_gb"] >= 0.25 * wb / GIB
    args2, _ = args_for(ServingConfig(gpu="A10", tp=2, weight_offload_fraction=0.25))
    assert args2["cpu_offload_gb"] == pytest.approx(math.ceil(0.25 * wb / 2 / GIB * 10) / 10)
    assert "cpu_offload_gb" not in args_for(ServingConfig(gpu="A10"))[0]


def test_comments_for_knobs_vllm_lacks():
    cfg = ServingConfig(gpu="A10", kv_offload_layers=8, cpu_threads_intra=16,
                        cpu_threads_inter=2, ordering="shortest-prompt")
    _, comments = args_for(cfg)
    text = "\n".join(comments)
    assert "layer-wise KV offload" in text
    assert "OMP_NUM_THREADS=16" in text
    assert "submission order" in text and "shortest prompt first" in text


def test_eviction_free_comment_gives_a_number():
    cfg = ServingConfig(gpu="A10", scheduler="vllm-noevict", max_running=256)
    _, comments = args_for(cfg, mml=4096, kv_capacity_tokens=40_000)
    (c,) = [c for c in comments if "eviction-free" in c]
    assert "max-num-seqs <= 9" in c  # 40000 // 4096
    _, comments = args_for(ServingConfig(gpu="A10", scheduler="sarathi-noevict", max_running=4),
                           mml=4096, kv_capacity_tokens=40_000)
    assert any("already fits" in c for c in comments)
    _, comments = args_for(cfg, mml=4096)  # spec-sheet estimate
    assert any("eviction-free" in c and "estimate" in c for c in comments)


def test_invalid_config_raises_tuner_error():
    with pytest.raises(TunerError):
        args_for(ServingConfig(gpu="A10", tp=3))


# --- YAML -----------------------------------------------------------------------------------


def test_yaml_form_and_comments():
    cfg = ServingConfig(gpu="A10", scheduler="vllm-v0", kv_bits=4, ordering="longest-output",
                        chunk_size=8192)
    text = to_vllm_yaml(cfg, LLAMA, A10, max_model_len=4096,
                        header="predicted makespan 1.8 h, $3.10\nsecond line")
    data = yaml.safe_load(text)
    assert data["model"] == "meta-llama/Meta-Llama-3-8B-Instruct"
    assert data["tensor-parallel-size"] == 1
    assert data["max-num-seqs"] == 256
    assert data["enable-chunked-prefill"] is False
    assert "kv-cache-dtype" not in data
    assert all("_" not in k for k in data)  # dashed long option names, as vLLM documents
    head = text.split("\nmodel:")[0].splitlines()
    assert all(line.startswith("#") for line in head)
    assert "# predicted makespan 1.8 h, $3.10" in head
    assert "# second line" in head
    assert any("4-bit KV" in line for line in head)
    assert sum(line.startswith(CONFIG_COMMENT_PREFIX) for line in head) == 1


def test_from_yaml_hand_edit_wins_over_comment():
    cfg = ServingConfig(gpu="A10", max_running=128)
    text = to_vllm_yaml(cfg, LLAMA, A10, max_model_len=4096).replace(
        "max-num-seqs: 128", "max-num-seqs: 32")
    assert from_vllm_yaml(text, gpu="A10").max_running == 32


def test_from_yaml_without_tuner_comment_infers():
    text = (
        "model: x\ntensor_parallel_size: 2\nmax-num-batched-tokens: 1024\nmax-num-seqs: 8\n"
        "enable-chunked-prefill: false\nkv-cache-dtype: fp8\nquantization: awq_marlin\n"
    )
    cfg = from_vllm_yaml(text, gpu="A40")
    assert cfg == ServingConfig(gpu="A40", tp=2, chunk_size=1024, max_running=8,
                                scheduler="vllm-v0", kv_bits=8, weight_bits=4)


@pytest.mark.parametrize("text", ["a: [1, 2", "- 1\n- 2\n", f"{CONFIG_COMMENT_PREFIX} {{oops\n",
                                  "tensor-parallel-size: 3\n"])
def test_from_yaml_bad_input_raises_tuner_error(text):
    with pytest.raises(TunerError):
        from_vllm_yaml(text, gpu="A10")


configs = st.builds(
    ServingConfig,
    gpu=st.sampled_from(sorted(GPUS)),
    tp=st.sampled_from([1, 2, 4, 8]),
    dp=st.integers(1, 8),
    scheduler=st.sampled_from(SCHEDULERS),
    chunk_size=st.integers(64, 16384),
    max_running=st.integers(1, 1024),
    weight_bits=st.sampled_from([4, 8, 16]),
    kv_bits=st.sampled_from([4, 8, 16]),
    kv_offload_layers=st.integers(0, 32),
    weight_offload_fraction=st.one_of(st.just(0.0), st.floats(0.0, 1.0)),
    cpu_threads_intra=st.integers(0, 64),
    cpu_threads_inter=st.integers(0, 8),
    ordering=st.sampled_from(ORDERINGS),
    gpu_memory_utilization=st.floats(0.05, 1.0),
    block_size=st.sampled_from([8, 16, 32]),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cfg=configs, mml=st.integers(256, 32768))
def test_yaml_round_trip(cfg, mml):
    gpu = GPUS[cfg.gpu]
    text = to_vllm_yaml(cfg, LLAMA, gpu, max_model_len=mml, header="predicted 1 h, $1")
    data = yaml.safe_load(text)
    assert isinstance(data, dict)
    assert data["max-num-batched-tokens"] == cfg.chunk_size
    assert ("kv-cache-dtype" in data) == (cfg.kv_bits != 4)
    back = from_vllm_yaml(text, gpu=cfg.gpu)
    assert back == cfg
    args, comments = vllm_engine_args(cfg, LLAMA, gpu, max_model_len=mml)
    assert {k.replace("_", "-") for k in args} == set(data)
    assert all("\n" not in c for c in comments)


# --- JSON and atomic writes -----------------------------------------------------------------


def test_to_json_has_every_figure_and_parses():
    cfg = ServingConfig(gpu="A10", tp=2, dp=2)
    metrics = {"makespan_s": np.float64(6480.0), "cost_usd": 3.1, "preemptions": np.int64(3),
               "lower_bound_s": float("nan")}
    memory = {"weight_bytes": 16e9, "kv_capacity_tokens": np.int32(12345)}
    doc = json.loads(to_json(cfg, metrics, memory, {"predicted_by": "roofline"}))
    assert doc["config"] == cfg.to_dict()
    assert doc["num_gpus"] == 4
    assert doc["metrics"] == {"makespan_s": 6480.0, "cost_usd": 3.1, "preemptions": 3,
                              "lower_bound_s": None}
    assert doc["memory"]["kv_capacity_tokens"] == 12345
    assert doc["predicted_by"] == "roofline"
    doc = json.loads(to_json(cfg, None, None))
    assert doc["metrics"] is None and doc["memory"] is None


def test_write_atomic_replaces_and_cleans_up(tmp_path, monkeypatch):
    target = tmp_path / "sub" / "out.yaml"
    assert write_atomic(target, "one\n") == target
    assert target.read_text() == "one\n"
    write_atomic(target, "two\n")
    assert target.read_text() == "two\n"

    def boom(*_a, **_k):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError):
        write_atomic(target, "three\n")
    assert target.read_text() == "two\n"
    assert sorted(p.name for p in target.parent.iterdir()) == ["out.yaml"]
