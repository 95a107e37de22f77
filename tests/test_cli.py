"""Tests for the `tuner` command line: catalogs, workload stats, simulate, search, and that every
user error is one `error:` line on stderr, exit code 2, no traceback, no output file."""

from __future__ import annotations

import csv
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import yaml
from typer.testing import CliRunner

from tuner.cli.main import app
from tuner.exports import from_json, parse_export
from tuner.search import load_study

REPO = Path(__file__).resolve().parents[1]
SIM_KEYS = {"makespan_s", "cost_usd", "requests", "output_tokens", "throughput_tok_s", "qps",
            "preemptions", "peak_kv_fraction", "lower_bound_s", "kv_capacity_tokens", "config",
            "provenance", "startup_s"}
TIMELINE_COLUMNS = ["time_s", "running", "prefill_tokens", "decode_tokens", "kv_fraction",
                    "preemptions"]
OUT_FILES = {"report.html", "fastest.vllm.yaml", "cheapest.vllm.yaml", "fastest.json",
             "cheapest.json", "results.json", "fastest.run-batch.sh", "cheapest.run-batch.sh",
             "fastest.ray-data.py", "cheapest.ray-data.py"}

runner = CliRunner()


def write_workload(path: Path, n: int = 40, seed: int = 0) -> Path:
    rng = np.random.default_rng(seed)
    with path.open("w") as fh:
        for p, o in zip(rng.integers(100, 1500, n), rng.integers(20, 300, n), strict=True):
            fh.write(json.dumps({"prompt_tokens": int(p), "output_tokens": int(o)}) + "\n")
    return path


def tuner(*args: str | Path, cwd: Path | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    """The real entry point, `tuner.cli.main()`, in a fresh interpreter on a narrow terminal
    (COLUMNS=40: a long error line must still come out as one line)."""
    env = dict(os.environ, COLUMNS="40")
    env.pop("FORCE_COLOR", None)
    return subprocess.run([sys.executable, "-m", "tuner.cli", *map(str, args)], capture_output=True,
                          text=True, timeout=timeout, cwd=cwd or REPO, env=env)


def files_under(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if p.is_file()] if folder.exists() else []


def assert_one_line_error(r: subprocess.CompletedProcess, *needles: str,
                          out: Path | None = None) -> str:
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr + r.stdout, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, r.stderr
    line = lines[0]
    assert line.startswith("error:"), line
    for needle in needles:
        assert needle in line, (needle, line)
    assert r.stdout == ""
    if out is not None:
        assert files_under(out) == [], files_under(out)
    return line


@pytest.fixture(scope="module")
def wl(tmp_path_factory) -> Path:
    return write_workload(tmp_path_factory.mktemp("wl") / "small.jsonl")


# ---- catalogs and workload stats (in-process) ------------------------------------------------
def test_gpus_table_and_json():
    r = runner.invoke(app, ["gpus"])
    assert r.exit_code == 0, r.output
    assert "A10" in r.stdout and "A40" in r.stdout
    # the A40's NVLink bridges join pairs only: said in its row, not in an NVSwitch board's
    rows = {ln.split("│")[1].strip(): ln for ln in r.stdout.splitlines() if ln.count("│") > 3}
    assert "56 pairs" in rows["A40"] and "pairs" not in rows["H100"]
    r = runner.invoke(app, ["gpus", "--json", "--price", "A10=0.75"])
    assert r.exit_code == 0, r.output
    cat = json.loads(r.stdout)
    for name in ("A10", "A40"):
        assert cat[name]["name"] == name
        assert cat[name]["price_source"]
        assert cat[name]["memory_gib"] > 0 and cat[name]["price_usd_per_h"] > 0
    assert cat["A10"]["price_usd_per_h"] == 0.75
    assert cat["A40"]["nvlink_all_pairs"] is False and cat["H100"]["nvlink_all_pairs"] is True


def test_models_table_and_json():
    r = runner.invoke(app, ["models"])
    assert r.exit_code == 0, r.output
    assert "llama-3-8b" in r.stdout
    r = runner.invoke(app, ["models", "--json"])
    assert r.exit_code == 0, r.output
    cat = json.loads(r.stdout)
    m = cat["llama-3-8b"]
    assert m["num_layers"] == 32 and m["num_kv_heads"] == 8
    assert 7e9 < m["num_params"] < 9e9


def test_workload_stats(wl):
    r = runner.invoke(app, ["workload", "stats", str(wl)])
    assert r.exit_code == 0, r.output
    assert "40 requests" in r.stdout and "P:D ratio" in r.stdout
    r = runner.invoke(app, ["workload", "stats", str(wl), "--json"])
    assert r.exit_code == 0, r.output
    st = json.loads(r.stdout)
    rows = [json.loads(line) for line in wl.read_text().splitlines()]
    assert st["count"] == 40 and st["skipped"] == 0
    assert st["total_prompt_tokens"] == sum(x["prompt_tokens"] for x in rows)
    assert st["total_output_tokens"] == sum(x["output_tokens"] for x in rows)
    assert st["prompt"]["max"] == max(x["prompt_tokens"] for x in rows)


# ---- simulate --------------------------------------------------------------------------------
def test_simulate_json_and_timeline(wl, tmp_path):
    tl = tmp_path / "tl.csv"
    r = runner.invoke(app, ["simulate", "-w", str(wl), "-m", "llama-3-8b", "-g", "A10",
                            "--chunk-size", "2048", "--json", "--timeline", str(tl)])
    assert r.exit_code == 0, r.output
    res = json.loads(r.stdout)
    assert SIM_KEYS <= set(res)
    assert res["requests"] == 40
    rows = [json.loads(line) for line in wl.read_text().splitlines()]
    assert res["output_tokens"] == sum(x["output_tokens"] for x in rows)
    assert res["config"]["gpu"] == "A10" and res["config"]["chunk_size"] == 2048
    assert 0 < res["lower_bound_s"] <= res["makespan_s"]
    assert res["cost_usd"] > 0 and res["kv_capacity_tokens"] > 0
    assert res["throughput_tok_s"] == pytest.approx(res["output_tokens"] / res["makespan_s"])
    assert res["qps"] == pytest.approx(40 / res["makespan_s"])
    assert isinstance(res["provenance"], str) and res["provenance"]

    with tl.open() as fh:
        table = list(csv.reader(fh))
    assert table[0] == TIMELINE_COLUMNS
    body = np.array(table[1:], dtype=float)
    assert len(body) == res["iterations"] > 0
    t = body[:, 0]
    assert np.all(np.diff(t) > 0)
    # the timeline runs from the engines being up: the makespan less the start-up
    assert t[-1] == pytest.approx(res["makespan_s"] - res["startup_s"], rel=1e-6)
    assert np.all((body[:, 4] >= 0) & (body[:, 4] <= 1))
    # every output token was decoded, but each request's first (sampled by its prefill) and
    # the one a preempted request's recompute prefill samples
    assert body[:, 3].sum() + 40 + res["preemptions"] >= res["output_tokens"]
    assert body[:, 5].sum() == res["preemptions"]


def test_simulate_human_output(wl):
    r = runner.invoke(app, ["simulate", "-w", str(wl), "-m", "llama-3-8b", "-g", "A40"])
    assert r.exit_code == 0, r.output
    assert "makespan" in r.stdout and "KV capacity" in r.stdout


# ---- search ----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def searched(wl, tmp_path_factory):
    out = tmp_path_factory.mktemp("search") / "out"
    args = ["search", "--engines", "vllm", "--workload", wl, "--model", "llama-3-8b", "--gpus", "A10,A40",
            "--n-trials", "12", "--out", out, "--json"]
    return args, out, tuner(*args)


def test_search_writes_report_and_exports(searched):
    _, out, r = searched
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr
    assert OUT_FILES <= {p.name for p in out.iterdir()}
    summary = json.loads(r.stdout)
    results = json.loads((out / "results.json").read_text())
    assert results["winners"] == summary["winners"]
    f, c = results["winners"]["fastest"], results["winners"]["cheapest"]
    assert {f["config"]["gpu"], c["config"]["gpu"]} <= {"A10", "A40"}
    assert f["metrics"]["makespan_s"] <= c["metrics"]["makespan_s"]
    assert c["metrics"]["cost_usd"] <= f["metrics"]["cost_usd"]
    assert set(results["best_per_gpu"]) <= {"A10", "A40"} and results["best_per_gpu"]
    pareto = [(p["metrics"]["makespan_s"], p["metrics"]["cost_usd"]) for p in results["pareto"]]
    assert pareto == sorted(pareto, key=lambda x: x[0])
    assert all(b[1] < a[1] for a, b in zip(pareto, pareto[1:], strict=False))
    for which, rec in (("fastest", f), ("cheapest", c)):
        exp = json.loads((out / f"{which}.json").read_text())
        assert exp["config"] == rec["config"]
        y = yaml.safe_load((out / f"{which}.vllm.yaml").read_text())
        assert y["max-num-batched-tokens"] == rec["config"]["chunk_size"]
        assert y["max-num-seqs"] == rec["config"]["max_running"]
        # the at-scale exports of the same plan, as `tuner export` writes them
        cfg = from_json((out / f"{which}.json").read_text())
        assert parse_export("run-batch", (out / f"{which}.run-batch.sh").read_text()) == cfg
        assert parse_export("ray-data", (out / f"{which}.ray-data.py").read_text()) == cfg
        assert results["files"][f"{which}_run_batch"] == str(out / f"{which}.run-batch.sh")
    assert "<html" in (out / "report.html").read_text()[:2000].lower()
    st = load_study(results["study"], out_dir=out)
    # --n-trials 12, plus vLLM's defaults simulated beside the winners (flagged)
    assert len([t for t in st.trials if t.state.name == "COMPLETE"
                and not t.user_attrs.get("vllm_defaults")]) == 12


def test_search_again_without_resume_is_refused_and_keeps_files(searched):
    args, out, first = searched
    assert first.returncode == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    r = tuner(*args)
    assert_one_line_error(r, "--resume")
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    # --resume with nothing left to do finishes and rewrites the same winners.
    r = tuner(*args, "--resume")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["winners"] == json.loads(first.stdout)["winners"]


def test_search_human_output(wl, tmp_path):
    r = runner.invoke(app, ["search", "--engines", "vllm", "-w", str(wl), "-m", "llama-3-8b", "--gpus", "A10,A40",
                            "--n-trials", "6", "--out", str(tmp_path / "o")])
    assert r.exit_code == 0, r.output
    assert "Fastest:" in r.stdout and "Pareto front" in r.stdout
    assert "wrote report" in r.stdout


def test_skip_invalid_succeeds_and_reports_count(tmp_path):
    bad = tmp_path / "bad.jsonl"
    good = write_workload(tmp_path / "good.jsonl", n=20).read_text().splitlines()
    bad.write_text("\n".join(good[:5] + ['{"prompt_tokens": 12, "output_tokens"'] + good[5:])
                   + "\n")
    out = tmp_path / "out"
    r = tuner("search", "--engines", "vllm", "-w", bad, "-m", "llama-3-8b", "--gpus", "A10", "--n-trials", "5",
              "--out", out, "--skip-invalid", "--json")
    assert r.returncode == 0, r.stderr
    # One unwrapped line, even on a 40-column terminal and a long path.
    assert f"skipped 1 invalid line in {bad}" in r.stderr.splitlines()
    assert json.loads(r.stdout)["winners"]
    assert OUT_FILES <= {p.name for p in out.iterdir()}


# ---- user errors: one line, exit 2, no traceback, nothing written ----------------------------
def test_malformed_jsonl_names_file_and_line(tmp_path):
    bad = tmp_path / "bad.jsonl"
    good = write_workload(tmp_path / "good.jsonl", n=10).read_text().splitlines()
    bad.write_text("\n".join(good[:5] + ['{"prompt_tokens": 12, "output_tokens"'] + good[5:])
                   + "\n")
    out = tmp_path / "out"
    assert_one_line_error(tuner("search", "--engines", "vllm", "-w", bad, "-m", "llama-3-8b", "--gpus", "A10",
                                "--n-trials", "5", "--out", out), "bad.jsonl:6", out=out)


@pytest.mark.parametrize("case", ["empty", "missing"])
def test_empty_or_missing_workload(tmp_path, case):
    path = tmp_path / "w.jsonl"
    if case == "empty":
        path.write_text("")
    out = tmp_path / "out"
    line = assert_one_line_error(tuner("search", "--engines", "vllm", "-w", path, "-m", "llama-3-8b", "--gpus", "A10",
                                       "--n-trials", "5", "--out", out), "w.jsonl", out=out)
    assert ("no requests" if case == "empty" else "no such file") in line


def test_unknown_gpu_suggests(wl, tmp_path):
    out = tmp_path / "out"
    line = assert_one_line_error(tuner("search", "--engines", "vllm", "-w", wl, "-m", "llama-3-8b", "--gpus",
                                       "A10,A4O", "--n-trials", "5", "--out", out), "A4O",
                                 out=out)
    assert "Did you mean" in line and "A40" in line.split("Did you mean")[1]


def test_unknown_model_suggests(wl, tmp_path):
    out = tmp_path / "out"
    line = assert_one_line_error(tuner("search", "--engines", "vllm", "-w", wl, "-m", "llama3-8b", "--gpus", "A10",
                                       "--n-trials", "5", "--out", out), "llama3-8b", out=out)
    assert "llama-3-8b" in line.split("Did you mean")[1]


def test_model_that_fits_nowhere_gives_numbers(wl, tmp_path):
    space = tmp_path / "space.yaml"
    space.write_text("knobs:\n  chunk_size: [512, 2048]\n  max_running: [64, 128]\n"
                     "  weight_bits: [16]\n")
    out = tmp_path / "out"
    line = assert_one_line_error(tuner("search", "--engines", "vllm", "-w", wl, "-m", "llama-2-70b", "--gpus", "A10",
                                       "--space", space, "--n-trials", "5", "--out", out),
                                 "llama-2-70b", "A10", "GiB", out=out)
    assert "does not fit" in line


def test_bad_price(wl, tmp_path):
    out = tmp_path / "out"
    assert_one_line_error(tuner("search", "--engines", "vllm", "-w", wl, "-m", "llama-3-8b", "--gpus", "A10",
                                "--price", "A10=abc", "--n-trials", "5", "--out", out),
                          "A10=abc", "--price", out=out)


@pytest.mark.parametrize("text, needle", [
    ("knobs:\n  chunk_size: [512]\n  bogus_knob: [1, 2]\n", "bogus_knob"),  # unknown knob
    ("knobs: {chunk_size: [512\n", "not valid YAML"),  # PyYAML's message spans several lines
    ("knobs:\n  chunk_size: [512]\nfixd:\n  tp: 1\n", "fixd"),  # misspelt section
    ("knobs: [chunk_size]\n", "mapping"),
])
def test_bad_space(wl, tmp_path, text, needle):
    space = tmp_path / "space.yaml"
    space.write_text(text)
    out = tmp_path / "out"
    assert_one_line_error(tuner("search", "--engines", "vllm", "-w", wl, "-m", "llama-3-8b", "--gpus", "A10",
                                "--space", space, "--n-trials", "5", "--out", out),
                          needle, "space.yaml", out=out)


def test_unwritable_out(wl, tmp_path):
    blocker = tmp_path / "afile"
    blocker.write_text("keep me")
    for out in (blocker / "sub", blocker):
        assert_one_line_error(tuner("search", "--engines", "vllm", "-w", wl, "-m", "llama-3-8b", "--gpus", "A10",
                                    "--n-trials", "5", "--out", out), str(out))
    assert blocker.read_text() == "keep me"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]


def test_zero_trials_and_bad_sampler(wl, tmp_path):
    out = tmp_path / "out"
    assert_one_line_error(tuner("search", "--engines", "vllm", "-w", wl, "-m", "llama-3-8b", "--gpus", "A10",
                                "--n-trials", "0", "--out", out), "--n-trials", out=out)
    assert_one_line_error(tuner("search", "--engines", "vllm", "-w", wl, "-m", "llama-3-8b", "--gpus", "A10",
                                "--n-trials", "5", "--sampler", "bogus", "--out", out),
                          "sampler", "bogus", out=out)


def test_simulate_errors(wl, tmp_path):
    assert_one_line_error(tuner("simulate", "-w", wl, "-m", "llama-3-8b", "-g", "A10",
                                "--tp", "3"), "3")
    assert_one_line_error(tuner("simulate", "-w", wl, "-m", "llama-2-70b", "-g", "A10"),
                          "does not fit", "GiB")
    blocker = tmp_path / "afile"
    blocker.write_text("")
    assert_one_line_error(tuner("simulate", "-w", wl, "-m", "llama-3-8b", "-g", "A10",
                                "--timeline", blocker / "tl.csv"), "timeline")


@pytest.mark.parametrize("args, needle", [
    (["search", "--engines", "vllm", "--gpus", "A10"], "--workload"),  # missing option
    (["search", "--engines", "vllm", "-w", "x.jsonl", "-m", "llama-3-8b", "--gpus", "A10", "--n-trials", "abc"],
     "--n-trials"),  # bad option value
    (["simulate", "--bogus"], "--bogus"),  # unknown option
    (["bogus"], "bogus"),  # unknown command
])
def test_usage_errors_are_one_line(args, needle):
    assert_one_line_error(tuner(*args), needle, "--help")


def test_markup_like_paths_are_printed_verbatim(tmp_path):
    # Rich markup in a user's path must neither vanish ("[v2]") nor crash ("[/v2]").
    (tmp_path / "d[").mkdir()
    for name in ("data[v2].jsonl", "d[/v2].jsonl"):
        path = tmp_path / name
        path.write_text('{"prompt_tokens": 5\n')
        assert_one_line_error(tuner("workload", "stats", path), f"{name}:1")


def test_ctrl_c_saves_trials_and_says_resume(tmp_path):
    wl = write_workload(tmp_path / "big.jsonl", n=300, seed=3)
    out = tmp_path / "out"
    proc = subprocess.Popen(
        [sys.executable, "-m", "tuner.cli", "search", "--engines", "vllm", "-w", str(wl), "-m", "llama-3-8b",
         "--gpus", "A10,A40", "--n-trials", "400", "--out", str(out), "--study", "i"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.1)
            try:
                st = load_study("i", out_dir=out)
                if sum(t.state.name == "COMPLETE" for t in st.trials) >= 3:
                    break
            except Exception:  # noqa: BLE001 - not created yet, or locked
                continue
        assert proc.poll() is None, "search finished before it could be interrupted"
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr
    assert stderr.strip().splitlines()[-1].startswith("interrupted")
    assert "--resume" in stderr
    assert sorted(p.name for p in out.iterdir()) == ["study.journal"]


@pytest.mark.parametrize("args, needle", [
    (["simulate", "-g", "A10", "--price", "A10=0"], "A10=0"),
    (["simulate", "-g", "A10", "--price", "A10=nan"], "A10=nan"),
    (["simulate", "-g", "A10", "--price", "A40=inf"], "A40=inf"),
    (["search", "--engines", "vllm", "--gpus", "A10", "--seed", "-1"], "--seed"),
    (["search", "--engines", "vllm", "--gpus", "A10", "--seed", str(2**32)], "--seed"),
])
def test_bad_price_or_seed_is_one_line_and_writes_nothing(tmp_path, wl, args, needle):
    out = tmp_path / "out"
    extra = ["--out", out] if args[0] == "search" else []
    r = tuner(*args, "-w", wl, "-m", "llama-3-8b", *extra)
    assert_one_line_error(r, needle, out=out)


def test_gpu_file_with_a_zero_price_is_refused(tmp_path, wl):
    gpus = tmp_path / "gpus.yaml"
    gpus.write_text(yaml.safe_dump({"A10": {"price_usd_per_h": 0.0}}))
    r = tuner("simulate", "-w", wl, "-m", "llama-3-8b", "-g", "A10", "--gpu-file", gpus)
    assert_one_line_error(r, "A10", "price_usd_per_h")


@pytest.mark.parametrize("command", ["simulate", "search"])
def test_unknown_profile_mode_is_refused_without_a_profile(tmp_path, wl, command):
    out = tmp_path / "out"
    gpu = ["-g", "A10"] if command == "simulate" else ["--gpus", "A10", "--out", out]
    r = tuner(command, "-w", wl, "-m", "llama-3-8b", *gpu, "--profile-mode", "foo")
    assert_one_line_error(r, "Unknown profile mode 'foo'", out=out)


def test_requests_beyond_the_context_fail_before_the_search(tmp_path):
    wl = tmp_path / "long.jsonl"
    wl.write_text("".join(json.dumps({"prompt_tokens": 9000 if i == 7 else 100,
                                      "output_tokens": 16}) + "\n" for i in range(20)))
    out = tmp_path / "out"
    r = tuner("search", "--engines", "vllm", "-w", wl, "-m", "llama-3-8b", "--gpus", "A10", "--out", out)
    assert_one_line_error(r, "1 of 20 requests", "8,192", "9,016", out=out)


# ---- the summary at 100 columns --------------------------------------------------------------
def table_rows(text: str, title: str) -> tuple[list[str], list[list[list[str]]]]:
    """The header cells and rows (each a list of lines, each line its cells) of the rich table
    titled `title` in `text`."""
    lines = text.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.strip() == title)
    head = next(ln for ln in lines[start:] if ln.startswith("┃"))
    header = [c.strip() for c in head.strip("┃").split("┃")]
    rows: list[list[list[str]]] = []
    body = lines[lines.index(head, start) + 2:]
    for ln in body[:next(i for i, b in enumerate(body) if b.startswith("└"))]:
        cells = [c.strip() for c in ln.strip("│").split("│")]
        if cells[0] or not rows:
            rows.append([])
        rows[-1].append(cells)
    return header, rows


def test_search_summary_fits_100_columns(monkeypatch, tmp_path):
    """On a 100-column terminal: no line wider, each configuration written compactly
    ('TP4×DP8 chunk 16384 R 64 ...') in at most 2 lines of its cell; the figures that do not fit
    beside it move to a second table."""
    import io

    from rich.console import Console

    import tuner.cli.search as search_cli

    buf = io.StringIO()
    monkeypatch.setattr(search_cli, "out", Console(file=buf, width=100, emoji=False))
    r = runner.invoke(app, ["search", "--engines", "vllm", "-w", str(REPO / "examples" / "arxiv.jsonl"), "-m",
                            "llama-3-8b", "--gpus", "A10,A40", "--n-trials", "40", "--out",
                            str(tmp_path / "o")])
    assert r.exit_code == 0, r.output
    text = buf.getvalue()
    wide = [ln for ln in text.splitlines() if len(ln) > 100]
    assert wide == [], wide
    for title in ("Best config per GPU", "Pareto front: makespan vs $"):
        title = next(ln.strip() for ln in text.splitlines() if ln.strip().startswith(title))
        header, rows = table_rows(text, title)
        col = header.index("config")
        assert rows
        for row in rows:
            cfg = [cells[col] for cells in row if cells[col]]
            assert 1 <= len(cfg) <= 2, (title, cfg)
            assert re.match(r"TP\d+×DP\d+ .*chunk \d+ R \d+", " ".join(cfg)), cfg
    assert "KV cap tokens" in text and "of physical limit" in text  # moved, not lost


def test_search_progress_shows_the_time_left():
    """The progress bar of a search: elapsed time and an ETA (rich's TimeRemainingColumn)."""
    import io

    from rich.console import Console
    from rich.progress import TimeRemainingColumn

    from tuner.cli.progress import SearchProgress

    buf = io.StringIO()
    with SearchProgress(Console(file=buf, width=120), 4, disable=False) as prog:
        assert any(isinstance(c, TimeRemainingColumn) for c in prog.prog.columns)
        for done in range(1, 5):
            prog.show(done)
    assert re.search(r"4/4 \d+:\d\d:\d\d eta \d+:\d\d:\d\d", buf.getvalue()), buf.getvalue()
