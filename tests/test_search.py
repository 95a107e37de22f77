"""Tests for tuner.search (study, loop, evaluator) / tuner.search.records: the Optuna study, dedup, resume, kill, constraints."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import optuna
import pytest

import tuner.search.evaluator as evaluator_mod
from tuner.core.catalog import get_model
from tuner.core.errors import TunerError
from tuner.core.workload import Workload
from tuner.search import (
    SearchSettings,
    assert_some_gpu_fits,
    default_storage,
    make_storage,
    run_search,
)
from tuner.search.records import pareto, trial_records, winners
from tuner.search.space import SearchSpace, load_space

COMPLETE = optuna.trial.TrialState.COMPLETE
FIXED = {"scheduler": "vllm", "tp": 1, "dp": 1, "block_size": 16, "ordering": "fcfs"}


def tiny_workload(n: int = 24, seed: int = 0) -> Workload:
    rng = np.random.default_rng(seed)
    return Workload(prompt_tokens=rng.integers(64, 1024, n).astype(np.int64),
                    output_tokens=rng.integers(16, 200, n).astype(np.int64),
                    source="tiny", tokenizer="given", output_source="given")


def tiny_space(**knobs) -> SearchSpace:
    knobs = knobs or {"chunk_size": [512, 2048], "max_running": [16, 64]}
    return SearchSpace(knobs=knobs, fixed=dict(FIXED), source="test")


def complete(study: optuna.Study) -> list[optuna.trial.FrozenTrial]:
    return study.get_trials(deepcopy=False, states=(COMPLETE,))


def test_tiny_grid_search_front_and_winners(model, gpus):
    w, space = tiny_workload(), tiny_space()
    study = run_search(w, model, gpus, space, SearchSettings(n_trials=8, seed=1))
    assert len(study.trials) == 8
    assert all(t.state == COMPLETE for t in study.trials)
    records = trial_records(study)
    assert records and all(r.feasible for r in records)
    assert {r.config.gpu for r in records} <= {"A10", "A40"}

    front = pareto(records)
    by_num = {r.number: r for r in records}
    pts = [(by_num[n].metrics.makespan_s, by_num[n].metrics.cost_usd) for n in front]
    assert pts == sorted(pts)  # sorted by makespan
    for n in front:  # no record dominates a front point
        m = by_num[n].metrics
        for r in records:
            o = r.metrics
            dominates = (o.makespan_s <= m.makespan_s and o.cost_usd <= m.cost_usd
                         and (o.makespan_s < m.makespan_s or o.cost_usd < m.cost_usd))
            assert not dominates, (r.number, n)
    for r in records:  # every point off the front is dominated (or equal) by a front point
        if r.number in front:
            continue
        o = r.metrics
        assert any(by_num[n].metrics.makespan_s <= o.makespan_s
                   and by_num[n].metrics.cost_usd <= o.cost_usd for n in front)

    best, per_gpu = winners(records)
    assert by_num[best["fastest"]].metrics.makespan_s == min(
        r.metrics.makespan_s for r in records)
    assert by_num[best["cheapest"]].metrics.cost_usd == min(
        r.metrics.cost_usd for r in records)
    for gpu, d in per_gpu.items():
        mine = [r for r in records if r.config.gpu == gpu]
        assert by_num[d["fastest"]].metrics.makespan_s == min(
            r.metrics.makespan_s for r in mine)
        assert by_num[d["cheapest"]].metrics.cost_usd == min(
            r.metrics.cost_usd for r in mine)
    # The front's ends are the two winners.
    assert front[0] == best["fastest"]
    assert by_num[front[-1]].metrics.cost_usd == by_num[best["cheapest"]].metrics.cost_usd


def test_duplicates_are_not_resimulated(model, gpus, monkeypatch):
    calls = []
    real = evaluator_mod.simulate

    def counting(workload, model, gpu, config, *a, **k):
        calls.append((gpu.name, config.chunk_size, config.max_running))
        return real(workload, model, gpu, config, *a, **k)

    monkeypatch.setattr(evaluator_mod, "simulate", counting)
    space = tiny_space()
    grid = space.size(len(gpus))
    assert grid == 8
    study = run_search(tiny_workload(), model, gpus, space, SearchSettings(n_trials=20, seed=0))
    assert len(complete(study)) == 20
    assert len(calls) == len(set(calls))  # each distinct config simulated once
    # vLLM's defaults, which this space does not hold, are simulated beside it (once each)
    records = [r for r in trial_records(study) if not r.engine_defaults]
    calls = [c for c in calls if c[1] in space.knobs["chunk_size"]
             and c[2] in space.knobs["max_running"]]
    assert len(calls) <= grid
    dups = [t for t in complete(study) if t.user_attrs.get("duplicate")]
    assert len(dups) == 20 - len(calls)
    assert len(records) == len(calls)  # duplicates are left out of the records
    for t in dups:  # a duplicate carries the values of the trial it repeats
        same = [o for o in complete(study) if o.params == t.params
                and not o.user_attrs.get("duplicate")]
        assert len(same) == 1 and same[0].values == t.values


@pytest.mark.parametrize("kind", ["journal", "sqlite"])
def test_resume_keeps_trials_and_refuses_silent_reuse(model, gpus, tmp_path, kind):
    # The embedded default (journal file) and an explicit SQLite URL behave the same.
    storage = (default_storage(tmp_path) if kind == "journal"
               else f"sqlite:///{tmp_path / 'study.db'}")
    w = tiny_workload()
    space = tiny_space(chunk_size=[256, 512, 1024, 2048], max_running=[16, 32, 64])
    s1 = run_search(w, model, gpus, space,
                    SearchSettings(n_trials=6, seed=0, storage=storage, study_name="s"))
    first = [(t.number, t.params, t.values, t.user_attrs) for t in complete(s1)]
    assert len(first) == 6

    s2 = run_search(w, model, gpus, space, SearchSettings(n_trials=10, seed=0, storage=storage,
                                                          study_name="s", resume=True))
    done = complete(s2)
    assert len(done) == 10
    again = [(t.number, t.params, t.values, t.user_attrs) for t in done[:6]]
    assert again == first
    # Trials 0-3 are the enqueued presets, 4-5 the sampler's first draws: a resumed sampler
    # must not replay those draws (each replay is a wasted duplicate trial).
    assert [t.params for t in done[6:8]] != [t.params for t in done[4:6]]

    with pytest.raises(TunerError, match="--resume"):
        run_search(w, model, gpus, space,
                   SearchSettings(n_trials=12, seed=0, storage=storage, study_name="s"))
    # The refused run did not add trials.
    assert len(complete(optuna.load_study(study_name="s", storage=make_storage(storage)))) == 10


def test_infeasible_points_are_constraints_not_crashes(model, gpus):
    # llama-3-8b's 16-bit weights (15 GiB) do not fit in 24 GiB x 0.5 on the A10.
    space = tiny_space(chunk_size=[512, 2048], gpu_memory_utilization=[0.9, 0.5])
    space = SearchSpace(knobs=space.knobs, fixed={**space.fixed, "max_running": 64},
                        source="test")
    study = run_search(tiny_workload(), model, {"A10": gpus["A10"]}, space,
                       SearchSettings(n_trials=8, seed=0))
    assert all(t.state == COMPLETE for t in study.trials)
    # the space's own plans (vLLM's defaults, max_running 256, are simulated beside them)
    records = [r for r in trial_records(study) if not r.engine_defaults]
    infeasible = [r for r in records if not r.feasible]
    feasible = [r for r in records if r.feasible]
    assert infeasible and feasible
    for r in infeasible:
        assert r.config.gpu_memory_utilization == 0.5
        assert "does not fit" in r.reason and "GiB" in r.reason
        t = study.trials[r.number]
        assert t.constraints["fits"] > 0
        assert all(math.isinf(v) for v in t.values)
    assert all(r.config.max_running == 64 for r in records)  # the fixed value
    for r in feasible:
        assert r.config.gpu_memory_utilization == 0.9
        assert study.trials[r.number].constraints["fits"] <= 0
    best, _ = winners(records)
    assert best["fastest"] in {r.number for r in feasible}
    assert best["cheapest"] in {r.number for r in feasible}
    assert set(pareto(records)) <= {r.number for r in feasible}


def test_records_carry_the_spaces_fixed_knobs(model, gpus):
    # Without CLI metadata, trial_records must still rebuild configs with the space's fixed
    # values (not the ServingConfig defaults: max_running 256, utilisation 0.9).
    space = SearchSpace(knobs={"chunk_size": [512, 2048]},
                        fixed={"max_running": 32, "gpu_memory_utilization": 0.8}, source="t")
    study = run_search(tiny_workload(), model, {"A10": gpus["A10"]}, space,
                       SearchSettings(n_trials=3))
    for r in trial_records(study):
        if r.engine_defaults:  # vLLM's defaults, simulated beside a space that fixes others
            continue
        assert r.config.max_running == 32
        assert r.config.gpu_memory_utilization == 0.8


def test_assert_some_gpu_fits(model, gpus):
    w = tiny_workload()
    # vllm-v0 cannot chunk prefills: chunk 256 is infeasible but 8192 runs, so the search may
    # start even though the "most lenient" point (smallest chunk) does not run.
    v0 = SearchSpace(knobs={"chunk_size": [256, 8192]}, fixed={"scheduler": "vllm-v0"},
                     source="t")
    assert_some_gpu_fits(w, model, {"A10": gpus["A10"]}, v0)
    with pytest.raises(TunerError, match="GiB") as ei:
        assert_some_gpu_fits(w, get_model("llama-2-70b"), {"A10": gpus["A10"]},
                             tiny_space(weight_bits=[16], chunk_size=[512, 2048]))
    assert "llama-2-70b" in str(ei.value) and "A10" in str(ei.value)


def test_same_seed_same_trials(model, gpus):
    space = tiny_space(chunk_size=[256, 512, 1024, 2048, 4096], max_running=[16, 32, 64, 128],
                       kv_bits=[16, 8])
    w = tiny_workload(12)

    def params(seed):
        st = run_search(w, model, gpus, space, SearchSettings(n_trials=12, seed=seed))
        return [t.params for t in st.trials]

    a, b = params(7), params(7)
    assert a == b
    assert len(a) == 12


def test_unknown_sampler_is_a_tuner_error(model, gpus, tmp_path):
    db = tmp_path / "s.db"
    with pytest.raises(TunerError, match="sampler") as ei:
        run_search(tiny_workload(), model, gpus, tiny_space(),
                   SearchSettings(n_trials=2, sampler="bogus", storage=f"sqlite:///{db}"))
    assert "Cannot create study" not in str(ei.value)
    assert not db.exists()


@pytest.mark.parametrize("text, needle", [
    ("[a, b]\n", "mapping"),
    ("hello\n", "mapping"),
    ("knobs: [chunk_size]\n", "'knobs:' must be a mapping"),
    ("fixed: 3\n", "'fixed:' must be a mapping"),
    ("knobs:\n  chunk_size: 512\n", "non-empty list"),
    ("knobs:\n  chunk_size: []\n", "non-empty list"),
    ("knobs:\n  gpu: [A10]\n", "GPUs come from --gpus"),
    ("knobs:\n  chunk_size: [512]\nfixd:\n  tp: 1\n", "unknown section"),
    ("knobs:\n  chunk_size: [512]\nfixed:\n  chunk_size: 512\n", "both searched and fixed"),
    ("knobs:\n  chunk_size: [abc]\n", "chunk_size='abc': expected int"),
    ("knobs:\n  max_running: [1.5]\n", "max_running=1.5: expected int"),
    ("fixed:\n  tp: two\n", "tp='two': expected int"),
    ("fixed:\n  tp: 3\n", "tp=3"),
    ("knobs:\n  weight_bits: [16, 3]\n", "weight_bits=3"),
    ("knobs:\n  scheduler: [vllm, fifo]\n", "scheduler='fifo'"),
    ("knobs: {chunk_size: [512\n", "not valid YAML"),
])
def test_load_space_rejects_malformed(tmp_path, text, needle):
    path = tmp_path / "space.yaml"
    path.write_text(text)
    with pytest.raises(TunerError) as ei:
        load_space(path)
    msg = str(ei.value)
    assert needle in msg and str(path) in msg
    assert "\n" not in msg


def test_shipped_spaces_load(model, gpus):
    from tuner.search.loop import search_space

    for name in ("default", "quality"):
        space = load_space(Path(__file__).resolve().parents[1] / "search_spaces" / f"{name}.yaml")
        if not space.resolved:  # tp/dp auto: fitted to the job's GPUs and model first
            with pytest.raises(TunerError, match="auto"):
                space.size(2)
            space, _ = search_space(space, tiny_workload(), model, gpus, SearchSettings())
        assert space.knobs and space.size(2) == 2 * math.prod(map(len, space.knobs.values()))
        assert len(list(space.grid(["A10", "A40"]))) == space.size(2)


# ---- kill -9 in the middle, then --resume ----------------------------------------------------
def _write_big_workload(path: Path, n: int = 300) -> Path:
    rng = np.random.default_rng(3)
    with path.open("w") as fh:
        for p, o in zip(rng.integers(200, 3000, n), rng.integers(50, 600, n), strict=True):
            fh.write(json.dumps({"prompt_tokens": int(p), "output_tokens": int(o)}) + "\n")
    return path


def _complete_snapshot(storage: str, study: str) -> dict[int, tuple]:
    st = optuna.load_study(study_name=study, storage=make_storage(storage))
    return {t.number: (t.params, t.values, t.user_attrs) for t in complete(st)}


@pytest.mark.slow
def test_sigkill_then_resume(tmp_path):
    wl = _write_big_workload(tmp_path / "big.jsonl")
    out = tmp_path / "out"
    storage = f"journal:{out / 'study.journal'}"
    base = [sys.executable, "-m", "tuner.cli", "search", "--workload", str(wl),
            "--model", "llama-3-8b", "--gpus", "A10,A40", "--out", str(out), "--study", "k",
            "--json", "--engines", "vllm"]
    proc = subprocess.Popen(base + ["--n-trials", "400"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        n = 0
        while time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.1)
            try:
                n = len(_complete_snapshot(storage, "k"))
            except Exception:  # noqa: BLE001 - DB or study not there yet, or locked
                continue
            if n >= 5:
                break
        assert proc.poll() is None, "search finished before it could be killed: make it bigger"
        assert n >= 5, proc.stderr.read().decode() if proc.poll() is not None else "too slow"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL

    before = _complete_snapshot(storage, "k")
    assert len(before) >= 5
    # Killed mid-search: no report or export has been written, half or whole; the journal
    # holds only whole lines once reopened (a torn last line is cut, see make_storage).
    assert {p.name for p in out.iterdir()} == {"study.journal"}

    target = len(before) + 4
    r = subprocess.run(base + ["--n-trials", str(target), "--resume"], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr
    summary = json.loads(r.stdout)
    after = _complete_snapshot(storage, "k")
    # --n-trials counts the search's trials; vLLM's defaults beside the winners come on top
    assert len([a for a in after.values() if not a[2].get("vllm_defaults")]) == target
    for number, snap in before.items():
        assert after[number] == snap
    for name in ("report.html", "fastest.vllm.yaml", "cheapest.vllm.yaml", "results.json"):
        assert (out / name).is_file()
    assert summary["winners"]["fastest"]["config"]["gpu"] in {"A10", "A40"}


@pytest.mark.parametrize(("sampler", "n_trials", "stops"), [("nsga2", 240, (50, 131)),
                                                            ("tpe", 120, (37,))])
def test_an_interrupted_search_resumed_gives_the_uninterrupted_front(model, gpus, tmp_path,
                                                                     sampler, n_trials, stops):
    """Issue 26 item 8: a Ctrl-C between trials (here in the middle of an NSGA-II generation,
    population 20), then --resume, proposes the very trials the uninterrupted search does:
    the same configurations in the same order and the same Pareto front."""
    w = tiny_workload(n=200, seed=3)
    space = load_space(None)

    def search(name: str, stop_at: int | None = None, resume: bool = False):
        s = SearchSettings(n_trials=n_trials, seed=0, sampler=sampler, resume=resume,
                           storage=f"journal:{tmp_path / name}.journal", study_name=name)
        seen = [0]

        def on_trial(_study, _trial):
            seen[0] += 1
            if stop_at is not None and seen[0] >= stop_at:
                raise KeyboardInterrupt  # what Ctrl-C raises between trials

        try:
            return run_search(w, model, gpus, space, s, on_trial=on_trial)
        except KeyboardInterrupt:
            return None

    def trials(study):
        return [(t.number, t.params, t.values) for t in complete(study)]

    def front(study):
        recs = trial_records(study)
        keep = set(pareto(recs))
        return sorted((r.makespan_s, r.cost_usd, str(r.config)) for r in recs if r.number in keep)

    ref = search("ref")
    for k in stops:
        assert search(f"cut{k}", stop_at=k) is None
        resumed = search(f"cut{k}", resume=True)
        assert trials(resumed) == trials(ref)
        assert front(resumed) == front(ref)


def test_nsga2_parent_population_is_in_trial_order_computed_or_cached():
    from tuner.search.settings import OrderedNSGAII

    study = optuna.create_study(directions=["minimize", "minimize"],
                                sampler=OrderedNSGAII(seed=0, population_size=4))
    rng = np.random.default_rng(0)
    study.optimize(lambda t: (t.suggest_float("x", 0, 1) + rng.random(),
                              t.suggest_float("y", 0, 1) + rng.random()), n_trials=12)
    s = study.sampler
    fresh = s.get_parent_population(study, 2)  # cached by the search: read back
    numbers = [t.number for t in fresh]
    assert numbers == sorted(numbers) and len(numbers) == 4
    study2 = optuna.create_study(directions=["minimize", "minimize"])
    study2.add_trials(study.get_trials(deepcopy=False))  # no cache: computed afresh
    recomputed = OrderedNSGAII(seed=0, population_size=4).get_parent_population(study2, 2)
    assert [t.number for t in recomputed] == numbers
