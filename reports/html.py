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
      "notes": [str] (optional)
    }

Feasible trials must carry ``metrics`` with at least ``makespan_s`` and ``cost_usd``; other
metric keys may be absent or None (shown as "—"). ``memory`` figures are per GPU (one device of
the replica). Winners may be None when no trial is feasible; the report then says so.
"""

from __future__ import annotations

import html
import math
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import jinja2
import numpy as np
import plotly.graph_objects as go
import plotly.offline
from plotly.subplots import make_subplots

from tuner.deploy import write_atomic
from tuner.errors import TunerError

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
    return trials


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


def _memory_rows(ctx: dict, trials: dict[int, dict]) -> list[dict]:
    """One row per distinct winner (overall winners first, then per GPU) that has a memory plan."""
    picks: dict[int, list[str]] = {}
    for k in ("fastest", "cheapest"):
        n = ctx["winners"].get(k)
        if n is not None:
            picks.setdefault(n, []).append(f"overall {k}")
    for gpu, d in ctx["best_per_gpu"].items():
        for k in ("fastest", "cheapest"):
            picks.setdefault(d[k], []).append(f"{gpu} {k}")
    rows = []
    for num, roles in picks.items():
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
    for col, (vals, color) in enumerate(((prompt, PALETTE[0]), (output, PALETTE[1])), start=1):
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
        return dict(gpu=t["config"]["gpu"], number=n,
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
    figures = {
        "pareto": _fig_json(_pareto_figure(ctx, trials, colors)),
        "memory": _fig_json(_memory_figure(mem_rows)),
        "workload": _fig_json(_workload_figure(prompt, output)),
    }
    model = ctx["model"]
    return dict(
        title=ctx["title"], question=ctx["question"], generated_at=ctx["generated_at"],
        tool_version=ctx["tool_version"],
        fastest=fastest, cheapest=cheapest, same_winner=same_winner,
        per_gpu_lines=per_gpu_lines, table=table, mem_rows=mem_rows,
        workload=dict(source=wl["source"], requests=fmt_int(wl["requests"]),
                      tokenizer=wl["tokenizer"], output_source=wl["output_source"],
                      prompt=_lengths_stats(prompt), output=_lengths_stats(output)),
        model=dict(name=model["name"], params=fmt_params(model["num_params"]),
                   hf_id=model.get("hf_id") or ""),
        gpus=[dict(name=n, color=colors[n], memory=fmt_float(g.get("memory_gib"), 0),
                   price=fmt_usd(g.get("price_usd_per_h")), source=g.get("price_source") or "—",
                   date=g.get("price_date") or "—", cost_model=g.get("cost_model") or "—")
              for n, g in gpus.items()],
        n_trials=len(trials), n_feasible=len(trials) - len(infeasible),
        n_infeasible=len(infeasible), n_pareto=len(ctx["pareto"]),
        reasons=reasons.most_common(),
        fastest_yaml=exports["fastest_vllm_yaml"], cheapest_yaml=exports["cheapest_vllm_yaml"],
        notes=[str(n) for n in ctx.get("notes") or []],
        figures=figures,
        plotly_js=plotly.offline.get_plotlyjs(),
    )


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
