"""Search at scale (issue 6): multi-fidelity, exhaustive grid, polish, study metadata, workers on
one embedded (journal) study, `tuner worker` and `tuner results`, the embedded storage."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import optuna
import pytest

import tuner.search.evaluator as evaluator_mod
from tuner.core.catalog import load_gpus
from tuner.core.errors import TunerError
from tuner.core.workload import Workload
from tuner.search import (
    N_CALIBRATE,
    SearchSettings,
    default_storage,
    load_study,
    make_storage,
    neighbours,
    run_search,
    sample_size,
    setup_from_study,
    stratified_sample,
    workload_digest,
)
from tuner.search.constraints import Constraints
from tuner.search.records import search_stats, trial_records
from tuner.search.space import SearchSpace

COMPLETE = optuna.trial.TrialState.COMPLETE
REPO = Path(__file__).resolve().parents[1]
FIXED = {"scheduler": "vllm", "tp": 1, "dp": 1, "block_size": 16, "ordering": "fcfs"}


def workload(n: int, seed: int = 0) -> Workload:
    rng = np.random.default_rng(seed)
    return Workload(prompt_tokens=rng.integers(64, 2000, n).astype(np.int64),
                    output_tokens=rng.integers(16, 400, n).astype(np.int64),
                    source="synthetic", tokenizer="given", output_source="given")


def space(**knobs) -> SearchSpace:
    knobs = knobs or {"chunk_size": [512, 2048, 8192], "max_running": [16, 64, 256],
                      "weight_bits": [16, 8]}
    return SearchSpace(knobs=knobs, fixed={k: v for k, v in FIXED.items() if k not in knobs},
                       source="test")


@pytest.fixture(scope="module")
def gpus():
    cat = load_gpus()
    return {"A10": cat["A10"], "H100": cat["H100"]}


def tuner_cli(*args, timeout: float = 600) -> subprocess.CompletedProcess:
    # generous: worker processes on a loaded 2-core CI machine are slow, not wrong
    env = dict(os.environ, COLUMNS="200")
    return subprocess.run([sys.executable, "-m", "tuner.cli", *map(str, args)],
                          capture_output=True, text=True, timeout=timeout, cwd=REPO, env=env)


# A quantized checkpoint is given, so no low-bit point is left out before simulating
# (tuner.search.constraints): these tests check the search mechanics over every point.
WITH_CHECKPOINT = Constraints(quantized_model="org/llama-3-8b-quantized")


# ---- the stratified sample ---------------------------------------------------------------------
def test_stratified_sample_is_proportional_deterministic_and_keeps_the_longest():
    w = workload(3000, seed=4)
    idx = stratified_sample(w, 300)
    assert len(idx) == 300 and len(set(idx.tolist())) == 300
    assert np.all(np.diff(idx) > 0)
    assert int(np.argmax(w.prompt_tokens + w.output_tokens)) in idx
    assert np.array_equal(idx, stratified_sample(w, 300))  # fixed seed
    assert not np.array_equal(idx, stratified_sample(w, 300, seed=1))
    # Proportional strata: the sample's length distribution matches the workload's.
    for col in (w.prompt_tokens, w.output_tokens):
        for q in (0.1, 0.5, 0.9):
            assert abs(np.quantile(col[idx], q) / np.quantile(col, q) - 1) < 0.08
    assert np.array_equal(stratified_sample(w, 5000), np.arange(3000))


def test_sample_size_auto_and_explicit():
    assert sample_size(400, None) == 400  # small jobs: full workload only
    assert sample_size(2048, None) == 512
    assert sample_size(28_000, None) == 3500
    assert sample_size(400, 0.25) == 100
    assert sample_size(400, 1.0) == 400 and sample_size(400, 0.0) == 400


# ---- multi-fidelity ----------------------------------------------------------------------------
def test_multi_fidelity_screens_promotes_and_measures_its_error(model, gpus, monkeypatch):
    w = workload(1200, seed=1)
    sp = space(chunk_size=[512, 1024, 2048, 4096, 8192], max_running=[16, 32, 64, 128, 256],
               weight_bits=[16, 8])
    sizes = []
    real = evaluator_mod.simulate

    def counting(wl, *a, **k):
        sizes.append(len(wl))
        return real(wl, *a, **k)

    monkeypatch.setattr(evaluator_mod, "simulate", counting)
    st = run_search(w, model, gpus, sp, SearchSettings(n_trials=80, seed=3, sample_fraction=0.25,
                                                       constraints=WITH_CHECKPOINT))
    stats = search_stats(st)
    assert stats["sample_requests"] == 300 and stats["sample_scale"] == pytest.approx(4.0)
    assert stats["screened_on_sample"] > 0
    assert stats["full_simulations"] + stats["screened_on_sample"] == stats["configurations"]
    assert sizes.count(300) == stats["configurations"]  # every candidate: the sample first
    # then the promoted ones in full, and vLLM's defaults on the H100 (16,384 / 1,024), which
    # this space does not hold, beside them
    outside = st.user_attrs.get("engine_defaults_outside_space") or []
    assert sizes.count(1200) == stats["full_simulations"] + len(outside)
    se = stats["sampling_error"]
    assert se["pairs"] >= N_CALIBRATE and se["audited"] >= 1
    assert 0 <= se["relative_error"]["median"] <= se["relative_error"]["max"] < 1
    # Records (winners, front, exports) hold full-workload simulations only.
    recs = trial_records(st)
    assert len(recs) == stats["full_simulations"] + len(outside)
    done = st.get_trials(deepcopy=False, states=(COMPLETE,))
    finals = {tuple(sorted(t.params.items())) for t in done if t.user_attrs.get("final_candidate")}
    assert stats["final_candidates"] == len(finals)
    for t in done:
        fid = t.user_attrs["fidelity"]
        if t.user_attrs.get("duplicate") or fid["level"] == "full":
            continue
        eps = fid["eps"]
        est = t.values
        if fid.get("candidate"):
            # deferred near a front: simulated in full at the end, or by then dominated by
            # another configuration of its GPU type (tuner.search.loop.final_candidates)
            assert tuple(sorted(t.params.items())) in finals or any(
                o.number != t.number and o.params["gpu"] == t.params["gpu"]
                and o.user_attrs.get("feasible") and o.values[0] <= est[0]
                and o.values[1] <= est[1] for o in done), t.number
            continue
        # A screened config was epsilon-dominated by a full simulation of its GPU type made
        # before it, with the error bound of that moment.
        earlier = [o for o in st.trials[: t.number]
                   if o.state == COMPLETE and not o.user_attrs.get("duplicate")
                   and o.user_attrs["fidelity"]["level"] == "full"
                   and o.user_attrs["feasible"] and o.params["gpu"] == t.params["gpu"]]
        assert any(o.values[0] * (1 + eps) <= est[0] and o.values[1] * (1 + eps) <= est[1]
                   for o in earlier), t.number


def test_multi_fidelity_finds_the_grids_best(model, gpus):
    w = workload(1200, seed=2)
    sp = space(chunk_size=[512, 2048, 8192], max_running=[16, 64, 256], weight_bits=[16, 8])
    grid = trial_records(run_search(w, model, gpus, sp, SearchSettings(exhaustive=True)))
    assert len(grid) == sp.size(2)
    st = run_search(w, model, gpus, sp, SearchSettings(n_trials=60, seed=0, sample_fraction=0.25))
    recs = trial_records(st)
    for obj in ("makespan_s", "cost_usd"):
        best = min(getattr(r.metrics, obj) for r in grid if r.feasible)
        assert min(getattr(r.metrics, obj) for r in recs if r.feasible) == pytest.approx(best)


# ---- exhaustive --------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["journal", "sqlite"])
def test_exhaustive_covers_the_grid_once_and_resumes(model, gpus, tmp_path, kind):
    w = workload(60)
    sp = space(chunk_size=[512, 2048], max_running=[16, 64], kv_bits=[16, 8])
    storage = (default_storage(tmp_path) if kind == "journal"
               else f"sqlite:///{tmp_path / 's.db'}")
    st = run_search(w, model, gpus, sp, SearchSettings(exhaustive=True, storage=storage,
                                                        study_name="g", timeout_s=0.0))
    assert len(st.trials) == 0  # timeout 0: nothing simulated
    st = run_search(w, model, gpus, sp, SearchSettings(exhaustive=True, storage=storage,
                                                        study_name="g", resume=True))
    again = run_search(w, model, gpus, sp, SearchSettings(exhaustive=True, storage=storage,
                                                           study_name="g", resume=True))
    assert len(again.trials) == len(st.trials) == sp.size(2)
    configs = [tuple(sorted(t.params.items())) for t in again.trials]
    assert len(set(configs)) == len(configs)
    assert all(t.state == COMPLETE for t in again.trials)
    assert {r.config.gpu for r in trial_records(again)} == {"A10", "H100"}


# ---- polish ------------------------------------------------------------------------------------
def test_polish_enqueues_neighbours_of_the_bests(model, gpus):
    # 1-knob neighbours of the incumbents are simulated after the sampler's share of the
    # budget, so the final best is a local optimum: none of its neighbours is better.
    w = workload(40)
    sp = space(chunk_size=[256, 512, 1024, 2048, 4096], max_running=[16, 32, 64, 128],
               weight_bits=[16, 8, 4], kv_bits=[16, 8])
    st = run_search(w, model, gpus, sp, SearchSettings(n_trials=120, seed=5,
                                                       constraints=WITH_CHECKPOINT))
    recs = {tuple(sorted((k, getattr(r.config, k)) for k in ("gpu", *sp.knobs))): r
            for r in trial_records(st) if r.feasible}
    for obj in ("makespan_s", "cost_usd"):
        key, best = min(recs.items(), key=lambda kv: getattr(kv[1].metrics, obj))
        for nb in neighbours(key, sp, list(gpus)):
            nk = tuple(sorted(nb.items()))
            assert nk in recs, nb  # every neighbour was simulated
            assert getattr(recs[nk].metrics, obj) >= getattr(best.metrics, obj)


def test_presets_include_vllm_defaults(model, gpus):
    sp = space(chunk_size=[512, 8192], max_running=[64, 256], scheduler=["vllm", "sarathi"])
    st = run_search(workload(30), model, gpus, sp, SearchSettings(n_trials=4))
    first = [t.params for t in st.trials[:4]]
    assert {"gpu": "A10", "chunk_size": 8192, "max_running": 256, "scheduler": "vllm"} in first
    # Sarathi's R_max 128 is not offered: the knob takes vLLM's default (256) instead.
    assert {"gpu": "H100", "chunk_size": 512, "max_running": 256,
            "scheduler": "sarathi"} in first


# ---- metadata: what workers and `tuner results` rebuild --------------------------------------
def test_setup_from_study_rebuilds_the_search(model, gpus, tmp_path):
    w = workload(50)
    sp = space()
    storage = f"sqlite:///{tmp_path / 's.db'}"
    run_search(w, model, gpus, sp, SearchSettings(n_trials=3, storage=storage, study_name="m",
                                                  sampler="nsga2", seed=4))
    st = optuna.load_study(study_name="m", storage=storage)
    setup = setup_from_study(st)
    assert workload_digest(setup.workload) == workload_digest(w)
    assert setup.model == model
    assert setup.gpus == gpus
    assert setup.space.knobs == sp.knobs and setup.space.fixed == sp.fixed
    assert setup.settings.sampler == "nsga2" and setup.settings.n_trials == 3
    # A workload file that is not the study's is refused, not silently mixed in.
    other = tmp_path / "other.jsonl"
    other.write_text("".join(json.dumps({"prompt_tokens": 10, "output_tokens": 5}) + "\n"
                             for _ in range(50)))
    with pytest.raises(TunerError, match="does not match"):
        setup_from_study(st, workload_path=other)


def test_resume_with_other_inputs_is_refused(model, gpus, tmp_path):
    storage = f"sqlite:///{tmp_path / 's.db'}"
    sp = space()
    run_search(workload(50), model, gpus, sp,
               SearchSettings(n_trials=3, storage=storage, study_name="r"))
    with pytest.raises(TunerError, match="another workload"):
        run_search(workload(50, seed=9), model, gpus, sp,
                   SearchSettings(n_trials=6, storage=storage, study_name="r", resume=True))
    with pytest.raises(TunerError, match="another search space"):
        run_search(workload(50), model, gpus, space(chunk_size=[512]),
                   SearchSettings(n_trials=6, storage=storage, study_name="r", resume=True))
    # More trials for the same search: fine, and the stored target follows (for workers).
    st = run_search(workload(50), model, gpus, sp,
                    SearchSettings(n_trials=6, storage=storage, study_name="r", resume=True))
    assert st.user_attrs["metadata"]["search"]["n_trials"] == 6


@pytest.mark.parametrize("kind", ["journal", "sqlite"])
def test_killed_search_leaves_no_running_trial(model, gpus, tmp_path, kind):
    # The single-process search persists finished trials whole: the study never holds a
    # RUNNING (or WAITING) trial, so a kill leaves nothing half-written behind.
    storage = (default_storage(tmp_path) if kind == "journal"
               else f"sqlite:///{tmp_path / 's.db'}")
    calls = []

    def stop(study, trial):
        calls.append(trial.number)
        if len(calls) == 5:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_search(workload(50), model, gpus, space(),
                   SearchSettings(n_trials=12, storage=storage, study_name="k"), on_trial=stop)
    st = optuna.load_study(study_name="k", storage=make_storage(storage))
    assert [t.state for t in st.trials] == [COMPLETE] * 5


# ---- CLI: --workers on SQLite, `tuner worker`, `tuner results`, --exhaustive ------------------
def _write(path: Path, w: Workload) -> Path:
    with path.open("w") as fh:
        for p, o in zip(w.prompt_tokens, w.output_tokens, strict=True):
            fh.write(json.dumps({"prompt_tokens": int(p), "output_tokens": int(o)}) + "\n")
    return path


@pytest.fixture(scope="module")
def small_space(tmp_path_factory) -> Path:
    p = tmp_path_factory.mktemp("space") / "space.yaml"
    p.write_text("knobs:\n  chunk_size: [512, 2048, 8192]\n  max_running: [16, 64, 256]\n"
                 "  kv_bits: [16, 8]\nfixed:\n  tp: 1\n")
    return p


@pytest.mark.slow
def test_cli_workers_share_one_journal_study_then_results(tmp_path, small_space):
    wl = _write(tmp_path / "w.jsonl", workload(80))
    out = tmp_path / "out"
    r = tuner_cli("search", "-w", wl, "-m", "llama-3-8b", "--gpus", "A10,H100", "--space",
                  small_space, "--n-trials", "30", "--workers", "2", "--out", out, "--json")
    assert r.returncode == 0, r.stderr
    summary = json.loads(r.stdout)
    st = load_study(summary["study"], out_dir=out)
    states = [t.state for t in st.trials]
    assert states.count(COMPLETE) >= 30  # workers stop once the study has its trials
    # nothing lost half-way (RUNNING / FAIL). A worker that starts a trial after the other
    # filled the budget prunes it unsimulated (loop._over_budget): at most one per worker.
    extra = [t for t in st.trials if t.state != COMPLETE]
    assert all(t.state == optuna.trial.TrialState.PRUNED and t.user_attrs.get("over_budget")
               for t in extra), [(t.number, t.state.name) for t in extra]
    assert len(extra) <= 2
    assert sorted(t.number for t in st.trials) == list(range(len(st.trials)))
    recs = trial_records(st)
    keys = [json.dumps(r.config.to_dict(), sort_keys=True) for r in recs]
    assert len(keys) == len(set(keys))
    # `tuner results` prints and exports the same answer from the stored study alone, with
    # or without such a pruned trial in it (the race is rare: add one to be sure).
    first = st.trials[0]
    st.add_trial(optuna.trial.create_trial(
        state=optuna.trial.TrialState.PRUNED, params=first.params,
        distributions=first.distributions, user_attrs={"over_budget": True}))
    again = tuner_cli("results", "--out", out, "--json")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["winners"] == summary["winners"]
    human = tuner_cli("results", "--out", out)
    assert human.returncode == 0 and "Pareto front" in human.stdout
    assert "Parameter importance" in human.stdout or "importances skipped" in human.stdout


def test_cli_worker_needs_a_study_with_metadata(tmp_path):
    storage = f"sqlite:///{tmp_path / 'x.db'}"
    r = tuner_cli("worker", "--study", "nope", "--storage", storage)
    assert r.returncode == 2 and "No study 'nope'" in r.stderr
    optuna.create_study(study_name="bare", storage=storage)
    r = tuner_cli("worker", "--study", "bare", "--storage", storage)
    assert r.returncode == 2 and "no search metadata" in r.stderr
    r = tuner_cli("worker", "--study", "x", "--storage", "postgresql://u:p@127.0.0.1:1/db")
    assert r.returncode == 2 and r.stderr.startswith("error:")
    assert "Traceback" not in r.stderr


@pytest.mark.slow
def test_cli_exhaustive_then_search_agrees(tmp_path, small_space):
    wl = _write(tmp_path / "w.jsonl", workload(60, seed=5))
    base = ["-w", wl, "-m", "llama-3-8b", "--gpus", "A10,H100", "--space", small_space,
            "--engines", "vllm"]
    r = tuner_cli("search", *base, "--exhaustive", "--out", tmp_path / "grid", "--json")
    assert r.returncode == 0, r.stderr
    grid = json.loads(r.stdout)
    assert grid["search"]["configurations"] == 36 == grid["search"]["full_simulations"]
    r = tuner_cli("search", *base, "--n-trials", "30", "--out", tmp_path / "s", "--json")
    assert r.returncode == 0, r.stderr
    found = json.loads(r.stdout)
    for goal, obj in (("fastest", "makespan_s"), ("cheapest", "cost_usd")):
        assert math.isclose(found["winners"][goal]["metrics"][obj],
                            grid["winners"][goal]["metrics"][obj], rel_tol=1e-9)


def test_cli_workers_use_the_searchs_profile(tmp_path, small_space):
    """`--profile` reaches every worker through the study; `tuner results` re-simulates the
    winners with it; a study whose profile folder is gone says so in one line."""
    import shutil

    shipped = Path(__file__).resolve().parents[1] / "predictors" / "data" / "tiny-llama-cpu"
    if not shipped.is_dir():
        pytest.skip("no shipped CPU profile")
    prof = tmp_path / "prof"
    shutil.copytree(shipped, prof)
    wl = _write(tmp_path / "w.jsonl", workload(40))
    out = tmp_path / "out"
    r = tuner_cli("search", "-w", wl, "-m", "tiny-llama", "--gpus", "A10,H100", "--space",
                  small_space, "--n-trials", "12", "--workers", "2", "--out", out, "--profile",
                  prof, "--profile-mode", "transfer", "--json")
    assert r.returncode == 0, r.stderr
    st = load_study(json.loads(r.stdout)["study"], out_dir=out)
    assert st.user_attrs["metadata"]["profile"] == str(prof.resolve())
    provs = {t.user_attrs.get("provenance", "") for t in st.trials
             if t.user_attrs.get("feasible") and not t.user_attrs.get("duplicate")}
    assert provs and all(p.startswith("transferred") for p in provs), provs
    again = tuner_cli("results", "--out", out, "--json")
    assert again.returncode == 0, again.stderr
    moved = tmp_path / "prof-copy"
    prof.rename(moved)
    gone = tuner_cli("results", "--out", out)
    assert gone.returncode == 2 and "not on this machine" in gone.stderr
    assert "Traceback" not in gone.stderr
    back = tuner_cli("results", "--out", out, "--profile", moved, "--json")
    assert back.returncode == 0, back.stderr
    assert json.loads(back.stdout)["winners"] == json.loads(again.stdout)["winners"]


def _pop_enqueued(url: str, out) -> None:
    try:
        st = optuna.load_study(study_name="race", storage=make_storage(url))
        st.optimize(lambda t: float(t.suggest_int("x", 0, 1000)), n_trials=15, catch=())
        out.put("ok")
    except Exception as exc:  # noqa: BLE001 - reported to the test
        out.put(f"{type(exc).__name__}: {exc}")


@pytest.mark.parametrize("name", ["race.db", "race.journal"])
def test_local_workers_never_run_one_enqueued_trial_twice(tmp_path, name):
    """Several processes popping enqueued trials (the search's presets) from one SQLite or
    journal study: each runs once, none fails with "Trial#N has already finished"
    (optuna/optuna#4002; SQLite needs BEGIN IMMEDIATE, the journal orders by its log)."""
    import multiprocessing as mp

    url = f"sqlite:///{tmp_path / name}" if name.endswith(".db") else str(tmp_path / name)
    st = optuna.create_study(study_name="race", storage=make_storage(url))
    for i in range(45):
        st.enqueue_trial({"x": i})
    out = mp.get_context("fork").Queue()
    procs = [mp.get_context("fork").Process(target=_pop_enqueued, args=(url, out))
             for _ in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=300)
    assert [out.get(timeout=5) for _ in procs] == ["ok"] * 3
    trials = st.get_trials(deepcopy=False)
    assert all(t.state == COMPLETE for t in trials) and len(trials) == 45
    assert sorted(t.params["x"] for t in trials) == list(range(45))
    assert sorted(t.number for t in trials) == list(range(45))


# ---- the embedded journal storage ---------------------------------------------------------------
def test_journal_addresses():
    from tuner.search.storage import journal_path

    assert journal_path("journal:///tmp/o/study.journal") == Path("/tmp/o/study.journal")
    assert journal_path("journal:rel/s.journal") == Path("rel/s.journal")
    assert journal_path("journal:/abs/s.log") == Path("/abs/s.log")
    assert journal_path("out/study.journal") == Path("out/study.journal")
    for url in ("sqlite:///x.journal", "sqlite:////tmp/s.db", "postgresql://u@h/db", "x.db"):
        assert journal_path(url) is None, url


def test_out_folder_of_an_earlier_version_keeps_its_sqlite_study(tmp_path):
    """An OUT/study.db from before the journal default is still found (--resume, results,
    report, export); the journal wins when both exist; a new folder gets the journal."""
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    assert default_storage(tmp_path / "new").startswith("journal:")
    old = tmp_path / "old"
    old.mkdir()
    optuna.create_study(study_name="legacy", storage=f"sqlite:///{old / 'study.db'}")
    assert default_storage(old) == f"sqlite:///{(old / 'study.db').resolve()}"
    assert load_study(None, out_dir=old).study_name == "legacy"
    optuna.create_study(study_name="fresh", storage=make_storage(str(old / "study.journal")))
    assert default_storage(old).startswith("journal:")
    assert load_study(None, out_dir=old).study_name == "fresh"
    with pytest.raises(TunerError, match="No study journal at"):
        load_study(None, f"journal:{tmp_path / 'typo.journal'}")
    assert not (tmp_path / "typo.journal").exists()  # a lookup creates nothing


def test_journal_cuts_a_line_torn_by_a_kill(tmp_path):
    """A writer killed mid-append leaves a last line without its newline: reopening cuts it, so
    the next trial is not glued to it (which would make the journal unreadable)."""
    url = str(tmp_path / "s.journal")
    st = optuna.create_study(study_name="t", storage=make_storage(url))
    st.add_trial(optuna.trial.create_trial(value=1.0))
    with open(url, "ab") as fh:
        fh.write(b'{"op_code": 4, "worker_id": "dead", "study_id"')
    st = optuna.load_study(study_name="t", storage=make_storage(url))
    st.add_trial(optuna.trial.create_trial(value=2.0))
    again = optuna.load_study(study_name="t", storage=make_storage(url))
    assert [t.value for t in again.trials] == [1.0, 2.0]
    assert Path(url).read_bytes().endswith(b"\n")


def test_a_data_parallel_plan_is_screened_on_one_replicas_share(model, gpus, monkeypatch):
    """dp replicas each serve n / dp requests: the sample estimate simulates one replica on
    min(sample, n / dp) requests and scales by (n / dp) / that, so a dp-32 plan is judged on
    its replicas' real load (not 1/32 of a sample) at 1/dp of the cost; the estimate is within
    a few % of the full simulation for every dp."""
    from tuner.core.config import ServingConfig

    w = workload(4096, seed=4)
    ev = evaluator_mod.Evaluator(w, model, gpus, space(dp=[1, 4, 32]), sample_fraction=0.25)
    for dp, m in ((1, 1024), (4, 1024), (32, 128)):
        sample, scale = ev.replica_sample(dp)
        assert len(sample) == m and scale == pytest.approx(4096 / dp / m)
    seen = []
    real = evaluator_mod.simulate

    def spy(wl, model_, gpu, config, *a, **k):
        seen.append((len(wl), config.dp))
        return real(wl, model_, gpu, config, *a, **k)

    monkeypatch.setattr(evaluator_mod, "simulate", spy)
    for dp in (1, 4, 32):
        params = {"gpu": "H100", "chunk_size": 2048, "max_running": 64, "dp": dp}
        cfg = ServingConfig(**{**FIXED, **params})
        est = ev.evaluate(params, 1)[1]["fidelity"]  # trial 1: calibration, promoted
        assert seen[-2] == (len(ev.replica_sample(dp)[0]), 1) and seen[-1] == (4096, dp)
        full = real(w, model, gpus["H100"], cfg, ev.cost_model_for(gpus["H100"], cfg))
        assert est["estimate_makespan_s"] == pytest.approx(full.makespan_s, rel=0.05), dp
