"""Fleets (issue #27): one batch job across several GPU types at once. A batch user rarely
gets 32 of the GPU they want; they get 8 of one type here and 16 of another there. A fleet
plan is a set of parts, each a GPU type running one serving configuration on TP x DP of its
GPUs, each serving its own share of the requests; the makespan is the slowest part's (its
start-up included) and the $ the sum of the parts'.

    plans = fleet_front(workload, model, gpus, records, caps=caps, cost_model_for=cm_for)
    plans[0].to_dict()   # {"makespan_s", "cost_usd", "parts": [{"gpu", "count", "tp", ...}]}

How a mix is found (a Melange-style fluid estimate, then simulation of the split):
1. Part templates: for every GPU type the study searched, its fastest and its cheapest
   feasible configurations simulated on the whole job; their rate per replica is the job's
   tokens over the schedule's seconds per replica.
2. Mixes of two or three GPU types, each with 1 .. cap / TP replicas (`caps`: what can be had,
   --max-gpus TYPE=N), priced by the fluid model: the parts finish together at T where
   sum_i r_i (T - s_i) = 1 job (r_i: a part's rate in jobs per second, s_i its start-up), and
   cost sum_i (GPUs_i x $/GPU-h x T) -- with --provider, each part's rented instances'
   $/h (tuner.core.pricing.choose_instances) over T billed as the provider bills, the rule the
   simulated parts are priced by. The mixes on the estimated makespan-$ front (at most
   `max_plans`) go on.
3. Each of those is simulated: requests ordered by tokens and dealt to the parts by a
   low-discrepancy sequence in proportion to their shares (every part gets the same mix of
   long and short requests), each part simulated on its share; the shares are then moved so
   the parts finish together (the fluid rule again, with the rates the simulations measured)
   until the finish times are within `tolerance` of each other.
Returned are the simulated mixes that no single-GPU-type plan of the study and no other mix
beats on both makespan and $.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from tuner.core.catalog import GPU, ModelSpec
from tuner.core.config import ServingConfig
from tuner.core.errors import TunerError
from tuner.core.pricing import Billing, choose_instances
from tuner.core.workload import Workload
from tuner.predictors.protocol import CostModel
from tuner.search.constraints import parallel_label
from tuner.search.records import TrialRecord, pareto_indices
from tuner.sim.parallel import parallel_workers, thread_map
from tuner.sim.simulator import InfeasibleConfig, simulate

#: the golden ratio's fraction: the low-discrepancy sequence that deals requests to parts
_PHI = (math.sqrt(5.0) - 1.0) / 2.0
MAX_TYPES_PER_MIX = 3
#: a mix whose fluid estimate a single-type plan beats on both makespan and $ by more than this
#: is not simulated (the estimate's error on the mixes simulated in tests/test_fleet.py is a few %)
ESTIMATE_MARGIN = 0.05


@dataclass(frozen=True)
class Part:
    """One GPU type's share of a fleet plan, simulated."""

    config: ServingConfig  # the GPU type, TP, DP (replicas) and serving knobs
    requests: int
    makespan_s: float  # its start-up + schedule
    startup_s: float
    cost_usd: float
    trial: int | None = None  # the study's trial whose settings the part runs
    machines: dict | None = None  # tuner.core.pricing.Machines.to_dict of the part
    mean_residence_s: float | None = None  # SimResult.mean_residence_s (tuner.search.spot)

    @property
    def gpu(self) -> str:
        return self.config.gpu

    def to_dict(self) -> dict:
        c = self.config
        return {"gpu": c.gpu, "count": c.num_gpus, "tp": c.tp, "pp": c.pp, "dp": c.dp,
                "requests": self.requests, "makespan_s": self.makespan_s,
                "startup_s": self.startup_s, "cost_usd": self.cost_usd, "trial": self.trial,
                "machines": self.machines, "mean_residence_s": self.mean_residence_s,
                "config": c.to_dict()}


@dataclass(frozen=True)
class FleetPlan:
    """Parts that serve one job together: makespan the slowest part's, $ their sum."""

    parts: tuple[Part, ...]
    # the shares the parts were dealt (deal(workload, shares) splits the job again)
    shares: tuple[float, ...] = ()

    @property
    def makespan_s(self) -> float:
        return max(p.makespan_s for p in self.parts)

    @property
    def cost_usd(self) -> float:
        return float(sum(p.cost_usd for p in self.parts))

    @property
    def finish_spread(self) -> float:
        """Slowest over fastest part's finish, less one (0: they end together)."""
        times = [p.makespan_s for p in self.parts]
        return max(times) / min(times) - 1.0

    def describe(self) -> str:
        return " + ".join(f"{p.config.num_gpus} x {p.gpu} ({parallel_label(p.config)})"
                          for p in self.parts)

    def to_dict(self) -> dict:
        return {"makespan_s": self.makespan_s, "cost_usd": self.cost_usd,
                "finish_spread": self.finish_spread, "description": self.describe(),
                "shares": list(self.shares), "parts": [p.to_dict() for p in self.parts]}


# ---- splitting the requests -----------------------------------------------------------------
def deal(workload: Workload, shares: np.ndarray) -> list[np.ndarray]:
    """Request indices per part: the requests ordered by tokens (prompt + output, longest
    first) and dealt by the golden-ratio sequence in proportion to `shares` (a share of 0 gets
    none), so every part gets the same mix of long and short requests."""
    shares = np.asarray(shares, dtype=np.float64)
    order = np.argsort(-(workload.prompt_tokens + workload.output_tokens), kind="stable")
    edges = np.cumsum(shares / shares.sum())
    edges[-1] = 1.0 + 1e-12
    u = (np.arange(len(order)) * _PHI) % 1.0
    part = np.searchsorted(edges, u, side="right")
    return [np.sort(order[part == i]) for i in range(len(shares))]


def balance(rate: np.ndarray, startup_s: np.ndarray) -> tuple[np.ndarray, float]:
    """(shares, finish time) that make parts running at `rate` jobs per second, after their
    start-ups, finish together (the fluid rule): all end at T where sum r_i (T - s_i) = 1, each
    doing r_i (T - s_i). A part whose start-up alone outlasts T gets 0 (it would only finish
    later)."""
    live = rate > 0
    while True:
        t_end = (1.0 + float((rate * startup_s)[live].sum())) / float(rate[live].sum())
        out = np.where(live, rate * (t_end - startup_s), 0.0)
        if (out >= 0).all():
            return out / out.sum(), t_end
        live &= out > 0


def rebalanced(shares: np.ndarray, schedule_s: np.ndarray,
               startup_s: np.ndarray) -> np.ndarray:
    """Shares that make parts finish together which did `shares` of the job in `schedule_s`
    (each part's rate r_i = x_i / t_i jobs per second; :func:`balance`)."""
    return balance(shares / np.maximum(schedule_s, 1e-9), startup_s)[0]


def simulate_fleet(workload: Workload, model: ModelSpec, gpus: dict[str, GPU],
                   configs: list[ServingConfig],
                   cost_model_for: Callable[[GPU, ServingConfig], CostModel], *,
                   shares: np.ndarray | None = None, tolerance: float = 0.02,
                   rounds: int = 6, startup_s: float | None = None,
                   engine_version: str | None = None,
                   num_scheduler_steps: int | None = None,
                   trials: list[int | None] | None = None,
                   beaten_by: list[tuple[float, float]] = (),
                   margin: float = ESTIMATE_MARGIN) -> FleetPlan | None:
    """Simulate `configs` (one per part) serving `workload` together, with the shares moved
    until the parts finish within `tolerance` of each other (or `rounds` tries; the fastest is
    returned, or the split that gives the slowest part nothing where that ends sooner: then
    the plan holds fewer parts). InfeasibleConfig when a part cannot run its share. None as
    soon as the parts balanced by their simulated rates would still lose to a (makespan, $) of
    `beaten_by` on both by more than `margin` (not worth more rounds)."""
    k = len(configs)
    shares = np.full(k, 1.0 / k) if shares is None else np.asarray(shares, float) / sum(shares)
    trials = trials or [None] * k
    best = None
    for _ in range(rounds):
        parts, sched, start = [], np.zeros(k), np.zeros(k)
        todo = [(i, idx, cfg) for i, (idx, cfg) in
                enumerate(zip(deal(workload, shares), configs, strict=True)) if idx.size]

        def one(job):
            _i, idx, cfg = job
            g = gpus[cfg.gpu]
            return simulate(workload.take(idx), model, g, cfg, cost_model_for(g, cfg),
                            startup_s=startup_s, engine_version=engine_version,
                            num_scheduler_steps=num_scheduler_steps)

        # the parts are independent simulations: a thread each on a large job
        results = thread_map(one, todo, parallel_workers(len(todo), len(workload)))
        for (i, idx, cfg), res in zip(todo, results, strict=True):
            parts.append(Part(cfg, int(idx.size), float(res.makespan_s),
                              float(res.startup_s), float(res.cost_usd), trials[i],
                              res.machines, float(res.mean_residence_s)))
            sched[i], start[i] = res.makespan_s - res.startup_s, res.startup_s
        # a part of share 0 gets no request: leaving its share out deals the same split
        plan = FleetPlan(tuple(parts), tuple(float(x) for x in shares if x > 0))
        # measured rates: the work each part did per second of its schedule
        rate = np.where(sched > 0, shares, 0.0) / np.where(sched > 0, sched, 1.0)
        if best is None or plan.makespan_s < best.makespan_s:
            best, best_rate, best_finish, best_start = plan, rate, start + sched, start
        if plan.finish_spread <= tolerance:
            return plan
        shares, t_end = balance(rate, start)
        if beaten_by:  # the balanced plan, estimated from these rates: still beaten?
            usd_per_s = sum(p.cost_usd / p.makespan_s for p in parts)
            if any(bt * (1 + margin) < t_end and bc * (1 + margin) < usd_per_s * t_end
                   for bt, bc in beaten_by):
                return None
    # The fluid rule prices a share as rate x time, but a part's least work is a request from
    # prompt to last token: a part dealt a handful of requests can end after the others would
    # have ended without it (2 x H100 + 1 x A10: the A10's one long request outlasted the H100s'
    # whole job). The split may give a part nothing: where the measured rates say the others
    # end sooner without the slowest part, simulate that split and keep the faster plan.
    if best is not None and (best_rate > 0).sum() > 1:
        slow = int(np.argmax(np.where(best_rate > 0, best_finish, -np.inf)))
        rest = np.where(np.arange(k) == slow, 0.0, best_rate)
        without, t_rest = balance(rest, best_start)
        if t_rest < best.makespan_s:
            alt = simulate_fleet(workload, model, gpus, configs, cost_model_for, shares=without,
                                 tolerance=tolerance, rounds=rounds, startup_s=startup_s,
                                 engine_version=engine_version,
                                 num_scheduler_steps=num_scheduler_steps, trials=trials,
                                 beaten_by=beaten_by, margin=margin)
            if alt is not None and alt.makespan_s < best.makespan_s:
                return alt
    return best


# ---- which mixes --------------------------------------------------------------------------
@dataclass(frozen=True)
class _Template:
    """A GPU type's configuration as a part: its per-replica rate on the whole job, and what
    n replicas of it cost per hour (`usd_per_h_at[n]`)."""

    record: TrialRecord
    jobs_per_s_per_replica: float
    startup_s: float
    usd_per_h_at: np.ndarray  # index: replicas (0 .. max_replicas); NaN: cannot be rented
    billing: Billing | None = None  # --provider: its billing rounds the run time up

    @property
    def config(self) -> ServingConfig:
        return self.record.config


def _gpus_per_replica(config: ServingConfig) -> int:
    return config.tp * config.pp


def _usd_per_h_at(gpu: GPU, config: ServingConfig, max_replicas: int) -> np.ndarray:
    """$/h of 0 .. max_replicas replicas of `config`, priced by the rule the simulated parts
    are (tuner.sim.simulator -> tuner.core.pricing.rent): without a provider, the catalog's
    $/GPU-h x GPUs; with one, the instances choose_instances rents for them. The provider's
    smallest instance's $/GPU-h (gpu.price_usd_per_h) is not that: a TP 2 replica on AWS A10s
    (1-GPU g5.xlarge at $1.006/h) rents a 4-GPU g5.12xlarge at $5.672/h, not 2 x $1.006."""
    n = np.arange(max_replicas + 1)
    if gpu.billing is None:
        return n * _gpus_per_replica(config) * gpu.price_usd_per_h
    out = np.full(n.size, np.nan)
    out[0] = 0.0
    for k in n[1:]:
        try:
            inst, count = choose_instances(gpu.billing, config.tp, int(k), config.pp)
        except TunerError:  # no instance holds its TP group: no such part
            break
        out[k] = count * inst.usd_per_h
    return out


def _template(r: TrialRecord, gpu: GPU, max_replicas: int = 64) -> _Template:
    m, c = r.metrics, r.config
    rate = 1.0 / (float(m.schedule_s) * c.dp)  # jobs per second per replica
    return _Template(r, rate, float(m.startup_s or 0.0), _usd_per_h_at(gpu, c, max_replicas),
                     gpu.billing)


def single_plans(records: list[TrialRecord]) -> list[TrialRecord]:
    """The single-type plans a mix competes with and is made of: feasible, simulated on the
    whole job, deployable as exported."""
    return [r for r in records if r.feasible and r.level == "full" and not r.study_only
            and r.metrics is not None and r.metrics.makespan_s is not None
            and r.metrics.cost_usd is not None]


def _templates(records: list[TrialRecord], gpus: dict[str, GPU],
               max_replicas: int = 64) -> dict[str, list[_Template]]:
    """Per GPU type, its fastest-per-replica and cheapest-per-token feasible full-job trials."""
    out: dict[str, list[_Template]] = {}
    for gpu in gpus:
        # parts are vLLM plans: their run-batch launchers split a part over its machines
        # (an SGLang plan's offline engine runs on one), so SGLang plans compete with a mix
        # (single_plans) but are not made into its parts
        ts = [_template(r, gpus[gpu], max_replicas) for r in single_plans(records)
              if r.config.engine == "vllm" and r.gpu == gpu and r.metrics.schedule_s]
        ts = [t for t in ts if np.isfinite(t.usd_per_h_at[1])]
        if not ts:
            continue
        fast = max(ts, key=lambda t: t.jobs_per_s_per_replica)
        # per token at one replica's rental (the instance shape it would rent)
        cheap = max(ts, key=lambda t: t.jobs_per_s_per_replica / t.usd_per_h_at[1])
        out[gpu] = list({id(t.record): t for t in (fast, cheap)}.values())
    return out


def _fluid(temps: tuple[_Template, ...], counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(makespan, $) of `temps` at replica counts `counts` (points x parts), every part live
    (NaN where a part's start-up outlasts the others: that mix is a smaller one), by the fluid
    rule: they end together at T with sum r_i n_i (T - s_i) = 1 job."""
    rate = counts * np.array([t.jobs_per_s_per_replica for t in temps])
    start = np.array([t.startup_s for t in temps])
    t_end = (1.0 + rate @ start) / rate.sum(axis=1)
    n = counts.astype(np.int64)
    # each part paid as the simulation pays it: its rental's $/h over its billed run time
    cost = np.zeros(len(counts))
    for i, t in enumerate(temps):
        billed_s = t_end if t.billing is None else _billed_s(t_end, t.billing)
        cost += t.usd_per_h_at[n[:, i]] / 3600.0 * billed_s
    ok = (t_end[:, None] > start).all(axis=1) & np.isfinite(cost)
    return np.where(ok, t_end, np.nan), np.where(ok, cost, np.nan)


def _billed_s(runtime_s: np.ndarray, billing: Billing) -> np.ndarray:
    """tuner.core.pricing.billed_seconds over an array of run times (> 0 here: a mix's parts
    end after their start-up), rounded up to the granularity and to the minimum. A numpy twin
    of that scalar rule, which stays numpy-free (tuner.core is imported by `tuner --help`);
    tests/test_qa_studies_prices_s49.py checks the two agree through the estimate."""
    g = billing.granularity_s
    return np.maximum(np.ceil(runtime_s / g - 1e-9) * g, billing.minimum_s)


def candidate_mixes(records: list[TrialRecord], gpus: dict[str, GPU], caps: dict[str, int], *,
                    max_plans: int = 6, max_total_gpus: int | None = None,
                    max_replicas: int = 64,
                    beaten_by: list[tuple[float, float]] = (),
                    margin: float = ESTIMATE_MARGIN,
                    ) -> list[tuple[list[ServingConfig], np.ndarray, list[int]]]:
    """Mixes worth simulating: (part configs, initial shares, the trials they come from), at
    most `max_plans`, on the fluid estimate's makespan-$ front (two or three GPU types; each
    type's replicas within its cap, the GPUs in all within `max_total_gpus`), less those a
    (makespan, $) point of `beaten_by` beats on both by more than `margin`."""
    temps = _templates(records, gpus, max_replicas)
    types = sorted(temps)
    found: list[tuple[float, float, tuple[_Template, ...], np.ndarray]] = []
    for k in range(2, min(MAX_TYPES_PER_MIX, len(types)) + 1):
        for combo in itertools.combinations(types, k):
            for chosen in itertools.product(*(temps[g] for g in combo)):
                ranges = [np.arange(1, min(caps.get(t.config.gpu, 0)
                                           // _gpus_per_replica(t.config), max_replicas) + 1)
                          for t in chosen]
                if any(r.size == 0 for r in ranges):
                    continue
                counts = np.stack(np.meshgrid(*ranges, indexing="ij"), -1).reshape(-1, k)
                if max_total_gpus is not None:
                    per = np.array([_gpus_per_replica(t.config) for t in chosen])
                    counts = counts[counts @ per <= max_total_gpus]
                if counts.size == 0:
                    continue
                t_end, cost = _fluid(chosen, counts.astype(np.float64))
                keep = _front_arrays(t_end, cost)
                found += [(float(t_end[i]), float(cost[i]), chosen, counts[i]) for i in keep]
    front = pareto_indices([(t, c) for t, c, _, _ in found])
    picks = [found[i] for i in front
             if not any(bt * (1 + margin) < found[i][0] and bc * (1 + margin) < found[i][1]
                        for bt, bc in beaten_by)]
    if len(picks) > max_plans:  # spread along the front
        keep = np.unique(np.linspace(0, len(picks) - 1, max_plans).round().astype(int))
        picks = [picks[i] for i in keep]
    out = []
    for _t, _c, chosen, counts in picks:
        configs = [ServingConfig(**{**t.config.to_dict(), "dp": int(n)})
                   for t, n in zip(chosen, counts, strict=True)]
        rate = np.array([t.jobs_per_s_per_replica * n for t, n in zip(chosen, counts,
                                                                       strict=True)])
        start = np.array([t.startup_s for t in chosen])
        out.append((configs, balance(rate, start)[0], [t.record.number for t in chosen]))
    return out


def _front_arrays(t_end: np.ndarray, cost: np.ndarray) -> list[int]:
    """pareto_indices over two arrays (NaN points left out)."""
    ok = np.flatnonzero(np.isfinite(t_end) & np.isfinite(cost))
    sub = pareto_indices(list(zip(t_end[ok].tolist(), cost[ok].tolist(), strict=True)))
    return [int(ok[i]) for i in sub]


def beaten_by_mix(points: list[tuple[float, float]],
                  fleets: list[dict]) -> list[int | None]:
    """Per (makespan_s, cost_usd) point, the number (1-based, as `tuner export --fleet K`
    counts) of the first mix among `fleets` (results.json's entries) that beats it: no slower,
    no dearer and better on one. A single-type Pareto point beaten so is no point of the front
    once mixes are plans too. None where no mix does."""
    out: list[int | None] = []
    for t, c in points:
        out.append(next((k for k, f in enumerate(fleets, 1)
                         if f["makespan_s"] <= t and f["cost_usd"] <= c
                         and (f["makespan_s"] < t or f["cost_usd"] < c)), None))
    return out


def fleet_front(workload: Workload, model: ModelSpec, gpus: dict[str, GPU],
                records: list[TrialRecord], *, caps: dict[str, int],
                cost_model_for: Callable[[GPU, ServingConfig], CostModel],
                max_plans: int = 6, max_total_gpus: int | None = None,
                startup_s: float | None = None,
                engine_version: str | None = None,
                num_scheduler_steps: int | None = None) -> list[FleetPlan]:
    """The simulated mixes of GPU types that neither a single-type plan among `records` nor
    another mix beats on both makespan and $ (fastest first); [] with fewer than two GPU types
    that have a feasible plan."""
    singles = [(float(r.metrics.makespan_s), float(r.metrics.cost_usd))
               for r in single_plans(records) if r.within]
    plans = []
    for configs, shares, trials in candidate_mixes(records, gpus, caps, max_plans=max_plans,
                                                   max_total_gpus=max_total_gpus,
                                                   beaten_by=singles):
        try:
            plan = simulate_fleet(workload, model, gpus, configs, cost_model_for,
                                  shares=shares, startup_s=startup_s,
                                  engine_version=engine_version,
                                  num_scheduler_steps=num_scheduler_steps, trials=trials,
                                  beaten_by=singles)
        except InfeasibleConfig:
            continue  # a part cannot hold its share (a request longer than its KV)
        # a split that gives a type nothing is a single-type plan, not a mix
        if plan is not None and len(plan.parts) > 1:
            plans.append(plan)
    points = singles + [(p.makespan_s, p.cost_usd) for p in plans]
    on_front = set(pareto_indices(points))
    kept = [p for i, p in enumerate(plans) if len(singles) + i in on_front]
    return sorted(kept, key=lambda p: p.makespan_s)
