"""`tuner validate` and `tuner calibrate`: run the winners on a real engine, compare, calibrate.

    tuner validate --out tuner-out [--study NAME] [--top 3] [--runner vllm|transformers]
    tuner validate --config tuner-out/fastest.vllm.yaml --workload W --model M [--gpu-file F]
    tuner calibrate [--device CPU] [--model tiny-llama] [--runs OUT/validation.json]
                    [--engine-version 0.6.0] [--force]

validate re-simulates each chosen configuration with the study's cost model (the prediction),
runs it on the real engine (runners/), and prints predicted vs measured makespan, the error,
the calibrated prediction when a calibration exists for the device and model, and how the
simulated schedule differs from the engine's (steps, chunking, batch sizes, preemptions). It
writes OUT/validation.json (``{"validation": [{trial, config, predicted_s, measured_s, runner,
device, error_pct, ...}], "summary": {...}}``, the report's ``validation`` context key) and
appends each run to the calibration store (predictors/calibration.py) for `tuner calibrate`.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from tuner.cli.app import JsonOpt, StoredProfileModeOpt, check_store
from tuner.cli.exports import GpuFileOpt, StorageOpt, StudyOpt
from tuner.core.errors import TunerError
from tuner.core.units import fmt_duration as fmt_s

if TYPE_CHECKING:
    from tuner.search.meta import StudyMeta
    from tuner.search.records import TrialRecord

PICKS = ("fastest", "spread")
# Run options only some runners take (runners.registry.Runner.options).
RUNNER_OPTIONS = frozenset({"warmup_passes"})


# ---- choosing what to validate ------------------------------------------------------------------
def pick_records(records: list[TrialRecord], k: int, how: str = "fastest",
                 trials: list[int] | None = None) -> list[TrialRecord]:
    """Feasible trials to run: explicit `trials`, else the `k` fastest distinct configurations
    ("fastest"), or the fastest one and then, greedily, the configuration farthest (log2 chunk
    size + log2 R_max) from those chosen, preferring ones that differ from every chosen one in
    both knobs ("spread": covers the space, so a calibration fitted on them extrapolates less)."""
    from tuner.search.records import rank

    feas = [r for r in records if r.feasible]
    if trials:
        by = {r.number: r for r in feas}
        missing = [t for t in trials if t not in by]
        if missing:
            raise TunerError(f"Trial(s) {', '.join(map(str, missing))} are not feasible "
                             "completed trials of the study.")
        sglang = [t for t in trials if by[t].config.engine != "vllm"]
        if sglang:
            raise TunerError(f"Trial(s) {', '.join(map(str, sglang))} are SGLang plans; tuner "
                             "validate runs vLLM (run `tuner export -f sglang-offline` on the "
                             "machine and compare its makespan yourself).")
        return [by[t] for t in trials]
    feas = [r for r in feas if r.config.engine == "vllm"]  # the runners start vLLM
    if how not in PICKS:
        raise TunerError(f"Unknown --pick {how!r}; choose fastest or spread.")
    seen, uniq = set(), []
    for r in rank(feas, "fastest"):
        if r.config not in seen:
            seen.add(r.config)
            uniq.append(r)
    if how == "fastest" or k <= 1:
        return uniq[:k]

    def dist(a: TrialRecord, b: TrialRecord) -> float:
        return sum(abs(math.log2(getattr(a.config, n)) - math.log2(getattr(b.config, n)))
                   for n in ("chunk_size", "max_running"))

    chosen = uniq[:1]
    while len(chosen) < min(k, len(uniq)):
        rest = [r for r in uniq if r not in chosen]
        strict = [r for r in rest if all(
            r.config.chunk_size != o.config.chunk_size
            and r.config.max_running != o.config.max_running for o in chosen)]
        pool = strict or rest
        # farthest from every chosen one (log2 chunk + log2 R_max); ties: the faster
        chosen.append(max(pool, key=lambda r: (min(dist(r, o) for o in chosen),
                                               -r.makespan_s)))
    return chosen


def load_config_file(path: Path, gpu: str | None) -> dict:
    """A ServingConfig dict from an exported file: vLLM YAML (`# tuner-config:` line), the
    JSON of `tuner export --format json` / OUT/fastest.json, or a plain ServingConfig JSON."""
    from tuner.core.config import ServingConfig
    from tuner.exports import CONFIG_COMMENT_PREFIX, from_vllm_yaml

    if not path.is_file():
        raise TunerError(f"Config file {path} does not exist.")
    text = path.read_text()
    if path.suffix.lower() == ".json":
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as exc:
            raise TunerError(f"{path}: not valid JSON ({exc}).") from None
        cfg = doc.get("config", doc) if isinstance(doc, dict) else None
        if not isinstance(cfg, dict):
            raise TunerError(f"{path}: no ServingConfig in it.")
        if gpu:
            cfg = {**cfg, "gpu": gpu}
        try:
            return ServingConfig.from_dict(cfg).to_dict()
        except TypeError as exc:
            raise TunerError(f"{path}: not a ServingConfig ({exc}).") from None
    try:  # the YAML itself first: an invalid file is its own error, not a missing --gpu
        import yaml

        yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise TunerError(f"{path}: not valid YAML ({str(exc).splitlines()[0]}).") from None
    gpu_name = gpu
    if gpu_name is None:
        for line in text.splitlines():
            if line.startswith(CONFIG_COMMENT_PREFIX):
                try:
                    gpu_name = json.loads(line[len(CONFIG_COMMENT_PREFIX):]).get("gpu")
                except (json.JSONDecodeError, AttributeError):
                    pass
    if not gpu_name:
        raise TunerError(f"{path} does not say which GPU it is for; pass --gpu NAME.")
    return from_vllm_yaml(text, gpu=gpu_name).to_dict()


# ---- one validation --------------------------------------------------------------------------
def validate_one(w, spec, gpu, config, *, runner: str, base_cost_model, calibration=None,
                 run_kwargs: dict | None = None, trial: int | None = None,
                 study_predicted_s: float | None = None) -> dict:
    """Predict, run and compare one configuration; the validation record (JSON-able)."""
    from tuner.runners.compare import compare_schedules, real_as_sim_columns
    from tuner.sim.simulator import simulate
    from tuner.sim.steps import SAMPLED, batch_features

    # a real run's makespan is timed from the engine being up (its start-up is recorded apart):
    # the schedule alone, start-up 0, compares like for like
    sim = simulate(w, spec, gpu, config, base_cost_model, return_steps=True, startup_s=0.0)
    sim_steps = sim.steps[0]  # the first replica's, as the engine runs one
    base_dt = base_cost_model.iteration_time_s(batch_features(sim_steps))
    cal_pred = None
    if calibration is not None:
        cal_pred = simulate(w, spec, gpu, config, calibration.apply(base_cost_model),
                            startup_s=0.0).makespan_s
    res = _run(runner, w, spec, gpu, config, **(run_kwargs or {}))
    measured = res.makespan_s
    rec = {
        "trial": trial,
        "config": config.to_dict(),
        "predicted_s": sim.makespan_s,
        "measured_s": measured,
        "runner": runner,
        "device": res.device,
        "error_pct": 100.0 * (sim.makespan_s - measured) / measured,
        "predicted_calibrated_s": cal_pred,
        "error_calibrated_pct": (100.0 * (cal_pred - measured) / measured
                                 if cal_pred is not None else None),
        "calibration": calibration.describe() if calibration is not None else None,
        "study_predicted_s": study_predicted_s,
        "device_name": gpu.name,
        "model": spec.name,
        "measured_device": res.device,
        "engine": res.engine_version,
        "base_provenance": base_cost_model.describe(),
        "makespans_s": res.makespans_s,
        "startup_s": res.startup_s,
        "warmup_s": res.warmup_s,
        "import_s": res.import_s,
        "wall_s": res.wall_s,
        "requests": res.requests,
        "mismatched_lengths": res.mismatched_lengths,
        "output_tokens": res.output_tokens,
        "throughput_tok_s": res.throughput_tok_s,
        "preemptions": {"sim": sim.preemptions, "real": res.preemptions},
        "iterations": {"sim": sim.iterations, "real": res.iterations},
        "kv_capacity_tokens": {"plan": sim.memory.kv_capacity_tokens,
                               "engine": res.kv_capacity_tokens},
        "sim": {"base_time_s": float(base_dt.sum()), "iterations": int(len(sim_steps)),
                "sampled": int(sim_steps[:, SAMPLED].sum())},
        "notes": res.notes,
        "log": res.log_path,
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    if res.steps is not None and len(res.steps):
        real = real_as_sim_columns(res.steps)
        rdt = base_cost_model.iteration_time_s(batch_features(real))
        rec["real_steps"] = {"base_dt_s": [float(x) for x in rdt],
                             "dt_s": [float(x) for x in res.step_dt_s],
                             "sampled": [int(x) for x in real[:, SAMPLED]]}
        rec["schedule"] = compare_schedules(sim_steps, real)
    return rec


def _run(runner: str, w, spec, gpu, config, **kw):
    from tuner.runners.registry import get_runner

    return get_runner(runner).run(w, spec, gpu, config, **kw)


def summarize(records: list[dict]) -> dict:
    from tuner.predictors.calibration import median_abs

    return {
        "runs": len(records),
        "median_abs_error_pct": median_abs([r["error_pct"] for r in records]),
        "median_abs_error_calibrated_pct": median_abs(
            [r["error_calibrated_pct"] for r in records if r.get("error_calibrated_pct") is not None]),
        "total_startup_s": float(sum(r.get("startup_s") or 0.0 for r in records)),
        "total_wall_s": float(sum(r.get("wall_s") or 0.0 for r in records)),
    }


def write_validation(out_dir: Path, records: list[dict]) -> Path:
    """OUT/validation.json: earlier entries of other (trial, runner, config) are kept."""
    from tuner.core.io import jsonable, write_atomic

    path = out_dir / "validation.json"
    old: list[dict] = []
    if path.is_file():
        try:
            old = json.loads(path.read_text()).get("validation", [])
        except (OSError, json.JSONDecodeError, AttributeError):
            old = []

    def key(r):
        return (r.get("trial"), r.get("runner"), json.dumps(r.get("config"), sort_keys=True))

    new_keys = {key(r) for r in records}
    merged = [r for r in old if key(r) not in new_keys] + records
    doc = {"validation": merged, "summary": summarize(merged)}
    return write_atomic(path, json.dumps(jsonable(doc), indent=1) + "\n")


def mismatch_warning(rec: dict) -> str | None:
    """The warning for a run whose requests did not all generate the asked number of tokens
    (the worker's mismatched_lengths; None: none, or not counted): its measured makespan is
    that of another job than the predicted one."""
    n = rec.get("mismatched_lengths")
    if not n:
        return None
    cell = _trial_cell(rec.get("trial"), rec.get("config"))
    who = ("config" if rec.get("trial") is None else cell if cell.endswith("defaults")
           else f"trial {cell}")
    return (f"warning: {who}: {n:,} of {rec.get('requests', 0):,} requests generated another "
            "output length than asked: the run did not do the job, so its measured makespan "
            "is not comparable with the prediction.")


def _trial_cell(trial, config: dict | None) -> str:
    """A run's trial number as printed; an engine's defaults outside the search's space are no
    trial (numbered -1, -2, ...: tuner.search.constraints.trial_tag): "vLLM's defaults"."""
    from tuner.core.config import engine_name

    if trial is None:
        return "—"
    if isinstance(trial, int) and trial < 0:
        return f"{engine_name((config or {}).get('engine'))}'s defaults"
    return str(trial)


def _fmt_pct(x: float | None) -> str:
    return "—" if x is None else f"{x:+.1f} %"


# ---- commands ---------------------------------------------------------------------------------
def validate_cmd(
    study: StudyOpt = None,
    storage: StorageOpt = None,
    out: Annotated[Path | None, typer.Option("--out", help="The search's output folder: its "
                   "study (study.journal) is read and validation.json written there (default "
                   "tuner-out).")] = None,
    top: Annotated[int, typer.Option("--top", "-k", help="How many configurations to run.")] = 3,
    pick: Annotated[str, typer.Option("--pick", help="fastest: the K fastest; spread: the "
                    "fastest, then the farthest in chunk size and R_max.")] = "fastest",
    trials: Annotated[str | None, typer.Option("--trials", help="Comma-separated trial "
                      "numbers to run instead of --top.")] = None,
    config_files: Annotated[list[Path] | None, typer.Option("--config", help="Exported config "
                            "(vLLM YAML or JSON) to run instead of a study (repeatable; "
                            "needs --workload and --model).")] = None,
    runner: Annotated[str, typer.Option("--runner", help="vllm | transformers.")] = "vllm",
    workload: Annotated[Path | None, typer.Option("--workload", "-w", help="Workload file "
                        "(default: the study's).")] = None,
    model: Annotated[str | None, typer.Option("--model", "-m", help="Model (default: the "
                     "study's).")] = None,
    gpu: Annotated[str | None, typer.Option("--gpu", help="Device name for --config files "
                   "that do not say.")] = None,
    gpu_file: GpuFileOpt = None,
    profile: Annotated[Path | None, typer.Option("--profile", help="Profile/fit folder for "
                       "the prediction (default: the study's, else shipped/roofline).")] = None,
    profile_mode: StoredProfileModeOpt = None,
    checkpoint: Annotated[str | None, typer.Option("--checkpoint", help="Model weights to "
                          "load (default: random weights of the model's shape, made "
                          "locally).")] = None,
    python: Annotated[Path | None, typer.Option("--python", help="Python of the engine's "
                      "virtualenv (default: $TUNER_VLLM_PYTHON, .venv-vllm, this one).")] = None,
    timeout: Annotated[float | None, typer.Option("--timeout", help="Seconds per run.")] = None,
    warmup: Annotated[bool, typer.Option(help="One short request before the measured run.")] = True,
    repeats: Annotated[int, typer.Option("--repeats", help="Measured runs per engine start "
                       "(fresh prompts each); the fastest counts (vLLM runner).")] = 3,
    warmup_passes: Annotated[int, typer.Option("--warmup-passes", help="Untimed passes of "
                             "the whole job before the measured ones (vLLM runner): the "
                             "engine's per-shape caches fill on the first passes, and a long "
                             "offline job runs at the steady state. 0 for jobs too long to "
                             "run twice.")] = 1,
    store: Annotated[Path | None, typer.Option("--store", help="Calibration store (default "
                     "$TUNER_CALIBRATION_DIR or ~/.cache/tuner/calibration).")] = None,
    save_runs: Annotated[bool, typer.Option(help="Append the runs to the calibration "
                         "store.")] = True,
    as_json: JsonOpt = False,
) -> None:
    """Run the search's winners on a real engine; print predicted vs measured makespan.

    Example: tuner validate --out tuner-out --top 3 --runner vllm
    """
    from tuner.core.io import jsonable
    from tuner.predictors.calibration import append_runs

    _check_validate_options(runner, top, repeats, warmup_passes, python, timeout)
    check_store(store)  # written after the runs: a file there must fail before them
    meta, chosen, out_dir = _chosen_configs(study, storage, out, top, pick, trials, config_files,
                                            workload, model, gpu)
    spec, cat, w = _validate_inputs(meta, model, gpu_file, workload)
    from tuner.core.catalog import get_gpu
    from tuner.runners.registry import find_python

    for _, cfg_dict, _ in chosen:  # a typo in a --config's GPU is the user's to fix first
        get_gpu(cfg_dict["gpu"], cat)

    find_python(runner, python)  # the runner not installed: one line, after the inputs' own
    prof = profile or meta.profile
    mode = profile_mode or meta.profile_mode or "auto"
    out_dir.mkdir(parents=True, exist_ok=True)
    run_kwargs = {"checkpoint": checkpoint, "python": python, "timeout_s": timeout,
                  "warmup": warmup, "repeats": repeats, "model_cache_dir": out_dir / "models",
                  "warmup_passes": warmup_passes}
    records_out = _run_chosen(chosen, w, spec, cat, runner=runner, prof=prof, mode=mode,
                              store=store, out_dir=out_dir, run_kwargs=run_kwargs,
                              quiet=as_json)
    path = write_validation(out_dir, records_out)
    if save_runs:
        append_runs([jsonable(r) for r in records_out], store)
    summary = summarize(records_out)
    if as_json:
        print(json.dumps(jsonable({"validation": records_out, "summary": summary,
                                    "file": str(path)}), indent=1))
        return
    _print_validation(records_out, summary, path, runner=runner, spec=spec, n_requests=len(w),
                      save_runs=save_runs)


def _validate_inputs(meta: StudyMeta, model: str | None, gpu_file: Path | None,
                     workload: Path | None):
    """(ModelSpec, GPU catalog, Workload): the options', else the study's."""
    from tuner.core.catalog import get_model, load_gpus
    from tuner.search import stored_model, study_workload

    # the study's own spec (and checkpoint) unless --model names another
    spec = stored_model(meta) if not model and meta.model else get_model(model or "")
    gpu_file = gpu_file or (Path(meta.gpu_file) if meta.gpu_file else None)
    return spec, load_gpus(gpu_file), study_workload(meta, spec, workload)


def _check_validate_options(runner: str, top: int, repeats: int, warmup_passes: int,
                            python: Path | None, timeout: float | None = None) -> None:
    """Bad options fail in one line, before anything runs."""
    from tuner.runners.registry import RUNNERS

    if runner not in RUNNERS:
        raise TunerError(f"Unknown --runner {runner!r}; choose {' or '.join(RUNNERS)}.")
    if top < 1:
        raise TunerError("--top must be >= 1.")
    if repeats < 1:
        raise TunerError("--repeats must be >= 1.")
    if warmup_passes < 0:
        raise TunerError("--warmup-passes must be >= 0.")
    # a run gets --timeout seconds: 0, negative or NaN started the engine, left its folder
    # under validation-runs/ and blamed the run ("did not finish within -1 s")
    if timeout is not None and not 0 < timeout < float("inf"):
        raise TunerError(f"--timeout must be a positive number of seconds, got {timeout:g}.")


def _chosen_configs(study, storage, out, top: int, pick: str, trials: str | None,
                    config_files: list[Path] | None, workload, model, gpu):
    """(study metadata, [(trial or None, config dict, the study's predicted makespan)], output
    folder): the --config files, or the study's trials picked by --top/--pick/--trials."""
    from tuner.search.meta import StudyMeta, study_meta

    meta = StudyMeta.from_dict(None)  # --config files: no study
    chosen: list[tuple[int | None, dict, float | None]] = []
    if config_files:
        if workload is None or model is None:
            raise TunerError("--config needs --workload and --model.")
        for f in config_files:
            chosen.append((None, load_config_file(f, gpu), None))
        out_dir = out or Path(config_files[0]).parent
    else:
        from tuner.search import load_study
        from tuner.search.records import trial_records

        st = load_study(study, storage, out_dir=out)
        meta = study_meta(st)
        records = trial_records(st)
        want = None
        if trials:
            try:
                want = [int(t) for t in trials.split(",") if t.strip()]
            except ValueError:
                raise TunerError(f"--trials expects numbers like 3,7; got {trials!r}.") from None
        picked = pick_records(records, top, pick, want)
        if not picked:
            raise TunerError(f"Study {st.study_name!r} has no feasible completed vLLM trial "
                             "(tuner validate runs vLLM).")
        # the study's schedule (its makespan less the engines' start-up), as the run is timed
        chosen = [(r.number, r.config.to_dict(),
                   r.makespan_s - float(r.metrics.startup_s or 0.0))
                  for r in picked]
        out_dir = out or Path("tuner-out")
    return meta, chosen, out_dir


def _run_chosen(chosen: list, w, spec, cat: dict, *, runner: str, prof, mode: str, store,
                out_dir: Path, run_kwargs: dict, quiet: bool) -> list[dict]:
    """Predict, run and compare each chosen configuration (progress on stderr)."""
    from rich.console import Console

    from tuner.core.catalog import get_gpu
    from tuner.core.config import ServingConfig
    from tuner.predictors.calibration import load_calibration
    from tuner.predictors.sources import cost_model_for
    from tuner.runners.registry import RUNNERS

    err = Console(stderr=True)
    # runner-specific options (e.g. vLLM's warm-up passes) go to that runner alone
    common = {k: v for k, v in run_kwargs.items()
              if k not in RUNNER_OPTIONS or k in RUNNERS[runner].options}
    records_out = []
    # the uncalibrated model: validation measures its error, calibration fits its residual
    base_cost_model = cost_model_for(spec, prof, mode, calibrated=False)
    for i, (trial, cfg_dict, study_pred) in enumerate(chosen, 1):
        config = ServingConfig.from_dict(cfg_dict)
        g = get_gpu(config.gpu, cat)
        base = base_cost_model(g, config)
        cal = load_calibration(g.name, spec.name, store)
        cell = _trial_cell(trial, cfg_dict)
        label = (f"config {i}" if trial is None else cell if cell.endswith("defaults")
                 else f"trial {cell}")
        if not quiet:
            err.print(f"[bold]{label}[/] ({i}/{len(chosen)}): chunk {config.chunk_size}, "
                      f"R_max {config.max_running} on {g.name} with {runner} ...",
                      highlight=False)
        run_dir = out_dir / "validation-runs" / (f"trial-{trial}" if trial is not None
                                                 else f"config-{i}") / runner
        rec = validate_one(
            w, spec, g, config, runner=runner, base_cost_model=base, calibration=cal,
            trial=trial, study_predicted_s=study_pred,
            run_kwargs={**common, "work_dir": run_dir})
        records_out.append(rec)
        if not quiet:
            err.print(f"  predicted {fmt_s(rec['predicted_s'])}, measured "
                      f"{fmt_s(rec['measured_s'])} ({_fmt_pct(rec['error_pct'])}); engine "
                      f"start-up {fmt_s(rec['startup_s'])}", highlight=False)
    return records_out


def _print_validation(records_out: list[dict], summary: dict, path: Path, *, runner: str, spec,
                      n_requests: int, save_runs: bool) -> None:
    """The predicted-vs-measured table, the schedule findings and the median error."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    outc = Console(width=160) if not __import__("sys").stdout.isatty() else Console()
    t = Table(title=f"Predicted vs measured makespan ({runner}, {spec.name}, {n_requests} requests)")
    for col in ("trial", "GPU", "chunk", "R_max", "predicted", "measured", "error",
                "calibrated", "cal. error", "steps sim/real", "preempt sim/real", "start-up"):
        t.add_column(col, justify="right")
    for r in records_out:
        c = r["config"]
        t.add_row(_trial_cell(r["trial"], c), c["gpu"], str(c["chunk_size"]),
                  str(c["max_running"]), fmt_s(r["predicted_s"]), fmt_s(r["measured_s"]),
                  _fmt_pct(r["error_pct"]), fmt_s(r["predicted_calibrated_s"]),
                  _fmt_pct(r["error_calibrated_pct"]),
                  f"{r['iterations']['sim']}/{r['iterations']['real'] or '—'}",
                  f"{r['preemptions']['sim']}/{r['preemptions']['real'] if r['preemptions']['real'] is not None else '—'}",
                  fmt_s(r["startup_s"]))
    outc.print(t)
    from tuner.runners.compare import summary_line

    for r in records_out:
        if r.get("schedule"):
            cell = _trial_cell(r["trial"], r["config"])
            who = ("config" if r["trial"] is None else cell if cell.endswith("defaults")
                   else f"trial {cell}")
            outc.print(f"schedule {who}: {escape(summary_line(r['schedule']))}", highlight=False)
    for r in records_out:
        if (warning := mismatch_warning(r)) is not None:
            outc.print(warning, markup=False, highlight=False, style="yellow")
    med = summary["median_abs_error_pct"]
    line = f"median |error| {med:.1f} % over {len(records_out)} run(s)"
    if summary["median_abs_error_calibrated_pct"] is not None:
        line += f"; calibrated {summary['median_abs_error_calibrated_pct']:.1f} %"
    outc.print(line, highlight=False)
    outc.print(f"device: {records_out[0]['device']}; engine: {records_out[0]['engine']}; "
               f"cost model: {records_out[0]['base_provenance']}", highlight=False, markup=False)
    for n in dict.fromkeys(x for r in records_out for x in r["notes"]):
        outc.print(f"note: {n}", markup=False, highlight=False)
    outc.print(f"wrote {path}", markup=False)
    if save_runs:
        outc.print("runs added to the calibration store; `tuner calibrate` fits it",
                   markup=False)


def calibrate_cmd(
    device: Annotated[str | None, typer.Option("--device", help="Device (catalog name) to "
                      "calibrate (default: the only one among the runs).")] = None,
    model: Annotated[str | None, typer.Option("--model", "-m", help="Model (default: the "
                     "only one among the runs).")] = None,
    runs: Annotated[list[Path] | None, typer.Option("--runs", help="validation.json or runs "
                    "JSONL to fit on (repeatable; default: the calibration store).")] = None,
    store: Annotated[Path | None, typer.Option("--store", help="Calibration store (default "
                     "$TUNER_CALIBRATION_DIR or ~/.cache/tuner/calibration).")] = None,
    runner: Annotated[str | None, typer.Option("--runner", help="Engine whose runs to fit "
                      "(vllm | transformers | replay: runs recorded by `tuner replay --record`; "
                      "default: the only one among the runs). "
                      "Engines differ in their per-step cost: one calibration per device "
                      "and model, fitted on one engine.")] = None,
    engine_version: Annotated[str | None, typer.Option("--engine-version", help="Fit only "
                              "the runs of this vLLM release's generation (0.5-0.7 V0, "
                              "0.8-0.13 V1 synchronous, 0.14+ and 'newest' V1 asynchronous; "
                              "'sglang'): runs of different generations are not fitted "
                              "together, and the fit applies to predictions of its "
                              "generation only.")] = None,
    method: Annotated[str, typer.Option("--method", help="auto | steps (per engine step) | "
                      "makespan (per run).")] = "auto",
    force: Annotated[bool, typer.Option("--force", help="Write a fit whose kernel factor is "
                     "outside the plausible range (refused otherwise).")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Fit the residual of the cost model (per-step overhead, kernel factor) on measured runs;
    predictions on that device then use it. Prints the error before and after.

    Example: tuner calibrate --device CPU --model tiny-llama
    """
    from tuner.predictors.calibration import (
        engine_generation,
        fit_calibration,
        load_calibration,
        plausibility_problem,
    )

    if method not in ("auto", "steps", "makespan"):
        raise TunerError(f"Unknown --method {method!r}; choose auto, steps or makespan.")
    check_store(store)
    sel = _calibration_runs(runs, store, device, model, runner, engine_version)
    try:
        cal = fit_calibration(sel.runs, device=sel.device, model=sel.model, method=method)
    except ValueError as exc:
        raise TunerError(f"Cannot calibrate: {exc}.") from None
    notes = list(sel.notes)
    if problem := plausibility_problem(cal):
        if not force:
            raise TunerError(f"Not writing the calibration of {cal.model} on {cal.device}: "
                             f"{problem}. Check those runs, or pass --force to write it "
                             "anyway.")
        notes.append(f"written anyway (--force): {problem}")
    old = load_calibration(cal.device, cal.model, store)
    if old is not None and engine_generation(old.engine) != engine_generation(cal.engine):
        from tuner.predictors.calibration import generation_label

        # one fit per device and model: a fit of another generation is replaced
        notes.append(f"this replaces the fit for {generation_label(engine_generation(old.engine))}"
                     f" in the store ({old.describe()})")
    path = cal.save(store)
    notes.append(_where_used(cal, store))
    if as_json:
        print(json.dumps({**cal.to_json(), "file": str(path), "notes": notes,
                          "left_out": sel.left_out}, indent=1))
        return
    _print_calibration(cal, sel, path, notes)


@dataclass
class _Selection:
    """The runs `tuner calibrate` fits, and what it says about the ones it left out."""

    runs: list[dict]
    origins: list[str]
    device: str
    model: str
    notes: list[str] = field(default_factory=list)
    left_out: list[dict] = field(default_factory=list)  # {"run": origin, "why": ...}


def _calibration_runs(runs, store, device, model, runner, engine_version=None) -> _Selection:
    """The measured runs to fit, of one device, model, engine and engine generation."""
    from tuner.predictors.calibration import RunsError, read_runs, runs_path

    for p in runs or []:
        if p.is_dir():
            raise TunerError(f"Runs file {p} is a folder; pass the validation.json or runs "
                             "JSONL file in it.")
        if not p.is_file():
            raise TunerError(f"Runs file {p} does not exist.")
    try:
        read = read_runs(runs, store=store, device=device, model=model, runner=runner)
    except RunsError as exc:
        raise TunerError(str(exc)) from None
    notes = [f"skipped {len(lines)} line(s) of {f} that are not JSON (line "
             f"{', '.join(map(str, lines[:5]))}{', ...' if len(lines) > 5 else ''})"
             for f, lines in read.bad_lines.items()]
    recs, origins = read.runs, read.origins
    if not recs:
        raise TunerError(_no_runs_message(read, runs, runs_path(store), device, model, runner))
    devs = sorted({str(r.get("device_name", "?")) for r in recs})
    mods = sorted({str(r.get("model", "?")) for r in recs})
    if len(devs) > 1 or len(mods) > 1:
        raise TunerError(f"The runs cover devices {', '.join(devs)} and models "
                         f"{', '.join(mods)}; pick one with --device and --model.")
    engines = sorted({str(r.get("runner", "?")) for r in recs})
    if len(engines) > 1:
        raise TunerError(f"The runs come from the engines {', '.join(engines)}, whose "
                         "per-step costs differ; pick one with --runner.")
    recs, origins = _one_generation(recs, origins, engine_version)
    keep, left_out = _without_arrival_waits(recs, origins)
    if left_out:
        names = "; ".join(f"{x['run']}: {x['why']}" for x in left_out)
        why = ("their simulated makespan includes time the engine waited for requests, which "
               "these records do not tell apart from step time, so a fit would scale the wait "
               "too and its error after would not be what a calibrated simulation gives. "
               "Calibrate on runs whose requests were all sent at once (`vllm bench serve "
               "--request-rate inf`)")
        if not keep:
            raise TunerError(f"No run to fit: every replayed run was left out ({names}); "
                             f"{why}.")
        notes.append(f"left out {len(left_out)} replayed run(s) ({names}): {why}")
    recs = [recs[i] for i in keep]
    origins = [origins[i] for i in keep]
    return _Selection(recs, origins, devs[0], mods[0], notes, left_out)


def _no_runs_message(read, runs, store_file: Path, device, model, runner) -> str:
    """Why no run was found, and how to get some."""
    where = ", ".join(map(str, runs)) if runs else str(store_file)
    which = (f"{f' of {model}' if model else ''}{f' on {device}' if device else ''}"
             f"{f' with {runner}' if runner else ''}")
    how = ("run `tuner validate` first (a configuration on a real engine), or record a `vllm "
           "bench serve --save-result` file with `tuner replay RESULT -g GPU --record`")
    if read.filtered_out:
        have = ", ".join(f"{n} of {m} on {d} with {r}"
                         for (d, m, r), n in sorted(read.filtered_out.items()))
        return f"No measured runs{which} in {where}; it has {have}."
    if read.other_records:
        from tuner.predictors.calibration import RUNS_EXPECTED

        return (f"No measured runs in {where}: its {read.other_records} JSON record(s) are not "
                f"measured runs (no measured_s and sim); expected {RUNS_EXPECTED}. To get runs, "
                f"{how}.")
    if read.bad_lines:
        from tuner.predictors.calibration import RUNS_EXPECTED

        return f"No measured runs in {where}: none of its lines is JSON; expected {RUNS_EXPECTED}."
    return f"No measured runs{which} in {where}; {how}."


def _one_generation(recs: list[dict], origins: list[str], engine_version: str | None,
                    ) -> tuple[list[dict], list[str]]:
    """The runs of one engine generation: --engine-version's, else all when they are of one;
    refuses a mix (a V0 engine's host cost per step is not a V1 one's)."""
    from tuner.core.engines import generation_of
    from tuner.predictors.calibration import generation_label, generations

    gens = generations(recs)
    if engine_version is not None:
        want = ("sglang" if engine_version.strip().lower() == "sglang"
                else generation_of(engine_version).generation.key)
        idx = gens.get(want, [])
        if not idx:
            raise TunerError(f"No run of {generation_label(want)} (--engine-version "
                             f"{engine_version}) among the runs; they are of "
                             f"{_generations_text(recs, gens)}.")
        return [recs[i] for i in idx], [origins[i] for i in idx]
    if len(gens) > 1:
        raise TunerError(f"The runs come from different engine generations: "
                         f"{_generations_text(recs, gens)}, whose host cost per step differs "
                         "(a fit applies to one generation); fit them apart with "
                         "--engine-version "
                         + " or ".join(_version_of(recs, idx) for g, idx in gens.items()
                                       if g is not None) + ".")
    return recs, origins


def _generations_text(recs: list[dict], gens: dict) -> str:
    from tuner.predictors.calibration import generation_label

    return ", ".join(f"{generation_label(g)} ({len(idx)} run(s)"
                     + (f": {', '.join(sorted({_version_of(recs, [i]) for i in idx}))})"
                        if g is not None else ")")
                     for g, idx in gens.items())


def _version_of(recs: list[dict], idx: list[int]) -> str:
    """A --engine-version that selects these runs' generation."""
    import re

    text = str(recs[idx[-1]].get("engine", "")).lower()
    if "sglang" in text:
        return "sglang"
    m = re.search(r"(\d+\.\d+(?:\.\d+)?)", text)
    return m.group(1) if m else "newest"


_GENERATION_SHORT = {"v0": "V0", "v1-sync": "V1 sync", "v1-async": "V1 async",
                     "sglang": "SGLang"}


def _engine_short(engine) -> str:
    """'0.6.0 (V0)', 'newest (V1 async)': a run's engine and its generation, for a table."""
    from tuner.predictors.calibration import engine_generation

    text = str(engine or "")
    key = engine_generation(text)
    if key is None:
        return text[:24] or "not recorded"
    return f"{_version_of([{'engine': text}], [0])} ({_GENERATION_SHORT.get(key, key)})"


def _without_arrival_waits(recs: list[dict], origins: list[str],
                           ) -> tuple[list[int], list[dict]]:
    """(indices kept, [{run, why}] left out): replayed runs whose simulated makespan holds an
    unknown wait for arrivals. `tuner replay --record` stores the simulated schedule, arrivals
    included; a record that says how long that schedule waited (sim.idle_s) is fitted without
    scaling the wait, any other one only when its run file shows every request sent at once."""
    from tuner.cli.replay import calibration_leaves_out, read_run

    keep, left, spans = [], [], {}
    for i, r in enumerate(recs):
        if r.get("runner") != "replay" or "idle_s" in r["sim"]:
            keep.append(i)
            continue
        src = str(r.get("source") or "")
        if src not in spans:
            try:
                m = read_run(Path(src)) if src and Path(src).is_file() else None
                spans[src] = (None if m is None else 0.0 if m.arrival_s is None
                              else float(m.arrival_s.max() - m.arrival_s.min()))
            except (TunerError, OSError, ValueError):
                spans[src] = None
        span = spans[src]
        name = src or origins[i]
        if span is None:
            left.append({"run": name, "why": "its run file is not here to show when its "
                         "requests arrived (calibrate from the folder `tuner replay` ran in)"})
        elif calibration_leaves_out(span, float(r["sim"]["base_time_s"])):
            left.append({"run": name, "why": f"requests arriving over {fmt_s(span)}"})
        else:
            keep.append(i)
    return keep, left


def _where_used(cal, store: Path | None) -> str:
    """Which commands pick the fit up: simulate and search read $TUNER_CALIBRATION_DIR (or the
    default store) only (predictors.sources.resolve -> apply_stored with no store)."""
    from tuner.predictors.calibration import default_store, engine_generation, generation_label

    gen = engine_generation(cal.engine)
    scope = (f"{cal.model} on {cal.device}"
             + (f" with {generation_label(gen)}" if gen is not None else ""))
    if store is not None and Path(store).resolve() != default_store().resolve():
        return (f"`tuner simulate` and `tuner search` read fits from $TUNER_CALIBRATION_DIR "
                f"(else ~/.cache/tuner/calibration), not from --store: run them with "
                f"TUNER_CALIBRATION_DIR={store} to use this one for {scope}; `tuner validate "
                f"--store {store}` shows calibrated predictions")
    return (f"`tuner simulate`, `tuner search` and `tuner validate` use it for {scope} from now "
            "on (TUNER_NO_CALIBRATION=1 turns it off)")


def _print_calibration(cal, sel: _Selection, path: Path, notes: list[str]) -> None:
    from rich.console import Console
    from rich.table import Table

    outc = Console(width=160) if not __import__("sys").stdout.isatty() else Console()
    t = Table(title=f"Calibration of {cal.model} on {cal.device}: {cal.method}")
    for col in ("run", "engine", "chunk", "R_max", "measured", "error before", "error after",
                "leave-one-out"):
        t.add_column(col, justify="right")
    loo = cal.error_loo_pct or [None] * len(sel.runs)
    for i, r in enumerate(sel.runs):
        c = r.get("config") or {}
        run = (_trial_cell(r["trial"], c) if r.get("trial") is not None
               else Path(str(r["source"])).name if r.get("source") else str(i))
        t.add_row(run, _engine_short(r.get("engine")), str(c.get("chunk_size", "")),
                  str(c.get("max_running", "")), fmt_s(float(r["measured_s"])),
                  _fmt_pct(cal.error_before_pct[i]), _fmt_pct(cal.error_after_pct[i]),
                  _fmt_pct(loo[i]))
    outc.print(t)
    line = (f"median |error|: before {cal.median_error_before_pct:.1f} %, after "
            f"{cal.median_error_after_pct:.1f} %")
    if cal.median_error_loo_pct is not None:
        line += f" (leave-one-out {cal.median_error_loo_pct:.1f} %)"
    outc.print(line, highlight=False)
    outc.print(f"fit: {cal.describe()}", markup=False, highlight=False)
    for w in cal.warnings:
        outc.print(f"warning: {w}", style="yellow", markup=False, highlight=False)
    for n in notes[:-1]:
        outc.print(f"note: {n}", markup=False, highlight=False)
    outc.print(f"wrote {path}; {notes[-1]}", markup=False, highlight=False)


def register(app: typer.Typer) -> None:
    app.command("validate")(validate_cmd)
    app.command("calibrate")(calibrate_cmd)
