"""Optuna multi-objective search (makespan, $) over GPU type x the knobs of a search space.

tuner composes Optuna's study / sampler / storage and writes no search algorithm of its own.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import optuna

from tuner.catalog import GPU, ModelSpec
from tuner.config import ServingConfig
from tuner.errors import TunerError
from tuner.simulator import CostModel, InfeasibleConfig, check_feasible, simulate
from tuner.space import SearchSpace
from tuner.workload import Workload

OBJECTIVES = ("makespan_s", "cost_usd")
GRID_CHECK_LIMIT = 20_000  # assert_some_gpu_fits checks every point of spaces up to this size
# Reference points enqueued first so the front always contains the engines' own defaults:
# vLLM V1's offline defaults (LLM class: max_num_batched_tokens 8192, max_num_seqs 256) and
# Sarathi-Serve's chunk 512 (seed 004 §5).
PRESETS = ({"chunk_size": 8192, "max_running": 256}, {"chunk_size": 512, "max_running": 128})


@dataclass(frozen=True)
class SearchSettings:
    n_trials: int = 150
    timeout_s: float | None = None
    seed: int = 0
    sampler: str = "tpe"  # "tpe" | "nsga2"
    storage: str | None = None  # Optuna storage URL; None: in-memory
    study_name: str = "tuner"
    resume: bool = False


def make_sampler(settings: SearchSettings) -> optuna.samplers.BaseSampler:
    if settings.sampler == "tpe":
        return optuna.samplers.TPESampler(seed=settings.seed, multivariate=True,
                                          n_startup_trials=20)
    if settings.sampler == "nsga2":
        return optuna.samplers.NSGAIISampler(seed=settings.seed)
    raise TunerError(f"Unknown sampler {settings.sampler!r}; choose tpe or nsga2.")


def check_study_settings(settings: SearchSettings) -> None:
    """Fail early (before any progress output) on a bad sampler, an unreachable storage, or a
    study that already exists without --resume."""
    make_sampler(settings)
    storage = settings.storage
    if storage is not None and not settings.resume:
        try:
            existing = optuna.study.get_all_study_names(storage)
        except Exception as exc:  # noqa: BLE001 - storage URLs fail in many driver-specific ways
            raise TunerError(f"Cannot open storage {storage}: {exc}") from None
        if settings.study_name in existing:
            raise TunerError(
                f"Study {settings.study_name!r} already exists in {storage}; pass --resume to "
                "continue it, or --study NAME / --out DIR for a new one.")


def open_study(settings: SearchSettings, *, metadata: dict | None = None) -> optuna.Study:
    """Create the study, or load it with --resume; refuses to silently mix two searches."""
    # ERROR: on Ctrl-C Optuna would log the interrupted trial with a traceback at WARNING.
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    check_study_settings(settings)  # a bad --sampler fails before the storage is touched
    sampler = make_sampler(settings)
    storage = settings.storage
    try:
        study = optuna.create_study(
            study_name=settings.study_name, storage=storage, directions=["minimize", "minimize"],
            sampler=sampler, load_if_exists=settings.resume)
    except Exception as exc:  # noqa: BLE001
        raise TunerError(f"Cannot create study in {storage}: {exc}") from None
    n_old = len(study.get_trials(deepcopy=False))
    if settings.resume and n_old:
        # A fresh sampler with the same seed would replay the first run's random draws, and
        # every replayed draw is a duplicate that uses up a trial; continue from a new seed.
        study.sampler = make_sampler(dataclasses.replace(settings, seed=settings.seed + n_old))
    if metadata and not study.user_attrs.get("metadata"):
        study.set_user_attr("metadata", metadata)
    return study


def _config_from_params(params: dict, space: SearchSpace) -> ServingConfig:
    return ServingConfig(**space.fixed, **params)


def _enqueue_presets(study: optuna.Study, space: SearchSpace, gpu_names: list[str]) -> None:
    for preset in PRESETS:
        for gpu in gpu_names:
            params = {"gpu": gpu}
            for name, values in space.knobs.items():
                want = preset.get(name)
                if want is None or want not in values:
                    want = max(values) if name.endswith("_bits") else values[len(values) // 2]
                params[name] = want
            study.enqueue_trial(params, skip_if_exists=True)


def run_search(workload: Workload, model: ModelSpec, gpus: dict[str, GPU], space: SearchSpace,
               settings: SearchSettings, *,
               cost_model_for: Callable[[GPU, ServingConfig], CostModel] | None = None,
               on_trial: Callable[[optuna.Study, optuna.trial.FrozenTrial], None] | None = None,
               metadata: dict | None = None) -> optuna.Study:
    """Run (or resume) the study until `n_trials` trials are complete or the timeout hits."""
    gpu_names = list(gpus)
    # results.trial_records rebuilds each config from the study's metadata["fixed"].
    metadata = {"fixed": dict(space.fixed), **(metadata or {})}
    study = open_study(settings, metadata=metadata)
    done = {}
    for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)):
        done[_key(t.params)] = (t.values, t.user_attrs)
    if not done:
        _enqueue_presets(study, space, gpu_names)

    def objective(trial: optuna.Trial) -> tuple[float, float]:
        params = {"gpu": trial.suggest_categorical("gpu", gpu_names)}
        for name, values in space.knobs.items():
            params[name] = trial.suggest_categorical(name, values)
        key = _key(params)
        if key in done:  # identical config already simulated: reuse, do not re-simulate
            values, attrs = done[key]
            for k, v in attrs.items():
                trial.set_user_attr(k, v)
            trial.set_user_attr("duplicate", True)
            trial.set_constraint("fits", attrs["constraint"][0])
            return tuple(values)
        config = _config_from_params(params, space)
        gpu = gpus[params["gpu"]]
        try:
            cm = cost_model_for(gpu, config) if cost_model_for else None
            res = simulate(workload, model, gpu, config, cm)
        except InfeasibleConfig as exc:
            attrs = {"feasible": False, "reason": str(exc), "constraint": [1.0]}
            values = (math.inf, math.inf)
        else:
            summary = res.summary()
            attrs = {
                "feasible": True, "reason": "", "constraint": [0.0],
                "metrics": {k: v for k, v in summary.items()
                            if k not in ("memory", "config", "provenance")},
                "memory": summary["memory"],
                "provenance": summary["provenance"],
            }
            values = (res.makespan_s, res.cost_usd)
        for k, v in attrs.items():
            trial.set_user_attr(k, v)
        trial.set_constraint("fits", attrs["constraint"][0])  # > 0: infeasible, for the sampler
        done[key] = (values, attrs)
        return values

    n_complete = len(study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)))
    remaining = max(settings.n_trials - n_complete, 0)
    callbacks = [on_trial] if on_trial else []
    if remaining:
        study.optimize(objective, n_trials=remaining, timeout=settings.timeout_s,
                       callbacks=callbacks, catch=())
    return study


def _key(params: dict) -> tuple:
    return tuple(sorted(params.items()))


def assert_some_gpu_fits(workload: Workload, model: ModelSpec, gpus: dict[str, GPU],
                         space: SearchSpace) -> None:
    """Fail fast, with the numbers, when the model fits on none of the GPUs at the most
    memory-lenient point of the space (fewest bits, smallest budget, largest TP)."""
    lenient = {}
    for name, values in space.knobs.items():
        if name in ("weight_bits", "kv_bits", "chunk_size", "max_running", "gpu_memory_utilization"):
            lenient[name] = max(values) if name == "gpu_memory_utilization" else min(values)
        elif name in ("tp", "kv_offload_layers", "weight_offload_fraction"):
            lenient[name] = max(values)
        else:
            lenient[name] = values[0]
    reasons = []
    for gpu in gpus.values():
        config = ServingConfig(gpu=gpu.name, **space.fixed, **lenient)
        try:
            check_feasible(workload, model, gpu, config)
            return
        except InfeasibleConfig as exc:
            reasons.append(str(exc))
    # The lenient point can fail on a rule other than memory (vllm-v0 needs chunk_size >= the
    # longest request): look for any feasible point of a not-too-large grid before refusing.
    if space.size(len(gpus)) > GRID_CHECK_LIMIT:
        return  # too many to check here; the search's constraints handle infeasible points
    for config in space.grid(list(gpus)):
        try:
            check_feasible(workload, model, gpus[config.gpu], config)
            return
        except InfeasibleConfig:
            pass
    raise TunerError(f"No candidate GPU can run {model.name} even at its most memory-lenient "
                     f"setting ({', '.join(f'{k}={v}' for k, v in lenient.items())}): "
                     + "; ".join(reasons))


def default_storage(out_dir: Path) -> str:
    return f"sqlite:///{(out_dir / 'study.db').resolve()}"
