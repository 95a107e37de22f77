"""QA pass over the search as an Optuna user drives it (2026-11-29): `tuner search` options,
resuming stored studies, the progress bar and the printed figures against the stored trials."""

from __future__ import annotations

import io
from pathlib import Path

import optuna
from rich.console import Console

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "arxiv.jsonl"

DIST = {"gpu": optuna.distributions.CategoricalDistribution(["A10"]),
        "chunk_size": optuna.distributions.CategoricalDistribution([256, 512, 1024, 2048])}


def _trial(chunk: int, level: str = "full", **attrs) -> optuna.trial.FrozenTrial:
    return optuna.trial.create_trial(
        values=[100.0 + chunk / 1000, 1.0], params={"gpu": "A10", "chunk_size": chunk},
        distributions=DIST,
        user_attrs={"feasible": True, "fidelity": {"level": level}, "metrics": {}, **attrs})


# ---- the progress bar counts what --n-trials counts ---------------------------------------------
def _resumed_study() -> optuna.Study:
    """A study an earlier run finished: 3 proposed trials, then 2 the search added beyond
    --n-trials (a final candidate and the engines' defaults beside a winner)."""
    study = optuna.create_study(directions=["minimize", "minimize"])
    study.add_trials([_trial(256), _trial(512), _trial(1024),
                      _trial(512, final_candidate=True), _trial(2048, vllm_defaults=True)])
    return study


def test_progress_of_a_resumed_search_leaves_out_the_trials_beyond_n_trials():
    # `--resume --n-trials 300` of a study with 79 proposed trials and 8 default checks drew
    # "308/300" at the end: the bar started from every earlier COMPLETE trial
    from tuner.cli.progress import SearchProgress

    study = _resumed_study()
    study.add_trials([_trial(256)])  # the resumed run's first trial: the study's 4th proposal
    with SearchProgress(Console(file=io.StringIO()), 4, disable=True) as prog:
        prog.on_trial(study, study.get_trials(deepcopy=False)[-1])
    assert prog.completed == 4


def test_progress_of_a_resumed_search_shows_the_studys_best_so_far():
    # the bar's "fastest ..., cheapest ..." showed the best of this run's trials only: a worker
    # joining a study (or a --resume) drew "cheapest $0.2805" where the study had $0.0360
    from tuner.cli.progress import SearchProgress

    study = optuna.create_study(directions=["minimize", "minimize"])
    cheap = optuna.trial.create_trial(
        values=[500.0, 0.04], params={"gpu": "A10", "chunk_size": 256}, distributions=DIST,
        user_attrs={"feasible": True, "fidelity": {"level": "full"}, "metrics": {}})
    dear = optuna.trial.create_trial(
        values=[60.0, 0.28], params={"gpu": "A10", "chunk_size": 512}, distributions=DIST,
        user_attrs={"feasible": True, "fidelity": {"level": "full"}, "metrics": {}})
    study.add_trials([cheap, dear])
    with SearchProgress(Console(file=io.StringIO()), 4, disable=True) as prog:
        prog.on_trial(study, study.get_trials(deepcopy=False)[-1])
    assert (prog.best_t, prog.best_c) == (60.0, 0.04)


def test_progress_of_local_workers_leaves_out_the_trials_beyond_n_trials(monkeypatch):
    from tuner.cli import progress
    from tuner.search import workers

    study = _resumed_study()
    polled = study.get_trials(deepcopy=False)

    def fake_run(st, storage, n, *, n_trials, timeout_s, seed, on_poll):
        on_poll(polled)

    monkeypatch.setattr(workers, "run_local_workers", fake_run)
    with progress.SearchProgress(Console(file=io.StringIO()), 3, disable=True) as prog:
        progress.run_local_workers(study, "journal:///x.journal", 2, n_trials=3, timeout_s=None,
                                   seed=0, progress=prog)
    assert prog.completed == 3


# ---- the search's statistics: duplicates are proposals, not the search's own re-simulations -----
def test_duplicates_are_repeated_proposals_not_rung_or_full_resimulations():
    # a multi-fidelity search on the full arXiv trace printed "467 trials: 269 distinct
    # configurations, ..., 198 duplicates" where 39 proposals were repeats: the 116 rung and 41
    # full simulations of screened candidates at the end were counted as duplicates
    from tuner.cli.search import _stats_line
    from tuner.search.records import search_stats

    study = optuna.create_study(directions=["minimize", "minimize"])
    study.add_trials([
        _trial(256, "sample"), _trial(512, "sample"), _trial(1024, "full"),
        _trial(512, "sample", duplicate=True),  # proposed again: the one duplicate
        # the end of the search: a screened candidate on the rung, then in full
        _trial(256, "rung", final_candidate=True), _trial(256, "full", final_candidate=True),
        _trial(512, "rung", final_candidate=True),
        _trial(2048, "full", vllm_defaults=True),  # the engines' defaults beside a winner
        _trial(2048, "full", duplicate=True)])  # a later proposal of what the defaults ran
    stats = search_stats(study)
    assert stats["trials"] == 9 and stats["configurations"] == 4
    assert stats["duplicates"] == 2
    assert stats["final_candidates"] == 1 and stats["final_rung_simulations"] == 2
    line = _stats_line(stats)
    assert "2 duplicates" in line
    assert "2 rung simulations at the end, beyond --n-trials" in line


# ---- --workers N: every worker gets a valid seed ------------------------------------------------
def test_local_workers_seeds_stay_in_range_at_the_largest_seed(monkeypatch):
    # `tuner search --seed 4294967295 --workers 2` (a seed --seed accepts) started the workers
    # with --seed 4294967296 and 4294967297, which both refused: "2 of 2 workers failed"
    from tuner.search import workers
    from tuner.search.settings import SearchSettings

    started = []

    class FakeProc:
        def __init__(self, cmd, **_kw):
            started.append(cmd)

        def poll(self):
            return 0

    monkeypatch.setattr(workers.subprocess, "Popen", FakeProc)
    with workers.LocalWorkers("s", "journal:///x.journal", 2, n_trials=4, timeout_s=None,
                              seed=2**32 - 1):
        pass
    seeds = [int(cmd[cmd.index("--seed") + 1]) for cmd in started]
    assert len(set(seeds)) == 2
    for seed in seeds:
        SearchSettings(seed=seed)  # each in the range a worker accepts


# ---- resuming a stored study ---------------------------------------------------------------------
def _search(out, *extra: str, narrow: bool = True):
    from typer.testing import CliRunner

    from tuner.cli.main import app

    return CliRunner().invoke(app, ["search", "-w", str(EXAMPLE), "-m", "llama-3-8b", "--gpus",
                                    "A10,A40", "--out", str(out), *extra,
                                    *(["--engines", "vllm", "--max-gpus", "2"] if narrow else [])])


def test_resumed_search_progress_ends_at_n_trials(tmp_path):
    from tuner.search import load_study

    r = _search(tmp_path / "o", "--n-trials", "10", narrow=False)
    assert r.exit_code == 0, r.output
    st = load_study(None, None, out_dir=tmp_path / "o")
    # the engines' defaults beside the winners, beyond --n-trials
    assert any(t.user_attrs.get("vllm_defaults") for t in st.get_trials(deepcopy=False))
    r = _search(tmp_path / "o", "--n-trials", "14", "--resume", narrow=False)
    assert r.exit_code == 0, r.output
    assert "14/14" in r.output, r.output


def test_resume_with_another_log_setting_names_the_option(tmp_path):
    r = _search(tmp_path / "o", "--n-trials", "4")
    assert r.exit_code == 0, r.output
    r = _search(tmp_path / "o", "--n-trials", "4", "--resume", "--disable-log-requests")
    from tuner.core.errors import TunerError

    assert isinstance(r.exception, TunerError), r.output
    text = " ".join(str(r.exception).split())
    assert "another cost model" in text and "--disable-log-requests" in text, text


# ---- --help says what the options do ------------------------------------------------------------
def test_search_help_says_what_timeout_and_seed_do():
    # --timeout said "Stop after this many seconds", but the front's candidates, the engines'
    # defaults and the outputs follow it (10.8 s for --timeout 3 on the full arXiv trace); --seed
    # said "same seed, same trials", which --workers N (interleaved as they finish) do not keep
    from typer.testing import CliRunner

    from tuner.cli.main import app

    r = CliRunner().invoke(app, ["search", "--help"], env={"COLUMNS": "300"})
    text = " ".join(r.output.replace("│", " ").split())
    assert "Stop proposing trials after this many seconds" in text
    assert "the outputs, follow" in text
    assert "not with --workers N" in text


def test_resume_with_another_interruption_rate_is_refused(tmp_path):
    # `--resume --interruption-rate 5` of a --spot study searched at 0.05 printed the expected
    # spot figures at 0.05, silently: the outputs use the rate the study stored
    from typer.testing import CliRunner

    from tuner.cli.main import app
    from tuner.core.errors import TunerError

    def spot_search(rate: str, *extra: str):
        return CliRunner().invoke(app, [
            "search", "-w", str(EXAMPLE), "-m", "llama-3-8b", "--gpus", "L4", "--engines", "vllm",
            "--max-gpus", "2", "--provider", "gcp", "--spot", "--interruption-rate", rate,
            "--n-trials", "4", "--out", str(tmp_path / "o"), *extra])

    r = spot_search("0.05")
    assert r.exit_code == 0, r.output
    r = spot_search("5", "--resume")
    assert isinstance(r.exception, TunerError), r.output
    assert "another --interruption-rate (0.05 vs now 5.0)" in " ".join(str(r.exception).split())
    assert spot_search("0.05", "--resume").exit_code == 0


def test_worker_counts_the_trials_its_target_counts(tmp_path):
    # `tuner worker --json` on a finished 10-trial study said "study_complete": 13 against
    # "target": 10 (the engines' defaults beside the winners are beyond --n-trials)
    import json

    from typer.testing import CliRunner

    from tuner.cli.main import app

    r = _search(tmp_path / "o", "--n-trials", "10", narrow=False)
    assert r.exit_code == 0, r.output
    url = f"journal://{(tmp_path / 'o' / 'study.journal').resolve()}"
    r = CliRunner().invoke(app, ["worker", "--study", "arxiv-llama-3-8b", "--storage", url,
                                 "--json"])
    assert r.exit_code == 0, r.output
    got = json.loads(r.stdout)
    assert got["trials"] == [] and got["study_complete"] == got["target"] == 10
