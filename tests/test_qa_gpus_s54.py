"""QA pass on the GPUs rented now (B200, B300, GB200, H200, H100, RTX PRO 6000, L40S, MI300X,
MI325X): which measured tables a GPU without its own is priced from, and how an unmeasured
GPU's figures are labelled."""

from __future__ import annotations

import json

from tuner.core.catalog import get_model, load_gpus
from tuner.predictors import aic, aic_transfer
from tuner.predictors.aic_tables import data_dir

GB300_FILE = """
gpus:
  GB300-TEST:
    architecture: blackwell
    compute_capability: 10.3
    memory_gib: 268.0
    bf16_tflops: 2500.0
    fp32_tflops: 80.0
    fp8_tflops: 5000.0
    int8_tops: 330.0
    hbm_gbps: 8000.0
    pcie_gen: 6
    host_link_gbps: 450.0
    nvlink_gbps: 900.0
    host_ram_gib: 240
    cpu_cores: 36
    tdp_w: 1400
    gpus_per_machine: 4
    price_usd_per_h: 6.0
    price_source: test
    price_date: "2026-11"
  RTXPRO-TEST:
    architecture: blackwell
    compute_capability: 12.0
    memory_gib: 94.97
    bf16_tflops: 467.8
    fp32_tflops: 117.0
    fp8_tflops: 935.6
    int8_tops: 935.6
    hbm_gbps: 1792.0
    pcie_gen: 5
    host_link_gbps: 50.0
    nvlink_gbps: null
    host_ram_gib: 128
    cpu_cores: 16
    tdp_w: 600
    price_usd_per_h: 1.5
    price_source: test
    price_date: "2026-11"
"""


def test_a_data_centre_blackwell_gpu_is_transferred_from_the_b200(tmp_path):
    """A --gpu-file data-centre Blackwell (compute capability 10.x, e.g. a GB300) is priced from
    the measured B200 (the rule's measured median error B200 -> B300 / GB200: 1.5 / 3.3 %), not
    from the workstation RTX PRO 6000 (sm_120, other kernels: 13.2 / 18.6 %); a 12.x part still
    from the RTX PRO 6000."""
    path = tmp_path / "gpus.yaml"
    path.write_text(GB300_FILE)
    gpus = load_gpus(path)
    assert aic_transfer.transfer_source(gpus["GB300-TEST"]) == "B200"
    assert aic_transfer.transfer_source(gpus["RTXPRO-TEST"]) == "RTX-PRO-6000"
    cm = aic.table_cost_model(get_model("llama-3-8b"), gpus["GB300-TEST"], gpus=gpus)
    assert cm.provenance.kind == "transferred"
    assert "transferred to GB300-TEST from B200" in str(cm.provenance)
    # the measured checks the choice rests on
    doc = json.loads((data_dir() / aic.TRANSFER_CHECKS_FILE).read_text())
    pairs = {(p["source"], p["target"]): p["median_pct"] for p in doc["pairs"]}
    for target in ("B300", "GB200"):
        assert pairs[("B200", target)] < pairs[("RTX-PRO-6000", target)]


def test_sglang_on_a_roofline_gpu_does_not_claim_kernel_tables():
    """An AMD GPU has no measured tables: SGLang there is priced by the same spec-sheet roofline
    as vLLM, and the provenance line says so (it said "vLLM's kernel tables")."""
    import numpy as np

    from tuner.core import sglang as sg
    from tuner.core.config import ServingConfig
    from tuner.core.workload import Workload
    from tuner.predictors.sources import resolve
    from tuner.sim.simulator import simulate

    m, g = get_model("llama-3-8b"), load_gpus()["MI300X"]
    d = sg.sglang_defaults(g)
    cfg = ServingConfig(gpu=g.name, chunk_size=d.chunked_prefill_size, block_size=1,
                        gpu_memory_utilization=d.mem_fraction_static, max_running=256)
    rng = np.random.default_rng(0)
    w = Workload(prompt_tokens=rng.integers(50, 600, 50), output_tokens=rng.integers(5, 50, 50))
    cm = resolve(m, g, cfg, calibrated=False).cost_model
    assert cm.provenance.kind == "roofline"
    detail = simulate(w, m, g, cfg, cm, engine="sglang", startup_s=0).provenance.detail
    assert "kernel tables" not in detail
    assert "SGLang priced with the roofline vLLM uses; engine overhead not fitted" in detail


def test_an_amd_gpu_roofline_says_what_it_assumes_and_that_nothing_checks_it():
    """MI300X / MI325X: no measured tables and no architecture to transfer from; the provenance
    says the figures are the spec sheet at efficiencies fitted on H100 figures, unchecked (it
    said only "not measured"). An NVIDIA GPU forced onto the roofline keeps the short line."""
    from tuner.predictors.roofline import RooflineCostModel

    gpus, m = load_gpus(), get_model("llama-3-8b")
    for name in ("MI300X", "MI325X"):
        assert gpus[name].architecture is None
        assert aic.table_cost_model(m, gpus[name]) is None
        detail = str(RooflineCostModel.from_specs(gpus[name], m).provenance)
        assert detail.startswith(f"roofline from {name} spec sheet (not measured)")
        assert "0.75 of its spec FLOP/s and 0.75 of its HBM bandwidth" in detail
        assert "fitted on H100 figures" in detail and "unchecked" in detail
    h100 = str(RooflineCostModel.from_specs(gpus["H100"], m).provenance)
    assert h100 == "roofline from H100 spec sheet (not measured)"


def test_an_infinity_fabric_mesh_all_reduces_over_the_groups_own_links():
    """MI300X: the 448 GB/s NVLink column is 7 direct 64 GB/s links, one per other GPU of the
    board (AMD datasheet), so TP 2 all-reduces over one link (64 GB/s), TP 4 over three (192),
    TP 8 over all seven (448); it was priced at 448 for every TP size (7x fast at TP 2). An
    NVSwitch GPU keeps its full figure at every size."""
    import numpy as np

    from tuner.predictors.features import BatchFeatures
    from tuner.predictors.roofline import RooflineCostModel

    gpus, m = load_gpus(), get_model("llama-3-70b")
    assert gpus["MI300X"].nvlink_mesh and gpus["MI325X"].nvlink_mesh
    assert not gpus["H100"].nvlink_mesh
    tokens = np.array([8192.0])
    z = np.zeros(1)
    f = BatchFeatures(tokens, z, z, z, z, np.ones(1))

    def allreduce_s(gpu, tp):
        return float(RooflineCostModel.from_specs(gpu, m, tp=tp).breakdown(f)["allreduce"][0])

    msg = 8192 * m.hidden_size * 2.0
    for tp, links in ((2, 1), (4, 3), (8, 7)):
        cm = RooflineCostModel.from_specs(gpus["MI300X"], m, tp=tp)
        ring = 2.0 * (tp - 1) / tp * msg / (links * 64e9)
        expect = m.num_layers * 2.0 * (ring + cm.allreduce_latency_s)
        np.testing.assert_allclose(allreduce_s(gpus["MI300X"], tp), expect, rtol=1e-9)
    h = gpus["H100"]
    for tp in (2, 8):
        ring = 2.0 * (tp - 1) / tp * msg / (h.nvlink_gbps * 1e9)
        expect = m.num_layers * 2.0 * (ring + 15e-6)
        np.testing.assert_allclose(allreduce_s(h, tp), expect, rtol=1e-9)
