"""QA s54 (h3): quantization bits, KV-offloaded layers and CPU threads checked by hand.

1. The offload table's "KV capacity gain" compares capacities in the same tokens: for a
   sliding-window model the no-offload baseline is planned at the workload's mean request, as
   the plan itself is (it was planned at "every token counted": x1.91 printed for one of
   gpt-oss-20b's 24 layers offloaded on an L4, x1.04 real).
2. A CPU thread count given alone is kept (Alg. 3 chooses only the other): --cpu-threads-intra
   4 alone was replaced by Alg. 3's 8 and the output said "8 / 8 (alg3)".
3. The KV an offloaded layer moves is the bytes the memory plan holds per token at kv_bits
   (DeepSeek-V3.2's FP8 MLA cache with its scales: 788 bytes, was priced at 642).
4. By-hand memory on several models / GPUs: weights at the quantized bytes, KV per token at
   the cache dtype, offloaded layers' KV in host RAM, the table adding up, the catalog's host
   link; more offloaded layers never buy a faster plan with less KV.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from tests.sim import simulate_default
from tuner.core.catalog import GIB, get_model, load_gpus
from tuner.core.config import ServingConfig
from tuner.core.memory import (
    HOST_RESERVE_BYTES,
    plan_memory,
)
from tuner.core.workload import Workload
from tuner.predictors import host
from tuner.sim import offload as off

GPUS = load_gpus()


def wl(prompt: int, output: int, n: int = 24) -> Workload:
    return Workload(np.full(n, prompt, dtype=np.int64), np.full(n, output, dtype=np.int64))


# ---- 1. the KV capacity gain of a sliding-window model -------------------------------------------
@pytest.mark.parametrize("name", ["gemma-3-4b", "gpt-oss-20b"])
def test_kv_capacity_gain_compares_the_same_tokens(name):
    """Requests of 3,000 tokens, far past the windows (1,024 and 128): one offloaded layer of
    L frees 1/L of the per-token KV, so the gain is ~L / (L - 1), and the baseline is the plan
    the same job gets without offload."""
    m, g = get_model(name), GPUS["L4"]
    w = wl(2900, 100)
    cfg = ServingConfig(gpu="L4", kv_bits=8, weight_bits=m.checkpoint_bits)  # kv 8: a breakdown
    base = simulate_default(w, m, g, cfg)
    one = simulate_default(w, m, g, dataclasses.replace(cfg, kv_offload_layers=1))
    o = one.offload
    assert o["kv_capacity_tokens_without_offload"] == base.memory.kv_capacity_tokens
    L = m.num_kv_layers
    assert o["kv_capacity_gain"] == pytest.approx(L / (L - 1), rel=2e-3)


# ---- 2. a thread count given alone is kept --------------------------------------------------------
def test_a_thread_count_given_alone_is_kept():
    cpu = host.CPUModel.from_gpu(GPUS["A10"])  # 30 vCPUs: Alg. 3 alone picks intra 8, inter 8
    assert (host.choose_threads(cpu).intra, host.choose_threads(cpu).inter) == (8, 8)
    intra = host.threads_for(ServingConfig(gpu="A10", cpu_threads_intra=4), cpu)
    assert (intra.intra, intra.inter, intra.inter_compute) == (4, 8, 3)
    assert intra.chosen_by == "config intra, alg3 inter"
    inter = host.threads_for(ServingConfig(gpu="A10", cpu_threads_inter=1), cpu)
    # one compute thread group: Alg. 3 may give it up to 30 - 5 loader threads
    assert (inter.inter, inter.inter_compute, inter.intra) == (1, 1, 25)
    assert inter.chosen_by == "config inter, alg3 intra"
    both = host.threads_for(ServingConfig(gpu="A10", cpu_threads_intra=4,
                                          cpu_threads_inter=2), cpu)
    assert (both.intra, both.inter, both.chosen_by) == (4, 2, "config")
    assert host.threads_for(ServingConfig(gpu="A10"), cpu) == host.choose_threads(cpu)


def test_simulate_prices_cpu_attention_with_the_given_intra_threads():
    m, g = get_model("llama-3-8b"), GPUS["A10"]
    w = wl(1500, 200)
    cfg = ServingConfig(gpu="A10", kv_offload_layers=8, attention_on_cpu=True)
    runs = {i: simulate_default(w, m, g, dataclasses.replace(cfg, cpu_threads_intra=i))
            for i in (0, 4)}
    th = runs[4].offload["cpu_threads"]
    assert (th["intra"], th["chosen_by"]) == (4, "config intra, alg3 inter")
    assert runs[0].offload["cpu_threads"]["intra"] == 8
    # 4 x 3 threads stream host KV slower than Alg. 3's 8 x 3 (the thread curve)
    assert runs[4].offload["cpu_attention_extra_s"] > runs[0].offload["cpu_attention_extra_s"]


# ---- 3. offloaded layers move the planned bytes ---------------------------------------------------
@pytest.mark.parametrize("name, gpu, tp, bits", [
    ("deepseek-v3.2", "H200", 8, 8), ("deepseek-v3.2", "H200", 8, 16),
    ("llama-3-70b", "A40", 4, 8), ("qwen3-30b-a3b", "L4", 4, 16)])
def test_offloaded_kv_moves_the_bytes_the_memory_plan_holds(name, gpu, tp, bits):
    m, g = get_model(name), GPUS[gpu]
    cfg = ServingConfig(gpu=gpu, tp=tp, kv_bits=bits, kv_offload_layers=4,
                        block_size=64 if m.is_mla else 16)
    plan = plan_memory(m, g, cfg)
    ctx = off.OffloadContext.build(m, g, cfg)
    assert ctx.kv_bytes_per_token_layer == pytest.approx(plan.host_kv_bytes_per_token / 4)
    if name == "deepseek-v3.2" and bits == 8:
        assert ctx.kv_bytes_per_token_layer == 788.0  # 656 B FP8 MLA + the indexer's 132


# ---- 4. memory by hand, the catalog's host link, monotonic offload ----------------------------------
CASES = [  # model, GPU, tp, weight bits, kv bits, offloaded layers, weight bytes per rank
    ("llama-3-8b", "A10", 1, 16, 16, 8, 8_030_261_248 * 2),
    # 8-bit: the 32 layers' linear weights at 1 byte, embedding + LM head + norms at 2
    ("llama-3-8b", "L4", 1, 8, 8, 4, 6_979_321_856 + 2 * (1_050_673_152 + 266_240)),
    ("llama-3-70b", "A40", 4, 16, 8, 16, 70_553_706_496 * 2 / 4),
    ("llama-3-70b", "H100", 4, 8, 8, 8, None),
]


@pytest.mark.parametrize("name, gpu, tp, wbits, kbits, k, weights", CASES)
def test_memory_plan_by_hand(name, gpu, tp, wbits, kbits, k, weights):
    m, g = get_model(name), GPUS[gpu]
    cfg = ServingConfig(gpu=gpu, tp=tp, weight_bits=wbits, kv_bits=kbits, kv_offload_layers=k)
    p = plan_memory(m, g, cfg, mean_request_tokens=2000.0)
    if weights is not None:  # Llama-3: embedding and LM head (128,256 x hidden) stay 16-bit
        assert p.weight_bytes == pytest.approx(weights, rel=1e-9)
    # K and V of the rank's KV heads, head dim 128, at the cache dtype's bytes
    per_layer = max(1, m.num_kv_heads // tp) * 2 * 128 * kbits / 8
    assert p.kv_bytes_per_token == per_layer * (m.num_layers - k)
    assert p.host_kv_bytes_per_token == per_layer * k
    assert p.kv_capacity_blocks == int(p.kv_bytes // (p.kv_bytes_per_token * 16))
    assert p.host_kv_bytes == p.kv_capacity_tokens * per_layer * k
    # the table adds up to the usable memory; nothing exceeds GPU or host memory
    parts = p.weight_bytes + p.activation_bytes + p.runtime_overhead_bytes + p.kv_bytes
    assert parts == pytest.approx(p.usable_bytes, rel=1e-12)
    assert p.kv_gpu_bytes_used <= p.kv_bytes
    assert p.host_limit_bytes == g.host_ram_gib * GIB - HOST_RESERVE_BYTES
    assert p.fits and p.host_used_bytes <= p.host_limit_bytes
    # the transfer priced is the catalog's host link: one layer's KV of 1,000 tokens
    ctx = off.OffloadContext.build(m, g, cfg)
    nbytes = 1000 * per_layer
    t = float(ctx.transfer.h2d_s(nbytes))
    bw = g.host_link_gbps * 1e9
    assert t == pytest.approx(10e-6 + (nbytes + 128 * 1024) / bw)  # latency + (b + h) / B


def test_more_offloaded_layers_never_buy_a_faster_plan_with_less_kv():
    m, g = get_model("llama-3-8b"), GPUS["L4"]
    w = wl(1800, 300, n=48)
    runs = [simulate_default(w, m, g, ServingConfig(gpu="L4", kv_offload_layers=k))
            for k in (0, 1, 2, 4, 8, 16)]
    for a, b in zip(runs, runs[1:], strict=False):
        assert b.memory.kv_capacity_tokens >= a.memory.kv_capacity_tokens
        assert not (b.makespan_s < a.makespan_s
                    and b.memory.kv_capacity_tokens < a.memory.kv_capacity_tokens)
    # the KV moved grows with the layers: k x one layer's transfer
    xfer = [r.offload["kv_transfer_s"] for r in runs[1:]]
    assert all(x2 > x1 for x1, x2 in zip(xfer, xfer[1:], strict=False))



# ---- 5. tuner simulate says which knob vLLM lacks ---------------------------------------------------
def _simulate_text(tmp_path, *args: str):
    from typer.testing import CliRunner

    from tuner.cli.main import app

    p = tmp_path / "w.jsonl"
    p.write_text("".join(f'{{"prompt_tokens": {300 + 7 * i}, "output_tokens": 40}}\n'
                         for i in range(16)))
    r = CliRunner().invoke(app, ["simulate", "-w", str(p), "-m", "llama-3-8b", "-g", "A10",
                                 *args])
    assert r.exit_code == 0, r.output
    return r


@pytest.mark.parametrize("args, says", [
    (["--kv-offload-layers", "4"], "vLLM has no layer-wise KV offload (kv_offload_layers 4)"),
    (["--kv-offload-layers", "4", "--attention-on-cpu"], "layer-wise KV offload"),
    (["--kv-bits", "4"], "(kv_bits 4)"),
    ([], None),
])
def test_simulate_warns_of_a_knob_vllm_lacks(tmp_path, args, says):
    text = " ".join(_simulate_text(tmp_path, *args).output.split())  # whatever the wrapping
    if says is None:
        assert "not a plan vLLM runs" not in text
    else:
        assert text.count("not a plan vLLM runs") == 1 and says in text


@pytest.mark.parametrize("args, unused", [
    (["--cpu-threads-intra", "4"], True),
    (["--cpu-threads-inter", "4", "--kv-offload-layers", "2"], True),
    (["--cpu-threads-inter", "4", "--kv-offload-layers", "2", "--attention-on-cpu"], False),
])
def test_simulate_says_when_cpu_threads_changed_nothing(tmp_path, args, unused):
    text = " ".join(_simulate_text(tmp_path, *args).output.split())
    assert ("--cpu-threads-inter changed nothing" in text) is unused
    if not unused:
        assert "4 (config inter, alg3 intra" in text


# ---- 6. the does-not-fit line with offloaded weights ------------------------------------------------
def test_does_not_fit_says_the_weights_left_on_the_gpu_and_the_staging():
    """llama-3-70b at 8 bits is 67.7 GiB; a quarter offloaded leaves 50.7 GiB on an A40 plus
    0.4 GiB of streaming buffers: the line said "8-bit weights ... weights 50.7 GiB" (SGLang's
    line for the same model: 67.7), with the buffers left out of the sum."""
    m, g = get_model("llama-3-70b"), GPUS["A40"]
    # with a KV layer offloaded too: LM-Offload's two-layer stream (a weight-only vLLM plan
    # holds no such buffers: tests/test_vllm_weight_offload_s54.py)
    plan = plan_memory(m, g, ServingConfig(gpu="A40", weight_bits=8, kv_offload_layers=1,
                                           weight_offload_fraction=0.25))
    assert not plan.fits
    assert "weights 50.7 GiB on the GPU (16.9 GiB offloaded)" in plan.reason
    assert "+ offload staging 0.4 GiB >" in plan.reason
    whole = plan_memory(m, g, ServingConfig(gpu="A40", weight_bits=8))
    assert "weights 67.7 GiB + activations" in whole.reason and "staging" not in whole.reason


def test_simulate_memory_table_adds_up_with_weight_offload(tmp_path):
    """A10, llama-3-8b, half the weights offloaded: usable 19.9 GiB = weights 7.5 + activations
    0.8 + runtime 0.7 + the two layers' streaming buffers 0.5 + KV 10.5 (the buffers' row was
    missing: the rows summed to 19.5)."""
    text = " ".join(_simulate_text(tmp_path, "--weight-offload-fraction", "0.5",
                                   "--kv-offload-layers", "1").output.split())
    assert "streamed-weight buffers (2 layers) │ 0.5 GiB" in text
    assert "streamed-weight buffers" not in " ".join(_simulate_text(tmp_path).output.split())
