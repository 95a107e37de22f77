"""Speed of the measured-table cost model: price 500,000 random iterations.

    python benchmarks/aic_speed.py [--n 500000] [--repeats 7]

Llama-3-8B on the H100 (measured tables) at TP1 and TP2; 20 % of the iterations hold a prefill
chunk, each up to 256 decodes. Prints the best of `--repeats` timings of iteration_time_s and
how far the fast path is from the per-operation breakdown it sums. Unset OPENBLAS_CORETYPE /
OPENBLAS_L2_SIZE in the shell that times it.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tuner.core.catalog import load_gpus, load_models  # noqa: E402
from tuner.predictors.aic import table_cost_model  # noqa: E402
from tuner.predictors.features import BatchFeatures, sum_parts  # noqa: E402


def steps(n: int, seed: int = 0) -> BatchFeatures:
    rng = np.random.default_rng(seed)
    dec = rng.integers(0, 256, n).astype(float)
    pf = np.where(rng.random(n) < 0.2, rng.integers(1, 2048, n), 0).astype(float)
    return BatchFeatures(pf, pf * pf, pf * 500, dec, dec * rng.integers(10, 6000, n),
                         dec + (pf > 0))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=500_000)
    ap.add_argument("--repeats", type=int, default=7)
    a = ap.parse_args()
    gpus, model = load_gpus(), load_models()["llama-3-8b"]
    f = steps(a.n)
    for tp in (1, 2):
        cm = table_cost_model(model, gpus["H100"], tp=tp)
        fast = cm.iteration_time_s(f)
        gpu = cm.gpu_time_s(f)
        ref = sum_parts(cm.gpu_breakdown(f), len(f))
        ok = ref > 0
        times = []
        for _ in range(a.repeats):
            t0 = time.perf_counter()
            cm.iteration_time_s(f)
            times.append(time.perf_counter() - t0)
        print(f"TP{tp}: {a.n:,} iterations in {1e3 * min(times):.0f} ms (best of {a.repeats}; "
              f"median {1e3 * float(np.median(times)):.0f} ms); fast path vs breakdown: max "
              f"{100 * float(np.max(np.abs(gpu[ok] / ref[ok] - 1))):.2f} %; mean step "
              f"{1e3 * float(fast.mean()):.1f} ms")


if __name__ == "__main__":
    main()
