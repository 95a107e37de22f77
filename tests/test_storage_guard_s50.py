"""A --storage sqlite:/// path that names a file which is not an SQLite database is refused
before SQLite opens it (stop 50): SQLite takes a file shorter than its header as a new database,
so `tuner results --storage sqlite:///notes.txt` on a 1-byte file turned it into a 112 KB
database. New, empty and real database files open as before."""

from __future__ import annotations

import subprocess
import sys

import optuna
import pytest

from tuner.core.errors import TunerError
from tuner.search.storage import make_storage


@pytest.mark.parametrize("content", [b"x", b"some notes\n", b"SQLite format 2\x00" + b"\x00" * 84])
def test_a_file_that_is_not_a_database_is_refused_and_left_alone(tmp_path, content):
    f = tmp_path / "notes.txt"
    f.write_bytes(content)
    with pytest.raises(TunerError, match="is not an SQLite database"):
        make_storage(f"sqlite:///{f}")
    assert f.read_bytes() == content


def test_the_cli_says_it_in_one_line_and_leaves_the_file(tmp_path):
    f = tmp_path / "tiny.txt"
    f.write_bytes(b"x")
    r = subprocess.run([sys.executable, "-m", "tuner.cli", "results", "--storage",
                        f"sqlite:///{f}"], capture_output=True, text=True)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "is not an SQLite database" in lines[0], r.stderr
    assert f.read_bytes() == b"x"


@pytest.mark.parametrize("start", ["missing", "empty"])
def test_new_and_real_databases_open(tmp_path, start):
    f = tmp_path / "study.db"
    if start == "empty":
        f.write_bytes(b"")
    st = make_storage(f"sqlite:///{f}")
    optuna.create_study(study_name="s", storage=st)
    st.engine.dispose()
    again = make_storage(f"sqlite:///{f}")  # now a real database: opens
    assert optuna.study.get_all_study_names(again) == ["s"]
    again.engine.dispose()


# ---- two messages that named the wrong thing (stop 50's CLI pass) ----------------------------
def test_an_empty_model_name_is_said_so():
    from tuner.core.catalog import get_model

    with pytest.raises(TunerError, match="No model given"):
        get_model("  ")


def test_a_gpu_file_that_is_a_folder_is_said_so(tmp_path):
    from tuner.core.catalog import load_gpus

    with pytest.raises(TunerError, match="is a folder"):
        load_gpus(tmp_path)
    with pytest.raises(TunerError, match="does not exist"):
        load_gpus(tmp_path / "missing.yaml")
