"""Exports that deploy as written, at scale: the plan's DP replicas as `vllm run-batch` over a
split of the workload (tuner.exports.run_batch), a Ray Data LLM job (tuner.exports.ray_data),
quantized plans (a checkpoint or the engine's online FP8, never a 16-bit checkpoint with a
comment), and every vLLM export checked by the installed vLLM's own argument parser."""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from tuner.cli.main import app
from tuner.core.catalog import get_model, load_gpus
from tuner.core.config import ServingConfig
from tuner.core.errors import TunerError
from tuner.exports.common import check_vllm_argv, engine_python
from tuner.exports.formats import EXPORTERS, check_export, parse_export, render_export
from tuner.exports.ray_data import ray_job

LLAMA = get_model("llama-3-8b")
GPUS = load_gpus()
PLAN = ServingConfig(gpu="A40", tp=2, dp=4, chunk_size=2048, max_running=128,
                     ordering="fcfs")
VLLM_FORMATS = [f for f, e in EXPORTERS.items() if e.engine_argv is not None]
runner = CliRunner()


def render(fmt: str, cfg: ServingConfig = PLAN, **kw) -> str:
    kw.setdefault("input_path", "job.jsonl")
    kw.setdefault("output_path", "job.results.jsonl")
    return render_export(fmt, cfg, LLAMA, GPUS[cfg.gpu], max_model_len=4096,
                         header="predicted 1.0 min, $0.05", **kw)


def batch_jsonl(path: Path, n: int = 30) -> Path:
    lines = [{"custom_id": f"r{i}", "method": "POST", "url": "/v1/chat/completions",
              "body": {"model": "llama-3-8b", "max_tokens": 10 + 37 * (i % 7),
                       "messages": [{"role": "user", "content": "x" * (40 * (1 + i % 11))}]}}
             for i in range(n)]
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


# ---- registry ---------------------------------------------------------------------------------
def test_scale_formats_are_registered_and_parse_back():
    assert {"run-batch", "ray-data"} <= set(EXPORTERS)
    for fmt in ("run-batch", "ray-data"):
        assert parse_export(fmt, render(fmt)) == PLAN
        assert parse_export(fmt, render(fmt), gpu="A10").gpu == "A10"


# ---- Ray Data ---------------------------------------------------------------------------------
def test_ray_data_script_compiles_and_names_the_plan():
    text = render("ray-data")
    tree = ast.parse(text)
    compile(text, "job.py", "exec")
    values = {n.targets[0].id: ast.literal_eval(n.value) for n in tree.body
              if isinstance(n, ast.Assign) and isinstance(n.targets[0], ast.Name)
              and isinstance(n.value, (ast.Constant, ast.Dict))}
    assert values["MODEL"] == LLAMA.hf_id
    assert values["REPLICAS"] == 4 and values["BATCH_SIZE"] == 128
    kw = values["ENGINE_KWARGS"]
    assert kw["tensor_parallel_size"] == 2 and kw["max_num_batched_tokens"] == 2048
    assert kw["max_num_seqs"] == 128 and kw["max_model_len"] == 4096
    assert "data_parallel_size" not in kw and "model" not in kw  # Ray's concurrency, model_source
    assert "vLLMEngineProcessorConfig(model_source=MODEL, engine_kwargs=ENGINE_KWARGS" in text
    assert "concurrency=REPLICAS, batch_size=BATCH_SIZE" in text
    assert "ray.data.read_json(INPUT, lines=True)" in text and "write_json(OUTPUT)" in text
    # a hand edit of the script wins over the tuner-config line
    edited = text.replace("'max_num_seqs': 128", "'max_num_seqs': 64").replace(
        "REPLICAS = 4", "REPLICAS = 2")
    cfg = parse_export("ray-data", edited)
    assert cfg.max_running == 64 and cfg.dp == 2


def test_ray_data_preprocess_reads_batch_and_plain_lines():
    ns: dict = {}
    text = render("ray-data")
    # run the script's own preprocess/postprocess without Ray: cut them out of the source
    tree = ast.parse(text)
    funcs = [n for n in tree.body if isinstance(n, ast.FunctionDef)
             and n.name in ("preprocess", "postprocess", "request_key", "_plain")
             or isinstance(n, ast.Import) and n.names[0].name in ("hashlib", "json")]
    exec(compile(ast.Module(body=funcs, type_ignores=[]), "job.py", "exec"), ns)
    row = ns["preprocess"]({"custom_id": "a", "body": {"messages": [{"role": "user",
                                                                      "content": "hi"}],
                                                        "max_tokens": 7}})
    assert row == {"custom_id": "a", "messages": [{"role": "user", "content": "hi"}],
                   "sampling_params": {"temperature": 0.0, "max_tokens": 7}}
    row = ns["preprocess"]({"prompt": "p", "max_tokens": 3})
    assert row["messages"] == [{"role": "user", "content": "p"}]
    # a line without a custom_id is keyed by what it asks (a rerun skips it by that), the same
    # whether Ray filled the row's missing fields with None or not
    assert row["custom_id"].startswith("sha1-")
    assert ns["preprocess"]({"prompt": "p", "max_tokens": 3.0, "custom_id": None,
                             "body": None})["custom_id"] == row["custom_id"]
    assert ns["postprocess"]({"custom_id": "a", "generated_text": "t", "x": 1}) == {
        "custom_id": "a", "generated_text": "t"}


RAY_PYTHON = engine_python("ray")
# Loads the exported script as a module (its main() is not run: that would start vLLM engines)
# and builds the processor from its own names, exactly as its main() does.
_BUILD_FROM_SCRIPT = """
import runpy, sys
job = runpy.run_path(sys.argv[1], run_name="tuner_export_check")
config = job["vLLMEngineProcessorConfig"](
    model_source=job["MODEL"], engine_kwargs=job["ENGINE_KWARGS"],
    concurrency=job["REPLICAS"], batch_size=job["BATCH_SIZE"])
processor = job["build_processor"](config, preprocess=job["preprocess"],
                                   postprocess=job["postprocess"])
print("built", type(processor).__name__, config.concurrency, config.batch_size,
      config.engine_kwargs["tensor_parallel_size"])
"""


@pytest.mark.skipif(RAY_PYTHON is None,
                    reason="needs ray[data] beside vLLM (TUNER_RAY_PYTHON, .venv-ray or this "
                           "Python; .ci/run installs it into .venv-vllm)")
def test_installed_ray_builds_the_exported_job(tmp_path):
    script = tmp_path / "job.ray-data.py"
    script.write_text(render("ray-data"))
    r = subprocess.run([RAY_PYTHON, "-c", _BUILD_FROM_SCRIPT, str(script)], capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.split()[-4:] == ["Processor", "4", "128", "2"], r.stdout


# ---- DP replicas as vllm run-batch ------------------------------------------------------------
def test_run_batch_script_is_valid_bash():
    bash = shutil.which("bash")
    if bash is None:
        pytest.skip("no bash")
    r = subprocess.run([bash, "-n"], input=render("run-batch"), text=True, capture_output=True)
    assert r.returncode == 0, r.stderr


@pytest.fixture
def fake_vllm(tmp_path: Path) -> Path:
    """A `vllm` on PATH whose `serve` is a tiny OpenAI-style server (tests/fake_vllm.py) that
    logs its arguments and answers every request."""
    from tests.fake_vllm import install

    return install(tmp_path / "bin")


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash")
def test_run_batch_script_splits_runs_every_replica_and_merges(tmp_path, fake_vllm):
    from tests.fake_vllm import free_port_base

    src = batch_jsonl(tmp_path / "job.jsonl")
    script = tmp_path / "job.sh"
    script.write_text(render("run-batch", input_path=str(src),
                             output_path=str(tmp_path / "job.results.jsonl")))
    log = tmp_path / "vllm.log"
    env = {**os.environ, "PATH": f"{fake_vllm}:{os.environ['PATH']}",
           "FAKE_VLLM_LOG": str(log), "PORT": str(free_port_base(4))}
    r = subprocess.run(["bash", str(script)], env=env, text=True, capture_output=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    work = tmp_path / "job.results.parts"
    parts = sorted(work.glob("part-*.jsonl"))
    assert [p.name for p in parts] == [f"part-{k}.jsonl" for k in range(4)]
    ids = [json.loads(x)["custom_id"] for p in parts for x in p.read_text().splitlines()]
    assert sorted(ids) == sorted(f"r{i}" for i in range(30))  # each request exactly once

    def tokens(line):
        b = json.loads(line)["body"]
        return len(json.dumps(b["messages"])) // 4 + b["max_tokens"]

    loads = [sum(tokens(x) for x in p.read_text().splitlines()) for p in parts]
    biggest = max(tokens(x) for x in src.read_text().splitlines())
    assert max(loads) - min(loads) <= biggest  # balanced by tokens
    merged = [json.loads(x) for x in (tmp_path / "job.results.jsonl").read_text().splitlines()]
    # the input's order, each custom_id once, in vllm run-batch's output form
    assert [m["custom_id"] for m in merged] == [f"r{i}" for i in range(30)]
    assert all(m["response"]["status_code"] == 200 and m["error"] is None for m in merged)
    calls = log.read_text().splitlines()
    assert sorted(c.split()[0] for c in calls) == ["0,1", "2,3", "4,5", "6,7"]
    for c in calls:
        assert " serve " in f" {c} " and "--tensor-parallel-size 2" in c
        assert "--max-num-seqs 128" in c and "--port" in c
        # the model positional, as `vllm serve MODEL` takes it (vLLM 0.9+ warns on --model)
        assert "--data-parallel-size" not in c and f" serve {LLAMA.hf_id} " in f" {c} "
        assert "--model" not in c
    # done: a rerun starts no engine and rewrites the same output
    log.unlink()
    r = subprocess.run(["bash", str(script)], env=env, text=True, capture_output=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    assert not log.exists()
    # many machines: REPLICA=K runs replica K alone, on its own first TP GPUs
    (work / "out-2.jsonl").unlink()
    r = subprocess.run(["bash", str(script)], env={**env, "REPLICA": "2"}, text=True,
                       capture_output=True, timeout=120)
    assert r.returncode == 0, r.stderr
    (call,) = log.read_text().splitlines()
    assert call.startswith(f"0,1 serve {LLAMA.hf_id} ")


# ---- quantized plans --------------------------------------------------------------------------
@pytest.mark.parametrize("fmt", list(EXPORTERS))
@pytest.mark.parametrize("cfg", [ServingConfig(gpu="A40", weight_bits=4)])
def test_checkpoint_plan_without_checkpoint_is_refused(fmt, cfg):
    with pytest.raises(TunerError, match="--quantized-model"):
        render(fmt, cfg)


def test_quantized_plan_names_the_checkpoint():
    cfg = ServingConfig(gpu="A40", weight_bits=4, kv_bits=8)
    text = render("vllm", cfg, quantized_model="org/Llama-3-8B-AWQ")
    data = yaml.safe_load(text)
    assert data["model"] == "org/Llama-3-8B-AWQ" and "quantization" not in data
    assert data["kv-cache-dtype"] == "fp8"
    assert "use a 4-bit AWQ/GPTQ checkpoint" not in text
    _, kwargs, _ = ray_job(__import__("tuner.exports.common", fromlist=["Deployment"])
                           .Deployment(cfg, LLAMA, GPUS["A40"], 4096,
                                       quantized_model="org/Llama-3-8B-AWQ"))
    assert "quantization" not in kwargs
    assert "serve org/Llama-3-8B-AWQ " in render("run-batch", cfg,
                                                 quantized_model="org/Llama-3-8B-AWQ")
    # a 16-bit plan keeps the model's own checkpoint even when one is given
    assert yaml.safe_load(render("vllm", ServingConfig(gpu="A40"),
                                 quantized_model="org/x"))["model"] == LLAMA.hf_id


def test_fp8_plan_uses_online_quantization_on_fp8_gpus():
    cfg = ServingConfig(gpu="L40S", weight_bits=8, kv_bits=8)
    data = yaml.safe_load(render("vllm", cfg))
    assert data["quantization"] == "fp8_per_tensor" and data["kv-cache-dtype"] == "fp8"
    assert data["model"] == LLAMA.hf_id


# ---- checked by vLLM's own parser ---------------------------------------------------------------
def _fake_vllm_package(root: Path) -> None:
    """A stand-in for vLLM's argument module: EngineArgs.add_cli_args knows a few options."""
    (root / "vllm" / "engine").mkdir(parents=True)
    (root / "vllm" / "utils").mkdir(parents=True)
    for d in ("vllm", "vllm/engine", "vllm/utils"):
        (root / d / "__init__.py").write_text("")
    (root / "vllm" / "utils" / "argparse_utils.py").write_text(
        "import argparse\nFlexibleArgumentParser = argparse.ArgumentParser\n")
    (root / "vllm" / "engine" / "arg_utils.py").write_text(
        "class EngineArgs:\n"
        "    @staticmethod\n"
        "    def add_cli_args(p):\n"
        "        p.add_argument('--model')\n"
        "        p.add_argument('--tensor-parallel-size', type=int)\n"
        "        return p\n"
        "    @classmethod\n"
        "    def from_cli_args(cls, ns):\n"
        "        return cls()\n")


def test_parser_check_reports_what_the_engine_refuses(tmp_path, monkeypatch):
    _fake_vllm_package(tmp_path)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    got = check_vllm_argv([["--model", "m", "--tensor-parallel-size", "2"],
                           ["--model", "m", "--max-num-seqs", "8"]], python=sys.executable)
    assert got[0] is None
    assert "--max-num-seqs" in got[1]  # argparse's own "unrecognized arguments" line
    monkeypatch.setenv("TUNER_VLLM_PYTHON", sys.executable)
    assert engine_python("vllm") == sys.executable
    with pytest.raises(TunerError, match="vLLM refuses the vllm export"):
        check_export("vllm", render("vllm"))


@pytest.mark.skipif(engine_python("vllm") is None,
                    reason="needs vLLM (this Python, .venv-vllm or TUNER_VLLM_PYTHON)")
def test_every_vllm_export_passes_the_installed_vllm_parser():
    plans = [(PLAN, None),
             (ServingConfig(gpu="L40S", weight_bits=8, kv_bits=8, scheduler="vllm-v0",
                            chunk_size=8192, weight_offload_fraction=0.2), None),
             (ServingConfig(gpu="A40", weight_bits=4, tp=2), "org/llama-3-8b-awq")]
    argvs = [argv for fmt in VLLM_FORMATS for cfg, ckpt in plans
             for argv in EXPORTERS[fmt].engine_argv(render(fmt, cfg, quantized_model=ckpt))]
    assert len(argvs) == len(VLLM_FORMATS) * len(plans)
    assert any("--quantization fp8" in " ".join(a) for a in argvs)
    assert any("--model org/llama-3-8b-awq" in " ".join(a) for a in argvs)
    # one start of vLLM's parser for all of them (importing vLLM takes seconds); the last
    # list is one vLLM refuses, which comes back as its own reason
    *verdicts, why = check_vllm_argv([*argvs, ["--model", "m", "--max-num-seqs", "many"]])
    assert verdicts == [None] * len(argvs)
    assert why and "max-num-seqs" in why


# ---- the CLI ---------------------------------------------------------------------------------
def test_cli_exports_scale_formats(tmp_path):
    src = tmp_path / "job.jsonl"
    src.write_text("".join(json.dumps({"prompt_tokens": 300 + 40 * i, "output_tokens": 50 + i})
                           + "\n" for i in range(24)))
    space = tmp_path / "space.yaml"
    space.write_text("knobs:\n  dp: [1, 2]\n  max_running: [16, 64]\nfixed:\n  tp: 1\n")
    out = tmp_path / "out"
    r = runner.invoke(app, ["search", "--engines", "vllm", "-w", str(src), "-m", "llama-3-8b", "--gpus", "A40",
                            "--space", str(space), "--n-trials", "8", "--out", str(out),
                            "--json"])
    assert r.exit_code == 0, r.output
    for fmt, suffix in (("ray-data", ".py"), ("run-batch", ".sh")):
        target = tmp_path / f"job{suffix}"
        r = runner.invoke(app, ["export", "--out", str(out), "--format", fmt, "--goal",
                                "fastest", "--output", str(target)])
        assert r.exit_code == 0, r.output
        text = target.read_text()
        assert parse_export(fmt, text).dp == 2  # the fastest plan runs both replicas
        assert str(src) in text
