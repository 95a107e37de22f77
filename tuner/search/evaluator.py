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
from tuner.core.config import ServingConfig
from tuner.core.pricing import job_cost_usd
from tuner.core.workload import Workload
from tuner.predictors.protocol import CostModel
from tuner.predictors.sources import cost_model_for as default_cost_models
from tuner.search.records import TrialRecord
from tuner.search.space import SearchSpace
from tuner.sim.simulator import InfeasibleConfig, simulate

# ---- multi-fidelity constants ------------------------------------------------------------------
SAMPLE_FRACTION = 0.125  # default share of the workload in the sample
# Requests; below 4x this the workload is simulated in full only. A sample must keep the engine
# as busy as the full job (hundreds of concurrent requests on a big GPU) and make the longest
# request's tail a small part of its makespan: measured on examples/arxiv.jsonl, a 64-request
# sample misjudges the full makespan by up to 90 % (100 requests: 44 %), and costs 77 % of a
# full simulation there anyway (fixed per-simulation costs), so small jobs gain nothing.
MIN_SAMPLE = 512
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
NEAR_FRONT = "within the sampling error of the front"  # the promotion a candidate defers


# ---- multi-fidelity: the sample -----------------------------------------------------------------
def sample_size(n: int, fraction: float | None) -> int:
    """Requests in the sample (n: no multi-fidelity). None: SAMPLE_FRACTION of the workload,
    at least MIN_SAMPLE requests, for workloads of 4 x MIN_SAMPLE requests and more; a given
    fraction is taken as it is (0 or 1: full workload only)."""
    if fraction is None:
        if n < 4 * MIN_SAMPLE:
            return n
        return min(n, max(MIN_SAMPLE, math.ceil(n * SAMPLE_FRACTION)))
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
    fronts: dict = field(default_factory=dict)  # gpu -> [(makespan, cost), ...] non-dominated
    pairs: list = field(default_factory=list)  # (scaled sample makespan, full makespan)
    seen: set = field(default_factory=set)  # trial numbers ingested
    n_full: int = 0  # full-workload simulations (feasible or not) ingested
    n_sample: int = 0  # configurations decided on the sample alone
    best: dict = field(default_factory=dict)  # objective index -> (value, other, key)

    def add(self, number: int, params: dict, rec: TrialRecord) -> None:
        """Take one finished trial (this process's or another worker's) into account."""
        if number in self.seen:
            return
        self.seen.add(number)
        if rec.duplicate:
            return
        key = config_key(params)
        prev = self.done.get(key)
        # two workers simulated the same config at once: keep the first; a deferred candidate
        # simulated in full at the end (tuner.search.loop.add_final_candidates) replaces its
        # sample estimate
        if prev is not None and not (prev[1].level != "full" and rec.level == "full"):
            return
        if prev is not None:
            self.n_sample -= 1
        self.done[key] = (rec.values, rec, number)
        if rec.level == "full":
            self.n_full += 1
        else:
            self.n_sample += 1
        if not rec.feasible:
            return
        values = rec.values
        # the polish's targets: the best figures so far, estimates of deferred candidates
        # included (a configuration dropped on its estimate is dominated: never the best)
        for i in (0, 1):
            cand = (values[i], values[1 - i], key)
            if i not in self.best or cand < self.best[i]:
                self.best[i] = cand
        if rec.level == "full":
            add_to_front(self.fronts.setdefault(params["gpu"], []), tuple(values))
            if rec.fidelity.get("sample_makespan_s") is not None:  # schedules, no start-up
                self.pairs.append((rec.fidelity["sample_makespan_s"] * rec.fidelity["scale"],
                                   values[0] - (rec.fidelity.get("startup_s") or 0.0)))

    def ingest(self, study: optuna.Study) -> None:
        """Trials other workers finished since the last call."""
        for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)):
            if t.number not in self.seen:
                self.add(t.number, t.params, TrialRecord.from_trial(t))

    def calibration(self) -> tuple[float, float]:
        """(k, eps): full makespan ~= k x n_full/n_sample x sample makespan (k: the median
        ratio), and the largest relative error |estimate / full - 1| of that estimate over
        every measured pair, times EPS_MARGIN (floored at EPS_FLOOR)."""
        if not self.pairs:
            return 1.0, math.inf
        r = np.array([full / est for est, full in self.pairs if est > 0])
        if r.size == 0:
            return 1.0, math.inf
        k = float(np.median(r))
        return k, max(EPS_FLOOR, EPS_MARGIN * float(np.max(np.abs(k / r - 1.0))))


def add_to_front(front: list, p: tuple) -> None:
    if any(q[0] <= p[0] and q[1] <= p[1] for q in front):
        return
    front[:] = [q for q in front if not (p[0] <= q[0] and p[1] <= q[1])] + [p]


def config_key(params: dict) -> tuple:
    return tuple(sorted(params.items()))


class Evaluator:
    """Simulates configurations of one search (full workload or its sample) and decides
    promotions; plain Python, no Optuna, so the benchmark can time it alone."""

    def __init__(self, workload: Workload, model: ModelSpec, gpus: dict[str, GPU],
                 space: SearchSpace, *, sample_fraction: float | None = None,
                 cost_model_for: Callable[[GPU, ServingConfig], CostModel] | None = None,
                 startup_s: float | None = None, engine_version: str | None = None,
                 defer: bool = True) -> None:
        self.workload, self.model, self.gpus, self.space = workload, model, gpus, space
        # defer: SearchSettings.defer_candidates
        self.defer = defer
        # the command's cost models (resolved once by the CLI), else the registry's default
        self.cost_model_for = cost_model_for or default_cost_models(model)
        # engine start-up (tuner.core.startup): the search's --startup-s, or the model for its
        # --engine-version (tuner.search.meta.StudyMeta.sim_options: both from a study's metadata)
        self.sim_options = {"startup_s": startup_s, "engine_version": engine_version}
        n = len(workload)
        self.n_sample = sample_size(n, sample_fraction)
        self.sampled = self.n_sample < n  # multi-fidelity on
        self._samples: dict[int, Workload] = {}  # stratified samples by size
        self.known = Knowledge()
        self.sim_s = 0.0  # time spent simulating

    def config(self, params: dict) -> ServingConfig:
        return ServingConfig(**self.space.fixed, **params)

    def _sample_of(self, m: int) -> Workload:
        if m not in self._samples:
            self._samples[m] = self.workload.take(stratified_sample(self.workload, m))
        return self._samples[m]

    def replica_sample(self, dp: int) -> tuple[Workload, float]:
        """(sample, scale) that estimates a `dp`-replica deployment: one replica's share of the
        job is n / dp requests (the split balances tokens), so one replica is simulated on a
        stratified sample of min(sample size, n / dp) requests, its makespan scaled by
        (n / dp) / that. A sample of the whole job spread over dp replicas would give each
        replica 1/dp of a sample: at dp 32 on 100k requests, 390 requests a replica, whose tail
        misjudged the full makespan by up to 24 %; one replica's own share is the full job's
        per-replica load and costs 1/dp of the simulation."""
        share = len(self.workload) / max(dp, 1)
        m = min(self.n_sample, math.ceil(share))
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

    def _simulate(self, w: Workload, gpu: GPU, config: ServingConfig):
        t0 = time.perf_counter()
        try:
            return simulate(w, self.model, gpu, config, self.cost_model_for(gpu, config),
                            **self.sim_options)
        finally:
            self.sim_s += time.perf_counter() - t0

    def evaluate(self, params: dict, number: int, *, full: bool = False) -> tuple[tuple, dict]:
        """(values, user attrs) of one configuration. `full`: skip the sample (exhaustive)."""
        config = self.config(params)
        gpu = self.gpus[params["gpu"]]
        fid: dict = {"level": "full"}
        try:
            if self.sampled and not full:
                sample, scale = self.replica_sample(config.dp)
                s = self._simulate(sample, gpu, dataclasses.replace(config, dp=1))
                k, eps = self.known.calibration()
                est = self.estimate(config, s.schedule_s, scale, s.startup_s, k)
                why = self._promotion(params["gpu"], est, eps, number)
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

    def _promotion(self, gpu: str, est: tuple, eps: float, number: int) -> str | None:
        """Why the configuration goes to the full workload, or None to keep the estimate."""
        if len(self.known.pairs) < N_CALIBRATE:
            return "calibration"
        if number % AUDIT_EVERY == 0:
            return "audit"
        front = self.known.fronts.get(gpu)
        if not front:
            return "first of its GPU"
        for m, c in front:
            if m * (1 + eps) <= est[0] and c * (1 + eps) <= est[1]:
                return None
        return NEAR_FRONT


