"""The `tuner` command line (typer). Every user error is one line on stderr and exit code 2."""

from __future__ import annotations

import csv
import json
import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from tuner.errors import TunerError

app = typer.Typer(
    help="Pick the GPU type and serving settings that finish an offline LLM batch job fastest "
    "or cheapest, before renting GPUs.\n\nExample:\n\n  tuner search --workload "
    "examples/arxiv.jsonl --model llama-3-8b --gpus A10,A40",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
workload_app = typer.Typer(help="Inspect workload files.", no_args_is_help=True)
app.add_typer(workload_app, name="workload")

# Piped output gets a fixed, wide layout so tables stay readable in logs and CI.
out = Console(width=None if sys.stdout.isatty() else 160)
err = Console(stderr=True)


def tool_version() -> str:
    try:
        return version("tuner")
    except PackageNotFoundError:
        return "0+unknown"


# ---- shared option types --------------------------------------------------------------------
WorkloadOpt = Annotated[Path, typer.Option("--workload", "-w", help="JSONL (OpenAI batch, "
                        "{prompt,max_tokens} or {prompt_tokens,output_tokens}) or CSV trace.")]
ModelOpt = Annotated[str, typer.Option("--model", "-m", help="Catalog name (`tuner models`) or "
                     "path to a Hugging Face config.json.")]
PriceOpt = Annotated[list[str] | None, typer.Option("--price", help="Override a GPU's $/h, "
                     "e.g. --price A10=0.75 (repeatable).")]
GpuFileOpt = Annotated[Path | None, typer.Option("--gpu-file", help="YAML with more GPUs or "
                       "overrides (same fields as `tuner gpus --json`).")]
SkipOpt = Annotated[bool, typer.Option("--skip-invalid", help="Skip malformed workload lines "
                    "(counted) instead of stopping at the first.")]
DistOpt = Annotated[str | None, typer.Option("--output-dist", help="Output lengths for requests "
                    "without max_tokens: fixed:256, uniform:64:512, normal:M:S, lognormal:MED:SIGMA, "
                    "trace:FILE.csv.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable JSON on stdout.")]


def _gpus(gpu_file: Path | None, prices: list[str] | None):
    from tuner.catalog import apply_prices, load_gpus, parse_price_overrides

    return apply_prices(load_gpus(gpu_file), parse_price_overrides(prices))


def _workload(path: Path, model, skip_invalid: bool, output_dist: str | None):
    from tuner.workload import load_workload

    w = load_workload(path, model=model, skip_invalid=skip_invalid, output_dist=output_dist)
    if w.skipped:
        err.print(f"[yellow]skipped {w.skipped} invalid line(s) in {escape(str(path))}[/]",
                  soft_wrap=True)
    return w


def _fmt_s(seconds: float) -> str:
    from tuner.results import fmt_duration

    return fmt_duration(seconds)


def _gib(b: float) -> str:
    return f"{b / 1024**3:.1f} GiB"


# ---- catalogs ---------------------------------------------------------------------------------
@app.command()
def gpus(gpu_file: GpuFileOpt = None, price: PriceOpt = None, as_json: JsonOpt = False) -> None:
    """List the GPU catalog: specs and on-demand prices with their source and date.

    Example: tuner gpus --price A10=0.75
    """
    import dataclasses

    cat = _gpus(gpu_file, price)
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

    from tuner.catalog import load_models

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
                  _gib(m.weight_bytes(16)), f"{m.kv_bytes_per_token(16) / 1024:g} KiB", m.hf_id)
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
    from tuner.catalog import get_model
    from tuner.workload import workload_stats

    spec = get_model(model) if model else None
    st = workload_stats(_workload(file, spec, skip_invalid, output_dist))
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


# ---- simulate ---------------------------------------------------------------------------------
def _memory_table(plan, gpu_name: str, title: str) -> Table:
    t = Table(title=title)
    t.add_column("per GPU")
    t.add_column(gpu_name, justify="right")
    t.add_row("usable (memory x utilisation)", _gib(plan.usable_bytes))
    t.add_row("weights", _gib(plan.weight_bytes))
    t.add_row("activations (token budget) ", _gib(plan.activation_bytes))
    t.add_row("runtime (CUDA context, graphs)", _gib(plan.runtime_overhead_bytes))
    t.add_row("KV cache", _gib(plan.kv_bytes))
    t.add_row("KV capacity", f"{plan.kv_capacity_tokens:,} tokens")
    t.add_row("max concurrent requests (mean length)", f"{plan.max_concurrent_requests:.1f}")
    return t


@app.command()
def simulate(
    workload: WorkloadOpt,
    model: ModelOpt,
    gpu: Annotated[str, typer.Option("--gpu", "-g", help="GPU type (`tuner gpus`).")],
    tp: Annotated[int, typer.Option(help="Tensor-parallel degree.")] = 1,
    dp: Annotated[int, typer.Option(help="Data-parallel replicas.")] = 1,
    scheduler: Annotated[str, typer.Option(help="vllm | vllm-v0 | sarathi (+ -noevict).")] = "vllm",
    chunk_size: Annotated[int, typer.Option(help="Token budget per step (vLLM max_num_batched_tokens).")] = 8192,
    max_running: Annotated[int, typer.Option(help="R_max (vLLM max_num_seqs).")] = 256,
    weight_bits: Annotated[int, typer.Option(help="16, 8 or 4.")] = 16,
    kv_bits: Annotated[int, typer.Option(help="16, 8 or 4.")] = 16,
    gpu_memory_utilization: Annotated[float, typer.Option(help="vLLM gpu_memory_utilization.")] = 0.9,
    ordering: Annotated[str, typer.Option(help="fcfs | shortest-prompt | longest-output | binpack "
                        "(Vasuki) | blend (BlendServe).")] = "fcfs",
    block_size: Annotated[int, typer.Option(help="KV block size in tokens.")] = 16,
    kv_offload_layers: Annotated[int, typer.Option(help="KV-cache layers kept in host RAM, moved "
                                 "over PCIe each iteration (Vasuki).")] = 0,
    weight_offload_fraction: Annotated[float, typer.Option(help="Share of weights in host RAM, "
                                       "streamed every iteration (vLLM cpu_offload_gb).")] = 0.0,
    attention_on_cpu: Annotated[bool, typer.Option("--attention-on-cpu/--attention-on-gpu",
                                help="Decode attention of offloaded KV layers on the CPU.")] = False,
    cpu_threads_intra: Annotated[int, typer.Option(help="CPU intra-op threads (0: LM-Offload "
                                 "Alg. 3 chooses).")] = 0,
    cpu_threads_inter: Annotated[int, typer.Option(help="CPU inter-op threads (0: LM-Offload "
                                 "Alg. 3 chooses).")] = 0,
    profile: Annotated[Path | None, typer.Option(help="Profile or fit folder (`tuner profile`, "
                       "`tuner fit`): measured cost model instead of the spec-sheet roofline.")] = None,
    profile_mode: Annotated[str, typer.Option(help="auto | measured | transfer | roofline.")] = "auto",
    exact: Annotated[bool, typer.Option(help="Step-by-step scheduler (no skip-ahead); same "
                     "result, slower.")] = False,
    timeline: Annotated[Path | None, typer.Option(help="Write a per-iteration timeline CSV.")] = None,
    price: PriceOpt = None, gpu_file: GpuFileOpt = None, skip_invalid: SkipOpt = False,
    output_dist: DistOpt = None, as_json: JsonOpt = False,
) -> None:
    """Simulate one serving config on a workload: makespan, $, memory plan, physical limit.

    Example: tuner simulate -w examples/arxiv.jsonl -m llama-3-8b -g A10 --chunk-size 2048
    """
    from tuner.catalog import get_gpu, get_model
    from tuner.config import ServingConfig
    from tuner.simulator import simulate as run_sim

    cat = _gpus(gpu_file, price)
    g = get_gpu(gpu, cat)
    spec = get_model(model)
    w = _workload(workload, spec, skip_invalid, output_dist)
    config = ServingConfig(gpu=g.name, tp=tp, dp=dp, scheduler=scheduler, chunk_size=chunk_size,
                           max_running=max_running, weight_bits=weight_bits, kv_bits=kv_bits,
                           gpu_memory_utilization=gpu_memory_utilization, ordering=ordering,
                           block_size=block_size, kv_offload_layers=kv_offload_layers,
                           weight_offload_fraction=weight_offload_fraction,
                           attention_on_cpu=attention_on_cpu, cpu_threads_intra=cpu_threads_intra,
                           cpu_threads_inter=cpu_threads_inter).validate()
    from tuner.simulator import default_cost_model

    cm = default_cost_model(spec, g, config, profile, profile_mode=profile_mode) if profile else None
    res = run_sim(w, spec, g, config, cm, timeline=timeline is not None, exact=exact)
    if timeline is not None:
        _write_timeline(timeline, res.timeline)
    summary = res.summary()
    if as_json:
        from tuner.deploy import _jsonable

        print(json.dumps(_jsonable(summary), indent=2))
        return
    t = Table(title=f"{spec.name} on {g.name} x{config.num_gpus}: {len(w)} requests")
    t.add_column("figure")
    t.add_column("value", justify="right")
    t.add_row("makespan", f"{_fmt_s(res.makespan_s)}  ({res.makespan_s:,.0f} s)")
    t.add_row("physical limit T_o", f"{_fmt_s(res.lower_bound_s)}  (makespan is "
              f"{100 * res.lower_bound_s / res.makespan_s:.0f} % of the limit's speed)")
    t.add_row("job cost", f"${res.cost_usd:,.2f}  at ${res.price_usd_per_h:.2f}/GPU-h")
    t.add_row("$ per 1k requests", f"${res.usd_per_1k_requests:.3f}")
    t.add_row("throughput", f"{res.throughput_tok_s:,.0f} output tok/s, {res.qps:.2f} req/s")
    t.add_row("QPS per $/h", f"{res.qps_per_usd_per_h:.3f}")
    if res.vasuki_cost_metric is not None:
        t.add_row("Vasuki cost metric (QPS / $ per FP32 GFLOP/W)", f"{res.vasuki_cost_metric:.4f}")
    t.add_row("iterations", f"{res.iterations:,}")
    t.add_row("preemptions (recompute)", f"{res.preemptions:,}")
    t.add_row("peak / mean KV use", f"{100 * res.peak_kv_fraction:.0f} % / {100 * res.mean_kv_fraction:.0f} %")
    out.print(t)
    out.print(_memory_table(res.memory, g.name, "Memory plan"))
    if summary.get("offload"):
        out.print(_offload_table(summary["offload"], g.name))
    out.print(f"cost model: {res.provenance}", style="dim", markup=False)


def _offload_table(o: dict, gpu_name: str) -> Table:
    """Why offloading helps or not: capacity gained vs transfer time against the overlap budget."""
    t = Table(title=f"Offloading on {gpu_name} (per GPU)")
    t.add_column("figure")
    t.add_column("value", justify="right")
    mem = o.get("memory", {})
    if mem:
        t.add_row("weights GPU / host", f"{_gib(mem.get('weights_gpu_bytes', 0))} / "
                  f"{_gib(mem.get('weights_host_bytes', 0))}")
        t.add_row("KV GPU / host", f"{_gib(mem.get('kv_gpu_bytes', 0))} / "
                  f"{_gib(mem.get('kv_host_bytes', 0))}")
        t.add_row("host RAM used / limit", f"{_gib(mem.get('host_used_bytes', 0))} / "
                  f"{_gib(mem.get('host_limit_bytes', 0))}")
    for key, label, fmt in (
        ("kv_capacity_gain", "KV capacity gain from offload", "x{:.2f}"),
        ("layer_kv_transfer_ms", "one layer's KV transfer (ms)", "{:.3f}"),
        ("layer_exec_ms", "one layer's compute (ms)", "{:.3f}"),
        ("transfer_to_compute_ratio", "transfer / compute", "{:.2f}"),
        ("kv_transfer_s", "KV transfer total (s)", "{:,.1f}"),
        ("kv_overlap_budget_s", "overlap budget (s)", "{:,.1f}"),
        ("kv_stall_s", "KV stall (s)", "{:,.1f}"),
        ("weight_stall_s", "weight streaming stall (s)", "{:,.1f}"),
        ("cpu_attention_extra_s", "CPU attention extra (s)", "{:,.1f}"),
        ("kv_quantize_s", "KV (de)quantization (s)", "{:,.1f}"),
        ("stall_fraction", "share of time stalled", "{:.1%}"),
    ):
        v = o.get(key)
        if isinstance(v, int | float):
            t.add_row(label, fmt.format(v))
    mo = o.get("max_overlapped_layers")
    if isinstance(mo, dict):
        t.add_row("layers fully overlapped, median step (Alg. 1 / Alg. 2 / exhaustive)",
                  f"{mo.get('alg1_median')} / {mo.get('alg2_median')} / {mo.get('exact_median')}")
    th = o.get("cpu_threads")
    if isinstance(th, dict) and o.get("attention_on_cpu"):
        t.add_row("CPU threads intra / inter", f"{th.get('intra')} / {th.get('inter')} "
                  f"({th.get('chosen_by')}, {th.get('cores')} cores)")
    if o.get("transfer_model"):
        t.add_row("transfer model", str(o["transfer_model"]))
    return t


def _write_timeline(path: Path, tl: dict) -> None:
    from tuner.deploy import write_atomic

    cols = list(tl)
    rows = zip(*(tl[c].tolist() for c in cols), strict=True)
    import io

    buf = io.StringIO()
    wr = csv.writer(buf)
    wr.writerow(cols)
    wr.writerows(rows)
    if path.parent.exists() and not path.parent.is_dir():
        raise TunerError(f"Cannot write timeline {path}: {path.parent} is a file, not a folder.")
    try:
        write_atomic(path, buf.getvalue())
    except OSError as exc:
        raise TunerError(f"Cannot write timeline {path}: {exc.strerror or exc}.") from None


# ---- search -----------------------------------------------------------------------------------
@app.command()
def search(
    workload: WorkloadOpt,
    model: ModelOpt,
    gpus_: Annotated[str, typer.Option("--gpus", help="Comma-separated GPU types, e.g. A10,A40.")],
    space: Annotated[Path | None, typer.Option(help="Search space YAML (default: "
                     "search_spaces/default.yaml).")] = None,
    n_trials: Annotated[int, typer.Option(help="Trials to complete (identical configs are "
                        "simulated once).")] = 300,
    timeout: Annotated[float | None, typer.Option(help="Stop after this many seconds.")] = None,
    sampler: Annotated[str, typer.Option(help="auto | tpe | nsga2 (Optuna samplers; auto: TPE "
                       "up to 300 trials, NSGA-II beyond).")] = "auto",
    seed: Annotated[int, typer.Option(help="Sampler seed (same seed, same trials).")] = 0,
    exhaustive: Annotated[bool, typer.Option(help="Simulate every point of the space on the "
                          "full workload (a reference to check the search; ignores "
                          "--n-trials).")] = False,
    sample_fraction: Annotated[float | None, typer.Option(help="Multi-fidelity: share of the "
                               "workload each candidate is simulated on first; promising ones "
                               "go on to the full workload (default 0.125 from 256 requests "
                               "up; 1: full workload only).")] = None,
    workers: Annotated[int, typer.Option(help="Local worker processes (shared study in "
                       "--storage; more machines: `tuner worker`).")] = 1,
    storage: Annotated[str | None, typer.Option(help="Optuna storage URL (default: SQLite "
                       "file OUT/study.db; postgresql://... for many workers).")] = None,
    study: Annotated[str | None, typer.Option(help="Study name (default: WORKLOAD-MODEL).")] = None,
    resume: Annotated[bool, typer.Option(help="Continue an interrupted study.")] = False,
    out_dir: Annotated[Path, typer.Option("--out", help="Output folder for the report, exports "
                       "and study.")] = Path("tuner-out"),
    profile: Annotated[Path | None, typer.Option(help="Profile or fit folder (`tuner profile`, "
                       "`tuner fit`): measured cost models instead of spec-sheet rooflines.")] = None,
    profile_mode: Annotated[str, typer.Option(help="auto | measured | transfer | roofline.")] = "auto",
    price: PriceOpt = None, gpu_file: GpuFileOpt = None, skip_invalid: SkipOpt = False,
    output_dist: DistOpt = None, as_json: JsonOpt = False,
) -> None:
    """Search GPU type x serving knobs for the makespan-vs-$ Pareto front; write an HTML report
    and vLLM configs of the winners.

    Example: tuner search --workload examples/arxiv.jsonl --model llama-3-8b --gpus A10,A40
    """
    from tuner.catalog import get_gpu, get_model
    from tuner.commands.study import SearchProgress, run_local_workers
    from tuner.search import (
        SearchSettings,
        assert_some_gpu_fits,
        check_study_settings,
        default_storage,
        make_sampler,
        prepare_study,
        run_search,
        sample_size,
        sampler_name,
    )
    from tuner.space import load_space

    cat = _gpus(gpu_file, price)
    names = [n.strip() for n in gpus_.split(",") if n.strip()]
    if not names:
        raise TunerError("--gpus needs at least one GPU type, e.g. --gpus A10,A40.")
    chosen = {}
    for n in names:
        g = get_gpu(n, cat)
        chosen[g.name] = g
    spec = get_model(model)
    w = _workload(workload, spec, skip_invalid, output_dist)
    sp = load_space(space)
    assert_some_gpu_fits(w, spec, chosen, sp)
    if n_trials < 1:
        raise TunerError("--n-trials must be >= 1.")
    if workers < 1:
        raise TunerError("--workers must be >= 1.")
    if exhaustive and workers > 1:
        raise TunerError("--exhaustive runs in one process; drop --workers.")
    from tuner.simulator import profile_cost_model_for

    # a bad folder fails now; workers find the folder in the study's metadata
    cost_model_for = profile_cost_model_for(spec, profile, profile_mode=profile_mode,
                                            check_gpu=next(iter(chosen.values())))
    if sample_fraction is not None and not 0 <= sample_fraction <= 1:
        raise TunerError(f"--sample-fraction must be in [0, 1], got {sample_fraction:g}.")
    make_sampler(SearchSettings(sampler=sampler, seed=seed))  # bad --sampler: fail before --out
    _check_writable(out_dir)
    study_name = study or f"{workload.stem}-{spec.name}"
    settings = SearchSettings(n_trials=n_trials, timeout_s=timeout, seed=seed, sampler=sampler,
                              storage=storage or default_storage(out_dir), study_name=study_name,
                              resume=resume, exhaustive=exhaustive,
                              sample_fraction=sample_fraction)
    check_study_settings(settings)  # e.g. study exists without --resume: one line, no progress
    metadata = {"workload": str(workload.resolve()),
                "gpu_file": str(gpu_file.resolve()) if gpu_file else None,
                "skip_invalid": skip_invalid, "output_dist": output_dist,
                "profile": str(profile.resolve()) if profile is not None else None,
                "profile_mode": profile_mode}
    size = sp.size(len(chosen))
    total = size if exhaustive else n_trials
    n_s = sample_size(len(w), sample_fraction)
    sname = sampler_name(settings)
    how = ("every configuration, full workload" if exhaustive else
           f"{n_trials} trials, {sname}, candidates first on a {n_s}-request sample"
           if n_s < len(w) else f"{n_trials} trials, {sname}")
    err.print(f"[bold]Searching[/] {len(w)} requests of {escape(workload.name)} on {spec.name}: "
              f"{', '.join(chosen)} x {', '.join(sp.knobs)} ({size:,} configurations), "
              f"{how}, study {escape(repr(study_name))} in {escape(settings.storage)}"
              + (f", {workers} workers" if workers > 1 else ""))
    with SearchProgress(err, total, disable=as_json) as prog:
        if workers > 1:
            st = prepare_study(w, spec, chosen, sp, settings, metadata=metadata)
            run_local_workers(st, settings.storage, workers, n_trials=n_trials,
                              timeout_s=timeout, seed=seed, progress=prog)
        else:
            st = run_search(w, spec, chosen, sp, settings, on_trial=prog.on_trial,
                            metadata=metadata, cost_model_for=cost_model_for)
    _finish_search(st, w, spec, chosen, out_dir, as_json, cost_model_for=cost_model_for)


def _check_writable(out_dir: Path) -> None:
    from tuner.errors import ensure_writable_dir

    ensure_writable_dir(out_dir, "the search outputs")


def _finish_search(st, w, spec, chosen: dict, out_dir: Path, as_json: bool, *,
                   cost_model_for=None) -> None:
    """Winners, report, exports and results.json of a finished study (`tuner search` and
    `tuner results` both end here)."""
    from reports.html import render_report
    from tuner.config import ServingConfig
    from tuner.deploy import to_json, to_vllm_yaml, write_atomic
    from tuner.report_data import report_extras
    from tuner.results import (
        build_context,
        infeasible_summary,
        search_stats,
        trial_records,
        winners,
    )

    records = trial_records(st)
    feasible = [r for r in records if r["feasible"]]
    if not feasible:
        reasons = infeasible_summary(records)
        if not records:
            raise TunerError(f"Study {st.study_name!r} has no completed trial on the full "
                             "workload yet; run more trials (--resume) or a worker.")
        raise TunerError("Every configuration tried is infeasible: "
                         + "; ".join(f"{n} x {r}" for r, n in list(reasons.items())[:3]))
    by_num = {r["number"]: r for r in records}
    max_len = int((w.prompt_tokens + w.output_tokens).max())
    best, per_gpu = winners(records)
    exports, files = {}, {}
    for which in ("fastest", "cheapest"):
        r = by_num[best[which]]
        cfg = ServingConfig(**r["config"])
        m = r["metrics"]
        header = (f"{which} config found by tuner: predicted makespan {_fmt_s(m['makespan_s'])}, "
                  f"${m['cost_usd']:.2f} for {len(w)} requests ({r['provenance']})")
        text = to_vllm_yaml(cfg, spec, chosen[cfg.gpu], max_model_len=max_len, header=header,
                            kv_capacity_tokens=m["kv_capacity_tokens"])
        exports[f"{which}_vllm_yaml"] = text
        files[f"{which}_vllm_yaml"] = write_atomic(out_dir / f"{which}.vllm.yaml", text)
        files[f"{which}_json"] = write_atomic(
            out_dir / f"{which}.json", to_json(cfg, m, r["memory"], {"trial": r["number"],
                                                                     "provenance": r["provenance"]}))
    gnames = list(chosen)
    question = (f"{Path(w.source).name or 'workload'} ({len(w)} requests) on {spec.name}: "
                f"which of {', '.join(gnames)} finishes fastest, and which cheapest?")
    notes = [f"Prompt lengths: {w.tokenizer}. Output lengths: {w.output_source}."]
    stats = search_stats(st)
    err_stats = stats.get("sampling_error")
    if err_stats:
        notes.append(
            f"Multi-fidelity: {stats['screened_on_sample']} of {stats['configurations']} "
            f"configurations were judged on a {stats.get('sample_requests')}-request stratified "
            f"sample only; the sample's estimate was within "
            f"{100 * err_stats['relative_error']['max']:.1f} % of the full simulation on all "
            f"{err_stats['pairs']} configurations simulated both ways.")
    from tuner.results import offload_verdict

    verdict = offload_verdict(records, chosen)
    ctx = build_context(study=st, records=records, workload=w, model=spec, gpus=chosen,
                        exports=exports, question=question, tool_version=tool_version(), notes=notes)
    ctx["verdicts"] = [verdict] if verdict else []
    ctx.update(report_extras(st, records, w, spec, chosen, out_dir=out_dir,
                             cost_model_for=cost_model_for))
    files["report"] = render_report(ctx, out_dir / "report.html")
    from tuner.deploy import _jsonable

    summary = {
        "study": st.study_name,
        "verdicts": ctx["verdicts"],
        "winners": {k: by_num[v] for k, v in best.items()},
        "best_per_gpu": {g: {k: by_num[v] for k, v in d.items()} for g, d in per_gpu.items()},
        "pareto": [by_num[n] for n in ctx["pareto"]],
        "infeasible": infeasible_summary(records),
        "importances": ctx.get("importances"),
        "search": stats,
        "files": {k: str(v) for k, v in files.items()},
    }
    files["results"] = write_atomic(out_dir / "results.json",
                                    json.dumps(_jsonable(summary), indent=2) + "\n")
    if as_json:
        summary["files"]["results"] = str(files["results"])
        print(json.dumps(_jsonable(summary), indent=2))
        return
    _print_search(records, by_num, best, per_gpu, ctx, files, stats)


def _print_search(records, by_num, best, per_gpu, ctx, files, stats=None) -> None:
    from tuner.results import knob_columns

    def usd(x: float) -> str:
        return f"${x:.2f}" if x >= 1 else f"${x:.4f}"

    knobs = knob_columns([r for r in records if r["feasible"]])

    def config_cell(cfg: dict) -> str:
        return ", ".join(f"{title} {cell(cfg)}" for title, cell in knobs)

    f, c = by_num[best["fastest"]], by_num[best["cheapest"]]
    out.print()
    for v in ctx.get("verdicts") or []:
        out.print(v, markup=False, style="bold")
    out.print(f"[bold green]Fastest:[/] {f['config']['gpu']} — {_fmt_s(f['metrics']['makespan_s'])}, "
              f"{usd(f['metrics']['cost_usd'])}.  [bold green]Cheapest:[/] {c['config']['gpu']} — "
              f"{_fmt_s(c['metrics']['makespan_s'])}, {usd(c['metrics']['cost_usd'])}.")
    t = Table(title="Best config per GPU (why: memory plan -> KV capacity -> concurrency)")
    for col in ("GPU", "goal", "makespan", "$ job", "$/1k req", "config", "KV cap tokens",
                "max conc. req", "peak KV", "preempt", "% of limit"):
        t.add_column(col, justify="left" if col == "config" else "right",
                     no_wrap=col not in ("config",), ratio=1 if col == "config" else None)
    for gpu, d in per_gpu.items():
        for goal in ("fastest", "cheapest"):
            r = by_num[d[goal]]
            m, cfg = r["metrics"], r["config"]
            t.add_row(gpu, goal, _fmt_s(m["makespan_s"]), usd(m["cost_usd"]),
                      f"{m['usd_per_1k_requests']:.3f}", config_cell(cfg),
                      f"{m['kv_capacity_tokens']:,}", f"{m['max_concurrent_requests']:.0f}",
                      f"{100 * m['peak_kv_fraction']:.0f}%", f"{m['preemptions']:,}",
                      f"{100 * m['limit_fraction']:.0f}%")
    out.print(t)
    p = Table(title=f"Pareto front: makespan vs $ ({len(ctx['pareto'])} points)")
    for col in ("trial", "GPU", "makespan", "$ job", *(k for k, _ in knobs)):
        p.add_column(col, justify="right")
    for n in ctx["pareto"]:
        r = by_num[n]
        p.add_row(str(n), r["config"]["gpu"], _fmt_s(r["metrics"]["makespan_s"]),
                  usd(r["metrics"]["cost_usd"]), *(cell(r["config"]) for _, cell in knobs))
    out.print(p)
    imps = ctx.get("importances") or {}
    shown = {o: v["importances"] for o, v in imps.items() if v.get("importances")}
    if shown:
        it = Table(title="Parameter importance (Optuna fANOVA, share of variance)")
        it.add_column("knob")
        for o in shown:
            it.add_column(o, justify="right")
        names = list(dict.fromkeys(k for v in shown.values() for k in v))
        for k in names:
            it.add_row(k, *(f"{100 * v.get(k, 0.0):.0f}%" for v in shown.values()))
        out.print(it)
    else:
        why = next((v.get("skipped") for v in imps.values() if v.get("skipped")), None)
        if why:
            out.print(f"[dim]parameter importances skipped: {escape(why)}[/]")
    n_inf = sum(1 for r in records if not r["feasible"])
    if n_inf:
        out.print(f"[dim]{n_inf} infeasible configuration(s) skipped (see the report).[/]")
    if stats:
        line = (f"{stats['trials']} trials: {stats['configurations']} distinct configurations, "
                f"{stats['full_simulations']} simulated on the full workload, "
                f"{stats['duplicates']} duplicates")
        se = stats.get("sampling_error")
        if stats.get("screened_on_sample") or se:
            line += (f"; {stats['screened_on_sample']} judged on a "
                     f"{stats.get('sample_requests')}-request sample")
        if se:
            e = se["relative_error"]
            line += (f" (sample estimate vs full on {se['pairs']} configurations: median "
                     f"{100 * e['median']:.1f} %, max {100 * e['max']:.1f} % error)")
        out.print(f"[dim]{escape(line)}[/]")
    provs = {g: v["cost_model"] for g, v in ctx["gpus"].items()}
    for g, pv in provs.items():
        out.print(f"[dim]{g}: {pv}[/]")
    for k, v in files.items():
        out.print(f"wrote {k}: {v}", markup=False)


def _register_command_modules() -> None:
    """Add the commands of every module in tuner/commands (each has register(app))."""
    import importlib
    import pkgutil

    import tuner.commands as pkg

    for info in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda m: m.name):
        importlib.import_module(f"tuner.commands.{info.name}").register(app)


_register_command_modules()


def _error_line(message: str) -> None:
    """`error: MESSAGE` as one line: never wrapped, no markup, inner newlines folded."""
    message = " ".join(message.split())
    err.print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)


def main() -> None:
    try:
        # Not standalone: typer's own usage errors come back here to be printed as one line
        # too (standalone, typer draws them as a multi-line panel).
        rv = app(standalone_mode=False)
    except TunerError as exc:
        _error_line(str(exc))
        sys.exit(exc.exit_code)
    except typer.TyperException as exc:  # click-style errors (typer vendors click)
        code = getattr(exc, "exit_code", 2)
        if type(exc).__name__ == "NoArgsIsHelpError":  # the help was printed already
            sys.exit(code)
        ctx = getattr(exc, "ctx", None)
        hint = f" (see `{ctx.command_path} --help`)" if ctx is not None else ""
        message = exc.format_message() if hasattr(exc, "format_message") else str(exc)
        _error_line(message + hint)
        sys.exit(code)
    except typer.Abort:
        err.print("aborted")
        sys.exit(1)
    except KeyboardInterrupt:
        rv = 130
    if rv == 130:  # typer turns Ctrl-C into exit code 130
        err.print("interrupted (finished trials are saved; rerun with --resume to continue)")
    sys.exit(rv if isinstance(rv, int) else 0)


if __name__ == "__main__":
    main()
