"""Robustness pass on the CLI (stop 50): plausible user mistakes on every command end in one
`error: ...` line and a non-zero exit, never a traceback, and leave nothing behind (no
half-written output, no empty --out folder); Ctrl-C at any moment of `tuner search` is one
line, exit 130, and an --out that is either absent or complete.

Rows run through the real entry point in this interpreter (tests/test_bad_inputs.py's
main_in_process: ~0.1-2 s each); the Ctrl-C checks run `python -m tuner.cli` processes.
Rows marked "s50" failed before this pass (what they printed is in the comment above each).
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.test_bad_inputs import (
    HAS_TORCH,
    SEARCH,
    SIM,
    STUDY,
    W_LINE,
    Ctx,
    W,
    files,
    main_in_process,
    snapshot,
    with_study,
)

LINUX = sys.platform.startswith("linux")  # /proc: a place nobody, root included, can write
STORAGE = "out/study.journal"
TOO_LONG = json.dumps({"prompt_tokens": 100_000, "output_tokens": 16}) + "\n"
SHORT = json.dumps({"prompt_tokens": 100, "output_tokens": 16}) + "\n"


@dataclass
class Row:
    id: str
    argv: str  # shlex-split, run in the row's folder (which holds w.jsonl)
    needle: str | tuple[str, ...] = ()  # in the error line
    setup: object = None  # Ctx -> None
    late: bool = False  # the search started: its progress lines come before the error line
    marks: tuple = ()
    trims: str | None = None  # a journal whose torn last line the storage cuts off (by design)


def truncated_study(ctx: Ctx) -> None:
    """out/: a finished study whose journal lost all but its first 2 kB (a torn copy)."""
    with_study(ctx)
    journal = ctx.tmp / "out" / "study.journal"
    journal.write_bytes(journal.read_bytes()[:2000])


def folder(name: str):
    def setup(ctx: Ctx) -> None:
        (ctx.tmp / name).mkdir()
    return setup


ON_LINUX = (pytest.mark.skipif(not LINUX, reason="writes under /proc"),)
WITH_TORCH = (pytest.mark.skipif(not HAS_TORCH, reason="torch is not installed"),)

ROWS = [
    # ---- names: a typo gets the close matches
    Row("model-typo", "simulate -w w.jsonl -m lama-3-8b -g A10", "Did you mean: llama-3-8b"),
    Row("gpu-typo", "simulate -w w.jsonl -m llama-3-8b -g A1O", "Did you mean: A10?"),
    Row("gpu-typo-in-list", SEARCH.replace("--gpus A10", "--gpus A10,A4O"), ("A4O", "A40")),
    Row("gpu-typo-cost", "cost -m llama-3-8b -g A1O --tokens 16", "Did you mean: A10?"),
    Row("model-typo-models", "models -m lama-3-8b", "Did you mean: llama-3-8b"),
    Row("model-typo-workload-stats", "workload stats w.jsonl -m lama-3-8b", "llama-3-8b"),
    Row("provider-typo", "gpus --provider awz", "Did you mean: aws?"),
    Row("command-typo", "serch", "Did you mean 'search'?"),
    Row("option-typo", SEARCH + " --n-trails 3", "--n-trials"),
    Row("empty-gpus", SEARCH.replace("--gpus A10", "--gpus ''"), "--gpus"),
    Row("only-commas-gpus", SEARCH.replace("--gpus A10", "--gpus ,,"), "--gpus"),
    # ---- numbers out of range: 0, negative, huge, NaN, 1e999
    Row("n-trials-0", SEARCH.replace("--n-trials 4", "--n-trials 0"), "--n-trials"),
    Row("n-trials-1e999", SEARCH.replace("--n-trials 4", "--n-trials 1e999"), "--n-trials"),
    Row("timeout-nan", SEARCH + " --timeout nan", "--timeout"),
    Row("sample-fraction-nan", SEARCH + " --sample-fraction nan", "--sample-fraction"),
    Row("seed-negative", SEARCH + " --seed -1", "--seed"),
    Row("workers-0", SEARCH + " --workers 0", "--workers"),
    Row("deadline-1e999", SEARCH + " --deadline 1e999", "--deadline"),
    Row("budget-nan", SEARCH + " --budget nan", "--budget"),
    Row("max-gpus-0", SEARCH + " --max-gpus 0", "--max-gpus"),
    Row("startup-1e999", SIM + " --startup-s 1e999", "--startup-s"),
    Row("max-model-len-0", SIM + " --max-model-len 0", "--max-model-len"),
    Row("max-model-len-huge", SIM + " --max-model-len 99999999999999999999", "--max-model-len"),
    Row("tp-0", SIM + " --tp 0", "tp"),
    Row("tp-word", SIM + " --tp two", "'two' is not a valid int"),
    Row("memory-nan", SIM + " --gpu-memory-utilization nan", "gpu_memory_utilization"),
    Row("price-nan", "gpus --price A10=nan", "--price"),
    Row("cost-tokens-negative", "cost -m llama-3-8b -g A10 --tokens -1", "--tokens"),
    Row("export-rank-0", "export --out out --rank 0", "--rank", with_study),
    # ---- files: missing, a folder for a file, a file for a folder, empty, garbage
    Row("workload-missing", "simulate -w nope.jsonl -m llama-3-8b -g A10", "no such file"),
    Row("workload-folder", "simulate -w d -m llama-3-8b -g A10", "is a directory", folder("d")),
    Row("workload-empty", "simulate -w e.jsonl -m llama-3-8b -g A10", "no requests",
        files(e_DOT_jsonl="")),
    Row("workload-garbage", "simulate -w g.jsonl -m llama-3-8b -g A10", "invalid JSON",
        files(g_DOT_jsonl="not json\n")),
    Row("workload-too-long", "simulate -w long.jsonl -m llama-3-8b -g A10", "--on-too-long",
        files(long_DOT_jsonl=TOO_LONG + SHORT)),
    Row("workload-stats-folder", "workload stats d", "is a directory", folder("d")),
    Row("space-missing", SEARCH + " --space nope.yaml", "nope.yaml"),
    Row("out-is-a-file", SEARCH.replace("--out out", "--out f"), "it is a file",
        files(f="x")),
    Row("out-under-a-file", SEARCH.replace("--out out", "--out f/sub"), "f/sub",
        files(f="x")),
    Row("out-read-only-place", SEARCH.replace("--out out", "--out /proc/tuner-out"),
        "/proc/tuner-out", marks=ON_LINUX),
    Row("timeline-read-only-place", SIM + " --timeline /proc/t.csv", "timeline",
        marks=ON_LINUX),
    Row("export-no-study", "export --out nothing-here", "No study database"),
    Row("report-no-study", "report --out nothing-here", "No study database"),
    Row("results-torn-journal", "results --out out", "metadata", truncated_study,
        trims="out/study.journal"),
    Row("transfer-missing", "transfer nope nope2", "does not exist"),
    # ---- conflicting flags
    Row("spot-without-provider", SIM + " --spot", "--provider"),
    Row("rate-without-spot", SIM + " --provider aws --interruption-rate 0.1", "--spot"),
    Row("exhaustive-with-workers", SEARCH + " --exhaustive --workers 2", "--exhaustive"),
    Row("storage-and-out", "export --out out --storage sqlite:///x.db", "not both", with_study),
    Row("existing-study", SEARCH, "--resume", with_study),
    # ---- s50: `tuner worker --wait nan` ran ("worker ran 0 trials", exit 0)
    Row("worker-wait-nan", f"worker --study {STUDY} --storage {STORAGE} --wait nan", "--wait",
        with_study),
    # ---- s50: `tuner validate --timeout -1` started the engine, left validation-runs/trial-N/
    # in --out and blamed the run: "The vllm run did not finish within -1 s (log: ...)"
    Row("validate-timeout-negative", "validate --out out --timeout -1", "--timeout", with_study),
    Row("validate-timeout-0", "validate --out out --timeout 0", "--timeout", with_study),
    Row("validate-timeout-nan", "validate --out out --timeout nan", "--timeout", with_study),
    # ---- s50: --workers with an in-memory storage searched for ~30 s, then "2 of 2 workers
    # failed; worker 0 exited with 2: error: No study ... in sqlite:///:memory:" after the
    # progress bar
    Row("workers-in-memory-storage", SEARCH + " --workers 2 --storage sqlite:///:memory:",
        ":memory:"),
    # ---- s50: a folder where a file is wanted was "no such file" / "does not exist", and a
    # file where a folder is wanted "does not exist"
    Row("replay-folder", "replay d -g A10 -m llama-3-8b", "is a folder", folder("d")),
    Row("calibrate-runs-folder", "calibrate --runs d", "is a folder", folder("d")),
    Row("fit-a-file", "fit f", "is a file", files(f="x")),
    # ---- s50: a bad profile option printed "Profiling ..." before its error and left the
    # empty --out folder behind
    Row("profile-repeats-0", "profile -m tiny-llama --device cpu --quick --repeats 0 --out p",
        "--repeats", marks=WITH_TORCH),
    Row("profile-threads-0", "profile -m tiny-llama --device cpu --quick --threads 0 --out p",
        "--threads", marks=WITH_TORCH),
    Row("profile-dtype", "profile -m tiny-llama --device cpu --quick --dtype int3 --out p",
        "--dtype", marks=WITH_TORCH),
]


def run(argv: list[str], tmp: Path, capfd) -> tuple[int, str, str]:
    capfd.readouterr()  # the setup's output
    code = main_in_process(argv, tmp)
    out, err = capfd.readouterr()
    return code, out, err


@pytest.mark.parametrize("row", [pytest.param(r, id=r.id, marks=r.marks) for r in ROWS])
def test_a_user_mistake_is_one_line_and_leaves_nothing(row: Row, tmp_path: Path, request,
                                                      capfd) -> None:
    (tmp_path / "w.jsonl").write_text(W)
    if row.setup is not None:
        row.setup(Ctx(tmp_path, request))
    before = snapshot(tmp_path)
    dirs_before = sorted(p for p in tmp_path.rglob("*") if p.is_dir())
    code, out, err = run(shlex.split(row.argv), tmp_path, capfd)

    assert code not in (0, None), (code, out[-2000:], err[-2000:])
    assert "Traceback" not in err + out, err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("error:")]
    assert len(errors) == 1 and lines[-1] == errors[0], err
    assert row.late or len(lines) == 1, err
    assert out == "", out
    for needle in (row.needle,) if isinstance(row.needle, str) else row.needle:
        assert needle in errors[0], (needle, errors[0])
    after = snapshot(tmp_path)
    if row.trims:  # tuner.search.storage trims a torn tail so that appends stay whole lines
        assert row.trims in after
        after[row.trims] = before[row.trims]
    assert after == before  # no output, no changed input
    assert sorted(p for p in tmp_path.rglob("*") if p.is_dir()) == dirs_before  # no empty --out


# ---- what must keep working ---------------------------------------------------------------
def test_one_trial_duplicate_gpus_and_a_one_request_workload_run(tmp_path: Path, capfd) -> None:
    """--n-trials 1, a GPU named twice (and in another case) and a workload of one request:
    a normal search with the complete output set."""
    (tmp_path / "one.jsonl").write_text(W_LINE)
    argv = shlex.split("search -w one.jsonl -m llama-3-8b --gpus A10,a10,A10 --n-trials 1 "
                       "--out out")
    code, _, err = run(argv, tmp_path, capfd)
    assert code == 0, err
    assert "Traceback" not in err
    assert "A10, A10" not in err and "a10" not in err  # searched once, by its catalog name
    names = {p.name for p in (tmp_path / "out").iterdir()}
    assert {"results.json", "report.html", "study.journal"} <= names, names
    assert not [n for n in names if n.endswith(".tmp") or n.startswith(".")], names


def test_results_rewrites_a_corrupted_results_json(tmp_path: Path, request, capfd) -> None:
    (tmp_path / "w.jsonl").write_text(W)
    with_study(Ctx(tmp_path, request))
    (tmp_path / "out" / "results.json").write_text('{"x": ')
    code, _, err = run(shlex.split("results --out out"), tmp_path, capfd)
    assert code == 0, err
    assert "Traceback" not in err
    json.loads((tmp_path / "out" / "results.json").read_text())  # whole again


def test_too_long_requests_run_with_on_too_long_skip(tmp_path: Path, capfd) -> None:
    (tmp_path / "long.jsonl").write_text(TOO_LONG + SHORT)
    code, out, err = run(shlex.split(f"{SIM.replace('w.jsonl', 'long.jsonl')} "
                                     "--on-too-long skip"), tmp_path, capfd)
    assert code == 0, err
    assert "Traceback" not in err + out


# ---- s50: `tuner export -o UNWRITABLE` failed only after reading the study and running
# vLLM's argument check (~30 s where .venv-vllm exists): "Cannot write /proc/nope.yaml"
@pytest.mark.skipif(not LINUX, reason="writes under /proc")
@pytest.mark.parametrize("target", ["/proc/nope.yaml", "/proc/a/b/nope.yaml"])
def test_export_to_an_unwritable_place_fails_before_reading_the_study(
        target: str, tmp_path: Path, request, capfd, monkeypatch) -> None:
    import tuner.search

    def no_study(*args, **kwargs):
        raise AssertionError("the study was read before the --output check")

    (tmp_path / "w.jsonl").write_text(W)
    with_study(Ctx(tmp_path, request))
    monkeypatch.setattr(tuner.search, "load_study", no_study)
    before = snapshot(tmp_path)
    code, out, err = run(["export", "--out", "out", "-o", target], tmp_path, capfd)
    assert code == 2, err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: Cannot write --output"), err
    assert target in lines[0]
    assert out == "" and snapshot(tmp_path) == before


# ---- Ctrl-C ---------------------------------------------------------------------------------
def _tuner(argv: list[str], cwd: Path, **kw) -> subprocess.Popen:
    env = dict(os.environ, COLUMNS="200")
    env.pop("FORCE_COLOR", None)
    return subprocess.Popen([sys.executable, "-m", "tuner.cli", *argv], cwd=cwd, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


def test_importing_the_cli_in_python_leaves_sigint_alone() -> None:
    """The early handler is the `tuner` process's only: a Python that imports tuner.cli
    (this test run) keeps its own Ctrl-C."""
    import tuner.cli

    assert signal.getsignal(signal.SIGINT) is not tuner.cli.early_sigint


# s50: a Ctrl-C in the first ~0.5 s of `tuner search` (while tuner.cli.main was importing)
# printed a KeyboardInterrupt traceback from the import machinery and died by the signal
def test_ctrl_c_while_the_cli_imports_is_one_line() -> None:
    """A `tuner` process (argv[0] is '-m' while `python -m tuner.cli` imports its package)
    that gets Ctrl-C right after tuner.cli is imported, before tuner.cli.main is."""
    code = ("import sys\nsys.argv[:1] = ['-m']\nimport tuner.cli\nimport os, signal, time\n"
            "os.kill(os.getpid(), signal.SIGINT)\ntime.sleep(30)\nprint('not interrupted')\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 130, (r.returncode, r.stderr)
    assert r.stderr == "interrupted\n" and r.stdout == "", r.stderr


@pytest.mark.skipif(not LINUX, reason="POSIX signals")
@pytest.mark.parametrize("delay_s", [0.3, 1.5])
def test_ctrl_c_during_a_search_is_one_line_and_out_is_absent_or_resumable(
        delay_s: float, tmp_path: Path) -> None:
    (tmp_path / "w.jsonl").write_text(W * 20)  # 400 requests: trials take a while
    proc = _tuner(shlex.split(SEARCH.replace("--n-trials 4", "--n-trials 300")), tmp_path)
    try:
        time.sleep(delay_s)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert "Traceback" not in err, err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    if proc.returncode == 0:  # it finished first (a fast machine): the full output set
        names = {p.name for p in (tmp_path / "out").iterdir()}
        assert {"results.json", "report.html", "study.journal"} <= names
        return
    assert proc.returncode == 130, (proc.returncode, err)
    assert lines[-1].startswith("interrupted"), err
    assert sum(ln.startswith("interrupted") for ln in lines) == 1, err
    out = tmp_path / "out"
    # nothing, or the journal that --resume continues: no half-written report or export
    assert not out.exists() or {p.name for p in out.iterdir()} <= {"study.journal"}, \
        sorted(p.name for p in out.iterdir())
