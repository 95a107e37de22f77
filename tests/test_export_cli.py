"""`tuner export` and `tuner report`: every format of any rank parses back to the trial's
ServingConfig; the report is rendered again from the stored study alone."""

from __future__ import annotations

import html
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import optuna
import pytest
from typer.testing import CliRunner

from tests.test_report import _keep_capsys, browser_check, needs_chromium  # noqa: F401
from tuner.cli.main import app
from tuner.core.config import ServingConfig
from tuner.core.errors import TunerError
from tuner.exports import EXPORT_FORMATS, parse_export
from tuner.search import load_study
from tuner.search.records import TrialRecord, trial_records

REPO = Path(__file__).resolve().parents[1]
runner = CliRunner()


def write_batch(path: Path, n: int = 40, seed: int = 0) -> Path:
    """An OpenAI Batch API JSONL whose requests name the model 'llama-3-8b'."""
    rng = np.random.default_rng(seed)
    with path.open("w") as fh:
        for i in range(n):
            words = " ".join(["paper"] * int(rng.integers(100, 1500)))
            fh.write(json.dumps({
                "custom_id": f"req-{i}", "method": "POST", "url": "/v1/chat/completions",
                "body": {"model": "llama-3-8b", "max_tokens": int(rng.integers(20, 300)),
                         "messages": [{"role": "user", "content": f"Summarize: {words}"}]},
            }) + "\n")
    return path


@pytest.fixture(scope="module")
def searched(tmp_path_factory) -> tuple[Path, Path, dict]:
    d = tmp_path_factory.mktemp("export")
    wl = write_batch(d / "batch.jsonl")
    out = d / "out"
    r = runner.invoke(app, ["search", "--engines", "vllm", "--workload", str(wl), "--model", "llama-3-8b", "--gpus",
                            "A10,A40", "--n-trials", "16", "--out", str(out), "--json"])
    assert r.exit_code == 0, (r.output, r.exception)
    return wl, out, json.loads((out / "results.json").read_text())


def stored_records(out: Path) -> tuple[optuna.Study, list[TrialRecord]]:
    st = load_study(None, out_dir=out)
    return st, trial_records(st)


def ranked(records: list[TrialRecord], goal: str) -> list[TrialRecord]:
    i, j = ("makespan_s", "cost_usd") if goal == "fastest" else ("cost_usd", "makespan_s")
    feas = [r for r in records if r.feasible]
    return sorted(feas, key=lambda r: (getattr(r.metrics, i), getattr(r.metrics, j), r.number))


def export(*args: str | Path) -> str:
    r = runner.invoke(app, ["export", *map(str, args)])
    assert r.exit_code == 0, (r.output, r.exception)
    return r.stdout


@pytest.mark.parametrize("fmt", EXPORT_FORMATS)
@pytest.mark.parametrize("goal", ["fastest", "cheapest"])
def test_every_format_parses_back_to_the_ranked_trial(searched, fmt, goal):
    _, out, results = searched
    _, records = stored_records(out)
    order = ranked(records, goal)
    assert order[0].number == results["winners"][goal]["number"]
    for rank in (1, 2):
        text = export("--out", out, "--format", fmt, "--goal", goal, "--rank", rank)
        want = order[rank - 1].config
        assert parse_export(fmt, text) == want
        assert f"trial #{order[rank - 1].number}" in text


def test_exports_encode_batch_limits_and_the_study_workload(searched):
    wl, out, results = searched
    best = results["winners"]["fastest"]
    cfg = best["config"]
    text = export("--out", out, "--format", "vllm-run-batch")
    body = [ln.rstrip("\\").strip() for ln in text.splitlines()
            if ln.strip() and not ln.startswith("#")]
    tokens = shlex.split(" ".join(body))
    tokens = tokens[tokens.index("run-batch") + 1:]
    assert tokens[:4] == ["-i", str(wl), "-o", str(wl.with_name("batch.results.jsonl"))]
    opts = dict(zip(tokens[4::2], tokens[5::2], strict=False))
    assert opts["--max-num-batched-tokens"] == str(cfg["chunk_size"])
    assert opts["--max-num-seqs"] == str(cfg["max_running"])
    assert opts["--served-model-name"] == "llama-3-8b"  # what the batch's requests ask for
    st, _ = stored_records(out)
    assert f"study '{st.study_name}'" in text
    sg = export("--out", out, "--format", "sglang")
    assert f"--max-running-requests {cfg['max_running']}" in sg
    assert f"--chunked-prefill-size {cfg['chunk_size']}" in sg
    doc = json.loads(export("--out", out, "--format", "json"))
    assert doc["trial"] == best["number"] and doc["rank"] == 1 and doc["goal"] == "fastest"
    assert doc["metrics"]["makespan_s"] == pytest.approx(best["metrics"]["makespan_s"])
    assert doc["memory"]["kv_capacity_tokens"] == best["memory"]["kv_capacity_tokens"]
    assert doc["vllm"]["engine_args"]["max_num_seqs"] == cfg["max_running"]
    # the same YAML the search wrote
    yaml_now = export("--out", out, "--format", "vllm")
    written = (out / "fastest.vllm.yaml").read_text()
    assert parse_export("vllm", yaml_now) == parse_export("vllm", written)
    # other batch files and a fixed max-model-len need no workload
    text = export("--out", out, "--format", "vllm-run-batch", "--batch-input", "x.jsonl",
                  "--batch-output", "y.jsonl", "--max-model-len", "2048")
    assert "-i x.jsonl -o y.jsonl" in text and "--max-model-len 2048" in text


def test_output_file_storage_url_and_study_name(searched, tmp_path):
    _, out, results = searched
    st, _ = stored_records(out)
    target = tmp_path / "sub" / "cheap.sh"
    r = runner.invoke(app, ["export", "--storage", f"journal:{out / 'study.journal'}", "--study",
                            st.study_name, "--format", "sglang", "--goal", "cheapest",
                            "--output", str(target)])
    assert r.exit_code == 0, (r.output, r.exception)
    assert r.stdout == ""
    want = ServingConfig.from_dict(results["winners"]["cheapest"]["config"])
    assert parse_export("sglang", target.read_text()) == want


@pytest.mark.parametrize("args, needle", [
    (["--format", "trt"], "--format"),
    (["--goal", "slowest"], "--goal"),
    (["--rank", "0"], "--rank"),
    (["--rank", "999"], "beyond"),
    (["--study", "nope"], "No study 'nope'"),
])
def test_export_user_errors(searched, args, needle):
    _, out, _ = searched
    r = runner.invoke(app, ["export", "--out", str(out), *args])
    assert r.exit_code != 0
    assert isinstance(r.exception, TunerError), r.exception
    assert needle in str(r.exception)


def test_export_errors_are_one_line(searched, tmp_path):
    """The real entry point: one `error:` line, exit 2, nothing written."""
    _, out, _ = searched
    env = dict(os.environ, COLUMNS="40")
    for args, needle in ((["--out", tmp_path / "missing"], "No study database"),
                         (["--out", out, "--storage", "sqlite:///x.db"], "either")):
        r = subprocess.run([sys.executable, "-m", "tuner.cli", "export", *map(str, args)],
                           capture_output=True, text=True, timeout=120, cwd=REPO, env=env)
        assert r.returncode == 2, r.stderr
        lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
        assert len(lines) == 1 and lines[0].startswith("error:") and needle in lines[0], lines
        assert "Traceback" not in r.stderr and r.stdout == ""
    assert not (tmp_path / "missing").exists()


@pytest.fixture(scope="module")
def reported(searched) -> Path:
    """`tuner report --out OUT`: the report again, from the stored study alone."""
    _, out, _ = searched
    r = runner.invoke(app, ["report", "--out", str(out)])
    assert r.exit_code == 0, (r.output, r.exception)
    assert str(out / "report.html") in r.stdout  # the default output
    return out / "report.html"


def test_report_from_stored_study(searched, reported, tmp_path):
    _, out, results = searched
    text = reported.read_text()
    st, records = stored_records(out)
    assert f"Optuna study <strong>{st.study_name}</strong>" in text
    for section in ("headline", "pareto", "best", "limit", "timeline", "sensitivity", "memory",
                    "workload", "provenance", "export"):
        assert f'<section id="{section}"' in text
    figs = set(re.findall(r'<script type="application/json" id="data-(\w+)">', text))
    assert {"pareto", "timeline", "limit", "slices", "memory", "workload"} <= figs
    fastest = results["winners"]["fastest"]["number"]
    assert f"#{fastest} " in text
    # every export snippet in the page parses back to its winner
    for which in ("fastest", "cheapest"):
        m = re.search(rf'<pre id="export-{which}-vllm-run-batch">(.*?)</pre>', text, re.S)
        if m is None:  # the same trial wins both: one block
            continue
        want = ServingConfig.from_dict(results["winners"][which]["config"])
        assert parse_export("vllm-run-batch", html.unescape(m.group(1))) == want
    # --output elsewhere; a folder as --output is refused
    target = tmp_path / "again.html"
    r = runner.invoke(app, ["report", "--out", str(out), "--output", str(tmp_path)])
    assert isinstance(r.exception, TunerError) and "folder" in str(r.exception)
    assert not target.exists()


@pytest.mark.browser
@needs_chromium
def test_report_of_a_real_search_in_browser(reported, tmp_path):
    dom = browser_check(reported, tmp_path, "search-report.png", modes=("light",))
    assert "Simulated timeline of the winners" in dom


def test_report_shows_validation_runs_of_the_out_folder(searched, tmp_path):
    """`tuner validate` writes OUT/validation.json; `tuner report --out OUT` shows it."""
    import shutil

    _, out, results = searched
    out2 = tmp_path / "out"
    out2.mkdir()
    shutil.copy(out / "study.journal", out2 / "study.journal")
    best = results["winners"]["fastest"]
    runs = [{"trial": best["number"], "config": best["config"],
             "predicted_s": best["metrics"]["makespan_s"],
             "measured_s": best["metrics"]["makespan_s"] * 1.25, "runner": "vllm",
             "measured_device": "NVIDIA H100", "notes": ["cold start excluded"]},
            {"trial": None, "config": best["config"], "predicted_s": "nan?",
             "measured_s": 1.0, "runner": "broken"}]
    (out2 / "validation.json").write_text(json.dumps({"validation": runs, "summary": {}}))
    r = runner.invoke(app, ["report", "--out", str(out2)])
    assert r.exit_code == 0, (r.output, r.exception)
    text = (out2 / "report.html").read_text()
    val = text[text.index('<section id="validation"'):text.index('<section id="provenance"')]
    assert f"#{best['number']}" in val and "-20 %" in val  # (1 - 1.25) / 1.25
    assert "vllm on NVIDIA H100" in val and "cold start excluded" in val
    assert "broken" not in val  # an unreadable run is left out, not an error
