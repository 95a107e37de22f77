"""Same answer on a large job (issue #29, item 4): the search as it runs (multi-fidelity: one
replica's share of the job as the sample, near-front candidates simulated in full at the end)
against the same search with every configuration simulated on the full workload
(`--sample-fraction 1`), same space and seed, on several seeds.

The job: N requests (default 100,000) drawn from the Splitwise conversation trace in
../shared/traces (`benchmarks/recommendations.py`'s make_job), llama-3-8b on A10 and A40,
--n-trials 300; requests over the model's context are left out (--on-too-long skip).

Prints, per seed and mode, the wall time, the full simulations and the fastest and cheapest
plans' figures, then the largest gap between the two modes (target: within 1 %).

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/search_quality_large.py \
        [--requests 100000] [--seeds 0,1,2] [--n-trials 300]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from recommendations import make_job  # noqa: E402  (a sibling script)


def search(job: Path, out: Path, seed: int, n_trials: int, full_only: bool) -> dict:
    cmd = [sys.executable, "-m", "tuner.cli", "search", "-w", str(job), "-m", "llama-3-8b",
           "--gpus", "A10,A40", "--n-trials", str(n_trials), "--seed", str(seed), "--out",
           str(out), "--on-too-long", "skip"] + (["--sample-fraction", "1"] if full_only else [])
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    doc = json.loads((out / "results.json").read_text())
    w, stats = doc["winners"], doc["search"]
    return {"wall_s": wall, "fastest_s": w["fastest"]["metrics"]["makespan_s"],
            "cheapest_usd": w["cheapest"]["metrics"]["cost_usd"],
            "full": stats["full_simulations"], "configurations": stats["configurations"]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=100_000)
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--n-trials", type=int, default=300)
    a = ap.parse_args()
    worst = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        job = Path(tmp) / "job.jsonl"
        make_job(job, a.requests)
        for seed in map(int, a.seeds.split(",")):
            runs = {mode: search(job, Path(tmp) / f"{mode}-{seed}", seed, a.n_trials,
                                 mode == "full-only")
                    for mode in ("fast", "full-only")}
            for mode, r in runs.items():
                print(f"seed {seed} {mode:9}: {r['wall_s']:6.1f} s, {r['full']:3d} of "
                      f"{r['configurations']} configurations in full; fastest "
                      f"{r['fastest_s']:.2f} s, cheapest ${r['cheapest_usd']:.4f}", flush=True)
            f, g = runs["fast"], runs["full-only"]
            gap = max(f["fastest_s"] / g["fastest_s"] - 1, f["cheapest_usd"] / g["cheapest_usd"] - 1)
            worst = max(worst, gap)
    print(f"largest gap, fast search vs full-only: {100 * worst:+.2f} % (target: within 1 %)")
    return 0 if worst <= 0.01 else 1


if __name__ == "__main__":
    raise SystemExit(main())
