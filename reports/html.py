"""Self-contained HTML cost report of one search.

``render_report(context, out_path) -> Path`` writes ONE HTML file that opens offline: plotly.js
is inlined, figures are embedded as JSON, nothing is fetched from the network. The page reads well
in light and dark mode (``prefers-color-scheme``) and in print. The file is written atomically (temp
file in the same folder + ``os.replace``), so a failure never leaves a half-written report.

Context schema (what the search passes; ``render_report`` raises ``TunerError`` naming the first
missing or malformed key)::

    {
      "title": str, "question": str, "generated_at": str (ISO 8601), "tool_version": str,
      "workload": {"source": str, "requests": int, "tokenizer": str, "output_source": str,
                   "prompt_tokens": list[int], "output_tokens": list[int]},
      "model": {"name": str, "num_params": int, "hf_id": str (optional)},
      "gpus": {NAME: {"price_usd_per_h": float, "price_source": str, "price_date": str,
                      "memory_gib": float, "cost_model": str}},
      "trials": [{"number": int, "config": ServingConfig.to_dict(), "feasible": bool,
                  "reason": str (why infeasible; optional),
                  "metrics": {"makespan_s", "cost_usd", "usd_per_1k_requests", "qps",
                              "qps_per_usd_per_h", "throughput_tok_s", "preemptions",
                              "peak_kv_fraction", "kv_capacity_tokens",
                              "max_concurrent_requests", "lower_bound_s"} | None,
                  "memory": {"gpu_memory_bytes", "usable_bytes", "weight_bytes",
                             "activation_bytes", "kv_bytes", "kv_capacity_tokens",
                             "max_concurrent_requests"} | None}],
      "pareto": [trial numbers on the makespan-vs-$ front, sorted by makespan],
      "winners": {"fastest": trial number | None, "cheapest": trial number | None},
      "best_per_gpu": {GPU NAME: {"fastest": trial number, "cheapest": trial number}},
      "exports": {"fastest_vllm_yaml": str, "cheapest_vllm_yaml": str},
      "notes": [str] (optional),
      "verdicts": [str] (optional; answers shown under the headline, e.g. the offload verdict)
    }

Optional keys (``reports.context.report_extras`` fills the first four; every section they
feed is left out, or says why it is empty, when a key is absent)::

      "study": str                       # the Optuna study's name, shown with every figure
      "timelines": [{"trial": int, "roles": [str], "gpu": str, "study_makespan_s": float,
                     "makespan_s": float, "dp": int, "time_s": [float] (start of each
                     step or bin), "end_s": float, "running": [float], "tokens": [float],
                     "kv_fraction": [float], "preemptions": [int]}
                    | {"trial", "roles", "gpu", "error": str}]
      "importances": {"makespan_s" | "cost_usd": {"importances": {knob: share}, "n_trials": int,
                      "method": str} | {"skipped": str}}
      "export_snippets": {"fastest" | "cheapest": {"trial": int,
                          "formats": {"vllm" | "vllm-run-batch" | "sglang" | "json": str}}}
      "validation": [{"config": ServingConfig.to_dict(), "predicted_s": float,
                      "measured_s": float, "runner": str, "trial": int (optional),
                      "note": str (optional)}]
      gpus.NAME.measured: bool           # default: derived from cost_model ("not measured")
      gpus.NAME.cv_error: float          # predictor cross-validated relative error (0.08 = 8 %)
      gpus.NAME.cv_metric: str           # what cv_error is, e.g. "MAPE, 5-fold"

Feasible trials must carry ``metrics`` with at least ``makespan_s`` and ``cost_usd``; other
metric keys may be absent or None (shown as "—"). ``memory`` figures are per GPU (one device of
the replica). Winners may be None when no trial is feasible; the report then says so.
Sensitivity slices (best makespan per value of each knob) come from ``trials`` alone.
"""

from __future__ import annotations

import html
import json
import math
import re
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import jinja2
import numpy as np
import plotly.graph_objects as go
import plotly.offline
from plotly.subplots import make_subplots

from tuner.core.errors import TunerError
from tuner.core.io import write_atomic

GIB = 1024**3

# Mid-luminance palette (Tableau 10): legible on white and on near-black backgrounds.
PALETTE = (
    "#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f",
    "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac",
)
MEMORY_COLORS = {
    "weights": "#4e79a7",
    "activations": "#f28e2b",
    "KV cache": "#59a14f",
    "free / reserved": "rgba(128,128,128,0.35)",
}
HOVER_FIELDS = ("chunk_size", "max_running", "weight_bits", "kv_bits", "tp", "scheduler")

_REQUIRED: dict[str, type | tuple[type, ...]] = {
    "title": str,
    "question": str,
    "generated_at": str,
    "tool_version": str,
    "workload": dict,
    "model": dict,
    "gpus": dict,
    "trials": list,
    "pareto": list,
    "winners": dict,
    "best_per_gpu": dict,
    "exports": dict,
}
_REQUIRED_NESTED = {
    "workload": ("source", "requests", "tokenizer", "output_source", "prompt_tokens",
                 "output_tokens"),
    "model": ("name", "num_params"),
    "winners": ("fastest", "cheapest"),
    "exports": ("fastest_vllm_yaml", "cheapest_vllm_yaml"),
}
_GPU_KEYS = ("price_usd_per_h", "price_source", "price_date", "memory_gib", "cost_model")


# ---------------------------------------------------------------------------------------------
# Validation


def _missing(where: str) -> TunerError:
    return TunerError(f"Report context is missing {where!r}; the search must pass it (see "
                      "reports.html module docstring for the schema).")


def _validate(context: Any) -> dict[int, dict]:
    """Check the schema; return trials by number."""
    if not isinstance(context, dict):
        raise TunerError("Report context must be a dict.")
    for key, typ in _REQUIRED.items():
        if key not in context:
            raise _missing(key)
        if not isinstance(context[key], typ):
            raise TunerError(f"Report context key {key!r} must be a {typ.__name__}, got "
                             f"{type(context[key]).__name__}.")
    for key, subkeys in _REQUIRED_NESTED.items():
        for sub in subkeys:
            if sub not in context[key]:
                raise _missing(f"{key}.{sub}")
    for name, g in context["gpus"].items():
        if not isinstance(g, dict):
            raise TunerError(f"Report context gpus.{name} must be a dict.")
        for sub in _GPU_KEYS:
            if sub not in g:
                raise _missing(f"gpus.{name}.{sub}")
    trials: dict[int, dict] = {}
    for i, t in enumerate(context["trials"]):
        if not isinstance(t, dict):
            raise TunerError(f"Report context trials[{i}] must be a dict.")
        for sub in ("number", "config", "feasible"):
            if sub not in t:
                raise _missing(f"trials[{i}].{sub}")
        if not isinstance(t["config"], dict) or "gpu" not in t["config"]:
            raise _missing(f"trials[{i}].config.gpu")
        if t["feasible"]:
            m = t.get("metrics") or {}
            for sub in ("makespan_s", "cost_usd"):
                if _num(m.get(sub)) is None:
                    raise TunerError(f"Report context trials[{i}] is feasible but has no "
                                     f"metrics.{sub}.")
        trials[int(t["number"])] = t

    def check_ref(num: Any, where: str, allow_none: bool = False) -> None:
        if num is None and allow_none:
            return
        if num not in trials:
            raise TunerError(f"Report context {where} refers to trial {num!r}, which is not "
                             "in trials.")
        if not trials[num]["feasible"]:
            raise TunerError(f"Report context {where} refers to infeasible trial {num}.")

    for k in ("fastest", "cheapest"):
        check_ref(context["winners"][k], f"winners.{k}", allow_none=True)
    for i, num in enumerate(context["pareto"]):
        check_ref(num, f"pareto[{i}]")
    for name, picks in context["best_per_gpu"].items():
        if not isinstance(picks, dict):
            raise TunerError(f"Report context best_per_gpu.{name} must be a dict.")
        for k in ("fastest", "cheapest"):
            if k not in picks:
                raise _missing(f"best_per_gpu.{name}.{k}")
            check_ref(picks[k], f"best_per_gpu.{name}.{k}")
    _validate_optional(context)
    return trials


def _validate_optional(context: dict) -> None:
    """Types of the optional keys (a malformed one is an error, not a silently empty section)."""
    for key, typ in (("timelines", list), ("importances", dict), ("export_snippets", dict),
                     ("validation", list), ("notes", list)):
        if context.get(key) is not None and not isinstance(context[key], typ):
            raise TunerError(f"Report context key {key!r} must be a {typ.__name__}, got "
                             f"{type(context[key]).__name__}.")
    for i, tl in enumerate(context.get("timelines") or []):
        if not isinstance(tl, dict) or "trial" not in tl:
            raise _missing(f"timelines[{i}].trial")
        if "error" not in tl:
            for sub in ("time_s", "running", "kv_fraction", "preemptions"):
                if not isinstance(tl.get(sub), list):
                    raise _missing(f"timelines[{i}].{sub}")
    for i, v in enumerate(context.get("validation") or []):
        if not isinstance(v, dict):
            raise TunerError(f"Report context validation[{i}] must be a dict.")
        for sub in ("predicted_s", "measured_s"):
            if _num(v.get(sub)) is None:
                raise TunerError(f"Report context validation[{i}].{sub} must be a number.")
        if not isinstance(v.get("config"), dict):
            raise _missing(f"validation[{i}].config")


# ---------------------------------------------------------------------------------------------
# Formatting


def _num(x: Any) -> float | None:
    if x is None or isinstance(x, bool):
        return None
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def duration_unit(seconds: float) -> tuple[str, float]:
    """(unit, divisor) by magnitude: s below 90 s, min below 90 min, h below 72 h, else days."""
    if seconds < 90:
        return "s", 1.0
    if seconds < 90 * 60:
        return "min", 60.0
    if seconds < 72 * 3600:
        return "h", 3600.0
    return "d", 86400.0


def fmt_duration(seconds: Any) -> str:
    s = _num(seconds)
    if s is None:
        return "—"
    unit, div = duration_unit(s)
    v = s / div
    return f"{v:.0f} {unit}" if unit == "s" or v >= 100 else f"{v:.1f} {unit}"


def fmt_usd(x: Any) -> str:
    v = _num(x)
    if v is None:
        return "—"
    if 0 < abs(v) < 0.01:
        return f"${v:.4f}"
    return f"${v:,.2f}"


def fmt_int(x: Any) -> str:
    v = _num(x)
    return "—" if v is None else f"{round(v):,}"


def fmt_float(x: Any, digits: int = 2) -> str:
    v = _num(x)
    if v is None:
        return "—"
    if v != 0 and abs(v) < 10 ** -digits:
        return f"{v:.2g}"
    return f"{v:,.{digits}f}"


def fmt_pct(x: Any, digits: int = 0) -> str:
    v = _num(x)
    return "—" if v is None else f"{100 * v:.{digits}f} %"


def fmt_gib(x: Any) -> str:
    v = _num(x)
    return "—" if v is None else f"{v / GIB:.1f} GiB"


def fmt_params(n: Any) -> str:
    v = _num(n)
    if v is None:
        return "—"
    return f"{v / 1e9:.2f} B" if v >= 1e9 else f"{v / 1e6:.0f} M"


def bits_summary(cfg: dict) -> str:
    wb, kb = cfg.get("weight_bits", 16), cfg.get("kv_bits", 16)
    return f"{wb}-bit" if wb == kb else f"{wb}-bit weights, {kb}-bit KV"


def config_summary(cfg: dict) -> str:
    """'tp1, chunk 2048, R_max 256, 16-bit' (+ the non-default knobs)."""
    parts = [f"tp{cfg.get('tp', 1)}"]
    if cfg.get("dp", 1) > 1:
        parts.append(f"dp{cfg['dp']}")
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
    return ", ".join(parts)


# ---------------------------------------------------------------------------------------------
# Figures (user strings escaped: plotly renders labels as pseudo-HTML)


def _esc(s: Any) -> str:
    return html.escape(str(s), quote=False)


def _base_layout(**kw: Any) -> dict:
    layout = dict(
        template="none",
        paper_bgcolor="rgba(0,0,0,0)",
        plot_bgcolor="rgba(0,0,0,0)",
        font=dict(family="system-ui, -apple-system, Segoe UI, Roboto, sans-serif", size=13,
                  color="#888888"),
        margin=dict(l=70, r=20, t=30, b=60),
        legend=dict(bgcolor="rgba(0,0,0,0)"),
        hoverlabel=dict(font=dict(family="ui-monospace, SFMono-Regular, Menlo, monospace")),
    )
    layout.update(kw)
    return layout


def _axis(title: str, **kw: Any) -> dict:
    return dict(title=dict(text=title), gridcolor="rgba(128,128,128,0.25)",
                zerolinecolor="rgba(128,128,128,0.4)", linecolor="rgba(128,128,128,0.6)",
                showline=True, automargin=True, **kw)


def _gpu_colors(names: Iterable[str]) -> dict[str, str]:
    return {n: PALETTE[i % len(PALETTE)] for i, n in enumerate(names)}


def _pareto_figure(ctx: dict, trials: dict[int, dict], colors: dict[str, str]) -> go.Figure | None:
    feasible = [t for t in trials.values() if t["feasible"]]
    if not feasible:
        return None
    unit, div = duration_unit(max(_num(t["metrics"]["makespan_s"]) or 0 for t in feasible))
    pareto = set(ctx["pareto"])
    winners = ctx["winners"]
    fig = go.Figure()
    hover = "<br>".join(
        ["<b>%{customdata[0]}</b> trial #%{customdata[1]}",
         f"makespan %{{x:.3g}} {unit}, job $%{{y:.2f}}"]
        + [f"{f} %{{customdata[{i + 2}]}}" for i, f in enumerate(HOVER_FIELDS)]
    ) + "<extra></extra>"

    def points(ts: list[dict]) -> dict:
        return dict(
            x=[t["metrics"]["makespan_s"] / div for t in ts],
            y=[t["metrics"]["cost_usd"] for t in ts],
            customdata=[[_esc(t["config"]["gpu"]), t["number"]]
                        + [_esc(t["config"].get(f, "")) for f in HOVER_FIELDS] for t in ts],
        )

    gpu_names = list(dict.fromkeys([*colors, *(t["config"]["gpu"] for t in feasible)]))
    for name in gpu_names:
        ts = [t for t in feasible if t["config"]["gpu"] == name]
        if not ts:
            continue
        color = colors.get(name, PALETTE[-1])
        front = [t for t in ts if t["number"] in pareto]
        rest = [t for t in ts if t["number"] not in pareto]
        # Legend-only entry drawn at full strength; the data traces below join its group.
        fig.add_trace(go.Scatter(
            mode="markers", name=_esc(name), legendgroup=name, x=[None], y=[None],
            marker=dict(color=color, size=11), hoverinfo="skip"))
        if rest:
            fig.add_trace(go.Scatter(
                mode="markers", name=_esc(name), legendgroup=name, showlegend=False,
                marker=dict(color=color, size=8, opacity=0.45), hovertemplate=hover,
                **points(rest)))
        if front:
            fig.add_trace(go.Scatter(
                mode="markers", name=_esc(name), legendgroup=name, showlegend=False,
                marker=dict(color=color, size=13, opacity=1.0,
                            line=dict(color="rgba(128,128,128,0.9)", width=1.5)),
                hovertemplate=hover, **points(front)))
    front_all = sorted((trials[n] for n in pareto), key=lambda t: t["metrics"]["makespan_s"])
    if len(front_all) > 1:
        fig.add_trace(go.Scatter(
            mode="lines", name="Pareto front", hoverinfo="skip",
            x=[t["metrics"]["makespan_s"] / div for t in front_all],
            y=[t["metrics"]["cost_usd"] for t in front_all],
            line=dict(color="rgba(128,128,128,0.7)", dash="dot", shape="hv", width=1.5)))
    labels: dict[int, list[str]] = {}
    for k in ("fastest", "cheapest"):
        if winners.get(k) is not None:
            labels.setdefault(winners[k], []).append(k)
    for num, names in labels.items():
        t = trials[num]
        fig.add_annotation(
            x=t["metrics"]["makespan_s"] / div, y=t["metrics"]["cost_usd"],
            text=" & ".join(names), showarrow=True, arrowhead=2, arrowcolor="#888888",
            ax=40 if "cheapest" in names else 30, ay=-35)
    fig.update_layout(**_base_layout(
        xaxis=_axis(f"makespan ({unit})", rangemode="tozero"),
        yaxis=_axis("job cost (USD)", tickprefix="$", tickformat=",.2f", rangemode="tozero"),
        legend=dict(bgcolor="rgba(0,0,0,0)", title=dict(text="GPU")),
        height=480,
    ))
    return fig


def _memory_rows_roles(ctx: dict) -> list[tuple[int, list[str]]]:
    """Distinct winners (overall first, then per GPU) with their roles."""
    picks: dict[int, list[str]] = {}
    for k in ("fastest", "cheapest"):
        n = ctx["winners"].get(k)
        if n is not None:
            picks.setdefault(n, []).append(f"overall {k}")
    for gpu, d in ctx["best_per_gpu"].items():
        for k in ("fastest", "cheapest"):
            picks.setdefault(d[k], []).append(f"{gpu} {k}")
    return list(picks.items())


def _memory_rows(ctx: dict, trials: dict[int, dict]) -> list[dict]:
    """One row per distinct winner (overall winners first, then per GPU) that has a memory plan."""
    rows = []
    for num, roles in _memory_rows_roles(ctx):
        t = trials[num]
        mem = t.get("memory")
        if not mem:
            continue
        total = _num(mem.get("gpu_memory_bytes")) or 0.0
        w = _num(mem.get("weight_bytes")) or 0.0
        a = _num(mem.get("activation_bytes")) or 0.0
        kv = _num(mem.get("kv_bytes")) or 0.0
        rows.append(dict(
            number=num, gpu=t["config"]["gpu"], roles=roles,
            label=f"#{num} {t['config']['gpu']} ({roles[0]})",
            total=total, usable=_num(mem.get("usable_bytes")), weights=w, activations=a, kv=kv,
            free=max(total - w - a - kv, 0.0),
            kv_capacity_tokens=mem.get("kv_capacity_tokens"),
            max_concurrent_requests=mem.get("max_concurrent_requests"),
            summary=config_summary(t["config"]),
        ))
    return rows


def _memory_figure(rows: list[dict]) -> go.Figure | None:
    if not rows:
        return None
    fig = go.Figure()
    labels = [_esc(r["label"]) for r in rows]
    widest = max(r["total"] for r in rows) / GIB or 1.0
    for part, key in (("weights", "weights"), ("activations", "activations"),
                      ("KV cache", "kv"), ("free / reserved", "free")):
        vals = [r[key] / GIB for r in rows]
        fig.add_trace(go.Bar(
            orientation="h", name=part, y=labels, x=vals,
            marker=dict(color=MEMORY_COLORS[part]),
            text=[f"{v:.1f}" if v >= 0.06 * widest else "" for v in vals],
            textposition="inside", insidetextanchor="middle", textangle=0,
            hovertemplate=f"{part}: %{{x:.2f}} GiB<extra>%{{y}}</extra>"))
    fig.update_layout(**_base_layout(
        barmode="stack",
        xaxis=_axis("GiB per GPU", rangemode="tozero"),
        yaxis=dict(autorange="reversed", automargin=True),
        legend=dict(orientation="h", yanchor="bottom", y=1.02, x=0, bgcolor="rgba(0,0,0,0)",
                    traceorder="normal"),
        height=max(180, 90 + 55 * len(rows)),
        margin=dict(l=20, r=20, t=40, b=50),
    ))
    return fig


def _histogram(values: np.ndarray) -> dict:
    n = values.size
    bins = int(min(50, max(5, math.ceil(math.sqrt(n)))))
    counts, edges = np.histogram(values, bins=bins)
    return dict(
        x=((edges[:-1] + edges[1:]) / 2).tolist(), y=counts.tolist(),
        width=np.diff(edges).tolist(),
        customdata=np.stack([np.floor(edges[:-1]), np.floor(edges[1:])], axis=1).tolist(),
    )


def _workload_figure(prompt: np.ndarray, output: np.ndarray) -> go.Figure | None:
    if prompt.size == 0 and output.size == 0:
        return None
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.1,
                        subplot_titles=("prompt tokens", "output tokens"))
    # Not GPU colours (those mean a GPU everywhere else in the report).
    for col, (vals, color) in enumerate(((prompt, "#9c755f"), (output, "#b07aa1")), start=1):
        if vals.size == 0:
            continue
        fig.add_trace(go.Bar(
            showlegend=False, marker=dict(color=color),
            hovertemplate="%{customdata[0]:,}–%{customdata[1]:,} tokens: %{y:,} requests"
                          "<extra></extra>",
            **_histogram(vals)), row=1, col=col)
    fig.update_layout(**_base_layout(height=360, bargap=0.02,
                                     margin=dict(l=70, r=20, t=60, b=60)))
    fig.update_xaxes(**_axis("tokens per request"))
    fig.update_yaxes(**_axis("requests"))
    return fig


def _role_label(entry: dict) -> str:
    roles = entry.get("roles") or []
    return f"#{entry['trial']} {entry.get('gpu', '')}" + (f" ({roles[0]})" if roles else "")


def _timeline_figure(timelines: list[dict], colors: dict[str, str]) -> go.Figure | None:
    """Running requests, KV use and cumulative preemptions over time, one line per winner."""
    series = [t for t in timelines if "error" not in t and t.get("time_s")]
    if not series:
        return None
    def end(t: dict) -> float:
        return float(_num(t.get("end_s")) or t["time_s"][-1])

    unit, div = duration_unit(max(end(t) for t in series))
    fig = make_subplots(rows=3, cols=1, shared_xaxes=True, vertical_spacing=0.08,
                        subplot_titles=("running requests (batch size)", "KV cache in use",
                                        "preemptions so far (cumulative)"))
    seen: Counter = Counter()
    for t in series:
        gpu = t.get("gpu", "")
        color = colors.get(gpu, PALETTE[-1])
        dash = ("solid", "dash", "dot", "dashdot")[seen[gpu] % 4]
        seen[gpu] += 1
        name = _esc(_role_label(t))
        # step-shaped: each value holds from its time to the next; the job ends at end_s
        x = [v / div for v in t["time_s"]] + [end(t) / div]
        tokens = list(t.get("tokens") or [None] * len(t["time_s"])) + [0]
        common = dict(mode="lines", legendgroup=str(t["trial"]), x=x,
                      line=dict(color=color, dash=dash, width=1.8, shape="hv"))
        fig.add_trace(go.Scatter(
            name=name, y=[*t["running"], 0], customdata=tokens,
            hovertemplate=f"{name}<br>t=%{{x:.3g}} {unit}: %{{y:.0f}} running, "
                          "%{customdata:,.0f} tokens/step<extra></extra>", **common),
            row=1, col=1)
        fig.add_trace(go.Scatter(
            name=name, showlegend=False, y=[100.0 * v for v in t["kv_fraction"]] + [0.0],
            hovertemplate=f"{name}<br>t=%{{x:.3g}} {unit}: KV %{{y:.0f}} %<extra></extra>",
            **common), row=2, col=1)
        cum = np.cumsum(np.asarray(t["preemptions"], dtype=np.float64)).tolist()
        cum.append(cum[-1] if cum else 0.0)
        fig.add_trace(go.Scatter(
            name=name, showlegend=False, y=cum,
            hovertemplate=f"{name}<br>t=%{{x:.3g}} {unit}: %{{y:,.0f}} preemptions"
                          "<extra></extra>", **common), row=3, col=1)
    fig.update_layout(**_base_layout(
        height=640, margin=dict(l=70, r=20, t=50, b=60), hovermode="closest",
        legend=dict(orientation="h", yanchor="bottom", y=1.05, x=0, bgcolor="rgba(0,0,0,0)")))
    fig.update_xaxes(**_axis(""))
    fig.update_xaxes(title=dict(text=f"time since the job started ({unit})"), row=3, col=1)
    fig.update_yaxes(**_axis("requests", rangemode="tozero"), row=1, col=1)
    fig.update_yaxes(**_axis("% of KV capacity", range=[0, 105]), row=2, col=1)
    fig.update_yaxes(**_axis("preemptions", rangemode="tozero"), row=3, col=1)
    return fig


def _importance_figure(importances: dict) -> go.Figure | None:
    """fANOVA importance per knob, one panel per objective."""
    panels = [(obj, title, importances.get(obj) or {})
              for obj, title in (("makespan_s", "makespan"), ("cost_usd", "job cost"))]
    panels = [p for p in panels if p[2].get("importances")]
    if not panels:
        return None
    order = list(panels[0][2]["importances"])
    for _, _, d in panels[1:]:
        order += [k for k in d["importances"] if k not in order]
    order = order[::-1]  # largest on top
    fig = make_subplots(rows=1, cols=len(panels), shared_yaxes=True, horizontal_spacing=0.06,
                        subplot_titles=[f"share of {t} variance" for _, t, _ in panels])
    for col, (_, title, d) in enumerate(panels, start=1):
        vals = [100.0 * float(d["importances"].get(k, 0.0)) for k in order]
        fig.add_trace(go.Bar(
            orientation="h", y=[_esc(k) for k in order], x=vals, showlegend=False,
            marker=dict(color=("#76b7b2", "#b07aa1")[col - 1]), text=[f"{v:.0f} %" for v in vals],
            textposition="outside", cliponaxis=False,
            hovertemplate=f"%{{y}}: %{{x:.1f}} % of {title} variance ({d.get('n_trials', '?')} "
                          "trials)<extra></extra>"), row=1, col=col)
        fig.update_xaxes(**_axis("%", range=[0, 115]), row=1, col=col)
    fig.update_yaxes(automargin=True)
    fig.update_layout(**_base_layout(height=max(220, 90 + 34 * len(order)),
                                     margin=dict(l=20, r=30, t=50, b=50), bargap=0.3))
    return fig


def _slice_knobs(feasible: list[dict]) -> list[str]:
    """ServingConfig fields (other than the GPU) that took more than one value."""
    knobs = []
    for key in feasible[0]["config"] if feasible else []:
        if key == "gpu":
            continue
        values = {json.dumps(t["config"].get(key), sort_keys=True) for t in feasible}
        if len(values) > 1:
            knobs.append(key)
    return knobs


def _sort_key(v: Any) -> tuple:
    return (0, float(v), "") if isinstance(v, (int, float)) and not isinstance(v, bool) \
        else (1, 0.0, str(v))


def _slices(trials: dict[int, dict]) -> dict[str, list[dict]]:
    """{knob: [{'value', 'gpu', 'trial', 'makespan_s', 'cost_usd', 'n'}]}: the best makespan for
    each value of each knob, per GPU."""
    feasible = [t for t in trials.values() if t["feasible"]]
    out: dict[str, list[dict]] = {}
    for knob in _slice_knobs(feasible):
        best: dict[tuple, dict] = {}
        count: Counter = Counter()
        for t in feasible:
            key = (json.dumps(t["config"].get(knob), sort_keys=True), t["config"]["gpu"])
            count[key] += 1
            m = t["metrics"]
            cur = best.get(key)
            if cur is None or (m["makespan_s"], m["cost_usd"], t["number"]) < \
                    (cur["makespan_s"], cur["cost_usd"], cur["trial"]):
                best[key] = dict(value=t["config"].get(knob), gpu=t["config"]["gpu"],
                                 trial=t["number"], makespan_s=m["makespan_s"],
                                 cost_usd=m["cost_usd"])
        rows = [dict(r, n=count[k]) for k, r in best.items()]
        rows.sort(key=lambda r: (_sort_key(r["value"]), r["gpu"]))
        out[knob] = rows
    return out


def _slices_figure(slices: dict[str, list[dict]], colors: dict[str, str]) -> go.Figure | None:
    if not slices:
        return None
    knobs = list(slices)
    cols = min(3, len(knobs))
    rows = math.ceil(len(knobs) / cols)
    unit, div = duration_unit(max(r["makespan_s"] for rs in slices.values() for r in rs))
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=[_esc(k) for k in knobs],
                        horizontal_spacing=0.08, vertical_spacing=0.16 if rows > 1 else 0.1)
    legend_done: set[str] = set()
    for i, knob in enumerate(knobs):
        row, col = i // cols + 1, i % cols + 1
        values = sorted({json.dumps(r["value"]) for r in slices[knob]},
                        key=lambda v: _sort_key(json.loads(v)))
        labels = [_esc(json.loads(v)) for v in values]
        for gpu in dict.fromkeys(r["gpu"] for r in slices[knob]):
            rs = [r for r in slices[knob] if r["gpu"] == gpu]
            fig.add_trace(go.Scatter(
                mode="lines+markers", name=_esc(gpu), legendgroup=gpu,
                showlegend=gpu not in legend_done,
                x=[_esc(r["value"]) for r in rs], y=[r["makespan_s"] / div for r in rs],
                customdata=[[r["trial"], r["cost_usd"], r["n"]] for r in rs],
                marker=dict(color=colors.get(gpu, PALETTE[-1]), size=8),
                line=dict(color=colors.get(gpu, PALETTE[-1]), width=1.5),
                hovertemplate=f"{_esc(gpu)}, {_esc(knob)}=%{{x}}: best %{{y:.3g}} {unit}, "
                              "$%{customdata[1]:.2f} (trial #%{customdata[0]}, "
                              "%{customdata[2]} feasible trials)<extra></extra>"),
                row=row, col=col)
            legend_done.add(gpu)
        fig.update_xaxes(**_axis(""), type="category", categoryorder="array",
                         categoryarray=labels, row=row, col=col)
        fig.update_yaxes(**_axis(f"best makespan ({unit})" if col == 1 else "",
                                 rangemode="tozero"), row=row, col=col)
    fig.update_layout(**_base_layout(
        height=90 + 270 * rows, margin=dict(l=70, r=20, t=60, b=40),
        legend=dict(orientation="h", yanchor="bottom", y=1.04, x=0, bgcolor="rgba(0,0,0,0)",
                    title=dict(text="GPU"))))
    return fig


def _limit_rows(ctx: dict, trials: dict[int, dict], colors: dict[str, str]) -> list[dict]:
    """Each distinct winner with its physical limit T_o and how close its makespan gets."""
    rows = []
    for r in _memory_rows_roles(ctx):
        t = trials[r[0]]
        m = t.get("metrics") or {}
        ms, lb = _num(m.get("makespan_s")), _num(m.get("lower_bound_s"))
        rows.append(dict(
            number=r[0], gpu=t["config"]["gpu"], roles=r[1],
            color=colors.get(t["config"]["gpu"], PALETTE[-1]), makespan_s=ms, lower_bound_s=lb,
            fraction=(lb / ms) if lb is not None and ms else None,
            makespan=fmt_duration(ms), limit=fmt_duration(lb),
            pct=fmt_pct(lb / ms) if lb is not None and ms else "—",
            gap=fmt_duration(ms - lb) if lb is not None and ms is not None else "—",
            summary=config_summary(t["config"])))
    return rows


def _limit_figure(rows: list[dict]) -> go.Figure | None:
    rows = [r for r in rows if r["fraction"] is not None]
    if not rows:
        return None
    unit, div = duration_unit(max(r["makespan_s"] for r in rows))
    labels = [_esc(f"#{r['number']} {r['gpu']} ({r['roles'][0]})") for r in rows]
    fig = go.Figure()
    fig.add_trace(go.Bar(
        orientation="h", name="physical limit T<sub>o</sub>", y=labels,
        x=[r["lower_bound_s"] / div for r in rows], marker=dict(color="rgba(128,128,128,0.55)"),
        hovertemplate=f"%{{y}}: T<sub>o</sub> %{{x:.3g}} {unit}<extra></extra>"))
    fig.add_trace(go.Bar(
        orientation="h", name="predicted makespan", y=labels,
        x=[r["makespan_s"] / div for r in rows], marker=dict(color=[r["color"] for r in rows]),
        text=[f"{100 * r['fraction']:.0f} % of the limit" for r in rows],
        textposition="outside", cliponaxis=False,
        hovertemplate=f"%{{y}}: makespan %{{x:.3g}} {unit}<extra></extra>"))
    fig.update_layout(**_base_layout(
        barmode="group", height=max(200, 100 + 60 * len(rows)),
        xaxis=_axis(f"time ({unit})", rangemode="tozero"),
        yaxis=dict(autorange="reversed", automargin=True),
        legend=dict(orientation="h", yanchor="bottom", y=1.02, x=0, bgcolor="rgba(0,0,0,0)"),
        margin=dict(l=20, r=110, t=40, b=50)))
    return fig


def _validation_rows(ctx: dict) -> list[dict]:
    rows = []
    for v in ctx.get("validation") or []:
        pred, meas = float(v["predicted_s"]), float(v["measured_s"])
        err = (pred - meas) / meas if meas > 0 else None
        cal = _num(v.get("predicted_calibrated_s"))
        trial = v.get("trial")
        device = v.get("measured_device") or v.get("device")
        runner = str(v.get("runner") or "—") + (f" on {device}" if device else "")
        notes = v.get("notes")
        note = v.get("note") or ("; ".join(str(n) for n in notes)
                                 if isinstance(notes, list) else str(notes or ""))
        rows.append(dict(
            trial=f"#{trial}" if trial is not None else "—", gpu=v["config"].get("gpu", "—"),
            summary=config_summary(v["config"]), runner=runner,
            predicted_s=pred, measured_s=meas, error=err, predicted=fmt_duration(pred),
            measured=fmt_duration(meas),
            error_s="—" if err is None else f"{100 * err:+.0f} %",
            calibrated=fmt_duration(cal) if cal is not None else "—",
            calibrated_error="—" if cal is None or meas <= 0 else
            f"{100 * (cal - meas) / meas:+.0f} %",
            note=note))
    return rows


def _validation_figure(rows: list[dict], colors: dict[str, str]) -> go.Figure | None:
    if not rows:
        return None
    top = max(max(r["predicted_s"], r["measured_s"]) for r in rows)
    unit, div = duration_unit(top)
    fig = go.Figure()
    fig.add_trace(go.Scatter(
        mode="lines", name="prediction = measurement", x=[0, 1.05 * top / div],
        y=[0, 1.05 * top / div], hoverinfo="skip",
        line=dict(color="rgba(128,128,128,0.7)", dash="dot")))
    for gpu in dict.fromkeys(r["gpu"] for r in rows):
        rs = [r for r in rows if r["gpu"] == gpu]
        fig.add_trace(go.Scatter(
            mode="markers", name=_esc(gpu), x=[r["predicted_s"] / div for r in rs],
            y=[r["measured_s"] / div for r in rs],
            customdata=[[_esc(r["trial"]), _esc(r["runner"]), r["error_s"]] for r in rs],
            marker=dict(color=colors.get(gpu, PALETTE[-1]), size=11),
            hovertemplate="trial %{customdata[0]} (%{customdata[1]}): predicted %{x:.3g}, "
                          f"measured %{{y:.3g}} {unit}, error %{{customdata[2]}}<extra></extra>"))
    fig.update_layout(**_base_layout(
        height=420, xaxis=_axis(f"predicted makespan ({unit})", rangemode="tozero"),
        yaxis=_axis(f"measured makespan ({unit})", rangemode="tozero")))
    return fig


def _fig_json(fig: go.Figure | None) -> str | None:
    """Figure JSON safe to put inside <script type="application/json">."""
    if fig is None:
        return None
    s = fig.to_json()
    return s.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


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
        arr = np.asarray(list(values), dtype=np.float64)
    except (TypeError, ValueError):
        raise TunerError(f"Report context {where} must be a list of token counts.") from None
    if arr.ndim != 1:
        raise TunerError(f"Report context {where} must be a flat list of token counts.")
    return arr[np.isfinite(arr)]


def _row(t: dict, pick: str) -> dict:
    m = t.get("metrics") or {}
    ms, lb = _num(m.get("makespan_s")), _num(m.get("lower_bound_s"))
    peak = _num(m.get("peak_kv_fraction"))
    return dict(
        gpu=t["config"]["gpu"], pick=pick, number=t["number"], summary=config_summary(t["config"]),
        makespan=fmt_duration(ms), cost=fmt_usd(m.get("cost_usd")),
        usd_per_1k=fmt_usd(m.get("usd_per_1k_requests")), qps=fmt_float(m.get("qps")),
        qps_per_usd=fmt_float(m.get("qps_per_usd_per_h")),
        tok_s=fmt_int(m.get("throughput_tok_s")), preemptions=fmt_int(m.get("preemptions")),
        peak_kv=fmt_pct(peak), limit=fmt_pct(lb / ms) if lb is not None and ms else "—",
    )


def _view(ctx: dict, trials: dict[int, dict]) -> dict:
    gpus = ctx["gpus"]
    gpu_names = list(dict.fromkeys([*gpus, *ctx["best_per_gpu"],
                                    *(t["config"]["gpu"] for t in trials.values())]))
    colors = _gpu_colors(gpu_names)
    winners = ctx["winners"]

    def winner(kind: str) -> dict | None:
        n = winners.get(kind)
        if n is None:
            return None
        t = trials[n]
        count = int(t["config"].get("tp", 1) or 1) * int(t["config"].get("dp", 1) or 1)
        return dict(gpu=t["config"]["gpu"], number=n,
                    label=f"{count} × {t['config']['gpu']}" if count > 1 else t["config"]["gpu"],
                    makespan=fmt_duration(t["metrics"]["makespan_s"]),
                    cost=fmt_usd(t["metrics"]["cost_usd"]), summary=config_summary(t["config"]))

    fastest, cheapest = winner("fastest"), winner("cheapest")
    same_winner = fastest is not None and cheapest is not None and \
        fastest["number"] == cheapest["number"]

    infeasible = [t for t in trials.values() if not t["feasible"]]
    per_gpu_lines = []
    for name in gpu_names:
        picks = ctx["best_per_gpu"].get(name)
        if picks:
            f, c = trials[picks["fastest"]], trials[picks["cheapest"]]
            per_gpu_lines.append(dict(
                gpu=name, color=colors[name], feasible=True,
                fastest=f"{fmt_duration(f['metrics']['makespan_s'])}, "
                        f"{fmt_usd(f['metrics']['cost_usd'])}",
                cheapest=f"{fmt_usd(c['metrics']['cost_usd'])} in "
                         f"{fmt_duration(c['metrics']['makespan_s'])}",
                same=picks["fastest"] == picks["cheapest"]))
        else:
            bad = [t for t in infeasible if t["config"]["gpu"] == name]
            reasons = Counter((t.get("reason") or "no reason given") for t in bad)
            top = reasons.most_common(1)[0][0] if reasons else "no trial ran on it"
            per_gpu_lines.append(dict(gpu=name, color=colors[name], feasible=False,
                                      reason=top, count=len(bad)))

    table = []
    for name in gpu_names:
        picks = ctx["best_per_gpu"].get(name)
        if not picks:
            continue
        if picks["fastest"] == picks["cheapest"]:
            table.append(_row(trials[picks["fastest"]], "fastest & cheapest"))
        else:
            table.append(_row(trials[picks["fastest"]], "fastest"))
            table.append(_row(trials[picks["cheapest"]], "cheapest"))
    for r in table:
        r["overall"] = [k for k in ("fastest", "cheapest") if winners.get(k) == r["number"]]
        r["color"] = colors.get(r["gpu"], PALETTE[-1])

    wl = ctx["workload"]
    prompt = _as_lengths(wl["prompt_tokens"], "workload.prompt_tokens")
    output = _as_lengths(wl["output_tokens"], "workload.output_tokens")

    mem_rows = _memory_rows(ctx, trials)
    for r in mem_rows:
        r.update(total_s=fmt_gib(r["total"]), usable_s=fmt_gib(r["usable"]),
                 weights_s=fmt_gib(r["weights"]), activations_s=fmt_gib(r["activations"]),
                 kv_s=fmt_gib(r["kv"]), free_s=fmt_gib(r["free"]),
                 kv_tokens_s=fmt_int(r["kv_capacity_tokens"]),
                 max_conc_s=fmt_int(r["max_concurrent_requests"]))

    reasons = Counter((t.get("reason") or "no reason given") for t in infeasible)
    exports = ctx["exports"]
    study = str(ctx.get("study") or "")

    limit_rows = _limit_rows(ctx, trials, colors)
    timelines = _timeline_view(ctx.get("timelines") or [])
    importances = _importance_view(ctx.get("importances"))
    slices = _slices(trials)
    validation = _validation_rows(ctx)
    val_errors = [abs(r["error"]) for r in validation if r["error"] is not None]
    figures = {
        "pareto": _fig_json(_pareto_figure(ctx, trials, colors)),
        "limit": _fig_json(_limit_figure(limit_rows)),
        "timeline": _fig_json(_timeline_figure(ctx.get("timelines") or [], colors)),
        "importance": _fig_json(_importance_figure(ctx.get("importances") or {})),
        "slices": _fig_json(_slices_figure(slices, colors)),
        "memory": _fig_json(_memory_figure(mem_rows)),
        "workload": _fig_json(_workload_figure(prompt, output)),
        "validation": _fig_json(_validation_figure(validation, colors)),
    }
    model = ctx["model"]
    fastest_limit = next((r for r in limit_rows if fastest and r["number"] == fastest["number"]),
                         None)
    return dict(
        title=ctx["title"], question=ctx["question"], generated_at=ctx["generated_at"],
        tool_version=ctx["tool_version"], study=study,
        fastest=fastest, cheapest=cheapest, same_winner=same_winner,
        fastest_limit=fastest_limit,
        per_gpu_lines=per_gpu_lines, table=table, mem_rows=mem_rows,
        limit_rows=limit_rows, timelines=timelines, importances=importances,
        slice_knobs=list(slices), validation=validation,
        validation_mean_error=fmt_pct(sum(val_errors) / len(val_errors)) if val_errors else "—",
        validation_calibrated=any(r["calibrated"] != "—" for r in validation),
        workload=dict(source=wl["source"], requests=fmt_int(wl["requests"]),
                      tokenizer=wl["tokenizer"], output_source=wl["output_source"],
                      prompt=_lengths_stats(prompt), output=_lengths_stats(output)),
        model=dict(name=model["name"], params=fmt_params(model["num_params"]),
                   hf_id=model.get("hf_id") or ""),
        gpus=[_gpu_view(n, g, colors[n]) for n, g in gpus.items()],
        n_trials=len(trials), n_feasible=len(trials) - len(infeasible),
        n_infeasible=len(infeasible), n_pareto=len(ctx["pareto"]),
        trial_range=_trial_range(trials),
        reasons=reasons.most_common(),
        fastest_yaml=exports["fastest_vllm_yaml"], cheapest_yaml=exports["cheapest_vllm_yaml"],
        export_blocks=_export_view(ctx),
        notes=[str(n) for n in ctx.get("notes") or []],
        verdicts=[str(v) for v in ctx.get("verdicts") or []],
        figures=figures,
        plotly_js=plotly.offline.get_plotlyjs(),
    )


def _trial_range(trials: dict[int, dict]) -> str:
    if not trials:
        return "—"
    lo, hi = min(trials), max(trials)
    return f"#{lo}" if lo == hi else f"#{lo}–#{hi}"


def _gpu_view(name: str, g: dict, color: str) -> dict:
    cost_model = g.get("cost_model") or "—"
    measured = g.get("measured")
    if measured is None:
        low = cost_model.lower()
        measured = not ("not measured" in low or "spec sheet" in low or "spec-sheet" in low
                        or "transferred" in low or cost_model == "—")
    cv = _num(g.get("cv_error"))
    return dict(name=name, color=color, memory=fmt_float(g.get("memory_gib"), 0),
                price=fmt_usd(g.get("price_usd_per_h")), source=g.get("price_source") or "—",
                date=g.get("price_date") or "—", cost_model=cost_model,
                kind="measured (profiled)" if measured else "spec-derived (not measured)",
                measured=bool(measured),
                cv=f"{100 * cv:.1f} %" if cv is not None else "—",
                cv_metric=g.get("cv_metric") or "")


def _timeline_view(timelines: list[dict]) -> list[dict]:
    out = []
    for t in timelines:
        entry = dict(label=_role_label(t), roles=t.get("roles") or [], trial=t["trial"],
                     error=t.get("error"), note="")
        ms, study_ms = _num(t.get("makespan_s")), _num(t.get("study_makespan_s"))
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


EXPORT_FORMAT_INFO = {
    "vllm": ("vLLM config (YAML)", "Save as config.yaml; run: vllm serve --config config.yaml"),
    "vllm-run-batch": ("vllm run-batch", "Run as is on the GPU machine: reads the batch JSONL "
                       "and writes the results JSONL."),
    "sglang": ("SGLang", "Starts an SGLang server with these settings; then send the batch to "
               "it."),
    "json": ("JSON (every figure)", "The configuration, predicted figures, memory plan and "
             "engine arguments, for scripts."),
}


def _export_view(ctx: dict) -> list[dict]:
    """[{'title', 'trial', 'formats': [{'key', 'name', 'how', 'text', 'id', 'open'}]}]."""
    snippets = ctx.get("export_snippets") or {}
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
                name, how = EXPORT_FORMAT_INFO.get(key, (key, ""))
                fmts.append(dict(key=key, name=name, how=how, text=str(text),
                                 id=f"export-{which}-{re.sub(r'[^a-z0-9]+', '-', key)}",
                                 open=key == "vllm"))
            title = "Fastest and cheapest" if same else which.capitalize()
            blocks.append(dict(title=title, trial=snip.get("trial"), formats=fmts))
        return blocks
    exports = ctx["exports"]
    same = exports["fastest_vllm_yaml"] == exports["cheapest_vllm_yaml"]
    for which in ("fastest", "cheapest"):
        if same and which == "cheapest":
            continue
        name, how = EXPORT_FORMAT_INFO["vllm"]
        blocks.append(dict(
            title="Fastest and cheapest" if same else which.capitalize(),
            trial=ctx["winners"].get(which),
            formats=[dict(key="vllm", name=name, how=how, text=exports[f"{which}_vllm_yaml"],
                          id=f"yaml-{which}", open=True)]))
    return blocks


# ---------------------------------------------------------------------------------------------
# Rendering


def _environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.PackageLoader("reports", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )


def render_html(context: dict) -> str:
    """The report as an HTML string (validates the context first)."""
    trials = _validate(context)
    view = _view(context, trials)
    return _environment().get_template("report.html.j2").render(**view)


def render_report(context: dict, out_path: str | Path) -> Path:
    """Render the report and write it atomically to ``out_path``; return the path."""
    text = render_html(context)
    return write_atomic(out_path, text)


__all__ = ["duration_unit", "fmt_duration", "fmt_usd", "render_html", "render_report"]
