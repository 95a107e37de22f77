"""Issue s49, `tuner search` faster with the same results: the journal's lines are fsynced at
most once a second (and at exit) but written at once; the budget count remembers finished
trials; Optuna gets one callback; the step records are not zeroed; the cost models' shared
pieces (decode-attention grid, attention rows) are built once."""

from __future__ import annotations

import os

import numpy as np
import optuna
import pytest

from tuner.search import loop, storage

optuna.logging.set_verbosity(optuna.logging.ERROR)


# ---- the journal: written at once, fsynced at most once a second and at exit ---------------------
def _fsyncs(monkeypatch) -> list[int]:
    calls: list[int] = []
    real = os.fsync

    def counted(fd):
        calls.append(fd)
        real(fd)

    monkeypatch.setattr(os, "fsync", counted)
    return calls


def test_journal_lines_are_written_at_once_and_fsynced_at_most_once_a_second(tmp_path,
                                                                           monkeypatch):
    path = tmp_path / "study.journal"
    st = optuna.create_study(study_name="s", storage=storage.make_storage(str(path)))
    calls = _fsyncs(monkeypatch)
    for i in range(20):
        st.add_trial(optuna.trial.create_trial(value=float(i)))
        # in the file (the kernel has it: a SIGKILL now loses nothing) before the next trial
        other = optuna.load_study(study_name="s", storage=storage.make_storage(str(path)))
        assert [t.value for t in other.trials] == [float(k) for k in range(i + 1)]
    assert len(calls) <= 2  # was one per line (20); the appends take well under 2 s
    assert str(path) in storage._UNSYNCED  # lines since the last fsync: synced at exit
    storage._sync_journals()
    assert str(path) not in storage._UNSYNCED
    assert len(calls) >= 1


def test_journal_fsyncs_again_once_a_second_has_passed(tmp_path, monkeypatch):
    path = tmp_path / "study.journal"
    st = optuna.create_study(study_name="s", storage=storage.make_storage(str(path)))
    calls = _fsyncs(monkeypatch)
    clock = [1000.0]
    monkeypatch.setattr(storage.time, "monotonic", lambda: clock[0])
    backend = st._storage._backend
    backend._synced_at_s = clock[0]
    st.add_trial(optuna.trial.create_trial(value=1.0))
    assert calls == []
    clock[0] += storage.JOURNAL_SYNC_EVERY_S
    st.add_trial(optuna.trial.create_trial(value=2.0))
    assert len(calls) == 1 and str(path) not in storage._UNSYNCED


def test_sync_of_a_deleted_journal_is_no_error(tmp_path):
    path = tmp_path / "study.journal"
    st = optuna.create_study(study_name="s", storage=storage.make_storage(str(path)))
    st.add_trial(optuna.trial.create_trial(value=1.0))
    path.unlink()  # e.g. discard_failed_study
    st._storage._backend.sync()


# ---- the budget count ----------------------------------------------------------------------------
def test_budget_count_matches_the_plain_count_as_trials_come_and_finish():
    st = optuna.create_study(directions=["minimize", "minimize"])
    count = loop.BudgetCount(st)
    for i in range(6):
        attrs = {"final_candidate": True} if i == 2 else {"vllm_defaults": True} if i == 4 else {}
        st.add_trial(optuna.trial.create_trial(values=[1.0, 2.0], user_attrs=attrs))
        assert count() == loop._count_budget(st)
    assert count() == 4
    running = st.ask()  # RUNNING counts; its attributes may still change
    assert count() == loop._count_budget(st) == 5
    running.set_user_attr("final_candidate", True)
    assert count() == loop._count_budget(st) == 4
    st.tell(running, [1.0, 1.0])
    assert count() == loop._count_budget(st) == 4
    assert len(count._counts) == 7  # each finished trial's verdict remembered


def test_optuna_gets_one_callback_that_calls_each_in_order():
    seen = []
    each = loop._each([lambda st, t: seen.append(("a", t)), lambda st, t: seen.append(("b", t))])
    each(None, "trial")
    assert seen == [("a", "trial"), ("b", "trial")]


def test_a_search_deep_copies_each_finished_trial_once(monkeypatch, tmp_path):
    """persist and the progress callback share one copy of the finished trial (Optuna copies
    it per callback it is given)."""
    from tuner.search.settings import SearchSettings

    given = []
    real = optuna.Study.optimize

    def optimize(self, func, *a, callbacks=None, **k):
        given.append(len(callbacks or []))
        return real(self, func, *a, callbacks=callbacks, **k)

    monkeypatch.setattr(optuna.Study, "optimize", optimize)
    persistent = optuna.create_study(directions=["minimize", "minimize"],
                                     storage=storage.make_storage(str(tmp_path / "s.journal")))
    work = optuna.create_study(directions=["minimize", "minimize"])

    class Known:
        done: dict = {}
        best: dict = {}
        best_of_engine: dict = {}

        def ingest(self, study):
            pass

    class Ev:
        gpus = {"A10": None}
        space = type("S", (), {"knobs": {"tp": [1, 2]}, "excluded": ()})()
        known = Known()

    monkeypatch.setattr(loop, "_objective",
                        lambda *a, **k: lambda trial: (trial.suggest_categorical("tp", [1, 2]),
                                                       1.0))
    monkeypatch.setattr(loop, "next_polish", lambda *a: None)
    progress = []
    loop.optimize(work, Ev(), SearchSettings(n_trials=3, sampler="tpe"), shared=False,
                  on_trial=lambda st, t: progress.append(t.number), mirror=persistent)
    assert given and set(given) == {1}
    assert progress == [0, 1, 2] and len(persistent.trials) == 3


# ---- the step record: every recorded row is written by the C loop --------------------------------
class _Garbage:
    """numpy, with np.empty filled with garbage (what a reused buffer may hold)."""

    def __getattr__(self, name):
        return getattr(np, name)

    @staticmethod
    def empty(shape, dtype=float):
        return np.full(shape, -987654321, dtype=dtype)


@pytest.mark.parametrize("stream", [False, True])
def test_schedules_do_not_depend_on_what_the_record_memory_held(monkeypatch, stream):
    from tuner.sim import scheduler as sch
    from tuner.sim import sglang as sgl

    rng = np.random.default_rng(7)
    prompt = rng.integers(50, 3000, 300)
    output = rng.integers(1, 600, 300)

    def run_both():
        rows: list = []
        on = (lambda r: rows.append(r.copy())) if stream else None
        v = sch.run_schedule(prompt, output, sch.preset("vllm", token_budget=512,
                                                        max_running=64, block_size=16,
                                                        capacity_blocks=3000), on_steps=on)
        s = sgl.run_schedule(prompt, output, capacity_tokens=60_000, chunked_prefill_size=2048,
                             max_running=64, on_steps=on)
        return [v.steps, v.finish_step, s.steps, s.finish_step, *rows]

    clean = run_both()
    monkeypatch.setattr(sch, "np", _Garbage())
    monkeypatch.setattr(sgl, "np", _Garbage())
    dirty = run_both()
    assert len(clean) == len(dirty)
    for a, b in zip(clean, dirty, strict=True):
        assert np.array_equal(a, b)
    assert not any((x == -987654321).any() for x in dirty)


# ---- cost models: the shared pieces built once, the same figures ---------------------------------
def test_decode_attention_grid_is_built_once_per_values():
    from tuner.predictors.tables import _GRIDS, UniformLogGrid

    lb = np.log(np.array([1.0, 4.0, 16.0, 64.0]))
    ls = np.log(np.array([128.0, 1024.0, 8192.0]))
    lt = np.log(np.outer(np.arange(1, 5), np.arange(1, 4)) * 1e-5)
    _GRIDS.clear()
    a = UniformLogGrid.from_grid(lb, ls, lt)
    b = UniformLogGrid.from_grid(lb.copy(), ls.copy(), lt.copy())
    assert a is b
    fresh = UniformLogGrid._resample(lb, ls, lt, 256)
    assert np.array_equal(a.flat, fresh.flat) and (a.x0, a.dx, a.ny) == (fresh.x0, fresh.dx,
                                                                          fresh.ny)
    assert not a.flat.flags.writeable
    assert UniformLogGrid.from_grid(lb, ls, lt + 1.0) is not a


def test_cost_models_for_both_engines_equal_fresh_builds():
    from tuner.core.catalog import load_gpus, load_models
    from tuner.predictors import aic, aic_tables, tables
    from tuner.predictors.engine_overhead import profile_for, sglang_profile_for

    gpus, model = load_gpus(), load_models()["llama-3-8b"]

    def build(gpu, tp, fw):
        engine = sglang_profile_for(None) if fw == "sglang" else profile_for(None, "llm", None,
                                                                             None)
        return aic.table_cost_model(model, gpus[gpu], tp=tp, engine=engine, framework=fw)

    cases = [(g, tp, fw) for g in ("A10", "A40") for tp in (1, 2) for fw in ("vllm", "sglang")]
    aic._BUILT.clear()
    cached = [build(*c) for c in cases]
    # the same attention rows object for both engines (one transfer source's arrays)
    src = aic_tables.KernelTables.load("A100-80G")
    rows = src._attn_rows("gen_attn", 32, 8, 128, False)
    assert src._attn_rows("gen_attn", 32, 8, 128, False) is rows
    assert not rows[0].flags.writeable
    assert cached[0]._cache["gen"] is cached[1]._cache["gen"]  # A10 tp 1: vLLM and SGLang
    for c, cm in zip(cases, cached, strict=True):
        aic._BUILT.clear()
        tables._GRIDS.clear()
        aic_tables._ATTN_ROWS.clear()
        fresh = build(*c)
        for name in ("log_m", "log_linear_s", "log_head_s", "log_pairs", "log_ctx_s",
                     "log_gen_b", "log_gen_s", "log_gen_t", "log_ar_tokens", "log_ar_s"):
            assert np.array_equal(getattr(cm, name), getattr(fresh, name)), (c, name)
        assert cm.source_note == fresh.source_note
        assert np.array_equal(cm._cache["gen"].flat, fresh._cache["gen"].flat)
        assert np.array_equal(cm._cache["tokens"].values, fresh._cache["tokens"].values)
