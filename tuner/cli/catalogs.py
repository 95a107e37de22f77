"""Catalog and workload commands: `tuner gpus`, `tuner models`, `tuner workload stats`."""

from __future__ import annotations

import json
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
    SkipOpt,
    app,
    fmt_gib,
    load_gpu_catalog,
    out,
    read_workload,
    workload_app,
)


# ---- catalogs ---------------------------------------------------------------------------------
@app.command()
def gpus(gpu_file: GpuFileOpt = None, price: PriceOpt = None, as_json: JsonOpt = False) -> None:
    """List the GPU catalog: specs and on-demand prices with their source and date.

    Example: tuner gpus --price A10=0.75
    """
    import dataclasses

    cat = load_gpu_catalog(gpu_file, price)
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
                  f"PCIe{g.pcie_gen} {g.host_link_gbps:g}",
                  f"{g.nvlink_gbps:g}" if g.nvlink_gbps else "—", f"{g.price_usd_per_h:.2f}",
                  g.price_date or "—", f"[{i}]",
                  f"${g.vasuki_usd_per_fp32_gflop_per_w:g}" if g.vasuki_usd_per_fp32_gflop_per_w else "—")
    out.print(t)
    for i, g in enumerate(cat.values(), 1):
        out.print(f"[dim][{i}] {g.name}: {g.price_source}[/]", highlight=False)


@app.command()
def models(as_json: JsonOpt = False) -> None:
    """List the model catalog (any Hugging Face config.json path also works as --model)."""
    import dataclasses

    from tuner.core.catalog import load_models

    cat = load_models()
    if as_json:
        print(json.dumps({n: dataclasses.asdict(m) | {"num_params": m.num_params}
                          for n, m in cat.items()}, indent=2))
        return
    t = Table(title="Model catalog")
    for col in ("model", "params", "layers", "hidden", "heads/kv", "ffn", "vocab",
                "weights 16-bit", "KV/token 16-bit", "HF id"):
        t.add_column(col, no_wrap=col in ("model", "params", "HF id"))
    for m in cat.values():
        t.add_row(m.name, (f"{m.num_params / 1e9:.2f} B" if m.num_params > 1e8 else f"{m.num_params / 1e6:.2f} M"), str(m.num_layers), str(m.hidden_size),
                  f"{m.num_heads}/{m.num_kv_heads}", str(m.intermediate_size), str(m.vocab_size),
                  fmt_gib(m.weight_bytes(16)), f"{m.kv_bytes_per_token(16) / 1024:g} KiB", m.hf_id)
    out.print(t)


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
    st = workload_stats(read_workload(file, spec, skip_invalid, output_dist))
    if as_json:
        print(json.dumps(st, indent=2, default=float))
        return
    t = Table(title=f"{escape(str(file))}: {st['count']} requests")
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
    out.print(f"prompt lengths: {st['tokenizer']}; output lengths: {st['output_source']}",
              markup=False)


