"""An MoE expert group spanning machines (tp * dp > gpus_per_machine) keeps the measured kernel
tables: its all-gather / reduce-scatter is a two-level collective, the NCCL tables at one
machine's GPUs plus an inter-machine ring over the catalog's scale-out network (estimated,
said so). Before, DeepSeek-V3 at TP 8 x DP 4 on H200 lost its tables (no NCCL table for 32
GPUs) and fell back to the spec-sheet roofline, which gathered at NVLink bandwidth across
machines; the roofline now takes the same cross-machine rule."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tuner.core.catalog import get_model, load_gpus
from tuner.core.config import ServingConfig
from tuner.core.errors import TunerError
from tuner.core.workload import Workload
from tuner.predictors import moe as moe_mod
from tuner.predictors.aic import table_cost_model
from tuner.predictors.features import BatchFeatures
from tuner.predictors.roofline import RooflineCostModel
from tuner.predictors.sources import cost_model_for, resolve
from tuner.sim.simulator import lower_bound_s, simulate

GPUS = load_gpus()
DS = get_model("deepseek-v3")
QWEN = get_model("qwen3-235b-a22b")

# decode 8, decode 256, a 2048-token prefill chunk
STEPS = BatchFeatures(prefill_tokens=np.array([0.0, 0.0, 2048.0]),
                      prefill_sq=np.array([0.0, 0.0, 2048.0 ** 2]),
                      prefill_ctx=np.zeros(3), decodes=np.array([8.0, 256.0, 0.0]),
                      decode_kv=np.array([8e3, 256e3, 0.0]),
                      seqs_sampled=np.array([8.0, 256.0, 1.0]))


def test_deepseek_tp8_dp4_on_h200_is_priced_by_tables_naming_the_scale_out_estimate():
    cfg = ServingConfig(gpu="H200", tp=8, dp=4, weight_bits=8)
    trail = resolve(DS, GPUS["H200"], cfg).trail()
    assert "priced by roofline" not in trail
    cm = table_cost_model(DS, GPUS["H200"], tp=8, dp=4, weight_bits=8, engine=None)
    assert cm is not None and cm.provenance.kind == "tables"
    detail = cm.provenance.detail
    assert "MoE dispatch/combine over 4 machines of 8 GPUs" in detail
    assert "tables over a machine's 8 GPUs" in detail
    assert "inter-machine stage estimated" in detail
    assert "50 GB/s per GPU" in detail and "DGX BasePOD" in detail


def test_a_group_of_16_on_h100_keeps_its_tables_too():
    cm = table_cost_model(QWEN, GPUS["H100"], tp=4, dp=4, engine=None)
    assert cm is not None and "over 2 machines of 8 GPUs" in cm.provenance.detail


def test_collective_over_two_machines_dearer_than_one_and_monotone():
    scale_out_gather_s = moe_mod.scale_out_gather_s
    msg = np.geomspace(1e3, 3e8, 40)
    one = scale_out_gather_s(msg, 1, 8, 50e9)
    two = scale_out_gather_s(msg, 2, 8, 50e9)
    four = scale_out_gather_s(msg, 4, 8, 50e9)
    assert np.all(one == 0.0) and np.all(two > one) and np.all(four > two)
    assert np.all(np.diff(two) > 0) and np.all(np.diff(four) > 0)
    # (n-1)/n of the message per GPU NIC: 2 machines of 8, 16 MB at 50 GB/s -> 20 us + 1 hop
    assert scale_out_gather_s(16e6, 2, 8, 50e9) == pytest.approx(
        0.5 * 16e6 / 8 / 50e9 + moe_mod.SCALE_OUT_HOP_LATENCY_S)


@pytest.mark.parametrize("kind", ["tables", "roofline"])
def test_spanning_machines_costs_more_than_the_same_message_in_one(kind):
    """The same message gathered inside one machine vs across two: the spanning group's
    dispatch is dearer, and grows with the step's tokens. Tables: TP 8 x DP 2 (16 GPUs, 2
    machines of 8) vs TP 4 x DP 2 (8 GPUs, one machine; the same bytes per token, dp x hidden).
    Roofline: TP 8 x DP 2 on machines of 8 vs of 16."""
    from dataclasses import replace
    g8 = GPUS["H100"]
    if kind == "tables":
        span = table_cost_model(QWEN, g8, tp=8, dp=2, engine=None)
        one = table_cost_model(QWEN, g8, tp=4, dp=2, engine=None)
    else:
        span = RooflineCostModel.from_specs(g8, QWEN, tp=8, dp=2)
        one = RooflineCostModel.from_specs(replace(g8, gpus_per_machine=16), QWEN, tp=8, dp=2)
    d_span = (span.gpu_breakdown if kind == "tables" else span.breakdown)(STEPS)["moe_dispatch"]
    d_one = (one.gpu_breakdown if kind == "tables" else one.breakdown)(STEPS)["moe_dispatch"]
    assert np.all(d_span > d_one)
    tok = np.array([1.0, 8.0, 64.0, 512.0, 4096.0])
    f = BatchFeatures(prefill_tokens=tok, prefill_sq=tok ** 2, prefill_ctx=np.zeros(5),
                      decodes=np.zeros(5), decode_kv=np.zeros(5), seqs_sampled=np.ones(5))
    d = (span.gpu_breakdown if kind == "tables" else span.breakdown)(f)["moe_dispatch"]
    assert np.all(np.diff(d) > 0)


def test_roofline_gathers_across_machines_over_the_scale_out_network():
    g = GPUS["H200"]
    r = RooflineCostModel.from_specs(g, DS, tp=8, weight_bits=8, dp=4)
    nvlink_only = RooflineCostModel.from_specs(g, DS, tp=8, weight_bits=8, dp=4,
                                               gpus_per_machine=0, scale_out_bytes_per_s=0.0)
    assert np.all(r.breakdown(STEPS)["moe_dispatch"] > nvlink_only.breakdown(STEPS)["moe_dispatch"])
    assert "over 4 machines" in r.describe() and "scale-out network at 50 GB/s" in r.describe()
    # a group inside one machine: the old rule, the old provenance
    one = RooflineCostModel.from_specs(g, DS, tp=4, weight_bits=8, dp=2)
    old = RooflineCostModel.from_specs(g, DS, tp=4, weight_bits=8, dp=2, gpus_per_machine=0,
                                       scale_out_bytes_per_s=0.0)
    np.testing.assert_array_equal(one.breakdown(STEPS)["moe_dispatch"],
                                  old.breakdown(STEPS)["moe_dispatch"])
    assert one.describe() == old.describe()


# one-machine plans: GPU seconds per step computed before this change (tables, engine=None)
BEFORE = {
    ("deepseek-v3", "H200", 8, 1, 8): [0.0151703, 0.0423824089, 0.1108548906],
    ("deepseek-v3", "H200", 4, 2, 8): [0.0200588029, 0.0535761318, 0.1816351048],
    ("qwen3-235b-a22b", "H100", 4, 2, 16): [0.0198945255, 0.0520969543, 0.1623495521],
    ("qwen3-235b-a22b", "H100", 8, 1, 16): [0.0154657847, 0.0405102823, 0.1007171043],
}


@pytest.mark.parametrize("key", sorted(BEFORE))
def test_one_machine_plans_unchanged(key):
    model, gpu, tp, dp, bits = key
    cm = table_cost_model(get_model(model), GPUS[gpu], tp=tp, dp=dp, weight_bits=bits,
                          engine=None)
    np.testing.assert_allclose(cm.gpu_time_s(STEPS), BEFORE[key], rtol=1e-6)
    assert "machines" not in cm.provenance.detail


@pytest.mark.parametrize("model,gpu,tp,dp,bits", [
    (DS, "H200", 8, 2, 8), (DS, "H200", 8, 4, 8), (DS, "H100", 8, 4, 8),
    (QWEN, "H100", 4, 4, 16), (QWEN, "H200", 8, 2, 16)])
def test_lower_bound_stays_below_the_prediction(model, gpu, tp, dp, bits):
    rng = np.random.default_rng(0)
    w = Workload(prompt_tokens=rng.integers(1, 3000, 60), output_tokens=rng.integers(1, 900, 60))
    cfg = ServingConfig(gpu=gpu, tp=tp, dp=dp, weight_bits=bits)
    res = simulate(w, model, GPUS[gpu], cfg, cost_model_for(model)(GPUS[gpu], cfg), startup_s=0)
    assert lower_bound_s(w, model, GPUS[gpu], cfg) <= res.schedule_s
    assert res.provenance.kind == "tables" and "scale-out network" in res.provenance.detail


@settings(derandomize=True, max_examples=30, deadline=None)
@given(gbps=st.floats(0.5, 200.0), n=st.integers(2, 16), per=st.sampled_from([1, 4, 8]),
       msg=st.floats(1e3, 1e9))
def test_scale_out_time_falls_with_bandwidth(gbps, n, per, msg):
    slow = moe_mod.scale_out_gather_s(msg, n, per, gbps * 1e9)
    fast = moe_mod.scale_out_gather_s(msg, n, per, 2 * gbps * 1e9)
    assert fast < slow and fast >= (n - 1) * moe_mod.SCALE_OUT_HOP_LATENCY_S


def test_catalog_figure_validated_and_optional(tmp_path):
    p = tmp_path / "gpus.yaml"
    p.write_text("H100:\n  scale_out_gbps: 6.25\n  scale_out_source: AWS p4d-like\n")
    g = load_gpus(p)["H100"]
    assert g.scale_out_bytes_per_s == 6.25e9 and "6.25 GB/s per GPU (AWS p4d-like)" in g.scale_out_note
    p.write_text("H100:\n  scale_out_gbps: 5000\n")
    with pytest.raises(TunerError, match="scale_out_gbps 5000 is implausible"):
        load_gpus(p)
    p.write_text("H100:\n  scale_out_gbps: null\n")
    g = load_gpus(p)["H100"]
    assert g.scale_out_bytes_per_s == pytest.approx(12.5e9 / 8) and "estimate" in g.scale_out_note
    # every shipped GPU states its figure, and says where it comes from
    for name, gpu in GPUS.items():
        assert gpu.scale_out_gbps is not None and gpu.scale_out_source, name
