"""QA h2: quantization, KV dtype, offload and CPU-thread knobs between search and export.

1. --quantized-model serves only the plans at its own weight bits (an FP8 plan on an FP8 GPU
   quantizes online); its bits come from its config.json or its name.
2. Knobs vLLM lacks (layer-wise KV offload, CPU attention) are left out of vLLM searches, and a
   plan carrying one is never a winner.
3/5. 8-bit weights quantize online on every GPU (Marlin W8A16 without FP8 tensor cores), spelled
   as the target vLLM release takes it (fp8_per_tensor from 0.20, fp8 before).
4. A 4-bit KV cache is no vLLM plan.
6. CPU threads matter only with CPU attention: not searched without it, no OMP advice.
7. `tuner simulate` says what a quantized plan needs and what it does not simulate.
8. The offloading verdict quotes the stall's own cause.
9. The KV-offload export note names vLLM's CPU KV offloading, not swap space.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import yaml
from typer.testing import CliRunner

from tuner.cli.main import app
from tuner.core.catalog import get_model, load_gpus
from tuner.core.config import ServingConfig
from tuner.core.errors import TunerError
from tuner.core.workload import Workload
from tuner.exports import render_export, sglang_server_args, vllm_engine_args
from tuner.exports.common import (
    Deployment,
    fp8_kv_flash_attention,
    online_fp8_method,
    precision_notes,
)
from tuner.search.constraints import Constraints, checkpoint_weight_bits, needs_checkpoint
from tuner.search.evaluator import Evaluator
from tuner.search.records import TrialRecord, offload_verdict, rank, study_only_reason
from tuner.search.space import SearchSpace, engine_refusal, fit_space, load_space

GPUS = load_gpus()
LLAMA = get_model("llama-3-8b")
AWQ = "casperhansen/llama-3-8b-instruct-awq"
VLLM_SRC = next(Path(__file__).resolve().parents[1].glob(
    ".venv-vllm/lib/python3*/site-packages/vllm"), None)
runner = CliRunner()


def vllm_args(cfg: ServingConfig, **kw):
    return vllm_engine_args(cfg, LLAMA, GPUS[cfg.gpu], max_model_len=4096, **kw)


def fitted(space: SearchSpace, engines=("vllm",), gpus=("A10",)):
    return fit_space(space, model=LLAMA, gpus={g: GPUS[g] for g in gpus}, gpu_caps={},
                     defaults={}, outputs_from_input=True, engines=list(engines))


def space_of(knobs: dict, fixed: dict | None = None) -> SearchSpace:
    return SearchSpace(knobs=knobs, fixed=fixed or {}, source="sp.yaml")


# ---- 1. the checkpoint's bits decide which plans it serves -------------------------------------
@pytest.mark.parametrize("ref, bits", [
    (AWQ, 4), ("TheBloke/Llama-2-7B-GPTQ", 4), ("RedHatAI/Llama-3-8B-quantized.w4a16", 4),
    ("hugging-quants/Meta-Llama-3.1-70B-Instruct-AWQ-INT4", 4), ("unsloth/llama-3-8b-bnb-4bit", 4),
    ("Qwen/Qwen2.5-7B-Instruct-GPTQ-Int8", 8),  # a width named beats the method
    ("RedHatAI/Meta-Llama-3.1-8B-Instruct-quantized.w8a8", 8),
    ("neuralmagic/Meta-Llama-3-8B-Instruct-FP8", 8),
    ("org/llama-3-8b-quantized", None),  # "8b" is the model's size, not a width
])
def test_checkpoint_bits_from_its_name(ref, bits):
    assert checkpoint_weight_bits(ref) == bits


def test_checkpoint_bits_from_its_config_beat_its_name(tmp_path):
    ckpt = tmp_path / "llama-fp8"  # the name says 8; the config says AWQ 4-bit
    ckpt.mkdir()
    (ckpt / "config.json").write_text(json.dumps(
        {"quantization_config": {"quant_method": "awq", "bits": 4, "group_size": 128}}))
    assert checkpoint_weight_bits(str(ckpt)) == 4
    plain = tmp_path / "llama-awq"
    plain.mkdir()
    (plain / "config.json").write_text("{}")  # no quantization_config: 16-bit
    with pytest.raises(TunerError, match="16-bit checkpoint"):
        Constraints(quantized_model=str(plain))


def test_checkpoint_bits_from_the_hf_cache(tmp_path, monkeypatch):
    repo = tmp_path / "models--org--mystery"
    snap = repo / "snapshots" / "abc"
    snap.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("abc")
    (snap / "config.json").write_text(json.dumps(
        {"quantization_config": {"quant_method": "compressed-tensors", "config_groups": {
            "g": {"weights": {"num_bits": 8, "type": "int"}}}}}))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    assert checkpoint_weight_bits("org/mystery") == 8


def test_a_checkpoint_serves_only_plans_at_its_bits():
    awq = Constraints(quantized_model=AWQ)
    assert awq.quantized_bits == 4
    assert awq.plan_violation("A10", 1, 4, False) is None
    int8 = Constraints(quantized_model="org/llama-3-8b-w8a8")
    why = int8.plan_violation("A10", 1, 4, False)
    assert "--quantized-model org/llama-3-8b-w8a8 holds 8-bit weights" in why
    # without one, the existing message
    assert Constraints().plan_violation("A10", 1, 4, False) == (
        "4-bit weights on A10 need a quantized checkpoint; pass --quantized-model ID to search "
        "them")
    # a stored study finds the bits again
    assert Constraints.from_dict(int8.to_dict()).quantized_bits == 8


def test_an_fp8_plan_exports_the_base_model_quantized_online_not_the_awq_checkpoint():
    cfg = ServingConfig(gpu="L40S", weight_bits=8)
    for fmt in ("vllm", "vllm-run-batch", "run-batch", "ray-data", "json"):
        text = render_export(fmt, cfg, LLAMA, GPUS["L40S"], max_model_len=4096,
                             quantized_model=AWQ)
        assert LLAMA.load_id in text, fmt
        assert "fp8_per_tensor" in text, fmt
        assert f"{AWQ} is the" not in text, fmt
    data = yaml.safe_load(render_export("vllm", cfg, LLAMA, GPUS["L40S"], max_model_len=4096,
                                        quantized_model=AWQ))
    assert data["model"] == LLAMA.load_id and data["quantization"] == "fp8_per_tensor"
    _, notes = vllm_args(cfg, quantized_model=AWQ)
    assert any("(4-bit weights) is not served" in n for n in notes)


def test_a_4bit_plan_serves_a_4bit_checkpoint_and_refuses_an_8bit_one():
    cfg = ServingConfig(gpu="A10", weight_bits=4)
    data = yaml.safe_load(render_export("vllm", cfg, LLAMA, GPUS["A10"], max_model_len=4096,
                                        quantized_model=AWQ))
    assert data["model"] == AWQ and "quantization" not in data
    with pytest.raises(TunerError, match="holds 8-bit weights: pass a 4-bit one"):
        render_export("vllm", cfg, LLAMA, GPUS["A10"], max_model_len=4096,
                      quantized_model="org/llama-3-8b-w8a8")
    # an 8-bit checkpoint given serves the 8-bit plans in place of online FP8
    args, _ = vllm_args(ServingConfig(gpu="A10", weight_bits=8),
                        quantized_model="org/llama-3-8b-w8a8")
    assert args["model"] == "org/llama-3-8b-w8a8" and "quantization" not in args


# ---- 3/5. 8-bit weights on every GPU, spelled for the release -----------------------------------
def test_8bit_weights_need_no_checkpoint_on_ampere():
    assert not needs_checkpoint(8, False) and needs_checkpoint(4, True)
    assert Constraints().plan_violation("A40", 2, 8, False) is None
    args, notes = vllm_args(ServingConfig(gpu="A40", weight_bits=8))
    assert args["quantization"] == "fp8_per_tensor" and args["model"] == LLAMA.load_id
    assert any("Marlin" in n and "W8A16" in n for n in notes)
    opts, _ = sglang_server_args(ServingConfig(gpu="A40", weight_bits=8), LLAMA, GPUS["A40"],
                                 max_model_len=4096)
    assert dict(opts)["quantization"] == "fp8"  # SGLang: Marlin FP8 on sm_80 - sm_88


def test_online_fp8_is_spelled_as_the_release_takes_it():
    assert online_fp8_method(None) == "fp8_per_tensor"
    assert online_fp8_method("0.32.0") == "fp8_per_tensor"
    assert online_fp8_method("0.20.0") == "fp8_per_tensor"
    assert online_fp8_method("0.19.0") == online_fp8_method("0.11.0") == "fp8"
    assert online_fp8_method(None, v0=True) == "fp8"
    cfg = ServingConfig(gpu="L40S", weight_bits=8)
    assert vllm_args(cfg, engine_version="0.11.0")[0]["quantization"] == "fp8"
    assert vllm_args(cfg, num_scheduler_steps=8)[0]["quantization"] == "fp8"
    text = render_export("vllm", cfg, LLAMA, GPUS["L40S"], max_model_len=4096,
                         engine_version="0.11.0")
    assert yaml.safe_load(text)["quantization"] == "fp8"
    # an FP8 checkpoint's own method is read from it in every release
    fp8_model = get_model("deepseek-v3")
    h200 = GPUS["H200"]
    args, _ = vllm_engine_args(ServingConfig(gpu="H200", tp=8, weight_bits=8, block_size=64),
                               fp8_model, h200, max_model_len=4096)
    assert args["quantization"] == "fp8"


@pytest.mark.skipif(VLLM_SRC is None, reason="needs the installed vLLM source (.venv-vllm)")
def test_the_installed_vllm_refuses_online_fp8_and_takes_the_shorthand():
    fp8 = (VLLM_SRC / "model_executor/layers/quantization/fp8.py").read_text()
    methods = (VLLM_SRC / "model_executor/layers/quantization/__init__.py").read_text()
    assert "no longer supports online" in fp8 and "fp8_per_tensor" in fp8
    assert f'"{online_fp8_method(None)}"' in methods
    assert "return 75" in fp8  # Fp8Config.get_min_capability: Turing on (Marlin W8A16)


# ---- 4. no 4-bit KV cache in a vLLM plan --------------------------------------------------------
def test_kv_bits_4_left_out_of_a_vllm_search_and_kept_for_sglang():
    sp, notes = fitted(space_of({"kv_bits": [16, 8, 4], "max_running": [64, 256]}))
    assert sp.knobs["kv_bits"] == [16, 8]
    assert any(n.startswith("kv_bits 4 left out") for n in notes)
    both, _ = fitted(space_of({"kv_bits": [16, 8, 4]}), engines=("vllm", "sglang"))
    assert both.knobs["kv_bits"] == [16, 8, 4]  # SGLang has a 4-bit KV cache
    with pytest.raises(TunerError, match="kv_bits 4"):
        fitted(space_of({"max_running": [64]}, {"kv_bits": 4}))
    with pytest.raises(TunerError, match="no engine searched runs any of them"):
        fitted(space_of({"kv_bits": [4]}))


def workload(n: int = 64) -> Workload:
    rng = np.random.default_rng(0)
    return Workload(prompt_tokens=rng.integers(100, 800, n).astype(np.int64),
                    output_tokens=rng.integers(20, 120, n).astype(np.int64),
                    source="t", tokenizer="given", output_source="given")


def test_a_vllm_plan_vllm_lacks_is_infeasible_with_the_reason():
    space = space_of({"kv_bits": [16, 4], "engine": ["vllm", "sglang"]})
    ev = Evaluator(workload(), LLAMA, {"A10": GPUS["A10"]}, space, sample_fraction=1.0)
    values, attrs = ev.evaluate({"gpu": "A10", "kv_bits": 4, "engine": "vllm"}, 0)
    assert values == (math.inf, math.inf) and not attrs["feasible"]
    assert "4-bit KV" in attrs["reason"] and "not a plan vLLM runs" in attrs["reason"]
    ok, attrs = ev.evaluate({"gpu": "A10", "kv_bits": 4, "engine": "sglang"}, 1)
    assert attrs["feasible"] and math.isfinite(ok[0])
    assert engine_refusal(ServingConfig(gpu="A10", attention_on_cpu=True))
    assert engine_refusal(ServingConfig(gpu="A10", engine="sglang", kv_bits=4)) is None


# ---- 2. knobs vLLM lacks: left out, never a winner ----------------------------------------------
def test_the_offload_space_searches_what_vllm_runs():
    raw = load_space("offload")
    assert {"kv_offload_layers", "attention_on_cpu", "cpu_threads_intra"} <= set(raw.knobs)
    sp, notes = fitted(raw, gpus=("A10", "A40"))
    assert sp.fixed["kv_offload_layers"] == 0 and sp.fixed["attention_on_cpu"] is False
    assert "kv_offload_layers" not in sp.knobs and "attention_on_cpu" not in sp.knobs
    assert "cpu_threads_intra" not in sp.knobs and "cpu_threads_inter" not in sp.knobs
    assert sp.knobs["weight_offload_fraction"] == [0.0, 0.1, 0.25, 0.5]  # vLLM cpu_offload_gb
    text = " ".join(notes)
    assert "layer-wise KV offload" in text and "CPU decode attention" in text
    assert all(engine_refusal(c) is None for c in sp.grid(["A10"]))
    with pytest.raises(TunerError, match="kv_offload_layers 8"):
        fitted(space_of({"max_running": [64]}, {"kv_offload_layers": 8}))


def record(n: int, gpu: str, makespan_s: float, offload: dict | None = None, **knobs):
    cfg = ServingConfig(gpu=gpu, **knobs)
    return TrialRecord(number=n, config=cfg, feasible=True,
                       metrics={"makespan_s": makespan_s, "cost_usd": makespan_s / 3600,
                                "offload": offload},
                       study_only=study_only_reason(cfg))


def test_a_plan_vllm_cannot_run_is_no_winner():
    """QA s3: the CPU-attention plan 'beat' vLLM's defaults with an export equal to them."""
    defaults = record(0, "A10", 1584.0)
    cpu_attn = record(1, "A10", 1320.0, kv_offload_layers=16, attention_on_cpu=True,
                      cpu_threads_inter=12)
    assert cpu_attn.study_only.startswith("simulator study: vLLM has no layer-wise KV offload")
    assert rank([defaults, cpu_attn], "fastest")[0].number == 0


# ---- 6. CPU threads only with CPU attention ----------------------------------------------------
def test_cpu_threads_need_cpu_attention():
    sp, notes = fitted(space_of({"cpu_threads_intra": [0, 16], "cpu_threads_inter": [0, 12],
                                 "max_running": [64, 256]}))
    assert set(sp.knobs) == {"max_running", "engine"}
    assert any("cpu_threads_intra, cpu_threads_inter left out" in n for n in notes)
    # no OMP advice: without CPU attention the threads did nothing; with it, vLLM has none
    _, notes = vllm_args(ServingConfig(gpu="A10", cpu_threads_inter=12))
    assert not any("OMP_NUM_THREADS" in n for n in notes)
    assert any("no effect on this plan" in n for n in notes)
    _, notes = vllm_args(ServingConfig(gpu="A10", kv_offload_layers=8, attention_on_cpu=True,
                                       cpu_threads_intra=16))
    assert not any("OMP_NUM_THREADS" in n for n in notes)
    assert any(n.startswith("cpu_threads intra=16") and "CPU decode attention" in n
               for n in notes)


# ---- 8. the offloading verdict names its stall ----------------------------------------------------
def test_offload_verdict_quotes_weight_streaming_when_no_kv_is_offloaded():
    stall = {"kv_capacity_gain": 1.0, "transfer_to_compute_ratio": 4.2, "kv_stall_s": 0.0,
             "weight_stall_s": 892.49, "offload_stall_s": 892.49}
    recs = [record(0, "A40", 1374.0, stall, tp=2, weight_offload_fraction=0.6),
            record(1, "L40S", 373.0, tp=2)]
    text = offload_verdict(recs, GPUS)
    assert "streaming 60 % of the weights every iteration stalls 892 s" in text
    assert "KV transfer" not in text
    kv = {"kv_capacity_gain": 1.3, "transfer_to_compute_ratio": 2.5, "kv_stall_s": 40.0,
          "weight_stall_s": 0.0, "offload_stall_s": 40.0}
    text = offload_verdict([record(0, "A10", 900.0, kv, kv_offload_layers=4),
                            record(1, "A40", 600.0)], GPUS)
    assert "one layer's KV transfer takes 2.5x its compute" in text
    assert "KV transfer stalls 40 s" in text and "weights" not in text.split("Why:")[1]


# ---- 9. vLLM's CPU KV offloading, not swap space ---------------------------------------------------
def test_kv_offload_note_names_vllms_cpu_kv_offloading():
    _, notes = vllm_args(ServingConfig(gpu="A10", kv_offload_layers=8))
    (note,) = [n for n in notes if n.startswith("kv_offload_layers=8")]
    assert "--kv-offloading-size GIB --kv-offloading-backend native|lmcache" in note
    assert "vLLM >= 0.11.1" in note and "or swap space" not in note


@pytest.mark.skipif(VLLM_SRC is None, reason="needs the installed vLLM source (.venv-vllm)")
def test_the_installed_vllm_has_cpu_kv_offloading_and_no_swap_space():
    args = (VLLM_SRC / "engine/arg_utils.py").read_text()
    assert '"--kv-offloading-size"' in args and '"--kv-offloading-backend"' in args
    assert "swap_space" not in args


# ---- 7. tuner simulate says what a quantized plan needs -----------------------------------------
@pytest.fixture(scope="module")
def wl(tmp_path_factory):
    p = tmp_path_factory.mktemp("w") / "w.jsonl"
    p.write_text("".join(json.dumps({"prompt_tokens": 300 + 37 * i, "output_tokens": 40 + i})
                         + "\n" for i in range(24)))
    return str(p)


def simulate_notes(wl: str, *args: str) -> list[str]:
    r = runner.invoke(app, ["simulate", "-w", wl, "-m", "llama-3-8b", *args, "--json"])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)["precision_notes"]


def test_simulate_says_what_quantized_weights_need(wl):
    (w4,) = simulate_notes(wl, "-g", "A10", "--weight-bits", "4")
    assert "4-bit AWQ/GPTQ checkpoint" in w4 and "Output quality is not simulated" in w4
    (w8,) = simulate_notes(wl, "-g", "A10", "--weight-bits", "8")
    assert "no checkpoint is needed" in w8 and "Marlin" in w8 and "fp8_per_tensor" in w8
    assert simulate_notes(wl, "-g", "A10") == []
    r = runner.invoke(app, ["simulate", "-w", wl, "-m", "llama-3-8b", "-g", "A10",
                            "--weight-bits", "4"])
    assert r.exit_code == 0 and "note: 4-bit weights" in r.output


def test_simulate_says_where_an_fp8_kv_cache_leaves_flashattention(wl):
    (a10,) = simulate_notes(wl, "-g", "A10", "--kv-bits", "8")
    assert "FlashInfer" in a10 and "estimate" in a10 and "quality is not simulated" in a10
    (h100,) = simulate_notes(wl, "-g", "H100", "--kv-bits", "8")
    assert "FlashInfer" not in h100
    assert fp8_kv_flash_attention(GPUS["B200"]) and not fp8_kv_flash_attention(GPUS["L40S"])
    assert not fp8_kv_flash_attention(GPUS["RTX-PRO-6000"])  # sm_120, not sm_100


def test_precision_notes_reuse_the_export_rules():
    dep = Deployment(ServingConfig(gpu="A10", weight_bits=4), LLAMA, GPUS["A10"], 4096)
    with pytest.raises(TunerError, match="--quantized-model"):
        dep.check_deployable()
    assert "checkpoint" in precision_notes(dep)[0]
    dep = Deployment(ServingConfig(gpu="L40S", weight_bits=8), LLAMA, GPUS["L40S"], 4096,
                     engine_version="0.11.0")
    dep.check_deployable()  # online FP8: nothing to refuse
    assert "--quantization fp8;" in precision_notes(dep)[0]
