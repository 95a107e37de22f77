"""The published figures a GPU without real runs is checked on reach its cost-model line,
labelled as fitted on nothing, with their direction (stop 51)."""
import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

import fidelity  # noqa: E402

from tuner.core.catalog import load_gpus, load_models  # noqa: E402
from tuner.predictors.aic import fidelity_summary, table_cost_model  # noqa: E402


def _fig(gpu, engine, **err):
    return {"gpu": gpu, "engine": engine, "source": "src", **err}


def test_published_errors_are_makespan_errors_with_their_sign():
    # +10 % req/s (too fast) is a makespan 1/1.1 - 1 = -9.09 % (too short)
    assert fidelity.published_makespan_error_pct({"req_s_error_pct": 10.0}) == pytest.approx(
        -100 / 11)
    assert fidelity.published_makespan_error_pct(
        {"req_s_error_pct": 1.0, "time_error_pct": -3.0}) == -3.0


def test_published_per_gpu_keeps_real_runs_first_and_one_engine():
    figs = [_fig("H100", "vllm-v1-offline", req_s_error_pct=10.0),
            _fig("H100", "vllm-v1-offline", time_error_pct=2.0),
            _fig("H100", "vllm-v1-sync", time_error_pct=-40.0),
            _fig("A100-80G", "vllm-v1-offline", time_error_pct=-1.0)]
    out = fidelity.published_per_gpu(figs, exclude={"A100-80G": {}})
    assert set(out) == {"H100"}  # the A100's own runs speak for it
    h = out["H100"]
    assert h["runs"] == 2 and h["engine"] == "vllm-v1-offline" and h["fitted"] is False
    assert h["too_short"] == 1 and h["worst_abs_pct"] == pytest.approx(100 / 11)


def test_shipped_summary_puts_the_h100_figures_on_its_cost_model_line():
    doc = json.loads((REPO / "predictors/data/aic/fidelity_summary.json").read_text())
    assert "H100" in doc["published_per_gpu"] and "H100" not in doc["per_gpu"]
    fid = fidelity_summary()
    assert fid["H100"]["fitted"] is False and fid["A100-80G"].get("fitted") is None
    model = load_models()["llama-3-8b"]
    cm = table_cost_model(model, load_gpus()["H100"])
    line = cm.provenance.detail
    n = doc["published_per_gpu"]["H100"]["runs"]
    assert f"checked on H100 against {n} published vLLM V1 figure(s) (fitted on nothing)" in line
    assert "leave-one-out" not in line and "no public end-to-end run" not in line
    # the A100's line still cites its own leave-one-out runs, not the published figures
    a100 = table_cost_model(model, load_gpus()["A100-80G"], engine_version="0.6.0")
    assert "published vLLM V1" not in a100.provenance.detail
