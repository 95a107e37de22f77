"""Weight offload priced as vLLM runs --cpu-offload-gb (stop 54): whole first layers in host
memory, nothing prefetched. Before 0.8.4 each offloaded layer is copied to the GPU before its
forward (vllm#6496); from 0.8.4 its kernels read it over the link (UVA, vllm#15354). Plans vLLM
cannot run (KV-layer offload, CPU attention) keep LM-Offload's prefetched stream (Eq. 2)."""

from __future__ import annotations

import dataclasses

import pytest
from typer.testing import CliRunner

from tests.test_hardening2 import _one_error, _run
from tests.test_offload import GPUS, StubCost, linear_link
from tuner.cli.main import app
from tuner.core.catalog import get_gpu, get_model
from tuner.core.config import ServingConfig
from tuner.core.engines import weight_offload_scheme
from tuner.core.errors import TunerError
from tuner.core.memory import plan_memory
from tuner.predictors.features import BatchFeatures
from tuner.sim import offload as off


@pytest.mark.parametrize("version, scheme", [
    (None, "vllm-uva"), ("0.32.0", "vllm-uva"), ("0.8.4", "vllm-uva"), ("0.8.3", "vllm-copy"),
    ("0.6.0", "vllm-copy"), ("0.5.3", "vllm-copy")])
def test_scheme_by_release(version, scheme):
    assert weight_offload_scheme("vllm", 0, False, version) == scheme


def test_plans_vllm_cannot_run_keep_the_prefetched_stream():
    assert weight_offload_scheme("vllm", 2, False, None) == "prefetch"
    assert weight_offload_scheme("vllm", 0, True, "0.6.0") == "prefetch"
    assert weight_offload_scheme("sglang", 0, False, None) == "prefetch"


def test_release_without_cpu_offload_gb_is_refused():
    with pytest.raises(TunerError, match=r"vLLM 0\.5\.2 has no --cpu-offload-gb.*0\.5\.3"):
        weight_offload_scheme("vllm", 0, False, "0.5.2")


def _price(engine_version, f, scheme=None):
    m, g = get_model("llama-3-8b"), get_gpu("A10", GPUS)
    cfg = ServingConfig(gpu="A10", weight_offload_fraction=0.5)
    ctx = off.OffloadContext.build(m, g, cfg, transfer=linear_link(1e9),
                                   engine_version=engine_version)
    if scheme:
        ctx = dataclasses.replace(ctx, weight_scheme=scheme)
    return off.price_iterations(f, StubCost().iteration_time_s(f), ctx, StubCost()), ctx


def test_uva_and_copy_stalls_by_hand():
    """Half of llama-3-8b's 16-bit weights (W / 2 bytes) in host memory as whole decoder layers
    of (W - embedding - LM head) / 32 bytes each (vLLM offloads decoder layers only): m = 18.4
    layers, each `load` over a 1 GB/s link, the stub's layer 1 ms. UVA: each offloaded layer
    takes max(its compute, its weights over the link): m x (load - 1 ms). Copies: the whole
    load, nothing hidden. LM-Offload's stream hides every layer's compute: 32 x (W / 64 / 1e9 -
    1 ms)."""
    m = get_model("llama-3-8b")
    f = BatchFeatures.single(decodes=8, kv_tokens=8000)
    w = m.weight_bytes(16)
    layer = (w - 2 * (m.embedding_params + m.lm_head_params)) / 32
    n_off, load = 0.5 * w / layer, layer / 1e9
    uva, ctx = _price(None, f)
    assert ctx.weight_scheme == "vllm-uva"
    assert ctx.weight_offloaded_layers == pytest.approx(n_off)
    assert 18 < n_off < 19
    assert float(uva["weight_stall_s"][0]) == pytest.approx(n_off * (load - 1e-3))
    assert float(uva["weight_transfer_s"][0]) == pytest.approx(0.5 * w / 1e9)
    assert float(uva["dt_s"][0]) == pytest.approx(40e-3 + n_off * (load - 1e-3))
    copy, ctx = _price("0.6.0", f)
    assert ctx.weight_scheme == "vllm-copy"
    assert float(copy["weight_stall_s"][0]) == pytest.approx(0.5 * w / 1e9)
    stream, _ = _price(None, f, scheme="prefetch")
    assert float(stream["weight_stall_s"][0]) == pytest.approx(32 * (w / 64 / 1e9 - 1e-3))
    # what vLLM cannot hide costs more than LM-Offload's prefetch
    assert (float(copy["dt_s"][0]) > float(uva["dt_s"][0]) > float(stream["dt_s"][0]))


def test_uva_hides_the_link_under_a_long_layer():
    """A layer computing longer than its weights take over the link stalls nothing under UVA
    (its kernels read as they compute); the copies still pay the whole load."""
    f = BatchFeatures.single(decodes=8, kv_tokens=8000)

    class Slow(StubCost):
        def layer_time_s(self, f):
            return super().layer_time_s(f) * 1e4  # 10 s a layer

        def iteration_time_s(self, f):
            return super().iteration_time_s(f) * 1e4

    m, g = get_model("llama-3-8b"), get_gpu("A10", GPUS)
    for version, stalls in ((None, False), ("0.6.0", True)):
        ctx = off.OffloadContext.build(m, g, ServingConfig(gpu="A10", weight_offload_fraction=0.5),
                                       transfer=linear_link(1e9), engine_version=version)
        p = off.price_iterations(f, Slow().iteration_time_s(f), ctx, Slow())
        assert (float(p["weight_stall_s"][0]) > 0) is stalls


def test_memory_holds_what_each_release_holds():
    """UVA holds no GPU copy of offloaded weights; the copies hold one layer's (inside the
    start-up profile's peak); LM-Offload's stream two layers of the offloaded share."""
    m, g = get_model("llama-3-8b"), get_gpu("A10", GPUS)
    cfg = ServingConfig(gpu="A10", weight_offload_fraction=0.5)
    uva = plan_memory(m, g, cfg)
    copy = plan_memory(m, g, cfg, engine_version="0.6.0")
    stream = plan_memory(m, g, dataclasses.replace(cfg, kv_offload_layers=1))
    assert uva.offload_staging_bytes == 0.0 and uva.weight_offload_scheme == "vllm-uva"
    decoder_layer = (m.weight_bytes(16) - 2 * (m.embedding_params + m.lm_head_params)) / 32
    assert copy.offload_staging_bytes == pytest.approx(decoder_layer)
    assert copy.weight_offload_scheme == "vllm-copy"
    assert stream.offload_staging_bytes == pytest.approx(2 * 0.5 * m.weight_bytes(16) / 32)
    assert plan_memory(m, g, ServingConfig(gpu="A10")).weight_offload_scheme == ""


def test_simulate_says_how_the_weights_are_offloaded(tmp_path, capfd):
    wl = tmp_path / "w.jsonl"
    wl.write_text("".join('{"prompt_tokens": 900, "output_tokens": 100}\n' for _ in range(16)))
    args = ["simulate", "-w", str(wl), "-m", "llama-3-8b", "-g", "A10",
            "--weight-offload-fraction", "0.5"]
    res = CliRunner().invoke(app, [*args, "--engine-version", "0.6.0"],
                             env={"COLUMNS": "250"})
    assert res.exit_code == 0, res.output
    text = " ".join(res.output.split())
    assert "offloaded-layer copy (1 layer, each forward) │ 0.4 GiB" in text
    assert "vLLM's --cpu-offload-gb before 0.8.4" in text
    assert "whole layers offloaded (vLLM fills the first layers) │ 18.41" in text
    res = CliRunner().invoke(app, args, env={"COLUMNS": "250"})
    text = " ".join(res.output.split())
    assert res.exit_code == 0 and "(UVA, zero copy)" in text
    assert "streamed-weight buffers" not in text and "offloaded-layer copy" not in text
    err = _one_error(*_run([*args, "--engine-version", "0.5.0"], tmp_path, capfd))
    assert "vLLM 0.5.0 has no --cpu-offload-gb" in err


def test_a_quantized_cache_alone_is_not_shown_as_offloading(tmp_path):
    """--kv-bits 8 with nothing offloaded printed an "Offloading" table of zero transfers
    (and on an RTX PRO 6000, where DeepSeek-V3.2's cache is FP8 by default, without any flag)."""
    wl = tmp_path / "w.jsonl"
    wl.write_text("".join('{"prompt_tokens": 900, "output_tokens": 100}\n' for _ in range(16)))
    res = CliRunner().invoke(app, ["simulate", "-w", str(wl), "-m", "llama-3-8b", "-g", "A10",
                                   "--kv-bits", "8"], env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    text = " ".join(res.output.split())
    assert "KV-cache quantization on A10" in text and "KV (de)quantization (s)" in text
    assert "Offloading on" not in text and "KV stall" not in text
