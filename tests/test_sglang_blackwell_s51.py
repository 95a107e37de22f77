"""SGLang's KV page size on Blackwell and its DP-attention memory reserve (stop 51), checked
against the sglang 0.5.23 wheel:

* model_override_base.get_default_attn_backend: trtllm_mha for an MHA model on compute
  capability 10.x (is_sm100: B200, GB200, B300), fa3 on Hopper, flashinfer elsewhere (the 12.0
  RTX PRO 6000 too); model_overrides/deepseek_v2.py: trtllm_mla for DeepSeek-V3 on 10.x, DSA
  (V3.2) pages 64 on every CUDA GPU; overrides.py _mla_backend_page_constraints turns the
  default page 1 into 64 for trtllm_mha / trtllm_mla, _fa4_page_constraint into 128.
* pool_configurator.py calculate_pool_sizes: max_total_num_tokens // page_size * page_size.
* memory_hook.py reserve_for_graph_mb: DP attention adds decode max_bs x attn_dp_size x 3 MiB
  (x 1.5 more above a max_bs of 300), before handle_data_parallelism divides the chunk.
"""

import dataclasses

import numpy as np
import pytest

from tuner.core import sglang as sg
from tuner.core.catalog import get_gpu, get_model, load_gpus
from tuner.core.config import ServingConfig
from tuner.core.errors import TunerError
from tuner.exports.sglang import to_sglang_command
from tuner.sim.sglang import admission_floor, run_schedule

GPUS = load_gpus()
MIB = 1024 * 1024


def gpu(name):
    return get_gpu(name, GPUS)


# ---- the catalog's compute capabilities (NVIDIA's CUDA GPUs list) ---------------------------
def test_catalog_compute_capabilities():
    want = {"A100-80G": 8.0, "A100-40G": 8.0, "A10": 8.6, "A40": 8.6, "L4": 8.9, "L40S": 8.9,
            "RTX4090": 8.9, "H100": 9.0, "H200": 9.0, "H100-PCIe": 9.0, "GH200-96G": 9.0,
            "B200": 10.0, "GB200": 10.0, "B300": 10.3, "RTX-PRO-6000": 12.0}
    for name, cc in want.items():
        assert gpu(name).compute_capability == cc, name
    # every NVIDIA GPU states one; the AMD GPUs none (ROCm names gfx targets)
    for g in GPUS.values():
        assert (g.compute_capability is not None) == (g.architecture is not None), g.name
    assert gpu("MI300X").compute_capability is None


def test_compute_capability_is_checked(tmp_path):
    f = tmp_path / "g.yaml"
    f.write_text("B200:\n  compute_capability: sm100\n")
    with pytest.raises(TunerError, match="compute_capability must be"):
        load_gpus(f)
    f.write_text("B200:\n  compute_capability: 12.0\n")  # a user's override is taken
    assert load_gpus(f)["B200"].compute_capability == 12.0


# ---- the page size SGLang's default attention backend runs at ----------------------------------
def test_page_size_by_compute_capability_and_model():
    llama, ds3, ds32 = get_model("llama-3-8b"), get_model("deepseek-v3"), get_model("deepseek-v3.2")
    for name, page in {"B200": 64, "GB200": 64, "B300": 64, "H100": 1, "H200": 1,
                       "A100-80G": 1, "RTX4090": 1, "RTX-PRO-6000": 1, "MI300X": 1}.items():
        assert sg.sglang_page_size(llama, gpu(name)) == page, name
    assert sg.sglang_page_size(ds3, gpu("B200")) == 64  # trtllm_mla
    assert sg.sglang_page_size(ds3, gpu("H200")) == 1  # fa3
    assert sg.sglang_page_size(ds32, gpu("H100")) == 64  # DSA, any CUDA GPU
    # DeepSeek-V2's own architecture: flashinfer MLA, page 1; K and V widths differing: fa4
    assert sg.sglang_page_size(dataclasses.replace(ds3, name="deepseek-v2-lite"),
                               gpu("B200")) == 1
    assert sg.sglang_page_size(dataclasses.replace(llama, v_head_dim=96), gpu("B200")) == 128
    # a GPU that states no compute capability: SGLang's platform default
    assert sg.sglang_page_size(llama, dataclasses.replace(gpu("B200"),
                                                          compute_capability=None)) == 1


def _plans(model, g, monkeypatch, given=None):
    """(plan at the page SGLang picks, plan at page 1) of SGLang's default config."""
    config, d = sg.default_config(model, g, dict(given or {}))
    new = sg.plan_memory_sglang(model, g, config)
    with monkeypatch.context() as mp:
        mp.setattr(sg, "sglang_page_size", lambda m, gp: 1)
        old = sg.plan_memory_sglang(model, g, config)
    return config, d, new, old


def test_kv_pool_rounds_down_to_whole_pages_on_blackwell(monkeypatch):
    m = get_model("llama-3-8b")
    for name in ("B200", "B300", "GB200"):
        config, d, new, old = _plans(m, gpu(name), monkeypatch)
        assert d.page_size == 64
        assert new.kv_capacity_tokens % 64 == 0
        assert new.kv_capacity_tokens == old.kv_capacity_tokens // 64 * 64
        assert 0 < old.kv_capacity_tokens - new.kv_capacity_tokens < 64  # 1,119,711 on B200
        assert new.kv_capacity_blocks == new.kv_capacity_tokens  # the simulator's unit
        # max running requests are sized from the rounded pool
        assert config.max_running == sg.max_running_default(new.kv_capacity_tokens,
                                                            m.max_position)
    for name in ("A100-80G", "H100", "RTX-PRO-6000"):  # page 1: as before
        config, d, new, old = _plans(m, gpu(name), monkeypatch)
        assert d.page_size == 1 and new.kv_capacity_tokens == old.kv_capacity_tokens


# ---- the simulator's admission and radix cache at a page of 64 ---------------------------------
def test_admission_reserves_a_page_and_prefixes_match_whole_pages():
    p, o = np.array([1000, 1000]), np.array([10, 10])
    f1 = admission_floor(p, o, None, None, True)
    f64 = admission_floor(p, o, None, None, True, 64)
    np.testing.assert_array_equal(f64 - f1, 63)  # one page reserved, not one token
    # a 100-token shared prefix is cached as one 64-token page (one request per prefill)
    kw = dict(capacity_tokens=50_000, chunked_prefill_size=1000, max_running=64,
              prefix_ids=np.zeros(6, dtype=np.int64), prefix_tokens=np.full(6, 100))
    p6, o6 = np.full(6, 1000), np.full(6, 20)
    s1 = run_schedule(p6, o6, **kw)
    s64 = run_schedule(p6, o6, page_size=64, **kw)
    assert s1.cached_tokens > 0 and s1.cached_tokens % 100 == 0
    assert s64.cached_tokens > 0 and s64.cached_tokens % 64 == 0


def test_c_loop_matches_the_reference_at_page_64():
    rng = np.random.default_rng(5)
    n = 60
    p, o = rng.integers(400, 3000, n), rng.integers(1, 400, n)
    ids = rng.integers(-1, 4, n)
    kw = dict(capacity_tokens=20_000, chunked_prefill_size=2048, max_running=32,
              prefix_ids=ids, prefix_tokens=np.where(ids >= 0, 300, 0), page_size=64)
    c, ref = run_schedule(p, o, **kw), run_schedule(p, o, reference=True, **kw)
    np.testing.assert_array_equal(c.steps, ref.steps)
    np.testing.assert_array_equal(c.finish_step, ref.finish_step)
    assert c.cached_tokens == ref.cached_tokens and c.cached_tokens % 64 == 0
    # at page 1 the 300-token prefixes hit whole, at 64 in 256-token pages
    one = run_schedule(p, o, **(kw | {"page_size": 1}))
    assert one.cached_tokens >= c.cached_tokens


# ---- the export: no --page-size (it is SGLang's own pick) --------------------------------------
def test_export_leaves_the_page_to_sglang():
    m, g = get_model("llama-3-8b"), gpu("B200")
    config, _ = sg.default_config(m, g, {})
    cmd = to_sglang_command(config, m, g, max_model_len=8192)
    assert "--page-size" not in cmd and "--mem-fraction-static" in cmd
    # a vLLM plan written as an SGLang command keeps its block size
    vcfg = ServingConfig(gpu="B200", block_size=16)
    assert "--page-size 16" in to_sglang_command(vcfg, m, g, max_model_len=8192)


# ---- DP attention's reserve (mixture-of-experts plans at dp > 1) --------------------------------
def _reserve_mib(mem_mib, chunk, tp, bs, sizes, attn_dp=1):
    r = 512 + max(chunk, 2048) * 1.5 + tp / 8 * 1024 + bs * 2 + sizes * 8
    if attn_dp > 1:
        r += bs * attn_dp * 3 + (bs * attn_dp * 1.5 if bs > 300 else 0)
    return round((mem_mib - max(r, 10 * 1024)) / mem_mib, 3)


def test_dp_attention_reserve_as_the_wheel_computes_it():
    # H100 (nvidia-smi 81,560 MiB), one DP-attention server of tp 1 x dp 2: --tp-size 2,
    # SGLang's chunk 8,192 for the server (4,096 per rank), decode max_bs 256 (tp < 4)
    h100 = gpu("H100")
    smi = sg.nvidia_smi_total_bytes(h100)
    sizes = len(sg.prefill_graph_sizes(8192))  # 58
    want = _reserve_mib(smi / MIB, 8192, 2, 256, sizes, attn_dp=2)
    assert sg.mem_fraction_static_default(smi, 8192, 2, attn_dp=2) == want == 0.809
    m = get_model("qwen3-30b-a3b")
    config, d = sg.default_config(m, h100, {"dp": 2})
    assert (d.mem_fraction_static, d.chunked_prefill_size, config.chunk_size) == (want, 4096,
                                                                                   4096)
    assert config.gpu_memory_utilization == want
    # the same model at dp 1 (no DP attention): unchanged, 0.83
    assert sg.default_config(m, h100, {})[1].mem_fraction_static == 0.83
    # B200: decode max_bs 512 > 300 adds x 1.5 more; a given chunk is per rank (the export
    # writes the server 2 x 8,192)
    b200 = gpu("B200")
    smi = sg.nvidia_smi_total_bytes(b200)
    want = _reserve_mib(smi / MIB, 16384, 2, 512, len(sg.prefill_graph_sizes(16384)), 2)
    config, d = sg.default_config(m, b200, {"dp": 2, "chunk_size": 8192})
    assert d.mem_fraction_static == want and config.chunk_size == 8192
    # a dense model at dp 2 runs replicas (--dp-size), each its own server: no DP attention
    llama = get_model("llama-3-8b")
    assert (sg.default_config(llama, b200, {"dp": 2})[1].mem_fraction_static
            == sg.default_config(llama, b200, {})[1].mem_fraction_static)


def test_pipeline_parallel_caps_the_prefill_graph_at_8192_tokens():
    # 40,000 MiB (decode max_bs 32), a 16,384-token chunk at PP 2: the prefill graph captures
    # up to 8,192 tokens (58 sizes, 464 MiB) -> 0.353; uncapped (74 sizes) it would be 0.35
    want = _reserve_mib(40_000, 16384, 2, 32, len(sg.prefill_graph_sizes(8192)))
    assert want == 0.353
    assert sg.mem_fraction_static_default(40_000 * MIB, 16384, 1, pp=2) == want
    assert sg.mem_fraction_static_default(40_000 * MIB, 16384, 2, pp=1) == 0.35


def test_a_page_size_option_is_refused_with_the_page_tuner_simulates():
    from tuner.cli.simulate import check_sglang_options
    from tuner.core.config import DEFAULTS

    knobs = dict(DEFAULTS) | {"block_size": 64, "scheduler": None}
    with pytest.raises(TunerError, match="64 on B200/GB200/B300, else 1"):
        check_sglang_options(knobs, engine_version=None, num_scheduler_steps=None,
                             prefix_caching=None)
