"""The simulator's C kernels (tuner/sim/_kernels.c through tuner/sim/kernels.py): resumable in
slices with the same records, interruptible, refused when stale, buildable from a bare tree."""

from __future__ import annotations

import os
import shutil
import signal
import threading
import time

import numpy as np
import pytest

from tuner.core.errors import TunerError
from tuner.sim import kernels
from tuner.sim import scheduler as sched


def _job(n: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    return rng.integers(1, 2000, n), rng.integers(1, 600, n)


@pytest.mark.parametrize("name", ["vllm", "sarathi", "vllm-v0"])
def test_pausing_every_few_steps_gives_the_same_schedule(monkeypatch, name):
    prompt, output = _job(400, seed=1)
    params = sched.preset(name, token_budget=2048, max_running=16, block_size=16,
                          capacity_blocks=3000)
    whole = sched.run_schedule(prompt, output, params)
    monkeypatch.setattr(sched, "_PAUSE_EVERY_STEPS", 3)
    sliced = sched.run_schedule(prompt, output, params)
    assert whole.status == sched.STATUS_OK
    assert whole.steps.shape[0] > 1024  # the record grew past its first allocation too
    np.testing.assert_array_equal(whole.steps, sliced.steps)
    np.testing.assert_array_equal(whole.finish_step, sliced.finish_step)
    assert (whole.status, whole.cached_tokens) == (sliced.status, sliced.cached_tokens)


def test_ctrl_c_interrupts_a_long_schedule():
    prompt, output = _job(200_000, seed=2)
    params = sched.preset("vllm", token_budget=256, max_running=1024, block_size=16,
                          capacity_blocks=100_000)
    timer = threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT))
    t0 = time.perf_counter()
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            sched.run_schedule(prompt, output, params, fast=False)
    finally:
        timer.cancel()
    assert time.perf_counter() - t0 < 5.0  # not after the whole job (tens of seconds)


def test_a_library_with_another_layout_is_refused():
    lib = kernels.library()
    with pytest.raises(TunerError, match="do not match"):
        kernels.check_layout(lib, [99])


@pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None,
                    reason="needs a C compiler")
def test_a_bare_source_tree_builds_into_the_cache_once(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    first = kernels._compile_into_cache()
    assert first.parent == tmp_path / "tuner" / "kernels" and first.is_file()
    mtime = first.stat().st_mtime_ns
    assert kernels._compile_into_cache() == first and first.stat().st_mtime_ns == mtime


def test_no_compiler_is_one_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.setattr(kernels.shutil, "which", lambda name: None)
    with pytest.raises(TunerError, match="pip install"):
        kernels._compile_into_cache()
