"""Pipeline parallelism (issue #27 item 4): --pp splits the layers over stages that may span
machines - in the memory plan, the placement and $, the step time and the exports."""

from __future__ import annotations

import numpy as np
import pytest

from tuner.core.catalog import get_model, load_gpus
from tuner.core.config import ServingConfig
from tuner.core.memory import plan_memory
from tuner.core.pricing import job_cost_usd, place
from tuner.core.workload import Workload
from tuner.exports.vllm import to_vllm_yaml
from tuner.predictors.features import BatchFeatures
from tuner.predictors.sources import cost_model_for
from tuner.sim.pipeline import PipelinedCostModel, pipelined
from tuner.sim.simulator import InfeasibleConfig, check_feasible, simulate

GPUS = load_gpus()
A100 = GPUS["A100-80G"]
BIG = get_model("llama-3.1-405b")


def test_405b_in_16_bit_plans_on_two_a100_machines_with_pp_2():
    """The issue's acceptance: Llama-3.1-405B, 16-bit, 2 x 8 A100-80G as TP 8 x PP 2."""
    w = Workload(prompt_tokens=np.full(64, 800), output_tokens=np.full(64, 200))
    with pytest.raises(InfeasibleConfig, match="--pp 2"):
        check_feasible(w, BIG, A100, ServingConfig(gpu="A100-80G", tp=8))
    cfg = ServingConfig(gpu="A100-80G", tp=8, pp=2)
    res = simulate(w, BIG, A100, cfg, cost_model_for(BIG)(A100, cfg))
    assert res.machines["count"] == 2 and res.machines["gpus_used"] == 16
    assert "over 2 machines" in res.machines["description"]
    plan = plan_memory(BIG, A100, cfg)
    assert plan.fits and plan.weight_bytes < 0.55 * BIG.weight_bytes(16) / 8
    assert res.lower_bound_s <= res.makespan_s
    assert "pipeline parallel 2 stages" in str(res.summary()["provenance"])
    # $ counts all 16 GPUs
    assert res.cost_usd == pytest.approx(res.makespan_s / 3600 * A100.price_usd_per_h * 16)


def test_placement_spans_machines_only_when_a_replica_needs_it():
    m = place("A100-80G", 8, tp=4, dp=2, pp=2)
    assert (m.count, m.machines_per_replica, m.gpus_used) == (2, 1, 16)
    m = place("A100-80G", 8, tp=8, dp=3, pp=2)
    assert (m.count, m.machines_per_replica) == (6, 2)
    m = place("A100-80G", 8, tp=2, dp=1, pp=8)
    assert (m.count, m.machines_per_replica) == (2, 2)  # 4 stages of TP 2 per machine
    assert job_cost_usd(3600, 1.0, tp=2, dp=3, pp=4) == pytest.approx(24.0)


def test_a_stage_holds_its_layers_and_their_kv():
    llama = get_model("llama-3-8b")
    one = plan_memory(llama, A100, ServingConfig(gpu="A100-80G"))
    two = plan_memory(llama, A100, ServingConfig(gpu="A100-80G", pp=2))
    assert two.weight_bytes < 0.6 * one.weight_bytes
    # half the layers per GPU and more free memory: more than twice the tokens
    assert two.kv_capacity_tokens > 2 * one.kv_capacity_tokens


def test_a_pipelined_step_is_the_model_on_a_micro_batch_plus_the_hand_overs():
    llama = get_model("llama-3-8b")
    cfg1 = ServingConfig(gpu="A100-80G")
    base = cost_model_for(llama)(A100, cfg1)
    assert pipelined(base, llama, A100, cfg1) is base  # PP 1: unchanged
    cfg = ServingConfig(gpu="A100-80G", pp=4)
    cm = pipelined(base, llama, A100, cfg)
    assert isinstance(cm, PipelinedCostModel) and not cm.across_machines  # 4 GPUs, 1 machine
    f = BatchFeatures(prefill_tokens=np.zeros(2), prefill_sq=np.zeros(2),
                      prefill_ctx=np.zeros(2), decodes=np.array([256.0, 2.0]),
                      decode_kv=np.array([256 * 1000.0, 2 * 1000.0]),
                      seqs_sampled=np.array([256.0, 2.0]))
    micro = BatchFeatures(f.prefill_tokens, f.prefill_sq, f.prefill_ctx,
                          np.array([64.0, 1.0]), np.array([64 * 1000.0, 1000.0]),
                          np.array([64.0, 1.0]))
    t = cm.iteration_time_s(f)
    tb = base.iteration_time_s(micro)
    assert np.all(t > tb) and np.all(t - tb < 1e-3)  # + 3 hops over NVLink
    across = pipelined(base, BIG, A100, ServingConfig(gpu="A100-80G", tp=8, pp=2))
    assert across.across_machines and "assumed 100 Gb/s (ESTIMATE)" in across.describe()


def test_the_exports_run_the_pipeline():
    text = to_vllm_yaml(ServingConfig(gpu="A100-80G", tp=8, pp=2), BIG, A100,
                        max_model_len=4096)
    assert "pipeline-parallel-size: 2" in text and "tensor-parallel-size: 8" in text
    assert "over 2 machines" in text


def test_a_records_and_a_parts_dict_carry_their_pp():
    """results.json's `parts` name the plan's pipeline stages (they said pp 1 whatever ran)."""
    from tuner.core.config import ServingConfig
    from tuner.search.fleet import Part
    from tuner.search.records import Metrics, TrialRecord

    cfg = ServingConfig(gpu="A100-80G", tp=8, pp=2)
    part = Part(cfg, 100, 50.0, 10.0, 1.0)
    assert part.to_dict()["pp"] == 2 and part.to_dict()["count"] == 16
    rec = TrialRecord(number=0, config=cfg, feasible=True,
                      metrics=Metrics(makespan_s=50.0, cost_usd=1.0, requests=100))
    assert rec.to_dict()["parts"][0]["pp"] == 2
