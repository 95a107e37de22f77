"""The published vLLM V1 offline figures of benchmarks/fidelity.py (VLLM_V1_PUBLISHED_RUNS): the
table is well-formed, and each figure's rebuilt run has the stated lengths, prompt count and
settings (stop 51)."""

import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

import fidelity  # noqa: E402

from tuner.core.catalog import load_gpus  # noqa: E402
from tuner.core.engines import generation_of  # noqa: E402

FIGS = fidelity.VLLM_V1_PUBLISHED_RUNS
STATED = ("name", "source", "quote", "gpu", "tp", "hf_id", "dtype", "engine_version",
          "engine_version_stated", "input_len", "output_len", "num_prompts",
          "gpu_memory_utilization", "max_model_len")


def test_table_is_well_formed():
    assert len(FIGS) >= 5
    assert len({f["name"] for f in FIGS}) == len(FIGS)
    gpus = load_gpus()
    for f in FIGS:
        assert all(f.get(k) not in (None, "") for k in STATED), f["name"]
        assert ("req_s" in f) or ("total_tok_s" in f)
        assert f["gpu"] in gpus and f["tp"] >= 1
        assert f["dtype"] in ("bfloat16", "float16")  # 16-bit checkpoints only
        # V1 releases (0.8 on), not the V0 engine
        assert generation_of(f["engine_version"]).generation.key in ("v1-sync", "v1-async")
        assert f["input_len"] > 0 and f["output_len"] > 0 and f["num_prompts"] > 0
        assert fidelity.published_v1_req_s(f) > 0
        # the quote carries the published number
        assert str(f.get("total_tok_s", f.get("req_s"))) in f["quote"]


def test_req_s_from_total_tokens():
    f = FIGS[0]
    assert fidelity.published_v1_req_s(f) == pytest.approx(
        f["total_tok_s"] / (f["input_len"] + f["output_len"]))


@pytest.mark.parametrize("fig", FIGS, ids=[f["name"] for f in FIGS])
def test_rebuilt_run_has_stated_lengths_and_settings(fig):
    run = fidelity.vllm_v1_published_run(fig, load_gpus())
    wl = run.workload
    assert len(wl) == fig["num_prompts"]
    assert np.all(wl.prompt_tokens == fig["input_len"])
    assert np.all(wl.output_tokens == fig["output_len"])
    assert run.config.tp == fig["tp"]
    assert run.config.gpu_memory_utilization == fig["gpu_memory_utilization"]
    assert run.model.max_position == fig["max_model_len"]
    assert run.measured_makespan_s == pytest.approx(
        fig["num_prompts"] / fidelity.published_v1_req_s(fig))
    # never fitted: the shipped profile of the release (V1 async offline: GPU time only)
    assert run.engine.name == "vllm-v1-offline"
    assert not run.engine.fitted


def test_signed_summary():
    s = fidelity.summarise_signed([5.0, -2.0, 8.0])
    assert s == {"figures": 3, "median_pct": 5.0, "worst_pct": 8.0, "too_fast": 2}
    assert fidelity.summarise_signed([])["figures"] == 0
