"""Progress of a search in the terminal, and local worker processes followed by it."""

from __future__ import annotations

import math
import signal
import subprocess
import sys
import tempfile
import time

from tuner.core.errors import TunerError
from tuner.core.units import fmt_duration


# ---- progress shared by `tuner search` and `tuner worker` --------------------------------------
class SearchProgress:
    """A rich progress bar over completed trials with the best full-workload makespan and $."""

    def __init__(self, console, total: int, *, disable: bool, label: str = "trials") -> None:
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
        )

        self.prog = Progress(TextColumn("[progress.description]{task.description}"), BarColumn(),
                             MofNCompleteColumn(), TimeElapsedColumn(),
                             TextColumn("{task.fields[best]}"), console=console, transient=False,
                             disable=disable)
        self.task = self.prog.add_task(label, total=total, best="")
        self.best_t = self.best_c = math.inf
        self.completed = 0

    def __enter__(self) -> SearchProgress:
        self.prog.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self.prog.__exit__(*exc)

    def see(self, trial) -> None:
        """Take one finished trial's values into the 'best' column (full workload only)."""
        from tuner.search.records import TrialRecord

        r = TrialRecord.from_trial(trial)
        if r.level == "full" and r.values and r.values[0] < math.inf:
            self.best_t = min(self.best_t, r.values[0])
            self.best_c = min(self.best_c, r.values[1])

    def show(self, completed: int) -> None:
        self.completed = completed
        best = (f"fastest {fmt_duration(self.best_t)}, cheapest ${self.best_c:.2f}"
                if self.best_t < math.inf else "")
        self.prog.update(self.task, completed=completed, best=best)

    def on_trial(self, study, trial) -> None:
        """An Optuna callback (single process: counts its own trials)."""
        self.see(trial)
        if self.completed == 0:  # a resumed study: start from what it already holds
            import optuna

            self.completed = len(study.get_trials(
                deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))) - 1
        self.show(self.completed + 1)


# ---- local worker processes --------------------------------------------------------------------
def run_local_workers(study, storage: str, n_workers: int, *, n_trials: int,
                      timeout_s: float | None, seed: int, progress: SearchProgress) -> None:
    """Start `n_workers` `tuner worker` processes on the study and follow them until all exit;
    one TunerError (with the failing worker's last error line) if any fails."""
    import optuna

    procs, logs = [], []
    base = [sys.executable, "-m", "tuner.cli", "worker", "--study", study.study_name,
            "--storage", storage, "--n-trials", str(n_trials), "--quiet"]
    if timeout_s is not None:
        base += ["--timeout", str(timeout_s)]
    try:
        for i in range(n_workers):
            log = tempfile.TemporaryFile()
            logs.append(log)
            procs.append(subprocess.Popen(base + ["--seed", str(seed + 1 + i)],
                                          stdout=subprocess.DEVNULL, stderr=log))
        seen: set[int] = set()
        while True:
            running = [p for p in procs if p.poll() is None]
            done = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
            for t in done:
                if t.number not in seen:
                    seen.add(t.number)
                    progress.see(t)
            progress.show(len(done))
            if not running:
                break
            time.sleep(0.5)
    finally:
        for p in procs:  # Ctrl-C or an error here: stop the workers, keep their finished trials
            if p.poll() is None:
                p.send_signal(signal.SIGINT)
        for p in procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
    failed = [(i, p.returncode) for i, p in enumerate(procs) if p.returncode != 0]
    if failed:
        i, rc = failed[0]
        logs[i].seek(0)
        lines = [ln for ln in logs[i].read().decode(errors="replace").splitlines() if ln.strip()]
        raise TunerError(f"{len(failed)} of {n_workers} workers failed; worker {i} exited with "
                         f"{rc}: {lines[-1] if lines else 'no output'}")


