"""Test isolation: calibrations a developer stored under ~/.cache must not change predictions
the tests check, and tests that calibrate must not leave fits there."""

import pytest


@pytest.fixture(autouse=True)
def _isolated_calibration_store(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("TUNER_CALIBRATION_DIR", str(tmp_path_factory.getbasetemp() / "calibration"))
