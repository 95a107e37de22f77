"""What the report shows: one typed :class:`ReportContext`, built from a study's records.

``build_report_context(...)`` is how `tuner search`, `tuner results` and `tuner report` make one;
``ReportContext.from_dict(d)`` reads the JSON-like form (tests, other tools) and raises one
``TunerError`` naming the first missing or malformed key (e.g. ``workload.tokenizer``). The
dataclasses' fields are the schema: a field without a default is required.

Optional fields (filled by :func:`reports.extras.report_extras`; every section they feed is left
out, or says why it is empty, when absent)::

    timelines: [{"trial", "roles", "gpu", "study_makespan_s", "makespan_s" (dp 1) or
                 "replica_makespan_s" (replica 0 of dp > 1), "dp", "time_s"
                 (start of each step or bin), "end_s", "running", "tokens", "kv_fraction",
                 "preemptions"} | {"trial", "roles", "gpu", "error"}]
    importances: {"makespan_s" | "cost_usd": {"importances": {knob: share}, "n_trials",
                  "method"} | {"skipped": str}}
    export_snippets: {"fastest" | "cheapest": {"trial": int, "formats": {format: text}}}
    validation: [{"config", "predicted_s", "measured_s", "runner", "trial" (optional),
                  "note" (optional)}]
    deadline_s: the search's --deadline in seconds (None: none)

Feasible trials carry ``metrics`` with at least ``makespan_s`` and ``cost_usd``; other metric
keys may be absent or None (shown as "—"). ``memory`` figures are per GPU (one device of the
replica). Winners may be None when no trial is feasible; the report then says so.
"""

from __future__ import annotations

import types
import typing
from dataclasses import MISSING, dataclass, field, fields, is_dataclass
from datetime import UTC, datetime
from typing import Any

import numpy as np

from tuner.core.catalog import GPU, ModelSpec
from tuner.core.errors import TunerError
from tuner.core.provenance import Provenance
from tuner.core.units import as_finite
from tuner.core.workload import Workload
from tuner.search.records import (
    GOALS,
    TrialRecord,
    cost_model_picks,
    pareto,
    provenance_from_attrs,
    rank,
    winners,
)

UNMEASURED = Provenance("roofline", "roofline from spec sheet (not measured)")


@dataclass
class WorkloadInfo:
    source: str
    requests: int
    tokenizer: str
    output_source: str
    prompt_tokens: list | np.ndarray  # a list in the JSON form; build_report_context keeps the
    output_tokens: list | np.ndarray  # workload's int arrays (no Python object per request)


@dataclass
class ModelInfo:
    name: str
    num_params: int
    hf_id: str | None = None
    checkpoint: str | None = None  # what the engine loads (ModelSpec.load_id); None = hf_id


@dataclass
class GpuInfo:
    price_usd_per_h: float
    price_source: str | None
    price_date: str | None
    memory_gib: float
    cost_model: Provenance
    measured: bool | None = None  # default: cost_model.is_measured
    cv_error: float | None = None  # predictor cross-validated relative error (0.08 = 8 %)
    cv_metric: str = ""  # what cv_error is, e.g. "MAPE, 5-fold"


@dataclass
class Picks:
    """Trial numbers of the fastest and the cheapest configuration."""

    fastest: int | None
    cheapest: int | None

    def of(self, goal: str) -> int | None:
        return getattr(self, goal)


@dataclass
class Exports:
    """The winners' engine configs: vLLM's `serve --config` YAML, or an SGLang-simulated
    plan's launch command."""

    fastest_engine_config: str
    cheapest_engine_config: str


@dataclass
class ReportContext:
    title: str
    question: str
    generated_at: str  # ISO 8601
    tool_version: str
    workload: WorkloadInfo
    model: ModelInfo
    gpus: dict[str, GpuInfo]
    trials: list[TrialRecord]
    pareto: list[int]  # trial numbers on the makespan-vs-$ front, by makespan
    winners: Picks
    best_per_gpu: dict[str, Picks]
    exports: Exports
    notes: list[str] = field(default_factory=list)
    verdicts: list[str] = field(default_factory=list)  # answers shown under the headline
    study: str = ""  # the Optuna study's name, shown with every figure
    timelines: list[dict] | None = None
    importances: dict | None = None
    export_snippets: dict | None = None
    validation: list[dict] | None = None
    deadline_s: float | None = None  # the search's --deadline (a line on the cost-vs-deadline figure)
    # mixes of GPU types on the front (results.json's "fleets", tuner.search.fleet)
    fleets: list[dict] | None = None

    def __post_init__(self) -> None:
        by_num = self.by_number
        for goal in GOALS:
            _check_ref(by_num, self.winners.of(goal), f"winners.{goal}", allow_none=True)
        for i, num in enumerate(self.pareto):
            _check_ref(by_num, num, f"pareto[{i}]")
        for name, picks in self.best_per_gpu.items():
            for goal in GOALS:
                _check_ref(by_num, picks.of(goal), f"best_per_gpu.{name}.{goal}")
        _check_entries(self)

    @property
    def by_number(self) -> dict[int, TrialRecord]:
        return {t.number: t for t in self.trials}

    @classmethod
    def from_dict(cls, data: Any) -> ReportContext:
        return _build(cls, data, "")


# ---- reading the dict form: one generic walk over the dataclasses' fields --------------------
def _missing(where: str) -> TunerError:
    return TunerError(f"Report context is missing {where!r}; the search must pass it (see "
                      "tuner.reports.context for the schema).")


def _wrong(where: str, want: str, value: Any) -> TunerError:
    return TunerError(f"Report context {where or 'root'} must be a {want}, got "
                      f"{type(value).__name__}.")


def _build(cls: type, data: Any, where: str) -> Any:
    if not isinstance(data, dict):
        raise _wrong(where, "dict", data)
    hints = typing.get_type_hints(cls)
    kw = {}
    for f in fields(cls):
        path = f"{where}.{f.name}" if where else f.name
        optional = f.default is not MISSING or f.default_factory is not MISSING
        if f.name not in data or (optional and data[f.name] is None):
            if not optional:
                raise _missing(path)
            continue
        kw[f.name] = _convert(hints[f.name], data[f.name], path)
    return cls(**kw)


def _convert(tp: Any, value: Any, where: str) -> Any:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is types.UnionType:  # X | None
        return None if value is None else _convert(args[0], value, where)
    if tp is TrialRecord:
        return _trial(value, where)
    if tp is Provenance:
        return provenance_from_attrs(value, None)
    if is_dataclass(tp):
        return _build(tp, value, where)
    if origin is list:
        if not isinstance(value, list):
            raise _wrong(where, "list", value)
        return [_convert(args[0], v, f"{where}[{i}]") for i, v in enumerate(value)] \
            if args and args[0] is not str else list(value)
    if origin is dict:
        if not isinstance(value, dict):
            raise _wrong(where, "dict", value)
        return {k: _convert(args[1], v, f"{where}.{k}") for k, v in value.items()}
    if tp in (int, float) and as_finite(value) is None:
        raise _wrong(where, "number", value)
    if tp in (list, dict) and not isinstance(value, tp):
        raise _wrong(where, tp.__name__, value)
    return value


def _trial(value: Any, where: str) -> TrialRecord:
    if not isinstance(value, dict):
        raise _wrong(where, "dict", value)
    for key in ("number", "config", "feasible"):
        if key not in value:
            raise _missing(f"{where}.{key}")
    if not isinstance(value["config"], dict) or "gpu" not in value["config"]:
        raise _missing(f"{where}.config.gpu")
    if value["feasible"]:
        m = value.get("metrics") or {}
        for key in ("makespan_s", "cost_usd"):
            if as_finite(m.get(key)) is None:
                raise TunerError(f"Report context {where} is feasible but has no metrics.{key}.")
    return TrialRecord.from_dict(value)


def _check_ref(by_num: dict[int, TrialRecord], num: Any, where: str,
               allow_none: bool = False) -> None:
    if num is None and allow_none:
        return
    if num not in by_num:
        raise TunerError(f"Report context {where} refers to trial {num!r}, which is not in "
                         "trials.")
    if not by_num[num].feasible:
        raise TunerError(f"Report context {where} refers to infeasible trial {num}.")


def _check_entries(ctx: ReportContext) -> None:
    """The entries of the optional lists the figures read (a malformed one is an error, not a
    silently empty section)."""
    for i, tl in enumerate(ctx.timelines or []):
        if not isinstance(tl, dict) or "trial" not in tl:
            raise _missing(f"timelines[{i}].trial")
        for key in () if "error" in tl else ("time_s", "running", "kv_fraction", "preemptions"):
            if not isinstance(tl.get(key), list):
                raise _missing(f"timelines[{i}].{key}")
    for i, v in enumerate(ctx.validation or []):
        if not isinstance(v, dict):
            raise _wrong(f"validation[{i}]", "dict", v)
        for key in ("predicted_s", "measured_s"):
            if as_finite(v.get(key)) is None:
                raise TunerError(f"Report context validation[{i}].{key} must be a number.")
        if not isinstance(v.get("config"), dict):
            raise _missing(f"validation[{i}].config")


# ---- building one from a study's records -----------------------------------------------------
def gpu_infos(records: list[TrialRecord], gpus: dict[str, GPU]) -> dict[str, GpuInfo]:
    """Each GPU's price and cost model: the provenance of its fastest plan (its winner's, as
    tuner.search.records.cost_model_picks picks them; the provenance names the plan's
    parallelism, which differs between trials of one GPU)."""
    provenance: dict[str, Provenance] = {}
    for g, engines in cost_model_picks(records).items():
        # each engine's first pick leads with its fastest plan: the GPU's is the fastest of them
        fastest = rank([picks[0][1][0] for picks in engines.values()], "fastest")
        provenance[g] = fastest[0].provenance
    return {name: GpuInfo(price_usd_per_h=g.price_usd_per_h, price_source=g.price_source,
                          price_date=g.price_date, memory_gib=g.memory_gib,
                          cost_model=provenance.get(name, UNMEASURED))
            for name, g in gpus.items()}


def build_report_context(*, study_name: str, records: list[TrialRecord], workload: Workload,
                         model: ModelSpec, gpus: dict[str, GPU], exports: Exports,
                         question: str, tool_version: str, notes: list[str],
                         verdicts: list[str] = (), extras: dict | None = None) -> ReportContext:
    """The report of a study's records (``extras``: :func:`reports.extras.report_extras`)."""
    best, per_gpu = winners(records)
    return ReportContext(
        title=f"tuner: {model.name} on {', '.join(gpus)}",
        question=question,
        generated_at=datetime.now(UTC).isoformat(timespec="seconds"),
        tool_version=tool_version,
        study=study_name,
        workload=WorkloadInfo(
            source=workload.source, requests=len(workload), tokenizer=workload.tokenizer,
            output_source=workload.output_source,
            prompt_tokens=np.asarray(workload.prompt_tokens),
            output_tokens=np.asarray(workload.output_tokens)),
        model=ModelInfo(name=model.name, num_params=model.num_params, hf_id=model.hf_id,
                        checkpoint=model.load_id),
        gpus=gpu_infos(records, gpus),
        trials=records,
        pareto=pareto(records),
        winners=Picks(best.get("fastest"), best.get("cheapest")),
        best_per_gpu={g: Picks(**d) for g, d in per_gpu.items()},
        exports=exports,
        notes=list(notes),
        verdicts=list(verdicts),
        **(extras or {}),
    )


__all__ = ["Exports", "GpuInfo", "ModelInfo", "Picks", "ReportContext", "WorkloadInfo",
           "build_report_context", "gpu_infos"]
