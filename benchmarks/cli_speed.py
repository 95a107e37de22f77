"""Whole-command speed: what a user waits for, as separate processes (best of several).

Cases (issue "The README answer in 5 seconds"):
- the README main job (`tuner search` on examples/arxiv.jsonl, A10,A40), cold (an empty numba
  cache, as after `pip install`) and warm;
- `tuner simulate` of the example, and of the full arXiv trace (28,257 requests; Llama-2-70B,
  TP2, A100-80G, Sarathi chunk 512, R_max 128);
- `tuner search --exhaustive` over A10, A40, H100 on a ~4,500- and the full 40,824-configuration
  space (the default space), with a time limit per run (a run over it is reported as such, with
  the configurations it stored per second).
Then where the warm README job's time goes: one run under cProfile, its cumulative time split
into import/start-up, the Optuna storage, simulation and the outputs (report, exports).

Run: python benchmarks/cli_speed.py [--repeats 3] [--skip-exhaustive] [--exhaustive-limit-s 900]
Time it with OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset (they slow a current numpy here).
"""

from __future__ import annotations

import argparse
import os
import platform
import pstats
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "arxiv.jsonl"
ARXIV = "arxiv_summarization_stats_llama2_tokenizer_filtered_v2.csv"
README_JOB = ["search", "--workload", str(EXAMPLE), "--model", "llama-3-8b", "--gpus", "A10,A40"]
SMALL_SPACE = """knobs:
  chunk_size: [256, 512, 1024, 2048, 4096, 8192, 16384]
  max_running: [16, 32, 64, 128, 256, 512]
  weight_bits: [16, 8, 4]
  kv_bits: [16, 8]
  tp: [1, 2, 4]
  scheduler: [vllm, sarathi]
fixed:
  dp: 1
  block_size: 16
  gpu_memory_utilization: 0.9
  ordering: fcfs
"""
# (component, substrings of a profiled function's file path) in the order they are matched
BUCKETS = (("optuna storage", ("optuna/storages", "sqlalchemy", "sqlite3", "search/storage")),
           ("simulation", ("tuner/sim/",)),
           ("outputs (report, exports, importances)", ("reports/", "tuner/exports", "importance")))


def run(args: list[str], env: dict, cwd: Path, limit_s: float | None = None) -> tuple[float, int]:
    """Wall seconds and exit code of `tuner ARGS` in a fresh interpreter."""
    t0 = time.perf_counter()
    try:
        rc = subprocess.run([sys.executable, "-m", "tuner.cli", *args], env=env, cwd=cwd,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            timeout=limit_s).returncode
    except subprocess.TimeoutExpired:
        rc = -1
    return time.perf_counter() - t0, rc


def best_of(n: int, args_for, env: dict, cwd: Path) -> float:
    times = []
    for i in range(n):
        dt, rc = run(args_for(i), env, cwd)
        if rc != 0:
            raise SystemExit(f"tuner {' '.join(args_for(i))} exited with {rc}")
        times.append(dt)
    return min(times)


def stored_trials(out_dir: Path) -> int:
    """Completed trials in a search's study (for the rate of a run stopped at its limit): the
    --out folder's study as `tuner results` finds it (its journal, or an older study.db)."""
    import optuna

    from tuner.core.errors import TunerError
    from tuner.search import make_storage, resolve_storage

    try:
        storage = make_storage(resolve_storage(None, out_dir))
    except TunerError:  # killed before it wrote anything
        return 0
    complete = (optuna.trial.TrialState.COMPLETE,)
    return sum(len(optuna.load_study(study_name=s.study_name, storage=storage)
                   .get_trials(deepcopy=False, states=complete))
               for s in optuna.get_all_study_summaries(storage))


def profile_readme(env: dict, tmp: Path) -> None:
    prof = tmp / "readme.prof"
    out = tmp / "prof-out"
    subprocess.run([sys.executable, "-m", "cProfile", "-o", str(prof), "-m", "tuner.cli",
                    *README_JOB, "--out", str(out)], env=env, cwd=tmp, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    st = pstats.Stats(str(prof))
    total = max(v[3] for v in st.stats.values())  # cumulative time of the outermost call
    shares = {}
    for name, needles in BUCKETS:
        # the largest cumulative time of a function in the bucket that no bucket function calls
        # (its callers outside the bucket) approximates the bucket's own share
        best = 0.0
        for (path, _line, _fn), (_cc, _nc, _tt, ct, callers) in st.stats.items():
            if any(n in path for n in needles) and not any(
                    any(n in c[0] for n in needles) for c in callers):
                best += ct
        shares[name] = best
    print(f"where the warm README job's {total:.1f} s go (cProfile, cumulative):")
    for name, s in shares.items():
        print(f"  {name:40s} {s:6.2f} s  {100 * s / total:5.1f} %")
    rest = total - sum(shares.values())
    print(f"  {'start-up, imports, search loop, other':40s} {rest:6.2f} s  {100 * rest / total:5.1f} %")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--traces", type=Path, default=REPO.parent / "shared" / "traces")
    ap.add_argument("--skip-exhaustive", action="store_true")
    ap.add_argument("--exhaustive-limit-s", type=float, default=900.0)
    args = ap.parse_args()
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"python {platform.python_version()}")
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp / "numba-cache"))
        cold, rc = run([*README_JOB, "--out", str(tmp / "cold")], env, tmp)
        print(f"README main job, cold (empty numba cache): {cold:.2f} s (exit {rc})")
        warm = best_of(args.repeats, lambda i: [*README_JOB, "--out", str(tmp / f"warm{i}")],
                       env, tmp)
        print(f"README main job, warm: {warm:.2f} s (best of {args.repeats})")
        sim = ["simulate", "-w", str(EXAMPLE), "-m", "llama-3-8b", "-g", "A10"]
        print(f"tuner simulate, example (400 requests): "
              f"{best_of(args.repeats, lambda i: sim, env, tmp):.2f} s")
        trace = args.traces / ARXIV
        if trace.is_file():
            big = ["simulate", "-w", str(trace), "-m", "llama-2-70b", "-g", "A100-80G", "--tp", "2",
                   "--scheduler", "sarathi", "--chunk-size", "512", "--max-running", "128"]
            print(f"tuner simulate, full arXiv trace (28,257 requests): "
                  f"{best_of(args.repeats, lambda i: big, env, tmp):.2f} s")
        else:
            print(f"(no {trace}: the full-trace case is skipped)")
        if not args.skip_exhaustive:
            small = tmp / "small.yaml"
            small.write_text(SMALL_SPACE)
            for label, space in (("~4,500", small), ("40,824", None)):
                out = tmp / f"exh-{label}"
                cmd = ["search", "--workload", str(EXAMPLE), "--model", "llama-3-8b",
                       "--gpus", "A10,A40,H100", "--exhaustive", "--out", str(out)]
                if space is not None:
                    cmd += ["--space", str(space)]
                dt, rc = run(cmd, env, tmp, args.exhaustive_limit_s)
                n = stored_trials(out)
                state = "done" if rc == 0 else ("stopped at the limit" if rc == -1 else f"exit {rc}")
                print(f"--exhaustive, {label} configurations: {dt:.1f} s, {state}; "
                      f"{n:,} trials stored = {n / dt:,.0f} configurations/s")
                shutil.rmtree(out, ignore_errors=True)
        profile_readme(env, tmp)


if __name__ == "__main__":
    main()
