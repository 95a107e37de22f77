"""Stop 52 (H2): what a user sees for a Gated DeltaNet hybrid (Qwen3-Next, Qwen3.5): its
config notes, a search space fitted so no trial is spent on a plan the simulator refuses, the
attention output gate in the parameter count and the q-projection GEMM, vLLM release floors,
and the vLLM export's block size."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tuner.core.arch_support import VLLM_ARCH_FLOORS, release_refusal
from tuner.core.catalog import (
    config_notes,
    get_model,
    load_gpus,
    model_from_config_dict,
    shape_note,
)
from tuner.core.config import ServingConfig
from tuner.core.errors import TunerError
from tuner.core.memory import plan_memory
from tuner.predictors.hybrid import linear_part
from tuner.predictors.opmath import linear_dims
from tuner.predictors.roofline import RooflineCostModel
from tuner.search.space import SearchSpace, fit_space, load_space
from tuner.sim.simulator import _check_hybrid_runs

GPUS = load_gpus()
#: the Gated DeltaNet architectures vLLM registers (qwen3_next.py, qwen3_5.py; 0.32's registry)
GDN_ARCHITECTURES = ("Qwen3NextForCausalLM", "Qwen3_5ForCausalLM", "Qwen3_5MoeForCausalLM",
                     "Qwen3_5ForConditionalGeneration", "Qwen3_5MoeForConditionalGeneration")
#: the published total of Qwen3-Next-80B-A3B (its model card / safetensors index: the
#: embeddings and the untied LM head included), which Qwen3-Coder-Next's config shares
QWEN3_NEXT_PARAMS = 79_674_391_296
VLLM_REGISTRY = Path(__file__).resolve().parents[1] / (
    ".venv-vllm/lib/python3.11/site-packages/vllm/model_executor/models/registry.py")


#: a Qwen3.5 config.json's shape (as tests/test_hybrid_models_s52.py writes it)
QWEN35 = {"architectures": ["Qwen3_5ForConditionalGeneration"], "model_type": "qwen3_5",
          "text_config": {"model_type": "qwen3_5_text", "num_hidden_layers": 64,
                          "hidden_size": 5120, "intermediate_size": 17408,
                          "num_attention_heads": 24, "num_key_value_heads": 4, "head_dim": 256,
                          "vocab_size": 248320, "linear_num_key_heads": 16,
                          "linear_num_value_heads": 48, "linear_key_head_dim": 128,
                          "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4,
                          "attn_output_gate": True, "full_attention_interval": 4}}


@pytest.fixture(scope="module")
def qnext():
    return get_model("qwen3-next-80b-a3b")


def _qnext_config() -> dict:
    from tuner.core.catalog import _catalog_config

    return dict(_catalog_config("qwen3-next-80b-a3b-instruct.json")[0])


# ---- 1. config notes ------------------------------------------------------------------------
def test_shape_note_says_what_is_estimated_not_unknown_architecture(qnext):
    note = shape_note(qnext)
    assert note is not None and "not one tuner knows" not in note
    assert "36 of its 48 layers are Gated DeltaNet" in note and "ESTIMATE" in note
    assert note.count("Gated DeltaNet hybrid") == 1


@pytest.mark.parametrize("arch", GDN_ARCHITECTURES)
def test_every_gated_deltanet_architecture_is_known(arch):
    cfg = dict(_qnext_config(), architectures=[arch])
    notes = config_notes(cfg)
    assert not any("not one tuner knows" in n for n in notes)
    assert sum("Gated DeltaNet" in n for n in notes) == 1


def test_the_names_are_vllms():
    if not VLLM_REGISTRY.is_file():
        pytest.skip("no vLLM copy installed beside the repo")
    from tuner.core.catalog import GATED_DELTANET_ARCHITECTURES

    assert set(GDN_ARCHITECTURES) == GATED_DELTANET_ARCHITECTURES
    text = VLLM_REGISTRY.read_text()
    for arch in GDN_ARCHITECTURES:
        assert re.search(rf'"{arch}": \(', text), arch


# ---- 2. the search space --------------------------------------------------------------------
def _fit(space, model, **kw):
    kw.setdefault("engines", ["vllm", "sglang"])
    return fit_space(space, model=model, gpus={"H100": GPUS["H100"]}, gpu_caps={},
                     defaults={}, outputs_from_input=True, **kw)


def test_default_search_keeps_sglang_for_the_gated_deltanet_family(qnext):
    # SGLang's Mamba state pool is planned (tuner.core.sglang._hybrid_state_pool; stop 52)
    space, notes = _fit(load_space("default"), qnext)
    assert space.knobs["engine"] == ["vllm", "sglang"]
    assert not any("engine sglang left out" in n for n in notes)
    assert "pp" not in space.knobs and space.fixed.get("pp", 1) == 1  # no stages offered


def test_offload_space_holds_kv_on_the_gpu(qnext):
    space, notes = _fit(load_space("offload"), qnext)
    assert space.fixed["kv_offload_layers"] == 0 and "kv_offload_layers" not in space.knobs
    assert sum(n.startswith("kv_offload_layers") for n in notes) == 1
    # every plan left is one the simulator runs for a hybrid
    for config in list(space.grid(["H100"]))[:200]:
        _check_hybrid_runs(qnext, config.engine, None, config)
        assert config.kv_offload_layers == 0 and config.pp == 1


def test_v0_schedulers_and_pipeline_stages_left_out(qnext):
    space = SearchSpace(knobs={"scheduler": ["vllm", "sarathi", "vllm-v0-noevict"],
                               "pp": [1, 2], "chunk_size": [1024, 2048]},
                        fixed={"tp": 4}, source="mine.yaml")
    fitted, notes = _fit(space, qnext)
    assert fitted.fixed["scheduler"] == "vllm" and fitted.fixed["pp"] == 1
    assert "scheduler" not in fitted.knobs and "pp" not in fitted.knobs
    assert [n.split(" left out")[0] for n in notes if "hybrid" in n] == [
        "scheduler sarathi, vllm-v0-noevict", "pp 2"]


def test_sglang_only_is_searched(qnext):
    space, _ = _fit(load_space("default"), qnext, engines=["sglang"])
    assert space.fixed.get("engine", "sglang") == "sglang"


@pytest.mark.parametrize("fixed", [{"scheduler": "sarathi"}, {"kv_offload_layers": 4},
                                   {"pp": 2}])
def test_a_fixed_value_no_hybrid_runs_is_one_error(qnext, fixed):
    space = SearchSpace(knobs={"chunk_size": [1024, 2048]}, fixed=fixed, source="mine.yaml")
    with pytest.raises(TunerError, match="mine.yaml: .*hybrid"):
        _fit(space, qnext, engines=None)


def test_engine_version_before_the_first_hybrid_release_is_one_error(qnext):
    with pytest.raises(TunerError, match=r"--engine-version 0\.10\.1: .*0\.10\.2"):
        _fit(load_space("default"), qnext, engine_version="0.10.1")
    _fit(load_space("default"), qnext, engine_version="0.10.2")  # runs


def test_the_simulator_refuses_what_was_left_out(qnext):
    # the rules the fit mirrors (a drift here would spend trials again)
    _check_hybrid_runs(qnext, "sglang", None, ServingConfig(gpu="H100", engine="sglang"))
    for over in ({"kv_offload_layers": 2}, {"pp": 2}):
        plan = plan_memory(qnext, GPUS["H100"], ServingConfig(gpu="H100", tp=4, **over))
        assert not plan.fits and "hybrid" in plan.reason


# ---- 3. the attention output gate -----------------------------------------------------------
def test_output_gate_read_and_counted(qnext):
    assert qnext.attn_output_gate  # vLLM's qwen3_next.py: getattr(config, ..., True)
    assert abs(qnext.num_params - QWEN3_NEXT_PARAMS) / QWEN3_NEXT_PARAMS < 1e-3
    h, heads, kv, d = 2048, 16, 2, 256
    assert qnext.attention_params_per_layer == h * 2 * heads * d + h * 2 * kv * d + heads * d * h
    off = model_from_config_dict(dict(_qnext_config(), attn_output_gate=False),
                                 where="c.json", name="c", source="test")
    assert qnext.num_params - off.num_params == 12 * h * heads * d


def test_q_projection_gemm_is_query_plus_gate_wide(qnext):
    # q_proj: 2 x heads x head_dim (query + gate), then K and V: (32 + 4) x 256 / tp
    assert linear_dims("linear.qkv", qnext, tp=2) == (2048, (2 * 16 + 2 * 2) * 256 // 2)
    assert linear_dims("linear.o", qnext, tp=2) == (16 * 256 // 2, 2048)
    roof = RooflineCostModel.from_specs(GPUS["H100"], qnext, tp=2)
    assert roof.attn_output_gate and roof.attention_params == qnext.attention_params_per_layer
    # the Gated DeltaNet layers' stand-in projections carry no attention gate
    lin = linear_part(qnext)
    assert not lin.attn_output_gate
    assert linear_dims("linear.qkv", lin)[1] == 2 * 16 * 128 + 2 * 32 * 128  # in_proj_qkvz


def test_aic_tables_price_the_wider_q_projection(qnext, monkeypatch):
    from tuner.predictors import aic

    seen = []
    real = aic.KernelTables.gemm_s

    def spy(self, n, k, dtype="bf16"):
        seen.append((n, k))
        return real(self, n, k, dtype)

    monkeypatch.setattr(aic.KernelTables, "gemm_s", spy)
    from tuner.predictors.hybrid import attention_part
    from tuner.predictors.sources import resolve_cost_model

    try:
        resolve_cost_model(attention_part(qnext), GPUS["H100"],
                           ServingConfig(gpu="H100", tp=2))
    except Exception as exc:  # pragma: no cover - no tables shipped for this GPU
        pytest.skip(f"no AIConfigurator tables: {exc}")
    if not seen:
        pytest.skip("the source priced no GEMM from the tables")
    assert ((2 * 8 + 2 * 1) * 256, 2048) in seen


# ---- 4. release floors ----------------------------------------------------------------------
def test_release_floors_from_the_wheels():
    floors = {f.architecture: f.since for f in VLLM_ARCH_FLOORS}
    assert floors["Qwen3NextForCausalLM"] == "0.10.2"
    assert floors["Qwen3_5ForConditionalGeneration"] == "0.17.0"
    assert floors["Qwen3_5MoeForConditionalGeneration"] == "0.17.0"
    assert floors["Qwen3_5ForCausalLM"] == "0.27.0"
    assert floors["Qwen3_5MoeForCausalLM"] == "0.27.0"
    for f in VLLM_ARCH_FLOORS:
        if f.architecture in GDN_ARCHITECTURES:
            assert "wheel's model registry has it" in f.source


def test_a_qwen35_config_on_an_older_release_is_refused(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(QWEN35))
    m = get_model(str(tmp_path))
    assert m.attn_output_gate  # Qwen3.5's attention is qwen3_next.py's
    assert "0.17.0" in release_refusal(m, "0.16.0")
    assert release_refusal(m, "0.17.0") is None


# ---- 5. the vLLM export ---------------------------------------------------------------------
def test_vllm_export_is_the_plan_simulated(qnext):
    from tuner.exports.vllm import from_vllm_yaml, to_vllm_yaml

    config = ServingConfig(gpu="H100", tp=4, chunk_size=8192, max_running=256)
    plan = plan_memory(qnext, GPUS["H100"], config)
    text = to_vllm_yaml(config, qnext, GPUS["H100"], max_model_len=8192)
    # the plan's block size as given (vLLM raises a user-given one too), said with the block
    # vLLM raises it to, which the plan simulated
    assert "\nblock-size: 16\n" in text
    assert plan.block_size_tokens == 272
    assert "raises its attention block to 272 tokens" in text
    assert from_vllm_yaml(text, gpu="H100") == config
