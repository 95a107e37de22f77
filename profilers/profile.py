"""`tuner profile`: measure every operation of a model on this machine's device into a profile
directory (profile.csv + provenance.json). Resumable: rows already in the CSV are skipped, and
each row is flushed as soon as it is measured. torch is imported here, never by tuner itself.
"""

from __future__ import annotations

import datetime as _dt
import gc
import json
import os
import platform
import subprocess
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from tuner.core.errors import TunerError, ensure_writable_dir
from tuner.core.host import cpu_name
from tuner.core.io import dumps, write_atomic
from tuner.predictors.opmath import shape_dict
from tuner.profilers.plan import GIB, MIB, PlanLimits, build_plan
from tuner.profilers.schema import (
    PROFILE_CSV,
    PROVENANCE_JSON,
    Case,
    RowWriter,
    make_row,
    read_rows,
    row_key,
)
from tuner.profilers.timing import Sampler, TimingSettings, measure_interleaved

INSTALL_HINT = 'pip install -e ".[profile]"'


def import_torch():
    try:
        import torch
    except ImportError:
        raise TunerError(f"PyTorch is not installed; profiling needs it: {INSTALL_HINT}") from None
    return torch


@dataclass
class ProfileSettings:
    model: object  # tuner.core.catalog.ModelSpec
    out: Path
    device: str = "auto"  # auto | cuda | cpu
    quick: bool = False
    dtype: str = "auto"  # auto | float16 | bfloat16 | float32
    repeats: int | None = None
    threads: int | None = None  # torch intra-op threads for the whole profile (CPU device)
    families: frozenset[str] | None = None


@dataclass
class ProfileSummary:
    out: Path
    device: str
    device_name: str
    measured: int
    skipped_existing: int
    oom: int
    errors: int
    elapsed_s: float
    total_rows: int
    notes: list[str] = field(default_factory=list)


def resolve_device(torch, device: str) -> str:
    device = (device or "auto").lower()
    if device not in ("auto", "cuda", "cpu"):
        raise TunerError(f"--device must be cuda or cpu, got {device!r}.")
    has_cuda = bool(torch.cuda.is_available())
    if device == "cuda" and not has_cuda:
        raise TunerError("--device cuda: no CUDA GPU is visible to torch "
                         f"(torch {torch.__version__}, CUDA build: {torch.version.cuda or 'none'}); "
                         "use --device cpu or run on a GPU machine.")
    if device == "auto":
        return "cuda" if has_cuda else "cpu"
    return device


#: the element type a CPU is profiled in (`--dtype auto`); the vLLM runner runs a CPU engine in
#: it too (runners/_vllm_worker.py): many CPUs (AVX2, no AVX-512) have no fast bfloat16
CPU_DTYPE = "float32"


def resolve_dtype(torch, device: str, dtype: str):
    names = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}
    if dtype in (None, "", "auto"):
        if device == "cuda":  # pragma: no cover - GPU
            return "bfloat16" if torch.cuda.is_bf16_supported() else "float16", None
        return CPU_DTYPE, None
    if dtype not in names:
        raise TunerError(f"--dtype must be auto, float16, bfloat16 or float32, got {dtype!r}.")
    return dtype, names[dtype]


def _host_available_bytes() -> int:
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):  # pragma: no cover
        return 4 * GIB


def _host_total_bytes() -> int:
    try:
        return int(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):  # pragma: no cover
        return 0


def _floor_pow2(x: float) -> int:
    x = max(int(x), 1)
    return 1 << (x.bit_length() - 1)


def _driver_version() -> str | None:  # pragma: no cover - GPU machines
    try:
        r = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                           capture_output=True, text=True, timeout=10)
        return r.stdout.strip().splitlines()[0] if r.returncode == 0 and r.stdout.strip() else None
    except (OSError, subprocess.TimeoutExpired):
        return None


def _thread_grid(n: int, quick: bool) -> tuple[int, ...]:
    if quick:
        return tuple(sorted({1, n}))
    return tuple(sorted({1 << i for i in range(8) if (1 << i) <= n} | {n}))


def limits_for(torch, device: str, model, quick: bool, dtype_bytes: int,
               families: frozenset[str] | None) -> PlanLimits:
    ncpu = max(1, os.cpu_count() or torch.get_num_threads())  # the thread sweep spans the host
    host = _host_available_bytes()
    kw: dict = {"device": device, "quick": quick, "cpu_threads": _thread_grid(ncpu, quick),
                "interop_threads": tuple(sorted({1, min(2, ncpu)} if quick
                                                else {1 << i for i in range(4) if (1 << i) <= ncpu}))}
    if families:
        kw["families"] = frozenset(families)
    kv_token_bytes = 2 * model.num_kv_heads * model.head_dim * dtype_bytes
    if device == "cuda":  # pragma: no cover - GPU
        free, _total = torch.cuda.mem_get_info()
        kw.update(max_copy_bytes=min(8 * GIB, _floor_pow2(min(free, host) / 3)),
                  max_quant_bytes=min(64 * MIB if quick else 1 * GIB, _floor_pow2(free / 8)),
                  max_decode_kv_tokens=int(free / 4 / kv_token_bytes))
    else:
        kw.update(max_copy_bytes=min(64 * MIB if quick else 1 * GIB, _floor_pow2(host / 4)),
                  max_quant_bytes=min(4 * MIB if quick else 64 * MIB, _floor_pow2(host / 16)),
                  max_prefill_work=float(1 << 21 if quick else 1 << 23),
                  max_decode_kv_tokens=min(1 << 17 if quick else 1 << 19,
                                           int(host / 8 / kv_token_bytes)))
    return PlanLimits(**kw)


def timing_for(device: str, quick: bool, repeats: int | None) -> TimingSettings:
    if device == "cuda":  # pragma: no cover - GPU
        s = TimingSettings(warmup=3, repeats=10 if quick else 20, min_sample_s=1e-3,
                           max_case_s=0.5 if quick else 1.0, max_calls=500, rounds=2)
    else:
        s = (TimingSettings(warmup=2, repeats=6, min_sample_s=5e-4, max_case_s=0.15, max_calls=100,
                            rounds=3)
             if quick else
             TimingSettings(warmup=2, repeats=9, min_sample_s=1e-3, max_case_s=0.4, max_calls=200,
                            rounds=3))
    if repeats is not None:
        if repeats < 3:
            raise TunerError(f"--repeats must be >= 3 (median and spread need samples), got {repeats}.")
        s = replace(s, repeats=repeats)
    return s


def check_out_dir(out: Path) -> None:
    ensure_writable_dir(out, "the profile")


def _is_oom(exc: BaseException) -> bool:
    if isinstance(exc, MemoryError) or type(exc).__name__ == "OutOfMemoryError":
        return True
    msg = str(exc).lower()
    return "out of memory" in msg or "can't allocate memory" in msg or "not enough memory" in msg


def _provenance(torch, device: str, dtype: str, model, settings: ProfileSettings,
                timing: TimingSettings) -> dict:
    from tuner.core.catalog import load_gpus
    from tuner.predictors.devices import match_gpu

    if device == "cuda":  # pragma: no cover - GPU
        props = torch.cuda.get_device_properties(0)
        name, mem = torch.cuda.get_device_name(0), int(props.total_memory)
        gpu = match_gpu(name, mem, load_gpus())
        driver = _driver_version()
    else:
        name, mem, gpu, driver = cpu_name(), _host_total_bytes(), None, None
    try:
        from importlib.metadata import version

        tool = version("tuner")
    except Exception:  # noqa: BLE001
        tool = "unknown"
    return {
        "format": "tuner-profile/1",
        "device": device,
        "device_name": name,
        "gpu": gpu,
        "memory_bytes": mem,
        "driver": driver,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": (torch.backends.cudnn.version() if device == "cuda" else None),
        "dtype": dtype,
        "model": getattr(model, "name", "model"),
        "model_shape": shape_dict(model) | {"max_position": int(getattr(model, "max_position", 0))},
        "quick": settings.quick,
        "repeats": timing.repeats,
        "warmup": timing.warmup,
        "min_sample_s": timing.min_sample_s,
        "intra_threads": torch.get_num_threads(),
        "inter_threads": torch.get_num_interop_threads(),
        "host": {"name": platform.node(), "platform": platform.platform(),
                 "cpu": cpu_name(), "cpu_count": os.cpu_count(),
                 "python": platform.python_version()},
        "tool_version": tool,
        "command": " ".join(["tuner", *sys.argv[1:]]) if sys.argv else "",
        "date": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "runs": [],
    }


def _check_resume(old: dict, new: dict, out: Path) -> None:
    for k in ("device", "dtype", "model_shape"):
        if old.get(k) != new.get(k):
            raise TunerError(
                f"{out} holds a profile of {old.get('model')} on {old.get('device_name')} "
                f"({old.get('dtype')}); this run measures {new['model']} on {new['device_name']} "
                f"({new['dtype']}): pass another --out.")
    if old.get("device_name") != new.get("device_name"):
        raise TunerError(f"{out} was measured on {old.get('device_name')}, not on "
                         f"{new['device_name']}: pass another --out.")


def run_profile(settings: ProfileSettings, *, console=None, progress: bool = True) -> ProfileSummary:
    """Measure everything the plan lists that the CSV lacks; returns what was done."""
    torch = import_torch()
    device = resolve_device(torch, settings.device)
    dtype_name, tdtype = resolve_dtype(torch, device, settings.dtype)
    tdtype = tdtype or getattr(torch, dtype_name)
    threads = settings.threads
    if threads is None and settings.quick and device == "cpu":
        # --quick on a CPU is CI's smoke profile: one intra-op thread keeps it fast and stable
        # on a shared runner, where busy cores stall multi-threaded kernels at every barrier
        # (the thread sweep, family `threads`, still spans 1...cores).
        threads = 1
    if threads is not None and threads < 1:
        raise TunerError(f"--threads must be >= 1, got {threads}.")
    previous = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        return _run(torch, settings, device, dtype_name, tdtype, console, progress)
    finally:
        torch.set_num_threads(previous)  # the setting is process-wide: leave it as found


def _resume_provenance(prov: dict, out: Path) -> None:
    """Carry the runs of an earlier profile in `out` over (resuming it: same device, model and
    settings, else TunerError), then write provenance.json."""
    prov_path, csv_path = out / PROVENANCE_JSON, out / PROFILE_CSV
    if prov_path.is_file():
        try:
            old = json.loads(prov_path.read_text())
        except (OSError, json.JSONDecodeError):
            old = None
        if old:
            _check_resume(old, prov, out)
            prov["runs"] = old.get("runs", [])
            prov["date_first"] = old.get("date_first", old.get("date"))
    elif csv_path.is_file() and csv_path.stat().st_size > 0:
        raise TunerError(f"{out} has a profile.csv but no provenance.json: pass another --out.")
    prov.setdefault("date_first", prov["date"])
    _write_json(prov_path, prov)


def _measure_cases(torch, factory, todo: list[Case], *, model, dtype_name: str, device: str,
                   timing: TimingSettings, writer, prog, task, summary: ProfileSummary) -> None:
    """Measure every case of `todo` (operators in memory-bounded chunks, a family at a time;
    CPU-thread cases last), writing rows as they come."""
    thread_cases = [c for c in todo if c.operation.startswith("cpu.")]
    other = [c for c in todo if not c.operation.startswith("cpu.")]
    budget = (2 * GIB) if device == "cuda" else (512 * MIB)
    last_family = None
    done_n = 0
    for chunk in _chunks(other, budget):
        op = chunk[0].operation
        prog.update(task, description=f"{op:<16}")
        family = op.split(".")[0]
        if last_family is not None and family != last_family:
            factory.release()
        last_family = family

        def on_round(r, _n=len(chunk), _base=done_n):
            prog.update(task, completed=_base + _n * (r + 1) / max(1, timing.rounds))

        for row in _measure_chunk(torch, factory, chunk, dtype_name, device, timing, on_round):
            summary.oom += row["status"] == "oom"
            summary.errors += row["status"].startswith("error")
            writer.write(row)
            summary.measured += 1
        done_n += len(chunk)
        prog.update(task, completed=done_n)
    factory.release()
    if thread_cases:
        prog.update(task, description=f"{'cpu threads':<16}")
        for row in _measure_threads(model, thread_cases, timing):
            summary.errors += row["status"].startswith("error")
            writer.write(row)
            summary.measured += 1
            done_n += 1
            prog.update(task, completed=done_n)


def _run(torch, settings: ProfileSettings, device: str, dtype_name: str, tdtype, console,
         progress: bool) -> ProfileSummary:
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    from tuner.profilers.ops import OpFactory

    out = Path(settings.out)
    check_out_dir(out)
    model = settings.model
    timing = timing_for(device, settings.quick, settings.repeats)
    dtype_bytes = torch.empty((), dtype=tdtype).element_size()
    limits = limits_for(torch, device, model, settings.quick, dtype_bytes, settings.families)
    plan = build_plan(model, limits, dtype_bytes)

    prov = _provenance(torch, device, dtype_name, model, settings, timing)
    _resume_provenance(prov, out)
    csv_path = out / PROFILE_CSV
    done = {row_key(r) for r in read_rows(csv_path)}
    todo = [c for c in plan if c.key(case_dtype(c, dtype_name, device)) not in done]
    summary = ProfileSummary(out=out, device=device, device_name=prov["device_name"], measured=0,
                             skipped_existing=len(plan) - len(todo), oom=0, errors=0,
                             elapsed_s=0.0, total_rows=0)
    t_start = time.perf_counter()
    factory = OpFactory(torch, device, tdtype, model)
    try:
        with RowWriter(csv_path) as writer, Progress(
                TextColumn("[progress.description]{task.description}"), BarColumn(),
                MofNCompleteColumn(), TimeElapsedColumn(), TimeRemainingColumn(),
                console=console, transient=False, disable=not progress) as prog:
            task = prog.add_task(f"profiling {prov['model']} on {device}", total=len(todo))
            _measure_cases(torch, factory, todo, model=model, dtype_name=dtype_name,
                           device=device, timing=timing, writer=writer, prog=prog, task=task,
                           summary=summary)
    except KeyboardInterrupt:
        # Ctrl-C, or `timeout -s INT` cutting a budgeted run: the rows written so far stay
        # (a rerun resumes after them), and provenance says this run was cut and what the
        # folder holds, instead of losing the totals of the runs before it
        _record_run(prov, out, settings, summary, time.perf_counter() - t_start, cut=True)
        raise
    _record_run(prov, out, settings, summary, time.perf_counter() - t_start, cut=False)
    return summary


def _record_run(prov: dict, out: Path, settings: ProfileSettings, summary: ProfileSummary,
                elapsed_s: float, *, cut: bool) -> None:
    """Append this run to provenance.json with the folder's totals (rows, status counts)."""
    summary.elapsed_s = elapsed_s
    rows = read_rows(out / PROFILE_CSV)
    summary.total_rows = len(rows)
    run = {"date": prov["date"], "measured": summary.measured,
           "skipped_existing": summary.skipped_existing, "elapsed_s": round(elapsed_s, 2),
           "quick": settings.quick, "oom": summary.oom, "errors": summary.errors}
    if cut:
        run["cut"] = True  # interrupted before its plan was done
    prov["runs"].append(run)
    prov["elapsed_s"] = round(sum(r["elapsed_s"] for r in prov["runs"]), 2)
    prov["rows"] = len(rows)
    prov["status_counts"] = _count_status(rows)
    _write_json(out / PROVENANCE_JSON, prov)


def case_dtype(case: Case, dtype: str, device: str) -> str:
    """Element type a case really runs in (its CSV dtype and part of its resume key)."""
    if case.operation.startswith("copy."):
        return "uint8"
    if case.operation.startswith("cpu.") or (case.operation in ("quant", "dequant") and (
            device != "cuda" or case.variant.endswith("/cpu"))):
        return "float32"
    return dtype


def _count_status(rows: list[dict]) -> dict[str, int]:
    out: dict[str, int] = {}
    for r in rows:
        k = r["status"].split(":")[0]
        out[k] = out.get(k, 0) + 1
    return out


def _write_json(path: Path, data: dict) -> None:
    write_atomic(path, dumps(data))


def _footprint(c: Case) -> float:
    """Rough bytes a case keeps allocated while it is timed."""
    return 2.0 * max(c.bytes_moved, c.size_bytes) + c.tokens * (c.tokens + c.context)


def _chunks(cases: list[Case], budget: float, max_cases: int = 48):
    """Consecutive cases of one operation that fit in memory together (timed interleaved);
    big cases alone."""
    chunk: list[Case] = []
    mem = 0.0
    for c in cases:
        foot = _footprint(c)
        if foot > budget / 4:
            if chunk:
                yield chunk
                chunk, mem = [], 0.0
            yield [c]
            continue
        if chunk and (c.operation != chunk[0].operation or mem + foot > budget
                      or len(chunk) >= max_cases):
            yield chunk
            chunk, mem = [], 0.0
        chunk.append(c)
        mem += foot
    if chunk:
        yield chunk


def _failure_status(exc: BaseException) -> str:
    status = "oom" if _is_oom(exc) else f"error: {type(exc).__name__}: {str(exc)[:120]}"
    return " ".join(status.split())


def _measure_chunk(torch, factory, chunk: list[Case], dtype: str, device: str,
                   timing: TimingSettings, on_round=None) -> list[dict]:
    """Rows for a chunk of cases: each calibrated alone, then sampled round-robin."""
    rows: list[dict | None] = [None] * len(chunk)
    live: list[tuple[int, Case, Sampler]] = []
    for i, case in enumerate(chunk):
        cdt = case_dtype(case, dtype, device)
        if case.variant == "skipped":
            rows[i] = make_row(case, cdt, status=f"skipped: no CUDA device ({device} profile); "
                               "host memcpy bandwidth is in copy.host")
            continue
        try:
            fn, kind = factory.build(case)
            if kind == "host_sync":
                sm = Sampler(fn, "host_sync", torch.cuda.synchronize if device == "cuda" else None)
            elif kind == "device" and device == "cuda":  # pragma: no cover - GPU
                sm = Sampler(fn, "cuda", torch.cuda.synchronize)
            else:
                sm = Sampler(fn, "cpu")
            sm.calibrate(timing)
            live.append((i, case, sm))
        except Exception as exc:  # noqa: BLE001 - one failed size must not end the profile
            rows[i] = make_row(case, cdt, status=_failure_status(exc))
            _cleanup(torch, device)
    results = measure_interleaved([sm for _, _, sm in live], timing, on_round)
    for (i, case, _sm), res in zip(live, results, strict=True):
        cdt = case_dtype(case, dtype, device)
        if isinstance(res, Exception):
            rows[i] = make_row(case, cdt, status=_failure_status(res))
        else:
            rows[i] = make_row(case, cdt, median_s=res.median_s, p10_s=res.p10_s,
                               p90_s=res.p90_s, repeats=res.repeats,
                               calls_per_sample=res.calls_per_sample)
    live.clear()
    if len(chunk) == 1 or any(c.operation.startswith(("attn.", "copy.", "quant", "dequant"))
                              for c in chunk[:1]):
        _cleanup(torch, device)
    return [r for r in rows if r is not None]


def _cleanup(torch, device: str) -> None:
    gc.collect()
    if device == "cuda":  # pragma: no cover - GPU
        torch.cuda.empty_cache()


def _measure_threads(model, cases: list[Case], timing: TimingSettings):
    from tuner.profilers.cpu_threads import run_subprocess

    by_inter: dict[int, list[Case]] = {}
    for c in cases:
        by_inter.setdefault(c.inter_threads, []).append(c)
    for inter, group in by_inter.items():
        intra = sorted({c.intra_threads for c in group})
        res = run_subprocess(inter, intra, model, timing)
        for c in group:
            d = res.get((c.operation, c.intra_threads)) if "error" not in res else None
            if d is None:
                yield make_row(c, "float32", status=f"error: {res.get('error', 'not measured')}")
                continue
            yield make_row(c, "float32", median_s=d["median_s"], p10_s=d["p10_s"],
                           p90_s=d["p90_s"], repeats=d["repeats"],
                           calls_per_sample=d["calls_per_sample"])
