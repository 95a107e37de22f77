"""SGLang as a simulated engine (issue 28): its defaults, its scheduler (tuner.sim.sglang) by
hand and by invariants, and `tuner simulate --engine sglang` on the shared-prompt example."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.sim import simulate_default
from tuner.core import sglang as sg
from tuner.core.catalog import GIB, get_gpu, get_model, load_gpus
from tuner.core.config import ServingConfig
from tuner.core.engine_defaults import vllm_defaults
from tuner.core.errors import TunerError
from tuner.core.workload import load_workload
from tuner.sim.sglang import run_schedule
from tuner.sim.steps import (
    DECODE_KV,
    DECODES,
    KV_BLOCKS,
    PREEMPTED,
    PREFILL_CTX,
    PREFILL_SQ,
    PREFILL_TOKENS,
    RUNNING,
    SAMPLED,
)

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "shared_system_prompt.jsonl"
GPUS = load_gpus()


# ---- defaults (server_args.py _handle_gpu_memory_settings, scheduler.py) --------------------
def test_defaults_by_gpu_memory_as_sglang_computes_them():
    assert sg.chunked_prefill_default(16 * GIB) == 2048  # T4
    assert sg.chunked_prefill_default(24 * GIB) == 4096  # A10, 4090 (sglang 0.5.23 memory_hook.py)
    assert sg.chunked_prefill_default(40 * GIB) == 4096  # A100-40G, L40
    assert sg.chunked_prefill_default(80 * GIB) == 8192  # H100
    assert sg.chunked_prefill_default(141 * GIB) == 8192  # H200
    assert sg.chunked_prefill_default(192 * GIB) == 16384  # B200
    # A10: reserved 512 + 2048 * 1.5 + 48 * 2 + 1 * 1 / 8 * 1024 + 42 prefill graphs * 8
    # = 4,144 MiB of 24,576
    assert sg.mem_fraction_static_default(24 * GIB, 2048, tp=1) == 0.831
    # H100: 512 + 8192 * 1.5 + 256 * 2 + 128 + 58 * 8 = 13,904 MiB (above the 10 GiB floor)
    assert sg.mem_fraction_static_default(80 * GIB, 8192, tp=1) == 0.83
    # TP 8 on H100: cuda_graph_max_bs 512, 8 / 8 GiB for the parallel groups
    assert sg.mem_fraction_static_default(80 * GIB, 8192, tp=8) == round(
        (81920 - (512 + 8192 * 1.5 + 512 * 2 + 1024 + 58 * 8)) / 81920, 3)
    # min(tokens // 2, req_to_token_pool: min(max(tokens / context * 512, 2048), 4096))
    assert sg.max_running_default(40_000, 8192) == 2500
    assert sg.max_running_default(400_000, 8192) == 4096
    assert sg.max_running_default(2_000, 8192) == 1000
    s = sg.SGLangSettings()
    assert (s.init_new_token_ratio, s.min_new_token_ratio) == pytest.approx((0.7, 0.098))
    assert s.new_token_ratio_decay == pytest.approx((0.7 - 0.098) / 600)
    assert sg.SGLangSettings(schedule_conservativeness=2.0).init_new_token_ratio == 1.0
    with pytest.raises(TunerError, match="fcfs, lpm, dfs-weight"):
        sg.SGLangSettings(schedule_policy="lof")  # SGLang's longest-output-first: not modelled


def test_memory_plan_is_the_static_fraction_less_weights():
    m, g = get_model("llama-3-8b"), get_gpu("A10", GPUS)
    cfg = ServingConfig(gpu="A10", gpu_memory_utilization=0.847, block_size=1)
    plan = sg.plan_memory_sglang(m, g, cfg)
    kv = g.memory_bytes * 0.847 - plan.weight_bytes - sg.PRELOAD_BYTES
    assert plan.kv_capacity_tokens == int(kv // plan.kv_bytes_per_token)
    assert plan.kv_capacity_blocks == plan.kv_capacity_tokens  # one-token pages
    assert plan.activation_bytes == 0.0 and plan.fits
    assert not sg.plan_memory_sglang(m, g, cfg, max_request_tokens=10**7).fits


# ---- the scheduler by hand ----------------------------------------------------------------
def test_prefill_and_decode_steps_chunking_and_the_radix_cache_by_hand():
    # three 1,000-token prompts sharing a 150-token prefix, 2,048-token chunks: step 0 prefills
    # two prompts and the first 48 tokens of the third (one copy of the prefix is freed when
    # the second inserts it), step 1 the third's other 952 (no decode meanwhile), then decodes
    s = run_schedule([1000] * 3, [5] * 3, capacity_tokens=60_000, chunked_prefill_size=2048,
                     max_running=256, prefix_ids=np.zeros(3, int), prefix_tokens=np.full(3, 150))
    st = s.steps
    assert st[:, PREFILL_TOKENS].tolist() == [2048, 952, 0, 0, 0, 0]
    assert st[:2, PREFILL_SQ].tolist() == [1000**2 * 2 + 48**2, 952**2]
    assert st[1, PREFILL_CTX] == 952 * 48
    assert st[:, DECODES].tolist() == [0, 0, 3, 3, 3, 3]
    assert st[2:, DECODE_KV].tolist() == [3003, 3006, 3009, 3012]
    assert st[:, SAMPLED].tolist() == [2, 1, 3, 3, 3, 3]
    assert st[:, KV_BLOCKS].tolist() == [1898, 2700, 2703, 2706, 2709, 150]  # prefix stays
    assert st[:, RUNNING].tolist() == [3, 3, 3, 3, 3, 0]
    assert s.finish_step.tolist() == [5, 5, 5] and s.cached_tokens == 0


def test_admission_reserves_the_outputs_and_waits_for_a_finish():
    # 10,000 tokens: each request reserves 1,000 prompt + 1,000 output + 1 page, so four fit;
    # the fifth is refused (the batch is full) until the first wave finishes at step 999
    s = run_schedule([1000] * 8, [1000] * 8, capacity_tokens=10_000, chunked_prefill_size=8192,
                     max_running=64)
    assert s.first_step.tolist() == [0] * 4 + [1000] * 4
    assert s.finish_step.tolist() == [999] * 4 + [1999] * 4
    assert s.steps[:, RUNNING].max() == 4


def test_max_running_requests_caps_the_batch():
    s = run_schedule([100] * 10, [50] * 10, capacity_tokens=100_000, chunked_prefill_size=8192,
                     max_running=3)
    assert s.steps[:, RUNNING].max() == 3
    assert s.first_step.tolist()[:4] == [0, 0, 0, 50]


def test_a_tight_pool_retracts_and_the_ratio_makes_admission_more_careful():
    rng = np.random.default_rng(1)
    p, o = rng.integers(50, 200, 200), rng.integers(100, 900, 200)
    runs = {c: run_schedule(p, o, capacity_tokens=20_000, chunked_prefill_size=8192,
                            max_running=512,
                            settings=sg.SGLangSettings(schedule_conservativeness=c))
            for c in (0.3, 1.4)}
    assert all(r.status == 0 for r in runs.values())
    assert runs[0.3].steps[:, PREEMPTED].sum() > 0  # optimistic admission runs out of KV
    assert runs[0.3].steps[:, RUNNING].max() > runs[1.4].steps[:, RUNNING].max()


def test_lru_keeps_a_finished_groups_prefix_while_memory_allows():
    ids = np.array([0, 0, 1, 1, 1, 0])  # two group-0 requests, three of group 1, then group 0
    p, o = np.full(6, 1200), np.full(6, 10)
    kw = dict(chunked_prefill_size=8192, max_running=2, prefix_ids=ids,
              prefix_tokens=np.full(6, 1000))
    roomy = run_schedule(p, o, capacity_tokens=100_000, **kw)
    tight = run_schedule(p, o, capacity_tokens=3_000, **kw)
    # both: the third group-1 request hits; roomy: the last group-0 one too (kept after its
    # group's users left); tight: group 0's entry was evicted for group 1's prompts
    assert roomy.cached_tokens == 2000 and tight.cached_tokens == 1000


def test_lpm_runs_a_groups_members_together_when_at_most_128_wait():
    n = 120
    ids, p, o = np.arange(n) % 4, np.full(n, 2100), np.full(n, 50)
    kw = dict(capacity_tokens=8000, chunked_prefill_size=4096, max_running=16, prefix_ids=ids,
              prefix_tokens=np.full(n, 2000))
    fcfs = run_schedule(p, o, **kw)
    lpm = run_schedule(p, o, settings=sg.SGLangSettings(schedule_policy="lpm"), **kw)
    # four 2,000-token prefixes do not fit beside the prompts: fcfs alternates groups and
    # evicts, lpm takes the cached group's members first
    assert lpm.cached_tokens > fcfs.cached_tokens
    assert lpm.steps[:, PREFILL_TOKENS].sum() < fcfs.steps[:, PREFILL_TOKENS].sum()
    assert len(lpm.steps) < len(fcfs.steps)
    # above 128 waiting requests SGLang turns lpm off (fcfs) until the queue shrinks
    m = 400
    big = dict(kw, prefix_ids=np.arange(m) % 4, prefix_tokens=np.full(m, 2000))
    a = run_schedule(np.full(m, 2100), np.full(m, 50), **big)
    b = run_schedule(np.full(m, 2100), np.full(m, 50),
                     settings=sg.SGLangSettings(schedule_policy="lpm"), **big)
    np.testing.assert_array_equal(a.steps[:50], b.steps[:50])
    assert not np.array_equal(fcfs.steps[:50], lpm.steps[:50])


# ---- the scheduler by invariants ----------------------------------------------------------
@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(1, 50),
    seed=st.integers(0, 10_000),
    chunk=st.sampled_from([16, 64, 512, 4096]),
    r_max=st.sampled_from([1, 4, 64]),
    slack=st.integers(2, 4000),
    policy=st.sampled_from(sg.SCHEDULE_POLICIES),
    radix=st.booleans(),
    groups=st.integers(0, 4),
    conservativeness=st.sampled_from([0.3, 1.0, 1.5]),
)
def test_scheduler_invariants(n, seed, chunk, r_max, slack, policy, radix, groups,
                              conservativeness):
    rng = np.random.default_rng(seed)
    p, o = rng.integers(1, 900, n), rng.integers(1, 300, n)
    ids = rng.integers(-1, groups, n) if groups else None
    plen = np.array([100, 40, 300, 7])[np.maximum(ids, 0)] if groups else None
    if groups:
        plen = np.minimum(plen, p)
    cap = int((p + o).max()) + slack
    settings_ = sg.SGLangSettings(schedule_policy=policy, radix_cache=radix,
                                  schedule_conservativeness=conservativeness)
    kw = dict(capacity_tokens=cap, chunked_prefill_size=chunk, max_running=r_max,
              settings=settings_, prefix_ids=ids, prefix_tokens=plen)
    s = run_schedule(p, o, **kw)
    st_ = s.steps
    assert s.status == 0
    assert (s.finish_step >= 0).all() and (s.first_step <= s.finish_step).all()
    # every output token sampled once; a prefill that completes samples one, decodes the rest
    assert st_[:, SAMPLED].sum() == o.sum()
    assert st_[:, DECODES].sum() + n + st_[:, PREEMPTED].sum() == o.sum()
    # a step prefills or decodes, never both, and never nothing
    assert (np.minimum(st_[:, PREFILL_TOKENS], st_[:, DECODES]) == 0).all()
    assert (st_[:, PREFILL_TOKENS] + st_[:, DECODES] > 0).all()
    assert (st_[:, PREFILL_TOKENS] <= chunk).all()
    assert (st_[:, KV_BLOCKS] <= cap).all() and (st_[:, RUNNING] <= r_max).all()
    if st_[:, PREEMPTED].sum() == 0:  # prompt tokens computed once, less the cache's hits
        assert st_[:, PREFILL_TOKENS].sum() + s.cached_tokens == p.sum()
    else:
        assert st_[:, PREFILL_TOKENS].sum() + s.cached_tokens > p.sum()
    if not radix or ids is None:
        assert s.cached_tokens == 0 and st_[-1, KV_BLOCKS] == 0
    # skipping decode stretches changes nothing
    exact = run_schedule(p, o, fast=False, **kw)
    np.testing.assert_array_equal(exact.steps, st_)
    np.testing.assert_array_equal(exact.finish_step, s.finish_step)


# ---- simulate() and the CLI on the shared-system-prompt example -----------------------------
def _sglang_config(g, m) -> ServingConfig:
    # a 2,048-token chunk: at sglang 0.5.23's A10 default (4,096, mem fraction 0.684) an 8B
    # model's 16-bit weights leave no KV pool
    d = sg.sglang_defaults(g, chunked_prefill_size=2048)
    base = dict(gpu=g.name, chunk_size=d.chunked_prefill_size, block_size=1,
                gpu_memory_utilization=d.mem_fraction_static)
    plan = sg.plan_memory_sglang(m, g, ServingConfig(**base, max_running=1))
    return ServingConfig(**base, max_running=sg.max_running_default(plan.kv_capacity_tokens,
                                                                     m.max_position))


def test_sglang_lpm_beats_vllm_without_prefix_caching_and_the_gap_shrinks_with_it():
    m, g = get_model("llama-3-8b"), get_gpu("A10", GPUS)
    w = load_workload(EXAMPLE, model=m)
    d = vllm_defaults(g.name, g.memory_gib, "llm", None, m.max_position, m)
    vcfg = ServingConfig(gpu=g.name, **d.knobs())
    vllm_off = simulate_default(w, m, g, vcfg, prefix_caching=False, startup_s=0)
    vllm_on = simulate_default(w, m, g, vcfg, startup_s=0)
    sgl = simulate_default(w, m, g, _sglang_config(g, m), engine="sglang", startup_s=0,
                           sglang=sg.SGLangSettings(schedule_policy="lpm"))
    assert vllm_off.cached_prompt_tokens == 0 and sgl.cached_prompt_tokens > 0
    assert sgl.makespan_s < vllm_off.makespan_s
    assert abs(vllm_on.makespan_s - sgl.makespan_s) < vllm_off.makespan_s - sgl.makespan_s
    assert "SGLang priced with vLLM's kernel tables; engine overhead not fitted" in str(
        sgl.provenance)
    assert sgl.engine == "sglang" and sgl.output_tokens == vllm_on.output_tokens
    # SGLang without its radix cache loses what the cache saved
    off = simulate_default(w, m, g, _sglang_config(g, m), engine="sglang", startup_s=0,
                           prefix_caching=False)
    assert off.cached_prompt_tokens == 0 and off.makespan_s > sgl.makespan_s


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "tuner.cli", "simulate", "-w", str(EXAMPLE),
                           "-m", "llama-3-8b", "-g", "A10", *args],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)


def test_cli_engine_sglang_json_and_option_errors():
    # sglang 0.5.23's A10 defaults (a 4,096-token chunk, mem fraction 0.684) leave an 8B model
    # at 16 bits no KV pool: one clear error; with a 2,048-token chunk it fits
    r = run_cli("--engine", "sglang", "--json")
    assert r.returncode != 0 and "does not fit on A10 under SGLang" in r.stderr
    assert "--mem-fraction-static 0.684" in r.stderr and "Traceback" not in r.stderr
    r = run_cli("--engine", "sglang", "--schedule-policy", "lpm", "--chunk-size", "2048",
                "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["engine"]["name"] == "sglang"
    assert d["engine"]["settings"]["schedule_policy"] == "lpm"
    assert d["config"]["chunk_size"] == 2048 and d["config"]["block_size"] == 1
    assert d["config"]["gpu_memory_utilization"] == 0.82  # nvidia-smi's 23,028 MiB A10
    assert d["sglang_defaults"]["chunked_prefill_size"] == 2048
    assert "SGLang priced with vLLM's kernel tables" in d["provenance"]
    for args, words in [
        (("--schedule-policy", "lpm"), "add --engine sglang"),
        (("--engine", "sglang", "--scheduler", "vllm"), "--schedule-policy"),
        (("--engine", "sglang", "--no-enable-prefix-caching"), "--disable-radix-cache"),
        (("--engine", "sglang", "--gpu-memory-utilization", "0.8"), "--mem-fraction-static"),
        (("--engine", "sglang", "--kv-offload-layers", "2"), "vLLM only"),
        (("--engine", "tgi"), "not one of vllm | sglang"),
    ]:
        r = run_cli(*args)
        assert r.returncode != 0 and words in r.stderr, (args, r.stderr)
        assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr


def test_workload_stats_prefix_sharing_ratio_by_hand():
    from tuner.core.workload import Workload, workload_stats

    w = Workload(np.array([1000, 1000, 500, 300]), np.array([10, 10, 10, 10]),
                 prefix_ids=np.array([0, 0, 0, -1]), prefix_tokens=np.array([400, 400, 400, 0]))
    # three copies of a 400-token prefix, one computed: 800 of 2,800 prompt tokens reused
    assert workload_stats(w)["prefix_sharing_ratio"] == pytest.approx(800 / 2800)
    assert workload_stats(Workload(np.array([5]), np.array([5])))["prefix_sharing_ratio"] == 0.0
    r = subprocess.run([sys.executable, "-m", "tuner.cli", "workload", "stats", str(EXAMPLE)],
                       capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert r.returncode == 0 and "prefix-sharing ratio 86.8%" in r.stdout, r.stderr
