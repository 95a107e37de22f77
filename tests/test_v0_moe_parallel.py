"""A mixture-of-experts plan that only vLLM's V1 engine runs (expert parallelism) is refused
under a V0 release: simulate says why, a search marks the trial infeasible instead of
recommending it. Its dp > 1 V0 runs as independent replicas (tests/test_v0_moe_replicas_s53.py)."""

import dataclasses

import numpy as np
import pytest

from tuner.core.catalog import load_gpus, load_models
from tuner.core.config import ServingConfig
from tuner.core.engines import generation_of, moe_parallel_refusal
from tuner.core.workload import Workload
from tuner.predictors.sources import cost_model_for
from tuner.sim.simulator import InfeasibleConfig, simulate


@pytest.mark.parametrize("version,ep,refused", [
    ("0.6.0", False, False), ("0.7.3", True, True), ("0.5.4", True, True),
    ("0.8.5", True, False), (None, False, False)])
def test_v0_refuses_expert_parallelism(version, ep, refused):
    why = moe_parallel_refusal(generation_of(version), True, ep)
    assert (why is not None) == refused
    if refused:
        assert "V0" in why and "--engine-version" in why
    # a dense model has no experts to split: any release runs it
    assert moe_parallel_refusal(generation_of(version), False, False) is None


def test_simulate_refuses_a_v0_moe_plan_with_expert_parallelism():
    model, gpu = load_models()["mixtral-8x7b"], load_gpus()["H100"]
    w = Workload(prompt_tokens=np.full(8, 512), output_tokens=np.full(8, 64))
    cfg = ServingConfig(gpu="H100", tp=2, dp=2, chunk_size=2048, max_running=64,
                        scheduler="vllm-v0", expert_parallel=True)
    cm = cost_model_for(model, engine_version="0.6.0")
    with pytest.raises(InfeasibleConfig, match="enable-expert-parallel"):
        simulate(w, model, gpu, cfg, cm(gpu, cfg), engine_version="0.6.0")
    replicas = dataclasses.replace(cfg, expert_parallel=False)  # independent replicas run
    assert simulate(w, model, gpu, replicas, cm(gpu, replicas),
                    engine_version="0.6.0").makespan_s > 0


@pytest.mark.parametrize("version,engines,kept", [
    ("0.6.0", ["vllm"], False), ("0.8.5", ["vllm"], True), (None, ["vllm"], True),
    ("0.6.0", ["vllm", "sglang"], True)])
def test_a_v0_vllm_space_leaves_out_what_only_v1_runs(version, engines, kept):
    from tuner.search.space import _fit_v0_moe

    moe, dense = load_models()["mixtral-8x7b"], load_models()["llama-3-8b"]
    knobs = {"dp": [1, 2, 4], "expert_parallel": [False, True], "engine": engines}
    notes = _fit_v0_moe(knobs, {}, moe, version)
    assert knobs["dp"] == [1, 2, 4]  # V0: independent replicas
    assert (knobs["expert_parallel"] == [False, True]) == kept
    assert any("left out" in n for n in notes) != kept
    if not kept:
        assert "V0" in notes[-1] and knobs["expert_parallel"] == [False]
    dense_knobs = {"dp": [1, 2, 4], "engine": engines}  # a dense model's replicas run anywhere
    assert _fit_v0_moe(dense_knobs, {}, dense, version) == [] and dense_knobs["dp"] == [1, 2, 4]
