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
- :func:`to_vllm_run_batch` -> a ``vllm run-batch -i INPUT.jsonl -o OUTPUT.jsonl --model ...``
  command line for an OpenAI Batch API JSONL; every engine argument is spelled out as its CLI
  option (``run-batch`` takes the same engine arguments as ``vllm serve``).
- :func:`sglang_server_args` / :func:`to_sglang_command` -> ``python -m sglang.launch_server``
  arguments (SGLang's documented server arguments: ``--model-path``, ``--tp-size``,
  ``--chunked-prefill-size``, ``--max-running-requests``, ``--kv-cache-dtype``,
  ``--mem-fraction-static``, ``--schedule-policy``, ``--cpu-offload-gb``...). Every option
  and value written was checked against SGLang's own parser (python/sglang/srt/server_args.py
  at sgl-project/sglang commit 001067ff, 2026): all exist, ``--cpu-offload-gb`` takes an int,
  and the lpm schedule policy turns to fcfs while more than 128 requests wait
  (schedule_policy.py). :data:`SGLANG_KNOWN_OPTIONS` lists what was checked.
- :func:`to_json` -> every figure of one result as JSON.
- :func:`render_export` / :func:`parse_export` -> any of :data:`EXPORT_FORMATS` and back: every
  export carries the ``# tuner-config:`` line (JSON: its ``config`` object), so it parses back to
  the exact ServingConfig.
"""

from __future__ import annotations

import json
import math
import re
import shlex
from typing import Any

import yaml

from tuner.core.catalog import GIB, GPU, ModelSpec
from tuner.core.config import ServingConfig
from tuner.core.errors import TunerError
from tuner.core.io import jsonable, write_atomic
from tuner.core.memory import plan_memory

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
    eviction-free schedulers; without it :func:`tuner.core.memory.plan_memory` estimates it.
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
    if getattr(config, "attention_on_cpu", False):
        comments.append(
            "attention_on_cpu: vLLM (GPU) has no CPU decode attention for offloaded KV layers; "
            "keep the KV on the GPU (lower max-num-seqs if it does not fit) or run the "
            "offloaded layers with an engine that has CPU attention. Expect a different makespan."
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


def _tuner_config_line(text: str) -> dict:
    """The JSON object of the ``# tuner-config:`` line ({} when there is none)."""
    for line in text.splitlines():
        line = line.strip()
        if line.startswith(CONFIG_COMMENT_PREFIX):
            try:
                base = json.loads(line[len(CONFIG_COMMENT_PREFIX):])
            except json.JSONDecodeError as exc:
                raise TunerError(f"Unreadable '{CONFIG_COMMENT_PREFIX}' line ({exc}).") from None
            if not isinstance(base, dict):
                raise TunerError(f"'{CONFIG_COMMENT_PREFIX}' line must hold a JSON object.")
            return base
    return {}


def _finish_config(base: dict, gpu: str | None, what: str) -> ServingConfig:
    if gpu is not None:
        base["gpu"] = gpu
    if not base.get("gpu"):
        raise TunerError(f"{what} does not say which GPU it is for (no '{CONFIG_COMMENT_PREFIX}' "
                         "line); pass the GPU type.")
    try:
        config = ServingConfig.from_dict(base)
    except TypeError as exc:
        raise TunerError(f"{what} does not describe a ServingConfig ({exc}).") from None
    return config.validate()


def _config_from_vllm_options(data: dict, text: str, gpu: str | None, what: str) -> ServingConfig:
    """ServingConfig from vLLM options (dashed names) plus the ``# tuner-config:`` line in text."""
    data = {_norm_key(k): v for k, v in data.items()}
    base = _tuner_config_line(text)
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
    return _finish_config(base, gpu, what)


def from_vllm_yaml(text: str, *, gpu: str | None = None) -> ServingConfig:
    """Parse a YAML written by :func:`to_vllm_yaml` back into a ServingConfig.

    Fields vLLM has no argument for come from the ``# tuner-config:`` line; the vLLM keys that
    map 1:1 (tp, dp, token budget, max-num-seqs, memory utilisation, block size) override it, so
    a hand-edited value wins. Without the line, the remaining fields are inferred where possible
    and default otherwise. ``gpu`` overrides the line's GPU (required without the line).
    """
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise TunerError(f"vLLM config is not valid YAML ({exc}).") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise TunerError("vLLM config must be a YAML mapping of option names to values.")
    return _config_from_vllm_options(data, text, gpu, "vLLM config")


# ---------------------------------------------------------------------------------------------
# Command lines (vllm run-batch, SGLang)

_CONTINUATION = " \\\n  "


def _scalar(value: str) -> Any:
    """A command-line value as YAML would type it ('16' -> 16, '0.9' -> 0.9, 'auto' -> 'auto')."""
    try:
        v = yaml.safe_load(value)
    except yaml.YAMLError:
        return value
    return v if isinstance(v, (int, float, str)) and not isinstance(v, bool) else value


def _command_tokens(text: str, marker: str, what: str) -> list[str]:
    """Tokens after ``marker`` of the command in ``text`` (comments dropped, \\-continued lines
    joined)."""
    body = []
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        body.append(stripped[:-1] if stripped.endswith("\\") else stripped)
    try:
        tokens = shlex.split(" ".join(body))
    except ValueError as exc:
        raise TunerError(f"{what} is not a valid shell command line ({exc}).") from None
    if marker not in tokens:
        raise TunerError(f"{what} has no '{marker}' command.")
    return tokens[tokens.index(marker) + 1:]


_OPTION = re.compile(r"^--?[A-Za-z]")


def _parse_options(tokens: list[str], what: str) -> dict[str, Any]:
    """``--key value`` -> {key: value}; a bare ``--flag`` -> True; ``--no-flag`` -> {flag: False}.
    Keys are returned without the leading dashes."""
    out: dict[str, Any] = {}
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        if not _OPTION.match(tok):
            raise TunerError(f"{what}: unexpected argument {tok!r}.")
        key, eq, val = tok.lstrip("-").partition("=")
        if eq:
            out[key] = _scalar(val)
            i += 1
        elif i + 1 < len(tokens) and not _OPTION.match(tokens[i + 1]):
            out[key] = _scalar(tokens[i + 1])
            i += 2
        elif key.startswith("no-"):
            out[key[3:]] = False
            i += 1
        else:
            out[key] = True
            i += 1
    return out


def _cli_tokens(options: list[tuple[str, Any]]) -> list[str]:
    """[(dashed name, value)] -> ['--name', 'value', ...]; True -> bare flag, False -> --no-name."""
    tokens = []
    for key, value in options:
        if value is True:
            tokens.append(f"--{key}")
        elif value is False:
            tokens.append(f"--no-{key}")
        else:
            tokens += [f"--{key}", shlex.quote(str(value))]
    return tokens


def _command_text(head: list[str], prog: str, options: list[str]) -> str:
    """Comment lines, then the command with one option (and its value) per line."""
    lines = list(head)
    parts, i = [], 0
    while i < len(options):
        if i + 1 < len(options) and not options[i + 1].startswith("--"):
            parts.append(f"{options[i]} {options[i + 1]}")
            i += 2
        else:
            parts.append(options[i])
            i += 1
    lines.append(_CONTINUATION.join([prog, *parts]))
    return "\n".join(lines) + "\n"


def vllm_cli_options(args: dict[str, Any]) -> list[tuple[str, Any]]:
    """vLLM engine args (snake_case) as [(dashed CLI option, value)], in the same order."""
    return [(k.replace("_", "-"), v) for k, v in args.items()]


def to_vllm_run_batch(
    config: ServingConfig,
    model: ModelSpec,
    gpu: GPU,
    *,
    max_model_len: int,
    input_path: str = "INPUT.jsonl",
    output_path: str = "OUTPUT.jsonl",
    served_model_name: str | None = None,
    header: str = "",
    kv_capacity_tokens: int | None = None,
) -> str:
    """A ``vllm run-batch`` command line for an OpenAI Batch API JSONL, with every engine argument.

    ``served_model_name``: the ``body.model`` the batch's requests name, when it differs from the
    checkpoint id (vLLM answers only requests for a model it serves).
    """
    args, comments = vllm_engine_args(
        config, model, gpu, max_model_len=max_model_len, kv_capacity_tokens=kv_capacity_tokens
    )
    head = [f"# vLLM offline batch run written by tuner for {config.gpu} x{config.num_gpus}.",
            "# Input: OpenAI Batch API JSONL (custom_id, method, url, body), one request a line;",
            "# results go to the output JSONL in the same order."]
    head += _comment_lines(header)
    for c in comments:
        head += _comment_lines(f"NOTE: {c}")
    payload = json.dumps(config.to_dict(), sort_keys=True, separators=(",", ":"))
    head.append(f"{CONFIG_COMMENT_PREFIX} {payload}")
    options = [("model", args.pop("model"))]
    if served_model_name and served_model_name != options[0][1]:
        options.append(("served-model-name", served_model_name))
    options += vllm_cli_options(args)
    prog = f"vllm run-batch -i {shlex.quote(input_path)} -o {shlex.quote(output_path)}"
    return _command_text(head, prog, _cli_tokens(options))


def from_vllm_run_batch(text: str, *, gpu: str | None = None) -> ServingConfig:
    """Parse a command written by :func:`to_vllm_run_batch` back into a ServingConfig (the vLLM
    options that map 1:1 override the ``# tuner-config:`` line, as in :func:`from_vllm_yaml`)."""
    what = "vllm run-batch command"
    opts = _parse_options(_command_tokens(text, "run-batch", what), what)
    for short in ("i", "o", "input-file", "output-file"):
        opts.pop(short, None)
    return _config_from_vllm_options(opts, text, gpu, what)


# SGLang ------------------------------------------------------------------------------------

#: ServingConfig.ordering -> SGLang --schedule-policy, where SGLang has an equivalent: ``lof`` is
#: SGLang's longest-output-first, ``lpm`` its longest-prefix-match (prefix-aware) order.
SGLANG_SCHEDULE_POLICY = {"fcfs": "fcfs", "longest-output": "lof", "blend": "lpm"}
_SGLANG_ORDERING = {v: k for k, v in SGLANG_SCHEDULE_POLICY.items()}
# SGLang options that map 1:1 onto a ServingConfig field (option -> field).
_SGLANG_DIRECT = {
    "tp-size": "tp",
    "dp-size": "dp",
    "max-running-requests": "max_running",
    "mem-fraction-static": "gpu_memory_utilization",
    "page-size": "block_size",
}
#: The options this module writes, each checked against SGLang's parser (see module docstring);
#: tests keep the writer within it, so a new option is checked before it ships.
SGLANG_KNOWN_OPTIONS = frozenset({
    "model-path", "tp-size", "dp-size", "chunked-prefill-size", "max-prefill-tokens",
    "enable-mixed-chunk", "max-running-requests", "mem-fraction-static", "page-size",
    "context-length", "kv-cache-dtype", "quantization", "cpu-offload-gb", "schedule-policy",
})
_SGLANG_ALIASES = {"tp": "tp-size", "tensor-parallel-size": "tp-size",
                   "dp": "dp-size", "data-parallel-size": "dp-size", "model": "model-path"}


def sglang_server_args(
    config: ServingConfig,
    model: ModelSpec,
    gpu: GPU,
    *,
    max_model_len: int,
    kv_capacity_tokens: int | None = None,
) -> tuple[list[tuple[str, Any]], list[str]]:
    """SGLang ``launch_server`` options [(dashed name, value)] (True: a bare flag) and comment
    lines for what SGLang lacks, following SGLang's documented server arguments."""
    config.validate()
    if max_model_len < 1:
        raise TunerError(f"max_model_len must be positive, got {max_model_len}.")
    opts: list[tuple[str, Any]] = [("model-path", model.hf_id or model.name)]
    comments: list[str] = []
    if not model.hf_id:
        comments.append(
            f"model-path: {model.name!r} has no Hugging Face id in the catalog; replace it with "
            "the checkpoint's repo id or local path."
        )
    opts.append(("tp-size", config.tp))
    if config.dp > 1:
        opts.append(("dp-size", config.dp))
    chunked = not config.scheduler.startswith("vllm-v0")
    if chunked:
        # P = C: the prefill chunk and the step's prefill budget are the token budget.
        opts.append(("chunked-prefill-size", config.chunk_size))
        opts.append(("max-prefill-tokens", config.chunk_size))
        # vLLM/Sarathi put decodes and a prefill chunk into one step; SGLang does with this flag.
        opts.append(("enable-mixed-chunk", True))
    else:
        opts.append(("chunked-prefill-size", -1))  # -1: chunked prefill off (prefill-first)
        if config.chunk_size < max_model_len:
            comments.append(
                f"scheduler {config.scheduler!r}: the predicted prefill budget is "
                f"{config.chunk_size} tokens but SGLang raises max-prefill-tokens to the context "
                f"length ({max_model_len}); expect larger prefill batches than predicted."
            )
        else:
            opts.append(("max-prefill-tokens", config.chunk_size))
    opts.append(("max-running-requests", config.max_running))
    opts.append(("mem-fraction-static", config.gpu_memory_utilization))
    opts.append(("page-size", config.block_size))
    opts.append(("context-length", max_model_len))

    if config.kv_bits == 16:
        opts.append(("kv-cache-dtype", "auto"))
    elif config.kv_bits == 8:
        opts.append(("kv-cache-dtype", "fp8_e4m3"))
    else:
        comments.append(
            "kv_bits=4: SGLang's 4-bit KV cache (kv-cache-dtype fp4_mx_block16; fp4_e2m1 in "
            "older releases, rejected by newer ones) needs a recent GPU, CUDA and attention "
            "backend; otherwise use --kv-cache-dtype fp8_e4m3 (half the predicted KV capacity)."
        )
    if config.weight_bits == 8:
        if gpu.fp8_tflops:
            opts.append(("quantization", "fp8"))
        else:
            comments.append(
                f"weight_bits=8: {gpu.name} has no FP8 tensor cores; serve an INT8 checkpoint "
                "(e.g. --quantization w8a8_int8 with a compressed-tensors W8A8 model) as "
                "--model-path."
            )
    elif config.weight_bits == 4:
        comments.append(
            "weight_bits=4: serve a 4-bit AWQ/GPTQ checkpoint as --model-path; SGLang reads the "
            "method from its config (awq_marlin/gptq_marlin kernels)."
        )
    if config.weight_offload_fraction > 0:
        gib = config.weight_offload_fraction * model.weight_bytes(config.weight_bits) / config.tp
        opts.append(("cpu-offload-gb", max(1, math.ceil(gib / GIB - 1e-9))))
    if config.kv_offload_layers > 0:
        comments.append(
            f"kv_offload_layers={config.kv_offload_layers}: SGLang has no layer-wise KV offload; "
            "its hierarchical cache (--enable-hierarchical-cache) keeps evicted prefixes in host "
            "memory but does not extend the running batch's KV. Expect a different makespan."
        )
    if getattr(config, "attention_on_cpu", False):
        comments.append(
            "attention_on_cpu: SGLang has no CPU decode attention for offloaded KV layers; keep "
            "the KV on the GPU (lower --max-running-requests if it does not fit). Expect a "
            "different makespan."
        )
    if config.cpu_threads_intra > 0 or config.cpu_threads_inter > 0:
        comments.append(
            f"cpu_threads intra={config.cpu_threads_intra} inter={config.cpu_threads_inter}: "
            "SGLang has no server argument for CPU threads; set OMP_NUM_THREADS="
            f"{config.cpu_threads_intra or 'N'} in the environment (intra-op). There is no "
            "inter-op setting."
        )
    policy = SGLANG_SCHEDULE_POLICY.get(config.ordering)
    opts.append(("schedule-policy", policy or "fcfs"))
    if policy is None:
        how = _ORDERING_HOWTO.get(config.ordering, config.ordering)
        comments.append(
            f"ordering {config.ordering!r}: SGLang has no such schedule policy; sort the input "
            f"in that order ({how}) and submit it in order (schedule-policy fcfs)."
        )
    elif policy == "lpm":
        comments.append(
            "ordering 'blend': schedule-policy lpm (longest prefix match) groups requests that "
            "share a prefix, but SGLang falls back to fcfs while more than 128 requests wait; "
            "also submit the input sorted so that requests sharing a prefix are adjacent."
        )
    if config.eviction_free:
        cap = kv_capacity_tokens
        if cap is None:
            cap = plan_memory(model, gpu, config).kv_capacity_tokens
        fits = cap // max_model_len
        comments.append(
            f"scheduler {config.scheduler!r} is eviction-free: SGLang retracts requests when the "
            f"KV pool is full; set --max-running-requests <= {max(fits, 1)} (~{cap} KV tokens / "
            f"context length {max_model_len}) or raise --schedule-conservativeness so the batch "
            "always fits."
        )
    return opts, comments


def to_sglang_command(
    config: ServingConfig,
    model: ModelSpec,
    gpu: GPU,
    *,
    max_model_len: int,
    header: str = "",
    kv_capacity_tokens: int | None = None,
) -> str:
    """``python -m sglang.launch_server`` with every server argument, comments on top."""
    opts, comments = sglang_server_args(config, model, gpu, max_model_len=max_model_len,
                                        kv_capacity_tokens=kv_capacity_tokens)
    head = [f"# SGLang server launch written by tuner for {config.gpu} x{config.num_gpus}.",
            "# Then submit the batch JSONL through its OpenAI-compatible API (port 30000), e.g.",
            "# the Batch API (/v1/files, /v1/batches) or an OpenAI client over the file's bodies."]
    head += _comment_lines(header)
    for c in comments:
        head += _comment_lines(f"NOTE: {c}")
    payload = json.dumps(config.to_dict(), sort_keys=True, separators=(",", ":"))
    head.append(f"{CONFIG_COMMENT_PREFIX} {payload}")
    return _command_text(head, "python -m sglang.launch_server", _cli_tokens(opts))


def from_sglang_command(text: str, *, gpu: str | None = None) -> ServingConfig:
    """Parse a command written by :func:`to_sglang_command` back into a ServingConfig. Options
    that map 1:1 (tp, dp, max-running-requests, mem-fraction-static, page-size, a chunked-prefill
    size) override the ``# tuner-config:`` line; without the line the rest is inferred."""
    what = "SGLang launch command"
    raw = _parse_options(_command_tokens(text, "sglang.launch_server", what), what)
    opts = {_SGLANG_ALIASES.get(k, k): v for k, v in raw.items()}
    base = _tuner_config_line(text)
    had_comment = bool(base)
    for key, field in _SGLANG_DIRECT.items():
        if opts.get(key) is not None:
            base[field] = opts[key]
    chunk = opts.get("chunked-prefill-size")
    if isinstance(chunk, int) and chunk > 0:
        base["chunk_size"] = chunk
    if not had_comment:
        if isinstance(chunk, int) and chunk < 0:
            base["scheduler"] = "vllm-v0"
            if isinstance(opts.get("max-prefill-tokens"), int):
                base["chunk_size"] = opts["max-prefill-tokens"]
        if str(opts.get("kv-cache-dtype") or "auto").lower().startswith("fp8"):
            base["kv_bits"] = 8
        elif str(opts.get("kv-cache-dtype") or "").lower().startswith("fp4"):
            base["kv_bits"] = 4
        quant = str(opts.get("quantization") or "").lower()
        if quant.startswith(("awq", "gptq")):
            base["weight_bits"] = 4
        elif quant:
            base["weight_bits"] = 8
        policy = str(opts.get("schedule-policy") or "fcfs")
        if policy in _SGLANG_ORDERING:
            base["ordering"] = _SGLANG_ORDERING[policy]
    return _finish_config(base, gpu, what)


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
    return json.dumps(jsonable(doc), indent=2, allow_nan=False) + "\n"


def from_json(text: str, *, gpu: str | None = None) -> ServingConfig:
    """The ServingConfig of a document written by :func:`to_json`."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise TunerError(f"Export is not valid JSON ({exc}).") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("config"), dict):
        raise TunerError("JSON export has no 'config' object.")
    return _finish_config(dict(doc["config"]), gpu, "JSON export")


#: Formats of ``tuner export --format``.
EXPORT_FORMATS = ("vllm", "vllm-run-batch", "sglang", "json")
#: File name suffix of each format.
EXPORT_SUFFIX = {"vllm": ".vllm.yaml", "vllm-run-batch": ".vllm-run-batch.sh",
                 "sglang": ".sglang.sh", "json": ".json"}


def render_export(
    fmt: str,
    config: ServingConfig,
    model: ModelSpec,
    gpu: GPU,
    *,
    max_model_len: int,
    header: str = "",
    kv_capacity_tokens: int | None = None,
    metrics: dict | None = None,
    memory: dict | None = None,
    extra: dict | None = None,
    input_path: str = "INPUT.jsonl",
    output_path: str = "OUTPUT.jsonl",
    served_model_name: str | None = None,
) -> str:
    """One export of ``config`` in ``fmt`` (one of :data:`EXPORT_FORMATS`)."""
    if fmt == "vllm":
        return to_vllm_yaml(config, model, gpu, max_model_len=max_model_len, header=header,
                            kv_capacity_tokens=kv_capacity_tokens)
    if fmt == "vllm-run-batch":
        return to_vllm_run_batch(config, model, gpu, max_model_len=max_model_len, header=header,
                                 kv_capacity_tokens=kv_capacity_tokens, input_path=input_path,
                                 output_path=output_path, served_model_name=served_model_name)
    if fmt == "sglang":
        return to_sglang_command(config, model, gpu, max_model_len=max_model_len, header=header,
                                 kv_capacity_tokens=kv_capacity_tokens)
    if fmt == "json":
        vargs, vnotes = vllm_engine_args(config, model, gpu, max_model_len=max_model_len,
                                         kv_capacity_tokens=kv_capacity_tokens)
        sopts, snotes = sglang_server_args(config, model, gpu, max_model_len=max_model_len,
                                           kv_capacity_tokens=kv_capacity_tokens)
        doc = {
            "model": {"name": model.name, "hf_id": model.hf_id},
            "gpu": {"name": gpu.name, "price_usd_per_h": gpu.price_usd_per_h,
                    "memory_gib": gpu.memory_gib},
            "max_model_len": max_model_len,
            **(extra or {}),
            "vllm": {"engine_args": vargs, "notes": vnotes},
            "sglang": {"server_args": dict(sopts), "notes": snotes},
        }
        if header:
            doc["summary"] = header
        return to_json(config, metrics, memory, doc)
    raise TunerError(f"Unknown export format {fmt!r}; choose one of {', '.join(EXPORT_FORMATS)}.")


def parse_export(fmt: str, text: str, *, gpu: str | None = None) -> ServingConfig:
    """The ServingConfig an export of format ``fmt`` describes (inverse of
    :func:`render_export`)."""
    if fmt == "vllm":
        return from_vllm_yaml(text, gpu=gpu)
    if fmt == "vllm-run-batch":
        return from_vllm_run_batch(text, gpu=gpu)
    if fmt == "sglang":
        return from_sglang_command(text, gpu=gpu)
    if fmt == "json":
        return from_json(text, gpu=gpu)
    raise TunerError(f"Unknown export format {fmt!r}; choose one of {', '.join(EXPORT_FORMATS)}.")


__all__ = [
    "CONFIG_COMMENT_PREFIX", "EXPORT_FORMATS", "EXPORT_SUFFIX", "SGLANG_SCHEDULE_POLICY",
    "from_json", "from_sglang_command", "from_vllm_run_batch", "from_vllm_yaml", "parse_export",
    "render_export", "sglang_server_args", "to_json", "to_sglang_command", "to_vllm_run_batch",
    "to_vllm_yaml", "vllm_cli_options", "vllm_engine_args", "write_atomic",
]
