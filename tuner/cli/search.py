"""`tuner search` and the output pipeline shared with `tuner results`."""

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
    ModelOpt,
    PriceOpt,
    SkipOpt,
    WorkloadOpt,
    app,
    err,
    fmt_s,
    load_gpu_catalog,
    out,
    read_workload,
    tool_version,
)
from tuner.core.errors import TunerError


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
    from tuner.cli.progress import SearchProgress, run_local_workers
    from tuner.core.catalog import get_gpu, get_model
    from tuner.search.space import load_space
    from tuner.search.study import (
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

    cat = load_gpu_catalog(gpu_file, price)
    names = [n.strip() for n in gpus_.split(",") if n.strip()]
    if not names:
        raise TunerError("--gpus needs at least one GPU type, e.g. --gpus A10,A40.")
    chosen = {}
    for n in names:
        g = get_gpu(n, cat)
        chosen[g.name] = g
    spec = get_model(model)
    w = read_workload(workload, spec, skip_invalid, output_dist)
    sp = load_space(space)
    assert_some_gpu_fits(w, spec, chosen, sp)
    if n_trials < 1:
        raise TunerError("--n-trials must be >= 1.")
    if workers < 1:
        raise TunerError("--workers must be >= 1.")
    if exhaustive and workers > 1:
        raise TunerError("--exhaustive runs in one process; drop --workers.")
    from tuner.sim.simulator import profile_cost_model_for

    # a bad folder fails now; workers find the folder in the study's metadata
    cost_model_for = profile_cost_model_for(spec, profile, profile_mode=profile_mode,
                                            check_gpu=next(iter(chosen.values())))
    if sample_fraction is not None and not 0 <= sample_fraction <= 1:
        raise TunerError(f"--sample-fraction must be in [0, 1], got {sample_fraction:g}.")
    make_sampler(SearchSettings(sampler=sampler, seed=seed))  # bad --sampler: fail before --out
    check_writable(out_dir)
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
    finish_search(st, w, spec, chosen, out_dir, as_json, cost_model_for=cost_model_for)


def check_writable(out_dir: Path) -> None:
    from tuner.core.errors import ensure_writable_dir

    ensure_writable_dir(out_dir, "the search outputs")


def finish_search(st, w, spec, chosen: dict, out_dir: Path, as_json: bool, *,
                   cost_model_for=None) -> None:
    """Winners, report, exports and results.json of a finished study (`tuner search` and
    `tuner results` both end here)."""
    from reports.context import report_extras
    from reports.html import render_report
    from tuner.core.config import ServingConfig
    from tuner.core.io import write_atomic
    from tuner.exports.deploy import to_json, to_vllm_yaml
    from tuner.search.records import (
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
        header = (f"{which} config found by tuner: predicted makespan {fmt_s(m['makespan_s'])}, "
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
    from tuner.search.records import offload_verdict

    verdict = offload_verdict(records, chosen)
    ctx = build_context(study=st, records=records, workload=w, model=spec, gpus=chosen,
                        exports=exports, question=question, tool_version=tool_version(), notes=notes)
    ctx["verdicts"] = [verdict] if verdict else []
    ctx.update(report_extras(st, records, w, spec, chosen, out_dir=out_dir,
                             cost_model_for=cost_model_for))
    files["report"] = render_report(ctx, out_dir / "report.html")
    from tuner.core.io import jsonable

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
                                    json.dumps(jsonable(summary), indent=2) + "\n")
    if as_json:
        summary["files"]["results"] = str(files["results"])
        print(json.dumps(jsonable(summary), indent=2))
        return
    print_search(records, by_num, best, per_gpu, ctx, files, stats)


def print_search(records, by_num, best, per_gpu, ctx, files, stats=None) -> None:
    from tuner.search.records import knob_columns

    def usd(x: float) -> str:
        return f"${x:.2f}" if x >= 1 else f"${x:.4f}"

    knobs = knob_columns([r for r in records if r["feasible"]])

    def config_cell(cfg: dict) -> str:
        return ", ".join(f"{title} {cell(cfg)}" for title, cell in knobs)

    f, c = by_num[best["fastest"]], by_num[best["cheapest"]]
    out.print()
    for v in ctx.get("verdicts") or []:
        out.print(v, markup=False, style="bold")
    out.print(f"[bold green]Fastest:[/] {f['config']['gpu']} — {fmt_s(f['metrics']['makespan_s'])}, "
              f"{usd(f['metrics']['cost_usd'])}.  [bold green]Cheapest:[/] {c['config']['gpu']} — "
              f"{fmt_s(c['metrics']['makespan_s'])}, {usd(c['metrics']['cost_usd'])}.")
    t = Table(title="Best config per GPU (why: memory plan -> KV capacity -> concurrency)")
    for col in ("GPU", "goal", "makespan", "$ job", "$/1k req", "config", "KV cap tokens",
                "max conc. req", "peak KV", "preempt", "% of limit"):
        t.add_column(col, justify="left" if col == "config" else "right",
                     no_wrap=col not in ("config",), ratio=1 if col == "config" else None)
    for gpu, d in per_gpu.items():
        for goal in ("fastest", "cheapest"):
            r = by_num[d[goal]]
            m, cfg = r["metrics"], r["config"]
            t.add_row(gpu, goal, fmt_s(m["makespan_s"]), usd(m["cost_usd"]),
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
        p.add_row(str(n), r["config"]["gpu"], fmt_s(r["metrics"]["makespan_s"]),
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


