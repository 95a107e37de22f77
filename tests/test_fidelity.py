"""The public fidelity suite (benchmarks/fidelity.py) and the replay of arrival times."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from tests.test_simulator import ConstantCost
from tuner.core.catalog import load_gpus, load_models
from tuner.core.config import ServingConfig
from tuner.core.workload import Workload
from tuner.sim import scheduler as sch
from tuner.sim.simulator import arrival_clock, simulate

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
import fidelity  # noqa: E402

DATA = fidelity.DEFAULT_DATA
needs_data = pytest.mark.skipif(not (DATA / "llmservingsim").is_dir(),
                                reason=f"public runs not at {DATA}")


# 10 ms per step whatever the batch (a complete CostModel)
Const = ConstantCost


def test_arrival_clock_waits_for_the_request_a_step_admits():
    dt = np.array([1.0, 1.0, 1.0])
    end = arrival_clock(dt, np.array([0, 2]), np.array([0.0, 10.0]))
    np.testing.assert_allclose(end, [1.0, 2.0, 11.0])


def test_requests_are_not_admitted_before_they_arrive():
    p = sch.preset("vllm", token_budget=64, max_running=8, block_size=4, capacity_blocks=1000)
    s = sch.run_schedule(np.array([10, 10, 10]), np.array([100, 100, 100]), p,
                         arrival_step=np.array([0, 5, 50]))
    assert list(s.first_step) == [0, 5, 50]
    # an idle engine takes the next request at once; the clock then waits for it
    s = sch.run_schedule(np.array([10, 10]), np.array([2, 2]), p, arrival_step=np.array([0, 99]))
    assert s.first_step[1] < 99


def test_fast_mode_matches_exact_mode_with_arrivals():
    rng = np.random.default_rng(3)
    for _ in range(30):
        n = int(rng.integers(2, 12))
        prompt, output = rng.integers(1, 40, n), rng.integers(1, 30, n)
        arr = np.sort(rng.integers(0, 60, n))
        for name in ("vllm-basic", "vllm"):
            p = sch.preset(name, token_budget=16, max_running=4, block_size=4,
                           capacity_blocks=int(rng.integers(20, 60)))
            a = sch.run_schedule(prompt, output, p, fast=False, arrival_step=arr)
            b = sch.run_schedule(prompt, output, p, fast=True, arrival_step=arr)
            assert a.status == b.status == sch.STATUS_OK
            np.testing.assert_array_equal(a.steps, b.steps)


def test_prefix_cached_recompute_saves_prefill_under_kv_pressure():
    rng = np.random.default_rng(0)
    prompt, output = rng.integers(50, 400, 200), rng.integers(50, 400, 200)
    runs = {}
    for name in ("vllm-basic", "vllm"):
        p = sch.preset(name, token_budget=512, max_running=64, block_size=16,
                       capacity_blocks=400)
        runs[name] = sch.run_schedule(prompt, output, p)
    plain, apc = runs["vllm-basic"], runs["vllm"]
    assert plain.steps[:, sch.PREEMPTED].sum() > 0
    assert apc.steps[:, sch.PREFILL_TOKENS].sum() < plain.steps[:, sch.PREFILL_TOKENS].sum()
    assert apc.steps[:, sch.SAMPLED].sum() == output.sum()


def test_simulate_replays_arrivals():
    m, g = load_models()["llama-3-8b"], load_gpus()["A40"]
    w = Workload(prompt_tokens=np.array([100, 100]), output_tokens=np.array([5, 5]),
                 arrival_s=np.array([0.0, 30.0]))
    # arrivals count from the engine being up (as a real run is timed): no start-up
    res = simulate(w, m, g, ServingConfig(gpu="A40"), Const(), timeline=True, startup_s=0)
    # the second request arrives at 30 s on an idle engine: 5 more 10 ms steps after it
    assert res.makespan_s == pytest.approx(30.05)
    offline = simulate(Workload(prompt_tokens=w.prompt_tokens, output_tokens=w.output_tokens),
                       m, g, ServingConfig(gpu="A40"), Const(), startup_s=0)
    assert offline.makespan_s == pytest.approx(0.05)


@needs_data
def test_fidelity_suite_meets_its_bounds():
    gpus = load_gpus()
    runs = fidelity.load_llmservingsim(DATA)
    rows = fidelity.evaluate(runs, fidelity.PROFILES["vllm-v1-async"], gpus, timeline=False)
    ok = [r for r in rows if r["status"] == "ok"]
    assert len(ok) == len(rows) == 4  # the mixture-of-experts run too
    err = np.abs([r["makespan_error_pct"] for r in ok])
    assert np.median(err) <= 10.0
    assert err.max() <= 25.0
    kv = [r for r in ok if "measured_kv_blocks" in r]
    assert kv and all(abs(r["kv_error_pct"]) <= 5.0 for r in kv)
    # each run says where its numbers come from
    kinds = {r["run"]: r["kind"] for r in ok}
    assert kinds["RTX4090_Llama-3.1-8B"] == "transferred"
    assert kinds["RTXPRO6000_Qwen3-32B"] == "tables"


@needs_data
def test_moe_expert_parallel_run_is_predicted_from_the_measured_moe_tables():
    """Qwen3-30B-A3B-Instruct-2507 on 2x RTX PRO 6000, DP2 with expert parallelism (measured
    last token at 64.0 s): priced by the fused-MoE and NCCL tables, within 10 %; the engine
    profile is the dense runs' fit (this run is not in it)."""
    gpus = load_gpus()
    run = next(r for r in fidelity.load_llmservingsim(DATA) if r.moe)
    assert run.config.dp == 2 and run.config.expert_parallel and run.config.tp == 1
    assert run.measured_makespan_s == pytest.approx(64.0, abs=0.05)
    row = fidelity.evaluate([run], fidelity.PROFILES["vllm-v1-async"], gpus, timeline=True)[0]
    assert row["status"] == "ok" and row["kind"] == "tables"
    assert "fused-MoE table" in row["provenance"] and "moe_ep 2" in row["provenance"]
    assert "NCCL all-gather + reduce-scatter" in row["provenance"]
    assert abs(row["makespan_error_pct"]) <= 10.0
    # running requests per replica (vLLM counts both ranks): within a quarter of the mean
    assert row["running_mean_abs_diff"] <= 0.25 * row["running_measured_mean"]


@needs_data
def test_fidelity_cli_runs(capsys):
    assert fidelity.main(["--data", str(DATA)]) == 0
    out = capsys.readouterr().out
    assert "median |error|" in out and "skipped" not in out
    assert "RTXPRO6000_Qwen3-30B-A3B-Instruct-2507" in out and "per replica" in out


@needs_data
def test_engine_fit_leave_one_out_stays_within_bounds():
    """The one fitted engine parameter, refitted without each run, still predicts that run."""
    gpus = load_gpus()
    runs = [r for r in fidelity.load_llmservingsim(DATA) if not r.moe]
    base = fidelity.PROFILES["vllm-v1-async"]
    errs = []
    for i, r in enumerate(runs):
        e = fidelity.fit_engine(runs[:i] + runs[i + 1:], gpus, base)
        assert 0.0 <= e.exposed_s <= 4e-3
        res, _ = fidelity.simulate_run(r, e, gpus)
        errs.append(abs(res.makespan_s / r.measured_makespan_s - 1.0) * 100)
    assert np.median(errs) <= 10.0 and max(errs) <= 25.0
