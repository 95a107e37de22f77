"""Tests for predictors/: estimators (scikit-learn contract), interpolation tables, fitting a
profile with cross-validation, the FittedCostModel, roofline transfer, the loader, the shipped
CPU profile, and the CI acceptance path (profile tiny-llama on CPU -> fit -> simulate)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.model_selection import KFold, cross_val_score

from tuner.core.catalog import get_model, load_gpus
from tuner.core.config import ServingConfig
from tuner.core.errors import TunerError
from tuner.predictors.estimators import (
    ForestCost,
    InterpCost,
    LinearCost,
    PolynomialCost,
    SaturatingCurve,
    measured_saturation_bytes,
)
from tuner.predictors.features import BatchFeatures
from tuner.predictors.tables import Table1D, Table2D, _bilinear_irregular, _fwd
from tuner.profilers.plan import PlanLimits, build_plan
from tuner.profilers.schema import RowWriter, make_row

REPO = Path(__file__).resolve().parents[1]
TINY = get_model("tiny-llama")
GPUS = load_gpus()


def tuner(*args, timeout: float = 300) -> subprocess.CompletedProcess:
    env = dict(os.environ, COLUMNS="200")
    env.pop("FORCE_COLOR", None)
    return subprocess.run([sys.executable, "-m", "tuner.cli", *map(str, args)], capture_output=True,
                          text=True, timeout=timeout, cwd=REPO, env=env)


# ---- estimators ---------------------------------------------------------------------------
@pytest.mark.parametrize("est", [LinearCost("tokens"), PolynomialCost(2), ForestCost(n_estimators=10),
                                 InterpCost(), SaturatingCurve()])
def test_estimators_follow_the_sklearn_contract(est):
    rng = np.random.default_rng(0)
    X = np.sort(rng.integers(1, 8192, 40)).astype(float)[:, None]
    y = 2e-5 + 3e-8 * X[:, 0]
    c = clone(est)
    assert c.get_params() == est.get_params()
    assert c.fit(X, y) is c
    learned = [k for k in vars(c) if k.endswith("_") and not k.startswith("_")]
    assert learned, "learned state lives in attributes ending in _"
    pred = c.predict(X)
    assert pred.shape == y.shape and np.all(pred > 0)
    s = cross_val_score(est, X, y, cv=KFold(5, shuffle=True, random_state=0),
                        scoring="neg_mean_absolute_percentage_error")
    assert -s.mean() < 0.5


def test_linear_cost_recovers_infermax_coefficients():
    rng = np.random.default_rng(1)
    c, k = rng.integers(16, 4096, 60).astype(float), rng.integers(0, 8192, 60).astype(float)
    y = 1e-5 + 2e-8 * c + 3e-11 * c * c + 5e-11 * c * k
    m = LinearCost("prefill").fit(np.column_stack([c, k]), y)
    assert m.intercept_ == pytest.approx(1e-5, rel=1e-3)
    assert m.coef_ == pytest.approx([2e-8, 3e-11, 5e-11], rel=1e-3)
    b, kv = rng.integers(1, 256, 50).astype(float), rng.integers(16, 4096, 50).astype(float)
    y = 4e-6 + 1e-7 * b + 2e-10 * b * kv
    m = LinearCost("decode").fit(np.column_stack([b, kv]), y)
    assert m.predict(np.array([[10.0, 100.0]]))[0] == pytest.approx(4e-6 + 1e-6 + 2e-7, rel=1e-3)


def test_saturating_bandwidth_curve_and_saturation_point():
    s = np.geomspace(4096, 2**33, 22)
    peak, half = 25e9, 256 * 1024
    t = (s + half) / peak
    m = SaturatingCurve().fit(s[:, None], t)
    assert m.peak_bytes_per_s_ == pytest.approx(peak, rel=1e-6)
    assert m.half_size_bytes_ == pytest.approx(half, rel=1e-4)
    assert m.saturation_bytes_ == pytest.approx(9 * half, rel=1e-4)
    assert m.bandwidth(half) == pytest.approx(peak / 2, rel=1e-4)
    sat = measured_saturation_bytes(s, t)
    assert 2 * half < sat < 64 * half  # Vasuki's point: bandwidth flat within 5 % from there


def test_interp_keeps_tile_steps_and_extrapolates_with_work():
    x = np.array([64, 128, 129, 256, 257, 512], dtype=float)
    y = np.array([1.0, 2.0, 3.0, 3.1, 4.5, 5.0]) * 1e-4
    m = InterpCost().fit(x[:, None], y)
    assert m.predict(x[:, None]) == pytest.approx(y)
    assert m.predict(np.array([[1024.0]]))[0] == pytest.approx(2 * 5e-4)
    assert m.predict(np.array([[8.0]]))[0] == pytest.approx(1e-4)


# ---- tables -------------------------------------------------------------------------------
def test_table1d_lookup_matches_interpolation():
    x = np.array([1, 2, 4, 8, 16, 100, 8192], dtype=float)
    t = Table1D(x, 1e-6 * np.sqrt(x) + 1e-9 * x)
    q = np.arange(0, 20000, 7, dtype=float)
    assert t(q) == pytest.approx(t._interp(q))  # LUT path (integers) == interp path
    assert t(np.array([16384.0 * 2]))[0] == pytest.approx(t(np.array([8192.0]))[0] * 4)
    assert t(np.array([2.5]))[0] == pytest.approx(np.interp(2.5, t.x, t.y))


def test_table2d_uniform_resampling_is_close_and_extrapolates_by_work():
    a = np.array([16, 64, 256, 1024, 4096], dtype=float)
    b = np.array([0, 128, 1024, 4096], dtype=float)
    A, B = np.meshgrid(a, b, indexing="ij")
    z = 1e-5 + 1e-10 * A * (B + A / 2)
    tab = Table2D("attn.prefill", a, b, z)
    rng = np.random.default_rng(0)
    qa, qb = rng.uniform(16, 4096, 500), rng.uniform(0, 4096, 500)
    exact = _bilinear_irregular(_fwd("log", a), _fwd("log1p", b), z, _fwd("log", qa),
                                _fwd("log1p", qb))
    assert tab(qa, qb) == pytest.approx(exact, rel=0.05)
    assert tab(a[:1], b[:1])[0] == pytest.approx(z[0, 0])
    big = tab(np.array([8192.0]), np.array([4096.0]))[0]
    w = lambda c, k: c * (k + c / 2) + 64 * c  # noqa: E731
    assert big == pytest.approx(z[-1, -1] * w(8192, 4096) / w(4096, 4096), rel=1e-6)


# ---- synthetic profiles ---------------------------------------------------------------------
def _eff(flops, nbytes):
    """The 'true' efficiency of the synthetic devices: rises with size, GEMMs a bit better."""
    ai = np.maximum(flops, 1.0) / np.maximum(nbytes, 1.0)
    return 0.85 * nbytes / (nbytes + 3e5) * (0.6 + 0.4 * ai / (ai + 20))


def synth_profile(out: Path, gpu_name: str, model=TINY, noise: float = 0.0, seed: int = 0,
                  families: frozenset[str] | None = None) -> Path:
    """A profile.csv + provenance.json as `tuner profile` writes them, for a GPU from the
    catalog whose times follow latency + roofline / _eff with that GPU's spec sheet."""
    g = GPUS[gpu_name]
    out.mkdir(parents=True, exist_ok=True)
    kw = {"families": families} if families else {}
    cases = build_plan(model, PlanLimits(device="cuda", quick=True, max_copy_bytes=1 << 30,
                                         max_quant_bytes=1 << 24, cpu_threads=(1, 2, 4),
                                         interop_threads=(1, 2), **kw), dtype_bytes=2)
    rng = np.random.default_rng(seed)
    with RowWriter(out / "profile.csv") as w:
        for c in cases:
            if c.operation.startswith("cpu."):
                t = 1e-3 / c.intra_threads / min(c.inter_threads, 2) + 1e-4
            else:
                link = c.operation in ("copy.h2d", "copy.d2h")
                bw = g.host_link_bytes_per_s * (0.9 if c.variant == "pinned" else 0.5) if link \
                    else g.hbm_bytes_per_s
                roof = max(c.flops / g.peak_flops, c.bytes_moved / bw)
                t = 6e-6 + roof / _eff(c.flops, c.bytes_moved)
            t *= 1 + noise * rng.standard_normal()
            dt = "uint8" if c.operation.startswith("copy.") else "bfloat16"
            w.write(make_row(c, dt, median_s=t, p10_s=0.97 * t, p90_s=1.05 * t, repeats=10,
                             calls_per_sample=1))
    from tuner.predictors.opmath import shape_dict

    prov = {"format": "tuner-profile/1", "device": "cuda", "device_name": f"NVIDIA {gpu_name}",
            "gpu": gpu_name, "memory_bytes": int(g.memory_gib * 2**30), "driver": "synthetic",
            "torch": "synthetic", "cuda": "12.x", "dtype": "bfloat16", "model": model.name,
            "model_shape": shape_dict(model) | {"max_position": model.max_position},
            "repeats": 10, "date": "2026-01-01T00:00:00+00:00", "intra_threads": 4}
    (out / "provenance.json").write_text(json.dumps(prov))
    return out


@pytest.fixture(scope="module")
def two_gpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("gpus")
    synth_profile(root / "h100", "H100", noise=0.02, seed=1)
    synth_profile(root / "a10", "A10", noise=0.02, seed=2)
    from tuner.predictors.fit import fit_profile

    fit_profile(root / "a10").save(root / "a10")
    return root


@pytest.fixture(scope="module")
def h100_fit(two_gpus):
    from tuner.predictors.fit import fit_profile

    res = fit_profile(two_gpus / "h100")
    res.save(two_gpus / "h100")
    return res


def test_fit_chooses_per_op_by_cv_and_saves(h100_fit, two_gpus):
    res = h100_fit
    assert res.stat == "median"  # a CUDA profile fits median times
    keys = {of.key for of in res.ops}
    assert {"linear.qkv", "attn.prefill", "attn.decode", "lm_head", "copy.h2d[pinned]",
            "quant[int8/device]", "cpu.matmul[4 tasks]"} <= keys
    for of in res.ops:
        finite = {k: v for k, v in of.cv_mape.items() if np.isfinite(v)}
        assert of.chosen == min(finite, key=finite.get)
    assert res.median_cv_mape() < 0.05  # 2 % noise: the chosen models are within a few %
    doc = json.loads((two_gpus / "h100" / "fit.json").read_text())
    assert doc["format"] == "tuner-fit/1" and doc["ops"]["linear.qkv"]["table"]["kind"] == "1d"
    assert doc["specs"]["source"].startswith("spec sheet (H100")
    assert set(doc["efficiency"]) >= {"gemm", "elementwise", "attn.prefill", "attn.decode",
                                      "copy.h2d.pinned", "copy.d2h.pageable", "quant.int8",
                                      "dequant.int4"}
    curve = doc["ops"]["copy.h2d[pinned]"]["curve"]
    assert curve["peak_bytes_per_s"] > 0 and curve["saturation_bytes_90pct"] > 0
    csv_lines = (two_gpus / "h100" / "cv_errors.csv").read_text().splitlines()
    assert csv_lines[0] == "operation,variant,rows,model,cv_mape,chosen"
    assert (two_gpus / "h100" / "fit.joblib").stat().st_size > 0


def test_fitted_cost_model_composes_per_op_predictions(h100_fit, two_gpus):
    from tuner.predictors.fitted import FittedCostModel
    from tuner.predictors.sources import load_cost_model

    cm = load_cost_model(two_gpus / "h100", TINY, GPUS["H100"], ServingConfig(gpu="H100"))
    assert isinstance(cm, FittedCostModel) and cm.kind == "measured"
    assert cm.describe().startswith("measured: tiny-llama on H100")
    one = BatchFeatures.single(prefill_tokens=256, context=512)
    two = BatchFeatures(*(np.array([2 * v[0]]) for v in (
        one.prefill_tokens, one.prefill_sq, one.prefill_ctx)), np.zeros(1), np.zeros(1),
        np.array([2.0]))
    p1 = cm.breakdown(one)["attention_prefill"][0]
    p2 = cm.breakdown(two)["attention_prefill"][0]
    assert p2 == pytest.approx(2 * p1)  # two alike chunks cost two chunks
    # vectorised == row by row; an empty step costs only the overhead
    rng = np.random.default_rng(3)
    n = 200
    P = rng.integers(0, 2048, n).astype(float) * (rng.random(n) < 0.4)
    B = rng.integers(0, 128, n).astype(float)
    ctx = rng.integers(0, 2048, n).astype(float)
    kv = B * rng.integers(1, 2000, n)
    f = BatchFeatures(P, P * P, P * ctx, B, kv, B + (P > 0))
    t = cm.iteration_time_s(f)
    for i in (0, 7, 99):
        fi = BatchFeatures(*(np.array([getattr(f, k)[i]]) for k in (
            "prefill_tokens", "prefill_sq", "prefill_ctx", "decodes", "decode_kv", "seqs_sampled")))
        assert cm.iteration_time_s(fi)[0] == pytest.approx(t[i])
    empty = BatchFeatures.single()
    assert cm.iteration_time_s(empty)[0] == pytest.approx(cm.iteration_overhead_s)
    # per-op predictions match the synthetic truth of one projection
    from tuner.predictors.opmath import flops_bytes

    fl, by = flops_bytes("linear.gate_up", TINY, tokens=1024.0)
    g = GPUS["H100"]
    truth = 6e-6 + max(fl / g.peak_flops, by / g.hbm_bytes_per_s) / _eff(fl, by)
    got = cm.breakdown_ops(BatchFeatures.single(prefill_tokens=1024))["linear.gate_up"][0]
    assert got == pytest.approx(truth, rel=0.1)
    assert cm.layer_time_s(f).shape == (n,)
    assert cm.transfer_model is not None
    assert cm.transfer_model.h2d_s(np.array([0.0, 1 << 20]))[0] == 0.0


def test_transfer_between_two_measured_gpus(tmp_path):
    """Two synthetic GPUs that follow one efficiency law at their own spec sheets: the H100's
    curves predict the A10 within a few percent where times are not launch-bound (7B shapes)."""
    from tuner.predictors.devices import gpu_specs
    from tuner.predictors.fit import read_profile
    from tuner.predictors.transfer import learn_efficiency, transfer_error

    m = get_model("llama-2-7b")
    synth_profile(tmp_path / "h", "H100", model=m, noise=0.02, seed=1)
    synth_profile(tmp_path / "a", "A10", model=m, noise=0.02, seed=2)
    dh, _ = read_profile(tmp_path / "h")
    da, _ = read_profile(tmp_path / "a")
    eff, cv = learn_efficiency(dh, gpu_specs(GPUS["H100"]))
    assert cv["gemm"] < 0.05 and cv["attn.decode"] < 0.1
    err = transfer_error({"efficiency": eff}, da, gpu_specs(GPUS["A10"]))
    assert err["all"]["rows"] > 100
    assert err["all"]["mape"] < 0.12, err
    assert err["gemm"]["mape"] < 0.05, err


def test_transfer_command_records_the_error(two_gpus, h100_fit):
    r = tuner("transfer", two_gpus / "h100", two_gpus / "a10", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert 0 < doc["errors"]["all"]["mape"] < 0.35  # tiny shapes: launch-bound, looser
    assert doc["recorded_in"].endswith("fit.json")
    fit = json.loads((two_gpus / "h100" / "fit.json").read_text())
    assert any(k.startswith("A10") for k in fit["transfer_checks"])
    r = tuner("transfer", two_gpus / "h100", two_gpus / "a10")
    assert r.returncode == 0 and "transfer error: H100 -> A10" in r.stdout
    from tuner.predictors.sources import load_cost_model

    l4 = load_cost_model(two_gpus / "h100", TINY, GPUS["L4"], ServingConfig(gpu="L4"))
    assert "transfer error checked against A10" in l4.describe()
    r = tuner("transfer", two_gpus / "h100", two_gpus / "nothing")
    assert r.returncode == 2 and "does not exist" in r.stderr  # as simulate words it


def test_loader_modes_measured_transferred_roofline(two_gpus, h100_fit, tmp_path):
    from tuner.predictors.loader import provenance_kind
    from tuner.predictors.sources import load_cost_model

    both = two_gpus  # a folder of profiles
    cfg = lambda g, **kw: ServingConfig(gpu=g, **kw)  # noqa: E731
    a10 = load_cost_model(both, TINY, GPUS["A10"], cfg("A10"))
    assert provenance_kind(a10) == "measured" and "on A10" in a10.describe()
    l4 = load_cost_model(both, TINY, GPUS["L4"], cfg("L4"))
    assert provenance_kind(l4) == "transferred" and "transferred to L4" in l4.describe()
    tp2 = load_cost_model(both, TINY, GPUS["A10"], cfg("A10", tp=2))
    assert provenance_kind(tp2) == "transferred" and "tp=2" in tp2.describe()
    f = BatchFeatures.single(prefill_tokens=512, decodes=8, kv_tokens=4000)
    assert tp2.breakdown(f)["allreduce"][0] > 0
    big = load_cost_model(both, get_model("llama-3-8b"), GPUS["A10"], cfg("A10"))
    assert provenance_kind(big) == "transferred"  # other shapes: transferred, not measured
    rf = load_cost_model(both, TINY, GPUS["A10"], cfg("A10"), mode="roofline")
    assert provenance_kind(rf) == "roofline"
    # the transferred H100 -> A10 model is close to the measured A10 one
    rng = np.random.default_rng(5)
    P = rng.integers(0, 4096, 300).astype(float)
    B = rng.integers(0, 200, 300).astype(float)
    fb = BatchFeatures(P, P * P, P * 100, B, B * 700, B + (P > 0))
    measured = a10.iteration_time_s(fb)
    transferred = load_cost_model(two_gpus / "h100", TINY, GPUS["A10"], cfg("A10")).iteration_time_s(fb)
    assert np.median(np.abs(transferred / measured - 1)) < 0.25
    with pytest.raises(TunerError, match="does not exist"):
        load_cost_model(tmp_path / "nope", TINY, GPUS["A10"], cfg("A10"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(TunerError, match="holds no profile"):
        load_cost_model(tmp_path / "empty", TINY, GPUS["A10"], cfg("A10"))
    with pytest.raises(TunerError, match="Unknown profile mode"):
        load_cost_model(both, TINY, GPUS["A10"], cfg("A10"), mode="bogus")
    with pytest.raises(TunerError, match="No profile in"):
        load_cost_model(both, get_model("llama-3-8b"), GPUS["A10"], cfg("A10"), mode="measured")


def test_stale_fit_is_refit_in_memory(tmp_path):
    from tuner.predictors.fit import fit_profile
    from tuner.predictors.loader import load_fit

    d = synth_profile(tmp_path / "h", "H100", families=frozenset({"linear"}))
    fit_profile(d).save(d)
    assert "fitted_in_memory" not in load_fit(d)
    with (d / "profile.csv").open("a") as fh:  # the profile grew after the fit
        fh.write((d / "profile.csv").read_text().splitlines()[1] + "\n")
    assert load_fit(d).get("fitted_in_memory") is True


# ---- the shipped CPU profile --------------------------------------------------------------
SHIPPED = REPO / "predictors" / "data" / "tiny-llama-cpu"


def test_shipped_cpu_profile_loads_and_simulates():
    from tests.sim import simulate_default
    from tuner.core.workload import load_workload
    from tuner.predictors.loader import shipped_cost_model
    from tuner.predictors.sources import load_cost_model, resolve_cost_model
    from tuner.sim.simulator import simulate

    assert (SHIPPED / "profile.csv").is_file() and (SHIPPED / "fit.json").is_file()
    prov = json.loads((SHIPPED / "provenance.json").read_text())
    assert prov["device"] == "cpu" and prov["model"] == "tiny-llama" and prov["torch"]
    fit = json.loads((SHIPPED / "fit.json").read_text())
    assert fit["format"] == "tuner-fit/1" and fit["median_cv_mape"] < 0.5
    for name in ("profile.csv", "fit.json"):
        assert (SHIPPED / name).stat().st_size < 3 * 2**20
    g = GPUS["A10"]
    cfg = ServingConfig(gpu="A10", chunk_size=2048, max_running=64)
    # a CPU profile never prices a GPU by itself: auto sets it aside, says so, and prices as
    # without it (NVIDIA's kernel tables, A100 -> A10) ...
    assert shipped_cost_model(TINY, g, cfg) is None
    auto = load_cost_model(SHIPPED, TINY, g, cfg)
    assert auto.provenance.kind == "transferred" and "no GPU profile" in auto.describe()
    # ... but can be used as the measured model on purpose (CI's measured path)
    cm = resolve_cost_model(TINY, g, cfg, profile=SHIPPED, mode="measured")
    assert cm.kind == "measured" and "(cpu, float32" in cm.describe()
    w = load_workload(REPO / "examples" / "arxiv.jsonl", model=TINY)
    res = simulate(w, TINY, g, cfg, cost_model=cm)
    assert res.makespan_s > 0 and str(res.provenance).startswith("measured:")
    rf = simulate_default(w, TINY, g, cfg)  # no profile: NVIDIA's kernel tables, A100 -> A10
    assert rf.provenance.kind == "transferred" and "transferred to A10" in str(rf.provenance)
    assert res.makespan_s != rf.makespan_s


def test_cost_command_json_and_errors():
    r = tuner("cost", "-m", "tiny-llama", "--profile", SHIPPED, "--tokens", "512", "--context",
              "256", "--decodes", "16", "--kv-tokens", "4000", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["provenance"]["kind"] == "measured"
    ops = {o["operation"]: o for o in doc["operations"]}
    assert {"linear.qkv", "linear.o", "linear.gate_up", "linear.down", "norm", "activation",
            "rotary", "add", "attn.prefill", "attn.decode", "lm_head", "overhead"} <= set(ops)
    assert ops["linear.qkv"]["total_s"] == pytest.approx(ops["linear.qkv"]["per_layer_s"] * 2)
    assert doc["total_s"] == pytest.approx(sum(o["total_s"] for o in doc["operations"]), rel=1e-9)
    # no profile: NVIDIA's measured kernel tables, carried from the A100 with their error
    r = tuner("cost", "-m", "llama-3-8b", "-g", "A10", "--tokens", "512", "--json")
    doc = json.loads(r.stdout)
    assert doc["provenance"]["kind"] == "transferred" and doc["total_s"] > 0
    assert doc["provenance"]["error_pct"] is not None
    r = tuner("cost", "-m", "llama-3-8b", "-g", "A10", "--tokens", "512")
    assert r.returncode == 0 and "transfer error" in r.stdout
    r = tuner("cost", "-m", "llama-3-8b", "-g", "A10", "--tokens", "512", "--profile-mode",
              "roofline", "--json")
    assert json.loads(r.stdout)["provenance"]["kind"] == "roofline"
    for args, needle in ((("-m", "nope", "-g", "A10", "--tokens", "5"), "Unknown model"),
                         (("-m", "tiny-llama", "-g", "A10"), "--tokens"),
                         (("-m", "tiny-llama", "--tokens", "5"), "--gpu is required"),
                         (("-m", "tiny-llama", "-g", "A10", "--tokens", "5", "--profile",
                           "/nonexistent"), "does not exist"),
                         (("-m", "tiny-llama", "-g", "A10", "--tokens", "5", "--profile", SHIPPED,
                           "--profile-mode", "x"), "Unknown profile mode")):
        r = tuner("cost", *args)
        assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
        lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
        assert len(lines) == 1 and needle in lines[0], r.stderr


def test_markup_like_profile_paths_print_verbatim(tmp_path):
    import shutil

    d = tmp_path / "p[v2]"
    shutil.copytree(SHIPPED, d)
    r = tuner("cost", "-m", "tiny-llama", "--profile", d, "--tokens", "64")
    assert r.returncode == 0, r.stderr
    assert "p[v2]" in r.stdout.replace("\n", "")


def test_fit_command_errors(tmp_path):
    r = tuner("fit", tmp_path / "none")
    assert r.returncode == 2 and "does not exist" in r.stderr and "Traceback" not in r.stderr
    (tmp_path / "e").mkdir()
    r = tuner("fit", tmp_path / "e")
    assert r.returncode == 2 and "no profile.csv" in r.stderr


def test_fitted_model_is_fast_on_many_iterations():
    from tuner.predictors.roofline import RooflineCostModel
    from tuner.predictors.sources import load_cost_model

    g = GPUS["A10"]
    cm = load_cost_model(SHIPPED, TINY, g, ServingConfig(gpu="A10"), mode="measured")
    rf = RooflineCostModel.from_specs(g, TINY)
    n = 500_000
    rng = np.random.default_rng(0)
    P = rng.integers(0, 2048, n).astype(float) * (rng.random(n) < 0.05)
    B = rng.integers(1, 256, n).astype(float)
    f = BatchFeatures(P, P * P, P * rng.integers(0, 2000, n), B, B * rng.integers(1, 3000, n),
                      B + (P > 0))

    def best(fn):
        out = math.inf
        for _ in range(3):
            t0 = time.perf_counter()
            fn(f)
            out = min(out, time.perf_counter() - t0)
        return out

    t_fit, t_rf = best(cm.iteration_time_s), best(rf.iteration_time_s)
    assert t_fit < 2.0, t_fit  # 500k iterations priced well within a simulator call
    assert t_fit < 12 * t_rf + 0.05, (t_fit, t_rf)


# ---- CI acceptance: profile tiny-llama on CPU, fit, simulate ------------------------------
def test_ci_profile_fit_simulate_on_cpu(tmp_path):  # 46 s at load average 7 on 2 cores
    pytest.importorskip("torch")
    out = tmp_path / "tiny-cpu"
    t0 = time.perf_counter()
    r = tuner("profile", "--model", "tiny-llama", "--device", "cpu", "--quick", "--out", out,
              timeout=240)
    profile_s = time.perf_counter() - t0
    assert r.returncode == 0, r.stderr[-2000:]
    assert profile_s < 120, profile_s  # acceptance: <= 2 minutes on CI's 2 cores
    assert (out / "profile.csv").is_file() and (out / "provenance.json").is_file()
    r = tuner("fit", out)
    assert r.returncode == 0, r.stderr[-2000:]
    print(r.stdout)  # the CV error table, in CI's log
    assert "CV error (MAPE) per operation" in r.stdout and "median CV error" in r.stdout
    assert "linear.gate_up" in r.stdout and "attn.decode" in r.stdout
    # resuming a finished profile measures nothing
    r = tuner("profile", "--model", "tiny-llama", "--device", "cpu", "--quick", "--out", out,
              "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["measured"] == 0
    # simulate with it: `tuner cost` on the profile and the simulator through the loader
    r = tuner("cost", "-m", "tiny-llama", "--profile", out, "--tokens", "256", "--decodes", "8",
              "--kv-tokens", "2000", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["provenance"]["kind"] == "measured"
    from tuner.core.workload import load_workload
    from tuner.predictors.sources import load_cost_model
    from tuner.sim.simulator import simulate

    cfg = ServingConfig(gpu="A10", chunk_size=1024, max_running=32)
    cm = load_cost_model(out, TINY, GPUS["A10"], cfg, mode="measured")
    res = simulate(load_workload(REPO / "examples" / "arxiv.jsonl", model=TINY), TINY,
                   GPUS["A10"], cfg, cost_model=cm)
    assert res.makespan_s > 0 and str(res.provenance).startswith("measured:")


@pytest.mark.parametrize(("device", "memory_bytes", "want"), [
    ("NVIDIA A100-SXM4-80GB", 85_100_000_000, "A100-80G"),
    ("NVIDIA A100-SXM4-40GB", 42_500_000_000, "A100-40G"),
    ("NVIDIA H100 80GB HBM3", 85_000_000_000, "H100"),
    ("NVIDIA GeForce RTX 4090", 25_250_627_584, "RTX4090"),
    ("NVIDIA L40S", 48_300_000_000, "L40S"),
    ("NVIDIA H100 PCIe", 85_000_000_000, "H100-PCIe"),  # 350 W, 2.0 TB/s: its own entry
    ("NVIDIA H100 NVL", 99_900_000_000, "H100-NVL"),
    ("NVIDIA A10G", 24_100_000_000, None),  # AWS's A10 variant, other tensor rates
])
def test_profiled_device_names(device, memory_bytes, want):
    """A profile names the catalog GPU it measured only where it is that part."""
    from tuner.core.catalog import load_gpus
    from tuner.predictors.devices import match_gpu

    assert match_gpu(device, memory_bytes, load_gpus()) == want
