"""Memory plan, roofline cost model and simulate(): hand-computed figures and invariants."""

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.sim import simulate_default
from tuner.core.catalog import GIB, get_gpu, get_model, load_gpus
from tuner.core.config import ServingConfig
from tuner.core.errors import TunerError
from tuner.core.memory import activation_bytes, plan_memory, runtime_overhead_bytes
from tuner.core.provenance import Provenance
from tuner.core.workload import Workload
from tuner.predictors.features import BatchFeatures
from tuner.predictors.roofline import RooflineCostModel
from tuner.sim.simulator import InfeasibleConfig, lower_bound_s, simulate

GPUS = load_gpus()


def wl(prompt, output):
    return Workload(np.asarray(prompt, dtype=np.int64), np.asarray(output, dtype=np.int64))


# ---- memory plan -----------------------------------------------------------------------------
def test_memory_plan_by_hand():
    m, g = get_model("llama-3-8b"), get_gpu("A40", GPUS)
    cfg = ServingConfig(gpu="A40", chunk_size=2048, max_running=128)
    plan = plan_memory(m, g, cfg)
    usable = 44.35 * GIB * 0.9  # the A40's total as CUDA reports it
    kv = usable - m.weight_bytes(16) - activation_bytes(m, cfg) - runtime_overhead_bytes(cfg)
    per_token = 2 * 32 * 8 * 128 * 2  # K+V x layers x kv heads x head dim x 2 bytes
    assert plan.kv_bytes_per_token == per_token == m.kv_bytes_per_token(16)
    assert plan.kv_capacity_blocks == int(kv // (per_token * 16))
    assert plan.kv_capacity_tokens == plan.kv_capacity_blocks * 16
    assert plan.fits


def test_memory_knobs_move_capacity_the_right_way():
    m, g = get_model("llama-3-8b"), get_gpu("A10", GPUS)
    base = ServingConfig(gpu="A10", chunk_size=2048)
    cap = lambda **kw: plan_memory(m, g, replace(base, **kw)).kv_capacity_tokens  # noqa: E731
    assert cap(kv_bits=8) >= 2 * cap() - 16
    assert cap(weight_bits=8) > cap()
    assert cap(chunk_size=16384) < cap()
    assert cap(kv_offload_layers=16) > cap()  # fewer layers' KV on the GPU


def test_model_that_does_not_fit_reports_numbers():
    plan = plan_memory(get_model("llama-2-70b"), get_gpu("A10", GPUS), ServingConfig(gpu="A10"))
    assert not plan.fits and "GiB" in plan.reason and "A10" in plan.reason
    # tensor parallel splits the weights across ranks
    tp8 = plan_memory(get_model("llama-2-70b"), get_gpu("A100-80G", GPUS),
                      ServingConfig(gpu="A100-80G", tp=8))
    tp1 = plan_memory(get_model("llama-2-70b"), get_gpu("A100-80G", GPUS),
                      ServingConfig(gpu="A100-80G", tp=1))
    assert tp8.weight_bytes == pytest.approx(tp1.weight_bytes / 8)
    assert tp8.fits and not tp1.fits


# ---- roofline --------------------------------------------------------------------------------
def llama2_7b_h100():
    return RooflineCostModel.from_specs(get_gpu("H100", GPUS), get_model("llama-2-7b"))


@pytest.mark.parametrize(("tokens", "ms"), [(4096, 2.2), (1, 0.16)])
def test_roofline_matches_public_h100_reference(tokens, ms):
    per_layer = llama2_7b_h100().breakdown(BatchFeatures.single(prefill_tokens=tokens))["linear"][0] / 32
    assert per_layer * 1e3 == pytest.approx(ms, rel=0.05)


def test_roofline_monotone_and_vectorised():
    cm = llama2_7b_h100()
    n = np.array([1, 16, 256, 4096, 8192], dtype=float)
    z = np.zeros_like(n)
    f = BatchFeatures(prefill_tokens=n, prefill_sq=n * n, prefill_ctx=z, decodes=z, decode_kv=z,
                      seqs_sampled=np.ones_like(n))
    t = cm.iteration_time_s(f)
    assert t.shape == (5,) and np.all(np.diff(t) > 0)
    one = cm.iteration_time_s(BatchFeatures.single(prefill_tokens=256))[0]
    assert t[2] == pytest.approx(one)
    # decode attention grows with KV read; TP shrinks per-rank linear time
    d = [cm.iteration_time_s(BatchFeatures.single(decodes=64, kv_tokens=k))[0] for k in (1e4, 1e5)]
    assert d[1] > d[0]
    tp2 = replace(cm, tp=2)
    big = BatchFeatures.single(prefill_tokens=4096)
    assert tp2.breakdown(big)["linear"][0] == pytest.approx(cm.breakdown(big)["linear"][0] / 2)
    assert tp2.breakdown(big)["allreduce"][0] > 0


# ---- simulate --------------------------------------------------------------------------------
class ConstantCost:
    """10 ms per iteration (a complete CostModel: 32 equal layers, no other work)."""

    provenance = Provenance("roofline", "constant 10 ms")
    transfer_model = None

    def iteration_time_s(self, f):
        return np.full(len(f), 0.01)

    def breakdown(self, f):
        return {"linear": self.iteration_time_s(f)}

    def breakdown_ops(self, f):
        return {"linear": self.layer_time_s(f)}

    def layer_time_s(self, f):
        return self.iteration_time_s(f) / 32

    def decode_attention_layer_s(self, f):
        return np.zeros(len(f))

    def describe(self):
        return "constant 10 ms"


def test_makespan_is_sum_of_priced_iterations():
    w = wl([100, 50, 300], [10, 5, 20])
    res = simulate(w, get_model("llama-3-8b"), get_gpu("A40", GPUS),
                   ServingConfig(gpu="A40", chunk_size=128, max_running=128), ConstantCost(),
                   timeline=True,
                   startup_s=0)  # the schedule alone (tests/test_startup.py: with start-up)
    assert res.makespan_s == pytest.approx(0.01 * res.iterations)
    assert res.timeline["time_s"][-1] == pytest.approx(res.makespan_s)
    assert res.cost_usd == pytest.approx(res.makespan_s / 3600 * get_gpu("A40", GPUS).price_usd_per_h)
    assert res.output_tokens == 35 and res.requests == 3
    assert str(res.provenance) == "constant 10 ms"


def test_data_parallel_splits_the_work():
    rng = np.random.default_rng(0)
    w = wl(rng.integers(100, 2000, 300), rng.integers(10, 300, 300))
    m, g = get_model("llama-3-8b"), get_gpu("A40", GPUS)
    one = simulate_default(w, m, g, ServingConfig(gpu="A40", chunk_size=1024))
    two = simulate_default(w, m, g, ServingConfig(gpu="A40", chunk_size=1024, dp=2))
    assert two.makespan_s < 0.75 * one.makespan_s
    assert two.cost_usd == pytest.approx(two.makespan_s / 3600 * g.price_usd_per_h * 2)


def test_infeasible_configs_raise_with_reason():
    w = wl([3000], [500])
    with pytest.raises(InfeasibleConfig, match="does not fit"):
        simulate_default(w, get_model("llama-2-70b"), get_gpu("A10", GPUS), ServingConfig(gpu="A10"))
    with pytest.raises(InfeasibleConfig, match="chunked prefill"):
        simulate_default(w, get_model("llama-3-8b"), get_gpu("A40", GPUS),
                         ServingConfig(gpu="A40", scheduler="vllm-v0", chunk_size=2048))
    with pytest.raises(TunerError):
        simulate_default(wl([], []), get_model("llama-3-8b"), get_gpu("A40", GPUS), ServingConfig(gpu="A40"))


def test_orderings_change_only_the_order():
    rng = np.random.default_rng(2)
    w = wl(rng.integers(10, 3000, 200), rng.integers(1, 500, 200))
    m, g = get_model("llama-3-8b"), get_gpu("A10", GPUS)
    res = {o: simulate_default(w, m, g, ServingConfig(gpu="A10", ordering=o, chunk_size=512))
           for o in ("fcfs", "shortest-prompt", "longest-output")}
    assert len({r.output_tokens for r in res.values()}) == 1
    assert len({round(r.makespan_s, 6) for r in res.values()}) > 1


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(1, 40),
    seed=st.integers(0, 10_000),
    gpu=st.sampled_from(["A10", "A40", "H100", "L4"]),
    chunk=st.sampled_from([256, 512, 2048, 8192]),
    r_max=st.sampled_from([4, 32, 256]),
    bits=st.sampled_from([(16, 16), (8, 8), (4, 16)]),
)
def test_makespan_never_beats_the_physical_limit(n, seed, gpu, chunk, r_max, bits):
    rng = np.random.default_rng(seed)
    w = wl(rng.integers(1, 3000, n), rng.integers(1, 1000, n))
    m, g = get_model("llama-3-8b"), get_gpu(gpu, GPUS)
    cfg = ServingConfig(gpu=gpu, chunk_size=chunk, max_running=r_max, weight_bits=bits[0],
                        kv_bits=bits[1])
    res = simulate_default(w, m, g, cfg, startup_s=0)  # the schedule against its own limit
    assert res.lower_bound_s == pytest.approx(lower_bound_s(w, m, g, cfg))
    assert 0 < res.lower_bound_s <= res.makespan_s
    assert 0 < res.peak_kv_fraction <= 1.0


def test_stored_calibration_applies_to_later_predictions(tmp_path, monkeypatch):
    from tuner.predictors.calibration import Calibration

    monkeypatch.setenv("TUNER_CALIBRATION_DIR", str(tmp_path))
    w = wl([500, 300], [20, 30])
    m, g = get_model("llama-3-8b"), get_gpu("A40", GPUS)
    before = simulate_default(w, m, g, ServingConfig(gpu="A40"))
    Calibration(device="A40", model="llama-3-8b", kernel_factor=1.0, iteration_overhead_s=0.01,
                per_sequence_s=0.0, runs=3, method="test").save(tmp_path)
    after = simulate_default(w, m, g, ServingConfig(gpu="A40"))
    assert after.makespan_s == pytest.approx(before.makespan_s + 0.01 * after.iterations, rel=1e-6)
    assert "calibrated" in str(after.provenance)
    monkeypatch.setenv("TUNER_NO_CALIBRATION", "1")
    assert simulate_default(w, m, g, ServingConfig(gpu="A40")).makespan_s == pytest.approx(before.makespan_s)


def test_return_steps_gives_each_replicas_schedule():
    from tuner.sim import scheduler as sch
    from tuner.sim.simulator import (
        check_feasible,
        order_requests,
        scheduler_params,
        split_replicas,
    )
    from tuner.sim.steps import N_COLS, SAMPLED

    w = wl([500, 300, 900, 120, 40], [20, 30, 5, 60, 9])
    m, g = get_model("llama-3-8b"), get_gpu("A40", GPUS)
    cfg = ServingConfig(gpu="A40", dp=2, chunk_size=512)
    assert simulate_default(w, m, g, cfg).steps is None
    res = simulate_default(w, m, g, cfg, return_steps=True)
    assert len(res.steps) == 2 and all(s.shape[1] == N_COLS for s in res.steps)
    assert sum(len(s) for s in res.steps) == res.iterations
    assert sum(int(s[:, SAMPLED].sum()) for s in res.steps) == res.output_tokens
    # the same records as the scheduler itself gives for replica 0's requests
    plan = check_feasible(w, m, g, cfg)
    idx = split_replicas(w, order_requests(w, cfg.ordering, config=cfg), 2)[0]
    own = sch.run_schedule(w.prompt_tokens[idx], w.output_tokens[idx],
                           scheduler_params(cfg, plan.kv_capacity_blocks), fast=False)
    np.testing.assert_array_equal(res.steps[0], own.steps)


def test_tensor_parallel_must_split_the_heads_as_vllm_requires():
    w = wl([100, 50], [10, 5])
    qwen = get_model("qwen2.5-7b")  # 28 heads, 4 KV heads
    with pytest.raises(InfeasibleConfig, match="28 attention heads / 4 KV heads"):
        simulate_default(w, qwen, get_gpu("A40", GPUS), ServingConfig(gpu="A40", tp=8))
    assert simulate_default(w, qwen, get_gpu("A40", GPUS), ServingConfig(gpu="A40", tp=4)).makespan_s > 0
    # 8 KV heads over 4 ranks divide; fewer KV heads than ranks are replicated
    llama = get_model("llama-3-8b")
    assert simulate_default(w, llama, get_gpu("A40", GPUS), ServingConfig(gpu="A40", tp=8)).makespan_s > 0


@settings(max_examples=25, deadline=None)
@given(
    n=st.integers(1, 120),
    seed=st.integers(0, 10_000),
    rows=st.sampled_from([1, 3, 64]),
    chunk=st.sampled_from([64, 512, 4096]),
    r_max=st.sampled_from([2, 16, 256]),
    dp=st.sampled_from([1, 3]),
    offload=st.sampled_from([0, 4]),
)
def test_streamed_steps_price_like_kept_ones(n, seed, rows, chunk, r_max, dp, offload):
    """Steps priced as the scheduler hands them on in slices of `rows` (then dropped) give the
    figures of the whole record priced at once: makespan, iterations, preemptions, KV use and
    the offload breakdown. A small A10 KV makes long runs preempt."""
    from tuner.sim import scheduler

    rng = np.random.default_rng(seed)
    w = wl(rng.integers(1, 3000, n), rng.integers(1, 600, n))
    m, g = get_model("llama-3-8b"), get_gpu("A10", GPUS)
    # vLLM refuses a token budget below its running requests (SchedulerConfig._verify_args)
    cfg = ServingConfig(gpu="A10", chunk_size=chunk, max_running=min(r_max, chunk), dp=dp,
                        gpu_memory_utilization=0.8, kv_offload_layers=offload)
    kept = simulate_default(w, m, g, cfg, startup_s=0, return_steps=True)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(scheduler, "STREAM_ROWS", rows)
        streamed = simulate_default(w, m, g, cfg, startup_s=0)
    assert streamed.steps is None
    assert streamed.iterations == kept.iterations == sum(len(s) for s in kept.steps)
    assert streamed.preemptions == kept.preemptions
    assert streamed.makespan_s == pytest.approx(kept.makespan_s, rel=1e-12)
    assert streamed.peak_kv_fraction == kept.peak_kv_fraction
    assert streamed.mean_kv_fraction == pytest.approx(kept.mean_kv_fraction, rel=1e-12)
    if offload:
        a, b = streamed.offload, kept.offload
        assert a.keys() == b.keys()
        for k, v in a.items():
            if isinstance(v, float):
                assert v == pytest.approx(b[k], rel=1e-9, abs=1e-15), k
            else:
                assert v == b[k], k


def test_streamed_timeline_is_the_kept_one():
    """The report's timeline without step records (streamed, compact columns) equals the one
    built from the kept record, step for step, across several streamed slices."""
    from tuner.sim import scheduler

    rng = np.random.default_rng(5)
    w = wl(rng.integers(1, 3000, 200), rng.integers(1, 600, 200))
    m, g = get_model("llama-3-8b"), get_gpu("A10", GPUS)
    cfg = ServingConfig(gpu="A10", chunk_size=256, max_running=32, gpu_memory_utilization=0.8)
    kept = simulate_default(w, m, g, cfg, timeline=True, return_steps=True)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(scheduler, "STREAM_ROWS", 7)
        streamed = simulate_default(w, m, g, cfg, timeline=True)
    assert streamed.steps is None and kept.preemptions > 0
    assert list(kept.timeline) == list(streamed.timeline)  # the CSV's column order
    for k, v in kept.timeline.items():
        np.testing.assert_allclose(streamed.timeline[k], v, rtol=1e-12, err_msg=k)


# ---- vLLM's start-up profile by release (tuner.core.memory.ProfileRun) -----------------------
def test_profile_run_follows_the_release_and_the_model_runner():
    from tuner.core.memory import PROFILE_RUNS, profile_run_for

    assert profile_run_for("0.6.0").sampler_bytes_per_logit == 40.0  # V0's sort path
    assert profile_run_for("0.11.0").sampler_bytes_per_logit == 38.5  # V1, sort path
    tri = profile_run_for("0.17.0")
    assert tri.sampler_buffer_rows and not tri.cuda_graphs_in_budget  # Triton top-k / top-p
    assert profile_run_for("0.19.0").cuda_graphs_in_budget  # graph probes inside the profile
    mrv2 = profile_run_for("0.23.0", architectures=("LlamaForCausalLM",))  # on 0.23's list
    assert mrv2.sampler_bytes_per_logit == 2.0 and not mrv2.cuda_graphs_in_budget
    assert profile_run_for("0.23.0", moe=True) == profile_run_for("0.19.0")  # old runner
    assert profile_run_for(None) == profile_run_for("0.33.0") == PROFILE_RUNS[-1]
    assert profile_run_for(None, moe=True) == PROFILE_RUNS[-1]


def test_the_sampler_reserve_grows_with_max_num_seqs_where_vllm_samples_top_k():
    """vLLM 0.6-0.22 reserve the sampler's top-k / top-p over max_num_seqs dummy requests at
    start-up, so a smaller max_num_seqs leaves more KV; the newest release samples greedily
    there and the forward pass sets the reserve."""
    m, g = get_model("llama-3.1-8b"), get_gpu("RTX4090", GPUS)
    cap = lambda r, v: plan_memory(m, g, ServingConfig(  # noqa: E731
        gpu="RTX4090", chunk_size=2048, max_running=r), engine_version=v).kv_capacity_tokens
    for version in ("0.6.0", "0.11.0", "0.19.0"):
        assert cap(128, version) > cap(256, version), version
    cfg = lambda r: ServingConfig(gpu="RTX4090", chunk_size=2048, max_running=r)  # noqa: E731
    # 0.29-0.32 (model runner V2) sample greedily; 0.33 adds a full-sampler warm-up pass
    assert activation_bytes(m, cfg(128), "0.29.0") == activation_bytes(m, cfg(256), "0.29.0")
    # the forward pass and the sampler do not add: the reserve is the larger of the two
    assert activation_bytes(m, cfg(256), "0.6.0") == pytest.approx(
        40.0 * 256 * m.vocab_size + 2 * 2048 * m.hidden_size)


def test_no_cuda_graphs_are_reserved_on_a_cpu_device():
    cfg = ServingConfig(gpu="A10")
    assert runtime_overhead_bytes(cfg, None, cuda_graphs=False) < runtime_overhead_bytes(cfg, None)
    assert runtime_overhead_bytes(replace(cfg, tp=2)) > runtime_overhead_bytes(cfg)


def test_kv_budget_against_vllm_start_up_logs():
    """benchmarks/kv_logs.py: tuner's KV budget against the figure vLLM printed at start-up in
    public logs (and the RTX 4090 run's reported blocks where ../shared is present)."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import kv_logs

    rows = kv_logs.rows_with_predictions()
    err = np.abs([r["error"] for r in rows])
    assert np.median(err) <= 0.05
    assert all(abs(r["error"]) <= 0.20 for r in rows)
    for r in rows:
        if r["name"].startswith("Llama-3.1-8B, RTX 4090"):  # its own resolved config
            assert abs(r["error"]) <= 0.01


def test_cuda_graph_reserve_follows_the_sizes_vllm_captures():
    """vLLM captures graphs for [1, 2, 4] + 8..248 by 8 + 256..min(2 R, 512, budget) by 16 and
    extrapolates its memory estimate per graph: a smaller max_num_seqs reserves less."""
    from tuner.core.memory import cuda_graph_capture_sizes

    assert cuda_graph_capture_sizes(256, 2048) == 51  # the RTX 4090 run's 51 sizes
    assert cuda_graph_capture_sizes(128, 2048) == 35
    assert cuda_graph_capture_sizes(1024, 256) == 35  # capped by the token budget
    small, big = (runtime_overhead_bytes(ServingConfig(gpu="A10", max_running=r), "0.19.0")
                  for r in (128, 256))
    assert small < big
    assert runtime_overhead_bytes(ServingConfig(gpu="A10", max_running=128), "0.6.0") == \
        runtime_overhead_bytes(ServingConfig(gpu="A10", max_running=256), "0.6.0")  # not counted


# ---- streamed-chunk gaps (median ITL) from step records -------------------------------------
def test_itl_chunks_by_hand():
    """A decoding request waits its step and the decode-free (prefill-first) steps before it;
    N tokens a chunk sums N decoding steps; the median is weighted by the decodes."""
    from tuner.sim.steps import DECODES, N_COLS, itl_chunks, median_itl_s

    st = np.zeros((6, N_COLS))
    st[:, DECODES] = [0, 3, 3, 0, 3, 1]
    t = np.array([5.0, 1.0, 1.0, 2.0, 1.0, 1.0])
    gaps, w = itl_chunks(st, t, 1)
    assert gaps.tolist() == [6.0, 1.0, 3.0, 1.0] and w.tolist() == [3.0, 3.0, 3.0, 1.0]
    gaps, w = itl_chunks(st, t, 2)
    assert gaps.tolist() == [7.0, 4.0, 4.0] and w.tolist() == [3.0, 3.0, 3.0]
    assert median_itl_s([st], [t], 1) == 3.0  # weights 3,3,3,1 over gaps 1,1,3,6
    assert median_itl_s([st[:1]], [t[:1]], 1) is None  # nothing decodes


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.floats(0.0, 1.0), st.floats(0.0, 1.0)),
                min_size=1, max_size=40), st.integers(1, 12))
def test_itl_chunks_are_linear_in_step_time_and_conserve_it(rows, k):
    """The gaps of a sum of step-time terms are the sum of their gaps (what the host-term fit
    relies on), and with one token a chunk they add up to the time up to the last decoding
    step."""
    from tuner.sim.steps import DECODES, N_COLS, itl_chunks

    st_ = np.zeros((len(rows), N_COLS))
    st_[:, DECODES] = [r[0] for r in rows]
    a, b = np.array([r[1] for r in rows]), np.array([r[2] for r in rows])
    ga, wa = itl_chunks(st_, a, k)
    gb, _ = itl_chunks(st_, b, k)
    gab, wab = itl_chunks(st_, a + b, k)
    assert np.allclose(gab, ga + gb) and np.array_equal(wa, wab)
    g1, _ = itl_chunks(st_, a, 1)
    dec = np.flatnonzero(st_[:, DECODES] > 0)
    assert g1.sum() == pytest.approx(a[:dec[-1] + 1].sum() if dec.size else 0.0)


def test_return_steps_keeps_the_times_the_simulation_priced():
    """SimResult.step_s: each kept step's time as priced (what the ITL checks read instead of
    pricing the steps again): one per step, summing to each replica's schedule."""
    rng = np.random.default_rng(3)
    w = Workload(prompt_tokens=rng.integers(50, 900, 300), output_tokens=rng.integers(5, 300, 300))
    m, g = get_model("llama-3-8b"), get_gpu("A100-80G", GPUS)
    for dp in (1, 2):
        res = simulate_default(w, m, g, ServingConfig(gpu="A100-80G", dp=dp, max_running=64),
                               return_steps=True, startup_s=0.0)
        assert [len(t) for t in res.step_s] == [len(s) for s in res.steps]
        assert max(float(t.sum()) for t in res.step_s) == pytest.approx(res.makespan_s)
    assert simulate_default(w, m, g, ServingConfig(gpu="A100-80G")).step_s is None
