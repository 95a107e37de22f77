"""From a finished study to typed records: one TrialRecord per trial, rank, Pareto, winners.

:meth:`TrialRecord.from_trial` is the only reader of a trial's Optuna ``user_attrs`` (what the
evaluator stored: feasible, reason, metrics, memory, provenance, fidelity, duplicate); everything
after it passes TrialRecords, typed: the configuration a :class:`ServingConfig`, the figures a
:class:`Metrics`, the memory plan a :class:`MemoryPlan`. ``TrialRecord.to_dict()`` is the
record's JSON form (results.json, ``--json``), with the keys it always had.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import numpy as np
import optuna

from tuner.core.catalog import GPU
from tuner.core.config import DEFAULTS, ENGINE_HELD, KNOBS, ServingConfig, engine_name
from tuner.core.engines import NEWEST
from tuner.core.errors import TunerError
from tuner.core.memory import MemoryPlan
from tuner.core.pricing import usd_per_million_tokens
from tuner.core.provenance import Provenance
from tuner.core.units import as_finite
from tuner.search.constraints import Constraints, plan_label, trial_ref
from tuner.search.meta import study_meta
from tuner.search.space import OUTPUT_ORDERINGS, engine_refusal

GOALS = ("fastest", "cheapest")
# A study written before trials recorded their provenance kind: never claimed as measured.
LEGACY_PROVENANCE_KIND = "roofline"


def provenance_from_attrs(value, kind: str | None) -> Provenance | None:
    """The Provenance a trial or record stored: a dict (Provenance.to_dict), or its text with the
    kind beside it (``provenance_kind``)."""
    if isinstance(value, Provenance) or value is None:
        return value
    if isinstance(value, dict):
        return Provenance.from_dict(value)
    return Provenance(kind or LEGACY_PROVENANCE_KIND, str(value))


@dataclass(frozen=True)
class Metrics:
    """The simulated figures a trial stores: :meth:`SimResult.summary` less its memory plan,
    config and provenance (tuner.search.evaluator). Every figure is optional: a study written
    before a figure existed, or a hand-written report context, lacks it (None), and
    :meth:`to_dict` writes back exactly the keys it was read with."""

    makespan_s: float | None = None
    startup_s: float | None = None
    schedule_s: float | None = None
    startup: dict | None = None  # tuner.core.startup.Startup.to_dict
    cost_usd: float | None = None
    usd_per_1k_requests: float | None = None
    usd_per_million_tokens: float | None = None
    rental: dict | None = None  # tuner.core.pricing.Rental.to_dict (--provider)
    machines: dict | None = None  # tuner.core.pricing.Machines.to_dict
    mean_residence_s: float | None = None  # a request's mean time running (SimResult)
    requests: int | None = None
    prompt_tokens: int | None = None
    output_tokens: int | None = None
    throughput_tok_s: float | None = None
    qps: float | None = None
    qps_per_usd_per_h: float | None = None
    iterations: int | None = None
    preemptions: int | None = None
    cached_prompt_tokens: int | None = None
    peak_kv_fraction: float | None = None
    mean_kv_fraction: float | None = None
    lower_bound_s: float | None = None
    schedule_lower_bound_s: float | None = None
    limit_fraction: float | None = None  # lower_bound_s / makespan_s: start-up on both sides
    schedule_limit_fraction: float | None = None  # the same of the schedule alone
    kv_capacity_tokens: int | None = None
    max_concurrent_requests: float | None = None
    vasuki_cost_metric: float | None = None
    offload_stall_s: float | None = None
    offload: dict | None = None  # tuner.sim.offload.OffloadTotals.summary
    extra: dict = field(default_factory=dict, repr=False)  # keys this version does not know
    # the keys read by from_dict, in their order (None: every figure): to_dict writes these
    keys: tuple[str, ...] | None = field(default=None, repr=False, compare=False)

    @classmethod
    def from_dict(cls, d: dict) -> Metrics:
        return cls(**{k: v for k, v in d.items() if k in _METRIC_NAMES},
                   extra={k: v for k, v in d.items() if k not in _METRIC_NAMES},
                   keys=tuple(d))

    def to_dict(self) -> dict:
        keys = self.keys if self.keys is not None else (*_METRIC_FIELDS, *self.extra)
        return {k: self.extra[k] if k in self.extra else getattr(self, k) for k in keys}

    def schedule_limit(self) -> float | None:
        """How near the schedule gets to its physical limit T_o, start-up excluded on both
        sides (SimResult.schedule_limit_fraction): the stored figure, or for a study that
        predates it the schedule's bound over the schedule (a study that predates start-up
        had none: its whole-job ratio); None when unknown."""
        v = as_finite(self.schedule_limit_fraction)
        if v is not None:
            return v
        sched, sched_lb = self.schedule_and_bound()
        if sched is None or sched_lb is None:
            return None
        return sched_lb / sched if sched > 0 else None

    def schedule_and_bound(self) -> tuple[float | None, float | None]:
        """(the schedule, its physical limit T_o), start-up excluded: the stored figures, or
        for a study that predates them the makespan and bound less the start-up (none for a
        study that predates start-up); None where unknown."""
        ms, lb = as_finite(self.makespan_s), as_finite(self.lower_bound_s)
        start = as_finite(self.startup_s) or 0.0
        sched = as_finite(self.schedule_s)
        sched = ms - start if sched is None and ms is not None else sched
        sched_lb = as_finite(self.schedule_lower_bound_s)
        sched_lb = lb - start if sched_lb is None and lb is not None else sched_lb
        return sched, sched_lb

    def cost_per_million_tokens(self) -> float | None:
        """$ per million tokens (input + output): the stored figure, or for a study that
        predates it the job's cost over its token counts (None when unknown)."""
        v = as_finite(self.usd_per_million_tokens)
        if v is not None:
            return v
        cost = as_finite(self.cost_usd)
        prompt, output = as_finite(self.prompt_tokens) or 0, as_finite(self.output_tokens) or 0
        if cost is None or prompt + output <= 0:
            return None
        return usd_per_million_tokens(cost, prompt, output)


_METRIC_FIELDS = tuple(f.name for f in dataclasses.fields(Metrics) if f.name not in
                       ("extra", "keys"))
_METRIC_NAMES = frozenset(_METRIC_FIELDS)


def config_from_dict(d: dict) -> ServingConfig:
    """The ServingConfig of a stored configuration (a trial's params over the space's fixed
    knobs, results.json's ``config``); keys of knobs this version does not have are dropped."""
    return ServingConfig(**{k: v for k, v in d.items() if k in KNOBS})


def config_key(params: dict) -> tuple:
    """The identity of a configuration: its params with the knobs its engine does not have held
    (tuner.core.config.ENGINE_HELD), so a vLLM trial's schedule policy is no new plan."""
    held = ENGINE_HELD[params.get("engine", DEFAULTS["engine"])]
    return tuple(sorted((k, held.get(k, v)) for k, v in params.items()))


#: a configuration's fidelity (TrialRecord.level), coarse to exact: the stratified sample, the
#: reference rung (tuner.search.evaluator.rung_size), the full workload
LEVELS = ("sample", "rung", "full")

#: trials the search adds after its budget (tuner.search.loop.add_final_candidates,
#: add_default_trials): beyond --n-trials on every run, so a resumed study's budget counts only
#: what the search proposed
EXTRA_TRIAL_ATTRS = ("final_candidate", "vllm_defaults")

#: the study's user attribute listing its engines' defaults simulated where the space does not
#: hold them (a user's --space without vLLM's max_num_seqs, say; tuner.search.loop.
#: add_default_trials): Optuna records no trial with a value outside a knob's choices, so they
#: are kept beside the trials, each {"number", "config", "values", "attrs"}, and
#: :func:`trial_records` makes them candidates like any plan (numbered -1, -2, ...: no trial
#: number is negative, and Optuna hands out the others)
OUTSIDE_SPACE_ATTR = "engine_defaults_outside_space"


def counts_toward_budget(trial: optuna.trial.FrozenTrial) -> bool:
    """Whether --n-trials counts `trial`: not one the search added beyond it (EXTRA_TRIAL_ATTRS)."""
    return not any(trial.user_attrs.get(k) for k in EXTRA_TRIAL_ATTRS)


@dataclass
class TrialRecord:
    """One completed trial: its configuration and, when feasible, the simulated figures. The
    JSON forms (a config, metrics or memory dict) are accepted for the typed fields too."""

    number: int
    # the full configuration: the trial's params over the space's fixed knobs; None for a
    # record read without them (all_records(with_config=False), the search's bookkeeping)
    config: ServingConfig | None
    feasible: bool
    reason: str = ""  # why infeasible
    metrics: Metrics | None = None  # the simulated figures (makespan_s, cost_usd, ...)
    memory: MemoryPlan | None = None  # per GPU of a replica
    provenance: Provenance | None = None  # where the cost model's figures come from
    values: tuple[float, ...] | None = None  # the study's objectives (makespan_s, cost_usd)
    fidelity: dict = field(default_factory=dict)  # multi-fidelity: level, sample figures
    duplicate: bool = False  # a repeat of a configuration already simulated
    # vLLM's defaults on the same GPU type and count, and the gain over them
    # (tuner.search.baseline.attach_baselines; winners and Pareto points only)
    baseline: dict | None = None
    # meets the study's --deadline / --budget (tuner.search.constraints); winners are picked
    # among the records that do whenever one does
    within: bool = True
    # why no engine runs this plan as exported ("" = it can be deployed): a simulator study,
    # shown but never a winner (study_only_reason)
    study_only: str = ""
    # --spot: the expected makespan and $ under interruptions (tuner.search.spot.plan_spot),
    # set when a study's outputs are made
    spot: dict | None = None
    # an engine's defaults the space does not hold, simulated as a candidate (OUTSIDE_SPACE_ATTR):
    # what they are and which of their values the space lacks ("" for the space's own plans)
    engine_defaults: str = ""
    # the knob values the plan runs with where SGLang overrides the sampled ones
    # (tuner.search.evaluator.Evaluator.runs_as: a hybrid's R_max capped by its state pool),
    # already in `config`; `sampled`: the values the search sampled; runs_as_note: why
    runs_as: dict = field(default_factory=dict)
    sampled: dict = field(default_factory=dict)
    runs_as_note: str = ""

    def __post_init__(self) -> None:
        if isinstance(self.config, dict):  # {}: none, as None
            self.config = config_from_dict(self.config) if self.config else None
        if isinstance(self.metrics, dict):  # {}: none, as None
            self.metrics = Metrics.from_dict(self.metrics) if self.metrics else None
        if isinstance(self.memory, dict):
            self.memory = MemoryPlan.from_dict(self.memory) if self.memory else None

    @classmethod
    def from_trial(cls, trial: optuna.trial.FrozenTrial, fixed: dict | None = None) -> TrialRecord:
        """The record of an Optuna trial; ``fixed``: the space's fixed knobs (the study's
        metadata) to complete the configuration (without them, the record has none)."""
        config = ServingConfig(**fixed, **trial.params) if fixed is not None else None
        return cls.from_attrs(trial.number, config, trial.values, trial.user_attrs)

    @classmethod
    def from_attrs(cls, number: int, config: ServingConfig | dict | None, values,
                   attrs: dict) -> TrialRecord:
        """The record of the user attributes the evaluator stores on a trial (the evaluator's
        own bookkeeping reads its fresh results through this too). `config`: as sampled; the
        record's is the plan as it runs (``runs_as``)."""
        runs_as = dict(attrs.get("runs_as") or {})
        sampled = {}
        if isinstance(config, dict):  # {}: none
            config = config_from_dict(config) if config else None
        if runs_as and config is not None:
            sampled = {k: getattr(config, k) for k in runs_as}
            config = dataclasses.replace(config, **runs_as)
        return cls(number=number, config=config, runs_as=runs_as, sampled=sampled,
                   runs_as_note=str(attrs.get("runs_as_note") or ""),
                   feasible=bool(attrs.get("feasible", False)), reason=attrs.get("reason", ""),
                   metrics=attrs.get("metrics"), memory=attrs.get("memory"),
                   provenance=provenance_from_attrs(attrs.get("provenance"),
                                                    attrs.get("provenance_kind")),
                   values=tuple(values) if values else None,
                   fidelity=attrs.get("fidelity") or {}, duplicate=bool(attrs.get("duplicate")),
                   engine_defaults=str(attrs.get("engine_defaults") or ""))

    @classmethod
    def from_dict(cls, d: dict) -> TrialRecord:
        """A record from its JSON form (results.json, a report context)."""
        return cls(number=int(d["number"]), config=d.get("config") or {},
                   feasible=bool(d["feasible"]),
                   reason=d.get("reason") or "", metrics=d.get("metrics"),
                   memory=d.get("memory"),
                   provenance=provenance_from_attrs(d.get("provenance") or None,
                                                    d.get("provenance_kind")),
                   baseline=d.get("vllm_defaults"),
                   engine_defaults=d.get("engine_defaults") or "",
                   **_runs_as_from_dict(d))

    def to_dict(self) -> dict:
        d = {"number": self.number,
             "config": self.config.to_dict() if self.config is not None else {},
             "feasible": self.feasible,
             "reason": self.reason,
             "metrics": self.metrics.to_dict() if self.metrics is not None else None,
             "memory": self.memory.to_dict() if self.memory is not None else None,
             "provenance": str(self.provenance) if self.provenance is not None else ""}
        if self.baseline is not None:
            d["vllm_defaults"] = self.baseline
        if self.study_only:
            d["study_only"] = self.study_only
        if self.engine_defaults:
            d["engine_defaults"] = self.engine_defaults
        if self.runs_as:  # `config` holds the values that run
            d["runs_as"] = {"sampled": self.sampled, "note": self.runs_as_note}
        m = self.metrics
        if self.config is not None and m is not None and m.makespan_s is not None:
            # one part: the plan's GPU type serving every request (a mix has several,
            # tuner.search.fleet)
            c = self.config
            d["parts"] = [{"gpu": c.gpu, "count": c.num_gpus, "tp": c.tp, "pp": c.pp, "dp": c.dp,
                           "requests": m.requests, "makespan_s": m.makespan_s,
                           "cost_usd": m.cost_usd}]
            if self.spot is not None:
                d["parts"][0].update(_spot_part(self.spot, 0))
        if self.spot is not None:
            d["spot"] = self.spot
        return d

    @property
    def level(self) -> str:
        """'full' (simulated on the whole workload), 'rung' (judged on the reference rung) or
        'sample' (judged on the sample only): LEVELS."""
        return self.fidelity.get("level", "full")

    @property
    def gpu(self) -> str:
        return self.config.gpu

    @property
    def makespan_s(self) -> float:
        return self.metrics.makespan_s

    @property
    def cost_usd(self) -> float:
        return self.metrics.cost_usd

    def serving_config(self) -> ServingConfig:
        """The configuration (:attr:`config`, typed; kept for earlier callers)."""
        return self.config


def _runs_as_from_dict(d: dict) -> dict:
    """TrialRecord's runs_as fields from its JSON form's "runs_as" (config: the values run)."""
    entry, config = d.get("runs_as") or {}, d.get("config") or {}
    sampled = dict(entry.get("sampled") or {})
    return {"runs_as": {k: config[k] for k in sampled if k in config}, "sampled": sampled,
            "runs_as_note": str(entry.get("note") or "")}


def _spot_part(spot: dict, i: int) -> dict:
    """A part's expected figures of a plan's "spot" entry (tuner.search.spot.expectation)."""
    p = (spot.get("parts") or [{}] * (i + 1))[i]
    return {"expected_makespan_s": p.get("expected_makespan_s"),
            "expected_cost_usd": p.get("expected_cost_usd")}


def completed(study: optuna.Study) -> list[optuna.trial.FrozenTrial]:
    return study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))


def all_records(study: optuna.Study, *, with_config: bool = True) -> list[TrialRecord]:
    """Every completed trial as a record (duplicates and sample-only ones included)."""
    fixed = study_meta(study).fixed if with_config else None
    return [TrialRecord.from_trial(t, fixed) for t in completed(study)]


def trial_records(study: optuna.Study) -> list[TrialRecord]:
    """One record per distinct configuration simulated on the full workload (completed trials;
    duplicates, configurations only screened on the workload's sample, and a repeat of a
    configuration two workers simulated at once are left out)."""
    meta = study_meta(study)
    fixed = meta.fixed
    limits = meta.constraints
    # a study from before the rule (no output_source) keeps its orderings
    known = meta.outputs_recommendable
    engine_schedulers = meta.engine_schedulers
    out, seen = [], set()
    for t in completed(study):
        key = config_key(t.params)
        if key in seen:
            continue
        r = TrialRecord.from_trial(t, fixed)
        if r.duplicate or r.level != "full":
            continue
        seen.add(key)
        out.append(r)
    held = {o.config for o in out}  # a later, wider space may hold them as trials
    out += [r for r in outside_space_records(study) if r.config not in held]
    for r in out:
        if limits.on_figures and r.feasible:
            r.within = limits.meets(r.makespan_s, r.cost_usd)
        r.study_only = study_only_reason(r.config, known, engine_schedulers)
    return out


def outside_space_records(study: optuna.Study) -> list[TrialRecord]:
    """The engines' defaults the search simulated outside its space (OUTSIDE_SPACE_ATTR), as
    records labelled with what they are (TrialRecord.engine_defaults)."""
    return [TrialRecord.from_attrs(int(e["number"]), e["config"], e.get("values"),
                                   e.get("attrs") or {})
            for e in study.user_attrs.get(OUTSIDE_SPACE_ATTR) or []]


def add_outside_space(study: optuna.Study, entries: list[dict]) -> list[int]:
    """Keep `entries` ({"config", "values", "attrs"}: engines' defaults simulated outside the
    space) beside the study's trials (OUTSIDE_SPACE_ATTR), numbered on from -1 down; their
    numbers."""
    have = list(study.user_attrs.get(OUTSIDE_SPACE_ATTR) or [])
    first = -1 - len(have)
    new = [{**e, "number": first - i} for i, e in enumerate(entries)]
    if new:
        study.set_user_attr(OUTSIDE_SPACE_ATTR, have + new)
    return [e["number"] for e in new]


def study_only_reason(config: ServingConfig, outputs_known: bool = True,
                      engine_schedulers: tuple[str, ...] = NEWEST.schedulers) -> str:
    """Why a plan is a simulator study rather than a recommendation ("" when the engine runs
    it as exported): a knob value its engine lacks (tuner.search.space.engine_refusal: a study
    searched before such plans were left out), a scheduler preset the engine's flags do not
    select (`engine_schedulers`: its generation's, tuner.core.engines; default the newest
    vLLM's), or an ordering by output lengths nobody knows before the run
    (tuner.search.space.OUTPUT_ORDERINGS)."""
    lacks = engine_refusal(config)
    if lacks:
        return f"simulator study: {lacks}"
    name = config.scheduler
    # an SGLang plan holds the scheduler knob (ENGINE_HELD): it runs SGLang's own scheduler,
    # whatever vLLM release --engine-version names
    if config.engine == "vllm" and name not in engine_schedulers:
        return (f"simulator study: the vLLM release searched does not run the '{name}' "
                f"scheduler preset as exported (its flags select {', '.join(engine_schedulers)})")
    ordering = config.ordering
    if not outputs_known and ordering in OUTPUT_ORDERINGS:
        return (f"simulator study: ordering '{ordering}' sorts by output lengths the input does "
                "not give (pass --outputs-known when they are known)")
    return ""


def study_constraints(study: optuna.Study) -> Constraints:
    """The --deadline / --budget / --max-gpus a study was searched under."""
    return study_meta(study).constraints


def deployable(feas: list[TrialRecord]) -> list[TrialRecord]:
    """The records an engine runs as exported (not simulator studies), or all when none is."""
    return [r for r in feas if not r.study_only] or feas


def _preferred(feas: list[TrialRecord]) -> list[TrialRecord]:
    """The deployable records that meet the study's deadline/budget, or all deployable ones
    when none does."""
    feas = deployable(feas)
    within = [r for r in feas if r.within]
    return within or feas


#: knobs whose end of the range is no bound of the search (16-bit is the model's own precision)
_NOT_BOUNDS = ("tp", "dp", "pp", "weight_bits", "kv_bits", "block_size")


def bounds_hit(r: TrialRecord, knobs: dict, constraints: Constraints,
               gpus_per_machine: int, space: str = "") -> list[str]:
    """Where a plan sits on a bound of its search, each with the flag that widens it: the
    GPU cap (--max-gpus), a whole machine of TP, or the end of a knob's list in the space."""
    c = r.config
    out = []
    n = c.num_gpus
    cap = constraints.gpu_cap(r.gpu)
    if n >= cap:
        flag = (f"--max-gpus {r.gpu}={2 * cap}" if r.gpu in constraints.max_gpus_per_type
                else f"--max-gpus {2 * cap}")
        out.append(f"{n} x {r.gpu} is the most GPUs a plan may use ({constraints.cap_flag(r.gpu)}"
                   f"): {flag} widens it")
    if c.tp >= gpus_per_machine > 1:
        out.append(f"TP {c.tp} fills a whole {r.gpu} machine ({gpus_per_machine} GPUs): a "
                   "tensor-parallel group does not span machines (pipeline stages do: a "
                   "--space listing pp)")
    where = f" ({space})" if space else ""
    # the engine's own default on this plan, which the search adds to the lists (SGLang's:
    # tuner.search.space._offer_sglang_defaults): not a value the space file offers
    b = r.baseline or {}
    own = (b.get("config") or {}) if b.get("engine", "vllm") == c.engine else {}
    for name, values in knobs.items():
        if name in _NOT_BOUNDS or name not in KNOBS or len(values) < 2 or not all(
                isinstance(v, int | float) and not isinstance(v, bool) for v in values):
            continue
        value = getattr(c, name)
        if value not in (max(values), min(values)) or (value == min(values) and value <= 0):
            continue
        end, more = (("largest", "larger") if value == max(values) else ("smallest", "smaller"))
        said = (f"{name} {value:g} ({engine_name(c.engine)}'s own default here, which the "
                f"search adds) is the {end} searched" if own.get(name) == value
                else f"{name} {value:g} is the {end} the space offers{where}")
        out.append(f"{said}: a --space listing {more} values widens it")
    return out


def rank(records: Iterable[TrialRecord], goal: str) -> list[TrialRecord]:
    """Feasible records best-first on ``goal`` (ties: the other objective, then trial number)."""
    if goal not in GOALS:
        raise TunerError(f"Unknown goal {goal!r}; choose fastest or cheapest.")
    feas = _preferred([r for r in records if r.feasible])
    if goal == "fastest":
        return sorted(feas, key=lambda r: (r.makespan_s, r.cost_usd, r.number))
    return sorted(feas, key=lambda r: (r.cost_usd, r.makespan_s, r.number))


def pareto_indices(points: list[tuple[float, float]]) -> list[int]:
    """Indices of the (makespan, $) points no other beats on both (of equal points the first),
    sorted by makespan."""
    front, best_cost = [], math.inf
    for i in sorted(range(len(points)), key=lambda i: (*points[i], i)):
        if points[i][1] < best_cost:
            front.append(i)
            best_cost = points[i][1]
    return front


def pareto(records: Iterable[TrialRecord]) -> list[int]:
    """Trial numbers not dominated in (makespan_s, cost_usd), sorted by makespan."""
    feas = sorted(deployable([r for r in records if r.feasible]), key=lambda r: r.number)
    return [feas[i].number for i in pareto_indices([(r.makespan_s, r.cost_usd) for r in feas])]


def cost_model_picks(records: list[TrialRecord]) -> dict[str, dict[str, list[tuple]]]:
    """{GPU: {engine: [(goals, trials, provenance)]}}: the cost model of each GPU's (and
    engine's) best plans, fastest and cheapest (:func:`rank`), one entry per distinct
    provenance ('fastest and cheapest' where both plans have the same), with the trials it
    describes. The provenance names the plan's parallelism (moe_tp, machines), which differs
    between trials of one GPU, so one from another trial than the winner's would describe
    another plan. What the terminal's cost-model lines and the report's provenance table show
    (a study that priced both engines on a GPU has lines for each: their kernel tables and
    engine overheads differ)."""
    feasible = [r for r in records if r.feasible and r.provenance is not None]
    by: dict[str, dict[str, list[tuple]]] = {}
    for g in dict.fromkeys(r.gpu for r in feasible):
        mine = [r for r in feasible if r.gpu == g]
        for e in dict.fromkeys(r.config.engine for r in mine):
            ours = [r for r in mine if r.config.engine == e]
            grouped: dict[str, list] = {}
            for goal in GOALS:
                best = rank(ours, goal)[0]  # deployable() keeps at least one of `ours`
                grouped.setdefault(str(best.provenance), []).append((goal, best))
            by.setdefault(g, {})[e] = [
                (" and ".join(goal for goal, _ in plans),
                 list({id(r): r for _, r in plans}.values()), plans[0][1].provenance)
                for plans in grouped.values()]
    return by


def cost_models_by_engine(records: list[TrialRecord]) -> dict[str, dict[str, list[str]]]:
    """{GPU: {engine: ['fastest and cheapest (trial #12): its cost model', ...]}}: the lines
    of :func:`cost_model_picks`, each naming the plans and trials it describes."""
    return {g: {e: [f"{goals} ({' and '.join(dict.fromkeys(trial_ref(r) for r in rs))}): "
                    f"{provenance}" for goals, rs, provenance in picks]
                for e, picks in engines.items()}
            for g, engines in cost_model_picks(records).items()}


def winners(records: list[TrialRecord]) -> tuple[dict, dict]:
    """({'fastest': n, 'cheapest': n}, {gpu: {'fastest': n, 'cheapest': n}}) over feasible trials."""
    feas = [r for r in records if r.feasible]
    if not feas:
        return {}, {}

    def pick(rs: list[TrialRecord]) -> dict:
        return {goal: rank(rs, goal)[0].number for goal in GOALS}

    per_gpu = {gpu: pick([r for r in feas if r.gpu == gpu])
               for gpu in dict.fromkeys(r.gpu for r in deployable(feas))}
    return pick(feas), per_gpu


def engine_winners(records: list[TrialRecord]) -> dict[str, dict]:
    """{engine: {'fastest': n, 'cheapest': n}}: the best plan of each engine the study
    simulated (vLLM's and SGLang's fronts apart), as :func:`winners` picks them."""
    feas = [r for r in deployable([r for r in records if r.feasible])]
    out = {}
    for engine in dict.fromkeys(r.config.engine for r in feas):
        mine = [r for r in feas if r.config.engine == engine]
        out[engine] = {goal: rank(mine, goal)[0].number for goal in GOALS}
    return out


def winner_roles_of(best: dict, per_gpu: dict) -> dict[int, list[str]]:
    """Trial number -> its roles ('overall fastest', 'A10 cheapest', ...), overall first, from
    :func:`winners`' two dicts."""
    roles: dict[int, list[str]] = {}
    for goal in GOALS:
        if best.get(goal) is not None:
            roles.setdefault(best[goal], []).append(f"overall {goal}")
    for gpu, d in per_gpu.items():
        for goal in GOALS:
            roles.setdefault(d[goal], []).append(f"{gpu} {goal}")
    return roles


def outside_space_verdicts(records: list[TrialRecord]) -> list[str]:
    """One line per overall winner that is an engine's defaults the space does not hold
    (TrialRecord.engine_defaults): the space's own best is worse on that goal, so the defaults
    are the answer, and its exports."""
    best, _ = winners(records)
    by_num = {r.number: r for r in records}
    goals: dict[int, list[str]] = {}
    for goal, n in best.items():
        goals.setdefault(n, []).append(goal)
    return [f"{' and '.join(named).capitalize()}: {by_num[n].engine_defaults}, on "
            f"{plan_label(by_num[n].config)}: no plan of the space beats them on this goal, so "
            "they are the answer and its exports (a --space holding their values searches "
            "around them)."
            for n, named in goals.items() if by_num[n].engine_defaults]


def infeasible_summary(records: list[TrialRecord]) -> dict[str, int]:
    """Infeasibility reasons with how many trials hit each, most frequent first."""
    counts: dict[str, int] = {}
    for r in records:
        if not r.feasible:
            counts[r.reason] = counts.get(r.reason, 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: -kv[1]))


def require_feasible(records: list[TrialRecord], study_name: str) -> None:
    """One TunerError when no record is feasible (none yet, or every one infeasible)."""
    if any(r.feasible for r in records):
        return
    if not records:
        raise TunerError(f"Study {study_name!r} has no completed trial on the full workload "
                         "yet; run more trials (--resume) or a worker.")
    reasons = infeasible_summary(records)
    raise TunerError("Every configuration tried is infeasible: "
                     + "; ".join(f"{n} x {r}" for r, n in list(reasons.items())[:3]))


_KNOB_TITLES = {"chunk_size": "chunk", "max_running": "R_max", "tp": "TP", "dp": "DP",
                "scheduler": "scheduler", "ordering": "order",
                "gpu_memory_utilization": "mem util", "kv_offload_layers": "KV offl.",
                "weight_offload_fraction": "W offl.", "attention_on_cpu": "CPU attn",
                "cpu_threads_intra": "thr intra", "cpu_threads_inter": "thr inter",
                "block_size": "block"}


def knob_columns(records: list[TrialRecord]) -> list[tuple[str, Callable[[dict], str]]]:
    """(column title, cell of a config) for the tables: every knob that varies among the
    records, plus the weight/KV bits."""
    configs = [r.config.to_dict() for r in records]
    varying = [k for k in (configs[0] if configs else {})
               if k not in ("gpu", "weight_bits", "kv_bits")
               and len({str(c[k]) for c in configs}) > 1]
    cols = [(_KNOB_TITLES.get(k, k), lambda c, k=k: str(c[k])) for k in varying]
    cols.append(("W/KV bits", lambda c: f"{c['weight_bits']}/{c['kv_bits']}"))
    return cols


def search_stats(study: optuna.Study) -> dict:
    """How the search spent its trials, and the measured sampling error of the multi-fidelity
    estimates: every trial simulated on both the sample and the full workload gives one
    relative error |estimate / full - 1| (estimate = calibrated, scaled sample makespan)."""
    trials = all_records(study, with_config=False)
    # one record per configuration: a deferred candidate's full simulation at the end
    # (tuner.search.loop.add_final_candidates) stands for its sample screening
    by_key: dict[tuple, TrialRecord] = {}
    for t, ft in zip(trials, completed(study), strict=True):
        if t.duplicate:
            continue
        key = config_key(ft.params)
        if key not in by_key or LEVELS.index(t.level) > LEVELS.index(by_key[key].level):
            by_key[key] = t
    distinct = list(by_key.values())
    full = [t for t in distinct if t.level == "full"]
    # the trials --n-trials counts that proposed a configuration already in the study (not
    # the search's own later simulations of a screened one, on the rung and in full at the end)
    seen: set[tuple] = set()
    duplicates = 0
    for ft in completed(study):
        # as the plan runs: R_max above a hybrid's SGLang state-pool cap is the cap's plan
        # (tuner.search.evaluator.Evaluator.runs_as)
        key = config_key({**ft.params, **(ft.user_attrs.get("runs_as") or {})})
        if key in seen and counts_toward_budget(ft):
            duplicates += 1
        seen.add(key)
    stats: dict = {
        "trials": len(trials),
        "duplicates": duplicates,
        "configurations": len(distinct),
        "full_simulations": len(full),
        "screened_on_sample": len(distinct) - len(full),
        # of those, judged on the reference rung (tuner.search.evaluator.rung_size)
        "judged_on_rung": sum(1 for t in distinct if t.level == "rung"),
        "infeasible": sum(1 for t in distinct if not t.feasible),
        # vLLM's defaults simulated beside the winners (tuner.search.loop.add_default_trials)
        # (and those outside the space, kept beside the trials: OUTSIDE_SPACE_ATTR)
        "vllm_defaults_checks": sum(1 for t in completed(study)
                                    if t.user_attrs.get("vllm_defaults"))
        + len(study.user_attrs.get(OUTSIDE_SPACE_ATTR) or []),
        # configurations screened on the sample, simulated in full at the end as candidates
        "final_candidates": sum(1 for t in completed(study)
                                if t.user_attrs.get("final_candidate")
                                and t.user_attrs.get("fidelity", {}).get("level") == "full"),
        # ... and those first simulated on the rung at the end
        "final_rung_simulations": sum(1 for t in completed(study)
                                      if t.user_attrs.get("final_candidate")
                                      and t.user_attrs.get("fidelity", {}).get("level") == "rung"),
    }
    # a dp-replica plan is screened on one replica's share (Evaluator.replica_sample): the
    # largest sample is the single-replica plans'
    fid0 = max((t.fidelity for t in distinct if t.fidelity.get("requests")),
               key=lambda f: f["requests"], default=None)
    if fid0:
        stats["sample_requests"] = fid0["requests"]
        stats["sample_scale"] = fid0["scale"]
    rungs = [t.fidelity["rung_requests"] for t in distinct if t.fidelity.get("rung_requests")]
    if rungs:
        stats["rung_requests"] = max(rungs)
    rung_pairs = [t for t in full if t.feasible and t.fidelity.get("rung_makespan_s") is not None]
    if rung_pairs:
        stats["rung_error"] = _rung_error(rung_pairs)
    pairs = [t for t in full if t.feasible and t.fidelity.get("sample_makespan_s") is not None]
    if pairs:
        stats["sampling_error"] = _sampling_error(pairs)
    return stats


def _rung_error(pairs: list[TrialRecord]) -> dict:
    """Error of the scaled rung makespan (calibrated as the search did) against the full one,
    over the plans simulated on both."""
    est = np.array([t.fidelity["rung_makespan_s"] * t.fidelity["rung_scale"]
                    * (t.fidelity.get("rung_k") or 1.0) for t in pairs])
    fullv = np.array([t.values[0] - (t.fidelity.get("startup_s") or 0.0) for t in pairs])
    err = np.abs(est / fullv - 1.0)
    return {"pairs": len(pairs), "median": float(np.median(err)), "max": float(err.max())}


def _sampling_error(pairs: list[TrialRecord]) -> dict:
    """Error of the scaled sample makespan against the full one, over trials that have both."""
    reasons: dict[str, int] = {}
    for t in pairs:
        why = str(t.fidelity.get("promoted", ""))
        reasons[why] = reasons.get(why, 0) + 1
    est = np.array([t.fidelity["sample_makespan_s"] * t.fidelity["scale"] for t in pairs])
    # schedules against schedules: the full makespan less its start-up (not scaled)
    fullv = np.array([t.values[0] - (t.fidelity.get("startup_s") or 0.0) for t in pairs])
    ratio = fullv / est  # full / (n_full/n_sample x sample): 1 if the sample scaled exactly
    k = float(np.median(ratio))
    err = np.abs(k / ratio - 1.0)  # |calibrated estimate / full - 1|
    audit = np.array([t.fidelity.get("promoted") == "audit" for t in pairs])
    return {
        "pairs": len(pairs),
        "promoted_because": reasons,
        "ratio_full_over_scaled_sample": {"median": k, "min": float(ratio.min()),
                                          "max": float(ratio.max())},
        "relative_error": {"median": float(np.median(err)), "p90": float(np.quantile(err, 0.9)),
                           "max": float(err.max())},
        "audited": int(audit.sum()),
        "audited_max_relative_error": float(err[audit].max()) if audit.any() else None,
    }


def offload_verdict(records: list[TrialRecord], gpus: dict[str, GPU]) -> str | None:
    """Vasuki's question, answered from the study: does the smallest-memory GPU, with the
    memory-stretching knobs, approach the largest one? None when the space has no offload knob
    or fewer than two GPU sizes."""
    feas = [r for r in records if r.feasible]
    if not any(r.config.kv_offload_layers or r.config.weight_offload_fraction for r in feas):
        return None
    by_gpu: dict[str, list[TrialRecord]] = {}
    for r in feas:
        by_gpu.setdefault(r.gpu, []).append(r)
    sizes = sorted((gpus[g].memory_gib, g) for g in by_gpu if g in gpus)
    if len(sizes) < 2 or sizes[0][0] == sizes[-1][0]:
        return None
    small, big = sizes[0][1], sizes[-1][1]
    fs, fb = rank(by_gpu[small], "fastest")[0], rank(by_gpu[big], "fastest")[0]
    cs, cb = rank(by_gpu[small], "cheapest")[0], rank(by_gpu[big], "cheapest")[0]
    ratio = fs.makespan_s / fb.makespan_s
    verdict = "approaches" if ratio <= 1.1 else "does not approach"
    cfg = fs.config
    # different GPU types by design: both sides named with their counts and precision
    text = (f"Offloading: {small} {verdict} {big} — the fastest {small} plan, "
            f"{plan_label(cfg)} with {cfg.kv_offload_layers} KV layers and "
            f"{100 * cfg.weight_offload_fraction:.0f} % of weights offloaded, takes "
            f"{ratio:.2f}x the time of the fastest {big} plan, {plan_label(fb.config)}; the "
            f"cheapest {small} plan, {plan_label(cs.config)}, costs {cs.cost_usd / cb.cost_usd:.2f}x "
            f"the cheapest {big} plan, {plan_label(cb.config)}.")
    parts = _offload_why(cfg, fs.metrics.offload or {})
    if parts:
        text += f" Why: {', '.join(parts)}."
    return text


def _offload_why(cfg: ServingConfig, off: dict) -> list[str]:
    """What the simulator's offload figures (tuner.sim.offload.OffloadTotals.summary) say of a
    plan: the KV capacity it gains, and its stall split by cause, each quoted only where the
    plan has it: KV transfer (its per-layer transfer against compute) with KV layers offloaded,
    weight streaming with weights offloaded. A study stored before the split: the total. A
    plan that offloads nothing: nothing (the verdict's "0 KV layers and 0 %" says it)."""
    if not (cfg.kv_offload_layers > 0 or cfg.weight_offload_fraction > 0):
        return []
    parts = []
    if off.get("kv_capacity_gain"):
        parts.append(f"KV capacity x{off['kv_capacity_gain']:.2f}")
    kv_stall, w_stall = off.get("kv_stall_s"), off.get("weight_stall_s")
    if cfg.kv_offload_layers > 0 and off.get("transfer_to_compute_ratio"):
        parts.append(f"one layer's KV transfer takes {off['transfer_to_compute_ratio']:.1f}x "
                     "its compute")
    if kv_stall is None or w_stall is None:
        if off.get("offload_stall_s") is not None:
            parts.append(f"stalls {off['offload_stall_s']:.0f} s")
        return parts
    if cfg.kv_offload_layers > 0:
        parts.append(f"KV transfer stalls {kv_stall:.0f} s")
    if cfg.weight_offload_fraction > 0:
        parts.append(f"streaming {100 * cfg.weight_offload_fraction:.0f} % of the weights "
                     f"every iteration stalls {w_stall:.0f} s")
    return parts
