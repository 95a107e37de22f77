"""Gain over vLLM's defaults: every winner against what vLLM does untuned on the same GPU type
and the same GPU count (TP x DP), under the job's entry point (tuner.core.engine_defaults).

The baseline is simulated on the full workload with the search's cost model, once per
(GPU type, TP, DP); ratios are winner / defaults, so 0.5 is half the makespan or half the $.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable

from tuner.core.catalog import GPU, ModelSpec
from tuner.core.config import ServingConfig, engine_name
from tuner.core.engine_defaults import DEFAULT_ENTRY_POINT, presets_by_gpu, vllm_defaults
from tuner.core.engines import FITTED_SCHEDULER_STEPS, generation_of
from tuner.core.errors import TunerError
from tuner.core.sglang import default_config
from tuner.core.workload import Workload
from tuner.predictors.protocol import CostModel
from tuner.predictors.sources import cost_model_for as default_cost_models
from tuner.search.meta import StudyMeta
from tuner.search.records import Metrics, TrialRecord
from tuner.sim.parallel import parallel_workers, thread_map
from tuner.sim.simulator import InfeasibleConfig, simulate

#: SimResult.summary() figures a baseline keeps
BASELINE_METRICS = ("makespan_s", "cost_usd", "usd_per_million_tokens", "usd_per_1k_requests",
                    "preemptions", "kv_capacity_tokens", "peak_kv_fraction", "rental")


def defaults_plan(model: ModelSpec, gpu: GPU, *, tp: int = 1, dp: int = 1,
                  weight_bits: int = 16, kv_bits: int = 16, pp: int = 1,
                  entry_point: str = DEFAULT_ENTRY_POINT, engine_version: str | None = None,
                  engine: str = "vllm", num_scheduler_steps: int | None = None
                  ) -> tuple[ServingConfig, dict, int | None]:
    """`engine`'s defaults on `gpu` x (tp, dp, pp) at the plan's precision, as the baseline
    simulates them: (the configuration, its defaults' dict, the --num-scheduler-steps they run
    at). The steps differ from `num_scheduler_steps` only where vLLM's own default (1) replaces
    the search's pricing (:func:`defaults_scheduler_steps`). TunerError where SGLang has no
    default on this GPU (too little memory)."""
    if engine == "sglang":  # SGLang's own defaults for the GPU (tuner.core.sglang)
        given = {"tp": tp, "dp": dp, "pp": pp, "weight_bits": weight_bits, "kv_bits": kv_bits}
        config, defaults = default_config(model, gpu, given)
        return config, defaults.to_dict(), num_scheduler_steps
    defaults = vllm_defaults(gpu.name, gpu.memory_gib, entry_point, engine_version,
                             model.max_position, model, num_scheduler_steps)
    # the winner's precision: vLLM serving the same checkpoint untuned (like for like)
    config = ServingConfig(gpu=gpu.name, tp=tp, dp=dp, pp=pp, **{
        **defaults.knobs(), "weight_bits": weight_bits, "kv_bits": kv_bits})
    steps = defaults_scheduler_steps(defaults.scheduler, engine_version, num_scheduler_steps)
    d = defaults.to_dict()
    if steps != num_scheduler_steps:  # vLLM's own step count, not the search's pricing
        d["num_scheduler_steps"] = steps
        d["description"] += ("; single-step (vLLM's default --num-scheduler-steps 1: "
                             + _single_step_why(engine_version, defaults.scheduler)
                             + "), priced with V0's single-step host estimate")
    return config, d, steps


def _single_step_why(engine_version: str | None, scheduler: str) -> str:
    """Why V0's defaults run single-step where the search prices (and exports) 10 steps."""
    from tuner.core.schedulers import SCHEDULER_PRESETS

    if not SCHEDULER_PRESETS[scheduler].chunked_prefill:
        return (f"the search's plans run {FITTED_SCHEDULER_STEPS} steps, as its exports say; "
                "untuned V0 runs one")
    if not generation_of(engine_version).multi_step_chunked:
        return f"{engine_version} refuses multi-step scheduling with chunked prefill"
    return ("above 32K context V0 chunks prompts at that budget; multi-step would budget the "
            "whole context instead (SchedulerConfig)")


def simulate_baseline(workload: Workload, model: ModelSpec, gpu: GPU, *, tp: int = 1,
                      dp: int = 1, weight_bits: int = 16, kv_bits: int = 16, pp: int = 1,
                      entry_point: str = DEFAULT_ENTRY_POINT,
                      engine_version: str | None = None,
                      cost_model_for: Callable[[GPU, ServingConfig], CostModel] | None = None,
                      simulated: dict[ServingConfig, Metrics] | None = None,
                      startup_s: float | None = None, engine: str = "vllm",
                      num_scheduler_steps: int | None = None) -> dict:
    """`engine`'s defaults (vLLM's, or SGLang's) on `gpu` x (tp, dp), simulated: {'config',
    'defaults', 'feasible', 'reason', 'metrics', 'engine'}. `simulated`: figures the search already has ({config: metrics} of
    feasible trials on the whole workload); the defaults are taken from there when they are
    among them (the search's first trial per GPU is vLLM's defaults)."""
    try:
        config, defaults, steps = defaults_plan(
            model, gpu, tp=tp, dp=dp, weight_bits=weight_bits, kv_bits=kv_bits, pp=pp,
            entry_point=entry_point, engine_version=engine_version, engine=engine,
            num_scheduler_steps=num_scheduler_steps)
    except TunerError as exc:  # no SGLang default exists on this GPU (too little memory)
        given = {"tp": tp, "dp": dp, "pp": pp, "weight_bits": weight_bits, "kv_bits": kv_bits}
        return {"config": given | {"gpu": gpu.name, "engine": engine}, "defaults": None,
                "feasible": False, "reason": str(exc), "metrics": None, "engine": engine}
    if steps != num_scheduler_steps:  # vLLM's own step count, not the search's pricing
        out = simulate_beside(workload, model, gpu, config, engine_version=engine_version,
                              cost_model_for=single_step_costs(
                                  cost_model_for or default_cost_models(model)),
                              startup_s=startup_s, num_scheduler_steps=steps)
        return {**out, "defaults": defaults}
    return {**simulate_beside(workload, model, gpu, config, engine_version=engine_version,
                              cost_model_for=cost_model_for, simulated=simulated,
                              startup_s=startup_s, num_scheduler_steps=num_scheduler_steps),
            "defaults": defaults}


def defaults_scheduler_steps(scheduler: str, engine_version: str | None,
                             num_scheduler_steps: int | None) -> int | None:
    """The --num-scheduler-steps vLLM's defaults run at: the count the user gave the search,
    else vLLM's own default, 1 (EngineArgs.num_scheduler_steps = 1 in every V0 wheel read,
    0.6.3.post1 - 0.7.3), on every release that has multi-step (V0 0.5.5 - 0.7): untuned V0 is
    single-step whatever its scheduler, while the search prices its plans at the fitted 10
    steps (tuner.core.engines.priced_scheduler_steps) and exports them so. A release without
    the option (V1, V0 before 0.5.5) gets None: it has one way to run. `scheduler` is kept
    for the callers: the reason printed differs with chunked prefill (_single_step_why)."""
    release = generation_of(engine_version)
    if num_scheduler_steps is None and release.multi_step:
        return 1
    return num_scheduler_steps


def single_step_costs(cost_model_for: Callable[[GPU, ServingConfig], CostModel]
                      ) -> Callable[[GPU, ServingConfig], CostModel]:
    """`cost_model_for` with V0's fitted multi-step host profile replaced by the single-step
    one (predictors.engine_overhead.v0_single_step: its per-sequence, per-request and TP terms,
    8 ms a scheduler call, an estimate) where a cost model carries it: a plan run at 1
    scheduler step in a search priced at the fitted step count."""
    from tuner.predictors.engine_overhead import V0_MULTISTEP, v0_single_step

    def for_config(gpu: GPU, config: ServingConfig) -> CostModel:
        cm = cost_model_for(gpu, config)
        engine = getattr(cm, "engine", None)
        if (dataclasses.is_dataclass(cm) and engine is not None
                and getattr(engine, "name", None) == V0_MULTISTEP.name):
            return dataclasses.replace(cm, engine=v0_single_step(engine))
        return cm

    return for_config


def simulate_beside(workload: Workload, model: ModelSpec, gpu: GPU, config: ServingConfig, *,
                    engine_version: str | None = None,
                    cost_model_for: Callable[[GPU, ServingConfig], CostModel] | None = None,
                    simulated: dict[ServingConfig, Metrics] | None = None,
                    startup_s: float | None = None,
                    num_scheduler_steps: int | None = None) -> dict:
    """One configuration the search did not pick, simulated beside its plans as they were
    (the full workload, the search's cost model and start-up): {'config', 'feasible',
    'reason', 'metrics', 'engine'}; taken from `simulated` when the search ran it already."""
    out = {"config": config.to_dict(), "feasible": False, "reason": "", "metrics": None,
           "engine": config.engine}
    if simulated and config in simulated:  # the search ran these very settings already
        out["feasible"] = True
        out["metrics"] = {k: getattr(simulated[config], k) for k in BASELINE_METRICS}
        return out
    try:
        cm = (cost_model_for or default_cost_models(model))(gpu, config)
        res = simulate(workload, model, gpu, config, cm, startup_s=startup_s,
                       engine_version=engine_version,  # start-up as the search priced it
                       num_scheduler_steps=num_scheduler_steps)
    except InfeasibleConfig as exc:
        out["reason"] = str(exc)
        return out
    summary = res.summary()
    out["feasible"] = True
    out["metrics"] = {k: summary.get(k) for k in BASELINE_METRICS}
    return out


def sixteen_bit_beside(record: TrialRecord, workload: Workload, model: ModelSpec,
                       gpus: dict[str, GPU], *, entry_point: str = DEFAULT_ENTRY_POINT,
                       engine_version: str | None = None,
                       cost_model_for: Callable[[GPU, ServingConfig], CostModel] | None = None,
                       simulated: dict[ServingConfig, Metrics] | None = None,
                       startup_s: float | None = None,
                       num_scheduler_steps: int | None = None) -> list[dict]:
    """16-bit weights and KV on a quantized plan's own GPUs (same type, TP x PP x DP, engine),
    for a like-for-like quantization comparison where the search tried no 16-bit plan there:
    its engine's defaults at 16 bits (as beside the winners, :func:`simulate_baseline`) and
    the plan's own settings at 16 bits. Each a :func:`simulate_beside` dict with 'what' (how
    its settings were chosen)."""
    c = record.config
    gpu = gpus[record.gpu]
    kw = dict(engine_version=engine_version, cost_model_for=cost_model_for,
              simulated=simulated, startup_s=startup_s, num_scheduler_steps=num_scheduler_steps)
    defaults = simulate_baseline(workload, model, gpu, tp=c.tp, dp=c.dp, pp=c.pp,
                                 entry_point=entry_point, engine=c.engine, **kw)
    own = simulate_beside(workload, model, gpu,
                          dataclasses.replace(c, weight_bits=16, kv_bits=16), **kw)
    return [{**defaults, "what": f"{engine_name(c.engine)}'s defaults"},
            {**own, "what": "the plan's own settings"}]


def engine_presets(gpus: dict[str, GPU], metadata: StudyMeta | dict | None,
                   model: ModelSpec | None = None) -> dict[str, dict]:
    """GPU -> vLLM's defaults (ServingConfig knobs: batch limits, memory utilisation,
    precision, scheduler, ordering) under the study's entry point (its metadata's
    `entry_point` and `engine_version`): the search's first preset, and values every search
    space offers (tuner.search.space.fit_space)."""
    meta = StudyMeta.of(metadata)
    return presets_by_gpu(gpus, meta.entry_point or DEFAULT_ENTRY_POINT, meta.engine_version,
                          meta.max_model_len, model, meta.num_scheduler_steps)


def gain(metrics: dict, baseline: dict) -> dict | None:
    """Winner / defaults ratios of makespan and $ (None when the defaults cannot run)."""
    if not baseline.get("feasible"):
        return None
    b = baseline["metrics"]
    makespan_ratio = metrics["makespan_s"] / b["makespan_s"]
    cost_ratio = metrics["cost_usd"] / b["cost_usd"]
    return {"makespan_ratio": makespan_ratio, "cost_ratio": cost_ratio,
            "speedup": 1.0 / makespan_ratio, "saving_fraction": 1.0 - cost_ratio}


def describe_gain(baseline: dict | None) -> str:
    """'1.61x faster, 38 % cheaper than vLLM's defaults' (or why there is no ratio); an SGLang
    plan's baseline is SGLang's defaults."""
    if not baseline:
        return "no baseline"
    g = baseline.get("gain")
    who = engine_name(baseline.get("engine"))
    if g is None:
        return f"{who}'s defaults cannot run this plan ({baseline.get('reason') or 'infeasible'})"
    # a ratio that rounds to nothing reads as a tie ("1.00x slower, 0 % dearer" said nothing)
    x = g["speedup"]
    speed = ("as fast" if f"{x:.2f}" == "1.00" or f"{1 / x:.2f}" == "1.00"
             else f"{x:.2f}x faster" if x >= 1 else f"{1 / x:.2f}x slower")
    pct = round(100 * g["saving_fraction"])
    cost = ("as cheap" if pct == 0
            else f"{pct} % cheaper" if pct > 0 else f"{-pct} % dearer")
    if speed == "as fast" and cost == "as cheap":
        return f"as fast and as cheap as {who}'s defaults"
    return f"{speed}, {cost} {'as' if cost == 'as cheap' else 'than'} {who}'s defaults"


def attach_baselines(records: list[TrialRecord], numbers: Iterable[int], workload: Workload,
                     model: ModelSpec, gpus: dict[str, GPU], *,
                     entry_point: str = DEFAULT_ENTRY_POINT, engine_version: str | None = None,
                     cost_model_for: Callable[[GPU, ServingConfig], CostModel] | None = None,
                     startup_s: float | None = None,
                     num_scheduler_steps: int | None = None) -> dict[tuple, dict]:
    """Set `baseline` (the defaults' simulation plus the `gain` ratios) on the records numbered
    `numbers`; one simulation per (GPU type, TP, DP). Returns the simulations by that key."""
    by_num = {r.number: r for r in records}
    simulated = {r.config: r.metrics for r in records
                 if r.feasible and r.metrics and r.level == "full"}
    keyed: list[tuple[TrialRecord, tuple]] = []
    for n in dict.fromkeys(numbers):
        r = by_num.get(n)
        if r is None or not r.feasible or r.gpu not in gpus:
            continue
        c = r.config
        keyed.append((r, (r.gpu, int(c.tp), int(c.dp), int(c.weight_bits), int(c.kv_bits),
                          int(c.pp), c.engine)))
    keys = list(dict.fromkeys(key for _r, key in keyed))

    def one(key: tuple) -> dict:
        return simulate_baseline(workload, model, gpus[key[0]], tp=key[1], dp=key[2],
                                 weight_bits=key[3], kv_bits=key[4], pp=key[5],
                                 entry_point=entry_point, engine_version=engine_version,
                                 cost_model_for=cost_model_for, simulated=simulated,
                                 startup_s=startup_s, engine=key[6],
                                 num_scheduler_steps=num_scheduler_steps)

    # independent simulations (those the study has not run already): a thread each on a
    # large job
    sims = dict(zip(keys, thread_map(one, keys, parallel_workers(len(keys), len(workload))),
                    strict=True))
    for r, key in keyed:
        r.baseline = {**sims[key], "gain": gain(r.metrics.to_dict(), sims[key])}
    return sims


__all__ = ["BASELINE_METRICS", "attach_baselines", "defaults_plan", "defaults_scheduler_steps",
           "describe_gain",
           "engine_name", "engine_presets", "gain", "simulate_baseline", "simulate_beside",
           "single_step_costs", "sixteen_bit_beside"]
