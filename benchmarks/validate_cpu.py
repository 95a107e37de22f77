"""The whole loop on a CPU with real vLLM: profile -> fit -> search -> validate -> calibrate.

    python benchmarks/validate_cpu.py [--out DIR] [--repeats 5] [--warmup-passes 1] [--reproduce 1]

Needs vLLM for the CPU in a virtualenv (.venv-vllm, or --python / $TUNER_VLLM_PYTHON; see
README "Validate on a real engine"). Steps, all through the `tuner` command line:

1. writes a synthetic workload (token counts), this machine's CPU as a device (--gpu-file,
   runners/cpu_device.py; a small KV cache so large R_max preempts) and a search space over
   chunk size x R_max (block size 32: vLLM's CPU attention needs multiples of 32);
2. `tuner profile --model tiny-llama --device cpu --quick` and `tuner fit` (the measured cost
   model the predictions use: --profile-mode measured);
3. `tuner search` (with --profile when the search has it);
4. `tuner validate --pick spread --top K`: K configurations that differ in chunk size and
   R_max, run on vLLM, predicted (measured profile) vs measured makespan, schedule diff;
5. `tuner calibrate`: the fit, error before/after and leave-one-out;
6. `tuner validate` on --heldout more configurations not used by the fit: the calibrated
   prediction's out-of-sample error;
7. (--reproduce 1) the first configuration again in a fresh engine: how far two measurements of
   one configuration lie apart on this machine, the floor under every error above.

Each engine start runs --warmup-passes untimed passes of the job, then --repeats timed ones
(the fastest counts); the spread of the timed ones is printed per configuration.

Prints every figure and writes OUT/validate_cpu.json. The calibration store is OUT/calibration
(TUNER_CALIBRATION_DIR), so nothing outside OUT is touched besides ~/.cache/vllm (torch.compile
cache).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]


def sh(args: list, env: dict, timeout: float = 3600) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "tuner.cli", *map(str, args)]
    print("$ tuner " + " ".join(map(str, args)), flush=True)
    t0 = time.monotonic()
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO, timeout=timeout)
    dt = time.monotonic() - t0
    sys.stdout.write(r.stdout)
    if r.returncode != 0:
        sys.stdout.write(r.stderr)
        raise SystemExit(f"tuner {args[0]} failed (exit {r.returncode})")
    print(f"  ({dt:.0f} s)", flush=True)
    r.elapsed = dt  # type: ignore[attr-defined]
    return r


def write_inputs(out: Path, n: int, seed: int, kv_mib: float) -> dict:
    from tuner.runners.cpu_device import write_cpu_gpu_file

    rng = np.random.default_rng(seed)
    wl = out / "workload.jsonl"
    with wl.open("w") as fh:
        for p, o in zip(rng.integers(32, 400, n), rng.integers(16, 160, n), strict=True):
            fh.write(json.dumps({"prompt_tokens": int(p), "output_tokens": int(o)}) + "\n")
    gpu_file = write_cpu_gpu_file(out / "cpu_device.yaml", kv_mib=kv_mib)
    space = out / "space.yaml"
    space.write_text(
        "knobs:\n"
        "  chunk_size: [64, 128, 256, 512, 1024]\n"
        "  max_running: [4, 8, 16, 32, 64]\n"
        "fixed:\n"
        "  scheduler: vllm\n  tp: 1\n  dp: 1\n  weight_bits: 16\n  kv_bits: 16\n"
        "  gpu_memory_utilization: 0.9\n  block_size: 32\n  ordering: fcfs\n")
    return {"workload": wl, "gpu_file": gpu_file, "space": space}


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("validate-cpu-out"))
    ap.add_argument("--requests", type=int, default=48)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--top", type=int, default=3)
    ap.add_argument("--heldout", type=int, default=1)
    ap.add_argument("--kv-mib", type=float, default=2.0)
    ap.add_argument("--trials", type=int, default=30)
    ap.add_argument("--python", default=None, help="Python with vLLM (default: auto)")
    ap.add_argument("--timeout", type=float, default=1200, help="seconds per vLLM run")
    ap.add_argument("--repeats", type=int, default=3,
                    help="measured runs per engine start; the fastest counts")
    ap.add_argument("--reproduce", type=int, default=1, choices=(0, 1),
                    help="run the first configuration again in a fresh engine (noise floor)")
    ap.add_argument("--warmup-passes", type=int, default=1,
                    help="untimed passes of the whole job per engine start, before the measured")
    return ap.parse_args(argv)


def _profile_fit_search(a, out: Path, env: dict, timings: dict) -> tuple[dict, Path, Path]:
    """Steps 1-3: inputs, profile + fit, search. (inputs, profile folder, search folder)."""
    inp = write_inputs(out, a.requests, a.seed, a.kv_mib)
    prof = out / "profile"
    timings["profile_s"] = sh(["profile", "--model", "tiny-llama", "--device", "cpu", "--quick",
                               "--out", prof], env).elapsed
    timings["fit_s"] = sh(["fit", prof], env).elapsed
    search_help = subprocess.run([sys.executable, "-m", "tuner.cli", "search", "--help"],
                                 capture_output=True, text=True, env=env, cwd=REPO).stdout
    extra = ["--profile", prof] if "--profile" in search_help else []
    study_out = out / "search"
    timings["search_s"] = sh(["search", "--workload", inp["workload"], "--model", "tiny-llama",
                              "--gpus", "CPU", "--gpu-file", inp["gpu_file"], "--space",
                              inp["space"], "--n-trials", a.trials, "--out", study_out,
                              "--study", "cpu-validate", "--engines", "vllm", *extra], env).elapsed
    return inp, prof, study_out


def _pick(study_out: Path, n_total: int) -> list[int]:
    """Every configuration to validate, chosen up front (spread over chunk size and R_max)."""
    sys.path.insert(0, str(REPO))
    from tuner.cli.validation import pick_records
    from tuner.search import load_study
    from tuner.search.records import trial_records

    st = load_study("cpu-validate", None, out_dir=study_out)
    return [r.number for r in pick_records(trial_records(st), n_total, "spread")]


def _validate_calibrate(a, common: list, env: dict, fit_on: list[int], held: list[int],
                        timings: dict):
    """Steps 4-7: validate, calibrate, validate the held-out ones, reproduce the first.
    (first validation, calibration, held-out validation or None, reproduced run or None)."""
    r = sh(["validate", *common, "--trials", ",".join(map(str, fit_on)), "--json"], env)
    val1 = json.loads(r.stdout)
    timings["validate_s"] = r.elapsed
    r = sh(["calibrate", "--device", "CPU", "--model", "tiny-llama", "--json"], env)
    cal = json.loads(r.stdout)
    sh(["calibrate", "--device", "CPU", "--model", "tiny-llama"], env)  # the table
    val2 = None
    if held:
        r = sh(["validate", *common, "--trials", ",".join(map(str, held)), "--json"], env)
        val2 = json.loads(r.stdout)
        timings["validate_heldout_s"] = r.elapsed
    # The noise floor: the first configuration again, in a fresh engine. On a shared machine
    # two engine starts of one configuration minutes apart differ by more than a cost model
    # can be expected to explain; no prediction can be checked closer than this.
    again = None
    if a.reproduce:
        r = sh(["validate", *common, "--trials", str(fit_on[0]), "--no-save-runs", "--json"],
               env)
        again = json.loads(r.stdout)["validation"][0]
    return val1, cal, val2, again


def _print_rows(rows: list[dict], n_fit: int) -> None:
    print("\nconfig            predicted  measured   error   calibrated  cal.error  steps sim/real"
          "  preempt sim/real  start-up")
    for i, v in enumerate(rows):
        c = v["config"]
        tag = "held-out" if i >= n_fit else "fit"
        calp = v.get("predicted_calibrated_s")
        cal_s = f"{calp:8.3f}s" if calp else "       —"
        cal_e = f"{v['error_calibrated_pct']:+7.1f}%" if calp else "      —"
        print(f"chunk {c['chunk_size']:>4} R {c['max_running']:>3} {tag:8}"
              f" {v['predicted_s']:8.3f}s {v['measured_s']:8.3f}s {v['error_pct']:+7.1f}%"
              f"  {cal_s:>10} {cal_e:>9}"
              f"  {v['iterations']['sim']:>5}/{v['iterations']['real']}"
              f"  {v['preemptions']['sim']:>5}/{v['preemptions']['real']}"
              f"  {v['startup_s']:7.0f}s")
        if v.get("schedule", {}).get("findings"):
            for f in v["schedule"]["findings"]:
                print(f"      schedule: {f}")


def _summary(a, rows: list[dict], cal: dict, val2, again, timings: dict) -> dict:
    before = [abs(v["error_pct"]) for v in rows]
    summary = {
        "median_abs_error_before_pct": float(np.median(before)),
        "calibration_in_sample_median_abs_pct": cal.get("median_error_after_pct"),
        "calibration_leave_one_out_median_abs_pct": cal.get("median_error_loo_pct"),
        "heldout_calibrated_abs_pct": [abs(v["error_calibrated_pct"]) for v in
                                       (val2["validation"] if val2 else [])
                                       if v.get("error_calibrated_pct") is not None],
        "calibration": {k: cal.get(k) for k in ("kernel_factor", "iteration_overhead_s",
                                                "per_sequence_s", "method")},
        "repeat_spread_pct": {
            f"chunk {v['config']['chunk_size']} R {v['config']['max_running']}":
            100.0 * (max(v["makespans_s"]) / min(v["makespans_s"]) - 1.0)
            for v in rows if v.get("makespans_s")},
        "reproduced": None if again is None else {
            "config": f"chunk {again['config']['chunk_size']} R {again['config']['max_running']}",
            "first_s": rows[0]["measured_s"], "again_s": again["measured_s"],
            "difference_pct": 100.0 * (again["measured_s"] / rows[0]["measured_s"] - 1.0)},
        "timings": timings,
        "repeats": a.repeats,
        "warmup_passes": a.warmup_passes,
        "makespans_s": {f"chunk {v['config']['chunk_size']} R {v['config']['max_running']}":
                        v.get("makespans_s") for v in rows},
        "device": rows[0]["device"], "engine": rows[0]["engine"],
        "cost_model": rows[0]["base_provenance"],
    }
    return summary


def main(argv: list[str] | None = None) -> dict:
    a = _parse_args(argv)
    out = a.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, TUNER_CALIBRATION_DIR=str(out / "calibration"), COLUMNS="160")
    env.pop("FORCE_COLOR", None)
    t_all = time.monotonic()
    timings: dict = {}
    inp, prof, study_out = _profile_fit_search(a, out, env, timings)
    py = ["--python", a.python] if a.python else []
    common = ["--out", study_out, "--study", "cpu-validate", "--gpu-file", inp["gpu_file"],
              "--profile", prof, "--profile-mode", "measured", "--timeout", a.timeout,
              "--repeats", a.repeats, "--warmup-passes", a.warmup_passes, *py]
    # choose every configuration up front (spread), fit on the first `top`, hold out the rest
    picked = _pick(study_out, a.top + a.heldout)
    fit_on, held = picked[:a.top], picked[a.top:]
    val1, cal, val2, again = _validate_calibrate(a, common, env, fit_on, held, timings)
    timings["total_s"] = time.monotonic() - t_all

    rows = val1["validation"] + (val2["validation"] if val2 else [])
    _print_rows(rows, len(val1["validation"]))
    summary = _summary(a, rows, cal, val2, again, timings)
    print("\n" + json.dumps(summary, indent=1))
    (out / "validate_cpu.json").write_text(json.dumps({"summary": summary, "runs": rows},
                                                      indent=1, default=str))
    return summary


if __name__ == "__main__":
    main()
