"""tuner.reports.extras: winners' timelines, Optuna importances and export snippets for the report."""

from __future__ import annotations

import json

import numpy as np
import optuna
import pytest

from tuner.core.catalog import get_model, load_gpus
from tuner.core.workload import Workload
from tuner.exports import EXPORT_FORMATS, parse_export
from tuner.reports.extras import (
    batch_paths,
    downsample_timeline,
    openai_batch_info,
    param_importances,
    report_extras,
    winner_roles,
    winner_timelines,
)
from tuner.search import SearchSettings, run_search
from tuner.search.records import trial_records, winners
from tuner.search.space import SearchSpace

FIXED = {"scheduler": "vllm", "tp": 1, "dp": 1, "block_size": 16, "ordering": "fcfs"}


def tiny_workload(n: int = 30, seed: int = 0) -> Workload:
    rng = np.random.default_rng(seed)
    return Workload(prompt_tokens=rng.integers(64, 1500, n).astype(np.int64),
                    output_tokens=rng.integers(16, 300, n).astype(np.int64),
                    source="tiny.jsonl", tokenizer="given", output_source="given")


@pytest.fixture(scope="module")
def setting():
    cat = load_gpus()
    return tiny_workload(), get_model("llama-3-8b"), {"A10": cat["A10"], "A40": cat["A40"]}


@pytest.fixture(scope="module")
def study(setting):
    w, model, gpus = setting
    space = SearchSpace(knobs={"chunk_size": [512, 1024, 2048, 4096],
                               "max_running": [8, 16, 32, 64], "kv_bits": [16, 8]},
                        fixed=dict(FIXED), source="test")
    return run_search(w, model, gpus, space, SearchSettings(n_trials=24, seed=3),
                      metadata={"workload": "tiny.jsonl", "model": model.name,
                                "gpus": list(gpus)})


# ---- timelines ---------------------------------------------------------------------------------
def _steps(n: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    dt = rng.uniform(0.01, 0.2, n)
    return {"time_s": np.cumsum(dt), "running": rng.integers(0, 64, n),
            "prefill_tokens": rng.integers(0, 2048, n), "decode_tokens": rng.integers(0, 64, n),
            "kv_fraction": rng.uniform(0, 1, n), "preemptions": (rng.random(n) < 0.05).astype(int)}


def test_downsample_keeps_short_timelines_and_starts_at_zero():
    tl = _steps(50)
    d = downsample_timeline(tl, points=100)
    assert d["time_s"][0] == 0.0 and len(d["time_s"]) == 50
    assert d["end_s"] == pytest.approx(tl["time_s"][-1])
    assert np.allclose(d["time_s"][1:], tl["time_s"][:-1])
    assert d["running"] == tl["running"].tolist()
    assert d["tokens"] == (tl["prefill_tokens"] + tl["decode_tokens"]).tolist()


def test_downsample_long_timelines_preserves_totals():
    tl = _steps(5000, seed=1)
    d = downsample_timeline(tl, points=200)
    assert 0 < len(d["time_s"]) <= 200 and d["time_s"][0] == 0.0
    assert sum(d["preemptions"]) == int(tl["preemptions"].sum())
    dt = np.diff(np.concatenate([[0.0], tl["time_s"]]))
    edges = np.append(d["time_s"], d["end_s"])
    widths = np.diff(edges)
    # the time integral of running requests is kept (up to the steps that straddle a bin edge,
    # which count in the bin they end in)
    if len(d["time_s"]) == 200:
        assert np.dot(d["running"], widths) == pytest.approx(np.dot(tl["running"], dt),
                                                            rel=1e-2)
    assert all(0.0 <= k <= 1.0 for k in d["kv_fraction"])
    assert downsample_timeline({k: v[:0] for k, v in tl.items()})["time_s"] == []


def test_winner_timelines_match_the_study(setting, study):
    w, model, gpus = setting
    records = trial_records(study)
    tls = winner_timelines(records, w, model, gpus)
    roles = winner_roles(records)
    assert [t["trial"] for t in tls] == list(roles)
    best, _ = winners(records)
    assert "overall fastest" in roles[best["fastest"]]
    by_num = {r.number: r for r in records}
    for t in tls:
        assert "error" not in t
        study_s = by_num[t["trial"]].metrics.makespan_s
        if t["dp"] == 1:
            assert t["makespan_s"] == pytest.approx(study_s)
            ms = t["makespan_s"]
        else:  # replica 0 alone is simulated again: it ends by the plan's makespan
            assert "makespan_s" not in t and t["replica_makespan_s"] <= study_s * (1 + 1e-9)
            ms = t["replica_makespan_s"]
        # the timeline runs from the engines being up: the makespan less the start-up
        assert t["end_s"] == pytest.approx(ms - t["startup_s"])
        assert len(t["time_s"]) == len(t["running"]) == len(t["kv_fraction"])
        assert max(t["running"]) <= by_num[t["trial"]].config.max_running
    # a GPU missing from the catalog is reported, not raised
    tls = winner_timelines(records, w, model, {"A10": gpus["A10"]})
    assert any("error" in t for t in tls)


# ---- importances -------------------------------------------------------------------------------
def test_importances_per_objective(study):
    imp = param_importances(study)
    assert set(imp) == {"makespan_s", "cost_usd"}
    for d in imp.values():
        assert "skipped" not in d, d
        assert set(d["importances"]) <= {"gpu", "chunk_size", "max_running", "kv_bits"}
        assert sum(d["importances"].values()) == pytest.approx(1.0)
        assert d["n_trials"] == len(d["trials"]) >= 8
    feas = {t.number for t in study.trials if t.user_attrs.get("feasible")
            and not t.user_attrs.get("duplicate")}
    assert set(imp["makespan_s"]["trials"]) == feas


def test_importances_guard_small_and_constant_studies(study):
    small = optuna.create_study(directions=study.directions)
    small.add_trials([t for t in study.trials if t.user_attrs.get("feasible")][:3])
    d = param_importances(small)
    assert all("skipped" in v and "only 3" in v["skipped"] for v in d.values())
    # one knob value everywhere (trials chosen by number, so repeats count): nothing varies
    one = optuna.create_study(directions=study.directions)
    t0 = next(t for t in study.trials if t.user_attrs.get("feasible"))
    for i in range(10):
        one.add_trial(optuna.trial.create_trial(
            params=t0.params, distributions=t0.distributions, values=list(t0.values),
            user_attrs={"feasible": True, "n": i}))
    d = param_importances(one, numbers=range(10))
    assert all("single value" in v["skipped"] for v in d.values())
    assert "only 1" in param_importances(one)["makespan_s"]["skipped"]  # repeats dropped
    # every configuration equally fast and cheap: nothing to explain
    flat = optuna.create_study(directions=study.directions)
    for t in [t for t in study.trials if t.user_attrs.get("feasible")
              and not t.user_attrs.get("duplicate")][:10]:
        flat.add_trial(optuna.trial.create_trial(
            params=t.params, distributions=t.distributions, values=[5.0, 1.0],
            user_attrs={"feasible": True}))
    d = param_importances(flat)
    assert all("same in every feasible trial" in v["skipped"] for v in d.values())


# ---- exports and the whole extras --------------------------------------------------------------
def test_openai_batch_info(tmp_path):
    batch = tmp_path / "b.jsonl"
    batch.write_text(json.dumps({"custom_id": "1", "method": "POST", "url": "/v1/chat/completions",
                                 "body": {"model": "m-1", "messages": []}}) + "\n")
    assert openai_batch_info(batch) == (True, "m-1")
    plain = tmp_path / "p.jsonl"
    plain.write_text(json.dumps({"prompt": "x", "max_tokens": 3}) + "\n")
    assert openai_batch_info(plain) == (False, None)
    assert openai_batch_info(tmp_path / "missing.jsonl") == (False, None)
    assert batch_paths("data/arxiv.jsonl") == ("data/arxiv.jsonl", "data/arxiv.results.jsonl")


def test_report_extras(setting, study, tmp_path):
    w, model, gpus = setting
    records = trial_records(study)
    study.set_user_attr("validation", [{"config": records[0].config.to_dict(), "predicted_s": 10.0,
                                        "measured_s": 11.0, "runner": "transformers"}])
    plain = tmp_path / "tiny.jsonl"
    plain.write_text(json.dumps({"prompt_tokens": 5, "output_tokens": 3}) + "\n")
    ex = report_extras(study, records, w, model, gpus, workload_path=str(plain))
    assert {"timelines", "importances", "export_snippets", "validation"} <= set(ex)
    best, _ = winners(records)
    by_num = {r.number: r for r in records}
    for which in ("fastest", "cheapest"):
        snip = ex["export_snippets"][which]
        assert snip["trial"] == best[which]
        want = by_num[best[which]].config
        for fmt in EXPORT_FORMATS:
            text = snip["formats"][fmt]
            assert parse_export(fmt, text) == want
            assert f"trial #{best[which]}" in text
    # the run-batch snippet says when the workload is not an OpenAI batch file
    assert "not an OpenAI Batch API JSONL" in ex["export_snippets"]["fastest"]["formats"][
        "vllm-run-batch"]
    assert ex["validation"][0]["runner"] == "transformers"


def test_importances_count_only_the_trials_of_the_latest_space(study):
    """A study resumed with another space: the trials the latest space cannot express are
    dropped before the minimum is checked, not after."""
    mixed = optuna.create_study(directions=study.directions)
    feasible = [t for t in study.trials if t.user_attrs.get("feasible")
                and not t.user_attrs.get("duplicate")][:10]
    mixed.add_trials(feasible)
    last = feasible[-1]
    dists = dict(last.distributions)
    dists["chunk_size"] = optuna.distributions.CategoricalDistribution((123457,))
    mixed.add_trial(optuna.trial.create_trial(
        params={**last.params, "chunk_size": 123457}, distributions=dists,
        values=[v * 1.01 for v in last.values], user_attrs={"feasible": True}))
    d = param_importances(mixed)
    assert all("latest search space" in v["skipped"] and v["n_trials"] == 1 for v in d.values())
