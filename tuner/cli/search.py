"""`tuner search` and the output pipeline shared with `tuner results`."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from tuner.cli.app import (
    DisableLogRequestsOpt,
    DistOpt,
    EngineVersionOpt,
    EntryPointOpt,
    GpuFileOpt,
    InterruptionRateOpt,
    JsonOpt,
    ModelOpt,
    OnTooLongOpt,
    PriceOpt,
    ProfileModeOpt,
    ProviderOpt,
    SchedulerStepsOpt,
    SkipOpt,
    SpotOpt,
    StartupOpt,
    WorkloadOpt,
    app,
    catalog_gpu,
    err,
    load_gpu_catalog,
    out,
    read_workload,
    spot_rates_for,
    tool_version,
    workload_ref,
    workload_stem,
)
from tuner.core.errors import TunerError
from tuner.core.io import dumps
from tuner.core.secrets import mask_secrets
from tuner.core.units import fmt_duration, fmt_usd, plural


# ---- search -----------------------------------------------------------------------------------
@app.command()
def search(
    workload: WorkloadOpt,
    model: ModelOpt,
    gpus_: Annotated[str, typer.Option("--gpus", help="Comma-separated GPU types, e.g. A10,A40 (catalog names or their aliases, `tuner gpus --json`).")],
    space: Annotated[Path | None, typer.Option(help="Search space YAML (default: "
                     "search_spaces/default.yaml).")] = None,
    engines: Annotated[str | None, typer.Option(
        "--engines", help="Engines searched, comma-separated: vllm, sglang (default: both, "
        "each with its own scheduler, memory plan and defaults as its baseline; a --space that "
        "lists `engine` keeps its own). The report gives the best plan of each engine; a "
        "winner's exports are its engine's.", show_default=False)] = None,
    n_trials: Annotated[int, typer.Option(help="Trials the search proposes, in total over "
                        "all --workers and every --resume (a configuration proposed again "
                        "counts as a trial but is not simulated again); the full simulations "
                        "of the front's candidates and the engines' defaults beside the winners "
                        "come on top.")] = 300,
    timeout: Annotated[float | None, typer.Option(help="Stop proposing trials after this many "
                       "seconds; the full simulations of the front's candidates and the "
                       "engines' defaults, and the outputs, follow (--resume continues the "
                       "search).")] = None,
    sampler: Annotated[str, typer.Option(help="auto | tpe | nsga2 (Optuna samplers; auto: TPE "
                       "up to 300 trials, NSGA-II beyond).")] = "auto",
    seed: Annotated[int, typer.Option(help="Sampler seed (same seed, same trials; not with "
                    "--workers N, whose trials interleave as they finish).")] = 0,
    exhaustive: Annotated[bool, typer.Option(help="Simulate every point of the space on the "
                          "full workload (a reference to check the search; ignores "
                          "--n-trials).")] = False,
    sample_fraction: Annotated[float | None, typer.Option(help="Multi-fidelity: share of the "
                               "workload each candidate is simulated on first; promising ones "
                               "go on to the full workload (default: 1/8 of the job, at "
                               "least 512 and at most 8,192 requests, on jobs of 2,048 "
                               "requests and more; 0 or 1: full workload only).")] = None,
    workers: Annotated[int, typer.Option(help="Local worker processes (shared study in "
                       "--storage; more machines: `tuner worker`).")] = 1,
    storage: Annotated[str | None, typer.Option(help="Optuna storage (default: the journal "
                       "file OUT/study.journal, resumable, shared by local --workers; "
                       "postgresql://... for workers on many machines).")] = None,
    study: Annotated[str | None, typer.Option(help="Study name (default: WORKLOAD-MODEL).")] = None,
    resume: Annotated[bool, typer.Option(help="Continue an interrupted study (trials left "
                      "running by dead workers are marked failed first when no other process "
                      "holds the study). Without it, a study of that name with no feasible "
                      "result is replaced; one with results is refused.")] = False,
    out_dir: Annotated[Path, typer.Option("--out", help="Output folder for the report, exports "
                       "and study.")] = Path("tuner-out"),
    profile: Annotated[Path | None, typer.Option(help="Profile or fit folder (`tuner profile`, "
                       "`tuner fit`): measured cost models instead of spec-sheet rooflines.")] = None,
    profile_mode: ProfileModeOpt = "auto",
    engine_version: EngineVersionOpt = None,
    num_scheduler_steps: SchedulerStepsOpt = None,
    disable_log_requests: DisableLogRequestsOpt = False,
    entry_point: EntryPointOpt = "llm",
    provider: ProviderOpt = None, spot: SpotOpt = False,
    interruption_rate: InterruptionRateOpt = None,
    on_too_long: OnTooLongOpt = "fail",
    deadline: Annotated[str | None, typer.Option(help="The job must finish within this "
                        "(90m, 6h, 2d or seconds): the cheapest plan that does wins.")] = None,
    budget: Annotated[float | None, typer.Option(help="The job may cost at most this many $: "
                      "the fastest plan within it wins (with --deadline: the cheapest plan "
                      "meeting both).")] = None,
    max_gpus: Annotated[str | None, typer.Option(help="Most GPUs a plan may use (TP x DP): 8, "
                        "or per GPU type A10=8,A40=4.")] = None,
    allow_quantization: Annotated[bool, typer.Option(help="Also search 8/4-bit weights and an "
                                  "8-bit KV cache (default: the model's own precision).")] = False,
    quantized_model: Annotated[str | None, typer.Option(help="Quantized checkpoint (HF id or "
                               "path) for the plans at its weight bits: its config.json (local "
                               "or in the HF cache) or its name says them (awq/gptq/w4a16/int4: "
                               "4; w8a8/int8/fp8: 8; neither: taken as 4-bit). 4-bit plans need "
                               "one; 8-bit plans are otherwise quantized to FP8 online on every "
                               "GPU (weight-only through Marlin without FP8 tensor cores).")] = None,
    outputs_known: Annotated[bool, typer.Option(help="The workload's output lengths are what "
                             "the job will produce (e.g. measured in an earlier run): orderings "
                             "that sort by them (longest-output, binpack, blend) may then be "
                             "recommended. Without it they are, only when the lengths are the "
                             "input's own max_tokens.")] = False,
    price: PriceOpt = None, gpu_file: GpuFileOpt = None, skip_invalid: SkipOpt = False,
    output_dist: DistOpt = None, as_json: JsonOpt = False, startup_s: StartupOpt = None,
) -> None:
    """Search GPU type x serving knobs for the makespan-vs-$ Pareto front; write an HTML report
    and vLLM configs of the winners.

    Example: tuner search --workload examples/arxiv.jsonl --model llama-3-8b --gpus A10,A40

    Example: tuner search -w examples/arxiv.jsonl -m llama-3-8b --gpus A10,A40 --deadline 2h
    """
    from tuner.cli.progress import SearchProgress
    from tuner.search import SearchSettings, check_study_settings, default_storage
    from tuner.search.storage import discard_failed_study, study_metadata

    limits = search_constraints(deadline, budget, max_gpus, quantized_model)
    if startup_s is not None:
        from tuner.core.startup import check_startup_s

        check_startup_s(startup_s)
    job = _SearchInputs.read(workload, model, gpus_, space, gpu_file, price, skip_invalid,
                             output_dist, allow_quantization=allow_quantization,
                             provider=provider, spot=spot, on_too_long=on_too_long)
    bits = job.space.knobs.get("weight_bits") or [job.space.fixed.get("weight_bits", 16)]
    if quantized_model and min(bits) >= 16:
        raise TunerError("--quantized-model names a checkpoint for quantized-weight plans, but "
                         "the space has none (16-bit weights only); add --allow-quantization.")
    searched_engines = search_engines(engines, job.space)
    _check_vllm_only(engine_version, searched_engines, job.space)
    _check_entry_point(entry_point, engine_version, job.gpus, num_scheduler_steps)
    _check_engine_runs(job.model, engine_version)
    rates = spot_rates_for(provider, gpu_file, spot, interruption_rate)
    for g in job.gpus.values() if rates is not None else ():  # a rate for every spot machine
        rates.for_gpu(g)
    limits = limits.check_gpus(job.gpus)  # --max-gpus a10=2 names the catalog's A10
    _check_options(n_trials=n_trials, workers=workers, exhaustive=exhaustive,
                   sample_fraction=sample_fraction, sampler=sampler, seed=seed, timeout=timeout,
                   storage=storage)
    workers = cap_workers(workers)
    cost_model_for = job.cost_model_for(profile, profile_mode, engine_version, entry_point,
                                        num_scheduler_steps, disable_log_requests)
    new_out = not out_dir.exists()
    check_writable(out_dir)
    try:
        settings = SearchSettings(n_trials=n_trials, timeout_s=timeout, seed=seed, sampler=sampler,
                                  storage=storage or default_storage(out_dir),
                                  study_name=study or f"{workload_stem(workload)}-{job.model.name}",
                                  resume=resume, exhaustive=exhaustive,
                                  sample_fraction=sample_fraction, constraints=limits)
        metadata = {"workload": workload_ref(workload),
                    "gpu_file": str(gpu_file.resolve()) if gpu_file else None,
                    "skip_invalid": skip_invalid, "output_dist": output_dist,
                    "profile": str(profile.resolve()) if profile is not None else None,
                    "profile_mode": profile_mode, "engine_version": engine_version,
                    "entry_point": entry_point, "num_scheduler_steps": num_scheduler_steps,
                    "disable_log_requests": disable_log_requests, "provider": provider, "spot": spot,
                    "interruption_rate_per_h": interruption_rate,
                    "on_too_long": on_too_long, "too_long": job.too_long,
                    "outputs_known": outputs_known, "startup_s": startup_s,
                    "engines": searched_engines}
        job.fit_space(settings, metadata)
        w, spec, chosen, sp = job.workload, job.model, job.gpus, job.space
        # e.g. a study with results exists without --resume: one line, no progress
        resumed = check_study_settings(settings,
                                       study_metadata(w, spec, chosen, sp, settings, metadata))
        total = _announce(job, settings, Path(workload_ref(workload)).name, workers)
        if resumed:  # --resume under another --sampler / --seed: allowed, and said
            err.print(resumed, style="yellow", markup=False)
        try:
            with SearchProgress(err, total, disable=as_json) as prog:
                st = _run(job, settings, metadata, workers, prog, cost_model_for)
            _say_timeout(st, settings, as_json)
            finish_search(st, w, spec, chosen, out_dir, as_json, cost_model_for=cost_model_for)
        except BaseException as exc:  # a failed search leaves no study without results (Ctrl-C: kept)
            discard_failed_study(settings, exc)
            raise
    except BaseException:  # an --out this command made stays only if something is in it
        if new_out and out_dir.is_dir() and not any(out_dir.iterdir()):
            out_dir.rmdir()
        raise


def _say_timeout(st, settings, as_json: bool) -> None:
    """One line when --timeout, not --n-trials, ended the search (the answer is from fewer
    trials than asked for)."""
    from tuner.search.loop import _count_budget

    if settings.timeout_s is None or settings.exhaustive:
        return
    done = _count_budget(st)
    if done < settings.n_trials:
        err.print(f"--timeout {settings.timeout_s:g} s stopped the search after {done} of "
                  f"{settings.n_trials} trials (--resume continues it).", style="yellow",
                  markup=False)


def _run(job: _SearchInputs, settings, metadata: dict, workers: int, prog, cost_model_for):
    """The study, searched in this process or by `workers` local worker processes (then
    vLLM's defaults beside the winners are simulated here, once they are done)."""
    from tuner.cli.progress import run_local_workers
    from tuner.search import prepare_study, run_search
    from tuner.search.loop import check_defaults
    from tuner.search.meta import study_meta

    w, spec, chosen, sp = job.workload, job.model, job.gpus, job.space
    if workers <= 1:
        return run_search(w, spec, chosen, sp, settings, on_trial=prog.on_trial,
                          metadata=metadata, cost_model_for=cost_model_for)
    st = prepare_study(w, spec, chosen, sp, settings, metadata=metadata)
    run_local_workers(st, settings.storage, workers, n_trials=settings.n_trials,
                      timeout_s=settings.timeout_s, seed=settings.seed, progress=prog)
    if not settings.exhaustive:
        check_defaults(st, w, spec, chosen, sp, settings, cost_model_for=cost_model_for,
                       metadata=study_meta(st))
    return st


def _check_vllm_only(engine_version: str | None, engines: list[str] | None, space) -> None:
    """One line for --engine-version on a search with no vLLM plan: it picks vLLM's release
    (its scheduler, defaults and overheads), which no SGLang plan is priced with."""
    if engine_version is None:
        return
    offered = engines or space.knobs.get("engine") or [space.fixed.get("engine", "vllm")]
    if "vllm" not in offered:
        raise TunerError(f"--engine-version {engine_version} picks vLLM's release, and this "
                         f"search simulates {', '.join(offered)} only (no vLLM plan); drop "
                         "--engine-version, or add vllm to --engines.")


def search_engines(engines: str | None, space) -> list[str] | None:
    """--engines as a list (None: the space lists `engine` itself); one line and exit 2 for an
    engine tuner does not simulate."""
    from tuner.core.config import ENGINES

    if engines is None:
        return None if "engine" in space.knobs or "engine" in space.fixed else list(ENGINES)
    names = list(dict.fromkeys(n.strip().lower() for n in engines.split(",") if n.strip()))
    bad = [n for n in names if n not in ENGINES]
    if bad or not names:
        raise TunerError(f"--engines {engines!r}: tuner simulates {', '.join(ENGINES)} "
                         "(comma-separated, e.g. --engines vllm,sglang).")
    return names


def search_constraints(deadline: str | None, budget: float | None, max_gpus: str | None,
                       quantized_model: str | None):
    """The Constraints of --deadline / --budget / --max-gpus / --quantized-model."""
    from tuner.core.catalog import check_checkpoint_ref
    from tuner.search.constraints import Constraints, parse_duration_s, parse_max_gpus

    check_checkpoint_ref(quantized_model)
    total, per_type = parse_max_gpus(max_gpus) if max_gpus is not None else (None, {})
    return Constraints(deadline_s=parse_duration_s(deadline) if deadline is not None else None,
                       budget_usd=budget, max_gpus=total, max_gpus_per_type=per_type,
                       quantized_model=quantized_model or None)


@dataclass
class _SearchInputs:
    """What `tuner search` searches: the workload, model, GPUs and space, read and checked."""

    workload: Any
    model: Any
    gpus: dict
    space: Any
    too_long: dict | None = None  # requests beyond the context, left out (--on-too-long skip)
    space_notes: list | None = None  # what fitting the space left out (fit_space)

    @classmethod
    def read(cls, workload: Path, model: str, gpus: str, space: Path | None,
             gpu_file: Path | None, price: list[str] | None, skip_invalid: bool,
             output_dist: str | None, *, allow_quantization: bool = False,
             provider: str | None = None, spot: bool = False,
             on_too_long: str = "fail") -> _SearchInputs:
        from tuner.core.catalog import get_model
        from tuner.core.workload import apply_on_too_long
        from tuner.search.space import load_space

        cat = load_gpu_catalog(gpu_file, price, provider, spot)
        names = [n.strip() for n in gpus.split(",") if n.strip()]
        if not names:
            raise TunerError("--gpus needs at least one GPU type, e.g. --gpus A10,A40.")
        chosen = {}
        for n in names:
            g = catalog_gpu(n, cat, provider, spot)
            chosen[g.name] = g
        spec = get_model(model)
        w = read_workload(workload, spec, skip_invalid, output_dist)
        if w.arrival_s is not None:
            # an offline job has every request at t = 0; workers read the stored token counts,
            # which carry no arrivals either
            err.print(f"note: the workload's arrival times ({len(w):,} requests over "
                      f"{fmt_duration(w.arrival_span_s)}) are ignored: the search plans an offline job, "
                      "every request at t = 0. `tuner simulate` replays them.", soft_wrap=True)
            w = w.offline()
        # before any trial, not after all: fail, or leave them out as vLLM fails them
        w, too_long = apply_on_too_long(w, spec.max_position, spec.name, on_too_long)
        sp = load_space(space)
        if allow_quantization:
            from tuner.search.constraints import with_quantization

            sp = with_quantization(sp)
        return cls(w, spec, chosen, sp, too_long)

    def fit_space(self, settings, metadata: dict) -> None:
        """The space as the search runs it (tuner.search.loop.search_space), checked: some
        GPU can run the model somewhere in it."""
        from tuner.search import assert_some_gpu_fits
        from tuner.search.loop import search_space

        self.space, self.space_notes = search_space(self.space, self.workload, self.model,
                                                    self.gpus, settings, metadata)
        assert_some_gpu_fits(self.workload, self.model, self.gpus, self.space)

    def cost_model_for(self, profile: Path | None, profile_mode: str,
                       engine_version: str | None, entry_point: str = "llm",
                       num_scheduler_steps: int | None = None,
                       disable_log_requests: bool = False):
        from tuner.predictors.sources import cost_model_for

        # a bad folder fails now; workers find the folder in the study's metadata
        return cost_model_for(self.model, profile, profile_mode, engine_version,
                              check_gpu=next(iter(self.gpus.values())), entry_point=entry_point,
                              num_scheduler_steps=num_scheduler_steps,
                              log_requests=False if disable_log_requests else None)


def _check_entry_point(entry_point: str, engine_version: str | None, gpus: dict,
                       num_scheduler_steps: int | None = None) -> None:
    """A bad --entry-point, an --engine-version tuner does not model, or
    --num-scheduler-steps on an engine without it: one line, before anything is written."""
    from tuner.core.engine_defaults import vllm_defaults
    from tuner.core.engines import check_scheduler_steps, generation_of

    check_scheduler_steps(generation_of(engine_version), num_scheduler_steps)
    for g in gpus.values():
        vllm_defaults(g.name, g.memory_gib, entry_point, engine_version)


def _check_engine_runs(model, engine_version: str | None) -> None:
    """An --engine-version that cannot load the model's architecture: one line, before
    anything is written (a warning where the architecture is guessed from the repo name)."""
    from tuner.core.arch_support import check_engine_runs

    if note := check_engine_runs(model, engine_version):
        typer.echo(f"warning: {note}", err=True)


def _check_options(*, n_trials: int, workers: int, exhaustive: bool,
                   sample_fraction: float | None, sampler: str, seed: int,
                   timeout: float | None = None, storage: str | None = None) -> None:
    """One TunerError for a bad option, before anything is written."""
    from tuner.search import SearchSettings, make_sampler

    check_timeout(timeout)
    if n_trials < 1:
        raise TunerError("--n-trials must be >= 1.")
    if workers < 1:
        raise TunerError("--workers must be >= 1.")
    if exhaustive and workers > 1:
        raise TunerError("--exhaustive runs in one process; drop --workers.")
    if workers > 1 and storage and storage.strip().rstrip("/") in ("sqlite:", "sqlite:///:memory:"):
        # each worker process would get an empty database of its own (and fail after a wait)
        raise TunerError(f"--workers {workers} share the study through --storage, and "
                         f"{storage} is this process's memory; drop --storage (a journal file "
                         "in --out) or give a file or database URL.")
    if sample_fraction is not None and not 0 <= sample_fraction <= 1:
        raise TunerError(f"--sample-fraction must be in [0, 1], got {sample_fraction:g}.")
    make_sampler(SearchSettings(sampler=sampler, seed=seed))  # bad --sampler: fail before --out


def cpu_count() -> int:
    """The CPUs this process may run on (its affinity mask where the OS has one)."""
    import os

    if hasattr(os, "sched_getaffinity"):
        try:
            return max(1, len(os.sched_getaffinity(0)))
        except OSError:
            pass
    return max(1, os.cpu_count() or 1)


def cap_workers(workers: int) -> int:
    """--workers capped at this machine's CPUs (each worker process simulates on one core; a
    thousand of them only thrash), with one line saying so."""
    cpus = cpu_count()
    if workers <= cpus:
        return workers
    err.print(f"--workers {workers} capped at {cpus} (this machine's CPUs: each worker "
              "simulates on one core)", highlight=False, soft_wrap=True)
    return cpus


def _announce(job: _SearchInputs, settings, workload_name: str, workers: int) -> int:
    """Print what is searched and how; return the number of trials the progress bar counts."""
    from tuner.core.catalog import shape_note
    from tuner.search import sample_size, sampler_name

    size = job.space.size(len(job.gpus))
    n = len(job.workload)
    n_s = sample_size(n, settings.sample_fraction)
    sname = sampler_name(settings)
    how = ("every configuration, full workload" if settings.exhaustive else
           f"{settings.n_trials} trials, {sname}, candidates first on a {n_s}-request sample"
           if n_s < n else f"{settings.n_trials} trials, {sname}")
    knobs = searched_knobs(job.space)
    err.print(f"[bold]Searching[/] {n} requests of {escape(workload_name)} on "
              f"{job.model.name}: {', '.join(job.gpus)}"
              + (f" x {', '.join(knobs)}" if knobs else "") +
              f" ({size:,} configurations), {how}, study {escape(repr(settings.study_name))} in "
              f"{escape(mask_secrets(settings.storage))}" + (f", {workers} workers" if workers > 1 else "")
              + _constraint_words(settings.constraints))
    if note := shape_note(job.model):
        err.print(note, style="yellow", markup=False)
    for note in job.space_notes or []:
        err.print(f"[dim]{escape(note)}[/]")
    return size if settings.exhaustive else settings.n_trials


def searched_knobs(space) -> list[str]:
    """The knobs the search varies: a knob the space (as the search runs it) gives one value,
    e.g. `engine` under --engines vllm or `tp: [1]`, is held, not searched."""
    return [k for k, v in space.knobs.items()
            if not isinstance(v, list | tuple) or len(dict.fromkeys(map(str, v))) > 1]


def check_timeout(timeout: float | None) -> None:
    """--timeout of `tuner search` / `tuner worker`: seconds, > 0 (a negative one used to start
    the search, stop it before its first trial and fail with "no completed trial")."""
    if timeout is not None and not timeout > 0:
        raise TunerError(f"--timeout must be a positive number of seconds, got {timeout:g}.")


def _constraint_words(limits) -> str:
    """'; goal: the cheapest plan that finishes within 6.0 h, at most 8 GPUs' (or '')."""
    parts = []
    if limits.on_figures:
        parts.append(f"the {limits.goal} plan that {limits.describe()}")
    if limits.max_gpus is not None:
        parts.append(f"at most {limits.max_gpus} GPUs a plan")
    parts += [f"at most {n} x {g}" for g, n in limits.max_gpus_per_type.items()]
    return f"; goal: {', '.join(parts)}" if parts else ""


def check_writable(out_dir: Path) -> None:
    from tuner.core.errors import ensure_writable_dir

    ensure_writable_dir(out_dir, "the search outputs")


def finish_search(st, w, spec, chosen: dict, out_dir: Path, as_json: bool, *,
                  cost_model_for=None) -> None:
    """Winners, exports, report and results.json of a finished study, then the summary on the
    terminal (`tuner search` and `tuner results` both end here)."""
    from tuner.reports.outputs import study_outputs, write_outputs

    outputs = study_outputs(st, w, spec, chosen, tool_version=tool_version(),
                            cost_model_for=cost_model_for, out_dir=out_dir)
    summary = write_outputs(outputs, out_dir)
    if as_json:
        summary["files"]["results"] = str(outputs.files["results"])
        sys.stdout.write(dumps(summary))
        return
    print_search(outputs)


def print_search(outputs) -> None:
    """The study's answer on the terminal: winners, best per GPU, Pareto front, importances."""
    from tuner.cli.tables import varying_knobs

    ctx, by_num = outputs.context, outputs.by_number
    knobs = varying_knobs(r.config.to_dict() for r in outputs.records if r.feasible)
    f, c = by_num[ctx.winners.fastest], by_num[ctx.winners.cheapest]
    out.print()
    for v in ctx.verdicts:
        out.print(v, markup=False, style="bold")
    out.print(f"[bold green]Fastest:[/] {_gpus(f)} — {fmt_duration(f.makespan_s)}, "
              f"{fmt_usd(f.cost_usd)}.  [bold green]Cheapest:[/] {_gpus(c)} — "
              f"{fmt_duration(c.makespan_s)}, {fmt_usd(c.cost_usd)}.")
    _print_gain(f, c)
    start = f.metrics.startup
    if isinstance(start, dict) and start.get("description"):  # included in every makespan, $
        out.print(f"[dim]Start-up included (every replica, at once): "
                  f"{escape(start['description'])} for the fastest plan.[/]")
    if outputs.failed_too_long:
        from tuner.reports.outputs import too_long_note

        out.print(too_long_note(outputs.failed_too_long), markup=False, style="yellow")
    for line in _uncovered_lines(outputs.records, ctx.gpus):
        out.print(line, markup=False, style="yellow")
    out.print(_best_table(ctx, by_num, knobs))
    out.print(_pareto_table(ctx, by_num, knobs, outputs.fleets))
    _print_importances(ctx.importances or {})
    n_inf = sum(1 for r in outputs.records if not r.feasible)
    if n_inf:
        out.print(f"[dim]{plural(n_inf, 'infeasible configuration')} skipped (see the report).[/]")
    out.print(f"[dim]{escape(_stats_line(outputs.stats))}[/]")
    for line in cost_model_lines(outputs.records, ctx.gpus):
        out.print(f"[dim]{escape(line)}[/]")
    for k, v in outputs.files.items():
        out.print(f"wrote {k}: {v}", markup=False)
    for line in skipped_lines(outputs):
        out.print(line, markup=False, style="yellow")


def skipped_lines(outputs) -> list[str]:
    """One line per winner whose scale exports were not written (their engines could not
    start for its plan), pointing to the file that runs the plan as predicted."""
    from tuner.exports import EXPORT_SUFFIX

    by_goal: dict[str, dict[str, str]] = {}
    for name, why in outputs.skipped.items():
        by_goal.setdefault(name.split(".", 1)[0], {})[name] = why
    lines = []
    for goal, files in by_goal.items():
        whys = list(dict.fromkeys(files.values()))
        if all(w.startswith("vLLM ") for w in whys):  # flags the plan's release lacks
            lines.append(f"not written: {' and '.join(files)}: {'; '.join(whys)}.")
            continue
        runs = outputs.files.get(f"{goal}_vllm_yaml")
        instead = (f"; {runs.name if runs is not None else goal + EXPORT_SUFFIX['vllm']} "
                   "runs the plan as one data-parallel engine, as predicted")
        lines.append(f"not written: {' and '.join(files)}: they would run {'; '.join(whys)}"
                     f"{instead}.")
    return lines


def _uncovered_lines(records, gpus: dict) -> list[str]:
    """One line per GPU type with no feasible plan (it is then missing from the tables), with
    its trials' most common reason."""
    from collections import Counter

    have = {r.gpu for r in records if r.feasible}
    out = []
    for g in gpus:
        if g in have:
            continue
        why = Counter(r.reason for r in records if r.gpu == g and not r.feasible)
        reason = why.most_common(1)[0][0] if why else "no trial ran on it"
        out.append(f"{g}: no feasible plan in the space ({sum(why.values())} tried; most "
                   f"often: {reason})")
    return out


def cost_model_lines(records, gpus: dict) -> list[str]:
    """'GPU: cost model' per GPU, or per GPU and engine where the study priced both engines on
    it (their kernel tables and engine overheads differ): each the provenance of that GPU's
    (and engine's) best plans, fastest and cheapest, with the trial it describes
    (tuner.search.records.cost_model_picks, as the report's provenance table). A GPU without
    a feasible trial: its catalog entry's cost model."""
    from tuner.core.config import engine_name
    from tuner.search.records import cost_models_by_engine

    by = cost_models_by_engine(records)
    lines = []
    for g, info in gpus.items():
        engines = by.get(g, {})
        if not engines:
            lines.append(f"{g}: {info.cost_model}")
        for e, texts in engines.items():
            label = f"{g} ({engine_name(e)})" if len(engines) > 1 else g
            lines += [f"{label}, {text}" for text in texts]
    return lines


def _gpus(r) -> str:
    """'32 x A40 on 4 machines of 8' (the machines when more than one); with --provider the
    instances rented, and the GPUs of them the plan leaves idle, which its $ pays for."""
    n = r.config.num_gpus
    m = (r.metrics.machines if r.metrics is not None else None) or {}
    on = ("" if m.get("count", 1) <= 1
          else f" on {m['count']} machines of {m['gpus_per_machine']}")
    if m.get("provider"):  # whole instances billed: '4 x H100 on 1 x p5.48xlarge (4 idle, paid)'
        idle = m["count"] * m["gpus_per_machine"] - n
        on = (f" on {m['count']} x {m['instance']}"
              + (f" ({plural(idle, 'GPU')} of {'it' if m['count'] == 1 else 'them'} idle, "
                 "paid)" if idle > 0 else ""))
    return f"{n} x {r.gpu}{on}" + (" under SGLang" if r.config.engine == "sglang" else "")


def _print_gain(f, c) -> None:
    """Each overall winner against vLLM's defaults on the same GPU type and count, and its
    $ per million tokens."""
    from tuner.search.baseline import describe_gain, engine_name
    from tuner.search.constraints import plan_label

    for goal, r in (("fastest", f), ("cheapest", c)) if f.number != c.number else \
            (("fastest and cheapest", f),):
        if r.engine_defaults:  # the plan is its engine's defaults: nothing to compare with
            out.print(f"  {goal}: {plan_label(r.config)}, "
                      f"{fmt_usd(r.metrics.cost_per_million_tokens())} per 1M tokens (input + "
                      f"output); the plan is {engine_name(r.config.engine)}'s defaults.",
                      markup=False, highlight=False)
            continue
        b = r.baseline or {}
        base = (b.get("metrics") or {})
        # both sides named: the same GPU type, count and precision (tuner.search.baseline)
        who = engine_name(b.get("engine"))
        vs = (f"; {who}'s defaults on the same {plan_label(b.get('config') or r.config)}: "
              f"{fmt_duration(base['makespan_s'])}, {fmt_usd(base['cost_usd'])}, so the plan is "
              f"{describe_gain(b)}" if base else f"; {describe_gain(b or None)}")
        vs = vs.replace(f" than {who}'s defaults", "").replace(f" as {who}'s defaults", "")
        out.print(f"  {goal}: {plan_label(r.config)}, {fmt_usd(r.metrics.cost_per_million_tokens())} "
                  f"per 1M tokens (input + output){vs}.", markup=False, highlight=False)


def _gain_cell(r) -> str:
    """'1.26x faster, 21 % cheaper' against the plan's engine's defaults (vLLM's or SGLang's)
    on the same GPUs: the words of the line above the tables and of the report
    (tuner.reports.views.gain_text), 'same plan' where the plan is those defaults."""
    from tuner.reports.views import gain_text

    if r.baseline is not None and r.baseline.get("gain") is None and not r.engine_defaults:
        return "defaults can't run"  # the reason: in the report and results.json
    return gain_text(r)


def _best_table(ctx, by_num, knobs):
    """'Best config per GPU', as wide as the terminal: where it is narrow, the figures that say
    why (memory plan -> KV capacity -> concurrency) move to a second table."""
    from tuner.cli.tables import Column, config_tokens, fitted_tables

    rows = [(gpu, goal, by_num[picks.of(goal)]) for gpu, picks in ctx.best_per_gpu.items()
            for goal in ("fastest", "cheapest")]
    ms = [r.metrics for _, _, r in rows]
    keys = [Column("GPU", [g for g, _, _ in rows]), Column("goal", [k for _, k, _ in rows])]
    from tuner.reports.views import fmt_usd_column  # the report's $ columns read the same

    cols = [Column("makespan", [fmt_duration(m.makespan_s) for m in ms]),
            Column("$ job", fmt_usd_column(m.cost_usd for m in ms)),
            Column("$/1k req", fmt_usd_column(m.usd_per_1k_requests for m in ms), level=2,
                   drop=5),
            Column("$/1M tok", fmt_usd_column(m.cost_per_million_tokens() for m in ms), level=1,
                   drop=2),
            Column("vs defaults", [_gain_cell(r) for _, _, r in rows], level=1),
            Column("KV cap tokens", [f"{m.kv_capacity_tokens:,}" for m in ms], level=2),
            Column("max conc. req", [f"{m.max_concurrent_requests:.0f}" for m in ms],
                   level=2, drop=4),
            Column("peak KV", [f"{100 * m.peak_kv_fraction:.0f}%" for m in ms], level=2),
            Column("preempt", [f"{m.preemptions:,}" for m in ms], level=2, drop=3),
            # not part of the "why": how near the plan gets to what its GPUs allow at all
            Column(LIMIT_TITLE, [_limit_cell(m) for m in ms], level=2, note=LIMIT_NOTE)]
    why = "why: memory plan -> KV capacity -> concurrency"
    return fitted_tables(f"Best config per GPU ({why}; and how near the physical limit)", keys,
                         cols, [config_tokens(r.config.to_dict(), knobs) for _, _, r in rows],
                         out.width, config_at=5,
                         split_titles=("Best config per GPU", f"Best config per GPU, continued "
                                       f"({why}; and how near the physical limit)"))


#: the best table's last column, named and explained as the report names it
#: (reports/templates/report.html.j2, "of physical limit")
LIMIT_TITLE = "of physical limit"
LIMIT_NOTE = ("of physical limit = the physical lower bound on the makespan less start-up (the "
              "larger of its compute-bound and memory-bound time) / the predicted schedule (the "
              "makespan less start-up): start-up is left out on both sides, as it has no such "
              "bound; 100% would be perfect")


def _limit_cell(m) -> str:
    """The schedule's share of its physical limit (Metrics.schedule_limit), '—' if unknown."""
    v = m.schedule_limit()
    return "—" if v is None else f"{100 * v:.0f}%"


def _pareto_table(ctx, by_num, knobs, fleets=()):
    """The front over every plan: the single-type Pareto points no mix of GPU types beats on
    both makespan and $, and the mixes (results.json's "fleets", `tuner export --fleet K`)."""
    from tuner.cli.tables import Column, config_tokens, fitted_tables
    from tuner.core.pricing import usd_per_million_tokens
    from tuner.reports.views import fmt_usd_column
    from tuner.search.fleet import beaten_by_mix

    singles = [by_num[n] for n in ctx.pareto]
    beaten = beaten_by_mix([(r.makespan_s, r.cost_usd) for r in singles], list(fleets))
    m0 = singles[0].metrics if singles else None
    tokens = (m0.prompt_tokens or 0, m0.output_tokens or 0) if m0 is not None else (0, 0)
    # (makespan, trial, GPU, $, $/1M tok, vs defaults, config tokens) per row
    # the engines' defaults the space does not hold are no trial (records.OUTSIDE_SPACE_ATTR)
    rows = [(r.makespan_s, "defaults" if r.engine_defaults else str(r.number), r.gpu, r.cost_usd,
             r.metrics.cost_per_million_tokens(), _gain_cell(r),
             config_tokens(r.config.to_dict(), knobs))
            for r, k in zip(singles, beaten, strict=True) if k is None]
    rows += [(f["makespan_s"], f"mix {k}", "+".join(p["gpu"] for p in f["parts"]),
              f["cost_usd"], usd_per_million_tokens(f["cost_usd"], *tokens) if sum(tokens)
              else None, "—", [f["description"]]) for k, f in enumerate(fleets, 1)]
    rows.sort(key=lambda row: (row[0], row[3]))
    keys = [Column("trial", [row[1] for row in rows]), Column("GPU", [row[2] for row in rows])]
    cols = [Column("makespan", distinct_durations([row[0] for row in rows])),
            Column("$ job", fmt_usd_column(row[3] for row in rows)),
            Column("$/1M tok", fmt_usd_column(row[4] for row in rows), level=1),
            Column("vs defaults", [row[5] for row in rows], level=1)]
    mixes = len(fleets)
    title = (f"Pareto front: makespan vs $ ({len(rows)} points"
             + (f", {mixes} of them mixes of GPU types" if mixes else "") + ")")
    return fitted_tables(title, keys, cols, [row[6] for row in rows], out.width)


def distinct_durations(seconds: list[float]) -> list[str]:
    """fmt_duration of each, with more decimals where two neighbours would read the same: a
    front sorted by makespan whose rows say '2.1 min, $0.1974' over '2.1 min, $0.0622' reads
    as if the upper row were beaten (126.4 s against 127.2 s)."""
    from itertools import pairwise

    from tuner.core.units import duration_unit

    def at(v: float, digits: int) -> str:
        unit, div = duration_unit(abs(v))
        return f"{v / div:.{digits}f} {unit}"

    out = [fmt_duration(v) for v in seconds]
    i = 0
    while i < len(out):  # each run of rows that read the same, at the decimals that part them
        j = i + 1
        while j < len(out) and out[j] == out[i]:
            j += 1
        run = seconds[i:j]
        if len(set(run)) > 1:
            digits = next((d for d in (2, 3) if all(
                at(a, d) != at(b, d) for a, b in pairwise(run) if a != b)), 4)
            out[i:j] = [at(v, digits) for v in run]
        i = j
    return out


def _print_importances(imps: dict) -> None:
    shown = {o: v["importances"] for o, v in imps.items() if v.get("importances")}
    if not shown:
        why = next((v.get("skipped") for v in imps.values() if v.get("skipped")), None)
        if why:
            out.print(f"[dim]parameter importances skipped: {escape(why)}[/]")
        return
    it = Table(title="Parameter importance (fANOVA, share of variance)")
    it.add_column("knob")
    for o in shown:
        it.add_column(o, justify="right")
    for k in dict.fromkeys(k for v in shown.values() for k in v):
        it.add_row(k, *(f"{100 * v.get(k, 0.0):.0f}%" for v in shown.values()))
    out.print(it)


def _stats_line(stats: dict) -> str:
    line = (f"{stats['trials']} trials: {stats['configurations']} distinct configurations, "
            f"{stats['full_simulations']} simulated on the full workload")
    if stats.get("final_candidates"):
        line += (f" ({stats['final_candidates']} of them at the end, beyond --n-trials: screened on "
                 "the sample, "
                 "still within its error of a front)")
    line += f", {stats['duplicates']} duplicates"
    if stats.get("vllm_defaults_checks"):
        line += (f"; the engines' defaults on a winner's GPUs: {stats['vllm_defaults_checks']} more "
                 "full simulations (beyond --n-trials)")
    se = stats.get("sampling_error")
    if stats.get("screened_on_sample") or se:
        line += (f"; {stats['screened_on_sample']} judged on a stratified sample (up to "
                 f"{stats.get('sample_requests')} requests: one replica's share)")
    if se:
        e = se["relative_error"]
        line += (f" (sample estimate vs full on {se['pairs']} configurations: median "
                 f"{100 * e['median']:.1f} %, max {100 * e['max']:.1f} % error)")
    if stats.get("judged_on_rung"):
        line += (f"; {stats['judged_on_rung']} of them on a larger rung of "
                 f"{stats.get('rung_requests')} requests")
        if stats.get("final_rung_simulations"):
            line += (f" ({stats['final_rung_simulations']} rung simulations at the end, beyond "
                     "--n-trials)")
        re_ = stats.get("rung_error")
        if re_:
            line += (f" (rung vs full on {re_['pairs']}: median {100 * re_['median']:.2f} %, "
                     f"max {100 * re_['max']:.2f} %)")
    return line
