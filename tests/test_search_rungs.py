"""Large jobs (issue #29): the sample's cap, the reference rung between the sample and the
full job, threads for independent simulations, and the same answer as simulating everything
in full."""

from __future__ import annotations

import threading

import numpy as np
import optuna
import pytest

import tuner.search.baseline as baseline_mod
import tuner.sim.parallel as parallel_mod
import tuner.sim.scheduler as sch
from tuner.core.catalog import load_gpus
from tuner.core.config import ServingConfig
from tuner.core.workload import Workload
from tuner.predictors.sources import resolve_cost_model
from tuner.search import SearchSettings, run_search
from tuner.search.evaluator import (
    MAX_SAMPLE,
    RUNG_FACTOR,
    RUNG_MIN_JOBS,
    rung_size,
    sample_size,
)
from tuner.search.loop import FRONT_TOLERANCE
from tuner.search.records import search_stats, trial_records
from tuner.search.space import SearchSpace
from tuner.sim.parallel import thread_map
from tuner.sim.simulator import simulate

COMPLETE = optuna.trial.TrialState.COMPLETE
FIXED = {"scheduler": "vllm", "tp": 1, "block_size": 16, "ordering": "fcfs", "weight_bits": 16}


def workload(n: int, seed: int = 0) -> Workload:
    rng = np.random.default_rng(seed)
    return Workload(prompt_tokens=rng.integers(64, 1500, n).astype(np.int64),
                    output_tokens=rng.integers(16, 300, n).astype(np.int64),
                    source="synthetic", tokenizer="given", output_source="given")


def space() -> SearchSpace:
    knobs = {"chunk_size": [512, 2048, 8192], "max_running": [32, 128, 256], "dp": [1, 2, 4]}
    return SearchSpace(knobs=knobs, fixed=FIXED, source="test")


@pytest.fixture(scope="module")
def gpus():
    cat = load_gpus()
    return {"A10": cat["A10"], "A40": cat["A40"]}


def test_the_sample_is_capped_and_the_rung_sits_between_it_and_the_job():
    assert sample_size(60_000, None) == 7_500
    assert sample_size(1_000_000, None) == MAX_SAMPLE  # 12.5 % would be 125,000
    assert sample_size(1_000_000, 0.5) == 500_000  # a fraction given is taken as it is
    # the rung: RUNG_FACTOR x the sample, where the job holds RUNG_MIN_JOBS of them
    assert rung_size(1_000_000, MAX_SAMPLE) == RUNG_FACTOR * MAX_SAMPLE
    assert rung_size(6000, 750) == 3000
    small = int(RUNG_MIN_JOBS * RUNG_FACTOR * 300) - 1
    assert rung_size(small, 300) == small  # too close to the job: the job is the reference
    assert rung_size(400, 400) == 400  # no sample, no rung


@pytest.fixture(scope="module")
def rung_study(model, gpus):
    w = workload(6000, seed=3)
    st = run_search(w, model, gpus, space(), SearchSettings(n_trials=60, seed=1))
    return w, st


def test_a_large_job_is_judged_on_the_rung_and_only_the_front_in_full(rung_study):
    _w, st = rung_study
    stats = search_stats(st)
    assert stats["sample_requests"] == 750 and stats["rung_requests"] == 3000
    assert stats["judged_on_rung"] > 0
    assert stats["rung_error"]["pairs"] >= 1 and stats["rung_error"]["max"] < 0.05
    done = [t for t in st.get_trials(deepcopy=False, states=(COMPLETE,))
            if not t.user_attrs.get("duplicate")]
    levels = {t.user_attrs["fidelity"]["level"] for t in done}
    assert levels == {"sample", "rung", "full"}
    # winners, fronts and exports come from full simulations only
    assert all(r.level == "full" for r in trial_records(st))
    # the screening's promotions (calibration, audits) ran on the rung, not the full job
    promoted = [t for t in done[:40] if t.user_attrs["fidelity"].get("promoted")
                in ("calibration", "audit")]
    assert promoted and all(t.user_attrs["fidelity"]["level"] in ("rung", "full")
                            and t.user_attrs["fidelity"].get("rung_requests") for t in promoted)
    # a configuration left on the rung: a full simulation of its GPU matches it within the
    # tolerance, or another point beats it beyond the rung's error
    full = [t for t in done if t.user_attrs["fidelity"]["level"] == "full"
            and t.user_attrs.get("feasible")]
    by_key: dict = {}
    for t in done:
        key = tuple(sorted(t.params.items()))
        if key not in by_key or by_key[key].number < t.number:
            by_key[key] = t
    for t in by_key.values():
        if t.user_attrs["fidelity"]["level"] != "rung" or not t.user_attrs.get("feasible"):
            continue
        eps = 0.05
        assert any(o.params["gpu"] == t.params["gpu"]
                   and o.values[0] <= t.values[0] * (1 + max(FRONT_TOLERANCE, eps))
                   and o.values[1] <= t.values[1] * (1 + max(FRONT_TOLERANCE, eps))
                   for o in full), t.number


def test_the_rung_search_gives_the_exhaustive_answer(rung_study, model, gpus):
    w, st = rung_study
    grid = [r for r in trial_records(run_search(w, model, gpus, space(),
                                                SearchSettings(exhaustive=True)))
            if r.feasible]
    recs = [r for r in trial_records(st) if r.feasible]
    for obj in ("makespan_s", "cost_usd"):
        best = min(getattr(r.metrics, obj) for r in grid)
        assert min(getattr(r.metrics, obj) for r in recs) <= best * 1.01, obj


def test_the_defaults_beside_the_winners_are_full_simulations(rung_study, model, gpus,
                                                              monkeypatch):
    """add_default_trials simulates vLLM's defaults in full even where the search screened
    them on the sample first (its first preset): the report's baselines then need none."""
    w, st = rung_study
    defaults = [t for t in st.get_trials(deepcopy=False, states=(COMPLETE,))
                if t.user_attrs.get("vllm_defaults")]
    assert defaults and all(t.user_attrs["fidelity"]["level"] == "full" for t in defaults)
    calls = []
    monkeypatch.setattr(baseline_mod, "simulate", lambda *a, **k: calls.append(a[3]))
    recs = trial_records(st)
    best = min((r for r in recs if r.feasible), key=lambda r: r.makespan_s)
    baseline_mod.attach_baselines(recs, [best.number], w, model, gpus)
    assert calls == []


def test_replicas_on_threads_give_the_same_figures(model, gpus, monkeypatch):
    w = workload(3000, seed=5)
    cfg = ServingConfig(gpu="A40", dp=4, chunk_size=2048, max_running=64, **{
        k: v for k, v in FIXED.items() if k != "weight_bits"})
    cm = resolve_cost_model(model, gpus["A40"], cfg)
    runs = []
    for threshold in (10 ** 9, 0):  # one thread, then a thread per core
        monkeypatch.setattr(parallel_mod, "PARALLEL_MIN_REQUESTS", threshold)
        runs.append(simulate(w, model, gpus["A40"], cfg, cm, timeline=True, return_steps=True))
    a, b = runs
    assert a.makespan_s == b.makespan_s and a.iterations == b.iterations
    assert a.mean_kv_fraction == b.mean_kv_fraction and a.cost_usd == b.cost_usd
    assert all(np.array_equal(x, y) for x, y in zip(a.steps, b.steps, strict=True))
    assert np.array_equal(a.timeline["time_s"], b.timeline["time_s"])


def test_thread_map_keeps_order_and_stops_the_others_on_an_error():
    assert thread_map(lambda x: x * x, list(range(20)), 4) == [x * x for x in range(20)]
    stopped = threading.Event()

    def fn(x):
        if x == 3:
            raise ValueError("boom")
        return x

    with pytest.raises(ValueError, match="boom"):
        thread_map(fn, list(range(8)), 2, on_error=stopped.set)
    assert stopped.is_set()


def test_a_cancelled_schedule_stops_at_its_next_pause(monkeypatch):
    """A replica on a worker thread never sees Ctrl-C: the main thread sets the event and the
    C loop's next pause raises KeyboardInterrupt there."""
    monkeypatch.setattr(sch, "_PAUSE_EVERY_STEPS", 16)
    params = sch.preset("vllm", token_budget=64, max_running=4, block_size=16,
                        capacity_blocks=10_000)
    prompt, output = np.full(50, 100), np.full(50, 200)
    done = sch.run_schedule(prompt, output, params, cancel=threading.Event())
    assert done.status == sch.STATUS_OK
    cancel = threading.Event()
    cancel.set()
    with pytest.raises(KeyboardInterrupt):
        sch.run_schedule(prompt, output, params, cancel=cancel)


def test_threads_only_for_jobs_that_gain_and_fit():
    from tuner.sim.parallel import (
        PARALLEL_MIN_REQUESTS,
        PARALLEL_REQUEST_BUDGET,
        parallel_workers,
    )

    assert parallel_workers(1, 100_000) == 1
    assert parallel_workers(8, PARALLEL_MIN_REQUESTS - 1) == 1
    assert parallel_workers(8, PARALLEL_REQUEST_BUDGET) == 1  # memory: one at a time
    assert 1 <= parallel_workers(8, 100_000) <= 8


def test_a_capped_timeline_draws_what_the_full_one_draws(model, gpus):
    """simulate(timeline_rows=K) merges consecutive steps (time-weighted) past 2K rows: the
    report's 400 points come out as from every step, in a fraction of the memory."""
    from tuner.reports.extras import downsample_timeline

    w = workload(4000, seed=7)
    cfg = ServingConfig(gpu="A10", chunk_size=512, max_running=64, **{
        k: v for k, v in FIXED.items() if k != "weight_bits"})
    cm = resolve_cost_model(model, gpus["A10"], cfg)
    full = simulate(w, model, gpus["A10"], cfg, cm, timeline=True)
    capped = simulate(w, model, gpus["A10"], cfg, cm, timeline=True, timeline_rows=500)
    assert len(full.timeline["time_s"]) > 4 * 500 >= len(capped.timeline["time_s"])
    assert capped.makespan_s == full.makespan_s
    a, b = (downsample_timeline(r.timeline, 100) for r in (full, capped))
    assert b["end_s"] == pytest.approx(a["end_s"])
    assert sum(b["preemptions"]) == sum(a["preemptions"])
    for k in ("running", "tokens", "kv_fraction"):
        assert np.mean(b[k]) == pytest.approx(np.mean(a[k]), rel=0.02), k
        # a bin's value moves by the share of a merged row on either side of its edge: up to
        # ~12 % of the peak where the KV-bound run's token rate swings step to step
        assert np.max(np.abs(np.array(b[k]) - np.array(a[k]))) <= 0.15 * max(np.max(a[k]), 1e-9), k
