"""Stop 51's QA of what the terminal prints: each knob once in a config cell, a readable model
catalog, and vLLM's argument check telling a model it cannot find offline apart from
arguments it refuses."""

from __future__ import annotations

import sys
from pathlib import Path

from typer.testing import CliRunner

from tuner.cli.main import app
from tuner.cli.tables import config_tokens
from tuner.core.catalog import load_models
from tuner.core.config import ServingConfig
from tuner.exports.common import vllm_parser_check
from tuner.exports.formats import ExportCheck


# ---- config cells: every knob once ---------------------------------------------------------
def test_an_sglang_plans_policy_and_tuners_order_do_not_both_read_fcfs():
    sg = ServingConfig(gpu="A40", engine="sglang", tp=2, dp=8).to_dict()  # both fcfs
    toks = config_tokens(sg, varying={"engine", "schedule_policy", "ordering"})
    assert "SGLang fcfs" in toks and "order fcfs" in toks
    assert toks.count("fcfs") == 0  # no bare value: which knob it is must be said
    vl = ServingConfig(gpu="A40", ordering="shortest-prompt").to_dict()
    assert "order shortest-prompt" in config_tokens(vl)
    # the InferMax preset 'vllm' next to the engine 'vLLM': named
    toks = config_tokens(ServingConfig(gpu="A40").to_dict(), varying={"engine", "scheduler"})
    assert toks[1] == "vLLM" and "scheduler vllm" in toks and "vllm" not in toks


# ---- tuner models ------------------------------------------------------------------------------
def test_a_quantized_checkpoints_weights_cell_is_short_with_the_scheme_apart():
    from tuner.cli.catalogs import _weights_text

    cat = load_models()
    cell, scheme = _weights_text(cat["gpt-oss-20b"])
    assert cell == "12.8 GiB mxfp4" and "modules_to_not_convert" in scheme
    cell, scheme = _weights_text(cat["deepseek-v3"])
    assert cell.endswith(" fp8") and scheme == "fp8, blocks 128x128"
    assert _weights_text(cat["llama-3-8b"]) == ("15.0 GiB", None)


def test_models_table_keeps_every_row_short_and_drops_ids_it_would_cut():
    from tuner.cli.catalogs import _model_columns

    r = CliRunner().invoke(app, ["models"])
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    i = next(n for n, line in enumerate(lines) if "│ gpt-oss-20b " in line)
    rows = [n for n, line in enumerate(lines) if line.startswith("│ ") and not
            line.startswith("│  ")]
    # the row's cells take at most 3 lines (was 15: the scheme in the cell)
    assert rows[rows.index(i) + 1] - i <= 3
    assert any(line.startswith("[1] gpt-oss-20b weights: mxfp4, ") for line in lines)
    assert "meta-llama/…" not in r.output  # an id cut to its org says nothing
    titles = ("model", "HF id", "config from")
    rows_ = [["m" * 10, "org/" + "x" * 40, "configs/x.json"]]
    assert _model_columns(titles, rows_, 200) == [0, 1, 2]
    assert _model_columns(titles, rows_, 30) == [0]


# ---- vLLM's argument check: a model not found offline is not a refusal ---------------------------
def _fake_vllm(root: Path) -> None:
    """vLLM's argument module as 0.8.5+ has it: under HF_HUB_OFFLINE, EngineArgs resolves
    --model to a local folder and fails (huggingface_hub's LocalEntryNotFoundError) where the
    checkpoint is not cached."""
    for d in ("vllm/engine", "vllm/utils", "huggingface_hub"):
        (root / d).mkdir(parents=True)
    for d in ("vllm", "vllm/engine", "vllm/utils", "huggingface_hub"):
        (root / d / "__init__.py").write_text("")
    (root / "huggingface_hub" / "errors.py").write_text(
        "class LocalEntryNotFoundError(Exception):\n    pass\n")
    (root / "vllm" / "utils" / "argparse_utils.py").write_text(
        "import argparse\nFlexibleArgumentParser = argparse.ArgumentParser\n")
    (root / "vllm" / "engine" / "arg_utils.py").write_text(
        "import os\n"
        "from huggingface_hub.errors import LocalEntryNotFoundError\n"
        "class EngineArgs:\n"
        "    @staticmethod\n"
        "    def add_cli_args(p):\n"
        "        p.add_argument('--model')\n"
        "        p.add_argument('--max-num-seqs', type=int)\n"
        "        return p\n"
        "    @classmethod\n"
        "    def from_cli_args(cls, ns):\n"
        "        if os.environ.get('HF_HUB_OFFLINE') and not os.path.exists(ns.model):\n"
        "            raise LocalEntryNotFoundError('Cannot find an appropriate cached snapshot "
        "folder. To enable look-ups pass local_files_only=False')\n"
        "        return cls()\n")


def test_a_model_not_found_offline_is_said_apart_from_the_arguments(tmp_path, monkeypatch):
    _fake_vllm(tmp_path)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    check = vllm_parser_check([["--model", "org/m", "--max-num-seqs", "8"],
                               ["--model", "org/m", "--max-num-seqs", "many"]],
                              python=sys.executable)
    assert check.verdicts[0] is None  # the arguments are fine: judged with a stand-in folder
    assert "many" in check.verdicts[1]  # a real refusal stays one
    assert check.model_lookup.startswith("LocalEntryNotFoundError: Cannot find")
    assert "local_files_only" not in check.model_lookup  # huggingface_hub's advice, not ours
    line = ExportCheck(["--model org/m"], "0.32.0", sys.executable,
                       check.model_lookup).summary("vllm")
    assert "accepts" in line and "not found offline" in line
    monkeypatch.delenv("HF_HUB_OFFLINE")
    assert vllm_parser_check([["--model", "org/m"]], python=sys.executable).model_lookup is None
