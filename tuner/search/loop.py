"""The search loop: presets first, the sampler's proposals, the neighbourhood polish, the
exhaustive grid (:func:`run_search`, :func:`prepare_study`, :func:`optimize`), and the early
feasibility check (:func:`assert_some_gpu_fits`)."""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Callable

import optuna
from optuna.distributions import CategoricalDistribution

from predictors.protocol import CostModel
from tuner.core.catalog import GPU, ModelSpec
from tuner.core.config import ServingConfig
from tuner.core.errors import TunerError
from tuner.core.workload import Workload
from tuner.search.evaluator import Evaluator, config_key
from tuner.search.records import TrialRecord
from tuner.search.settings import SearchSettings
from tuner.search.space import SearchSpace
from tuner.search.storage import open_study, study_metadata, workload_tokens
from tuner.sim.simulator import InfeasibleConfig, check_feasible

GRID_CHECK_LIMIT = 20_000  # assert_some_gpu_fits checks every point of spaces up to this size
# Reference points enqueued first so the front always contains the engines' own defaults:
# vLLM V1's offline defaults (LLM class: max_num_batched_tokens 8192, max_num_seqs 256) and
# Sarathi-Serve's chunk 512 (§5). Knobs a preset does not name take ServingConfig's
# default (vLLM's) when the space offers it.
PRESETS = ({"chunk_size": 8192, "max_running": 256, "scheduler": "vllm"},
           {"chunk_size": 512, "max_running": 128, "scheduler": "sarathi"})

POLISH_AT = 0.8  # share of n_trials the sampler proposes before the neighbourhood polish


# ---- the search loop ---------------------------------------------------------------------------
def _distributions(space: SearchSpace, gpu_names: list[str]) -> dict:
    return {"gpu": CategoricalDistribution(gpu_names),
            **{k: CategoricalDistribution(v) for k, v in space.knobs.items()}}


def _preset_value(name: str, values: list, preset: dict):
    want = preset.get(name)
    if want is not None and want in values:
        return want
    default = ServingConfig.__dataclass_fields__[name].default
    if default in values:
        return default
    return max(values) if name.endswith("_bits") else values[len(values) // 2]


def enqueue_presets(study: optuna.Study, space: SearchSpace, gpu_names: list[str]) -> None:
    seen = set()
    for preset in PRESETS:
        for gpu in gpu_names:
            params = {"gpu": gpu, **{name: _preset_value(name, values, preset)
                                     for name, values in space.knobs.items()}}
            if config_key(params) not in seen:
                seen.add(config_key(params))
                study.enqueue_trial(params, skip_if_exists=True)


def _set_attrs(trial: optuna.Trial, values: tuple, attrs: dict) -> None:
    for k, v in attrs.items():
        trial.set_user_attr(k, v)
    trial.set_constraint("fits", 0.0 if attrs.get("feasible") else 1.0)  # > 0: infeasible


def _objective(ev: Evaluator, gpu_names: list[str], shared: bool):
    space = ev.space

    def objective(trial: optuna.Trial) -> tuple[float, float]:
        params = {"gpu": trial.suggest_categorical("gpu", gpu_names)}
        for name, values in space.knobs.items():
            params[name] = trial.suggest_categorical(name, values)
        if shared:  # other workers' trials: dedup and promotion see them too
            ev.known.ingest(trial.study)
        key = config_key(params)
        prev = ev.known.done.get(key)
        if prev is not None:  # identical config already simulated: reuse, do not re-simulate
            values, rec, _first = prev
            _set_attrs(trial, values, {"duplicate": True, "feasible": rec.feasible,
                                       "fidelity": {"level": rec.level}})
            return tuple(values)
        values, attrs = ev.evaluate(params, trial.number)
        _set_attrs(trial, values, attrs)
        ev.known.add(trial.number, params,
                     TrialRecord.from_attrs(trial.number, params, values, attrs))
        return values

    return objective


def _count_complete(study: optuna.Study) -> int:
    return len(study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)))


def neighbours(key: tuple, space: SearchSpace, gpu_names: list[str]) -> list[dict]:
    """Configurations that differ from `key` in one knob (or the GPU type)."""
    base = dict(key)
    out = []
    for name, values in (("gpu", gpu_names), *space.knobs.items()):
        for v in values:
            if v != base[name]:
                out.append({**base, name: v})
    return out


def optimize(study: optuna.Study, ev: Evaluator, settings: SearchSettings, *, shared: bool,
              on_trial: Callable | None, mirror: optuna.Study | None = None) -> None:
    """Run trials on `study` until it holds n_trials complete ones: the sampler proposes the
    first POLISH_AT share of the budget; then every configuration one knob away from the
    fastest and from the cheapest found so far is enqueued, round after round until neither
    improves (a sampler's best is rarely a local optimum of a discrete space; measured on the
    default space: without this, NSGA-II misses the grid's cheapest by 2-7 % on 3 seeds of
    10 at 1,200 trials); the sampler has what is left. `mirror`: the persistent study an
    in-memory `study` copies each finished trial into (one transaction per trial instead of
    one per parameter and attribute)."""
    gpu_names = list(ev.gpus)
    ev.known.ingest(study)
    if settings.exhaustive:
        _exhaustive(mirror or study, ev, settings, on_trial)
        return
    if settings.n_trials <= _count_complete(study):
        return
    t_end = None if settings.timeout_s is None else time.monotonic() + settings.timeout_s
    callbacks = []
    if mirror is not None:
        def persist(_study, trial):
            if trial.state == optuna.trial.TrialState.COMPLETE:
                mirror.add_trial(trial)

        callbacks.append(persist)
    if on_trial:
        callbacks.append(on_trial)
    if shared:  # several workers: stop when the study as a whole has its trials
        callbacks.append(optuna.study.MaxTrialsCallback(
            settings.n_trials, states=(optuna.trial.TrialState.COMPLETE,)))
    objective = _objective(ev, gpu_names, shared)

    def run(n: int) -> bool:
        """Up to `n` more trials, fewer when the study has its n_trials; False when the study
        has them or time is up (nothing more to do)."""
        n = min(n, settings.n_trials - _count_complete(study))
        left = None if t_end is None else t_end - time.monotonic()
        if n > 0 and (left is None or left > 0):
            study.optimize(objective, n_trials=n, timeout=left, callbacks=callbacks, catch=(),
                           gc_after_trial=False)
        return (t_end is None or time.monotonic() < t_end) and \
            _count_complete(study) < settings.n_trials

    if not run(math.ceil(POLISH_AT * settings.n_trials) - _count_complete(study)):
        return
    sampler = study.sampler
    try:
        while True:  # polish: each candidate is one trial with every parameter fixed
            targets = tuple(ev.known.best[i][2] for i in (0, 1) if i in ev.known.best)
            cand = {}
            for key in targets:
                for p in neighbours(key, ev.space, gpu_names):
                    cand.setdefault(config_key(p), p)
            todo = [p for k, p in cand.items() if k not in ev.known.done]
            if not todo:
                break
            for p in todo:
                if shared:
                    ev.known.ingest(study)
                if config_key(p) in ev.known.done:  # another worker got there first
                    continue
                with warnings.catch_warnings():  # "experimental" since Optuna 2.4
                    warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                    study.sampler = optuna.samplers.PartialFixedSampler(p, sampler)
                if not run(1):
                    return
            if tuple(ev.known.best[i][2] for i in (0, 1) if i in ev.known.best) == targets:
                break
    finally:
        study.sampler = sampler
    run(settings.n_trials)


def _exhaustive(study: optuna.Study, ev: Evaluator, settings: SearchSettings,
                on_trial: Callable | None) -> None:
    """Every point of the space at full fidelity, added as finished trials (no sampler: Optuna's
    GridSampler rescans the whole study per trial, quadratic in the grid size)."""
    dists = _distributions(ev.space, list(ev.gpus))
    t_end = None if settings.timeout_s is None else time.monotonic() + settings.timeout_s
    batch: list = []
    last_flush = time.monotonic()

    def flush():
        nonlocal batch, last_flush
        if batch:
            study.add_trials(batch)
            if on_trial:
                for ft in batch:
                    on_trial(study, ft)
        batch, last_flush = [], time.monotonic()

    number = len(study.get_trials(deepcopy=False))
    for params in ev.space.grid_params(list(ev.gpus)):
        if config_key(params) in ev.known.done:
            continue
        if t_end is not None and time.monotonic() > t_end:
            break
        values, attrs = ev.evaluate(params, number, full=True)
        # add_trials numbers them in order
        ev.known.add(number, params, TrialRecord.from_attrs(number, params, values, attrs))
        batch.append(optuna.trial.create_trial(
            values=list(values), params=params, distributions=dists, user_attrs=attrs,
            constraints={"fits": 0.0 if attrs["feasible"] else 1.0}))
        number += 1
        if len(batch) >= 500 or time.monotonic() - last_flush > 1.0:
            flush()
    flush()


def run_search(workload: Workload, model: ModelSpec, gpus: dict[str, GPU], space: SearchSpace,
               settings: SearchSettings, *,
               cost_model_for: Callable[[GPU, ServingConfig], CostModel] | None = None,
               on_trial: Callable[[optuna.Study, optuna.trial.FrozenTrial], None] | None = None,
               metadata: dict | None = None, evaluator: Evaluator | None = None) -> optuna.Study:
    """Run (or resume) the study until `n_trials` trials are complete, the timeout hits, or
    (exhaustive) every point of the space is simulated. `metadata`: extra keys for the study's
    metadata attribute (the CLI adds the workload file's path and loading options)."""
    meta = study_metadata(workload, model, gpus, space, settings, metadata)
    study = open_study(settings, metadata=meta, workload_tokens=workload_tokens(workload))
    ev = evaluator or Evaluator(workload, model, gpus, space,
                                sample_fraction=settings.sample_fraction,
                                cost_model_for=cost_model_for)
    work, mirror = study, None
    if settings.storage is not None:
        # One process owns the study: sample in memory, persist each finished trial whole.
        # Optuna's RDB storage commits every parameter and attribute of a running trial on its
        # own (~17 transactions a trial); a finished trial is one transaction, and nothing
        # unfinished (RUNNING) is left behind by a kill.
        work = optuna.create_study(directions=study.directions, sampler=study.sampler)
        work.add_trials(study.get_trials(deepcopy=False,
                                         states=(optuna.trial.TrialState.COMPLETE,)))
        mirror = study
    if not settings.exhaustive and not work.get_trials(deepcopy=False):
        enqueue_presets(work, space, list(gpus))
    optimize(work, ev, settings, shared=False, on_trial=on_trial, mirror=mirror)
    return study


def prepare_study(workload: Workload, model: ModelSpec, gpus: dict[str, GPU],
                  space: SearchSpace, settings: SearchSettings, *,
                  metadata: dict | None = None) -> optuna.Study:
    """Create (or, with resume, load) the study with its metadata and presets, for workers to
    run (`tuner search --workers N`)."""
    if settings.storage is None:
        raise TunerError("Workers need a shared storage (--storage URL); an in-memory study "
                         "cannot be shared.")
    meta = study_metadata(workload, model, gpus, space, settings, metadata)
    study = open_study(settings, metadata=meta, workload_tokens=workload_tokens(workload))
    if not settings.exhaustive and not study.get_trials(deepcopy=False):
        enqueue_presets(study, space, list(gpus))
    return study


# ---- feasibility before the search -------------------------------------------------------------
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


