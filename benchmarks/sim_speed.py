"""Simulator speed on real traces (all requests at t=0).

Reference: Vidur simulates the full arXiv trace (28,257 requests, Llama-2-70B, TP2, A100,
Sarathi chunk 512, batch cap 128) in 80.7 s on a 2-core machine (issue #3). Prints wall time,
iterations/s, requests/s and the speed-up over that figure, and the exact step-by-step mode's
time and makespan beside the default skip-ahead mode's. SGLang lines (`--engine sglang`, its
defaults for the GPU) also time the Python reference of its scheduler (tuner.sim.sglang's
SGLangScheduler, which the C loop reproduces) and check the makespans agree.

Run: python benchmarks/sim_speed.py [--traces ../shared/traces] [--repeats 3]
"""

from __future__ import annotations

import argparse
import functools
import os
import platform
import time
from pathlib import Path

import numpy as np
import pandas as pd

from tuner.core import sglang as sg
from tuner.core.catalog import get_gpu, get_model, load_gpus
from tuner.core.config import ServingConfig
from tuner.core.workload import Workload
from tuner.predictors.sources import resolve_cost_model
from tuner.sim import sglang as sim_sglang
from tuner.sim.simulator import simulate

VIDUR_ARXIV_S = 80.7

CASES = [
    # (trace file, model, gpu, config kwargs)
    ("arxiv_summarization_stats_llama2_tokenizer_filtered_v2.csv", "llama-2-70b", "A100-80G",
     dict(tp=2, scheduler="sarathi", chunk_size=512, max_running=128)),
    ("arxiv_summarization_stats_llama2_tokenizer_filtered_v2.csv", "llama-3-8b", "A10",
     dict(scheduler="vllm", chunk_size=2048, max_running=256)),
    ("splitwise_code.csv", "mistral-7b", "A10", dict(scheduler="vllm", chunk_size=2048, max_running=256)),
    ("splitwise_conv.csv", "mistral-7b", "A10", dict(scheduler="vllm", chunk_size=2048, max_running=256)),
]
# SGLang with its defaults for the GPU (chunked prefill, mem fraction, max running requests)
# on an A40: SGLang 0.5.23's defaults (its prefill CUDA-graph reserve) leave an A10 too little
# for 16-bit Llama-3-8B (stop 50); these time the loop under SGLang's own defaults
SGLANG_CASES = [
    ("arxiv_summarization_stats_llama2_tokenizer_filtered_v2.csv", "llama-3-8b", "A40"),
    ("splitwise_conv.csv", "mistral-7b", "A40"),
]


def load(path: Path) -> Workload:
    df = pd.read_csv(path)
    return Workload(df["num_prefill_tokens"].to_numpy(np.int64),
                    df["num_decode_tokens"].to_numpy(np.int64), source=str(path))


def sglang_config(model, gpu) -> ServingConfig:
    """`tuner simulate --engine sglang`'s config: SGLang's defaults on `gpu`."""
    d = sg.sglang_defaults(gpu)
    base = dict(gpu=gpu.name, chunk_size=d.chunked_prefill_size, block_size=1,
                gpu_memory_utilization=d.mem_fraction_static)
    plan = sg.plan_memory_sglang(model, gpu, ServingConfig(**base, max_running=1))
    return ServingConfig(**base, max_running=sg.max_running_default(plan.kv_capacity_tokens,
                                                                     model.max_position))


def time_sglang(args, gpus) -> None:
    for trace, model, gpu in SGLANG_CASES:
        w = load(args.traces / trace)
        m, g = get_model(model), get_gpu(gpu, gpus)
        cfg = sglang_config(m, g)
        cm = resolve_cost_model(m, g, cfg)
        times = []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            res = simulate(w, m, g, cfg, cm, engine="sglang")
            times.append(time.perf_counter() - t0)
        best = min(times)
        t0 = time.perf_counter()
        ref = simulate(w, m, g, cfg, cm, engine="sglang", exact=True)
        exact_s = time.perf_counter() - t0
        c_loop = sim_sglang.run_schedule
        sim_sglang.run_schedule = functools.partial(c_loop, reference=True)
        try:
            t0 = time.perf_counter()
            py = simulate(w, m, g, cfg, cm, engine="sglang")
            py_s = time.perf_counter() - t0
        finally:
            sim_sglang.run_schedule = c_loop
        same = py.makespan_s == res.makespan_s == ref.makespan_s
        print(f"{'_'.join(trace.split('_')[:2])[:16]:16s} {model:12s} {gpu:9s} sglang   "
              f"chunk {cfg.chunk_size:5d} cap {cfg.max_running:4d}: {len(w):6d} req, "
              f"{res.iterations:7d} iterations in {best:.3f} s (median {np.median(times):.3f} s) "
              f"= {res.iterations / best:,.0f} it/s, {len(w) / best:,.0f} req/s; "
              f"makespan {res.makespan_s / 3600:.2f} h, retractions {res.preemptions}; "
              f"step by step {exact_s:.3f} s; Python reference {py_s:.3f} s "
              f"({py_s / best:.0f}x), makespans {'equal' if same else 'DIFFER'}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default = Path(__file__).resolve().parents[2] / "shared" / "traces"
    ap.add_argument("--traces", type=Path, default=default)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    gpus = load_gpus()
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"python {platform.python_version()}")
    # Warm-up: loads the C kernels and the cost model's tables once.
    tiny, a10 = get_model("tiny-llama"), gpus["A10"]
    simulate(Workload(np.array([10]), np.array([2])), tiny, a10, ServingConfig(gpu="A10"),
             resolve_cost_model(tiny, a10, ServingConfig(gpu="A10")))
    for trace, model, gpu, kw in CASES:
        w = load(args.traces / trace)
        cfg = ServingConfig(gpu=gpu, **kw)
        m, g = get_model(model), get_gpu(gpu, gpus)
        cm = resolve_cost_model(m, g, cfg)  # the registry's cost model, as `tuner simulate`'s
        times = []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            res = simulate(w, m, g, cfg, cm)
            times.append(time.perf_counter() - t0)
        best = min(times)
        t0 = time.perf_counter()
        ref = simulate(w, m, g, cfg, cm, exact=True)
        exact_s = time.perf_counter() - t0
        diff = abs(res.makespan_s - ref.makespan_s) / ref.makespan_s
        line = (f"{'_'.join(trace.split('_')[:2])[:16]:16s} {model:12s} {gpu:9s} tp{cfg.tp} {cfg.scheduler:8s} "
                f"chunk {cfg.chunk_size:5d} cap {cfg.max_running:4d}: {len(w):6d} req, "
                f"{res.iterations:7d} iterations in {best:.3f} s (median {np.median(times):.3f} s) "
                f"= {res.iterations / best:,.0f} it/s, {len(w) / best:,.0f} req/s; "
                f"makespan {res.makespan_s / 3600:.2f} h, preemptions {res.preemptions}; "
                f"exact step-by-step mode {exact_s:.3f} s, makespan difference {100 * diff:.4f} %")
        if trace.startswith("arxiv") and model == "llama-2-70b":
            line += f"; {VIDUR_ARXIV_S / best:.0f}x Vidur's {VIDUR_ARXIV_S} s"
        print(line)
    time_sglang(args, gpus)


if __name__ == "__main__":
    main()
