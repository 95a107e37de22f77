"""DeepSeek-V3.2's FP8 KV cache as vLLM 0.32's sparse-MLA backend on each GPU keeps it (session
54, helper H9): on data-centre Blackwell (compute capability 10.x) vLLM picks
FLASHINFER_MLA_SPARSE for a quantized cache, which refuses the packed fp8_ds_mla layout, so the
latent is plain FP8 (576 bytes); on Hopper (FLASHMLA_SPARSE) and the RTX PRO 6000
(FLASHINFER_MLA_SPARSE_SM120) it is fp8_ds_mla (656). The indexer's key (128 FP8 + an FP32
scale = 132 bytes) is the same everywhere. Memory plan, roofline, offload model and the
physical limit all size it the same way."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from tuner.cli.main import app
from tuner.core.catalog import get_model, load_gpus
from tuner.core.config import ServingConfig
from tuner.core.memory import (
    kv_bytes_per_token_per_layer_rank,
    plan_memory,
    sparse_mla_fp8_backend,
)
from tuner.core.workload import Workload
from tuner.predictors.roofline import RooflineCostModel
from tuner.predictors.sources import cost_model_for
from tuner.sim import simulator
from tuner.sim.offload import OffloadContext
from tuner.sim.simulator import InfeasibleConfig, simulate

GPUS = load_gpus()
runner = CliRunner()

INDEX = 128 + 4  # the indexer's key: 128 FP8 values + one FP32 scale
PLAIN_FP8 = 512 + 64  # kv_lora_rank + qk_rope_head_dim at 1 byte
DS_MLA = 512 + 4 * 4 + 64 * 2  # fp8_ds_mla: FP8 latent, 4 FP32 scales, 16-bit rope
BLACKWELL_DC = ("B200", "B300", "GB200")  # compute capability 10.0 / 10.3 / 10.0
PACKED = ("H100", "H200", "RTX-PRO-6000")  # 9.0 (FLASHMLA_SPARSE), 12.0 (..._SM120)


@pytest.mark.parametrize("gpu", BLACKWELL_DC + PACKED)
def test_v32_fp8_bytes_per_token_follow_the_gpus_backend(gpu):
    v32, v3, g = get_model("deepseek-v3.2"), get_model("deepseek-v3"), GPUS[gpu]
    want = (PLAIN_FP8 if gpu in BLACKWELL_DC else DS_MLA) + INDEX
    assert want == (708 if gpu in BLACKWELL_DC else 788)
    for tp in (1, 8):
        assert kv_bytes_per_token_per_layer_rank(v32, 8, tp, gpu=g) == want
        # a 16-bit cache is 576 bf16 values on every backend; dense MLA (V3) is unaffected
        assert kv_bytes_per_token_per_layer_rank(v32, 16, tp, gpu=g) == 1152 + INDEX
        assert kv_bytes_per_token_per_layer_rank(v3, 8, tp, gpu=g) == PLAIN_FP8
    backend, packed = sparse_mla_fp8_backend(g)
    assert backend == {"B200": "FLASHINFER_MLA_SPARSE", "B300": "FLASHINFER_MLA_SPARSE",
                       "GB200": "FLASHINFER_MLA_SPARSE", "H100": "FLASHMLA_SPARSE",
                       "H200": "FLASHMLA_SPARSE",
                       "RTX-PRO-6000": "FLASHINFER_MLA_SPARSE_SM120"}[gpu]
    assert packed == (gpu not in BLACKWELL_DC)
    # no GPU, one of no stated compute capability, or SGLang: the packed layout as before
    assert kv_bytes_per_token_per_layer_rank(v32, 8, 8) == DS_MLA + INDEX
    assert kv_bytes_per_token_per_layer_rank(v32, 8, 8, gpu=g, engine="sglang") == DS_MLA + INDEX
    assert kv_bytes_per_token_per_layer_rank(v32, 8, 8, gpu=GPUS["MI300X"]) == DS_MLA + INDEX


def test_b200_plan_holds_the_plain_fp8_cache_about_11_percent_more_tokens():
    v32, g = get_model("deepseek-v3.2"), GPUS["B200"]
    cfg = ServingConfig(gpu="B200", tp=8, weight_bits=8, kv_bits=8, block_size=64)
    plan = plan_memory(v32, g, cfg)
    assert plan.kv_bytes_per_token == 61 * 708
    assert plan.kv_capacity_tokens == int(plan.kv_bytes // (64 * 61 * 708)) * 64
    # the same GPU read as a Hopper part (FLASHMLA_SPARSE) packs its cache: fewer tokens
    as_hopper = plan_memory(v32, dataclasses.replace(g, compute_capability=9.0), cfg)
    assert as_hopper.kv_bytes_per_token == 61 * 788
    assert plan.kv_capacity_tokens / as_hopper.kv_capacity_tokens == pytest.approx(788 / 708,
                                                                                   rel=1e-3)


@pytest.mark.parametrize("gpu", ["B200", "H200"])
def test_roofline_and_offload_read_the_plans_bytes(gpu):
    v32, g = get_model("deepseek-v3.2"), GPUS[gpu]
    cfg = ServingConfig(gpu=gpu, tp=8, weight_bits=8, kv_bits=8, block_size=64)
    want = plan_memory(v32, g, cfg).kv_bytes_per_token / 61
    rf = RooflineCostModel.from_specs(g, v32, tp=8, weight_bits=8, kv_bits=8)
    assert rf.kv_bytes_per_token == want == cost_model_for(v32, None, "roofline")(
        g, cfg).kv_bytes_per_token
    assert OffloadContext.build(v32, g, cfg).kv_bytes_per_token_layer == want


def test_the_physical_limit_reads_the_plans_latent(monkeypatch):
    """The bound's decode reads: every cached indexer key, at most 2,048 latents, at the bytes
    the GPU's backend keeps (hand-computed for one request)."""
    v32 = get_model("deepseek-v3.2")
    p, d = np.array([3000.0]), np.array([11.0])  # 10 decode steps, contexts 3001 .. 3010
    every = sum(3000 + t for t in range(1, 11))
    top = 10 * 2048
    for packed, latent in ((True, DS_MLA), (False, PLAIN_FP8)):
        got = simulator._decode_kv_read_bytes(v32, p, d, 8, packed)
        assert got == pytest.approx(61 * (every * INDEX + top * latent), rel=1e-12)
    seen = []
    real = simulator._decode_kv_read_bytes
    monkeypatch.setattr(simulator, "_decode_kv_read_bytes",
                        lambda *a: seen.append(a[-1]) or real(*a))
    w = Workload(prompt_tokens=p.astype(int), output_tokens=d.astype(int))
    for gpu in ("B200", "H200", "RTX-PRO-6000"):
        simulator.lower_bound_s(w, v32, GPUS[gpu], ServingConfig(gpu=gpu, tp=8, kv_bits=8))
    simulator.lower_bound_s(w, v32, GPUS["B200"], ServingConfig(gpu="B200", tp=8, kv_bits=8,
                                                                engine="sglang", block_size=1))
    assert seen == [False, True, True, True]


@settings(derandomize=True, max_examples=12, deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(gpu=st.sampled_from(["B200", "H200", "RTX-PRO-6000"]),
       mode=st.sampled_from(["auto", "roofline"]), long=st.booleans(),
       n=st.integers(1, 40), seed=st.integers(0, 2**16))
def test_v32_fp8_prediction_never_beats_the_physical_limit(gpu, mode, long, n, seed):
    m, g = get_model("deepseek-v3.2"), GPUS[gpu]
    rng = np.random.default_rng(seed)
    lo, hi = (8000, 30000) if long else (1, 3000)
    w = Workload(prompt_tokens=rng.integers(lo, hi, n), output_tokens=rng.integers(1, 900, n))
    cfg = ServingConfig(gpu=gpu, tp=8, weight_bits=8, kv_bits=8, block_size=64)
    try:
        res = simulate(w, m, g, cfg, cost_model_for(m, None, mode)(g, cfg), startup_s=0)
    except InfeasibleConfig:
        return
    assert res.schedule_lower_bound_s <= res.schedule_s * (1 + 1e-9), (
        res.schedule_lower_bound_s, res.schedule_s, res.provenance)


@pytest.mark.parametrize("gpu, says", [
    ("B200", ("FLASHINFER_MLA_SPARSE backend", "plain FP8", "576 bytes", "vLLM 0.32")),
    ("H200", ("FLASHMLA_SPARSE backend", "fp8_ds_mla", "656 bytes", "vLLM 0.32"))])
def test_simulate_says_which_layout_and_backend(tmp_path, gpu, says):
    wl = tmp_path / "w.jsonl"
    wl.write_text("".join(json.dumps({"prompt_tokens": 500, "output_tokens": 50}) + "\n"
                          for _ in range(8)))
    r = runner.invoke(app, ["simulate", "-w", str(wl), "-m", "deepseek-v3.2", "-g", gpu,
                            "--tp", "8", "--kv-bits", "8", "--startup-s", "0", "--json"])
    assert r.exit_code == 0, r.output
    got = json.loads(r.output)
    note = next(n for n in got["precision_notes"] if n.startswith("FP8 KV cache"))
    assert all(s in note for s in says), note
