"""Progress of a search in the terminal, and local worker processes followed by it."""

from __future__ import annotations

import math

from tuner.core.units import fmt_duration, fmt_usd


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
            TimeRemainingColumn,
        )

        # elapsed, then the time left at the pace so far ('eta -:--:--' until rich has one)
        self.prog = Progress(TextColumn("[progress.description]{task.description}"), BarColumn(),
                             MofNCompleteColumn(), TimeElapsedColumn(), TextColumn("eta"),
                             TimeRemainingColumn(), TextColumn("{task.fields[best]}"),
                             console=getattr(console, "rich", console), transient=False,
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
        best = (f"fastest {fmt_duration(self.best_t)}, cheapest {fmt_usd(self.best_c)}"
                if self.best_t < math.inf else "")
        self.prog.update(self.task, completed=completed, best=best)

    def on_trial(self, study, trial) -> None:
        """An Optuna callback (single process: counts its own trials)."""
        self.see(trial)
        if self.completed == 0:
            # a resumed (or shared) study: start from the trials before this one (not from the
            # rest of a batch that --exhaustive adds at once) that --n-trials counts (not the
            # full simulations an earlier run added beyond it); its best so far from all of them
            import optuna

            from tuner.search.records import counts_toward_budget

            earlier = [t for t in study.get_trials(
                deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
                if t.number < trial.number]
            for t in earlier:
                self.see(t)
            self.completed = sum(1 for t in earlier if counts_toward_budget(t))
        self.show(self.completed + 1)


# ---- local worker processes --------------------------------------------------------------------
def run_local_workers(study, storage: str, n_workers: int, *, n_trials: int,
                      timeout_s: float | None, seed: int, progress: SearchProgress) -> None:
    """Start `n_workers` `tuner worker` processes on the study and follow them until all exit
    (tuner.search.workers.run_local_workers: they stop with the search, Ctrl-C or SIGKILL);
    one TunerError (with the failing worker's last error line) if any fails."""
    from tuner.search.records import counts_toward_budget
    from tuner.search.workers import run_local_workers as run

    seen: set[int] = set()

    def show(done) -> None:
        for t in done:
            if t.number not in seen:
                seen.add(t.number)
                progress.see(t)
        # what --n-trials counts: not the full simulations an earlier run added beyond it
        progress.show(sum(1 for t in done if counts_toward_budget(t)))

    run(study, storage, n_workers, n_trials=n_trials, timeout_s=timeout_s, seed=seed,
        on_poll=show)
