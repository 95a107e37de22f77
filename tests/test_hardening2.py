"""Hardening, part 2: storage credentials never printed (and the right driver named), --workers
capped at the machine's CPUs, and a study without a plan within its --deadline not blocking
the rerun. Each through the real entry point (tests.test_bad_inputs.main_in_process)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from tests.test_bad_inputs import main_in_process, snapshot
from tuner.core.secrets import mask_secrets

REPO = Path(__file__).resolve().parents[1]
ARXIV = str(REPO / "examples" / "arxiv.jsonl")
SEARCH = ["search", "-w", ARXIV, "-m", "llama-3-8b", "--gpus", "A10", "--n-trials", "3",
          "--out", "out"]
PG = "postgresql://user:s3cret@127.0.0.1:1/db"  # nothing listens on port 1


def _run(argv: list[str], cwd: Path, capfd) -> tuple[int, str, str]:
    capfd.readouterr()
    code = main_in_process(argv, cwd)
    out, err = capfd.readouterr()
    return code, out, err


def _one_error(code: int, out: str, err: str, *, late: bool = False) -> str:
    """The error line of a failed command: exit 2, no traceback, the last line of stderr (the
    only one unless the failure came after the search started)."""
    assert code == 2, (code, out[-2000:], err[-3000:])
    assert "Traceback" not in out + err, err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("error:")]
    assert len(errors) == 1 and lines[-1] == errors[0], err
    assert late or len(lines) == 1, err
    return errors[0]


# ---- 1. secrets ---------------------------------------------------------------------------------
@pytest.mark.parametrize("argv", [
    [*SEARCH, "--storage", PG],
    ["results", "--storage", PG],
    ["worker", "--study", "x", "--storage", PG],
], ids=["search", "results", "worker"])
def test_storage_errors_never_print_the_password(argv, tmp_path: Path, capfd) -> None:
    before = snapshot(tmp_path)
    code, out, err = _run(argv, tmp_path, capfd)
    line = _one_error(code, out, err)
    assert "s3cret" not in out + err, err
    assert "postgresql://user:***@127.0.0.1:1/db" in line, line
    assert snapshot(tmp_path) == before


def test_a_driver_message_with_the_url_is_masked(tmp_path: Path, capfd, monkeypatch) -> None:
    """SQLAlchemy / driver errors can quote the URL (password included): masked too."""
    import optuna

    def refuse(url, **_kw):
        raise RuntimeError(f"(OperationalError) could not connect to {url} (password=s3cret)")

    monkeypatch.setattr(optuna.storages, "RDBStorage", refuse)
    code, out, err = _run(["results", "--storage", PG], tmp_path, capfd)
    line = _one_error(code, out, err)
    assert "s3cret" not in out + err and "could not connect to" in line, line
    assert "user:***@127.0.0.1:1/db" in line and "password=***" in line, line


@pytest.mark.parametrize("url, needles", [
    ("mysql://user:s3cret@127.0.0.1:1/db", ("pip install pymysql", "mysql+pymysql://",
                                            "mysqlclient")),
    ("mysql+pymysql://user:s3cret@127.0.0.1:1/db", ("pip install pymysql",)),
])
def test_mysql_is_told_its_own_driver(url, needles, tmp_path: Path, capfd) -> None:
    if importlib.util.find_spec("pymysql") or importlib.util.find_spec("MySQLdb"):
        pytest.skip("a MySQL driver is installed")
    code, out, err = _run(["results", "--storage", url], tmp_path, capfd)
    line = _one_error(code, out, err)
    assert "s3cret" not in out + err and "tuner[postgres]" not in line, line
    for needle in needles:
        assert needle in line, (needle, line)


@pytest.mark.parametrize("text, masked", [
    ("postgresql://user:s3cret@host:5432/db", "postgresql://user:***@host:5432/db"),
    ("a mysql+pymysql://u:p@ss@h/db b", "a mysql+pymysql://u:***@h/db b"),
    ("postgresql://host:5432/db", "postgresql://host:5432/db"),
    ("journal:///tmp/out/study.journal", "journal:///tmp/out/study.journal"),
    ("host=x password=s3cret port=1", "host=x password=*** port=1"),
])
def test_mask_secrets(text: str, masked: str) -> None:
    assert mask_secrets(text) == masked


# ---- 2. --workers capped at the CPUs ------------------------------------------------------------
def test_workers_beyond_the_cpus_are_capped(tmp_path: Path, capfd) -> None:
    from tuner.cli.search import cpu_count

    (tmp_path / "space.yaml").write_text("knobs:\n  chunk_size: [512, 2048]\n")
    argv = ["search", "-w", ARXIV, "-m", "llama-3-8b", "--gpus", "A10", "--n-trials", "2",
            "--out", "out", "--space", "space.yaml", "--workers", "1000"]
    code, out, err = _run(argv, tmp_path, capfd)
    assert code == 0, (out[-2000:], err[-3000:])
    cap = (f"--workers 1000 capped at {cpu_count()} (this machine's CPUs: each worker "
           "simulates on one core)")
    assert cap in err.splitlines(), err
    assert (tmp_path / "out" / "results.json").is_file()


# ---- 3. no plan within the --deadline: the rerun is not blocked ---------------------------------
@pytest.mark.parametrize("resume", [False, True], ids=["plain", "resume"])
def test_a_deadline_nothing_meets_does_not_block_the_rerun(resume: bool, tmp_path: Path,
                                                           capfd) -> None:
    before = snapshot(tmp_path)
    code, out, err = _run([*SEARCH, "--deadline", "1s"], tmp_path, capfd)
    line = _one_error(code, out, err, late=True)
    assert "no plan finishes within 1 s" in line, line
    assert snapshot(tmp_path) == before  # its study holds nothing worth keeping: removed
    argv = [*SEARCH, "--deadline", "1h"] + (["--resume"] if resume else [])
    code, out, err = _run(argv, tmp_path, capfd)
    assert code == 0, (out[-2000:], err[-3000:])
    assert (tmp_path / "out" / "results.json").is_file()


def test_a_failed_storage_leaves_no_empty_out_folder(tmp_path: Path, capfd) -> None:
    """--out is made for the outputs; a search refused before writing any (its --storage cannot
    be opened) takes the empty folder away again, and keeps a folder that was already there."""
    _one_error(*_run([*SEARCH, "--storage", PG], tmp_path, capfd))
    assert not (tmp_path / "out").exists()
    (tmp_path / "out").mkdir()
    _one_error(*_run([*SEARCH, "--storage", PG], tmp_path, capfd))
    assert (tmp_path / "out").is_dir()
