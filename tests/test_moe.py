"""Mixture-of-experts compute (predictors.moe, the roofline and table cost models) and the
expert-parallel knob (validation, cost, memory, exports)."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import numpy as np
import pytest

from tests.sim import simulate_default
from tuner.core.catalog import load_gpus, load_models
from tuner.core.config import ServingConfig
from tuner.core.errors import TunerError
from tuner.core.memory import plan_memory
from tuner.core.workload import Workload
from tuner.exports import (
    from_sglang_command,
    from_vllm_yaml,
    sglang_server_args,
    to_sglang_command,
    to_vllm_yaml,
    vllm_engine_args,
)
from tuner.predictors import aic
from tuner.predictors.features import BatchFeatures
from tuner.predictors.moe import MoEParallel, MoEShape, expected_distinct_experts
from tuner.predictors.roofline import RooflineCostModel
from tuner.predictors.sources import resolve_cost_model

GPUS = load_gpus()
MODELS = load_models()
MOE = MODELS["qwen3-30b-a3b-instruct-2507"]
DENSE = MODELS["qwen3-32b"]  # Qwen3-32B: a dense model of about the MoE's total size


def decodes(batch: int, kv_len: int = 1024) -> BatchFeatures:
    n = np.atleast_1d(np.asarray(batch, dtype=np.float64))
    z = np.zeros_like(n)
    return BatchFeatures(z, z, z, n, n * kv_len, n)


def prefill(tokens: int) -> BatchFeatures:
    t = np.array([float(tokens)])
    z = np.zeros(1)
    return BatchFeatures(t, t * t, z, z, z, np.ones(1))


# ---- the uniform-routing estimate -----------------------------------------------------------
def test_distinct_experts_matches_uniform_routing_by_sampling():
    rng = np.random.default_rng(0)
    E, k = 128, 8
    for B in (1, 4, 16, 64, 256):
        touched = [len(np.unique(np.concatenate([rng.choice(E, k, replace=False)
                                                 for _ in range(B)]))) for _ in range(300)]
        est = float(expected_distinct_experts(B, E, k))
        assert est == pytest.approx(np.mean(touched), rel=0.03), B
    assert float(expected_distinct_experts(1, E, k)) == pytest.approx(k)
    assert float(expected_distinct_experts(10_000, E, k)) == pytest.approx(E)
    assert float(expected_distinct_experts(0, E, k)) == 0.0


def test_the_split_follows_vllm_fused_moe():
    ep = MoEParallel(tp=1, dp=2, expert_parallel=True)
    assert (ep.group, ep.moe_tp, ep.moe_ep, ep.token_factor, ep.gathers) == (2, 1, 2, 2, True)
    tp = MoEParallel(tp=2, dp=1, expert_parallel=False)
    assert (tp.group, tp.moe_tp, tp.moe_ep, tp.token_factor, tp.gathers) == (2, 2, 1, 1, False)
    assert MoEShape.of(DENSE) is None
    shape = MoEShape.of(MOE)
    assert (shape.num_experts, shape.experts_per_token, shape.moe_layers) == (128, 8, 48)


# ---- the acceptance comparison: MoE faster per token than a dense model of its size ----------
@pytest.mark.parametrize("kind", ["tables", "roofline"])
def test_moe_decodes_faster_than_a_dense_model_of_its_total_size(kind):
    assert MOE.num_params > 0.9 * DENSE.num_params  # comparable resident size
    assert MOE.active_params_per_token < 0.15 * DENSE.num_params
    g = GPUS["H100"]
    if kind == "tables":
        moe = aic.table_cost_model(MOE, g, tp=2, engine=None)
        dense = aic.table_cost_model(DENSE, g, tp=2, engine=None)
    else:
        moe = RooflineCostModel.from_specs(g, MOE, tp=2)
        dense = RooflineCostModel.from_specs(g, DENSE, tp=2)
    f = decodes([1, 8, 32, 128, 256])
    t_moe, t_dense = moe.iteration_time_s(f), dense.iteration_time_s(f)
    assert (t_moe < 0.9 * t_dense).all(), (t_moe, t_dense)
    # one token reads only its top-k experts' weights: far less than the dense model's
    assert t_moe[0] < 0.5 * t_dense[0]
    assert moe.iteration_time_s(prefill(2048))[0] < 0.6 * dense.iteration_time_s(prefill(2048))[0]


def test_decode_expert_bytes_grow_with_the_distinct_experts_touched():
    """Roofline: a memory-bound decode step reads the weights of the experts its batch touches;
    from batch 1 (8 experts) to 256 (all 128) the routed-expert time grows ~16x, not 256x."""
    rf = RooflineCostModel.from_specs(GPUS["H100"], MOE, tp=1)
    ex = rf.breakdown(decodes([1, 256]))["moe_experts"]
    ratio = ex[1] / ex[0]
    distinct = expected_distinct_experts(np.array([1, 256]), 128, 8)
    assert ratio == pytest.approx(distinct[1] / distinct[0], rel=0.1)


def test_tables_say_measured_where_the_shape_is_and_estimated_where_it_is_not():
    cm = aic.table_cost_model(MOE, GPUS["H100"], tp=2, engine=None)
    assert "MoE experts: measured vLLM 0.24.0 fused-MoE table" in cm.describe()
    assert "moe_tp 2, moe_ep 1" in cm.describe()
    odd = dataclasses.replace(MOE, name="odd", moe_intermediate_size=1000)
    est = aic.table_cost_model(odd, GPUS["H100"], tp=2, engine=None)
    assert "MoE experts estimated" in est.describe() and "roofline ratio" in est.describe()
    # the estimate moves with the work: a wider expert costs more at large batches
    f = prefill(4096)
    assert est.gpu_breakdown(f)["moe_experts"][0] > cm.gpu_breakdown(f)["moe_experts"][0]
    # a GPU without tables takes them transferred from its architecture's measured GPU
    a40 = aic.table_cost_model(MOE, GPUS["A40"], engine=None)
    assert a40.kind == "transferred" and "MoE experts" in a40.describe()


def test_fast_path_prices_moe_steps_as_the_breakdown_does():
    """gpu_time_s folds the MoE curves into one token curve: it agrees with the breakdown."""
    from tuner.predictors.features import sum_parts

    rng = np.random.default_rng(1)
    n = 5000
    pf = np.where(rng.random(n) < 0.3, rng.integers(1, 8192, n), 0).astype(float)
    dec = rng.integers(0, 513, n).astype(float)
    f = BatchFeatures(pf, pf * pf, pf * 100, dec, dec * rng.integers(100, 4000, n), dec + (pf > 0))
    cm = aic.table_cost_model(MOE, GPUS["RTX-PRO-6000"], dp=2, expert_parallel=True, engine=None)
    fast, parts = cm.gpu_time_s(f), sum_parts(cm.gpu_breakdown(f), n)
    ok = parts > 0
    assert np.max(np.abs(fast[ok] / parts[ok] - 1.0)) < 0.01


def test_dense_models_ignore_the_moe_arguments():
    f = decodes([1, 64, 256])
    base = aic.table_cost_model(DENSE, GPUS["H100"], tp=2, engine=None)
    other = aic.table_cost_model(DENSE, GPUS["H100"], tp=2, dp=4, expert_parallel=True,
                                 engine=None)
    np.testing.assert_array_equal(base.iteration_time_s(f), other.iteration_time_s(f))
    assert "moe_experts" not in base.gpu_breakdown(f)


# ---- expert parallelism: cost ---------------------------------------------------------------
def test_expert_parallel_with_data_parallel_gathers_the_replicas_tokens():
    g = GPUS["RTX-PRO-6000"]
    ep = aic.table_cost_model(MOE, g, dp=2, expert_parallel=True, engine=None)
    parts = ep.gpu_breakdown(decodes([64]))
    assert parts["moe_dispatch"][0] > 0 and parts["allreduce"][0] == 0
    assert "moe_ep 2" in ep.describe() and "all-gather + reduce-scatter" in ep.describe()
    # the experts of one GPU see both replicas' tokens: more than one replica's alone
    solo = aic.table_cost_model(MOE, g, dp=1, engine=None)
    assert "moe_dispatch" not in solo.gpu_breakdown(decodes([64]))
    rf = RooflineCostModel.from_specs(g, MOE, dp=2, expert_parallel=True)
    assert rf.breakdown(decodes([64]))["moe_dispatch"][0] > 0
    # the simulator hands the deployment's knobs to the cost model
    cfg = ServingConfig(gpu="RTX-PRO-6000", dp=2, expert_parallel=True)
    assert "moe_ep 2" in resolve_cost_model(MOE, g, cfg).describe()


def test_experts_are_resident_and_split_over_the_data_parallel_gpus():
    g = GPUS["H100"]
    one = plan_memory(MOE, g, ServingConfig(gpu="H100", tp=2))
    assert one.weight_bytes == pytest.approx(MOE.weight_bytes(16) / 2)  # every expert resident
    assert MOE.weight_bytes(16) > 1.9 * MOE.num_params  # total, not active, parameters
    two = plan_memory(MOE, g, ServingConfig(gpu="H100", tp=1, dp=2, expert_parallel=True))
    experts = MOE.num_moe_layers * MOE.num_experts * MOE.expert_params * 2.0
    assert two.weight_bytes == pytest.approx(MOE.weight_bytes(16) - experts / 2)
    dense = plan_memory(DENSE, g, ServingConfig(gpu="H100", dp=2))
    assert dense.weight_bytes == pytest.approx(DENSE.weight_bytes(16))  # replicas hold it all


# ---- expert parallelism: validation ------------------------------------------------------------
def test_expert_parallel_on_a_dense_model_is_a_clear_error():
    w = Workload(prompt_tokens=np.array([100]), output_tokens=np.array([10]))
    cfg = ServingConfig(gpu="H100", expert_parallel=True)
    with pytest.raises(TunerError, match="mixture-of-experts models only"):
        simulate_default(w, DENSE, GPUS["H100"], cfg)
    with pytest.raises(TunerError, match="mixture-of-experts models only"):
        vllm_engine_args(cfg, DENSE, GPUS["H100"], max_model_len=4096)
    with pytest.raises(TunerError, match="mixture-of-experts models only"):
        sglang_server_args(cfg, DENSE, GPUS["H100"], max_model_len=4096)
    with pytest.raises(TunerError, match="true or false"):
        ServingConfig(gpu="H100", expert_parallel="yes")
    assert simulate_default(w, MOE, GPUS["H100"], cfg).makespan_s > 0


def test_cli_rejects_expert_parallel_for_a_dense_model(tmp_path):
    wl = tmp_path / "w.jsonl"
    wl.write_text('{"prompt_tokens": 100, "output_tokens": 10}\n')
    run = subprocess.run([sys.executable, "-m", "tuner.cli", "simulate", "-w", str(wl), "-m",
                          "llama-3-8b", "-g", "H100", "--enable-expert-parallel"],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 2
    assert "mixture-of-experts models only" in run.stderr + run.stdout
    ok = subprocess.run([sys.executable, "-m", "tuner.cli", "simulate", "-w", str(wl), "-m",
                         "Qwen/Qwen3-30B-A3B-Instruct-2507", "-g", "H100", "--tp", "2",
                         "--enable-expert-parallel", "--json"],
                        capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0, ok.stderr
    assert '"expert_parallel": true' in ok.stdout and "moe_ep 2" in ok.stdout


# ---- expert parallelism: exports -------------------------------------------------------------
def test_vllm_export_enables_expert_parallel_and_round_trips():
    cfg = ServingConfig(gpu="RTX-PRO-6000", dp=2, expert_parallel=True, chunk_size=2048,
                        max_running=128)
    args, _ = vllm_engine_args(cfg, MOE, GPUS["RTX-PRO-6000"], max_model_len=8192)
    assert args["enable_expert_parallel"] is True and args["data_parallel_size"] == 2
    text = to_vllm_yaml(cfg, MOE, GPUS["RTX-PRO-6000"], max_model_len=8192)
    assert "enable-expert-parallel: true" in text
    assert from_vllm_yaml(text) == cfg
    # a hand edit of the option wins over the tuner-config line
    off = text.replace("enable-expert-parallel: true", "enable-expert-parallel: false")
    assert from_vllm_yaml(off).expert_parallel is False
    plain, _ = vllm_engine_args(dataclasses.replace(cfg, expert_parallel=False), MOE,
                                GPUS["RTX-PRO-6000"], max_model_len=8192)
    assert "enable_expert_parallel" not in plain


def test_sglang_export_uses_ep_size_and_dp_attention():
    g = GPUS["H100"]
    within = ServingConfig(gpu="H100", tp=4, expert_parallel=True)
    opts = dict(sglang_server_args(within, MOE, g, max_model_len=8192)[0])
    assert opts["ep-size"] == 4 and opts["tp-size"] == 4 and "enable-dp-attention" not in opts
    across = ServingConfig(gpu="H100", tp=1, dp=2, expert_parallel=True)
    opts = dict(sglang_server_args(across, MOE, g, max_model_len=8192)[0])
    assert (opts["tp-size"], opts["attn-dp-size"], opts["ep-size"]) == (2, 2, 2)
    assert "dp-size" not in opts and "enable-dp-attention" not in opts  # SGLang >= 0.5.22
    for cfg in (within, across):
        text = to_sglang_command(cfg, MOE, g, max_model_len=8192)
        assert from_sglang_command(text) == cfg
    bare = ("python -m sglang.launch_server --model-path Qwen/Qwen3-30B-A3B --tp-size 4 "
            "--dp-size 2 --enable-dp-attention --ep-size 4\n")
    got = from_sglang_command(bare, gpu="H100")
    assert (got.tp, got.dp, got.expert_parallel) == (2, 2, True)
    # without expert parallelism the plan is still one engine (the experts tensor-split over
    # tp x dp GPUs, as priced): DP attention, no --ep-size; it parses back to the same plan
    no_ep = ServingConfig(gpu="H100", tp=2, dp=2)
    opts, notes = sglang_server_args(no_ep, MOE, g, max_model_len=8192)
    opts = dict(opts)
    assert (opts["tp-size"], opts["attn-dp-size"], "dp-size" in opts) == (4, 2, False)
    assert "ep-size" not in opts and any("DP attention" in n for n in notes)
    assert from_sglang_command(to_sglang_command(no_ep, MOE, g, max_model_len=8192)) == no_ep
    bare = ("python -m sglang.launch_server --model-path Qwen/Qwen3-30B-A3B --tp-size 4 "
            "--dp-size 2 --enable-dp-attention\n")
    got = from_sglang_command(bare, gpu="H100")
    assert (got.tp, got.dp, got.expert_parallel) == (2, 2, False)


def test_expert_parallel_on_a_dense_model_is_an_infeasible_config_not_a_crash():
    """A search space offering expert_parallel on a dense model: those trials are infeasible,
    as a TP that does not split the heads is, instead of the search dying mid-way."""
    from tuner.core.catalog import get_model, load_gpus
    from tuner.core.config import ServingConfig
    from tuner.core.workload import Workload
    from tuner.sim.simulator import InfeasibleConfig

    w = Workload(prompt_tokens=np.array([100, 200]), output_tokens=np.array([10, 20]),
                 source="t")
    with pytest.raises(InfeasibleConfig, match="mixture-of-experts"):
        simulate_default(w, get_model("llama-3-8b"), load_gpus()["A10"],
                         ServingConfig(gpu="A10", expert_parallel=True))


@pytest.mark.parametrize(("tp", "dp"), [(1, 1), (2, 1), (1, 2), (2, 2)])
@pytest.mark.parametrize("ep", [False, True])
def test_sglang_export_round_trips_expert_parallel(tp, dp, ep):
    from tuner.core.catalog import get_model, load_gpus
    from tuner.core.config import ServingConfig
    from tuner.exports.formats import parse_export, render_export

    cfg = ServingConfig(gpu="H100", tp=tp, dp=dp, expert_parallel=ep)
    text = render_export("sglang", cfg, get_model("qwen3-30b-a3b"), load_gpus()["H100"],
                         max_model_len=4096)
    assert parse_export("sglang", text) == cfg


def test_mla_model_is_priced_from_the_mla_module_tables_else_the_roofline():
    """DeepSeek's attention block comes from AIConfigurator's measured vLLM MLA module tables
    (projections included, so the GEMM curve holds none of them) where the GPU has them; a GPU
    without them (A100: no vLLM MLA table) falls back to the roofline, whose KV per token is the
    memory plan's latent."""
    import numpy as np

    from tuner.core.catalog import get_model, load_gpus
    from tuner.core.config import ServingConfig
    from tuner.core.memory import kv_bytes_per_token_per_layer_rank
    from tuner.predictors.aic import table_cost_model
    from tuner.predictors.features import BatchFeatures
    from tuner.predictors.roofline import RooflineCostModel

    d, gpus = get_model("deepseek-v3"), load_gpus()
    cm = table_cost_model(d, gpus["H200"], tp=8, weight_bits=8, engine=None)
    assert cm is not None and "MLA attention block" in cm.describe()
    assert "FLASH_ATTN_MLA decode" in cm.describe()  # the BF16-KV decode backend on Hopper
    assert "FLASHMLA decode" in table_cost_model(d, gpus["H200"], tp=8, weight_bits=8,
                                                 kv_bits=8, engine=None).describe()
    # decode grows with the KV read; prefill with the chunk; both priced per layer
    f = BatchFeatures(prefill_tokens=np.array([0.0, 0.0, 2048.0]),
                      prefill_sq=np.array([0.0, 0.0, 2048.0 ** 2]),
                      prefill_ctx=np.zeros(3), decodes=np.array([64.0, 64.0, 0.0]),
                      decode_kv=np.array([64 * 1000.0, 64 * 8000.0, 0.0]),
                      seqs_sampled=np.array([64.0, 64.0, 1.0]))
    parts = cm.gpu_breakdown(f)
    assert parts["attention_decode"][1] > parts["attention_decode"][0] > 0
    assert parts["attention_prefill"][2] > 0 == parts["attention_prefill"][0]
    assert np.allclose(cm.gpu_time_s(f), sum(parts.values()), rtol=1e-3)
    assert table_cost_model(d, gpus["A100-80G"], tp=8, weight_bits=8) is None
    rl = resolve_cost_model(d, gpus["A100-80G"], ServingConfig(gpu="A100-80G", tp=8,
                                                               weight_bits=8))
    assert isinstance(rl, RooflineCostModel) and "not measured" in str(rl.provenance)
    assert rl.kv_bytes_per_token_per_layer == kv_bytes_per_token_per_layer_rank(d, 16, 8) == 1152


@pytest.mark.parametrize("dp", [1, 4])
def test_moe_weight_offload_streams_what_the_memory_plan_offloads(dp):
    from tuner.core.catalog import get_model, load_gpus
    from tuner.core.config import ServingConfig
    from tuner.core.memory import plan_memory
    from tuner.sim.offload import OffloadContext

    m, l4 = get_model("qwen3-30b-a3b"), load_gpus()["L4"]
    cfg = ServingConfig(gpu="L4", dp=dp, weight_offload_fraction=0.5)
    ctx = OffloadContext.build(m, l4, cfg)
    offloaded = plan_memory(m, l4, cfg).weight_offloaded_bytes
    assert ctx.weight_stream_bytes_per_layer * m.num_layers == pytest.approx(offloaded)
    # and the exports tell the engines the same bytes per GPU
    import math

    import yaml

    from tuner.core.catalog import GIB
    from tuner.exports.formats import render_export

    text = render_export("vllm", cfg, m, l4, max_model_len=4096)
    assert yaml.safe_load(text)["cpu-offload-gb"] == math.ceil(offloaded / GIB * 10 - 1e-9) / 10
