"""Evaluating one configuration: simulation on the full workload or on its stratified sample
(multi-fidelity), promotion by epsilon-dominance against the per-GPU full-fidelity fronts, and
what this process knows of the study (:class:`Knowledge`: dedup, fronts, calibration pairs).
Plain Python, no Optuna sampling, so the benchmark can time it alone."""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import optuna

from tuner.core.catalog import GPU, ModelSpec
from tuner.core.config import DEFAULTS, ServingConfig
from tuner.core.errors import TunerError
from tuner.core.memory import moe_replica_config
from tuner.core.pricing import job_cost_usd
from tuner.core.sglang import MAMBA_SLOTS_PER_REQUEST, plan_memory_sglang
from tuner.core.workload import Workload
from tuner.predictors.protocol import CostModel
from tuner.predictors.sources import cost_model_for as default_cost_models
from tuner.search.records import LEVELS, TrialRecord, config_key
from tuner.search.space import SearchSpace, engine_refusal
from tuner.sim.simulator import InfeasibleConfig, simulate

# ---- multi-fidelity constants ------------------------------------------------------------------
SAMPLE_FRACTION = 0.125  # default share of the workload in the sample
# Requests; below 4x this the workload is simulated in full only. A sample must keep the engine
# as busy as the full job (hundreds of concurrent requests on a big GPU) and make the longest
# request's tail a small part of its makespan: measured on examples/arxiv.jsonl, a 64-request
# sample misjudges the full makespan by up to 90 % (100 requests: 44 %), and costs 77 % of a
# full simulation there anyway (fixed per-simulation costs), so small jobs gain nothing.
MIN_SAMPLE = 512
# ... and at most this many: the sample's error shrinks with its size, not with the job's
# (measured on a 1M-request ShareGPT-like job, scaled sample vs full: 4,096 requests 1.6-3.4 %,
# 8,192 0.59-1.11 %, 16,384 0.41-0.55 %, almost all of it a bias the calibration factor k
# removes: +-0.3 % left at 8,192), while a sample of 12.5 % of 1M requests cost 0.26 s a trial
# to screen; 8,192 gives the same winners as 16,384 at 1M and on three seeds at 100k
MAX_SAMPLE = 8192
# The reference rung: configurations simulated to measure the sample's error or to build the
# fronts (calibration, audits, the first of a GPU, the candidates at the end) run on
# RUNG_FACTOR x the sample instead of the full job when the job holds at least RUNG_MIN_JOBS
# rungs; only the plans that can still be on a front after that are simulated in full
# (successive rungs: sample -> rung -> full). Below it the rung would cost half a full
# simulation or more, and the full job is the reference, as before.
RUNG_FACTOR = 4
RUNG_MIN_JOBS = 1.5
SAMPLE_SEED = 0
N_CALIBRATE = 8  # (estimate, full) pairs measured before any configuration may be dropped
# every 20th trial is promoted whatever its estimate (an unbiased error sample; the final
# candidates, simulated both ways at the end, add the near-front ones)
AUDIT_EVERY = 20
# The promotion margin: EPS_MARGIN x the largest error measured so far, never below EPS_FLOOR.
# With one replica's share as the sample (Evaluator.replica_sample) the measured error on a
# 100k-request job is 0.3 % median, 0.6 % max (92 pairs, 21 of them audits); the old fixed 2 %
# floor then promoted 63 configurations near a front of nearly equal costs for nothing.
EPS_FLOOR = 0.005
EPS_MARGIN = 1.5
# the rung's floor: measured on a 1M-request job, rung (32,768-65,536 requests) vs full on
# 8-35 plans: median 0.10-0.17 %, max 0.31 %
RUNG_EPS_FLOOR = 0.002
NEAR_FRONT = "within the sampling error of the front"  # the promotion a candidate defers


def front_key(params: dict) -> tuple[str, str]:
    """The front a configuration is judged against: its GPU's, per engine, so each engine's
    best plans (the "best per engine" line, the gain over its defaults) are full simulations
    too, not only the plans of the engine that wins on that GPU."""
    return params["gpu"], str(params.get("engine", "vllm"))


# ---- multi-fidelity: the sample -----------------------------------------------------------------
def rung_size(n: int, n_sample: int) -> int:
    """Requests in the reference rung (n: the full job is the reference)."""
    rung = RUNG_FACTOR * n_sample
    return rung if n_sample < n and n >= RUNG_MIN_JOBS * rung else n


def sample_size(n: int, fraction: float | None) -> int:
    """Requests in the sample (n: no multi-fidelity). None: SAMPLE_FRACTION of the workload,
    at least MIN_SAMPLE and at most MAX_SAMPLE requests, for workloads of 4 x MIN_SAMPLE requests and more; a given
    fraction is taken as it is (0 or 1: full workload only)."""
    if fraction is None:
        if n < 4 * MIN_SAMPLE:
            return n
        return min(n, MAX_SAMPLE, max(MIN_SAMPLE, math.ceil(n * SAMPLE_FRACTION)))
    if fraction <= 0 or fraction >= 1:
        return n
    return min(n, max(1, math.ceil(n * fraction)))


def stratified_sample(w: Workload, n_sample: int, seed: int = SAMPLE_SEED) -> np.ndarray:
    """Sorted indices of a stratified random sample of `n_sample` requests: strata are the
    cells of a B x B grid of prompt-length and output-length quantiles, each cell contributes
    in proportion to its size (largest remainders), and the longest request (prompt + output)
    is always in, so the sample's memory feasibility is the full workload's."""
    n = len(w)
    if n_sample >= n:
        return np.arange(n)
    rng = np.random.default_rng(seed)
    bins = int(np.clip(round(math.sqrt(n_sample / 4)), 1, 8))
    cell = np.zeros(n, dtype=np.int64)
    for col in (w.prompt_tokens, w.output_tokens):
        edges = np.quantile(col, np.linspace(0, 1, bins + 1)[1:-1])
        cell = cell * bins + np.searchsorted(edges, col, side="right")
    ids, counts = np.unique(cell, return_counts=True)
    quota = counts * n_sample / n
    take = np.floor(quota).astype(np.int64)
    short = n_sample - int(take.sum())
    if short > 0:
        take[np.argsort(-(quota - take), kind="stable")[:short]] += 1
    longest = int(np.argmax(w.prompt_tokens + w.output_tokens))
    home = int(np.searchsorted(ids, cell[longest]))
    if take[home] == 0:  # the longest request's stratum gets one place, the largest one less
        take[int(np.argmax(take))] -= 1
        take[home] = 1
    chosen = []
    for cid, k in zip(ids, take, strict=True):
        members = np.flatnonzero(cell == cid)
        pick = rng.choice(members, size=int(k), replace=False)
        if cid == cell[longest] and longest not in pick:
            pick[0] = longest
        chosen.append(pick)
    return np.sort(np.concatenate(chosen))


# ---- evaluating one configuration ---------------------------------------------------------------
@dataclass
class Knowledge:
    """What this process knows of the study: finished configs (dedup), per-GPU full-fidelity
    fronts (promotion), and (sample estimate, full) pairs (calibration, sampling error)."""

    done: dict = field(default_factory=dict)  # key -> (values, TrialRecord, number)
    # (gpu, engine) -> [(makespan, cost), ...] non-dominated (front_key)
    fronts: dict = field(default_factory=dict)
    pairs: list = field(default_factory=list)  # (scaled sample makespan, reference makespan)
    rung_pairs: list = field(default_factory=list)  # (scaled rung makespan, full makespan)
    seen: set = field(default_factory=set)  # trial numbers ingested
    # the key of the plan a configuration runs as (Evaluator.runs_as: a hybrid's SGLang plan
    # with R_max above its state pool's cap runs at the cap) -> the key of the first simulated
    # configuration that runs as it: another sampled R_max above the cap is a duplicate
    runs_as: dict = field(default_factory=dict)
    best: dict = field(default_factory=dict)  # objective index -> (value, other, key)
    # (engine, objective index) -> (value, other, key): each engine's best (--engines), which
    # the polish explores around too, so the best plan per engine is as well searched
    best_of_engine: dict = field(default_factory=dict)

    def add(self, number: int, params: dict, rec: TrialRecord) -> None:
        """Take one finished trial (this process's or another worker's) into account."""
        if number in self.seen:
            return
        self.seen.add(number)
        if rec.duplicate:
            return
        key = config_key(params)
        self.runs_as.setdefault(config_key({**params, **rec.runs_as}), key)
        prev = self.done.get(key)
        # two workers simulated the same config at once: keep the first; a configuration
        # simulated again on more requests at the end (tuner.search.loop.add_final_candidates:
        # sample -> rung -> full) replaces the coarser record
        if prev is not None and LEVELS.index(prev[1].level) >= LEVELS.index(rec.level):
            return
        self.done[key] = (rec.values, rec, number)
        if not rec.feasible:
            return
        values = rec.values
        # the polish's targets: the best figures so far, estimates of deferred candidates
        # included (a configuration dropped on its estimate is dominated: never the best)
        engine = params.get("engine", "vllm")
        for i in (0, 1):
            cand = (values[i], values[1 - i], key)
            if i not in self.best or improves(cand, self.best[i]):
                self.best[i] = cand
            if (engine, i) not in self.best_of_engine or \
                    improves(cand, self.best_of_engine[engine, i]):
                self.best_of_engine[engine, i] = cand
        if rec.level == "sample":
            return
        # the reference levels: the full job, or the rung standing in for it during the search
        add_to_front(self.fronts.setdefault(front_key(params), []), tuple(values))
        fid = rec.fidelity
        schedule_s = values[0] - (fid.get("startup_s") or 0.0)  # schedules, no start-up
        if fid.get("sample_makespan_s") is not None:
            self.pairs.append((fid["sample_makespan_s"] * fid["scale"], schedule_s))
        if rec.level == "full" and fid.get("rung_makespan_s") is not None:
            self.rung_pairs.append((fid["rung_makespan_s"] * fid["rung_scale"], schedule_s))

    def simulated(self, params: dict, runs_as: dict) -> tuple | None:
        """The (values, record, number) of the configuration `params` or of one that runs as
        the same plan (`runs_as`: Evaluator.runs_as's knobs), None when neither is simulated."""
        prev = self.done.get(config_key(params))
        if prev is None:  # R_max 143 after R_max 512 that ran at 143, too
            prev = self.done.get(self.runs_as.get(config_key({**params, **runs_as})))
        return prev

    def ingest(self, study: optuna.Study) -> None:
        """Trials other workers finished since the last call."""
        for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)):
            if t.number not in self.seen:
                self.add(t.number, t.params, TrialRecord.from_trial(t))

    def calibration(self) -> tuple[float, float]:
        """(k, eps): reference makespan ~= k x n/n_sample x sample makespan (k: the median
        ratio), and the largest relative error |estimate / reference - 1| of that estimate
        over every measured pair, times EPS_MARGIN (floored at EPS_FLOOR). The reference is
        the full job, or the rung where the search uses one."""
        return _calibrate(self.pairs)

    def rung_calibration(self, prior_eps: float) -> tuple[float, float]:
        """(k, eps) of the rung against the full job, as :meth:`calibration`; before any full
        simulation of a rung-screened plan: k = 1 and the sample's own error `prior_eps`
        (the rung is RUNG_FACTOR x the sample: its error is smaller; measured afterwards)."""
        if not self.rung_pairs:
            return 1.0, prior_eps
        return _calibrate(self.rung_pairs, RUNG_EPS_FLOOR)


#: how much better (relative) a plan must be to become a polish target in place of the one it
#: beats: plans a hair apart (the same figures to 0.02 %, e.g. max_num_seqs above the batch the
#: KV holds) would walk the polish across a plateau, spending its trials around equals (seen on
#: the shipped example: 40 of the polish's 60 trials on such a walk)
TARGET_GAIN = 1e-3


def improves(cand: tuple, best: tuple, gain: float = TARGET_GAIN) -> bool:
    """Whether (value, other, key) `cand` beats `best` by more than `gain` on the value, or
    ties it within `gain` and beats it by more than `gain` on the other objective."""
    v, o, bv, bo = cand[0], cand[1], best[0], best[1]
    if v < bv * (1.0 - gain):
        return True
    return v <= bv * (1.0 + gain) and o < bo * (1.0 - gain)


def _calibrate(pairs: list, floor: float = EPS_FLOOR) -> tuple[float, float]:
    if not pairs:
        return 1.0, math.inf
    r = np.array([full / est for est, full in pairs if est > 0])
    if r.size == 0:
        return 1.0, math.inf
    k = float(np.median(r))
    return k, max(floor, EPS_MARGIN * float(np.max(np.abs(k / r - 1.0))))


def add_to_front(front: list, p: tuple) -> None:
    if any(q[0] <= p[0] and q[1] <= p[1] for q in front):
        return
    front[:] = [q for q in front if not (p[0] <= q[0] and p[1] <= q[1])] + [p]


class Evaluator:
    """Simulates configurations of one search (full workload or its sample) and decides
    promotions; plain Python, no Optuna, so the benchmark can time it alone."""

    def __init__(self, workload: Workload, model: ModelSpec, gpus: dict[str, GPU],
                 space: SearchSpace, *, sample_fraction: float | None = None,
                 cost_model_for: Callable[[GPU, ServingConfig], CostModel] | None = None,
                 startup_s: float | None = None, engine_version: str | None = None,
                 num_scheduler_steps: int | None = None, defer: bool = True) -> None:
        self.workload, self.model, self.gpus, self.space = workload, model, gpus, space
        # defer: SearchSettings.defer_candidates
        self.defer = defer
        # the command's cost models (resolved once by the CLI), else the registry's default
        self.cost_model_for = cost_model_for or default_cost_models(model)
        # engine start-up (tuner.core.startup): the search's --startup-s, or the model for its
        # --engine-version; V0's decode runs: its --num-scheduler-steps
        # (tuner.search.meta.StudyMeta.sim_options: all from a study's metadata)
        self.sim_options = {"startup_s": startup_s, "engine_version": engine_version,
                            "num_scheduler_steps": num_scheduler_steps}
        n = len(workload)
        self.n_sample = sample_size(n, sample_fraction)
        self.sampled = self.n_sample < n  # multi-fidelity on
        # the reference rung (rung_size): only with deferred candidates, whose final full
        # simulations it filters (with --deadline / --budget plans are judged in full at once)
        self.n_rung = rung_size(n, self.n_sample) if defer else n
        self.use_rung = self.sampled and self.n_rung < n
        self._samples: dict[int, Workload] = {}  # stratified samples by size
        self.known = Knowledge()
        self._caps: dict[ServingConfig, tuple[int, int]] = {}  # runs_as: (cap, state slots)
        self.sim_s = 0.0  # time spent simulating

    def config(self, params: dict) -> ServingConfig:
        return ServingConfig(**self.space.fixed, **params)

    def runs_as(self, params: dict) -> tuple[dict, str]:
        """({knob: the value the plan runs with}, why) where that differs from `params`, else
        ({}, ""). SGLang caps a hybrid's running requests at its Mamba state pool
        (tuner.core.sglang._hybrid_state_pool, resolve_max_num_reqs; the search runs the radix
        cache: slots // MAMBA_SLOTS_PER_REQUEST), as the simulator does: every R_max above the
        cap is the same plan, simulated and shown at the cap."""
        if params.get("engine", self.space.fixed.get("engine", DEFAULTS["engine"])) != "sglang" \
                or not getattr(self.model, "is_hybrid", False):
            return {}, ""
        config = self.config(params)
        if config not in self._caps:
            try:
                plan = plan_memory_sglang(self.model, self.gpus[config.gpu], config)
                self._caps[config] = (plan.max_running_by_slots, plan.state_slots)
            except TunerError:  # a plan SGLang refuses (offload knobs): the simulation says so
                self._caps[config] = (0, 0)
        cap, slots = self._caps[config]
        if not cap or config.max_running <= cap:
            return {}, ""
        return {"max_running": cap}, (
            f"R {config.max_running} -> {cap}: SGLang's Mamba state pool ({slots:,} request "
            f"states, {MAMBA_SLOTS_PER_REQUEST} a running request with the radix cache) caps "
            "--max-running-requests")

    def _sample_of(self, m: int) -> Workload:
        if m not in self._samples:
            self._samples[m] = self.workload.take(stratified_sample(self.workload, m))
        return self._samples[m]

    def replica_sample(self, dp: int, size: int | None = None) -> tuple[Workload, float]:
        """(sample, scale) that estimates a `dp`-replica deployment: one replica's share of the
        job is n / dp requests (the split balances tokens), so one replica is simulated on a
        stratified sample of min(sample size, n / dp) requests, its makespan scaled by
        (n / dp) / that. A sample of the whole job spread over dp replicas would give each
        replica 1/dp of a sample: at dp 32 on 100k requests, 390 requests a replica, whose tail
        misjudged the full makespan by up to 24 %; one replica's own share is the full job's
        per-replica load and costs 1/dp of the simulation. `size`: the rung's requests instead
        of the sample's."""
        share = len(self.workload) / max(dp, 1)
        m = min(size or self.n_sample, math.ceil(share))
        return self._sample_of(m), share / m

    def estimate(self, config: ServingConfig, sample_makespan_s: float, scale: float,
                 startup_s: float, k: float) -> tuple[float, float]:
        """(makespan, $) of the whole job estimated from a sample's schedule: scaled by
        `scale` and the calibration factor `k` (start-up is not scaled); the bill at that
        makespan (a provider's billing rounds it)."""
        gpu = self.gpus[config.gpu]
        est_s = sample_makespan_s * scale * k + startup_s
        return est_s, job_cost_usd(est_s, gpu.price_usd_per_h, config.tp, config.dp,
                                   gpu.billing, config.pp)

    def _simulate(self, w: Workload, gpu: GPU, config: ServingConfig,
                  replicas: int | None = None):
        t0 = time.perf_counter()
        try:
            return simulate(w, self.model, gpu, config, self.cost_model_for(gpu, config),
                            replicas=replicas, **self.sim_options)
        finally:
            self.sim_s += time.perf_counter() - t0

    def _one_replica(self, gpu: GPU, config: ServingConfig, size: int | None = None):
        """(the simulation of one replica on its sample, the sample, its scale). A dense
        replica runs alone (dp 1); a mixture-of-experts one is not alone (its experts are split
        over every rank and each MoE layer gathers every rank's tokens: predictors.moe), so
        replica 0 of the whole plan is simulated on dp samples' worth of requests. Except
        under a vLLM V0 release, where an MoE plan's dp replicas are independent engines each
        holding every expert (tuner.core.engines.moe_independent_replicas): those run alone,
        as a dense model's do."""
        sample, scale = self.replica_sample(config.dp, size)
        if not (self.model.is_moe and config.dp > 1) or moe_replica_config(
                self.model, config, self.sim_options["engine_version"], config.engine) is not config:
            return self._simulate(sample, gpu, dataclasses.replace(config, dp=1)), sample, scale
        wide = self._sample_of(min(len(self.workload), len(sample) * config.dp))
        return self._simulate(wide, gpu, config, replicas=1), sample, scale

    def evaluate(self, params: dict, number: int, *,
                 level: str | None = None) -> tuple[tuple, dict]:
        """(values, user attrs) of one configuration. `level`: None screens it on the sample
        (a configuration promoted, for calibration, an audit or as the first of its GPU, goes
        to the rung when the search uses one, else to the full job); "rung" simulates it on
        the reference rung (the end's candidates; the full job where there is no rung);
        "full" on the full workload (exhaustive, the end's full simulations). A plan that
        runs other knob values than `params` (:meth:`runs_as`) is simulated as it runs, its
        attributes saying so ("runs_as", "runs_as_note")."""
        over, note = self.runs_as(params)
        values, attrs = self._evaluate(dataclasses.replace(self.config(params), **over),
                                       params, number, level)
        if over:
            attrs.update(runs_as=over, runs_as_note=note)
        return values, attrs

    def _evaluate(self, config: ServingConfig, params: dict, number: int,
                  level: str | None) -> tuple[tuple, dict]:
        gpu = self.gpus[params["gpu"]]
        fid: dict = {"level": "full"}
        target = "rung" if level == "rung" and self.use_rung else "full"
        lacks = engine_refusal(config)
        if lacks:  # fit_space leaves such values out; a space of two engines keeps SGLang's
            return (math.inf, math.inf), {
                "feasible": False, "fidelity": fid,
                "reason": f"{lacks}: a simulator study (tuner simulate), not a plan vLLM runs"}
        try:
            if self.sampled and level is None:
                s, sample, scale = self._one_replica(gpu, config)
                k, eps = self.known.calibration()
                est = self.estimate(config, s.schedule_s, scale, s.startup_s, k)
                why = self._promotion(front_key(params), est, eps, number)
                candidate = why == NEAR_FRONT and self.defer
                if candidate:
                    why = None
                fid = {"level": "sample", "requests": len(sample),
                       "sample_makespan_s": s.schedule_s, "startup_s": s.startup_s,
                       "scale": scale, "k": k,
                       "eps": eps if math.isfinite(eps) else None,
                       "estimate_makespan_s": est[0], "promoted": why,
                       "candidate": candidate}
                if why is None:
                    return est, {"feasible": True, "reason": "", "fidelity": fid}
                fid["level"] = "full"
                target = "rung" if self.use_rung else "full"
            if target == "rung":
                r, rung, scale_r = self._one_replica(gpu, config, self.n_rung)
                _, eps = self.known.calibration()
                k_r, _ = self.known.rung_calibration(eps)
                est = self.estimate(config, r.schedule_s, scale_r, r.startup_s, k_r)
                fid.update(level="rung", rung_requests=len(rung), rung_makespan_s=r.schedule_s,
                           rung_scale=scale_r, rung_k=k_r, startup_s=r.startup_s)
                return est, {"feasible": True, "reason": "", "fidelity": fid}
            res = self._simulate(self.workload, gpu, config)
        except InfeasibleConfig as exc:
            return (math.inf, math.inf), {"feasible": False, "reason": str(exc),
                                          "fidelity": fid}
        summary = res.summary()
        return (res.makespan_s, res.cost_usd), {
            "feasible": True, "reason": "",
            "metrics": {k: v for k, v in summary.items()
                        if k not in ("memory", "config", "provenance")},
            "memory": summary["memory"],
            "provenance": summary["provenance"],
            "provenance_kind": res.provenance.kind,
            "fidelity": fid,
        }

    def _promotion(self, key: tuple[str, str], est: tuple, eps: float,
                   number: int) -> str | None:
        """Why the configuration goes to the full workload, or None to keep the estimate;
        `key`: its front (front_key)."""
        if len(self.known.pairs) < N_CALIBRATE:
            return "calibration"
        if number % AUDIT_EVERY == 0:
            return "audit"
        front = self.known.fronts.get(key)
        if not front:
            return "first of its GPU" + (f" under {key[1]}" if key[1] != "vllm" else "")
        for m, c in front:
            if m * (1 + eps) <= est[0] and c * (1 + eps) <= est[1]:
                return None
        return NEAR_FRONT


