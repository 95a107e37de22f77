"""vLLM's own defaults: what a job runs with when nobody tunes it (the baseline of every gain).

vLLM picks ``max_num_batched_tokens`` and ``max_num_seqs`` by *entry point* (its
``UsageContext``) and by *GPU*, in ``EngineArgs.get_batch_defaults`` and
``EngineArgs._set_default_max_num_seqs_and_batched_tokens_args`` (vllm/engine/arg_utils.py; in
0.9.2 - 0.11.0 the same table sits in ``_set_default_args_v1`` / ``_set_default_args``),
falling back to
``SchedulerConfig.DEFAULT_MAX_NUM_BATCHED_TOKENS`` / ``DEFAULT_MAX_NUM_SEQS``
(vllm/config/scheduler.py) for a context the table does not name:

==========================  ====================  ===================  =================  ========
entry point                 UsageContext          GPU >= 160 GiB       >= 70 GiB, no A100  other
==========================  ====================  ===================  =================  ========
``LLM(...).generate``       LLM_CLASS             16,384 tok, 1,024    16,384, 1,024      8,192, 256
``vllm serve``              OPENAI_API_SERVER     16,384 tok, 1,024    8,192, 1,024       2,048, 256
``vllm run-batch``          OPENAI_BATCH_RUNNER   2,048 tokens, 128 seqs (fallback, any GPU)
==========================  ====================  ===================  =================  ========

The A100 exclusion is vLLM PR #17885 ("large max_num_batched_tokens reduces A100 throughput");
the device test is ``get_device_total_memory() >= 70 GiB and "a100" not in device_name``. The
>= 160 GiB tier (B200/B300-class) is vLLM PR #51726; tuner applies it from 0.28.0 on (and for
"newest"): the 0.28.0 wheel's get_batch_defaults has it, 0.27.1's does not. The
other defaults: ``gpu_memory_utilization`` 0.9, ``block_size`` 16, ``dtype``/``kv_cache_dtype``
auto (16-bit for a 16-bit checkpoint), FCFS scheduling, chunked prefill and prefix caching on
(V1, generative models) -- tuner's ``vllm`` scheduler preset. ``performance_mode="throughput"``
(0.17 on, off by default) would double both batch figures; it is not modelled.

Read in the PyPI wheels' vllm/engine/arg_utils.py: the table above (the dict form of both
figures, run-batch left to SchedulerConfig's fallback) is in every wheel from 0.9.2 (in
_set_default_args_v1, then _set_default_args, then ``get_batch_defaults`` from 0.11.1) to 0.33;
the >= 160 GiB row from 0.28.0. Older releases (tuner.core.engines):

* V1 before 0.9.2 (0.8.0 - 0.9.1) take that table, the closest known, and say so. Their own:
  0.8.0 - 0.8.4 chose the larger batch by device name (H100 / H200 only), 0.8.5 by memory
  alone (>= 70 GiB, A100-80G included), and up to 0.9.1 max_num_seqs was one figure for every
  entry point (run-batch too: 1,024 on the larger GPUs, 256 elsewhere; 1,024 on every GPU in
  0.8.0 - 0.8.3).
* V0 (0.5 - 0.7) has one scalar default for every entry point (vLLM 0.6.0
  ``EngineArgs``/``SchedulerConfig``): ``max_num_seqs`` 256, chunked prefill off unless the
  context exceeds 32K tokens, and then ``max_num_batched_tokens`` = max(max_model_len, 2,048)
  (the whole prompt in one step); with chunked prefill on, 512 tokens (2,048 from 0.6.5: the
  0.6.5 wheel's vllm/config.py SchedulerConfig, 0.6.4.post1's still 512) and Sarathi-style
  batches (running decodes first, then prefill chunks, V0's block manager: the ``sarathi``
  preset).
  With chunked prefill on and ``--num-scheduler-steps`` > 1 (0.6.3 on), SchedulerConfig takes
  max(max_model_len, 2,048) again: multi-step chunked prefill does not chunk prompts.
  Read again in the 0.6.3.post1, 0.6.4.post1, 0.6.5, 0.6.6.post1 and 0.7.3 wheels
  (vllm/engine/arg_utils.py, vllm/config.py): ``EngineArgs.num_scheduler_steps = 1`` in every
  one, so untuned V0 is single-step and its chunked budget (above 32K) is 512 / 2,048, not the
  whole context (tuner.search.baseline.defaults_scheduler_steps); ``enable_chunked_prefill``
  None turns on only for max_model_len > 32,768 on CUDA without sliding window, speculative
  decoding, LoRA or prompt adapters, and not for multimodal models (0.7: those follow
  VLLM_USE_V1; pooling models and ROCm excluded); the entry point (UsageContext) matters only
  under the opt-in ``VLLM_USE_V1=1`` (0.6.6 on, ``_override_v1_engine_args``), not to V0.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from tuner.core.engines import EngineRelease, generation_of, parse_version
from tuner.core.errors import TunerError

#: --entry-point choices -> vLLM's UsageContext
ENTRY_POINTS = {"llm": "LLM_CLASS", "serve": "OPENAI_API_SERVER",
                "run-batch": "OPENAI_BATCH_RUNNER"}
ENTRY_POINT_HELP = ("Which vLLM entry point the job runs under; vLLM's defaults (the baseline "
                    "of 'gain over vLLM defaults') depend on it: llm = LLM(...).generate "
                    "(LLM_CLASS: 8,192 batched tokens / 256 seqs, 16,384 / 1,024 on GPUs of "
                    ">= 70 GiB other than A100), serve = vllm serve (OPENAI_API_SERVER: 2,048 / "
                    "256, 8,192 / 1,024 on those GPUs; 16,384 / 1,024 for both on GPUs of "
                    ">= 160 GiB), run-batch = vllm run-batch (its "
                    "OPENAI_BATCH_RUNNER context is in neither table, so it gets "
                    "SchedulerConfig's fallback 2,048 / 128 on every GPU).")
DEFAULT_ENTRY_POINT = "llm"
#: the oldest vLLM release whose batch table this module states: the 0.9.2 wheel's
#: vllm/engine/arg_utils.py _set_default_args_v1 has both figures as per-entry-point dicts
#: (run-batch falls to SchedulerConfig's 2,048 / 128); 0.9.1's max_num_seqs is one figure for
#: every entry point
TABLE_SINCE = (0, 9, 2)
#: V0's scalar defaults (vLLM 0.6.0 EngineArgs / SchedulerConfig)
V0_MAX_NUM_SEQS = 256
V0_MIN_BATCHED_TOKENS = 2048  # max(max_model_len, 2048) without chunked prefill
V0_CHUNKED_BATCHED_TOKENS = 512
#: vLLM PR #10544 raised V0's chunked-prefill budget from 512 to 2,048 tokens: the 0.6.5 wheel's
#: vllm/config.py SchedulerConfig.__post_init__ sets 2048, 0.6.4.post1's SchedulerConfig 512
V0_CHUNKED_BATCHED_TOKENS_LATER = 2048
V0_CHUNKED_LATER_SINCE = (0, 6, 5)
V0_LONG_CONTEXT = 32768  # chunked prefill on by default above this max_model_len
V0_SOURCE = ("vLLM 0.6.0 vllm/engine/arg_utils.py EngineArgs (max_num_seqs 256, chunked prefill "
             "on by default only above 32K context) and vllm/config.py SchedulerConfig "
             "(max_num_batched_tokens max(max_model_len, 2048), 512 with chunked prefill; 2048 "
             "from 0.6.5, PR #10544)")
LARGE_GPU_GIB = 70.0
HUGE_GPU_GIB = 160.0  # PR #51726's tier
#: the 0.28.0 wheel's EngineArgs.get_batch_defaults has the >= 160 GiB branch; 0.27.1's does not
HUGE_TIER_SINCE = (0, 28, 0)
SOURCE = ("vLLM vllm/engine/arg_utils.py EngineArgs.get_batch_defaults (0.9.2 - 0.11.0: "
          "_set_default_args_v1 / _set_default_args) and SchedulerConfig's defaults "
          "(vllm/config/scheduler.py)")
#: (max_num_batched_tokens, max_num_seqs) by entry point and GPU tier, the table above: "huge"
#: >= HUGE_GPU_GIB (from HUGE_TIER_SINCE on), "large" >= LARGE_GPU_GIB other than A100, "other"
BATCH_DEFAULTS: dict[str, dict[str, tuple[int, int]]] = {
    "llm": {"huge": (16384, 1024), "large": (16384, 1024), "other": (8192, 256)},
    "serve": {"huge": (16384, 1024), "large": (8192, 1024), "other": (2048, 256)},
    # OPENAI_BATCH_RUNNER is in neither table: SchedulerConfig.DEFAULT_MAX_NUM_BATCHED_TOKENS /
    # DEFAULT_MAX_NUM_SEQS on every GPU
    "run-batch": {"huge": (2048, 128), "large": (2048, 128), "other": (2048, 128)},
}
#: vLLM's defaults under the default entry point on a GPU of the common tier (under 70 GiB, or
#: an A100): ServingConfig's chunk_size / max_running defaults
COMMON_BATCH = BATCH_DEFAULTS[DEFAULT_ENTRY_POINT]["other"]
#: EngineDefaults.knobs() a search preset leaves to the space: offloading, off by default
_OFFLOAD_KNOBS = ("kv_offload_layers", "weight_offload_fraction", "attention_on_cpu")

# ---- the search's reference presets (tuner.search.loop.enqueue_presets) ----
#: vLLM's defaults where the search knows no GPU's own (those replace it: EngineDefaults.preset)
VLLM_PRESET = {"chunk_size": COMMON_BATCH[0], "max_running": COMMON_BATCH[1], "scheduler": "vllm"}
#: Sarathi-Serve's operating point: a 512-token chunk (Sarathi-Serve, OSDI 2024, §5) and at most
#: 128 running requests, as Vidur runs its Sarathi scheduler by default (vidur/config/config.py:
#: SarathiSchedulerConfig chunk_size 512, BaseReplicaSchedulerConfig batch_size_cap 128)
SARATHI_PRESET = {"chunk_size": 512, "max_running": 128, "scheduler": "sarathi"}
#: Enqueued first, in this order, so the front always holds the engines' own settings. Knobs a
#: preset does not name take ServingConfig's default (vLLM's) where the space offers it.
SEARCH_PRESETS = (VLLM_PRESET, SARATHI_PRESET)


@dataclass(frozen=True)
class EngineDefaults:
    """vLLM's defaults on one GPU type under one entry point."""

    entry_point: str  # llm | serve | run-batch
    usage_context: str  # vLLM's UsageContext name
    max_num_batched_tokens: int
    max_num_seqs: int
    large_gpu: bool  # the ">= 70 GiB and not A100" branch (or the >= 160 GiB one)
    engine_version: str  # the release stated ("newest" when none was asked for)
    gpu_memory_utilization: float = 0.9
    block_size: int = 16
    weight_bits: int = 16
    kv_bits: int = 16
    scheduler: str = "vllm"  # V1: chunked prefill + prefix caching, FCFS
    ordering: str = "fcfs"
    source: str = SOURCE
    release: EngineRelease | None = None  # the generation (None: the newest)
    checkpoint: str = ""  # the checkpoint's quantization where it sets weight_bits ("fp8 ...")
    kv_cache: str = ""  # why the cache is not 16-bit by default, where the model and GPU set it

    def knobs(self) -> dict:
        """The ServingConfig fields these defaults set (tp, dp and the GPU are the plan's)."""
        return {"chunk_size": self.max_num_batched_tokens, "max_running": self.max_num_seqs,
                "gpu_memory_utilization": self.gpu_memory_utilization,
                "block_size": self.block_size, "weight_bits": self.weight_bits,
                "kv_bits": self.kv_bits, "scheduler": self.scheduler, "ordering": self.ordering,
                "kv_offload_layers": 0, "weight_offload_fraction": 0.0,
                "attention_on_cpu": False}

    def preset(self) -> dict:
        """The knobs a search enqueues as these defaults, and every shipped space offers
        (tuner.search.space.fit_space): knobs() but offloading, which a space searches."""
        return {k: v for k, v in self.knobs().items() if k not in _OFFLOAD_KNOBS}

    def describe(self, only: Iterable[str] | None = None, *, prefix_caching_off: bool = False,
                 block_runs: int | None = None) -> str:
        """vLLM's defaults here; with `only` (ServingConfig knob names), just those knobs', so a
        line about the knobs not given does not print defaults the user overrode. For a hybrid
        model, as the run goes: `prefix_caching_off`, the release turns prefix caching off for
        it (tuner.sim.simulator.hybrid_prefix_caching_off); `block_runs`, the attention block
        vLLM raises the default one to (the plan's block_size_tokens)."""
        release = ("the newest release" if self.engine_version == "newest"
                   else f"release {self.engine_version}")
        if self.scheduler == "vllm" and prefix_caching_off:
            batching = ("chunked prefill on, prefix caching off (this release turns it off for "
                        "a hybrid model)")
        elif self.scheduler == "vllm":
            batching = "chunked prefill and prefix caching on"
        elif self.scheduler == "sarathi":
            batching = "V0 chunked prefill (decodes first, then prefill chunks)"
        else:
            batching = "V0 prefill-first batches, chunked prefill off"
        gen = "" if self.release is None else f"; {self.release.describe()}"
        weights = (f"{self.weight_bits}-bit weights (the checkpoint's {self.checkpoint})"
                   if self.checkpoint else f"{self.weight_bits}-bit weights")
        parts = {"chunk_size": f"max_num_batched_tokens {self.max_num_batched_tokens:,}",
                 "max_running": f"max_num_seqs {self.max_num_seqs:,}",
                 "gpu_memory_utilization":
                     f"gpu_memory_utilization {self.gpu_memory_utilization:g}",
                 "block_size": f"block {self.block_size}" + (
                     f", which vLLM raises to {block_runs} tokens for this hybrid (a page holds "
                     "a layer's recurrent state)" if block_runs and block_runs != self.block_size
                     else ""),
                 "weight_bits": weights,
                 "kv_bits": f"{self.kv_bits}-bit KV cache"
                            + (f" ({self.kv_cache})" if self.kv_cache else ""),
                 "scheduler": f"FCFS, {batching}"}
        wanted = set(parts) if only is None else set(only)
        if only is None and not self.kv_cache:
            wanted.discard("kv_bits")  # the full line names the cache only where not 16-bit
        keys = [k for k in parts if k in wanted]
        v = parse_version(self.engine_version)
        before_table = (self.release is not None and self.release.generation.key != "v0"
                        and v is not None and v < TABLE_SINCE)
        if before_table and wanted & {"chunk_size", "max_running"}:
            # the 0.8.0 - 0.9.1 wheels' _set_default_args_v1 (module docstring)
            gen += ("; the batch defaults are 0.9.2's table, the closest tuner has read (0.8.0 "
                    "- 0.8.4 chose by device name: the larger ones on H100/H200 only; 0.8.5 by "
                    "memory alone; up to 0.9.1 max_num_seqs was one figure for every entry "
                    "point)")
        return (f"vLLM's defaults ({release}) for {self.entry_point} "
                f"({self.usage_context}): {', '.join(parts[k] for k in keys)}{gen}")

    def to_dict(self) -> dict:
        return {"entry_point": self.entry_point, "usage_context": self.usage_context,
                "max_num_batched_tokens": self.max_num_batched_tokens,
                "max_num_seqs": self.max_num_seqs, "large_gpu": self.large_gpu,
                "engine_version": self.engine_version, "scheduler": self.scheduler,
                "generation": None if self.release is None else self.release.generation.key,
                "source": self.source, "description": self.describe()}


def check_entry_point(entry_point: str) -> str:
    if entry_point not in ENTRY_POINTS:
        raise TunerError(f"--entry-point must be one of {', '.join(ENTRY_POINTS)}, got "
                         f"{entry_point!r}.")
    return entry_point


def is_large_gpu(gpu_name: str, memory_gib: float) -> bool:
    """vLLM's test: device memory >= 70 GiB and "a100" not in the device name (catalog names
    follow NVIDIA's: A100-40G, A100-80G)."""
    return memory_gib >= LARGE_GPU_GIB and "a100" not in gpu_name.lower()


#: The MLA latent cache's block: 64 tokens, which every vLLM MLA backend takes (FlashMLA and its
#: sparse variant require it for their kernels, FlashInfer-MLA takes 32 or 64). Earlier
#: releases' vllm/platforms/cuda.py set block_size 64 for MLA; 0.32 leaves an unset
#: --block-size to the backend (16 on H100/H200 and the RTX PRO 6000, 32 on B200 for
#: DeepSeek-V3, read in its source). tuner plans 64 and its exports write it, so a plan runs as
#: priced; vLLM's own default differs by under 1 % of KV capacity (the last block's padding)
MLA_BLOCK_SIZE = 64


#: catalog GPUs of compute capability 12.0 (GB202, sm_120). vLLM serves DeepSeek's sparse MLA
#: (V3.2) there with its FLASHINFER_MLA_SPARSE_SM120 backend, which turns kv_cache_dtype "auto"
#: into fp8_ds_mla (vllm/model_executor/layers/attention/mla_attention.py,
#: _canonicalize_sparse_mla_kv_cache_dtype, read in vLLM 0.32; the first release with it is not
#: known here); elsewhere "auto" keeps the cache 16-bit
SM120_GPUS = frozenset({"RTX-PRO-6000"})
SPARSE_MLA_SM120_CACHE = ("fp8_ds_mla: what vLLM's FLASHINFER_MLA_SPARSE_SM120 backend makes of "
                          "kv_cache_dtype auto for sparse MLA on sm_120")


def model_defaults(model, gpu_name: str | None = None) -> dict:
    """The knobs vLLM's defaults take from the model rather than the engine: a quantized
    checkpoint is served at its own precision (quantization_config), an MLA model's cache is
    paged in MLA_BLOCK_SIZE blocks, and sparse MLA's cache is FP8 on an sm_120 GPU
    (SM120_GPUS). {} for a 16-bit GQA model (or None)."""
    out: dict = {}
    bits = getattr(model, "checkpoint_bits", 16)
    if bits != 16:
        out |= {"weight_bits": bits, "checkpoint": model.checkpoint_quantization}
    if getattr(model, "is_mla", False):
        out["block_size"] = MLA_BLOCK_SIZE
    if getattr(model, "is_sparse_attention", False) and gpu_name in SM120_GPUS:
        out |= {"kv_bits": 8, "kv_cache": SPARSE_MLA_SM120_CACHE}
    return out


def vllm_defaults(gpu_name: str, memory_gib: float, entry_point: str = DEFAULT_ENTRY_POINT,
                  engine_version: str | None = None,
                  max_model_len: int | None = None, model=None,
                  num_scheduler_steps: int | None = None) -> EngineDefaults:
    """vLLM's batch defaults (and the rest) for one GPU type under one entry point, as release
    `engine_version` (None: the newest) sets them. `max_model_len` (the model's context unless
    the job caps it) matters only to V0, whose token budget without chunked prefill, or with it
    under multi-step scheduling (`num_scheduler_steps` > 1, as given), is
    max(max_model_len, 2048); None there means 2,048. `model` (a ModelSpec) sets what
    model_defaults says: a quantized checkpoint's precision, MLA's block size."""
    return dataclasses.replace(_engine_defaults(gpu_name, memory_gib, entry_point,
                                                engine_version, max_model_len,
                                                num_scheduler_steps),
                               **model_defaults(model, gpu_name))


def _engine_defaults(gpu_name: str, memory_gib: float, entry_point: str,
                     engine_version: str | None, max_model_len: int | None,
                     num_scheduler_steps: int | None = None) -> EngineDefaults:
    check_entry_point(entry_point)
    release = generation_of(engine_version)
    version = engine_version or "newest"
    if release.generation.key == "v0":
        ctx = int(max_model_len or 0)
        chunked = ctx > V0_LONG_CONTEXT
        # vLLM 0.6.3+ SchedulerConfig: multi-step chunked prefill does not chunk prompts, so
        # its budget is the whole context, as without chunked prefill
        whole = not chunked or (num_scheduler_steps or 1) > 1
        v = parse_version(engine_version)
        chunk = (V0_CHUNKED_BATCHED_TOKENS_LATER if v is not None and v >= V0_CHUNKED_LATER_SINCE
                 else V0_CHUNKED_BATCHED_TOKENS)
        tokens = max(ctx, V0_MIN_BATCHED_TOKENS) if whole else chunk
        return EngineDefaults(entry_point=entry_point, usage_context=ENTRY_POINTS[entry_point],
                              max_num_batched_tokens=tokens, max_num_seqs=V0_MAX_NUM_SEQS,
                              large_gpu=False, engine_version=version,
                              scheduler="sarathi" if chunked else release.generation.scheduler,
                              source=V0_SOURCE, release=release)
    v = parse_version(engine_version)
    large = is_large_gpu(gpu_name, memory_gib)
    huge = memory_gib >= HUGE_GPU_GIB and (v is None or v >= HUGE_TIER_SINCE)
    tokens, seqs = BATCH_DEFAULTS[entry_point]["huge" if huge else "large" if large else "other"]
    source = SOURCE if v is None or v >= TABLE_SINCE else (
        SOURCE + f"; {engine_version} is older than the table (0.9.2): 0.9.2's, the closest "
        "known")
    return EngineDefaults(entry_point=entry_point, usage_context=ENTRY_POINTS[entry_point],
                          max_num_batched_tokens=tokens, max_num_seqs=seqs,
                          large_gpu=large or huge, engine_version=version,
                          scheduler=release.generation.scheduler, source=source,
                          release=release)


def presets_by_gpu(gpus: Mapping[str, object], entry_point: str = DEFAULT_ENTRY_POINT,
                   engine_version: str | None = None,
                   max_model_len: int | None = None, model=None,
                   num_scheduler_steps: int | None = None) -> dict[str, dict]:
    """GPU name -> vLLM's defaults on it as a search preset (EngineDefaults.preset); `gpus`:
    name -> catalog GPU (its name and memory_gib)."""
    return {name: vllm_defaults(g.name, g.memory_gib, entry_point, engine_version,
                                max_model_len, model, num_scheduler_steps).preset()
            for name, g in gpus.items()}


__all__ = ["BATCH_DEFAULTS", "COMMON_BATCH", "DEFAULT_ENTRY_POINT", "ENTRY_POINTS",
           "ENTRY_POINT_HELP", "MLA_BLOCK_SIZE", "SARATHI_PRESET", "SEARCH_PRESETS", "VLLM_PRESET",
           "EngineDefaults", "check_entry_point", "is_large_gpu", "model_defaults", "presets_by_gpu",
           "vllm_defaults"]
