"""QA of what `tuner search` / `tuner export` / `tuner report` write, read as a vLLM/SGLang
platform engineer copies them into production (s54): a `vllm run-batch` command over several
machines that vLLM's parser takes on every machine; no AWQ/GPTQ advice for a checkpoint that
is 4-bit already; SGLang files of a vLLM plan that say whose prediction their header gives; the
report naming the memory share the terminal names; a fleet served by the chat model its chat
requests need."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.test_export_cli import write_batch
from tuner.cli.main import app
from tuner.cli.tables import config_tokens
from tuner.core.catalog import chat_checkpoint, get_model, load_gpus
from tuner.core.config import ServingConfig
from tuner.exports import render_export
from tuner.exports.common import engine_python
from tuner.exports.vllm import run_batch_engine_argv, vllm_engine_args
from tuner.reports.views import config_summary

runner = CliRunner()
GPUS = load_gpus()
MOE = get_model("qwen3-30b-a3b")
LLAMA = get_model("llama-3-8b")


def _split(text: str) -> tuple[str, str]:
    """(the comment lines, joined; the command lines) of an export."""
    lines = text.splitlines()
    return (" ".join(ln for ln in lines if ln.startswith("#")),
            "\n".join(ln for ln in lines if not ln.startswith("#")))


# ---- vllm run-batch over several machines: --headless is `vllm serve`'s ----------------------
def _multi_machine_run_batch() -> str:
    cfg = ServingConfig(gpu="H100", tp=1, dp=16)  # one data-parallel MoE engine, 2 machines
    return render_export("vllm-run-batch", cfg, MOE, GPUS["H100"], max_model_len=4096,
                         input_path="in.jsonl", output_path="out.jsonl")


def test_run_batch_over_machines_starts_the_other_ranks_with_vllm_serve_headless():
    head, command = _split(_multi_machine_run_batch())
    # vllm run-batch has no --headless (its parser refuses it): the other machines' ranks are
    # headless `vllm serve` engines, and the run-batch command runs on machine 0 only
    assert "the same plus --headless" not in head and "on every machine" not in head
    assert re.search(r"vllm serve \S+ --headless", head), head
    assert "--data-parallel-start-rank 8*K" in head and "--headless" not in command
    assert "run this command on machine 0" in head
    # the `vllm serve --config` YAML keeps its own wording: serve has --headless
    yaml_text = render_export("vllm", ServingConfig(gpu="H100", tp=1, dp=16), MOE, GPUS["H100"],
                              max_model_len=4096)
    assert "the same plus --headless" in yaml_text


_PARSERS = r"""
import json, sys
try:
    from vllm.utils.argparse_utils import FlexibleArgumentParser
except ImportError:
    from vllm.utils import FlexibleArgumentParser
try:
    from vllm.entrypoints.launchers.run_batch import make_arg_parser as run_batch
except ImportError:
    from vllm.entrypoints.openai.run_batch import make_arg_parser as run_batch
try:
    from vllm.entrypoints.launchers.cli_args import make_arg_parser as serve
except ImportError:
    from vllm.entrypoints.openai.cli_args import make_arg_parser as serve
out = []
for which, argv in json.loads(sys.stdin.read()):
    parser = (run_batch if which == "run-batch" else serve)(FlexibleArgumentParser())
    try:
        parser.parse_args(argv)
        out.append(True)
    except SystemExit:
        out.append(False)
print("VERDICTS " + json.dumps(out))
"""


@pytest.mark.slow  # imports vLLM in its own Python (about a minute on 2 cores)
@pytest.mark.skipif(engine_python("vllm") is None, reason="needs vLLM (.venv-vllm)")
def test_vllms_parsers_take_the_run_batch_machines_instructions():
    text = _multi_machine_run_batch()
    engine = run_batch_engine_argv(text)[0]  # the command's engine options (no -i/-o)
    dp = ["--data-parallel-size-local", "8", "--data-parallel-address", "10.0.0.1",
          "--data-parallel-rpc-port", "13345"]
    io = ["-i", "in.jsonl", "-o", "out.jsonl"]
    cases = [("run-batch", io + engine + dp),  # machine 0, as the header says
             ("serve", engine + dp + ["--headless", "--data-parallel-start-rank", "8"]),
             ("run-batch", io + engine + dp + ["--headless"])]  # what was written before
    r = subprocess.run([engine_python("vllm"), "-c", _PARSERS], input=json.dumps(cases),
                       capture_output=True, text=True, timeout=300)
    line = next(ln for ln in r.stdout.splitlines() if ln.startswith("VERDICTS "))
    assert json.loads(line[len("VERDICTS "):]) == [True, True, False], r.stderr[-2000:]


# ---- a checkpoint that is 4-bit already (gpt-oss's MXFP4) ----------------------------------------
def test_a_native_4_bit_checkpoint_is_served_without_awq_gptq_advice():
    oss = get_model("gpt-oss-20b")
    assert oss.checkpoint_bits == 4
    cfg = ServingConfig(gpu="L40S", weight_bits=4)
    for fmt in ("vllm", "sglang", "run-batch"):
        text = render_export(fmt, cfg, oss, GPUS["L40S"], max_model_len=4096,
                             input_path="in.jsonl", output_path="out.jsonl")
        assert "AWQ/GPTQ" not in text, fmt  # its own checkpoint is the 4-bit one it serves
        assert oss.load_id in text
    # a 16-bit checkpoint at 4 bits still needs one, and is told so
    _, notes = vllm_engine_args(cfg, LLAMA, GPUS["L40S"], max_model_len=4096)
    assert any("AWQ/GPTQ" in n for n in notes)


# ---- SGLang files of a vLLM plan ------------------------------------------------------------------
def test_sglang_files_of_a_vllm_plan_say_the_prediction_is_vllms():
    vllm_plan = ServingConfig(gpu="A100-80G", tp=2)
    sglang_plan = ServingConfig(gpu="A100-80G", tp=2, engine="sglang", block_size=1)
    header = "fastest config found by tuner: predicted makespan 3.6 min, $6.75"
    for fmt in ("sglang", "sglang-offline"):
        kw = dict(max_model_len=4096, header=header, input_path="in.jsonl",
                  output_path="out.jsonl")
        head, _ = _split(render_export(fmt, vllm_plan, LLAMA, GPUS["A100-80G"], **kw))
        assert "simulated for vLLM" in head and "not SGLang's" in head, fmt
        head, _ = _split(render_export(fmt, sglang_plan, LLAMA, GPUS["A100-80G"], **kw))
        assert "simulated for vLLM" not in head, fmt


# ---- the report's plan label names the knobs the terminal's table names ---------------------------
@pytest.mark.parametrize("cfg", [
    ServingConfig(gpu="A100-80G", tp=2, gpu_memory_utilization=0.95),
    ServingConfig(gpu="H200", tp=2, dp=16, engine="sglang", block_size=1,
                  gpu_memory_utilization=0.579),
    ServingConfig(gpu="H100", tp=2, pp=2, block_size=32),
    ServingConfig(gpu="H100", tp=2, dp=2, expert_parallel=True),
    ServingConfig(gpu="A10"),
])
def test_report_plan_label_names_the_knobs_the_terminal_names(cfg):
    d = cfg.to_dict()
    toks, label = config_tokens(d), config_summary(cfg)
    if any(t.startswith("mem ") for t in toks):
        assert f"mem {cfg.gpu_memory_utilization:g}" in label, label
    else:
        assert "mem " not in label
    assert (f"pp{cfg.pp}" in label) == (cfg.pp > 1)
    assert (f"block {cfg.block_size}" in label) == any(t.startswith("block ") for t in toks)
    assert ("expert parallel" in label) == ("EP" in toks)


# ---- a search on chat requests: its report and its fleet export ------------------------------------
@pytest.fixture(scope="module")
def chat_search(tmp_path_factory) -> tuple[Path, Path, dict]:
    d = tmp_path_factory.mktemp("qa_exports_s54")
    wl = write_batch(d / "chat.jsonl", n=300, seed=3)  # chat messages, base llama-3-8b
    space = d / "space.yaml"  # winners at a memory share other than vLLM's default 0.9
    space.write_text("knobs:\n  chunk_size: [1024, 2048, 4096, 8192]\n  max_running: [64, 128, "
                     "256]\n  tp: auto\n  dp: auto\n  gpu_memory_utilization: [0.95]\nfixed:\n"
                     "  scheduler: vllm\n  weight_bits: 16\n  kv_bits: 16\n  block_size: 16\n")
    out = d / "out"
    r = runner.invoke(app, ["search", "-w", str(wl), "-m", "llama-3-8b", "--gpus", "A10,L40S",
                            "--max-gpus", "A10=2,L40S=2", "--n-trials", "20", "--engines",
                            "vllm", "--space", str(space), "--out", str(out)])
    assert r.exit_code == 0, (r.output, r.exception)
    return wl, out, json.loads((out / "results.json").read_text())


def test_report_headline_gives_each_winners_memory_share(chat_search):
    from tests.test_qa_outputs import _report_text

    _, out, res = chat_search
    text = _report_text(out)
    for goal in ("fastest", "cheapest"):
        w = res["winners"][goal]
        head = re.search(rf"{goal.capitalize()}: .*?trial #{w['number']}: ([^)]*)\)", text)
        assert head, goal
        assert head.group(1) == config_summary(ServingConfig(**w["config"]))
        mem = w["config"]["gpu_memory_utilization"]
        assert mem == 0.95 and "mem 0.95" in head.group(1), head.group(1)


def test_fleet_export_serves_the_chat_model_chat_requests_need(chat_search, tmp_path):
    wl, out, res = chat_search
    assert res["fleets"], "two of each GPU type: a mix should be on the front"
    r = runner.invoke(app, ["export", "--out", str(out), "--fleet", "1", "--output",
                            str(tmp_path / "fleet")])
    assert r.exit_code == 0, r.output
    chat = chat_checkpoint(LLAMA)
    assert chat and chat != LLAMA.load_id
    launchers = sorted((tmp_path / "fleet").glob("part-*.run-batch.sh"))
    assert len(launchers) == len(res["fleets"][0]["parts"])
    for path in launchers:
        head, body = _split(path.read_text())
        # the base checkpoint answers every chat request 400: each part serves the chat model,
        # and says so, as the single-plan exports do
        assert f"serve {chat} " in body and f"serve {LLAMA.load_id} " not in body, path.name
        assert "the requests are chat messages" in head
        assert "max-model-len" in head  # the margin on estimated token counts, said once more
    single = (out / "fastest.run-batch.sh").read_text()
    assert f"serve {chat} " in single  # the same model as the search's own exports
