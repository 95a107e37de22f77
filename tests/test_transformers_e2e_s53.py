"""`tuner validate --runner transformers` on this CPU, as a user runs it.

Fast (always run): the CPU device is a one-device machine (a default search on it found no
feasible plan: "20 x uses 8 GPUs, more than --max-gpus 1"), the knob mapping in
runners/transformers.cb_config and the worker's error and config helpers.

Slow (TUNER_VALIDATE_E2E=1 or CI, and a Python with transformers >= 5, e.g. .venv-vllm):
tiny-llama with random weights through search -> validate on the CPU; predicted and measured
both present, every output token generated, the engine's KV cache the plan's.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from tuner.core.config import ServingConfig

REPO = Path(__file__).resolve().parents[1]


def _workload(path: Path, n: int = 8, seed: int = 0) -> tuple[Path, int]:
    rng = np.random.default_rng(seed)
    outs = rng.integers(4, 32, n)
    path.write_text("".join(json.dumps({"prompt_tokens": int(p), "output_tokens": int(o)}) + "\n"
                            for p, o in zip(rng.integers(16, 160, n), outs, strict=True)))
    return path, int(outs.sum())


# --- the CPU device -----------------------------------------------------------------------

def test_cpu_device_is_a_one_device_machine(tmp_path):
    from tuner.core.catalog import load_gpus
    from tuner.runners.cpu_device import cpu_entry, write_cpu_gpu_file

    assert cpu_entry()["gpus_per_machine"] == 1
    assert load_gpus(write_cpu_gpu_file(tmp_path / "cpu.yaml"))["CPU"].gpus_per_machine == 1


def test_default_search_on_the_cpu_device_has_feasible_plans(tmp_path):
    """The user's command: the default space (no --space) on the CPU device, --max-gpus 1.
    With the catalog's 8 devices a machine it offered TP 2..8 and pipeline stages (tiny-llama
    'fits no one machine' at TP 2) and every trial was infeasible."""
    from typer.testing import CliRunner

    from tuner.cli.main import app
    from tuner.runners.cpu_device import write_cpu_gpu_file

    wl, _ = _workload(tmp_path / "w.jsonl")
    gf = write_cpu_gpu_file(tmp_path / "cpu.yaml", name="CPU")
    r = CliRunner().invoke(app, ["search", "-w", str(wl), "-m", "tiny-llama", "--gpus", "CPU",
                                 "--gpu-file", str(gf), "--max-gpus", "1", "--n-trials", "4",
                                 "--out", str(tmp_path / "s"), "--engines", "vllm"])
    assert r.exit_code == 0, r.output
    assert "pipeline stages span machines" not in r.output
    assert (tmp_path / "s" / "fastest.json").is_file()


# --- cb_config: transformers' units ---------------------------------------------------------

@pytest.mark.parametrize("block,plan_tokens", [(16, 16736), (16, 16737), (32, 78128), (1, 10),
                                                (64, 0)])
def test_cb_config_kv_cache_is_the_plans_in_pages(block, plan_tokens):
    """transformers >= 5.17: num_blocks counts whole-model blocks of page_size tokens (its
    cache.py num_sectors_from_config); the capacity in tokens is num_blocks x page_size, the
    plan's tokens rounded up to a page (one page at the least)."""
    from tuner.runners.transformers import cb_config

    cfg = ServingConfig(gpu="CPU", chunk_size=256, max_running=8, block_size=block)
    args, notes = cb_config(cfg, plan_tokens)
    page = args["page_size"]
    assert page == max(block, 4)  # transformers' smallest page
    tokens = args["num_blocks"] * page
    assert tokens >= plan_tokens and tokens - plan_tokens < page or plan_tokens == 0
    assert args["num_blocks"] >= 1
    assert args["max_batch_tokens"] == 256 and args["max_requests_per_batch"] == 8
    assert notes == []


def test_cb_config_notes_what_transformers_lacks():
    from tuner.runners.transformers import cb_config

    _, notes = cb_config(ServingConfig(gpu="CPU", tp=2, kv_bits=8, scheduler="sarathi"), 1000)
    text = " ".join(notes)
    assert "16-bit" in text and "one device" in text and "FIFO" in text


# --- the worker's helpers (no transformers needed) -------------------------------------------

def test_config_args_renames_page_size_for_older_transformers():
    from tuner.runners._transformers_worker import config_args

    @dataclasses.dataclass
    class Old:  # transformers < 5.17
        block_size: int = 256
        num_blocks: int | None = None

    @dataclasses.dataclass
    class New:
        page_size: int = 256
        num_blocks: int | None = None

    a = {"page_size": 16, "num_blocks": 10}
    assert config_args(a, Old) == {"block_size": 16, "num_blocks": 10}
    assert config_args(a, New) == a
    assert a == {"page_size": 16, "num_blocks": 10}  # not changed in place


def test_footprint_error_in_words():
    """transformers' MemoryError (cache.py _check_footprint) as the one line the user sees."""
    from tuner.runners._transformers_worker import footprint_message

    cfg = SimpleNamespace(num_key_value_heads=4, num_attention_heads=4, hidden_size=256,
                          num_hidden_layers=22, head_dim=None)
    text = ("Memory footprint 705943237888 is more than available memory 22256496230")
    msg = footprint_message(text, {"page_size": 16, "num_blocks": 2514378,
                                   "max_batch_tokens": 8192}, cfg, "cpu: test")
    assert "40,230,048 KV tokens" in msg and "657.5 GiB" in msg and "20.7 GiB free" in msg
    assert "max_batch_tokens 8192" in msg and "\n" not in msg
    assert footprint_message("other", {}, cfg, "cpu") == "other"


def test_a_stopped_generation_thread_gives_its_own_error():
    from tuner.runners._transformers_worker import _collect, _wait_for_cache, thread_error

    boom = MemoryError("Memory footprint 2 is more than available memory 1")

    class Dead:
        background_thread_status = SimpleNamespace(fatal_error=boom)
        batch_processor = None

        def is_running(self):
            return False

        def get_result(self, timeout=None):
            return None

    assert thread_error(Dead()) is boom
    with pytest.raises(MemoryError, match="footprint"):
        _wait_for_cache(Dead(), 5)
    with pytest.raises(MemoryError, match="footprint"):
        _collect(Dead(), {"r0"}, 5)
    quiet = Dead()
    quiet.background_thread_status = SimpleNamespace(fatal_error=None)
    assert "generation thread stopped" in str(thread_error(quiet))
    ready = Dead()
    ready.batch_processor = SimpleNamespace(cache="the cache")
    assert _wait_for_cache(ready, 5) == "the cache"


# --- end to end on the CPU (slow) ------------------------------------------------------------

def _transformers_python() -> str:
    if not (os.environ.get("CI") or os.environ.get("TUNER_VALIDATE_E2E")):
        pytest.skip("real transformers run: set TUNER_VALIDATE_E2E=1 (CI sets CI=true)")
    from tuner.runners.base import RunnerNotInstalled
    from tuner.runners.registry import find_python

    try:
        py = find_python("transformers")
    except RunnerNotInstalled:
        pytest.skip("no Python with transformers >= 5 (.venv-vllm has it)")
    ok = subprocess.run([py, "-c", "import transformers, sys; "
                         "sys.exit(int(transformers.__version__.split('.')[0]) < 5)"],
                        capture_output=True)
    if ok.returncode:
        pytest.skip(f"{py}: transformers older than 5 (no continuous batching)")
    return py


def _tuner(args: list, cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tuner.cli", *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, timeout=timeout)


@pytest.mark.slow
def test_validate_with_transformers_on_the_cpu(tmp_path):
    from tuner.runners.cpu_device import write_cpu_gpu_file

    py = _transformers_python()
    wl, want_out = _workload(tmp_path / "w.jsonl")
    write_cpu_gpu_file(tmp_path / "cpu.yaml", kv_mib=2)
    (tmp_path / "space.yaml").write_text("knobs:\n  chunk_size: [128, 256]\n"
                                         "  max_running: [4, 8]\nfixed:\n  block_size: 16\n")
    r = _tuner(["search", "-w", "w.jsonl", "-m", "tiny-llama", "--gpus", "CPU", "--gpu-file",
                "cpu.yaml", "--space", "space.yaml", "--engines", "vllm", "--max-gpus", "1",
                "--n-trials", "3", "--out", "s"], tmp_path)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    # a relative --out, as a user types it (the worker runs in its own folder)
    r = _tuner(["validate", "--out", "s", "--top", "1", "--runner", "transformers", "--python",
                py, "--timeout", "300", "--store", tmp_path / "store"], tmp_path)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "Traceback" not in r.stdout + r.stderr
    v = json.loads((tmp_path / "s" / "validation.json").read_text())["validation"][0]
    print(f"\ntiny-llama, {v['requests']} requests on {v['device']}: predicted "
          f"{v['predicted_s']:.3f} s, measured {v['measured_s']:.3f} s ({v['engine']})")
    assert v["runner"] == "transformers" and v["device"].startswith("cpu")
    assert v["predicted_s"] > 0 and v["measured_s"] > 0
    # the error column is the gap between two engines, and the output says so
    assert any("transformers' continuous batching is another engine" in n for n in v["notes"])
    assert "another engine" in r.stdout
    assert v["output_tokens"] == want_out == v["sim"]["sampled"]
    # transformers' KV cache is the plan's, in its own pages
    kv = v["kv_capacity_tokens"]
    assert kv["engine"] is not None and 0 <= kv["engine"] - kv["plan"] < 16
    res = json.loads((Path(v["log"]).parent / "result.json").read_text())
    assert res["ok"] and res["mismatched_lengths"] == 0
    assert res["engine_args"]["num_blocks"] * res["engine_args"]["page_size"] == kv["engine"]


@pytest.mark.slow
def test_a_plan_too_big_for_this_device_is_one_clear_line(tmp_path):
    """An A10's plan of tiny-llama (~40 M KV tokens) run on this CPU: transformers' paged cache
    (with its SDPA mask of max_batch_tokens x cache tokens) cannot be made; one line, no
    traceback, non-zero exit."""
    py = _transformers_python()
    _workload(tmp_path / "w.jsonl", n=4)
    r = _tuner(["search", "-w", "w.jsonl", "-m", "tiny-llama", "--gpus", "A10", "--engines",
                "vllm", "--max-gpus", "1", "--n-trials", "2", "--out", "a10"], tmp_path)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    r = _tuner(["validate", "--out", "a10", "--top", "1", "--runner", "transformers",
                "--python", py, "--timeout", "300", "--store", tmp_path / "store"], tmp_path)
    assert r.returncode != 0
    err = [ln for ln in (r.stdout + r.stderr).splitlines() if ln.startswith("error:")]
    assert len(err) == 1 and "Traceback" not in r.stdout + r.stderr
    text = " ".join((r.stdout + r.stderr).split())
    assert "paged cache for the plan's" in err[0] and "GiB free on cpu" in text
