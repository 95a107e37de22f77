"""SGLang as a simulated engine: its defaults, scheduler constants and memory plan, as data.

Read from SGLang's source (sgl-project/sglang, the v0.5 line, checked against the newest
released wheel, sglang 0.5.23; the files named below):

* ``handle_gpu_memory_settings`` (``python/sglang/srt/arg_groups/memory_hook.py`` in the
  sglang 0.5.23 wheel, lines 89-170; ``ServerArgs._handle_gpu_memory_settings`` in
  server_args.py before): with ``--chunked-prefill-size`` unset, 2,048 tokens below 20 GiB of
  GPU memory (T4), 4,096 below 60 GiB (A10, 4090, A100-40G, L40), 8,192 below 160 GiB (H100,
  A100-80G, H200), 16,384 above (B200); ``cuda_graph_max_bs`` (the decode graph's max_bs) by
  the same tiers (8 below 20 GiB; 48 / 160 below 35 GiB, 32 / 160 below 60 GiB, 256 / 512
  below 160 GiB for TP < 4 / >= 4; 512 above), capped at a given --max-running-requests.
  With ``--mem-fraction-static`` unset (lines 281-327) it is
  ``round((gpu_mem - reserved) / gpu_mem, 3)`` where ``reserved`` (MiB) = 512 +
  max(chunked_prefill_size, 2048) * 1.5 + tp_size * pp_size / 8 * 1024 + the graph reserve
  (``reserve_for_graph_mb``: decode max_bs * 2, plus the prefill CUDA graph, on by default on
  CUDA (``default_prefill_backend``: breakable): 8 MiB per captured token count of
  ``generate_prefill_cuda_graph_batch_sizes(chunked_prefill_size)``, at most 8,192 tokens at
  PP > 1, 1.5 GiB for MLA models; with DP attention (``attn_dp_size`` > 1) decode max_bs x
  attn_dp_size x 3 more, x 4.5 above a max_bs of 300), at least 10 GiB on a GPU of more than
  60 GiB. A DP-attention server's tp_size, chunk and max_running are the whole server's here.
* ``ServerArgs`` field defaults: ``schedule_policy`` "fcfs", ``schedule_conservativeness`` 1.0,
  ``max_prefill_tokens`` 16,384, ``page_size`` 1 (token-level KV; raised by the attention
  backend, ``sglang_page_size``), ``enable_mixed_chunk`` off.
* ``python/sglang/srt/managers/scheduler.py`` (``Scheduler.__init__``):
  ``max_running_requests`` = min(max_total_num_tokens // 2, req_to_token_pool.size) when unset,
  the pool sized by ``model_runner``: min(max(int(max_total_num_tokens / context_len * 512),
  2048), 4096); ``init_new_token_ratio`` = min(0.7 * schedule_conservativeness, 1),
  ``min_new_token_ratio`` = min(init * 0.14, 1), decayed by (init - min) / 600 per decode step
  (``SGLANG_INIT_NEW_TOKEN_RATIO`` 0.7, ``SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR`` 0.14,
  ``SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS`` 600, ``SGLANG_RETRACT_DECODE_STEPS`` 20 in
  ``sglang/srt/environ.py`` / ``global_config.py``).
* ``python/sglang/srt/managers/schedule_policy.py``: ``CLIP_MAX_NEW_TOKENS`` 4,096
  (``SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION``), ``lpm`` falls back to FCFS above 128 waiting
  requests (``_determine_active_policy``), in-batch prefix caching thresholds 32 tokens.

The memory plan (``plan_memory_sglang``) differs from vLLM's (tuner.core.memory.plan_memory):
vLLM profiles a forward pass and gives the KV cache gpu_memory_utilization x memory minus
weights, activations and the non-torch runtime; SGLang's ``--mem-fraction-static`` already
leaves the activations and CUDA graphs outside (the ``reserved`` estimate above), so
``model_runner.profile_max_num_token`` gives the KV pool memory x mem_fraction_static minus
the weights and what the process held before loading (CUDA context, NCCL), rounded down to
whole KV pages. The page is one token (``ServerArgs.page_size``'s platform default) except
where SGLang's default attention backend needs more: 64 on compute capability 10.x (B200,
GB200, B300: trtllm_mha, trtllm_mla) and for DeepSeek's sparse attention
(``sglang_page_size``; the plan records it, ``MemoryPlan.kv_page_tokens``); each admitted
request then also reserves a page for its last, partly filled one (``PrefillAdder``:
``per_req_token_overhead``), which the simulator's admission charges, and a running request
holds its KV in whole pages, a decode taking a new page where its pages are full
(``check_decode_mem``; tuner.sim.sglang).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable
from dataclasses import dataclass

from tuner.core.catalog import GIB, GPU, ModelSpec
from tuner.core.config import SCHEDULE_POLICIES, ServingConfig
from tuner.core.errors import TunerError
from tuner.core.memory import (
    MemoryPlan,
    activation_bytes,
    assumed_shape_clause,
    kv_bytes_per_token_per_layer_rank,
    kv_layer_fraction,
    vision_weight_bytes_per_rank,
    weight_bytes_per_rank,
)

DEFAULT_ENGINE = "vllm"
SOURCE = ("SGLang v0.5 source, checked against the sglang 0.5.23 wheel: server_args.py "
          "(ServerArgs defaults; arg_groups/memory_hook.py handle_gpu_memory_settings), "
          "managers/scheduler.py, managers/schedule_policy.py (PrefillAdder), "
          "managers/schedule_batch.py (retract_decode), mem_cache/kv_cache_configurator.py "
          "(a hybrid's Mamba state pool)")

# ---- scheduler constants (environ.py / global_config.py; schedule_policy.py) ----
INIT_NEW_TOKEN_RATIO = 0.7  # SGLANG_INIT_NEW_TOKEN_RATIO
MIN_NEW_TOKEN_RATIO_FACTOR = 0.14  # SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR
NEW_TOKEN_RATIO_DECAY_STEPS = 600  # SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS
RETRACT_DECODE_STEPS = 20  # SGLANG_RETRACT_DECODE_STEPS
CLIP_MAX_NEW_TOKENS = 4096  # SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION
LPM_MAX_WAITING = 128  # SchedulePolicy._determine_active_policy: lpm -> fcfs above this
IN_BATCH_PREFIX_THRESHOLD = 32  # IN_BATCH_PREFIX_CACHING_{CHECK,DEPRIORITIZE}_THRESHOLD
MAX_PREFILL_TOKENS = 16384  # ServerArgs.max_prefill_tokens
PAGE_SIZE = 1  # ServerArgs.page_size
DEFAULT_SCHEDULE_POLICY = "fcfs"  # of SCHEDULE_POLICIES (tuner.core.config), as SGLang's
DEFAULT_CONSERVATIVENESS = 1.0  # ServerArgs.schedule_conservativeness
# What the process holds before the weights load (CUDA context, NCCL/cuBLAS workspaces),
# counted inside mem_fraction_static because profile_max_num_token measures free memory after
# loading. ~0.5 GiB is an ESTIMATE (SGLang's own 512 MiB constant-metadata allowance).
PRELOAD_BYTES = 0.5 * GIB

# ---- hybrid (Gated DeltaNet) models: the Mamba state pool (sglang 0.5.23) ----
#: --mamba-full-memory-ratio when unset (arg_groups/fields/schedule.py: fallback 0.9; no
#: override for the Qwen3-Next / Qwen3.5 architectures): the state pool gets ratio / (1 +
#: ratio) of the memory left after the weights (kv_cache_configurator.py
#: _handle_max_mamba_cache), the full-attention KV pool the rest
MAMBA_FULL_MEMORY_RATIO = 0.9
#: the state slots a running request may need with the radix cache on
#: (_calculate_mamba_ratio): MAMBA_CACHE_SIZE_MAX_RUNNING_REQUESTS_RATIO 3, plus 2 tracking
#: slots (allocation_sizing.get_mamba_tracking_slots) of the "extra_buffer" strategy that
#: --mamba-radix-cache-strategy auto picks for these architectures under the default overlap
#: schedule (overrides.py _mamba_radix_cache_resolution); 1 with --disable-radix-cache.
#: max_running_requests is capped at the slots // this (resolve_max_num_reqs)
MAMBA_SLOTS_PER_REQUEST = 3 + 2
MAMBA_SLOTS_PER_REQUEST_NO_RADIX = 1
#: the temporal (SSM) state's width when the config names no mamba_ssm_dtype: float32
#: (configs/mamba_utils.py mamba2_state_dtype); the conv state is bfloat16
#: (SGLANG_MAMBA_CONV_DTYPE)
MAMBA_SSM_STATE_BITS = 32


def sglang_state_bytes_per_request(model: ModelSpec, tp: int) -> float:
    """One request's recurrent state over all of a hybrid's linear layers on one TP rank, as
    SGLang sizes a MambaPool slot (mamba_utils.py mamba_cache_per_req: the conv state at
    bfloat16, the temporal state at float32 unless the config names mamba_ssm_dtype;
    Mamba2StateShape.create shards both over the TP ranks). tuner's catalog keeps the config's
    float32 as 32 bits and anything else as 16, so a config naming bfloat16 reads as SGLang's
    float32 default here (no catalogued checkpoint names it). 0 for a model without them."""
    if not getattr(model, "is_hybrid", False):
        return 0.0
    wide = dataclasses.replace(model, linear_ssm_state_bits=MAMBA_SSM_STATE_BITS)
    return wide.linear_state_bytes_per_layer_rank(tp) * model.linear_attention_layers


# ---- GPU-memory tiers (_handle_gpu_memory_settings; MiB thresholds as in the source) ----
_MIB = 1024 * 1024


def chunked_prefill_default(gpu_memory_bytes: int) -> int:
    """--chunked-prefill-size when unset, by GPU memory (CUDA GPUs)."""
    mib = gpu_memory_bytes / _MIB
    if mib < 20 * 1024:
        return 2048
    if mib < 60 * 1024:
        return 4096
    if mib < 160 * 1024:
        return 8192
    return 16384


def cuda_graph_max_bs_default(gpu_memory_bytes: int, tp: int,
                              max_running: int | None = None) -> int:
    """The decode CUDA graph's max_bs when unset, by GPU memory and TP size (CUDA GPUs), no
    more than a given --max-running-requests."""
    mib = gpu_memory_bytes / _MIB
    if mib < 20 * 1024:
        bs = 8
    elif mib < 35 * 1024:
        bs = 48 if tp < 4 else 160
    elif mib < 60 * 1024:
        bs = 32 if tp < 4 else 160
    elif mib < 160 * 1024:
        bs = 256 if tp < 4 else 512
    else:
        bs = 512
    return min(bs, max_running) if max_running else bs


def prefill_graph_sizes(chunked_prefill_size: int) -> list[int]:
    """The token counts SGLang captures prefill CUDA graphs at (cuda_graph_hook.py
    generate_prefill_cuda_graph_batch_sizes; max_bs = the chunk size)."""
    sizes = (list(range(4, 33, 4)) + list(range(48, 257, 16)) + list(range(288, 513, 32))
             + list(range(576, 1025, 64)) + list(range(1280, 4097, 256))
             + list(range(4608, chunked_prefill_size + 1, 512)))
    return [s for s in sizes if s <= chunked_prefill_size]


def mem_fraction_static_default(gpu_memory_bytes: int, chunked_prefill_size: int, tp: int,
                                pp: int = 1, *, mla: bool = False,
                                max_running: int | None = None, attn_dp: int = 1) -> float:
    """--mem-fraction-static when unset: memory less SGLang's activation and CUDA-graph
    reserve (decode and prefill graphs; `mla`: an MLA model's 1.5 GiB prefill-graph reserve),
    as a fraction rounded to 3 digits. `attn_dp` > 1: a DP-attention server, whose `tp`,
    `chunked_prefill_size` and `max_running` are the server's (--tp-size = tp x dp, the chunk
    and running requests before SGLang divides them by the DP size: handle_gpu_memory_settings
    runs before handle_data_parallelism)."""
    mib = gpu_memory_bytes / _MIB
    reserved = 512.0 + max(chunked_prefill_size, 2048) * 1.5
    reserved += tp * pp / 8 * 1024
    decode_bs = cuda_graph_max_bs_default(gpu_memory_bytes, tp, max_running)
    reserved += decode_bs * 2
    if attn_dp > 1:  # reserve_for_graph_mb: DP attention pads its decode graphs
        reserved += decode_bs * attn_dp * 3
        if decode_bs > 300:
            reserved += decode_bs * attn_dp * 1.5
    # the prefill graph's max_bs is the chunk, at most 8,192 tokens at PP > 1
    # (_DEFAULT_PP_PREFILL_CUDA_GRAPH_MAX_TOKENS)
    graph_tokens = min(chunked_prefill_size, 8192) if pp > 1 else chunked_prefill_size
    reserved += 1.5 * 1024 if mla else len(prefill_graph_sizes(graph_tokens)) * 8
    if mib > 60 * 1024:
        reserved = max(reserved, 10 * 1024)
    return round((mib - reserved) / mib, 3)


# ---- KV page size: SGLang's default attention backend per GPU and model ----
#: the page trtllm_mha / trtllm_mla run at (overrides.py _mla_backend_page_constraints turns
#: the default page of 1 into 64 for them) and DeepSeek's DSA runs at (64 x index_kpool, 1 in
#: V3.2: model_overrides/deepseek_v2.py)
TRTLLM_PAGE_SIZE = 64
#: fa4's page for MHA models on sm_100 (overrides.py _fa4_page_constraint)
FA4_PAGE_SIZE = 128


def sglang_page_size(model: ModelSpec, gpu: GPU) -> int:
    """The KV page size SGLang runs `model` at on `gpu` with no --page-size /
    --attention-backend given: its default backend's (sglang 0.5.23
    model_override_base.get_default_attn_backend, then the page constraints in
    arg_groups/overrides.py). On compute capability 10.x (B200, GB200, B300: is_sm100) an MHA
    model runs trtllm_mha, which takes pages of 16-128 and turns the default 1 into 64 (fa4 at
    128 where K and V widths differ); an MLA model of DeepSeek-V3's family runs trtllm_mla
    (model_overrides/deepseek_v2.py), 32 or 64, so 64; DeepSeek-V2 (its own architecture) runs
    flashinfer's MLA at 1. DeepSeek sparse attention (V3.2) pages 64 on every CUDA GPU.
    Elsewhere (Hopper fa3, Ampere/Ada flashinfer, 12.0 Blackwell flashinfer: trtllm_mha is
    sm_100's default only, ROCm aiter) SGLang keeps page 1. A GPU without a compute
    capability (an AMD GPU, a --gpu-file GPU that leaves it out) gets page 1."""
    if getattr(model, "is_sparse_attention", False):
        return TRTLLM_PAGE_SIZE
    cc = getattr(gpu, "compute_capability", None)
    if cc is None or int(cc) != 10:
        return PAGE_SIZE
    if getattr(model, "is_mla", False):
        names = f"{getattr(model, 'name', '')} {getattr(model, 'hf_id', '')}".lower()
        return PAGE_SIZE if "deepseek-v2" in names else TRTLLM_PAGE_SIZE
    v = getattr(model, "v_head_dim", 0)
    return FA4_PAGE_SIZE if v and v != model.head_dim else TRTLLM_PAGE_SIZE


def max_running_default(kv_capacity_tokens: int, context_tokens: int) -> int:
    """max_running_requests when unset: min(max_total_num_tokens // 2, the request pool)."""
    pool = min(max(int(kv_capacity_tokens / max(context_tokens, 1) * 512), 2048), 4096)
    return max(min(kv_capacity_tokens // 2, pool), 1)


@dataclass(frozen=True)
class SGLangSettings:
    """SGLang's scheduler knobs that vLLM lacks (ServingConfig carries the shared ones:
    chunk_size is --chunked-prefill-size, max_running --max-running-requests,
    gpu_memory_utilization --mem-fraction-static)."""

    schedule_policy: str = DEFAULT_SCHEDULE_POLICY
    schedule_conservativeness: float = DEFAULT_CONSERVATIVENESS
    max_prefill_tokens: int = MAX_PREFILL_TOKENS
    radix_cache: bool = True  # --disable-radix-cache turns it off

    def __post_init__(self) -> None:
        if self.schedule_policy not in SCHEDULE_POLICIES:
            raise TunerError(f"--schedule-policy {self.schedule_policy!r}: tuner models "
                             f"{', '.join(SCHEDULE_POLICIES)} (SGLang's default fcfs).")
        if not self.schedule_conservativeness > 0:
            raise TunerError("--schedule-conservativeness must be > 0, got "
                             f"{self.schedule_conservativeness!r}.")
        if self.max_prefill_tokens < 1:
            raise TunerError(f"--max-prefill-tokens must be >= 1, got {self.max_prefill_tokens}.")

    @property
    def init_new_token_ratio(self) -> float:
        return min(INIT_NEW_TOKEN_RATIO * self.schedule_conservativeness, 1.0)

    @property
    def min_new_token_ratio(self) -> float:
        return min(self.init_new_token_ratio * MIN_NEW_TOKEN_RATIO_FACTOR, 1.0)

    @property
    def new_token_ratio_decay(self) -> float:
        return (self.init_new_token_ratio - self.min_new_token_ratio) / NEW_TOKEN_RATIO_DECAY_STEPS

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class SGLangDefaults:
    """What an SGLang launch without these flags runs with on one GPU type."""

    chunked_prefill_size: int
    cuda_graph_max_bs: int
    mem_fraction_static: float
    schedule_policy: str = DEFAULT_SCHEDULE_POLICY
    page_size: int = PAGE_SIZE
    source: str = SOURCE

    def describe(self, only: Iterable[str] | None = None) -> str:
        """SGLang's defaults here; with `only` (ServingConfig knob names), just those knobs'."""
        parts = {"chunk_size": f"--chunked-prefill-size {self.chunked_prefill_size:,}",
                 "gpu_memory_utilization": f"--mem-fraction-static {self.mem_fraction_static}"
                                           f" (cuda_graph_max_bs {self.cuda_graph_max_bs})",
                 "ordering": f"--schedule-policy {self.schedule_policy}",
                 "max_running": "--max-running-requests from the KV pool",
                 "block_size": f"page size {self.page_size}"}
        wanted = set(parts) if only is None else set(only)
        return (f"SGLang's defaults for this GPU: "
                f"{', '.join(v for k, v in parts.items() if k in wanted)} ({self.source})")

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def sglang_defaults(gpu: GPU, tp: int = 1, pp: int = 1, chunked_prefill_size: int | None = None,
                    *, mla: bool = False, max_running: int | None = None, attn_dp: int = 1,
                    page_size: int = PAGE_SIZE) -> SGLangDefaults:
    """SGLang's defaults on `gpu` (a given chunked_prefill_size and --max-running-requests enter
    the mem fraction, as in the source; `mla`: the model uses MLA attention; `page_size`:
    sglang_page_size's). `attn_dp` > 1: one DP-attention server over tp x attn_dp GPUs, `tp`,
    the chunk and `max_running` per attention-DP rank as tuner plans them (its export gives
    the server attn_dp times them): the server's figures enter the reserve, and SGLang's own
    chunk is its GPU-memory default divided by the DP size (handle_data_parallelism)."""
    smi = nvidia_smi_total_bytes(gpu)
    dp = max(attn_dp, 1)
    server_chunk = (chunked_prefill_size * dp if chunked_prefill_size
                    else chunked_prefill_default(smi))
    server_running = max_running * dp if max_running else None
    return SGLangDefaults(server_chunk // dp,
                          cuda_graph_max_bs_default(smi, tp * dp, server_running),
                          mem_fraction_static_default(smi, server_chunk, tp * dp, pp, mla=mla,
                                                      max_running=server_running, attn_dp=dp),
                          page_size=page_size)


#: nvidia-smi's memory.total above the total CUDA reports (GPU.memory_gib): 441-652 MiB over
#: eight GPU types in public logs (median ~480); an ESTIMATE
NVIDIA_SMI_EXTRA_BYTES = 480 * _MIB


def nvidia_smi_total_bytes(gpu: GPU) -> int:
    """The device memory SGLang sizes its defaults by: it asks nvidia-smi (memory.total), which
    reports more than CUDA's total, the catalog's figure."""
    return int(gpu.memory_bytes + NVIDIA_SMI_EXTRA_BYTES)


def default_config(model: ModelSpec, gpu: GPU, given: dict, *,
                   radix_cache: bool = True) -> tuple[ServingConfig, SGLangDefaults]:
    """(ServingConfig, SGLangDefaults): an SGLang plan on `gpu` of the fields `given` (None or
    absent: SGLang's own default; gpu_memory_utilization is --mem-fraction-static):
    --chunked-prefill-size by GPU memory, --mem-fraction-static from it, TP and PP,
    --max-running-requests from the KV pool and the context length; the KV page size of
    SGLang's default attention backend (sglang_page_size; ServingConfig.block_size stays 1,
    ENGINE_HELD: not a knob under SGLang). `radix_cache` False (--disable-radix-cache): a
    hybrid's --max-running-requests as SGLang sets it without the flag (the state pool sized
    by the ratio, one state a running request), which the exports then give."""
    given = {k: v for k, v in given.items() if v is not None}
    dp = given.get("dp", 1)
    # a mixture-of-experts plan at dp > 1 is one DP-attention server (tuner.exports.sglang)
    d = sglang_defaults(gpu, given.get("tp", 1), given.get("pp", 1), given.get("chunk_size"),
                        mla=getattr(model, "is_mla", False),
                        max_running=given.get("max_running"),
                        attn_dp=dp if getattr(model, "is_moe", False) and dp > 1 else 1,
                        page_size=sglang_page_size(model, gpu))
    if "gpu_memory_utilization" not in given and d.mem_fraction_static <= 0:
        # SGLang's reserve is absolute (MiB), so a small device has no default fraction at all
        raise TunerError(
            f"SGLang's default --mem-fraction-static on {gpu.name} ({gpu.memory_gib:g} GiB) "
            f"is {d.mem_fraction_static:g}: its activation and CUDA-graph reserve for "
            f"--chunked-prefill-size {d.chunked_prefill_size:,} is more than the memory; "
            "give --mem-fraction-static or a smaller --chunk-size.")
    # a quantized checkpoint (FP8 DeepSeek-V3) loads at its own precision when none is given,
    # as vLLM's defaults take it (engine_defaults.model_defaults), not at ServingConfig's 16
    bits = getattr(model, "checkpoint_bits", 16)
    if "weight_bits" not in given and bits != 16:
        given = {**given, "weight_bits": bits}
    base = given | {"gpu": gpu.name, "engine": "sglang",
                    "chunk_size": given.get("chunk_size", d.chunked_prefill_size),
                    "gpu_memory_utilization": given.get("gpu_memory_utilization",
                                                        d.mem_fraction_static)}
    if "max_running" not in base:
        plan = plan_memory_sglang(model, gpu, ServingConfig(**(base | {"max_running": 1})))
        base["max_running"] = max_running_default(plan.kv_capacity_tokens, model.max_position)
        # a hybrid: its Mamba state slots cap it too (the ratio's slots: --disable-radix-cache
        # sizes them by --max-running-requests only when given); 0: the plan refuses it
        if cap := plan.state_slots // _slots_per_request(radix_cache):
            base["max_running"] = min(base["max_running"], cap)
    return ServingConfig(**base), d


def plan_memory_sglang(model: ModelSpec, gpu: GPU, config: ServingConfig, *,
                       mean_request_tokens: float = 0.0, max_request_tokens: int = 0,
                       radix_cache: bool = True):
    """SGLang's KV pool for (model, gpu, config), config.gpu_memory_utilization read as
    --mem-fraction-static: memory x fraction - weights - PRELOAD_BYTES, in whole pages of
    sglang_page_size(model, gpu) tokens (pool_configurator.py calculate_pool_sizes:
    max_total_num_tokens // page_size * page_size). A tuner.core.memory.MemoryPlan
    (activations and CUDA graphs are outside the fraction, so its activation_bytes is 0 and
    runtime_overhead_bytes the preload; kv_capacity_blocks counts tokens, the simulator's
    unit for SGLang; kv_page_tokens the page, which the simulator and the reports read from
    here). A hybrid (Gated DeltaNet) model first gives its Mamba state pool its share
    (_hybrid_state_pool: state_slots, max_running_by_slots, state_bytes_per_request); the KV
    pool then holds its attention layers only. `radix_cache` False: --disable-radix-cache,
    which sizes that pool by --max-running-requests."""
    if config.weight_offload_fraction or config.kv_offload_layers or config.attention_on_cpu:
        raise TunerError("offloading (--kv-offload-layers, --weight-offload-fraction, "
                         "--attention-on-cpu) is simulated for vLLM only; drop it with "
                         "--engine sglang.")
    usable = gpu.memory_bytes * config.gpu_memory_utilization
    # a VLM's vision tower too: SGLang loads it for a text-only job (vLLM's figure)
    weights = weight_bytes_per_rank(model, config) + vision_weight_bytes_per_rank(model, config)
    kv = usable - weights - PRELOAD_BYTES
    hybrid: dict = {}
    rest, pool = kv, 0.0  # the memory after the weights; what the Mamba state pool takes of it
    if getattr(model, "is_hybrid", False):
        hybrid = _hybrid_state_pool(model, config, kv, radix_cache)
        pool = hybrid.pop("pool_bytes")
        kv -= pool
    # a hybrid's KV pool holds its attention layers only (pool_configurator.py: the
    # full_attention_layer_ids)
    stage_layers = math.ceil(model.num_kv_layers / config.pp)
    per_token = (kv_bytes_per_token_per_layer_rank(model, config.kv_bits, config.tp)
                 * kv_layer_fraction(model, mean_request_tokens) * stage_layers)
    tokens = int(kv // per_token) if kv > 0 and per_token > 0 else 0
    page = sglang_page_size(model, gpu)
    tokens = tokens // page * page
    fits, reason = True, ""
    gib = lambda b: f"{b / GIB:.1f} GiB"  # noqa: E731
    if hybrid and config.pp > 1:
        fits = False  # SGLang splits the state pool by stage; tuner plans one stage
        reason = (f"{model.name} is a hybrid ({model.linear_mixer_label}) model: tuner plans "
                  "SGLang's Mamba state pool for one pipeline stage; use pp 1")
    elif hybrid and kv > 0 and hybrid["max_running_by_slots"] < 1:
        fits = False  # resolve_max_num_reqs: "state cache is too small to serve any requests"
        reason = (f"SGLang's Mamba state pool for {model.name} on {gpu.name} holds "
                  f"{hybrid['state_slots']} request states "
                  f"({gib(hybrid['state_bytes_per_request'])} each per rank), fewer than "
                  f"the {_slots_per_request(radix_cache)} one running request needs: more "
                  "--mem-fraction-static or TP")
    elif hybrid and kv <= 0 < rest:
        # --disable-radix-cache sizes the pool by --max-running-requests alone; SGLang stops
        # with "Not enough GPU memory for hybrid (mamba/linear-attention) state cache"
        fits = False
        reason = (f"SGLang's Mamba state pool for {model.name} on {gpu.name} does not fit: "
                  f"{hybrid['state_slots']:,} request states (--disable-radix-cache: one per "
                  f"--max-running-requests, + 1 padding) x "
                  f"{hybrid['state_bytes_per_request'] / 2**20:,.1f} MiB per rank = "
                  f"{gib(pool)} > the {gib(rest)} left after the weights and preload: lower "
                  "--max-running-requests, or more --mem-fraction-static or TP")
    elif kv <= 0:
        fits = False
        reason = (f"{model.name} at {config.weight_bits}-bit weights, TP {config.tp}, does not "
                  f"fit on {gpu.name} under SGLang: weights {gib(weights)} + preload "
                  f"{gib(PRELOAD_BYTES)} > {gib(usable)} ({gpu.memory_gib:g} GiB x "
                  f"--mem-fraction-static {config.gpu_memory_utilization:g})"
                  + assumed_shape_clause(model))
    elif gpu.memory_bytes - usable < (acts := activation_bytes(model, config)):
        # SGLang sizes the fraction so a step's activations and CUDA graphs fit outside it
        # (its default leaves `reserved`, module docstring); a fraction that leaves less runs
        # out of memory at the largest prefill
        fits = False
        reason = (f"--mem-fraction-static {config.gpu_memory_utilization:g} leaves "
                  f"{gib(gpu.memory_bytes - usable)} of {gpu.name} outside SGLang's pool, less "
                  f"than one step's activations ({gib(acts)} at --chunked-prefill-size "
                  f"{config.chunk_size:,}, tuner's estimate as for vLLM)")
    elif max_request_tokens and tokens < max_request_tokens + 2:
        fits = False
        reason = (f"SGLang's KV pool on {gpu.name} holds {tokens} tokens ({gib(kv)}), too few "
                  f"for the longest request ({max_request_tokens} tokens + 2)"
                  + assumed_shape_clause(model))
    return MemoryPlan(
        gpu_memory_bytes=gpu.memory_bytes, usable_bytes=usable, weight_bytes=weights,
        weight_offloaded_bytes=0.0, activation_bytes=0.0, runtime_overhead_bytes=PRELOAD_BYTES,
        kv_bytes=max(kv, 0.0), kv_bytes_per_token=per_token, kv_capacity_blocks=tokens,
        kv_capacity_tokens=tokens,
        max_concurrent_requests=tokens / mean_request_tokens if mean_request_tokens > 0 else 0.0,
        host_kv_bytes_per_token=0.0, fits=fits, reason=reason, kv_page_tokens=page, **hybrid)


def _slots_per_request(radix_cache: bool) -> int:
    return MAMBA_SLOTS_PER_REQUEST if radix_cache else MAMBA_SLOTS_PER_REQUEST_NO_RADIX


def _hybrid_state_pool(model: ModelSpec, config: ServingConfig, rest_bytes: float,
                       radix_cache: bool) -> dict:
    """SGLang's Mamba state pool of a hybrid (kv_cache_configurator.py
    _handle_max_mamba_cache, no speculative decoding): with the radix cache, slots =
    int((rest x r / (1 + r) - slot) // slot) for r = MAMBA_FULL_MEMORY_RATIO and `rest` the
    memory left after the weights; --disable-radix-cache with --max-running-requests (tuner's
    exports always give it): that many slots. The pool holds one padding slot more; the
    running requests are capped at slots // MAMBA_SLOTS_PER_REQUEST (resolve_max_num_reqs).
    pool_bytes: what the KV pool then lacks."""
    slot = sglang_state_bytes_per_request(model, config.tp)
    if rest_bytes <= 0 or slot <= 0:
        return dict(pool_bytes=0.0, state_slots=0, max_running_by_slots=0,
                    state_bytes_per_request=slot)
    if radix_cache:
        r = MAMBA_FULL_MEMORY_RATIO
        slots = int((rest_bytes * r / (1 + r) - slot) // slot)
    else:
        slots = max(int(config.max_running), 1)
    slots = max(slots, 0)
    return dict(pool_bytes=(slots + 1) * slot if slots else 0.0, state_slots=slots,
                max_running_by_slots=slots // _slots_per_request(radix_cache),
                state_bytes_per_request=slot)


def dp_attention_supported(model) -> bool:
    """Whether SGLang runs DP attention for `model` (a tuner.core.catalog.ModelSpec): attention
    per data-parallel rank with its experts split over every rank, the way tuner sizes and
    prices a mixture-of-experts plan at dp > 1. SGLang's models size their attention by the
    attention-TP group only in the families that implement it: DeepSeek's MLA models and the
    Qwen MoE models (sglang/srt/models/qwen3_moe.py: get_attention_tp_size()); others (e.g.
    Mixtral) split attention over all tp x dp GPUs, so such a plan is not what tuner priced.
    The Gated DeltaNet hybrid Qwen3-Next is one of them (read in the 0.5.23 wheel):
    models/qwen3_next.py splits its linear-attention heads by attn_tp_size too, and
    configs/qwen3_next.py sizes a Mamba state slot over linear_attn_tp_size() (the attention-TP
    group), while each DP rank's kv_cache_configurator.py sizes its own state pool from that
    GPU's memory (_handle_max_mamba_cache) and caps that rank's running requests
    (resolve_max_num_reqs: max_running_requests // attn_dp_size), which is the per-rank pool
    plan_memory_sglang gives a tp x dp plan (_hybrid_state_pool at config.tp)."""
    names = f"{getattr(model, 'name', '')} {getattr(model, 'hf_id', '')}".lower()
    return bool(getattr(model, "is_moe", False)) and (
        getattr(model, "kv_lora_rank", 0) > 0 or "qwen" in names)
