"""Workers of a shared study (`tuner worker`, `tuner search --workers N`): the search rebuilt
from the study's metadata, run until the study has its trials; the local worker processes of
`tuner search --workers N`, which never outlive the search (:class:`LocalWorkers`)."""

from __future__ import annotations

import ctypes
import dataclasses
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import optuna

from tuner.core.catalog import GPU, ModelSpec
from tuner.core.config import ServingConfig
from tuner.core.engine_defaults import DEFAULT_ENTRY_POINT
from tuner.core.errors import TunerError
from tuner.core.secrets import mask_secrets
from tuner.predictors.protocol import CostModel
from tuner.search.evaluator import Evaluator
from tuner.search.loop import optimize
from tuner.search.meta import StudyMeta, study_meta
from tuner.search.settings import SearchSettings, make_sampler
from tuner.search.storage import (
    StudyHold,
    StudySetup,
    fail_stale_trials,
    load_study,
    setup_from_study,
)

PARENT_PID_ENV = "TUNER_PARENT_PID"  # set for the workers `tuner search --workers N` starts
PR_SET_PDEATHSIG = 1  # linux/prctl.h
STOP_GRACE_S = 10.0  # a stopped worker finishes its simulation step, then SIGKILL
POLL_S = 0.5  # how often the search looks at its workers and the study


# ---- a local worker dies with the search that started it ---------------------------------------
def _parent_pid() -> int | None:
    value = os.environ.get(PARENT_PID_ENV)
    return int(value) if value and value.isdigit() else None


def parent_gone() -> bool:
    """True in a local worker whose search has exited (its parent changed: re-parented)."""
    want = _parent_pid()
    return want is not None and os.getppid() != want


def die_with_parent() -> None:
    """In a worker started by `tuner search --workers N` (PARENT_PID_ENV set): get SIGINT
    when the search dies, SIGKILL included (Linux: prctl PR_SET_PDEATHSIG; elsewhere the
    worker polls :func:`parent_gone` between trials); KeyboardInterrupt at once when the search
    is gone already. A no-op in a `tuner worker` started by hand."""
    if _parent_pid() is None:
        return
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGINT), 0, 0, 0)
        except (OSError, AttributeError):  # no prctl: the poll between trials remains
            pass
    if parent_gone():  # it died before the request took effect
        raise KeyboardInterrupt


@dataclass
class WorkerJob:
    """A worker attached to a shared study, ready to run (see :func:`connect_worker`)."""

    study: optuna.Study
    setup: StudySetup
    settings: SearchSettings
    evaluator: Evaluator

    def run(self, on_trial: Callable | None = None) -> optuna.Study:
        """Trials until the study has its n_trials (or the timeout). A worker that finds no
        other process on the study first fails the RUNNING trials dead workers left
        (storage.fail_stale_trials); a local worker whose search is gone stops."""
        def after_trial(study, trial):
            if on_trial is not None:
                on_trial(study, trial)
            if parent_gone():
                raise KeyboardInterrupt

        with StudyHold(self.settings.storage) as hold:
            if hold.alone is not False:
                fail_stale_trials(self.study, hold.alone)
            hold.share()
            optimize(self.study, self.evaluator, self.settings, shared=True,
                     on_trial=after_trial)
        return self.study


def study_cost_model_for(meta: StudyMeta | dict, model: ModelSpec, gpus: dict[str, GPU], *,
                         study_name: str, profile: str | Path | None = None,
                         profile_mode: str | None = None):
    """The cost models a study was searched with (predictors.sources.cost_model_for): its
    `--profile` folder (stored in the metadata; `profile` overrides the path, e.g. a copy on
    another machine), --profile-mode and --engine-version."""
    from tuner.predictors.sources import cost_model_for

    meta = StudyMeta.of(meta)
    path = profile or meta.profile
    if path is not None and profile is None and not Path(path).exists():
        raise TunerError(f"Study {study_name!r} was searched with the profile folder {path}, "
                         "which is not on this machine; pass --profile DIR with a copy of it.")
    return cost_model_for(model, path, profile_mode or meta.profile_mode or "auto",
                          meta.engine_version, check_gpu=next(iter(gpus.values())),
                          entry_point=meta.entry_point or DEFAULT_ENTRY_POINT,
                          num_scheduler_steps=meta.num_scheduler_steps,
                          log_requests=False if meta.disable_log_requests else None)


def connect_worker(study_name: str, storage: str, *, n_trials: int | None = None,
                   timeout_s: float | None = None, seed: int | None = None,
                   workload_path: str | Path | None = None,
                   cost_model_for: Callable[[GPU, ServingConfig], CostModel] | None = None,
                   profile: str | Path | None = None, wait_s: float = 0.0) -> WorkerJob:
    """A worker of a shared study: the search rebuilt from the study's metadata. It runs until
    the study has n_trials (the search's, or `n_trials`) complete trials. `wait_s`: how long to
    wait for the study to appear (workers started before the search). Cost models: the
    search's `--profile` folder (from the study; `profile`: a copy of it on this machine),
    unless `cost_model_for` is given."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            study = load_study(study_name, storage)
            if study_meta(study).has_search:
                break
            problem = TunerError(f"Study {study_name!r} in {mask_secrets(storage)} has no search metadata; "
                                 "create it with `tuner search --storage URL --study NAME`.")
        except TunerError as exc:
            problem = exc
        if time.monotonic() >= deadline:
            raise problem
        time.sleep(0.5)
    setup = setup_from_study(study, workload_path=workload_path)
    s = setup.settings
    if s.exhaustive:
        raise TunerError(f"Study {study_name!r} is an exhaustive grid; it is run by `tuner "
                         "search --exhaustive`, not by workers.")
    # Each worker draws from its own seed, else all would propose the same configurations.
    seed = seed if seed is not None else int.from_bytes(os.urandom(4), "little")
    settings = dataclasses.replace(s, storage=storage, seed=seed,
                                   n_trials=n_trials if n_trials is not None else s.n_trials,
                                   timeout_s=timeout_s if timeout_s is not None else s.timeout_s)
    study.sampler = make_sampler(settings)
    if cost_model_for is None:  # the search's own measured profile, if it had one
        cost_model_for = study_cost_model_for(setup.meta, setup.model, setup.gpus,
                                              study_name=study_name, profile=profile)
    ev = Evaluator(setup.workload, setup.model, setup.gpus, setup.space,
                   sample_fraction=settings.sample_fraction, cost_model_for=cost_model_for,
                   defer=settings.defer_candidates, **setup.meta.sim_options())
    return WorkerJob(study=study, setup=setup, settings=settings, evaluator=ev)




# ---- the local workers of `tuner search --workers N` -------------------------------------------
class LocalWorkers:
    """`n_workers` `tuner worker` processes on one study. Each runs in its own process group
    (a terminal's Ctrl-C reaches the search only, which stops them: SIGINT to each group,
    SIGKILL after STOP_GRACE_S) and dies with the search even when that is SIGKILLed
    (:func:`die_with_parent`). Leaving the with-block stops those still running; their
    finished trials stay in the study."""

    def __init__(self, study_name: str, storage: str, n_workers: int, *, n_trials: int,
                 timeout_s: float | None, seed: int) -> None:
        self.command = [sys.executable, "-m", "tuner.cli", "worker", "--study", study_name,
                        "--storage", storage, "--n-trials", str(n_trials), "--quiet"]
        if timeout_s is not None:
            self.command += ["--timeout", str(timeout_s)]
        self.n_workers, self.seed = n_workers, seed
        self.procs: list[subprocess.Popen] = []
        self.logs: list = []

    def __enter__(self) -> LocalWorkers:
        env = {**os.environ, PARENT_PID_ENV: str(os.getpid())}
        try:
            for i in range(self.n_workers):
                log = tempfile.TemporaryFile()
                self.logs.append(log)
                seed = (self.seed + 1 + i) % 2**32  # a seed in range after --seed 2**32 - 1
                self.procs.append(subprocess.Popen(
                    self.command + ["--seed", str(seed)], env=env,
                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log,
                    process_group=0))
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def running(self) -> list[subprocess.Popen]:
        return [p for p in self.procs if p.poll() is None]

    def stop(self) -> None:
        """SIGINT to every running worker's group, SIGKILL to those still there after
        STOP_GRACE_S (or at a second Ctrl-C, which is raised again afterwards)."""
        alive = self.running()
        for p in alive:
            _signal_group(p, signal.SIGINT)
        deadline = time.monotonic() + STOP_GRACE_S
        interrupted = False
        try:
            for p in alive:
                p.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
        except KeyboardInterrupt:
            interrupted = True
        for p in self.running():
            _signal_group(p, signal.SIGKILL)
            p.wait()
        if interrupted:
            raise KeyboardInterrupt

    def failure(self) -> str | None:
        """One line about the first worker that failed, None when all succeeded."""
        failed = [(i, p.returncode) for i, p in enumerate(self.procs) if p.returncode != 0]
        if not failed:
            return None
        i, rc = failed[0]
        self.logs[i].seek(0)
        lines = [ln for ln in self.logs[i].read().decode(errors="replace").splitlines()
                 if ln.strip()]
        return (f"{len(failed)} of {self.n_workers} workers failed; worker {i} exited with "
                f"{rc}: {lines[-1] if lines else 'no output'}")


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)  # the worker leads its own group
    except ProcessLookupError:  # exited meanwhile
        pass


def run_local_workers(study: optuna.Study, storage: str, n_workers: int, *, n_trials: int,
                      timeout_s: float | None, seed: int,
                      on_poll: Callable[[list], None] | None = None) -> None:
    """Run `n_workers` local workers on the (prepared) study until all exit, holding the study
    meanwhile (so none of them takes another's RUNNING trial for a dead worker's); `on_poll`
    gets the study's COMPLETE trials every POLL_S. One TunerError if a worker failed; Ctrl-C
    stops them all (KeyboardInterrupt raised again)."""
    with StudyHold(storage) as hold:
        hold.share()
        with LocalWorkers(study.study_name, storage, n_workers, n_trials=n_trials,
                          timeout_s=timeout_s, seed=seed) as pool:
            while True:
                running = pool.running()
                if on_poll is not None:
                    on_poll(study.get_trials(deepcopy=False,
                                             states=(optuna.trial.TrialState.COMPLETE,)))
                if not running:
                    break
                time.sleep(POLL_S)
    problem = pool.failure()
    if problem is not None:
        raise TunerError(problem)
