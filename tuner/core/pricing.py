"""What a job costs: per-GPU catalog prices, or a provider's instances and billing rule.

Without ``--provider`` a job costs ``makespan x $/GPU-h x GPUs`` (the catalog's per-GPU price,
as tuner always did). With ``--provider NAME`` (tuner/core/data/providers.yaml) a plan rents
whole instances and pays what the provider bills:

* **instances**: every tensor-parallel group lives inside one instance; the plan rents the
  cheapest set of one instance shape that holds all its replicas (for one replica: the
  smallest instance with at least TP GPUs -- a TP=2 plan on a provider with 1/4/8-GPU
  instances rents a 4-GPU instance and pays for 2 idle GPUs, which :class:`Rental` says);
* **billing**: the run time is rounded up to the provider's granularity (second / minute /
  hour) and to its minimum;
* **on-demand only where sold**: a shape the provider does not rent on-demand (providers.yaml
  ``on_demand: false``, e.g. GCP's a3-highgpu-1g/2g/4g: Spot or Flex-start VMs only) is never
  rented at the on-demand price; with ``--spot`` it is, at its spot price where the table has one;
* **machine shape**: the rented shape's GPUs per instance are the plan's machine size for the
  cost model too (:func:`plan_machine_gpu`: an expert group over two 4-GPU instances gathers
  over the network, not NVLink).

:func:`job_cost_usd` is the rule as one plain function; the simulator calls it.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tuner.core.errors import TunerError, close_matches_hint
from tuner.core.io import load_shipped_yaml, read_shipped
from tuner.core.units import plural

GRANULARITY_S = {"second": 1, "minute": 60, "hour": 3600}


@dataclass(frozen=True)
class Instance:
    """One rentable instance shape of one GPU type at one provider."""

    name: str
    gpus: int
    usd_per_h: float  # the price charged (on-demand, or spot with --spot)
    vcpus: int | None = None
    ram_gib: float | None = None
    source: str = ""  # where its price comes from (its providers.yaml row), and when
    date: str = ""
    # the instance's network bandwidth to other instances, Gbit/s in ONE direction, shared by
    # all its GPUs (providers.yaml network_gbps; None: none published there, the catalog's
    # per-GPU scale_out_gbps is used); network_label: the figure as shown ("p5.48xlarge 3,200
    # Gbps EFA shared by its 8 GPUs (aws, read 2026-11-30)"), network_source: where from
    network_gbps: float | None = None
    network_label: str = ""
    network_source: str = ""

    @classmethod
    def from_dict(cls, d: dict) -> Instance:
        net = d.get("network_gbps")
        return cls(name=str(d["name"]), gpus=int(d["gpus"]), usd_per_h=float(d["usd_per_h"]),
                   vcpus=d.get("vcpus"), ram_gib=d.get("ram_gib"),
                   source=str(d.get("source") or ""), date=str(d.get("date") or ""),
                   network_gbps=None if net is None else float(net),
                   network_label=str(d.get("network_label") or ""),
                   network_source=str(d.get("network_source") or ""))

    @property
    def network_bytes_per_s_per_gpu(self) -> float | None:
        """The instance's one-direction network bandwidth shared equally by its GPUs, bytes/s
        per GPU (the unit of the catalog's scale_out_gbps x 1e9); None: no published figure."""
        if self.network_gbps is None:
            return None
        return self.network_gbps * 1e9 / 8.0 / self.gpus


@dataclass(frozen=True)
class Billing:
    """How one provider bills one GPU type: its instance shapes and billing granularity."""

    provider: str
    instances: tuple[Instance, ...]  # by GPU count
    granularity_s: int  # run time is rounded up to a multiple of this
    minimum_s: int = 0  # and billed at least this long
    spot: bool = False
    source: str = ""  # where the prices come from (per instance in the table; joined here)
    date: str = ""
    # on-demand billing: the GPU's shapes the provider does not rent on-demand (left out of
    # `instances`; at their on-demand list price, for `tuner gpus`), and why (source)
    not_on_demand: tuple[Instance, ...] = ()
    not_on_demand_source: str = ""

    @classmethod
    def from_dict(cls, d: Any) -> Billing | None:
        """A Billing from its dataclasses.asdict() form (a study's stored GPU specs)."""
        if d is None or isinstance(d, Billing):
            return d
        return cls(provider=str(d["provider"]),
                   instances=tuple(Instance.from_dict(i) for i in d["instances"]),
                   granularity_s=int(d["granularity_s"]), minimum_s=int(d.get("minimum_s", 0)),
                   spot=bool(d.get("spot", False)), source=str(d.get("source", "")),
                   date=str(d.get("date", "")),
                   not_on_demand=tuple(Instance.from_dict(i)
                                       for i in d.get("not_on_demand") or ()),
                   not_on_demand_source=str(d.get("not_on_demand_source", "")))

    @property
    def per_gpu_usd_per_h(self) -> float:
        """The smallest instance's price per GPU-hour (what `tuner gpus` shows as $/GPU-h)."""
        i = self.instances[0]
        return i.usd_per_h / i.gpus

    def granularity_name(self) -> str:
        named = {v: k for k, v in GRANULARITY_S.items()}
        return f"per {named.get(self.granularity_s, f'{self.granularity_s} s')}"

    def describe(self) -> str:
        tail = f", minimum {self.minimum_s} s" if self.minimum_s else ""
        return (f"{self.provider}{' spot' if self.spot else ''}: whole instances "
                f"({', '.join(f'{i.name} {i.gpus} GPU' for i in self.instances)}), billed "
                f"{self.granularity_name()}{tail}")


@dataclass(frozen=True)
class Rental:
    """The instances a plan rents and what its run is billed."""

    instance: str
    count: int
    gpus_needed: int
    gpus_rented: int
    usd_per_h: float  # all rented instances together
    runtime_s: float
    billed_s: float
    cost_usd: float
    provider: str = ""
    granularity: str = ""
    spot: bool = False  # at the spot price (--spot), not on-demand
    # smaller shapes of the GPU left out because the provider does not rent them on-demand
    not_on_demand: tuple[str, ...] = ()

    @property
    def note(self) -> str:
        idle = self.gpus_rented - self.gpus_needed
        text = (f"rents {self.count} x {self.instance} ({plural(self.gpus_rented, 'GPU')}) at "
                f"${self.usd_per_h:,.2f}/h{' spot' if self.spot else ''}, billed "
                f"{self.granularity} "
                f"({self.billed_s:,.0f} s for {self.runtime_s:,.0f} s of work)")
        if idle:
            text += (f"; {plural(idle, 'GPU')} idle: no "
                     f"{'on-demand ' if self.not_on_demand else ''}instance holds exactly "
                     f"{self.gpus_needed}")
            if self.not_on_demand:
                text += (f" ({', '.join(self.not_on_demand)}: {self.provider} does not rent "
                         f"{'it' if len(self.not_on_demand) == 1 else 'them'} on-demand)")
        return text

    def to_dict(self) -> dict:
        return {**dataclasses.asdict(self), "note": self.note}


def billed_seconds(runtime_s: float, granularity_s: int, minimum_s: int = 0) -> float:
    """Run time rounded up to the billing granularity, and to the minimum."""
    if runtime_s <= 0:
        return float(minimum_s)
    units = math.ceil(runtime_s / granularity_s - 1e-9)
    return float(max(units * granularity_s, minimum_s))


def machines_per_replica(gpus_per_machine: int, tp: int, pp: int) -> int:
    """Machines one replica of `pp` stages of `tp` GPUs spans (1 when it fits one; a TP group
    never split)."""
    return _instances_for(gpus_per_machine, tp, pp, 1) or 1


def _instances_for(gpus: int, tp: int, pp: int, dp: int) -> int | None:
    """Machines of `gpus` GPUs that hold `dp` replicas of `pp` stages of `tp` GPUs: several
    replicas per machine when one fits, else each replica's stages over whole machines (a TP
    group never split); None when a TP group does not fit one machine."""
    if gpus < tp:
        return None
    group = tp * pp
    if group <= gpus:
        return math.ceil(dp / (gpus // group))
    return dp * math.ceil(pp / (gpus // tp))


def choose_instances(billing: Billing, tp: int, dp: int = 1,
                     pp: int = 1) -> tuple[Instance, int]:
    """(instance shape, how many): the cheapest hourly rental of one shape that holds `dp`
    replicas of `pp` pipeline stages of `tp` GPUs, each TP group inside one instance (ties:
    fewer GPUs rented, then fewer machines: GCP's spot 2 x a3-highgpu-4g costs what one
    a3-highgpu-8g does, and one machine keeps the plan's collectives on NVLink). One replica:
    the smallest instance with at least `tp` GPUs when prices grow with size."""
    best = None
    for inst in billing.instances:
        n = _instances_for(inst.gpus, tp, pp, dp)
        if n is None:
            continue
        key = (n * inst.usd_per_h, n * inst.gpus, n)
        if best is None or key < best[0]:
            best = (key, inst, n)
    if best is None:
        biggest = max(i.gpus for i in billing.instances)
        raise TunerError(f"{billing.provider} has no {'on-demand ' if billing.not_on_demand else ''}"
                         f"instance with {tp} GPUs of this type "
                         f"(largest: {biggest}); choose a smaller tensor-parallel size.")
    return best[1], best[2]


def plan_machine_gpu(gpu, tp: int, dp: int = 1, pp: int = 1):
    """`gpu` (a tuner.core.catalog.GPU, duck-typed) with gpus_per_machine the GPUs of the
    instance shape its provider billing rents for this plan (:func:`choose_instances`), so the
    cost model's collectives, MoE dispatch and pipeline stages span the machines actually
    rented; `gpu` itself without --provider (the catalog's machine shape: answers unchanged),
    or where no shape holds a TP group (the simulator's placement refuses that plan with its
    own message).

    The scale-out network (what MoE gathers and pipeline hand-overs between machines cross)
    becomes the rented shape's where the provider table publishes one (Instance.network_gbps:
    the instance's bandwidth shared by its GPUs, per GPU as the catalog's scale_out_gbps is);
    where it does not, the catalog's figure stays and its source says so (:func:`network_of`)."""
    rented = _rented(gpu, tp, dp, pp)
    if rented is None:
        return gpu
    billing, inst, count = rented
    changes: dict[str, Any] = {}
    if inst.gpus != gpu.gpus_per_machine:
        changes["gpus_per_machine"] = inst.gpus
    per_gpu = inst.network_bytes_per_s_per_gpu
    source = str(getattr(gpu, "scale_out_source", "") or "")
    if count <= 1:  # one machine: no traffic crosses a network
        pass
    elif per_gpu is not None:
        if getattr(gpu, "scale_out_gbps", None) != per_gpu / 1e9 \
                or not source.startswith(inst.network_label):
            changes.update(scale_out_gbps=per_gpu / 1e9,
                           scale_out_source=f"{inst.network_label}: {inst.network_source}")
    elif getattr(gpu, "scale_out_gbps", None) is not None \
            and not source.startswith(_CATALOG_NETWORK):  # once: simulator and sources both ask
        # (no scale_out_gbps at all: GPU.scale_out_note already says it is the fallback estimate)
        word = "estimate" if source.lower().startswith("estimate") else "figure"
        changes["scale_out_source"] = (
            f"{_CATALOG_NETWORK} {word}, not the rented {inst.name}'s ({billing.provider} "
            f"publishes no network figure for it in the price table): {source}")
    return dataclasses.replace(gpu, **changes) if changes else gpu


#: how a provider plan's scale-out source begins where the rented shape has no network figure
_CATALOG_NETWORK = "catalog"


def network_of(gpu, tp: int, dp: int = 1, pp: int = 1) -> Instance | None:
    """The instance shape a --provider plan rents when it publishes a network figure (the one
    :func:`plan_machine_gpu` prices the plan's inter-machine traffic with); None without
    --provider, without a figure, or where no shape holds the plan."""
    rented = _rented(gpu, tp, dp, pp)
    return rented[1] if rented is not None and rented[1].network_gbps is not None else None


def _rented(gpu, tp: int, dp: int, pp: int):
    """(billing, instance, count) a --provider plan rents, or None without --provider or where
    no shape holds the plan (choose_instances refuses it)."""
    billing = getattr(gpu, "billing", None)
    if billing is None:
        return None
    try:
        inst, count = choose_instances(billing, tp, dp, pp)
    except TunerError:
        return None
    return billing, inst, count


@dataclass(frozen=True)
class Machines:
    """Where a plan runs: whole machines of one shape, each tensor-parallel group inside one
    machine, the data-parallel replicas spread over the machines (vLLM runs one engine per
    replica; an engine does not span machines in tuner's plans)."""

    instance: str  # the provider's instance name, or "<GPU> machine" without --provider
    count: int  # machines
    gpus_per_machine: int  # GPUs one machine holds
    replicas_per_machine: int  # DP replicas one machine runs (its GPUs // TP, at most DP)
    tp: int
    dp: int
    provider: str = ""  # "" = the catalog's machine shape (GPU.gpus_per_machine)
    pp: int = 1  # pipeline stages per replica (a replica over several machines when > 1 fits)
    spot: bool = False  # spot instances (--spot)

    @property
    def gpus_used(self) -> int:
        return self.tp * self.pp * self.dp

    @property
    def machines_per_replica(self) -> int:
        """Machines one replica's stages span (1 when a replica fits one machine)."""
        return machines_per_replica(self.gpus_per_machine, self.tp, self.pp)

    def describe(self) -> str:
        """'4 x p5.48xlarge (8 x H100 each): 8 replicas of TP 1 per machine'."""
        shape = f"TP {self.tp}" + (f" x PP {self.pp}" if self.pp > 1 else "")
        if self.machines_per_replica > 1:
            rep = (f"each replica's {self.pp} stages of {shape} over "
                   f"{self.machines_per_replica} machines")
        else:
            per = self.replicas_per_machine
            rep = f"{plural(per, 'replica')} of {shape} per machine"
            last = self.dp - per * (self.count - 1)
            if self.count > 1 and 0 < last < per:  # e.g. DP 9 on 8-GPU machines: 8 + 1
                rep += f" ({last} on the last)"
        idle = self.count * self.gpus_per_machine - self.gpus_used
        if idle > 0 and self.count > 1 and not self.provider:
            # the catalog's price is per GPU-hour: whole machines are what --provider bills
            rep += (f"; {plural(idle, 'idle GPU')} not billed (the price is per GPU-hour; "
                    "--provider bills whole instances)")
        return (f"{self.count} x {self.instance}{' spot' if self.spot else ''} "
                f"({plural(self.gpus_per_machine, 'GPU')} each): {rep}")

    def to_dict(self) -> dict:
        return {**dataclasses.asdict(self), "gpus_used": self.gpus_used,
                "description": self.describe()}


def place(gpu_name: str, gpus_per_machine: int, tp: int, dp: int = 1,
          billing: Billing | None = None, pp: int = 1) -> Machines:
    """The machines a plan of `dp` replicas of `pp` stages of `tp` GPUs needs: with a
    provider, the instances :func:`choose_instances` rents; else machines of
    `gpus_per_machine` GPUs (the catalog's shape), as few as hold the replicas (a replica too
    big for one machine spans several, stage by stage). TunerError when a TP group does not
    fit one machine."""
    if billing is not None:
        inst, n = choose_instances(billing, tp, dp, pp)
        return Machines(instance=inst.name, count=n, gpus_per_machine=inst.gpus,
                        replicas_per_machine=max(min(inst.gpus // (tp * pp), dp), 1), tp=tp,
                        dp=dp, provider=billing.provider, pp=pp, spot=billing.spot)
    n = _instances_for(gpus_per_machine, tp, pp, dp)
    if n is None:
        raise TunerError(f"tensor parallel {tp} needs {tp} GPUs in one machine; a {gpu_name} "
                         f"machine holds {gpus_per_machine} (TP stays inside a machine; "
                         "pipeline parallelism, --pp, spans machines)")
    return Machines(instance=f"{gpu_name} machine", count=n, gpus_per_machine=gpus_per_machine,
                    replicas_per_machine=max(min(gpus_per_machine // (tp * pp), dp), 1),
                    tp=tp, dp=dp, pp=pp)


def rent(runtime_s: float, billing: Billing, tp: int, dp: int = 1, pp: int = 1) -> Rental:
    inst, n = choose_instances(billing, tp, dp, pp)
    billed = billed_seconds(runtime_s, billing.granularity_s, billing.minimum_s)
    usd_h = n * inst.usd_per_h
    needed = tp * pp * dp
    # the smaller shapes that would have held the plan had the provider rented them on-demand
    left_out = tuple(i.name for i in billing.not_on_demand
                     if i.gpus < inst.gpus and _instances_for(i.gpus, tp, pp, dp) is not None)
    return Rental(instance=inst.name, count=n, gpus_needed=needed,
                  gpus_rented=n * inst.gpus,
                  usd_per_h=usd_h, runtime_s=runtime_s, billed_s=billed,
                  cost_usd=billed / 3600.0 * usd_h, provider=billing.provider,
                  granularity=billing.granularity_name(), spot=billing.spot,
                  not_on_demand=left_out if n * inst.gpus > needed else ())


def job_cost_usd(runtime_s: float, price_usd_per_h: float, tp: int, dp: int = 1,
                 billing: Billing | None = None, pp: int = 1) -> float:
    """The job's cost: per GPU-second at the catalog price without a provider; the provider's
    whole instances, billed by its granularity, with one."""
    if billing is None:
        return runtime_s / 3600.0 * price_usd_per_h * tp * pp * dp
    return rent(runtime_s, billing, tp, dp, pp).cost_usd


def price_caveat(gpu) -> str:
    """Why a GPU's $/GPU-h is no current list price ("" when it is one): "an ESTIMATE" where
    the catalog says so (gpus.yaml price_date "estimate": no list price transcribed), "STALE"
    where its source says a price cut is not recorded (providers.yaml notes), and with --spot
    that it is a spot price snapshot (spot prices move with demand; a STALE note is about the
    on-demand list price, which the plan does not pay). Every $ of a plan on it rests on that
    figure, so the outputs say so beside it."""
    source = str(getattr(gpu, "price_source", "") or "")
    date = str(getattr(gpu, "price_date", "") or "").strip()
    if date.lower() == "estimate" or source.startswith("ESTIMATE"):
        return "an ESTIMATE"
    billing = getattr(gpu, "billing", None)
    if billing is not None and billing.spot and not source.startswith("user override"):
        return (f"a SPOT price snapshot ({billing.provider} price table"
                + (f", {date}" if date else "") + "; spot prices move with demand)")
    if "STALE" in source:
        return "STALE"
    return ""


def spot_title(title: str) -> str:
    """A provider table's title for its spot prices: its "on-demand" (the shipped titles say
    it, e.g. "AWS EC2 on-demand, us-east-1, Linux") becomes "spot", else " (spot)" is added."""
    return title.replace("on-demand", "spot") if "on-demand" in title else f"{title} (spot)"


def usd_per_million_tokens(cost_usd: float, prompt_tokens: int, output_tokens: int) -> float:
    """$ per million tokens, input and output together (cost / tokens x 1e6)."""
    tokens = prompt_tokens + output_tokens
    return cost_usd / tokens * 1e6 if tokens > 0 else math.inf


# ---- the provider table -----------------------------------------------------------------------
@dataclass(frozen=True)
class InstanceRow:
    """One row of providers.yaml: an instance shape, its GPUs and prices, with their source."""

    name: str
    gpu: str  # catalog GPU it is simulated as
    gpus: int
    usd_per_h: float
    source: str
    date: str
    spot_usd_per_h: float | None = None
    vcpus: int | None = None
    ram_gib: float | None = None
    notes: str = ""
    # the provider's published spot interruption frequency: an AWS Spot Instance Advisor
    # bucket ("<5%" .. ">20%", see SPOT_ADVISOR_BUCKETS) or interruptions per instance-hour
    spot_interruption: str | float | None = None
    # False: the provider rents this shape only as spot / other non-on-demand VMs (GCP's
    # a3-highgpu-1g/2g/4g: Spot or Flex-start); on-demand plans never rent it, and
    # on_demand_source says where that is stated (required then)
    on_demand: bool = True
    on_demand_source: str = ""
    # the instance's network bandwidth to other instances, Gbit/s one direction, all its GPUs
    # together (the provider's published figure; the provider's network_source says where);
    # network_note: how the provider states it ("EFA", "at most (...)", "baseline, bursts to 10")
    network_gbps: float | None = None
    network_note: str = ""


# ---- spot interruptions ---------------------------------------------------------------------
#: Hours in the month the AWS Spot Instance Advisor's frequency of interruption covers ("the
#: rate at which Spot has reclaimed capacity during the trailing month"): 30 days.
ADVISOR_MONTH_H = 720.0
#: The advisor's buckets (its feed's "ranges": <5%, 5-10%, 10-15%, 15-20%, >20%) as the share p
#: of instances interrupted in that month that tuner reads them as: the bucket's upper edge, and
#: for ">20%", which has none, its lower edge (the rate is then a lower bound: "at least").
SPOT_ADVISOR_BUCKETS = {"<5%": (0.05, False), "5-10%": (0.10, False), "10-15%": (0.15, False),
                        "15-20%": (0.20, False), ">20%": (0.20, True)}


@dataclass(frozen=True)
class InterruptionRate:
    """Spot interruptions per machine-hour (a machine: one rented instance), and where the
    figure comes from. ``published``: the provider's own figure it was converted from ("" when
    it was given as a rate, e.g. --interruption-rate)."""

    per_h: float
    source: str
    published: str = ""
    at_least: bool = False  # converted from an open bucket (">20%"): a lower bound

    def describe(self) -> str:
        """'0.00031 per machine-hour (at least: AWS Spot Instance Advisor's ">20%" a month,
        converted)', '0.05 per machine-hour (--interruption-rate)'."""
        label = self.source.split(",")[0].split(" (")[0]
        if self.published:
            return (f"{self.per_h:.2g} per machine-hour ({'at least: ' if self.at_least else ''}"
                    f"{label}'s {self.published!r} a month, converted)")
        return f"{self.per_h:.3g} per machine-hour ({label})"

    def to_dict(self) -> dict:
        return {**dataclasses.asdict(self), "description": self.describe()}


def advisor_bucket_rate(label: str, source: str) -> InterruptionRate:
    """An AWS Spot Instance Advisor bucket as interruptions per instance-hour.

    A bucket gives the share p of the type's spot instances that Spot reclaimed over the
    trailing month. tuner reads it as a Poisson rate lambda for an instance that runs the whole
    30-day month: 1 - exp(-720 h x lambda) = p, so lambda = -ln(1 - p) / 720 h, with p the
    bucket's upper edge ("<5%": 5 %, 7.1e-5 per hour) and for ">20%" its lower edge 20 % (a
    lower bound, 3.1e-4 per hour). AWS does not say how long the reclaimed instances had run:
    instances that run less than a month and are still reclaimed at share p see a higher
    hourly rate, so this is the optimistic reading of the bucket; --interruption-rate gives
    your own figure instead."""
    if label not in SPOT_ADVISOR_BUCKETS:
        raise TunerError(f"Unknown spot interruption bucket {label!r}; one of "
                         f"{', '.join(SPOT_ADVISOR_BUCKETS)} (AWS Spot Instance Advisor), or "
                         "interruptions per instance-hour as a number.")
    p, at_least = SPOT_ADVISOR_BUCKETS[label]
    return InterruptionRate(per_h=-math.log1p(-p) / ADVISOR_MONTH_H, source=source,
                            published=label, at_least=at_least)


def check_interruption_rate(rate: float, what: str = "--interruption-rate") -> float:
    """A rate of interruptions per machine-hour: finite and >= 0 (one TunerError otherwise)."""
    if isinstance(rate, bool) or not isinstance(rate, int | float) or not math.isfinite(rate) \
            or rate < 0:
        raise TunerError(f"{what} must be a number of interruptions per machine-hour, >= 0 "
                         f"(e.g. 0.05: one every 20 machine-hours), got {rate!r}.")
    return float(rate)


@dataclass(frozen=True)
class Provider:
    name: str
    title: str
    granularity_s: int
    minimum_s: int
    billing_source: str
    instances: tuple[InstanceRow, ...] = field(default_factory=tuple)
    spot_interruption_source: str = ""  # where the instances' spot_interruption come from
    network_source: str = ""  # where the instances' network_gbps come from
    network_date: str = ""  # when that was read ("read 2026-11-30")

    def network_label(self, row: InstanceRow) -> str:
        """'p5.48xlarge 3,200 Gbps EFA shared by its 8 GPUs (aws, read 2026-11-30)': a row's
        network figure as provenance lines show it (no colon: GPU.scale_out_note cuts there);
        "" without one."""
        gbps = row.network_gbps
        if gbps is None:
            return ""
        num = f"{gbps:,.0f}" if float(gbps).is_integer() else f"{gbps:,g}"
        note = f" {row.network_note.strip()}" if row.network_note.strip() else ""
        shared = f"shared by its {row.gpus} GPUs" if row.gpus > 1 else "for its one GPU"
        when = f", {self.network_date}" if self.network_date else ""
        return f"{row.name} {num} Gbps{note} {shared} ({self.name}{when})".replace(":", ",")

    def gpu_names(self) -> list[str]:
        return list(dict.fromkeys(r.gpu for r in self.instances))

    def interruption_rate(self, instance: str) -> InterruptionRate | None:
        """The published spot interruption rate of an instance shape (None: none published)."""
        row = next((r for r in self.instances if r.name == instance), None)
        if row is None or row.spot_interruption is None:
            return None
        source = self.spot_interruption_source or f"{self.name} price table"
        if isinstance(row.spot_interruption, str):
            return advisor_bucket_rate(row.spot_interruption, source)
        return InterruptionRate(per_h=float(row.spot_interruption), source=source)

    def has_spot(self, gpu: str) -> bool:
        return any(r.gpu == gpu and r.spot_usd_per_h is not None for r in self.instances)

    def has_on_demand(self, gpu: str) -> bool:
        return any(r.gpu == gpu and r.on_demand for r in self.instances)

    def not_on_demand_reason(self, gpu: str) -> str:
        """'gcp does not rent a3-highgpu-1g, a3-highgpu-2g, a3-highgpu-4g on-demand (SOURCE)'
        for `gpu`'s shapes with on_demand: false; "" if none."""
        rows = [r for r in self.instances if r.gpu == gpu and not r.on_demand]
        if not rows:
            return ""
        return (f"{self.name} does not rent {', '.join(r.name for r in rows)} on-demand ("
                + "; ".join(dict.fromkeys(r.on_demand_source for r in rows)) + ")")

    def billing(self, gpu: str, *, spot: bool = False) -> Billing:
        rows = sorted((r for r in self.instances if r.gpu == gpu),
                      key=lambda r: (r.gpus, r.usd_per_h))
        if not rows:
            raise TunerError(f"{self.name} has no {gpu} instance in the price table (it has "
                             f"{', '.join(self.gpu_names())}); drop {gpu} or pick another "
                             "--provider.")
        if spot:
            missing = [r.name for r in rows if r.spot_usd_per_h is None]
            if len(missing) == len(rows):
                raise TunerError(
                    f"{self.name} publishes no fixed spot price for {gpu} in the price table "
                    "(spot prices move with demand); drop --spot, or add spot_usd_per_h to "
                    "the instances in a --gpu-file 'providers:' section.")
            rows = [r for r in rows if r.spot_usd_per_h is not None]
        # on-demand: only the shapes the provider rents on-demand (the others are listed apart)
        hidden = [] if spot else [r for r in rows if not r.on_demand]
        if hidden:
            rows = [r for r in rows if r.on_demand]
            if not rows:
                raise TunerError(f"{self.name} has no {gpu} instance on-demand: "
                                 f"{self.not_on_demand_reason(gpu)}; add --spot to price its "
                                 "spot instances, or pick another GPU or --provider.")
        # a row's source and date are its on-demand price's; its spot price (spot_usd_per_h)
        # was read from the same table at the same date, which the spot label says
        how = "spot price from the same table and date as its on-demand price: " if spot else ""
        insts = tuple(Instance(r.name, r.gpus, float(r.spot_usd_per_h if spot else r.usd_per_h),
                               r.vcpus, r.ram_gib,
                               source=f"{how}{r.source}" + (f" ({r.notes})" if r.notes else ""),
                               date=r.date,
                               network_gbps=None if r.network_gbps is None
                               else float(r.network_gbps),
                               network_label=self.network_label(r),
                               network_source=self.network_source if r.network_gbps is not None
                               else "") for r in rows)
        return Billing(provider=self.name, instances=insts, granularity_s=self.granularity_s,
                       minimum_s=self.minimum_s, spot=spot,
                       source="; ".join(dict.fromkeys(
                           [f"{r.name}: {how}{r.source}" + (f" ({r.notes})" if r.notes else "")
                            for r in rows]
                           + ([f"not rented on-demand, so left out: "
                               f"{self.not_on_demand_reason(gpu)}"] if hidden else []))),
                       date=", ".join(dict.fromkeys(r.date for r in rows)),
                       not_on_demand=tuple(Instance(r.name, r.gpus, float(r.usd_per_h), r.vcpus,
                                                    r.ram_gib) for r in hidden),
                       not_on_demand_source="; ".join(dict.fromkeys(
                           r.on_demand_source for r in hidden)))


# $/GPU-h above which a price is a typo (--price, --gpu-file, a provider table); the catalog's
# GPU checks use the same figure
MAX_PRICE_USD_PER_H = 10_000.0


def _plausible_row(row: InstanceRow) -> bool:
    """GPUs a whole number 1..64; every price per GPU-hour finite, > 0 and <= the maximum."""
    gpus = row.gpus
    if isinstance(gpus, bool) or not isinstance(gpus, int) or not 1 <= gpus <= 64:
        return False
    prices = [row.usd_per_h] + ([] if row.spot_usd_per_h is None else [row.spot_usd_per_h])
    for price in prices:
        if isinstance(price, bool) or not isinstance(price, int | float):
            return False
        if not (math.isfinite(price) and 0 < price / gpus <= MAX_PRICE_USD_PER_H):
            return False
    return True


def _check_interruption(row: InstanceRow, where: str) -> None:
    """A row's spot_interruption: an advisor bucket or a rate per instance-hour (>= 0)."""
    v = row.spot_interruption
    if v is None:
        return
    if isinstance(v, str):
        if v not in SPOT_ADVISOR_BUCKETS:
            raise TunerError(f"{where}: {row.name}: spot_interruption must be one of "
                             f"{', '.join(SPOT_ADVISOR_BUCKETS)} or interruptions per "
                             f"instance-hour, got {v!r}.")
        return
    check_interruption_rate(v, f"{where}: {row.name}: spot_interruption")


def _check_on_demand(row: InstanceRow, where: str) -> None:
    """A row's on_demand: true or false; false needs on_demand_source (where it is stated)."""
    if not isinstance(row.on_demand, bool):
        raise TunerError(f"{where}: {row.name}: on_demand must be true or false, got "
                         f"{row.on_demand!r}.")
    if not isinstance(row.on_demand_source, str):
        raise TunerError(f"{where}: {row.name}: on_demand_source must be text, got "
                         f"{row.on_demand_source!r}.")
    if not row.on_demand and not row.on_demand_source.strip():
        raise TunerError(f"{where}: {row.name}: on_demand: false needs on_demand_source "
                         "(where the provider says it does not rent the shape on-demand).")


def _check_network(row: InstanceRow, where: str) -> None:
    """A row's network_gbps: a positive finite number of Gbit/s (or absent); network_note text."""
    v = row.network_gbps
    if v is not None and (isinstance(v, bool) or not isinstance(v, int | float)
                          or not math.isfinite(v) or not 0 < v <= 100_000):
        raise TunerError(f"{where}: {row.name}: network_gbps must be the instance's network "
                         f"bandwidth in Gbit/s (e.g. 3200 for an AWS p5.48xlarge), got {v!r}.")
    if not isinstance(row.network_note, str):
        raise TunerError(f"{where}: {row.name}: network_note must be text, got "
                         f"{row.network_note!r}.")


def _provider(name: str, d: dict, where: str) -> Provider:
    try:
        bill = d.get("billing") or {}
        gran = bill["granularity"]
        if gran not in GRANULARITY_S:
            raise TunerError(f"{where}: provider {name}: billing.granularity must be one of "
                             f"{', '.join(GRANULARITY_S)}, got {gran!r}.")
        rows = []
        for iname, r in (d.get("instances") or {}).items():
            row = InstanceRow(name=str(iname), **r)
            if not _plausible_row(row):
                raise TunerError(f"{where}: {name} {iname}: gpus must be a whole number from 1 "
                                 "to 64 and prices above 0 and up to "
                                 f"{MAX_PRICE_USD_PER_H:,.0f} $/GPU-h, got gpus={row.gpus!r}, "
                                 f"usd_per_h={row.usd_per_h!r}, "
                                 f"spot_usd_per_h={row.spot_usd_per_h!r}.")
            _check_interruption(row, f"{where}: {name}")
            _check_on_demand(row, f"{where}: {name}")
            _check_network(row, f"{where}: {name}")
            rows.append(row)
        if any(r.network_gbps is not None for r in rows) \
                and not str(d.get("network_source") or "").strip():
            raise TunerError(f"{where}: provider {name}: network_gbps needs network_source "
                             "(where the provider publishes its instances' network bandwidth).")
        return Provider(name=name, title=str(d.get("title", name)),
                        granularity_s=GRANULARITY_S[gran],
                        minimum_s=int(bill.get("minimum_s", 0)),
                        billing_source=str(bill.get("source", "")), instances=tuple(rows),
                        spot_interruption_source=str(d.get("spot_interruption_source") or ""),
                        network_source=str(d.get("network_source") or ""),
                        network_date=str(d.get("network_date") or ""))
    except (KeyError, TypeError, AttributeError, ValueError) as exc:
        raise TunerError(f"{where}: provider {name} is malformed ({exc}); see "
                         "tuner/core/data/providers.yaml for the schema.") from None


def load_providers(extra_yaml: str | Path | None = None) -> dict[str, Provider]:
    """The shipped provider table, plus (or overridden by) a 'providers:' section of a
    --gpu-file: a provider named there replaces the shipped one of that name."""
    raw = (load_shipped_yaml(read_shipped("providers.yaml")) or {}).get("providers", {})
    out = {n: _provider(n, d, "tuner/core/data/providers.yaml") for n, d in raw.items()}
    if extra_yaml is not None and Path(extra_yaml).is_file():
        import yaml  # ~20 ms: only a user's file needs it (the shipped ones are cached)

        try:
            user = yaml.safe_load(Path(extra_yaml).read_text()) or {}
        except yaml.YAMLError as exc:
            raise TunerError(f"{extra_yaml}: not valid YAML ({exc}).") from None
        section = user.get("providers") if isinstance(user, dict) else None
        if section is not None and not isinstance(section, dict):
            raise TunerError(f"{extra_yaml}: 'providers:' must map provider names to their "
                             "tables; see tuner/core/data/providers.yaml for the schema.")
        for n, d in (section or {}).items():
            out[n] = _provider(n, d, str(extra_yaml))
    return out


def get_provider(name: str, providers: dict[str, Provider]) -> Provider:
    for key, p in providers.items():
        if key.lower() == name.strip().lower():
            return p
    raise TunerError(f"Unknown provider {name!r}.{close_matches_hint(name, providers)} "
                     "(`tuner gpus --provider NAME` lists one's instances.)")


def apply_provider(gpus: dict, provider: Provider, *, spot: bool = False) -> dict:
    """The GPU catalog (name -> tuner.core.catalog.GPU) with every GPU the provider offers priced
    by it: its billing (instances, granularity), the smallest instance's $/GPU-h, and that
    instance's host shape per GPU where the table gives it. GPUs it does not offer (with
    `spot`: at a spot price) keep no billing; :func:`require_offered` refuses them."""
    out = dict(gpus)
    for name in provider.gpu_names():
        if name not in out or (spot and not provider.has_spot(name)) \
                or (not spot and not provider.has_on_demand(name)):
            continue
        b = provider.billing(name, spot=spot)
        first = b.instances[0]
        host = {}
        if first.vcpus:
            host["cpu_cores"] = max(1, int(first.vcpus // first.gpus))
        if first.ram_gib:
            host["host_ram_gib"] = first.ram_gib / first.gpus
        out[name] = dataclasses.replace(
            out[name], price_usd_per_h=b.per_gpu_usd_per_h, billing=b,
            gpus_per_machine=max(i.gpus for i in b.instances),
            price_source=f"{spot_title(provider.title) if spot else provider.title}: {b.source}",
            price_date=b.date, **host)
    return out


def instance_hint(name: str, provider: str | None,
                  providers: dict[str, Provider] | None = None) -> str:
    """One line for a GPU name that is a provider's instance shape ("" when none is): name the
    GPU, tuner picks the shape; and where the shape is not rented on-demand, that (with its
    source). `provider`: the --provider given (None: every table is looked in)."""
    key = name.strip().lower()
    for pname, p in (providers or load_providers()).items():
        if provider is not None and pname.lower() != provider.strip().lower():
            continue
        row = next((r for r in p.instances if r.name.lower() == key), None)
        if row is None:
            continue
        text = (f"{row.name} is an instance shape of {pname} ({row.gpus} x {row.gpu}), not a "
                f"GPU: name the GPU ({row.gpu}) with --provider {pname} and tuner picks the "
                "shape")
        if not row.on_demand:
            text += (f"; {pname} does not rent {row.name} on-demand ({row.on_demand_source}), "
                     + ("so only --spot plans rent it" if row.spot_usd_per_h is not None else
                        "and the table has no spot price for it, so no plan rents it"))
        return text + "."
    return ""


def reprice(billing: Billing, usd_per_gpu_h: float) -> Billing:
    """The billing with every instance at `usd_per_gpu_h` per GPU (--price with --provider)."""
    how = "user override (--price) per GPU-hour"
    return dataclasses.replace(billing, instances=tuple(
        dataclasses.replace(i, usd_per_h=usd_per_gpu_h * i.gpus, source=how, date="")
        for i in billing.instances), source=how, date="")


def price_provenance(gpu, rental: Rental | None = None) -> str:
    """Where the price a plan pays comes from, and its date: with --provider the rented
    instance's row of the price table ('aws p5.48xlarge: SOURCE, 2026-11-24'), else the
    catalog's per-GPU price (`gpu`: a tuner.core.catalog.GPU, duck-typed)."""
    billing = getattr(gpu, "billing", None)
    if billing is not None and rental is not None:
        inst = next((i for i in billing.instances if i.name == rental.instance), None)
        if inst is not None and inst.source:
            return (f"{billing.provider}{' spot' if billing.spot else ''} {inst.name}: "
                    f"{inst.source}" + (f", {inst.date}" if inst.date else ""))
    source = str(getattr(gpu, "price_source", "") or "").strip() or "no source given"
    date = str(getattr(gpu, "price_date", "") or "").strip()
    return source + (f", {date}" if date and date.lower() != "estimate" else "")


def require_offered(gpu, provider: str | None, spot: bool = False,
                    providers: dict[str, Provider] | None = None) -> None:
    """One TunerError when --provider is given and `gpu` (a catalog GPU) is not on it (with
    `spot`: not at a spot price), saying which: no instance of it at all, or no spot price
    for the instances it has. `providers`: the price tables the catalog was priced from
    (default: the shipped ones, :func:`load_providers`)."""
    if provider is None:
        return
    b = getattr(gpu, "billing", None)
    if b is not None and b.provider.lower() == provider.lower():
        return
    no_instance = (f"Provider {provider} has no {gpu.name} instance in the price table; drop "
                   f"{gpu.name} from the GPUs or pick another --provider (`tuner gpus "
                   f"--provider {provider}` lists what it has).")
    # a GPU goes unpriced for one of several reasons (apply_provider): the table tells which
    table = next((p for name, p in (providers or load_providers()).items()
                  if name.lower() == provider.lower()), None)
    if table is None or gpu.name not in table.gpu_names():
        raise TunerError(no_instance)
    if not spot:  # every instance of it is spot-only (on_demand: false)
        raise TunerError(f"Provider {provider} has no {gpu.name} instance on-demand: "
                         f"{table.not_on_demand_reason(gpu.name)}; add --spot to price its "
                         f"spot instances, or drop {gpu.name}.")
    raise TunerError(
        f"Provider {provider} publishes no fixed spot price for {gpu.name} in the price "
        "table (spot prices move with demand); drop --spot, or add spot_usd_per_h to "
        "its instances in a --gpu-file 'providers:' section.")


__all__ = ["ADVISOR_MONTH_H", "Billing", "GRANULARITY_S", "Instance", "InstanceRow",
           "InterruptionRate", "Machines", "Provider", "Rental", "SPOT_ADVISOR_BUCKETS",
           "network_of",
           "advisor_bucket_rate", "apply_provider", "billed_seconds", "check_interruption_rate",
           "choose_instances", "get_provider", "instance_hint",
           "place", "plan_machine_gpu", "price_provenance",
           "job_cost_usd", "load_providers", "plural", "price_caveat", "rent", "reprice",
           "require_offered", "spot_title", "usd_per_million_tokens"]
