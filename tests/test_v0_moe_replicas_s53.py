"""Under vLLM V0 (0.5 - 0.7) a mixture-of-experts plan at dp > 1 is dp independent replicas,
each a TP engine holding every expert (V0 has no --data-parallel-size, vllm#13923): its memory
plan is one replica's at dp 1, the workload is split over the replicas as for a dense model,
the exports write dp engines of their own, and the provenance says so. V1's one data-parallel
engine (experts split over tp x dp GPUs) and SGLang's plans are unchanged."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import yaml

from tuner.core.catalog import load_gpus, load_models
from tuner.core.config import ServingConfig
from tuner.core.memory import plan_memory, weight_bytes_per_rank
from tuner.core.workload import Workload
from tuner.exports.common import Deployment
from tuner.exports.formats import render_export
from tuner.predictors.sources import cost_model_for, resolve
from tuner.sim.simulator import simulate, split_replicas

MODELS, GPUS = load_models(), load_gpus()
MIXTRAL, QWEN_MOE, H100 = MODELS["mixtral-8x7b"], MODELS["qwen3-30b-a3b"], GPUS["H100"]
NOTE = "dp 2 independent replicas (V0 has no data-parallel MoE engine); each holds every expert"
V0 = ServingConfig(gpu="H100", tp=2, dp=2, chunk_size=8192, max_running=8, scheduler="vllm-v0")


def _workload(n: int = 64) -> Workload:
    rng = np.random.default_rng(0)
    return Workload(prompt_tokens=rng.integers(100, 800, n),
                    output_tokens=rng.integers(20, 200, n))


def test_a_v0_replica_holds_every_expert_as_at_dp_1():
    one = dataclasses.replace(V0, dp=1)
    assert plan_memory(MIXTRAL, H100, V0, engine_version="0.6.0") == plan_memory(
        MIXTRAL, H100, one, engine_version="0.6.0")
    # V1's one data-parallel engine still splits the experts over tp x dp GPUs
    v1 = dataclasses.replace(V0, scheduler="vllm")
    assert weight_bytes_per_rank(MIXTRAL, v1) < weight_bytes_per_rank(MIXTRAL, one)
    assert (plan_memory(MIXTRAL, H100, v1).kv_capacity_tokens
            > plan_memory(MIXTRAL, H100, dataclasses.replace(v1, dp=1)).kv_capacity_tokens)


def test_a_v0_replica_is_priced_at_dp_1():
    one = dataclasses.replace(V0, dp=1)
    two = resolve(MIXTRAL, H100, V0, engine_version="0.6.0").cost_model.provenance.detail
    assert two == resolve(MIXTRAL, H100, one, engine_version="0.6.0").cost_model.provenance.detail
    assert "data-parallel ranks" not in two
    v1 = resolve(MIXTRAL, H100, dataclasses.replace(V0, scheduler="vllm")).cost_model
    assert "all-gather + reduce-scatter of the 2 data-parallel ranks' tokens" in \
        v1.provenance.detail


def test_v0_dp_2_is_two_dp_1_engines_on_the_split_workload():
    w, cm = _workload(), cost_model_for(MIXTRAL, engine_version="0.6.0")
    one = dataclasses.replace(V0, dp=1)
    two = simulate(w, MIXTRAL, H100, V0, cm(H100, V0), engine_version="0.6.0")
    alone = simulate(w, MIXTRAL, H100, one, cm(H100, one), engine_version="0.6.0")
    shares = split_replicas(w, np.arange(len(w)), 2)  # FCFS: submission order
    parts = [simulate(w.take(idx), MIXTRAL, H100, one, cm(H100, one), engine_version="0.6.0")
             for idx in shares]
    # each replica is a dp-1 engine on its share; the job ends with the slower one
    assert two.schedule_s == max(p.schedule_s for p in parts)
    assert two.memory == alone.memory
    # queue-bound (8 running of 64 requests): half the requests a replica, about half the time
    assert 0.45 < two.schedule_s / alone.schedule_s < 0.55
    assert two.provenance.detail.endswith(NOTE) and NOTE not in alone.provenance.detail
    assert two.config.num_gpus == 4


def test_a_v0_search_offers_moe_dp_above_1():
    from tuner.search.loop import run_search
    from tuner.search.records import trial_records
    from tuner.search.settings import SearchSettings
    from tuner.search.space import SearchSpace, fit_space

    space = SearchSpace(knobs={"tp": [2], "dp": [1, 2], "chunk_size": [8192],
                               "max_running": [8, 64]},
                        fixed={"scheduler": "vllm-v0"}, source="t")
    w = _workload(32)
    fitted, notes = fit_space(space, model=MIXTRAL, gpus={"H100": H100}, gpu_caps={},
                              defaults={}, outputs_from_input=True,
                              engine_schedulers=("vllm-v0", "sarathi"), engines=["vllm"],
                              engine_version="0.6.0", workload=w)
    assert fitted.knobs["dp"] == [1, 2] and fitted.excluded == ()
    assert any("independent replicas" in n for n in notes)
    assert not any("dp > 1 left out" in n for n in notes)
    study = run_search(w, MIXTRAL, {"H100": H100}, space,
                       SearchSettings(exhaustive=True, seed=0, sample_fraction=1.0),
                       metadata={"engine_version": "0.6.0", "engines": ["vllm"]})
    wide = [r for r in trial_records(study) if r.config.dp == 2]
    assert wide and all(r.feasible for r in wide), [r.reason for r in wide]


@pytest.mark.parametrize("fmt", ["vllm", "vllm-run-batch", "run-batch", "ray-data"])
def test_v0_exports_write_dp_engines_of_their_own(fmt):
    text = render_export(fmt, V0, MIXTRAL, H100, max_model_len=4096, engine_version="0.6.0",
                         num_scheduler_steps=10)
    # no data-parallel engine argument (the note alone names the flag V0 lacks)
    assert "--data-parallel-size 2" not in text and "data_parallel_size" not in text
    if fmt == "vllm":
        assert "data-parallel-size" not in yaml.safe_load(text)
    assert NOTE in text
    assert "One data-parallel engine" not in text and "prediction is one vLLM engine" not in text
    if fmt in ("vllm", "vllm-run-batch"):  # the dense-model V0 launch for dp > 1
        assert "This is ONE replica's engine (2 GPUs)" in text


def test_v1_exports_keep_one_data_parallel_engine():
    v1 = dataclasses.replace(V0, scheduler="vllm")
    text = render_export("vllm", v1, MIXTRAL, H100, max_model_len=4096)
    assert yaml.safe_load(text)["data-parallel-size"] == 2
    assert "One data-parallel engine over all 4 GPUs" in text and NOTE not in text
    assert Deployment(v1, MIXTRAL, H100, 4096).one_engine


def test_v0_offload_holds_every_expert():
    off = dataclasses.replace(V0, weight_offload_fraction=0.25)
    v0 = Deployment(off, MIXTRAL, H100, 4096, engine_version="0.6.0")
    one = Deployment(dataclasses.replace(off, dp=1), MIXTRAL, H100, 4096, engine_version="0.6.0")
    v1 = Deployment(dataclasses.replace(off, scheduler="vllm"), MIXTRAL, H100, 4096)
    assert v0.offload_gib_per_gpu == one.offload_gib_per_gpu > v1.offload_gib_per_gpu
    assert not v0.one_engine and v0.moe_replicas_alone and v1.one_engine


def test_sglang_plans_keep_dp_attention_under_a_v0_vllm_version():
    w = _workload()
    c = ServingConfig(gpu="H100", engine="sglang", tp=1, dp=2, chunk_size=8192, max_running=64)
    cm = cost_model_for(QWEN_MOE, engine_version="0.6.0")(H100, c)  # SGLang's own release
    r = simulate(w, QWEN_MOE, H100, c, cm, engine_version="0.6.0")
    assert "independent replicas" not in r.provenance.detail
    one = dataclasses.replace(c, dp=1)
    # DP attention: the experts split over both GPUs, so more KV than one replica alone
    assert r.memory.kv_capacity_tokens > simulate(
        w, QWEN_MOE, H100, one, cm, engine_version="0.6.0").memory.kv_capacity_tokens
    assert Deployment(c, QWEN_MOE, H100, 4096, engine_version="0.6.0").one_engine
