"""The output files of `tuner search` / `results` / `report` are written as a set (issue 17), the
light fANOVA the report uses (issue 18), and the lazy imports of the command line."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import tuner.reports.outputs as outputs_mod
from tuner.reports.extras import fanova_importances
from tuner.reports.outputs import write_output_set

OLD = {"fastest.vllm.yaml": "old fastest\n", "fastest.json": "{\"old\": 1}\n",
       "report.html": "<p>old</p>\n", "results.json": "{\"old\": 2}\n"}
NEW = {name: text.replace("old", "new") for name, text in OLD.items()}


def _contents(folder: Path) -> dict[str, str]:
    return {p.name: p.read_text() for p in folder.iterdir() if p.is_file()}


def _no_staging(folder: Path) -> bool:
    return not [p for p in folder.iterdir() if p.name.startswith(".")]


@pytest.fixture
def out(tmp_path: Path) -> Path:
    d = tmp_path / "out"
    write_output_set(d, OLD)
    (d / "study.journal").write_text("journal\n")  # not part of the set: never touched
    return d


def test_a_set_replaces_the_previous_one_whole(out):
    paths = write_output_set(out, NEW)
    assert paths == {name: out / name for name in NEW}
    assert _contents(out) == {**NEW, "study.journal": "journal\n"}
    assert _no_staging(out)


def test_an_error_while_writing_leaves_the_previous_set(out, monkeypatch):
    real, calls = outputs_mod.write_atomic, []

    def failing(path, data):
        calls.append(path)
        if len(calls) == 3:  # the third file of the new set
            raise OSError(28, "No space left on device")
        return real(path, data)

    monkeypatch.setattr(outputs_mod, "write_atomic", failing)
    with pytest.raises(OSError, match="No space"):
        write_output_set(out, NEW)
    assert len(calls) == 3
    assert _contents(out) == {**OLD, "study.journal": "journal\n"}
    assert _no_staging(out)


def test_ctrl_c_while_writing_leaves_the_previous_set(out, monkeypatch):
    real = outputs_mod.write_atomic

    def interrupted(path, data):
        if Path(path).name == "report.html":
            raise KeyboardInterrupt
        return real(path, data)

    monkeypatch.setattr(outputs_mod, "write_atomic", interrupted)
    with pytest.raises(KeyboardInterrupt):
        write_output_set(out, NEW)
    assert _contents(out) == {**OLD, "study.journal": "journal\n"}
    assert _no_staging(out)


def _during_moves(monkeypatch, replace) -> None:
    """os.replace is ``replace(real, src, dst)`` while the staged set moves in (only then)."""
    real_move, real_replace = outputs_mod._move_in, os.replace

    def move_in(*args):
        monkeypatch.setattr(outputs_mod.os, "replace",
                            lambda src, dst: replace(real_replace, src, dst))
        try:
            return real_move(*args)
        finally:
            monkeypatch.setattr(outputs_mod.os, "replace", real_replace)

    monkeypatch.setattr(outputs_mod, "_move_in", move_in)


def test_a_failing_move_puts_the_previous_set_back(out, monkeypatch):
    moves = []

    def replace(real, src, dst):
        moves.append(Path(src).name)
        if len(moves) == 3:  # 2 files moved in, the third fails
            raise OSError(5, "Input/output error")
        return real(src, dst)

    _during_moves(monkeypatch, replace)
    with pytest.raises(OSError, match="Input/output"):
        write_output_set(out, NEW)
    assert len(moves) == 3 + 2  # the third failed; the two made before it are undone
    assert _contents(out) == {**OLD, "study.journal": "journal\n"}
    assert _no_staging(out)


def test_a_failing_move_removes_new_files_that_had_no_predecessor(out, monkeypatch):
    moves = []

    def replace(real, src, dst):
        moves.append(Path(src).name)
        if len(moves) == 2:
            raise OSError(5, "Input/output error")
        return real(src, dst)

    _during_moves(monkeypatch, replace)
    with pytest.raises(OSError):
        write_output_set(out, {"extra.json": "{}\n", **NEW})
    assert _contents(out) == {**OLD, "study.journal": "journal\n"}
    assert _no_staging(out)


def test_a_first_set_that_fails_leaves_nothing(tmp_path, monkeypatch):
    d = tmp_path / "fresh"

    def failing(path, data):
        raise OSError(13, "Permission denied")

    monkeypatch.setattr(outputs_mod, "write_atomic", failing)
    with pytest.raises(OSError):
        write_output_set(d, NEW)
    assert list(d.iterdir()) == []


def test_ctrl_c_during_the_moves_waits_until_the_set_is_in(out, monkeypatch):
    sent = []

    def replace(real, src, dst):
        if not sent:
            sent.append(True)
            os.kill(os.getpid(), signal.SIGINT)  # delivered at once to this (main) thread
        return real(src, dst)

    _during_moves(monkeypatch, replace)
    with pytest.raises(KeyboardInterrupt):
        write_output_set(out, NEW)
    assert sent
    assert _contents(out) == {**NEW, "study.journal": "journal\n"}  # whole, then interrupted
    assert _no_staging(out)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


# ---- fANOVA -----------------------------------------------------------------------------------
def _factorial(levels: tuple[int, ...], repeats: int) -> np.ndarray:
    grid = np.stack(np.meshgrid(*[np.arange(n) for n in levels], indexing="ij"), -1)
    return np.tile(grid.reshape(-1, len(levels)), (repeats, 1))


def test_fanova_recovers_the_main_effects_of_an_additive_function():
    # y = a(x0) + b(x1), x2 without effect: the main-effect variances under the uniform
    # distribution are var(a) and var(b) exactly; their shares are what fANOVA must report
    codes = _factorial((3, 2, 4), repeats=4)
    a, b = np.array([0.0, 4.0, 1.0]), np.array([0.0, 1.0])
    y = a[codes[:, 0]] + b[codes[:, 1]]
    shares = fanova_importances(codes, np.array([3, 2, 4]), y, n_trees=16, max_depth=6, seed=0)
    want = np.array([a.var(), b.var(), 0.0]) / (a.var() + b.var())
    np.testing.assert_allclose(shares, want, atol=0.03)
    assert shares.sum() == pytest.approx(1.0)


def test_fanova_marginalises_over_unsampled_values():
    # the sampler saw knob 0 mostly at value 0 (as TPE concentrates), but the main effect is
    # over the space's values, uniformly: knob 1 alone explains y
    rng = np.random.default_rng(3)
    codes = np.stack([np.where(rng.random(300) < 0.9, 0, rng.integers(1, 5, 300)),
                      rng.integers(0, 3, 300)], axis=1)
    y = np.array([1.0, 5.0, 9.0])[codes[:, 1]]
    shares = fanova_importances(codes, np.array([5, 3]), y)
    assert shares[1] == pytest.approx(1.0, abs=1e-9)


def test_fanova_is_deterministic_for_a_seed():
    codes = _factorial((3, 3), repeats=2)
    y = codes[:, 0] * codes[:, 1] + 0.5 * codes[:, 1]
    one = fanova_importances(codes, np.array([3, 3]), y, seed=1)
    np.testing.assert_array_equal(one, fanova_importances(codes, np.array([3, 3]), y, seed=1))


# ---- lazy imports -----------------------------------------------------------------------------
HEAVY = ("plotly", "sklearn", "pandas", "scipy", "optuna", "numba", "jinja2")


def _imported_after(code: str) -> list[str]:
    probe = (f"import sys\n{code}\n"
             f"print(' '.join(m for m in {HEAVY!r} if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                       timeout=120, check=True)
    return r.stdout.split()


def test_the_command_line_imports_nothing_heavy_at_start():
    assert _imported_after("import tuner.cli.main") == []


def test_the_output_pipeline_does_not_import_sklearn_or_pandas():
    loaded = _imported_after("import reports.outputs, reports.extras, reports.html")
    assert "sklearn" not in loaded and "pandas" not in loaded


# ---- progress ---------------------------------------------------------------------------------
def test_progress_counts_a_batch_of_trials_once():
    # --exhaustive adds trials in batches, then reports each: the bar must end at the batch size
    import optuna
    from rich.console import Console

    from tuner.cli.progress import SearchProgress

    dist = {"x": optuna.distributions.CategoricalDistribution([0, 1, 2, 3, 4])}
    study = optuna.create_study(directions=["minimize", "minimize"])
    batch = [optuna.trial.create_trial(values=[1.0 + i, 2.0], params={"x": i}, distributions=dist,
                                       user_attrs={"feasible": True, "fidelity": {"level": "full"},
                                                   "metrics": {}})
             for i in range(5)]
    study.add_trials(batch[:2])  # a resumed study holding two trials
    study.add_trials(batch[2:])
    with SearchProgress(Console(file=io.StringIO()), 5, disable=True) as prog:
        for t in study.get_trials(deepcopy=False)[2:]:
            prog.on_trial(study, t)
    assert prog.completed == 5
