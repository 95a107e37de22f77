"""QA of the search's outputs as a vLLM/SGLang user reads them: the same $ in the terminal, the
report and the exports; export instructions that run on the engine release named; the export
check line saying what it checked; SGLang files in SGLang's words."""

from __future__ import annotations

import html
import json
import re
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.test_export_cli import write_batch
from tuner.cli.main import app
from tuner.core.catalog import get_model, load_gpus
from tuner.core.config import ServingConfig
from tuner.exports import render_export

runner = CliRunner()


@pytest.fixture(scope="module")
def searched(tmp_path_factory) -> tuple[Path, dict]:
    d = tmp_path_factory.mktemp("qa_outputs")
    wl = write_batch(d / "batch.jsonl")
    out = d / "out"
    r = runner.invoke(app, ["search", "--engines", "vllm", "--workload", str(wl), "--model",
                            "llama-3-8b", "--gpus", "A10,A40", "--n-trials", "16", "--out",
                            str(out), "--json"])
    assert r.exit_code == 0, (r.output, r.exception)
    return out, json.loads((out / "results.json").read_text())


def _report_text(out: Path) -> str:
    s = (out / "report.html").read_text()
    s = re.sub(r"<(script|style)\b.*?</\1>", " ", s, flags=re.S)
    return re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", s)))


# ---- one $ figure everywhere --------------------------------------------------------------------
def test_job_usd_reads_the_same_in_terminal_report_and_exports(searched):
    from tuner.cli import progress, search
    from tuner.core.units import fmt_usd
    from tuner.reports import extras, outputs, views

    # one function prints a job's $ (terminal, progress bar, report, exports)
    assert search.fmt_usd is progress.fmt_usd is views.fmt_usd is extras.fmt_usd is fmt_usd
    assert "def fmt_usd" not in Path(outputs.__file__).read_text()
    usd = fmt_usd
    # a sub-dollar job: 4 decimals, not cents ($0.0575 and $0.0649 both $0.06)
    assert fmt_usd(0.0575) == "$0.0575" and fmt_usd(1234.5) == "$1,234.50"
    bar = progress.SearchProgress(None, 1, disable=True)
    bar.best_t, bar.best_c = 60.0, 0.0352
    bar.show(1)
    assert "cheapest $0.0352" in bar.prog.tasks[0].fields["best"]  # the bar's, as the summary's
    out, res = searched
    costs = {g: res["winners"][g]["metrics"]["cost_usd"] for g in ("fastest", "cheapest")}
    assert any(0.01 < c < 1 for c in costs.values())  # where cents hide the difference
    for goal, cost in costs.items():
        header = next(line for line in (out / f"{goal}.vllm.yaml").read_text().splitlines()
                      if "predicted makespan" in line)
        assert f", {usd(cost)} for " in header, header
        headline = re.search(rf"{goal.capitalize()}: [^—]*— [^,]+, (\$[0-9.,]+)",
                             _report_text(out))
        assert headline and headline.group(1) == usd(cost), headline


# ---- the vLLM YAML's run line --------------------------------------------------------------------
def _yaml(**kw) -> str:
    model, gpu = get_model("llama-3-8b"), load_gpus()["A100-80G"]
    cfg = ServingConfig(gpu="A100-80G", chunk_size=8192, max_running=64,
                        scheduler=kw.pop("scheduler", "vllm"))
    return render_export("vllm", cfg, model, gpu, max_model_len=4096, **kw)


def test_vllm_yaml_run_line_gives_the_model_and_needs_no_config_flag_before_0_6_0():
    newest = _yaml()
    # vllm serve requires its positional model before 0.8 even when the file names it
    assert "# Run: vllm serve meta-llama/Meta-Llama-3-8B --config THIS_FILE" in newest
    old = _yaml(scheduler="vllm-v0", engine_version="0.5.5", num_scheduler_steps=10)
    run = next(line for line in old.splitlines() if line.startswith("# Run: "))
    assert "--config" not in run.split("(")[0]  # the 0.5.5 wheel's `vllm serve` has none
    for flag in ("--max-num-batched-tokens 8192", "--max-num-seqs 64",
                 "--enable-chunked-prefill False", "--num-scheduler-steps 10"):
        assert flag in run, run
    assert "0.6.0" in run


# ---- what `tuner export` says it checked -----------------------------------------------------------
def _fake_vllm(root: Path, version: str) -> None:
    """A vLLM whose parser accepts any option (so the line is about the check, not vLLM)."""
    pkg = root / "vllm"
    (pkg / "engine").mkdir(parents=True)
    (pkg / "__init__.py").write_text(f"__version__ = {version!r}\n")
    (pkg / "engine" / "__init__.py").write_text("")
    (pkg / "utils.py").write_text(
        "import argparse\n"
        "class FlexibleArgumentParser(argparse.ArgumentParser):\n"
        "    def parse_args(self, args=None, namespace=None):\n"
        "        return self.parse_known_args(args, namespace)[0]\n")
    (pkg / "engine" / "arg_utils.py").write_text(
        "class EngineArgs:\n"
        "    @staticmethod\n"
        "    def add_cli_args(p):\n"
        "        return p\n"
        "    @classmethod\n"
        "    def from_cli_args(cls, ns):\n"
        "        return cls()\n")


def test_export_check_line_names_the_parser_and_what_it_did_not_check(searched, tmp_path,
                                                                       monkeypatch):
    _fake_vllm(tmp_path, "9.9.9")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    monkeypatch.setenv("TUNER_VLLM_PYTHON", sys.executable)
    out, _ = searched
    r = runner.invoke(app, ["export", "--out", str(out), "--format", "vllm"])
    assert r.exit_code == 0, (r.output, r.exception)
    line = next(x for x in r.stderr.splitlines() if x.startswith("checked:"))
    assert "vLLM 9.9.9's argument parser" in line and sys.executable in line
    assert "option names and value types" in line
    assert "not checked: the engine's start-up" in line


# ---- SGLang files in SGLang's words --------------------------------------------------------------
def test_sglang_export_notes_name_sglang_options_not_vllm_ones(searched):
    out, _ = searched
    r = runner.invoke(app, ["export", "--out", str(out), "--format", "sglang"])
    assert r.exit_code == 0, (r.output, r.exception)
    notes = [x for x in r.stdout.splitlines() if x.startswith("# NOTE")]
    text = "\n".join(notes)
    assert "vLLM answers each one 400" not in text and "vLLM --chat-template" not in text
    assert "SGLang --chat-template FILE" in text
    ctx = re.search(r"SGLang: --context-length (\d+)", text)
    assert ctx and f"--context-length {ctx.group(1)}" in r.stdout  # the note and the flag agree


# ---- the report's export command ------------------------------------------------------------------
def test_report_export_command_names_the_out_folder_and_every_format(searched):
    from tuner.exports import EXPORT_FORMATS

    out, _ = searched
    cmd = re.search(r"Any rank or goal: (tuner export [^.]*)", _report_text(out))
    assert cmd, "no export command in the report"
    assert "--out DIR" in cmd.group(1) and "--goal fastest|cheapest" in cmd.group(1)
    assert "|".join(EXPORT_FORMATS) in cmd.group(1)
