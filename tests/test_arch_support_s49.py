"""--engine-version against the first vLLM release that runs the model's architecture
(tuner.core.arch_support): DeepSeek-V3 on vLLM 0.6.0, Qwen3 on 0.8.3 or Llama 3.1 on 0.5.3
describe jobs that cannot load, and simulate / search / export / report refuse them with one
line naming the architecture, the release that runs it, its source and the option."""

from __future__ import annotations

import dataclasses
import json
import types

import pytest
from typer.testing import CliRunner

from tuner.cli.main import app
from tuner.core.arch_support import (
    CATALOG_ARCHITECTURES,
    HEAD_DIM,
    ROPE_LLAMA3,
    VLLM_ARCH_FLOORS,
    check_engine_runs,
    model_architecture,
    release_key,
    release_refusal,
)
from tuner.core.catalog import ASSUMED_FROM_NAME, get_model, load_gpus, load_models
from tuner.core.errors import TunerError
from tuner.core.io import read_shipped

runner = CliRunner()


def _workload(tmp_path, n: int = 8):
    path = tmp_path / "w.jsonl"
    path.write_text("".join(json.dumps({"prompt": "word " * (50 + 7 * i), "max_tokens": 16})
                            + "\n" for i in range(n)))
    return path


# ---- the table -----------------------------------------------------------------------------
def test_every_catalog_model_has_its_architecture_and_the_shipped_configs_agree():
    models = load_models()
    assert set(CATALOG_ARCHITECTURES) == set(models)
    for name, spec in models.items():
        if not spec.source.startswith("catalog (configs/"):
            continue
        cfg = json.loads(read_shipped(spec.source.removeprefix("catalog (").rstrip(")")))
        arch, rope = CATALOG_ARCHITECTURES[name]
        assert cfg["architectures"] == [arch], name
        said = (cfg.get("rope_scaling") or (cfg.get("text_config") or {}).get("rope_scaling")
                or {})
        assert (said.get("rope_type") or said.get("type") or "") == rope, name


def test_every_floor_has_a_source_and_a_release_past_the_oldest_modelled():
    for f in VLLM_ARCH_FLOORS:
        assert f.source and f.model
        assert release_key(f.since) > release_key("0.5.0")
        assert f.feature in ("", ROPE_LLAMA3, HEAD_DIM)


def test_post_releases_order_after_their_release():
    assert release_key("0.5.3") < release_key("0.5.3.post1") < release_key("0.5.4")
    assert release_key("0.10.1.1") > release_key("0.10.1")
    assert release_key("v0.6.6") == (0, 6, 6, 0)


# ---- each floor: refused one release before, run from it --------------------------------------
@pytest.mark.parametrize(("model", "before", "since"), [
    ("deepseek-v3", "0.6.5", "0.6.6"),
    ("deepseek-v3.2", "0.10.2", "0.11.0"),
    ("qwen3-8b", "0.8.3", "0.8.4"),
    ("qwen3-30b-a3b", "0.8.3", "0.8.4"),
    ("gemma-3-4b", "0.7.3", "0.8.0"),
    ("gpt-oss-20b", "0.10.0", "0.10.1"),
    ("llama-3.1-8b", "0.5.3", "0.5.3.post1"),
    ("llama-3.2-1b", "0.5.0", "0.5.3.post1"),
    ("mistral-nemo-12b", "0.5.2", "0.5.3"),
])
def test_a_release_before_the_floor_is_refused_and_the_floor_runs(model, before, since):
    spec = get_model(model)
    with pytest.raises(TunerError) as exc:
        check_engine_runs(spec, before)
    msg = str(exc.value)
    arch = CATALOG_ARCHITECTURES[model][0]
    assert f"--engine-version {before}" in msg and arch in msg
    assert f"from {since} (source: " in msg and f"--engine-version {since} or later" in msg
    assert "\n" not in msg
    assert check_engine_runs(spec, since) is None
    assert check_engine_runs(spec, None) is None  # the newest
    assert check_engine_runs(spec, "newest") is None


@pytest.mark.parametrize("model", ["llama-3-8b", "llama-2-7b", "mistral-7b", "mixtral-8x7b",
                                   "qwen2.5-7b", "phi-4", "mistral-large-2407"])
def test_architectures_older_than_0_5_run_on_0_5_0(model):
    assert release_refusal(get_model(model), "0.5.0") is None


def test_an_alias_is_its_catalog_entrys_architecture():
    spec = get_model("meta-llama/Llama-3.1-8B-Instruct")
    assert ROPE_LLAMA3 in model_architecture(spec).features
    with pytest.raises(TunerError, match="meta-llama/Llama-3.1-8B-Instruct"):
        check_engine_runs(spec, "0.5.2")


# ---- a config.json: its own architecture (a fine-tune keeps its base's) ------------------------
def test_a_config_json_is_checked_by_its_own_architectures(tmp_path):
    cfg = json.loads(read_shipped("configs/deepseek-v3.json"))
    cfg["_name_or_path"] = "someorg/DeepSeek-R1-finetune"
    path = tmp_path / "ft" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(cfg))
    spec = get_model(str(path))
    assert model_architecture(spec).architectures == ("DeepseekV3ForCausalLM",)
    with pytest.raises(TunerError, match=r"DeepseekV3ForCausalLM.*its config\.json"):
        check_engine_runs(spec, "0.6.0")
    assert check_engine_runs(spec, "0.6.6") is None


def _llama_config(tmp_path, rope_scaling):
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 256,
           "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 2,
           "intermediate_size": 512, "vocab_size": 1000, "max_position_embeddings": 4096,
           "rope_scaling": rope_scaling}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    return get_model(str(path))


def test_llama3_rope_needs_0_5_3_post1_and_a_plain_llama_does_not(tmp_path):
    rope = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
            "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}
    with pytest.raises(TunerError, match=r"llama3 RoPE.*0\.5\.3\.post1"):
        check_engine_runs(_llama_config(tmp_path, rope), "0.5.3")
    assert check_engine_runs(_llama_config(tmp_path, None), "0.5.0") is None


def test_an_unreadable_source_checks_nothing():
    spec = dataclasses.replace(get_model("deepseek-v3"), name="x", source="/nowhere/config.json")
    assert model_architecture(spec) is None
    assert check_engine_runs(spec, "0.6.0") is None


# ---- a shape assumed from a repo name: a warning, not a refusal ---------------------------------
def test_a_name_assumed_architecture_warns_instead_of_refusing(tmp_path, monkeypatch):
    # offline, an empty HF cache: the repo is priced as the catalog entry its name ends with
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf"))
    spec = get_model("someorg/Hermes-Qwen3-8B")
    assert ASSUMED_FROM_NAME in spec.source and model_architecture(spec).assumed
    note = check_engine_runs(spec, "0.8.3")
    assert note is not None and "0.8.4" in note and "config.json was not read" in note
    assert check_engine_runs(spec, "0.8.4") is None


# ---- the commands -------------------------------------------------------------------------------
def test_simulate_refuses_with_one_line(tmp_path):
    wl = _workload(tmp_path)
    r = runner.invoke(app, ["simulate", "-w", str(wl), "-m", "qwen3-8b", "-g", "A100-80G",
                            "--engine-version", "0.8.3", "--json"])
    # a TunerError: `tuner` prints it as one line and exits 2
    assert r.exit_code != 0 and isinstance(r.exception, TunerError)
    out = str(r.exception)
    assert "Qwen3ForCausalLM" in out and "from 0.8.4" in out and "--engine-version" in out
    ok = runner.invoke(app, ["simulate", "-w", str(wl), "-m", "qwen3-8b", "-g", "A100-80G",
                             "--engine-version", "0.8.4", "--json", "--startup-s", "0"])
    assert ok.exit_code == 0, ok.output


def test_search_refuses_before_writing_anything(tmp_path):
    out = tmp_path / "o"
    r = runner.invoke(app, ["search", "--engines", "vllm", "-w", str(_workload(tmp_path)),
                            "-m", "gemma-3-4b", "--gpus", "A100-80G", "--engine-version",
                            "0.7.3", "--n-trials", "2", "--out", str(out)])
    assert r.exit_code != 0 and isinstance(r.exception, TunerError)
    assert "Gemma3ForConditionalGeneration" in str(r.exception)
    assert not out.exists()


def test_replay_and_simulate_share_the_check_in_engine_config():
    from tuner.cli.simulate import engine_config

    gpu = load_gpus()["H200"]
    with pytest.raises(TunerError, match="DeepseekV3ForCausalLM"):
        engine_config({}, gpu, "llm", "0.6.0", get_model("deepseek-v3"))


def test_export_and_report_refuse_a_stored_study_the_release_cannot_run(monkeypatch):
    # a study stored before the check (its metadata holds the release and the model)
    import tuner.search
    from tuner.cli import exports

    meta = types.SimpleNamespace(engine_version="0.6.0")
    setup = types.SimpleNamespace(model=get_model("deepseek-v3"), meta=meta)
    monkeypatch.setattr(tuner.search, "setup_from_study", lambda *a, **k: setup)
    with pytest.raises(TunerError, match="DeepseekV3ForCausalLM"):
        exports.study_setting(object())
    meta.engine_version = "0.6.6"
    assert exports.study_setting(object()) is setup
