"""Fleets (issue #27, first part): one job across several GPU types, split so the parts finish
together; mixes priced beside single-type plans and kept only where nothing beats them."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tuner.core.catalog import get_model, load_gpus
from tuner.core.config import ServingConfig
from tuner.core.workload import Workload
from tuner.predictors.sources import cost_model_for
from tuner.search.fleet import FleetPlan, Part, deal, fleet_front, rebalanced, simulate_fleet
from tuner.search.records import Metrics, TrialRecord
from tuner.sim.simulator import simulate

GPUS = load_gpus()
MODEL = get_model("llama-3-8b")
CM = cost_model_for(MODEL)


def _workload(n: int = 600, seed: int = 0) -> Workload:
    rng = np.random.default_rng(seed)
    return Workload(prompt_tokens=rng.integers(50, 2000, n),
                    output_tokens=rng.integers(20, 600, n))


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 3000), shares=st.lists(st.floats(0.0, 10.0), min_size=1, max_size=4))
def test_every_request_goes_to_exactly_one_part_in_proportion(n, shares):
    if sum(shares) <= 0:
        shares = [1.0] * len(shares)
    w = Workload(prompt_tokens=np.arange(n) % 97 + 1, output_tokens=np.arange(n) % 13 + 1)
    parts = deal(w, np.array(shares))
    allidx = np.concatenate(parts)
    assert sorted(allidx.tolist()) == list(range(n))  # each exactly once
    frac = np.array(shares) / sum(shares)
    for p, f in zip(parts, frac, strict=True):
        assert abs(len(p) - f * n) <= 2 + 0.02 * n
        if f == 0:
            assert len(p) == 0


def test_parts_get_the_same_mix_of_long_and_short_requests():
    w = _workload(4000)
    a, b = deal(w, np.array([0.5, 0.5]))
    tok = w.prompt_tokens + w.output_tokens
    assert abs(tok[a].mean() / tok[b].mean() - 1) < 0.02


def test_rebalanced_shares_end_together_by_the_fluid_rule():
    shares = np.array([0.5, 0.5])
    sched = np.array([100.0, 50.0])  # part 1 twice as fast
    start = np.array([10.0, 30.0])
    new = rebalanced(shares, sched, start)
    rate = shares / sched
    finish = start + new / rate
    assert new.sum() == pytest.approx(1.0) and finish[0] == pytest.approx(finish[1])
    # a part whose start-up alone outlasts the others gets nothing
    new = rebalanced(np.array([0.5, 0.5]), np.array([1.0, 1000.0]), np.array([0.0, 5000.0]))
    assert new[1] == 0 and new[0] == pytest.approx(1.0)


def test_a_simulated_fleet_finishes_together_and_sums_its_cost():
    w = _workload(800)
    configs = [ServingConfig(gpu="A10", dp=2), ServingConfig(gpu="L40S", dp=1)]
    plan = simulate_fleet(w, MODEL, GPUS, configs, CM, tolerance=0.05)
    assert isinstance(plan, FleetPlan) and len(plan.parts) == 2
    assert plan.finish_spread <= 0.05  # the acceptance bar: within 5 %
    assert sum(p.requests for p in plan.parts) == len(w)
    assert plan.cost_usd == pytest.approx(sum(p.cost_usd for p in plan.parts))
    assert plan.makespan_s == max(p.makespan_s for p in plan.parts)
    d = plan.to_dict()
    assert [set(p) >= {"gpu", "count", "tp", "pp", "dp", "requests", "makespan_s", "cost_usd"}
            for p in d["parts"]] == [True, True]
    assert d["parts"][0]["count"] == 2 and d["parts"][1]["gpu"] == "L40S"


def _record(number: int, cfg: ServingConfig, w: Workload) -> TrialRecord:
    g = GPUS[cfg.gpu]
    res = simulate(w, MODEL, g, cfg, CM(g, cfg))
    s = res.summary()
    return TrialRecord(number, cfg, True, metrics=Metrics.from_dict(
        {k: s[k] for k in ("makespan_s", "startup_s", "schedule_s", "cost_usd")}),
        fidelity={"level": "full"})


def test_a_mix_is_on_the_front_when_availability_binds():
    """Two A10 and two L40S are all there is: the two types together finish before either
    alone, so a mix is on the front (and each of its parts within its cap)."""
    w = _workload(1500, seed=3)
    records = [_record(0, ServingConfig(gpu="A10", dp=2), w),
               _record(1, ServingConfig(gpu="L40S", dp=2), w)]
    caps = {"A10": 2, "L40S": 2}
    plans = fleet_front(w, MODEL, GPUS, records, caps=caps, cost_model_for=CM)
    assert plans, "no mix beat the single-type plans"
    best = plans[0]
    fastest_single = min(r.metrics.makespan_s for r in records)
    assert best.makespan_s < fastest_single
    assert {p.gpu for p in best.parts} == {"A10", "L40S"}
    for p in best.parts:
        assert p.config.num_gpus <= caps[p.gpu]
    assert best.finish_spread <= 0.05


def test_no_mix_without_two_gpu_types():
    w = _workload(200)
    records = [_record(0, ServingConfig(gpu="A10"), w)]
    assert fleet_front(w, MODEL, GPUS, records, caps={"A10": 8}, cost_model_for=CM) == []


def test_a_part_round_trips_to_dict():
    p = Part(ServingConfig(gpu="H100", tp=2, dp=3), 10, 100.0, 20.0, 5.0, 7)
    d = p.to_dict()
    assert (d["gpu"], d["count"], d["tp"], d["pp"], d["dp"], d["trial"]) == ("H100", 6, 2, 1, 3, 7)


def test_search_puts_a_mix_beside_single_types_and_only_a_mix_meets_the_deadline(tmp_path):
    """The issue's acceptance: availability binds (two of each), the deadline is one neither
    type alone meets; the search says a mix meets it, results.json lists the mix's parts and
    every single-type plan's one part."""
    import json

    from typer.testing import CliRunner

    from tuner.cli.main import app

    w = _workload(1500, seed=3)
    wl = tmp_path / "w.jsonl"
    wl.write_text("".join(json.dumps({"prompt_tokens": int(p), "output_tokens": int(o)}) + "\n"
                          for p, o in zip(w.prompt_tokens, w.output_tokens, strict=True)))
    runner = CliRunner()
    args = ["search", "-w", str(wl), "-m", "llama-3-8b", "--gpus", "A10,L40S", "--max-gpus",
            "A10=2,L40S=2", "--n-trials", "30"]
    r = runner.invoke(app, [*args, "--out", str(tmp_path / "free")])
    assert r.exit_code == 0, r.output
    d = json.loads((tmp_path / "free" / "results.json").read_text())
    singles = [p for p in d["pareto"]]
    assert all(len(p["parts"]) == 1 and p["parts"][0]["pp"] == 1 for p in singles)
    fastest_single = min(p["metrics"]["makespan_s"] for p in singles)
    assert d["fleets"], "a mix should beat both types alone when two of each is all there is"
    mix = d["fleets"][0]
    assert mix["makespan_s"] < fastest_single and mix["finish_spread"] <= 0.05
    caps = {"A10": 2, "L40S": 2}
    assert sum(p["requests"] for p in mix["parts"]) == len(w)
    assert all(p["count"] <= caps[p["gpu"]] for p in mix["parts"])
    # a deadline between the mix and the fastest single type: only the mix meets it
    deadline = int((mix["makespan_s"] + fastest_single) / 2)
    r = runner.invoke(app, [*args, "--deadline", str(deadline), "--out", str(tmp_path / "dl")])
    assert r.exit_code == 0, r.output
    text = " ".join(r.output.split())
    assert "only a mix of GPU types finishes within" in text
    d = json.loads((tmp_path / "dl" / "results.json").read_text())
    assert any(f["meets_constraints"] for f in d["fleets"])
    # the mix as files: every request in exactly one part's input
    out = tmp_path / "fleet"
    r = runner.invoke(app, ["export", "--out", str(tmp_path / "free"), "--fleet", "1",
                            "--output", str(out)])
    assert r.exit_code == 0, r.output
    parts = sorted(out.glob("part-*.jsonl"))
    assert len(parts) == len(mix["parts"]) and (out / "fleet.json").is_file()
    got = sorted(ln for p in parts for ln in p.read_text().splitlines())
    assert got == sorted(wl.read_text().splitlines())
    r = runner.invoke(app, ["export", "--out", str(tmp_path / "free"), "--fleet", "9",
                            "--output", str(tmp_path / "nine")])
    assert r.exit_code != 0 and not (tmp_path / "nine").exists()


def test_dropping_a_zero_share_deals_the_same_split():
    w = _workload(500)
    a = deal(w, np.array([0.3, 0.0, 0.7]))
    b = deal(w, np.array([0.3, 0.7]))
    assert a[1].size == 0
    assert np.array_equal(a[0], b[0]) and np.array_equal(a[2], b[1])


def test_fleet_files_put_every_custom_id_in_exactly_one_part():
    import json

    import yaml

    from tuner.exports.fleet import fleet_files

    w = _workload(700, seed=5)
    lines = [json.dumps({"custom_id": f"r-{i}", "method": "POST", "url": "/v1/completions",
                         "body": {"model": "m", "prompt": "x " * int(p),
                                  "max_tokens": int(o)}}) + "\n"
             for i, (p, o) in enumerate(zip(w.prompt_tokens, w.output_tokens, strict=True))]
    plan = simulate_fleet(w, MODEL, GPUS, [ServingConfig(gpu="A10", dp=2),
                                           ServingConfig(gpu="L40S")], CM).to_dict()
    files = fleet_files(plan, lines, w, MODEL, GPUS, max_model_len=4096)
    ids = [json.loads(ln)["custom_id"] for name, text in files.items()
           if name.endswith(".jsonl") for ln in text.splitlines()]
    assert sorted(ids) == sorted(f"r-{i}" for i in range(len(w)))  # each exactly once
    per_part = {p["gpu"]: p["requests"] for p in plan["parts"]}
    assert len(files["part-1-A10.jsonl"].splitlines()) == per_part["A10"]
    assert len(files["part-2-L40S.jsonl"].splitlines()) == per_part["L40S"]
    sky = yaml.safe_load(files["part-1-A10.sky.yaml"])
    assert sky["resources"]["accelerators"] == "A10:2" and sky["num_nodes"] == 1
    assert "part-1-A10.run-batch.sh" in sky["run"] and "SKYPILOT_NODE_RANK" in sky["run"]
    assert "-i part-1-A10.jsonl" in files["part-1-A10.run-batch.sh"] or \
        "part-1-A10.jsonl" in files["part-1-A10.run-batch.sh"]
    assert json.loads(files["fleet.json"])["parts"][0]["gpu"] == "A10"
    try:  # SkyPilot's own parser, where it is installed
        import sky
    except ImportError:
        return
    for name, text in files.items():  # pragma: no cover - needs skypilot
        if name.endswith(".sky.yaml"):
            sky.Task.from_yaml_config(yaml.safe_load(text))


def test_export_fleet_refuses_a_file_that_is_not_the_workload():
    from tuner.core.errors import TunerError
    from tuner.exports.fleet import split_lines

    w = _workload(10)
    with pytest.raises(TunerError, match="9 request lines.*10 requests"):
        split_lines(["{}\n"] * 9, w, [0.5, 0.5])
