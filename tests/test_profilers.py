"""Tests for profilers/: plans, (de)quantization, timing, the resumable profile run, and the
`tuner profile` command's errors. torch runs on the CPU here; GPU-only tests are marked gpu."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from tuner.core.catalog import get_model
from tuner.core.errors import TunerError
from tuner.profilers.plan import FAMILIES, PlanLimits, build_plan, token_grid
from tuner.profilers.schema import COLUMNS, Case, RowWriter, make_row, read_rows, row_key
from tuner.profilers.timing import Sampler, TimingSettings, measure_interleaved

REPO = Path(__file__).resolve().parents[1]
TINY = get_model("tiny-llama")


def tuner(*args, timeout: float = 300) -> subprocess.CompletedProcess:
    env = dict(os.environ, COLUMNS="60")
    env.pop("FORCE_COLOR", None)
    return subprocess.run([sys.executable, "-m", "tuner.cli", *map(str, args)], capture_output=True,
                          text=True, timeout=timeout, cwd=REPO, env=env)


def assert_one_line_error(r: subprocess.CompletedProcess, *needles: str) -> str:
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr + r.stdout, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), r.stderr
    for n in needles:
        assert n in lines[0], lines[0]
    return lines[0]


# ---- plan -----------------------------------------------------------------------------------
def test_token_grid_dense_near_powers_of_two_and_tiles():
    g = token_grid(8192)
    assert g[0] == 1 and g[-1] == 8192
    for i in range(14):
        assert 1 << i in g
    for p in (16, 128, 256, 1024, 4096):  # tile quantisation: 2^i + 1 next to 2^i
        assert p + 1 in g
    for k in range(1, 17):
        assert 128 * k in g
    q = token_grid(8192, quick=True)
    assert set(q) < set(g) | {129, 257, 513, 1025} and len(q) < len(g)
    assert token_grid(512)[-1] == 512


def test_plan_covers_every_family_with_flops_and_bytes():
    cases = build_plan(TINY, PlanLimits(device="cpu", quick=True, max_copy_bytes=1 << 20,
                                        max_quant_bytes=1 << 20, cpu_threads=(1, 2),
                                        interop_threads=(1, 2)), dtype_bytes=4)
    ops = {c.operation for c in cases}
    assert {"linear.qkv", "linear.o", "linear.gate_up", "linear.down", "norm", "activation",
            "rotary", "add", "lm_head", "attn.prefill", "attn.decode", "copy.host", "copy.h2d",
            "quant", "dequant", "cpu.matmul", "cpu.attn.decode"} <= ops
    for c in cases:
        if c.operation.startswith(("linear.", "lm_head", "attn.")):
            assert c.flops > 0 and c.bytes_moved > 0, c
    qkv = [c for c in cases if c.operation == "linear.qkv" and c.tokens == 64][0]
    k, n = 128, (4 + 2 * 2) * 32
    assert qkv.flops == 2 * 64 * k * n
    assert {c.variant for c in cases if c.operation == "copy.h2d"} == {"skipped"}
    assert {c.intra_threads for c in cases if c.operation == "cpu.matmul"} == {1, 2}
    # CUDA plans copy both ways, pinned and pageable, 4 KiB up to the cap
    gpu = build_plan(TINY, PlanLimits(device="cuda", max_copy_bytes=1 << 30,
                                      families=frozenset({"copy"})), dtype_bytes=2)
    assert {(c.operation, c.variant) for c in gpu} == {
        ("copy.h2d", "pinned"), ("copy.h2d", "pageable"), ("copy.d2h", "pinned"),
        ("copy.d2h", "pageable")}
    sizes = sorted({c.size_bytes for c in gpu})
    assert sizes[0] == 4096 and sizes[-1] == 1 << 30
    assert set(FAMILIES) == {"linear", "elementwise", "lm_head", "attention", "copy", "quant",
                             "threads"}


def test_attention_grid_respects_caps():
    lim = PlanLimits(device="cpu", quick=False, max_prefill_work=float(1 << 20),
                     max_decode_kv_tokens=1 << 14, families=frozenset({"attention"}))
    cases = build_plan(TINY, lim, dtype_bytes=4)
    for c in cases:
        if c.operation == "attn.prefill":
            assert c.tokens * (c.context + c.tokens / 2) <= 1 << 20
            assert c.tokens + c.context <= TINY.max_position
        else:
            assert c.batch * c.kv_len <= 1 << 14


# ---- schema ---------------------------------------------------------------------------------
def test_rows_round_trip_and_resume_keys(tmp_path):
    p = tmp_path / "profile.csv"
    c1 = Case("linear.qkv", tokens=8, flops=1.0, bytes_moved=2.0)
    c2 = Case("copy.h2d", variant="pinned", size_bytes=4096)
    with RowWriter(p) as w:
        w.write(make_row(c1, "float32", median_s=1e-5, p10_s=9e-6, p90_s=2e-5, repeats=5,
                         calls_per_sample=10))
    with RowWriter(p) as w:  # appending keeps one header
        w.write(make_row(c2, "uint8", status="oom"))
    rows = read_rows(p)
    assert list(rows[0]) == COLUMNS and len(rows) == 2
    assert row_key(rows[0]) == c1.key("float32")
    assert row_key(rows[1]) == c2.key("uint8")
    assert rows[1]["status"] == "oom" and rows[1]["median_s"] == "nan"


# ---- timing ---------------------------------------------------------------------------------
def test_sampler_and_interleaved_rounds():
    s = TimingSettings(warmup=1, repeats=6, min_sample_s=2e-4, max_case_s=1.0, rounds=3)

    def slow():
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < 1e-3:
            pass

    fast = Sampler(lambda: sum(range(50)), "cpu")
    busy = Sampler(slow, "cpu")
    for sm in (fast, busy):
        sm.calibrate(s)
    assert fast.calls > 1 and busy.calls == 1
    t_fast, t_busy = measure_interleaved([fast, busy], s)
    assert t_fast.repeats == 6 and t_busy.repeats == 6
    assert 0.9e-3 < t_busy.median_s < 5e-3
    assert t_fast.p10_s <= t_fast.median_s <= t_fast.p90_s
    assert t_fast.median_s < t_busy.median_s

    def boom():
        raise MemoryError

    bad = Sampler(boom, "cpu")
    (res,) = measure_interleaved([bad], s)
    assert isinstance(res, MemoryError)


# ---- quantization (needs torch) -----------------------------------------------------------
def test_groupwise_minmax_quantization_round_trip():
    torch = pytest.importorskip("torch")
    from tuner.profilers.quant import dequantize, quantize

    x = torch.randn(1000) * 3
    for bits in (8, 4):
        q, mn, scale, n = quantize(x, bits, group_size=64)
        assert q.dtype == torch.uint8
        groups = -(-1000 // 64)
        assert q.shape == (groups, 64 if bits == 8 else 32)  # two 4-bit codes per byte
        y = dequantize(q, mn, scale, bits, n, shape=x.shape)
        step = (1.0 / scale).flatten()  # (max - min) / (2^b - 1) per group
        err = (y - x).abs().view(-1)
        per_group = torch.nn.functional.pad(err, (0, groups * 64 - 1000)).view(groups, 64).amax(1)
        assert (per_group <= step / 2 + 1e-5).all(), bits


# ---- the profile run (CPU) ---------------------------------------------------------------------
def _settings(out, **kw):
    from tuner.profilers.profile import ProfileSettings

    base = {"model": TINY, "out": out, "device": "cpu", "quick": True, "repeats": 3,
            "families": frozenset({"copy"})}
    return ProfileSettings(**(base | kw))


def test_profile_resumes_and_records_oom(tmp_path, monkeypatch):
    pytest.importorskip("torch")
    from tuner.profilers import ops
    from tuner.profilers.profile import run_profile

    out = tmp_path / "prof"
    real = ops.OpFactory.build

    def build(self, case):  # the largest copy runs out of memory
        if case.operation == "copy.host" and case.size_bytes >= 1 << 24:
            raise RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate")
        return real(self, case)

    monkeypatch.setattr(ops.OpFactory, "build", build)
    s1 = run_profile(_settings(out), progress=False)
    rows = read_rows(out / "profile.csv")
    assert s1.measured == len(rows) > 5 and s1.skipped_existing == 0
    status = {(r["operation"], r["size_bytes"]): r["status"] for r in rows}
    assert status[("copy.host", str(1 << 24))] == "oom" and s1.oom >= 1
    assert status[("copy.h2d", "0")].startswith("skipped: no CUDA device")
    ok = [r for r in rows if r["status"] == "ok"]
    assert all(float(r["p10_s"]) <= float(r["median_s"]) <= float(r["p90_s"]) for r in ok)
    prov = json.loads((out / "provenance.json").read_text())
    for k in ("device", "device_name", "memory_bytes", "driver", "torch", "cuda", "date", "model",
              "repeats", "host", "dtype", "model_shape"):
        assert k in prov
    assert prov["model"] == "tiny-llama" and prov["device"] == "cpu"

    # interrupted profile: drop the last rows, rerun -> only those are measured
    lines = (out / "profile.csv").read_text().splitlines(keepends=True)
    (out / "profile.csv").write_text("".join(lines[:-3]))
    s2 = run_profile(_settings(out), progress=False)
    assert s2.measured == 3 and s2.skipped_existing == len(rows) - 3
    assert len(read_rows(out / "profile.csv")) == len(rows)
    assert len(json.loads((out / "provenance.json").read_text())["runs"]) == 2

    # a different model into the same folder is refused
    with pytest.raises(TunerError, match="another --out"):
        run_profile(_settings(out, model=get_model("llama-2-7b")), progress=False)


def test_profile_errors_without_torch_and_cuda(tmp_path, monkeypatch):
    from tuner.profilers import profile as prof

    with monkeypatch.context() as mp:
        mp.setitem(sys.modules, "torch", None)  # import torch -> ImportError
        with pytest.raises(TunerError, match=r'pip install -e "\.\[profile\]"'):
            prof.run_profile(_settings(tmp_path / "x"), progress=False)
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a GPU is visible")
    with pytest.raises(TunerError, match="no CUDA GPU"):
        prof.resolve_device(torch, "cuda")
    assert prof.resolve_device(torch, "auto") == "cpu"


def test_cli_profile_bad_inputs(tmp_path):
    a_file = tmp_path / "file"
    a_file.write_text("x")
    assert_one_line_error(tuner("profile", "--model", "no-such-model", "--out", tmp_path / "o"),
                          "Unknown model")
    assert_one_line_error(tuner("profile", "--model", "tiny-llama", "--out", a_file),
                          "not a folder")
    assert_one_line_error(tuner("profile", "--model", "tiny-llama", "--only", "bogus"),
                          "--only")
    if os.geteuid() != 0:  # root writes anywhere
        ro = tmp_path / "ro"
        ro.mkdir()
        ro.chmod(0o500)
        assert_one_line_error(tuner("profile", "--model", "tiny-llama", "--out", ro / "p"),
                              "Cannot write")
    pytest.importorskip("torch")
    import torch

    if not torch.cuda.is_available():
        assert_one_line_error(tuner("profile", "--model", "tiny-llama", "--device", "cuda",
                                    "--out", tmp_path / "c"), "--device cuda", "no CUDA GPU")


def test_cli_profile_without_torch_is_one_line(tmp_path):
    """A fresh interpreter where torch cannot be imported: the pip hint, no traceback."""
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "torch.py").write_text("raise ImportError('No module named torch')\n")
    env = dict(os.environ, PYTHONPATH=f"{shim}{os.pathsep}{REPO}", COLUMNS="60")
    r = subprocess.run([sys.executable, "-m", "tuner.cli", "profile", "--model", "tiny-llama",
                        "--out", tmp_path / "p"], capture_output=True, text=True, cwd=REPO,
                       env=env, timeout=120)
    assert_one_line_error(r, 'pip install -e ".[profile]"')


@pytest.mark.gpu
def test_gpu_profile_copies_and_attention(tmp_path):  # pragma: no cover - GPU
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no GPU")
    from tuner.profilers.profile import ProfileSettings, run_profile

    s = run_profile(ProfileSettings(model=TINY, out=tmp_path / "g", device="cuda", quick=True,
                                    families=frozenset({"copy", "attention", "linear"})),
                    progress=False)
    rows = read_rows(tmp_path / "g" / "profile.csv")
    assert s.device == "cuda" and rows
    ok = {(r["operation"], r["variant"]) for r in rows if r["status"] == "ok"}
    assert ("copy.h2d", "pinned") in ok and ("copy.d2h", "pageable") in ok
    assert np.isfinite(float(next(r for r in rows if r["operation"] == "attn.decode")["median_s"]))
