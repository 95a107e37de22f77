"""SGLang's scheduler in C (tk_sglang_run in tuner/sim/_kernels.c) against its Python reference
(tuner.sim.sglang.SGLangScheduler, `run_schedule(..., reference=True)`): the same schedule bit
for bit on generated workloads (tight KV that retracts and evicts, prefix groups, lpm and fcfs,
radix on and off, chunking, caps, conservativeness), through `simulate` on the examples, when
stuck, streamed, paused and cancelled."""

from __future__ import annotations

import dataclasses
import functools
import shutil
import subprocess
import threading
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.sim import simulate_default
from tuner.core import sglang as sg
from tuner.core.catalog import get_gpu, get_model, load_gpus
from tuner.core.config import ServingConfig
from tuner.core.errors import TunerError
from tuner.core.workload import load_workload
from tuner.sim import kernels, simulator
from tuner.sim import scheduler as sch
from tuner.sim import sglang as sgl
from tuner.sim.simulator import InfeasibleConfig
from tuner.sim.steps import DECODES, KV_BLOCKS, PREEMPTED, RUNNING

ROOT = Path(__file__).resolve().parents[1]
GPUS = load_gpus()


def assert_same(a: sch.Schedule, b: sch.Schedule) -> None:
    assert (a.status, a.cached_tokens) == (b.status, b.cached_tokens)
    assert a.steps.dtype == b.steps.dtype == np.int64
    np.testing.assert_array_equal(a.steps, b.steps)
    np.testing.assert_array_equal(a.finish_step, b.finish_step)
    np.testing.assert_array_equal(a.first_step, b.first_step)


def both(prompt, output, **kw) -> tuple[sch.Schedule, sch.Schedule]:
    return sgl.run_schedule(prompt, output, **kw), sgl.run_schedule(prompt, output,
                                                                      reference=True, **kw)


@st.composite
def workloads(draw):
    """Prompts, outputs and prefix groups (a group's members share its prefix length, as the
    readers give it, or now and then each its own), with KV from far too small to roomy."""
    n = draw(st.integers(1, 60))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    p = rng.integers(1, draw(st.sampled_from([40, 300, 1500])), n)
    o = rng.integers(1, draw(st.sampled_from([5, 60, 400, 9000])), n)  # 9,000: beyond the clip
    groups = draw(st.integers(0, 6))
    ids = plen = None
    if groups:
        ids = rng.integers(-1, groups, n)
        lens = rng.integers(0, 400, groups)
        plen = lens[np.maximum(ids, 0)]
        if draw(st.booleans()):
            plen = rng.integers(0, 400, n)  # lengths differ within a group: the longest counts
        plen = np.minimum(plen, p) if draw(st.booleans()) else plen
    need = int((p + o).max())
    cap = draw(st.one_of(st.integers(need // 2, need + 50),  # stuck or one at a time
                         st.integers(need, need + 2000),  # retraction and eviction
                         st.integers(need, 30 * need)))
    return p, o, ids, plen, cap


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    wl=workloads(),
    chunk=st.sampled_from([1, 16, 64, 300, 4096]),
    r_max=st.sampled_from([0, 1, 2, 5, 64, 4096]),
    policy=st.sampled_from(sg.SCHEDULE_POLICIES),
    radix=st.booleans(),
    conservativeness=st.sampled_from([0.05, 0.3, 1.0, 1.5, 3.0]),
    max_prefill=st.sampled_from([1, 100, sg.MAX_PREFILL_TOKENS]),
    fast=st.booleans(),
)
def test_c_equals_python(wl, chunk, r_max, policy, radix, conservativeness, max_prefill, fast):
    p, o, ids, plen, cap = wl
    if not fast:  # the reference step by step over thousands of decodes: too slow for a test
        o = np.minimum(o, 400)
    s = sg.SGLangSettings(schedule_policy=policy, radix_cache=radix,
                          schedule_conservativeness=conservativeness,
                          max_prefill_tokens=max_prefill)
    c, ref = both(p, o, capacity_tokens=cap, chunked_prefill_size=chunk, max_running=r_max,
                  settings=s, prefix_ids=ids, prefix_tokens=plen, fast=fast)
    assert_same(c, ref)


@settings(max_examples=60, deadline=None)
@given(n=st.integers(100, 300), seed=st.integers(0, 2**32 - 1),
       slack=st.integers(0, 3000), policy=st.sampled_from(sg.SCHEDULE_POLICIES))
def test_c_equals_python_with_many_waiting_and_lpm_switching_on_and_off(n, seed, slack, policy):
    # more than 128 waiting (lpm falls back to fcfs) down to fewer (lpm sorts; dfs-weight sorts
    # throughout): groups whose prefixes do not all fit, so the cache evicts, and outputs that
    # retract
    rng = np.random.default_rng(seed)
    p, o = rng.integers(200, 2500, n), rng.integers(1, 300, n)
    ids = rng.integers(-1, 8, n)
    plen = np.minimum(np.array([1500, 900, 40, 33, 1200, 700, 2000, 300])[np.maximum(ids, 0)], p)
    s = sg.SGLangSettings(schedule_policy=policy, schedule_conservativeness=0.3)
    c, ref = both(p, o, capacity_tokens=int((p + o).max()) + slack, chunked_prefill_size=1024,
                  max_running=32, settings=s, prefix_ids=ids, prefix_tokens=plen)
    assert_same(c, ref)


@settings(max_examples=25, deadline=None)
@given(n=st.integers(300, 700), groups=st.integers(2, 40), seed=st.integers(0, 2**32 - 1),
       slack=st.integers(0, 6000))
def test_c_equals_python_dfs_weight_with_many_groups(n, groups, seed, slack):
    # the C loop re-sorts dfs-weight's queue only where it may have left the order (a group
    # cached or evicted with members waiting, a retraction, the head group's count falling
    # below the next one's): many groups of near-equal counts take every one of those paths
    rng = np.random.default_rng(seed)
    p, o = rng.integers(100, 1500, n), rng.integers(1, 200, n)
    ids = rng.integers(-1, groups, n)
    plen = np.minimum(20 + 37 * np.maximum(ids, 0), p - 1)
    s = sg.SGLangSettings(schedule_policy="dfs-weight", schedule_conservativeness=0.3)
    c, ref = both(p, o, capacity_tokens=int((p + o).max()) + slack, chunked_prefill_size=512,
                  max_running=16, settings=s, prefix_ids=ids, prefix_tokens=plen)
    assert_same(c, ref)


def test_dfs_weight_without_prefix_groups_is_fcfs():
    """No request shares a prefix: every request is the root's, so dfs-weight keeps the queue's
    order (and the C loop does not sort it at all)."""
    rng = np.random.default_rng(5)
    p, o = rng.integers(50, 900, 3000), rng.integers(1, 300, 3000)
    runs = [sgl.run_schedule(p, o, capacity_tokens=60_000, chunked_prefill_size=2048,
                             max_running=64, settings=sg.SGLangSettings(schedule_policy=pol))
            for pol in ("dfs-weight", "fcfs")]
    assert_same(*runs)


def test_dfs_weight_puts_the_most_shared_cached_prefix_first():
    """_sort_by_dfs_weight over the one-level tree: cached groups by waiting members (most
    first, ties by group), each in queue order, then the requests with no cached prefix."""
    gid = [2, -1, 0, 1, 2, 0, 1, 3, 2, 1]
    sched = sgl.SGLangScheduler(np.full(10, 50), np.full(10, 5), capacity_tokens=10_000,
                                chunked_prefill_size=512, max_running=8,
                                settings=sg.SGLangSettings(schedule_policy="dfs-weight"),
                                prefix_ids=np.array(gid), prefix_tokens=np.full(10, 20))
    sched.cached[[0, 1, 2]] = True  # group 3 is not cached: its member waits with the root's
    sched.waiting = list(range(10))
    sched._sort_dfs_weight()
    # groups 1 and 2 have 3 waiting each (1 first by id), group 0 two; then 1 and 7
    assert sched.waiting == [3, 6, 9, 0, 4, 8, 2, 5, 1, 7]
    off = dataclasses.replace(sched.s, radix_cache=False)
    assert sgl.policy_code(off) == sgl.POLICY_FCFS  # no radix cache: SGLang runs fcfs


def test_the_generated_cases_reach_retraction_eviction_and_stuck():
    """The paths the equality above is meant to cover are taken: retraction, decode-time LRU
    eviction, admission-time eviction and a stuck KV (checked on fixed cases of its kind)."""
    rng = np.random.default_rng(3)
    p, o = rng.integers(50, 200, 200), rng.integers(100, 900, 200)
    c, ref = both(p, o, capacity_tokens=20_000, chunked_prefill_size=8192, max_running=512,
                  settings=sg.SGLangSettings(schedule_conservativeness=0.3))
    assert_same(c, ref)
    assert c.steps[:, PREEMPTED].sum() > 0
    # admission evicts: group 0's prefix makes room for group 1's prompts (fewer hits)
    ids, p, o = np.array([0, 0, 1, 1, 1, 0]), np.full(6, 1200), np.full(6, 10)
    hits = []
    for cap in (100_000, 3_000):
        c, ref = both(p, o, capacity_tokens=cap, chunked_prefill_size=8192, max_running=2,
                      prefix_ids=ids, prefix_tokens=np.full(6, 1000))
        assert_same(c, ref)
        hits.append(c.cached_tokens)
    assert hits == [2000, 1000]
    # decode evicts: the first request's cached prefix gives way to the second's outputs, one
    # decode step (no finish) holding less KV than the one before it
    c, ref = both([1200, 100], [10, 2000], capacity_tokens=3000, chunked_prefill_size=8192,
                  max_running=1, prefix_ids=np.array([0, -1]), prefix_tokens=[1000, 0])
    assert_same(c, ref)
    kv, dec = c.steps[:, KV_BLOCKS], c.steps[:, DECODES] > 0
    assert (dec[1:] & (np.diff(kv) < 0) & (c.steps[1:, RUNNING] == 1)).any()
    c, ref = both([5000], [10], capacity_tokens=4000, chunked_prefill_size=8192, max_running=8)
    assert_same(c, ref)
    assert c.status == sch.STATUS_STUCK


def test_step_limit_and_empty_job():
    p, o = np.full(20, 300), np.full(20, 200)
    for fast in (True, False):
        c, ref = both(p, o, capacity_tokens=100_000, chunked_prefill_size=512, max_running=8,
                      max_steps=137, fast=fast)
        assert_same(c, ref)
        assert c.status == sch.STATUS_MAX_STEPS and len(c.steps) == 137
    c, ref = both(np.zeros(0, int), np.zeros(0, int), capacity_tokens=10,
                  chunked_prefill_size=8, max_running=4)
    assert_same(c, ref)
    assert c.status == sch.STATUS_OK and c.steps.shape == (0, sch.N_COLS)


# ---- record handling: grown, streamed in the reference's slices, paused, cancelled -----------
def _long_job(n=3000, seed=5):
    rng = np.random.default_rng(seed)
    return rng.integers(10, 400, n), rng.integers(1, 700, n)


def _keep(out: list, rows: np.ndarray) -> None:
    out.append(rows.copy())  # a view the loop reuses


def test_streamed_slices_equal_the_references_and_the_whole_record(monkeypatch):
    p, o = _long_job()
    kw = dict(capacity_tokens=60_000, chunked_prefill_size=256, max_running=64)
    whole = sgl.run_schedule(p, o, **kw)
    assert len(whole.steps) > 1024  # the record grew past its first allocation
    for rows in (sch.STREAM_ROWS, 700, 7):  # 7: fewer than one decode stretch (overlapping move)
        monkeypatch.setattr(sch, "STREAM_ROWS", rows)
        got = {}
        for ref in (False, True):
            slices: list[np.ndarray] = []
            s = sgl.run_schedule(p, o, on_steps=functools.partial(_keep, slices),
                                 reference=ref, **kw)
            assert s.steps.shape == (0, sch.N_COLS)
            assert all(len(x) == rows for x in slices[:-1]) and 0 < len(slices[-1]) <= rows
            got[ref] = slices
        assert len(got[False]) == len(got[True])
        for a, b in zip(got[False], got[True], strict=True):
            np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(np.concatenate(got[False]), whole.steps)


def test_pausing_every_few_steps_gives_the_same_schedule(monkeypatch):
    p, o = _long_job(800)
    kw = dict(capacity_tokens=30_000, chunked_prefill_size=512, max_running=32,
              settings=sg.SGLangSettings(schedule_conservativeness=0.3))
    whole = sgl.run_schedule(p, o, **kw)
    monkeypatch.setattr(sgl, "_PAUSE_EVERY_STEPS", 3)
    assert_same(sgl.run_schedule(p, o, **kw), whole)


def test_cancel_stops_it_at_a_pause(monkeypatch):
    p, o = _long_job(800)
    monkeypatch.setattr(sgl, "_PAUSE_EVERY_STEPS", 100)
    cancel = threading.Event()
    cancel.set()
    with pytest.raises(KeyboardInterrupt):
        sgl.run_schedule(p, o, capacity_tokens=30_000, chunked_prefill_size=512,
                         max_running=32, cancel=cancel)


def test_a_library_with_another_sglang_layout_is_refused():
    with pytest.raises(TunerError, match="do not match"):
        kernels.check_layout(kernels.library(), [99], "tk_sglang_layout")


@pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler")
def test_a_build_older_than_the_sglang_loop_is_refused_with_the_fix(monkeypatch, tmp_path):
    # an installed library from before tk_sglang_run (a checkout updated without reinstalling)
    src = tmp_path / "old.c"
    src.write_text("long long tk_layout(long long *out, long long size) { return 0; }\n")
    old = tmp_path / "old.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(old), str(src)], check=True)
    monkeypatch.setattr(kernels, "_built_library", lambda: old)
    with pytest.raises(TunerError, match=r"do not match this version of tuner: reinstall"):
        kernels.library.__wrapped__()


# ---- through simulate(): the examples, and a KV too small --------------------------------------
def _sglang_config(g, m, **kw) -> ServingConfig:
    # a 2,048-token chunk: at sglang 0.5.23's A10 default (4,096, mem fraction 0.684) an 8B
    # model's 16-bit weights leave no KV pool
    d = sg.sglang_defaults(g, chunked_prefill_size=2048)
    base = dict(gpu=g.name, chunk_size=d.chunked_prefill_size, block_size=1,
                gpu_memory_utilization=d.mem_fraction_static)
    plan = sg.plan_memory_sglang(m, g, ServingConfig(**base, max_running=1))
    base.update(max_running=sg.max_running_default(plan.kv_capacity_tokens, m.max_position))
    base.update(kw)
    return ServingConfig(**base)


def _with_reference(monkeypatch):
    monkeypatch.setattr(sgl, "run_schedule",
                        functools.partial(sgl.run_schedule, reference=True))


@pytest.mark.parametrize("example", ["shared_system_prompt.jsonl", "arxiv.jsonl"])
@pytest.mark.parametrize("policy", sg.SCHEDULE_POLICIES)
def test_simulate_the_examples_c_equals_python(monkeypatch, example, policy):
    m, g = get_model("llama-3-8b"), get_gpu("A10", GPUS)
    w = load_workload(ROOT / "examples" / example, model=m)
    cfg = _sglang_config(g, m)
    kw = dict(engine="sglang", startup_s=0, return_steps=True, timeline=True,
              sglang=sg.SGLangSettings(schedule_policy=policy))
    c = simulate_default(w, m, g, cfg, **kw)
    with monkeypatch.context() as mp:
        _with_reference(mp)
        ref = simulate_default(w, m, g, cfg, **kw)
    assert c.summary() == ref.summary()  # every figure, to the last digit
    assert len(c.steps) == len(ref.steps)
    for a, b in zip(c.steps, ref.steps, strict=True):
        np.testing.assert_array_equal(a, b)
    if example.startswith("shared"):
        assert c.cached_prompt_tokens > 0


def test_simulate_a_kv_too_small_raises_the_same_error(monkeypatch):
    # the memory plan refuses a pool smaller than the longest request before any scheduling;
    # let it through (a plan of 1,000 tokens said to fit) to reach the scheduler's own stuck
    # path: arxiv's prompts never fit, both loops stop and simulate says so alike
    real = simulator.plan_memory_sglang

    def tiny(*args, **kw):
        return dataclasses.replace(real(*args, **kw), fits=True, kv_capacity_tokens=1000,
                                   kv_capacity_blocks=1000)

    monkeypatch.setattr(simulator, "plan_memory_sglang", tiny)
    # and the admission floor simulate() checks before scheduling (a request a pool never admits)
    monkeypatch.setattr("tuner.sim.sglang.admission_floor",
                        lambda prompt, *args: np.zeros(len(prompt), dtype=np.int64))
    m, g = get_model("llama-3-8b"), get_gpu("A10", GPUS)
    w = load_workload(ROOT / "examples" / "arxiv.jsonl", model=m)
    cfg = _sglang_config(g, m)
    errors = []
    for ref in (False, True):
        with monkeypatch.context() as mp:
            if ref:
                _with_reference(mp)
            with pytest.raises(InfeasibleConfig) as e:
                simulate_default(w, m, g, cfg, engine="sglang", startup_s=0)
            errors.append(str(e.value))
    assert errors[0] == errors[1]
    assert "no progress (stuck) with KV capacity 1000 tokens" in errors[0]
