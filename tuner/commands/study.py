"""`tuner worker` and `tuner results`: more processes for one study, and a finished study again.

A study created by ``tuner search --storage URL --study NAME`` carries everything a worker needs
in its user attributes (workload token counts, model, GPU specs and prices, search space,
sampler settings; see :func:`tuner.search.study_metadata`), so a worker on another machine needs
only the storage URL and the study name::

    tuner search -w examples/arxiv.jsonl -m llama-3-8b --gpus A10,A40 \\
        --storage postgresql://user:pw@db/tuner --study arxiv --n-trials 2000 --workers 4
    tuner worker --storage postgresql://user:pw@db/tuner --study arxiv     # on more machines
    tuner results --storage postgresql://user:pw@db/tuner --study arxiv --out arxiv-out
"""

from __future__ import annotations

import json
import math
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Annotated

import typer

from tuner.errors import TunerError

StudyOpt = Annotated[str, typer.Option("--study", help="Study name.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable JSON on stdout.")]
ProfileOpt = Annotated[Path | None, typer.Option("--profile", help="A copy of the profile/fit "
                       "folder the search used (default: the path stored in the study).")]


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
        fid = (trial.user_attrs.get("fidelity") or {}).get("level", "full")
        if fid == "full" and trial.values and trial.values[0] < math.inf:
            self.best_t = min(self.best_t, trial.values[0])
            self.best_c = min(self.best_c, trial.values[1])

    def show(self, completed: int) -> None:
        from tuner.cli import _fmt_s

        self.completed = completed
        best = (f"fastest {_fmt_s(self.best_t)}, cheapest ${self.best_c:.2f}"
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


# ---- commands ----------------------------------------------------------------------------------
def register(app: typer.Typer) -> None:
    app.command("worker")(worker)
    app.command("results")(results)


def worker(
    study: StudyOpt,
    storage: Annotated[str, typer.Option("--storage", help="Optuna storage URL of the study "
                       "(postgresql://user:password@host/db, or the search's sqlite:///...).")],
    n_trials: Annotated[int | None, typer.Option(help="Stop when the study has this many "
                        "complete trials (default: the search's --n-trials).")] = None,
    timeout: Annotated[float | None, typer.Option(help="Stop after this many seconds.")] = None,
    seed: Annotated[int | None, typer.Option(help="This worker's sampler seed (default: "
                    "random; workers need different seeds).")] = None,
    workload: Annotated[Path | None, typer.Option("--workload", help="Read the workload from "
                        "this file instead of the study (it must hold the same requests).")] = None,
    wait: Annotated[float, typer.Option(help="Seconds to wait for the study to be created "
                    "(workers started before the search).")] = 0.0,
    profile: ProfileOpt = None,
    quiet: Annotated[bool, typer.Option(help="No progress output.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Run trials of a shared study (started with `tuner search --storage URL --study NAME`)
    until it has its trials; start any number of these, on any machines.

    Example: tuner worker --study arxiv --storage postgresql://tuner:pw@db:5432/tuner
    """
    import optuna

    from tuner.cli import err
    from tuner.search import connect_worker

    job = connect_worker(study, storage, n_trials=n_trials, timeout_s=timeout, seed=seed,
                         workload_path=workload, wait_s=wait, profile=profile)
    mine: list[int] = []
    with SearchProgress(err, job.settings.n_trials, disable=quiet or as_json,
                        label=f"worker on {study}") as prog:
        def on_trial(st, trial):
            mine.append(trial.number)
            prog.on_trial(st, trial)

        st = job.run(on_trial)
    complete = len(st.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)))
    if as_json:
        print(json.dumps({"study": st.study_name, "trials": mine, "study_complete": complete,
                          "target": job.settings.n_trials}))
    elif not quiet:
        err.print(f"worker ran {len(mine)} trial(s); study {st.study_name!r} has {complete} "
                  "complete", markup=False)


def results(
    study: Annotated[str | None, typer.Option("--study", help="Study name (default: the only "
                     "study in the storage).")] = None,
    storage: Annotated[str | None, typer.Option("--storage", help="Optuna storage URL (default: "
                       "sqlite:///OUT/study.db).")] = None,
    out_dir: Annotated[Path | None, typer.Option("--out", help="Folder for the report, exports "
                       "and results.json (default: tuner-out).")] = None,
    workload: Annotated[Path | None, typer.Option("--workload", help="Read the workload from "
                        "this file instead of the study.")] = None,
    profile: ProfileOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Print and export a study's results again: Pareto front, best config per GPU, parameter
    importances, report, vLLM configs, results.json (as `tuner search` writes them).

    Example: tuner results --study arxiv --storage postgresql://tuner:pw@db:5432/tuner --out o
    """
    from tuner.cli import _check_writable, _finish_search
    from tuner.commands.exports import load_stored_study
    from tuner.search import setup_from_study, storage_url, study_cost_model_for

    st = load_stored_study(study, storage_url(storage) if storage else None, out_dir)
    setup = setup_from_study(st, workload_path=workload)
    cost_model_for = study_cost_model_for(  # re-simulated winners: the search's cost models
        setup.metadata, setup.model, setup.gpus, study_name=st.study_name, profile=profile)
    out = out_dir or Path("tuner-out")
    _check_writable(out)
    _finish_search(st, setup.workload, setup.model, setup.gpus, out, as_json,
                   cost_model_for=cost_model_for)
