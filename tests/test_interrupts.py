"""Issue #17, "Ctrl-C always clean": a failed search leaves no study that blocks its rerun (a),
local workers die with their search (b), stale RUNNING trials are failed on --resume (c),
--n-trials is a total over workers and --resume (d), and Ctrl-C at random moments of the
README search always exits 130 with one line and resumes to the same Pareto front (e)."""

from __future__ import annotations

import fcntl
import importlib.util
import json
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
from tuner.search import SearchSettings, connect_worker, default_storage, prepare_study, run_search
from tuner.search.loop import _over_budget
from tuner.search.space import SearchSpace
from tuner.search.storage import journal_path, make_storage

ROOT = Path(__file__).resolve().parent.parent
COMPLETE, RUNNING = optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.RUNNING
FAIL, PRUNED = optuna.trial.TrialState.FAIL, optuna.trial.TrialState.PRUNED
FIXED = {"scheduler": "vllm", "tp": 1, "dp": 1, "block_size": 16, "ordering": "fcfs"}


def workload(n: int = 24, seed: int = 0) -> Workload:
    rng = np.random.default_rng(seed)
    return Workload(prompt_tokens=rng.integers(64, 1024, n).astype(np.int64),
                    output_tokens=rng.integers(16, 200, n).astype(np.int64),
                    source="tiny", tokenizer="given", output_source="given")


def space() -> SearchSpace:
    return SearchSpace(knobs={"chunk_size": [256, 512, 1024, 2048], "max_running": [16, 32, 64]},
                       fixed=dict(FIXED), source="test")


def states(storage: str, name: str = "s") -> dict[str, int]:
    st = optuna.load_study(study_name=name, storage=make_storage(storage))
    out: dict[str, int] = {}
    for t in st.get_trials(deepcopy=False):
        out[t.state.name] = out.get(t.state.name, 0) + 1
    return out


class OtherProcess:
    """Another process holding the study: a shared flock() on the study's folder through a
    descriptor of its own (flock locks of two descriptors conflict even in one process)."""

    def __init__(self, folder: Path) -> None:
        self.fd = os.open(folder, os.O_RDONLY)

    def __enter__(self) -> OtherProcess:
        fcntl.flock(self.fd, fcntl.LOCK_SH)
        return self

    def __exit__(self, *exc) -> None:
        os.close(self.fd)


# ---- (a) a failed or refused search leaves no study that blocks the rerun ------------------------
def test_an_error_mid_search_removes_its_study_and_the_rerun_starts_afresh(model, gpus, tmp_path,
                                                                          monkeypatch):
    storage = default_storage(tmp_path)
    real = evaluator_mod.simulate

    def broken(*a, **k):
        raise RuntimeError("simulator bug")

    monkeypatch.setattr(evaluator_mod, "simulate", broken)
    with pytest.raises(RuntimeError, match="simulator bug"):
        run_search(workload(), model, gpus, space(),
                   SearchSettings(n_trials=6, storage=storage, study_name="s"))
    assert not journal_path(storage).exists()  # no study, no journal file left behind
    monkeypatch.setattr(evaluator_mod, "simulate", real)
    st = run_search(workload(), model, gpus, space(),  # no --resume needed
                    SearchSettings(n_trials=6, storage=storage, study_name="s"))
    assert len(st.get_trials(states=(COMPLETE,))) == 6


def test_a_study_without_feasible_results_is_replaced_not_refused(gpus, tmp_path):
    storage = default_storage(tmp_path)
    # A model that fits on none of the GPUs: every trial completes infeasible (the CLI then
    # fails with "every configuration is infeasible"), as a run killed before results would.
    run_search(workload(), get_model("llama-2-70b"), gpus, space(),
               SearchSettings(n_trials=4, storage=storage, study_name="s"))
    assert states(storage) == {"COMPLETE": 4}
    st = run_search(workload(), get_model("llama-3-8b"), gpus, space(),
                    SearchSettings(n_trials=5, storage=storage, study_name="s"))
    assert st.user_attrs["metadata"]["model"] == "llama-3-8b"
    assert states(storage) == {"COMPLETE": 5}
    # --resume with other inputs: also replaced while the study holds no feasible result
    run_search(workload(), get_model("llama-2-70b"), gpus, space(),
               SearchSettings(n_trials=3, storage=storage, study_name="t"))
    st = run_search(workload(), get_model("llama-3-8b"), gpus, space(),
                    SearchSettings(n_trials=3, storage=storage, study_name="t", resume=True))
    assert st.user_attrs["metadata"]["model"] == "llama-3-8b"


def test_a_study_with_results_is_refused_with_what_to_pass(model, gpus, tmp_path):
    storage = default_storage(tmp_path)
    run_search(workload(), model, gpus, space(),
               SearchSettings(n_trials=4, storage=storage, study_name="s"))
    with pytest.raises(TunerError) as same:
        run_search(workload(), model, gpus, space(),
                   SearchSettings(n_trials=4, storage=storage, study_name="s"))
    for needle in ("already exists", "4 finished trials", "--resume", "--out DIR",
                   "--study NAME", f"delete {journal_path(storage)}"):
        assert needle in str(same.value)
    with pytest.raises(TunerError) as other:  # --resume of another search: not offered
        run_search(workload(seed=5), model, gpus, space(),
                   SearchSettings(n_trials=4, storage=storage, study_name="s", resume=True))
    assert "another workload" in str(other.value) and "--resume" not in str(other.value)
    assert "--study NAME" in str(other.value)
    assert states(storage) == {"COMPLETE": 4}  # the refused runs touched nothing


def test_a_study_another_process_holds_is_neither_replaced_nor_joined_silently(gpus, tmp_path):
    storage = default_storage(tmp_path)
    run_search(workload(), get_model("llama-2-70b"), gpus, space(),
               SearchSettings(n_trials=2, storage=storage, study_name="s"))
    with OtherProcess(tmp_path), pytest.raises(TunerError, match="another process"):
        run_search(workload(), get_model("llama-3-8b"), gpus, space(),
                   SearchSettings(n_trials=2, storage=storage, study_name="s"))
    assert states(storage) == {"COMPLETE": 2}


def test_cli_refusals_and_input_errors_leave_no_journal(tmp_path):
    wl = tmp_path / "w.jsonl"
    wl.write_text("".join(json.dumps({"prompt_tokens": 300, "output_tokens": 50}) + "\n"
                          for _ in range(8)))
    out = tmp_path / "out"
    r = subprocess.run([sys.executable, "-m", "tuner.cli", "search", "-w", str(wl), "-m",
                        "llama-2-70b", "--gpus", "A10", "--max-gpus", "4", "--out", str(out)],
                       capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert not (out / "study.journal").exists()


# ---- (b) local workers die with their search ----------------------------------------------------
def _children(pid: int) -> list[int]:
    kids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat[stat.rindex(")") + 2:].split()[1]) == pid:
                kids.append(int(entry.name))
    return kids


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


def _big_workload(path: Path, n: int = 300) -> Path:
    rng = np.random.default_rng(3)
    with path.open("w") as fh:
        for p, o in zip(rng.integers(200, 3000, n), rng.integers(50, 600, n), strict=True):
            fh.write(json.dumps({"prompt_tokens": int(p), "output_tokens": int(o)}) + "\n")
    return path


def _start_search_with_workers(tmp_path: Path) -> tuple[subprocess.Popen, list[int]]:
    wl = _big_workload(tmp_path / "big.jsonl")
    proc = subprocess.Popen(
        [sys.executable, "-m", "tuner.cli", "search", "-w", str(wl), "-m", "llama-3-8b",
         "--gpus", "A10,A40", "--n-trials", "2000", "--workers", "2", "--out",
         str(tmp_path / "out"), "--study", "w"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=ROOT,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 90
    workers: list[int] = []
    while time.monotonic() < deadline and proc.poll() is None and len(workers) < 2:
        time.sleep(0.2)
        workers = _children(proc.pid)
    assert len(workers) == 2, proc.stderr.read() if proc.poll() is not None else "no workers"
    time.sleep(3)  # the workers are past their start-up, running trials
    return proc, workers


def _gone_within(pids: list[int], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not any(_alive(p) for p in pids):
            return True
        time.sleep(0.2)
    return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_workers_die_with_a_sigkilled_search(tmp_path):
    proc, workers = _start_search_with_workers(tmp_path)
    try:
        proc.kill()
        proc.wait(timeout=10)
        assert _gone_within(workers, 20), [p for p in workers if _alive(p)]
    finally:
        for p in workers:
            if _alive(p):
                os.kill(p, signal.SIGKILL)
        proc.stderr.close()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_ctrl_c_stops_the_search_and_its_workers_with_one_line(tmp_path):
    proc, workers = _start_search_with_workers(tmp_path)
    try:
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=60)
        assert proc.returncode == 130, stderr
        assert "Traceback" not in stderr
        lines = [ln for ln in stderr.splitlines() if ln.strip()]
        assert lines[-1].startswith("interrupted")
        assert sum(ln.startswith("interrupted") for ln in lines) == 1
        assert _gone_within(workers, 5)
    finally:
        for p in workers:
            if _alive(p):
                os.kill(p, signal.SIGKILL)
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def test_a_worker_whose_search_is_gone_stops_at_once():
    code = ("from tuner.search.workers import die_with_parent\n"
            "try:\n    die_with_parent()\nexcept KeyboardInterrupt:\n    raise SystemExit(7)\n")
    env = dict(os.environ, TUNER_PARENT_PID="1" if os.getppid() != 1 else "2")
    assert subprocess.run([sys.executable, "-c", code], env=env, timeout=60).returncode == 7
    env.pop("TUNER_PARENT_PID")  # started by hand: no parent to follow
    assert subprocess.run([sys.executable, "-c", code], env=env, timeout=60).returncode == 0


# ---- (c) stale RUNNING trials are failed on --resume --------------------------------------------
def test_resume_fails_running_trials_of_dead_workers(model, gpus, tmp_path):
    storage = default_storage(tmp_path)
    run_search(workload(), model, gpus, space(),
               SearchSettings(n_trials=4, storage=storage, study_name="s"))
    st = optuna.load_study(study_name="s", storage=make_storage(storage))
    st.enqueue_trial({"gpu": "A40", "chunk_size": 2048, "max_running": 64})
    st.ask()  # a worker took the enqueued trial and died: RUNNING for ever
    st.ask()  # and another one a trial of the sampler's
    assert states(storage) == {"COMPLETE": 4, "RUNNING": 2}
    # Another process holds the study: its RUNNING trials may be live; they stay, and count.
    with OtherProcess(tmp_path):
        run_search(workload(), model, gpus, space(),
                   SearchSettings(n_trials=7, storage=storage, study_name="s", resume=True))
    assert states(storage) == {"COMPLETE": 5, "RUNNING": 2}
    # Alone: both failed (neither counts), the enqueued one queued again, the total reached.
    run_search(workload(), model, gpus, space(),
               SearchSettings(n_trials=8, storage=storage, study_name="s", resume=True))
    assert states(storage) == {"COMPLETE": 8, "FAIL": 2, "WAITING": 1}


# ---- (d) --n-trials is a total over workers and --resume ----------------------------------------
def test_over_budget_rule_counts_complete_and_running_trials_before_it():
    st = optuna.create_study(directions=["minimize", "minimize"])
    for i in range(3):
        st.add_trial(optuna.trial.create_trial(values=[i, i]))
    running = st.ask()  # number 3, RUNNING
    mine = st.ask()  # number 4
    assert _over_budget(mine, 4) and not _over_budget(mine, 5)
    st.tell(running, state=FAIL)  # a failed trial frees its place
    assert not _over_budget(mine, 4)


def test_workers_share_one_total(model, gpus, tmp_path):
    storage = default_storage(tmp_path)
    w, sp = workload(), space()
    prepare_study(w, model, gpus, sp, SearchSettings(n_trials=9, storage=storage,
                                                     study_name="s"))
    with OtherProcess(tmp_path):  # another worker's trial is in flight (a preset): it counts
        optuna.load_study(study_name="s", storage=make_storage(storage)).ask()
        connect_worker("s", storage, seed=1).run()
        assert states(storage) == {"COMPLETE": 8, "RUNNING": 1}
        connect_worker("s", storage, seed=2).run()  # nothing left for a second worker
        assert states(storage) == {"COMPLETE": 8, "RUNNING": 1}
    # Alone, a new worker fails the dead one's trial, runs its preset again, ends at the total.
    third = connect_worker("s", storage, seed=3).run()
    assert states(storage) == {"COMPLETE": 9, "FAIL": 1}
    presets = [t.params for t in third.get_trials(states=(COMPLETE,))
               if "fixed_params" in t.system_attrs]
    assert len(presets) == 4


def test_help_says_what_n_trials_counts():
    r = subprocess.run([sys.executable, "-m", "tuner.cli", "search", "--help"],
                       capture_output=True, text=True, timeout=60, cwd=ROOT,
                       env=dict(os.environ, COLUMNS="200"))
    text = " ".join(r.stdout.replace("\u2502", " ").split())  # without the panel's borders
    assert "over all --workers and every --resume" in text
    assert "counts as a trial but is not simulated again" in text


# ---- (e) Ctrl-C at random moments of the README search ------------------------------------------
def _sigint_check():
    spec = importlib.util.spec_from_file_location("sigint_check",
                                                  ROOT / "benchmarks" / "sigint_check.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("sigint_check", mod)  # its dataclass looks its module up there
    spec.loader.exec_module(sys.modules["sigint_check"])
    return sys.modules["sigint_check"]


def test_stderr_and_output_checks_of_the_sigint_check(tmp_path):
    check = _sigint_check()
    assert check.stderr_problem("Searching ...\ntrials 3/300\ninterrupted (finished)\n") is None
    assert "Traceback" in check.stderr_problem("Traceback (most recent call last):\n"
                                              "interrupted\n")
    assert check.stderr_problem("interrupted\ninterrupted\n") == "2 'interrupted' lines"
    (tmp_path / "study.journal").write_text("{}\n")
    assert check.output_problem(tmp_path, {"study.journal", "results.json"}) is None
    (tmp_path / "results.json.tmp").write_text("{")
    assert "results.json.tmp" in check.output_problem(tmp_path, {"study.journal",
                                                                 "results.json"})


@pytest.mark.slow
def test_three_random_sigints_then_resume_give_the_same_front():
    assert _sigint_check().main(["--runs", "3", "--seed", "17"]) == 0


def test_a_ctrl_c_swallowed_by_c_code_keeps_the_study_for_resume(gpus, tmp_path, monkeypatch):
    """numpy can turn a KeyboardInterrupt into an unchained TypeError; once the handler saw the
    Ctrl-C, the search still counts it as an interrupt and keeps its study (no feasible result
    yet) for --resume, as the CLI's line says."""
    from tuner.core import interrupts
    from tuner.search.storage import discard_failed_study

    storage = default_storage(tmp_path)
    run_search(workload(), get_model("llama-2-70b"), gpus, space(),
               SearchSettings(n_trials=2, storage=storage, study_name="s"))
    settings = SearchSettings(storage=storage, study_name="s")
    swallowed = TypeError("Cannot compare structured arrays unless they have a common dtype.")
    monkeypatch.setitem(interrupts._state, "sigint", True)
    assert interrupts.is_interrupt(swallowed)
    assert discard_failed_study(settings, swallowed) is False
    assert states(storage) == {"COMPLETE": 2}
    monkeypatch.setitem(interrupts._state, "sigint", False)  # a plain failure: replaced
    assert not interrupts.is_interrupt(swallowed)
    assert discard_failed_study(settings, swallowed) is True
