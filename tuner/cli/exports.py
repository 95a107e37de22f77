"""`tuner export` and `tuner report`: deployment exports and the HTML report of a stored study.

Both read the study from its Optuna storage (``--storage URL``, or the journal file
``OUT/study.journal`` that ``tuner search --out OUT`` wrote) and rebuild what the search knew from the
study's metadata (tuner.search.setup_from_study: workload, model, GPUs, prices, fixed knobs).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from tuner.cli.app import StorageOpt, StoredProfileOpt, StoredWorkloadOpt
from tuner.cli.app import StoredStudyOpt as StudyOpt
from tuner.core.errors import TunerError
from tuner.core.units import plural

OutOpt = Annotated[Path | None, typer.Option("--out", help="The search's output folder (its "
                   "study.journal is read; default tuner-out).")]
GpuFileOpt = Annotated[Path | None, typer.Option("--gpu-file", help="The --gpu-file the search "
                       "used, if any.")]


# ---- what a stored study knew ----------------------------------------------------------------
def study_setting(st, gpu_file: Path | None = None, workload: Path | None = None,
                  need_workload: bool = True):
    """The search a stored study ran (tuner.search.setup_from_study: its metadata record, model,
    GPUs with the search's prices, and workload, None without `need_workload`): from the study
    alone where it holds them, else from the catalogs (`gpu_file`, else the search's) and the
    workload file."""
    from tuner.core.arch_support import check_engine_runs
    from tuner.search import setup_from_study

    s = setup_from_study(st, workload_path=workload, gpu_file=gpu_file,
                         need_workload=need_workload, from_catalogs=True)
    # a study stored before tuner checked the release against the model's architecture
    if note := check_engine_runs(s.model, s.meta.engine_version):
        typer.echo(f"warning: {note}", err=True)
    return s


def report_context(st, *, workload: Path | None = None, gpu_file: Path | None = None,
                   out_dir: Path | None = None, profile: Path | None = None):
    """The report context of a stored study, as `tuner search` builds it (the shared output
    pipeline, reports.outputs), with the search's cost models for the winners' timelines."""
    from tuner.cli.app import tool_version
    from tuner.reports.outputs import study_outputs
    from tuner.search import study_cost_model_for

    s = study_setting(st, gpu_file, workload)
    cost_model_for = study_cost_model_for(s.meta, s.model, s.gpus, study_name=st.study_name,
                                          profile=profile)
    outputs = study_outputs(
        st, s.workload, s.model, s.gpus, tool_version=tool_version(),
        cost_model_for=cost_model_for, out_dir=out_dir,
        workload_path=str(workload or s.meta.workload),
        extra_notes=[f"Re-rendered from the stored study {st.study_name!r} by `tuner report`."])
    return outputs.context


# ---- commands ---------------------------------------------------------------------------------
def register(app: typer.Typer) -> None:
    app.command("export")(export_cmd)
    app.command("report")(report_cmd)


def export_cmd(
    study: StudyOpt = None,
    storage: StorageOpt = None,
    out: OutOpt = None,
    fmt: Annotated[str, typer.Option("--format", "-f", help="auto (the plan's engine: vllm "
                   "for a vLLM plan, sglang for an SGLang one) | vllm (vllm serve --config "
                   "YAML) | vllm-run-batch (command line) | run-batch (the plan's DP replicas, "
                   "each a `vllm serve` on its share of the workload, resumable: a bash "
                   "script) | ray-data (a Ray Data LLM batch job: a Python script) | sglang "
                   "(launch_server command) | sglang-offline (an sglang.Engine batch job: a "
                   "Python script) | json (every figure).")] = "auto",
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
    workload: StoredWorkloadOpt = None,
    gpu_file: GpuFileOpt = None,
    quantized_model: Annotated[str | None, typer.Option("--quantized-model", help="The "
                               "quantized checkpoint (HF id or path) a plan at its weight "
                               "bits serves: 4-bit plans need one, 8-bit ones are otherwise "
                               "FP8 quantized online (default: the search's).")] = None,
    fleet: Annotated[int | None, typer.Option("--fleet", help="Write mix K of GPU types "
                     "(results.json's fleets, 1 = the fastest) as a folder (--output): per "
                     "part its share of the input JSONL, its run-batch launcher and a "
                     "SkyPilot task; every request in exactly one part.")] = None,
) -> None:
    """Write one trial of a stored study in the form a deployment takes. Where vLLM is
    installed (this Python, .venv-vllm or TUNER_VLLM_PYTHON), its own argument parser checks
    the export's engine arguments first.

    Example: tuner export --out tuner-out --goal cheapest   (the plan in its engine's form:
    a vllm serve YAML or an SGLang launch command; --format picks another)
    """
    from tuner.core.catalog import check_checkpoint_ref
    from tuner.core.config import prefill_budget_refusal
    from tuner.core.engines import priced_scheduler_steps
    from tuner.reports.extras import (
        SGLANG_FORMATS,
        deploy_max_model_len,
        export_text,
        max_request_tokens,
        winner_header,
    )
    from tuner.search import load_study
    from tuner.search.constraints import trial_ref

    if fleet is not None:
        return _export_fleet(fleet, study, storage, out, output, workload, gpu_file,
                             max_model_len, quantized_model)
    _check_export_options(fmt, goal, rank, storage, out, output)
    check_checkpoint_ref(quantized_model)
    st = load_study(study, storage, out_dir=out)
    s = study_setting(st, gpu_file, workload, need_workload=max_model_len is None)
    if max_model_len is not None and max_model_len > s.model.max_position:
        raise TunerError(f"--max-model-len {max_model_len} is beyond {s.model.name}'s context "
                         f"of {s.model.max_position} tokens (max_position); pass at most "
                         f"{s.model.max_position}.")
    w = s.workload
    rec = _ranked_record(st, goal, rank)
    if fmt == "auto":  # the plan's engine's own form
        fmt = "sglang" if rec.config.engine == "sglang" else "vllm"
    requests = None
    if max_model_len is not None and max_model_len < 1:
        raise TunerError("--max-model-len must be >= 1.")
    margin = ""
    if w is not None:
        requests = len(w)
        longest = max_request_tokens(w)
        if max_model_len is None:
            max_model_len, margin = deploy_max_model_len(w, s.model, rec,
                                                         sglang=fmt in SGLANG_FORMATS)
        elif max_model_len < longest:
            typer.echo(f"warning: --max-model-len {max_model_len} is below the workload's "
                       f"longest request ({longest} tokens): the engine will reject the "
                       "requests longer than that.", err=True)
    if max_model_len is None or max_model_len < 1:
        raise TunerError("--max-model-len must be >= 1.")
    refusal = prefill_budget_refusal(rec.config, max_model_len)
    if refusal:
        raise TunerError(f"--max-model-len {max_model_len}, {trial_ref(rec)}: {refusal}; "
                         f"pass --max-model-len {rec.config.chunk_size} or less.")
    label = goal if rank == 1 else f"rank {rank} {goal}"
    extra = {"trial": rec.number, "goal": goal, "rank": rank, "study": st.study_name,
             "provenance": rec.provenance}
    steps = priced_scheduler_steps(s.meta.engine_version, s.meta.num_scheduler_steps)
    text = export_text(fmt, rec, s.model, s.gpus, max_model_len=max_model_len,
                       header=winner_header(label, rec, requests, st.study_name)
                       + (f"\nNOTE: {margin}" if margin else ""),
                       workload_path=batch_input or str(workload or s.meta.workload),
                       batch_output=batch_output, extra=extra,
                       quantized_model=quantized_model or s.meta.constraints.quantized_model,
                       num_scheduler_steps=steps,
                       disable_log_requests=s.meta.disable_log_requests,
                       engine_version=s.meta.engine_version)
    from tuner.exports.formats import EXPORTERS
    from tuner.exports.vllm import is_v0

    # the installed (V1) parser is not a V0 export's judge; SGLang and JSON exports have none
    vllm_argv = fmt in EXPORTERS and EXPORTERS[fmt].engine_argv is not None
    if vllm_argv and is_v0(s.meta.engine_version, steps):
        how = f", --num-scheduler-steps {steps}" if steps is not None else ""
        typer.echo(f"not checked against the installed vLLM: the export runs vLLM "
                   f"{s.meta.engine_version} (V0{how}), whose parser differs", err=True)
    elif (check := _parser_check(fmt, text)) is not None:
        typer.echo(check.summary(fmt, s.meta.engine_version), err=True)
    if output is None:
        sys.stdout.write(text)
        return
    _write(output, text)
    typer.echo(f"wrote {output}: {trial_ref(rec)} ({label}, {rec.gpu})", err=True)


def _parser_check(fmt: str, text: str):
    """check_export_detail, saying first why the export waits: importing vLLM to run its
    parser takes seconds (about 20 s for vLLM 0.32 on a 2-core machine). vLLM refusing the
    arguments stops the export (one line, exit 2); the check itself failing to run (vLLM's
    import or parser crashing for a reason of its own, a timeout) is no verdict on the export:
    it is written, with one line saying it was not checked and why (None)."""
    from tuner.exports.common import engine_python
    from tuner.exports.formats import EXPORTERS, check_export_detail

    exporter = EXPORTERS.get(fmt)
    if exporter is None or exporter.engine_argv is None:
        return None
    python = engine_python("vllm")
    if python is None:
        return None
    typer.echo(f"checking the {fmt} export's engine arguments with vLLM's own parser "
               f"({python}; importing vLLM takes a while) ...", err=True)
    try:
        return check_export_detail(fmt, text, python=python)
    except TunerError as exc:
        if str(exc).startswith(REFUSED):  # the arguments are wrong: nothing is written
            raise
        first = (str(exc).strip().splitlines() or ["no message"])[0]
        typer.echo(f"warning: not checked: vLLM's argument check could not run, so the "
                   f"{fmt} export is written unchecked ({first})", err=True)
        return None


#: how tuner.exports.formats.check_export_detail starts the error of vLLM refusing an
#: export's arguments (any other error of the check is the check failing to run)
REFUSED = "vLLM refuses "


def _export_fleet(k: int, study: str | None, storage: str | None, out: Path | None,
                  output: Path | None, workload: Path | None, gpu_file: Path | None,
                  max_model_len: int | None, quantized_model: str | None) -> None:
    """`tuner export --fleet K --output DIR`: the study's K-th mix of GPU types as files
    (tuner.exports.fleet), written as a set: all of them or none."""
    import shutil
    import tempfile

    from tuner.core.engines import priced_scheduler_steps
    from tuner.exports.fleet import fleet_files
    from tuner.reports.extras import chat_served_model, deploy_max_model_len
    from tuner.reports.outputs import fleet_entries
    from tuner.search import load_study, study_cost_model_for
    from tuner.search.records import trial_records

    if output is None:
        raise TunerError("--fleet writes a folder of files: give it with --output DIR.")
    if k < 1:
        raise TunerError("--fleet counts from 1 (the fastest mix).")
    if output.exists() and (not output.is_dir() or any(output.iterdir())):
        raise TunerError(f"--output {output} exists and is not an empty folder.")
    st = load_study(study, storage, out_dir=out)
    s = study_setting(st, gpu_file, workload)
    cost_model_for = study_cost_model_for(s.meta, s.model, s.gpus, study_name=st.study_name)
    fleets = fleet_entries(st, trial_records(st), s.workload, s.model, s.gpus, cost_model_for)
    if len(fleets) < k:
        raise TunerError(f"The study has {len(fleets)} mix(es) of GPU types on its front "
                         f"(results.json's fleets), not {k}: a mix needs two GPU types that "
                         "together beat each alone.")
    src = Path(workload or s.meta.workload)
    try:
        lines = src.read_text(encoding="utf-8").splitlines(keepends=True)
    except OSError as exc:
        raise TunerError(f"Cannot read the workload {src}: {exc.strerror or exc}.") from None
    # the same served model and max-model-len notes as the single-plan exports: a job of chat
    # requests on a base checkpoint is served by its chat model (else every request fails)
    model, chat_note = chat_served_model(s.model, str(src), "run-batch")
    mml, mml_note = ((max_model_len, "") if max_model_len
                     else deploy_max_model_len(s.workload, s.model))
    files = fleet_files(
        fleets[k - 1], lines, s.workload, model, s.gpus, max_model_len=mml,
        header=(f"Fleet plan {k} of study {st.study_name!r}."
                + (f"\nNOTE: {mml_note}" if mml_note else "") + chat_note),
        quantized_model=quantized_model or s.meta.constraints.quantized_model,
        num_scheduler_steps=priced_scheduler_steps(s.meta.engine_version,
                                                   s.meta.num_scheduler_steps),
        disable_log_requests=s.meta.disable_log_requests,
        engine_version=s.meta.engine_version)
    parent = output.resolve().parent
    tmp = None
    try:
        parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".fleet-", dir=parent))
        for name, text in files.items():
            (tmp / name).write_text(text, encoding="utf-8")
        if output.exists():
            output.rmdir()
        tmp.rename(output)
    except OSError as exc:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
        raise TunerError(f"Cannot write {output}: {exc.strerror or exc}.") from None
    typer.echo(f"wrote {output}/: {fleets[k - 1]['description']} "
               f"({len(fleets[k - 1]['parts'])} parts, {len(files)} files)", err=True)


def _check_export_options(fmt: str, goal: str, rank: int, storage: str | None,
                          out: Path | None, output: Path | None) -> None:
    from tuner.exports import EXPORT_FORMATS
    from tuner.search.records import GOALS

    if fmt != "auto" and fmt not in EXPORT_FORMATS:
        raise TunerError(f"Unknown --format {fmt!r}; choose auto or one of "
                         f"{', '.join(EXPORT_FORMATS)}.")
    if goal not in GOALS:
        raise TunerError(f"Unknown --goal {goal!r}; choose fastest or cheapest.")
    if rank < 1:
        raise TunerError("--rank must be >= 1 (1 = the best).")
    if storage and out:
        raise TunerError("Pass either --storage URL or --out DIR, not both.")
    _check_file_target(output)


def _check_file_target(path: Path | None) -> None:
    if path is not None and path.exists() and path.is_dir():
        raise TunerError(f"--output {path} is a folder; give a file name.")
    blocker = next((p for p in (path.parents if path is not None else ())
                    if p.exists() and not p.is_dir()), None)
    if blocker is not None:  # else mkdir says only "File exists"
        raise TunerError(f"Cannot write --output {path}: {blocker} is a file, not a folder.")
    if path is not None:  # an unwritable place fails now, not after the study and vLLM's check
        import tempfile

        folder = next(p for p in path.absolute().parents if p.exists())
        try:
            with tempfile.NamedTemporaryFile(dir=folder, prefix=".tuner-write-test"):
                pass
        except OSError as exc:
            raise TunerError(f"Cannot write --output {path}: {exc.strerror or exc} "
                             f"({folder}).") from None


def _ranked_record(st, goal: str, rank: int):
    """The study's feasible trial at ``rank`` (1 = best) on ``goal``."""
    from tuner.search.records import rank as rank_records
    from tuner.search.records import trial_records

    ranked = rank_records(trial_records(st), goal)
    if not ranked:
        raise TunerError(f"Study {st.study_name!r} has no feasible trial to export.")
    if rank > len(ranked):
        raise TunerError(f"--rank {rank} is beyond the study's {plural(len(ranked), 'feasible trial')}.")
    return ranked[rank - 1]


def _write(path: Path, text: str) -> Path:
    from tuner.core.io import write_atomic

    try:
        return write_atomic(path, text)
    except OSError as exc:
        raise TunerError(f"Cannot write {path}: {exc.strerror or exc}.") from None


def report_cmd(
    study: StudyOpt = None,
    storage: StorageOpt = None,
    out: OutOpt = None,
    output: Annotated[Path | None, typer.Option("--output", "-o", help="HTML file to write "
                      "(default: OUT/report.html).")] = None,
    workload: StoredWorkloadOpt = None,
    gpu_file: GpuFileOpt = None,
    profile: StoredProfileOpt = None,
) -> None:
    """Render the HTML cost report of a stored study again (after more trials, from
    another worker's storage, or with the real runs of `tuner validate` in OUT/validation.json).

    Example: tuner report --out tuner-out --output report.html
    """
    from tuner.reports.html import render_html
    from tuner.reports.outputs import write_output_set
    from tuner.search import load_study

    target = output or (out or Path("tuner-out")) / "report.html"
    _check_file_target(target)
    st = load_study(study, storage, out_dir=out)
    ctx = report_context(st, workload=workload, gpu_file=gpu_file,
                         out_dir=out or (None if storage else Path("tuner-out")), profile=profile)
    html = render_html(ctx)
    try:  # one file, written as the search writes its output set (reports.outputs)
        written = write_output_set(target.parent, {target.name: html})[target.name]
    except OSError as exc:
        raise TunerError(f"Cannot write {target}: {exc.strerror or exc}.") from None
    typer.echo(f"wrote report: {written}")
