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


@pytest.fixture(autouse=True)
def _isolated_calibration_store(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("TUNER_CALIBRATION_DIR", str(tmp_path_factory.getbasetemp() / "calibration"))
