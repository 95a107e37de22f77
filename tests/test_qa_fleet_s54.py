"""QA pass on pricing as users rent (session 54): whole machines, start-up, fleets of GPU types."""

from __future__ import annotations

import numpy as np
import pytest

from tuner.core.catalog import get_model, load_gpus
from tuner.core.config import ServingConfig
from tuner.core.workload import Workload
from tuner.predictors.sources import cost_model_for
from tuner.search.fleet import fleet_front, simulate_fleet
from tuner.search.records import Metrics, TrialRecord
from tuner.sim.simulator import simulate

GPUS = load_gpus()
MODEL = get_model("llama-3-8b")
CM = cost_model_for(MODEL)


def _workload(seed: int, n: int = 300) -> Workload:
    rng = np.random.default_rng(seed)
    return Workload(prompt_tokens=rng.integers(50, 3000, n),
                    output_tokens=rng.integers(20, 1500, n))


def _record(number: int, cfg: ServingConfig, w: Workload) -> TrialRecord:
    g = GPUS[cfg.gpu]
    s = simulate(w, MODEL, g, cfg, CM(g, cfg)).summary()
    return TrialRecord(number, cfg, True, metrics=Metrics.from_dict(
        {k: s[k] for k in ("makespan_s", "startup_s", "schedule_s", "cost_usd")}),
        fidelity={"level": "full"})


@pytest.mark.parametrize("seed", [1, 2])
def test_adding_a_slow_machine_never_makes_the_fleet_slower(seed):
    """2 x H100 alone end in ~79 s; adding one A10 the split may give nothing must not end
    later. Before: the fluid rule dealt the A10 one or two long requests, which ran past
    the H100s' whole job (95.5 s for seed 1, 21 % slower than without the A10)."""
    w = _workload(seed)
    base = ServingConfig(gpu="H100", dp=2)
    g = GPUS["H100"]
    alone = simulate(w, MODEL, g, base, CM(g, base)).makespan_s
    plan = simulate_fleet(w, MODEL, GPUS, [base, ServingConfig(gpu="A10", dp=1)], CM)
    assert plan.makespan_s <= alone * (1 + 1e-9)
    assert sum(p.requests for p in plan.parts) == len(w)
    assert plan.cost_usd == pytest.approx(sum(p.cost_usd for p in plan.parts))


def test_a_mix_that_gives_a_type_nothing_is_not_listed_as_a_mix():
    """A10 + H100 whose best split is the H100 alone: that is a single-type plan, not a mix
    (`tuner export --fleet` and the front's "mix K" rows need two GPU types)."""
    w = _workload(1)
    records = [_record(0, ServingConfig(gpu="H100", dp=2), w),
               _record(1, ServingConfig(gpu="A10", dp=1), w)]
    plans = fleet_front(w, MODEL, GPUS, records, caps={"H100": 2, "A10": 1}, cost_model_for=CM)
    assert all(len({p.gpu for p in plan.parts}) >= 2 for plan in plans)


# ---- start-up: labelled an estimate, and what it leaves out --------------------------------------
def test_an_estimated_startup_says_it_is_one_and_what_it_leaves_out():
    from tuner.core.startup import Startup, startup_for

    est = startup_for(MODEL, GPUS["H100"], ServingConfig(gpu="H100"))
    # 16.1 GB at 1.75 GB/s + 32 layers x (0.60 s graphs + 0.80 s compile)
    assert est.total_s == pytest.approx(MODEL.weight_bytes(16) / 1.75e9 + 32 * 1.4)
    text = est.describe()
    assert "estimated, a lower bound" in text and "downloading the checkpoint" in text
    assert "provisioning the machine" in text
    assert "estimated" not in Startup.fixed(30).describe()  # the user's own figure


# ---- whole machines: the rented instance and its idle GPUs in search's answer ------------------
def _answer(tp: int, dp: int, machines: dict | None):
    from types import SimpleNamespace

    from tuner.cli.search import _gpus

    cfg = ServingConfig(gpu="H100", tp=tp, dp=dp)
    return _gpus(SimpleNamespace(config=cfg, gpu="H100",
                                 metrics=SimpleNamespace(machines=machines)))


def test_search_answer_names_the_rented_instance_and_its_idle_gpus():
    from tuner.core.pricing import get_provider, load_providers, place

    billing = get_provider("aws", load_providers()).billing("H100")
    # 4 x H100 rent one 8-GPU p5.48xlarge: the $ pays 8, and the answer says 4 sit idle
    four = place("H100", 8, tp=2, dp=2, billing=billing).to_dict()
    assert _answer(2, 2, four) == "4 x H100 on 1 x p5.48xlarge (4 GPUs of it idle, paid)"
    nine = place("H100", 8, tp=1, dp=9, billing=billing).to_dict()
    assert _answer(1, 9, nine) == "9 x H100 on 2 x p5.48xlarge (7 GPUs of them idle, paid)"
    full = place("H100", 8, tp=1, dp=8, billing=billing).to_dict()
    assert _answer(1, 8, full) == "8 x H100 on 1 x p5.48xlarge"
    # the catalog's per-GPU price pays no idle GPU: as before
    assert _answer(1, 9, place("H100", 8, tp=1, dp=9).to_dict()) == "9 x H100 on 2 machines of 8"
    assert _answer(1, 1, place("H100", 8, tp=1, dp=1).to_dict()) == "1 x H100"


# ---- the price a plan pays: its source and date printed beside the $ ---------------------------
def test_simulate_prints_the_rented_instances_price_source_and_date(tmp_path):
    import json

    from typer.testing import CliRunner

    from tuner.cli.main import app

    wl = tmp_path / "w.jsonl"
    wl.write_text("".join(json.dumps({"prompt_tokens": 500, "output_tokens": 100}) + "\n"
                          for _ in range(20)))
    args = ["simulate", "-w", str(wl), "-m", "llama-3-8b", "-g", "A10", "--json"]
    runner = CliRunner()
    r = runner.invoke(app, [*args, "--provider", "aws", "--tp", "2"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    # TP 2 rents a 4-GPU g5.12xlarge ($5.672/h), billed per second with a 60 s minimum
    rental = d["rental"]
    assert (rental["instance"], rental["count"], rental["gpus_rented"]) == ("g5.12xlarge", 1, 4)
    billed = max(60, -(-d["makespan_s"] // 1))
    assert d["cost_usd"] == pytest.approx(5.672 * billed / 3600)
    assert d["makespan_s"] == pytest.approx(d["startup_s"] + d["schedule_s"])
    src = d["price_source"]
    assert src.startswith("aws g5.12xlarge: ") and "skypilot-catalog" in src
    assert "2026-11-24" in src and "g5.xlarge" not in src  # that row's, not every shape's
    d = json.loads(runner.invoke(app, args).stdout)  # the catalog's per-GPU price
    gpu = GPUS["A10"]
    assert d["price_source"] == f"{gpu.price_source}, {gpu.price_date}"
    over = json.loads(runner.invoke(app, [*args, "--provider", "aws", "--price",
                                          "A10=0.5"]).stdout)
    assert over["price_source"] == "aws g5.xlarge: user override (--price) per GPU-hour"
    text = runner.invoke(app, args[:-1], env={"COLUMNS": "250"}).output
    assert "price source" in text


def test_instance_sources_do_not_stop_a_study_from_resuming():
    """Per-instance price sources are words, not figures: a study stored before they were
    kept compares equal (tuner.search.storage._unlabelled)."""
    import dataclasses
    import json

    from tuner.core.pricing import get_provider, load_providers
    from tuner.search.storage import _unlabelled

    billing = get_provider("aws", load_providers()).billing("A10")
    new = json.loads(json.dumps(dataclasses.asdict(billing)))  # as the study stores it
    old = {**new, "instances": [{k: v for k, v in i.items() if k not in ("source", "date")}
                                for i in new["instances"]]}
    assert new["instances"][0]["source"] and new["instances"][0]["date"]
    assert _unlabelled({"billing": old}) == _unlabelled({"billing": new})
