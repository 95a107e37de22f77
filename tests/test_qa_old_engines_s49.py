"""What a user running OLD vLLM releases hit in the exports (a QA pass over `tuner search /
export` with --engine-version 0.5.4 .. 0.10.1, 2026-11-29): every exported command and file
must use only what that release has, spelled as it takes it.

Each rule is vLLM's own, read in its source or threads:
- `vllm serve --config FILE` (0.6.0 on) turns `key: value` into `--key value` and (0.6.4 on)
  drops a `key: false` unless the key is a StoreBoolean's dest (underscores: vllm/utils.py
  FlexibleArgumentParser._load_config_file, 0.6 - 0.9); `model:` becomes `--model`, which
  `vllm serve` refuses before 0.8.3 (vllm/scripts.py, vllm/entrypoints/cli/serve.py: "provide
  the model as a positional argument instead of via the `--model` option"; vllm-project/vllm
  #15798, #18999).
- `vllm run-batch` is a subcommand only since vllm-project/vllm#18804 (May 2025); before, the
  runner is `python -m vllm.entrypoints.openai.run_batch` (vllm-project/vllm#4794).
- V0 parsers (0.5 - 0.7) have no `--no-X` flags (`--enable-chunked-prefill` is a StoreBoolean
  taking "False"), and no --data-parallel-size / --enable-expert-parallel (V1 only, 0.8.0 on:
  vllm-project/vllm#13923, #14305, #18702).
- every release before 0.10.1 logs each request unless given --disable-log-requests
  (vllm-project/vllm#21739 made the log opt-in); that flag is the API server's, not EngineArgs'.
"""

from __future__ import annotations

import shlex

import pytest
import yaml

from tuner.core.catalog import get_model, load_gpus
from tuner.core.config import ServingConfig
from tuner.exports.formats import ExportCannotStart, parse_export, render_export
from tuner.exports.run_batch import engine_argv as run_batch_script_argv
from tuner.exports.vllm import run_batch_engine_argv, yaml_engine_argv

LLAMA = get_model("llama-3-8b")
MIXTRAL = get_model("mixtral-8x7b")
GPUS = load_gpus()
V0 = ServingConfig(gpu="H100", scheduler="vllm-v0", chunk_size=8192, max_running=256)
V1 = ServingConfig(gpu="H100", chunk_size=8192, max_running=256)


def _old_config_loader(text: str) -> list[str]:
    """The argv vLLM 0.6.4 - 0.9's `--config` loader makes of a YAML (its _load_config_file:
    a bool whose key is not a StoreBoolean dest is a bare flag when true, dropped when false;
    0.6.0 - 0.6.3.post1 pass every value as a string, the same argv for a YAML without bools)."""
    store_boolean_dests = ["enable_chunked_prefill"]
    argv: list[str] = []
    for key, value in (yaml.safe_load(text) or {}).items():
        if isinstance(value, bool) and key not in store_boolean_dests:
            if value:
                argv.append("--" + key)
        else:
            argv += ["--" + key, str(value)]
    return argv


def _yaml(config, version, steps=None, **kw):
    return render_export("vllm", config, kw.pop("model", LLAMA), GPUS[config.gpu],
                         max_model_len=4096, engine_version=version, num_scheduler_steps=steps,
                         **kw)


# ---- vllm serve --config YAML ------------------------------------------------------------------
@pytest.mark.parametrize("version,steps", [("0.6.3", 10), ("0.7.3", 10), ("0.6.1", 1)])
def test_v0_yaml_runs_through_its_releases_config_loader(version, steps):
    text = _yaml(V0, version, steps)
    argv = _old_config_loader(text)
    # `model:` would reach vllm serve as --model, which these releases refuse
    assert "--model" not in argv
    assert f"vllm serve {LLAMA.load_id} --config THIS_FILE" in text
    # chunked prefill off survives the loader (a bare `false` would be dropped, and V0 would
    # take its own default)
    i = argv.index("--enable-chunked-prefill")
    assert argv[i + 1] == "False"
    assert parse_export("vllm", text).scheduler == "vllm-v0"


@pytest.mark.parametrize("version", ["0.8.2", "0.9.0", "0.9.0.1"])
def test_v1_yaml_refusing_a_model_in_the_file_names_it_on_the_serve_line_only(version):
    text = _yaml(V1, version)
    assert "--model" not in _old_config_loader(text)
    assert f"vllm serve {LLAMA.load_id} --config THIS_FILE" in text and "#15798" in text


@pytest.mark.parametrize("version", [None, "0.10.1", "0.9.1", "0.8.3", "0.8.5"])
def test_yaml_of_a_release_taking_a_model_in_the_file_keeps_it(version):
    """vLLM's parser in the PyPI wheels: 0.8.3 - 0.8.5 and 0.9.1 on take `model:` from the
    file (the positional model wins); tuner.exports.vllm.MODEL_IN_CONFIG_SINCE."""
    assert "model" in yaml.safe_load(_yaml(V1, version))


# ---- vllm run-batch ----------------------------------------------------------------------------
@pytest.mark.parametrize("version,steps", [("0.5.4", None), ("0.6.3", 10), ("0.8.5", None),
                                           ("0.9.0", None), ("0.9.0.1", None)])
def test_run_batch_before_the_subcommand_is_the_module(version, steps):
    config = V0 if steps is not None or version == "0.5.4" else V1
    text = render_export("vllm-run-batch", config, LLAMA, GPUS["H100"], max_model_len=4096,
                         engine_version=version, num_scheduler_steps=steps)
    command = [line for line in text.splitlines() if not line.startswith("#")][0]
    assert command.startswith("python -m vllm.entrypoints.openai.run_batch -i ")
    assert "vllm run-batch" not in command
    assert parse_export("vllm-run-batch", text) == config
    assert "--max-num-seqs" in run_batch_engine_argv(text)[0]


@pytest.mark.parametrize("version", [None, "0.10.1", "0.9.1"])
def test_run_batch_subcommand_from_0_9_1(version):
    text = render_export("vllm-run-batch", V1, LLAMA, GPUS["H100"], max_model_len=4096,
                         engine_version=version)
    assert "\nvllm run-batch -i " in text and "python -m" not in text
    assert parse_export("vllm-run-batch", text) == V1


# ---- V0 releases without multi-step (0.5.0 - 0.5.4) are V0 all the same -------------------------
@pytest.mark.parametrize("fmt", ["vllm-run-batch", "run-batch"])
def test_0_5_4_commands_have_no_no_flags(fmt):
    text = render_export(fmt, V0, LLAMA, GPUS["H100"], max_model_len=4096,
                         engine_version="0.5.4")
    assert "--no-" not in text.replace("--no-check", "")
    assert "--enable-chunked-prefill False" in text


# ---- the request log -----------------------------------------------------------------------------
@pytest.mark.parametrize("version,written", [("0.5.4", True), ("0.8.5", True),
                                             ("0.10.0", True), ("0.10.1", False),
                                             (None, False)])
def test_disable_log_requests_passed_on_wherever_the_log_is_on_by_default(version, written):
    config = V0 if version == "0.5.4" else V1
    text = _yaml(config, version, disable_log_requests=True)
    assert (yaml.safe_load(text).get("disable-log-requests") is True) == written
    script = render_export("run-batch", config, LLAMA, GPUS["H100"], max_model_len=4096,
                           engine_version=version, disable_log_requests=True)
    assert ("--disable-log-requests" in script) == written
    # the API server's flag: not handed to EngineArgs' parser by the export check
    assert "--disable-log-requests" not in yaml_engine_argv(text)[0]
    assert "--disable-log-requests" not in run_batch_script_argv(script)[0]


# ---- data / expert parallel on V0 ------------------------------------------------------------------
@pytest.mark.parametrize("fmt", ["vllm", "vllm-run-batch"])
def test_v0_writes_a_moe_plans_replicas_as_engines_of_their_own(fmt):
    # V0 has no --data-parallel-size: dp 2 is two engines, each holding every expert
    moe = ServingConfig(gpu="H100", tp=2, dp=2, scheduler="vllm-v0", chunk_size=8192,
                        max_running=256)
    text = render_export(fmt, moe, MIXTRAL, GPUS["H100"], max_model_len=4096,
                         engine_version="0.6.3", num_scheduler_steps=10)
    assert "data-parallel-size 2" not in text and "data-parallel-size: 2" not in text
    assert "ONE replica's engine" in text and "independent replicas" in text
    v1 = ServingConfig(gpu="H100", tp=2, dp=2, chunk_size=8192, max_running=256)
    text = render_export("vllm", v1, MIXTRAL, GPUS["H100"], max_model_len=4096,
                         engine_version="0.8.5")
    assert yaml.safe_load(text)["data-parallel-size"] == 2


@pytest.mark.parametrize("fmt", ["vllm", "vllm-run-batch", "run-batch", "ray-data"])
def test_v0_refuses_expert_parallel(fmt):
    ep = ServingConfig(gpu="H100", tp=2, scheduler="vllm-v0", chunk_size=8192,
                       max_running=256, expert_parallel=True)
    with pytest.raises(ExportCannotStart, match="--enable-expert-parallel"):
        render_export(fmt, ep, MIXTRAL, GPUS["H100"], max_model_len=4096,
                      engine_version="0.7.3", num_scheduler_steps=10)


def test_the_report_says_how_old_releases_run_the_yaml():
    from tuner.exports.formats import EXPORTERS

    how = EXPORTERS["vllm"].how
    assert "vllm serve MODEL --config" in how and shlex.split(how)


# ---- the CLI: a 0.5.4 study, exported ------------------------------------------------------------
def test_export_of_a_0_5_4_study_is_not_judged_by_the_installed_parser(tmp_path):
    from pathlib import Path

    from typer.testing import CliRunner

    from tuner.cli.main import app

    example = Path(__file__).resolve().parents[1] / "examples" / "arxiv.jsonl"
    runner = CliRunner()
    out = tmp_path / "out"
    r = runner.invoke(app, ["search", "-w", str(example), "-m", "llama-3-8b", "--gpus", "A10",
                            "--engines", "vllm", "--n-trials", "4", "--engine-version", "0.5.4",
                            "--entry-point", "serve", "--out", str(out)])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["export", "--out", str(out), "-f", "vllm-run-batch"])
    assert r.exit_code == 0, r.output
    # V0 without multi-step is V0: no installed (V1) parser is its judge
    assert "not checked against the installed vLLM: the export runs vLLM 0.5.4 (V0)" in r.output
    assert "python -m vllm.entrypoints.openai.run_batch" in r.output
    assert "--no-enable-chunked-prefill" not in r.output


# ---- 0.8 - 0.10: an FP8 KV cache off Hopper runs V0, not the V1 priced -----------------------------
@pytest.mark.parametrize("gpu,version,noted", [("A100-80G", "0.8.5", True),
                                               ("L40S", "0.9.1", True),
                                               ("H100", "0.8.5", False),
                                               ("A100-80G", "0.11.0", False),
                                               ("A100-80G", None, False)])
def test_fp8_kv_cache_v0_fallback_is_said(gpu, version, noted):
    config = ServingConfig(gpu=gpu, kv_bits=8, chunk_size=8192, max_running=256)
    text = render_export("vllm", config, LLAMA, GPUS[gpu], max_model_len=4096,
                         engine_version=version)
    assert ("falls back to the V0 engine" in text) == noted
    assert yaml.safe_load(text)["kv-cache-dtype"] == "fp8"


@pytest.mark.parametrize("version,pin", [("0.8.5", "vllm==0.8.5"), ("0.10.1", "vllm==0.10.1"),
                                         (None, "vllm.")])
def test_ray_data_job_installs_the_release_it_was_priced_for(version, pin):
    text = render_export("ray-data", V1, LLAMA, GPUS["H100"], max_model_len=4096,
                         engine_version=version)
    assert f"pip install 'ray[data,llm]' {pin}" in text


def test_a_refused_winner_yaml_is_said_not_crashed_on():
    """A V0 search of a mixture-of-experts model may pick a dp > 1 plan (one data-parallel
    engine) whose `vllm` YAML is refused (ExportCannotStart): the output set says why instead
    of a KeyError traceback (reports.outputs._winner_yaml)."""
    from types import SimpleNamespace

    from reports.outputs import _winner_yaml

    moe = ServingConfig(gpu="H100", tp=2, dp=2, scheduler="vllm-v0", chunk_size=8192,
                        max_running=256)
    why = "vLLM 0.6.3 (V0) has no --data-parallel-size"
    snippets = {"fastest": {"trial": 3, "formats": {"run-batch": "x"}, "skipped": {"vllm": why}},
                "cheapest": {"trial": 1, "formats": {"vllm": "model: m\n"}}}
    records = {3: SimpleNamespace(config=moe, number=3), 1: SimpleNamespace(config=V0, number=1)}
    exports = _winner_yaml(snippets, records)
    assert why in exports.fastest_engine_config and exports.fastest_engine_config.startswith("#")
    assert exports.cheapest_engine_config == "model: m\n"


def test_search_says_which_release_lacks_the_flags_of_a_skipped_export():
    from types import SimpleNamespace

    from tuner.cli.search import skipped_lines

    why = "vLLM 0.7.3 (V0) has no --enable-expert-parallel: it arrived with V1 in 0.8.0"
    outputs = SimpleNamespace(skipped={"fastest.run-batch.sh": why}, files={})
    (line,) = skipped_lines(outputs)
    assert why in line and "as predicted" not in line
