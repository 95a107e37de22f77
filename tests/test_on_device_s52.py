"""benchmarks/on_device.sh, the check for the GPU machine this workplace lends (one H200, no
network), and benchmarks/device_wheels.sh, which prepares what it carries: they parse, the dry
run lists the steps, the documented `run` call fits the tool's limits, the carried wheels cover
tuner's dependencies, and a CPU rehearsal of the whole pipeline packs files the tool brings back
(at most 8, each <= 16 MiB, no deeper than $OUT/a/b/file, names of letters, digits, '.', '_', '-')."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tarfile
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "benchmarks" / "on_device.sh"
WHEELS = REPO / "benchmarks" / "device_wheels.sh"
RUN_CALL = re.compile(r"^#? *run: (\{.*\})$", re.M)
# the device tool's limits (its README): one command <= 600 s, its string <= 2,000 characters,
# <= 8 carried paths; files back: <= 8, each <= 16 MiB, 64 MiB together, <= 2 folders down
MAX_FILES, MAX_FILE_BYTES, MAX_TOTAL_BYTES = 8, 16 * 2**20, 64 * 2**20
NAME = re.compile(r"^[A-Za-z0-9._-]+$")


def _env(**extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("DRY_RUN", "REHEARSAL", "BUDGET_S")}
    return env | extra


def test_scripts_parse():
    for script in (SCRIPT, WHEELS):
        assert subprocess.run(["bash", "-n", str(script)]).returncode == 0, script


def test_dry_run_lists_the_device_steps(tmp_path):
    r = subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, timeout=60,
                       env={"PATH": "/usr/bin:/bin", "OUT": str(tmp_path / "out"),
                            "DRY_RUN": "1"})
    assert r.returncode == 0, r.stderr
    for step in ("preflight", "profile_ops_llama-3-8b", "profile_copy_llama-3-8b",
                 "fit_llama-3-8b", "compare_llama-3-8b", "simulate_tables", "simulate_profile",
                 "search", "validate_search", "validate", "profile_ops_llama-3-70b", "profile_ops_llama-2-7b",
                 "profile_threads_llama-3-8b", "profile_quant_llama-3-8b", "summary", "pack"):
        assert f"== {step} " in r.stdout or f"== {step}\n" in r.stdout, step
    assert "--device cuda" in r.stdout and "--device cpu" not in r.stdout
    assert "--gpus H200" in r.stdout and "--profile" in r.stdout
    # every step runs under `timeout`, none longer than the whole budget
    limits = [int(x) for x in re.findall(r"^\+ timeout (\d+) ", r.stdout, re.M)]
    assert limits and max(limits) <= 480
    assert not any((tmp_path / "out").iterdir())  # a dry run writes nothing


def test_the_documented_run_call_fits_the_device_tool():
    """The exact call is at the top of the script and in benchmarks/README.md, and fits."""
    in_script = RUN_CALL.findall(SCRIPT.read_text())
    in_readme = RUN_CALL.findall((REPO / "benchmarks" / "README.md").read_text())
    assert len(in_script) == 1 and in_readme == in_script
    call = json.loads(in_script[0])
    assert len(call["command"]) <= 2000 and "benchmarks/on_device.sh" in call["command"]
    assert call["carry"] == [".whl"]
    # the device's budget (the rehearsal's is smaller)
    budget_s = max(int(b) for b in re.findall(r"BUDGET_S=\$\{BUDGET_S:-(\d+)\}",
                                              SCRIPT.read_text()))
    assert budget_s == 480
    # the summary may run 30 s past the budget, each cut step gets 5 s to die, packing a few
    assert budget_s + 60 <= call["timeout_s"] <= 600


def test_carried_wheels_cover_tunes_dependencies():
    """Every runtime dependency in pyproject.toml is either on the device image or carried."""
    text = WHEELS.read_text()
    carried = {re.split(r"[=<>]", w)[0].lower()
               for w in re.search(r"WHEELS=\(([^)]*)\)", text).group(1).split()}
    on_image = set(re.search(r'ON_IMAGE="([^"]*)"', text).group(1).lower().split())
    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    names = {re.split(r"[ =<>\[;]", d)[0].lower().replace("_", "-") for d in deps}
    assert names <= carried | on_image, names - carried - on_image
    assert {"optuna", "plotly", "typer"} <= carried  # absent there / capped below 0.29 here


def test_wheels_dry_run_and_ignore(tmp_path):
    r = subprocess.run(["bash", str(WHEELS)], capture_output=True, text=True, timeout=60,
                       env=_env(DRY_RUN="1"))
    assert r.returncode == 0, r.stderr
    for part in ("pip download", "--no-deps", "--only-binary=:all:", "--python-version 3.12",
                 "--implementation cp", "manylinux_2_28_x86_64", "-d .whl", "optuna==",
                 "typer==0.28"):
        assert part in r.stdout, part
    assert "/.whl/" in (REPO / ".gitignore").read_text().splitlines()
    assert not (tmp_path / ".whl").exists()


def _files_back(out: Path) -> list[Path]:
    """What the device tool would bring back of OUT, checked against its rules."""
    files = [p for p in out.rglob("*") if p.is_file()]
    assert 0 < len(files) <= MAX_FILES, files
    for p in files:
        rel = p.relative_to(out)
        assert len(rel.parts) <= 3, rel  # $OUT/a/b/file at most
        assert all(NAME.match(part) for part in rel.parts), rel
        assert p.stat().st_size <= MAX_FILE_BYTES, rel
    assert sum(p.stat().st_size for p in files) <= MAX_TOTAL_BYTES
    return files


@pytest.mark.slow
def test_cpu_rehearsal_runs_the_pipeline_and_packs_what_comes_back(tmp_path):
    """REHEARSAL=1: profile -> fit -> compare -> simulate -> search -> summary -> pack on this CPU
    with tiny-llama (~80 s on 2 cores)."""
    pytest.importorskip("torch")
    out = tmp_path / "out"
    r = subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, timeout=420,
                       env=_env(REHEARSAL="1", OUT=str(out), WORK=str(tmp_path / "work"),
                                PYTHON=sys.executable))
    assert r.returncode == 0, (r.stdout[-3000:], r.stderr[-2000:])
    names = {p.name for p in _files_back(out)}
    assert names == {"summary.json", "summary.txt", "profiles.tar.gz", "results.tar.gz",
                     "logs.tar.gz"}

    s = json.loads((out / "summary.json").read_text())
    assert s["rehearsal"] is True
    steps = {x["step"]: x["exit"] for x in s["steps"]}
    assert set(steps.values()) == {"0"}, steps
    for step in ("preflight", "profile_ops_tiny-llama", "profile_copy_tiny-llama",
                 "fit_tiny-llama", "compare_tiny-llama", "simulate_tables", "simulate_profile",
                 "search", "validate_search", "validate", "profile_threads_tiny-llama", "profile_quant_tiny-llama",
                 "fit_final_tiny-llama"):
        assert step in steps, step
    m = s["models"]["tiny-llama"]
    assert m["provenance"]["device_name"] and m["fit_median_cv_pct"] is not None
    assert m["vs_tables"]["stand_in_gpu"] is True  # a CPU profile: the ratios mean nothing
    assert m["vs_tables"]["families"]["linear"]["n"] > 0
    assert m["vs_catalog"]["gemm_tflops"]["catalog"] > 0
    assert s["job"]["makespan_tables_s"] > 0 and s["job"]["makespan_profile_s"] > 0
    assert s["search"]["winners"] and s["search"]["verdicts"]
    assert "REHEARSAL" in (out / "summary.txt").read_text()
    if (REPO / ".venv-vllm" / "bin" / "python").exists():  # the transformers run (step 3b)
        v = s["validation"][0]
        assert v["predicted_s"] > 0 and v["measured_s"] > 0 and v["engine"].startswith("transformers")

    with tarfile.open(out / "profiles.tar.gz") as t:
        members = set(t.getnames())
    assert {"tiny-llama/profile.csv", "tiny-llama/provenance.json",
            "tiny-llama/fit.json"} <= members
    assert not any(n.endswith("fit.joblib") for n in members)
    with tarfile.open(out / "results.tar.gz") as t:
        members = set(t.getnames())
    assert {"results/search/report.html", "results/search.json",
            "results/compare_tiny-llama.json", "results/simulate_profile.json",
            "results/validation.json"} <= members
    with tarfile.open(out / "logs.tar.gz") as t:
        assert "logs/profile_ops_tiny-llama.log" in t.getnames()
