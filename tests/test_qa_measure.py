"""QA of the measurement side: `tuner profile` / `fit` / `cost` / `transfer` and the profile
files they read (each test failed before its fix)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tuner.cli.main import app

REPO = Path(__file__).resolve().parents[1]
TINY_PROFILE = REPO / "predictors" / "data" / "tiny-llama-cpu"


def _run(*args: str):
    return CliRunner().invoke(app, [str(a) for a in args])


def tuner(*args) -> subprocess.CompletedProcess:
    """The real entry point (its error handling included), as a user runs it."""
    env = dict(os.environ, COLUMNS="200")
    env.pop("FORCE_COLOR", None)
    return subprocess.run([sys.executable, "-m", "tuner.cli", *map(str, args)],
                          capture_output=True, text=True, timeout=300, cwd=REPO, env=env)


def _one_line_error(res: subprocess.CompletedProcess, *needles: str) -> None:
    assert res.returncode == 2, res.stderr[-800:]
    assert "Traceback" not in res.stderr, res.stderr[-800:]
    lines = [ln for ln in (res.stdout + res.stderr).splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), lines
    for n in needles:
        assert n in lines[0], lines[0]


def test_a_non_numeric_cell_in_profile_csv_is_one_line_naming_it(tmp_path):
    """A damaged (or hand-edited) time in profile.csv: `tuner fit` and `tuner cost --profile`
    said a pandas TypeError with a traceback; now one line naming the line and column."""
    prof = tmp_path / "p"
    shutil.copytree(TINY_PROFILE, prof)
    (prof / "fit.json").unlink()  # a profile without its fit: fitted on the fly
    lines = (prof / "profile.csv").read_text().splitlines()
    cols = lines[0].split(",")
    cells = lines[2].split(",")
    assert len(cells) == len(cols)
    cells[cols.index("median_s")] = "xyz"
    lines[2] = ",".join(cells)
    (prof / "profile.csv").write_text("\n".join(lines) + "\n")
    _one_line_error(tuner("fit", prof, "--out", tmp_path / "fit"), "line 3", "median_s", "'xyz'")
    _one_line_error(tuner("cost", "-m", "tiny-llama", "--profile", prof, "--tokens", "64"),
                    "line 3", "median_s")


@pytest.mark.parametrize("model,gpu,tp,tokens", [
    ("llama-3-8b", "H100", 2, 300),       # measured tables: the rows 0.61 % short before
    ("llama-3-70b", "L40S", 2, 300),      # 0.65 %
    ("qwen3-30b-a3b", "A10", 2, 544),     # transferred tables, MoE: 0.84 %
    ("llama-3-8b", "H100", 1, 4096),      # 0.009 %
])
def test_cost_operations_sum_to_the_iteration_the_simulator_prices(model, gpu, tp, tokens):
    """`tuner cost`'s per-operation rows add up to its iteration total, which is the time the
    simulator gives the same step (CostModel.iteration_time_s). The tables' fast path prices
    the token-count kernels as one combined curve (log-log between grid points), the rows each
    kernel alone: they were up to 0.8 % apart at TP 2 with nothing saying so. Now a row holds
    the difference, and the footer says what it is."""
    from tuner.core.catalog import get_gpu, get_model, load_gpus
    from tuner.predictors.aic import table_cost_model
    from tuner.predictors.features import BatchFeatures

    args = ["cost", "-m", model, "-g", gpu, "--tp", str(tp), "--tokens", str(tokens),
            "--decodes", "8", "--kv-tokens", "8000"]
    res = _run(*args, "--json")
    assert res.exit_code == 0, res.output[-600:]
    doc = json.loads(res.output)
    assert sum(o["total_s"] for o in doc["operations"]) == pytest.approx(doc["total_s"], rel=1e-9)
    assert sum(doc["groups"].values()) == pytest.approx(doc["total_s"], rel=1e-9)
    cm = table_cost_model(get_model(model), get_gpu(gpu, load_gpus()), tp=tp)
    f = BatchFeatures.single(prefill_tokens=tokens, decodes=8, kv_tokens=8000)
    # no engine profile in either (the default one prices no host terms for the newest vLLM)
    assert doc["total_s"] == pytest.approx(float(cm.iteration_time_s(f)[0]), rel=1e-9)
    if tp > 1:
        table = _run(*args)
        assert table.exit_code == 0 and "interpolation" in table.output, table.output


@pytest.mark.parametrize("device,dtype_bytes", [("cuda", 2.0), ("cpu", 2.0), ("cpu", 4.0)])
def test_quant_cases_count_the_elements_the_op_runs_on(device, dtype_bytes):
    """(De)quantization on a CPU runs on a float32 tensor whatever the profile's dtype
    (profilers.ops: 4-byte elements; its CSV dtype float32): a bfloat16 GPU profile's
    `int8/cpu` rows (and a `--dtype bfloat16` CPU profile's) said twice the elements, FLOPs and
    bytes their timed call had."""
    from tuner.core.catalog import get_model
    from tuner.profilers.plan import PlanLimits, build_plan
    from tuner.profilers.profile import case_dtype

    limits = PlanLimits(device=device, families=frozenset({"quant"}), max_quant_bytes=1 << 20)
    cases = build_plan(get_model("tiny-llama"), limits, dtype_bytes)
    assert cases
    for c in cases:
        elem = 4.0 if case_dtype(c, "float32" if dtype_bytes == 4 else "bfloat16",
                                 device) == "float32" else dtype_bytes
        numel = c.size_bytes / elem
        assert c.shape.startswith(f"{int(numel)} elements"), (c, elem)
        assert c.flops == pytest.approx(5.0 * numel)
        assert c.bytes_moved == pytest.approx(numel * (elem + c.bits / 8.0))


def test_the_numeric_profile_columns_are_the_schemas_non_text_columns():
    """predictors cannot import profilers (the layers point the other way), so read_profile
    keeps its own list of number columns: it must stay the schema's columns less the text ones."""
    from tuner.predictors.fit import NUMERIC_COLUMNS
    from tuner.profilers.schema import COLUMNS

    text = {"operation", "variant", "shape", "dtype", "status"}
    assert NUMERIC_COLUMNS == set(COLUMNS) - text
