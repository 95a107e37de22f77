"""`tuner worker` and `tuner results`: more processes for one study, and a finished study again.

A study created by ``tuner search --storage URL --study NAME`` carries everything a worker needs
in its user attributes (workload token counts, model, GPU specs and prices, search space,
sampler settings; see :func:`tuner.search.storage.study_metadata`), so a worker on another machine needs
only the storage URL and the study name::

    tuner search -w examples/arxiv.jsonl -m llama-3-8b --gpus A10,A40 \\
        --storage postgresql://user:pw@db/tuner --study arxiv --n-trials 2000 --workers 4
    tuner worker --storage postgresql://user:pw@db/tuner --study arxiv     # on more machines
    tuner results --storage postgresql://user:pw@db/tuner --study arxiv --out arxiv-out
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from tuner.cli.app import JsonOpt, StorageOpt, StoredStudyOpt, StoredWorkloadOpt
from tuner.cli.app import StoredProfileOpt as ProfileOpt
from tuner.core.errors import TunerError
from tuner.core.units import plural

StudyOpt = Annotated[str, typer.Option("--study", help="Study name.")]


# ---- commands ----------------------------------------------------------------------------------
def register(app: typer.Typer) -> None:
    app.command("worker")(worker)
    app.command("results")(results)


def worker(
    study: StudyOpt,
    storage: Annotated[str, typer.Option("--storage", help="Optuna storage URL of the study "
                       "(postgresql://user:password@host/db; on the search's machine its "
                       "journal:///OUT/study.journal or sqlite:///...).")],
    n_trials: Annotated[int | None, typer.Option(help="Stop when the study has this many "
                        "trials, counted over all its workers and --resume (default: the search's "
                        "--n-trials).")] = None,
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
    from tuner.search.workers import die_with_parent

    die_with_parent()  # a worker of `tuner search --workers N` never outlives that search
    import optuna

    from tuner.cli.app import err
    from tuner.cli.progress import SearchProgress
    from tuner.cli.search import check_timeout
    from tuner.search import connect_worker
    from tuner.search.records import counts_toward_budget

    check_timeout(timeout)
    if n_trials is not None and n_trials < 1:
        raise TunerError("--n-trials must be >= 1.")
    if not 0 <= wait < float("inf"):  # NaN too: it compares false with everything
        raise TunerError(f"--wait must be a finite number of seconds >= 0, got {wait:g}.")
    job = connect_worker(study, storage, n_trials=n_trials, timeout_s=timeout, seed=seed,
                         workload_path=workload, wait_s=wait, profile=profile)
    mine: list[int] = []
    with SearchProgress(err, job.settings.n_trials, disable=quiet or as_json,
                        label=f"worker on {study}") as prog:
        def on_trial(st, trial):
            mine.append(trial.number)
            prog.on_trial(st, trial)

        st = job.run(on_trial)
    # what --n-trials counts, as the target does (not the search's own full simulations beyond it)
    complete = sum(1 for t in st.get_trials(deepcopy=False,
                                            states=(optuna.trial.TrialState.COMPLETE,))
                   if counts_toward_budget(t))
    if as_json:
        print(json.dumps({"study": st.study_name, "trials": mine, "study_complete": complete,
                          "target": job.settings.n_trials}))
    elif not quiet:
        err.print(f"worker ran {plural(len(mine), 'trial')}; study {st.study_name!r} has {complete} of "
                  f"its {job.settings.n_trials} trials", markup=False)


def results(
    study: StoredStudyOpt = None,
    storage: StorageOpt = None,
    out_dir: Annotated[Path | None, typer.Option("--out", help="Folder for the report, exports "
                       "and results.json (default: tuner-out).")] = None,
    workload: StoredWorkloadOpt = None,
    profile: ProfileOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Print and export a study's results again: Pareto front, best config per GPU, parameter
    importances, report, vLLM configs, results.json (as `tuner search` writes them).

    Example: tuner results --study arxiv --storage postgresql://tuner:pw@db:5432/tuner --out o
    """
    from tuner.cli.search import check_writable, finish_search
    from tuner.search import load_study, setup_from_study, study_cost_model_for

    st = load_study(study, storage, out_dir=out_dir)
    setup = setup_from_study(st, workload_path=workload)
    cost_model_for = study_cost_model_for(  # re-simulated winners: the search's cost models
        setup.meta, setup.model, setup.gpus, study_name=st.study_name, profile=profile)
    out = out_dir or Path("tuner-out")
    check_writable(out)
    finish_search(st, setup.workload, setup.model, setup.gpus, out, as_json,
                   cost_model_for=cost_model_for)
