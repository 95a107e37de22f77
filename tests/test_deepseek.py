"""DeepSeek as vLLM runs it (issue #24 item 3): the checkpoint's precision from its
quantization_config, MLA's 64-token blocks, DeepSeek-V3.2's sparse-attention cache (latent in
vLLM's fp8_ds_mla layout + the indexer's keys), and the attention block priced from
AIConfigurator's measured MLA / sparse-attention module tables."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from typer.testing import CliRunner

from tuner.cli.main import app
from tuner.core.catalog import get_model, load_gpus, model_from_config_dict
from tuner.core.config import ServingConfig
from tuner.core.engine_defaults import MLA_BLOCK_SIZE, vllm_defaults
from tuner.core.errors import TunerError
from tuner.core.memory import plan_memory
from tuner.core.workload import Workload
from tuner.predictors.aic import table_cost_model
from tuner.predictors.features import BatchFeatures
from tuner.sim.simulator import InfeasibleConfig, check_feasible, simulate

GPUS = load_gpus()
runner = CliRunner()


def _cfg(**quant) -> dict:
    base = json.loads((__import__("pathlib").Path(__file__).parents[1] / "tuner" / "core" / "data"
                       / "configs" / "deepseek-v3.json").read_text())
    base.pop("quantization_config", None)
    return {**base, **quant}


@pytest.mark.parametrize("quant, bits, says", [
    ({"quant_method": "fp8", "weight_block_size": [128, 128]}, 8, "fp8, blocks 128x128"),
    ({"quant_method": "fbgemm_fp8"}, 8, "fbgemm_fp8"),
    ({"quant_method": "awq", "bits": 4}, 4, "awq, 4-bit"),
    ({"quant_method": "gptq", "bits": 8}, 8, "gptq, 8-bit"),
    ({"quant_method": "mxfp4"}, 4, "mxfp4"),
    ({"quant_method": "compressed-tensors",
      "config_groups": {"g0": {"weights": {"num_bits": 8, "type": "float"}}}}, 8,
     "compressed-tensors, 8-bit float"),
    ({"quant_method": "modelopt", "quant_algo": "NVFP4"}, 4, "modelopt NVFP4"),
])
def test_the_checkpoint_precision_is_read_from_quantization_config(quant, bits, says):
    m = model_from_config_dict(_cfg(quantization_config=quant), where="x", name="x", source="x")
    assert (m.checkpoint_bits, m.checkpoint_quantization) == (bits, says)


def test_an_unknown_quantization_is_refused_by_name_not_priced_as_16_bit():
    with pytest.raises(TunerError, match="hqq.*not one tuner prices"):
        model_from_config_dict(_cfg(quantization_config={"quant_method": "hqq"}), where="x",
                               name="x", source="x")
    assert model_from_config_dict(_cfg(), where="x", name="x", source="x").checkpoint_bits == 16


def test_deepseek_v3_is_served_at_its_fp8_with_mla_blocks_of_64():
    ds = get_model("deepseek-v3")
    assert (ds.checkpoint_bits, ds.checkpoint_quantization) == (8, "fp8, blocks 128x128")
    d = vllm_defaults("H200", 141, model=ds)
    assert (d.weight_bits, d.block_size) == (8, MLA_BLOCK_SIZE) and "fp8, blocks" in d.describe()
    llama = vllm_defaults("H200", 141, model=get_model("llama-3.1-8b"))
    assert (llama.weight_bits, llama.block_size) == (16, 16)
    w = Workload(prompt_tokens=np.full(4, 100), output_tokens=np.full(4, 10))
    with pytest.raises(InfeasibleConfig, match="checkpoint is fp8.*not 16"):
        check_feasible(w, ds, GPUS["H200"], ServingConfig(gpu="H200", tp=8, weight_bits=16))


def test_simulate_defaults_the_checkpoint_precision_and_refuses_more_bits(tmp_path):
    wl = tmp_path / "w.jsonl"
    wl.write_text("".join(json.dumps({"prompt_tokens": 500, "output_tokens": 50}) + "\n"
                          for _ in range(20)))
    r = runner.invoke(app, ["simulate", "-w", str(wl), "-m", "deepseek-v3", "-g", "H200",
                            "--tp", "8", "--json", "--startup-s", "0"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert (d["config"]["weight_bits"], d["config"]["block_size"]) == (8, 64)
    assert {"weight_bits", "block_size"} <= set(d["defaulted"])
    r = subprocess.run([sys.executable, "-m", "tuner.cli", "simulate", "-w", str(wl), "-m",
                        "deepseek-v3", "-g", "H200", "--tp", "8", "--weight-bits", "16"],
                       capture_output=True, text=True, timeout=120)
    out = r.stdout + r.stderr
    assert r.returncode != 0 and "Traceback" not in out
    assert "checkpoint is fp8" in out and "--weight-bits 8" in out


def test_a_search_space_is_fitted_to_the_checkpoint():
    from tuner.search.space import fit_space, load_space

    ds = get_model("deepseek-v3")
    space, notes = fit_space(load_space("default"), model=ds, gpus={"H200": GPUS["H200"]},
                             gpu_caps={}, defaults={}, outputs_from_input=True)
    assert space.fixed["weight_bits"] == 8 and space.fixed["block_size"] == 64
    assert any("fp8, blocks 128x128" in n for n in notes)
    space, _ = fit_space(load_space("offload"), model=ds, gpus={"H200": GPUS["H200"]},
                         gpu_caps={}, defaults={}, outputs_from_input=True)
    assert sorted(space.knobs["weight_bits"]) == [4, 8]  # 16 is not there to serve


def test_v32_cache_is_vllms_sparse_mla_layout_plus_the_indexer():
    v32, v3 = get_model("deepseek-v3.2"), get_model("deepseek-v3")
    assert (v32.index_topk, v32.index_n_heads, v32.index_head_dim) == (2048, 64, 128)
    # fp8_ds_mla: 512 FP8 latent + 4 FP32 scales + 64 BF16 rope = 656; indexer 128 + 4 = 132
    assert v32.kv_bytes_per_token_per_layer(8) == 656 + 132
    assert v32.kv_bytes_per_token_per_layer(16) == 1152 + 132
    assert v3.kv_bytes_per_token_per_layer(8) == 576  # FlashMLA FP8: the 576 latent values
    # KV capacity as vLLM computes it: whole 64-token blocks of every layer's bytes
    cfg = ServingConfig(gpu="H200", tp=8, weight_bits=8, kv_bits=8, block_size=64)
    plan = plan_memory(v32, GPUS["H200"], cfg)
    page = 64 * v32.num_layers * 788
    assert plan.kv_capacity_tokens == int(plan.kv_bytes // page) * 64


def test_v32_cache_on_sm120_is_fp8_as_vllm_serves_it(tmp_path):
    """vLLM's FLASHINFER_MLA_SPARSE_SM120 backend turns kv_cache_dtype auto (and bfloat16, via
    auto) into fp8_ds_mla: on an RTX PRO 6000 V3.2's cache is FP8 by default, a 16-bit one is
    refused in one line, and a search of those GPUs alone fixes it; elsewhere nothing moves."""
    from tuner.search.space import fit_space, load_space

    v32 = get_model("deepseek-v3.2")
    d = vllm_defaults("RTX-PRO-6000", 95, model=v32)
    assert d.kv_bits == 8 and "fp8_ds_mla" in d.describe()
    for gpu, model in (("H200", v32), ("RTX-PRO-6000", get_model("deepseek-v3")),
                       ("RTX-PRO-6000", get_model("llama-3.1-8b"))):
        other = vllm_defaults(gpu, GPUS[gpu].memory_gib, model=model)
        assert other.kv_bits == 16 and not other.kv_cache
    wl = tmp_path / "w.jsonl"
    wl.write_text("".join(json.dumps({"prompt_tokens": 500, "output_tokens": 50}) + "\n"
                          for _ in range(20)))
    base = ["simulate", "-w", str(wl), "-m", "deepseek-v3.2", "-g", "RTX-PRO-6000", "--tp", "8",
            "--startup-s", "0"]
    r = runner.invoke(app, [*base, "--json"])
    assert r.exit_code == 0, r.output
    got = json.loads(r.output)
    assert got["config"]["kv_bits"] == 8 and "kv_bits" in got["defaulted"]
    as_run = ServingConfig(**got["config"])
    plan = plan_memory(v32, GPUS["RTX-PRO-6000"], as_run)
    bf16 = plan_memory(v32, GPUS["RTX-PRO-6000"], ServingConfig(**got["config"] | {"kv_bits": 16}))
    assert got["kv_capacity_tokens"] == plan.kv_capacity_tokens > bf16.kv_capacity_tokens * 1.5
    r = runner.invoke(app, [*base, "--kv-bits", "16"])
    assert isinstance(r.exception, TunerError) and "fp8_ds_mla" in str(r.exception)
    one = {"RTX-PRO-6000": GPUS["RTX-PRO-6000"]}
    space, notes = fit_space(load_space("default"), model=v32, gpus=one, gpu_caps={},
                             defaults={}, outputs_from_input=True)
    assert space.fixed["kv_bits"] == 8 and any(n.startswith("kv_bits: 8") for n in notes)
    mixed = one | {"H200": GPUS["H200"]}
    space, notes = fit_space(load_space("default"), model=v32, gpus=mixed, gpu_caps={},
                             defaults={}, outputs_from_input=True)
    assert space.fixed.get("kv_bits", 16) == 16 and any("priced with a larger cache" in n
                                                         for n in notes)


@pytest.mark.parametrize("source", ["tables", "roofline"])
def test_sparse_attention_reads_at_most_topk_latents_and_stays_above_the_bound(source):
    from tuner.predictors.sources import cost_model_for

    v32, v3 = get_model("deepseek-v3.2"), get_model("deepseek-v3")
    w = Workload(prompt_tokens=np.full(16, 12000), output_tokens=np.full(16, 600))
    cfg = ServingConfig(gpu="H200", tp=8, weight_bits=8)
    mode = "roofline" if source == "roofline" else "auto"
    res = {m.name: simulate(w, m, GPUS["H200"], cfg,
                            cost_model_for(m, None, mode)(GPUS["H200"], cfg), startup_s=0)
           for m in (v3, v32)}
    for r in res.values():
        assert r.schedule_lower_bound_s <= r.schedule_s
    # 12k-token contexts: V3.2 attends to 2,048 of them, its physical limit is lower
    assert res["deepseek-v3.2"].schedule_lower_bound_s < res["deepseek-v3"].schedule_lower_bound_s
    if source == "roofline":  # and the roofline's decode reads the top-k latents only
        f = BatchFeatures(prefill_tokens=np.zeros(1), prefill_sq=np.zeros(1),
                          prefill_ctx=np.zeros(1), decodes=np.array([64.0]),
                          decode_kv=np.array([64 * 12000.0]), seqs_sampled=np.array([64.0]))
        a, b = (cost_model_for(m, None, "roofline")(GPUS["H200"], cfg).breakdown(f)
                ["attention_decode"][0] for m in (v32, v3))
        per_token = v32.latent_bytes_per_token_per_layer(16) * 2048 \
            + v32.index_bytes_per_token_per_layer * 12000
        assert a < b and a == pytest.approx(b * per_token / (1152 * 12000), rel=0.01)


def test_v32_is_priced_from_the_sparse_attention_tables():
    v32 = get_model("deepseek-v3.2")
    cm = table_cost_model(v32, GPUS["H100"], tp=8, weight_bits=8, engine=None)
    assert cm is not None and "DeepSeek sparse attention" in cm.describe()
    assert "FLASHMLA_SPARSE" in cm.describe() and cm.sparse_topk == 2048
    # decode at long contexts: the sparse block grows far less than V3's dense one
    v3 = table_cost_model(get_model("deepseek-v3"), GPUS["H100"], tp=8, weight_bits=8,
                          engine=None)
    f = BatchFeatures(prefill_tokens=np.zeros(2), prefill_sq=np.zeros(2), prefill_ctx=np.zeros(2),
                      decodes=np.array([64.0, 64.0]), decode_kv=np.array([64 * 2e3, 64 * 6e4]),
                      seqs_sampled=np.array([64.0, 64.0]))
    g32, g3 = (c.gpu_breakdown(f)["attention_decode"] for c in (cm, v3))
    assert g32[1] / g32[0] < g3[1] / g3[0]
    # no sparse-attention table on the RTX PRO 6000: the roofline, said so
    assert table_cost_model(v32, GPUS["RTX-PRO-6000"], tp=8, weight_bits=16) is None
