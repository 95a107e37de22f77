"""The report's figures: plotly figures built from the context's records and the view's rows.

Every figure is transparent (light and dark mode), names GPUs in one colour throughout, and
escapes user strings (plotly renders labels as pseudo-HTML). :func:`fig_json` embeds one safely.
"""

from __future__ import annotations

import html
import json
import math
from collections import Counter
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from tuner.core.memory import MEMORY_ITEM_NAMES
from tuner.core.units import as_finite, duration_unit
from tuner.search.constraints import plan_label, trial_ref
from tuner.search.fleet import beaten_by_mix

if TYPE_CHECKING:
    from tuner.reports.context import ReportContext
    from tuner.search.records import TrialRecord

GIB = 1024**3

# Mid-luminance palette (Tableau 10): legible on white and on near-black backgrounds.
PALETTE = (
    "#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f",
    "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac",
)
#: by tuner.core.memory.gpu_memory_items' keys, and "free"
MEMORY_COLORS = {
    "weights": "#4e79a7",
    "activations": "#f28e2b",
    "runtime": "#edc948",
    "offload_buffers": "#ff9da7",
    "kv": "#59a14f",
    "state": "#b07aa1",
    "free": "rgba(128,128,128,0.35)",
}
#: the short names the figure's legend gives gpu_memory_items' rows (the table's headers are
#: the labels `tuner simulate` prints)
MEMORY_SHORT = {"weights": "weights", "activations": "activations", "runtime": "runtime",
                "offload_buffers": "weight-offload buffers", "state": "Mamba state pool",
                "kv": "KV cache", "free": "free / reserved"}


def memory_columns(rows: list[dict]) -> list[tuple[str, str]]:
    """The (key, label) of the memory parts the winners' rows (views._memory_rows) show, in
    gpu_memory_items' order: a part only where some row has it (a stored plan without the
    runtime figure, no offload buffers, no Mamba state pool: no column), labelled as
    `tuner simulate` labels it, or by its name where the plans' labels differ."""
    labels: dict[str, set[str]] = {}
    for r in rows:
        for key, label, nbytes in r.get("items", ()):
            if nbytes is not None:
                labels.setdefault(key, set()).add(label)
    order = list(MEMORY_SHORT)  # gpu_memory_items' order, whichever row has a part first
    return [(k, next(iter(labels[k])) if len(labels[k]) == 1
             else MEMORY_ITEM_NAMES.get(k, MEMORY_SHORT[k]))
            for k in sorted(labels, key=order.index)]
HOVER_FIELDS = ("chunk_size", "max_running", "weight_bits", "kv_bits", "tp", "scheduler")


def esc(s: Any) -> str:
    return html.escape(str(s), quote=False)


def base_layout(**kw: Any) -> dict:
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


def axis(title: str, **kw: Any) -> dict:
    return dict(title=dict(text=title), gridcolor="rgba(128,128,128,0.25)",
                zerolinecolor="rgba(128,128,128,0.4)", linecolor="rgba(128,128,128,0.6)",
                showline=True, automargin=True, **kw)


# An axis whose (positive) values span more than this ratio is drawn in log scale: a 1-GPU and a
# 32-GPU plan on one linear axis squeeze every fast plan into a corner.
LOG_SPAN = 10.0


def _finite(values: Iterable[Any]) -> list[float]:
    return [v for v in (as_finite(x) for x in values) if v is not None]


def spans_decades(values: Iterable[Any]) -> bool:
    """True where the values are all positive and max / min > LOG_SPAN (a log axis can show them)."""
    vs = _finite(values)
    return len(vs) >= 2 and min(vs) > 0 and max(vs) / min(vs) > LOG_SPAN


def log_ticks(lo: float, hi: float) -> list[float]:
    """1-2-5 ticks of a log axis from lo to hi (fewer where it spans many decades): plotly's
    own labels every digit of a decade ('7 8 9'), and they collide on a short axis."""
    decades = math.log10(hi / lo)
    mantissas = (1, 2, 5) if decades <= 2.5 else (1, 3) if decades <= 4 else (1,)
    ticks = [m * 10.0 ** k for k in range(math.floor(math.log10(lo)) - 1,
                                           math.ceil(math.log10(hi)) + 2) for m in mantissas]
    return [float(f"{t:.6g}") for t in ticks if lo / 3 <= t <= hi * 3]


def usd_digits(values: Iterable[Any]) -> int:
    """Decimals a $ axis needs: 2, or up to 4 where costs go below a dime ('$0.0025')."""
    vs = [v for v in _finite(values) if v > 0]
    return max(2, min(4, 1 - math.floor(math.log10(min(vs))))) if vs else 2


def scale(values: Iterable[Any], usd: bool = False) -> dict:
    """The axis type for these values: log where they span decades (with 1-2-5 ticks), else
    linear from zero. usd: the ticks read '$0.05'."""
    vs = _finite(values)
    if not spans_decades(vs):
        return dict(type="linear", rangemode="tozero",
                    **(dict(tickprefix="$", tickformat=f",.{usd_digits(vs)}f") if usd else {}))
    ticks = log_ticks(min(vs), max(vs))  # one significant digit each: '$0.05', '$0.50'
    return dict(type="log", tickmode="array", tickvals=ticks,
                ticktext=[f"${t:,.{max(2, -math.floor(math.log10(t)))}f}" if usd else f"{t:g}"
                          for t in ticks])


def usd_hover(values: Iterable[Any]) -> str:
    """The d3 format of a job's $ in a hover: four decimals where any cost is below $1, as
    every table prints them (tuner.core.units.fmt_usd): at two, $0.0366 and $0.0417 both read
    '$0.04' and the hover hides the ordering the figure shows."""
    vs = _finite(values)
    return ",.4f" if vs and min(abs(v) for v in vs) < 1 else ",.2f"


def on_axis(v: float, log: bool) -> float:
    """An annotation's coordinate (plotly wants log10 of the value on a log axis)."""
    return math.log10(v) if log else v


def gpu_colors(names: Iterable[str]) -> dict[str, str]:
    return {n: PALETTE[i % len(PALETTE)] for i, n in enumerate(names)}


def front_with_mixes(ctx: ReportContext, trials: dict[int, TrialRecord]
                     ) -> tuple[set[int], list[dict]]:
    """The front the terminal prints (tuner search's "Pareto front" table): the single-type
    Pareto trials no mix of GPU types beats on both makespan and $, and the mixes (those with
    finite figures)."""
    fleets = [f for f in ctx.fleets or [] if as_finite(f.get("makespan_s")) is not None
              and as_finite(f.get("cost_usd")) is not None]
    beaten = beaten_by_mix([(trials[n].makespan_s, trials[n].cost_usd) for n in ctx.pareto],
                           fleets) if fleets else [None] * len(ctx.pareto)
    return {n for n, b in zip(ctx.pareto, beaten, strict=True) if b is None}, fleets


def pareto_figure(ctx: ReportContext, trials: dict[int, TrialRecord],
                  colors: dict[str, str]) -> go.Figure | None:
    feasible = [t for t in trials.values() if t.feasible]
    if not feasible:
        return None
    pareto, fleets = front_with_mixes(ctx, trials)
    unit, div = duration_unit(max([t.makespan_s for t in feasible]
                                  + [f["makespan_s"] for f in fleets]))
    winners = ctx.winners
    fig = go.Figure()
    usd = usd_hover([t.cost_usd for t in feasible] + [f["cost_usd"] for f in fleets])
    # the plan (GPU count, TP x DP, engine) first: two dots of one GPU type differ mostly there
    hover = "<br>".join(
        ["<b>%{customdata[0]}</b> %{text}: %{customdata[2]}",
         f"simulated makespan %{{x:.3g}} {unit}, job $%{{y:{usd}}}"]
        + [f"{f} %{{customdata[{i + 3}]}}" for i, f in enumerate(HOVER_FIELDS)]
    ) + "<extra></extra>"

    def points(ts: list[TrialRecord]) -> dict:
        return dict(
            x=[t.makespan_s / div for t in ts],
            y=[t.cost_usd for t in ts],
            customdata=[[esc(t.gpu), t.number, esc(plan_label(t.config))]
                        + [esc(getattr(t.config, f, "")) for f in HOVER_FIELDS] for t in ts],
            # 'trial #12', or "vLLM's defaults": an engine's defaults outside the space (-1, ...)
            text=[esc(trial_ref(t)) for t in ts],
        )

    gpu_names = list(dict.fromkeys([*colors, *(t.gpu for t in feasible)]))
    for name in gpu_names:
        ts = [t for t in feasible if t.gpu == name]
        if not ts:
            continue
        color = colors.get(name, PALETTE[-1])
        front = [t for t in ts if t.number in pareto]
        rest = [t for t in ts if t.number not in pareto]
        # Legend-only entry drawn at full strength; the data traces below join its group.
        fig.add_trace(go.Scatter(
            mode="markers", name=esc(name), legendgroup=name, x=[None], y=[None],
            marker=dict(color=color, size=11), hoverinfo="skip"))
        if rest:
            fig.add_trace(go.Scatter(
                mode="markers", name=esc(name), legendgroup=name, showlegend=False,
                marker=dict(color=color, size=8, opacity=0.45), hovertemplate=hover,
                **points(rest)))
        if front:
            fig.add_trace(go.Scatter(
                mode="markers", name=esc(name), legendgroup=name, showlegend=False,
                marker=dict(color=color, size=13, opacity=1.0,
                            line=dict(color="rgba(128,128,128,0.9)", width=1.5)),
                hovertemplate=hover, **points(front)))
    if fleets:
        fig.add_trace(go.Scatter(
            mode="markers", name="mix of GPU types", x=[f["makespan_s"] / div for f in fleets],
            y=[f["cost_usd"] for f in fleets],
            customdata=[[k, esc(f.get("description", ""))] for k, f in enumerate(fleets, 1)],
            marker=dict(color="rgba(128,128,128,0.9)", size=13, symbol="diamond",
                        line=dict(color="rgba(128,128,128,0.9)", width=1.5)),
            hovertemplate="<b>mix %{customdata[0]}</b>: %{customdata[1]}<br>simulated makespan "
                          f"%{{x:.3g}} {unit}, job $%{{y:{usd}}}<extra></extra>"))
    front_all = sorted([(trials[n].makespan_s, trials[n].cost_usd) for n in pareto]
                       + [(f["makespan_s"], f["cost_usd"]) for f in fleets])
    if len(front_all) > 1:
        fig.add_trace(go.Scatter(
            mode="lines", name="Pareto front", hoverinfo="skip",
            x=[m / div for m, _ in front_all], y=[c for _, c in front_all],
            line=dict(color="rgba(128,128,128,0.7)", dash="dot", shape="hv", width=1.5)))
    xs = [t.makespan_s / div for t in feasible] + [f["makespan_s"] / div for f in fleets]
    ys = [t.cost_usd for t in feasible] + [f["cost_usd"] for f in fleets]
    xlog, ylog = spans_decades(xs), spans_decades(ys)
    labels: dict[int, list[str]] = {}
    for k in ("fastest", "cheapest"):
        if winners.of(k) is not None:
            labels.setdefault(winners.of(k), []).append(k)
    for num, names in labels.items():
        t = trials[num]
        # The fastest point is the leftmost and the cheapest the lowest: "fastest" above its
        # point, "cheapest" to the right of its own, so the two labels never meet.
        ax, ay = ((40, -35) if len(names) > 1 else (10, -38) if names == ["fastest"]
                  else (55, -12))
        fig.add_annotation(
            x=on_axis(t.makespan_s / div, xlog),
            y=on_axis(t.cost_usd, ylog),
            text=" & ".join(names), showarrow=True, arrowhead=2, arrowcolor="#888888",
            ax=ax, ay=ay)
    fig.update_layout(**base_layout(
        xaxis=axis(f"makespan ({unit})", **scale(xs)),
        yaxis=axis("job cost (USD)", **scale(ys, usd=True)),
        legend=dict(bgcolor="rgba(0,0,0,0)", title=dict(text="GPU")),
        height=480, margin=dict(l=70, r=20, t=45, b=60),
    ))
    return fig


def memory_figure(rows: list[dict]) -> go.Figure | None:
    if not rows:
        return None
    fig = go.Figure()
    labels = [esc(r["label"]) for r in rows]
    widest = max(r["total"] for r in rows) / GIB or 1.0
    # the table's parts (memory_columns: none a plan lacks, so no empty legend entry), free last
    parts = [(MEMORY_SHORT[k], k) for k, _ in memory_columns(rows)] + [
        (MEMORY_SHORT["free"], "free")]
    for part, key in parts:
        vals = [(r.get(key) or 0.0) / GIB for r in rows]
        fig.add_trace(go.Bar(
            orientation="h", name=part, y=labels, x=vals,
            marker=dict(color=MEMORY_COLORS[key]),
            text=[f"{v:.1f}" if v >= 0.06 * widest else "" for v in vals],
            textposition="inside", insidetextanchor="middle", textangle=0,
            hovertemplate=f"{part}: %{{x:.2f}} GiB<extra>%{{y}}</extra>"))
    fig.update_layout(**base_layout(
        barmode="stack",
        xaxis=axis("GiB per GPU", rangemode="tozero"),
        yaxis=dict(autorange="reversed", automargin=True),
        legend=dict(orientation="h", yanchor="bottom", y=1.02, x=0, bgcolor="rgba(0,0,0,0)",
                    traceorder="normal"),
        height=max(180, 90 + 55 * len(rows)),
        margin=dict(l=20, r=20, t=40, b=50),
    ))
    return fig


def _histogram(values: np.ndarray, log: bool = False) -> dict:
    """Bars of a histogram; log: bins of equal width on a log axis (each bar from its left
    edge, `offset` 0, so the bars meet on either axis type)."""
    n = values.size
    bins = int(min(50, max(5, math.ceil(math.sqrt(n)))))
    if log:
        edges = np.geomspace(values.min(), values.max(), bins + 1)
        counts, _ = np.histogram(values, bins=edges)
    else:
        counts, edges = np.histogram(values, bins=bins)
    return dict(
        x=edges[:-1].tolist(), offset=0, y=counts.tolist(), width=np.diff(edges).tolist(),
        customdata=np.stack([np.floor(edges[:-1]), np.floor(edges[1:])], axis=1).tolist(),
    )


def workload_figure(prompt: np.ndarray, output: np.ndarray) -> go.Figure | None:
    if prompt.size == 0 and output.size == 0:
        return None
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.1,
                        subplot_titles=("prompt tokens", "output tokens"))
    # Not GPU colours (those mean a GPU everywhere else in the report).
    fig.update_xaxes(**axis("tokens per request"))
    for col, (vals, color) in enumerate(((prompt, "#9c755f"), (output, "#b07aa1")), start=1):
        if vals.size == 0:
            continue
        # lengths from tens to thousands of tokens: log bins on a log axis
        x_scale = scale([vals.min(), vals.max()])
        if x_scale["type"] == "log":  # room at the ends: the first tick clear of the y axis' 0
            lo, hi = math.log10(vals.min()), math.log10(vals.max())
            x_scale["range"] = [lo - 0.05 * (hi - lo), hi + 0.05 * (hi - lo)]
        fig.add_trace(go.Bar(
            showlegend=False, marker=dict(color=color),
            hovertemplate="%{customdata[0]:,}–%{customdata[1]:,} tokens: %{y:,} requests"
                          "<extra></extra>",
            **_histogram(vals, log=x_scale["type"] == "log")), row=1, col=col)
        fig.update_xaxes(**x_scale, row=1, col=col)
    fig.update_layout(**base_layout(height=360, bargap=0.02,
                                     margin=dict(l=70, r=20, t=60, b=60)))
    fig.update_yaxes(**axis("requests"))
    return fig


def role_label(entry: dict) -> str:
    """'#12 A40 (overall fastest)'; an entry's "tag" in place of '#N' where the views gave one
    ("vLLM's defaults": an engine's defaults outside the space, no trial)."""
    roles = entry.get("roles") or []
    tag = entry.get("tag") or f"#{entry['trial']}"
    return f"{tag} {entry.get('gpu', '')}" + (f" ({roles[0]})" if roles else "")


def timeline_figure(timelines: list[dict], colors: dict[str, str]) -> go.Figure | None:
    """Running requests, KV use and cumulative preemptions over time, one line per winner."""
    series = [t for t in timelines if "error" not in t and t.get("time_s")]
    if not series:
        return None
    def end(t: dict) -> float:
        return float(as_finite(t.get("end_s")) or t["time_s"][-1])

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
        name = esc(role_label(t))
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
    fig.update_layout(**base_layout(
        height=640, margin=dict(l=70, r=20, t=50, b=60), hovermode="closest",
        legend=dict(orientation="h", yanchor="bottom", y=1.05, x=0, bgcolor="rgba(0,0,0,0)")))
    fig.update_xaxes(**axis(""))
    fig.update_xaxes(title=dict(text=f"time since the job started ({unit})"), row=3, col=1)
    fig.update_yaxes(**axis("requests", rangemode="tozero"), row=1, col=1)
    fig.update_yaxes(**axis("% of KV capacity", range=[0, 105]), row=2, col=1)
    fig.update_yaxes(**axis("preemptions", rangemode="tozero"), row=3, col=1)
    return fig


def importance_figure(importances: dict) -> go.Figure | None:
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
            orientation="h", y=[esc(k) for k in order], x=vals, showlegend=False,
            marker=dict(color=("#76b7b2", "#b07aa1")[col - 1]), text=[f"{v:.0f} %" for v in vals],
            textposition="outside", cliponaxis=False,
            hovertemplate=f"%{{y}}: %{{x:.1f}} % of {title} variance ({d.get('n_trials', '?')} "
                          "trials)<extra></extra>"), row=1, col=col)
        fig.update_xaxes(**axis("%", range=[0, 115]), row=1, col=col)
    fig.update_yaxes(automargin=True)
    fig.update_layout(**base_layout(height=max(220, 90 + 34 * len(order)),
                                     margin=dict(l=20, r=30, t=50, b=50), bargap=0.3))
    return fig


def sort_key(v: Any) -> tuple:
    return (0, float(v), "") if isinstance(v, (int, float)) and not isinstance(v, bool) \
        else (1, 0.0, str(v))


def slices_figure(slices: dict[str, list[dict]], colors: dict[str, str]) -> go.Figure | None:
    if not slices:
        return None
    knobs = list(slices)
    cols = min(3, len(knobs))
    rows = math.ceil(len(knobs) / cols)
    unit, div = duration_unit(max(r["makespan_s"] for rs in slices.values() for r in rs))
    usd = usd_hover(r["cost_usd"] for rs in slices.values() for r in rs)
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=[esc(k) for k in knobs],
                        horizontal_spacing=0.08, vertical_spacing=0.16 if rows > 1 else 0.1)
    legend_done: set[str] = set()
    for i, knob in enumerate(knobs):
        row, col = i // cols + 1, i % cols + 1
        values = sorted({json.dumps(r["value"]) for r in slices[knob]},
                        key=lambda v: sort_key(json.loads(v)))
        labels = [esc(json.loads(v)) for v in values]
        for gpu in dict.fromkeys(r["gpu"] for r in slices[knob]):
            rs = [r for r in slices[knob] if r["gpu"] == gpu]
            fig.add_trace(go.Scatter(
                mode="lines+markers", name=esc(gpu), legendgroup=gpu,
                showlegend=gpu not in legend_done,
                x=[esc(r["value"]) for r in rs], y=[r["makespan_s"] / div for r in rs],
                customdata=[[r["trial"], r["cost_usd"], r["n"]] for r in rs],
                text=[esc(r.get("ref") or f"trial #{r['trial']}") for r in rs],
                marker=dict(color=colors.get(gpu, PALETTE[-1]), size=8),
                line=dict(color=colors.get(gpu, PALETTE[-1]), width=1.5),
                hovertemplate=f"{esc(gpu)}, {esc(knob)}=%{{x}}: best %{{y:.3g}} {unit}, "
                              f"$%{{customdata[1]:{usd}}} (%{{text}}, "
                              "%{customdata[2]} feasible trials)<extra></extra>"),
                row=row, col=col)
            legend_done.add(gpu)
        # half a category of room at each end: a long value ('shortest-prompt') stays clear
        # of the y axis' labels
        fig.update_xaxes(**axis(""), type="category", categoryorder="array",
                         categoryarray=labels, range=[-0.5, len(labels) - 0.5], row=row, col=col)
        fig.update_yaxes(**axis(f"best makespan ({unit})" if col == 1 else "",
                                 **scale(r["makespan_s"] / div for r in slices[knob])),
                         row=row, col=col)
    fig.update_layout(**base_layout(
        height=90 + 270 * rows, margin=dict(l=70, r=20, t=60, b=40),
        legend=dict(orientation="h", yanchor="bottom", y=1.04, x=0, bgcolor="rgba(0,0,0,0)",
                    title=dict(text="GPU"))))
    return fig


def limit_figure(rows: list[dict]) -> go.Figure | None:
    """Each winner's schedule beside its physical limit T_o, start-up left out of both (it
    has no bound to approach: views._limit_rows)."""
    rows = [r for r in rows if r["fraction"] is not None and r.get("schedule_s") is not None
            and r.get("schedule_lower_bound_s") is not None]
    if not rows:
        return None
    unit, div = duration_unit(max(r["schedule_s"] for r in rows))
    labels = [esc(f"{r.get('tag') or '#' + str(r['number'])} {r['gpu']} ({r['roles'][0]})")
              for r in rows]
    fig = go.Figure()
    fig.add_trace(go.Bar(
        orientation="h", name="physical limit T<sub>o</sub>", y=labels,
        x=[r["schedule_lower_bound_s"] / div for r in rows],
        marker=dict(color="rgba(128,128,128,0.55)"),
        hovertemplate=f"%{{y}}: T<sub>o</sub> %{{x:.3g}} {unit}<extra></extra>"))
    fig.add_trace(go.Bar(
        orientation="h", name="predicted schedule (makespan less start-up)", y=labels,
        x=[r["schedule_s"] / div for r in rows], marker=dict(color=[r["color"] for r in rows]),
        text=[f"{100 * r['fraction']:.0f} % of the limit" for r in rows],
        textposition="outside", cliponaxis=False,
        hovertemplate=f"%{{y}}: schedule %{{x:.3g}} {unit}<extra></extra>"))
    fig.update_layout(**base_layout(
        barmode="group", height=max(200, 100 + 60 * len(rows)),
        xaxis=axis(f"time ({unit})", **scale(
            v / div for r in rows for v in (r["schedule_lower_bound_s"], r["schedule_s"]))),
        yaxis=dict(autorange="reversed", automargin=True),
        legend=dict(orientation="h", yanchor="bottom", y=1.02, x=0, bgcolor="rgba(0,0,0,0)"),
        margin=dict(l=20, r=110, t=40, b=50)))
    return fig


def validation_figure(rows: list[dict], colors: dict[str, str]) -> go.Figure | None:
    if not rows:
        return None
    top = max(max(r["predicted_s"], r["measured_s"]) for r in rows)
    unit, div = duration_unit(top)
    values = [v / div for r in rows for v in (r["predicted_s"], r["measured_s"])]
    both = scale(values)  # one scale on both axes: the diagonal stays the diagonal
    ends = [0.9 * min(values), 1.1 * max(values)] if both["type"] == "log" else \
        [0, 1.05 * top / div]
    fig = go.Figure()
    fig.add_trace(go.Scatter(
        mode="lines", name="prediction = measurement", x=ends, y=ends, hoverinfo="skip",
        line=dict(color="rgba(128,128,128,0.7)", dash="dot")))
    for gpu in dict.fromkeys(r["gpu"] for r in rows):
        rs = [r for r in rows if r["gpu"] == gpu]
        fig.add_trace(go.Scatter(
            mode="markers", name=esc(gpu), x=[r["predicted_s"] / div for r in rs],
            y=[r["measured_s"] / div for r in rs],
            customdata=[[esc(r["trial"]), esc(r["runner"]), r["error_s"]] for r in rs],
            marker=dict(color=colors.get(gpu, PALETTE[-1]), size=11),
            hovertemplate="trial %{customdata[0]} (%{customdata[1]}): predicted %{x:.3g}, "
                          f"measured %{{y:.3g}} {unit}, error %{{customdata[2]}}<extra></extra>"))
    fig.update_layout(**base_layout(
        height=420, xaxis=axis(f"predicted makespan ({unit})", **both),
        yaxis=axis(f"measured makespan ({unit})", **both)))
    return fig


def fig_json(fig: go.Figure | None) -> str | None:
    """Figure JSON safe to put inside <script type="application/json">."""
    if fig is None:
        return None
    s = fig.to_json()
    return s.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")




# ---- cost vs deadline (tuner.search.constraints) ---------------------------------------------
def deadline_envelope(points: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    """The cheapest $ for each deadline: from (makespan_s, cost_usd) points, the steps
    (deadline_s, cheapest cost of a plan finishing by then) where that cost drops: the lower
    envelope a `--deadline` search picks from."""
    out: list[tuple[float, float]] = []
    best = math.inf
    for m, c in sorted(points):
        if c < best:
            best = c
            out.append((m, c))
    return out


def deadline_figure(trials: dict[int, TrialRecord], colors: dict[str, str],
                    deadline_s: float | None = None) -> go.Figure | None:
    """Cheapest job $ for each deadline, one step line per GPU type and one over all of them
    (the answer of `--deadline D` for every D); a dashed line at the search's own deadline."""
    feasible = [t for t in trials.values() if t.feasible]
    if len(feasible) < 2:
        return None
    unit, div = duration_unit(max(t.makespan_s for t in feasible))
    fig = go.Figure()
    groups = {name: [t for t in feasible if t.gpu == name]
              for name in dict.fromkeys([*colors, *(t.gpu for t in feasible)])}
    groups = {k: v for k, v in groups.items() if v}
    end = max(t.makespan_s for t in feasible)
    usd = usd_hover(t.cost_usd for t in feasible)
    for label, ts, color, width in (
            *((esc(n), ts, colors.get(n, PALETTE[-1]), 2) for n, ts in groups.items()),
            ("any GPU", feasible, "rgba(128,128,128,0.9)", 3)):
        env = deadline_envelope((t.makespan_s, t.cost_usd) for t in ts)
        xs = [m / div for m, _ in env] + [end / div]
        ys = [c for _, c in env] + [env[-1][1]]
        fig.add_trace(go.Scatter(
            mode="lines+markers", name=label, x=xs, y=ys,
            line=dict(color=color, shape="hv", width=width, dash="dot" if width > 2 else None),
            marker=dict(size=[7] * len(env) + [0], color=color),
            hovertemplate=f"deadline %{{x:.3g}} {unit}: cheapest $%{{y:{usd}}}<extra>{label}"
                          "</extra>"))
    xs = [t.makespan_s / div for t in feasible]
    ys = [t.cost_usd for t in feasible]
    if deadline_s is not None:
        xs.append(deadline_s / div)
        # a shape takes the data value on a log axis, an annotation its log10: placed apart
        fig.add_vline(x=deadline_s / div, line=dict(color="#e15759", dash="dash", width=1.5))
        fig.add_annotation(x=on_axis(deadline_s / div, spans_decades(xs)), xref="x", y=1,
                           yref="paper", yanchor="bottom", text="--deadline", showarrow=False)
    fig.update_layout(**base_layout(
        xaxis=axis(f"deadline ({unit})", **scale(xs)),
        yaxis=axis("cheapest job cost (USD)", **scale(ys, usd=True)),
        legend=dict(bgcolor="rgba(0,0,0,0)", title=dict(text="GPU")),
        height=420,
    ))
    return fig
