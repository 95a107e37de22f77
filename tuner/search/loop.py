"""The search loop: presets first, the sampler's proposals, the neighbourhood polish, the
exhaustive grid (:func:`run_search`, :func:`prepare_study`, :func:`optimize`), and the early
feasibility check (:func:`assert_some_gpu_fits`)."""

from __future__ import annotations

import copy
import dataclasses
import math
import time
import warnings
from collections.abc import Callable

import numpy as np
import optuna
from optuna.distributions import CategoricalDistribution

from tuner.core.catalog import GPU, ModelSpec
from tuner.core.config import KNOBS, ServingConfig
from tuner.core.engine_defaults import DEFAULT_ENTRY_POINT, SEARCH_PRESETS
from tuner.core.errors import TunerError
from tuner.core.sglang import default_config, sglang_defaults
from tuner.core.workload import Workload
from tuner.core.workload.base import lengths_from_input
from tuner.predictors.protocol import CostModel
from tuner.search.baseline import defaults_plan, engine_name, engine_presets
from tuner.search.constraints import Constraints
from tuner.search.evaluator import Evaluator, config_key, front_key
from tuner.search.meta import StudyMeta
from tuner.search.records import TrialRecord, counts_toward_budget
from tuner.search.settings import SearchSettings, make_sampler
from tuner.search.space import SearchSpace, fit_space
from tuner.search.storage import (
    StudyHold,
    discard_failed_study,
    open_study,
    study_metadata,
    workload_tokens,
)
from tuner.sim.parallel import parallel_workers, thread_map
from tuner.sim.simulator import InfeasibleConfig, check_feasible

GRID_CHECK_LIMIT = 20_000  # assert_some_gpu_fits checks every point of spaces up to this size
# Reference points enqueued first so the front always contains the engines' own defaults:
# vLLM's (per GPU and entry point when the search knows them) and Sarathi-Serve's; their one
# statement, with sources, is tuner.core.engine_defaults.SEARCH_PRESETS.
PRESETS = SEARCH_PRESETS

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


def _nearest(values: list, want):
    """`want`, or the value of `values` nearest to it (numbers), else `want`."""
    if want in values or isinstance(want, str):
        return want
    nums = [v for v in values if isinstance(v, int | float) and not isinstance(v, bool)]
    return min(nums, key=lambda v: abs(v - want)) if nums else want


def sglang_presets(gpus: dict[str, GPU]) -> dict[str, dict]:
    """GPU -> SGLang's defaults as ServingConfig knobs (tuner.core.sglang: its chunked prefill
    size and mem fraction by GPU memory, fcfs); the search's SGLang preset where the space
    offers them (--max-running-requests, sized from the KV pool, takes the space's nearest)."""
    out = {}
    for name, g in gpus.items():
        d = sglang_defaults(g)
        out[name] = {"engine": "sglang", "chunk_size": d.chunked_prefill_size,
                     "gpu_memory_utilization": d.mem_fraction_static,
                     "schedule_policy": d.schedule_policy}
    return out


def enqueue_presets(study: optuna.Study, space: SearchSpace, gpu_names: list[str],
                    engine: dict[str, dict] | None = None,
                    sglang: dict[str, dict] | None = None) -> None:
    """`engine`: GPU -> vLLM's batch defaults for the job's entry point
    (tuner.search.baseline.engine_presets), replacing the first preset's where given;
    `sglang`: GPU -> SGLang's (:func:`sglang_presets`), enqueued after them when the space
    searches SGLang."""
    seen = set()
    presets = list(PRESETS)
    if sglang and "sglang" in space.knobs.get("engine", ()):
        presets += [{"sglang": True}]
    for i, preset in enumerate(presets):
        for gpu in gpu_names:
            if i == 0 and engine and gpu in engine:
                preset = {**PRESETS[0], **engine[gpu]}
            elif i == len(PRESETS):  # SGLang's defaults, at the space's nearest values
                preset = {k: _nearest(space.knobs[k], v) if k in space.knobs else v
                          for k, v in sglang[gpu].items()}
            params = {"gpu": gpu, **{name: _preset_value(name, values, preset)
                                     for name, values in space.knobs.items()}}
            params = space.conform(params)  # e.g. Sarathi's chunk where vLLM V0 refuses it
            if config_key(params) not in seen:
                seen.add(config_key(params))
                study.enqueue_trial(params, skip_if_exists=True)


def trial_constraints(values, attrs: dict, constraints: Constraints | None) -> dict[str, float]:
    """A trial's Optuna constraints (> 0: violated): it fits, and with a --deadline / --budget
    by how much (relative) it misses them. TPE and NSGA-II steer by them."""
    out = {"fits": 0.0 if attrs.get("feasible") else 1.0}
    if constraints is not None and constraints.on_figures:
        out["deadline"], out["budget"] = constraints.violations(*values)
    return out


def _set_attrs(trial: optuna.Trial, values: tuple, attrs: dict,
               constraints: Constraints | None = None) -> None:
    for k, v in attrs.items():
        trial.set_user_attr(k, v)
    for k, v in trial_constraints(values, attrs, constraints).items():
        trial.set_constraint(k, v)  # > 0: infeasible


def _evaluate(ev: Evaluator, params: dict, number: int, constraints: Constraints, *,
              level: str | None = None) -> tuple[tuple, dict]:
    """ev.evaluate, except a plan the constraints exclude before simulating (--max-gpus, a
    quantized plan without a checkpoint) is an infeasible trial saying why."""
    config = ev.config(params)
    why = constraints.plan_violation(config.gpu, config.num_gpus, config.weight_bits,
                                     bool(ev.gpus[config.gpu].fp8_tflops),
                                     ev.model.checkpoint_bits)
    if why is not None:
        return (math.inf, math.inf), {"feasible": False, "reason": why,
                                      "fidelity": {"level": "full"}}
    return ev.evaluate(params, number, level=level)


def polish_targets(ev: Evaluator, constraints: Constraints) -> tuple:
    """Configurations the polish explores around: the fastest and the cheapest so far and,
    with a deadline or budget, the best plan that meets it."""
    targets = [ev.known.best[i][2] for i in (0, 1) if i in ev.known.best]
    per_engine = ev.known.best_of_engine
    if len({engine for engine, _ in per_engine}) > 1:  # each engine's own best too
        targets += [b[2] for _, b in sorted(per_engine.items()) if b[2] not in targets]
    if constraints.on_figures:
        goal = 1 if constraints.goal == "cheapest" else 0
        best = None
        for key, (values, rec, _n) in ev.known.done.items():
            if rec.feasible and rec.level == "full" and constraints.meets(*values):
                cand = (values[goal], values[1 - goal], key)
                if best is None or cand < best:
                    best = cand
        if best is not None and best[2] not in targets:
            targets.append(best[2])
    return tuple(targets)


def _objective(ev: Evaluator, gpu_names: list[str], shared: bool,
               constraints: Constraints | None = None, *, n_trials: int | None = None):
    """The Optuna objective. `n_trials` (several workers): a trial started beyond the study's
    budget (:func:`_over_budget`) is PRUNED, unsimulated, and its worker stops."""
    space = ev.space
    constraints = constraints or Constraints()

    def objective(trial: optuna.Trial) -> tuple[float, float]:
        if n_trials is not None and _over_budget(trial, n_trials):
            trial.set_user_attr("over_budget", True)
            trial.study.stop()
            raise optuna.TrialPruned()
        params = {"gpu": trial.suggest_categorical("gpu", gpu_names)}
        for name in space.sample_order():  # SeedPerTrial keeps to the space's exclusions
            params[name] = trial.suggest_categorical(name, space.knobs[name])
        if shared:  # other workers' trials: dedup and promotion see them too
            ev.known.ingest(trial.study)
        # identical config, or one SGLang runs as the same plan (Evaluator.runs_as: R_max above
        # a hybrid's state-pool cap), already simulated: reuse, do not re-simulate
        over, note = ev.runs_as(params)
        prev = ev.known.simulated(params, over)
        if prev is not None:
            values, rec, _first = prev
            attrs = {"duplicate": True, "feasible": rec.feasible,
                     "fidelity": {"level": rec.level}}
            if over:
                attrs.update(runs_as=over, runs_as_note=note)
            _set_attrs(trial, values, attrs, constraints)
            return tuple(values)
        values, attrs = _evaluate(ev, params, trial.number, constraints)
        _set_attrs(trial, values, attrs, constraints)
        ev.known.add(trial.number, params,
                     TrialRecord.from_attrs(trial.number, ev.config(params), values, attrs))
        return values

    return objective


# What --n-trials counts: COMPLETE trials (a duplicate, i.e. a configuration already simulated
# and answered from the first simulation, is a COMPLETE trial and counts), plus RUNNING ones
# (in flight in this or another process), in the persistent study: so the number is a total
# across --workers and --resume. FAIL (an interrupted or a dead worker's trial, see
# storage.fail_stale_trials) and PRUNED (over the budget, below) do not count.
BUDGET_STATES = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.RUNNING)


def _budget_trials(study: optuna.Study) -> list:
    return [t for t in study.get_trials(deepcopy=False, states=BUDGET_STATES)
            if counts_toward_budget(t)]


def _count_budget(study: optuna.Study) -> int:
    return len(_budget_trials(study))


class BudgetCount:
    """:func:`_count_budget` of one study, counted again at each call (other processes' trials
    count too) but with each COMPLETE trial's verdict remembered (a finished trial's attributes
    no longer change): the search counts once per trial, and reading every trial's attributes
    each time was quadratic (~0.3 s of a 300-trial search)."""

    def __init__(self, study: optuna.Study) -> None:
        self.study = study
        self._counts: dict[int, bool] = {}  # trial number -> counts_toward_budget, COMPLETE

    def __call__(self) -> int:
        complete = optuna.trial.TrialState.COMPLETE
        known = self._counts
        n = 0
        for t in self.study.get_trials(deepcopy=False, states=BUDGET_STATES):
            if t.state != complete:  # running: its attributes may still change
                n += counts_toward_budget(t)
                continue
            counts = known.get(t.number)
            if counts is None:
                counts = known[t.number] = counts_toward_budget(t)
            n += counts
        return n


def _over_budget(trial: optuna.Trial, n_trials: int) -> bool:
    """Several workers on one study: trial `trial` is beyond the budget when n_trials trials
    numbered before it are COMPLETE or RUNNING. Trial numbers are handed out by the storage
    one at a time, so this rule lets exactly the first n_trials counting trials run."""
    ahead = _budget_trials(trial.study)
    return sum(1 for t in ahead if t.number < trial.number) >= n_trials


class SeedPerTrial(optuna.samplers.BaseSampler):
    """The search's sampler reseeded for every trial from (seed, trial number): the
    proposal of trial k depends only on the seed, k and the trials before it. A search
    interrupted and resumed therefore proposes exactly what the uninterrupted one would (the
    same trials, the same Pareto front), and a resumed sampler never replays its first draws
    (each replay would be a duplicate that uses up a trial)."""

    def __init__(self, settings: SearchSettings, space: SearchSpace | None = None) -> None:
        self._settings = settings
        self._inner = self._make(settings.seed)
        # its exclusions (SearchSpace.excluded): a proposal of a plan its engine refuses is
        # moved to the nearest value that plan may take, so no trial is spent on it
        self._space = space if space is not None and space.excluded else None

    def _make(self, seed: int) -> optuna.samplers.BaseSampler:
        with warnings.catch_warnings():  # TPE's multivariate is "experimental"
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return make_sampler(dataclasses.replace(self._settings, seed=seed))

    def reseed_rng(self) -> None:
        self._inner.reseed_rng()

    def infer_relative_search_space(self, study, trial):
        return self._inner.infer_relative_search_space(study, trial)

    def sample_relative(self, study, trial, search_space):
        params = self._inner.sample_relative(study, trial, search_space)
        if self._space is None or not params:
            return params
        # an excluded knob whose conditions are not drawn here (NSGA-II's mutated ones) is
        # drawn after them, by sample_independent
        for ex in self._space.excluded:
            if ex.knob in params and any(k not in params for k, _ in ex.when):
                params = {k: v for k, v in params.items() if k != ex.knob}
        return self._space.conform(params)

    def sample_independent(self, study, trial, param_name, param_distribution):
        value = self._inner.sample_independent(study, trial, param_name, param_distribution)
        if self._space is None:
            return value
        return self._space.conform({**trial.params, param_name: value}, param_name)[param_name]

    def before_trial(self, study, trial) -> None:
        seeds = np.random.SeedSequence([self._settings.seed, trial.number]).generate_state(2)
        # TPE and NSGA-II draw from two random states (their own and their RandomSampler's):
        # reseeded in place, which is what a fresh sampler would be but costs nothing (a
        # fresh NSGA-II per trial: +4.5 s CPU per 600 trials); a sampler without them is made
        # afresh.
        states = (getattr(self._inner, "_rng", None),
                  getattr(getattr(self._inner, "_random_sampler", None), "_rng", None))
        if all(hasattr(st, "rng") for st in states):
            for st, seed in zip(states, seeds, strict=True):
                st.rng.seed(int(seed))
        else:
            self._inner = self._make(int(seeds[0]))
        self._inner.before_trial(study, trial)

    def after_trial(self, study, trial, state, values) -> None:
        self._inner.after_trial(study, trial, state, values)


def next_polish(ev: Evaluator, gpu_names: list[str], constraints: Constraints) -> dict | None:
    """The polish's next configuration: the first one a knob away from a polish target (the
    fastest, the cheapest, the best within --deadline / --budget) that is not simulated yet;
    None when every neighbour of every target is (each target is a local optimum). Derived
    from the trials alone, so a resumed search polishes as the uninterrupted one would."""
    pick = None
    for key in polish_targets(ev, constraints):
        near = neighbours(key, ev.space, gpu_names)
        # not a plan simulated already, nor one that runs as one (Evaluator.runs_as)
        todo = [p for p in near if ev.known.simulated(p, ev.runs_as(p)[0]) is None]
        # the target whose neighbourhood is least explored goes first, so a short budget is
        # shared among the targets (each engine's best included) rather than spent on the first
        if todo and (pick is None or len(near) - len(todo) < pick[0]):
            pick = (len(near) - len(todo), todo[0])
    return None if pick is None else pick[1]


def neighbours(key: tuple, space: SearchSpace, gpu_names: list[str]) -> list[dict]:
    """Configurations that differ from `key` in one knob (or the GPU type)."""
    base = dict(key)
    out = []
    for name, values in (("gpu", gpu_names), *space.knobs.items()):
        for v in values:
            if v != base[name] and space.allows({**base, name: v}):
                out.append({**base, name: v})
    return out


def optimize(study: optuna.Study, ev: Evaluator, settings: SearchSettings, *, shared: bool,
              on_trial: Callable | None, mirror: optuna.Study | None = None) -> None:
    """Run trials on `study` until the study holds n_trials (see BUDGET_STATES: a total over
    every process and every --resume): the sampler (SeedPerTrial) proposes the first
    POLISH_AT share of the budget; then the polish simulates, one trial at a time, the
    configurations one knob away from the fastest and the cheapest found so far
    (:func:`next_polish`), following each improvement, until every neighbour of each is
    simulated (a sampler's best is rarely a local optimum of a discrete space; measured on the
    default space: without this, NSGA-II misses the grid's cheapest by 2-7 % on 3 seeds of
    10 at 1,200 trials); the sampler has what is left. `mirror`: the persistent study an
    in-memory `study` copies each finished trial into (one transaction per trial instead of
    one per parameter and attribute); the budget is counted there."""
    gpu_names = list(ev.gpus)
    ev.known.ingest(study)
    if settings.exhaustive:
        _exhaustive(mirror or study, ev, settings, on_trial)
        return
    counted = mirror or study  # the persistent study: other processes' trials count too
    count_budget = BudgetCount(counted)
    if settings.n_trials <= count_budget():
        return
    study.sampler = SeedPerTrial(settings, ev.space)
    t_end = None if settings.timeout_s is None else time.monotonic() + settings.timeout_s
    callbacks = []
    if mirror is not None:
        def persist(st, trial):
            """Copy a finished trial into the persistent study, and stop at the budget: one
            count of the study per trial (each count reads the journal)."""
            if trial.state != optuna.trial.TrialState.COMPLETE:
                return
            count = count_budget()
            if count >= settings.n_trials:  # a concurrent --resume filled it
                st.stop()
                return
            mirror.add_trial(trial)
            if count + 1 >= settings.n_trials:
                st.stop()

        callbacks.append(persist)
    if on_trial:
        callbacks.append(on_trial)
    if mirror is None:
        # last, so the count is as fresh as can be when Optuna starts the next trial: several
        # workers on one study overshoot only in the gap between this check and that start
        def at_budget(st, _trial):
            if count_budget() >= settings.n_trials:
                st.stop()

        callbacks.append(at_budget)
    # one callback calling each in turn: Optuna deep-copies the finished trial for every
    # callback it is given (its attributes hold the simulated figures), and none changes it
    callbacks = [_each(callbacks)] if callbacks else None
    objective = _objective(ev, gpu_names, shared, settings.constraints,
                           n_trials=settings.n_trials if shared else None)

    def run(n: int) -> bool:
        """Up to `n` more trials, fewer when the study has its n_trials; False when the study
        has them or time is up (nothing more to do)."""
        n = min(n, settings.n_trials - count_budget())
        left = None if t_end is None else t_end - time.monotonic()
        if n > 0 and (left is None or left > 0):
            study.optimize(objective, n_trials=n, timeout=left, callbacks=callbacks, catch=(),
                           gc_after_trial=False)
        return (t_end is None or time.monotonic() < t_end) and \
            count_budget() < settings.n_trials

    if not run(math.ceil(POLISH_AT * settings.n_trials) - count_budget()):
        return
    sampler = study.sampler
    try:
        while True:  # polish: each candidate is one trial with every parameter fixed
            if shared:  # what other workers simulated meanwhile
                ev.known.ingest(study)
            p = next_polish(ev, gpu_names, settings.constraints)
            if p is None:
                break
            with warnings.catch_warnings():  # "experimental" since Optuna 2.4
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                study.sampler = optuna.samplers.PartialFixedSampler(p, sampler)
            if not run(1):
                return
    finally:
        study.sampler = sampler
    run(settings.n_trials)


def _each(callbacks: list[Callable]) -> Callable:
    """One Optuna callback that calls `callbacks` in order with the same finished trial."""
    def each(study, trial) -> None:
        for callback in callbacks:
            callback(study, trial)

    return each


def _finished_trial(ev: Evaluator, params: dict, number: int, settings: SearchSettings,
                    dists: dict) -> optuna.trial.FrozenTrial:
    """`params` simulated on the full workload as finished trial `number` (for add_trials),
    known to the evaluator."""
    values, attrs = _evaluate(ev, params, number, settings.constraints, level="full")
    return _record_trial(ev, params, number, settings, dists, values, attrs, None)


def _record_trial(ev: Evaluator, params: dict, number: int, settings: SearchSettings,
                  dists: dict, values: tuple, attrs: dict,
                  extra: dict | None) -> optuna.trial.FrozenTrial:
    """The finished trial of an evaluation, known to the evaluator; `extra`: user attributes
    added to the evaluator's (a "fidelity" dict in it is merged into the evaluator's)."""
    extra = dict(extra or {})
    if "fidelity" in extra:
        extra["fidelity"] = {**attrs["fidelity"], **extra["fidelity"]}
    attrs.update(extra)
    ev.known.add(number, params, TrialRecord.from_attrs(number, ev.config(params), values, attrs))
    return optuna.trial.create_trial(
        values=list(values), params=params, distributions=dists, user_attrs=attrs,
        constraints=trial_constraints(values, attrs, settings.constraints))


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
        if ev.known.simulated(params, ev.runs_as(params)[0]) is not None:
            continue  # simulated, or runs as a plan simulated (Evaluator.runs_as)
        if t_end is not None and time.monotonic() > t_end:
            break
        # add_trials numbers them in order
        batch.append(_finished_trial(ev, params, number, settings, dists))
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
    metadata (tuner.search.meta.StudyMeta; the CLI adds the workload file's path and loading
    options)."""
    space, _notes = search_space(space, workload, model, gpus, settings, metadata)
    meta = study_metadata(workload, model, gpus, space, settings, metadata)
    # Everything that can fail on the inputs fails before the study exists.
    ev = evaluator or Evaluator(workload, model, gpus, space,
                                sample_fraction=settings.sample_fraction,
                                cost_model_for=cost_model_for,
                                defer=settings.defer_candidates,
                                **meta.sim_options())
    try:
        with StudyHold(settings.storage):
            study = open_study(settings, metadata=meta, workload_tokens=workload_tokens(workload))
            work, mirror = study, None
            if settings.storage is not None:
                # One process owns the study: sample in memory, persist each finished trial
                # whole. Optuna's RDB storage commits every parameter and attribute of a running
                # trial on its own (~17 transactions a trial); a finished trial is one
                # transaction, and nothing unfinished (RUNNING) is left behind by a kill.
                work = optuna.create_study(directions=study.directions, sampler=study.sampler)
                work.add_trials(study.get_trials(deepcopy=False,
                                                 states=(optuna.trial.TrialState.COMPLETE,)))
                mirror = study
            if not settings.exhaustive:  # the presets not run yet (all of them when new)
                enqueue_presets(work, space, list(gpus), engine_presets(gpus, meta, model),
                                sglang_presets(gpus))
            optimize(work, ev, settings, shared=False, on_trial=on_trial, mirror=mirror)
            if not settings.exhaustive:
                add_final_candidates(study, ev, settings)
                add_default_trials(study, ev, settings, meta)
    except BaseException as exc:
        discard_failed_study(settings, exc)  # none without results left to block the rerun
        raise
    return study


def prepare_study(workload: Workload, model: ModelSpec, gpus: dict[str, GPU],
                  space: SearchSpace, settings: SearchSettings, *,
                  metadata: dict | None = None) -> optuna.Study:
    """Create (or, with resume, load) the study with its metadata and presets, for workers to
    run (`tuner search --workers N`)."""
    if settings.storage is None:
        raise TunerError("Workers need a shared storage (--storage URL); an in-memory study "
                         "cannot be shared.")
    space, _notes = search_space(space, workload, model, gpus, settings, metadata)
    meta = study_metadata(workload, model, gpus, space, settings, metadata)
    study = open_study(settings, metadata=meta, workload_tokens=workload_tokens(workload))
    if not settings.exhaustive:  # the presets not run nor queued yet (all of them when new)
        enqueue_presets(study, space, list(gpus), engine_presets(gpus, meta, model),
                        sglang_presets(gpus))
    return study


# ---- the space a search runs, and vLLM's defaults beside its winners -----------------------------
def search_space(space: SearchSpace, workload: Workload, model: ModelSpec,
                 gpus: dict[str, GPU], settings: SearchSettings,
                 metadata: StudyMeta | dict | None = None) -> tuple[SearchSpace, list[str]]:
    """The space as this search runs it (tuner.search.space.fit_space: `auto` TP/DP from the
    machines, heads and --max-gpus; every GPU's vLLM defaults offered; orderings by output
    length only when the lengths are known), and notes on what was left out. Idempotent.
    `metadata`: the study's, or the extra keys the CLI stores (--outputs-known,
    --entry-point ...)."""
    meta = StudyMeta.of(metadata)
    known = meta.outputs_known or lengths_from_input(workload.output_source)
    caps = {g: settings.constraints.gpu_cap(g) for g in gpus}
    return fit_space(space, model=model, gpus=gpus, gpu_caps=caps,
                     defaults=engine_presets(gpus, meta, model), outputs_from_input=known,
                     engine_schedulers=meta.engine_schedulers, engines=meta.engines,
                     engine_version=meta.engine_version, workload=workload,
                     num_scheduler_steps=meta.num_scheduler_steps)


def final_candidates(ev: Evaluator) -> list[tuple[dict, TrialRecord]]:
    """The deferred configurations (screened on the sample, within its error of a front) that
    can still be on their GPU's front (per engine, `front_key`): no other configuration of that
    GPU and engine dominates them on
    both figures beyond the sampling error eps (a reference simulation, full or rung, by a
    factor 1 + eps, an estimate by (1 + eps)^2: both may err). Estimates re-scaled with the
    calibration as it stands now. (params, the sample trial's record) each, in trial order."""
    k, eps = ev.known.calibration()
    if not math.isfinite(eps):
        return []
    points: dict[str, list[tuple[float, float, int, int]]] = {}  # gpu -> (s, $, margin, trial)
    deferred = []
    for key, (values, rec, number) in ev.known.done.items():
        if not rec.feasible or not all(math.isfinite(v) for v in values):
            continue
        params = dict(key)
        if rec.level != "sample":
            points.setdefault(front_key(params), []).append((values[0], values[1], 1, number))
            continue
        fid = rec.fidelity
        if not fid.get("candidate"):
            continue
        est = ev.estimate(ev.config(params), fid["sample_makespan_s"], fid["scale"],
                          fid.get("startup_s") or 0.0, k)
        points.setdefault(front_key(params), []).append((*est, 2, number))
        deferred.append((number, params, rec, est))
    return _unbeaten(deferred, points, eps)


def _unbeaten(cands: list, points: dict, eps: float) -> list[tuple[dict, TrialRecord]]:
    """The candidates (number, params, record, (s, $)) that no other point of their GPU beats
    on both figures by its margin: (1 + eps) ** margin."""
    out = []
    for number, params, rec, est in sorted(cands, key=lambda d: d[0]):
        # at eps 0 a plan with the very same figures does not beat it (both stay)
        beaten = any(m * (1 + eps) ** margin <= est[0] and c * (1 + eps) ** margin <= est[1]
                     and (eps > 0 or (m, c) != tuple(est))
                     for m, c, margin, other in points[front_key(params)] if other != number)
        if not beaten:
            out.append((params, rec))
    return out


def full_candidates(ev: Evaluator, first: bool = False) -> list[tuple[dict, TrialRecord]]:
    """The configurations judged on the reference rung that can still be on their GPU's front:
    no full simulation of that GPU beats them beyond the rung's error eps_r (1 + eps_r) and no
    other rung figure beyond (1 + eps_r)^2. eps_r is measured on the rung's (rung, full) pairs.
    `first` (no pair yet): the points of the rung's own fronts (eps_r = 0), whose full
    simulations are the first pairs; every later round uses the measured eps_r."""
    _k, eps = ev.known.calibration()
    _kr, eps_r = ev.known.rung_calibration(eps)
    if first:
        eps_r = 0.0
    if not math.isfinite(eps_r):
        return []
    points: dict[str, list[tuple[float, float, int, int]]] = {}
    cands = []
    for key, (values, rec, number) in ev.known.done.items():
        if (not rec.feasible or rec.level == "sample"
                or not all(math.isfinite(v) for v in values)):
            continue
        params = dict(key)
        margin = 1 if rec.level == "full" else 2
        points.setdefault(front_key(params), []).append((values[0], values[1], margin, number))
        if rec.level == "rung":
            cands.append((number, params, rec, tuple(values)))
    out = _unbeaten(cands, points, eps_r)
    if first:
        return out
    # an epsilon-Pareto front: a plan that a full simulation of its GPU already matches within
    # FRONT_TOLERANCE on both figures could improve on it by at most that and its own error,
    # so it stays an estimate (on a 1M-request job, 18 of 27 plans left after the rung's
    # fronts were such near-ties: other chunk sizes and R_max at the same DP, 0.1-0.4 % apart)
    full = {g: [(m, c) for m, c, margin, _n in pts if margin == 1] for g, pts in points.items()}
    return [(params, rec) for params, rec in out
            if not any(m <= rec.values[0] * (1 + FRONT_TOLERANCE)
                       and c <= rec.values[1] * (1 + FRONT_TOLERANCE)
                       for m, c in full[front_key(params)])]


def _evaluate_many(ev: Evaluator, todo: list[dict], first_number: int,
                   constraints: Constraints, level: str) -> list[tuple[tuple, dict]]:
    """_evaluate of each configuration (numbered from `first_number`), in order; the
    simulations of a large job on a thread per core (the simulator's C loop releases the GIL;
    what the evaluator learns from them is added afterwards, in order, by the caller)."""
    def one(i: int) -> tuple[tuple, dict]:
        return _evaluate(ev, todo[i], first_number + i, constraints, level=level)

    return thread_map(one, list(range(len(todo))), parallel_workers(len(todo), len(ev.workload)))


#: how close (relative, on both figures) a full simulation must come to a rung-judged plan for
#: that plan to need no full simulation of its own: the search's winners are then within this
#: and the rung's error of the exhaustive search's (benchmarks/search_quality_large.py checks
#: 1 %)
FRONT_TOLERANCE = 0.005

#: rounds of full simulations after the rung (each adds the plans a larger measured eps_r
#: lets back in)
FULL_ROUNDS = 4


def add_final_candidates(study: optuna.Study, ev: Evaluator, settings: SearchSettings) -> int:
    """Simulate, as trials of the study, the deferred configurations that can still be on a
    front (:func:`final_candidates`): on the full workload, or, where the search uses a
    reference rung, on the rung first and then in full for those that can still be on a front
    after it (:func:`full_candidates`). The search's winners and Pareto points are full
    simulations, while configurations that only came near a front on the way cost a sample
    (or rung) simulation. Each carries its sample estimate (and rung figures): measured pairs
    of the sampling error. Returns the number of trials added."""
    if not ev.defer:
        return 0
    dists = _distributions(ev.space, list(ev.gpus))
    added = 0

    def run(todo: list, level: str, carry: tuple[str, ...]) -> int:
        number = len(study.get_trials(deepcopy=False))
        batch = []
        results = _evaluate_many(ev, [params for params, _rec in todo], number,
                                 settings.constraints, level)
        for (params, rec), (values, attrs) in zip(todo, results, strict=True):
            fid = rec.fidelity
            kept = {k: fid[k] for k in carry if k in fid}
            batch.append(_record_trial(ev, params, number, settings, dists, values, attrs, {
                "final_candidate": True,
                "fidelity": {**kept, "promoted": "final candidate"}}))
            number += 1
        if batch:
            study.add_trials(batch)
        return len(batch)

    sample_keys = ("requests", "sample_makespan_s", "startup_s", "scale", "k", "eps",
                   "estimate_makespan_s")
    added += run(final_candidates(ev), "rung" if ev.use_rung else "full", sample_keys)
    if not ev.use_rung:
        return added
    rung_keys = (*sample_keys, "rung_requests", "rung_makespan_s", "rung_scale", "rung_k")
    # the rung's fronts first: their full simulations measure the rung's error, and the plans
    # within that error of a front follow (again while a larger measured eps_r lets more in)
    added += run(full_candidates(ev, first=True), "full", rung_keys)
    for _ in range(FULL_ROUNDS):
        todo = full_candidates(ev)
        if not todo:
            break
        added += run(todo, "full", rung_keys)
    return added


#: rounds of :func:`add_default_trials` (each adds the defaults beside winners that are new)
DEFAULT_ROUNDS = 6


def add_default_trials(study: optuna.Study, ev: Evaluator, settings: SearchSettings,
                       metadata: StudyMeta | dict | None = None) -> int:
    """Simulate vLLM's defaults (tuner.search.baseline.engine_presets) on the GPU type, TP and
    DP of every winner (overall, per GPU, per engine) and Pareto point, on the full workload, as
    trials of the study: the
    defaults are then candidates like any other plan, so no recommended plan is beaten on both
    makespan and $ by vLLM untuned on the same GPUs. Repeats while that changes the winners;
    returns the number of trials added. Defaults the space does not hold (a user's --space
    without vLLM's max_num_seqs, say), which Optuna cannot record as trials, are simulated
    all the same and kept beside the trials (:func:`_add_outside_space`): candidates too."""
    from tuner.search.records import (
        OUTSIDE_SPACE_ATTR,
        config_from_dict,
        engine_winners,
        pareto,
        trial_records,
        winners,
    )

    engine = engine_presets(ev.gpus, metadata, ev.model)
    meta = StudyMeta.of(metadata)
    dists = _distributions(ev.space, list(ev.gpus))
    added = _cover_every_gpu(study, ev, settings, dists, engine)
    # the defaults outside the space simulated already
    tried = {config_from_dict(e["config"])
             for e in study.user_attrs.get(OUTSIDE_SPACE_ATTR) or []}
    for _ in range(DEFAULT_ROUNDS):
        records = trial_records(study)
        best, per_gpu = winners(records)
        by_num = {r.number: r for r in records}
        picks = [*best.values(), *(n for d in per_gpu.values() for n in d.values()),
                 *(n for d in engine_winners(records).values() for n in d.values()),
                 *pareto(records)]
        todo: dict[tuple, dict] = {}
        outside: dict[ServingConfig, list[str]] = {}  # the defaults' plan -> what the space lacks
        for n in dict.fromkeys(picks):
            r = by_num[n]
            if r.gpu not in engine:
                continue
            same = {k: getattr(r.config, k) for k in ("tp", "dp", "pp", "weight_bits", "kv_bits")}
            if r.config.engine == "sglang":  # SGLang's own defaults on the same GPUs
                try:
                    want = default_config(ev.model, ev.gpus[r.gpu], same)[0].to_dict()
                except TunerError:  # no default on this GPU
                    continue
            else:
                want = {**engine[r.gpu], **same}
                if not _holds_fixed(ev.space, want):
                    # the space fixes a knob elsewhere: a V0 release's own defaults above 32K
                    # context are chunked prefill (sarathi) where its plans are prefill-first
                    # (vllm-v0); those defaults are simulated beside the winner instead
                    # (tuner.search.baseline.simulate_baseline)
                    continue
            plan, lacks = _defaults_outside(ev, r.config, meta)
            if lacks:  # the space does not hold them (a user's own space): simulated beside it
                if plan is not None and plan not in tried:
                    outside.setdefault(plan, lacks)
                continue
            params = {"gpu": r.gpu, **{name: _preset_value(name, values, want)
                                       for name, values in ev.space.knobs.items()}}
            if not ev.space.allows(params):
                continue  # a value its engine refuses for this job (SearchSpace.excluded)
            prev = ev.known.done.get(config_key(params))
            # not simulated in full yet (never, or screened as the search's first preset)
            if prev is None or prev[1].level != "full":
                todo.setdefault(config_key(params), params)
        if outside:
            _add_outside_space(study, ev, settings, outside)
            tried |= set(outside)
        if not todo:
            if outside:
                continue  # the winners may have changed
            break
        number = len(study.get_trials(deepcopy=False))
        batch = []
        results = _evaluate_many(ev, list(todo.values()), number, settings.constraints, "full")
        for params, (values, attrs) in zip(todo.values(), results, strict=True):
            batch.append(_record_trial(ev, params, number, settings, dists, values, attrs,
                                       {"vllm_defaults": True}))
            number += 1
        study.add_trials(batch)
        added += len(batch)
    return added


def _defaults_outside(ev: Evaluator, config: ServingConfig, meta: StudyMeta
                      ) -> tuple[ServingConfig | None, list[str]]:
    """The engine's defaults on `config`'s GPUs (tuner.search.baseline.defaults_plan, exactly
    as the baseline beside the winners simulates them) and what of them the space does not
    hold: a searched knob without their value, or a fixed one at another ([] when it holds
    them; knobs their engine does not have are held, ENGINE_HELD). (None, [...]) where they
    cannot be a plan of this study: vLLM V0's defaults at its own single scheduler step in a
    search priced at another step count (simulated beside the winner only)."""
    from tuner.core.config import ENGINE_HELD

    c = config
    try:
        plan, _d, steps = defaults_plan(
            ev.model, ev.gpus[c.gpu], tp=c.tp, dp=c.dp, pp=c.pp, weight_bits=c.weight_bits,
            kv_bits=c.kv_bits, engine=c.engine, entry_point=meta.entry_point or
            DEFAULT_ENTRY_POINT, engine_version=meta.engine_version,
            num_scheduler_steps=meta.num_scheduler_steps)
    except TunerError:  # no SGLang default on this GPU
        return None, []
    held = ENGINE_HELD[plan.engine]
    lacks = [f"{name} {getattr(plan, name)} not among {', '.join(map(str, values))}"
             for name, values in ev.space.knobs.items()
             if name not in held and getattr(plan, name, None) not in values]
    lacks += [f"{name} {getattr(plan, name)}, where it fixes {value}"
              for name, value in ev.space.fixed.items()
              if name not in held and hasattr(plan, name) and getattr(plan, name) != value]
    if lacks and steps != meta.num_scheduler_steps:
        return None, lacks
    return plan, lacks


def _add_outside_space(study: optuna.Study, ev: Evaluator, settings: SearchSettings,
                       outside: dict[ServingConfig, list[str]]) -> int:
    """Simulate the engines' defaults the space does not hold (`outside`: plan -> what the
    space lacks) on the full workload, as the evaluator simulates a trial, and keep the
    simulations beside the study's trials (tuner.search.records.add_outside_space), labelled:
    candidates like any plan, so no answer is worse on its goal than the defaults tuner
    simulated beside it. Returns how many were simulated."""
    from tuner.search.records import add_outside_space

    # the evaluator with nothing fixed: a plan's whole configuration is its params
    free = copy.copy(ev)
    free.space = dataclasses.replace(ev.space, fixed={})
    plans = list(outside)
    results = _evaluate_many(free, [p.to_dict() for p in plans], 0, settings.constraints,
                             "full")
    keep = []
    for plan, (values, attrs) in zip(plans, results, strict=True):
        label = (f"{engine_name(plan.engine)}'s defaults, which the space searched does not "
                 f"hold ({'; '.join(outside[plan])})")
        # an infeasible one is kept too (no figures): simulated once, its reason reported
        keep.append({"config": plan.to_dict(),
                     "values": [float(v) for v in values] if attrs.get("feasible") else None,
                     "attrs": {**attrs, "vllm_defaults": True, "engine_defaults": label}})
    add_outside_space(study, keep)
    return len(plans)


def _holds_fixed(space: SearchSpace, want: dict, names: tuple[str, ...] = ("scheduler",)
                 ) -> bool:
    """Whether the space's plans can be `want` in the knobs `names` (the scheduler: how the
    engine batches, which decides what it refuses): searched there with `want`'s value, or
    fixed at it (ServingConfig's default where the space does not name the knob)."""
    fields = ServingConfig.__dataclass_fields__
    return all(want[n] in space.knobs[n] if n in space.knobs
               else space.fixed.get(n, fields[n].default) == want[n]
               for n in names if n in want)


def _cover_every_gpu(study: optuna.Study, ev: Evaluator, settings: SearchSettings,
                     dists: dict, engine: dict[str, dict]) -> int:
    """For each GPU type the search found no feasible plan on (its trials all at TPs too small
    for the model, or over the GPU cap): vLLM's defaults at DP 1 on the smallest TP of the
    space that runs, simulated in full as trials of the study, so a GPU type is left out of
    the answer only where nothing the space holds runs on it. Likewise, for each engine the
    space searches that has no feasible plan on any GPU, that engine's defaults on every GPU
    type: an engine is left out of the answer (its best plans) only where none of them runs.
    Returns the trials added."""
    from tuner.search.records import trial_records

    records = trial_records(study)
    feasible = {r.gpu for r in records if r.feasible}
    # (GPU, engine or None: the vLLM preset over the space's own engine, as before)
    todo: list[tuple[str, str | None]] = [(g, None) for g in ev.gpus
                                          if g not in feasible and g in engine]
    # e.g. DeepSeek-V3 on H200 with --engines vllm,sglang: TPE tried vLLM only at TP 1 and
    # over the GPU cap, so the answer held no vLLM plan though TP 8 runs
    found = {r.config.engine for r in records if r.feasible and r.config is not None}
    todo += [(g, e) for e in ev.space.knobs.get("engine", []) if e not in found
             for g in ev.gpus if g in engine]
    added = 0
    for g, eng in todo:
        gpu = ev.gpus[g]
        tps = sorted(t for t in ev.space.knobs.get("tp", [1]) if t <= gpu.gpus_per_machine)
        for tp in tps or [1]:
            if eng == "sglang":
                try:
                    want = default_config(ev.model, gpu, {"tp": tp, "dp": 1, "pp": 1})[0]
                except TunerError:  # no SGLang default on this GPU
                    break
                want = want.to_dict()
            else:
                want = {**engine[g], "tp": tp, "dp": 1, "pp": 1}
                if eng is not None:
                    want["engine"] = eng
            params = {"gpu": g, **{name: _preset_value(name, values, want)
                                   for name, values in ev.space.knobs.items()}}
            # at the space's nearest where its engine refuses the defaults' value for this job
            # (a V0 budget below the longest request: SearchSpace.excluded)
            params = ev.space.conform(params)
            prev = ev.known.done.get(config_key(params))
            if prev is not None and prev[1].level == "full":
                if prev[1].feasible:
                    break
                continue
            number = len(study.get_trials(deepcopy=False))
            ((values, attrs),) = _evaluate_many(ev, [params], number, settings.constraints,
                                                "full")
            study.add_trials([_record_trial(ev, params, number, settings, dists, values, attrs,
                                            {"vllm_defaults": True})])
            added += 1
            if attrs.get("feasible"):
                break
    return added


def check_defaults(study: optuna.Study, workload: Workload, model: ModelSpec,
                   gpus: dict[str, GPU], space: SearchSpace, settings: SearchSettings, *,
                   cost_model_for: Callable[[GPU, ServingConfig], CostModel] | None = None,
                   metadata: StudyMeta | dict | None = None) -> int:
    """:func:`add_default_trials` for a study other processes ran (`--workers N`)."""
    metadata = StudyMeta.of(metadata)
    ev = Evaluator(workload, model, gpus, space, sample_fraction=settings.sample_fraction,
                   cost_model_for=cost_model_for, defer=settings.defer_candidates,
                   **metadata.sim_options())
    ev.known.ingest(study)
    with StudyHold(settings.storage):
        return (add_final_candidates(study, ev, settings)
                + add_default_trials(study, ev, settings, metadata))


# ---- feasibility before the search -------------------------------------------------------------
def assert_some_gpu_fits(workload: Workload, model: ModelSpec, gpus: dict[str, GPU],
                         space: SearchSpace) -> None:
    """Fail fast, with the numbers, when the model fits on none of the GPUs at the most
    memory-lenient point of the space (each knob's Knob.lenient end: fewest bits, smallest
    budget, largest TP ...)."""
    lenient = {name: KNOBS[name].most_lenient(values) for name, values in space.knobs.items()}
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


