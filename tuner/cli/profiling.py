"""`tuner profile`, `tuner fit`, `tuner cost`, `tuner transfer`: measure a device, fit the
measurements into a cost model, price one iteration, and check roofline transfer between two
measured devices. torch and scikit-learn are imported inside the commands only."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Annotated

import typer

from tuner.cli.app import EngineVersionOpt, ProfileModeOpt
from tuner.core.errors import TunerError
from tuner.core.io import jsonable
from tuner.core.units import plural

FAMILY_HELP = "linear, elementwise, lm_head, attention, copy, quant, threads"


def _consoles():
    from tuner.cli.app import err, out

    return out, err


def _pct(v) -> str:
    return "—" if v is None or not math.isfinite(v) else f"{100 * v:.1f} %"


def profile(
    model: Annotated[str, typer.Option("--model", "-m", help="Catalog name (`tuner models`) or "
                     "path to a Hugging Face config.json.")],
    device: Annotated[str, typer.Option(help="cuda | cpu (default: cuda when a GPU is "
                      "visible, else cpu).")] = "auto",
    out_dir: Annotated[Path | None, typer.Option("--out", help="Profile folder (default: "
                       "profiles/MODEL-DEVICE). Rerunning into it resumes.")] = None,
    quick: Annotated[bool, typer.Option(help="Fewer sizes and repeats (CI: tiny model on CPU "
                     "in well under a minute).")] = False,
    dtype: Annotated[str, typer.Option(help="auto | bfloat16 | float16 | float32 (auto: "
                     "bfloat16 on GPUs that have it, float32 on CPU).")] = "auto",
    repeats: Annotated[int | None, typer.Option(help="Timed samples per case (default 20 on "
                       "CUDA, 9 on CPU; 10/6 with --quick).")] = None,
    threads: Annotated[int | None, typer.Option(help="torch intra-op threads for the "
                       "operator sweeps (default: torch's, 1 with --quick on a CPU; e.g. 1 on a "
                       "busy shared machine).")] = None,
    only: Annotated[str | None, typer.Option(help=f"Comma-separated families to measure: "
                    f"{FAMILY_HELP}.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable JSON on stdout.")] = False,
) -> None:
    """Measure a model's operations on this machine's GPU (or CPU) into a profile folder: profile.csv + provenance.json.

    Projections, norms, activation, rotary and LM head over 1...8192 tokens, prefill and decode
    attention, host<->device copies, CPU ops vs threads, (de)quantization. Resumable; an
    out-of-memory size is recorded and skipped.

    Example: tuner profile --model tiny-llama --device cpu --quick --out profiles/tiny-cpu
    """
    from rich.markup import escape

    from tuner.core.catalog import get_model
    from tuner.profilers.plan import FAMILIES

    spec = get_model(model)
    families = None
    if only:
        families = frozenset(f.strip() for f in only.split(",") if f.strip())
        bad = sorted(families - set(FAMILIES))
        if bad or not families:
            raise TunerError(f"--only: unknown famil{'y' if len(bad) == 1 else 'ies'} "
                             f"{', '.join(bad) or '(none)'}; choose from {FAMILY_HELP}.")
    if device.lower() not in ("auto", "cuda", "cpu"):
        raise TunerError(f"--device must be cuda or cpu, got {device!r}.")
    from tuner.profilers.profile import (
        ProfileSettings,
        check_out_dir,
        import_torch,
        resolve_device,
        resolve_dtype,
        run_profile,
        timing_for,
    )

    if out_dir is not None and out_dir.exists() and not out_dir.is_dir():
        # said before torch is imported (or found missing), as it was: nothing to measure into
        raise TunerError(f"Cannot write the profile to {out_dir}: it is a file, not a folder.")
    torch = import_torch()
    dev = resolve_device(torch, device)
    # bad options fail in one line before the "Profiling" line and before --out is made
    # (they used to leave an empty profile folder behind)
    resolve_dtype(torch, dev, dtype)
    timing_for(dev, quick, repeats)
    if threads is not None and threads < 1:
        raise TunerError(f"--threads must be >= 1, got {threads}.")
    if out_dir is None:
        out_dir = Path("profiles") / f"{spec.name}-{dev}"
    new_out = not out_dir.exists()
    check_out_dir(out_dir)
    out, err = _consoles()
    if not as_json:
        err.print(f"[bold]Profiling[/] {escape(spec.name)} on {dev} into {escape(str(out_dir))}"
                  f"{' (quick)' if quick else ''}", highlight=False)
    try:
        summary = run_profile(ProfileSettings(model=spec, out=out_dir, device=dev, quick=quick,
                                              dtype=dtype, repeats=repeats, threads=threads,
                                              families=families),
                              console=err.rich, progress=not as_json)
    except BaseException:  # a folder this command made stays only if something is in it
        if new_out and out_dir.is_dir() and not any(out_dir.iterdir()):
            out_dir.rmdir()
        raise
    doc = {"out": str(summary.out), "device": summary.device, "device_name": summary.device_name,
           "measured": summary.measured, "skipped_existing": summary.skipped_existing,
           "oom": summary.oom, "errors": summary.errors, "rows": summary.total_rows,
           "elapsed_s": round(summary.elapsed_s, 2)}
    if as_json:
        print(json.dumps(doc, indent=2))
        return
    out.print(f"measured {plural(summary.measured, 'case')} in {summary.elapsed_s:.1f} s on "
              f"{summary.device_name} ({summary.device}); {summary.skipped_existing} already in "
              f"the profile; {summary.oom} out of memory; {plural(summary.errors, 'error')}; "
              f"{summary.total_rows} rows in {summary.out / 'profile.csv'}", highlight=False,
              markup=False)
    out.print(f"next: tuner fit {summary.out}", highlight=False, markup=False)


def fit(
    profile_dir: Annotated[Path, typer.Argument(help="Profile folder from `tuner profile`.")],
    out_dir: Annotated[Path | None, typer.Option("--out", help="Where to write fit.json, "
                       "cv_errors.csv and fit.joblib (default: the profile folder).")] = None,
    folds: Annotated[int, typer.Option(help="k of the k-fold cross-validation.")] = 5,
    stat: Annotated[str, typer.Option(help="Time statistic to fit: auto (median on CUDA, p10 "
                    "on CPU), median, p10.")] = "auto",
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable JSON on stdout.")] = False,
) -> None:
    """Fit a profile into a cost model, choosing each operation's estimator by k-fold cross-validated error.

    Candidates: linear (InferMax), polynomial, random forest (Vidur), interpolation, saturating
    bandwidth curve (copies). Prints the CV error table and saves fit.json, cv_errors.csv and
    fit.joblib.

    Example: tuner fit profiles/tiny-llama-cpu
    """
    from tuner.predictors.fit import fit_profile
    from tuner.profilers.profile import check_out_dir

    if profile_dir.exists() and not profile_dir.is_dir():
        raise TunerError(f"{profile_dir} is a file; `tuner fit` takes the profile folder "
                         "(with profile.csv) that `tuner profile --out DIR` wrote.")
    if not profile_dir.is_dir():
        raise TunerError(f"Profile folder {profile_dir} does not exist (make one with "
                         "`tuner profile --model M --out DIR`).")
    from tuner.predictors.fit import resolve_stat

    resolve_stat(stat, {})  # a bad --stat or --folds fails before --out is made
    if folds < 2:
        raise TunerError(f"--folds must be >= 2, got {folds}.")
    target = out_dir or profile_dir
    check_out_dir(target)
    res = fit_profile(profile_dir, folds=folds, stat=stat)
    files = res.save(target)
    out, _err = _consoles()
    chosen = res.chosen_errors()
    if as_json:
        print(json.dumps(jsonable({
            "profile": str(profile_dir), "stat": res.stat, "folds": folds,
            "median_cv_mape": res.median_cv_mape(), "chosen": {of.key: of.chosen for of in res.ops},
            "chosen_cv_mape": chosen, "cv_errors": res.cv_table(),
            "efficiency_cv_mape": res.efficiency_cv, "specs": res.specs,
            "fit_seconds": res.fit_seconds, "files": {k: str(v) for k, v in files.items()}}),
            indent=2))
        return
    from rich.markup import escape
    from rich.table import Table

    names = sorted({m for of in res.ops for m in of.cv_mape},
                   key=["linear", "poly2", "forest", "interp", "saturating"].index)
    prov = res.provenance
    t = Table(title=escape(f"{res.stat} time, {folds}-fold CV error (MAPE) per operation: "
                           f"{prov.get('model')} on {prov.get('device_name')} "
                           f"({prov.get('device')})"))
    for col in ("operation", "rows", *names, "chosen"):
        t.add_column(col, justify="left" if col in ("operation", "chosen") else "right")
    for of in res.ops:
        cells = []
        for m in names:
            v = of.cv_mape.get(m)
            cell = "" if v is None else _pct(v)
            cells.append(f"[bold]{cell}[/]" if m == of.chosen else cell)
        t.add_row(escape(of.key), str(of.n), *cells, of.chosen)
    out.print(t)
    if res.efficiency_cv:
        out.print("efficiency curves (roofline transfer), CV error: " + ", ".join(
            f"{k} {_pct(v)}" for k, v in sorted(res.efficiency_cv.items())), highlight=False)
    out.print(f"median CV error of the chosen models (model operations): "
              f"{_pct(res.median_cv_mape())}; fitted in {res.fit_seconds:.1f} s", highlight=False)
    for k, v in files.items():
        out.print(f"wrote {k}: {v}", markup=False, highlight=False)


def cost(
    model: Annotated[str, typer.Option("--model", "-m", help="Catalog name or HF config.json.")],
    gpu: Annotated[str | None, typer.Option("--gpu", "-g", help="GPU type (`tuner gpus`); "
                   "default with --profile: the profiled device.")] = None,
    tokens: Annotated[int, typer.Option(help="Prefill tokens (one chunk) in the step.")] = 0,
    context: Annotated[int, typer.Option(help="Cached tokens before the prefill chunk.")] = 0,
    decodes: Annotated[int, typer.Option(help="Decode requests in the step.")] = 0,
    kv_tokens: Annotated[int, typer.Option(help="KV tokens the decodes read, summed over "
                         "them.")] = 0,
    profile_dir: Annotated[Path | None, typer.Option("--profile", help="Profile or fit folder "
                           "(or a folder of them); default: shipped profiles, else roofline.")] = None,
    profile_mode: ProfileModeOpt = "auto",
    tp: Annotated[int, typer.Option(help="Tensor-parallel degree.")] = 1,
    weight_bits: Annotated[int | None, typer.Option(help="16, 8 or 4. Default: the "
                           "checkpoint's (its quantization_config; 16 without one).",
                           show_default=False)] = None,
    kv_bits: Annotated[int, typer.Option(help="16, 8 or 4.")] = 16,
    gpu_file: Annotated[Path | None, typer.Option("--gpu-file", help="YAML with more GPUs.")] = None,
    engine_version: EngineVersionOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable JSON on stdout.")] = False,
) -> None:
    """Predicted time of one engine iteration per operation (per layer and total), with provenance.

    Provenance says measured / transferred / roofline, so a prediction can be checked against
    a measurement of your own.

    Example: tuner cost -m llama-3-8b -g A10 --tokens 512 --context 1024 --decodes 32 --kv-tokens 32000
    """
    from tuner.core.catalog import get_model
    from tuner.predictors.features import BatchFeatures
    from tuner.predictors.loader import provenance_kind

    spec = get_model(model)
    for name, v in (("--tokens", tokens), ("--context", context), ("--decodes", decodes),
                    ("--kv-tokens", kv_tokens)):
        if v < 0:
            raise TunerError(f"{name} must be >= 0, got {v}.")
    if tokens == 0 and decodes == 0:
        raise TunerError("An iteration needs --tokens N (prefill) and/or --decodes B.")
    _check_cost_tokens(spec, tokens, context, decodes, kv_tokens)
    if decodes and kv_tokens < decodes:
        kv_tokens = max(kv_tokens, decodes)  # each decode reads at least its own token
    # as `tuner simulate`: vLLM serves a quantized checkpoint at its own precision
    bits = spec.checkpoint_bits if weight_bits is None else weight_bits
    g, cm, in_catalog = _cost_model(spec, gpu, profile_dir, profile_mode, gpu_file, tp=tp,
                                    weight_bits=bits, kv_bits=kv_bits,
                                    engine_version=engine_version)
    f = BatchFeatures.single(prefill_tokens=tokens, context=context, decodes=decodes,
                             kv_tokens=kv_tokens)
    total = float(cm.iteration_time_s(f)[0])
    ops, groups = _cost_operations(cm, f, spec.num_layers, total)
    kind = provenance_kind(cm)
    # a stand-in for a profiled device borrows another GPU's memory: no note on it
    note = _weights_note(spec, g, tp, bits) if in_catalog else None
    doc = {"model": spec.name, "gpu": g.name, "tp": tp, "weight_bits": bits,
           "kv_bits": kv_bits,
           "batch": {"prefill_tokens": tokens, "context": context, "decodes": decodes,
                     "kv_tokens": kv_tokens},
           "provenance": {"kind": kind, "description": cm.describe(),
                          "error_pct": cm.provenance.error_pct},
           "operations": ops, "groups": groups, "total_s": total, "note": note}
    if as_json:
        print(json.dumps(jsonable(doc), indent=2))
        return
    _print_cost(doc, cm, kind)
    if note:
        out, _err = _consoles()
        out.print(f"note: {note}", style="yellow", markup=False, highlight=False)


def _check_cost_tokens(spec, tokens: int, context: int, decodes: int, kv_tokens: int) -> None:
    """One TunerError where the iteration cannot exist: a prefill chunk and its cached
    context beyond the model's context length (one request holds both), or decodes reading
    more KV than `decodes` requests of that length hold."""
    ctx = spec.max_position
    if context + tokens > ctx:
        what = (f"--context {context:,} + --tokens {tokens:,} = {context + tokens:,} tokens"
                if context else f"--tokens {tokens:,}")
        raise TunerError(f"{what} is beyond {spec.name}'s context length of {ctx:,} tokens: "
                         "a request's cached context and its prefill chunk must fit in it.")
    if kv_tokens > decodes * ctx:
        raise TunerError(f"--kv-tokens {kv_tokens:,} is more than {decodes:,} decode(s) can "
                         f"read: each holds at most {spec.name}'s context length of {ctx:,} "
                         "tokens.")


def _weights_note(spec, g, tp: int, weight_bits: int) -> str | None:
    """One line where the weights alone outgrow the GPU at this TP (`tuner cost` prices one
    iteration all the same: a note, not an error), else None."""
    from tuner.core.catalog import GIB
    from tuner.core.config import ServingConfig
    from tuner.core.memory import vision_weight_bytes_per_rank, weight_bytes_per_rank

    def per_gpu(n: int) -> float:  # a VLM's tower is loaded too
        c = ServingConfig(gpu=g.name, tp=n, weight_bits=weight_bits)
        return weight_bytes_per_rank(spec, c) + vision_weight_bytes_per_rank(spec, c)

    if per_gpu(tp) <= g.memory_bytes:
        return None
    # the smallest TP whose share of the weights fits, within one machine of the GPU
    wider = next((n for n in (2, 4, 8, 16, 32, 64) if tp < n <= g.gpus_per_machine
                  and per_gpu(n) <= g.memory_bytes), None)
    fix = (f"--tp {wider} holds them ({per_gpu(wider) / GIB:.1f} GiB per GPU, before any KV "
           "cache)" if wider else f"no TP within one {g.gpus_per_machine}-GPU machine holds "
           "them")
    return (f"{spec.name}'s {weight_bits}-bit weights take {per_gpu(tp) / GIB:.1f} GiB per GPU "
            f"at TP {tp}, more than {g.name}'s {g.memory_gib:g} GiB: this plan does not run "
            f"there; {fix}.")


def _cost_model(spec, gpu: str | None, profile_dir: Path | None, profile_mode: str,
                gpu_file: Path | None, *, tp: int, weight_bits: int, kv_bits: int,
                engine_version: str | None = None):
    """(GPU, CostModel, whether the GPU is a catalog one) of `tuner cost`: the cost-source
    registry's (predictors.sources: own profile -> measured tables -> transfer -> roofline),
    uncalibrated; without --gpu the profile's own device. A quantized checkpoint is refused
    at more bits than it stores, as `tuner simulate` does."""
    from tuner.core.catalog import get_gpu, load_gpus
    from tuner.core.config import ServingConfig, check_model_config
    from tuner.predictors.loader import check_profile_mode
    from tuner.predictors.sources import resolve_cost_model

    check_profile_mode(profile_mode)  # before the profile's device is looked up
    cat = load_gpus(gpu_file)
    if gpu is None:
        if profile_dir is None:
            raise TunerError("--gpu is required without --profile (e.g. --gpu A10).")
        g = _profile_device_gpu(profile_dir, spec, cat)
        if profile_mode == "auto" and g.name not in cat:
            profile_mode = "measured"
    else:
        g = get_gpu(gpu, cat)
    config = ServingConfig(gpu=g.name, tp=tp, weight_bits=weight_bits, kv_bits=kv_bits)
    check_model_config(config, spec)
    return g, resolve_cost_model(spec, g, config, profile=profile_dir, mode=profile_mode,
                                 engine_version=engine_version, calibrated=False), \
        g.name in cat


#: the `tuner cost` row that reconciles the per-operation rows with the iteration total
INTERPOLATION_ROW = "interpolation"


def _cost_operations(cm, f, L: int, total: float) -> tuple[list[dict], dict]:
    """(per-operation rows, per-group seconds) of one iteration: per layer and over the L
    layers; the LM head and the engine overhead once. Where the simulator's fast path
    (`total`, iteration_time_s: e.g. the kernel tables' token-count kernels as one combined
    curve, interpolated between measured sizes) differs from the sum of the rows (each kernel
    interpolated alone), one more row holds the difference, so the rows add up to what the
    simulator prices the step at."""
    groups = {k: float(v[0]) for k, v in cm.breakdown(f).items()}
    ops = [{"operation": op, "per_layer_s": float(v[0]), "layers": L, "total_s": float(v[0]) * L}
           for op, v in cm.breakdown_ops(f).items()]
    for k in ("lm_head", "overhead"):  # once per iteration
        if k in groups:
            ops.append({"operation": k, "per_layer_s": None, "layers": 1, "total_s": groups[k]})
    gap = total - sum(o["total_s"] for o in ops)
    if abs(gap) > 1e-9 * max(total, 1e-30):
        ops.append({"operation": INTERPOLATION_ROW, "per_layer_s": None, "layers": 1,
                    "total_s": gap})
        groups[INTERPOLATION_ROW] = gap
    return ops, groups


def _print_cost(doc: dict, cm, kind: str) -> None:
    """The `tuner cost` table: each operation's time and share of the iteration."""
    from rich.markup import escape
    from rich.table import Table

    ops, total = doc["operations"], doc["total_s"]
    b = doc["batch"]
    tokens, context, decodes, kv_tokens = (b["prefill_tokens"], b["context"], b["decodes"],
                                           b["kv_tokens"])
    out, _err = _consoles()
    t = Table(title=escape(f"{doc['model']} on {doc['gpu']}: one iteration ({tokens} prefill tokens "
                           f"after {context}, {decodes} decodes reading {kv_tokens} KV tokens)"))
    for col in ("operation", "per layer", "layers", "total", "share"):
        t.add_column(col, justify="left" if col == "operation" else "right")
    for o in ops:
        t.add_row(o["operation"], "" if o["per_layer_s"] is None else f"{1e6 * o['per_layer_s']:.1f} µs",
                  str(o["layers"]), f"{1e6 * o['total_s']:.1f} µs",
                  f"{100 * o['total_s'] / total:.1f} %" if total > 0 else "")
    t.add_row("[bold]iteration[/]", "", "", f"[bold]{1e3 * total:.3f} ms[/]", "100 %")
    out.print(t)
    desc = cm.describe()
    out.print(f"[dim]{escape(desc if desc.startswith(kind) else f'{kind}: {desc}')}[/]",
              highlight=False)
    if any(o["operation"] == INTERPOLATION_ROW for o in ops):
        out.print(f"[dim]{INTERPOLATION_ROW}: the simulator prices the kernels that depend on the "
                  "token count alone as one curve interpolated between measured sizes; the "
                  "rows above interpolate each alone[/]", highlight=False)


def _profile_device_gpu(profile_dir: Path, spec, cat: dict):
    """The GPU a profile was taken on (catalog entry), or a stand-in named after the device."""
    import dataclasses

    from tuner.predictors.loader import load_fit, profile_dirs

    dirs = profile_dirs(profile_dir)  # "does not exist" / "holds no profile", as simulate says
    prov = load_fit(dirs[0]).get("provenance", {})
    name = prov.get("gpu")
    if name and name in cat:
        return cat[name]
    base = next(iter(cat.values()))
    return dataclasses.replace(base, name=str(prov.get("device_name") or "device"),
                               price_source="stand-in for a profiled device")


def transfer(
    source: Annotated[Path, typer.Argument(help="Profile (or fit) folder of the measured "
                      "device to transfer from.")],
    target: Annotated[Path, typer.Argument(help="Profile folder of a second measured device "
                      "to predict and compare with.")],
    record: Annotated[bool, typer.Option(help="Store the error in SOURCE's fit.json (cited by "
                      "transferred cost models).")] = True,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable JSON on stdout.")] = False,
) -> None:
    """Transfer error: predict one measured device from another's efficiency curves and print the error.

    The target is predicted from the source's learned efficiency curves and the target's spec
    sheet (or measured peaks for a CPU); the error per operation class is stored in the
    source's fit.json, and transferred cost models cite it.

    Example: tuner transfer profiles/llama-3-8b-H100 profiles/llama-3-8b-A10
    """
    from tuner.predictors.devices import DeviceSpecs
    from tuner.predictors.fit import read_profile, resolve_stat
    from tuner.predictors.loader import load_fit, profile_dirs, record_transfer_check
    from tuner.predictors.transfer import transfer_error

    sdir, tdir = (profile_dirs(p)[0] for p in (source, target))  # as simulate words it
    sfit = load_fit(sdir)
    tfit = load_fit(tdir)
    tdf, tprov = read_profile(tdir)
    tspecs = DeviceSpecs.from_dict(tfit["specs"])
    stat = resolve_stat("auto", tprov)
    res = transfer_error(sfit, tdf, tspecs, stat=stat)
    sname = sfit.get("provenance", {}).get("gpu") or sfit.get("provenance", {}).get("device_name")
    tname = tprov.get("gpu") or tprov.get("device_name") or str(target)
    label = f"{tname} ({tprov.get('model')}, {tspecs.source}, threads {tprov.get('intra_threads')})"
    recorded = None
    same = sname is not None and str(sname) == str(tname)
    if record and same:  # not a transfer: the same device's own curves
        _consoles()[1].print(f"not recorded: {source} and {target} were both measured on "
                             f"{sname}; a transfer error needs two devices", style="yellow",
                             markup=False)
    elif record and "fitted_in_memory" not in sfit:
        recorded = record_transfer_check(Path(sfit["_dir"]), label, jsonable(res))
    if as_json:
        print(json.dumps(jsonable({"source": str(source), "target": str(target),
                                    "source_device": sname, "target_device": label,
                                    "target_specs": tspecs.to_dict(), "stat": stat,
                                    "errors": res, "recorded_in": str(recorded) if recorded else None}),
                         indent=2))
        return
    from rich.markup import escape
    from rich.table import Table

    out, _err = _consoles()
    t = Table(title=escape(f"transfer error: {sname} -> {label}"))
    for col in ("class", "rows", "MAPE", "median APE"):
        t.add_column(col, justify="left" if col == "class" else "right")
    for cls, v in res.items():
        t.add_row(cls, str(v["rows"]), _pct(v["mape"]), _pct(v["median_ape"]))
    out.print(t)
    if recorded:
        out.print(f"recorded in {recorded}", markup=False, highlight=False)


def register(app: typer.Typer) -> None:
    app.command()(profile)
    app.command()(fit)
    app.command()(cost)
    app.command()(transfer)
