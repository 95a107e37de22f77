"""tuner.exports: ServingConfig -> vLLM engine args / YAML / JSON, and back."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import math
import os
import shlex

import numpy as np
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tuner.core.catalog import GIB, GPU, ModelSpec, load_gpus
from tuner.core.config import ENGINE_HELD, ORDERINGS, SCHEDULERS, ServingConfig
from tuner.core.errors import TunerError
from tuner.core.io import write_atomic
from tuner.exports import (
    CONFIG_COMMENT_PREFIX,
    EXPORT_FORMATS,
    from_json,
    from_sglang_command,
    from_vllm_run_batch,
    from_vllm_yaml,
    parse_export,
    render_export,
    sglang_server_args,
    to_json,
    to_sglang_command,
    to_vllm_run_batch,
    to_vllm_yaml,
    vllm_engine_args,
)

LLAMA = ModelSpec(
    name="llama-3-8b", num_layers=32, hidden_size=4096, num_heads=32, num_kv_heads=8,
    head_dim=128, intermediate_size=14336, vocab_size=128256, max_position=8192,
    hf_id="meta-llama/Meta-Llama-3-8B-Instruct",
)
NO_HF = ModelSpec(
    name="tiny", num_layers=2, hidden_size=64, num_heads=4, num_kv_heads=2, head_dim=16,
    intermediate_size=128, vocab_size=1000,
)
# a mixture-of-experts shape (Qwen3-30B-A3B's) for the knobs that need one (expert_parallel)
MOE = ModelSpec(
    name="qwen3-30b-a3b", num_layers=48, hidden_size=2048, num_heads=32, num_kv_heads=4,
    head_dim=128, intermediate_size=6144, vocab_size=151936, max_position=40960,
    hf_id="Qwen/Qwen3-30B-A3B", num_experts=128, experts_per_token=8, moe_intermediate_size=768,
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
    # the newest vLLM: online FP8 is `fp8_per_tensor` (0.32 refuses `fp8` for a 16-bit checkpoint)
    assert args["quantization"] == "fp8_per_tensor" and comments == []
    args, comments = args_for(ServingConfig(gpu="A10", weight_bits=8), gpu=A10)
    assert args["quantization"] == "fp8_per_tensor"
    assert any("Marlin" in c for c in comments)
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
    # threads matter only with CPU attention: said to have no effect, no OMP advice
    assert "no effect" in text and "OMP_NUM_THREADS" not in text
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
    # knobs other issues add to ServingConfig join the round trip as they appear
    **({"attention_on_cpu": st.booleans()}
       if "attention_on_cpu" in {f.name for f in dataclasses.fields(ServingConfig)} else {}),
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
    # one engine per replica: the YAML leaves the replica count to the launcher (header)
    assert {k.replace("_", "-") for k in args} - {"data-parallel-size"} == set(data)
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


# --- vllm run-batch, SGLang, every format ---------------------------------------------------


def _command_tokens(text: str, marker: str) -> list[str]:
    body = [ln.strip().rstrip("\\").strip() for ln in text.splitlines()
            if ln.strip() and not ln.lstrip().startswith("#")]
    tokens = shlex.split(" ".join(body))
    return tokens[tokens.index(marker) + 1:]


def test_run_batch_command_has_files_batch_limits_and_every_engine_arg():
    cfg = ServingConfig(gpu="L40S", tp=2, chunk_size=2048, max_running=64, kv_bits=8,
                        scheduler="vllm-v0")
    text = to_vllm_run_batch(cfg, LLAMA, L40S, max_model_len=4096, input_path="my batch.jsonl",
                             output_path="out.jsonl", served_model_name="llama-3-8b",
                             header="predicted 1 h")
    head = [ln for ln in text.splitlines() if ln.startswith("#")]
    assert "# predicted 1 h" in head and sum(CONFIG_COMMENT_PREFIX in ln for ln in head) == 1
    tokens = _command_tokens(text, "run-batch")
    assert tokens[:4] == ["-i", "my batch.jsonl", "-o", "out.jsonl"]
    opts = dict(zip(tokens[4::2], tokens[5::2], strict=False))
    assert opts["--model"] == LLAMA.hf_id and opts["--served-model-name"] == "llama-3-8b"
    assert opts["--max-num-batched-tokens"] == "2048" and opts["--max-num-seqs"] == "64"
    assert "--no-enable-chunked-prefill" in tokens
    args, _ = vllm_engine_args(cfg, LLAMA, L40S, max_model_len=4096)
    for key in args:
        flag = "--" + key.replace("_", "-")
        assert flag in tokens or f"--no-{flag[2:]}" in tokens, flag
    assert from_vllm_run_batch(text) == cfg
    # a served name equal to the model id is not repeated
    same = to_vllm_run_batch(cfg, LLAMA, L40S, max_model_len=4096, served_model_name=LLAMA.hf_id)
    assert "--served-model-name" not in same


def test_run_batch_hand_edit_wins_and_inference_without_comment():
    cfg = ServingConfig(gpu="A10", max_running=128)
    text = to_vllm_run_batch(cfg, LLAMA, A10, max_model_len=4096).replace(
        "--max-num-seqs 128", "--max-num-seqs 32")
    assert from_vllm_run_batch(text).max_running == 32
    bare = ("vllm run-batch -i in.jsonl -o out.jsonl --model x --tensor-parallel-size 2 "
            "--max-num-batched-tokens 1024 --max-num-seqs 8 --no-enable-chunked-prefill "
            "--kv-cache-dtype fp8 --quantization=awq_marlin\n")
    assert from_vllm_run_batch(bare, gpu="A40") == ServingConfig(
        gpu="A40", tp=2, chunk_size=1024, max_running=8, scheduler="vllm-v0", kv_bits=8,
        weight_bits=4)
    with pytest.raises(TunerError, match="GPU"):
        from_vllm_run_batch(bare)  # no tuner-config line and no gpu
    with pytest.raises(TunerError, match="run-batch"):
        from_vllm_run_batch("vllm serve --model x\n", gpu="A10")
    with pytest.raises(TunerError):
        from_vllm_run_batch("vllm run-batch -i 'unclosed\n", gpu="A10")


def test_sglang_mapping():
    cfg = ServingConfig(gpu="L40S", tp=2, dp=2, chunk_size=4096, max_running=96, kv_bits=8,
                        weight_bits=8, gpu_memory_utilization=0.85, block_size=32,
                        ordering="longest-output", weight_offload_fraction=0.25)
    opts, comments = sglang_server_args(cfg, LLAMA, L40S, max_model_len=8192)
    d = dict(opts)
    assert d["model-path"] == LLAMA.hf_id
    assert d["tp-size"] == 2 and d["dp-size"] == 2
    assert d["chunked-prefill-size"] == 4096 and d["max-prefill-tokens"] == 4096
    assert d["enable-mixed-chunk"] is True  # decodes + a prefill chunk in one step, like vLLM
    assert d["max-running-requests"] == 96
    assert d["mem-fraction-static"] == 0.85 and d["page-size"] == 32
    assert d["context-length"] == 8192
    assert d["kv-cache-dtype"] == "fp8_e4m3" and d["quantization"] == "fp8"
    assert d["schedule-policy"] == "lof"
    per_gpu_gib = 0.25 * LLAMA.weight_bytes(8) / 2 / GIB
    assert d["cpu-offload-gb"] == math.ceil(per_gpu_gib) and isinstance(d["cpu-offload-gb"], int)
    assert comments == []


def test_sglang_prefill_first_and_orderings():
    d = dict(sglang_server_args(ServingConfig(gpu="A10", scheduler="vllm-v0", chunk_size=8192),
                                LLAMA, A10, max_model_len=4096)[0])
    assert d["chunked-prefill-size"] == -1 and "enable-mixed-chunk" not in d
    assert d["max-prefill-tokens"] == 8192
    _, comments = sglang_server_args(ServingConfig(gpu="A10", scheduler="vllm-v0",
                                                   chunk_size=2048), LLAMA, A10,
                                     max_model_len=4096)
    assert any("max-prefill-tokens" in c for c in comments)
    opts, comments = sglang_server_args(ServingConfig(gpu="A10", ordering="blend"), LLAMA, A10,
                                        max_model_len=4096)
    assert dict(opts)["schedule-policy"] == "lpm" and any("128" in c for c in comments)
    for ordering in ("shortest-prompt", "binpack"):
        opts, comments = sglang_server_args(ServingConfig(gpu="A10", ordering=ordering), LLAMA,
                                            A10, max_model_len=4096)
        assert dict(opts)["schedule-policy"] == "fcfs"
        assert any("sort the input" in c for c in comments)


def test_sglang_writes_only_options_checked_against_its_parser():
    from tuner.exports import SGLANG_KNOWN_OPTIONS

    configs = [ServingConfig(gpu="A10"), ServingConfig(gpu="H100", weight_bits=8, kv_bits=8,
                                                       tp=2, dp=2, ordering="blend"),
               ServingConfig(gpu="A10", scheduler="vllm-v0", chunk_size=8192, kv_bits=4,
                             weight_offload_fraction=0.3, ordering="longest-output")]
    gpus = load_gpus()
    for cfg in configs:
        opts, _ = sglang_server_args(cfg, LLAMA, gpus[cfg.gpu], max_model_len=4096)
        names = {k for k, _ in opts}
        assert names <= SGLANG_KNOWN_OPTIONS, names - SGLANG_KNOWN_OPTIONS
        d = dict(opts)
        assert d["schedule-policy"] in {"fcfs", "lof", "lpm"}
        assert d.get("kv-cache-dtype", "auto") in {"auto", "fp8_e4m3"}
        assert isinstance(d.get("cpu-offload-gb", 0), int)  # SGLang's parser takes an int


def test_sglang_comments_for_knobs_it_lacks():
    cfg = ServingConfig(gpu="A10", kv_bits=4, weight_bits=4, kv_offload_layers=8,
                        cpu_threads_intra=12, scheduler="sarathi-noevict", max_running=512)
    opts, comments = sglang_server_args(cfg, LLAMA, A10, max_model_len=4096,
                                        kv_capacity_tokens=40_000)
    text = "\n".join(comments)
    assert "kv-cache-dtype" not in dict(opts) and "fp8_e4m3" in text
    assert "AWQ/GPTQ" in text
    assert "layer-wise KV offload" in text
    assert "no effect" in text and "OMP_NUM_THREADS" not in text
    assert "--max-running-requests <= 9" in text  # 40000 // 4096
    _, comments = sglang_server_args(ServingConfig(gpu="A10", weight_bits=8), LLAMA, A10,
                                     max_model_len=4096)
    assert any("w8a8_int8" in c for c in comments)


def test_sglang_command_parses_back_and_infers_without_comment():
    cfg = ServingConfig(gpu="A40", chunk_size=1024, max_running=48, ordering="blend")
    text = to_sglang_command(cfg, LLAMA, A10, max_model_len=4096, header="h")
    tokens = _command_tokens(text, "sglang.launch_server")
    assert tokens[:2] == ["--model-path", LLAMA.hf_id]
    assert from_sglang_command(text) == cfg
    assert from_sglang_command(text.replace("--max-running-requests 48",
                                            "--max-running-requests 8")).max_running == 8
    bare = ("python -m sglang.launch_server --model-path x --tp 2 --chunked-prefill-size 512 "
            "--max-running-requests 16 --kv-cache-dtype fp8_e5m2 --schedule-policy lof "
            "--quantization fp8 --mem-fraction-static 0.8\n")
    assert from_sglang_command(bare, gpu="L40S") == ServingConfig(
        gpu="L40S", tp=2, chunk_size=512, max_running=16, kv_bits=8, weight_bits=8,
        ordering="longest-output", gpu_memory_utilization=0.8)
    v0 = "python -m sglang.launch_server --chunked-prefill-size -1 --max-prefill-tokens 8192\n"
    assert from_sglang_command(v0, gpu="A10") == ServingConfig(gpu="A10", scheduler="vllm-v0",
                                                               chunk_size=8192)
    with pytest.raises(TunerError, match="sglang.launch_server"):
        from_sglang_command("vllm serve x\n", gpu="A10")


def _non_default(field: dataclasses.Field):
    values = {"gpu": "L40S", "tp": 2, "dp": 2, "pp": 2, "scheduler": "sarathi-noevict",
              "chunk_size": 1024, "max_running": 17, "weight_bits": 4, "kv_bits": 4,
              "kv_offload_layers": 4, "weight_offload_fraction": 0.5, "cpu_threads_intra": 3,
              "cpu_threads_inter": 2, "ordering": "binpack", "gpu_memory_utilization": 0.7,
              "block_size": 32, "engine": "sglang", "schedule_policy": "lpm"}
    if field.name in values:
        return values[field.name]
    if isinstance(field.default, bool):
        return not field.default
    raise AssertionError(f"test_no_knob_is_dropped: give ServingConfig.{field.name} a value")


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_no_knob_is_dropped(engine):
    """Every ServingConfig field, set away from its default, shows in the engine's arguments or
    in a comment: a knob added to ServingConfig must be mapped in tuner.exports."""
    def render(cfg, model=LLAMA):
        gpu = GPUS[cfg.gpu]
        if engine == "vllm":
            args, comments = vllm_engine_args(cfg, model, gpu, max_model_len=4096)
            return args, comments
        opts, comments = sglang_server_args(cfg, model, gpu, max_model_len=4096)
        return dict(opts), comments

    base = ServingConfig(gpu="A10")
    for field in dataclasses.fields(ServingConfig):
        if field.name == "gpu":  # where it runs, not an engine argument (named in the header)
            continue
        if field.name in ENGINE_HELD["vllm"]:  # SGLang's own: held in a vLLM plan (below)
            continue
        if field.name == "engine" and engine == "vllm":  # vLLM refuses an SGLang plan
            with pytest.raises(TunerError, match="simulated for sglang"):
                render(dataclasses.replace(base, engine="sglang"))
            continue
        model = MOE if field.name == "expert_parallel" else LLAMA  # MoE-only knob
        cfg = dataclasses.replace(base, **{field.name: _non_default(field)})
        assert render(cfg, model) != render(base, model), f"{engine}: {field.name} is dropped"
    if engine == "sglang":  # an SGLang plan's own knobs
        sg = dataclasses.replace(base, engine="sglang")
        for name in ENGINE_HELD["vllm"]:
            field = next(f for f in dataclasses.fields(ServingConfig) if f.name == name)
            cfg = dataclasses.replace(sg, **{name: _non_default(field)})
            assert render(cfg) != render(sg), f"sglang: {name} is dropped"


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cfg=configs, mml=st.integers(256, 32768), fmt=st.sampled_from(EXPORT_FORMATS))
def test_every_format_round_trips(cfg, mml, fmt):
    gpu = GPUS[cfg.gpu]
    text = render_export(fmt, cfg, LLAMA, gpu, max_model_len=mml, header="predicted 1 h, $1",
                         metrics={"makespan_s": 3600.0}, input_path="a b.jsonl",
                         served_model_name="llama-3-8b", quantized_model="org/llama-3-8b-q")
    assert parse_export(fmt, text) == cfg  # GPU from the export itself
    assert parse_export(fmt, text, gpu=cfg.gpu) == cfg


def test_json_export_has_every_figure():
    cfg = ServingConfig(gpu="A10", chunk_size=2048, max_running=64)
    text = render_export("json", cfg, LLAMA, A10, max_model_len=4096, header="predicted",
                         metrics={"makespan_s": 10.0, "cost_usd": 0.1},
                         memory={"kv_capacity_tokens": 1000}, extra={"trial": 7, "rank": 1})
    doc = json.loads(text)
    assert doc["config"] == cfg.to_dict() and doc["metrics"]["makespan_s"] == 10.0
    assert doc["memory"]["kv_capacity_tokens"] == 1000 and doc["trial"] == 7
    assert doc["vllm"]["engine_args"]["max_num_seqs"] == 64
    assert doc["sglang"]["server_args"]["max-running-requests"] == 64
    assert doc["max_model_len"] == 4096 and doc["gpu"]["price_usd_per_h"] == 1.0
    assert from_json(text) == cfg
    with pytest.raises(TunerError):
        from_json("[1, 2]")
    with pytest.raises(TunerError):
        from_json("{oops")


def test_unknown_format_is_a_tuner_error():
    with pytest.raises(TunerError, match="vllm-run-batch"):
        render_export("trt", ServingConfig(gpu="A10"), LLAMA, A10, max_model_len=4096)
    with pytest.raises(TunerError, match="sglang"):
        parse_export("trt", "")


# --- vLLM's own argument parser (when vLLM is installed) ------------------------------------

HAS_VLLM = importlib.util.find_spec("vllm") is not None


def _vllm_parser():
    from vllm.engine.arg_utils import EngineArgs

    try:
        from vllm.utils.argparse_utils import FlexibleArgumentParser
    except ImportError:  # older vLLM
        from vllm.utils import FlexibleArgumentParser
    return EngineArgs, FlexibleArgumentParser


def _run_batch_parser(flexible):
    try:
        from vllm.entrypoints.launchers.run_batch import make_arg_parser
    except ImportError:  # older vLLM
        from vllm.entrypoints.openai.run_batch import make_arg_parser
    return make_arg_parser(flexible())


@pytest.mark.skipif(not HAS_VLLM, reason="needs vLLM")
@pytest.mark.parametrize("cfg", [
    ServingConfig(gpu="L40S", chunk_size=2048, max_running=64, kv_bits=8, weight_bits=8),
    ServingConfig(gpu="A10", scheduler="vllm-v0", chunk_size=8192, weight_offload_fraction=0.2,
                  ordering="shortest-prompt", kv_bits=4),
])
def test_vllm_accepts_yaml_and_run_batch(cfg, tmp_path):
    EngineArgs, flexible = _vllm_parser()
    gpu = GPUS[cfg.gpu]
    path = tmp_path / "config.yaml"
    path.write_text(to_vllm_yaml(cfg, LLAMA, gpu, max_model_len=8192))
    ns = EngineArgs.add_cli_args(flexible()).parse_args(["--config", str(path)])
    ea = EngineArgs.from_cli_args(ns)
    assert ea.model == LLAMA.hf_id
    assert ea.max_num_seqs == cfg.max_running
    assert ea.max_num_batched_tokens == cfg.chunk_size
    assert ea.enable_chunked_prefill is (not cfg.scheduler.startswith("vllm-v0"))
    assert ea.max_model_len == 8192 and ea.block_size == cfg.block_size

    text = to_vllm_run_batch(cfg, LLAMA, gpu, max_model_len=8192, input_path="in.jsonl",
                             output_path="out.jsonl", served_model_name="llama-3-8b")
    ns = _run_batch_parser(flexible).parse_args(_command_tokens(text, "run-batch"))
    assert ns.input_file == "in.jsonl" and ns.output_file == "out.jsonl"
    ea = EngineArgs.from_cli_args(ns)
    assert ea.max_num_seqs == cfg.max_running
    assert ea.max_num_batched_tokens == cfg.chunk_size


def test_engine_arguments_come_from_the_field_metadata():
    """Every engine argument a field names is one the exporter writes (vLLM) or one checked
    against SGLang's parser; an invalid config cannot be built, not even by replace()."""
    from tuner.core.config import KNOBS
    from tuner.exports import SGLANG_KNOWN_OPTIONS

    assert {k.sglang.name for k in KNOBS.values() if k.sglang} <= SGLANG_KNOWN_OPTIONS
    cfg = ServingConfig(gpu="L40S", dp=2, pp=2, weight_bits=8, weight_offload_fraction=0.5)
    args, _ = vllm_engine_args(cfg, LLAMA, L40S, max_model_len=4096)
    moe_args, _ = vllm_engine_args(dataclasses.replace(cfg, expert_parallel=True), MOE, L40S,
                                   max_model_len=4096)  # the MoE-only knob
    assert {k.vllm.name for k in KNOBS.values() if k.vllm} <= set(args) | set(moe_args)
    with pytest.raises(TunerError, match="max_running"):
        dataclasses.replace(cfg, max_running=0)
