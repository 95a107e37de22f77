"""Spot capacity (issue #27 item 5): the expected makespan and $ of a plan whose machines may be
interrupted, at an interruption rate the provider publishes (tuner.core.pricing: AWS's Spot
Instance Advisor buckets, converted) or the user gives (--interruption-rate).

The model (named so reports can say which): **Poisson interruptions with restart from the
unfinished requests.**

* Every machine is interrupted at rate lambda per machine-hour (a Poisson process, each
  machine on its own). A replica whose pipeline stages span k machines dies with any of them:
  it is one failure domain at k x lambda; replicas sharing a machine die together, so the
  machine is the domain. A part has ``units`` domains, each serving an equal share.
* An interruption loses the domain's in-flight work: the requests in its engines' running
  batches, each on average half done. Measured in the engine's own time that is half a
  request's mean residence in the running batch (Little's law on the simulated steps:
  ``SimResult.mean_residence_s``), ``loss_s = mean_residence_s / 2``. Requests already
  finished are kept: the exported jobs write each result as it completes and skip finished
  ``custom_id``s when restarted (tuner.exports.run_batch, tuner.exports.ray_data).
* The domain then restarts on a fresh machine: the plan's start-up again (``startup_s``:
  weights, compile, CUDA graphs), then redoes the lost work. That recovery segment,
  ``c = startup_s + loss_s``, must run uninterrupted; an interruption during it starts it
  again. Its expected length (Poisson, memoryless) is ``r = (exp(lambda c) - 1) / lambda``,
  the first start-up's likewise ``S' = (exp(lambda S) - 1) / lambda``.
* Progress is made during the schedule's ``T`` seconds, in which interruptions arrive at rate
  lambda: ``N ~ Poisson(lambda T)`` of them, each adding a recovery. With the recoveries at
  their mean, a domain finishes at ``X = S' + T + r N``, so

      E[X] = S' + T exp(lambda c)          (closed form; lambda = 0 gives S + T)

* A part finishes with its slowest domain and a plan with its slowest part: the expected
  makespan is E[max over domains and parts of X], summed exactly over the Poisson counts
  (:func:`expected_makespan_s`: the maximum of independent step distributions, cheap).
* A domain pays its machines for as long as it runs, so the expected $ of a part is its
  uninterrupted bill scaled by E[X] / (S + T) (the billing granularity is applied to the mean,
  not per interrupted machine).

Not modelled (said wherever the figures are shown): waiting for spot capacity to come back
(the restart gets a machine at once), the provider's interruption notice (AWS gives two
minutes; a drain could save the in-flight work), correlated interruptions of many machines of
one type at once, and per-launch billing minimums. The expected figures are surfaced beside the
simulated ones; the search ranks plans on the simulated (uninterrupted) figures.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from tuner.core.errors import TunerError
from tuner.core.pricing import (
    InterruptionRate,
    Provider,
    check_interruption_rate,
    machines_per_replica,
)

MODEL = ("Poisson interruptions per machine; each loses the in-flight requests (half a request's "
         "mean residence) and restarts the engine, resuming with the unfinished requests "
         "(tuner.search.spot)")
#: Poisson mass left out of the sums over interruption counts (per domain)
_TAIL = 1e-15


# ---- the model --------------------------------------------------------------------------------
@dataclass(frozen=True)
class Exposure:
    """One part of a plan as interruptions see it."""

    schedule_s: float  # T: the schedule, engines up to the last token
    startup_s: float  # S: one engine start-up (paid again on every restart)
    loss_s: float  # the work an interruption loses: half a request's mean residence
    units: int  # independent failure domains (machines, or replicas spanning machines)
    unit_rate_per_h: float  # interruptions per hour of one domain
    cost_usd: float = 0.0  # the part's uninterrupted bill

    @property
    def rate_per_s(self) -> float:
        return self.unit_rate_per_h / 3600.0

    @property
    def restart_s(self) -> float:
        """The recovery segment c = start-up + the lost work."""
        return self.startup_s + self.loss_s

    @property
    def first_startup_s(self) -> float:
        """S': the expected first start-up (restarted when interrupted)."""
        return segment_s(self.rate_per_s, self.startup_s)

    @property
    def recovery_s(self) -> float:
        """r: the expected length of one recovery (restarted when interrupted)."""
        return segment_s(self.rate_per_s, self.restart_s)

    @property
    def domain_expected_s(self) -> float:
        """E[X] = S' + T exp(lambda c): one domain's expected time to its last request."""
        lam = self.rate_per_s
        return self.first_startup_s + self.schedule_s * _exp(lam * self.restart_s)

    @property
    def expected_interruptions(self) -> float:
        """Expected interruptions of all the part's domains, restarts included (lambda x the
        expected machine time)."""
        return self.units * self.rate_per_s * self.domain_expected_s

    @property
    def expected_cost_usd(self) -> float:
        base = self.startup_s + self.schedule_s
        # never below the uninterrupted bill (a rate near 0 rounds the ratio a hair under 1)
        return self.cost_usd * (max(self.domain_expected_s / base, 1.0) if base > 0 else 1.0)


def _exp(x: float) -> float:
    return math.exp(x) if x < 700 else math.inf


def segment_s(rate_per_s: float, length_s: float) -> float:
    """Expected time to get `length_s` of work done uninterrupted when interruptions (rate
    `rate_per_s`, Poisson) restart it: (exp(lambda L) - 1) / lambda, L at lambda = 0."""
    if rate_per_s <= 0 or length_s <= 0:
        return max(length_s, 0.0)
    x = rate_per_s * length_s
    if x < 1e-12:  # expm1(x) / rate loses digits at subnormal rates: the series' first terms
        return length_s * (1.0 + 0.5 * x)
    return math.expm1(x) / rate_per_s if x < 700 else math.inf


def _max_count_dist(mu: float, units: int) -> tuple[np.ndarray, np.ndarray]:
    """(k, P(max of `units` independent Poisson(mu) counts <= k)) on the support that holds
    all but _TAIL of the mass."""
    if mu <= 0:
        return np.zeros(1), np.ones(1)
    hi = int(math.ceil(mu + 12.0 * math.sqrt(mu) + 20.0 + 3.0 * math.log1p(units)))
    lo = max(0, int(math.floor(mu - 12.0 * math.sqrt(mu) - 20.0)))
    k = np.arange(lo, hi + 1, dtype=np.float64)
    # log pmf; lgamma(k + 1) as a running sum of logs from lo on
    log_fact = np.cumsum(np.log(np.maximum(k, 1.0))) + math.lgamma(lo + 1.0) - (
        math.log(lo) if lo > 0 else 0.0)
    pmf = np.exp(-mu + k * math.log(mu) - log_fact)
    cdf = np.minimum(np.cumsum(pmf), 1.0)
    cdf[-1] = max(cdf[-1], 1.0 - _TAIL)
    return k, cdf ** units


def expected_makespan_s(parts: Iterable[Exposure]) -> float:
    """E[max over every part's domains of X = S' + T + r N], N ~ Poisson(lambda T) independent
    per domain: the maximum of independent step distributions, summed exactly (to a 1e-15
    Poisson tail). One part of one domain: S' + T exp(lambda c), the closed form."""
    dists = []
    for p in parts:
        base = p.first_startup_s + p.schedule_s
        r = p.recovery_s
        mu = p.rate_per_s * p.schedule_s
        if not (math.isfinite(base) and math.isfinite(r)):
            return math.inf
        k, cdf = _max_count_dist(mu, max(int(p.units), 1))
        dists.append((base + r * k, cdf))
    if not dists:
        return 0.0
    points = np.unique(np.concatenate([v for v, _ in dists]))
    below = np.ones_like(points)  # P(every part <= t) at each point
    for v, cdf in dists:
        at = np.searchsorted(v, points, side="right") - 1
        below *= np.where(at >= 0, cdf[np.maximum(at, 0)], 0.0)
    step = np.diff(np.concatenate([[0.0], below]))
    return float(points @ step + points[-1] * max(0.0, 1.0 - below[-1]))


# ---- where the rates come from ------------------------------------------------------------------
@dataclass(frozen=True)
class SpotRates:
    """The interruption rate of each rented machine: --interruption-rate for every machine
    when given, else the provider's published rate of the instance shape."""

    provider: Provider
    override: InterruptionRate | None = None

    def of(self, instance: str) -> InterruptionRate | None:
        return self.override or self.provider.interruption_rate(instance)

    def for_gpu(self, gpu) -> None:
        """One TunerError when a spot instance the GPU may rent has no rate: the line asks for
        --interruption-rate."""
        billing = getattr(gpu, "billing", None)
        for inst in (billing.instances if billing is not None else ()):
            if self.of(inst.name) is None:
                raise TunerError(
                    f"--spot: {self.provider.name} publishes no spot interruption rate for "
                    f"{inst.name} ({gpu.name}); pass --interruption-rate R (interruptions per "
                    "machine-hour, e.g. 0.05 = one every 20 machine-hours).")

    def for_machines(self, machines: dict | None) -> InterruptionRate:
        inst = (machines or {}).get("instance") or ""
        rate = self.of(inst)
        if rate is None:
            raise TunerError(f"--spot: no interruption rate for {inst or 'the plan'}; pass "
                             "--interruption-rate R (interruptions per machine-hour).")
        return rate


def spot_rates(provider: Provider | None, spot: bool,
               interruption_rate: float | None) -> SpotRates | None:
    """The rates of a --spot plan (None without --spot); one TunerError for
    --interruption-rate without --spot or a bad rate."""
    if not spot:
        if interruption_rate is not None:
            raise TunerError("--interruption-rate needs --spot (it is the spot machines' "
                             "interruption rate).")
        return None
    if provider is None:
        raise TunerError("--spot needs --provider (spot prices are per provider).")
    override = None
    if interruption_rate is not None:
        override = InterruptionRate(per_h=check_interruption_rate(interruption_rate),
                                    source="--interruption-rate")
    return SpotRates(provider, override)


def exposure(machines: dict | None, rate: InterruptionRate, *, schedule_s: float,
             startup_s: float, mean_residence_s: float | None, cost_usd: float) -> Exposure:
    """A part's Exposure from its machines (tuner.core.pricing.Machines.to_dict) and figures."""
    m = machines or {}
    count = int(m.get("count") or 1)
    per = int(m.get("gpus_per_machine") or 0)
    span = machines_per_replica(per, int(m.get("tp") or 1), int(m.get("pp") or 1)) if per else 1
    units, rate_h = (int(m.get("dp") or 1), rate.per_h * span) if span > 1 else (count, rate.per_h)
    return Exposure(schedule_s=max(schedule_s, 0.0), startup_s=max(startup_s, 0.0),
                    loss_s=max((mean_residence_s or 0.0) / 2.0, 0.0), units=max(units, 1),
                    unit_rate_per_h=rate_h, cost_usd=cost_usd)


def expectation(parts: list[tuple[Exposure, InterruptionRate, str]]) -> dict:
    """The "spot" entry of a plan: expected makespan and $, and per part what they rest on.
    `parts`: (exposure, rate, label) per part."""
    exps = [e for e, _, _ in parts]
    makespan = expected_makespan_s(exps)
    cost = float(sum(e.expected_cost_usd for e in exps))
    rates = list(dict.fromkeys(r.describe() for _, r, _ in parts))
    return {
        "expected_makespan_s": makespan,
        "expected_cost_usd": cost,
        "expected_interruptions": float(sum(e.expected_interruptions for e in exps)),
        "interruption_rate": rates[0] if len(rates) == 1 else rates,
        "sources": list(dict.fromkeys(r.source for _, r, _ in parts)),
        "model": MODEL,
        "note": note(makespan, cost, [r for _, r, _ in parts]),
        "parts": [{"part": label, "units": e.units, "unit_rate_per_h": e.unit_rate_per_h,
                   "loss_s": e.loss_s, "restart_s": e.restart_s,
                   "expected_makespan_s": expected_makespan_s([e]),
                   "expected_cost_usd": e.expected_cost_usd,
                   "expected_interruptions": e.expected_interruptions}
                  for e, _, label in parts],
    }


def note(makespan_s: float, cost_usd: float, rates: list[InterruptionRate]) -> str:
    """'expected 9.1 min, $0.21 at interruption rate 0.00031 per machine-hour (...)'"""
    from tuner.core.units import fmt_duration, fmt_usd

    shown = "; ".join(dict.fromkeys(r.describe() for r in rates))
    when = (f"expected {fmt_duration(makespan_s)}, {fmt_usd(cost_usd)}" if math.isfinite(makespan_s)
            else "expected makespan unbounded (a restart almost never finishes between "
                 "interruptions)")
    return f"{when} on spot machines, at interruption rate {shown}"


def study_rates(meta) -> SpotRates | None:
    """The rates of a stored --spot study (tuner.search.meta.StudyMeta): its provider's
    published ones, or its --interruption-rate; None for a study without --spot."""
    if not getattr(meta, "spot", False) or not getattr(meta, "provider", None):
        return None
    from tuner.core.pricing import get_provider, load_providers

    return spot_rates(get_provider(meta.provider, load_providers(meta.gpu_file)), True,
                      meta.interruption_rate_per_h)


# ---- plans --------------------------------------------------------------------------------------
def plan_spot(rates: SpotRates, metrics, label: str) -> dict | None:
    """The spot entry of one single-type plan from its figures (a SimResult summary, a trial's
    Metrics or its dict); None when the figures lack what the model needs (a study older than
    mean_residence_s)."""
    get = metrics.get if isinstance(metrics, dict) else lambda k: getattr(metrics, k, None)
    makespan, startup = get("makespan_s"), get("startup_s") or 0.0
    residence, cost = get("mean_residence_s"), get("cost_usd")
    if makespan is None or residence is None or cost is None:
        return None
    machines = get("machines")
    rate = rates.for_machines(machines)
    e = exposure(machines, rate, schedule_s=makespan - startup, startup_s=startup,
                 mean_residence_s=residence, cost_usd=cost)
    return expectation([(e, rate, label)])


def fleet_spot(rates: SpotRates, plan: dict) -> dict | None:
    """The spot entry of a fleet plan (results.json's "fleets" entry, its parts' figures)."""
    parts = []
    for i, p in enumerate(plan.get("parts") or []):
        if p.get("mean_residence_s") is None:
            return None
        rate = rates.for_machines(p.get("machines"))
        e = exposure(p.get("machines"), rate, schedule_s=p["makespan_s"] - p["startup_s"],
                     startup_s=p["startup_s"], mean_residence_s=p["mean_residence_s"],
                     cost_usd=p["cost_usd"])
        parts.append((e, rate, f"part {i + 1}: {p['count']} x {p['gpu']}"))
    return expectation(parts) if parts else None


def attach(rates: SpotRates, records: list, fleets: list[dict]) -> None:
    """Give every feasible record its "spot" entry (record.spot) and every fleet plan (and its
    parts) theirs; a plan whose figures lack what the model needs keeps none."""
    for r in records:
        if r.feasible and r.metrics is not None and r.config is not None:
            r.spot = plan_spot(rates, r.metrics, f"{r.config.num_gpus} x {r.config.gpu}")
    for f in fleets:
        f["spot"] = sp = fleet_spot(rates, f)
        for i, part in enumerate(f.get("parts") or [] if sp else []):
            part["expected_makespan_s"] = sp["parts"][i]["expected_makespan_s"]
            part["expected_cost_usd"] = sp["parts"][i]["expected_cost_usd"]


def verdicts(records: list, winners: dict[str, int], fleets: list[dict]) -> list[str]:
    """One line: what the winners (and the fastest mix) are expected to take on spot."""
    from tuner.core.units import fmt_duration, fmt_usd

    def said(rate) -> str:
        return rate if isinstance(rate, str) else "; ".join(rate)

    by_num = {r.number: r for r in records}
    shown_plans = [(goal, by_num[n]) for goal, n in winners.items()
                   if by_num.get(n) is not None and by_num[n].spot]
    rates = [said(r.spot["interruption_rate"]) for _goal, r in shown_plans]
    # plans on GPU types of different rates: each plan names its own (a list of rates ahead
    # of them said not which plan ran at which)
    each = len(set(rates)) > 1
    parts = []
    for goal, r in shown_plans:
        sp = r.spot
        at = f", at {said(sp['interruption_rate'])}" if each else ""
        parts.append(f"the {goal} plan ({r.config.num_gpus} x {r.config.gpu}{at}) "
                     f"{fmt_duration(r.makespan_s)}, {fmt_usd(r.cost_usd)} uninterrupted -> "
                     f"{fmt_duration(sp['expected_makespan_s'])}, "
                     f"{fmt_usd(sp['expected_cost_usd'])} expected")
    if fleets and fleets[0].get("spot"):
        f, sp = fleets[0], fleets[0]["spot"]
        parts.append(f"the fastest mix {fmt_duration(f['makespan_s'])}, "
                     f"{fmt_usd(f['cost_usd'])} uninterrupted -> "
                     f"{fmt_duration(sp['expected_makespan_s'])}, "
                     f"{fmt_usd(sp['expected_cost_usd'])} expected")
    if not parts:
        return []
    shown = "" if each or not rates else f" (at interruption rate {'; '.join(dict.fromkeys(rates))})"
    return [f"On spot machines{shown}: {'; '.join(parts)}. Plans are "
            "ranked on the uninterrupted figures; each plan's \"spot\" entry in results.json "
            f"has its expected figures ({MODEL})."]


__all__ = ["Exposure", "MODEL", "SpotRates", "attach", "expectation", "expected_makespan_s",
           "exposure", "fleet_spot", "note", "plan_spot", "segment_s", "spot_rates",
           "study_rates", "verdicts"]
