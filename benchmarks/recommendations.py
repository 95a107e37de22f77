"""What `tuner search` recommends on a 100,000-request ShareGPT-like job for three models
(issue #23's "before/after" record): the fastest and cheapest plans, their machines, start-up,
and how they compare with vLLM's defaults on the same GPU type and count.

    python benchmarks/recommendations.py [--tuner PATH/TO/tuner] [--requests 100000]

The job is made here (never copied from ../shared): prompt and output lengths drawn with a
fixed seed from the Splitwise conversation trace (../shared/traces/splitwise_conv.csv), a
chat-assistant workload of ShareGPT's shape, written as {"prompt_tokens", "output_tokens"} lines.
`--tuner` runs another tree's CLI (e.g. an older checkout) on the same job for a before/after.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

TRACE = Path(__file__).resolve().parents[2] / "shared" / "traces" / "splitwise_conv.csv"
MODELS = ("meta-llama/Llama-3.1-8B-Instruct", "Qwen/Qwen3-32B", "Qwen/Qwen3-30B-A3B")
GPUS = "L4,L40S,A100-80G,H100,H200"


def make_job(path: Path, n: int, seed: int = 0) -> None:
    with TRACE.open() as f:
        rows = [(int(r["num_prefill_tokens"]), int(r["num_decode_tokens"]))
                for r in csv.DictReader(f)]
    lengths = np.array(rows)
    pick = np.random.default_rng(seed).integers(0, len(lengths), n)
    with path.open("w") as f:
        for p, o in lengths[pick]:
            f.write(json.dumps({"prompt_tokens": int(p), "output_tokens": max(int(o), 1)}) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tuner", default=str(Path(sys.executable).with_name("tuner")))
    ap.add_argument("--requests", type=int, default=100_000)
    ap.add_argument("--gpus", default=GPUS)
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--n-trials", type=int, default=300)
    args = ap.parse_args()
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENBLAS_")}
    env["HF_HUB_OFFLINE"] = "1"
    with tempfile.TemporaryDirectory() as tmp:
        job = Path(tmp) / "sharegpt_like.jsonl"
        make_job(job, args.requests)
        for model in args.models.split(","):
            out = Path(tmp) / model.replace("/", "_")
            t0 = time.perf_counter()
            proc = subprocess.run([args.tuner, "search", "-w", str(job), "-m", model,
                                   "--gpus", args.gpus, "--n-trials", str(args.n_trials),
                                   "--out", str(out), "--json"],
                                  capture_output=True, text=True, env=env)
            wall = time.perf_counter() - t0
            if proc.returncode:
                print(f"## {model}: exit {proc.returncode}\n{proc.stderr.strip()[-2000:]}")
                continue
            res = json.loads(proc.stdout)
            print(f"## {model} ({args.requests:,} requests, {wall:.0f} s)")
            for v in res.get("verdicts") or []:
                print(f"- {v}")
            for goal in ("fastest", "cheapest"):
                w = res["winners"][goal]
                c, m = w["config"], w["metrics"]
                gain = (res.get("gain_over_vllm_defaults") or {}).get(goal) or {}
                mach = m.get("machines") or {}
                print(f"- {goal}: {c['tp'] * c.get('dp', 1)} x {c['gpu']} (TP {c['tp']} x DP "
                      f"{c.get('dp', 1)}; {c.get('scheduler')}, chunk {c.get('chunk_size')}, "
                      f"R_max {c.get('max_running')}, {c.get('ordering')}, "
                      f"{c.get('weight_bits')}-bit) {m['makespan_s']:.1f} s, "
                      f"${m['cost_usd']:.2f}"
                      + (f"; start-up {m['startup_s']:.0f} s" if "startup_s" in m else "")
                      + (f"; {mach.get('count')} x {mach.get('instance')}" if mach else "")
                      + f"; vs defaults: {gain.get('summary', 'n/a')}")


if __name__ == "__main__":
    main()
