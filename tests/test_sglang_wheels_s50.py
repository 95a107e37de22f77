"""SGLang's defaults as the newest released wheel (sglang 0.5.23) computes them.

Each value below was read from the wheel: sglang/srt/arg_groups/memory_hook.py
(handle_gpu_memory_settings, reserve_for_graph_mb), arg_groups/cuda_graph_hook.py
(generate_prefill_cuda_graph_batch_sizes), model_executor/cuda_graph_config.py
(default_prefill_backend: breakable on CUDA), arg_groups/overrides.py
(_pipeline_parallel_overlap_disable).
"""

from __future__ import annotations

import pytest

import tuner.core.sglang as sg
from tuner.core.catalog import GIB, load_gpus
from tuner.predictors.engine_overhead import SGLANG_OVERLAP, sglang_profile_for


@pytest.mark.parametrize("gib, chunk, bs_tp1, bs_tp4", [
    (16, 2048, 8, 8),        # T4: below 20 GiB
    (24, 4096, 48, 160),     # A10 / 4090 / 5090: 20-35 GiB (was 2048 and 24 / 80)
    (40, 4096, 32, 160),     # A100-40G, L40
    (80, 8192, 256, 512),    # H100
    (141, 8192, 256, 512),   # H200
    (192, 16384, 512, 512),  # B200
])
def test_gpu_memory_tiers(gib, chunk, bs_tp1, bs_tp4):
    assert sg.chunked_prefill_default(gib * GIB) == chunk
    assert sg.cuda_graph_max_bs_default(gib * GIB, 1) == bs_tp1
    assert sg.cuda_graph_max_bs_default(gib * GIB, 4) == bs_tp4


def test_decode_graph_capped_by_max_running():
    # memory_hook.py: a default max_bs above a given --max-running-requests is lowered to it
    assert sg.cuda_graph_max_bs_default(80 * GIB, 1, max_running=64) == 64
    assert sg.cuda_graph_max_bs_default(80 * GIB, 1, max_running=1024) == 256


def test_prefill_graph_sizes():
    sizes = sg.prefill_graph_sizes(8192)
    assert len(sizes) == 58 and sizes[:3] == [4, 8, 12] and sizes[-1] == 8192
    assert len(sg.prefill_graph_sizes(4096)) == 50
    assert len(sg.prefill_graph_sizes(2048)) == 42


def test_mem_fraction_counts_the_prefill_graph_reserve():
    # H100 TP1: 512 + 8192 * 1.5 + 128 + 256 * 2 + 58 * 8 = 13,904 MiB of 81,920
    assert sg.mem_fraction_static_default(80 * GIB, 8192, 1) == round(
        (81920 - 13904) / 81920, 3) == 0.83
    # MLA models: 1.5 GiB for the prefill graph instead
    assert sg.mem_fraction_static_default(80 * GIB, 8192, 1, mla=True) == round(
        (81920 - (512 + 8192 * 1.5 + 128 + 512 + 1536)) / 81920, 3)
    # A10 (24 GiB): 4,096-token chunk, max_bs 48, 50 prefill graphs
    assert sg.mem_fraction_static_default(24 * GIB, 4096, 1) == round(
        (24576 - (512 + 6144 + 128 + 96 + 400)) / 24576, 3)


def test_sglang_defaults_on_a10_and_h100():
    gpus = load_gpus()
    a10 = sg.sglang_defaults(gpus["A10"])
    assert (a10.chunked_prefill_size, a10.cuda_graph_max_bs, a10.mem_fraction_static) == (
        4096, 48, 0.684)
    h100 = sg.sglang_defaults(gpus["H100"])
    assert (h100.chunked_prefill_size, h100.cuda_graph_max_bs) == (8192, 256)


def test_pipeline_parallel_runs_without_the_overlap_scheduler():
    assert sglang_profile_for(None) is SGLANG_OVERLAP
    assert sglang_profile_for("0.5.23", pp=1) is SGLANG_OVERLAP
    p = sglang_profile_for(None, pp=2)
    assert not p.overlapped and "_pipeline_parallel_overlap_disable" in p.source
    assert not sglang_profile_for("0.3.0", pp=2).overlapped
