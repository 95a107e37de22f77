"""Profile -> fit -> price on this machine's CPU (or GPU with --device cuda), with figures.

Prints: profile wall time (quick and/or full), fit time, the CV error summary (median and per
operation of the chosen estimators), the time to price 500k iterations with the fitted model
vs the roofline, and, with --transfer, the transfer error from this profile to a second one
taken with 1 intra-op thread (a "smaller device": the only second device a CPU-only machine has).

Run: python benchmarks/profile_cpu.py [--model tiny-llama] [--full] [--transfer] [--out DIR]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import numpy as np


def _parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="tiny-llama")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--full", action="store_true", help="full grids instead of --quick")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--transfer", action="store_true",
                    help="also profile with 1 thread and print the transfer error")
    ap.add_argument("--out", type=Path, default=None)
    return ap.parse_args()


def _profile(args, model, out: Path, threads):
    """(wall seconds, ProfileSummary) of one profile into `out`."""
    from tuner.profilers.profile import ProfileSettings, run_profile

    t0 = time.perf_counter()
    s = run_profile(ProfileSettings(model=model, out=out, device=args.device,
                                    quick=not args.full, threads=threads), progress=False)
    return time.perf_counter() - t0, s


def _fit(d: Path):
    """Fit the profile in `d` (saved there), printing the time and the CV errors."""
    from tuner.predictors.fit import fit_profile

    t0 = time.perf_counter()
    res = fit_profile(d)
    res.save(d)
    print(f"fit: {time.perf_counter() - t0:.1f} s; statistic {res.stat}; median CV MAPE of the "
          f"chosen models (model ops) {100 * res.median_cv_mape():.1f} %")
    for of in res.ops:
        cv = of.cv_mape.get(of.chosen, float("nan"))
        print(f"  {of.key:28s} rows {of.n:3d}  chosen {of.chosen:10s} CV MAPE {100 * cv:6.1f} %")
    print("efficiency curves CV MAPE: " + ", ".join(
        f"{k} {100 * v:.1f} %" for k, v in sorted(res.efficiency_cv.items())))
    return res


def _pricing_speed(profile_dir: Path, model) -> None:
    """Time to price 500k random iterations: the fitted model vs the roofline (best of 5)."""
    from tuner.core.catalog import load_gpus
    from tuner.core.config import ServingConfig
    from tuner.predictors.features import BatchFeatures
    from tuner.predictors.roofline import RooflineCostModel
    from tuner.predictors.sources import load_cost_model

    g = load_gpus()["A10"]
    cm = load_cost_model(profile_dir, model, g, ServingConfig(gpu="A10"), mode="measured")
    rf = RooflineCostModel.from_specs(g, model)
    n = 500_000
    rng = np.random.default_rng(0)
    P = rng.integers(0, 2048, n).astype(float) * (rng.random(n) < 0.05)
    B = rng.integers(1, 256, n).astype(float)
    f = BatchFeatures(P, P * P, P * rng.integers(0, 2000, n), B, B * rng.integers(1, 3000, n),
                      B + (P > 0))

    def best(fn):
        out = float("inf")
        for _ in range(5):
            t0 = time.perf_counter()
            fn(f)
            out = min(out, time.perf_counter() - t0)
        return out

    tf, tr = best(cm.iteration_time_s), best(rf.iteration_time_s)
    print(f"pricing 500k iterations: fitted {1e3 * tf:.0f} ms, roofline {1e3 * tr:.0f} ms "
          f"({tf / tr:.1f}x)")


def _transfer(args, model, root: Path, stat: str) -> None:
    """Profile again with 1 thread and print the transfer error both ways."""
    from tuner.predictors.devices import DeviceSpecs
    from tuner.predictors.fit import fit_profile, read_profile
    from tuner.predictors.loader import load_fit
    from tuner.predictors.transfer import transfer_error

    wall1, _ = _profile(args, model, root / "one-thread", 1)
    fit_profile(root / "one-thread").save(root / "one-thread")
    print(f"profile with 1 thread: {wall1:.1f} s")
    for src, dst in (("main", "one-thread"), ("one-thread", "main")):
        tdf, _ = read_profile(root / dst)
        specs = DeviceSpecs.from_dict(load_fit(root / dst)["specs"])
        err = transfer_error(load_fit(root / src), tdf, specs, stat=stat)
        print(f"transfer {src} -> {dst}: all {100 * err['all']['mape']:.1f} % MAPE "
              f"(median APE {100 * err['all']['median_ape']:.1f} %); " + ", ".join(
                  f"{k} {100 * v['mape']:.0f} %" for k, v in err.items() if k != "all"))


def main() -> None:
    args = _parse_args()
    from tuner.core.catalog import get_model

    model = get_model(args.model)
    root = args.out or Path(tempfile.mkdtemp(prefix="tuner-prof-"))
    print(f"host: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}; out {root}")
    wall, s = _profile(args, model, root / "main", args.threads)
    print(f"profile ({'full' if args.full else 'quick'}): {wall:.1f} s wall, {s.measured} cases, "
          f"{s.oom} OOM, {s.errors} errors on {s.device_name}")
    res = _fit(root / "main")
    _pricing_speed(root / "main", model)
    if args.transfer:
        _transfer(args, model, root, res.stat)


if __name__ == "__main__":
    main()
