"""SGLang's costs: AIConfigurator's SGLang kernel tables (predictors/data/aic-sglang), chosen by
the simulated engine and the GPU, their provenance, SGLang's engine-overhead profiles and the
fidelity suite's SGLang rows."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.test_aic import random_steps
from tuner.core.catalog import get_model, load_gpus, load_models
from tuner.core.config import ServingConfig
from tuner.core.provenance import Provenance
from tuner.core.workload import Workload
from tuner.predictors import aic, aic_tables
from tuner.predictors.engine_overhead import (
    PROFILES,
    SGLANG_V03_PER_SEQ_S,
    sglang_profile_for,
)
from tuner.predictors.features import BatchFeatures
from tuner.predictors.sources import cost_model_for, resolve
from tuner.sim.simulator import simulate

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
import fidelity  # noqa: E402

GPUS = load_gpus()
MODELS = load_models()
LLAMA = get_model("llama-3-8b")
needs_a100 = pytest.mark.skipif(not (fidelity.DEFAULT_DATA / "lambda-a100" / "index.csv").is_file(),
                                reason="../shared/fidelity/lambda-a100 absent")


# ---- the shipped tables ----------------------------------------------------------------------
def test_sglang_tables_ship_beside_vllms_with_their_own_manifest_license_and_notice():
    d = aic_tables.data_dir("sglang")
    assert d.name == "aic-sglang" and d.parent == aic_tables.data_dir().parent
    manifest = json.loads((d / "manifest.json").read_text())
    assert manifest["framework"] == "sglang" and "sglang" in manifest["source"]
    assert {v["catalog_gpu"] for v in manifest["gpus"].values()} == set(aic_tables.MEASURED)
    assert manifest["gpus"]["a100_sxm"]["gemm_version"] == "0.5.10"
    assert manifest["gpus"]["h100_sxm"]["attention_backends"]["bf16"]["generation"].startswith(
        "fa3")
    assert "Apache License" in (d / "LICENSE").read_text()
    assert "sglang" in (d / "NOTICE").read_text()
    assert sum(p.stat().st_size for p in d.glob("*.npz")) < 5.5e6  # what ships: 5.0 MB
    with pytest.raises(KeyError):
        aic_tables.data_dir("trtllm")


def test_sglang_tables_load_with_what_they_leave_to_the_vllm_tables():
    t = aic_tables.KernelTables.load("H100", framework="sglang")
    v = aic_tables.KernelTables.load("H100")
    assert t.framework == "sglang" and t.label == "SGLang" and t.gemm_version == "0.5.14"
    # SGLang's own GEMM / attention / all-reduce measurements, not vLLM's
    assert not np.array_equal(t.arrays["gen_attn"], v.arrays["gen_attn"])
    assert t.allreduce(4, True)[2] == "0.5.14"
    # NCCL and MoE: the vLLM file's arrays, and the provenance says where from
    np.testing.assert_array_equal(t.arrays["nccl_allreduce"], v.arrays["nccl_allreduce"])
    np.testing.assert_array_equal(t.arrays["moe"], v.arrays["moe"])
    assert t.moe_version == v.moe_version and t.modules == v.modules
    d = t.describe()
    assert d.startswith("SGLang kernels: AIConfigurator sglang 0.5.14 tables (h100_sxm")
    assert "NCCL collectives from the NCCL" in d and "fused MoE" in d and "vLLM 0.24.0" in d
    assert aic_tables.has_tables("A100-80G", "sglang") and not aic_tables.has_tables("A10",
                                                                                    "sglang")
    with pytest.raises(KeyError):
        aic_tables.KernelTables.load("A10", framework="sglang")


# ---- choosing tables by engine and GPU -------------------------------------------------------
def test_sglang_on_a_gpu_with_sglang_tables_is_priced_from_them():
    cm = aic.table_cost_model(LLAMA, GPUS["A100-80G"], engine=None, framework="sglang")
    vl = aic.table_cost_model(LLAMA, GPUS["A100-80G"], engine=None)
    assert cm.framework == "sglang" and vl.framework == "vllm" and cm.kind == "tables"
    f = random_steps(500)
    assert not np.allclose(cm.iteration_time_s(f), vl.iteration_time_s(f))
    p = cm.provenance
    assert p.engine == "sglang" and p.kind == "tables"
    assert p.detail.startswith("SGLang kernels: AIConfigurator sglang 0.5.10 tables (a100_sxm")
    assert "priced with vLLM's kernel tables" not in p.detail
    assert vl.provenance.engine is None and vl.provenance.detail.startswith(
        "measured: AIConfigurator, vLLM")


def test_sglang_on_a_gpu_without_them_is_priced_from_vllms_and_says_so():
    for gpu, kind in (("A10", "transferred"), ("RTX4090", "transferred")):
        cm = aic.table_cost_model(LLAMA, GPUS[gpu], engine=None, framework="sglang")
        vl = aic.table_cost_model(LLAMA, GPUS[gpu], engine=None)
        assert cm.kind == kind == vl.kind
        f = random_steps(300)
        np.testing.assert_array_equal(cm.iteration_time_s(f), vl.iteration_time_s(f))
        assert f"SGLang priced with vLLM's kernel tables (no SGLang tables for {gpu})" in (
            cm.provenance.detail)
        assert cm.provenance.engine == "sglang"


def test_sglang_all_reduce_uses_sglangs_table_and_cuda_graph_size():
    m = MODELS["llama-3.1-70b"]
    cm = aic.table_cost_model(m, GPUS["H100"], tp=4, engine=None, framework="sglang")
    assert "all-reduce: SGLang 0.5.14 custom all-reduce table (CUDA-graph timing up to 512 " \
           "tokens; NCCL table above 8 MiB)" in cm.source_note
    old = aic.table_cost_model(m, GPUS["H100"], tp=4, engine=None, framework="sglang",
                               engine_version="0.3.0")
    assert "all-reduce: SGLang 0.5.9 custom all-reduce table" in old.source_note
    assert "SGLang 0.3.0 priced with the 0.5.14 kernels" in old.source_note


def test_vllm_pricing_is_the_default_and_unchanged_by_the_framework_argument():
    for gpu, tp in (("H100", 2), ("L40S", 1), ("A10", 1)):
        a = aic.table_cost_model(LLAMA, GPUS[gpu], tp=tp)
        b = aic.table_cost_model(LLAMA, GPUS[gpu], tp=tp, framework="vllm")
        f = random_steps(400, seed=tp)
        np.testing.assert_array_equal(a.iteration_time_s(f), b.iteration_time_s(f))
        assert a.source_note == b.source_note and "SGLang" not in a.describe()


def test_the_cost_sources_resolve_sglang_with_its_tables_and_profile():
    cfg = ServingConfig(gpu="H100")
    r = resolve(LLAMA, GPUS["H100"], cfg, engine="sglang", calibrated=False)
    assert r.source == "tables" and r.cost_model.framework == "sglang"
    assert r.cost_model.engine.name == "sglang-overlap"
    r = resolve(LLAMA, GPUS["A10"], cfg.__class__(gpu="A10"), engine="sglang", calibrated=False)
    assert r.source == "transfer" and "no SGLang tables for A10" in r.cost_model.describe()
    vl = resolve(LLAMA, GPUS["H100"], cfg, calibrated=False)
    assert vl.cost_model.framework == "vllm" and not vl.cost_model.engine.name.startswith(
        "sglang")
    cm = cost_model_for(LLAMA, engine="sglang", engine_version="0.3.0",
                        calibrated=False)(GPUS["A100-80G"], ServingConfig(gpu="A100-80G", engine="sglang"))
    assert cm.engine.name == "sglang-v0.3" and cm.provenance.engine == "sglang"


# ---- provenance through the simulator --------------------------------------------------------
def test_provenance_engine_round_trips_and_is_absent_for_vllm():
    p = Provenance("tables", "x", 1.0, engine="sglang")
    assert Provenance.from_dict(p.to_dict()) == p and p.to_dict()["engine"] == "sglang"
    assert "engine" not in Provenance("tables", "x").to_dict()
    assert Provenance.from_dict({"kind": "tables", "detail": "x"}).engine is None


def test_simulator_says_sglang_was_priced_as_vllm_only_when_it_was():
    from tuner.core import sglang as sg

    m, g = LLAMA, GPUS["A100-80G"]
    d = sg.sglang_defaults(g)
    base = dict(gpu=g.name, chunk_size=d.chunked_prefill_size, block_size=1,
                gpu_memory_utilization=d.mem_fraction_static)
    cfg = ServingConfig(**base, max_running=256)
    rng = np.random.default_rng(0)
    w = Workload(prompt_tokens=rng.integers(50, 600, 200), output_tokens=rng.integers(5, 200, 200))
    note = "SGLang priced with vLLM's kernel tables; engine overhead not fitted"
    as_vllm = resolve(m, g, cfg, calibrated=False).cost_model
    as_sgl = resolve(m, g, cfg, engine="sglang", calibrated=False).cost_model
    r1 = simulate(w, m, g, cfg, as_vllm, engine="sglang", startup_s=0)
    r2 = simulate(w, m, g, cfg, as_sgl, engine="sglang", startup_s=0)
    assert note in r1.provenance.detail and note not in r2.provenance.detail
    assert r2.provenance.engine == "sglang"
    assert "SGLang kernels: AIConfigurator sglang 0.5.10" in r2.provenance.detail
    assert "engine overhead: sglang-overlap (estimated, not fitted)" in r2.provenance.detail
    assert r1.makespan_s != r2.makespan_s


# ---- SGLang's engine-overhead profiles --------------------------------------------------------
def test_sglang_profiles_per_release_fitted_and_overlapped():
    v03 = sglang_profile_for("0.3.0")
    assert v03 is PROFILES["sglang-v0.3"] and v03.fitted and not v03.overlapped
    assert v03.per_seq_s == SGLANG_V03_PER_SEQ_S == pytest.approx(57e-6, rel=0.01)
    assert "fitted on SGLang v0.3.0's 2 published offline figures" in v03.source
    assert "leave-one-out" in v03.source and "(fitted on public runs)" in v03.summary()
    new = sglang_profile_for(None)
    assert new is sglang_profile_for("0.5.6") is sglang_profile_for("0.4.0") is (
        PROFILES["sglang-overlap"])
    assert new.overlapped and not new.fitted and new.per_seq_s == v03.per_seq_s
    assert "estimated" in new.source and "(estimated, not fitted)" in new.summary()
    older = sglang_profile_for("0.2.7")
    assert older.per_seq_s == v03.per_seq_s and "used for 0.2.7" in older.source
    # v0.3 adds its host time; the overlap scheduler hides it under a longer GPU step
    f = BatchFeatures(*(np.array([0.0, 0.0]),) * 3, np.array([100.0, 1000.0]),
                      np.array([1e5, 1e6]), np.array([100.0, 1000.0]))
    gpu = np.array([0.020, 0.020])
    host = np.array([100, 1000]) * SGLANG_V03_PER_SEQ_S
    np.testing.assert_allclose(v03.step_time_s(gpu, f), gpu + host)
    np.testing.assert_allclose(new.step_time_s(gpu, f), np.maximum(gpu, host))


# ---- the fidelity suite's SGLang rows ----------------------------------------------------------
@needs_a100
def test_fidelity_sglang_rows_compute_and_meet_the_15_percent_bar():
    rows = fidelity.evaluate_published_sglang(fidelity.DEFAULT_DATA, GPUS)
    assert [r["status"] for r in rows] == ["ok", "ok"]
    assert [(r["published_req_s"], r["published_output_tok_s"]) for r in rows] == [
        (22.03, 4281.51), (19.84, 3856.01)]  # the README's SGLang offline rows
    for r in rows:
        assert r["engine"] == "sglang-v0.3" and r["kind"] == "tables"
        assert abs(r["req_s_error_pct"]) < 15.0
        assert r["req_s_error_pct"] == pytest.approx(r["output_tok_s_error_pct"], abs=0.05)
        assert "radix cache off" in r["config"] and "--chunked-prefill-size 8192" in r["config"]
        assert r["provenance"].startswith("SGLang kernels: AIConfigurator sglang")
        assert "SGLang priced with vLLM's kernel tables" not in r["provenance"]
    assert "--enable-torch-compile --disable-radix-cache" in rows[0]["command"]
    assert "--tp 4 --mem-frac 0.88" in rows[1]["command"]


@needs_a100
def test_fidelity_sglang_fit_is_what_ships_and_its_leave_one_out_meets_the_bar():
    fit = fidelity.fit_sglang(fidelity.DEFAULT_DATA, GPUS)
    best = fit["best"]
    assert best["terms"] == ("per_seq_s",)
    assert best["coef"]["per_seq_s"] == pytest.approx(SGLANG_V03_PER_SEQ_S, rel=0.01)
    assert max(abs(v) for v in best["loo"].values()) < 15.0
    assert fit["aliases"] == {"per_token_s": "per_seq_s", "per_chunk_s": "per_new_request_s"}
