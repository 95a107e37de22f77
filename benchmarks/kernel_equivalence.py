"""Digests of the simulator's kernels over random instances, to compare two trees.

Prints one SHA-256 over the step records, finish/first steps, status and cached tokens of N
random schedules (every scheduler preset, fast and step-by-step, prefix groups, replayed
arrivals, step limits that run out), plus first-fit bins and BlendServe's dual scan. Run it
under two trees and compare the lines:

    python benchmarks/kernel_equivalence.py --instances 3000
    PYTHONPATH=OLD_TREE python benchmarks/kernel_equivalence.py --instances 3000

`--pause-every K` makes the C loop hand back to Python every K steps (and the step record
start small), so the resumable path is what gets hashed; a tree without it ignores the flag.
"""

from __future__ import annotations

import argparse
import hashlib
import time

import numpy as np

from tuner.core.schedulers import SCHEDULER_PRESETS
from tuner.sim import ordering
from tuner.sim import scheduler as sched


def _instance(rng: np.random.Generator, name: str):
    n = int(rng.integers(1, 80))
    prompt = rng.integers(1, 900, n)
    output = rng.integers(1, 400, n)
    block = int(rng.choice([1, 4, 16, 32]))
    need = int(np.ceil((prompt + output) / block).max())
    capacity = int(rng.integers(max(need // 2, 1), need * int(rng.integers(2, 12)) + 2))
    params = sched.preset(name, token_budget=int(rng.choice([8, 64, 256, 512, 2048, 8192])),
                          max_running=int(rng.integers(1, 96)), block_size=block,
                          capacity_blocks=capacity,
                          prefill_budget=int(rng.choice([16, 128, 512, 100000])))
    kw = {}
    if rng.random() < 0.35:
        kw["prefix_ids"] = np.where(rng.random(n) < 0.7, rng.integers(0, 5, n), -1)
        kw["prefix_tokens"] = rng.integers(0, 600, n)
    if rng.random() < 0.2:
        kw["arrival_step"] = np.sort(rng.integers(0, 400, n))
    if rng.random() < 0.1:
        kw["max_steps"] = int(rng.integers(1, 300))
    return prompt, output, params, kw


def schedule_digest(instances: int, seed: int) -> tuple[str, int]:
    h = hashlib.sha256()
    rng = np.random.default_rng(seed)
    names = sorted(SCHEDULER_PRESETS)
    steps = 0
    for i in range(instances):
        prompt, output, params, kw = _instance(rng, names[i % len(names)])
        for fast in (True, False):
            s = sched.run_schedule(prompt, output, params, fast=fast, **kw)
            for a in (s.steps, s.finish_step, s.first_step):
                h.update(np.ascontiguousarray(a, dtype=np.int64).tobytes())
            h.update(f"{s.status},{s.cached_tokens};".encode())
            steps += s.steps.shape[0]
    return h.hexdigest(), steps


def ordering_digest(instances: int, seed: int) -> str:
    h = hashlib.sha256()
    rng = np.random.default_rng(seed + 1)
    for _ in range(instances):
        n = int(rng.integers(1, 300))
        sizes = rng.integers(1, 5000, n)
        bins = ordering.first_fit_bins(sizes, int(rng.integers(1, 8000)),
                                       int(rng.integers(1, 50)) if rng.random() < 0.5 else None)
        h.update(np.asarray(bins, dtype=np.int64).tobytes())
        units = np.sort(rng.integers(0, max(n // 3, 1), n))
        rho = rng.random(int(units.max()) + 1) * 10
        pos, side = ordering._dual_scan(units, rho, rng.random(n) + 0.1, float(rng.random() * 10),
                                        int(rng.integers(1, 5)), bool(rng.random() < 0.5))
        h.update(np.asarray(pos, dtype=np.int64).tobytes())
        h.update(np.asarray(side, dtype=np.int8).tobytes())
    return h.hexdigest()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--instances", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--pause-every", type=int, default=0)
    a = ap.parse_args()
    if a.pause_every and hasattr(sched, "_PAUSE_EVERY_STEPS"):
        sched._PAUSE_EVERY_STEPS = a.pause_every
    t0 = time.perf_counter()
    digest, steps = schedule_digest(a.instances, a.seed)
    t1 = time.perf_counter()
    print(f"schedules: {digest}  ({2 * a.instances} runs, {steps:,} steps, "
          f"{t1 - t0:.2f} s)")
    print(f"orderings: {ordering_digest(max(a.instances // 4, 1), a.seed)}")


if __name__ == "__main__":
    main()
