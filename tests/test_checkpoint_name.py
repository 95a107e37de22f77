"""The checkpoint the user names reaches every export and the report unchanged (issue #23):
a catalog entry lends a model its shape, never its name (`-m meta-llama/Llama-3.1-8B-Instruct`
must not deploy the base model), and a local config.json or model folder is deployed as the
path given, not as the config's `_name_or_path`."""

from __future__ import annotations

import dataclasses
import html
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from tests.test_models_catalog import QWEN15_MOE, _fake_hf_cache
from tuner.cli.main import app
from tuner.core.catalog import ModelSpec, get_model, load_gpus, load_models
from tuner.core.config import ServingConfig
from tuner.exports.common import Deployment
from tuner.exports.formats import EXPORTERS, render_export
from tuner.search import load_study, setup_from_study

REPO = Path(__file__).resolve().parents[1]
WORKLOAD = REPO / "examples" / "arxiv.jsonl"
SPACE = REPO / "tests" / "spaces" / "deadline_small.yaml"  # small, and fixed (not the default)
BASE = "meta-llama/Llama-3.1-8B"  # catalog entry llama-3.1-8b's hf_id
INSTRUCT = "meta-llama/Llama-3.1-8B-Instruct"  # one of its aliases
runner = CliRunner()

# meta-llama/Llama-3.1-8B's config.json shape, as a fine-tune saved from it keeps it
LLAMA31_CONFIG = {
    "_name_or_path": BASE,
    "architectures": ["LlamaForCausalLM"],
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "max_position_embeddings": 131072,
    "model_type": "llama",
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "rope_scaling": {"factor": 8.0, "rope_type": "llama3",
                     "original_max_position_embeddings": 8192},
    "tie_word_embeddings": False,
    "vocab_size": 128256,
}


@pytest.fixture(scope="module")
def models():
    return load_models()


def write_model_folder(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(LLAMA31_CONFIG))
    return folder


def names(text: str, model_id: str) -> bool:
    """`model_id` appears in `text` as a whole id (not as the start of a longer one)."""
    return re.search(re.escape(model_id) + r"(?![\w.-])", text) is not None


# ---- get_model ----------------------------------------------------------------------------------
def test_alias_keeps_the_named_checkpoint_and_lends_the_shape(models):
    m = get_model(INSTRUCT, models)
    base = models["llama-3.1-8b"]
    assert m.checkpoint == m.hf_id == m.load_id == INSTRUCT
    assert m.name == "llama-3.1-8b"  # the display name names the shape
    assert dataclasses.replace(m, hf_id=base.hf_id, checkpoint="") == base


@pytest.mark.parametrize("typed", ["Llama-3.1-8B-Instruct", "META-LLAMA/llama-3.1-8b-instruct",
                                   " meta-llama/Llama-3.1-8B-Instruct "])
def test_alias_is_spelled_as_the_hub_spells_it(models, typed):
    assert get_model(typed, models).checkpoint == INSTRUCT


@pytest.mark.parametrize(("typed", "checkpoint"), [
    ("llama-3.1-8b", BASE),  # a catalog name: its entry's hf_id
    ("LLAMA-3.1-8B", BASE),
    (BASE, BASE),
    ("Meta-Llama-3.1-8B-Instruct", "meta-llama/Meta-Llama-3.1-8B-Instruct"),
    ("google/gemma-3-4b-pt", "google/gemma-3-4b-pt"),
    ("gemma-3-4b", "google/gemma-3-4b-it"),
    ("mistral-nemo", "mistralai/Mistral-Nemo-Base-2407"),  # a nickname: the entry's hf_id
])
def test_catalog_names_and_aliases(models, typed, checkpoint):
    m = get_model(typed, models)
    assert m.checkpoint == m.load_id == checkpoint


def test_local_folder_and_config_file_are_deployed_as_given(tmp_path, models, monkeypatch):
    folder = write_model_folder(tmp_path / "my-model")
    monkeypatch.chdir(tmp_path)
    for typed, checkpoint in [(str(folder), str(folder)), ("./my-model/", "./my-model/"),
                              ("my-model", "my-model"),
                              (str(folder / "config.json"), str(folder)),
                              ("./my-model/config.json", "./my-model"),
                              ("my-model/config.json", "my-model")]:
        m = get_model(typed, models)
        # the path given, not the config's _name_or_path (the base model it was tuned from)
        assert m.checkpoint == m.load_id == m.name == checkpoint, typed
        assert m.hf_id == "" and Path(m.source).resolve() == folder / "config.json"
        assert m.num_params == models["llama-3.1-8b"].num_params
    monkeypatch.chdir(folder)
    assert get_model("config.json", models).checkpoint == "."


def test_local_path_under_home_is_expanded(tmp_path, models, monkeypatch):
    write_model_folder(tmp_path / "ft")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert get_model("~/ft", models).checkpoint == str(tmp_path / "ft")
    assert get_model("~/ft/config.json", models).checkpoint == str(tmp_path / "ft")


def test_hub_id_is_its_own_checkpoint(tmp_path, monkeypatch, models):
    _fake_hf_cache(tmp_path / "hub", "acme/Tiny-MoE", QWEN15_MOE)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.chdir(tmp_path)
    m = get_model("acme/Tiny-MoE", models)
    assert m.checkpoint == m.hf_id == m.name == m.load_id == "acme/Tiny-MoE"


def test_spec_without_checkpoint_loads_its_hf_id_or_name():
    """Specs built by hand, and the ones stored by studies older than `checkpoint`."""
    d = dataclasses.asdict(load_models()["llama-3.1-8b"])
    del d["checkpoint"]
    assert ModelSpec(**d).load_id == BASE
    assert dataclasses.replace(ModelSpec(**d), hf_id="").load_id == "llama-3.1-8b"


# ---- the deployment ---------------------------------------------------------------------------
def test_quantized_model_flow_keeps_working_with_an_alias(models):
    m = get_model(INSTRUCT, models)
    a40 = load_gpus()["A40"]
    plain = Deployment(ServingConfig(gpu="A40"), m, a40, 4096, quantized_model="org/q-awq")
    assert plain.checkpoint == INSTRUCT
    assert plain.quantized_checkpoint_notes({"quantization": "x"}, ["n"], "model", "vLLM") \
        == ["n"]
    cfg = ServingConfig(gpu="A40", weight_bits=4)
    q = Deployment(cfg, m, a40, 4096, quantized_model="org/q-awq")
    assert q.checkpoint == "org/q-awq"
    opts = {"quantization": "awq"}
    notes = q.quantized_checkpoint_notes(opts, ["weight_bits=4: x"], "model", "vLLM")
    assert opts == {} and len(notes) == 1 and "org/q-awq" in notes[0]
    for fmt in EXPORTERS:
        text = render_export(fmt, cfg, m, a40, max_model_len=4096, quantized_model="org/q-awq")
        assert "org/q-awq" in text and not names(text, BASE), fmt
        text = render_export(fmt, ServingConfig(gpu="A40"), m, a40, max_model_len=4096,
                             quantized_model="org/q-awq")
        assert names(text, INSTRUCT) and not names(text, BASE) and "org/q-awq" not in text, fmt


def test_no_model_id_note_for_a_local_checkpoint(tmp_path, models):
    m = get_model(str(write_model_folder(tmp_path / "ft")), models)
    text = render_export("vllm", ServingConfig(gpu="A40"), m, load_gpus()["A40"],
                         max_model_len=4096)
    assert yaml.safe_load(text)["model"] == str(tmp_path / "ft")
    assert "no Hugging Face id" not in text


# ---- end to end: tuner search, export, report ---------------------------------------------------
def tuner(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, COLUMNS="200")
    env.pop("FORCE_COLOR", None)
    return subprocess.run([sys.executable, "-m", "tuner.cli", *map(str, args)],
                          capture_output=True, text=True, timeout=300, cwd=cwd, env=env)


def option(text: str, flag: str) -> str:
    """The value after `flag` in a shell command line (continuations joined)."""
    tokens = shlex.split(text.replace("\\\n", " "), comments=True)
    return tokens[tokens.index(flag) + 1]


def exported_models(out: Path, goal: str = "fastest") -> dict[str, str]:
    """{file: the model it tells the engine to load} of a search's output folder."""
    run_batch = (out / f"{goal}.run-batch.sh").read_text()
    ray_data = (out / f"{goal}.ray-data.py").read_text()
    return {
        "vllm.yaml": yaml.safe_load((out / f"{goal}.vllm.yaml").read_text())["model"],
        "json": (json.loads((out / f"{goal}.json").read_text()).get("model") or {})
        .get("checkpoint"),
        "run-batch.sh": option(" ".join(EXPORTERS["run-batch"].engine_argv(run_batch)[0]),
                               "--model"),
        "ray-data.py": option(" ".join(map(shlex.quote,
                                           EXPORTERS["ray-data"].engine_argv(ray_data)[0])),
                              "--model"),
    }


def export(out: Path, fmt: str, *extra: str) -> str:
    r = runner.invoke(app, ["export", "--out", str(out), "--format", fmt, *extra])
    assert r.exit_code == 0, r.output
    return r.stdout


CASES = {
    "alias": (INSTRUCT, INSTRUCT, BASE),
    "catalog-name": ("llama-3.1-8b", BASE, None),
    "config-file": ("ft/config.json", "ft", BASE),
    "folder": ("./ft/", "./ft/", BASE),
}


@pytest.fixture(scope="module", params=list(CASES))
def searched(request, tmp_path_factory):
    typed, checkpoint, base = CASES[request.param]
    root = tmp_path_factory.mktemp(request.param)
    write_model_folder(root / "ft")
    out = root / "out"
    r = tuner("search", "--engines", "vllm", "-w", WORKLOAD, "-m", typed, "--gpus", "A40", "--n-trials", "10",
              "--space", SPACE, "--out", out, "--json", cwd=root)
    assert r.returncode == 0, r.stderr
    return out, checkpoint, base


def served(checkpoint: str) -> str:
    """What the exports load: the named checkpoint, except the catalog's base checkpoint, which
    has no chat template, for the chat requests of WORKLOAD: its chat model (same shapes)."""
    return INSTRUCT if checkpoint == BASE else checkpoint


def test_search_outputs_load_the_named_checkpoint(searched):
    out, checkpoint, base = searched
    for goal in ("fastest", "cheapest"):
        assert exported_models(out, goal) == dict.fromkeys(
            ["vllm.yaml", "json", "run-batch.sh", "ray-data.py"], served(checkpoint))
    report = html.unescape((out / "report.html").read_text())
    assert re.search(r"<dt>model</dt><dd>[^<]*" + re.escape(checkpoint), report)
    if base is not None:
        for f in out.iterdir():
            if f.suffix in (".yaml", ".json", ".sh", ".py", ".html"):
                assert not names(html.unescape(f.read_text()), base), f.name


def test_stored_study_re_exports_the_named_checkpoint(searched, tmp_path):
    out, checkpoint, base = searched
    assert option(export(out, "sglang"), "--model-path") == served(checkpoint)
    assert setup_from_study(load_study(None, out_dir=out)).model.load_id == checkpoint
    assert option(export(out, "vllm-run-batch"), "--model") == served(checkpoint)
    assert yaml.safe_load(export(out, "vllm", "--goal", "cheapest"))["model"] \
        == served(checkpoint)
    doc = json.loads(export(out, "json"))
    assert doc["model"]["checkpoint"] == doc["vllm"]["engine_args"]["model"] \
        == doc["sglang"]["server_args"]["model-path"] == served(checkpoint)
    # --gpu-file rebuilds the GPUs from the catalogs; the model still comes from the study
    gpu_file = tmp_path / "gpus.yaml"
    gpu_file.write_text("A40:\n  price_usd_per_h: 0.5\n")
    assert yaml.safe_load(export(out, "vllm", "--gpu-file", str(gpu_file)))["model"] \
        == served(checkpoint)
    r = runner.invoke(app, ["report", "--out", str(out), "-o", str(tmp_path / "r.html")])
    assert r.exit_code == 0, r.output
    report = html.unescape((tmp_path / "r.html").read_text())
    assert checkpoint in report and (base is None or not names(report, base))
