"""Whole-command speed: what a user waits for, as separate processes (best of several).

Cases (issue "The README answer in 5 seconds"):
- the README main job (`tuner search` on examples/arxiv.jsonl, A10,A40), cold (an empty
  bytecode cache: the first run from a fresh checkout) and warm;
- `tuner simulate` of the example, and of the full arXiv trace (28,257 requests; Llama-2-70B,
  TP2, A100-80G, Sarathi chunk 512, R_max 128);
- `tuner search --exhaustive` over A10, A40, H100 on a 4,536-configuration space (16-bit,
  below) and, unless --skip-full, the default space (A10, A40, H100 x search_spaces/default.yaml),
  with a time limit per run (a run over it is reported as such, with the configurations it
  stored per second).
Then where the warm README job's time goes: the job run in one process with its phases timed
(PHASES: reading the inputs, simulations, journal writes, the search loop, the outputs, the
terminal tables; wall and CPU seconds, no profiler).

Every figure is the wall time of a whole `tuner` process (python start-up included), best of
--repeats, with the CPU seconds (user + sys) of that process beside it: on a busy machine the
CPU time is the steadier figure. A cold run gets an empty PYTHONPYCACHEPREFIX (every module
compiled to bytecode again; the simulator's C kernels are built at install, so nothing else is
compiled at run time); the warm runs share the one the cold run filled.

Run: python benchmarks/cli_speed.py [--repeats 3] [--skip-exhaustive] [--skip-full]
     [--exhaustive-limit-s 900] [--against REV] [--large [--keep DIR]]
--large also times `tuner search` of 100k- and 1M-request ShareGPT-like jobs (issue #29), once
each (and on REV with --against).
--against REV times `tuner --help`, the example's simulate and the warm README job on that git
revision too, in the same run, and prints the ratios.
OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE are removed from the timed processes' environment (they
slow a current numpy here), and so is PYTHONDONTWRITEBYTECODE (a user's processes keep their
bytecode).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tuner.core.host import cpu_name

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "arxiv.jsonl"
ARXIV = "arxiv_summarization_stats_llama2_tokenizer_filtered_v2.csv"
README_JOB = ["search", "--workload", str(EXAMPLE), "--model", "llama-3-8b", "--gpus", "A10,A40"]
# 7 x 6 x 3 x 2 x 3 x 2 = 1,512 configurations per GPU type, 4,536 on A10, A40, H100
SMALL_SPACE = """knobs:
  chunk_size: [256, 512, 1024, 2048, 4096, 8192, 16384]
  max_running: [16, 32, 64, 128, 256, 512]
  tp: [1, 2, 4]
  scheduler: [vllm, sarathi]
  gpu_memory_utilization: [0.85, 0.9, 0.95]
  ordering: [fcfs, longest-output]
fixed:
  dp: 1
  block_size: 16
  weight_bits: 16
  kv_bits: 16
"""
# Where the README job's time goes: the job run in one process with these functions timed
# (wall and CPU, outermost call only; no profiler, so no profiler overhead). (label, module,
# class or None, attribute), looked up where the caller finds them.
PHASES = (
    ("reading the workload, model, GPUs, space", "tuner.cli.search", "_SearchInputs", "read"),
    ("search: simulations", "tuner.search.evaluator", "Evaluator", "_simulate"),
    ("search: journal writes", "optuna.study", "Study", "add_trial"),
    ("search: whole loop", "tuner.search", None, "run_search"),
    ("outputs: records, winners, importances, timelines", "tuner.reports.outputs", None,
     "study_outputs"),
    ("outputs: report HTML", "tuner.reports.outputs", None, "render_html"),
    ("outputs: all files, written as a set", "tuner.reports.outputs", None, "write_outputs"),
    ("terminal tables", "tuner.cli.search", None, "print_search"),
)
PHASE_DRIVER = """
import importlib, json, sys, time
phases, out_path, args = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3:]
spent = {}
def account(label, t, c):
    s = spent.setdefault(label, [0.0, 0.0])
    s[0] += time.perf_counter() - t
    s[1] += time.process_time() - c
t, c = time.perf_counter(), time.process_time()
import tuner.cli.main as main
account("importing the command line", t, c)
def timed(label, fn):
    depth = [0]
    def wrapper(*a, **k):
        if depth[0]:
            return fn(*a, **k)
        depth[0] += 1
        t, c = time.perf_counter(), time.process_time()
        try:
            return fn(*a, **k)
        finally:
            depth[0] -= 1
            account(label, t, c)
    return wrapper
t, c = time.perf_counter(), time.process_time()
for label, mod, cls, attr in phases:
    owner = importlib.import_module(mod)
    owner = getattr(owner, cls) if cls else owner
    raw = owner.__dict__.get(attr)
    if raw is None:  # an older tree without this function: left out
        continue
    if isinstance(raw, classmethod):
        setattr(owner, attr, classmethod(timed(label, raw.__func__)))
    else:
        setattr(owner, attr, timed(label, raw))
account("importing the search and the outputs", t, c)
t, c = time.perf_counter(), time.process_time()
sys.argv = ["tuner", *args]
try:
    main.main()
except SystemExit as exc:
    if exc.code:
        raise
account("the command, after those imports", t, c)
with open(out_path, "w") as fh:
    json.dump(spent, fh)
"""


def run(args: list[str], env: dict, cwd: Path,
        limit_s: float | None = None) -> tuple[float, float, int]:
    """(wall seconds, CPU seconds, exit code) of `tuner ARGS` in a fresh interpreter."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    try:
        rc = subprocess.run([sys.executable, "-m", "tuner.cli", *args], env=env, cwd=cwd,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            timeout=limit_s).returncode
    except subprocess.TimeoutExpired:
        rc = -1
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, rc


def best_of(n: int, args_for, env: dict, cwd: Path) -> tuple[float, float]:
    """(best wall, CPU of that run) over ``n`` runs; SystemExit when one fails."""
    runs = []
    for i in range(n):
        wall, cpu, rc = run(args_for(i), env, cwd)
        if rc != 0:
            raise SystemExit(f"tuner {' '.join(args_for(i))} exited with {rc}")
        runs.append((wall, cpu))
    return min(runs)


def fmt(wall: float, cpu: float) -> str:
    return f"{wall:.2f} s ({cpu:.2f} s CPU)"


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


def phase_readme(env: dict, tmp: Path, repeats: int) -> None:
    """Where the warm README job's time goes: PHASES timed inside the job (the run with the
    smallest whole-process wall time of ``repeats``)."""
    runs = []
    for i in range(repeats):
        out_json = tmp / f"phases{i}.json"
        cmd = [sys.executable, "-c", PHASE_DRIVER, json.dumps(PHASES), str(out_json),
               *README_JOB, "--out", str(tmp / f"phases-out{i}")]
        t0 = time.perf_counter()
        subprocess.run(cmd, env=env, cwd=tmp, check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
        runs.append((time.perf_counter() - t0, json.loads(out_json.read_text())))
    total, spent = min(runs, key=lambda r: r[0])
    print(f"where the warm README job's {total:.2f} s go (wall / CPU seconds; nested lines "
          "are part of the line above them):")
    print(f"  {'python start-up and anything not listed':62s} "
          f"{total - sum(spent[k][0] for k in spent if not _nested(k)):6.2f}")
    top = [k for k in spent if not _nested(k)]
    for label in [*top, *(p[0] for p in PHASES)]:
        if label in spent:
            wall, cpu = spent[label]
            indent = "    " if _nested(label) else "  "
            print(f"{indent}{label:{64 - len(indent)}s} {wall:6.2f} / {cpu:5.2f}")


def _nested(label: str) -> bool:
    """A PHASES line counted inside another (simulations and journal writes inside the loop,
    the loop and the outputs inside the command)."""
    return label.startswith(("search:", "outputs:", "reading", "terminal"))


def large_jobs(tmp: Path, keep: Path | None) -> list[tuple[str, Path]]:
    """The 100k- and 1M-request ShareGPT-like jobs of issue #29 (Splitwise conversation
    lengths, benchmarks/recommendations.py's make_job, seed 0), made once (in `keep` if
    given, and reused from there)."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    from recommendations import make_job

    where = keep or tmp
    where.mkdir(parents=True, exist_ok=True)
    jobs = []
    for label, n in (("100k", 100_000), ("1M", 1_000_000)):
        path = where / f"sharegpt-like-{label}.jsonl"
        if not path.is_file():
            make_job(path, n)
        jobs.append((label, path))
    return jobs


def large_case(path: Path, tmp: Path, tag: str):
    """`tuner search` of a large job as issue #29 times it (A10, A40, 300 trials)."""
    return lambda i: ["search", "-w", str(path), "-m", "llama-3-8b", "--gpus", "A10,A40",
                      "--n-trials", "300", "--on-too-long", "skip", "--out",
                      str(tmp / f"{tag}{i}")]


def against(rev: str, env: dict, tmp: Path, repeats: int,
            large: list[tuple[str, Path]] = ()) -> None:
    """The start-up cases (tuner --help, simulate of the example, the warm README job) and
    the `large` jobs' searches (once each) on this tree and on git revision `rev` (a
    worktree, imported first through PYTHONPATH; the simulator's compiled kernels copied when
    their C source is the same, else built from that revision's), as ratios."""
    base = tmp / "base"
    subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", str(base), rev],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        same = subprocess.run(["git", "-C", str(REPO), "diff", "--quiet", rev, "--",
                               "tuner/sim/_kernels.c"]).returncode == 0
        for so in (REPO / "tuner" / "sim").glob("_kernels*.so"):
            target = base / "tuner" / "sim" / so.name
            if same:
                shutil.copy2(so, target)
            else:  # that revision's own C loop, built as setup.py builds it
                subprocess.run([os.environ.get("CC") or "cc", "-O3", "-shared", "-fPIC", "-o",
                                str(target), str(base / "tuner" / "sim" / "_kernels.c")],
                               check=True)
        # the installed layout (pyproject's package-dir: predictors/ is tuner.predictors ...)
        # as a tree of links, first on PYTHONPATH
        root = tmp / "base-root" / "tuner"
        root.mkdir(parents=True)
        for entry in (base / "tuner").iterdir():
            (root / entry.name).symlink_to(entry)
        for sub in ("predictors", "profilers", "runners", "reports", "search_spaces"):
            if (base / sub).is_dir() and not (root / sub).exists():
                (root / sub).symlink_to(base / sub)
        cases = [("tuner --help", lambda i: ["--help"]),
                 ("tuner simulate, example", lambda i: ["simulate", "-w", str(EXAMPLE), "-m",
                                                        "llama-3-8b", "-g", "A10"]),
                 ("README main job, warm", None)]
        old_env = {**env, "PYTHONPATH": str(root.parent),
                   "PYTHONPYCACHEPREFIX": str(tmp / "pycache-base")}
        print(f"against {rev} (same machine, same run; best of {repeats}):")
        for label, args_for in cases:
            def job(tag, args_for=args_for):  # a fresh --out per run of the README job
                return args_for or (lambda i: [*README_JOB, "--out", str(tmp / f"{tag}{i}")])
            best_of(1, job("warm-old"), old_env, tmp)  # warm both bytecode caches first
            best_of(1, job("warm-new"), env, tmp)
            then = best_of(repeats, job("old"), old_env, tmp)
            now = best_of(repeats, job("new"), env, tmp)
            print(f"  {label:28s} {fmt(*then)} -> {fmt(*now)}: x{then[0] / now[0]:.2f} faster")
        for label, path in large:  # minutes each: once
            then = best_of(1, large_case(path, tmp, f"old-{label}-"), old_env, tmp)
            now = best_of(1, large_case(path, tmp, f"new-{label}-"), env, tmp)
            print(f"  {'search, ' + label + ', 300 trials':28s} {fmt(*then)} -> {fmt(*now)}: "
                  f"x{then[0] / now[0]:.2f} faster")
    finally:
        subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(base)],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--traces", type=Path, default=REPO.parent / "shared" / "traces")
    ap.add_argument("--skip-exhaustive", action="store_true")
    ap.add_argument("--skip-full", action="store_true", help="exhaustive: the small space only")
    ap.add_argument("--exhaustive-limit-s", type=float, default=900.0)
    ap.add_argument("--against", metavar="REV", help="also time the start-up cases on this git "
                    "revision and print the ratios (issue #29 item 5)")
    ap.add_argument("--large", action="store_true",
                    help="also time `tuner search` of the 100k- and 1M-request jobs (issue #29: "
                    "targets 15 s and 30 s), against REV too with --against")
    ap.add_argument("--keep", type=Path, help="folder for the large jobs' files (reused)")
    args = ap.parse_args()
    print(f"machine: {cpu_name()}, {os.cpu_count()} cores, python {platform.python_version()}, "
          f"load average before {os.getloadavg()[0]:.2f}")
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        env = {k: v for k, v in os.environ.items()
               if k not in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "PYTHONDONTWRITEBYTECODE")}
        env["PYTHONPYCACHEPREFIX"] = str(tmp / "pycache")
        wall, cpu, rc = run([*README_JOB, "--out", str(tmp / "cold")], env, tmp)
        print(f"README main job, cold (empty bytecode cache): {fmt(wall, cpu)} (exit {rc})")
        warm = best_of(args.repeats, lambda i: [*README_JOB, "--out", str(tmp / f"warm{i}")],
                       env, tmp)
        print(f"README main job, warm: {fmt(*warm)} (best of {args.repeats})")
        print(f"tuner --help: {fmt(*best_of(args.repeats, lambda i: ['--help'], env, tmp))} "
              "(target 0.2 s)")
        sim = ["simulate", "-w", str(EXAMPLE), "-m", "llama-3-8b", "-g", "A10"]
        print(f"tuner simulate, example (400 requests): "
              f"{fmt(*best_of(args.repeats, lambda i: sim, env, tmp))} (target 0.3 s)")
        trace = args.traces / ARXIV
        if trace.is_file():
            big = ["simulate", "-w", str(trace), "-m", "llama-2-70b", "-g", "A100-80G", "--tp", "2",
                   "--scheduler", "sarathi", "--chunk-size", "512", "--max-running", "128"]
            print(f"tuner simulate, full arXiv trace (28,257 requests): "
                  f"{fmt(*best_of(args.repeats, lambda i: big, env, tmp))}")
        else:
            print(f"(no {trace}: the full-trace case is skipped)")
        if not args.skip_exhaustive:
            small = tmp / "small.yaml"
            small.write_text(SMALL_SPACE)
            cases = [("4,536", small)] + ([] if args.skip_full else [("default-space", None)])
            for label, space in cases:
                out = tmp / f"exh-{label}"
                cmd = ["search", "--workload", str(EXAMPLE), "--model", "llama-3-8b",
                       "--gpus", "A10,A40,H100", "--exhaustive", "--out", str(out)]
                if space is not None:
                    cmd += ["--space", str(space)]
                wall, cpu, rc = run(cmd, env, tmp, args.exhaustive_limit_s)
                n = stored_trials(out)
                state = "done" if rc == 0 else ("stopped at the limit" if rc == -1 else f"exit {rc}")
                print(f"--exhaustive, {label} configurations: {fmt(wall, cpu)}, {state}; "
                      f"{n:,} trials stored = {n / wall:,.0f} configurations/s")
                shutil.rmtree(out, ignore_errors=True)
        phase_readme(env, tmp, args.repeats)
        large = large_jobs(tmp, args.keep) if args.large else []
        for label, path in large:
            wall, cpu = best_of(1, large_case(path, tmp, f"large-{label}-"), env, tmp)
            target = {"100k": 15, "1M": 30}[label]
            print(f"tuner search, {label} ShareGPT-like, 300 trials: {fmt(wall, cpu)} "
                  f"(target {target} s)")
        if args.against:
            against(args.against, env, tmp, args.repeats, large)
    print(f"load average after {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
