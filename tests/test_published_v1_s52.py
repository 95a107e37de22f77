"""The second published vLLM V1 source on an H100 in benchmarks/fidelity.py (VLLM25915_RUNS,
vllm-project/vllm#25915): the block states what the issue states, and each figure's rebuilt run
has the stated request count, lengths and settings, checked against the published seconds
(stop 52)."""

import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

import fidelity  # noqa: E402

from tuner.core.catalog import load_gpus  # noqa: E402
from tuner.core.engines import generation_of  # noqa: E402

FIGS = fidelity.VLLM25915_RUNS


def test_block_states_the_issue():
    assert [f["engine_version"] for f in FIGS] == ["0.8.5", "0.10.2"]
    assert [(f["input_tok_s"], f["output_tok_s"]) for f in FIGS] == [
        (2375.11, 4481.69), (2697.18, 5408.88)]
    for f in FIGS:
        assert f["gpu"] == "H100" and f["tp"] == 1 and f["hf_id"] == "Qwen/Qwen3-8B"
        assert f["dtype"] == "bfloat16" and f["catalog_model"] == "qwen3-8b"
        assert (f["input_len"], f["output_len"], f["num_prompts"]) == (1024, 2048, 1000)
        assert f["gpu_memory_utilization"] == 0.9 and f["max_model_len"] == 40960
        assert str(f["input_tok_s"]) in f["quote"] and str(f["output_tok_s"]) in f["quote"]
        assert generation_of(f["engine_version"]).generation.key == "v1-sync"
    assert "--input-len 1024 --output-len 2048" in fidelity.VLLM25915_CMD


def test_prompt_length_and_seconds_come_from_the_figure():
    f = FIGS[0]
    assert fidelity.vllm25915_prompt_len(f) == 1085  # 2375.11 / 4481.69 x 2048
    assert fidelity.vllm25915_prompt_len(FIGS[1]) == 1021
    assert fidelity.vllm25915_published_s(f) == pytest.approx(1000 * 2048 / 4481.69)


@pytest.mark.parametrize("fig", FIGS, ids=[f["name"] for f in FIGS])
def test_rebuilt_run_has_stated_count_lengths_and_settings(fig):
    run = fidelity.vllm25915_run(fig, load_gpus())
    wl = run.workload
    assert len(wl) == 1000
    assert np.all(wl.prompt_tokens == fidelity.vllm25915_prompt_len(fig))
    assert np.all(wl.output_tokens == 2048)
    assert run.gpu == "H100" and run.config.tp == 1
    assert run.config.gpu_memory_utilization == 0.9
    assert run.model.name == "qwen3-8b" and run.model.max_position == 40960
    assert run.engine.name == "vllm-v1-sync" and run.engine_version == fig["engine_version"]
    assert run.measured_makespan_s == pytest.approx(1000 * 2048 / fig["output_tok_s"])


def test_evaluated_rows_and_per_gpu_summary():
    rows = fidelity.evaluate_vllm25915(load_gpus())
    assert [r["run"] for r in rows] == [f["name"] for f in FIGS]
    for r in rows:
        assert r["predicted_makespan_s"] > 0 and np.isfinite(r["req_s_error_pct"])
        assert r["req_s_error_pct"] == pytest.approx(
            100.0 * (r["published_makespan_s"] / r["predicted_makespan_s"] - 1.0))
    other = [{"gpu": "H100", "engine": "vllm-v1-offline", "source": "s1",
              "req_s_error_pct": 7.0}] * 3
    out = fidelity.published_per_gpu(other + rows, exclude={})["H100"]
    # the headline stays the main profile's figures; this source sits beside it
    assert out["runs"] == 3 and out["engine"] == "vllm-v1-offline"
    assert out["other_engines"]["runs"] == 2
    assert out["other_engines"]["engines"] == ["vllm-v1-sync"]
    assert out["other_engines"]["sources"] == [fidelity.VLLM25915]


def test_a_vllm_v1_sync_h100_line_cites_the_figures_that_check_its_own_profile():
    """The H100 headline checks vllm-v1-offline; a 0.10.2 plan (vllm-v1-sync) now cites the two
    vllm#25915 figures kept beside it instead of only "check another profile"."""
    from tuner.core.catalog import load_gpus, load_models
    from tuner.predictors.aic import fidelity_summary, table_cost_model

    other = fidelity_summary()["H100"]["other_engines"]
    assert other["runs"] == 2 and other["engines"] == ["vllm-v1-sync"]
    model, gpu = load_models()["llama-3-8b"], load_gpus()["H100"]
    from tuner.core.config import ServingConfig
    from tuner.predictors.sources import resolve

    cm = resolve(model, gpu, ServingConfig(gpu="H100"), engine_version="0.10.2").cost_model
    line = cm.provenance.detail
    assert "check the vllm-v1-offline engine profile, not this one" in line
    assert "2 published figure(s) check vllm-v1-sync there (fitted on nothing)" in line
    # the headline profile's line is unchanged (no second citation)
    assert "check vllm-v1-sync" not in table_cost_model(model, gpu).provenance.detail
