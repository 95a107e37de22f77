"""Catalog and workload commands: `tuner gpus`, `tuner models`, `tuner workload stats`."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from tuner.cli.app import (
    DistOpt,
    GpuFileOpt,
    JsonOpt,
    PriceOpt,
    ProviderOpt,
    SkipOpt,
    app,
    fmt_gib,
    fmt_s,
    load_gpu_catalog,
    out,
    read_workload,
    workload_app,
)


# ---- catalogs ---------------------------------------------------------------------------------
@app.command()
def gpus(gpu_file: GpuFileOpt = None, price: PriceOpt = None, provider: ProviderOpt = None,
         spot: Annotated[bool, typer.Option("--spot", help="With --provider: the instances' "
                         "spot / interruptible prices and published interruption rates "
                         "instead of on-demand.")] = False,
         as_json: JsonOpt = False) -> None:
    """List the GPU catalog: specs and on-demand prices with their source and date; with
    --provider, that provider's instances and billing instead.

    Example: tuner gpus --price A10=0.75

    Example: tuner gpus --provider aws
    """
    import dataclasses

    cat = load_gpu_catalog(gpu_file, price, provider, spot)
    if provider is not None:
        _provider_instances(cat, provider, as_json, gpu_file)
        return
    if as_json:
        print(json.dumps({n: dataclasses.asdict(g) for n, g in cat.items()}, indent=2))
        return
    t = Table(title="GPU catalog (dense figures; prices are snapshots: override with --price)")
    for col in ("GPU", "GiB", "BF16 TF/s", "FP8 TF/s", "HBM GB/s", "host link GB/s", "NVLink GB/s",
                "$/GPU-h", "price date", "src", "Vasuki $/FP32 GFLOP/W"):
        t.add_column(col, no_wrap=col == "GPU")
    for i, g in enumerate(cat.values(), 1):
        t.add_row(g.name, f"{g.memory_gib:g}", f"{g.bf16_tflops:g}",
                  f"{g.fp8_tflops:g}" if g.fp8_tflops else "—", f"{g.hbm_gbps:g}",
                  _host_link(g),
                  _nvlink(g), f"{g.price_usd_per_h:.2f}",
                  g.price_date or "—", f"[{i}]",
                  f"${g.vasuki_usd_per_fp32_gflop_per_w:g}" if g.vasuki_usd_per_fp32_gflop_per_w else "—")
    out.print(t)
    for i, g in enumerate(cat.values(), 1):
        out.print(f"[dim][{i}] {g.name}: {g.price_source}[/]", highlight=False)


def _nvlink(g) -> str:
    """'450', '56 pairs' where bridges join pairs only (the engines' custom all-reduce then
    stops at 2 GPUs), or '—' without NVLink."""
    if not g.nvlink_gbps:
        return "—"
    return f"{g.nvlink_gbps:g}" + ("" if g.nvlink_all_pairs else " pairs")


#: one-way GB/s of a x16 link by PCIe generation (2 x per generation from Gen4's 32)
_PCIE_X16_GBPS = {4: 32.0, 5: 64.0, 6: 128.0}


def _host_link(g) -> str:
    """'PCIe5 50', or 'C2C 450' where the host link is faster than any PCIe x16 of its
    generation (GB200's NVLink-C2C to its Grace CPU)."""
    if g.host_link_gbps > _PCIE_X16_GBPS.get(g.pcie_gen, float("inf")):
        return f"C2C {g.host_link_gbps:g}"
    return f"PCIe{g.pcie_gen} {g.host_link_gbps:g}"


def _fmt_count(n: float) -> str:
    return f"{n / 1e9:.2f} B" if n >= 1e8 else f"{n / 1e6:.2f} M"


def _model_row(m) -> dict:
    """One catalog model as plain data: the spec's fields plus derived counts (for --json)."""
    import dataclasses

    return dataclasses.asdict(m) | {
        "num_params": m.num_params,
        "active_params_per_token": m.active_params_per_token,
        "is_moe": m.is_moe,
        "context_tokens": m.max_position,
        # every layer holding every token; sliding-window layers stop growing at the window
        "kv_bytes_per_token_16bit": m.kv_bytes_per_token(16),
        "kv_bytes_per_token_16bit_past_window": m.kv_bytes_per_token(
            16, layers=m.num_full_attention_layers),
        "weight_bytes_16bit": m.weight_bytes(16),
        # as the published checkpoint stores them (quantization_config): what vLLM loads
        "weight_bytes_checkpoint": m.weight_bytes(m.checkpoint_bits),
        # a VLM's vision tower (16-bit), loaded beside the decoder for a text job too: the
        # table's weights figure is weight_bytes_checkpoint + this
        "vision_weight_bytes": m.vision_weight_bytes,
    }


def _attention_text(m) -> str:
    if m.is_mla:
        text = f"MLA {m.num_heads}h, latent {m.kv_lora_rank}+{m.qk_rope_head_dim}"
    else:
        text = f"{m.num_heads}/{m.num_kv_heads}x{m.head_dim}"
    if m.num_window_layers:
        text += f", window {m.sliding_window} on {m.num_window_layers}/{m.num_layers}"
    if m.is_sparse_attention:
        text += f", sparse top-{m.index_topk}"
    return text


def _weights_text(m) -> tuple[str, str | None]:
    """The checkpoint's weights as vLLM loads them (16-bit unless quantization_config says), as
    a short cell ('12.8 GiB mxfp4') and the scheme's full description where the cell leaves
    some out (None otherwise): a footnote, since the full text (gpt-oss's modules kept at 16
    bits) wraps a table column into a dozen lines."""
    text = fmt_gib(m.weight_bytes(m.checkpoint_bits) + m.vision_weight_bytes)  # + a VLM's tower
    how = m.checkpoint_quantization
    if m.checkpoint_bits == 16:
        return text, None
    if not how:  # quantized at load, or an unnamed scheme: its bits say it
        return f"{text} {m.checkpoint_bits}-bit", None
    # the scheme's name: the text before its first detail ("fp8, blocks 128x128" -> "fp8")
    short = re.split(r",| \(", how, maxsplit=1)[0].strip() or f"{m.checkpoint_bits}-bit"
    return f"{text} {short}", (how if how != short else None)


def _kv_text(m) -> str:
    full = m.kv_bytes_per_token(16) / 1024
    if not m.num_window_layers:
        return f"{full:.4g} KiB"
    past = m.kv_bytes_per_token(16, layers=m.num_full_attention_layers) / 1024
    return f"{full:.4g} KiB ({past:.4g} past {m.sliding_window})"


def _provider_instances(cat: dict, provider: str, as_json: bool, gpu_file=None) -> None:
    """`tuner gpus --provider NAME`: the provider's instances of every catalog GPU it offers."""
    offered = {n: g for n, g in cat.items()
               if g.billing is not None and g.billing.provider.lower() == provider.lower()}
    if not offered:
        from tuner.core.errors import TunerError

        raise TunerError(f"{provider} has no instance of a catalog GPU in the price table at "
                         "the price asked for (spot prices: add spot_usd_per_h in a --gpu-file "
                         "'providers:' section).")
    if as_json:
        import dataclasses

        print(json.dumps({n: {"billing": dataclasses.asdict(g.billing),
                              "usd_per_gpu_h": g.price_usd_per_h, "price_source": g.price_source,
                              "price_date": g.price_date} for n, g in offered.items()},
                         indent=2))
        return
    first = next(iter(offered.values()))
    b = first.billing
    rates = None
    from tuner.core.pricing import get_provider, load_providers

    prov = get_provider(provider, load_providers(gpu_file))
    # each row's own date (Billing.date joins the dates of all of a GPU's shapes)
    row_dates = {r.name: r.date for r in prov.instances}
    if b.spot:  # the published spot interruption rate of each instance shape
        rates = {i.name: prov.interruption_rate(i.name) for g in offered.values()
                 for i in g.billing.instances}
    t = Table(title=f"{provider}{' spot' if b.spot else ''} instances (billed "
              f"{b.granularity_name()}{f', minimum {b.minimum_s} s' if b.minimum_s else ''}; "
              "prices are snapshots: override with --price, or a --gpu-file providers: section)")
    cols = ["instance", "GPU", "GPUs", "vCPUs", "RAM GiB", "$/h", "$/GPU-h", "price date"]
    for col in cols + (["interruptions (published)"] if rates is not None else []):
        t.add_column(col, justify="left" if col in ("instance", "GPU") else "right")
    for n, g in offered.items():
        # shapes not rented on-demand (providers.yaml on_demand: false): listed, marked "*"
        for i in sorted(g.billing.instances + g.billing.not_on_demand,
                        key=lambda i: (i.gpus, i.usd_per_h)):
            name = f"{i.name} *" if i in g.billing.not_on_demand else i.name
            row = [name, n, str(i.gpus), str(i.vcpus or "—"),
                   f"{i.ram_gib:g}" if i.ram_gib else "—", f"{i.usd_per_h:,.4g}",
                   f"{i.usd_per_h / i.gpus:,.3f}",
                   row_dates.get(i.name) or g.billing.date or "—"]
            if rates is not None:
                r = rates.get(i.name)
                row.append("none: --interruption-rate" if r is None else
                           f"{r.published} a month" if r.published else f"{r.per_h:g}/h")
            t.add_row(*row)
    out.print(t)
    if rates is not None:
        src = next((r.source for r in rates.values() if r is not None), None)
        out.print("--spot: the expected makespan and $ count interruptions at these rates "
                  "(per machine-hour: tuner.core.pricing.advisor_bucket_rate)"
                  + (f"; {src}" if src else ""), markup=False)
    out.print("A plan rents whole instances (each tensor-parallel group inside one) and pays "
              "the run time rounded up to the billing granularity.", markup=False)
    for src in dict.fromkeys(g.billing.not_on_demand_source for g in offered.values()
                             if g.billing.not_on_demand):
        out.print(f"* not rented on-demand, so on-demand plans leave it out (--spot prices it "
                  f"where the table has a spot price; $/h: the list price): {src}", markup=False)
    for n, g in offered.items():
        out.print(f"[dim]{n}: {escape(g.price_source)}[/]", highlight=False)


_NO_WRAP = ("model", "params", "active", "context")
# ids and paths: folded over two lines where narrow, never cut to "meta-llama/…"
_FOLD = ("HF id", "config from")
_DROPPED_FIRST = ("config from", "HF id")  # where the terminal is too narrow for every column


def _model_columns(titles: tuple[str, ...], rows: list[list[str]], width: int) -> list[int]:
    """The columns of `tuner models` that fit `width`, as indices into `titles`: every column
    at its narrowest (no-wrap ones whole, wrapping ones at their longest word, ids on two
    lines), dropping `_DROPPED_FIRST` in order while they do not fit."""
    from rich.cells import cell_len

    from tuner.cli.tables import table_width

    def narrowest(i: int) -> int:
        cells = [titles[i], *(r[i] for r in rows)]
        if titles[i] in _NO_WRAP:
            return max(cell_len(c) for c in cells)
        words = max(cell_len(w) for c in cells for w in c.split())
        if titles[i] in _FOLD:
            return max(words if c is titles[i] else -(-cell_len(c) // 2)
                       for c in cells)
        return words

    shown = list(range(len(titles)))
    for title in _DROPPED_FIRST:
        if table_width(narrowest(i) for i in shown) <= width:
            break
        shown.remove(titles.index(title))
    return shown


@app.command()
def models(
    model: Annotated[str | None, typer.Option(
        "--model", "-m", help="Show one model: a catalog name, a Hugging Face id, or a path to "
        "a config.json / model folder.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """List the model catalog: total and active parameters, KV bytes per token, context length
    and where each shape comes from. Any Hugging Face id or config.json path also works as
    --model.

    Example: tuner models -m mixtral-8x7b
    """
    from tuner.core.catalog import get_model, load_models, shape_note

    cat = load_models()
    if model is not None:
        spec = get_model(model, cat)
        cat = {spec.name: spec}
    # one model: what its shape leaves out or assumes (simulate and search print the same)
    note = shape_note(next(iter(cat.values()))) if model is not None else None
    if as_json:
        rows = {n: _model_row(m) for n, m in cat.items()}
        if model is not None:
            next(iter(rows.values()))["shape_note"] = note
        print(json.dumps(rows, indent=2))
        return
    titles = ("model", "params", "active", "layers", "heads/kv x dim", "experts", "context",
              "weights (checkpoint)", "KV/token 16-bit", "HF id", "config from")
    rows: list[list[str]] = []
    notes: list[str] = []  # the weights' full quantization schemes, numbered in the cells
    for m in cat.values():
        experts = (f"{m.num_experts} top-{m.experts_per_token}"
                   + (f" +{m.num_shared_experts}" if m.num_shared_experts else "")
                   if m.is_moe else "—")
        source = m.source.removeprefix("catalog (").removesuffix(")") \
            if m.source.startswith("catalog (") else m.source
        weights, scheme = _weights_text(m)
        if scheme is not None:
            notes.append(f"{m.name} weights: {scheme}")
            weights += f" [{len(notes)}]"
        rows.append([m.name, _fmt_count(m.num_params), _fmt_count(m.active_params_per_token),
                     str(m.num_layers), _attention_text(m), experts, f"{m.max_position:,}",
                     weights, _kv_text(m), m.hf_id or "—", source])
    shown = _model_columns(titles, rows, out.width)
    t = Table(title="Model catalog" if model is None else f"Model {escape(model)}")
    for i in shown:
        t.add_column(titles[i], no_wrap=titles[i] in _NO_WRAP,
                     overflow="fold" if titles[i] in _FOLD else "ellipsis")
    for row in rows:
        t.add_row(*(escape(row[i]) for i in shown))
    out.print(t)
    left = [titles[i] for i in range(len(titles)) if i not in shown]
    if left:
        out.print(f"{' and '.join(left)}: too wide for this terminal ({out.width} columns); "
                  "`tuner models -m NAME` or --json shows "
                  f"{'them' if len(left) > 1 else 'it'}.", markup=False, highlight=False)
    for i, text in enumerate(notes, 1):
        out.print(escape(f"[{i}] {text}"), highlight=False)
    if note:
        out.print(escape(note), highlight=False)
    if model is None:
        out.print("[dim]active = parameters one token uses (MoE: its top-k experts); Gemma-3: "
                  "params count the text decoder, weights its vision tower too. Any Hugging "
                  "Face id or config.json path works as --model.[/]")


@workload_app.command("stats")
def workload_stats_cmd(
    file: Annotated[Path, typer.Argument(help="Workload file (JSONL or CSV).")],
    model: Annotated[str | None, typer.Option("--model", "-m", help="Use this model's tokenizer "
                     "when it is available offline.")] = None,
    skip_invalid: SkipOpt = False, output_dist: DistOpt = None, as_json: JsonOpt = False,
) -> None:
    """Count, length percentiles and prompt:decode ratio of a workload.

    Example: tuner workload stats examples/arxiv.jsonl
    """
    from tuner.core.catalog import get_model
    from tuner.core.workload import workload_stats

    spec = get_model(model) if model else None
    w = read_workload(file, spec, skip_invalid, output_dist)
    st = workload_stats(w)
    span_s = w.arrival_span_s
    # arrival times, which `tuner simulate` replays (None: an offline job, all at t = 0)
    st["arrivals"] = None if w.arrival_s is None else {
        "requests": len(w), "span_s": span_s,
        "mean_rate_req_s": (len(w) - 1) / span_s if span_s > 0 else None}
    if as_json:
        print(json.dumps(st, indent=2, default=float))
        return
    # the workload's source: "<stdin>" for `-`, as --json and a study name it
    t = Table(title=f"{escape(st['source'])}: {st['count']:,} request"
                    f"{'' if st['count'] == 1 else 's'}")
    t.add_column("")
    for c in ("mean", "p50", "p90", "p99", "min", "max", "total"):
        t.add_column(c, justify="right")
    for name in ("prompt", "output"):
        s = st[name]
        t.add_row(f"{name} tokens", *(f"{s[k]:.0f}" for k in ("mean", "p50", "p90", "p99", "min", "max")),
                  f"{st[f'total_{name}_tokens']:,}")
    out.print(t)
    out.print(f"P:D ratio {st['pd_ratio']:.2f} (total prompt / total output), median per request "
              f"{st['pd_ratio_median']:.2f}")
    if st["prefix_groups"]:
        out.print(f"shared prefixes: {st['prefix_groups']:,} group{'' if st['prefix_groups'] == 1 else 's'} over "
                  f"{st['prefixed_requests']:,} requests; prefix-sharing ratio "
                  f"{st['prefix_sharing_ratio']:.1%} of prompt tokens (each prefix computed "
                  "once, the other copies served by a prefix cache)")
    out.print(f"prompt lengths: {st['tokenizer']}; output lengths: {st['output_source']}",
              markup=False)
    arr = st["arrivals"]
    out.print("arrivals: none (an offline job: every request at t = 0)" if arr is None else
              f"arrivals: {arr['requests']:,} requests over {fmt_s(arr['span_s'])}"
              + (f", {arr['mean_rate_req_s']:.3g} req/s on average" if arr["mean_rate_req_s"]
                 else "") + "; `tuner simulate` replays them (--ignore-arrivals: all at t = 0)",
              markup=False)


