"""--deadline / --budget / --max-gpus, DP in the plan (the workload split across replicas), and
quantization as an opt-in (tuner.search.constraints, tuner.sim.simulator.split_replicas)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from tests.sim import simulate_default
from tuner.cli.main import app
from tuner.core.catalog import load_gpus
from tuner.core.config import ServingConfig
from tuner.core.errors import TunerError
from tuner.core.workload import Workload, load_workload
from tuner.reports.figures import deadline_envelope, deadline_figure, gpu_colors
from tuner.reports.outputs import constraint_verdicts
from tuner.search import SearchSettings, run_search
from tuner.search.constraints import (
    Constraints,
    parse_duration_s,
    parse_max_gpus,
    quantization_verdict,
    with_quantization,
)
from tuner.search.records import rank, trial_records, winners
from tuner.search.space import load_space
from tuner.sim.simulator import split_replicas

SMALL_SPACE = Path(__file__).parent / "spaces" / "deadline_small.yaml"
runner = CliRunner()


def workload(n: int = 48, seed: int = 3) -> Workload:
    rng = np.random.default_rng(seed)
    return Workload(prompt_tokens=rng.integers(200, 3000, n).astype(np.int64),
                    output_tokens=rng.integers(50, 600, n).astype(np.int64),
                    source="constraints-test", tokenizer="given", output_source="given")


@pytest.fixture(scope="module")
def exhaustive(model, gpus):
    """Every plan of the small space, simulated (the reference the constrained search must
    match)."""
    st = run_search(workload(), model, gpus, load_space(SMALL_SPACE),
                    SearchSettings(exhaustive=True, study_name="exhaustive"))
    recs = [r for r in trial_records(st) if r.feasible]
    assert len(recs) > 100
    return recs


# ---- parsing --------------------------------------------------------------------------------
@pytest.mark.parametrize("text,seconds", [("90m", 5400), ("6h", 21600), ("2d", 172800),
                                          ("3600", 3600), ("45s", 45), ("1.5h", 5400)])
def test_deadline_durations(text, seconds):
    assert parse_duration_s(text) == seconds


@pytest.mark.parametrize("text", ["6x", "", "h", "-2h", "0"])
def test_bad_deadline_is_one_line(text):
    with pytest.raises(TunerError, match="--deadline"):
        parse_duration_s(text)


def test_max_gpus_total_and_per_type():
    assert parse_max_gpus("8") == (8, {})
    assert parse_max_gpus("A10=8, A40=4") == (None, {"A10": 8, "A40": 4})
    for bad in ("0", "eight", "A10=0", "A10", "=4"):
        with pytest.raises(TunerError, match="--max-gpus"):
            parse_max_gpus(bad)
    with pytest.raises(TunerError, match="H100"):
        Constraints(max_gpus_per_type={"H100": 2}).check_gpus(["A10", "A40"])


def test_max_gpus_names_follow_gpus_and_appear_once_and_limits_are_finite():
    c = Constraints(max_gpus_per_type={"a10": 2}).check_gpus(["A10", "A40"])
    assert c.max_gpus_per_type == {"A10": 2}
    # given the GPUs, an alias names one of them (as --gpus reads it), once
    from tuner.core.catalog import load_gpus

    gpus = {n: g for n, g in load_gpus().items() if n in ("A10", "H100")}
    c = Constraints(max_gpus_per_type={"H100-80GB-SXM": 4}).check_gpus(gpus)
    assert c.max_gpus_per_type == {"H100": 4}
    with pytest.raises(TunerError, match="twice"):
        Constraints(max_gpus_per_type={"H100-SXM": 4, "h100": 2}).check_gpus(gpus)
    with pytest.raises(TunerError, match="twice"):
        parse_max_gpus("A10=2,a10=4")
    for kw in ({"budget_usd": float("inf")}, {"deadline_s": float("inf")}):
        with pytest.raises(TunerError, match="--budget|--deadline"):
            Constraints(**kw)


def test_plan_violations_before_simulating():
    c = Constraints(max_gpus=4, max_gpus_per_type={"A40": 2})
    assert c.plan_violation("A10", 4, 16, False) is None
    assert "--max-gpus 4" in c.plan_violation("A10", 8, 16, False)
    assert "A40=2" in c.plan_violation("A40", 4, 16, False)
    # 4-bit anywhere needs a checkpoint; 8-bit is FP8 online everywhere (weight-only through
    # Marlin on GPUs without FP8 tensor cores)
    assert "--quantized-model" in c.plan_violation("A10", 1, 4, False)
    assert c.plan_violation("A10", 1, 8, False) is None
    assert c.plan_violation("L40S", 1, 8, True) is None
    assert Constraints(quantized_model="org/ckpt-awq").plan_violation("A10", 1, 4, False) is None


def test_violations_and_goal():
    c = Constraints(deadline_s=3600.0)
    assert c.goal == "cheapest" and c.on_figures
    assert c.violations(1800.0, 5.0)[0] < 0 < c.violations(7200.0, 5.0)[0]
    assert c.violations(math.inf, math.inf)[0] > 0
    b = Constraints(budget_usd=10.0)
    assert b.goal == "fastest" and b.meets(1e6, 9.99) and not b.meets(1.0, 10.5)
    assert not Constraints(max_gpus=8).on_figures and Constraints(max_gpus=8).active


# ---- DP: the split ----------------------------------------------------------------------------
def test_split_balances_tokens_and_keeps_every_request_once():
    w = workload(301, seed=7)
    order = np.arange(len(w))[::-1]
    parts = split_replicas(w, order, 4)
    assert sorted(np.concatenate(parts).tolist()) == list(range(len(w)))
    work = w.prompt_tokens + w.output_tokens
    loads = [int(work[p].sum()) for p in parts]
    # greedy LPT: the heaviest share exceeds the mean by less than one request
    assert max(loads) - sum(loads) / 4 < int(work.max())
    # each share keeps the submission order
    pos = {int(r): i for i, r in enumerate(order)}
    for p in parts:
        assert [pos[int(r)] for r in p] == sorted(pos[int(r)] for r in p)
    assert split_replicas(w, order, 1)[0] is order


def test_round_robin_split_beats_nothing_but_lpt_beats_round_robin():
    # one long request among short ones: round-robin gives replica 0 the long one and its share
    w = Workload(prompt_tokens=np.array([8000] + [100] * 15, dtype=np.int64),
                 output_tokens=np.array([1000] + [50] * 15, dtype=np.int64), source="skew",
                 tokenizer="given", output_source="given")
    parts = split_replicas(w, np.arange(16), 2)
    heavy = next(p for p in parts if 0 in p)
    assert heavy.tolist() == [0]  # the long request alone; the 15 short ones on the other


def test_more_replicas_finish_sooner_and_bill_every_gpu(model, gpus):
    w = workload(96)
    # the schedules (start-up is the same for both: tests/test_startup.py)
    one = simulate_default(w, model, gpus["A40"], ServingConfig(gpu="A40", dp=1), startup_s=0)
    four = simulate_default(w, model, gpus["A40"], ServingConfig(gpu="A40", dp=4), startup_s=0)
    # 4 replicas of a quarter of the job each: faster, though each batches fewer requests
    assert four.makespan_s < 0.75 * one.makespan_s
    # every GPU of the plan is billed until the slowest replica ends
    assert four.cost_usd / four.makespan_s == pytest.approx(
        4 * one.cost_usd / one.makespan_s, rel=1e-9)
    assert four.requests == one.requests == 96


# ---- the constrained search vs the exhaustive grid --------------------------------------------
def test_deadline_plan_within_one_percent_of_exhaustive(model, gpus, exhaustive):
    spans = sorted(r.makespan_s for r in exhaustive)
    deadline_s = spans[len(spans) // 3]  # a deadline a third of the plans meet
    best = min((r for r in exhaustive if r.makespan_s <= deadline_s), key=lambda r: r.cost_usd)
    # the unconstrained cheapest misses this deadline, so the constraint changes the answer
    assert min(exhaustive, key=lambda r: r.cost_usd).makespan_s > deadline_s
    limits = Constraints(deadline_s=deadline_s)
    st = run_search(workload(), model, gpus, load_space(SMALL_SPACE),
                    SearchSettings(n_trials=90, seed=0, constraints=limits, study_name="d"))
    recs = trial_records(st)
    plan = rank(recs, limits.goal)[0]
    assert plan.makespan_s <= deadline_s
    assert plan.cost_usd <= best.cost_usd * 1.01
    # the winners the outputs use are the constrained ones
    assert winners(recs)[0]["cheapest"] == plan.number
    assert any("Plan: the cheapest that finishes within" in v
               for v in constraint_verdicts(st, recs))


def test_budget_plan_matches_exhaustive(model, gpus, exhaustive):
    costs = sorted(r.cost_usd for r in exhaustive)
    budget = costs[len(costs) // 4]
    best = min((r for r in exhaustive if r.cost_usd <= budget), key=lambda r: r.makespan_s)
    limits = Constraints(budget_usd=budget)
    st = run_search(workload(), model, gpus, load_space(SMALL_SPACE),
                    SearchSettings(n_trials=90, seed=1, constraints=limits, study_name="b"))
    plan = rank(trial_records(st), "fastest")[0]
    assert plan.cost_usd <= budget
    assert plan.makespan_s <= best.makespan_s * 1.01


def test_max_gpus_excludes_plans_without_simulating_them(model, gpus):
    limits = Constraints(max_gpus=2, max_gpus_per_type={"A40": 1})
    st = run_search(workload(24), model, gpus, load_space(SMALL_SPACE),
                    SearchSettings(exhaustive=True, constraints=limits, study_name="m"))
    recs = trial_records(st)
    for r in recs:
        n = r.config.tp * r.config.dp
        if n > 2 or (r.gpu == "A40" and n > 1):
            assert not r.feasible and "--max-gpus" in r.reason and r.metrics is None
        elif r.feasible:
            assert r.metrics.makespan_s > 0
    assert any(r.feasible and r.gpu == "A10" and r.config.tp * r.config.dp == 2
               for r in recs)


def test_no_plan_meets_the_deadline_is_one_line(model, gpus, exhaustive):
    fastest = min(r.makespan_s for r in exhaustive)
    st = run_search(workload(), model, gpus, load_space(SMALL_SPACE),
                    SearchSettings(n_trials=30, constraints=Constraints(deadline_s=fastest / 3),
                                   study_name="none"))
    with pytest.raises(TunerError, match=r"^no plan finishes within .*; fastest is .* on \d+ x "
                                         r"A(10|40) for \$"):
        constraint_verdicts(st, trial_records(st))


# ---- quantization is opt-in -------------------------------------------------------------------
def test_default_space_keeps_the_models_precision():
    sp = load_space(None)
    assert "weight_bits" not in sp.knobs and "kv_bits" not in sp.knobs
    assert sp.fixed["weight_bits"] == 16 and sp.fixed["kv_bits"] == 16
    assert sp.knobs["dp"] == "auto" and sp.knobs["tp"] == "auto"  # fitted to the job's machines
    q = with_quantization(sp)
    assert q.knobs["weight_bits"] == [16, 8, 4] and q.knobs["kv_bits"] == [16, 8]
    assert "weight_bits" not in q.fixed
    # a space that lists them already is left as it is
    off = load_space("offload")
    assert with_quantization(off).knobs["weight_bits"] == off.knobs["weight_bits"]


def test_quantization_verdict_compares_16_bit_and_quantized(model, gpus):
    cat = load_gpus()
    g = {"A40": gpus["A40"], "L40S": cat["L40S"]}
    sp = with_quantization(load_space(SMALL_SPACE))
    st = run_search(workload(24), model, g, sp,
                    SearchSettings(n_trials=40, seed=0, study_name="q"))
    recs = trial_records(st)
    # without --quantized-model: no 4-bit plan (8-bit is FP8 online on every GPU)
    for r in recs:
        if r.config.weight_bits == 4:
            assert not r.feasible and "--quantized-model" in r.reason
    from tuner.core.units import fmt_usd

    text = quantization_verdict(recs, "cheapest", fmt_usd)
    assert text.startswith("Quantization (cheapest): ")
    # like for like: the quantized plan against 16-bit on the same GPU type and count
    quant, _, full = text.partition(" against ")
    gpus_of = [part.split(" (TP")[0].split(": ")[-1] for part in (quant, full)]
    assert gpus_of[0] == gpus_of[1] and "16-bit)" in full
    assert "-bit weights" in quant or "8-bit)" in quant


# ---- the report's cost-vs-deadline curve ------------------------------------------------------
def test_deadline_envelope_is_the_lower_staircase():
    pts = [(10.0, 5.0), (20.0, 3.0), (15.0, 6.0), (30.0, 3.5), (40.0, 1.0)]
    assert deadline_envelope(pts) == [(10.0, 5.0), (20.0, 3.0), (40.0, 1.0)]


def test_deadline_figure_has_a_curve_per_gpu_and_overall(exhaustive):
    trials = {r.number: r for r in exhaustive}
    fig = deadline_figure(trials, gpu_colors(["A10", "A40"]), deadline_s=600.0)
    names = [t.name for t in fig.data]
    assert names == ["A10", "A40", "any GPU"]
    overall = fig.data[-1]
    # non-increasing: a later deadline never costs more
    assert all(a >= b for a, b in zip(overall.y[:-1], overall.y[1:], strict=True))
    assert min(overall.y) == pytest.approx(min(r.cost_usd for r in exhaustive))


# ---- the CLI ---------------------------------------------------------------------------------
def _jsonl(tmp_path: Path, n: int = 32) -> Path:
    w = workload(n)
    path = tmp_path / "job.jsonl"
    path.write_text("".join(json.dumps({"prompt_tokens": int(p), "output_tokens": int(o)}) + "\n"
                            for p, o in zip(w.prompt_tokens, w.output_tokens, strict=True)))
    return path


def test_cli_deadline_budget_max_gpus(tmp_path):
    args = ["search", "-w", str(_jsonl(tmp_path)), "-m", "llama-3-8b", "--gpus", "A10,A40",
            "--space", str(SMALL_SPACE), "--n-trials", "40"]
    r = runner.invoke(app, [*args, "--deadline", "2h", "--max-gpus", "4", "--out",
                            str(tmp_path / "a"), "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert any(v.startswith("Plan: the cheapest that finishes within 2.0 h")
               for v in doc["verdicts"])
    w = doc["winners"]["cheapest"]
    assert w["metrics"]["makespan_s"] <= 7200
    assert w["config"]["tp"] * w["config"]["dp"] <= 4
    r = runner.invoke(app, [*args, "--deadline", "1s", "--out", str(tmp_path / "b")])
    assert isinstance(r.exception, TunerError)  # `tuner` prints it as one line, exit 2
    assert str(r.exception).startswith("no plan finishes within 1 s; fastest is ")
    r = runner.invoke(app, [*args, "--deadline", "soon", "--out", str(tmp_path / "c")])
    assert isinstance(r.exception, TunerError) and "--deadline 'soon'" in str(r.exception)
    r = runner.invoke(app, [*args, "--max-gpus", "H100=2", "--out", str(tmp_path / "d")])
    assert isinstance(r.exception, TunerError) and "H100" in str(r.exception)


def test_report_draws_the_searchs_own_deadline(tmp_path, model, gpus):
    from tuner.reports import figures
    from tuner.reports.outputs import study_outputs
    from tuner.search import load_study

    out = tmp_path / "a"
    w = _jsonl(tmp_path)
    r = runner.invoke(app, ["search", "-w", str(w), "-m", "llama-3-8b", "--gpus", "A10,A40",
                            "--space", str(SMALL_SPACE), "--n-trials", "20",
                            "--deadline", "90m", "--out", str(out), "--json"])
    assert r.exit_code == 0, r.output
    ctx = study_outputs(load_study(None, out_dir=out), load_workload(w), model, gpus,
                        tool_version="test").context
    assert ctx.deadline_s == 5400
    fig = figures.deadline_figure({t.number: t for t in ctx.trials}, {"A10": "#4e79a7", "A40": "#f28e2b"},
                                  ctx.deadline_s)
    lines = [sh for sh in fig.to_dict()["layout"].get("shapes", []) if sh["type"] == "line"]
    assert len(lines) == 1 and lines[0]["x0"] in (5400, 90, 1.5)  # s, min or h
