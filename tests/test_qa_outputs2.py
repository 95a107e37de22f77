"""QA of the search's outputs, second pass: no export whose engines cannot start (a
mixture-of-experts plan's DP replicas run apart), a quantization comparison on the same GPUs,
the real reason a --provider --spot GPU is refused, counts with their nouns, and one line for
--engine-version on an SGLang-only search."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.test_export_cli import write_batch
from tuner.cli.main import app
from tuner.core.catalog import get_model, load_gpus
from tuner.core.config import ServingConfig
from tuner.core.errors import TunerError
from tuner.core.workload import load_workload
from tuner.exports import render_export
from tuner.exports.common import Deployment
from tuner.search.constraints import quantization_verdict
from tuner.search.records import TrialRecord

runner = CliRunner()
GPUS = load_gpus()
MIXTRAL = get_model("mixtral-8x7b")

# a mixture-of-experts plan the search prices as one data-parallel vLLM engine (its experts
# split over both GPUs): each replica alone would hold all ~87 GiB of weights on one H100
MOE_DP_SPACE = """\
knobs:
  chunk_size: [4096, 8192]
  max_running: [128, 256]
fixed:
  scheduler: vllm
  weight_bits: 16
  kv_bits: 16
  block_size: 16
  tp: 1
  dp: 2
"""


@pytest.fixture(scope="module")
def moe_dp_search(tmp_path_factory) -> tuple[Path, dict, str]:
    d = tmp_path_factory.mktemp("qa_moe_dp")
    wl = write_batch(d / "batch.jsonl", n=30)
    (d / "space.yaml").write_text(MOE_DP_SPACE)
    out = d / "out"
    r = runner.invoke(app, ["search", "--engines", "vllm", "-w", str(wl), "-m", "mixtral-8x7b",
                            "--gpus", "H100", "--space", str(d / "space.yaml"),
                            "--n-trials", "4", "--out", str(out)])
    assert r.exit_code == 0, (r.output, r.exception)
    return out, json.loads((out / "results.json").read_text()), r.output


def _moe_dep(tp: int, dp: int) -> Deployment:
    cfg = ServingConfig(gpu="H100", tp=tp, dp=dp, chunk_size=8192, max_running=256)
    return Deployment(cfg, MIXTRAL, GPUS["H100"], 4096)


# ---- 1. MoE exports that cannot start --------------------------------------------------------
def test_search_skips_separate_engine_exports_a_moe_dp_plan_cannot_start(moe_dp_search):
    out, res, terminal = moe_dp_search
    names = {p.name for p in out.iterdir()}
    for goal in ("fastest", "cheapest"):
        assert f"{goal}.vllm.yaml" in names  # the one data-parallel engine, as predicted
        for suffix in (".run-batch.sh", ".ray-data.py"):
            assert f"{goal}{suffix}" not in names
            why = res["skipped_files"][f"{goal}{suffix}"]
            assert "every expert of mixtral-8x7b on 1 GPU" in why and "does not fit" in why
    text = " ".join(terminal.split())
    assert "not written: fastest.run-batch.sh and fastest.ray-data.py" in text
    assert "fastest.vllm.yaml runs the plan as one data-parallel engine" in text
    report = (out / "report.html").read_text()
    assert "Not written: run-batch" in report and "Not written: ray-data" in report


def test_export_refuses_a_separate_engine_format_in_one_line(moe_dp_search, monkeypatch):
    # vLLM's parser check (a subprocess, where vLLM is installed) is not what this checks
    monkeypatch.setattr("tuner.exports.formats.vllm_parser_check", lambda *a, **k: None,
                        raising=False)
    out, _, _ = moe_dp_search
    for fmt in ("run-batch", "ray-data"):
        r = runner.invoke(app, ["export", "--out", str(out), "--format", fmt])
        # one TunerError: `tuner` prints it as one `error:` line and exits 2
        assert isinstance(r.exception, TunerError), (fmt, r.output, r.exception)
        msg = str(r.exception)
        assert "\n" not in msg and "does not fit on H100" in msg
        assert "--format vllm or vllm-run-batch" in msg  # the formats that run it as predicted
    # those formats are written: one data-parallel engine over both GPUs
    for ok in ("vllm", "vllm-run-batch"):
        r = runner.invoke(app, ["export", "--out", str(out), "--format", ok])
        assert r.exit_code == 0, (r.output, r.exception)
        assert "One data-parallel engine over all 2 GPUs" in r.output


def test_refusal_and_note_are_one_check():
    from tuner.exports import ExportCannotStart
    from tuner.exports.common import separate_engines_misfit

    # one replica alone misses the GPU: refused with the very reason the note would give
    misfit = separate_engines_misfit(_moe_dep(1, 2))
    assert misfit is not None and "does not fit" in misfit
    with pytest.raises(ExportCannotStart) as err:
        render_export("ray-data", _moe_dep(1, 2).config, MIXTRAL, GPUS["H100"],
                      max_model_len=4096)
    assert misfit.rstrip(".") in str(err.value)
    # a replica that fits alone (TP 4): still written, its note says it fits
    assert separate_engines_misfit(_moe_dep(4, 2)) is None
    for fmt in ("run-batch", "ray-data"):
        text = render_export(fmt, _moe_dep(4, 2).config, MIXTRAL, GPUS["H100"],
                             max_model_len=4096)
        assert "it fits, with another KV capacity" in text


# ---- 2. the quantization comparison on the same GPUs ------------------------------------------
def _figures_record(n: int, cfg: ServingConfig, sim: dict) -> TrialRecord:
    m = sim["metrics"]
    return TrialRecord(number=n, config=cfg.to_dict(), feasible=True,
                       metrics={"makespan_s": m["makespan_s"], "cost_usd": m["cost_usd"]},
                       values=(m["makespan_s"], m["cost_usd"]))


@pytest.fixture(scope="module")
def small_job(tmp_path_factory):
    d = tmp_path_factory.mktemp("qa_quant")
    return load_workload(write_batch(d / "batch.jsonl", n=30), model=get_model("llama-3-8b"))


def _simulated(job, model, cfg: ServingConfig) -> dict:
    from tuner.predictors.sources import cost_model_for
    from tuner.sim.simulator import simulate

    gpu = GPUS[cfg.gpu]
    res = simulate(job, model, gpu, cfg, cost_model_for(model)(gpu, cfg)).summary()
    return {"metrics": res}


def test_quantization_compares_16_bit_simulated_on_the_same_gpus(small_job):
    from tuner.search.baseline import sixteen_bit_beside

    model, gpus = get_model("llama-3-8b"), {"L40S": GPUS["L40S"]}
    q_cfg = ServingConfig(gpu="L40S", tp=1, dp=2, weight_bits=8, chunk_size=8192,
                          max_running=256)
    f_cfg = ServingConfig(gpu="L40S", tp=1, dp=1, chunk_size=8192, max_running=256)
    q = _figures_record(1, q_cfg, _simulated(small_job, model, q_cfg))
    f = _figures_record(0, f_cfg, _simulated(small_job, model, f_cfg))
    # the search ran 16 bits on 1 x L40S only: 16 bits on 2 x L40S is simulated beside it
    sims = sixteen_bit_beside(q, small_job, model, gpus)
    assert all(s["feasible"] and s["config"]["dp"] == 2 and s["config"]["weight_bits"] == 16
               for s in sims)
    line = quantization_verdict([f, q], "cheapest", lambda x: f"${x:.4f}", lambda _r: sims)
    assert "against 2 x L40S (TP 1 x DP 2, 16-bit)" in line, line
    assert "1 x L40S" not in line and "no 16-bit plan runs" not in line
    assert "simulated beside the search, which tried no 16-bit plan on 2 x L40S" in line
    best = min(sims, key=lambda s: (s["metrics"]["cost_usd"], s["metrics"]["makespan_s"]))
    pct = 100 * (q.cost_usd / best["metrics"]["cost_usd"] - 1)
    assert f"{pct:+.0f} % $" in line


def test_quantization_says_why_16_bit_cannot_run_on_the_same_gpus(small_job):
    from tuner.search.baseline import sixteen_bit_beside

    nemo = get_model("mistral-nemo-12b")  # ~24.5 GB at 16 bits: more than one A10 holds
    q_cfg = ServingConfig(gpu="A10", tp=1, dp=1, weight_bits=8, chunk_size=2048,
                          max_running=64)
    f_cfg = ServingConfig(gpu="A10", tp=2, dp=1, chunk_size=2048, max_running=64)
    q = TrialRecord(number=1, config=q_cfg.to_dict(), feasible=True,
                    metrics={"makespan_s": 50.0, "cost_usd": 0.01}, values=(50.0, 0.01))
    f = TrialRecord(number=0, config=f_cfg.to_dict(), feasible=True,
                    metrics={"makespan_s": 40.0, "cost_usd": 0.02}, values=(40.0, 0.02))
    line = quantization_verdict(
        [f, q], "cheapest", lambda x: f"${x:.4f}",
        lambda r: sixteen_bit_beside(r, small_job, nemo, {"A10": GPUS["A10"]}))
    assert "16 bits cannot run on 1 x A10: " in line and "does not fit" in line, line
    assert "against 2 x A10 (TP 2 x DP 1, 16-bit)" in line


# ---- 3. --provider --spot: the real reason ----------------------------------------------------
def test_spot_refusal_says_when_the_provider_has_no_such_gpu_at_all(tmp_path):
    from tuner.core.pricing import require_offered

    with pytest.raises(TunerError) as err:
        require_offered(GPUS["A10"], "gcp", spot=True)  # gcp's table has no A10 instance
    assert "has no A10 instance in the price table" in str(err.value)
    assert "spot price" not in str(err.value)
    with pytest.raises(TunerError) as err:  # lambda has A10 instances, none at a spot price
        require_offered(GPUS["A10"], "lambda", spot=True)
    assert "publishes no fixed spot price for A10" in str(err.value)
    r = runner.invoke(app, ["search", "-w", str(write_batch(tmp_path / "b.jsonl", n=5)), "-m",
                            "llama-3-8b", "--provider", "gcp", "--spot", "--gpus", "A10",
                            "--out", str(tmp_path / "o")])
    assert isinstance(r.exception, TunerError) and "has no A10 instance" in str(r.exception)


# ---- 4. counts with their nouns ---------------------------------------------------------------
def test_one_gpu_is_not_gpus():
    from tuner.core.pricing import place

    m = place("A10", 1, tp=1, dp=1)
    assert "(1 GPU each)" in m.describe() and "1 replica of" in m.describe()
    gpu = dataclasses.replace(GPUS["A10"], gpus_per_machine=1)
    cfg = ServingConfig(gpu="A10", chunk_size=2048, max_running=64)
    for fmt in ("vllm", "run-batch", "ray-data"):
        text = render_export(fmt, cfg, get_model("llama-3-8b"), gpu, max_model_len=4096)
        assert "(1 GPU in use)" in text and "(1 GPU each)" in text, fmt
        assert "1 GPUs" not in text and "GPU(s)" not in text.split("# tuner-config")[0], fmt


# ---- 5. --engine-version on an SGLang-only search ---------------------------------------------
def test_engine_version_on_an_sglang_only_search_is_one_line(tmp_path):
    r = runner.invoke(app, ["search", "-w", str(write_batch(tmp_path / "b.jsonl", n=5)), "-m",
                            "llama-3-8b", "--gpus", "A10", "--engines", "sglang",
                            "--engine-version", "0.6.0", "--n-trials", "5",
                            "--out", str(tmp_path / "o")])
    # one TunerError: `tuner` prints it as one `error:` line and exits 2 (TunerError.exit_code)
    assert isinstance(r.exception, TunerError), (r.output, r.exception)
    msg = str(r.exception)
    assert "--engine-version 0.6.0" in msg and "sglang only" in msg and "\n" not in msg
    assert "V0" not in r.output and not (tmp_path / "o").exists()
