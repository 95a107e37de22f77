#!/usr/bin/env bash
# The device check for the GPU machine this workplace lends (one NVIDIA H200, no network, a
# 10-minute command, 15 minutes of device time a session, start-up included): in ONE command of
# at most BUDGET_S (480 s), measure tuner's cost curves on the GPU and check them against what
# tuner prices that GPU with, and pack the results into 5 files under $OUT (the tool brings back
# at most 8, each <= 16 MiB, at most $OUT/a/b/file deep).
#
#   1. `tuner profile` of llama-3-8b on cuda (operators, then host<->device copies), `tuner fit`
#   2. the measured GEMM / attention curves against the H200 kernel tables tuner uses by default
#      (AIConfigurator's, via benchmarks/profile_vs_tables.py), the best measured GEMM rate, HBM
#      and host-link bandwidth against the catalog's H200 figures, and per family against the
#      H100 profiles in benchmarks/data/h100-2026-11-26 (same shapes, same PyTorch)
#   3. the example job (examples/arxiv.jsonl) simulated with the tables and with the profile, and
#      a `tuner search` on 1 x H200 priced by the profile
#   4. while time remains: llama-3-70b (one layer) and llama-2-7b operators (the H100 set's other
#      shapes), then the host-side families (quant, threads) of llama-3-8b and a final fit
# Every step has its own limit and the whole run a budget, so the command ends inside it even if
# a step hangs; a failed or cut step does not stop the ones after it (a step is cut with SIGINT, as
# a Ctrl-C, then killed 5 s later: a cut profile keeps its rows and records the cut run and its
# totals in provenance.json).
#
#   3b. (VALIDATE=0 leaves it out) `tuner validate --runner transformers` on 64 requests of the
#      job: the image's transformers' continuous batching on random weights of the model's shape
# NOT here: a vLLM run. The machine has no vLLM (its wheel alone is over the 64 MiB a call
# carries, and nothing can be fetched there) and no model weights (no Hugging Face hub), so
# `tuner validate --runner vllm` and `vllm bench serve` (benchmarks/on_gpu.sh, for a networked
# machine of your own) cannot run.
#
# Before the call, HERE (PyPI reachable): `bash benchmarks/device_wheels.sh` (optuna, plotly,
# typer 0.28 and their needs into .whl/, ~15 MiB; the image lacks them). Then the call:
#
# run: {"command": "PYTHONUNBUFFERED=1 bash benchmarks/on_device.sh", "carry": [".whl"], "timeout_s": 560}
#
# (timeout_s 560 = BUDGET_S 480 + step kill grace and packing; a setup failure ends in seconds, which
# leaves time to fix and rerun; else call give_back.) Afterwards: benchmarks/README.md, "On the
# lent GPU".
#
#   DRY_RUN=1 OUT=/tmp/x bash benchmarks/on_device.sh     print the steps, run nothing (CI)
#   REHEARSAL=1 OUT=/tmp/x bash benchmarks/on_device.sh   the same pipeline on this CPU: tiny-llama,
#       --quick, the current python (PYTHON=), ~1-2 min (tests/test_on_device_s52.py runs it)
set -uo pipefail
OUT=${OUT:?set OUT to a folder}
REPO=$(cd "$(dirname "$0")/.." && pwd)
DRY_RUN=${DRY_RUN:-}
REHEARSAL=${REHEARSAL:-}
if [ -n "$REHEARSAL" ]; then
    # CPU stand-in for the device: same steps and packing, a tiny model and quick grids
    DEVICE=cpu; QUICK=(--quick)
    MODEL=${MODEL:-tiny-llama}; EXTRA_MODELS=${EXTRA_MODELS:-}
    BUDGET_S=${BUDGET_S:-300}
    PY=${PYTHON:-$([ -x "$REPO/.venv/bin/python" ] && echo "$REPO/.venv/bin/python" || echo python3)}
else
    DEVICE=cuda; QUICK=()
    MODEL=${MODEL:-llama-3-8b}; EXTRA_MODELS=${EXTRA_MODELS-llama-3-70b llama-2-7b}
    BUDGET_S=${BUDGET_S:-480}
    PY=${PYTHON:-python3}  # the image's /opt/torch/.venv/bin/python3 (torch 2.11, cu130)
fi
GPU=${GPU:-H200}           # catalog GPU the search prices; the profile's own match replaces it
# PROFILE=0: steps 1-3 and 4 left out, only the transformers run (a second call of a session
# whose profiles came back already)
PROFILE=${PROFILE-1}; [ "$PROFILE" = 0 ] && PROFILE=
VALIDATE=${VALIDATE-1}     # step 3b, the transformers run; VALIDATE=0 or '' leaves it out
[ "$VALIDATE" = 0 ] && VALIDATE=
# its Python (transformers >= 5): the device's own; in the rehearsal .venv-vllm's (has it)
if [ -n "$REHEARSAL" ] && [ -x "$REPO/.venv-vllm/bin/python" ]; then
    VALIDATE_PY=${VALIDATE_PYTHON:-$REPO/.venv-vllm/bin/python}
else
    VALIDATE_PY=${VALIDATE_PYTHON:-$PY}
    [ -n "$REHEARSAL" ] && [ -z "${VALIDATE_PYTHON:-}" ] && VALIDATE=  # no transformers here
fi
N_TRIALS=${N_TRIALS:-300}
RESERVE_S=25               # kept back from the budget for the summary and the packing
WORK=${WORK:-/tmp/tuner-device}
SITE=$WORK/site LOGS=$WORK/logs PROF=$WORK/profiles RES=$WORK/results
WORKLOAD=$REPO/examples/arxiv.jsonl
H100_DATA=$REPO/benchmarks/data/h100-2026-11-26
# -P: the working folder is not put on sys.path (a checkout's tuner/ is not the installed layout)
TUNER=("$PY" -P -m tuner.cli)
T0=$SECONDS

left_s() { echo $(( BUDGET_S - RESERVE_S - (SECONDS - T0) )); }
step() {  # step NAME LIMIT_S COMMAND...: run with a limit (cut to the budget left), log, go on.
    # STDOUT=FILE before it sends stdout there (stderr to the log).
    local name=$1 limit=$2; shift 2
    local left; left=$(left_s)
    (( limit > left )) && limit=$left
    echo "== $name (limit ${limit}s, $(( SECONDS - T0 ))s into the run)"
    if [ -n "$DRY_RUN" ]; then  # inline Python shows as <python>
        local a shown=(); for a in "$@"; do [[ $a == *$'\n'* ]] && a='<python>'; shown+=("$a"); done
        echo "+ timeout $limit ${shown[*]}"; return 0
    fi
    if (( limit < 5 )); then
        echo "   skipped: the budget is spent"; printf '%s\tskipped\t0\t0\n' "$name" >> "$WORK/steps.tsv"
        return 0
    fi
    local t=$SECONDS rc
    if [ -n "${STDOUT:-}" ]; then
        timeout -s INT -k 5 "$limit" "$@" > "$STDOUT" 2> "$LOGS/$name.log" < /dev/null
    else
        timeout -s INT -k 5 "$limit" "$@" > "$LOGS/$name.log" 2>&1 < /dev/null
    fi
    rc=$?
    printf '%s\t%s\t%s\t%s\n' "$name" "$rc" "$(( SECONDS - t ))" "$limit" >> "$WORK/steps.tsv"
    echo "   exit $rc in $(( SECONDS - t ))s$( (( rc == 124 || rc == 137 )) && echo ' (cut at its limit)')"
    tail -n 2 "$LOGS/$name.log" | cut -c1-160 | sed 's/^/   | /'
    return 0
}

mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd) || exit 1  # absolute: the steps run in $WORK
echo "on_device: $MODEL on $DEVICE, budget ${BUDGET_S}s, work in $WORK, results in $OUT"
if [ -z "$DRY_RUN" ]; then
    # tuner's installed layout (pyproject's package-dir) without pip or a build backend: the
    # top-level folders go under tuner/; the carried wheels beside it; nothing fetched
    case "$WORK/" in /|"$REPO"/*|"$OUT"/*) echo "WORK=$WORK: not / nor inside the checkout or OUT"; exit 1;; esac
    rm -rf "$WORK" && mkdir -p "$SITE" "$LOGS" "$PROF" "$RES" || exit 1
    : > "$WORK/steps.tsv"
    cp -r "$REPO/tuner" "$SITE/tuner" || exit 1
    for sub in predictors profilers runners reports search_spaces; do
        cp -r "$REPO/$sub" "$SITE/tuner/$sub" || exit 1
    done
    # (the rehearsal's Python is this machine's, not the device's 3.12 the wheels are for)
    if [ -z "$REHEARSAL" ] && ls "$REPO"/.whl/*.whl > /dev/null 2>&1; then
        "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
            --target "$SITE" "$REPO"/.whl/*.whl > "$LOGS/install.log" 2>&1 \
            || { echo "wheel install failed:"; tail -5 "$LOGS/install.log"; }
    fi
    # the simulator's C kernels compile at first use when a C compiler is there; else the
    # library device_wheels.sh built (a plain C library loaded by ctypes: no Python ABI)
    if ! command -v cc > /dev/null && ! command -v gcc > /dev/null && [ -f "$REPO/.whl/_kernels.so" ]; then
        cp "$REPO/.whl/_kernels.so" "$SITE/tuner/sim/_kernels.so"
    fi
    export PYTHONPATH=$SITE PYTHONUNBUFFERED=1 XDG_CACHE_HOME=$WORK/cache
    cd "$WORK" || exit 1
    NVSMI=
    if command -v nvidia-smi > /dev/null; then
        { nvidia-smi; nvidia-smi -q -d CLOCK,POWER,PERFORMANCE; } > "$LOGS/nvidia-smi.txt" 2>&1 &
        NVSMI=$!
    fi
fi

step preflight 90 "$PY" -P -c "
import sys, importlib.metadata as md, torch
import tuner.cli.main, optuna, plotly, sklearn
from tuner.sim.kernels import library
library()  # builds or loads the simulator's C kernels now, not inside a timed step
print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.cuda.is_available(),
      torch.cuda.get_device_name(0) if torch.cuda.is_available() else '')
def version(name):
    try:
        return md.version(name)
    except md.PackageNotFoundError:
        return 'absent'
print(' '.join(f'{n} {version(n)}' for n in ('optuna', 'sqlalchemy', 'plotly', 'typer', 'rich',
      'numpy', 'pandas', 'scikit-learn', 'transformers')))
sys.exit(0 if '$DEVICE' != 'cuda' or torch.cuda.is_available() else 'no CUDA device visible')
"
if [ -z "$DRY_RUN" ]; then
    [ -n "$NVSMI" ] && wait "$NVSMI" && head -n 12 "$LOGS/nvidia-smi.txt" | sed 's/^/   /'
    if [ "$(cut -f2 "$WORK/steps.tsv" | head -1)" != 0 ]; then
        echo "preflight failed: nothing measured (logs in $OUT/logs.tar.gz)"; cat "$LOGS/preflight.log"
        PREFLIGHT_FAILED=1
    fi
fi

# The measured curves against the kernel tables tuner prices this GPU with (profile_vs_tables).
read -r -d '' COMPARE_PY <<'PY'
import importlib.util, json, shutil, sys, tempfile
from pathlib import Path
prof, gpu, tool, rehearsal = Path(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
spec = importlib.util.spec_from_file_location("profile_vs_tables", tool)
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)
prov = json.loads((prof / "provenance.json").read_text())
stand_in = False
if not prov.get("gpu") and rehearsal:
    # rehearsal only: a CPU profile matches no catalog GPU; it is compared as if it were GPU's
    # to run the code path, and the ratios mean nothing (stand_in_gpu says so)
    tmp = Path(tempfile.mkdtemp()) / prof.name
    shutil.copytree(prof, tmp, ignore=shutil.ignore_patterns("fit.joblib"))
    (tmp / "provenance.json").write_text(json.dumps(prov | {"gpu": gpu}))
    prof, stand_in = tmp, True
json.dump(mod.compare(prof) | {"stand_in_gpu": stand_in}, sys.stdout, indent=1)
PY

profile() {  # profile MODEL NAME FAMILIES LIMIT_S
    step "$2" "$4" "${TUNER[@]}" profile --model "$1" --device "$DEVICE" "${QUICK[@]}" \
        --only "$3" --out "$PROF/$1"
}
if [ -z "${PREFLIGHT_FAILED:-}" ] && [ -n "$PROFILE" ]; then
    # 1. what the simulator's step time is made of, then the copies (offloading); ~45 + ~80 s on
    #    an H100 for 575 + 88 cases (benchmarks/data/h100-2026-11-26/README.md)
    profile "$MODEL" "profile_ops_$MODEL" linear,elementwise,lm_head,attention 180
    profile "$MODEL" "profile_copy_$MODEL" copy 150
    if [ -z "$DRY_RUN" ] && [ -f "$PROF/$MODEL/provenance.json" ]; then
        matched=$("$PY" -c 'import json, sys; print(json.load(open(sys.argv[1]))["gpu"] or "")' \
                  "$PROF/$MODEL/provenance.json" 2>/dev/null)
        [ -n "$matched" ] && GPU=$matched
    fi
    step "fit_$MODEL" 60 "${TUNER[@]}" fit "$PROF/$MODEL"
    # 2-3. against the tables and the catalog (in the summary), the job priced both ways
    STDOUT=$RES/compare_$MODEL.json step "compare_$MODEL" 60 "$PY" -P -c "$COMPARE_PY" \
        "$PROF/$MODEL" "$GPU" "$REPO/benchmarks/profile_vs_tables.py" "$REHEARSAL"
    for src in tables profile; do
        extra=(); [ "$src" = profile ] && extra=(--profile "$PROF/$MODEL")
        STDOUT=$RES/simulate_$src.json step "simulate_$src" 60 "${TUNER[@]}" simulate \
            -w "$WORKLOAD" -m "$MODEL" -g "$GPU" --json "${extra[@]}"
    done
    STDOUT=$RES/search.json step search 180 "${TUNER[@]}" search -w "$WORKLOAD" -m "$MODEL" \
        --gpus "$GPU" --max-gpus 1 --profile "$PROF/$MODEL" --n-trials "$N_TRIALS" \
        --timeout 120 --out "$RES/search" --json
fi
if [ -z "${PREFLIGHT_FAILED:-}" ]; then
    # 3b. (VALIDATE=0 leaves it out) a real-engine run: `tuner validate --runner transformers`
    #    (transformers' continuous batching) of the best plan of a small search on the first 64
    #    requests of the job, on random weights of the model's shape (the worker makes them on
    #    the device: nothing written, no hub). gpu_memory_utilization 0.5: transformers sizes an
    #    SDPA mask and read buffers with the KV cache, beside the plan's KV (at 0.9 a H200's
    #    llama-3-8b plan would not fit them). validation.json: predicted vs measured.
    if [ -n "$VALIDATE" ]; then
        VGPU=(--gpus "$GPU")
        [ -n "$REHEARSAL" ] && VGPU=(--gpus CPU --gpu-file "$WORK/cpu.yaml")  # this CPU as the device
        if [ -z "$DRY_RUN" ]; then
            # the rehearsal: 8 requests (transformers on 2 CPU cores: ~7 s a request), the CPU
            # device's plan at 0.9 (its memory_gib is sized for that)
            head -n "$([ -n "$REHEARSAL" ] && echo 8 || echo 64)" "$WORKLOAD" > "$WORK/validate.jsonl"
            printf 'knobs:\n  chunk_size: [512, 2048]\n  max_running: [16, 64]\nfixed:\n  gpu_memory_utilization: %s\n  block_size: 16\n' \
                "$([ -n "$REHEARSAL" ] && echo 0.9 || echo 0.5)" > "$WORK/validate_space.yaml"
            [ -n "$REHEARSAL" ] && "$PY" -P -m tuner.runners.cpu_device --out "$WORK/cpu.yaml" > /dev/null
        fi
        step validate_search 60 "${TUNER[@]}" search -w "$WORK/validate.jsonl" -m "$MODEL" \
            "${VGPU[@]}" --max-gpus 1 --engines vllm --space "$WORK/validate_space.yaml" \
            --n-trials 8 --out "$RES/validate" --study validate
        STDOUT=$RES/validation.json step validate 240 "${TUNER[@]}" validate --out "$RES/validate" \
            --study validate --top 1 --runner transformers --python "$VALIDATE_PY" \
            --timeout 200 --store "$WORK/calibration" --json
    fi
fi
if [ -z "${PREFLIGHT_FAILED:-}" ] && [ -n "$PROFILE" ]; then
    # 4. more shapes while the budget lasts (~50 and ~30 s each on an H100)
    for m in $EXTRA_MODELS; do
        profile "$m" "profile_ops_$m" linear,elementwise,lm_head,attention 120
        step "fit_$m" 60 "${TUNER[@]}" fit "$PROF/$m"
        STDOUT=$RES/compare_$m.json step "compare_$m" 60 "$PY" -P -c "$COMPARE_PY" \
            "$PROF/$m" "$GPU" "$REPO/benchmarks/profile_vs_tables.py" "$REHEARSAL"
    done
    # the host-side families one at a time (on 2026-11-30 quant's 72 cases took all of a shared
    # 120 s and threads never started)
    profile "$MODEL" "profile_threads_$MODEL" threads 120
    profile "$MODEL" "profile_quant_$MODEL" quant 120
    step "fit_final_$MODEL" 60 "${TUNER[@]}" fit "$PROF/$MODEL"
fi

# Summary: what was measured, against the tables, the catalog, the H100 profiles and the job.
read -r -d '' SUMMARY_PY <<'PY'
import csv, importlib.util, json, sys
from pathlib import Path

from tuner.core.catalog import load_gpus

work, out, gpu, h100 = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], Path(sys.argv[4])
budget_s, elapsed_s, rehearsal = float(sys.argv[5]), float(sys.argv[6]), bool(sys.argv[7])
res = work / "results"
# families and the GPU-against-GPU ratios as benchmarks/profile_vs_tables.py computes them
spec = importlib.util.spec_from_file_location("profile_vs_tables", sys.argv[8])
pvt = importlib.util.module_from_spec(spec)
spec.loader.exec_module(pvt)
family = pvt.family


def load(path):
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None


def rows(path):
    try:
        with open(path) as f:
            return [r for r in csv.DictReader(f) if r["status"] == "ok"]
    except OSError:
        return []


def vs_catalog(rs, prov, cat):
    """Best rate measured per resource against the catalog figure that prices it."""
    def best(sel, what):
        v = [float(r[what]) / float(r["median_s"]) for r in rs if sel(r) and float(r["median_s"]) > 0]
        return max(v) if v else None
    peak = {"bfloat16": "bf16_tflops", "float16": "bf16_tflops"}.get(prov.get("dtype"), "fp32_tflops")
    out = {}
    gemm = best(lambda r: family(r["operation"]) in ("linear", "lm_head"), "flops")
    hbm = best(lambda r: family(r["operation"]) == "elementwise", "bytes_moved")
    if gemm:
        out["gemm_tflops"] = {"measured": gemm / 1e12, "catalog": getattr(cat, peak, None),
                              "catalog_field": peak}
    if hbm:
        out["hbm_gbps"] = {"measured": hbm / 1e9, "catalog": getattr(cat, "hbm_gbps", None),
                           "note": "best norm/activation/rotary/add kernel"}
    for op in ("copy.h2d", "copy.d2h"):
        for mem in ("pinned", "pageable"):
            v = best(lambda r, op=op, mem=mem: r["operation"] == op and r["variant"] == mem,
                     "bytes_moved")
            if v:
                out[f"{op}.{mem}_gbps"] = {"measured": v / 1e9,
                                           "catalog": getattr(cat, "host_link_gbps", None)}
    if prov.get("memory_bytes") and prov.get("device") == "cuda":
        out["memory_gib"] = {"measured": prov["memory_bytes"] / 2**30,
                             "catalog": getattr(cat, "memory_gib", None)}
    return out


cat = load_gpus().get(gpu)
steps = [dict(zip(("step", "exit", "seconds", "limit_s"), line.split("\t")))
         for line in (work / "steps.tsv").read_text().splitlines() if line]
gpu_csv = (work / "logs" / "gpu.csv")
S = {"rehearsal": rehearsal, "gpu_priced": gpu, "budget_s": budget_s, "elapsed_s": elapsed_s,
     "nvidia_smi": gpu_csv.read_text().strip().splitlines() if gpu_csv.exists() else [],
     "steps": steps, "models": {}}
for d in sorted(p for p in (work / "profiles").iterdir() if p.is_dir()):
    prov = load(d / "provenance.json") or {}
    rs = rows(d / "profile.csv")
    fit = load(d / "fit.json")
    cmp = load(res / f"compare_{d.name}.json")
    m = {"provenance": {k: prov.get(k) for k in ("device_name", "gpu", "memory_bytes", "driver",
                                                  "torch", "cuda", "dtype", "quick", "repeats",
                                                  "rows", "status_counts", "elapsed_s")},
         "ok_rows": len(rs),  # also when a cut run left provenance's totals unwritten
         "fit_median_cv_pct": fit["median_cv_mape"] * 100 if fit else None,
         "vs_catalog": vs_catalog(rs, prov, cat)}
    if cmp:
        m["vs_tables"] = {k: cmp.get(k) for k in ("tables", "families", "layer_linear",
                                                   "stand_in_gpu")}
    ref = rows(h100 / d.name / "profile.csv")
    if ref and prov.get("device") == "cuda":
        m["vs_h100_2026_11_26"] = pvt.against(rs, ref)
    S["models"][d.name] = m
sim = {src: load(res / f"simulate_{src}.json") for src in ("tables", "profile")}
if all(sim.values()):
    S["job"] = {"workload": "examples/arxiv.jsonl",
                "makespan_tables_s": sim["tables"]["makespan_s"],
                "makespan_profile_s": sim["profile"]["makespan_s"],
                "profile_over_tables": sim["profile"]["makespan_s"] / sim["tables"]["makespan_s"],
                "profile_applied": "--profile set aside" not in sim["profile"].get("provenance", ""),
                "provenance_tables": sim["tables"].get("provenance"),
                "provenance_profile": sim["profile"].get("provenance")}
search = load(res / "search.json")
if search:
    S["search"] = {"verdicts": search.get("verdicts"), "stats": search.get("search"),
                   "winners": {g: {"makespan_s": w["metrics"]["makespan_s"],
                                   "cost_usd": w["metrics"]["cost_usd"], "config": w["config"]}
                               for g, w in (search.get("winners") or {}).items()
                               if w and w.get("metrics")}}
val = load(res / "validation.json")
if val and val.get("validation"):
    S["validation"] = [{k: v.get(k) for k in ("trial", "config", "predicted_s", "measured_s",
                                              "error_pct", "engine", "device", "requests",
                                              "output_tokens", "kv_capacity_tokens", "startup_s")}
                       for v in val["validation"]]
(out / "summary.json").write_text(json.dumps(S, indent=1))

L = [f"on_device summary ({'REHEARSAL on a CPU: no GPU figures' if rehearsal else 'device run'}),"
     f" {elapsed_s:.0f} s of a {budget_s:.0f} s budget"]
L += [f"  {line}" for line in S["nvidia_smi"]]
L.append("steps: " + ", ".join(f"{s['step']} {s['exit']} ({s['seconds']} s)" for s in steps))
for name, m in S["models"].items():
    p = m["provenance"]
    L.append(f"{name}: {m['ok_rows']} ok rows {p.get('status_counts')} in {p.get('elapsed_s')} s on "
             f"{p.get('device_name')} (torch {p.get('torch')}, {p.get('dtype')}); fit median CV "
             + (f"{m['fit_median_cv_pct']:.1f} %" if m["fit_median_cv_pct"] is not None else "-"))
    for k, v in m["vs_catalog"].items():
        ratio = f" = {v['measured'] / v['catalog']:.2f} x" if v.get("catalog") else ""
        L.append(f"  {k:<24} measured {v['measured']:9.1f}  catalog {gpu} {v.get('catalog')}{ratio}")
    t = m.get("vs_tables")
    if t:
        L.append(f"  vs {t['tables']}" + (" [stand-in GPU: meaningless]" if t["stand_in_gpu"] else ""))
        for fam, f in t["families"].items():
            if f.get("n"):
                L.append(f"    {fam:<13} {f['n']:>4} rows  median profile/table "
                         f"{f['median_ratio']:.3f}  median |diff| {f['median_abs_pct']:.1f} %"
                         f"  worst {f['worst_ratio']:.2f}")
    for fam, f in (m.get("vs_h100_2026_11_26") or {}).items():
        L.append(f"  vs H100 profile {fam:<16} {f['n']:>4} cases  median this/H100 "
                 f"{f['median_ratio']:.3f}")
if "job" in S:
    j = S["job"]
    L.append(f"job arxiv.jsonl on {gpu}: tables {j['makespan_tables_s']:.1f} s, profile "
             f"{j['makespan_profile_s']:.1f} s ({j['profile_over_tables']:.3f} x)"
             + ("" if j["profile_applied"] else "; the profile was set aside (see provenance)"))
for v in S.get("validation") or []:
    L.append(f"validate (transformers, {v['requests']} requests of arxiv.jsonl, trial {v['trial']}):"
             f" predicted {v['predicted_s']:.2f} s, measured {v['measured_s']:.2f} s on "
             f"{v['device']} ({v['engine']}); KV tokens plan/engine {v['kv_capacity_tokens']}")
for v in (S.get("search") or {}).get("verdicts") or []:
    L.append("search: " + v)
(out / "summary.txt").write_text("\n".join(L) + "\n")
print("\n".join(L))
PY

RESERVE_S=-30  # the summary runs even when the budget is spent (timeout_s leaves room for it)
if [ -z "$DRY_RUN" ]; then
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu \
        --format=csv > "$LOGS/gpu.csv" 2>/dev/null || rm -f "$LOGS/gpu.csv"
fi
STDOUT=$LOGS/summary.out step summary 60 "$PY" -P -c "$SUMMARY_PY" "$WORK" "$OUT" "$GPU" \
    "$H100_DATA" "$BUDGET_S" "$(( SECONDS - T0 ))" "$REHEARSAL" "$REPO/benchmarks/profile_vs_tables.py"
# At most 8 files come back (each <= 16 MiB, names of letters, digits, '.', '_', '-'): summary.json,
# summary.txt and three archives. The sklearn pickle stays behind (`tuner fit` remakes it).
echo "== pack"
if [ -n "$DRY_RUN" ]; then
    echo "+ tar profiles.tar.gz results.tar.gz logs.tar.gz -> $OUT"; exit 0
fi
( cd "$PROF" && ls | grep -q . && tar -czf "$OUT/profiles.tar.gz" --exclude=fit.joblib -- * )
( cd "$WORK" && tar -czf "$OUT/results.tar.gz" results )
( cd "$WORK" && tar -czf "$OUT/logs.tar.gz" logs steps.tsv )
for f in "$OUT"/*; do
    [ "$(stat -c %s "$f")" -le $(( 16 * 2**20 )) ] || echo "WARNING: $f is over 16 MiB: it will not come back"
done
ls -l "$OUT"
[ -f "$OUT/summary.txt" ] && cat "$OUT/summary.txt"
# exit 0 only when every step did
! cut -f2 "$WORK/steps.tsv" | grep -qvx 0
