"""SGLang's KV page, held where it is used (stop 52).

* The memory plan records the page it rounded the pool to (MemoryPlan.kv_page_tokens); the
  report's memory table and `tuner simulate` read it from there, so a model given as a
  config.json (no catalog entry) still names its page, and a plan stored before the field
  renders without one.
* SGLang holds KV in whole pages (sglang 0.5.5 / 0.5.23: PagedTokenToKVPoolAllocator;
  ScheduleBatch.check_decode_mem asks a free page for each running request whose pages are
  full: new_page_count_next_decode x page_size in 0.5.5, new_tokens_required_next_decode in
  0.5.23): a running request holds its tokens rounded up to
  whole pages, so the pool holds fewer concurrent tokens than at page 1. The simulator's C loop
  and its Python reference hold the same; at page 1 nothing changed (golden digests of
  schedules from the code before this stop).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from tuner.cli.main import app
from tuner.core import sglang as sg
from tuner.core.catalog import get_gpu, get_model, load_gpus
from tuner.core.config import ServingConfig
from tuner.core.memory import MemoryPlan
from tuner.reports import views
from tuner.reports.context import ModelInfo
from tuner.search.records import TrialRecord
from tuner.sim import sglang as sgl
from tuner.sim.steps import KV_BLOCKS, PREEMPTED

ROOT = Path(__file__).resolve().parents[1]
GPUS = load_gpus()
LLAMA = get_model("llama-3-8b")
EXAMPLE = str(ROOT / "examples/shared_system_prompt.jsonl")


# ---- the page in the plan, and who reads it --------------------------------------------------
def test_the_plan_records_the_page_it_rounded_the_pool_to():
    for gpu, page in (("B200", 64), ("H100", 1)):
        plan = sg.plan_memory_sglang(LLAMA, get_gpu(gpu, GPUS),
                                     ServingConfig(gpu=gpu, engine="sglang",
                                                   gpu_memory_utilization=0.85))
        assert plan.kv_page_tokens == page
        assert plan.kv_capacity_tokens % page == 0
        assert MemoryPlan.from_dict(json.loads(json.dumps(plan.to_dict()))) == plan
    older = plan.to_dict()
    del older["kv_page_tokens"]  # a plan stored before stop 52
    assert MemoryPlan.from_dict(older).kv_page_tokens is None


def _memory_cell(ctx, trial: TrialRecord) -> str:
    return views._formatted_memory_rows(ctx, {0: trial})[0]["kv_tokens_s"]


def test_report_reads_the_page_from_the_plan_not_the_catalog(monkeypatch):
    monkeypatch.setattr(views, "_winner_roles", lambda ctx: [(0, ["fastest"])])
    cfg = ServingConfig(gpu="B200", engine="sglang", gpu_memory_utilization=0.85)
    plan = sg.plan_memory_sglang(LLAMA, get_gpu("B200", GPUS), cfg)
    # a model given as a config.json path: no catalog entry, the page still named
    ctx = SimpleNamespace(model=ModelInfo(name="my-own-model", num_params=1, hf_id=None))
    trial = TrialRecord(number=0, config=cfg, feasible=True, memory=plan)
    assert _memory_cell(ctx, trial) == f"{plan.kv_capacity_tokens:,} (page 64)"
    # the plan's page, whatever the catalog would say (fa4's 128 here)
    ctx.model = ModelInfo(name=LLAMA.name, num_params=LLAMA.num_params, hf_id=LLAMA.hf_id)
    fa4 = dataclasses.replace(plan, kv_page_tokens=128)
    assert _memory_cell(ctx, dataclasses.replace(trial, memory=fa4)).endswith("(page 128)")
    # a result saved before the field: renders, no page claimed
    old = trial.to_dict()
    del old["memory"]["kv_page_tokens"]
    cell = _memory_cell(ctx, TrialRecord.from_dict(json.loads(json.dumps(old))))
    assert cell == f"{plan.kv_capacity_tokens:,}"


def test_simulate_of_a_config_json_model_names_the_plans_page(tmp_path):
    config = ROOT / "tuner/core/data/configs/gemma-3-4b.json"
    r = CliRunner().invoke(app, ["simulate", "-w", EXAMPLE, "-m", str(config), "-g", "B200",
                                 "--engine", "sglang", "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.output[r.output.index("{"):])
    page = out["memory"]["kv_page_tokens"]
    assert page in (64, 128)  # trtllm_mha / fa4 on compute capability 10.x
    assert out["memory"]["kv_capacity_tokens"] % page == 0
    table = CliRunner().invoke(app, ["simulate", "-w", EXAMPLE, "-m", str(config), "-g", "B200",
                                     "--engine", "sglang"], env={"COLUMNS": "240"})
    assert table.exit_code == 0, table.output
    row = next(line for line in table.output.splitlines() if "KV capacity" in line)
    assert f"(page {page})" in row, row


# ---- the scheduler holds whole pages -----------------------------------------------------------
def _both(p, o, **kw):
    return sgl.run_schedule(p, o, **kw), sgl.run_schedule(p, o, reference=True, **kw)


def _same(a, b) -> None:
    assert (a.status, a.cached_tokens) == (b.status, b.cached_tokens)
    np.testing.assert_array_equal(a.steps, b.steps)
    np.testing.assert_array_equal(a.finish_step, b.finish_step)
    np.testing.assert_array_equal(a.first_step, b.first_step)


def test_a_request_holds_its_tokens_in_whole_pages():
    # 100 prompt tokens (the first output token), then 99 decodes: after decode j it has
    # 100 + j tokens of KV, held in whole pages of 64 (128 up to 128 tokens, then 192); the
    # last frees them
    want = [128] + [-(-(100 + j) // 64) * 64 for j in range(1, 99)] + [0]
    for fast in (True, False):
        c, ref = _both([100], [100], capacity_tokens=64 * 40, chunked_prefill_size=4096,
                       max_running=8, page_size=64, fast=fast)
        _same(c, ref)
        assert c.steps[:, KV_BLOCKS].tolist() == want


def test_decode_asks_a_page_for_each_request_whose_pages_are_full():
    # three running requests with 192 tokens each (3 full pages) in a pool of 10 pages: one
    # page free, the next decode needs three (check_decode_mem), so one is retracted; by tokens
    # (3 free of 64) none would be
    s = sgl.SGLangScheduler([180, 180, 180], [300, 300, 300], capacity_tokens=640,
                            chunked_prefill_size=4096, max_running=8,
                            settings=sg.SGLangSettings(), page_size=64)
    s.waiting, s.running = [], [0, 1, 2]
    s.computed[:] = 192
    s.generated[:] = [13, 12, 13]
    s.private = 3 * 192
    rows = s._decode(0, fast=False, max_steps=100)
    assert rows[0, PREEMPTED] == 1 and s.waiting == [1]
    assert rows[0, KV_BLOCKS] == 2 * 192 + 2 * 64  # the two kept, a new page each


@st.composite
def workloads(draw):
    """Prompts (now and then whole pages), outputs, prefix groups (now and then the whole
    prompt) and a pool from tight to roomy, at SGLang's pages."""
    page = draw(st.sampled_from([1, 16, 64, 128]))
    n = draw(st.integers(1, 40))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    p = rng.integers(1, draw(st.sampled_from([60, 400, 1500])), n)
    if draw(st.booleans()):
        p = np.maximum(p // page, 1) * page
    o = rng.integers(1, draw(st.sampled_from([5, 80, 300])), n)
    ids = plen = None
    if groups := draw(st.integers(0, 5)):
        ids = rng.integers(-1, groups, n)
        plen = rng.integers(0, 500, groups)[np.maximum(ids, 0)]
        plen = p.copy() if draw(st.booleans()) else np.minimum(plen, p)
    floor = int(sgl.admission_floor(p, o, ids, plen, True, page).max())
    cap = draw(st.one_of(st.integers(floor, floor + 4 * page),
                         st.integers(floor, 8 * floor)))
    return page, p, o, ids, plen, cap // page * page + (page if cap % page else 0)


@settings(derandomize=True, max_examples=120, deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(wl=workloads(), policy=st.sampled_from(sg.SCHEDULE_POLICIES),
       chunk=st.sampled_from([16, 300, 4096]), r_max=st.sampled_from([1, 5, 64]))
def test_c_and_python_hold_the_same_whole_pages(wl, policy, chunk, r_max):
    page, p, o, ids, plen, cap = wl
    kw = dict(capacity_tokens=cap, chunked_prefill_size=chunk, max_running=r_max,
              settings=sg.SGLangSettings(schedule_policy=policy, schedule_conservativeness=0.3),
              prefix_ids=ids, prefix_tokens=plen, page_size=page)
    c, ref = _both(p, o, **kw)
    _same(c, ref)
    _same(c, sgl.run_schedule(p, o, fast=False, **kw))  # the decode stretches, step by step
    assert c.status == 0  # a pool at the admission floor runs every request
    held = c.steps[:, KV_BLOCKS]
    assert (held <= cap).all() and (held % page == 0).all()  # whole pages, never beyond


# ---- page 1: unchanged ------------------------------------------------------------------------
def _digest(s) -> str:
    h = hashlib.sha256()
    for a in (s.steps, s.finish_step, s.first_step):
        h.update(np.ascontiguousarray(a, dtype=np.int64).tobytes())
    h.update(str((s.status, s.cached_tokens)).encode())
    return h.hexdigest()[:16]


#: the schedules of the code before stop 52 (C and reference alike), retractions and
#: evictions included; ("dfs-weight", 3000) as retraction runs since stop 52 (sglang >= 0.5.2's
#: retract_decode: tests/test_sglang_retract_s52.py; 38d75b6beb5dc9e9 before)
PAGE_ONE_DIGESTS = {
    ("fcfs", 3000): "2e19d2c0f68061e2", ("fcfs", 12000): "b72e22f29cbef5d9",
    ("lpm", 3000): "2ce8078cf01788fb", ("lpm", 12000): "6992d5e9c7a8fa9b",
    ("dfs-weight", 3000): "339b498a663d6969", ("dfs-weight", 12000): "5caff14a8b4eef72",
}


def test_page_one_schedules_are_bit_identical_to_before():
    i = np.arange(240)
    p, o = 30 + (i * 7919) % 1100, 3 + (i * 104729) % 350
    ids = np.where(i % 5 == 0, -1, i % 7)
    plen = np.minimum(np.array([0, 64, 200, 37, 500, 128, 900])[i % 7], p)
    for (policy, cap), digest in PAGE_ONE_DIGESTS.items():
        kw = dict(capacity_tokens=cap, chunked_prefill_size=512, max_running=48,
                  settings=sg.SGLangSettings(schedule_policy=policy,
                                             schedule_conservativeness=0.3),
                  prefix_ids=ids, prefix_tokens=plen)
        c, ref = _both(p, o, **kw)
        assert _digest(c) == _digest(ref) == digest, (policy, cap)
