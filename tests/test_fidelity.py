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
    rows = fidelity.evaluate(runs, {"llmservingsim": fidelity.PROFILES["vllm-v1-async"]}, gpus,
                             timeline=False)
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
    row = fidelity.evaluate([run], {"llmservingsim": fidelity.PROFILES["vllm-v1-async"]}, gpus,
                            timeline=True)[0]
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


# ---- V0 (vLLM 0.6.0) on A100: ../shared/fidelity/lambda-a100 ----------------------------------
needs_a100 = pytest.mark.skipif(not (DATA / "lambda-a100" / "index.csv").is_file(),
                                reason=f"A100 runs not at {DATA}")


@needs_a100
def test_a100_runs_load_as_v0_multistep_api_server_jobs():
    runs = fidelity.load_lambda_a100(DATA)
    assert len(runs) == 11
    assert {r.config.scheduler for r in runs} == {"vllm-v0"}
    assert {(r.config.chunk_size, r.config.max_running) for r in runs} == {(2048, 1024)}
    nemo = next(r for r in runs if "nemo" in r.name)
    assert nemo.model.num_layers == 40 and nemo.model.hidden_size == 5120  # its config.json
    assert all(len(r.workload) in (160, 320, 640, 1279, 1280) for r in runs)


@needs_a100
def test_v0_host_terms_fit_meets_the_bar_and_is_what_ships():
    """The fit over every set of host terms (leave-one-out): the kept set has no negative
    term, meets the issue's bar (A100 development runs median <= 7 %), and its terms are the
    shipped profile's (a refit that moves them must update predictors/engine_overhead.py)."""
    runs = fidelity.v0_fit_runs(DATA, load_gpus())
    assert [r.log_requests for r in runs] == [True] * 11 + [False] * 2  # A100 runs, figures
    fit = fidelity.fit_v0(runs)
    best = fit["best"]
    assert all(v >= 0 for v in best["coef"].values())
    a100 = [abs(best["loo"][r.name]) for r in runs if r.suite == "lambda-a100"]
    assert np.median(a100) <= 7.0 and max(a100) <= 10.0
    # the decode step too: each run's median gap between streamed chunks (in the fit, so the
    # per-step cost is not hidden in a per-request term), leave-one-out
    itl = [abs(v) for v in best["loo_itl"].values()]
    assert len(itl) == 11 and np.median(itl) <= 7.0 and max(itl) <= 20.0
    # a set fitted on makespans alone could pass the makespan bar and still miss the decode
    # step: the kept set is scored on both (its score is the sum)
    assert best["score"] == pytest.approx(best["loo_median_abs_pct"]
                                          + best["loo_itl_median_abs_pct"])
    # the kept set is the rule's: the lowest score, and of the sets within PARSIMONY_PP of it
    # the fewest terms (a set with the request-log or the GPU-excess term competes like any)
    ok = [t for t in fit["table"] if t["status"] == "ok"]
    top = min(t["score"] for t in ok)
    assert best["score"] <= top + fidelity.PARSIMONY_PP
    assert len(best["terms"]) == min(len(t["terms"]) for t in ok
                                     if t["score"] <= top + fidelity.PARSIMONY_PP)
    assert all(abs(best["loo"][r.name]) <= 10.0 for r in runs if r.suite == "published")
    shipped = fidelity.PROFILES["vllm-v0-multistep"]
    assert shipped.fitted
    for term, value in best["coef"].items():
        assert getattr(shipped, term) == pytest.approx(value, rel=0.01), term
    # the GPU-only simulation is too short on every run (the pattern the terms explain)
    rows = fidelity.evaluate(fidelity.load_lambda_a100(DATA), {"lambda-a100": None},
                             load_gpus(), timeline=False)
    assert all(r["makespan_error_pct"] < -5.0 for r in rows)
    assert all(r["itl_error_pct"] < -5.0 for r in rows)


@needs_a100
def test_a100_runs_report_their_median_itl_and_the_shipped_profile_predicts_it():
    """index.csv's median_itl_ms (benchmark_serving: gaps between a request's streamed
    chunks, 10 tokens a chunk under --num-scheduler-steps 10) is read and predicted."""
    runs = fidelity.load_lambda_a100(DATA)
    assert all(r.scheduler_steps == 10 and r.measured_median_itl_s > 0.1 for r in runs)
    rows = fidelity.evaluate(runs, {"lambda-a100": fidelity.PROFILES["vllm-v0-multistep"]},
                             load_gpus(), timeline=False)
    err = [abs(r["itl_error_pct"]) for r in rows]
    assert np.median(err) <= 7.0 and max(err) <= 15.0


@needs_a100
def test_a100_runs_through_the_cli_as_a_user_checks_one():
    """`tuner simulate` of one run with the flags its README states: vLLM 0.6.0, API server,
    multi-step 10, the run's batch limits: the suite's prediction of it (the CLI and the suite
    price a run alike), within 10 % of the measured 60.7 s."""
    from typer.testing import CliRunner

    from tuner.cli.main import app

    f = DATA / "lambda-a100" / "A100-80G_llama-3-8b_tp1_len2000_n1280.csv"
    args = ["simulate", "-w", str(f), "-m", "llama-3-8b", "-g", "A100-80G", "--engine-version",
            "0.6.0", "--entry-point", "serve", "--num-scheduler-steps", "10",
            "--max-num-batched-tokens", "2048", "--max-num-seqs", "1024",
            "--gpu-memory-utilization", "0.95", "--max-model-len", "2000", "--startup-s", "0",
            "--json"]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    import json

    d = json.loads(r.stdout)
    assert d["config"]["scheduler"] == "vllm-v0"  # V0's batching without --scheduler
    assert d["engine"]["generation"] == "v0"
    assert "vllm-v0-multistep (fitted on public runs)" in d["engine"]["overhead"]
    assert d["makespan_s"] == pytest.approx(60.68, rel=0.10)
    run = next(r for r in fidelity.load_lambda_a100(DATA) if r.name == f.stem)
    res, _ = fidelity.simulate_run(run, fidelity.as_run_logs(run.engine, run), load_gpus())
    assert d["makespan_s"] == pytest.approx(res.makespan_s, rel=1e-9)
    # the same run had its server started --disable-log-requests: one log less per request
    r2 = CliRunner().invoke(app, [*args, "--disable-log-requests"])
    assert r2.exit_code == 0, r2.output
    d2 = json.loads(r2.stdout)
    assert d2["engine"]["disable_log_requests"] and not d["engine"]["disable_log_requests"]
    per_log = fidelity.PROFILES["vllm-v0-multistep"].per_logged_request_s
    assert d["makespan_s"] - d2["makespan_s"] == pytest.approx(
        (d["requests"] + d["preemptions"]) * per_log, rel=1e-6, abs=1e-9)
    if not per_log:  # the fit priced no log: the output says so rather than staying silent
        r4 = CliRunner().invoke(app, [a for a in args if a != "--json"])
        assert r4.exit_code == 0, r4.output
        assert "prices no cost per logged request" in " ".join(r4.stdout.split())
    # the run's --max-model-len 2000 gives V0's default budget max(2000, 2048) = the 2,048 above
    i = args.index("--max-num-batched-tokens")
    r3 = CliRunner().invoke(app, [*args[:i], *args[i + 2:], "--max-model-len", "2000"])
    assert r3.exit_code == 0, r3.output
    d3 = json.loads(r3.stdout)
    assert d3["config"]["chunk_size"] == 2048 and d3["engine"]["max_model_len"] == 2000
    assert d3["makespan_s"] == pytest.approx(d["makespan_s"], rel=1e-9)


def test_rescale_to_total_hits_the_total_and_keeps_every_output():
    x = np.array([1, 1, 3, 10, 200, 7])
    for total in (6, 50, 223, 1000):
        y = fidelity.rescale_to_total(x, total)
        assert y.sum() == total and y.min() >= 1


@needs_a100
def test_published_figures_are_rebuilt_from_their_stated_lengths_and_predicted():
    """SGLang's benchmark of vLLM 0.6.0 (5,000 ShareGPT prompts, offline): the rebuilt
    workload has the stated size and the published mean output (output tok/s / req/s), is the
    same on every call, and each figure gets a finite prediction under the commands' settings
    (not fitted on: no bound on the error here)."""
    prompt, output, files = fidelity.sharegpt_pool(DATA)
    assert files == ["A100-80G_llama-3-8b_tp1_len2000_n1280.csv"] and len(prompt) == 1280
    assert [(f["req_s"], f["output_tok_s"]) for f in fidelity.PUBLISHED_RUNS] == [
        (21.27, 4132.37), (19.04, 3700.64)]  # the README's offline table
    for fig in fidelity.PUBLISHED_RUNS:
        wl = fidelity.published_workload(DATA, fig)
        assert len(wl) == fig["num_prompts"] == 5000 and wl.arrival_s is None
        assert wl.output_tokens.mean() == pytest.approx(fig["output_tok_s"] / fig["req_s"],
                                                        abs=0.5 / len(wl))
        assert wl.output_tokens.min() >= 1 and np.isin(wl.prompt_tokens, prompt).all()
        again = fidelity.published_workload(DATA, fig)
        np.testing.assert_array_equal(wl.prompt_tokens, again.prompt_tokens)
        np.testing.assert_array_equal(wl.output_tokens, again.output_tokens)
        assert "rescaled" in wl.source and "assumption" in wl.source
    rows = fidelity.evaluate_published(DATA, load_gpus())
    assert [r["status"] for r in rows] == ["ok", "ok"]
    for r in rows:
        assert r["engine"] == "vllm-v0-multistep" and r["preemptions"] == 0
        assert "max_num_seqs 256" in r["config"] and "max_num_batched_tokens 4096" in r["config"]
        assert "gpu_memory_utilization 0.9," in r["config"]
        for k in ("predicted_req_s", "predicted_output_tok_s", "req_s_error_pct",
                  "output_tok_s_error_pct"):
            assert np.isfinite(r[k])
        assert r["predicted_req_s"] > 0
        # the same total output as published: both errors are the makespan's
        assert r["output_tok_s_error_pct"] == pytest.approx(r["req_s_error_pct"], abs=0.01)


def test_a_folder_in_the_run_index_form_is_read_like_the_a100_runs(tmp_path):
    """Another source's runs laid out as lambda-a100 (an index.csv and one lengths CSV per run)
    are read and simulated with the engine profile of their version and scheduler steps; an
    FP8 checkpoint is priced with 8-bit weights; GPU names like "H100-80G" map to the catalog."""
    d = tmp_path / "other-h100"
    d.mkdir()
    (d / "r1.csv").write_text("num_prefill_tokens,num_decode_tokens\n100,50\n200,80\n")
    (d / "r2.csv").write_text("num_prefill_tokens,num_decode_tokens\n300,20\n")
    head = ("file,gpu,model,hf_model,tp,num_prompts,measured_duration_s,vllm_version,scheduler,"
            "max_num_seqs,max_num_batched_tokens,gpu_memory_utilization,notes\n")
    (d / "index.csv").write_text(
        head + 'r1.csv,H100-80G,x,meta-llama/Meta-Llama-3-8B-Instruct-FP8,1,2,3.0,0.6.0 '
        '(inferred),vllm-v0,1024,2048,0.95,"V0 multi-step (num_scheduler_steps=10, ...)"\n'
        'r2.csv,H100,llama-3-70b,meta-llama/Meta-Llama-3-70B-Instruct,4,1,2.0,0.6.0,vllm-v0,'
        '256,2048,0.9,single step (num_scheduler_steps=1)\n')
    runs = fidelity.load_all(tmp_path)
    assert [r.suite for r in runs] == ["other-h100", "other-h100"]
    a, b = runs
    assert a.gpu == b.gpu == "H100"
    assert a.model.name == "llama-3-8b" and a.config.weight_bits == 8
    assert a.engine.name == "vllm-v0-multistep" and b.engine.name == "vllm-v0"
    assert b.config.tp == 4 and len(b.workload) == 1
    rows = fidelity.evaluate(runs, {}, load_gpus(), timeline=False)
    assert [r["status"] for r in rows] == ["ok", "ok"]
    assert rows[0]["engine"] == "vllm-v0-multistep"


def test_a_bench_serve_result_becomes_a_run_the_suite_reads(tmp_path):
    """benchmarks/bench_to_index.py (what on_gpu.sh keeps of an API-server run) writes the
    run-index form; the suite reads and re-simulates it with the release's engine profile."""
    import json

    import bench_to_index

    res = tmp_path / "serve_40.json"
    res.write_text(json.dumps({"duration": 9.5, "request_rate": "inf", "num_prompts": 41,
                               "input_lens": [512] * 40 + [512],
                               "output_lens": [256] * 40 + [0],  # one failed request
                               "median_itl_ms": 21.5}))
    csv_path = bench_to_index.convert(res, tmp_path / "runs" / "H100-serve", gpu="H100",
                                      model="llama-3-8b", vllm_version="0.14.0")
    assert csv_path.read_text().count("\n") == 41  # header + 40 requests
    runs = fidelity.load_all(tmp_path / "runs")
    assert len(runs) == 1 and len(runs[0].workload) == 40
    assert runs[0].engine.name == "vllm-v1-async" and runs[0].config.scheduler == "vllm"
    row = fidelity.evaluate(runs, {}, load_gpus(), timeline=False)[0]
    assert row["status"] == "ok" and row["measured_makespan_s"] == 9.5
    # its median ITL is carried and predicted (one token a chunk: a V1 server)
    assert runs[0].measured_median_itl_s == pytest.approx(0.0215) and runs[0].scheduler_steps == 1
    assert row["predicted_median_itl_s"] > 0 and "itl_error_pct" in row
    # an index written before that column existed keeps its header: rows stay aligned
    old = tmp_path / "runs" / "old"
    old.mkdir()
    cols = [c for c in bench_to_index.COLUMNS if c != "measured_median_itl_ms"]
    (old / "index.csv").write_text(",".join(cols) + "\n")
    bench_to_index.convert(res, old, gpu="H100", model="llama-3-8b", vllm_version="0.14.0")
    (again,) = fidelity.load_index_runs(tmp_path / "runs", "old")
    assert again.measured_makespan_s == 9.5 and again.measured_median_itl_s is None


def test_on_gpu_script_parses_and_dry_runs(tmp_path):
    import subprocess

    script = REPO / "benchmarks" / "on_gpu.sh"
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    r = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=60,
                       env={"PATH": "/usr/bin:/bin", "OUT": str(tmp_path / "out"),
                            "DRY_RUN": "1"})
    assert r.returncode == 0, r.stderr
    for step in ("profile", "validate", "bench_1600", "index_1600", "replay_400", "fidelity"):
        assert f"== {step}" in r.stdout
    assert "vllm bench serve" in r.stdout and "bench_to_index.py" in r.stdout


@needs_data
def test_rtx4090_run_max_num_seqs_128_beats_256_as_measured():
    """Issue #24's bar: the RTX 4090 run (KV-bound, vLLM 0.19) measured 172 s at max_num_seqs
    128 against 184 s at 256. Under that release a smaller max_num_seqs shrinks the sampler's
    start-up reserve, so the cache holds more and the run preempts less."""
    import dataclasses

    gpus = load_gpus()
    run = [r for r in fidelity.load_llmservingsim(DATA) if r.name.startswith("RTX4090")][0]
    out = {}
    for seqs in (128, 256):
        r = dataclasses.replace(run, config=dataclasses.replace(run.config, max_running=seqs))
        res, _ = fidelity.simulate_run(r, fidelity.PROFILES["vllm-v1-async"], gpus)
        out[seqs] = res
    assert out[256].memory.kv_capacity_blocks == run.measured_kv_blocks  # 2,588 as vLLM
    assert out[128].memory.kv_capacity_blocks > out[256].memory.kv_capacity_blocks
    assert out[128].makespan_s < out[256].makespan_s


@needs_data
def test_llmservingsim_runs_check_the_decode_speed_their_request_logs_measure():
    """Each request's first and last token times give the run's decode speed (mean gap between
    tokens); the prediction is printed beside the makespan, a check the makespan alone cannot
    give (it hides whether decode or prefill is off). Within 15 % on the four public runs."""
    from tuner.sim.steps import DECODES, N_COLS, mean_itl_s

    runs = fidelity.load_llmservingsim(DATA)
    assert all(r.measured_mean_itl_s and 0.01 < r.measured_mean_itl_s < 0.2 for r in runs)
    rows = fidelity.evaluate(runs, {"llmservingsim": fidelity.PROFILES["vllm-v1-async"]},
                             load_gpus(), timeline=False)
    assert all(abs(r["mean_itl_error_pct"]) < 15.0 for r in rows if r["status"] == "ok")
    st = np.zeros((4, N_COLS))
    st[:, DECODES] = [0, 2, 0, 1]  # 2 tokens wait 1 + 2 s, 1 token waits 3 + 4 s
    assert mean_itl_s([st], [np.array([1.0, 2.0, 3.0, 4.0])]) == pytest.approx((2 * 3 + 7) / 3)


def test_shipped_summary_cites_the_decode_step_where_the_runs_check_it():
    """--write-summary stores the V0 fit's leave-one-out median ITL beside the makespan for
    the A100 (the runs that report it), and the measured cost model's provenance cites it."""
    from tuner.core.catalog import get_model
    from tuner.predictors.aic import fidelity_summary, table_cost_model
    from tuner.predictors.engine_overhead import profile_for

    a100 = fidelity_summary()["A100-80G"]
    assert a100["itl_runs"] == 11 and a100["itl_median_abs_pct"] <= 7.0
    assert "itl_runs" not in fidelity_summary()["RTX-PRO-6000"]
    cm = table_cost_model(get_model("llama-3-8b"), load_gpus()["A100-80G"],
                          engine_version="0.6.0", engine=profile_for("0.6.0", "serve", 10))
    assert (f"median |ITL error| {a100['itl_median_abs_pct']:.1f} %"
            in str(cm.provenance))


@needs_a100
def test_a_host_row_is_the_simulation_under_its_terms():
    """The fit's linear model of a run (GPU-only makespan + sum of term x feature, the GPU
    excess's feature being the GPU time itself) is what simulating the run with a profile of
    those terms gives: the schedule of a t = 0 run does not depend on time."""
    gpus = load_gpus()
    run = next(r for r in fidelity.load_lambda_a100(DATA) if r.name.endswith("tp1_len2000_n320")
               and "llama-3-8b" in r.name)
    row = fidelity.host_row(run, gpus)
    coef = {"fixed_s": 1.5e-3, "per_seq_s": 20e-6, "gpu_excess": 0.15,
            "per_logged_request_s": 4e-3}
    eng = run.engine.with_params(**({t: 0.0 for t in fidelity.HOST_TERMS} | coef))
    res, _ = fidelity.simulate_run(run, fidelity.as_run_logs(eng, run), gpus)
    assert row.makespan_s(coef) == pytest.approx(res.makespan_s, rel=1e-6)
    assert row.feats["gpu_excess"] == pytest.approx(row.base_s, rel=1e-9)


def test_vllm_pr12093_figures_are_checked_not_fitted():
    """vLLM's own H100 throughput figures (vllm#12093): fixed 2,048 + 128 token requests (its
    printed total tok/s / req/s), FA2 and FA3 under V0 single-step, multi-step 4 and V1; each
    predicted with the engine profile of its generation, none of them in a fit."""
    rows = fidelity.evaluate_vllm_pr12093(load_gpus())
    assert [r["run"] for r in rows] == [f["name"] for f in fidelity.VLLM_PR12093_RUNS]
    e = fidelity.VLLM_PR12093_ENGINE
    for r in rows:
        assert r["status"] == "ok" and r["gpu"] == "H100"
        assert r["published_makespan_s"] == pytest.approx(e["num_prompts"] / r["published_req_s"])
        assert r["engine"] == ("vllm-v1-sync" if "_v1_" in r["run"] else
                               "vllm-v0" if r["scheduler_steps"] == 1 else "vllm-v0-multistep")
        assert f"VLLM_FLASH_ATTN_VERSION={r['flash_attention']}" in r["command"]
    # FA2 and FA3 rows of one engine get one prediction (the tables measured FA3)
    by = {r["run"]: r for r in rows}
    assert by["vllm12093_v0_fa2"]["predicted_makespan_s"] == \
        by["vllm12093_v0_fa3"]["predicted_makespan_s"]
    # the V0 rows: within 10 % (the held-out bar) with the shipped V0 profile
    assert all(abs(r["req_s_error_pct"]) <= 10.0 for r in rows if "_v0_" in r["run"])
    # what the single-step / multi-step pair says a scheduler call costs brackets the
    # shipped single-step estimate
    from tuner.predictors.engine_overhead import V0_SINGLE_STEP_FIXED_S

    gaps = fidelity.single_step_gap_s(rows)
    assert min(gaps.values()) <= V0_SINGLE_STEP_FIXED_S <= max(gaps.values())


def test_the_fa2_to_fa3_note_states_vllms_own_figures():
    """The provenance's known kernel difference (FA2 before 0.7.0 on Hopper, FA3 in the
    tables) quotes the end-to-end changes computed from the PR's figures."""
    from tuner.predictors.aic import FA2_TO_FA3_MEASURED

    req = {f["name"]: f["req_s"] for f in fidelity.VLLM_PR12093_RUNS}
    gain = {k: 100 * (req[f"vllm12093_{k}_fa3"] / req[f"vllm12093_{k}_fa2"] - 1)
            for k in ("v0", "v0_ms4", "v1")}
    lo, hi = sorted((gain["v0"], gain["v0_ms4"]))
    assert f"{lo:.1f}-{hi:.1f} %" in FA2_TO_FA3_MEASURED
    assert f"{gain['v1']:.0f} % under V1" in FA2_TO_FA3_MEASURED
