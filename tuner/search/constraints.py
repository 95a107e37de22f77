"""Objectives with constraints: ``--deadline``, ``--budget``, ``--max-gpus``, and which plans
quantization may take (``--allow-quantization``, ``--quantized-model``).

A plan is a GPU type x GPUs per replica (TP) x replicas (DP) x serving knobs. Two kinds of
constraint:

- on the plan itself, known before simulating (:meth:`Constraints.plan_violation`): more GPUs
  than ``--max-gpus`` (in total, or of one type), or a quantized plan nothing can deploy (4-bit
  weights without a 4-bit ``--quantized-model`` checkpoint; 8-bit weights are quantized to FP8
  online on every GPU, :func:`needs_checkpoint`). Such points are infeasible trials, never
  simulated.
- on the simulated figures (:meth:`Constraints.violations`): makespan over ``--deadline``, $
  over ``--budget``. The sampler gets them through ``constraints_func`` (TPE and NSGA-II), the
  polish step aims at the best plan within them, and the winners are picked among the plans
  that meet them: with a deadline the cheapest such plan, with a budget only the fastest.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from tuner.core.config import engine_name
from tuner.core.errors import TunerError
from tuner.core.units import fmt_duration
from tuner.search.space import DEFAULT_MAX_GPUS

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*$", re.IGNORECASE)
_UNIT_S = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
#: Weight/KV bits a quantization-allowing space offers (vLLM: FP8 weights quantized online, or
#: an AWQ/GPTQ checkpoint's 4-bit ones; an FP8 KV cache: tuner maps no vLLM dtype to 4 bits).
QUANTIZED_WEIGHT_BITS = (16, 8, 4)
QUANTIZED_KV_BITS = (16, 8)


def parse_duration_s(text: str, option: str = "--deadline") -> float:
    """Seconds of '90m', '6h', '2d', '45s' or a bare number of seconds."""
    m = _DURATION.match(str(text))
    if not m:
        raise TunerError(f"{option} {text!r}: give a duration like 90m, 6h, 2d or seconds "
                         "(e.g. 5400).")
    seconds = float(m.group(1)) * _UNIT_S[m.group(2).lower()]
    if seconds <= 0:
        raise TunerError(f"{option} must be positive, got {text!r}.")
    return seconds


def parse_max_gpus(text: str) -> tuple[int | None, dict[str, int]]:
    """``--max-gpus``: '8' (GPUs of a plan in total) or 'A10=8,A40=4' (per GPU type) ->
    (total or None, {gpu: most GPUs})."""
    text = str(text).strip()
    if "=" not in text:
        try:
            n = int(text)
        except ValueError:
            raise TunerError(f"--max-gpus {text!r}: give a number (8) or per GPU type "
                             "(A10=8,A40=4).") from None
        if n < 1:
            raise TunerError(f"--max-gpus must be >= 1, got {n}.")
        return n, {}
    per: dict[str, int] = {}
    for part in text.split(","):
        name, eq, value = part.partition("=")
        try:
            n = int(value)
        except ValueError:
            n = 0
        if not eq or not name.strip() or n < 1:
            raise TunerError(f"--max-gpus {text!r}: each entry is GPU=N with N >= 1, e.g. "
                             "A10=8,A40=4.")
        if name.strip().lower() in {k.lower() for k in per}:
            raise TunerError(f"--max-gpus {text!r} names {name.strip()} twice.")
        per[name.strip()] = n
    return None, per


@dataclass(frozen=True)
class Constraints:
    """What a plan must satisfy. All None/empty: today's unconstrained Pareto search."""

    deadline_s: float | None = None
    budget_usd: float | None = None
    max_gpus: int | None = None  # GPUs of a plan (TP x DP), any type
    max_gpus_per_type: dict[str, int] = field(default_factory=dict)
    # quantized checkpoint for plans whose weights the engine cannot quantize online
    quantized_model: str | None = None
    # the weight bits that checkpoint stores (checkpoint_weight_bits: its config.json where at
    # hand, else its name); it serves the plans at those bits only. None: neither says, and
    # it is taken as ASSUMED_CHECKPOINT_BITS
    quantized_bits: int | None = None

    def __post_init__(self) -> None:
        if self.deadline_s is not None and not 0 < self.deadline_s < math.inf:
            raise TunerError(f"--deadline must be a positive, finite duration, got "
                             f"{self.deadline_s:g} s.")
        if self.budget_usd is not None and not 0 < self.budget_usd < math.inf:
            raise TunerError(f"--budget must be a positive, finite amount, got "
                             f"${self.budget_usd:g}.")
        if self.quantized_model and self.quantized_bits is None:
            object.__setattr__(self, "quantized_bits",
                               checkpoint_weight_bits(self.quantized_model))

    # ---- what kind --------------------------------------------------------------------------
    @property
    def on_figures(self) -> bool:
        """A deadline or a budget: the winner is picked among the plans that meet it."""
        return self.deadline_s is not None or self.budget_usd is not None

    @property
    def active(self) -> bool:
        return self.on_figures or self.max_gpus is not None or bool(self.max_gpus_per_type)

    @property
    def goal(self) -> str:
        """The constrained objective: with a deadline the cheapest plan that meets it, with a
        budget only the fastest within it."""
        return "cheapest" if self.deadline_s is not None or self.budget_usd is None \
            else "fastest"

    def check_gpus(self, gpus: Iterable[str] | dict) -> Constraints:
        """These constraints with --max-gpus's GPU names spelled as the catalog spells the
        --gpus GPUs (names compare as --gpus reads them: case, '-', a GPU's aliases; given the
        GPUs, not just their names); one error line for a name not among them."""
        from tuner.core.catalog import find_gpu, gpu_key

        names = list(gpus)

        def owner(k: str) -> str | None:
            if isinstance(gpus, dict):
                hit = find_gpu(k, gpus)
                return None if hit is None else hit.name
            return next((n for n in names if gpu_key(n) == gpu_key(k)), None)

        canon = {k: owner(k) for k in self.max_gpus_per_type}
        unknown = sorted(k for k, n in canon.items() if n is None)
        if unknown:
            raise TunerError(f"--max-gpus names {', '.join(unknown)}, not among --gpus "
                             f"{','.join(names)}.")
        if len(set(canon.values())) < len(canon):
            twice = sorted(k for k in canon if list(canon.values()).count(canon[k]) > 1)
            raise TunerError(f"--max-gpus names one GPU twice ({', '.join(twice)}).")
        return replace(self, max_gpus_per_type={canon[k]: v
                                                for k, v in self.max_gpus_per_type.items()})

    # ---- before simulating ----------------------------------------------------------------
    def gpu_cap(self, gpu: str) -> int:
        """Most GPUs of type `gpu` a plan may use: --max-gpus GPU=N, else --max-gpus N, else
        tuner.search.space.DEFAULT_MAX_GPUS."""
        per = self.max_gpus_per_type.get(gpu)
        caps = [c for c in (per, self.max_gpus) if c is not None]
        return min(caps) if caps else DEFAULT_MAX_GPUS

    def cap_flag(self, gpu: str) -> str:
        """How the cap on `gpu` was set, as the flag that changes it."""
        if gpu in self.max_gpus_per_type and (self.max_gpus is None or
                                              self.max_gpus_per_type[gpu] <= self.max_gpus):
            return f"--max-gpus {gpu}={self.max_gpus_per_type[gpu]}"
        if self.max_gpus is not None:
            return f"--max-gpus {self.max_gpus}"
        return f"the default --max-gpus {self.gpu_cap(gpu)}"

    def plan_violation(self, gpu: str, num_gpus: int, weight_bits: int,
                       gpu_has_fp8: bool, checkpoint_bits: int = 16) -> str | None:
        """Why the plan is excluded before simulating it (None: it may run)."""
        if self.max_gpus is not None and num_gpus > self.max_gpus:
            return f"uses {num_gpus} GPUs, more than --max-gpus {self.max_gpus}"
        cap = self.max_gpus_per_type.get(gpu)
        if cap is not None and num_gpus > cap:
            return f"uses {num_gpus} x {gpu}, more than --max-gpus {gpu}={cap}"
        if num_gpus > self.gpu_cap(gpu):
            return (f"uses {num_gpus} x {gpu}, more than {self.cap_flag(gpu)} (pass --max-gpus "
                    "to allow more)")
        if (needs_checkpoint(weight_bits, gpu_has_fp8, checkpoint_bits)
                and not self.serves(weight_bits)):
            why = f"{weight_bits}-bit weights on {gpu} need a quantized checkpoint"
            if self.quantized_model is None:
                return f"{why}; pass --quantized-model ID to search them"
            return (f"{why} at {weight_bits} bits; --quantized-model {self.quantized_model} "
                    f"holds {served_bits(self.quantized_bits)}-bit weights")
        return None

    def serves(self, weight_bits: int) -> bool:
        """Whether the --quantized-model checkpoint serves plans of `weight_bits`: it stores
        that precision (a 4-bit AWQ checkpoint is no 8-bit plan's)."""
        return bool(self.quantized_model) and served_bits(self.quantized_bits) == weight_bits

    # ---- after simulating -----------------------------------------------------------------
    def violations(self, makespan_s: float, cost_usd: float) -> tuple[float, float]:
        """(deadline, budget) violations as Optuna wants them: <= 0 met, > 0 by how much
        (relative); infinite figures (an infeasible plan) violate both."""
        d = 0.0 if self.deadline_s is None else _excess(makespan_s, self.deadline_s)
        b = 0.0 if self.budget_usd is None else _excess(cost_usd, self.budget_usd)
        return d, b

    def meets(self, makespan_s: float, cost_usd: float) -> bool:
        return all(v <= 0 for v in self.violations(makespan_s, cost_usd))

    # ---- words ----------------------------------------------------------------------------
    def describe(self) -> str:
        parts = []
        if self.deadline_s is not None:
            parts.append(f"finishes within {fmt_duration(self.deadline_s)}")
        if self.budget_usd is not None:
            b = self.budget_usd  # cents hide a budget under $1 (e.g. $0.001)
            parts.append(f"costs at most ${b:,.2f}" if b >= 1 else f"costs at most ${b:.4g}")
        return " and ".join(parts)

    def to_dict(self) -> dict:
        return {"deadline_s": self.deadline_s, "budget_usd": self.budget_usd,
                "max_gpus": self.max_gpus, "max_gpus_per_type": dict(self.max_gpus_per_type),
                "quantized_model": self.quantized_model}

    @classmethod
    def from_dict(cls, d: dict | None) -> Constraints:
        """A stored study's constraints; its checkpoint's bits are found again as the search
        found them."""
        d = d or {}
        ref = d.get("quantized_model")
        bits = stored_checkpoint_bits(ref) if ref else None
        return cls(deadline_s=d.get("deadline_s"), budget_usd=d.get("budget_usd"),
                   max_gpus=d.get("max_gpus"),
                   max_gpus_per_type=dict(d.get("max_gpus_per_type") or {}),
                   quantized_model=ref, quantized_bits=bits)


def _excess(value: float, limit: float) -> float:
    if not math.isfinite(value):
        return 1e9
    return value / limit - 1.0


def needs_checkpoint(weight_bits: int, gpu_has_fp8: bool, checkpoint_bits: int = 16) -> bool:
    """Whether weights of ``weight_bits`` need a pre-quantized checkpoint: 4-bit ones
    (AWQ/GPTQ) do. 8-bit ones do not, on any GPU: vLLM and SGLang quantize a 16-bit checkpoint
    to FP8 as they load it, W8A8 on GPUs with FP8 tensor cores and weight-only FP8 through
    their Marlin kernels (W8A16) on the others (vLLM's Fp8Config and online methods need
    compute capability 7.5; SGLang turns Marlin FP8 on for sm_80 - sm_88), which is how tuner
    prices 8-bit weights there (the 16-bit compute rate, 8-bit weight bytes). Not when the
    model's own checkpoint stores that precision. ``gpu_has_fp8`` decides the kernels, not
    this: it is kept for callers."""
    if weight_bits == checkpoint_bits:
        return False
    return weight_bits < 8


def _bits_from_name(ref: str) -> int | None:
    """The weight bits a checkpoint's name says (None: none, or two widths): the catalog's
    reading of quantized repo names (tuner.core.catalog.quantized_name_bits), FP8 ones 8."""
    from tuner.core.catalog import is_fp8_repo, quantized_name_bits

    bits, _ = quantized_name_bits(ref.rstrip("/\\").replace("\\", "/"))
    return 8 if bits is None and is_fp8_repo(ref) else bits


def _bits_from_config(ref: str) -> int | None:
    """The weight bits the checkpoint's own config.json says (its quantization_config; 16
    without one), from a local folder or file, or the copy in the Hugging Face cache (no
    download); None where no config is at hand. A method tuner does not price: TunerError."""
    from pathlib import Path

    from tuner.core.catalog import _checkpoint_precision, _hf_cache_dir, _read_config_json

    if not ref:
        return None
    path = Path(ref).expanduser()
    if path.is_dir():
        path = path / "config.json"
    if not path.is_file():
        try:
            from huggingface_hub import try_to_load_from_cache

            cached = try_to_load_from_cache(ref, "config.json", cache_dir=_hf_cache_dir())
        except Exception:  # noqa: BLE001 - not a repo id, no hub library: nothing cached
            cached = None
        if not isinstance(cached, str):
            return None
        path = Path(cached)
    cfg = _read_config_json(path)
    return int(_checkpoint_precision(cfg, path).get("checkpoint_bits", 16))


#: the weight bits of a --quantized-model checkpoint whose config and name do not say: the
#: plans that need a checkpoint are 4-bit ones (needs_checkpoint)
ASSUMED_CHECKPOINT_BITS = 4


def served_bits(known: int | None) -> int:
    """The weight bits a --quantized-model checkpoint is taken to store (`known`: what
    checkpoint_weight_bits found; None: ASSUMED_CHECKPOINT_BITS)."""
    return known or ASSUMED_CHECKPOINT_BITS


def checkpoint_weight_bits(ref: str) -> int | None:
    """The weight bits the --quantized-model checkpoint `ref` stores: its config.json's
    quantization_config where the config is at hand (a local folder, or the Hugging Face
    cache: nothing is downloaded), else its name (awq/gptq/w4a16/int4 -> 4; w8a8/int8/fp8 ->
    8); None where neither says (served_bits takes it as 4-bit). One TunerError for a config
    without quantization_config (a 16-bit checkpoint) or of a method tuner does not price."""
    bits = _bits_from_config(ref)
    if bits == 16:
        raise TunerError(f"--quantized-model {ref}: its config.json has no quantization_config, "
                         "so it is a 16-bit checkpoint; give a 4-bit (AWQ/GPTQ) or 8-bit one.")
    return bits if bits is not None else _bits_from_name(ref)


def stored_checkpoint_bits(ref: str) -> int | None:
    """checkpoint_weight_bits of a checkpoint a stored study or export names, never an error:
    a config that now says 16 bits (the search refused such a one): its name."""
    try:
        return checkpoint_weight_bits(ref)
    except TunerError:
        return _bits_from_name(ref)


def with_quantization(space):
    """``space`` with quantized weights and KV offered (``--allow-quantization``): the weight
    and KV bits become knobs over :data:`QUANTIZED_WEIGHT_BITS` / :data:`QUANTIZED_KV_BITS`
    unless the space already lists them."""
    from dataclasses import replace

    knobs, fixed = dict(space.knobs), dict(space.fixed)
    for name, values in (("weight_bits", QUANTIZED_WEIGHT_BITS), ("kv_bits", QUANTIZED_KV_BITS)):
        if name in knobs and len(knobs[name]) > 1:
            continue
        fixed.pop(name, None)
        knobs[name] = list(values)
    return replace(space, knobs=knobs, fixed=fixed,
                   source=f"{space.source} + --allow-quantization")


def is_quantized(config) -> bool:
    """A ServingConfig with weights or KV cache below 16 bits."""
    return config.weight_bits < 16 or config.kv_bits < 16


def trial_tag(record) -> str:
    """'#12' for a trial of the study (a tuner.search.records.TrialRecord); "vLLM's defaults" (or SGLang's) for an engine's defaults
    the space does not hold, simulated beside the trials (TrialRecord.engine_defaults, numbered
    -1, -2, ...: no trial, so no trial number is printed for them)."""
    if getattr(record, "engine_defaults", "") or record.number < 0:
        engine = record.config.engine if record.config is not None else None
        return f"{engine_name(engine)}'s defaults"
    return f"#{record.number}"


def trial_ref(record) -> str:
    """'trial #12', or "vLLM's defaults" (trial_tag) where the record is no trial."""
    tag = trial_tag(record)
    return f"trial {tag}" if tag.startswith("#") else tag


def no_plan_line(records, constraints: Constraints, fmt_usd) -> str:
    """The one line for a search whose plans all miss the deadline/budget: the best found."""
    feas = [r for r in records if r.feasible]
    if constraints.deadline_s is not None:
        best = min(feas, key=lambda r: (r.makespan_s, r.cost_usd))
        lead = "no plan finishes within " + fmt_duration(constraints.deadline_s)
        if constraints.budget_usd is not None:
            lead += f" for at most {fmt_usd(constraints.budget_usd)}"
        what = "fastest"
    else:
        best = min(feas, key=lambda r: (r.cost_usd, r.makespan_s))
        lead = f"no plan costs at most {fmt_usd(constraints.budget_usd)}"
        what = "cheapest"
    return (f"{lead}; {what} is {fmt_duration(best.makespan_s)} on {best.config.num_gpus}"
            f" x {best.gpu} for {fmt_usd(best.cost_usd)} ({trial_ref(best)}).")


def quantization_verdict(records, goal: str, fmt_usd, beside=None) -> str | None:
    """What quantization buys, like for like: the best quantized plan on ``goal`` against 16
    bits on the same GPU type and count (None when the records hold no plan of one kind): the
    best 16-bit plan the search ran there (one that meets --deadline / --budget first), else
    (the search tried none there) 16 bits
    simulated on those GPUs by ``beside`` (quantized record -> [tuner.search.baseline.
    sixteen_bit_beside dicts]: the engine's defaults, the plan's own settings). Only when
    16 bits cannot run on those GPUs does the line compare with the best 16-bit plan on other
    GPUs, and say why."""
    ran = [r for r in records if r.feasible and not getattr(r, "study_only", "")]
    within = [r for r in ran if getattr(r, "within", True)]
    quant = [r for r in within if is_quantized(r.config)]
    # 16 bits on the quantized plan's GPUs is its like, even where it misses --deadline /
    # --budget (what quantization buys then is meeting them)
    full_ran = [r for r in ran if not is_quantized(r.config)]
    full = [r for r in within if not is_quantized(r.config)] or full_ran
    if not full or not quant:
        return None
    key = ((lambda r: (r.cost_usd, r.makespan_s)) if goal == "cheapest"
           else (lambda r: (r.makespan_s, r.cost_usd)))
    q = min(quant, key=key)

    def gpus_of(r) -> tuple:
        return r.gpu, r.config.num_gpus

    same = [r for r in full_ran if gpus_of(r) == gpus_of(q)]
    same = [r for r in same if getattr(r, "within", True)] or same
    where = f"{gpus_of(q)[1]} x {q.gpu}"
    other = ""
    if same:
        f = min(same, key=key)
        label, makespan_s, cost_usd = plan_label(f.config), f.makespan_s, f.cost_usd
        if not getattr(f, "within", True):
            other = " (which misses the --deadline / --budget)"
    else:
        sims = list(beside(q)) if beside is not None else []
        runs = [s for s in sims if s.get("feasible")]
        if runs:  # 16 bits the search did not try on these GPUs, simulated beside it
            m = min(runs, key=lambda s: key(_Figures(s["metrics"]["makespan_s"],
                                                     s["metrics"]["cost_usd"])))
            label = plan_label(m["config"])
            makespan_s, cost_usd = m["metrics"]["makespan_s"], m["metrics"]["cost_usd"]
            other = (f" (at {m['what']}, simulated beside the search, which tried no 16-bit "
                     f"plan on {where})")
        else:
            f = min(full, key=key)
            label, makespan_s, cost_usd = plan_label(f.config), f.makespan_s, f.cost_usd
            why = "; ".join(dict.fromkeys(s["reason"].rstrip(".") for s in sims
                                          if s.get("reason")))
            other = (f" (16 bits cannot run on {where}: {why}; compared with the best 16-bit "
                     "plan on other GPUs)" if why else
                     f" (the search tried no 16-bit plan on {where}; compared with the best "
                     "16-bit plan on other GPUs)")
    return (f"Quantization ({goal}): {plan_label(q.config)} {fmt_duration(q.makespan_s)}, "
            f"{fmt_usd(q.cost_usd)} against {label} {fmt_duration(makespan_s)}, "
            f"{fmt_usd(cost_usd)}{other}: "
            f"{100 * (q.makespan_s / makespan_s - 1):+.0f} % time, "
            f"{100 * (q.cost_usd / cost_usd - 1):+.0f} % $; output quality is not simulated.")


@dataclass(frozen=True)
class _Figures:
    """The two figures a goal ranks plans by, for a simulated plan that is no trial record."""
    makespan_s: float
    cost_usd: float


def parallel_label(config) -> str:
    """'TP 8 x PP 2 x DP 1' ('TP 4 x DP 8' without pipeline stages) of a ServingConfig or its
    JSON form."""
    if not isinstance(config, dict):
        config = config.to_dict()
    pp = int(config.get("pp", 1))
    return (f"TP {int(config.get('tp', 1))} x " + (f"PP {pp} x " if pp > 1 else "")
            + f"DP {int(config.get('dp', 1))}")


def plan_label(config) -> str:
    """Both things a comparison must hold equal, named: '32 x A40 (TP 4 x DP 8, 16-bit)',
    '1 x H100 (TP 1 x DP 1, 8-bit weights, 16-bit KV)'. `config`: a ServingConfig, or its
    JSON form (e.g. a stored baseline's)."""
    if not isinstance(config, dict):
        config = config.to_dict()
    gpus = int(config.get("tp", 1)) * int(config.get("pp", 1)) * int(config.get("dp", 1))
    w, kv = int(config.get("weight_bits", 16)), int(config.get("kv_bits", 16))
    bits = f"{w}-bit" if w == kv else f"{w}-bit weights, {kv}-bit KV"
    # an SGLang plan names its engine (vLLM, the default engine, goes unnamed as before)
    engine = "SGLang, " if config.get("engine") == "sglang" else ""
    return f"{gpus} x {config['gpu']} ({engine}{parallel_label(config)}, {bits})"
