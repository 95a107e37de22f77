"""Run a ServingConfig through Hugging Face transformers' continuous batching.

    run_transformers(workload, model, gpu, config, checkpoint=None) -> RunResult

For machines that have transformers (>= 5, which has continuous batching) but not vLLM. The
worker (runners/_transformers_worker.py) uses the manager behind ``generate_batch``
(``init_continuous_batching`` + ``add_request``) so each request gets its own
``max_new_tokens``; EOS is disabled (``eos_token_id=-1``), greedy decoding.

Knob mapping (transformers' ContinuousBatchingConfig; vLLM's is in tuner.exports):

    chunk_size  -> max_batch_tokens        max_running -> max_requests_per_batch
    block_size  -> page_size (>= 4)        KV capacity -> num_blocks = plan tokens / page_size
                                                           (the tuner's memory plan, as on vLLM CPU)

transformers (5.17+, cache.py) counts num_blocks in whole-model blocks of page_size tokens and
rounds them up to its sectors; the worker reports the capacity it made (kv_capacity_tokens).
Beside that KV it sizes buffers with the cache (under SDPA/eager attention a
[max_batch_tokens, cache tokens + max_batch_tokens] mask): a plan whose KV fits the device can
still not fit transformers, which the worker says in one line (footprint_message).

Knobs transformers lacks (weight/KV bits, offload, tp/dp, ordering beyond submission order)
are listed in ``RunResult.notes``; the run uses 16-bit weights and KV.
"""

from __future__ import annotations

import math
import tempfile
from pathlib import Path

from tuner.core.catalog import GPU, ModelSpec
from tuner.core.config import ServingConfig
from tuner.core.workload import Workload
from tuner.runners.base import Engine, RunResult, engine_python, result_from_worker, run_worker
from tuner.runners.vllm import build_job

# transformers: its own venv, or the vLLM venv (which has it).
ENGINE = Engine(
    name="transformers", package="transformers", label="transformers",
    venvs=(".venv-transformers", ".venv-vllm"),
    install_hint=("install it: pip install \"transformers>=5\" torch==2.13.0 (or any torch), "
                  "or pass --python PATH / set TUNER_TRANSFORMERS_PYTHON to a Python that has "
                  "it (the vLLM venv .venv-vllm has it)"))


def cb_config(config: ServingConfig, kv_capacity_tokens: int) -> tuple[dict, list[str]]:
    """ContinuousBatchingConfig keyword arguments and notes for what transformers lacks."""
    page = max(int(config.block_size), 4)
    args = {
        "max_batch_tokens": int(config.chunk_size),
        "max_requests_per_batch": int(config.max_running),
        "page_size": page,
        "num_blocks": max(int(math.ceil(kv_capacity_tokens / page)), 1),
        "scheduler_type": "fifo",
        "allow_block_sharing": True,
    }
    notes = []
    if config.weight_bits != 16 or config.kv_bits != 16:
        notes.append(f"weight_bits={config.weight_bits} kv_bits={config.kv_bits}: the "
                     "transformers runner runs 16-bit weights and KV")
    if config.tp > 1 or config.dp > 1:
        notes.append(f"tp={config.tp} dp={config.dp}: the transformers runner uses one device")
    if config.kv_offload_layers or config.weight_offload_fraction:
        notes.append("offload knobs are not applied by the transformers runner")
    if not config.scheduler.startswith("vllm") or config.scheduler.startswith("vllm-v0"):
        notes.append(f"scheduler {config.scheduler!r}: transformers uses its own FIFO scheduler")
    return args, notes


def run_transformers(workload: Workload, model: ModelSpec, gpu: GPU, config: ServingConfig, *,
                     checkpoint: str | Path | None = None, python: str | Path | None = None,
                     work_dir: str | Path | None = None, timeout_s: float | None = None,
                     warmup: bool = True, record_steps: bool = False,
                     model_cache_dir: str | Path | None = None, repeats: int = 1,
                     echo: bool = False) -> RunResult:
    """One real transformers continuous-batching run of `config` on `workload`."""
    py = engine_python(ENGINE, python)
    job = build_job(workload, model, gpu, config, checkpoint=checkpoint,
                    model_cache_dir=model_cache_dir)
    args, notes = cb_config(config, job["kv_capacity_tokens_planned"])
    # said with every transformers run: on the lent H200 (2026-11-30) it measured 105.0 s where
    # the vLLM prediction was 6.7 s, and the error column alone reads as tuner's
    notes.append("the prediction is the plan's engine as tuner models it (vLLM's scheduler and "
                 "kernels); transformers' continuous batching is another engine, so the error "
                 "is the gap between the two until `tuner calibrate --runner transformers` fits "
                 "transformers' own per-step costs")
    job["notes"] += notes
    job.update({"engine_args": args, "warmup": warmup, "seed": 0, "timeout_s": timeout_s})
    wd = Path(work_dir) if work_dir else Path(tempfile.mkdtemp(prefix="tuner-hf-"))
    res = run_worker("transformers", py, job, wd, timeout_s=timeout_s, echo=echo)
    return result_from_worker("transformers", res, job["notes"])
