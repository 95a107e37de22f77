"""vLLM exports: engine arguments, ``vllm serve --config`` YAML and a ``vllm run-batch`` command.

The arguments come from ServingConfig's field metadata (:mod:`tuner.core.config`); every knob
vLLM has no argument for becomes a note (a comment line) saying what to do instead, so a knob is
never dropped silently.

- :func:`vllm_engine_args` -> ``(args, notes)``: vLLM (V1) ``EngineArgs`` keyword arguments
  (snake_case, usable as ``vllm.LLM(**args)``) and the notes.
- :func:`to_vllm_yaml` -> text for ``vllm serve --config FILE``. vLLM documents that the keys are
  the long CLI option names (``tensor-parallel-size: 4``; docs.vllm.ai "Server Arguments" ->
  "Configuration file"); its loader turns ``key: true`` into ``--key`` and ``key: false`` into
  ``--no-key``. Notes go on top as ``# ...`` lines, followed by one machine-readable
  ``# tuner-config: {json}`` line so :func:`from_vllm_yaml` restores the exact ServingConfig.
- :func:`to_vllm_run_batch` -> a ``vllm run-batch -i INPUT.jsonl -o OUTPUT.jsonl --model ...``
  command line for an OpenAI Batch API JSONL; every engine argument is spelled out as its CLI
  option (``run-batch`` takes the same engine arguments as ``vllm serve``); releases before
  the subcommand (RUN_BATCH_CLI_SINCE) get ``python -m vllm.entrypoints.openai.run_batch``.
"""

from __future__ import annotations

import json
import math
import shlex
from typing import Any

import yaml

from tuner.core.catalog import GIB, GPU, ModelSpec
from tuner.core.config import ServingConfig, check_model_config
from tuner.core.engines import moe_replicas_note
from tuner.core.errors import TunerError
from tuner.core.memory import plan_memory, vllm_text_only_limits
from tuner.core.units import plural
from tuner.exports import common

#: Releases whose differences the vLLM exports follow (each checked in vLLM's source or threads):
#: `model:` in a `vllm serve --config` file, as vLLM's parser reads it (the PyPI wheels):
#: 0.6.0 - 0.8.2 turn it into `--model`, which their `vllm serve` refuses ("you should provide
#: the model as a positional argument instead of via the `--model` option": vllm/scripts.py,
#: then vllm/entrypoints/cli/serve.py); 0.8.3 takes it (vllm-project/vllm#15798), the serve
#: line's positional model winning; 0.9.0 and 0.9.0.1 leave --model out of the serve parser
#: (vllm-project/vllm#17944), so the file's `--model` is an ambiguous prefix of --model-impl and
#: friends, refused; 0.9.1 puts it back (vllm-project/vllm#18999). For those releases the file
#: names no model (the serve line gives it positionally, as every release takes it)
MODEL_IN_CONFIG_SINCE = (0, 8, 3)
MODEL_IN_CONFIG_REFUSED = ((0, 9, 0), (0, 9, 1))  # [from, to): 0.9.0 and 0.9.0.1
#: the `vllm run-batch` subcommand arrived with vllm-project/vllm#18804 in 0.9.1 (the 0.9.0 and
#: 0.9.0.1 wheels have no vllm/entrypoints/cli/run_batch.py, 0.9.1's has it); before it the same
#: entry point runs as `python -m vllm.entrypoints.openai.run_batch` (vllm-project/vllm#4794,
#: 0.4.3 on), which tuner writes for those releases
RUN_BATCH_CLI_SINCE = (0, 9, 1)
RUN_BATCH_MODULE = "vllm.entrypoints.openai.run_batch"
#: the request log is opt-in from 0.10.1 (--enable-log-requests, vllm-project/vllm#21739): the
#: 0.10.1 wheel's AsyncEngineArgs has enable_log_requests = False and its api_server.py builds a
#: RequestLogger only when it is set; 0.10.0's has disable_log_requests = False, logging by
#: default. Every earlier release, V0 and V1, logs each request unless given --disable-log-requests
REQUEST_LOG_OPT_IN_SINCE = (0, 10, 1)


#: An FP8 (any non-auto) KV cache sends vLLM 0.8.0 - 0.10.2 back to its V0 engine where the V1
#: engine's oracle (EngineArgs._is_v1_supported_oracle, "No Fp8 KV cache so far") finds no V1
#: backend for it, as the wheels read: 0.8.0 and 0.8.1 on every GPU; from 0.8.2 not where
#: FlashAttention 3 serves it (flash_attn_supports_fp8: Hopper); from 0.10.0 not on compute
#: capability 10.0 either (CudaPlatform.is_kv_cache_dtype_supported: B200 / GB200; B300 is 10.3);
#: in 0.10.2 not for an MLA model (FlashMLA / CUTLASS MLA take it). The 0.11.0 wheel's oracle no
#: longer looks at the cache (no V0 left)
V1_FP8_KV_FALLBACK_UNTIL = (0, 11, 0)
FP8_KV_FA3_SINCE = (0, 8, 2)  # the 0.8.2 wheel's oracle asks flash_attn_supports_fp8; 0.8.1's not
FP8_KV_SM100_SINCE = (0, 10, 0)  # the 0.10.0 wheel's cuda.py is_kv_cache_dtype_supported
FP8_KV_MLA_SINCE = (0, 10, 2)  # the 0.10.2 wheel's is_kv_cache_dtype_supported has an MLA branch
#: catalog GPUs of compute capability 10.0 (is_device_capability(100))
SM100_GPUS = frozenset({"B200", "GB200"})


def _before(engine_version: str | None, since: tuple[int, int, int]) -> bool:
    """Whether release `engine_version` (None: the newest) is older than `since`."""
    from tuner.core.engines import parse_version

    version = parse_version(engine_version)
    return version is not None and version < since


def fp8_kv_falls_back_to_v0(engine_version: str | None, gpu: GPU, model: ModelSpec) -> bool:
    """Whether vLLM `engine_version` runs an FP8 KV cache on `gpu` in its V0 engine rather than
    the V1 engine priced (V1_FP8_KV_FALLBACK_UNTIL and the rules above it). A GPU of no stated
    architecture (AMD) falls back only where every GPU does (0.8.0, 0.8.1)."""
    if _before(engine_version, (0, 8, 0)) or not _before(engine_version,
                                                          V1_FP8_KV_FALLBACK_UNTIL):
        return False
    if _before(engine_version, FP8_KV_FA3_SINCE):
        return True
    if gpu.architecture in (None, "hopper"):
        return False
    if not _before(engine_version, FP8_KV_SM100_SINCE) and gpu.name in SM100_GPUS:
        return False
    return not (getattr(model, "is_mla", False)
                and not _before(engine_version, FP8_KV_MLA_SINCE))


def _model_in_config_refused(engine_version: str | None) -> bool:
    """Whether release `engine_version` reads --config files (CONFIG_FILE_SINCE) and refuses a
    model named in one (MODEL_IN_CONFIG_SINCE, MODEL_IN_CONFIG_REFUSED)."""
    if _before(engine_version, CONFIG_FILE_SINCE):
        return False
    start, end = MODEL_IN_CONFIG_REFUSED
    return _before(engine_version, MODEL_IN_CONFIG_SINCE) or (
        not _before(engine_version, start) and _before(engine_version, end))


def is_v0(engine_version: str | None, num_scheduler_steps: int | None = None) -> bool:
    """Whether the plan runs a V0 release (0.5 - 0.7, tuner.core.engines.GENERATIONS), whose
    parser has no ``--no-X`` flags: multi-step priced, or the release's generation is V0
    (0.5.0 - 0.5.4 have no multi-step, and are V0 all the same)."""
    from tuner.core.engines import generation_of

    return (num_scheduler_steps is not None
            or generation_of(engine_version).generation.key == "v0")


# The order the YAML and the command line list the arguments in.
_ARG_ORDER = ("model", "tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size",
              "enable_expert_parallel", "max_num_batched_tokens",
              "max_num_seqs", "enable_chunked_prefill", "gpu_memory_utilization", "block_size",
              "max_model_len", "kv_cache_dtype", "quantization", "cpu_offload_gb",
              "limit_mm_per_prompt", "num_scheduler_steps")


# ---- notes: what vLLM cannot be told, in the order the file lists them -------------------------
def _eviction_note(dep: common.Deployment) -> str:
    c = dep.config
    cap, basis = dep.kv_capacity()
    mml = dep.max_model_len
    fits = cap // mml
    if fits < 1:
        advice = (f"not even one max-model-len request fits in the KV cache (~{cap} tokens, "
                  f"{basis}); lower max-model-len.")
    elif fits >= c.max_running:
        advice = (f"max-num-seqs {c.max_running} already fits ({fits} max-model-len requests "
                  f"fit in ~{cap} KV tokens, {basis}).")
    else:
        advice = (f"set max-num-seqs <= {fits} (~{cap} KV tokens / max-model-len {mml}, "
                  f"{basis}) so the batch always fits; the prediction used {c.max_running}.")
    return (f"scheduler {c.scheduler!r} is eviction-free: vLLM always preempts by recompute "
            f"when the KV cache runs out; {advice}")


_NOTES: dict[str, common.NoteText] = {
    "model_id": lambda dep: common.model_id_note(dep, "model"),
    "moe_replicas": lambda dep: (
        f"{moe_replicas_note(dep.config.dp)}: vLLM {dep.engine_version} runs dp={dep.config.dp}"
        f" of {dep.model.name} as {dep.config.dp} engines of "
        f"{plural(dep.config.tp, 'GPU')} each, as predicted (no --data-parallel-size, no "
        "split experts)."),
    "prefill_budget": (
        "scheduler {c.scheduler!r}: with chunked prefill off vLLM requires "
        "max-num-batched-tokens >= max-model-len ({c.chunk_size} < {mml}); raise "
        "max-num-batched-tokens or lower max-model-len."),
    "kv_bits_4": (
        "kv_bits=4: tuner maps no vLLM kv_cache_dtype to a 4-bit KV cache; use kv-cache-dtype: "
        "fp8 instead (half the predicted KV capacity, so expect fewer concurrent requests)."),
    "kv_bits_8": (
        "kv_bits=8: vLLM's FlashAttention has no FP8 KV cache on {gpu.name} (sm_90 and sm_100 "
        "only), so vLLM runs another attention backend (FlashInfer), for which the predicted "
        "FP8-KV decode attention is an estimate; the k/v scales are 1.0 unless the checkpoint "
        "carries calibrated ones, and output quality is not simulated."),
    "weight_bits_8": (
        "weight_bits=8: {gpu.name} has no FP8 tensor cores: vLLM runs the online FP8 "
        "quantization there as weight-only FP8 through its Marlin kernels (W8A16: 8-bit weight "
        "bytes at the 16-bit compute rate, as predicted); an INT8 (W8A16) checkpoint, e.g. "
        "GPTQ/compressed-tensors, given with --quantized-model serves as well. Output quality "
        "is not simulated."),
    "weight_bits_4": (
        "weight_bits=4: use a 4-bit AWQ/GPTQ checkpoint of the model; vLLM picks "
        "awq_marlin/gptq_marlin."),
    # V1 preempts by recompute only: no swap space (--swap-space is gone from EngineArgs); its
    # CPU KV offloading (vllm/config/cache.py kv_offloading_size / kv_offloading_backend, read
    # in 0.32) arrived after RFC vllm-project/vllm#26858 (October 2025) and LMCache's
    # quickstart used it with the release of November 2025, 0.11.1; `native` is the default
    # backend from 0.14 (vllm-project/vllm#32421), so both flags are named
    "kv_offload": (
        "kv_offload_layers={c.kv_offload_layers}: vLLM has no layer-wise KV offload, and V1 "
        "no swap space (it preempts by recompute); the nearest is its CPU KV offloading "
        "(vLLM >= 0.11.1: --kv-offloading-size GIB --kv-offloading-backend native|lmcache), "
        "which keeps evicted prefix blocks in host memory rather than the running batch's KV. "
        "Expect a different makespan than predicted."),
    "attention_on_cpu": (
        "attention_on_cpu: vLLM (GPU) has no CPU decode attention for offloaded "
        "KV layers; keep the KV on the GPU (lower max-num-seqs if it does not fit) or run the "
        "offloaded layers with an engine that has CPU attention. Expect a different makespan."),
    "cpu_threads": lambda dep: common.cpu_threads_note(dep, "vLLM has no engine argument"),
    "cpu_threads_unused": common.cpu_threads_unused_note,
    "eviction_free": _eviction_note,
    "ordering": (
        "ordering {c.ordering!r}: vLLM processes offline requests in submission order; "
        "sort the input JSONL in that order ({howto}) before running."),
}


def _hybrid_block_note(config: ServingConfig, model: ModelSpec, gpu: GPU,
                       engine_version: str | None = None) -> list[str]:
    """A hybrid's (Gated DeltaNet, Mamba2) block-size as vLLM runs it: the block-size
    exported is the plan's, and vLLM raises it (a user-given one too: platforms/interface.py
    _align_hybrid_block_size, 0.32) until one attention page holds a layer's recurrent state,
    as the memory plan does (tuner.core.memory.hybrid_layout); said, so vLLM's log line is no
    surprise. [] where the plan keeps the block (or does not fit). `engine_version`: the
    release planned (a Nemotron-H's state width depends on it: memory.vllm_ssm_state_bits)."""
    block = plan_memory(model, gpu, config, engine_version=engine_version).block_size_tokens
    if not block or block == config.block_size:
        return []
    return [f"block-size {config.block_size}: {model.name} is a {model.linear_mixer_label} "
            f"hybrid, so vLLM raises its attention block to {block} tokens (it logs \"Setting "
            f"attention block size to {block} tokens\") for one page to hold a layer's recurrent state; the "
            "prediction was simulated with that block"]


def vllm_engine_args(config: ServingConfig, model: ModelSpec, gpu: GPU, *, max_model_len: int,
                     kv_capacity_tokens: int | None = None,
                     quantized_model: str | None = None,
                     num_scheduler_steps: int | None = None,
                     engine_version: str | None = None) -> tuple[dict[str, Any], list[str]]:
    """vLLM (V1) engine arguments for ``config`` plus notes for what vLLM lacks.

    ``kv_capacity_tokens`` (per replica, from the search's memory plan) is used in the advice for
    eviction-free schedulers; without it :func:`tuner.core.memory.plan_memory` estimates it.
    ``enable_expert_parallel`` (mixture-of-experts models only) splits whole experts over the
    tensor x data parallel GPUs (vLLM's default all2all backend, allgather_reducescatter).
    ``engine_version``: the release the plan is for (None: the newest), which spells online
    FP8 quantization (:func:`tuner.exports.common.online_fp8_method`).
    """
    if config.engine != "vllm":
        raise TunerError(f"This plan was simulated for {config.engine}, not vLLM: export it with "
                         f"{config.engine}'s formats (tuner export --format sglang | "
                         "sglang-offline).")
    check_model_config(config, model)
    dep = common.Deployment(config, model, gpu, max_model_len, kv_capacity_tokens,
                            quantized_model, num_scheduler_steps,
                            engine_version=engine_version)
    args = common.mapped_args(config, "vllm")
    args |= {"model": dep.checkpoint, "max_model_len": max_model_len}
    if "cpu_offload_gb" in args:  # per GPU, rounded up to 0.1 GiB
        args["cpu_offload_gb"] = round(math.ceil(dep.offload_gib_per_gpu * 10.0 - 1e-9) / 10.0, 1)
    if args.get("quantization") == "fp8" and model.checkpoint_bits != 8:
        # a 16-bit checkpoint quantized as it loads, on every GPU (W8A16 through Marlin
        # without FP8 tensor cores), spelled as the release takes it; an FP8 checkpoint's own
        # `fp8` is read from it in every release
        args["quantization"] = common.online_fp8_method(
            engine_version, v0=num_scheduler_steps is not None)
    notes = dep.quantized_checkpoint_notes(args, common.notes_for(dep, _NOTES), "model", "vLLM")
    if config.kv_bits == 8 and fp8_kv_falls_back_to_v0(engine_version, gpu, model):
        notes.append(f"kv_cache_dtype fp8: vLLM {engine_version}'s V1 engine has no FP8 KV "
                     f"cache on {gpu.name} (EngineArgs._is_v1_supported_oracle), so it falls "
                     "back to the V0 engine, not the V1 engine priced: run it with "
                     "VLLM_USE_V1=1 to have it refuse instead, or export a 16-bit KV plan")
    if model.is_hybrid:
        notes += _hybrid_block_note(config, model, gpu, engine_version)
    limits = vllm_text_only_limits(model, engine_version)
    if limits:  # a VLM on a release that then skips its vision tower, as the plan assumed
        args["limit_mm_per_prompt"] = limits
        notes.append(f"limit_mm_per_prompt {json.dumps(limits)}: the job is text-only, so "
                     f"vLLM skips building {model.name}'s vision tower and the memory plan "
                     "does not count it; to send images drop it, and the tower's "
                     f"{model.vision_weight_bytes / config.tp / GIB:.1f} GiB per GPU come out "
                     "of the KV cache")
    if num_scheduler_steps is not None:  # a V0 engine (0.5.5 - 0.7), run as it was priced
        args["num_scheduler_steps"] = num_scheduler_steps
        notes.append(f"num_scheduler_steps={num_scheduler_steps}: vLLM V0's multi-step "
                     "scheduling, as the prediction assumed (V1 engines have no such option)")
    return common.in_order(args, _ARG_ORDER), notes


def vllm_cli_options(args: dict[str, Any], *, v0: bool = False) -> list[tuple[str, Any]]:
    """vLLM engine args (snake_case) as [(dashed CLI option, value)], in the same order.
    ``v0``: for a V0 release's parser (0.5 - 0.7, :func:`is_v0`), which has no ``--no-X`` form:
    --enable-chunked-prefill is a StoreBoolean taking "False", its other flags are store_true
    (False is their default: left out)."""
    out = []
    for k, v in args.items():
        if v0 and v is False:
            if k != "enable_chunked_prefill":
                continue
            v = "False"
        if isinstance(v, dict):  # a dict-typed option (--limit-mm-per-prompt) takes JSON
            v = json.dumps(v)
        out.append((k.replace("_", "-"), v))
    return out


def v0_server_flags(args: dict[str, Any], num_scheduler_steps: int | None,
                    disable_log_requests: bool, engine_version: str | None = None) -> bool:
    """An API server the search was told ran without its request log (--disable-log-requests)
    starts so where the release has that log on by default: every release before 0.10.1
    (REQUEST_LOG_OPT_IN_SINCE), V0 (a multi-step one, or `engine_version` V0) and V1 alike.
    Returns whether the flag was added."""
    if disable_log_requests and (num_scheduler_steps is not None or _before(
            engine_version, REQUEST_LOG_OPT_IN_SINCE)):
        args["disable_log_requests"] = True
        return True
    return False


def _replica_lines(dep: common.Deployment, args: dict, run: str, *,
                   run_batch: bool = False) -> list[str]:
    """The machines the plan needs and how this one engine's file is run: one engine per
    replica (`args` loses data_parallel_size), or, for a mixture-of-experts model at dp > 1
    (its experts split over all TP x DP GPUs), the whole plan as one data-parallel engine.
    `run_batch`: the file is a `vllm run-batch` command, which has no --headless."""
    c = dep.config
    lines = [dep.machines_line(headless_model=str(args["model"]) if run_batch else None)]
    if dep.one_engine:
        where = ("once, on one machine" if dep.machines.count == 1 else
                 "on machine 0, with the multi-node flags above (the headless ranks on the "
                 "others)" if run_batch else
                 "on every machine, with the multi-node flags above")
        how = ("whole experts split over them: expert parallelism" if c.expert_parallel else
               "every expert tensor-split over them")
        return [*lines, f"# One data-parallel engine over all {c.num_gpus} GPUs ({how}; "
                        f"attention runs per replica): run {run} {where}."]
    args.pop("data_parallel_size", None)
    if c.dp == 1:
        return [*lines, f"# Run: {run}"]
    return [*lines, f"# This is ONE replica's engine ({plural(c.tp, 'GPU')}): run {run} once per replica "
                    f"({c.dp} in all; CUDA_VISIBLE_DEVICES and --port apart on a shared "
                    f"machine), each on its 1/{c.dp} share of the requests; the run-batch "
                    "export splits the input and launches them machine by machine."]


# ---- vllm serve --config YAML -----------------------------------------------------------------
#: the first release with `vllm serve --config FILE` (vllm-project/vllm#7737): the 0.6.0 wheel's
#: vllm/scripts.py adds --config to `vllm serve` and its vllm/utils.py FlexibleArgumentParser
#: reads the file; 0.5.5's has neither
CONFIG_FILE_SINCE = (0, 6, 0)
#: the first release whose --config loader takes YAML booleans (the 0.6.4 wheel's vllm/utils.py
#: _load_config_file: `key: true` a bare flag, `key: false` dropped, StoreBoolean keys kept as
#: values); 0.6.0 - 0.6.3.post1 pass every entry as `--key VALUE`, so a store_true flag's `true`
#: reaches the parser as `--key True`, which it refuses: for them such flags go on the serve line
CONFIG_BOOLEANS_SINCE = (0, 6, 4)


def _serve_line(args: dict[str, Any], engine_version: str | None, *, v0: bool,
                flags: tuple[str, ...] = ()) -> str:
    """How the YAML is run. The checkpoint is given as `vllm serve`'s positional model too:
    releases before 0.8 require it on the command line even when the file names it
    (vllm-project/vllm#14819), and every release takes it so. A release without --config
    gets the file's settings as flags instead; `flags` (bare flags the release's --config
    loader cannot take, CONFIG_BOOLEANS_SINCE) follow the file."""
    from tuner.core.engines import parse_version

    model = shlex.quote(str(args["model"]))
    version = parse_version(engine_version)
    if version is None or version >= CONFIG_FILE_SINCE:
        return " ".join((f"vllm serve {model} --config THIS_FILE", *flags))
    rest = {k: v for k, v in args.items() if k != "model"}
    given = " ".join(f"--{k}" if v is True else f"--{k} {shlex.quote(str(v))}"
                     for k, v in vllm_cli_options(rest, v0=v0))
    return (f"vllm serve {model} {given} (vLLM {engine_version} has no --config, which "
            "arrived in 0.6.0: these flags are this file's settings)")


def to_vllm_yaml(config: ServingConfig, model: ModelSpec, gpu: GPU, *, max_model_len: int,
                 header: str = "", kv_capacity_tokens: int | None = None,
                 quantized_model: str | None = None,
                 num_scheduler_steps: int | None = None,
                 disable_log_requests: bool = False,
                 engine_version: str | None = None) -> str:
    """YAML for ``vllm serve --config FILE`` (dashed long option names, as vLLM documents).
    ``disable_log_requests`` (a V0 engine, priced without the request log): written, as vLLM
    before 0.10.1 logs every request without it."""
    args, notes = vllm_engine_args(
        config, model, gpu, max_model_len=max_model_len, kv_capacity_tokens=kv_capacity_tokens,
        quantized_model=quantized_model, num_scheduler_steps=num_scheduler_steps,
        engine_version=engine_version)
    v0 = is_v0(engine_version, num_scheduler_steps)
    if v0_server_flags(args, num_scheduler_steps, disable_log_requests, engine_version):
        notes.append(f"disable_log_requests: vLLM {engine_version} logs every request by "
                     "default (releases before 0.10.1); the search was told this server runs "
                     "without that log (--disable-log-requests), so the export says so")
    dep = common.Deployment(config, model, gpu, max_model_len,
                            num_scheduler_steps=num_scheduler_steps,
                            engine_version=engine_version)
    if not dep.one_engine:  # each replica its own engine (as _replica_lines writes it)
        args.pop("data_parallel_size", None)
    options = dict(vllm_cli_options(args))
    flags: list[str] = []
    if (_before(engine_version, CONFIG_BOOLEANS_SINCE)
            and not _before(engine_version, CONFIG_FILE_SINCE)):
        # this release's loader would pass `--key True` / `--key False`: a store_true flag is
        # given on the serve line instead, and left out where false (its default)
        for key in [k for k, v in options.items()
                    if isinstance(v, bool) and k != "enable-chunked-prefill"]:
            if options.pop(key):
                flags.append(f"--{key}")
    title = [f"# vLLM engine configuration written by tuner for {config.gpu} x{config.num_gpus}.",
             *_replica_lines(dep, args, _serve_line(args, engine_version, v0=v0,
                                                    flags=tuple(flags)))]
    if _model_in_config_refused(engine_version):
        # the serve line names the model; `model:` here would reach vLLM as --model, refused
        options.pop("model", None)
        notes.append(f"model: {args['model']} is given on the serve line, not in this file: "
                     "a model named in a --config file reaches `vllm serve` as --model, which "
                     "releases before 0.8.3 refuse and 0.9.0 refuses as ambiguous "
                     "(vllm-project/vllm#15798, #17944, #18999)")
    if v0 and options.get("enable-chunked-prefill") is False:
        # V0's config loader (0.6.4 on) drops a `key: false` unless the key is a StoreBoolean's
        # dest, which is spelled with underscores (vllm/utils.py _load_config_file): the
        # string reaches the parser as `--enable-chunked-prefill False`, which V0 takes (and
        # 0.6.0 - 0.6.3.post1, which pass every value as a string)
        options["enable-chunked-prefill"] = "False"
    body = yaml.safe_dump(options, sort_keys=False, default_flow_style=False,
                          allow_unicode=True)
    return "\n".join(common.export_head(title, header, notes, config)) + "\n" + body


def _config_from_vllm_options(data: dict, text: str, gpu: str | None, what: str) -> ServingConfig:
    """ServingConfig from vLLM options (dashed names) plus the ``# tuner-config:`` line in text."""
    data = {str(k).strip().replace("_", "-"): v for k, v in data.items()}
    base, had_line = common.parsed_fields(text, data, "vllm")
    if not had_line:
        if str(data.get("enable-chunked-prefill")).lower() == "false":  # V0 YAML: "False"
            base["scheduler"] = "vllm-v0"
        if str(data.get("kv-cache-dtype") or "auto").lower().startswith("fp8"):
            base["kv_bits"] = 8
        bits = common.weight_bits_from_quantization(data.get("quantization"))
        if bits is not None:
            base["weight_bits"] = bits
    return common.finish_config(base, gpu, what)


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


# ---- vllm run-batch ---------------------------------------------------------------------------
def to_vllm_run_batch(config: ServingConfig, model: ModelSpec, gpu: GPU, *, max_model_len: int,
                      input_path: str = "INPUT.jsonl", output_path: str = "OUTPUT.jsonl",
                      served_model_name: str | None = None, header: str = "",
                      kv_capacity_tokens: int | None = None,
                      quantized_model: str | None = None,
                      num_scheduler_steps: int | None = None,
                      engine_version: str | None = None) -> str:
    """A ``vllm run-batch`` command line for an OpenAI Batch API JSONL, with every engine argument.

    ``served_model_name``: the ``body.model`` the batch's requests name, when it differs from the
    checkpoint id (vLLM answers only requests for a model it serves).
    """
    args, notes = vllm_engine_args(
        config, model, gpu, max_model_len=max_model_len, kv_capacity_tokens=kv_capacity_tokens,
        quantized_model=quantized_model, num_scheduler_steps=num_scheduler_steps,
        engine_version=engine_version)
    title = [f"# vLLM offline batch run written by tuner for {config.gpu} x{config.num_gpus}.",
             *_replica_lines(common.Deployment(config, model, gpu, max_model_len,
                                               num_scheduler_steps=num_scheduler_steps,
                                               engine_version=engine_version), args,
                             "this command", run_batch=True),
             "# Input: OpenAI Batch API JSONL (custom_id, method, url, body), one request a line;",
             "# results go to the output JSONL in the same order."]
    options = [("model", args.pop("model"))]
    if served_model_name and served_model_name != options[0][1]:
        options.append(("served-model-name", served_model_name))
    options += vllm_cli_options(args, v0=is_v0(engine_version, num_scheduler_steps))
    if _before(engine_version, RUN_BATCH_CLI_SINCE):  # no `vllm run-batch` subcommand yet
        prog = f"python -m {RUN_BATCH_MODULE}"
        notes.append(f"vLLM {engine_version} has no `vllm run-batch` subcommand (from 0.9.x, "
                     f"vllm-project/vllm#18804): its batch runner is run as python -m "
                     f"{RUN_BATCH_MODULE}, with the same options")
    else:
        prog = "vllm run-batch"
    prog += f" -i {shlex.quote(input_path)} -o {shlex.quote(output_path)}"
    return common.write_command(common.export_head(title, header, notes, config), prog, options)


def _run_batch_marker(text: str) -> str:
    """The word a run-batch command's options follow: `run-batch`, or the module of a release
    before the subcommand (RUN_BATCH_MODULE)."""
    return RUN_BATCH_MODULE if RUN_BATCH_MODULE in text.split() else "run-batch"


def from_vllm_run_batch(text: str, *, gpu: str | None = None) -> ServingConfig:
    """Parse a command written by :func:`to_vllm_run_batch` back into a ServingConfig (the vLLM
    options that map 1:1 override the ``# tuner-config:`` line, as in :func:`from_vllm_yaml`)."""
    what = "vllm run-batch command"
    opts = common.read_command(text, _run_batch_marker(text), what)
    for short in ("i", "o", "input-file", "output-file"):
        opts.pop(short, None)
    return _config_from_vllm_options(opts, text, gpu, what)


# ---- the export registry's entries (tuner.exports.formats) ------------------------------------
def render_yaml(dep: common.Deployment, opts: common.RenderOptions) -> str:
    return to_vllm_yaml(dep.config, dep.model, dep.gpu, max_model_len=dep.max_model_len,
                        header=opts.header, kv_capacity_tokens=dep.kv_capacity_tokens,
                        quantized_model=dep.quantized_model,
                        num_scheduler_steps=dep.num_scheduler_steps,
                        disable_log_requests=dep.disable_log_requests,
                        engine_version=dep.engine_version)


def render_run_batch(dep: common.Deployment, opts: common.RenderOptions) -> str:
    return to_vllm_run_batch(dep.config, dep.model, dep.gpu, max_model_len=dep.max_model_len,
                             header=opts.header, kv_capacity_tokens=dep.kv_capacity_tokens,
                             input_path=opts.input_path, output_path=opts.output_path,
                             served_model_name=opts.served_model_name,
                             quantized_model=dep.quantized_model,
                             num_scheduler_steps=dep.num_scheduler_steps,
                             engine_version=dep.engine_version)


def yaml_engine_argv(text: str) -> list[list[str]]:
    """The engine arguments a ``vllm serve --config`` YAML holds, as one argv."""
    data = yaml.safe_load(text) or {}
    data.pop("disable-log-requests", None)  # the API server's flag, not an engine argument
    return [common.engine_tokens(data)]


def run_batch_engine_argv(text: str) -> list[list[str]]:
    """The engine arguments of a ``vllm run-batch`` command (input/output files dropped)."""
    opts = common.read_command(text, _run_batch_marker(text), "vllm run-batch command")
    for short in ("i", "o", "input-file", "output-file", "served-model-name"):
        opts.pop(short, None)
    return [common.engine_tokens(opts)]
