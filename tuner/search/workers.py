"""Workers of a shared study (`tuner worker`, `tuner search --workers N`): the search rebuilt
from the study's metadata, run until the study has its trials."""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import optuna

from predictors.protocol import CostModel
from tuner.core.catalog import GPU, ModelSpec
from tuner.core.config import ServingConfig
from tuner.core.errors import TunerError
from tuner.search.evaluator import Evaluator
from tuner.search.loop import optimize
from tuner.search.settings import SearchSettings, make_sampler
from tuner.search.storage import StudySetup, load_study, setup_from_study


@dataclass
class WorkerJob:
    """A worker attached to a shared study, ready to run (see :func:`connect_worker`)."""

    study: optuna.Study
    setup: StudySetup
    settings: SearchSettings
    evaluator: Evaluator

    def run(self, on_trial: Callable | None = None) -> optuna.Study:
        """Trials until the study has its n_trials complete ones (or the timeout)."""
        optimize(self.study, self.evaluator, self.settings, shared=True, on_trial=on_trial)
        return self.study


def study_cost_model_for(meta: dict, model: ModelSpec, gpus: dict[str, GPU], *,
                         study_name: str, profile: str | Path | None = None,
                         profile_mode: str | None = None):
    """The cost models a study was searched with: its `--profile` folder (stored in the
    metadata; `profile` overrides the path, e.g. a copy on another machine), or None for the
    default (shipped profile or roofline)."""
    from tuner.sim.simulator import profile_cost_model_for

    path = profile or meta.get("profile")
    if path is not None and profile is None and not Path(path).exists():
        raise TunerError(f"Study {study_name!r} was searched with the profile folder {path}, "
                         "which is not on this machine; pass --profile DIR with a copy of it.")
    return profile_cost_model_for(model, path,
                                  profile_mode=profile_mode or meta.get("profile_mode") or "auto",
                                  engine_version=meta.get("engine_version"),
                                  check_gpu=next(iter(gpus.values())))


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
            if study.user_attrs.get("metadata"):
                break
            problem = TunerError(f"Study {study_name!r} in {storage} has no search metadata; "
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
        cost_model_for = study_cost_model_for(setup.metadata, setup.model, setup.gpus,
                                              study_name=study_name, profile=profile)
    ev = Evaluator(setup.workload, setup.model, setup.gpus, setup.space,
                   sample_fraction=settings.sample_fraction, cost_model_for=cost_model_for)
    return WorkerJob(study=study, setup=setup, settings=settings, evaluator=ev)


