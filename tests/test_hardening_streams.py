"""Hardening: a workload read from a stream (stdin, a FIFO, <(cmd)) is read once; an OpenAI
request's ``n`` counts n completions."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from tuner.cli.main import app
from tuner.core.errors import TunerError
from tuner.core.workload import STDIN_NAME, load_workload

ROOT = Path(__file__).resolve().parents[1]
ARXIV = ROOT / "examples" / "arxiv.jsonl"
SIM = ["simulate", "-m", "llama-3-8b", "-g", "A40", "--json"]
runner = CliRunner()


def tuner(*args: str | Path, stdin: bytes | None = None,
          timeout: float = 120) -> subprocess.CompletedProcess:
    """The CLI in a subprocess, `stdin` piped in (a real pipe, not a file)."""
    return subprocess.run([sys.executable, "-m", "tuner.cli", *map(str, args)],
                          input=stdin, capture_output=True, timeout=timeout, cwd=ROOT)


def makespan(stdout: bytes) -> float:
    return json.loads(stdout)["makespan_s"]


# ---- streams --------------------------------------------------------------------------------
def test_simulate_reads_the_workload_from_stdin_as_from_the_file():
    ref = tuner(*SIM, "-w", ARXIV)
    assert ref.returncode == 0, ref.stderr
    for flag in ("-", "/dev/stdin"):
        r = tuner(*SIM, "-w", flag, stdin=ARXIV.read_bytes())
        assert r.returncode == 0, r.stderr
        assert makespan(r.stdout) == makespan(ref.stdout)


def test_workload_stats_reads_stdin():
    ref = runner.invoke(app, ["workload", "stats", str(ARXIV), "--json"])
    r = tuner("workload", "stats", "-", "--json", stdin=ARXIV.read_bytes())
    assert r.returncode == 0, r.stderr
    got, want = json.loads(r.stdout), json.loads(ref.stdout)
    assert got["source"] == STDIN_NAME
    assert got["count"] == want["count"] == 400
    assert got["total_prompt_tokens"] == want["total_prompt_tokens"]


def _fifo(tmp_path: Path, data: bytes, name: str = "jobs") -> tuple[Path, threading.Thread]:
    fifo = tmp_path / name
    os.mkfifo(fifo)

    def write():
        with open(fifo, "wb") as fh:  # blocks until the reader opens it
            fh.write(data)

    t = threading.Thread(target=write, daemon=True)
    t.start()
    return fifo, t


def test_simulate_reads_a_fifo_once(tmp_path):
    ref = runner.invoke(app, [*SIM, "-w", str(ARXIV)])
    assert ref.exit_code == 0, ref.output
    fifo, writer = _fifo(tmp_path, ARXIV.read_bytes())
    # a subprocess with a timeout: a second open of the FIFO would wait for a writer forever
    r = tuner(*SIM, "-w", fifo, timeout=60)
    writer.join(5)
    assert r.returncode == 0, r.stderr
    assert makespan(r.stdout) == makespan(ref.stdout.encode())


def test_a_fifo_csv_trace_is_sniffed(tmp_path):
    fifo, writer = _fifo(tmp_path, b"num_prefill_tokens,num_decode_tokens\n100,20\n300,40\n")
    r = tuner("workload", "stats", fifo, "--json", timeout=60)
    writer.join(5)
    assert r.returncode == 0, r.stderr
    st = json.loads(r.stdout)
    assert st["count"] == 2 and st["total_prompt_tokens"] == 400
    assert st["total_output_tokens"] == 60


def test_process_substitution(tmp_path):
    ref = tuner(*SIM, "-w", ARXIV)
    r = subprocess.run(["bash", "-c", f'"{sys.executable}" -m tuner.cli {" ".join(SIM)} '
                        f'-w <(cat "{ARXIV}")'], capture_output=True, timeout=120, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    assert makespan(r.stdout) == makespan(ref.stdout)


def test_a_bad_line_on_stdin_names_stdin_not_a_temporary_file():
    r = tuner(*SIM, "-w", "-", stdin=b'{"prompt_tokens": 10, "output_tokens": 5}\nnot json\n')
    assert r.returncode != 0
    err = r.stderr.decode()
    assert f"{STDIN_NAME}:2: invalid JSON" in err and "tuner-workload-" not in err


def test_an_empty_stdin_is_no_requests():
    r = tuner(*SIM, "-w", "-", stdin=b"")
    assert r.returncode != 0
    assert "no requests" in r.stderr.decode()


def test_search_from_stdin_writes_results_and_export_needs_no_file(tmp_path):
    out = tmp_path / "out"
    r = tuner("search", "--engines", "vllm", "-w", "-", "-m", "llama-3-8b", "--gpus", "A40", "--n-trials", "5",
              "--out", out, "--json", stdin=ARXIV.read_bytes(), timeout=300)
    assert r.returncode == 0, r.stderr
    assert (out / "results.json").is_file()
    assert json.loads(r.stdout)["study"] == "stdin-llama-3-8b"
    # the study stores the token counts: export works without the stream
    e = runner.invoke(app, ["export", "--out", str(out), "-f", "json", "--goal", "cheapest"])
    assert e.exit_code == 0, e.output
    assert json.loads(e.stdout)["config"]["gpu"] == "A40"
    # a script that runs the batch names no "<stdin>" file and says why
    s = runner.invoke(app, ["export", "--out", str(out), "-f", "run-batch", "--goal",
                            "cheapest"])
    assert s.exit_code == 0, s.output
    assert "standard input" in s.stdout and "'<stdin>'" not in s.stdout
    # where the workload must be read again, one line: give it again with --workload
    gpus = tmp_path / "gpus.yaml"
    gpus.write_text("[]\n")
    g = tuner("export", "--out", out, "-f", "json", "--gpu-file", gpus)
    assert g.returncode != 0
    err = g.stderr.decode()
    assert "standard input" in err and "--workload" in err and len(err.strip().splitlines()) == 1
    g = runner.invoke(app, ["export", "--out", str(out), "-f", "json", "--gpu-file", str(gpus),
                            "--workload", str(ARXIV)])
    assert g.exit_code == 0, g.output


# ---- n completions per request --------------------------------------------------------------
def batch_line(cid: str, content: str, max_tokens: int, **body) -> dict:
    return {"custom_id": cid, "method": "POST", "url": "/v1/chat/completions",
            "body": {"model": "m", "messages": [{"role": "user", "content": content}],
                     "max_tokens": max_tokens, **body}}


def write_jsonl(path: Path, rows: list) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def stats(path: Path) -> dict:
    r = runner.invoke(app, ["workload", "stats", str(path), "--json"])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def test_batch_n_counts_n_completions(tmp_path):
    text = "a question about something " * 20
    f = write_jsonl(tmp_path / "n.jsonl", [batch_line("a", text, 100, n=4),
                                           batch_line("b", "hi", 50)])
    st = stats(f)
    assert st["count"] == 5
    assert st["total_output_tokens"] == 4 * 100 + 50
    w = load_workload(f)
    # the 4 sequences share their whole prompt (prefilled once with prefix caching)
    assert w.prefix_ids is not None
    assert len(set(w.prefix_ids[:4].tolist())) == 1 and w.prefix_ids[4] == -1
    assert (w.prefix_tokens[:4] == w.prompt_tokens[:4]).all()


@pytest.mark.parametrize("row", [
    {"prompt": "hello world " * 10, "max_tokens": 30, "n": 3},
    {"prompt_tokens": 40, "output_tokens": 30, "n": 3},
])
def test_n_in_the_other_formats(tmp_path, row):
    f = write_jsonl(tmp_path / "n.jsonl", [row, {**row, "n": 1}, {k: v for k, v in row.items()
                                                                   if k != "n"}])
    st = stats(f)
    assert st["count"] == 5 and st["total_output_tokens"] == 5 * 30


def test_fast_and_general_paths_agree_on_n(tmp_path):
    """A line with a prefix_id takes the general path; without, the fast one (n=1) or the
    general one (n>1): all give the same columns as the expanded file."""
    expanded = write_jsonl(tmp_path / "e.jsonl", [{"prompt_tokens": 40, "output_tokens": 7,
                                                   "prefix_id": "p", "prefix_tokens": 40}] * 3)
    n = write_jsonl(tmp_path / "n.jsonl", [{"prompt_tokens": 40, "output_tokens": 7, "n": 3}])
    a, b = load_workload(expanded), load_workload(n)
    assert np.array_equal(a.prompt_tokens, b.prompt_tokens)
    assert np.array_equal(a.output_tokens, b.output_tokens)
    assert np.array_equal(a.prefix_tokens, b.prefix_tokens)
    assert np.array_equal(a.prefix_ids, b.prefix_ids)


def test_n_keeps_custom_ids_unique(tmp_path):
    f = write_jsonl(tmp_path / "n.jsonl", [batch_line("a", "x", 5, n=2),
                                           batch_line("a", "y", 5, n=3)])
    with pytest.raises(TunerError, match=r"n.jsonl:2: duplicate custom_id 'a'"):
        load_workload(f)
    w = load_workload(f, skip_invalid=True)  # the repeated line goes with its 3 completions
    assert len(w) == 2 and w.skipped == 1


@pytest.mark.parametrize("n, msg", [
    (0, "n must be between 1 and 128"), (129, "n must be between 1 and 128"),
    (-2, "n must be between 1 and 128"), (True, "n must be an integer"),
    (2.5, "n must be an integer"), ("4", "n must be an integer"),
])
def test_bad_n_is_one_line(tmp_path, n, msg):
    f = write_jsonl(tmp_path / "n.jsonl", [batch_line("a", "x", 5, n=n)])
    with pytest.raises(TunerError, match=rf"n.jsonl:1: body {msg}"):
        load_workload(f)
    g = write_jsonl(tmp_path / "p.jsonl", [{"prompt": "x", "max_tokens": 5, "n": n}])
    with pytest.raises(TunerError, match=rf"p.jsonl:1: {msg}"):
        load_workload(g)


def test_null_n_is_one(tmp_path):
    f = write_jsonl(tmp_path / "n.jsonl", [batch_line("a", "x", 5, n=None),
                                           batch_line("b", "x", 5, n=1)])
    w = load_workload(f)
    assert len(w) == 2 and w.prefix_ids is None


def test_n_simulates_more_decode_than_one(tmp_path):
    rows = [{"prompt_tokens": 500, "output_tokens": 200, "n": 8}] * 20
    one = [{"prompt_tokens": 500, "output_tokens": 200}] * 20
    a = runner.invoke(app, [*SIM, "-w", str(write_jsonl(tmp_path / "n.jsonl", rows))])
    b = runner.invoke(app, [*SIM, "-w", str(write_jsonl(tmp_path / "one.jsonl", one))])
    assert a.exit_code == 0 and b.exit_code == 0, a.output + b.output
    assert makespan(a.stdout.encode()) > makespan(b.stdout.encode())
