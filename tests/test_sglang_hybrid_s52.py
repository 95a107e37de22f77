"""Stop 52 (S): Gated DeltaNet hybrids (Qwen3-Next, Qwen3.5) under SGLang 0.5.23: the Mamba
state pool carved out as kv_cache_configurator.py _handle_max_mamba_cache does, the KV pool over
the attention layers only, the running requests capped at the slots // 5 (resolve_max_num_reqs,
_calculate_mamba_ratio), no prefix hits simulated; other hybrids (Mamba2) still refused."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from tuner.core import sglang as sg
from tuner.core.catalog import get_model, load_gpus
from tuner.core.config import ServingConfig
from tuner.core.memory import kv_bytes_per_token_per_layer_rank
from tuner.core.workload import Workload
from tuner.predictors.sources import resolve_cost_model
from tuner.search.space import fit_space, load_space
from tuner.sim.simulator import InfeasibleConfig, _check_hybrid_runs, simulate

GPUS = load_gpus()


@pytest.fixture(scope="module")
def qnext():
    return get_model("qwen3-next-80b-a3b")


def _cfg(model, **kw):
    given = {"tp": 4} | kw
    return sg.default_config(model, GPUS["H100"], given)[0]


def test_state_bytes_as_sglang_sizes_a_slot(qnext):
    # mamba_cache_per_req at TP 4: conv (2 x 16 x 128 + 32 x 128) / 4 x (4 - 1) x 2 bytes
    # (bfloat16) + temporal 32 / 4 x 128 x 128 x 4 bytes (float32, the default), x 36 layers
    conv = (2 * 16 * 128 + 32 * 128) // 4 * 3 * 2
    temporal = 32 // 4 * 128 * 128 * 4
    assert sg.sglang_state_bytes_per_request(qnext, 4) == 36 * (conv + temporal)
    assert sg.sglang_state_bytes_per_request(get_model("llama-3.1-8b"), 1) == 0.0


def test_plan_splits_the_memory_as_sglang_does(qnext):
    cfg = _cfg(qnext)
    plan = sg.plan_memory_sglang(qnext, GPUS["H100"], cfg)
    assert plan.fits
    slot = sg.sglang_state_bytes_per_request(qnext, 4)
    rest = plan.usable_bytes - plan.weight_bytes - sg.PRELOAD_BYTES
    slots = int((rest * 0.9 / 1.9 - slot) // slot)
    assert plan.state_slots == slots and plan.state_bytes_per_request == slot
    assert plan.max_running_by_slots == slots // 5
    # the KV pool: what the state pool (with its padding slot) leaves, over the 12 attention
    # layers only
    per_token = kv_bytes_per_token_per_layer_rank(qnext, 16, 4) * 12
    assert plan.kv_bytes_per_token == pytest.approx(per_token)
    assert plan.kv_capacity_tokens == int((rest - (slots + 1) * slot) // per_token)
    # the default --max-running-requests is capped by the slots
    assert cfg.max_running == min(sg.max_running_default(plan.kv_capacity_tokens,
                                                         qnext.max_position),
                                  plan.max_running_by_slots)


def test_disable_radix_cache_sizes_the_pool_by_max_running(qnext):
    cfg = _cfg(qnext, max_running=64)
    plan = sg.plan_memory_sglang(qnext, GPUS["H100"], cfg, radix_cache=False)
    assert (plan.state_slots, plan.max_running_by_slots) == (64, 64)
    on = sg.plan_memory_sglang(qnext, GPUS["H100"], cfg)
    assert plan.kv_capacity_tokens > on.kv_capacity_tokens  # 65 slots, not ~47 % of the rest


def test_pipeline_stages_and_a_starved_pool_refused(qnext):
    plan = sg.plan_memory_sglang(qnext, GPUS["H100"], _cfg(qnext, pp=2))
    assert not plan.fits and "pp 1" in plan.reason
    # memory for 6 request states after the weights: 2 slots (one of them padding), none for
    # a running request's 5
    full = sg.plan_memory_sglang(qnext, GPUS["H100"], _cfg(qnext))
    slot = full.state_bytes_per_request
    u = (full.weight_bytes + sg.PRELOAD_BYTES + 6 * slot) / GPUS["H100"].memory_bytes
    tight = sg.plan_memory_sglang(qnext, GPUS["H100"], _cfg(qnext, gpu_memory_utilization=u))
    assert tight.state_slots == 1 and tight.max_running_by_slots == 0
    assert not tight.fits and "Mamba state pool" in tight.reason


def _job(n=96, prefix=False):
    ids = np.zeros(n, dtype=np.int64) if prefix else None
    return Workload(prompt_tokens=np.full(n, 1500, dtype=np.int64),
                    output_tokens=np.full(n, 200, dtype=np.int64),
                    prefix_ids=ids, prefix_tokens=np.full(n, 1024, dtype=np.int64)
                    if prefix else None)


def test_simulated_under_sglang_capped_at_the_slots(qnext):
    gpu = GPUS["H100"]
    cfg = _cfg(qnext)
    cm = resolve_cost_model(qnext, gpu, cfg, engine="sglang")
    r = simulate(_job(), qnext, gpu, cfg, cm, engine="sglang")
    cap = r.memory.max_running_by_slots
    assert r.makespan_s > 0 and r.memory.state_slots > 0 and cap > 0
    # a --max-running-requests above the cap runs as the cap (SGLang lowers it)
    big = dataclasses.replace(cfg, max_running=cap * 4)
    at = dataclasses.replace(cfg, max_running=cap)
    r_big = simulate(_job(cap * 3), qnext, gpu, big, cm, engine="sglang")
    r_at = simulate(_job(cap * 3), qnext, gpu, at, cm, engine="sglang")
    assert r_big.makespan_s == r_at.makespan_s


def test_no_prefix_hits_simulated_for_a_hybrid_under_sglang(qnext):
    gpu = GPUS["H100"]
    cfg = _cfg(qnext)
    cm = resolve_cost_model(qnext, gpu, cfg, engine="sglang")
    shared = simulate(_job(prefix=True), qnext, gpu, cfg, cm, engine="sglang")
    alone = simulate(_job(), qnext, gpu, cfg, cm, engine="sglang")
    assert shared.makespan_s == alone.makespan_s


def test_other_hybrids_still_refused_under_sglang():
    granite = get_model("granite-4.0-h-tiny")
    with pytest.raises(InfeasibleConfig, match="Gated DeltaNet family"):
        _check_hybrid_runs(granite, "sglang", None, ServingConfig(gpu="H100", engine="sglang"))
    space, notes = fit_space(load_space("default"), model=granite, gpus={"H100": GPUS["H100"]},
                             gpu_caps={}, defaults={}, outputs_from_input=True,
                             engines=["vllm", "sglang"])
    assert space.knobs.get("engine", [space.fixed.get("engine")]) in (["vllm"], [None])
    assert sum("engine sglang left out" in n for n in notes) == 1


def test_search_offers_sglang_for_qwen3_next(qnext):
    space, notes = fit_space(load_space("default"), model=qnext, gpus={"H100": GPUS["H100"]},
                             gpu_caps={}, defaults={}, outputs_from_input=True,
                             engines=["vllm", "sglang"])
    assert "sglang" in space.knobs["engine"]
    assert not any("engine sglang" in n for n in notes)


def test_slot_rule_matches_the_source_constants():
    # 3 base slots + 2 extra_buffer tracking slots under the overlap schedule; 1 without radix
    assert sg.MAMBA_SLOTS_PER_REQUEST == 5 and sg.MAMBA_SLOTS_PER_REQUEST_NO_RADIX == 1
    assert math.isclose(sg.MAMBA_FULL_MEMORY_RATIO, 0.9)


def test_export_says_what_the_plan_took_of_the_state_pool(qnext):
    from tuner.exports.sglang import to_sglang_command

    cfg = _cfg(qnext)
    plan = sg.plan_memory_sglang(qnext, GPUS["H100"], cfg)
    text = to_sglang_command(cfg, qnext, GPUS["H100"], max_model_len=4096)
    assert f"{plan.state_slots:,} request states" in text
    assert f"at most {plan.max_running_by_slots:,} running" in text
    assert f"--mem-fraction-static {cfg.gpu_memory_utilization}" in text
    assert "--disable-radix-cache \\" not in text  # the plan's pool is sized with it on
