"""The network a --provider plan's inter-machine traffic crosses is the rented shape's (stop 54).

A plan over several machines (pipeline stages across machines, an MoE expert group over them)
priced its traffic with the GPU catalog's per-GPU scale-out figure (a DGX-like fabric: A100 25
GB/s per GPU, one 200 Gb/s HDR NIC each) or, for pipeline hand-overs, an assumed 100 Gb/s,
whatever instance was rented. AWS's p4de.24xlarge has 400 Gbps of EFA for its 8 A100s: 6.25
GB/s per GPU, a quarter of the catalog's 25; a p5.48xlarge's 3,200 Gbps feeds a TP-8 stage's
hand-over at 400 GB/s, not 12.5. providers.yaml now carries each shape's published bandwidth
(network_gbps, Gbit/s one direction, all its GPUs together) with its source; a plan rented
from the provider uses the shape it rents, and its provenance says which figure it used.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from tuner.cli.app import load_gpu_catalog
from tuner.core.catalog import get_model, load_gpus
from tuner.core.config import ServingConfig
from tuner.core.errors import TunerError
from tuner.core.pricing import Billing, load_providers, network_of, plan_machine_gpu
from tuner.core.workload import Workload
from tuner.predictors.sources import resolve
from tuner.sim.pipeline import ASSUMED_NETWORK_BYTES_PER_S, pipelined
from tuner.sim.simulator import simulate

LLAMA_405B = get_model("llama-3.1-405b")
P5 = "p5.48xlarge 3,200 Gbps EFA shared by its 8 GPUs (aws, read 2026-11-30)"
P4DE = "p4de.24xlarge 400 Gbps EFA (4 x 100) shared by its 8 GPUs (aws, read 2026-11-30)"

# two H100 shapes with different networks: which one a plan rents decides its figure
TWO = """
providers:
  two:
    title: test provider
    network_source: test page, read 2026-11-30
    network_date: read 2026-11-30
    billing: {granularity: second, minimum_s: 0, source: test}
    instances:
      h100x4: {gpu: H100, gpus: 4, usd_per_h: 30.0, source: test, date: test,
               network_gbps: 100}
      h100x8: {gpu: H100, gpus: 8, usd_per_h: 90.0, source: test, date: test,
               network_gbps: 3200, network_note: EFA}
"""
# the same shapes, no network figure published
BARE = """
providers:
  bare:
    title: test provider
    billing: {granularity: second, minimum_s: 0, source: test}
    instances:
      h100x4: {gpu: H100, gpus: 4, usd_per_h: 30.0, source: test, date: test}
      h100x8: {gpu: H100, gpus: 8, usd_per_h: 90.0, source: test, date: test}
"""


def _write(tmp_path, text):
    path = tmp_path / "providers.yaml"
    path.write_text(text)
    return path


def _pp_plan(gpu, cfg):
    """(the plan's machine GPU, its pipelined cost model) as the simulator builds them."""
    g = plan_machine_gpu(gpu, cfg.tp, cfg.dp, cfg.pp)
    return g, pipelined(resolve(LLAMA_405B, g, cfg).cost_model, LLAMA_405B, g, cfg)


# ---- 1. llama-3.1-405b over two machines: --provider aws vs none ---------------------------
def test_405b_pipeline_on_h100_uses_the_rented_p5_network_with_aws_and_the_estimate_without():
    cfg = ServingConfig(gpu="H100", tp=8, pp=2)
    plain, plain_cm = _pp_plan(load_gpus()["H100"], cfg)
    assert plain is load_gpus()["H100"]  # no provider: the catalog GPU, untouched
    assert plain_cm.across_machines and plain_cm.hop_bytes_per_s == ASSUMED_NETWORK_BYTES_PER_S
    assert "assumed 100 Gb/s (ESTIMATE)" in plain_cm.describe()
    assert "DGX BasePOD" in plain.scale_out_note  # the catalog's figure, its own source

    aws, aws_cm = _pp_plan(load_gpu_catalog(None, None, "aws")["H100"], cfg)
    inst = network_of(aws, cfg.tp, cfg.dp, cfg.pp)
    assert inst is not None and inst.name == "p5.48xlarge" and inst.network_gbps == 3200
    # per GPU: 3,200 Gbit/s / 8 bits / 8 GPUs = 50 GB/s one direction (the catalog's unit)
    assert aws.scale_out_gbps == pytest.approx(50.0)
    assert P5 in aws.scale_out_note and "docs.aws.amazon.com" in aws.scale_out_source
    # the stage's 8 TP ranks each send 1/8 of the hidden states over their GPU's share
    assert aws_cm.hop_bytes_per_s == pytest.approx(400e9)  # was 12.5e9 (100 Gb/s assumed)
    assert P5 in aws_cm.describe() and "assumed 100 Gb/s" not in aws_cm.describe()


def test_405b_pipeline_on_a100_rents_p4de_whose_network_is_a_quarter_of_the_catalogs():
    cfg = ServingConfig(gpu="A100-80G", tp=8, pp=2)
    catalog = load_gpus()["A100-80G"].scale_out_gbps
    assert catalog == 25.0  # DGX A100: one 200 Gb/s HDR NIC per GPU
    aws, cm = _pp_plan(load_gpu_catalog(None, None, "aws")["A100-80G"], cfg)
    assert aws.scale_out_gbps == pytest.approx(6.25)  # 400 Gbps / 8 / 8 GPUs
    assert P4DE in aws.scale_out_note
    assert cm.hop_bytes_per_s == pytest.approx(50e9) and P4DE in cm.describe()


def test_the_simulated_plan_says_which_network_it_used():
    w = Workload(prompt_tokens=np.full(4, 512), output_tokens=np.full(4, 8))
    cfg = ServingConfig(gpu="H100", tp=8, pp=2)
    details = {}
    for name, gpu in (("none", load_gpus()["H100"]),
                      ("aws", load_gpu_catalog(None, None, "aws")["H100"])):
        res = simulate(w, LLAMA_405B, gpu, cfg, resolve(LLAMA_405B, gpu, cfg).cost_model,
                       startup_s=0)
        details[name] = res.provenance.detail
    assert res.rental.instance == "p5.48xlarge" and res.rental.count == 2
    assert P5 in details["aws"]
    assert "assumed 100 Gb/s (ESTIMATE)" in details["none"] and P5 not in details["none"]


# ---- 2. a shape without a figure keeps the catalog's, and says so --------------------------
def test_a_shape_without_a_network_figure_keeps_the_catalog_figure_labelled(tmp_path):
    cfg = ServingConfig(gpu="H100", tp=8, pp=2)
    lam, cm = _pp_plan(load_gpu_catalog(None, None, "lambda")["H100"], cfg)
    assert network_of(lam, 8, 1, 2) is None
    assert lam.scale_out_gbps == load_gpus()["H100"].scale_out_gbps  # unchanged: 50
    assert "catalog figure, not the rented gpu_8x_h100_sxm5's" in lam.scale_out_note
    assert cm.hop_bytes_per_s == ASSUMED_NETWORK_BYTES_PER_S
    assert "assumed 100 Gb/s (ESTIMATE: the rented instance publishes no network" \
        in cm.describe()
    # an estimated catalog figure (L4: 100 Gb/s per 8-GPU machine) is called an estimate
    bare = load_gpu_catalog(_write(tmp_path, BARE.replace("H100", "L4")), None, "bare")["L4"]
    g = plan_machine_gpu(bare, 1, 8)  # DP 8 of TP 1: two 4-GPU machines
    assert g.scale_out_gbps == load_gpus()["L4"].scale_out_gbps
    assert "catalog estimate, not the rented h100x4's" in g.scale_out_note
    assert plan_machine_gpu(g, 1, 8) is g  # asked twice (simulator, sources): labelled once


def test_one_machine_plans_and_no_provider_are_untouched():
    aws = load_gpu_catalog(None, None, "aws")["H100"]
    one = plan_machine_gpu(aws, 8)  # one p5.48xlarge: nothing crosses a network
    assert one.scale_out_gbps == aws.scale_out_gbps
    assert one.scale_out_source == aws.scale_out_source
    plain = load_gpus()["H100"]
    assert plan_machine_gpu(plain, 8, 4, 2) is plain and network_of(plain, 8, 4, 2) is None


# ---- 3. the lookup is by the instance the plan rents ---------------------------------------
def test_the_figure_is_the_rented_shapes(tmp_path):
    h100 = load_gpu_catalog(_write(tmp_path, TWO), None, "two")["H100"]
    small = plan_machine_gpu(h100, 1, 8)  # DP 8 of TP 1: 2 x h100x4 is cheaper than h100x8
    assert network_of(h100, 1, 8).name == "h100x4"
    assert small.gpus_per_machine == 4
    assert small.scale_out_gbps == pytest.approx(100 / 8 / 4)  # 3.125 GB/s per GPU
    assert "h100x4 100 Gbps shared by its 4 GPUs (two, read 2026-11-30)" in small.scale_out_note
    big = plan_machine_gpu(h100, 8, 1, 2)  # TP 8 x PP 2: two h100x8
    assert network_of(h100, 8, 1, 2).name == "h100x8"
    assert big.scale_out_gbps == pytest.approx(50.0)
    assert "h100x8 3,200 Gbps EFA shared by its 8 GPUs" in big.scale_out_note


def test_every_published_shape_turns_into_its_per_gpu_share():
    aws = {r.name: r for r in load_providers()["aws"].instances}
    billing = load_gpu_catalog(None, None, "aws")["A10"].billing
    g5 = {i.name: i for i in billing.instances}
    # g5.xlarge: 2.5 Gbps baseline (bursts to 10 on credits): what a long job sustains
    assert aws["g5.xlarge"].network_gbps == 2.5
    assert g5["g5.xlarge"].network_bytes_per_s_per_gpu == pytest.approx(2.5e9 / 8)
    assert "baseline, bursts to 10" in g5["g5.xlarge"].network_label
    assert g5["g5.48xlarge"].network_bytes_per_s_per_gpu == pytest.approx(100e9 / 8 / 8)
    for name in ("p4d.24xlarge", "p4de.24xlarge", "p5.48xlarge", "p5en.48xlarge",
                 "g6e.48xlarge", "g6.48xlarge"):
        assert aws[name].network_gbps is not None
    gcp = {r.name: r for r in load_providers()["gcp"].instances}
    assert gcp["a3-highgpu-8g"].network_gbps == 1000
    assert "at most" in gcp["a3-highgpu-8g"].network_note  # GCP states maxima
    assert gcp["a2-ultragpu-4g"].network_gbps is None  # not read: the catalog's stays


def test_a_studys_stored_billing_keeps_the_network():
    billing = load_gpu_catalog(None, None, "aws")["H100"].billing
    again = Billing.from_dict(dataclasses.asdict(billing))
    assert again == billing and again.instances[-1].network_gbps == 3200


def test_a_network_figure_needs_its_source_and_a_plausible_value(tmp_path):
    no_source = TWO.replace("    network_source: test page, read 2026-11-30\n", "")
    with pytest.raises(TunerError, match="network_gbps needs network_source"):
        load_providers(_write(tmp_path, no_source))
    with pytest.raises(TunerError, match="network_gbps must be the instance's network"):
        load_providers(_write(tmp_path, TWO.replace("network_gbps: 100", "network_gbps: -1")))


def test_a_hand_over_carries_the_hidden_states_and_the_residual():
    """vLLM's decoder models return IntermediateTensors({"hidden_states", "residual"}) from a
    non-last stage: two 16-bit tensors per token, not one (the hop bytes were halved)."""
    cfg = ServingConfig(gpu="H100", tp=8, pp=2)
    _, cm = _pp_plan(load_gpus()["H100"], cfg)
    assert cm.hop_bytes_per_token == 2 * 2 * LLAMA_405B.hidden_size  # 65,536 bytes
    assert "hidden states and residual" in cm.describe()
