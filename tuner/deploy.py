"""Deploy exports: the single mapping from a ServingConfig to engine arguments.

Every knob of ``ServingConfig`` is handled here exactly once: it either becomes a vLLM engine
argument or a comment line saying what vLLM lacks and what the user has to do instead (a knob is
never dropped silently).

- :func:`vllm_engine_args` -> ``(args, comments)``: vLLM (V1) ``EngineArgs`` keyword arguments
  (snake_case, usable as ``vllm.LLM(**args)``) and the comment lines.
- :func:`to_vllm_yaml` -> text for ``vllm serve --config FILE``. vLLM documents that the keys are
  the long CLI option names (``tensor-parallel-size: 4``; docs.vllm.ai "Server Arguments" ->
  "Configuration file"); its loader turns ``key: true`` into ``--key`` and ``key: false`` into
  ``--no-key``. Comments go on top as ``# ...`` lines, followed by one machine-readable
  ``# tuner-config: {json}`` line so :func:`from_vllm_yaml` restores the exact ServingConfig.
- :func:`to_json` -> every figure of one result as JSON.
- :func:`write_atomic` -> write text via a temp file in the same folder + ``os.replace``.
"""

from __future__ import annotations

import json
import math
import os
import stat
import tempfile
from pathlib import Path
from typing import Any

import yaml

from tuner.catalog import GIB, GPU, ModelSpec
from tuner.config import ServingConfig
from tuner.errors import TunerError
from tuner.memory import plan_memory

CONFIG_COMMENT_PREFIX = "# tuner-config:"

# ServingConfig fields that map 1:1 onto a vLLM argument (YAML key -> field).
_DIRECT_KEYS = {
    "tensor-parallel-size": "tp",
    "data-parallel-size": "dp",
    "max-num-batched-tokens": "chunk_size",
    "max-num-seqs": "max_running",
    "gpu-memory-utilization": "gpu_memory_utilization",
    "block-size": "block_size",
}

_ORDERING_HOWTO = {
    "shortest-prompt": "shortest prompt first",
    "longest-output": "longest expected output first",
    "binpack": "the tuner's bin-packing order",
    "blend": "the tuner's prefix-aware blend (requests sharing a prefix adjacent)",
}


def _cpu_offload_gb(config: ServingConfig, model: ModelSpec) -> float:
    """vLLM's cpu_offload_gb is per GPU: the offloaded share of this GPU's weight shard,
    rounded up to 0.1 GiB."""
    per_gpu = config.weight_offload_fraction * model.weight_bytes(config.weight_bits) / config.tp
    gib = per_gpu / GIB
    return round(math.ceil(gib * 10.0 - 1e-9) / 10.0, 1)


def vllm_engine_args(
    config: ServingConfig,
    model: ModelSpec,
    gpu: GPU,
    *,
    max_model_len: int,
    kv_capacity_tokens: int | None = None,
) -> tuple[dict[str, Any], list[str]]:
    """vLLM (V1) engine arguments for ``config`` plus comment lines for what vLLM lacks.

    ``kv_capacity_tokens`` (per replica, from the search's memory plan) is used in the advice for
    eviction-free schedulers; without it :func:`tuner.memory.plan_memory` estimates it.
    """
    config.validate()
    if max_model_len < 1:
        raise TunerError(f"max_model_len must be positive, got {max_model_len}.")
    args: dict[str, Any] = {"model": model.hf_id or model.name}
    comments: list[str] = []
    if not model.hf_id:
        comments.append(
            f"model: {model.name!r} has no Hugging Face id in the catalog; replace it with the "
            "checkpoint's repo id or local path."
        )
    args["tensor_parallel_size"] = config.tp
    if config.dp > 1:
        args["data_parallel_size"] = config.dp
    args["max_num_batched_tokens"] = config.chunk_size
    args["max_num_seqs"] = config.max_running
    chunked = not config.scheduler.startswith("vllm-v0")
    args["enable_chunked_prefill"] = chunked
    if not chunked and config.chunk_size < max_model_len:
        comments.append(
            f"scheduler {config.scheduler!r}: with chunked prefill off vLLM requires "
            f"max-num-batched-tokens >= max-model-len ({config.chunk_size} < {max_model_len}); "
            "raise max-num-batched-tokens or lower max-model-len."
        )
    args["gpu_memory_utilization"] = config.gpu_memory_utilization
    args["block_size"] = config.block_size
    args["max_model_len"] = max_model_len

    # KV cache precision.
    if config.kv_bits == 16:
        args["kv_cache_dtype"] = "auto"
    elif config.kv_bits == 8:
        args["kv_cache_dtype"] = "fp8"
    else:
        comments.append(
            "kv_bits=4: vLLM has no 4-bit KV cache; use kv-cache-dtype: fp8 instead "
            "(half the predicted KV capacity, so expect fewer concurrent requests)."
        )

    # Weight precision.
    if config.weight_bits == 8:
        if gpu.fp8_tflops:
            args["quantization"] = "fp8"
        else:
            comments.append(
                f"weight_bits=8: {gpu.name} has no FP8 tensor cores; use an INT8 (W8A16) "
                "checkpoint, e.g. GPTQ/compressed-tensors, as the model."
            )
    elif config.weight_bits == 4:
        comments.append(
            "weight_bits=4: use a 4-bit AWQ/GPTQ checkpoint of the model; vLLM picks "
            "awq_marlin/gptq_marlin."
        )

    # Offloading.
    if config.weight_offload_fraction > 0:
        args["cpu_offload_gb"] = _cpu_offload_gb(config, model)
    if config.kv_offload_layers > 0:
        comments.append(
            f"kv_offload_layers={config.kv_offload_layers}: vLLM has no layer-wise KV offload; "
            "the nearest is CPU KV offload with LMCache (kv-transfer-config) or swap space. "
            "Expect a different makespan than predicted."
        )
    if config.cpu_threads_intra > 0 or config.cpu_threads_inter > 0:
        comments.append(
            f"cpu_threads intra={config.cpu_threads_intra} inter={config.cpu_threads_inter}: "
            "vLLM has no engine argument for CPU threads; set OMP_NUM_THREADS="
            f"{config.cpu_threads_intra or 'N'} in the environment (intra-op). There is no "
            "inter-op setting."
        )

    # Scheduler behaviour vLLM cannot be told.
    if config.eviction_free:
        cap = kv_capacity_tokens
        basis = "memory plan"
        if cap is None:
            cap = plan_memory(model, gpu, config).kv_capacity_tokens
            basis = "tuner's memory-plan estimate"
        fits = cap // max_model_len
        if fits < 1:
            advice = (
                f"not even one max-model-len request fits in the KV cache (~{cap} tokens, "
                f"{basis}); lower max-model-len."
            )
        elif fits >= config.max_running:
            advice = (
                f"max-num-seqs {config.max_running} already fits ({fits} max-model-len requests "
                f"fit in ~{cap} KV tokens, {basis})."
            )
        else:
            advice = (
                f"set max-num-seqs <= {fits} (~{cap} KV tokens / max-model-len {max_model_len}, "
                f"{basis}) so the batch always fits; the prediction used {config.max_running}."
            )
        comments.append(
            f"scheduler {config.scheduler!r} is eviction-free: vLLM always preempts by "
            f"recompute when the KV cache runs out; {advice}"
        )
    if config.ordering != "fcfs":
        how = _ORDERING_HOWTO.get(config.ordering, config.ordering)
        comments.append(
            f"ordering {config.ordering!r}: vLLM processes offline requests in submission "
            f"order; sort the input JSONL in that order ({how}) before running."
        )
    return args, comments


def _comment_lines(text: str) -> list[str]:
    return [f"# {line}".rstrip() for line in text.splitlines() if line.strip()]


def to_vllm_yaml(
    config: ServingConfig,
    model: ModelSpec,
    gpu: GPU,
    *,
    max_model_len: int,
    header: str = "",
    kv_capacity_tokens: int | None = None,
) -> str:
    """YAML for ``vllm serve --config FILE`` (dashed long option names, as vLLM documents)."""
    args, comments = vllm_engine_args(
        config, model, gpu, max_model_len=max_model_len, kv_capacity_tokens=kv_capacity_tokens
    )
    lines = [f"# vLLM engine configuration written by tuner for {config.gpu} x{config.num_gpus}."]
    lines.append("# Run: vllm serve --config THIS_FILE")
    lines += _comment_lines(header)
    for c in comments:
        lines += _comment_lines(f"NOTE: {c}")
    payload = json.dumps(config.to_dict(), sort_keys=True, separators=(",", ":"))
    lines.append(f"{CONFIG_COMMENT_PREFIX} {payload}")
    body = yaml.safe_dump(
        {k.replace("_", "-"): v for k, v in args.items()},
        sort_keys=False,
        default_flow_style=False,
        allow_unicode=True,
    )
    return "\n".join(lines) + "\n" + body


def _norm_key(key: Any) -> str:
    return str(key).strip().replace("_", "-")


def from_vllm_yaml(text: str, *, gpu: str) -> ServingConfig:
    """Parse a YAML written by :func:`to_vllm_yaml` back into a ServingConfig.

    Fields vLLM has no argument for come from the ``# tuner-config:`` line; the vLLM keys that
    map 1:1 (tp, dp, token budget, max-num-seqs, memory utilisation, block size) override it, so
    a hand-edited value wins. Without the line, the remaining fields are inferred where possible
    and default otherwise.
    """
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise TunerError(f"vLLM config is not valid YAML ({exc}).") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise TunerError("vLLM config must be a YAML mapping of option names to values.")
    data = {_norm_key(k): v for k, v in data.items()}

    base: dict[str, Any] = {}
    for line in text.splitlines():
        if line.startswith(CONFIG_COMMENT_PREFIX):
            try:
                base = json.loads(line[len(CONFIG_COMMENT_PREFIX):])
            except json.JSONDecodeError as exc:
                raise TunerError(f"Unreadable '{CONFIG_COMMENT_PREFIX}' line ({exc}).") from None
            if not isinstance(base, dict):
                raise TunerError(f"'{CONFIG_COMMENT_PREFIX}' line must hold a JSON object.")
            break
    had_comment = bool(base)

    for key, field in _DIRECT_KEYS.items():
        if key in data and data[key] is not None:
            base[field] = data[key]
    if not had_comment:
        if data.get("enable-chunked-prefill") is False:
            base["scheduler"] = "vllm-v0"
        kv = str(data.get("kv-cache-dtype") or "auto").lower()
        if kv.startswith("fp8"):
            base["kv_bits"] = 8
        quant = str(data.get("quantization") or "").lower()
        if quant.startswith(("awq", "gptq")):
            base["weight_bits"] = 4
        elif quant:
            base["weight_bits"] = 8
    base["gpu"] = gpu
    try:
        config = ServingConfig.from_dict(base)
    except TypeError as exc:
        raise TunerError(f"vLLM config does not describe a ServingConfig ({exc}).") from None
    return config.validate()


def _jsonable(obj: Any) -> Any:
    """Plain JSON types: numpy scalars/arrays unwrapped, non-finite floats -> None."""
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, bool) or obj is None or isinstance(obj, (int, str)):
        return obj
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, ServingConfig):
        return _jsonable(obj.to_dict())
    if isinstance(obj, Path):
        return str(obj)
    if hasattr(obj, "tolist"):  # numpy scalar or array
        return _jsonable(obj.tolist())
    return str(obj)


def to_json(
    config: ServingConfig,
    metrics: dict | None,
    memory: dict | None,
    extra: dict | None = None,
) -> str:
    """One result as JSON: the config (with num_gpus), every metric and the memory plan."""
    doc: dict[str, Any] = {
        "config": config.to_dict(),
        "num_gpus": config.num_gpus,
        "metrics": metrics,
        "memory": memory,
    }
    for key, value in (extra or {}).items():
        doc[key] = value
    return json.dumps(_jsonable(doc), indent=2, allow_nan=False) + "\n"


def write_atomic(path: str | Path, text: str) -> Path:
    """Write ``text`` to ``path`` via a temp file in the same folder and ``os.replace``: readers
    see the old file or the whole new one, and a failure leaves no partial file behind."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    mode = stat.S_IMODE(path.stat().st_mode) if path.exists() else 0o644
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.chmod(tmp, mode)  # mkstemp creates 0600; keep the usual permissions of a written file
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    return path


__all__ = [
    "CONFIG_COMMENT_PREFIX", "from_vllm_yaml", "to_json", "to_vllm_yaml", "vllm_engine_args",
    "write_atomic",
]
