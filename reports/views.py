"""The report's view model: a ReportContext turned into the rows, strings and figure JSON the
template shows (every number formatted here, once)."""

from __future__ import annotations

import json
import re
import shlex
from collections import Counter
from typing import Any

import numpy as np
import plotly.offline

from tuner.core.config import DEFAULTS, ENGINE_HELD
from tuner.core.errors import TunerError
from tuner.core.memory import gpu_memory_items
from tuner.core.provenance import Provenance
from tuner.core.units import as_finite, fmt_duration, fmt_usd
from tuner.exports import EXPORTERS
from tuner.reports import figures
from tuner.reports.context import GpuInfo, ReportContext
from tuner.reports.figures import GIB, PALETTE, fig_json, gpu_colors, role_label, sort_key
from tuner.search.constraints import trial_ref, trial_tag
from tuner.search.records import (
    GOALS,
    Metrics,
    TrialRecord,
    cost_models_by_engine,
    winner_roles_of,
)


def fmt_usd_per_h(x: Any) -> str:
    """A price per hour, as the GPU catalog states it ($0.44)."""
    v = as_finite(x)
    return "—" if v is None else f"${v:,.2f}"


def fmt_int(x: Any) -> str:
    v = as_finite(x)
    return "—" if v is None else f"{round(v):,}"


def fmt_float(x: Any, digits: int = 2) -> str:
    v = as_finite(x)
    if v is None:
        return "—"
    if v != 0 and abs(v) < 10 ** -digits:
        return f"{v:.2g}"
    return f"{v:,.{digits}f}"


def fmt_pct(x: Any, digits: int = 0) -> str:
    v = as_finite(x)
    return "—" if v is None else f"{100 * v:.{digits}f} %"


def fmt_gib(x: Any) -> str:
    v = as_finite(x)
    return "—" if v is None else f"{v / GIB:.1f} GiB"


def fmt_params(n: Any) -> str:
    v = as_finite(n)
    if v is None:
        return "—"
    return f"{v / 1e9:.2f} B" if v >= 1e9 else f"{v / 1e6:.0f} M"


def bits_summary(cfg: dict) -> str:
    wb, kb = cfg.get("weight_bits", 16), cfg.get("kv_bits", 16)
    return f"{wb}-bit" if wb == kb else f"{wb}-bit weights, {kb}-bit KV"


def config_summary(cfg) -> str:
    """'tp1, chunk 2048, R_max 256, 16-bit' (+ the non-default knobs). `cfg`: a ServingConfig,
    or its JSON form (a validation entry's)."""
    if not isinstance(cfg, dict):
        cfg = cfg.to_dict()
    held = ENGINE_HELD.get(cfg.get("engine", "vllm"), {})  # knobs the plan's engine lacks

    def off_default(k: str) -> bool:  # a knob the terminal's table shows too (cli/tables.py)
        return k in cfg and k not in held and cfg[k] != DEFAULTS.get(k)

    parts = [f"tp{cfg.get('tp', 1)}"]
    if cfg.get("pp", 1) > 1:
        parts.append(f"pp{cfg['pp']}")
    if cfg.get("dp", 1) > 1:
        parts.append(f"dp{cfg['dp']}")
    if cfg.get("engine", "vllm") == "sglang":  # SGLang's plans hold vLLM's own knobs
        parts.append(f"SGLang {cfg.get('schedule_policy', 'fcfs')}")
    parts += [f"chunk {cfg.get('chunk_size', '?')}", f"R_max {cfg.get('max_running', '?')}",
              bits_summary(cfg)]
    if cfg.get("scheduler", "vllm") != "vllm":
        parts.append(f"scheduler {cfg['scheduler']}")
    if cfg.get("ordering", "fcfs") != "fcfs":
        parts.append(f"order {cfg['ordering']}")
    if cfg.get("kv_offload_layers", 0):
        parts.append(f"KV offload {cfg['kv_offload_layers']} layers")
    if cfg.get("weight_offload_fraction", 0):
        parts.append(f"weights {100 * cfg['weight_offload_fraction']:.0f} % on CPU")
    if off_default("attention_on_cpu"):
        parts.append("attention on CPU")
    if off_default("cpu_threads_intra") or off_default("cpu_threads_inter"):
        parts.append(f"CPU threads {cfg.get('cpu_threads_intra', 0)}/"
                     f"{cfg.get('cpu_threads_inter', 0)}")
    # the memory share sets the KV capacity: gpu_memory_utilization (SGLang:
    # mem_fraction_static), as the terminal's 'mem .95'
    if off_default("gpu_memory_utilization"):
        parts.append(f"mem {cfg['gpu_memory_utilization']:g}")
    if off_default("block_size"):
        parts.append(f"block {cfg['block_size']}")
    if off_default("expert_parallel"):
        parts.append("expert parallel")
    return ", ".join(parts)


def _winner_roles(ctx: ReportContext) -> list[tuple[int, list[str]]]:
    """Distinct winners (overall first, then per GPU) with their roles."""
    best = {g: ctx.winners.of(g) for g in GOALS}
    per_gpu = {gpu: {g: p.of(g) for g in GOALS} for gpu, p in ctx.best_per_gpu.items()}
    return list(winner_roles_of(best, per_gpu).items())


def _memory_rows(ctx: ReportContext, trials: dict[int, TrialRecord]) -> list[dict]:
    """One row per distinct winner (overall winners first, then per GPU) that has a memory plan."""
    rows = []
    for num, roles in _winner_roles(ctx):
        t = trials[num]
        mem = t.memory
        if mem is None:
            continue
        total = as_finite(mem.gpu_memory_bytes) or 0.0
        # simulate's rows (tuner.core.memory.gpu_memory_items): the runtime and any
        # weight-offload buffers have their own, not "free"; a hybrid under SGLang its Mamba
        # state pool, carved out before the KV pool (the padding slot included)
        engine = t.config.engine if t.config is not None else "vllm"
        items = [(k, label, as_finite(b)) for k, label, b in gpu_memory_items(mem, engine)]
        part = {k: b or 0.0 for k, _, b in items}
        slots = mem.state_slots or 0
        rows.append(dict(
            number=num, tag=trial_tag(t), gpu=t.gpu, roles=roles,
            label=f"{trial_tag(t)} {t.gpu} ({roles[0]})",
            total=total, usable=as_finite(mem.usable_bytes), weights=part["weights"],
            activations=part["activations"], runtime=part["runtime"],
            offload_buffers=part.get("offload_buffers", 0.0), kv=part["kv"],
            state=part.get("state", 0.0), state_slots=slots, items=items,
            free=max(total - sum(part.values()), 0.0),
            kv_capacity_tokens=mem.kv_capacity_tokens,
            max_concurrent_requests=mem.max_concurrent_requests,
            # the running requests the state slots allow (0: no such cap)
            max_running_by_slots=getattr(mem, "max_running_by_slots", 0) or 0,
            summary=config_summary(t.config),
        ))
    return rows


def _slice_knobs(feasible: list[TrialRecord]) -> list[str]:
    """ServingConfig fields (other than the GPU) that took more than one value."""
    knobs = []
    for key in feasible[0].config.to_dict() if feasible else []:
        if key == "gpu":
            continue
        values = {json.dumps(getattr(t.config, key), sort_keys=True) for t in feasible}
        if len(values) > 1:
            knobs.append(key)
    return knobs


def _slices(trials: dict[int, TrialRecord]) -> dict[str, list[dict]]:
    """{knob: [{'value', 'gpu', 'trial', 'makespan_s', 'cost_usd', 'n'}]}: the best makespan for
    each value of each knob, per GPU."""
    feasible = [t for t in trials.values() if t.feasible]
    out: dict[str, list[dict]] = {}
    for knob in _slice_knobs(feasible):
        best: dict[tuple, dict] = {}
        count: Counter = Counter()
        for t in feasible:
            value = getattr(t.config, knob)
            key = (json.dumps(value, sort_keys=True), t.gpu)
            count[key] += 1
            cur = best.get(key)
            if cur is None or (t.makespan_s, t.cost_usd, t.number) < \
                    (cur["makespan_s"], cur["cost_usd"], cur["trial"]):
                best[key] = dict(value=value, gpu=t.gpu, trial=t.number, ref=trial_ref(t),
                                 makespan_s=t.makespan_s, cost_usd=t.cost_usd)
        rows = [dict(r, n=count[k]) for k, r in best.items()]
        rows.sort(key=lambda r: (sort_key(r["value"]), r["gpu"]))
        out[knob] = rows
    return out


def _limit_rows(ctx: ReportContext, trials: dict[int, TrialRecord],
                colors: dict[str, str]) -> list[dict]:
    """Each distinct winner with its physical limit T_o and how close its schedule gets: the
    makespan less start-up against T_o less the same start-up (Metrics.schedule_limit), as the
    start-up has no bound to approach; the whole-job figures are kept beside them."""
    rows = []
    for r in _winner_roles(ctx):
        t = trials[r[0]]
        m = t.metrics or Metrics()
        ms, lb = as_finite(m.makespan_s), as_finite(m.lower_bound_s)
        start = as_finite(m.startup_s) or 0.0  # a study priced before start-up: none
        sched, sched_lb = m.schedule_and_bound()
        frac = m.schedule_limit()
        rows.append(dict(
            number=r[0], tag=trial_tag(t), ref=trial_ref(t), gpu=t.gpu, roles=r[1],
            color=colors.get(t.gpu, PALETTE[-1]), makespan_s=ms, lower_bound_s=lb,
            schedule_s=sched, schedule_lower_bound_s=sched_lb, startup_s=start,
            fraction=frac, whole_fraction=(lb / ms) if lb is not None and ms else None,
            makespan=fmt_duration(ms), schedule=fmt_duration(sched), limit=fmt_duration(sched_lb),
            startup=fmt_duration(start) if start else "—",
            pct=fmt_pct(frac), whole_pct=fmt_pct(lb / ms) if lb is not None and ms else "—",
            gap=fmt_duration(sched - sched_lb) if sched is not None and sched_lb is not None
            else "—",
            summary=config_summary(t.config)))
    return rows


def _validation_rows(ctx: ReportContext) -> list[dict]:
    rows = []
    trials = ctx.by_number
    for v in ctx.validation or []:
        pred, meas = float(v["predicted_s"]), float(v["measured_s"])
        err = (pred - meas) / meas if meas > 0 else None
        cal = as_finite(v.get("predicted_calibrated_s"))
        trial = v.get("trial")
        device = v.get("measured_device") or v.get("device")
        runner = str(v.get("runner") or "—") + (f" on {device}" if device else "")
        notes = v.get("notes")
        note = v.get("note") or ("; ".join(str(n) for n in notes)
                                 if isinstance(notes, list) else str(notes or ""))
        rows.append(dict(
            trial=("—" if trial is None else trial_tag(trials[trial]) if trial in trials
                   else f"#{trial}"), gpu=v["config"].get("gpu", "—"),
            summary=config_summary(v["config"]), runner=runner,
            predicted_s=pred, measured_s=meas, error=err, predicted=fmt_duration(pred),
            measured=fmt_duration(meas),
            error_s="—" if err is None else f"{100 * err:+.0f} %",
            calibrated=fmt_duration(cal) if cal is not None else "—",
            calibrated_error="—" if cal is None or meas <= 0 else
            f"{100 * (cal - meas) / meas:+.0f} %",
            note=note))
    return rows


# ---------------------------------------------------------------------------------------------
# View model


def _lengths_stats(values: np.ndarray) -> dict:
    if values.size == 0:
        return dict(count="0", median="—", mean="—", p90="—", max="—", total="—")
    return dict(
        count=f"{values.size:,}", median=fmt_int(np.median(values)), mean=fmt_int(values.mean()),
        p90=fmt_int(np.percentile(values, 90)), max=fmt_int(values.max()),
        total=fmt_int(values.sum()),
    )


def _as_lengths(values: Any, where: str) -> np.ndarray:
    try:
        arr = np.asarray(values if isinstance(values, np.ndarray) else list(values),
                         dtype=np.float64)
    except (TypeError, ValueError):
        raise TunerError(f"Report context {where} must be a list of token counts.") from None
    if arr.ndim != 1:
        raise TunerError(f"Report context {where} must be a flat list of token counts.")
    return arr[np.isfinite(arr)]


def fmt_usd_mtok(x: Any) -> str:
    """$ per million tokens, rounded as the terminal's "$/1M tok" column rounds it
    (tuner.core.units.fmt_usd: four decimals below $1): one figure, one rounding ($15.45
    there must not read $15.5 here)."""
    return fmt_usd(x)


def fmt_usd_column(values: Any) -> list[str]:
    """A table column of $ figures at one number of decimals: four for all where any is below
    $1 (fmt_usd's cents), else fmt_usd's two. "$1.05" over "$0.1993" reads as two roundings;
    "$1.0512" over "$0.1993" is the same figure as a sentence's "$1.05", with more digits. The
    terminal's tables (tuner.cli.search) format their $ columns with this too."""
    vals = [as_finite(v) for v in values]
    small = any(v is not None and abs(v) < 1 for v in vals)
    return [fmt_usd(v) if v is None or not small else f"${v:,.4f}" for v in vals]


def fmt_sig(x: Any, digits: int = 3) -> str:
    """A ratio such as QPS per $/h with `digits` significant figures: two decimals would round
    0.0155 to 0.02 beside a 0.0079 (fmt_float's small-value branch), a 29 % change."""
    v = as_finite(x)
    if v is None:
        return "—"
    return f"{v:,.0f}" if abs(v) >= 10 ** digits else f"{v:,.{digits}g}"


def gain_text(t: TrialRecord) -> str:
    """'1.61x faster, 38 % cheaper' than vLLM's defaults on the same GPUs ('—': not run)."""
    from tuner.search.baseline import describe_gain

    if t.engine_defaults:  # the plan is the defaults it would be compared with
        return "same plan"
    if t.baseline is None:
        return "—"
    return re.sub(r" (than|as) \w+'s defaults$", "", describe_gain(t.baseline))


def _row(t: TrialRecord, pick: str) -> dict:
    m = t.metrics or Metrics()
    ms = as_finite(m.makespan_s)
    peak = as_finite(m.peak_kv_fraction)
    return dict(
        gpu=t.gpu, pick=pick, number=t.number, tag=trial_tag(t),
        summary=config_summary(t.config),
        makespan=fmt_duration(ms), cost=fmt_usd(m.cost_usd),
        usd_per_1k=fmt_usd(m.usd_per_1k_requests), qps=fmt_float(m.qps),
        usd_per_mtok=fmt_usd_mtok(m.cost_per_million_tokens()), vs_defaults=gain_text(t),
        qps_per_usd=fmt_sig(m.qps_per_usd_per_h),
        tok_s=fmt_int(m.throughput_tok_s), preemptions=fmt_int(m.preemptions),
        peak_kv=fmt_pct(peak), limit=fmt_pct(m.schedule_limit()),
    )


def _winner_card(trials: dict[int, TrialRecord], n: int | None) -> dict | None:
    """The headline's line for one overall winner."""
    if n is None:
        return None
    t = trials[n]
    count = t.config.num_gpus
    return dict(gpu=t.gpu, number=n, ref=trial_ref(t),
                label=f"{count} × {t.gpu}" if count > 1 else t.gpu,
                makespan=fmt_duration(t.makespan_s), cost=fmt_usd(t.cost_usd),
                usd_per_mtok=fmt_usd_mtok((t.metrics or Metrics()).cost_per_million_tokens()),
                vs_defaults=gain_text(t), summary=config_summary(t.config),
                engine="SGLang" if t.config.engine == "sglang" else "vLLM")


def _per_gpu_lines(ctx: ReportContext, trials: dict[int, TrialRecord], gpu_names: list[str],
                   colors: dict[str, str]) -> list[dict]:
    """Each GPU's best makespan and cost, or why none of its trials was feasible."""
    infeasible = [t for t in trials.values() if not t.feasible]
    lines = []
    for name in gpu_names:
        picks = ctx.best_per_gpu.get(name)
        if picks:
            f, c = trials[picks.fastest], trials[picks.cheapest]
            lines.append(dict(
                gpu=name, color=colors[name], feasible=True,
                fastest=f"{fmt_duration(f.makespan_s)}, {fmt_usd(f.cost_usd)}",
                cheapest=f"{fmt_usd(c.cost_usd)} in {fmt_duration(c.makespan_s)}",
                same=picks.fastest == picks.cheapest))
        else:
            bad = [t for t in infeasible if t.gpu == name]
            reasons = Counter((t.reason or "no reason given") for t in bad)
            top = reasons.most_common(1)[0][0] if reasons else "no trial ran on it"
            lines.append(dict(gpu=name, color=colors[name], feasible=False, reason=top,
                              count=len(bad)))
    return lines


def _best_table(ctx: ReportContext, trials: dict[int, TrialRecord], gpu_names: list[str],
                colors: dict[str, str]) -> list[dict]:
    """'Best config per GPU': the fastest and the cheapest of each GPU (one row when the same)."""
    table = []
    for name in gpu_names:
        picks = ctx.best_per_gpu.get(name)
        if not picks:
            continue
        if picks.fastest == picks.cheapest:
            table.append(_row(trials[picks.fastest], "fastest & cheapest"))
        else:
            table.append(_row(trials[picks.fastest], "fastest"))
            table.append(_row(trials[picks.cheapest], "cheapest"))
    for key, figure in (("cost", "cost_usd"), ("usd_per_1k", "usd_per_1k_requests"),
                        ("usd_per_mtok", None)):  # each $ column at one number of decimals
        ms = [trials[r["number"]].metrics or Metrics() for r in table]
        cells = fmt_usd_column([m.cost_per_million_tokens() if figure is None
                                else getattr(m, figure) for m in ms])
        for r, cell in zip(table, cells, strict=True):
            r[key] = cell
    for r in table:
        r["overall"] = [k for k in GOALS if ctx.winners.of(k) == r["number"]]
        r["color"] = colors.get(r["gpu"], PALETTE[-1])
    return table


def _sglang_page_tokens(trial: TrialRecord) -> int | None:
    """The KV page an SGLang plan ran (its memory plan's kv_page_tokens, as
    tuner.core.sglang.plan_memory_sglang rounded the pool: 64 on B200, GB200, B300, else mostly
    1; its config's block_size is held at 1), or None: a vLLM plan, or a plan stored before
    the page was recorded (no page claimed)."""
    cfg, mem = trial.config, trial.memory
    if cfg is None or cfg.engine != "sglang" or mem is None:
        return None
    return mem.kv_page_tokens


def _formatted_memory_rows(ctx: ReportContext, trials: dict[int, TrialRecord]) -> list[dict]:
    rows = _memory_rows(ctx, trials)
    for r in rows:
        page = _sglang_page_tokens(trials[r["number"]])
        labels = {k: label for k, label, _ in r["items"]}
        # each part's cell under memory_columns' headers ("—": a part this plan has not); its
        # own label beside it where the column's differs (another engine or offload scheme)
        cells = {k: fmt_gib(b) for k, _, b in r["items"]}
        cells["state"] = (f"{fmt_gib(r['state'])} ({fmt_int(r['state_slots'])} states + 1)"
                          if r["state_slots"] else "—")
        r.update(total_s=fmt_gib(r["total"]), usable_s=fmt_gib(r["usable"]),
                 weights_s=fmt_gib(r["weights"]), activations_s=fmt_gib(r["activations"]),
                 kv_s=fmt_gib(r["kv"]), free_s=fmt_gib(r["free"]), cells=cells,
                 cell_labels=labels,
                 kv_tokens_s=fmt_int(r["kv_capacity_tokens"])
                 + (f" (page {page})" if page else ""),
                 state_s=(f"{fmt_gib(r['state'])} ({fmt_int(r['state_slots'])} states + 1)"
                          if r["state_slots"] else "—"),
                 max_conc_s=max_concurrent_text(r["max_concurrent_requests"],
                                                r["max_running_by_slots"]))
    return rows


def max_concurrent_text(by_kv: float | None, by_slots: int) -> str:
    """The concurrent requests a plan runs: the KV pool's figure at the mean length, or, for a
    hybrid under SGLang whose Mamba state slots allow fewer, that cap and what sets it (SGLang
    caps --max-running-requests at the slots: kv_cache_configurator.py resolve_max_num_reqs)."""
    if by_slots and (by_kv is None or by_slots < by_kv):
        return f"{fmt_int(by_slots)} (Mamba state-slot cap; the KV pool: {fmt_int(by_kv)})"
    return fmt_int(by_kv)


def _figures(ctx: ReportContext, trials: dict[int, TrialRecord], colors: dict[str, str],
             rows: dict) -> dict[str, str | None]:
    """Every figure as embeddable JSON (None: the figure has nothing to show)."""
    return {
        "pareto": fig_json(figures.pareto_figure(ctx, trials, colors)),
        "deadline": fig_json(figures.deadline_figure(trials, colors, ctx.deadline_s)),
        "limit": fig_json(figures.limit_figure(rows["limit"])),
        "timeline": fig_json(figures.timeline_figure(rows["timelines"], colors)),
        "importance": fig_json(figures.importance_figure(ctx.importances or {})),
        "slices": fig_json(figures.slices_figure(rows["slices"], colors)),
        "memory": fig_json(figures.memory_figure(rows["memory"])),
        "workload": fig_json(figures.workload_figure(rows["prompt"], rows["output"])),
        "validation": fig_json(figures.validation_figure(rows["validation"], colors)),
    }


def _about(ctx: ReportContext, prompt: np.ndarray, output: np.ndarray,
           colors: dict[str, str]) -> dict:
    """The workload, model and GPU sections."""
    wl, model = ctx.workload, ctx.model
    per_engine = cost_models_by_engine(ctx.trials)
    return dict(
        workload=dict(source=wl.source, requests=fmt_int(wl.requests), tokenizer=wl.tokenizer,
                      output_source=wl.output_source, prompt=_lengths_stats(prompt),
                      output=_lengths_stats(output)),
        model=dict(name=model.name, params=fmt_params(model.num_params),
                   hf_id=model.hf_id or "", checkpoint=model.checkpoint or model.hf_id or ""),
        gpus=[_gpu_view(n, g, colors[n], per_engine.get(n, {})) for n, g in ctx.gpus.items()])


def _fleet_view(ctx: ReportContext, trials: dict[int, TrialRecord],
                colors: dict[str, str]) -> list[dict]:
    """The fleet view (issue #27): per mix its parts (GPUs, share of the requests, finish
    time, $) and what each of its GPU types alone does at best (the study's fastest plan on
    that type, within its cap)."""
    out = []
    singles = [t for t in trials.values() if t.feasible and t.metrics is not None
               and t.metrics.makespan_s is not None and not t.study_only]
    for f in ctx.fleets or []:
        n = sum(p["requests"] for p in f["parts"]) or 1
        parts = [{"gpu": p["gpu"], "color": colors.get(p["gpu"], "#888"),
                  "gpus": f"{p['count']} ({p['tp']} x {p['dp']})",
                  "requests": f"{p['requests']:,} ({100 * p['requests'] / n:.0f} %)",
                  "finish": fmt_duration(p["makespan_s"]), "cost": cost}
                 for p, cost in zip(f["parts"], fmt_usd_column(p["cost_usd"] for p in f["parts"]),
                                    strict=True)]
        alone = []
        for g in dict.fromkeys(p["gpu"] for p in f["parts"]):
            best = min((t for t in singles if t.gpu == g), default=None,
                       key=lambda t: t.metrics.makespan_s)
            if best is not None:
                alone.append(f"{g} alone at best {fmt_duration(best.metrics.makespan_s)} on "
                             f"{best.config.num_gpus} GPU(s), {fmt_usd(best.metrics.cost_usd)}")
        out.append({"description": f["description"], "makespan": fmt_duration(f["makespan_s"]),
                    "cost": fmt_usd(f["cost_usd"]),
                    "spread": fmt_pct(f.get("finish_spread"), 1),
                    "meets": f.get("meets_constraints", True), "parts": parts,
                    "alone": "; ".join(alone)})
    return out


def view(ctx: ReportContext) -> dict:
    """Everything the template shows."""
    trials = ctx.by_number
    gpu_names = list(dict.fromkeys([*ctx.gpus, *ctx.best_per_gpu,
                                    *(t.gpu for t in trials.values())]))
    colors = gpu_colors(gpu_names)
    fastest = _winner_card(trials, ctx.winners.fastest)
    cheapest = _winner_card(trials, ctx.winners.cheapest)
    infeasible = [t for t in trials.values() if not t.feasible]
    # the winners' timelines, each with its trial's tag ("vLLM's defaults": no trial number)
    timelines = [dict(t, tag=trial_tag(trials[t["trial"]])) if t.get("trial") in trials else t
                 for t in ctx.timelines or []]
    rows = dict(limit=_limit_rows(ctx, trials, colors), slices=_slices(trials),
                timelines=timelines,
                memory=_formatted_memory_rows(ctx, trials), validation=_validation_rows(ctx),
                prompt=_as_lengths(ctx.workload.prompt_tokens, "workload.prompt_tokens"),
                output=_as_lengths(ctx.workload.output_tokens, "workload.output_tokens"))
    val_errors = [abs(r["error"]) for r in rows["validation"] if r["error"] is not None]
    return dict(
        title=ctx.title, question=ctx.question, generated_at=ctx.generated_at,
        tool_version=ctx.tool_version, study=str(ctx.study or ""),
        export_formats="|".join(EXPORTERS),  # every format `tuner export` writes
        fastest=fastest, cheapest=cheapest,
        same_winner=fastest is not None and cheapest is not None
        and fastest["number"] == cheapest["number"],
        fastest_limit=next((r for r in rows["limit"]
                            if fastest and r["number"] == fastest["number"]), None),
        per_gpu_lines=_per_gpu_lines(ctx, trials, gpu_names, colors),
        table=_best_table(ctx, trials, gpu_names, colors), mem_rows=rows["memory"],
        mem_cols=figures.memory_columns(rows["memory"]),
        fleets=_fleet_view(ctx, trials, colors),
        limit_rows=rows["limit"], timelines=_timeline_view(timelines),
        importances=_importance_view(ctx.importances),
        slice_knobs=list(rows["slices"]), validation=rows["validation"],
        validation_mean_error=fmt_pct(sum(val_errors) / len(val_errors)) if val_errors else "—",
        validation_calibrated=any(r["calibrated"] != "—" for r in rows["validation"]),
        **_about(ctx, rows["prompt"], rows["output"], colors),
        n_trials=len(trials), n_feasible=len(trials) - len(infeasible),
        n_infeasible=len(infeasible), n_pareto=len(ctx.pareto),
        **_front_counts(ctx, trials),
        study_arg=shlex.quote(str(ctx.study or "")),
        trial_range=_trial_range(trials),
        reasons=Counter((t.reason or "no reason given") for t in infeasible).most_common(),
        fastest_yaml=ctx.exports.fastest_engine_config,
        cheapest_yaml=ctx.exports.cheapest_engine_config,
        export_blocks=_export_view(ctx),
        notes=[str(n) for n in ctx.notes or []],
        verdicts=[str(v) for v in ctx.verdicts or []],
        figures=_figures(ctx, trials, colors, rows),
        plotly_js=plotly.offline.get_plotlyjs(),
    )


def _front_counts(ctx: ReportContext, trials: dict[int, TrialRecord]) -> dict:
    """What the makespan-vs-cost figure marks: the single-type Pareto points no mix of GPU
    types beats and the mixes (the front `tuner search` prints)."""
    singles, fleets = figures.front_with_mixes(ctx, trials)
    return dict(n_front_singles=len(singles), n_front_mixes=len(fleets))


def _trial_range(trials: dict[int, TrialRecord]) -> str:
    """'#0–#41', and the engines' defaults outside the space beside them (numbered -1, -2, ...:
    no trial, so not in the range)."""
    numbers = [n for n, t in trials.items() if trial_tag(t).startswith("#")]
    others = list(dict.fromkeys(trial_tag(t) for t in trials.values()
                                if not trial_tag(t).startswith("#")))
    if not numbers:
        return " and ".join(others) or "—"
    lo, hi = min(numbers), max(numbers)
    span = f"#{lo}" if lo == hi else f"#{lo}–#{hi}"
    return span + "".join(f", and {o} outside the space" for o in others)


PROVENANCE_LABELS = {  # Provenance.kind -> how the report names that source
    "measured": "measured (profiled)",
    "tables": "measured (public kernel tables)",
    "calibrated": "calibrated on real runs",
    "transferred": "transferred from a measured GPU by spec-sheet ratios (not measured)",
    "roofline": "spec-derived (not measured)",
}


def provenance_label(provenance: Provenance, measured: bool | None = None) -> str:
    """How the report names a cost model's source; ``measured`` (a context's override) wins."""
    if measured is not None:
        return PROVENANCE_LABELS["measured" if measured else "roofline"]
    label = PROVENANCE_LABELS[provenance.kind]
    if provenance.error_pct is not None:  # fidelity suite on this GPU, else the transfer rule's
        label += f"; checked error {provenance.error_pct:.1f} %"
    return label


def _gpu_view(name: str, g: GpuInfo, color: str,
              per_engine: dict[str, list[str]] | None = None) -> dict:
    """One row of the provenance table: the cost model of the GPU's best plans, fastest and
    cheapest, naming their trials (tuner.search.records.cost_models_by_engine, as the
    terminal's cost-model lines), per engine where the study priced both on the GPU (their
    kernel tables and engine overheads differ; SGLang's overhead is an estimate). A GPU
    without a feasible trial: its cost model as the context gives it."""
    from tuner.core.config import engine_name

    measured = g.measured if g.measured is not None else g.cost_model.is_measured
    cv = as_finite(g.cv_error)
    per_engine = per_engine or {}
    lines = [f"{engine_name(e)}, {text}" if len(per_engine) > 1 else text
             for e, texts in per_engine.items() for text in texts] or [str(g.cost_model) or "—"]
    return dict(name=name, color=color, memory=fmt_float(g.memory_gib, 0),
                price=fmt_usd_per_h(g.price_usd_per_h), source=g.price_source or "—",
                date=g.price_date or "—", cost_model=str(g.cost_model) or "—", cost_models=lines,
                kind=provenance_label(g.cost_model, g.measured), measured=bool(measured),
                cv=f"{100 * cv:.1f} %" if cv is not None else "—",
                cv_metric=g.cv_metric or "")


def _timeline_view(timelines: list[dict]) -> list[dict]:
    out = []
    for t in timelines:
        entry = dict(label=role_label(t), roles=t.get("roles") or [], trial=t["trial"],
                     error=t.get("error"), note="", resim="", study="")
        ms, study_ms = as_finite(t.get("makespan_s")), as_finite(t.get("study_makespan_s"))
        if ms is not None and study_ms:
            diff = (ms - study_ms) / study_ms
            entry["resim"] = fmt_duration(ms)
            entry["study"] = fmt_duration(study_ms)
            if abs(diff) > 0.005:
                entry["note"] = (f"re-simulated makespan {fmt_duration(ms)} differs from the "
                                 f"study's {fmt_duration(study_ms)} by {100 * diff:+.1f} % (the "
                                 "cost model or simulator changed since the search)")
        if (t.get("dp") or 1) > 1:
            entry["note"] = (entry["note"] + "; " if entry["note"] else "") + \
                f"replica 1 of {t['dp']} shown"
        out.append(entry)
    return out


def _importance_view(importances: Any) -> dict:
    """{'rows': [{knob, makespan, cost}], 'skipped': [str], 'n_trials', 'method'}."""
    if not isinstance(importances, dict) or not importances:
        return dict(rows=[], skipped=[], n_trials=None, method="", absent=True)
    objs = (("makespan_s", "makespan"), ("cost_usd", "job cost"))
    skipped = [f"{title}: {importances[o]['skipped']}" for o, title in objs
               if isinstance(importances.get(o), dict) and importances[o].get("skipped")]
    done = [importances[o] for o, _ in objs
            if isinstance(importances.get(o), dict) and importances[o].get("importances")]
    knobs: list[str] = []
    for d in done:
        knobs += [k for k in d["importances"] if k not in knobs]
    rows = []
    for k in knobs:
        cells = []
        for o, _ in objs:
            v = ((importances.get(o) or {}).get("importances") or {}).get(k)
            cells.append(fmt_pct(v) if v is not None else "—")
        rows.append(dict(knob=k, makespan=cells[0], cost=cells[1]))
    n = next((d.get("n_trials") for d in importances.values() if isinstance(d, dict)), None)
    method = next((d.get("method") for d in done if d.get("method")), "")
    return dict(rows=rows, skipped=skipped, n_trials=n, method=method, absent=False)


def _format_info(key: str) -> tuple[str, str]:
    """(name, how to run it) of an export format, as the format states them
    (tuner.exports.EXPORTERS)."""
    fmt = EXPORTERS.get(key)
    return (fmt.title or key, fmt.how) if fmt is not None else (key, "")


def fmts_primary(snip: dict) -> str:
    """The format a winner's export block opens with: vLLM's YAML, else (an SGLang-simulated
    plan, which has no vLLM formats) SGLang's launch command."""
    return "vllm" if "vllm" in (snip.get("formats") or {}) else "sglang"


def _ref_of(ctx: ReportContext, num: int | None) -> str:
    """'trial #12' (or "vLLM's defaults") of a trial number of the context."""
    t = ctx.by_number.get(num) if num is not None else None
    return trial_ref(t) if t is not None else f"trial #{num}"


def _export_view(ctx: ReportContext) -> list[dict]:
    """[{'title', 'trial', 'formats': [{'key', 'name', 'how', 'text', 'id', 'open'}],
    'skipped': [{'name', 'why'}]}]."""
    snippets = ctx.export_snippets or {}
    blocks = []
    if snippets:
        same = (snippets.get("fastest") or {}).get("trial") == \
            (snippets.get("cheapest") or {}).get("trial")
        for which in ("fastest", "cheapest"):
            snip = snippets.get(which)
            if not snip or (same and which == "cheapest"):
                continue
            fmts = []
            for key, text in (snip.get("formats") or {}).items():
                name, how = _format_info(key)
                fmts.append(dict(key=key, name=name, how=how, text=str(text),
                                 id=f"export-{which}-{re.sub(r'[^a-z0-9]+', '-', key)}",
                                 open=key == fmts_primary(snip)))
            title = "Fastest and cheapest" if same else which.capitalize()
            # the formats not written for this plan, and why (tuner.exports.export_refusal)
            skipped = [dict(name=_format_info(key)[0], why=why)
                       for key, why in (snip.get("skipped") or {}).items()]
            num = snip.get("trial")
            blocks.append(dict(title=title, trial=num, ref=_ref_of(ctx, num), formats=fmts,
                               skipped=skipped))
        return blocks
    yaml = {"fastest": ctx.exports.fastest_engine_config, "cheapest": ctx.exports.cheapest_engine_config}
    same = yaml["fastest"] == yaml["cheapest"]
    for which in ("fastest", "cheapest"):
        if same and which == "cheapest":
            continue
        name, how = _format_info("vllm")
        blocks.append(dict(
            title="Fastest and cheapest" if same else which.capitalize(),
            trial=ctx.winners.of(which), ref=_ref_of(ctx, ctx.winners.of(which)),
            formats=[dict(key="vllm", name=name, how=how, text=yaml[which],
                          id=f"yaml-{which}", open=True)], skipped=[]))
    return blocks

