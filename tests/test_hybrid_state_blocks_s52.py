"""A hybrid (Gated DeltaNet) model's recurrent-state blocks held exactly by the vLLM V1
scheduler (stop 52): every admitted request takes `state_blocks` blocks from the KV pool with
its first allocation (counted in the admission check, as vLLM V1's allocate_slots counts the
MambaManager's), a preempted one again when readmitted, and frees them when it finishes or is
preempted; the memory plan no longer sets state pages aside nor caps the running requests."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tuner.core.catalog import get_model, load_gpus
from tuner.core.config import ServingConfig
from tuner.core.memory import MemoryPlan, hybrid_layout, plan_memory
from tuner.core.schedulers import SCHEDULER_PRESETS
from tuner.core.workload import Workload
from tuner.predictors.sources import resolve_cost_model
from tuner.sim import scheduler as sch
from tuner.sim.simulator import scheduler_params, simulate

V1_PRESETS = sorted(n for n, p in SCHEDULER_PRESETS.items() if not p.prefill_first)


def _params(capacity: int, state: int, *, running: int = 64, block: int = 16,
            budget: int = 2048, name: str = "vllm") -> sch.SchedulerParams:
    return sch.preset(name, token_budget=budget, max_running=running, block_size=block,
                      capacity_blocks=capacity)._replace(state_blocks=state)


@pytest.mark.parametrize("name", ["vllm", "vllm-basic"])  # with and without the full-ISL gate
@pytest.mark.parametrize("fast", [True, False])
def test_admission_counts_the_state_blocks(fast, name):
    # 10 blocks, each request 1 attention block (10 prompt + 2 output tokens of 16) + 3 state
    # blocks: 2 run at once (8 blocks); a third would need 4 of the 2 left
    prompt, output = np.full(6, 10), np.full(6, 2)
    s = sch.run_schedule(prompt, output, _params(10, 3, name=name), fast=fast)
    assert s.status == sch.STATUS_OK
    assert s.steps[:, sch.RUNNING].max() == 2
    assert s.steps[:, sch.KV_BLOCKS].max() == 8
    assert s.steps[:, sch.PREEMPTED].sum() == 0
    # without state blocks the 10 blocks hold 6 such requests
    assert sch.run_schedule(prompt, output, _params(10, 0), fast=fast).steps[
        :, sch.RUNNING].max() == 6


def test_a_request_that_cannot_hold_its_state_is_stuck():
    # 2 attention blocks + 3 state blocks > 4: vLLM never admits it
    s = sch.run_schedule(np.array([20]), np.array([5]), _params(4, 3))
    assert s.status == sch.STATUS_STUCK


@pytest.mark.parametrize("fast", [True, False])
def test_state_blocks_are_freed_at_preemption_and_finish(fast):
    # long decodes in a tight pool: requests are preempted and readmitted; the pool ends empty
    # (a state block kept past a preemption or a finish would be left over) and every step's
    # running requests hold at least their state blocks and one attention block each
    rng = np.random.default_rng(3)
    prompt, output = rng.integers(1, 60, 80), rng.integers(40, 200, 80)
    s = sch.run_schedule(prompt, output, _params(60, 2, running=32, block=8), fast=fast)
    assert s.status == sch.STATUS_OK and s.steps[:, sch.PREEMPTED].sum() > 0
    assert s.steps[-1, sch.KV_BLOCKS] == 0 and s.steps[-1, sch.RUNNING] == 0
    assert (s.steps[:, sch.KV_BLOCKS] >= 3 * s.steps[:, sch.RUNNING]).all()
    assert (s.steps[:, sch.KV_BLOCKS] <= 60).all()


def test_zero_state_blocks_is_the_plain_schedule():
    rng = np.random.default_rng(5)
    prompt, output = rng.integers(1, 900, 300), rng.integers(1, 300, 300)
    base = sch.preset("vllm", token_budget=512, max_running=48, block_size=16,
                      capacity_blocks=900)
    a = sch.run_schedule(prompt, output, base)
    b = sch.run_schedule(prompt, output, base._replace(state_blocks=0))
    np.testing.assert_array_equal(a.steps, b.steps)
    np.testing.assert_array_equal(a.finish_step, b.finish_step)


@st.composite
def jobs(draw):
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    n = draw(st.integers(1, 80))
    prompt = rng.integers(1, draw(st.sampled_from([8, 64, 400])), n)
    output = rng.integers(1, draw(st.sampled_from([4, 40, 200])), n)
    B = draw(st.sampled_from([1, 4, 16]))
    state = draw(st.integers(1, 4))
    need = int(np.ceil((prompt + output) / B).max()) + state
    cap = need + draw(st.integers(0, need * 20))
    params = sch.preset(draw(st.sampled_from(V1_PRESETS)),
                        token_budget=draw(st.sampled_from([16, 128, 2048])),
                        max_running=draw(st.integers(1, 48)), block_size=B,
                        capacity_blocks=cap)._replace(state_blocks=state)
    kw = {}
    if draw(st.booleans()):
        kw["prefix_ids"] = np.where(rng.random(n) < 0.7, rng.integers(0, 4, n), -1)
        kw["prefix_tokens"] = rng.integers(0, 600, n)
    if draw(st.booleans()):
        kw["arrival_step"] = np.sort(rng.integers(0, 300, n))
    return prompt, output, params, kw


@settings(derandomize=True, max_examples=150, deadline=None)
@given(jobs())
def test_lazy_decodes_match_the_exact_loop_with_state_blocks(job):
    prompt, output, params, kw = job
    a = sch.run_schedule(prompt, output, params, fast=True, **kw)
    b = sch.run_schedule(prompt, output, params, fast=False, **kw)
    assert a.status == b.status
    np.testing.assert_array_equal(a.steps, b.steps)
    np.testing.assert_array_equal(a.finish_step, b.finish_step)
    np.testing.assert_array_equal(a.first_step, b.first_step)
    assert a.cached_tokens == b.cached_tokens
    if a.status == sch.STATUS_OK:  # every block, state ones included, back in the pool
        assert a.steps[-1, sch.KV_BLOCKS] == 0


# ---- the memory plan and the simulator ---------------------------------------------------
@pytest.fixture(scope="module")
def qnext():
    return get_model("qwen3-next-80b-a3b")


def test_plan_is_the_whole_pool_and_counts_state_in_concurrency(qnext):
    gpu = load_gpus()["H100"]
    cfg = ServingConfig(gpu="H100", tp=4, max_running=256)
    p = plan_memory(qnext, gpu, cfg, mean_request_tokens=1500)
    lay = hybrid_layout(qnext, cfg)
    pool = int(p.kv_bytes // lay.block_bytes) // lay.attention_groups
    assert p.fits and p.state_blocks_per_request == 3 and p.block_size_tokens == 272
    assert p.kv_capacity_blocks == pool  # nothing set aside for the state pages
    assert p.kv_capacity_tokens == pool * 272
    assert p.max_concurrent_requests == pytest.approx(pool / (math.ceil(1500 / 272) + 3))
    assert not hasattr(p, "max_running_by_state")
    # the scheduler charges the state blocks and keeps max_num_seqs
    k = scheduler_params(cfg, p.kv_capacity_blocks, p)
    assert (k.state_blocks, k.block_size, k.max_running) == (3, 272, 256)


def test_the_longest_request_must_fit_with_its_state(qnext):
    gpu = load_gpus()["H100"]
    cfg = ServingConfig(gpu="H100", tp=4)
    p = plan_memory(qnext, gpu, cfg, mean_request_tokens=1500)
    room = p.kv_capacity_tokens - 3 * 272  # what one request's attention can use
    assert plan_memory(qnext, gpu, cfg, mean_request_tokens=1500,
                       max_request_tokens=room).fits
    bad = plan_memory(qnext, gpu, cfg, mean_request_tokens=1500, max_request_tokens=room + 1)
    assert not bad.fits and "recurrent-state" in bad.reason


def test_an_old_plan_with_the_cap_still_loads(qnext):
    gpu = load_gpus()["H100"]
    d = plan_memory(qnext, gpu, ServingConfig(gpu="H100", tp=4),
                    mean_request_tokens=1500).to_dict()
    d["max_running_by_state"] = 702  # as results.json stored it before stop 52
    assert MemoryPlan.from_dict(d).state_blocks_per_request == 3


def test_short_requests_run_as_many_as_the_pool_holds(qnext):
    # a small pool (gpu_memory_utilization 0.62); half the requests fit one 272-token block,
    # half need three: the mean (3 blocks) would have capped the old plan at pool // 6, while
    # vLLM admits each request by its own blocks plus its 3 state blocks
    gpu = load_gpus()["H100"]
    cfg = ServingConfig(gpu="H100", tp=4, gpu_memory_utilization=0.62, max_running=1024)
    n = 1200
    short = np.arange(n) < n // 2
    w = Workload(prompt_tokens=np.where(short, 100, 600).astype(np.int64),
                 output_tokens=np.where(short, 20, 100).astype(np.int64))
    r = simulate(w, qnext, gpu, cfg, resolve_cost_model(qnext, gpu, cfg), return_steps=True)
    pool = r.memory.kv_capacity_blocks
    steps = np.concatenate(r.steps)
    running = steps[:, sch.RUNNING]
    old_cap = pool // (3 + math.ceil(float((w.prompt_tokens + w.output_tokens).mean()) / 272))
    assert running.max() > old_cap
    assert (steps[:, sch.KV_BLOCKS] >= 4 * running).all()
    assert steps[:, sch.KV_BLOCKS].max() <= pool
