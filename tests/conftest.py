"""Shared fixtures: the README's model and GPUs, and test isolation (calibrations a developer
stored under ~/.cache must not change predictions the tests check, and tests that calibrate must
not leave fits there)."""

import pytest

from tuner.core.catalog import get_model, load_gpus


@pytest.fixture(scope="module")
def model():
    """llama-3-8b, the README's model (a module may define its own)."""
    return get_model("llama-3-8b")


@pytest.fixture(scope="module")
def gpus():
    """The README's candidates, A10 and A40 (a module may define its own)."""
    cat = load_gpus()
    return {"A10": cat["A10"], "A40": cat["A40"]}


@pytest.fixture(scope="module")
def study_out(tmp_path_factory):
    """A finished 4-trial search of tests/test_bad_inputs.py's w.jsonl (its out/ folder), for
    the CLI-level input checks that need a study (test_bad_inputs, test_hardening_inputs)."""
    import shlex

    from tests.test_bad_inputs import SEARCH, W, main_in_process

    base = tmp_path_factory.mktemp("study")
    (base / "w.jsonl").write_text(W)
    assert main_in_process(shlex.split(SEARCH), base) == 0
    return base / "out"


@pytest.fixture(autouse=True)
def _isolated_calibration_store(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("TUNER_CALIBRATION_DIR", str(tmp_path_factory.getbasetemp() / "calibration"))
