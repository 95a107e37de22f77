"""The H200 profiles measured on the lent GPU (benchmarks/data/h200-2026-11-30): real full-grid
runs, what they say against the H200 kernel tables and the H100 profiles of the same cases, the
catalog's host link they measured, and the profiler's record of a run cut short."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
H200 = REPO / "benchmarks" / "data" / "h200-2026-11-30"
H100 = REPO / "benchmarks" / "data" / "h100-2026-11-26"
MODELS = ("llama-3-8b", "llama-2-7b", "llama-3-70b")


def _pvt():
    """benchmarks/profile_vs_tables.py as a module (the H100 data's tests load it so too)."""
    from tests.test_gpu_profile_data import _compare_module

    return _compare_module()


def _rows(path: Path) -> list[dict]:
    with path.open() as f:
        return [r for r in csv.DictReader(f) if r["status"] == "ok"]


@pytest.mark.parametrize("model", MODELS)
def test_profiles_are_real_h200_runs_at_full_grids(model):
    prov = json.loads((H200 / model / "provenance.json").read_text())
    assert prov["gpu"] == "H200" and prov["device"] == "cuda" and prov["model"] == model
    assert prov["device_name"] == "NVIDIA H200" and not prov["quick"]
    assert prov["dtype"] == "bfloat16"
    lines = (H200 / model / "profile.csv").read_text().splitlines()
    assert len(lines) > 500 and all(r.endswith(",ok") for r in lines[1:])


def test_projections_agree_with_the_h200_tables_as_on_the_h100():
    """Two independent measurements of the same GEMMs on an H200 agree as they do on an H100
    (PyTorch's cuBLAS calls 5-16 % slower than the GEMMs AIConfigurator timed inside vLLM)."""
    pvt = _pvt()
    for model in MODELS:
        lin = pvt.compare(H200 / model)["families"]["linear"]
        assert lin["n"] >= 150 and 1.0 <= lin["median_ratio"] <= 1.18, (model, lin)


@pytest.mark.parametrize("model", MODELS)
def test_the_h200_against_the_h100_is_what_the_datasheets_say(model):
    """Same tensor cores, 4.8 against 3.35 TB/s of HBM: compute-bound projections take the same
    time on both, weight-read-bound ones less on the H200 (by at most the bandwidth ratio)."""
    fam = _pvt().against(_rows(H200 / model / "profile.csv"), _rows(H100 / model / "profile.csv"))
    assert fam["linear>=2048tok"]["n"] >= 30 and fam["linear<=16tok"]["n"] >= 30
    assert 0.95 <= fam["linear>=2048tok"]["median_ratio"] <= 1.05, fam
    assert 3.35 / 4.8 - 0.02 <= fam["linear<=16tok"]["median_ratio"] <= 0.9, fam
    if model == "llama-3-8b":  # the same PCIe 5 x16 host link on both machines
        for op in ("copy.h2d", "copy.d2h"):
            assert fam[op]["n"] == 44 and abs(fam[op]["median_ratio"] - 1) <= 0.05, fam[op]


@pytest.mark.parametrize("gpu,data", [("H100", H100), ("H200", H200)])
def test_the_catalog_host_link_is_the_measured_pinned_copy(gpu, data):
    from tuner.core.catalog import load_gpus

    rows = _rows(data / "llama-3-8b" / "profile.csv")
    best_gbps = max(float(r["bytes_moved"]) / float(r["median_s"]) / 1e9 for r in rows
                    if r["operation"].startswith("copy.") and r["variant"] == "pinned")
    assert abs(load_gpus()[gpu].host_link_gbps / best_gbps - 1) <= 0.03, best_gbps


def test_the_cli_reads_a_data_folder_and_compares_two_gpus():
    """The README's command: a data folder (its README.md passed over) against another GPU's."""
    r = subprocess.run([sys.executable, str(REPO / "benchmarks" / "profile_vs_tables.py"),
                        str(H200), "--against", str(H100), "--json"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-800:]
    res = json.loads(r.stdout)
    assert sorted(x["model"] for x in res) == sorted(MODELS)
    assert all(x["against"]["device_name"] == "NVIDIA H100 80GB HBM3" for x in res)
    bad = subprocess.run([sys.executable, str(REPO / "benchmarks" / "profile_vs_tables.py"),
                          str(H200 / "README.md")], capture_output=True, text=True, timeout=60)
    assert bad.returncode != 0 and "no profile folder" in bad.stderr


def test_the_h200_profile_prices_the_example_job():
    """`--profile` with the H200 profile replaces the tables: slower by about what the
    projections' and prefill attention's ratios give, as the H100's (+14 %)."""
    from typer.testing import CliRunner

    from tuner.cli.main import app

    args = ["simulate", "-w", str(REPO / "examples" / "arxiv.jsonl"), "-m", "llama-3-8b",
            "-g", "H200", "--json"]
    runs = [CliRunner().invoke(app, args + extra)
            for extra in ([], ["--profile", str(H200 / "llama-3-8b")])]
    assert all(r.exit_code == 0 for r in runs), [r.output[-400:] for r in runs]
    tables, profile = (json.loads(r.stdout) for r in runs)
    assert "AIConfigurator" in tables["provenance"] and "2026-11-30" in profile["provenance"]
    assert 1.05 < profile["makespan_s"] / tables["makespan_s"] < 1.25


def test_a_cut_profile_run_records_itself_and_the_folder_totals(tmp_path, monkeypatch):
    """A profile stopped part-way (Ctrl-C, or on_device.sh's `timeout -s INT`) keeps its rows
    and records the cut run and the folder's totals in provenance.json; the 2026-11-30 llama-3-8b
    folder lost its totals that way."""
    pytest.importorskip("torch")
    from tuner.core.catalog import load_models
    from tuner.profilers import profile as prof

    settings = prof.ProfileSettings(model=load_models()["tiny-llama"], out=tmp_path / "p",
                                    device="cpu", quick=True, families=("linear",))
    prof.run_profile(settings, progress=False)
    first = json.loads((tmp_path / "p" / "provenance.json").read_text())
    real = prof._measure_chunk
    seen = {"n": 0}

    def cut_after_two(*a, **k):
        for row in real(*a, **k):
            if seen["n"] == 2:
                raise KeyboardInterrupt
            seen["n"] += 1
            yield row

    monkeypatch.setattr(prof, "_measure_chunk", cut_after_two)
    settings2 = prof.ProfileSettings(model=settings.model, out=settings.out, device="cpu",
                                     quick=True, families=("linear", "elementwise"))
    with pytest.raises(KeyboardInterrupt):
        prof.run_profile(settings2, progress=False)
    prov = json.loads((tmp_path / "p" / "provenance.json").read_text())
    assert len(prov["runs"]) == 2 and prov["runs"][-1].get("cut") is True
    assert prov["runs"][-1]["measured"] == 2 and "cut" not in prov["runs"][0]
    assert prov["rows"] == first["rows"] + 2 == len(_rows(tmp_path / "p" / "profile.csv"))
    assert prov["status_counts"] == {"ok": prov["rows"]}


def test_the_transformers_run_on_the_h200_is_the_example_jobs_first_64_requests():
    """The second device call of 2026-11-30: `tuner validate --runner transformers` of a plan for
    the first 64 requests of examples/arxiv.jsonl on random weights of llama-3-8b's shape. Every
    token the workload asks for was produced, and the engine's KV cache was the plan's."""
    import numpy as np

    from tuner.core.workload import load_workload

    d = H200 / "transformers-validate"
    v = json.loads((d / "validation.json").read_text())["validation"][0]
    res = json.loads((d / "result.json").read_text())
    w = load_workload(REPO / "examples" / "arxiv.jsonl")
    assert v["device"] == "cuda: NVIDIA H200" and v["runner"] == "transformers"
    assert v["engine"].startswith("transformers 5.17.0") and v["model"] == "llama-3-8b"
    assert res["ok"] and res["requests"] == 64 and res["mismatched_lengths"] == 0
    assert res["prompt_tokens"] == int(np.sum(w.prompt_tokens[:64]))
    assert res["output_tokens"] == v["output_tokens"] == int(np.sum(w.output_tokens[:64]))
    assert v["kv_capacity_tokens"]["plan"] == v["kv_capacity_tokens"]["engine"]
    # the prediction is vLLM's engine: transformers' continuous batching is an order of
    # magnitude slower on the same plan (105.0 s against 6.7 s), which the notes now say
    assert v["measured_s"] > 10 * v["predicted_s"]
