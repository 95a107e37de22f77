"""The public fidelity suite: re-simulate every public end-to-end vLLM run we can cite.

    python benchmarks/fidelity.py [--data ../shared/fidelity] [--fit] [--json]

Runs (read in place from --data, default ../shared/fidelity beside the repository; the data is
not copied into the repository):
  llmservingsim/*  four real vLLM 0.19.0 runs from github.com/casys-kaist/LLMServingSim
                   (commit 5daddb21, bench/examples, MIT): per-request lengths and arrival
                   times, KV block counts (RTX 4090 run), a 1-second timeline of running
                   requests. Replayed with their arrivals. Three dense models and one mixture
                   of experts (Qwen3-30B-A3B-Instruct-2507, TP1 DP2 with expert parallelism:
                   predictors.moe).
For each: predicted vs measured makespan (first arrival -> last token), KV capacity vs vLLM's
measured block count where the run has it, and the running-requests curve (mean |difference|
per second). Per GPU: median and worst |makespan error|.

Cost model: measured AIConfigurator kernel tables (or transferred ones for GPUs without tables,
e.g. the RTX 4090 from the L40S) plus the engine-overhead profile `vllm-v1-async`
(predictors/engine_overhead.py). --fit refits that profile's one free parameter (the exposed,
non-overlapped time per step) on the dense runs and reports the leave-one-out error: each run
predicted by the profile fitted on the others (the MoE run is never in the fit: it is always
predicted by the profile fitted on the dense runs); --fit --write-summary stores the per-GPU
leave-one-out errors that the measured cost model's provenance cites.

Published figures (SGLang's vLLM 0.6.0 benchmark, MLPerf v5.1 vLLM) have no per-request
lengths; they are listed with the reason they are not re-simulated.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from tuner.core.catalog import ModelSpec, load_gpus, load_models  # noqa: E402
from tuner.core.config import ServingConfig  # noqa: E402
from tuner.core.memory import plan_memory  # noqa: E402
from tuner.core.workload import Workload  # noqa: E402
from tuner.predictors.aic import table_cost_model  # noqa: E402
from tuner.predictors.engine_overhead import PROFILES, EngineProfile  # noqa: E402
from tuner.sim.simulator import simulate  # noqa: E402

DEFAULT_DATA = REPO.parent / "shared" / "fidelity"

# Hugging Face model -> shape. Llama-3.1-8B has Llama-3-8B's shapes (catalog); Qwen3-32B from
# its config.json (Qwen/Qwen3-32B: 64 layers, hidden 5120, 64 heads / 8 KV heads of 128,
# intermediate 25600, vocab 151936, untied embeddings).
QWEN3_32B = ModelSpec(name="qwen3-32b", num_layers=64, hidden_size=5120, num_heads=64,
                      num_kv_heads=8, head_dim=128, intermediate_size=25600, vocab_size=151936,
                      max_position=40960, hf_id="Qwen/Qwen3-32B", source="Qwen/Qwen3-32B config.json")
# folder GPU prefix -> tuner catalog GPU
GPU_OF = {"RTX4090": "RTX4090", "RTXPRO6000": "RTX-PRO-6000"}


def model_spec(hf_id: str) -> ModelSpec | None:
    if hf_id == "meta-llama/Llama-3.1-8B":
        m = load_models()["llama-3-8b"]
        return replace(m, name="llama-3.1-8b", hf_id=hf_id, max_position=131072)
    if hf_id == "Qwen/Qwen3-32B":
        return QWEN3_32B
    # the catalog's entry (Qwen3-30B-A3B-Instruct-2507: from its config.json, 128 experts, top-8)
    return next((m for m in load_models().values() if m.hf_id == hf_id), None)


@dataclass
class Run:
    name: str
    source: str
    gpu: str
    model_id: str
    config: ServingConfig
    workload: Workload
    measured_makespan_s: float
    measured_kv_blocks: int | None
    timeline: dict | None  # t, running (1-second ticks)
    moe: bool


def load_llmservingsim(root: Path) -> list[Run]:
    runs = []
    base = root / "llmservingsim"
    for d in sorted(p for p in base.iterdir() if p.is_dir()):
        meta = json.loads((d / "meta.json").read_text())
        kw = meta["engine_kwargs"]
        reqs = [json.loads(x) for x in (d / "requests.jsonl").read_text().splitlines() if x.strip()]
        q = np.array([r["queued_ts"] for r in reqs])
        last = np.array([r["last_token_ts"] for r in reqs])
        # arrivals on the engine's clock: when each request was queued, from the first one
        arrival = q - q.min()
        wl = Workload(prompt_tokens=np.array([r["input_toks"] for r in reqs], dtype=np.int64),
                      output_tokens=np.array([r["output_toks"] for r in reqs], dtype=np.int64),
                      source=str(d / "requests.jsonl"), tokenizer="measured (vLLM)",
                      output_source="measured (vLLM)", arrival_s=arrival)
        kv = meta.get("kv_cache") or {}
        cfg = ServingConfig(gpu=GPU_OF[d.name.split("_")[0]], tp=int(kw["tensor_parallel_size"]),
                            dp=int(kw["data_parallel_size"]), scheduler="vllm",
                            chunk_size=int(kw["max_num_batched_tokens"]),
                            max_running=int(kw["max_num_seqs"]),
                            gpu_memory_utilization=float(kv.get("gpu_memory_utilization", 0.9)),
                            block_size=int(kv.get("block_size", 16)),
                            expert_parallel=bool(kw.get("enable_expert_parallel", False)))
        ts = None
        tsf = d / "timeseries.csv"
        if tsf.is_file():
            a = np.genfromtxt(tsf, delimiter=",", names=True)
            ts = {"t": a["t"], "running": a["running"]}
        runs.append(Run(name=d.name, source=f"LLMServingSim bench/examples ({d.name}), vLLM "
                        f"{meta.get('vllm_version')}", gpu=cfg.gpu, model_id=meta["model"],
                        config=cfg, workload=wl, measured_makespan_s=float(last.max() - q.min()),
                        measured_kv_blocks=kv.get("num_gpu_blocks"), timeline=ts,
                        moe="A3B" in meta["model"] or bool(kw.get("enable_expert_parallel"))))
    return runs


PUBLISHED = [
    {"what": "SGLang benchmark of vLLM 0.6.0, Llama-3.1-8B-Instruct, 1x A100-80G, 5,000 ShareGPT "
             "prompts, --num-scheduler-steps 10: 21.27 req/s, 4,132 output tok/s",
     "source": "sgl-project/sglang benchmark/benchmark_vllm_060/README.md",
     "status": "not re-simulated: per-request lengths not published (ShareGPT sample of "
               "bench_serving), and V0 multi-step has no fitted engine profile"},
    {"what": "SGLang benchmark of vLLM 0.6.0, Llama-3.1-70B-Instruct, 4x H100 TP4: 19.04 req/s, "
             "3,701 output tok/s", "source": "sgl-project/sglang benchmark/benchmark_vllm_060",
     "status": "not re-simulated: per-request lengths not published"},
    {"what": "MLPerf Inference v5.1 open, vLLM 0.9.2, Llama-3.1-70B FP8 offline, 8x H100 "
             "TP2 DP4: 22,820 tok/s; 8x H200: 30,893 tok/s", "source": "MLPerf Inference v5.1 results",
     "status": "not re-simulated: the OpenOrca sample's lengths are not in ../shared/fidelity"},
]


def simulate_run(run: Run, engine: EngineProfile, gpus: dict, *, timeline: bool = False):
    model = model_spec(run.model_id)
    gpu = gpus[run.gpu]
    cm = table_cost_model(model, gpu, tp=run.config.tp, engine_version="0.19.0", engine=engine,
                          gpus=gpus, dp=run.config.dp, expert_parallel=run.config.expert_parallel)
    if cm is None:
        raise RuntimeError(f"no measured or transferred tables for {run.gpu}")
    # the real runs' makespans are timed after the engine is up: the schedule alone
    res = simulate(run.workload, model, gpu, run.config, cm, timeline=timeline, startup_s=0.0)
    return res, cm


def evaluate(runs: list[Run], engine: EngineProfile, gpus: dict, *, timeline: bool = True) -> list[dict]:
    rows = []
    for run in runs:
        row = {"run": run.name, "gpu": run.gpu, "model": run.model_id, "source": run.source,
               "tp": run.config.tp, "dp": run.config.dp,
               "measured_makespan_s": run.measured_makespan_s}
        model = model_spec(run.model_id)
        if model is None:
            row["status"] = f"skipped: {run.model_id} is not in the catalog"
            rows.append(row)
            continue
        res, cm = simulate_run(run, engine, gpus, timeline=timeline)
        row.update(status="ok", moe=run.moe, expert_parallel=run.config.expert_parallel,
                   predicted_makespan_s=res.makespan_s,
                   makespan_error_pct=100.0 * (res.makespan_s / run.measured_makespan_s - 1.0),
                   provenance=cm.describe(), kind=cm.kind, preemptions=res.preemptions)
        plan = plan_memory(model, gpus[run.gpu], run.config)
        row["kv_capacity_blocks"] = plan.kv_capacity_blocks
        if run.measured_kv_blocks:
            row["measured_kv_blocks"] = run.measured_kv_blocks
            row["kv_error_pct"] = 100.0 * (plan.kv_capacity_blocks / run.measured_kv_blocks - 1.0)
        if timeline and run.timeline is not None and res.timeline is not None:
            t_sim, r_sim = res.timeline["time_s"], res.timeline["running"]
            t = run.timeline["t"]
            sim_at = r_sim[np.minimum(np.searchsorted(t_sim, t), len(r_sim) - 1)]
            sim_at = np.where(t <= t_sim[-1], sim_at, 0)
            # the simulated timeline is replica 0's; vLLM's counts every data-parallel rank
            measured = run.timeline["running"] / run.config.dp
            row["running_mean_abs_diff"] = float(np.mean(np.abs(sim_at - measured)))
            row["running_measured_mean"] = float(np.mean(measured))
        rows.append(row)
    return rows


def fit_engine(runs: list[Run], gpus: dict, base: EngineProfile) -> EngineProfile:
    """One parameter for the whole suite, no per-run factor: the profile's exposed per-step
    time (what async scheduling does not hide), by least squares on log(predicted / measured
    makespan), on a coarse grid then a fine one. The host terms (fixed, per running sequence)
    stay at the profile's values: under max(GPU, host) these runs cannot identify them (their
    GPU steps are longer than any plausible host time). MoE runs are left out: the parameter
    is the dense runs' (so the MoE run is a prediction, not a fit)."""
    ok = [r for r in runs if model_spec(r.model_id) is not None and not r.moe]

    def loss(exposed):
        e = base.with_params(exposed_s=float(exposed))
        errs = [np.log(simulate_run(r, e, gpus)[0].makespan_s / r.measured_makespan_s) for r in ok]
        return float(np.sum(np.square(errs)))

    grid = np.arange(0.0, 4.01e-3, 0.5e-3)
    best = min(grid, key=loss)
    fine = np.clip(best + np.arange(-0.4e-3, 0.41e-3, 0.1e-3), 0.0, None)
    best = min(np.unique(np.round(fine, 6)), key=loss)
    return base.with_params(exposed_s=float(best))


def summarise(rows: list[dict]) -> dict:
    per_gpu = {}
    for r in rows:
        if r.get("status") != "ok":
            continue
        per_gpu.setdefault(r["gpu"], []).append(abs(r["makespan_error_pct"]))
    all_err = [e for v in per_gpu.values() for e in v]
    return {"per_gpu": {g: {"runs": len(v), "median_abs_pct": float(np.median(v)),
                            "worst_abs_pct": float(np.max(v))} for g, v in per_gpu.items()},
            "median_abs_pct": float(np.median(all_err)) if all_err else None,
            "worst_abs_pct": float(np.max(all_err)) if all_err else None}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA,
                    help="folder of public runs (default ../shared/fidelity beside the repo)")
    ap.add_argument("--engine", default="vllm-v1-async", choices=sorted(PROFILES))
    ap.add_argument("--fit", action="store_true",
                    help="refit the engine profile's host terms on the runs; leave-one-out error")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--write-summary", action="store_true",
                    help="store the per-GPU errors in predictors/data/aic/fidelity_summary.json "
                         "(cited by the measured cost model's provenance)")
    a = ap.parse_args(argv)
    if not (a.data / "llmservingsim").is_dir():
        print(f"no public runs at {a.data} (pass --data)", file=sys.stderr)
        return 2
    gpus = load_gpus()
    runs = load_llmservingsim(a.data)
    engine = PROFILES[a.engine]
    out = {"engine": engine.describe()}
    if a.fit:
        fitted = fit_engine(runs, gpus, engine)
        out["fitted"] = {"exposed_s": fitted.exposed_s}
        loo = []
        ok = [r for r in runs if model_spec(r.model_id) is not None and not r.moe]
        for i, r in enumerate(ok):
            e = fit_engine(ok[:i] + ok[i + 1:], gpus, engine)
            res, _ = simulate_run(r, e, gpus)
            loo.append({"run": r.name, "gpu": r.gpu, "exposed_s": e.exposed_s,
                        "error_pct": 100.0 * (res.makespan_s / r.measured_makespan_s - 1.0)})
        for r in runs:  # MoE runs: never in the fit, so the fitted profile predicts them
            if r.moe and model_spec(r.model_id) is not None:
                res, _ = simulate_run(r, fitted, gpus)
                loo.append({"run": r.name, "gpu": r.gpu, "exposed_s": fitted.exposed_s,
                            "error_pct": 100.0 * (res.makespan_s / r.measured_makespan_s - 1.0)})
        out["leave_one_out"] = loo
        engine = fitted
    rows = evaluate(runs, engine, gpus)
    out.update(runs=rows, summary=summarise(rows), published=PUBLISHED)
    if a.write_summary:
        from tuner.predictors.aic import FIDELITY_FILE
        from tuner.predictors.aic_tables import data_dir

        if not a.fit:
            print("--write-summary needs --fit (the summary stores leave-one-out errors)",
                  file=sys.stderr)
            return 2
        loo_rows = [{"run": x["run"], "gpu": x["gpu"], "status": "ok",
                     "makespan_error_pct": x["error_pct"]} for x in out["leave_one_out"]]
        doc = {"what": "benchmarks/fidelity.py --fit: leave-one-out |predicted / measured "
                       "makespan - 1| per GPU (engine profile fitted on the other runs)",
               "engine": engine.name, "per_gpu": summarise(loo_rows)["per_gpu"],
               "runs": [{k: r[k] for k in ("run", "gpu", "makespan_error_pct")}
                        for r in loo_rows]}
        (data_dir() / FIDELITY_FILE).write_text(json.dumps(doc, indent=1) + "\n")
    if a.json:
        print(json.dumps(out, indent=1, default=float))
        return 0
    print(f"engine overhead: {engine.describe()}\n")
    print(f"{'run':<42} {'measured':>9} {'predicted':>9} {'error':>7}  {'KV blocks (sim/vLLM)':>21}  running |diff|")
    for r in rows:
        if r.get("status") != "ok":
            print(f"{r['run']:<42} {r['measured_makespan_s']:8.1f}s {'':>9} {'':>7}  {r['status']}")
            continue
        kv = (f"{r['kv_capacity_blocks']}/{r['measured_kv_blocks']} ({r['kv_error_pct']:+.1f} %)"
              if "measured_kv_blocks" in r else f"{r['kv_capacity_blocks']}/n.a.")
        run_diff = (f"{r['running_mean_abs_diff']:.1f} of {r['running_measured_mean']:.0f}"
                    + (" per replica" if r["dp"] > 1 else "")
                    if "running_mean_abs_diff" in r else "n.a.")
        print(f"{r['run']:<42} {r['measured_makespan_s']:8.1f}s {r['predicted_makespan_s']:8.1f}s "
              f"{r['makespan_error_pct']:+6.1f}%  {kv:>21}  {run_diff}")
    s = out["summary"]
    print()
    for g, v in s["per_gpu"].items():
        print(f"{g:<14} runs {v['runs']}  median |error| {v['median_abs_pct']:.1f} %  "
              f"worst {v['worst_abs_pct']:.1f} %")
    if s["median_abs_pct"] is not None:
        print(f"{'all':<14} median |error| {s['median_abs_pct']:.1f} %  worst {s['worst_abs_pct']:.1f} %")
    for r in rows:
        if r.get("status") == "ok":
            print(f"  {r['run']}: {r['provenance']}")
    if "leave_one_out" in out:
        print("\nleave-one-out (profile fitted on the other runs):")
        for x in out["leave_one_out"]:
            print(f"  {x['run']:<40} {x['error_pct']:+6.1f} %  (exposed "
                  f"{1e3 * x['exposed_s']:.2f} ms/step fitted on the others)")
    print("\npublished figures:")
    for p in PUBLISHED:
        print(f"  {p['what']} [{p['source']}] -- {p['status']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
