"""A provider's instance shapes as rented (stop 53 QA, `--provider gcp`).

1. GCP rents a3-highgpu-1g/2g/4g only as Spot or Flex-start VMs (providers.yaml's own notes);
   tuner priced and chose them as on-demand: `tuner simulate -m llama-3-8b -g H100 --provider
   gcp` said "$0.2897 at $10.98/h for 1 x a3-highgpu-1g" and a granite-4.0-h-tiny search's
   fastest ran on "2 x a3-highgpu-4g" (a multi-node export). The rows now say `on_demand:
   false` (with its source, checked by the loader): on-demand plans leave them out, --spot
   rents them at their spot price, `tuner gpus` still lists them (marked), and naming one as
   a GPU says in one line what to do.
2. The cost model took the catalog's machine size (8), never the rented shape's: a plan over
   2 x 4-GPU instances was priced as one NVLink machine (an MoE expert group over 8 GPUs
   gathered by the 8-GPU NCCL tables). The rented shape's GPUs per machine now reach the cost
   model (tuner.core.pricing.plan_machine_gpu, used by predictors.sources.resolve and
   tuner.sim.simulator.simulate); without --provider the GPU is passed through untouched.
"""

from __future__ import annotations

import numpy as np
import pytest
from typer.testing import CliRunner

from tuner.cli.app import catalog_gpu, load_gpu_catalog
from tuner.cli.main import app
from tuner.core.catalog import get_model, load_gpus
from tuner.core.config import ServingConfig
from tuner.core.errors import TunerError
from tuner.core.pricing import (
    apply_provider,
    choose_instances,
    get_provider,
    load_providers,
    plan_machine_gpu,
    rent,
    require_offered,
)
from tuner.core.workload import Workload
from tuner.predictors.sources import resolve
from tuner.sim.simulator import simulate

SPOT_ONLY = ("a3-highgpu-1g", "a3-highgpu-2g", "a3-highgpu-4g")
GRANITE = get_model("granite-4.0-h-tiny")  # a hybrid MoE: dp > 1 all-gathers its experts

# a provider whose 4-GPU H100 machine is cheaper per GPU than its 8-GPU one: a DP 8 plan
# rents two 4-GPU machines, while the GPU's machine size (its largest shape) says 8
FOUR = """
providers:
  four:
    title: test table, 4- and 8-GPU H100 machines
    billing: {granularity: second, minimum_s: 0, source: test}
    instances:
      h100x4: {gpu: H100, gpus: 4, usd_per_h: 40.0, source: test, date: test}
      h100x8: {gpu: H100, gpus: 8, usd_per_h: 90.0, source: test, date: test}
"""


def _write(tmp_path, text, name="p.yaml"):
    p = tmp_path / name
    p.write_text(text)
    return p


# ---- 1. shapes not sold on-demand ----------------------------------------------------------
def test_shipped_rows_say_which_shapes_are_not_on_demand():
    rows = {r.name: r for r in load_providers()["gcp"].instances}
    for name in SPOT_ONLY:
        assert rows[name].on_demand is False
        assert "Spot or Flex-start" in rows[name].on_demand_source
        assert rows[name].spot_usd_per_h is not None
    assert rows["a3-highgpu-8g"].on_demand is True
    # every other shipped row is on-demand
    assert [r.name for p in load_providers().values() for r in p.instances
            if not r.on_demand] == list(SPOT_ONLY)


@pytest.mark.parametrize("field, why", [
    ("on_demand: nope", "on_demand must be true or false"),
    ("on_demand: false", "on_demand: false needs on_demand_source"),
])
def test_loader_checks_the_field(tmp_path, field, why):
    text = FOUR.replace("date: test}", "date: test, " + field + "}")
    with pytest.raises(TunerError, match=why):
        load_providers(_write(tmp_path, text))


def test_on_demand_plans_never_rent_a_spot_only_shape():
    h100 = load_gpu_catalog(None, None, "gcp")["H100"].billing
    assert [i.name for i in h100.instances] == ["a3-highgpu-8g"]
    assert [i.name for i in h100.not_on_demand] == list(SPOT_ONLY)
    for tp, dp in ((1, 1), (2, 1), (4, 1), (1, 8), (1, 4)):
        inst, n = choose_instances(h100, tp, dp)
        assert (inst.name, n) == ("a3-highgpu-8g", 1)
    r = rent(95.0, h100, 1)
    assert r.usd_per_h == pytest.approx(87.83247)
    assert "no on-demand instance holds exactly 1" in r.note
    assert "a3-highgpu-1g" in r.note and "does not rent them on-demand" in r.note
    # the per-GPU price stays the list price per GPU (the 8g's is the same per GPU)
    assert load_gpu_catalog(None, None, "gcp")["H100"].price_usd_per_h == pytest.approx(
        87.83247 / 8)


def test_spot_rents_them_at_their_spot_price_and_a_tie_takes_fewer_machines():
    spot = load_gpu_catalog(None, None, "gcp", spot=True)["H100"].billing
    assert [i.name for i in spot.instances] == [*SPOT_ONLY, "a3-highgpu-8g"]
    inst, n = choose_instances(spot, 1)
    assert (inst.name, n, inst.usd_per_h) == ("a3-highgpu-1g", 1, pytest.approx(1.97614))
    # 8 x 1g, 2 x 4g and 1 x 8g cost the same: one machine (NVLink inside it) wins
    assert [(i.name, n) for i, n in [choose_instances(spot, 1, 8)]] == [("a3-highgpu-8g", 1)]
    assert [(i.name, n) for i, n in [choose_instances(spot, 1, 4)]] == [("a3-highgpu-4g", 1)]


def test_a_gpu_sold_only_as_spot_is_refused_on_demand_with_the_reason(tmp_path):
    text = FOUR.replace("date: test}", "date: test, spot_usd_per_h: 10.0, on_demand: false, "
                        "on_demand_source: spot only per the test page}")
    path = _write(tmp_path, text)
    providers = load_providers(path)
    cat = apply_provider(load_gpus(), get_provider("four", providers))
    assert cat["H100"].billing is None
    with pytest.raises(TunerError, match="no H100 instance on-demand.*spot only per the test "
                                         "page.*--spot"):
        require_offered(cat["H100"], "four", providers=providers)
    spot = apply_provider(load_gpus(), get_provider("four", providers), spot=True)
    assert spot["H100"].billing.instances[0].usd_per_h == 10.0


def test_naming_a_shape_as_the_gpu_says_so_in_one_line():
    cat = load_gpu_catalog(None, None, "gcp")
    with pytest.raises(TunerError) as e:
        catalog_gpu("a3-highgpu-1g", cat, "gcp")
    msg = str(e.value)
    assert "\n" not in msg
    assert "instance shape of gcp (1 x H100)" in msg and "name the GPU (H100)" in msg
    assert "does not rent a3-highgpu-1g on-demand" in msg
    with pytest.raises(TunerError, match="Unknown GPU"):  # any other unknown name as before
        catalog_gpu("a3-nonesuch", cat, "gcp")


def test_tuner_gpus_keeps_listing_them_marked():
    r = CliRunner().invoke(app, ["gpus", "--provider", "gcp"], env={"COLUMNS": "250"})
    assert r.exit_code == 0, r.output
    for name in SPOT_ONLY:
        assert f"{name} *" in r.output
    assert "not rented on-demand" in r.output and "Spot or Flex-start" in r.output


def test_simulate_llama_on_gcp_h100_rents_the_8_gpu_shape():
    w = Workload(prompt_tokens=np.full(8, 500), output_tokens=np.full(8, 50))
    cat = load_gpu_catalog(None, None, "gcp")
    model = get_model("llama-3-8b")
    cfg = ServingConfig(gpu="H100")
    res = simulate(w, model, cat["H100"], cfg, resolve(model, cat["H100"], cfg).cost_model,
                   startup_s=0)
    assert res.rental.instance == "a3-highgpu-8g"  # was a3-highgpu-1g at $10.98/h


# ---- 2. the rented machine size reaches the cost model -------------------------------------
def test_plan_machine_gpu_is_the_gpu_itself_without_a_provider():
    g = load_gpus()["H100"]
    for tp, dp, pp in ((1, 1, 1), (1, 8, 1), (2, 16, 1), (8, 4, 2)):
        assert plan_machine_gpu(g, tp, dp, pp) is g


def test_plan_machine_gpu_takes_the_rented_shape(tmp_path):
    four = load_gpu_catalog(_write(tmp_path, FOUR), None, "four")["H100"]
    assert four.gpus_per_machine == 8  # the largest shape
    assert choose_instances(four.billing, 1, 8) == (four.billing.instances[0], 2)
    assert plan_machine_gpu(four, 1, 8).gpus_per_machine == 4
    assert plan_machine_gpu(four, 8, 1) is four
    l4 = load_gpu_catalog(None, None, "gcp")["L4"]
    assert l4.gpus_per_machine == 8  # the largest shape: the TP bound of the search
    # DP 8 of TP 1 rents 8 x g2-standard-4 (the cheapest per GPU): 1 GPU per machine
    assert choose_instances(l4.billing, 1, 8)[0].name == "g2-standard-4"
    assert plan_machine_gpu(l4, 1, 8).gpus_per_machine == 1
    assert plan_machine_gpu(l4, 8, 1).gpus_per_machine == 8


def test_moe_group_over_two_rented_machines_gathers_over_the_network(tmp_path):
    cfg = ServingConfig(gpu="H100", tp=1, dp=8)
    plain = load_gpus()["H100"]
    four = load_gpu_catalog(_write(tmp_path, FOUR), None, "four")["H100"]
    one = resolve(GRANITE, plain, cfg).cost_model.provenance.detail
    two = resolve(GRANITE, four, cfg).cost_model.provenance.detail
    assert "NCCL all-gather + reduce-scatter tables over 8 GPUs" in one
    assert "MoE dispatch/combine over 2 machines of 4 GPUs" in two
    w = Workload(prompt_tokens=np.full(64, 1500), output_tokens=np.full(64, 100))
    runs = {}
    for name, g in (("one", plain), ("two", four)):
        runs[name] = simulate(w, GRANITE, g, cfg, resolve(GRANITE, g, cfg).cost_model,
                              startup_s=0).schedule_s
    assert runs["two"] > runs["one"]  # was equal: the network stage was never priced


def test_a_machine_boundary_never_speeds_the_gather_up():
    """8 x 1-GPU L4 VMs: the network estimate (5 us hops) undercut the measured one-machine
    PCIe tables 2.5x (schedule 199 s vs 497 s); the spanning group now costs at least the
    tables over its GPUs in one machine."""
    cfg = ServingConfig(gpu="L4", tp=1, dp=8)
    plain = load_gpus()["L4"]
    gcp = load_gpu_catalog(None, None, "gcp")["L4"]
    w = Workload(prompt_tokens=np.full(32, 1500), output_tokens=np.full(32, 50))
    s = {n: simulate(w, GRANITE, g, cfg, resolve(GRANITE, g, cfg).cost_model,
                     startup_s=0).schedule_s for n, g in (("one", plain), ("eight", gcp))}
    assert s["eight"] >= s["one"]
    detail = resolve(GRANITE, gcp, cfg).cost_model.provenance.detail
    assert "over 8 machines of 1 GPUs" in detail
    assert "at least the tables over 8 GPUs in one machine" in detail


def test_tp_above_the_largest_shape_is_refused_as_before(tmp_path):
    only4 = FOUR.replace("      h100x8: {gpu: H100, gpus: 8, usd_per_h: 90.0, source: test, "
                         "date: test}\n", "")
    four = load_gpu_catalog(_write(tmp_path, only4), None, "four")["H100"]
    assert four.gpus_per_machine == 4
    assert plan_machine_gpu(four, 8) is four  # no shape holds it: the simulator says so
    w = Workload(prompt_tokens=np.full(4, 100), output_tokens=np.full(4, 10))
    cfg = ServingConfig(gpu="H100", tp=8)
    from tuner.sim.simulator import InfeasibleConfig

    with pytest.raises(InfeasibleConfig, match="no instance with 8 GPUs"):
        simulate(w, get_model("llama-3-8b"), four, cfg,
                 resolve(get_model("llama-3-8b"), four, cfg).cost_model, startup_s=0)
