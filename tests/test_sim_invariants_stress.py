"""Invariants a vLLM user relies on, on paths the other property tests reach rarely: the
physical limit on prefill-heavy jobs of long prompts, vLLM V0 multi-step plans whose KV or
token budget holds a request but not the decode runs the engine computes it to, requests of 0
tokens built in Python, and the step records' invariants over every path at once (V0 single-
and multi-step, V1 presets, SGLang's policies, prefixes, arrivals, a client's cap, DP, PP,
offload, MoE and sliding-window models, tiny KV caches). The property tests run derandomized
(the same examples every run, so CI cannot fail on a draw a local run never saw); a fuzz
with other seeds: `pytest tests/test_sim_invariants_stress.py -p no:randomly
--hypothesis-seed=N` after removing derandomize, as stop 48 did over 12 seeds."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from tests.sim import simulate_default
from tuner.core.catalog import get_model, load_gpus
from tuner.core.config import ServingConfig
from tuner.core.workload import Workload
from tuner.sim.simulator import InfeasibleConfig, lower_bound_s

GPUS = load_gpus()


def wl(prompt, output):
    return Workload(np.asarray(prompt, dtype=np.int64), np.asarray(output, dtype=np.int64))


# ---- the physical limit ----------------------------------------------------------------------
def test_a_long_prompt_job_is_not_faster_than_its_physical_limit():
    """Found by stress: 256 prompts of 8,000 tokens on llama-3.2-1b (a 128k vocabulary: the LM
    head is a fifth of its matmul weights) priced by A100's measured tables ran in 22.8 s
    against a limit of 23.1 s. The limit charged the LM head on every prompt token (the engine
    computes logits for the sampled positions only) and a causal pair twice its FLOPs."""
    m, g = get_model("llama-3.2-1b"), GPUS["A100-80G"]
    cfg = ServingConfig(gpu="A100-80G", chunk_size=16384, max_running=256)
    res = simulate_default(wl([8000] * 256, [1] * 256), m, g, cfg, startup_s=0)
    assert 0 < res.schedule_lower_bound_s <= res.schedule_s


def test_the_limit_counts_the_flops_the_engine_runs():
    """p + d - 1 tokens through the layers, d logits rows, a causal pair 2 x heads x
    (head_dim + value_head_dim) FLOPs per layer, by hand for llama-3-8b."""
    m, g = get_model("llama-3-8b"), GPUS["H100"]
    cfg = ServingConfig(gpu="H100")
    w = wl([1000, 10], [5, 1])
    linear = (1004 + 10) * m.active_linear_params_total * 2
    head = (5 + 1) * m.lm_head_params * 2
    pairs = (1000 ** 2 + 10 ** 2) / 2 * 2 * 32 * (128 + 128) * 32
    comp = (linear + head + pairs) / g.peak_flops
    assert lower_bound_s(w, m, g, cfg) == pytest.approx(comp, rel=1e-9)


@settings(max_examples=25, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(model=st.sampled_from(["llama-3.2-1b", "llama-3-8b", "gemma-3-4b", "qwen3-8b",
                              "qwen3-30b-a3b", "mistral-7b"]),
       gpu=st.sampled_from(["A100-80G", "H100", "H200", "L4", "A10"]),
       prompt=st.sampled_from([100, 2000, 8000, 16000]), output=st.integers(1, 4),
       n=st.integers(16, 128), weight_bits=st.sampled_from([16, 8]))
def test_prefill_heavy_jobs_never_beat_the_physical_limit(model, gpu, prompt, output, n,
                                                         weight_bits):
    """tests/test_lower_bound.py draws prompts below 3,000 tokens and outputs up to 900, where
    the decode's memory term dominates; here the compute term does."""
    m, g = get_model(model), GPUS[gpu]
    try:
        cfg = ServingConfig(gpu=gpu, chunk_size=16384, max_running=256, weight_bits=weight_bits)
        res = simulate_default(wl([prompt] * n, [output] * n), m, g, cfg, startup_s=0)
    except InfeasibleConfig:
        return
    assert res.schedule_lower_bound_s <= res.schedule_s * (1 + 1e-9), (
        res.schedule_lower_bound_s, res.schedule_s, res.provenance)


# ---- vLLM V0 multi-step: what the engine computes must fit ------------------------------------
def _kv_gpu(w, m, cfg, tokens, engine_version):
    """A GPU whose memory leaves a KV cache of about `tokens` tokens (at least that many)."""
    import dataclasses

    from tuner.sim.simulator import check_feasible

    g = GPUS[cfg.gpu]

    def cap(mem):
        try:
            return check_feasible(w, m, dataclasses.replace(g, memory_gib=mem), cfg,
                                  engine_version=engine_version).kv_capacity_tokens
        except InfeasibleConfig:
            return -1

    lo, hi = 1.0, g.memory_gib
    for _ in range(50):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if cap(mid) < tokens else (lo, mid)
    return dataclasses.replace(g, memory_gib=hi), cap(hi)


@pytest.mark.parametrize("steps", [8, 16])
def test_multi_step_runs_that_outgrow_the_kv_cache_are_refused_with_the_reason(steps):
    """Found by stress: a KV cache of 112 tokens holds the longest request (100 + 12 tokens),
    but vLLM 0.6's multi-step worker computes it to the end of its last decode run (1 + 2 x 8
    = 17 output tokens): the schedule stuck and the plan was refused with 'scheduler made no
    progress (stuck)'. The plan is refused up front, naming the decode runs."""
    m = get_model("llama-3.2-1b")
    cfg = ServingConfig(gpu="A10", scheduler="vllm-v0", chunk_size=2048, max_running=4,
                        block_size=16)
    w = wl([100, 50], [12, 3])
    g, cap = _kv_gpu(w, m, cfg, 112, "0.6.0")
    assert cap == 112
    # single-step it runs
    simulate_default(w, m, g, cfg, engine_version="0.6.0", num_scheduler_steps=1, startup_s=0)
    with pytest.raises(InfeasibleConfig, match="decode runs") as err:
        simulate_default(w, m, g, cfg, engine_version="0.6.0", num_scheduler_steps=steps,
                         startup_s=0)
    assert "stuck" not in str(err.value)


def test_multi_step_recompute_beyond_the_unchunked_budget_is_refused_with_the_reason():
    """vllm-v0 has no chunked prefill, so a preempted request's recompute (prompt + tokens so
    far) must fit the token budget: chunk_size >= the longest request - 1, checked on the
    workload. Under multi-step the engine computes up to the end of the last decode run, so
    the recompute can exceed it: a tiny KV cache that forces preemption then stuck the
    schedule."""
    m = get_model("llama-3.2-1b")
    w = wl([14] * 4, [3] * 4)  # 17 tokens each; in 10-step runs 1 + 10 = 11 outputs: 25
    cfg = ServingConfig(gpu="A10", scheduler="vllm-v0", chunk_size=16, max_running=4,
                        block_size=16)
    g, cap = _kv_gpu(w, m, cfg, 64, "0.6.0")
    assert cap == 64  # holds the 25 tokens: the KV check passes, the budget's does not
    simulate_default(w, m, g, cfg, engine_version="0.6.0", num_scheduler_steps=1, startup_s=0)
    with pytest.raises(InfeasibleConfig, match="decode runs") as err:
        simulate_default(w, m, g, cfg, engine_version="0.6.0", num_scheduler_steps=10,
                         startup_s=0)
    assert "stuck" not in str(err.value)


@settings(max_examples=30, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(prompt=st.lists(st.integers(1, 200), min_size=1, max_size=12),
       output=st.lists(st.integers(1, 40), min_size=12, max_size=12),
       steps=st.sampled_from([2, 4, 8, 10]), slack=st.integers(0, 64),
       scheduler=st.sampled_from(["vllm-v0", "vllm-v0-noevict"]),
       max_running=st.sampled_from([1, 2, 8]))
def test_multi_step_plans_run_to_the_end_or_are_refused_up_front(prompt, output, steps, slack,
                                                                 scheduler, max_running):
    """Every V0 multi-step plan the checks let through finishes every request (no 'stuck')
    with the output tokens the engine computes; KV never above its capacity."""
    from tuner.sim.scheduler import multi_step_outputs
    from tuner.sim.steps import KV_BLOCKS, RUNNING, SAMPLED

    m = get_model("llama-3.2-1b")
    w = wl(prompt, output[:len(prompt)])
    longest = int((w.prompt_tokens + w.output_tokens).max())
    cfg = ServingConfig(gpu="A10", scheduler=scheduler, chunk_size=max(longest, max_running),
                        max_running=max_running, block_size=16)
    g, _ = _kv_gpu(w, m, cfg, longest + slack, "0.6.0")
    try:
        res = simulate_default(w, m, g, cfg, engine_version="0.6.0", num_scheduler_steps=steps,
                               startup_s=0, return_steps=True)
    except InfeasibleConfig as exc:
        assert "stuck" not in str(exc)
        return
    (s,) = res.steps
    assert s[:, SAMPLED].sum() == multi_step_outputs(w.output_tokens, steps).sum()
    assert s[:, KV_BLOCKS].max() <= res.memory.kv_capacity_blocks
    assert s[:, RUNNING].max() <= max_running


# ---- inputs the readers refuse, given in Python --------------------------------------------
@pytest.mark.parametrize("engine", ["vllm", "sglang"])
@pytest.mark.parametrize("prompt,output", [([10, 5], [0, 3]), ([0, 5], [3, 3])])
def test_a_request_without_prompt_or_output_tokens_is_refused(engine, prompt, output):
    """Found by stress: a Workload built in Python with a 0-token output ran, and the schedule
    sampled 11 tokens for 3 (vLLM) or 4 (SGLang): the loop stops a request when its tokens
    reach its output, which 0 never is. The readers refuse such lines; simulate() now too."""
    from tuner.core.errors import TunerError

    m = get_model("llama-3.2-1b")
    with pytest.raises(TunerError, match="at least 1 of each"):
        simulate_default(wl(prompt, output), m, GPUS["H100"],
                         ServingConfig(gpu="H100", engine=engine), startup_s=0)


# ---- every path at once: per-step invariants of the step records --------------------------
@st.composite
def plans(draw):
    """A small job and a plan over the paths simulate() takes: vLLM V0 (single- and
    multi-step) and V1 presets, SGLang's policies with and without the radix cache, shared
    prefixes, arrivals, a client's cap, DP / PP, KV and weight offload, 8-bit KV, MoE and
    sliding-window models, max_running 1, budgets below the prompts, tiny KV caches."""
    n = draw(st.integers(1, 40))
    prompt = np.array(draw(st.lists(st.integers(1, 600), min_size=n, max_size=n)))
    output = np.array(draw(st.lists(st.integers(1, 60), min_size=n, max_size=n)))
    kw: dict = {}
    if draw(st.booleans()):  # shared prefixes: one length per group, within every prompt
        groups = np.array(draw(st.lists(st.integers(-1, 2), min_size=n, max_size=n)))
        plen = {g: draw(st.integers(1, 300)) for g in range(3)}
        ptok = np.array([plen[g] if g >= 0 else 0 for g in groups])
        prompt = np.maximum(prompt, ptok)
        kw.update(prefix_ids=groups, prefix_tokens=ptok)
    engine = draw(st.sampled_from(["vllm", "vllm", "sglang"]))
    opts: dict = {"startup_s": 0}
    if engine == "vllm":
        version = draw(st.sampled_from([None, "0.5.4", "0.6.0", "0.8.0"]))
        scheduler = draw(st.sampled_from(["vllm", "vllm-basic", "sarathi", "vllm-noevict",
                                          "vllm-v0", "vllm-v0-noevict"]))
        if version == "0.6.0":
            scheduler = draw(st.sampled_from(["vllm-v0", "vllm-v0-noevict"]))
            opts["num_scheduler_steps"] = draw(st.sampled_from([1, 4, 8]))
        opts["engine_version"] = version
        if draw(st.booleans()):
            kw["arrival_s"] = np.sort(np.array(draw(st.lists(
                st.floats(0, 2), min_size=n, max_size=n))))
        if draw(st.booleans()):
            opts["max_concurrency"] = draw(st.integers(1, 8))
    else:
        scheduler = "vllm"
        if draw(st.booleans()):
            from tuner.core.sglang import SGLangSettings

            opts["sglang"] = SGLangSettings(radix_cache=False)
    max_running = draw(st.sampled_from([1, 2, 8, 64]))
    longest = int((prompt + output).max())
    chunk = draw(st.sampled_from([16, 64, 512, 4096]))
    if scheduler.startswith("vllm-v0"):
        chunk = max(chunk, longest + 16 * draw(st.integers(0, 2)))
    if engine == "vllm":
        chunk = max(chunk, max_running)
    cfg = dict(gpu=draw(st.sampled_from(["H100", "A100-80G", "L4"])), engine=engine,
               scheduler=scheduler, chunk_size=chunk, max_running=max_running,
               dp=draw(st.sampled_from([1, 1, 2])), pp=draw(st.sampled_from([1, 1, 2])),
               kv_bits=draw(st.sampled_from([16, 8])),
               schedule_policy=draw(st.sampled_from(["fcfs", "lpm", "dfs-weight"])),
               kv_offload_layers=draw(st.sampled_from([0, 0, 2])),
               weight_offload_fraction=draw(st.sampled_from([0.0, 0.0, 0.2])))
    model = draw(st.sampled_from(["llama-3.2-1b", "qwen3-30b-a3b", "gemma-3-4b",
                                  "llama-3-8b"]))
    slack = draw(st.sampled_from([None, 0, 16, 200]))  # None: the GPU's own KV cache
    return Workload(prompt, output, **kw), model, cfg, opts, slack


@settings(max_examples=150, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(plans())
def test_step_records_keep_every_invariant_on_every_path(plan):
    from tuner.core.errors import TunerError
    from tuner.sim.scheduler import multi_step_outputs
    from tuner.sim.steps import DECODES, KV_BLOCKS, PREFILL_TOKENS, RUNNING, SAMPLED

    w, model, cfg_kw, opts, slack = plan
    m = get_model(model)
    try:
        cfg = ServingConfig(**cfg_kw)
        g = GPUS[cfg.gpu]
        if slack is not None:
            longest = int((w.prompt_tokens + w.output_tokens).max())
            g, _ = _kv_gpu(w, m, cfg, longest + slack, opts.get("engine_version"))
        res = simulate_default(w, m, g, cfg, return_steps=True, **opts)
    except InfeasibleConfig as exc:
        assert "no progress" not in str(exc)  # refused up front, never stuck
        event("infeasible")
        return
    except TunerError:  # a combination the engines refuse (e.g. SGLang with arrivals)
        event("refused")
        return
    event("simulated")
    assert np.isfinite(res.makespan_s) and 0 < res.lower_bound_s <= res.makespan_s
    out = multi_step_outputs(w.output_tokens, res.decode_run_steps)
    steps = np.concatenate(res.steps)
    assert steps[:, SAMPLED].sum() == out.sum()  # every request finishes, no token twice
    assert steps[:, PREFILL_TOKENS].sum() + res.cached_prompt_tokens >= w.prompt_tokens.sum()
    assert ((steps[:, PREFILL_TOKENS] > 0) | (steps[:, DECODES] > 0)).all()  # no empty step
    assert steps[:, RUNNING].max() <= cfg.max_running
    if "max_concurrency" in opts and cfg.dp == 1:
        assert steps[:, RUNNING].max() <= opts["max_concurrency"]
    if cfg.engine == "sglang":
        assert steps[:, KV_BLOCKS].max() <= res.memory.kv_capacity_tokens
        assert steps[:, PREFILL_TOKENS].max() <= cfg.chunk_size
    else:
        assert steps[:, KV_BLOCKS].max() <= res.memory.kv_capacity_blocks
        assert all(s[-1, KV_BLOCKS] == 0 for s in res.steps)  # everything freed at the end
        if not cfg.scheduler.startswith("vllm-v0"):  # the chunked presets keep the budget
            assert (steps[:, PREFILL_TOKENS] + steps[:, DECODES]).max() <= cfg.chunk_size


def test_sglang_refuses_a_pool_that_never_admits_a_fully_cached_prompt():
    """Found by stress (the step-record test, a fresh run's seed): SGLang with a pool of 5
    tokens and two requests whose whole 2-token prompt is a shared prefix got stuck. The second
    request locks the cached prefix and recomputes its last prompt token, so it needs
    2 + 1 + a page + 1 + 1 = 6 tokens of pool: refused up front with the numbers."""
    m = get_model("llama-3.2-1b")
    cfg = ServingConfig(gpu="H100", engine="sglang", chunk_size=16, max_running=1)

    def run(n, pool):
        w = Workload(np.full(n, 2), np.full(n, 1), prefix_ids=np.zeros(n, dtype=np.int64),
                     prefix_tokens=np.full(n, 2))
        g, _ = _kv_gpu(w, m, cfg, pool, None)
        return simulate_default(w, m, g, cfg, return_steps=True, startup_s=0)

    with pytest.raises(InfeasibleConfig, match="admitted only with 6") as exc:
        run(2, 3)
    assert "no progress" not in str(exc.value)
    assert run(1, 3).makespan_s > 0  # one member never finds its prefix cached
    assert run(2, 6).makespan_s > 0  # a pool of 6
