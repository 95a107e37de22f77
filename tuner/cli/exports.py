"""`tuner export` and `tuner report`: deployment exports and the HTML report of a stored study.

Both read the study from its Optuna storage (``--storage URL``, or the SQLite file
``OUT/study.db`` that ``tuner search --out OUT`` wrote) and rebuild what the search knew from the
study's ``metadata`` user attribute (workload path, model, GPUs, prices, fixed knobs).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from tuner.core.errors import TunerError

GOALS = ("fastest", "cheapest")

StudyOpt = Annotated[str | None, typer.Option("--study", help="Study name (default: the only "
                     "study in the storage).")]
StorageOpt = Annotated[str | None, typer.Option("--storage", help="Optuna storage URL of the "
                       "study (default: sqlite:///OUT/study.db).")]
OutOpt = Annotated[Path | None, typer.Option("--out", help="The search's output folder (its "
                   "study.db is read; default tuner-out).")]
WorkloadOpt = Annotated[Path | None, typer.Option("--workload", help="The workload file, when it "
                        "is no longer where the search read it.")]
GpuFileOpt = Annotated[Path | None, typer.Option("--gpu-file", help="The --gpu-file the search "
                       "used, if any.")]


# ---- loading a stored study -------------------------------------------------------------------
def _storage_url(storage: str | None, out: Path | None) -> str:
    from tuner.search.study import default_storage

    if storage:
        return storage
    out = out or Path("tuner-out")
    db = out / "study.db"
    if not db.is_file():
        raise TunerError(f"No study database at {db}; run `tuner search --out {out}` first, or "
                         "pass --storage URL.")
    return default_storage(out)


def load_stored_study(study: str | None, storage: str | None, out: Path | None):
    """The Optuna study; one clear TunerError when the storage or the name is wrong."""
    import optuna

    from tuner.search.study import storage_url

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    url = storage_url(_storage_url(storage, out))  # postgresql:// -> the installed driver
    try:
        names = optuna.study.get_all_study_names(url)
    except Exception as exc:  # noqa: BLE001 - storage drivers fail in many ways
        raise TunerError(f"Cannot open storage {url}: {exc}") from None
    if study is None:
        if len(names) != 1:
            raise TunerError(f"Storage {url} holds {len(names)} studies"
                             + (f" ({', '.join(sorted(names))})" if names else "")
                             + "; pass --study NAME.")
        study = names[0]
    if study not in names:
        raise TunerError(f"No study {study!r} in {url}"
                         + (f"; it has {', '.join(sorted(names))}." if names else
                            "; it holds no study."))
    try:
        return optuna.load_study(study_name=study, storage=url)
    except Exception as exc:  # noqa: BLE001
        raise TunerError(f"Cannot load study {study!r} from {url}: {exc}") from None


def study_setting(st, gpu_file: Path | None = None, workload: Path | None = None,
                  need_workload: bool = True):
    """(metadata, ModelSpec, {gpu name: GPU} with the search's prices, Workload or None).

    Studies whose metadata holds the model and GPU specs and the workload's token counts are
    rebuilt from the study alone (tuner.search.study.setup_from_study); older ones from the catalogs
    and the workload file."""
    meta = st.user_attrs.get("metadata") or {}
    if not meta.get("model") or not meta.get("gpus"):
        raise TunerError(f"Study {st.study_name!r} has no search metadata (model, GPUs); it was "
                         "not written by `tuner search`.")
    try:
        from tuner.search.study import setup_from_study
    except ImportError:  # pragma: no cover - older tuner.search.study
        setup_from_study = None
    if setup_from_study is not None and meta.get("model_spec") and "knobs" in meta \
            and (need_workload or st.user_attrs.get("workload_tokens")) and gpu_file is None:
        s = setup_from_study(st, workload_path=workload)
        return meta, s.model, s.gpus, s.workload

    from tuner.core.catalog import apply_prices, get_model, load_gpus

    spec = get_model(meta["model"])
    cat = load_gpus(gpu_file or meta.get("gpu_file"))
    # the search's prices; only those that differ from the catalog count as overrides
    prices = {k: float(v) for k, v in (meta.get("prices") or {}).items()
              if k in cat and abs(float(v) - cat[k].price_usd_per_h) > 1e-9}
    cat = apply_prices(cat, prices)
    missing = [g for g in meta["gpus"] if g not in cat]
    if missing:
        raise TunerError(f"GPU(s) {', '.join(missing)} of study {st.study_name!r} are not in the "
                         "GPU catalog; pass the --gpu-file the search used.")
    gpus = {g: cat[g] for g in meta["gpus"]}
    w = study_workload(meta, spec, workload) if need_workload else None
    return meta, spec, gpus, w


def study_workload(meta: dict, spec, workload: Path | None):
    """The study's workload file (or --workload), loaded as the search loaded it."""
    from tuner.core.workload import load_workload

    path = workload or (Path(meta["workload"]) if meta.get("workload") else None)
    if path is None:
        raise TunerError("The study does not record its workload; pass --workload FILE.")
    if not path.is_file():
        raise TunerError(f"Workload {path} of the study is not there any more; pass --workload "
                         "FILE.")
    return load_workload(path, model=spec, skip_invalid=bool(meta.get("skip_invalid", False)),
                         output_dist=meta.get("output_dist"))


def rank_records(records: list[dict], goal: str) -> list[dict]:
    """Feasible records best-first on ``goal`` (ties: the other objective, then trial number)."""
    if goal not in GOALS:
        raise TunerError(f"Unknown goal {goal!r}; choose fastest or cheapest.")
    feas = [r for r in records if r["feasible"]]
    if goal == "fastest":
        key = lambda r: (r["metrics"]["makespan_s"], r["metrics"]["cost_usd"], r["number"])  # noqa: E731
    else:
        key = lambda r: (r["metrics"]["cost_usd"], r["metrics"]["makespan_s"], r["number"])  # noqa: E731
    return sorted(feas, key=key)


def build_report_context(st, *, workload: Path | None = None, gpu_file: Path | None = None,
                         out_dir: Path | None = None, profile: Path | None = None):
    """The report context of a stored study, as `tuner search` builds it, plus the extras of
    reports.context (timelines, importances, every export format)."""
    from reports.context import max_request_tokens, report_extras, winner_header
    from tuner.cli.app import tool_version
    from tuner.core.config import ServingConfig
    from tuner.exports.deploy import to_vllm_yaml
    from tuner.search.records import build_context, infeasible_summary, trial_records, winners

    meta, spec, gpus, w = study_setting(st, gpu_file, workload)
    records = trial_records(st)
    if not any(r["feasible"] for r in records):
        reasons = infeasible_summary(records)
        if not records:
            raise TunerError(f"Study {st.study_name!r} has no completed trial yet.")
        raise TunerError("Every configuration tried is infeasible: "
                         + "; ".join(f"{n} x {r}" for r, n in list(reasons.items())[:3]))
    by_num = {r["number"]: r for r in records}
    best, _ = winners(records)
    max_len = max_request_tokens(w)
    exports = {}
    for which in GOALS:
        r = by_num[best[which]]
        cfg = ServingConfig.from_dict(r["config"])
        exports[f"{which}_vllm_yaml"] = to_vllm_yaml(
            cfg, spec, gpus[cfg.gpu], max_model_len=max_len,
            header=winner_header(which, r, len(w), st.study_name),
            kv_capacity_tokens=r["metrics"].get("kv_capacity_tokens"))
    question = (f"{Path(w.source).name or 'workload'} ({len(w)} requests) on {spec.name}: "
                f"which of {', '.join(gpus)} finishes fastest, and which cheapest?")
    notes = [f"Prompt lengths: {w.tokenizer}. Output lengths: {w.output_source}.",
             f"Re-rendered from the stored study {st.study_name!r} by `tuner report`."]
    ctx = build_context(study=st, records=records, workload=w, model=spec, gpus=gpus,
                        exports=exports, question=question, tool_version=tool_version(),
                        notes=notes)
    from tuner.search.study import study_cost_model_for

    cost_model_for = study_cost_model_for(meta, spec, gpus, study_name=st.study_name,
                                          profile=profile)
    ctx.update(report_extras(st, records, w, spec, gpus, out_dir=out_dir,
                             workload_path=str(workload or meta.get("workload") or ""),
                             cost_model_for=cost_model_for))
    return ctx


# ---- commands ---------------------------------------------------------------------------------
def register(app: typer.Typer) -> None:
    @app.command("export")
    def export_cmd(
        study: StudyOpt = None,
        storage: StorageOpt = None,
        out: OutOpt = None,
        fmt: Annotated[str, typer.Option("--format", "-f", help="vllm (vllm serve --config "
                       "YAML) | vllm-run-batch (command line) | sglang (launch_server "
                       "arguments) | json (every figure).")] = "vllm",
        rank: Annotated[int, typer.Option("--rank", "-k", help="1 = the best on --goal, 2 = "
                        "the runner-up, ... among feasible trials.")] = 1,
        goal: Annotated[str, typer.Option("--goal", help="fastest (makespan) or cheapest "
                        "(job $).")] = "fastest",
        output: Annotated[Path | None, typer.Option("--output", "-o", help="Write here "
                          "(default: stdout).")] = None,
        batch_input: Annotated[str | None, typer.Option("--batch-input", help="vllm-run-batch: "
                               "the OpenAI batch JSONL (default: the study's workload).")] = None,
        batch_output: Annotated[str | None, typer.Option("--batch-output", help="vllm-run-batch:"
                                " the results JSONL (default: INPUT-STEM.results.jsonl).")] = None,
        max_model_len: Annotated[int | None, typer.Option("--max-model-len", help="Longest "
                                 "request in tokens (default: from the study's workload).")] = None,
        workload: WorkloadOpt = None,
        gpu_file: GpuFileOpt = None,
    ) -> None:
        """Write one trial of a stored study in the form a deployment takes.

        Example: tuner export --out tuner-out --format vllm-run-batch --goal cheapest
        """
        from reports.context import export_text, max_request_tokens, winner_header
        from tuner.core.io import write_atomic
        from tuner.exports.deploy import EXPORT_FORMATS
        from tuner.search.records import trial_records

        if fmt not in EXPORT_FORMATS:
            raise TunerError(f"Unknown --format {fmt!r}; choose one of "
                             f"{', '.join(EXPORT_FORMATS)}.")
        if goal not in GOALS:
            raise TunerError(f"Unknown --goal {goal!r}; choose fastest or cheapest.")
        if rank < 1:
            raise TunerError("--rank must be >= 1 (1 = the best).")
        if storage and out:
            raise TunerError("Pass either --storage URL or --out DIR, not both.")
        if output is not None and output.exists() and output.is_dir():
            raise TunerError(f"--output {output} is a folder; give a file name.")
        st = load_stored_study(study, storage, out)
        meta, spec, gpus, w = study_setting(st, gpu_file, workload,
                                            need_workload=max_model_len is None)
        ranked = rank_records(trial_records(st), goal)
        if not ranked:
            raise TunerError(f"Study {st.study_name!r} has no feasible trial to export.")
        if rank > len(ranked):
            raise TunerError(f"--rank {rank} is beyond the study's {len(ranked)} feasible "
                             "trial(s).")
        rec = ranked[rank - 1]
        requests = None
        if w is not None:
            requests = len(w)
            if max_model_len is None:
                max_model_len = max_request_tokens(w)
        if max_model_len is None or max_model_len < 1:
            raise TunerError("--max-model-len must be >= 1.")
        label = goal if rank == 1 else f"rank {rank} {goal}"
        header = winner_header(label, rec, requests, st.study_name)
        wl_path = batch_input or str(workload or meta.get("workload") or "")
        extra = {"trial": rec["number"], "goal": goal, "rank": rank, "study": st.study_name,
                 "provenance": rec.get("provenance")}
        text = export_text(fmt, rec, spec, gpus, max_model_len=max_model_len, header=header,
                           workload_path=wl_path, batch_output=batch_output, extra=extra)
        if output is None:
            sys.stdout.write(text)
            return
        try:
            write_atomic(output, text)
        except OSError as exc:
            raise TunerError(f"Cannot write {output}: {exc.strerror or exc}.") from None
        typer.echo(f"wrote {output}: trial #{rec['number']} ({label}, {rec['config']['gpu']})",
                   err=True)

    @app.command("report")
    def report_cmd(
        study: StudyOpt = None,
        storage: StorageOpt = None,
        out: OutOpt = None,
        output: Annotated[Path | None, typer.Option("--output", "-o", help="HTML file to write "
                          "(default: OUT/report.html).")] = None,
        workload: WorkloadOpt = None,
        gpu_file: GpuFileOpt = None,
        profile: Annotated[Path | None, typer.Option("--profile", help="A copy of the "
                           "profile/fit folder the search used (default: the path stored in "
                           "the study).")] = None,
    ) -> None:
        """Render the HTML cost report of a stored study again (e.g. after more trials, from
        another worker's storage, or with the real runs of `tuner validate` in OUT/validation.json).

        Example: tuner report --out tuner-out --output report.html
        """
        from reports.html import render_report

        target = output or (out or Path("tuner-out")) / "report.html"
        if target.exists() and target.is_dir():
            raise TunerError(f"--output {target} is a folder; give a file name.")
        st = load_stored_study(study, storage, out)
        ctx = build_report_context(st, workload=workload, gpu_file=gpu_file,
                                   out_dir=out or (None if storage else Path("tuner-out")),
                                   profile=profile)
        try:
            path = render_report(ctx, target)
        except OSError as exc:
            raise TunerError(f"Cannot write {target}: {exc.strerror or exc}.") from None
        typer.echo(f"wrote report: {path}")
