"""The published vLLM V1 latency figures of benchmarks/fidelity.py
(VLLM_V1_PUBLISHED_LATENCY_RUNS, `vllm bench latency`): the table is well-formed, and each
figure's rebuilt run is one batch of the stated size and lengths with the stated settings and
the release's LLM-class defaults (stop 51)."""

import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

import fidelity  # noqa: E402

from tuner.core.catalog import load_gpus  # noqa: E402
from tuner.core.engines import generation_of  # noqa: E402

FIGS = fidelity.VLLM_V1_PUBLISHED_LATENCY_RUNS
STATED = ("name", "source", "quote", "gpu", "tp", "hf_id", "dtype", "engine_version",
          "engine_version_stated", "batch_size", "input_len", "output_len", "latency_s",
          "num_iters", "num_iters_warmup", "gpu_memory_utilization", "max_model_len")
#: the file's table, Python column: (batch, input, output) -> seconds per iteration
PUBLISHED = {(1, 2048, 128): 0.805, (1, 4096, 128): 0.856, (1, 8192, 128): 0.966,
             (8, 2048, 128): 1.158, (8, 4096, 128): 1.555, (8, 8192, 128): 2.465,
             (32, 2048, 16): 1.526, (32, 4096, 16): 3.054, (32, 8192, 16): 6.354}


def test_table_is_well_formed():
    assert len({f["name"] for f in FIGS}) == len(FIGS)
    assert {(f["batch_size"], f["input_len"], f["output_len"]): f["latency_s"]
            for f in FIGS} == PUBLISHED
    gpus = load_gpus()
    for f in FIGS:
        assert all(f.get(k) not in (None, "") for k in STATED), f["name"]
        assert f["gpu"] in gpus and f["tp"] == 1
        assert f["dtype"] == "bfloat16" and not f["prefix_caching"]
        assert generation_of(f["engine_version"]).generation.key == "v1-async"
        assert (f["num_iters"], f["num_iters_warmup"]) == (5, 2)
        assert f["gpu_memory_utilization"] == 0.85
        # the bench asserts max_model_len >= input + output
        assert f["max_model_len"] >= f["input_len"] + f["output_len"]
        # 2,300 only where the reproduce command states it (in=2048 out=128)
        assert f["max_model_len_stated"] == ((f["input_len"], f["output_len"]) == (2048, 128))
        assert f["max_model_len"] == (2300 if f["max_model_len_stated"] else 32768)
        assert str(f["latency_s"]) in f["quote"] and f"BS={f['batch_size']} " in f["quote"]
        assert "vllm bench latency" in f["source"]


@pytest.mark.parametrize("fig", FIGS, ids=[f["name"] for f in FIGS])
def test_rebuilt_run_has_stated_batch_lengths_and_settings(fig):
    run = fidelity.vllm_v1_latency_run(fig, load_gpus())
    wl = run.workload
    assert len(wl) == fig["batch_size"]
    assert np.all(wl.prompt_tokens == fig["input_len"])
    assert np.all(wl.output_tokens == fig["output_len"])
    assert wl.arrival_s is None  # one llm.generate call: every request at t = 0
    assert run.measured_makespan_s == fig["latency_s"]  # seconds per iteration
    assert run.config.tp == 1 and run.config.gpu_memory_utilization == 0.85
    # vLLM 0.21's LLM_CLASS defaults on an H100 80 GB (>= 70 GiB, not an A100)
    assert (run.config.chunk_size, run.config.max_running) == (16384, 1024)
    assert run.config.scheduler == "vllm"
    assert run.model.max_position == fig["max_model_len"]
    assert run.model.hf_id == "Qwen/Qwen2.5-7B-Instruct"
    # never fitted: the shipped profile of the release
    assert run.engine.name == "vllm-v1-offline" and not run.engine.fitted
    cmd = fidelity.latency_command(fig)
    assert f"--batch-size {fig['batch_size']} " in cmd
    assert f"--input-len {fig['input_len']} --output-len {fig['output_len']} " in cmd
    assert ("--max-model-len 2300" in cmd) == fig["max_model_len_stated"]


def test_error_sign_follows_throughput_suite(monkeypatch):
    """+ = too fast (predicted shorter than published), the throughput suite's req/s sign."""
    fig = FIGS[0]
    monkeypatch.setattr(fidelity, "VLLM_V1_PUBLISHED_LATENCY_RUNS", [fig])
    row = fidelity.evaluate_vllm_v1_published_latency(load_gpus())[0]
    assert row["error_pct"] == pytest.approx(
        100 * (row["published_s"] / row["predicted_s"] - 1))
    assert row["time_error_pct"] == pytest.approx(
        100 * (row["predicted_s"] / row["published_s"] - 1))
    assert (row["error_pct"] > 0) == (row["predicted_s"] < row["published_s"])
    assert row["iterations"] >= fig["output_len"]  # one sampled token a request a step
    assert row["gap_per_step_ms"] == pytest.approx(
        1e3 * (row["published_s"] - row["predicted_s"]) / row["iterations"])
