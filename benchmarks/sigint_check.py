"""Ctrl-C at random moments of the README search, then --resume (issue #17's acceptance check).

Runs the README search uninterrupted (the reference; after an untimed first run that may
compile the simulator), then N times more, each sent one SIGINT at a random moment between
0.5 s and 95 % of the search's wall time (the reference's, or the last search that finished
before its signal: such a draw is drawn again, and counted), and checks:

* the exit status is 130 and stderr's only line about it is the one ``interrupted ...`` line
  (last, exactly once; no traceback, no ``error:`` line, no "Exception ignored");
* no half-written output: the --out folder holds nothing, the study journal alone, or the
  journal and the reference's complete set of output files (the signal came after they were
  written);
* ``--resume`` then exits 0 and writes the same Pareto front as the reference (configuration,
  makespan and $ of every point).

Prints one row per run and a summary; exits 1 when any run fails a check.

    python benchmarks/sigint_check.py                 # 20 runs (about 8 minutes on 2 cores)
    python benchmarks/sigint_check.py --runs 3 --seed 1
    # issue #26 item 8: NSGA-II over 2,000 trials, killed (SIGKILL) or interrupted (SIGINT)
    python benchmarks/sigint_check.py --runs 6 --n-trials 2000 --signal KILL

With --signal KILL the process cannot answer: the exit is -9 and stderr is not checked (the
journal and the outputs still are, and --resume must give the reference's front).
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SEARCH = [sys.executable, "-m", "tuner.cli", "search", "--workload",
          str(ROOT / "examples" / "arxiv.jsonl"), "--model", "llama-3-8b", "--gpus", "A10,A40"]
JOURNAL = "study.journal"


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # a child of an ignoring parent still hears it


#: extra search options of this check (--n-trials)
EXTRA: list[str] = []


def search(out: Path, *extra: str, timeout_s: float = 600) -> tuple[subprocess.CompletedProcess,
                                                                     float]:
    t0 = time.monotonic()
    r = subprocess.run([*SEARCH, *EXTRA, "--out", str(out), *extra], capture_output=True,
                       text=True,
                       timeout=timeout_s, cwd=ROOT, preexec_fn=_default_sigint)
    return r, time.monotonic() - t0


def pareto_front(out: Path) -> list[tuple]:
    """The front of a finished search: (configuration, makespan s, $) per point, sorted."""
    doc = json.loads((out / "results.json").read_text())
    return sorted((json.dumps(p["config"], sort_keys=True), p["metrics"]["makespan_s"],
                   p["metrics"]["cost_usd"]) for p in doc["pareto"])


def stderr_problem(stderr: str) -> str | None:
    """Why stderr is not 'progress, then the one interrupted line', or None."""
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    if not lines:
        return "no line"
    for bad in ("Traceback", "Exception ignored", "error:", "KeyboardInterrupt"):
        if bad in stderr:
            return f"{bad!r} on stderr"
    said = [ln for ln in lines if ln.startswith("interrupted")]
    if len(said) != 1:
        return f"{len(said)} 'interrupted' lines"
    if not lines[-1].startswith("interrupted"):
        return f"last line {lines[-1][:60]!r}"
    return None


def output_problem(out: Path, complete_set: set[str]) -> str | None:
    """Why the --out folder holds half-written output, or None."""
    names = {p.name for p in out.iterdir()} if out.is_dir() else set()
    if names <= {JOURNAL}:  # interrupted before the outputs (or even before the study)
        return None
    if names == complete_set:
        for name in names - {JOURNAL}:
            if (out / name).stat().st_size == 0:
                return f"{name} is empty"
        json.loads((out / "results.json").read_text())  # complete JSON or it raises
        return None
    return f"files {sorted(names)}"


def complete_trials(out: Path) -> int:
    import optuna

    from tuner.search import load_study

    try:
        study = load_study(None, out_dir=out)
    except Exception:  # noqa: BLE001 - interrupted before the study existed
        return 0
    return len(study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)))


@dataclass
class Run:
    number: int
    delay_s: float
    exit_code: int | None = None
    trials_done: int = 0
    stderr_problem: str | None = None
    output_problem: str | None = None
    resume_exit: int | None = None
    resume_s: float = 0.0
    same_front: bool = False
    stderr_tail: str = ""  # the end of stderr when it is not right
    expected_exit: int = 130  # SIGINT: 130; SIGKILL: -9

    @property
    def ok(self) -> bool:
        return (self.exit_code == self.expected_exit and self.stderr_problem is None
                and self.output_problem is None and self.resume_exit == 0 and self.same_front)


def interrupt_once(run: Run, out: Path, ref_front: list, complete_set: set[str],
                   sig: signal.Signals = signal.SIGINT) -> tuple[Run | None, float]:
    """One interrupted search and its --resume, and the search's wall time; None when the
    search finished first."""
    t0 = time.monotonic()
    run.expected_exit = 130 if sig == signal.SIGINT else -int(sig)
    proc = subprocess.Popen([*SEARCH, *EXTRA, "--out", str(out)], cwd=ROOT,
                            stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=_default_sigint)
    try:
        time.sleep(run.delay_s)
        sent = proc.poll() is None
        if sent:
            proc.send_signal(sig)
        _stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    wall_s = time.monotonic() - t0
    run.exit_code = proc.returncode
    if proc.returncode == 0 and output_problem(out, complete_set) is None:
        return None, wall_s  # done before the signal (or ignored it while exiting)
    run.stderr_problem = (("signal not sent" if not sent else None) if sig != signal.SIGINT
                          else stderr_problem(stderr) if sent else "signal not sent")
    run.stderr_tail = "\n".join(stderr.splitlines()[-15:]) if run.stderr_problem else ""
    run.output_problem = output_problem(out, complete_set)
    run.trials_done = complete_trials(out)
    r, run.resume_s = search(out, "--resume")
    run.resume_exit = r.returncode
    run.same_front = r.returncode == 0 and pareto_front(out) == ref_front
    return run, wall_s


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0, help="seed of the random moments")
    ap.add_argument("--min-delay", type=float, default=0.5, help="earliest SIGINT, seconds")
    ap.add_argument("--keep", type=Path, default=None, help="keep the run folders here")
    ap.add_argument("--n-trials", type=int, default=None,
                    help="the search's --n-trials (default the README search's)")
    ap.add_argument("--signal", choices=("INT", "KILL"), default="INT")
    args = ap.parse_args(argv)
    EXTRA[:] = [] if args.n_trials is None else ["--n-trials", str(args.n_trials)]
    sig = signal.SIGINT if args.signal == "INT" else signal.SIGKILL
    rng = random.Random(args.seed)
    root = args.keep or Path(tempfile.mkdtemp(prefix="sigint-check-"))
    root.mkdir(parents=True, exist_ok=True)
    try:
        ref = root / "reference"
        for _ in range(2):  # the first run may compile the simulator's step loop: not timed
            shutil.rmtree(ref, ignore_errors=True)
            r, ref_s = search(ref)
        if r.returncode != 0:
            print(r.stderr, file=sys.stderr)
            return 1
        ref_front = pareto_front(ref)
        complete_set = {p.name for p in ref.iterdir()}
        print(f"reference: {ref_s:.1f} s, {complete_trials(ref)} trials, Pareto front of "
              f"{len(ref_front)} points; SIG{args.signal} between {args.min_delay:.1f} s and "
              f"{0.95 * ref_s:.1f} s")
        print(f"{'run':>3} {'SIG' + args.signal + ' at':>9} {'exit':>4} {'trials':>6}  {'stderr':<22} "
              f"{'outputs':<22} {'resume':>6} {'resume s':>8}  same front")
        runs, late = [], 0
        end_s = ref_s  # how long a search takes now (the machine's load changes it)
        for i in range(args.runs):
            out = root / f"run{i:02d}"
            while True:  # a search that finished before its signal is drawn again (counted)
                shutil.rmtree(out, ignore_errors=True)
                delay_s = rng.uniform(args.min_delay, max(args.min_delay, 0.95 * end_s))
                run, wall_s = interrupt_once(Run(i, delay_s), out, ref_front, complete_set,
                                             sig)
                if run is not None:
                    break
                late += 1
                end_s = wall_s
            runs.append(run)
            print(f"{i:>3} {run.delay_s:>8.2f}s {run.exit_code!s:>4} {run.trials_done:>6}  "
                  f"{run.stderr_problem or 'one line':<22.22} "
                  f"{run.output_problem or 'none half-written':<22.22} "
                  f"{run.resume_exit!s:>6} {run.resume_s:>8.1f}  "
                  f"{'yes' if run.same_front else 'NO'}", flush=True)
            if run.stderr_tail:
                print("    " + run.stderr_tail.replace("\n", "\n    "), flush=True)
        n = len(runs)
        print(f"summary: exit {runs[0].expected_exit if runs else 130} in "
              f"{sum(r.exit_code == r.expected_exit for r in runs)}/{n}; one line, no "
              f"traceback in {sum(r.stderr_problem is None for r in runs)}/{n}; no half-written "
              f"output in {sum(r.output_problem is None for r in runs)}/{n}; --resume exit 0 in "
              f"{sum(r.resume_exit == 0 for r in runs)}/{n}; same Pareto front in "
              f"{sum(r.same_front for r in runs)}/{n}; interrupted after 0-"
              f"{max(r.trials_done for r in runs)} trials; {late} draw(s) after the "
              "search had finished drawn again")
        return 0 if all(r.ok for r in runs) else 1
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
