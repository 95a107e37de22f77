"""Measured kernel tables (predictors.aic_tables, aic_transfer, aic): interpolation,
extrapolation, transfer across GPUs (by architecture), speed."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from tuner.core.catalog import load_gpus, load_models
from tuner.core.config import ServingConfig
from tuner.predictors import aic, aic_tables, aic_transfer
from tuner.predictors.engine_overhead import PROFILES, EngineProfile, get_profile
from tuner.predictors.features import BatchFeatures, sum_parts
from tuner.predictors.tables import IntTable, loglog_bilinear, loglog_curve

GPUS = load_gpus()
MODELS = load_models()


def feats(rows) -> BatchFeatures:
    a = np.asarray(rows, dtype=np.float64).reshape(-1, 6)
    return BatchFeatures(*(a[:, i] for i in range(6)))


def random_steps(n: int, seed: int = 0) -> BatchFeatures:
    rng = np.random.default_rng(seed)
    dec = rng.integers(0, 256, n).astype(float)
    pf = np.where(rng.random(n) < 0.2, rng.integers(1, 2048, n), 0).astype(float)
    return BatchFeatures(pf, pf * pf, pf * rng.integers(0, 4000, n), dec,
                         dec * rng.integers(10, 6000, n), dec + (pf > 0))


def test_shipped_tables_cover_the_measured_gpus_with_license_and_notice():
    d = aic_tables.data_dir()
    manifest = json.loads((d / "manifest.json").read_text())
    assert {v["catalog_gpu"] for v in manifest["gpus"].values()} == set(aic_tables.MEASURED)
    assert "Apache License" in (d / "LICENSE").read_text()
    assert "AIConfigurator" in (d / "NOTICE").read_text()
    assert sum(p.stat().st_size for p in d.glob("*.npz")) < 8e6  # under 1 MB a GPU
    for gpu in aic_tables.MEASURED:
        assert gpu in GPUS


def test_gemm_at_a_measured_point_is_the_measurement():
    t = aic_tables.KernelTables.load("H100")
    z = np.load(aic_tables.data_dir() / "h100_sxm.npz")
    n, k = z["gemm_bf16_n"], z["gemm_bf16_k"]
    j, i = int(np.searchsorted(n, 4096)), int(np.searchsorted(k, 4096))
    measured = z["gemm_bf16_lat_ms"][:, j, i] * 1e-3
    np.testing.assert_allclose(t.gemm_s(4096, 4096), measured, rtol=1e-6)


def test_gemm_interpolates_in_log_space_between_measured_sizes():
    t = aic_tables.KernelTables.load("H100")
    lo, hi = t.gemm_s(4096, 4096), t.gemm_s(5120, 4096)
    mid = t.gemm_s(int(np.sqrt(4096 * 5120)), 4096)  # geometric midpoint: geometric mean
    np.testing.assert_allclose(mid, np.sqrt(lo * hi), rtol=1e-3)
    # beyond the largest measured n (65536) time grows in proportion to n (LM heads)
    big, top = t.gemm_s(131072, 4096), t.gemm_s(65536, 4096)
    np.testing.assert_allclose(big, 2 * top, rtol=1e-9)


def test_curve_holds_below_continues_last_slope_above_and_is_zero_for_no_work():
    lx, ly = np.log([1.0, 10.0, 100.0]), np.log([1.0, 2.0, 8.0])
    out = loglog_curve(np.array([0.0, 1.0, 10.0, 100.0, 1000.0]), lx, ly)
    slope = np.log(4.0) / np.log(10.0)
    np.testing.assert_allclose(out, [0.0, 1.0, 2.0, 8.0, 8.0 * 10 ** slope])
    tab = IntTable.from_curve(lx, ly, n=64)
    x = np.arange(0, 200, dtype=np.float64)
    np.testing.assert_allclose(tab.time_s(x), loglog_curve(x, lx, ly), rtol=1e-12)


def test_decode_attention_grows_with_batch_and_length_and_uniform_grid_matches():
    cm = aic.MeasuredTableCostModel.build(MODELS["llama-3-8b"], GPUS["H100"],
                                          aic_tables.KernelTables.load("H100"))
    n = np.array([1.0, 8, 64, 256, 256, 256])
    kv = n * np.array([512, 512, 512, 512, 2048, 8192])
    t = cm._cache["gen"].time_s(n, kv)
    assert np.all(np.diff(t) > 0)
    ref = loglog_bilinear(n, kv, cm.log_gen_b, cm.log_gen_s, cm.log_gen_t)
    np.testing.assert_allclose(t, ref, rtol=0.03)


@pytest.mark.parametrize("gpu,tp", [("H100", 1), ("H100", 4), ("RTX-PRO-6000", 2), ("A40", 1)])
def test_fast_pricing_equals_the_breakdown(gpu, tp):
    cm = aic.table_cost_model(MODELS["llama-3-8b"], GPUS[gpu], tp=tp, engine=None)
    assert cm is not None
    f = random_steps(20_000, seed=tp)
    fast = cm.iteration_time_s(f)
    slow = sum_parts(cm.gpu_breakdown(f), len(f))
    ok = slow > 0
    np.testing.assert_allclose(fast[ok], slow[ok], rtol=0.02)
    assert np.all(fast[~ok] == 0)


def test_measured_default_for_h100_and_transferred_with_error_for_a40_a10():
    m = MODELS["llama-2-7b"]
    h100 = aic.table_cost_model(m, GPUS["H100"])
    assert h100.provenance.kind == "tables" and h100.provenance.is_measured
    assert "measured: AIConfigurator, vLLM 0.24.0 kernels on NVIDIA H100" in str(h100.provenance)
    for g in ("A40", "A10"):
        cm = aic.table_cost_model(m, GPUS[g])
        assert cm.provenance.kind == "transferred" and not cm.provenance.is_measured
        assert "transferred to " + g + " from A100-80G" in str(cm.provenance)
        assert "transfer error" in str(cm.provenance) and cm.provenance.error_pct is not None
    # 4-bit weights have no measured kernel: measured BF16 x the roofline ratio, said so
    w4 = aic.table_cost_model(m, GPUS["H100"], weight_bits=4)
    assert "W4 GEMMs estimated from measured BF16" in str(w4.provenance)
    f = feats([[0, 0, 0, 8, 8000, 8]])
    assert w4.iteration_time_s(f)[0] < h100.iteration_time_s(f)[0]  # fewer weight bytes
    # FP8 weights on the H100 are measured (Cutlass FP8 GEMM table); no FP8 on the A40
    assert "estimated" not in aic.table_cost_model(m, GPUS["H100"], weight_bits=8).source_note.split(
        "; norms")[0]
    assert "W8 GEMMs estimated" in aic.table_cost_model(m, GPUS["A40"], weight_bits=8).source_note
    assert aic.table_cost_model(m, GPUS["H100"], weight_bits=3) is None


def test_transfer_to_itself_is_the_identity():
    t = aic_tables.KernelTables.load("L40S")
    same = aic_transfer.transfer_tables(t, GPUS["L40S"], GPUS["L40S"])
    np.testing.assert_allclose(same.gemm_s(4096, 14336), t.gemm_s(4096, 14336), rtol=1e-12)
    b1, s1, g1 = t.generation_attention(32, 8, 128)
    b2, s2, g2 = same.generation_attention(32, 8, 128)
    np.testing.assert_allclose(g1, g2, rtol=1e-12)


def test_transfer_scales_memory_bound_work_by_bandwidth():
    t = aic_tables.KernelTables.load("A100-80G")
    moved = aic_transfer.transfer_tables(t, GPUS["A100-80G"], GPUS["A100-40G"])  # same die, less HBM
    ratio = moved.gemm_s(4096, 4096)[0] / t.gemm_s(4096, 4096)[0]  # m = 1: weight-bound
    assert ratio == pytest.approx(GPUS["A100-80G"].hbm_gbps / GPUS["A100-40G"].hbm_gbps)


# a GPU the catalog does not ship (RTX A6000: Ampere GA102; H800 PCIe: Hopper), as a --gpu-file
# states it; `architecture` left out below to check the roofline fallback
GPU_FILE = """
A6000:
  architecture: ampere
  memory_gib: 48
  bf16_tflops: 154.8
  fp32_tflops: 38.7
  hbm_gbps: 768
  pcie_gen: 4
  host_link_gbps: 25
  nvlink_gbps: 56
  host_ram_gib: 64
  cpu_cores: 16
  tdp_w: 300
  price_usd_per_h: 0.49
  price_source: test
  price_date: "2026-11"
H800-PCIE:
  architecture: Hopper
  memory_gib: 80
  bf16_tflops: 756
  fp32_tflops: 51
  fp8_tflops: 1513
  hbm_gbps: 2000
  pcie_gen: 5
  host_link_gbps: 50
  host_ram_gib: 188
  cpu_cores: 24
  tdp_w: 350
  price_usd_per_h: 1.99
  price_source: test
  price_date: "2026-11"
"""


def test_a_gpu_file_gpu_is_transferred_from_the_measured_gpu_of_its_architecture(tmp_path):
    path = tmp_path / "gpus.yaml"
    path.write_text(GPU_FILE)
    gpus = load_gpus(path)
    m = MODELS["llama-3-8b"]
    assert aic_transfer.transfer_source(gpus["A6000"]) == "A100-80G"
    assert aic_transfer.transfer_source(gpus["H800-PCIE"]) == "H100"
    for name, src in (("A6000", "A100-80G"), ("H800-PCIE", "H100")):
        cm = aic.table_cost_model(m, gpus[name], gpus=gpus)
        assert cm.provenance.kind == "transferred"
        assert f"transferred to {name} from {src}" in str(cm.provenance)
    # the same as the source's tables moved by hand
    moved = aic_transfer.transfer_tables(aic_tables.KernelTables.load("A100-80G"),
                                         gpus["A100-80G"], gpus["A6000"],
                                         aic.achievable_fractions())
    f = random_steps(2_000)
    by_hand = aic.MeasuredTableCostModel.build(m, gpus["A6000"], moved)
    np.testing.assert_array_equal(aic.table_cost_model(m, gpus["A6000"], engine=None)
                                  .iteration_time_s(f), by_hand.iteration_time_s(f))
    # a tensor-parallel config over its (transferred) all-reduce table
    assert aic.table_cost_model(m, gpus["A6000"], tp=2).provenance.kind == "transferred"


def test_a_gpu_without_architecture_gets_no_tables(tmp_path):
    """No architecture stated: no measured GPU to transfer from, so no tables (the caller's
    roofline), as for any GPU before `architecture` existed; a measured GPU keeps its own."""
    path = tmp_path / "gpus.yaml"
    path.write_text(GPU_FILE.replace("  architecture: ampere\n", ""))
    gpus = load_gpus(path)
    assert gpus["A6000"].architecture is None
    assert aic_transfer.transfer_source(gpus["A6000"]) is None
    assert aic.table_cost_model(MODELS["llama-3-8b"], gpus["A6000"]) is None
    # the cache tells a GPU apart by its architecture
    a10 = dataclasses.replace(GPUS["A10"], architecture=None)
    assert aic.table_cost_model(MODELS["llama-3-8b"], GPUS["A10"]) is not None
    assert aic.table_cost_model(MODELS["llama-3-8b"], a10) is None
    h100 = dataclasses.replace(GPUS["H100"], architecture=None)
    assert aic.table_cost_model(MODELS["llama-3-8b"], h100).provenance.kind == "tables"


def test_cost_cli_prices_a_gpu_file_gpu_by_its_architecture(tmp_path):
    from typer.testing import CliRunner

    from tuner.cli.main import app

    def cost(text):
        path = tmp_path / "gpus.yaml"
        path.write_text(text)
        r = CliRunner().invoke(app, ["cost", "-m", "llama-3-8b", "-g", "A6000", "--tokens",
                                     "512", "--decodes", "8", "--kv-tokens", "8000",
                                     "--gpu-file", str(path), "--json"])
        assert r.exit_code == 0, r.output
        return json.loads(r.stdout)["provenance"]

    assert cost(GPU_FILE)["kind"] == "transferred"
    assert cost(GPU_FILE.replace("  architecture: ampere\n", ""))["kind"] == "roofline"


# public "Maximum Achievable Matmul FLOPS" (BF16, TFLOPS) of stas00/ml-engineering's
# compute/accelerator README (mamf-finder.py): the best shape of a brute-force search
PUBLIC_MAMF_TFLOPS = {"A100-80G": 271.2, "H100": 794.5, "B200": 1745.0, "B300": 1769.0,
                      "GB200": 1822.0}


def test_achievable_tensor_flops_read_off_the_tables_agree_with_public_mamf():
    """The fraction of spec a GPU's GEMMs reach, read off its own tables (90th percentile of
    the large measured GEMMs), is within 10 % of the public MAMF benchmark where it has one;
    the shipped fractions are the tables' (not hand-set), and the L40S (350 W) is the
    power-capped outlier the rule exists for."""
    shipped = aic.achievable_fractions()
    assert shipped == json.loads(json.dumps(aic.measured_achievable(GPUS)))
    per = shipped["per_gpu"]
    for g, tf in PUBLIC_MAMF_TFLOPS.items():
        assert per[g]["bf16"] * GPUS[g].bf16_tflops == pytest.approx(tf, rel=0.10), g
    assert per["L40S"]["bf16"] < 0.8 < shipped["typical"]["bf16"] < per["A100-80G"]["bf16"]
    assert per["A100-80G"]["fp8"] is None  # no FP8 GEMM table on Ampere


def test_transfer_scales_tensor_flops_as_achieved():
    """Compute-bound work moves by achievable FLOP/s: the source's fraction from its tables,
    the target's the measured GPUs' median, or the source's where the spec is the same chip's
    (A100-40G from A100-80G: unchanged); without fractions, spec sheets alone."""
    a = aic.achievable_fractions()
    t = aic_tables.KernelTables.load("A100-80G")
    m = t.gemm_m_grid()
    big = np.searchsorted(m, 8192)  # compute-bound
    same = aic_transfer.transfer_tables(t, GPUS["A100-80G"], GPUS["A100-40G"], a)
    assert same.gemm_s(4096, 14336)[big] == pytest.approx(t.gemm_s(4096, 14336)[big], rel=1e-9)
    l40s = aic_tables.KernelTables.load("L40S")
    spec = aic_transfer.transfer_tables(l40s, GPUS["L40S"], GPUS["RTX4090"])
    ach = aic_transfer.transfer_tables(l40s, GPUS["L40S"], GPUS["RTX4090"], a)
    f_src, f_dst = a["per_gpu"]["L40S"]["bf16"], a["typical"]["bf16"]
    assert ach.transfer["achievable"]["bf16"] == (f_src, f_dst, "the measured GPUs' median")
    assert same.transfer["achievable"]["bf16"][2] == "the source's, same spec"
    big = np.searchsorted(l40s.gemm_m_grid(), 8192)
    assert (ach.gemm_s(4096, 14336)[big] / spec.gemm_s(4096, 14336)[big]
            == pytest.approx(f_src / f_dst, rel=1e-9))
    assert ach.gemm_s(4096, 14336)[0] == pytest.approx(spec.gemm_s(4096, 14336)[0])  # m = 1
    assert "RTX4090 0.84 (estimated: the measured GPUs' median)" in ach.describe()


def test_shipped_transfer_checks_are_current():
    shipped = json.loads((aic_tables.data_dir() / aic.TRANSFER_CHECKS_FILE).read_text())
    s, t = "H100", "L40S"
    load = aic_tables.KernelTables.load
    now = aic.transfer_check(load(s), load(t), GPUS[s], GPUS[t], MODELS[aic.CHECK_MODEL],
                             achievable=aic.measured_achievable(GPUS))
    row = next(p for p in shipped["pairs"] if p["source"] == s and p["target"] == t)
    assert row["median_pct"] == pytest.approx(now["median_pct"], rel=1e-6)
    # the rule's error where both sides are measured stays moderate
    assert shipped["summary"]["median_pct"] < 15
    # every ordered pair of the GPUs measured now (B200, B300, GB200 included: issue #24)
    names = set(aic_tables.MEASURED)
    assert {(p["source"], p["target"]) for p in shipped["pairs"]} == {
        (a, b) for a in names for b in names if a != b}


def test_engine_profiles():
    f = feats([[0, 0, 0, 100, 100_000, 100], [512, 512 * 512, 0, 0, 0, 1]])
    gpu = np.array([0.010, 0.050])
    over = EngineProfile("x", "LLM.generate", "V1 async", True, fixed_s=2e-3, per_seq_s=100e-6)
    add = EngineProfile("y", "LLM.generate", "V0", False, fixed_s=2e-3, per_seq_s=100e-6,
                        per_tp_rank_s=1e-3)
    host = np.array([2e-3 + 100 * 100e-6, 2e-3 + 1 * 100e-6])
    np.testing.assert_allclose(over.host_s(f), host)
    np.testing.assert_allclose(over.step_time_s(gpu, f), np.maximum(gpu, host))
    np.testing.assert_allclose(add.step_time_s(gpu, f, tp=2), gpu + host + 1e-3)
    assert get_profile().name == "vllm-v1-offline"
    assert all("fitted" in p.source or "estimated" in p.source for p in PROFILES.values())
    with pytest.raises(KeyError):
        get_profile("nope")


def test_engine_overhead_adds_to_the_measured_model():
    m = MODELS["llama-3-8b"]
    bare = aic.table_cost_model(m, GPUS["H100"], engine=None)
    full = aic.table_cost_model(m, GPUS["H100"])
    f = feats([[0, 0, 0, 1, 1000, 1]])
    assert full.iteration_time_s(f)[0] >= bare.iteration_time_s(f)[0]
    assert "engine overhead: vllm-v1-offline" in full.describe()


def test_allreduce_table_version_closest_to_the_engine_version():
    t = aic_tables.KernelTables.load("H100")
    assert t.allreduce(2, True)[2] == "0.24.0"  # default: the newest
    assert t.allreduce(2, True, "0.14.0")[2] == "0.14.0"
    assert t.allreduce(2, True, "0.20.1")[2] == "0.19.0"
    assert t.allreduce(2, True, "0.30")[2] == "0.24.0"
    assert t.allreduce(3, True) is None  # no table for 3 GPUs: the caller uses the roofline
    cm = aic.table_cost_model(MODELS["llama-3-8b"], GPUS["H100"], tp=2, engine_version="0.19")
    assert "vLLM 0.19.0 custom all-reduce table" in cm.describe()
    # a step above 8 MiB of hidden state is priced from the NCCL table
    big = cm.gpu_breakdown(feats([[8192, 8192**2, 0, 0, 0, 1]]))["allreduce"][0]
    assert big > 0


@pytest.mark.parametrize(("gpu", "tp", "custom"), [
    ("H100", 8, True), ("A100-80G", 4, True),  # NVSwitch boards: custom at any TP
    ("A40", 2, True), ("A40", 4, False),  # NVLink bridges join pairs only
    ("H100-PCIe", 2, True), ("H100-PCIe", 4, False), ("L40S", 8, False), ("A10", 4, False),
])
def test_custom_allreduce_only_where_the_engine_runs_it(gpu, tp, custom):
    """vLLM's custom_all_reduce.py (and SGLang's copy) turns the custom all-reduce off on more
    than two GPUs unless NVLink joins every pair: NCCL then carries every message size."""
    assert aic.custom_allreduce_on(GPUS[gpu], tp) is custom
    m = MODELS["llama-3-8b"]
    cm = aic.table_cost_model(m, GPUS[gpu], tp=tp, engine=None)
    assert ("NCCL table at every size" in cm.describe()) is (not custom)
    if not custom:
        # the same GPU with NVLink between every pair runs the custom kernel: on the boards the
        # A10/A40/H100-PCIe tables come from (A100, H100 SXM) NCCL's latency floor is 2-4x the
        # custom kernel's, so a small decode step's all-reduce takes longer without it
        on = dataclasses.replace(GPUS[gpu], nvlink_gbps=GPUS[gpu].nvlink_gbps or 50.0,
                                 nvlink_all_pairs=True)
        assert aic.custom_allreduce_on(on, tp)
        with_custom = aic.table_cost_model(m, on, tp=tp, engine=None)
        f = feats([[0, 0, 0, 8, 8000, 1]])
        off_s = cm.gpu_breakdown(f)["allreduce"][0]
        on_s = with_custom.gpu_breakdown(f)["allreduce"][0]
        assert off_s != on_s
        if gpu != "L40S":
            assert off_s > on_s


def test_v0_decode_batches_above_256_run_their_all_reduce_eager():
    """vLLM V0 captures CUDA graphs for decode batches up to 256 sequences; V1 (0.19) up to
    512 tokens: a 300-token step's all-reduce is priced eager under V0, graphed under V1."""
    m, a100 = MODELS["llama-3-70b"], GPUS["A100-80G"]
    v0 = aic.table_cost_model(m, a100, tp=4, engine_version="0.6.0", engine=None)
    v1 = aic.table_cost_model(m, a100, tp=4, engine_version="0.14.0", engine=None)
    assert "CUDA-graph timing up to 256 tokens" in v0.describe()
    assert "CUDA-graph timing up to" not in v1.describe()

    def ar(cm, n):
        return cm.gpu_breakdown(feats([[0, 0, 0, n, n * 500, n]]))["allreduce"][0]

    # the same table version (0.14.0) prices both below the cut; above it V0 is the slower
    v014 = aic.table_cost_model(m, a100, tp=4, engine_version="0.14.0", engine=None)
    assert ar(v0, 128) == pytest.approx(ar(v014, 128), rel=1e-9)
    assert ar(v0, 300) > 1.03 * ar(v014, 300)
    assert ar(v0, 512) > 1.03 * ar(v014, 512)
    assert ar(v0, 2048) == pytest.approx(ar(v014, 2048), rel=1e-9)  # NCCL: no graph either way


def test_search_cost_models_follow_engine_version_and_roofline_mode():
    from tuner.predictors.sources import cost_model_for

    model, h100 = MODELS["llama-3-8b"], GPUS["H100"]
    cfg = ServingConfig(gpu="H100", tp=2)
    new = cost_model_for(model)(h100, cfg)  # all defaults: the newest measured tables
    assert new.provenance.kind == "tables" and "vLLM 0.19.0 custom" not in new.describe()
    old = cost_model_for(model, None, engine_version="0.19.0")(h100, cfg)
    assert old.provenance.kind == "tables" and "vLLM 0.19.0 custom all-reduce" in old.describe()
    rf = cost_model_for(model, None, "roofline")(h100, cfg)
    assert rf.provenance.kind == "roofline"


def test_decode_attention_reads_kv_no_faster_than_device_memory_allows():
    """No decode-attention cell of any shipped table reads its KV faster than the table's own
    cells too large for L2 (>= 1 GiB) do: the L40S's and RTX PRO 6000's L2-resident cells
    (up to 2.2x their memory bandwidth) are held to it, and cells past the measured range
    keep the last measured throughput (never above the HBM bandwidth)."""
    for name in aic_tables.MEASURED:
        t = aic_tables.KernelTables.load(name)
        b, s, g = t.generation_attention(32, 8, 128)
        kv_bytes = b[:, None] * s[None, :] * 2 * 8 * 128 * 2
        frac = kv_bytes / g / (GPUS[name].hbm_gbps * 1e9)
        assert frac.max() <= 1.0, name
    # the artifact the floor removes: the L40S's measured cells of 64-256 MB of KV
    t = aic_tables.KernelTables.load("L40S")
    rows, _, _ = t._attn_rows("gen_attn", 32, 8, 128, False)
    raw = rows[:, 1] * rows[:, 2] * 4096 / (rows[:, 6] * 1e-3) / (GPUS["L40S"].hbm_gbps * 1e9)
    assert raw.max() > 2.0


def test_fill_loglog_continues_throughput_bound_past_the_measured_cells():
    from tuner.predictors.tables import fill_loglog

    lx = np.log(np.array([256.0, 512.0, 1024.0, 2048.0, 4096.0]))
    # a last segment still partly launch-bound (slope 0.7): continued at slope 1
    row = np.log(np.array([0.13, 0.22, 0.36, np.nan, np.nan]))
    out = fill_loglog(lx, row[None, :], axis=1)[0]
    assert np.exp(out[3]) == pytest.approx(0.72) and np.exp(out[4]) == pytest.approx(1.44)
    # a steeper last segment (slope 2, compute-bound) is kept
    row = np.log(np.array([1.0, 4.0, np.nan, np.nan, np.nan]))
    assert np.exp(fill_loglog(lx, row[None, :], axis=1)[0][2]) == pytest.approx(16.0)


def test_older_vllm_on_hopper_names_the_attention_kernel_difference():
    """The tables say which attention kernel they measured (manifest attention_kernels); a
    vLLM before 0.7.0 on Hopper ran FlashAttention 2 where the H100 tables measured FA3, and
    the provenance says so; the A100's tables measured FA2, as 0.6 ran it: no such note."""
    from tuner.core.catalog import load_models

    m = load_models()["llama-3-8b"]
    h100 = aic_tables.KernelTables.load("H100")
    assert h100.attention_backends["bf16"]["generation"] == "vllm_flash_attn_fa3"
    old = aic.table_cost_model(m, GPUS["H100"], engine_version="0.6.0").describe()
    assert "ran FlashAttention 2 on Hopper" in old and "vllm-project/vllm#12093" in old
    new = aic.table_cost_model(m, GPUS["H100"], engine_version="0.8.0").describe()
    assert "FlashAttention" not in new
    a100 = aic.table_cost_model(m, GPUS["A100-80G"], engine_version="0.6.0").describe()
    assert aic_tables.KernelTables.load("A100-80G").attention_backends["bf16"][
        "generation"] == "vllm_flash_attn"
    assert "FlashAttention" not in a100 and "kernel changes between the releases" in a100


def test_gpu_excess_scales_the_gpu_time_before_the_host_terms():
    """step = GPU x (1 + gpu_excess) + host (additive engines), max(GPU x (1 + e), host) +
    exposed (overlapped); the description names it; V0 single-step keeps it."""
    from tuner.predictors.engine_overhead import V0_MULTISTEP, v0_single_step

    f = BatchFeatures(*(np.array([0.0, 0.0]),) * 3, np.array([10.0, 100.0]),
                      np.array([1e4, 1e5]), np.array([10.0, 100.0]))
    gpu = np.array([0.010, 0.030])
    add = EngineProfile(name="t", entry_point="", generation="", overlapped=False,
                        fixed_s=1e-3, gpu_excess=0.2)
    np.testing.assert_allclose(add.step_time_s(gpu, f), gpu * 1.2 + 1e-3)
    over = dataclasses.replace(add, overlapped=True, fixed_s=0.0, per_seq_s=300e-6,
                               exposed_s=0.5e-3)
    np.testing.assert_allclose(over.step_time_s(gpu, f),
                               np.maximum(gpu * 1.2, np.array([3e-3, 30e-3])) + 0.5e-3)
    assert "GPU time +20.0 % over the kernel tables" in add.describe()
    single = v0_single_step(V0_MULTISTEP)
    assert single.gpu_excess == V0_MULTISTEP.gpu_excess and single.fixed_s == 8e-3
    assert not single.fitted and "estimated" in single.source
