"""Memory plan: what fits on one GPU of a replica, and so how many KV tokens the cache holds."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from functools import lru_cache

from tuner.core.arch_support import model_architecture
from tuner.core.catalog import ARCHITECTURES, GIB, GPU, ModelSpec, assumed_shape
from tuner.core.config import ServingConfig
from tuner.core.engines import (
    generation_of,
    moe_independent_replicas,
    parse_version,
    weight_offload_scheme,
)

# What vLLM's start-up memory profile takes from the KV budget besides weights and activations
# (tuner.core.memory.runtime_overhead_bytes). The CUDA context is not among it: vLLM takes its
# baseline after the context exists, so the context sits outside gpu_memory_utilization (vLLM
# 0.6.0 worker.determine_num_available_blocks, 0.19 / 0.32 gpu_worker.determine_available_memory).
# Non-torch memory (cuBLAS workspaces, NCCL and custom all-reduce buffers): 0.05-0.35 GiB on one
# GPU (median ~0.15), 0.30-0.55 on two, 2.1 on eight in public vLLM start-up logs (V0 0.6-0.8,
# V1 0.10-0.11; benchmarks/kv_logs.py lists them): an ESTIMATE, 0.15 GiB + 0.28 GiB per extra
# tensor-parallel rank where vLLM's custom all-reduce maps its peers' buffers (NVLink GPUs: the
# logs that grow by it are A100 / H100 / H200), half that over PCIe (an L40S pair: +0.15 GiB).
NON_TORCH_BYTES = 0.15 * GIB
NON_TORCH_PER_EXTRA_RANK_BYTES = 0.28 * GIB
NON_TORCH_PER_EXTRA_PCIE_RANK_BYTES = 0.14 * GIB
# CUDA graphs, where a release counts them in the budget (ProfileRun.cuda_graphs_in_budget: 0.18
# and 0.19 capture their graph-memory probes inside the memory profile, and from 0.20 vLLM
# subtracts the estimate): 0.1-1.0 GiB per GPU in public logs; 0.5 GiB at vLLM's default 51
# capture sizes is an ESTIMATE (with it the RTX 4090 run of ../shared/fidelity, vLLM 0.19, plans
# the 2,588 blocks vLLM reported). vLLM extrapolates its estimate per graph, and the sizes it
# captures follow max_num_seqs (cuda_graph_capture_sizes), so the reserve scales with them.
CUDA_GRAPH_BYTES = 0.5 * GIB
DEFAULT_CAPTURE_SIZES = 51  # [1, 2, 4] + 8..248 by 8 + 256..512 by 16


def cuda_graph_capture_sizes(max_running: int, chunk_size: int) -> int:
    """How many batch sizes vLLM captures CUDA graphs for: [1, 2, 4] + range(8, 256, 8) +
    range(256, m + 1, 16) up to m = min(2 x max_num_seqs, 512, max_num_batched_tokens)
    (vLLM 0.19 config/vllm.py _set_cudagraph_sizes)."""
    m = min(2 * max_running, 512, chunk_size)
    sizes = [1, 2, 4] + list(range(8, 256, 8)) + list(range(256, 513, 16))
    return sum(1 for x in sizes if x <= m)
# Host memory the serving process cannot give to offloaded tensors: OS, the engine's Python
# process (tokenizer, scheduler, CUDA host allocations), page cache for the checkpoint while
# loading. ~8 GiB per GPU is an ESTIMATE; host RAM per GPU comes from the GPU catalog
# (GPU.host_ram_gib, the cloud instance's RAM / GPUs).
HOST_RESERVE_BYTES = 8.0 * GIB


@dataclass(frozen=True)
class MemoryPlan:
    """Per-GPU bytes of one replica (tensor-parallel ranks hold equal shares)."""

    gpu_memory_bytes: int
    usable_bytes: float  # memory x gpu_memory_utilization
    weight_bytes: float  # on GPU, after offload, per rank
    weight_offloaded_bytes: float  # in host memory, per rank
    activation_bytes: float  # start-up profile peak: forward pass or sampler (ProfileRun)
    runtime_overhead_bytes: float
    kv_bytes: float  # what remains for the KV cache
    kv_bytes_per_token: float  # per rank, KV layers resident on the GPU only
    kv_capacity_blocks: int
    kv_capacity_tokens: int
    max_concurrent_requests: float  # KV capacity / mean (prompt + output) of the workload
    host_kv_bytes_per_token: float  # offloaded layers' KV, per rank, in host memory
    fits: bool
    reason: str
    # offloading (tuner.sim.offload): GPU staging buffers and the host-memory side, per rank
    offload_staging_bytes: float = 0.0  # GPU memory receiving offloaded weights
    # how offloaded weights reach the GPU (tuner.core.engines.weight_offload_scheme); ""
    # without weight offload
    weight_offload_scheme: str = ""
    host_kv_bytes: float = 0.0  # offloaded layers' KV at full KV capacity
    host_limit_bytes: float = 0.0  # host RAM per GPU - HOST_RESERVE_BYTES
    host_used_bytes: float = 0.0  # offloaded weights + host KV
    # SGLang's KV page (tokens) the pool was rounded to and the scheduler allocates in
    # (tuner.core.sglang.sglang_page_size); None: a vLLM plan (its block is the config's
    # block_size) or a plan stored before the field
    kv_page_tokens: int | None = None
    # a hybrid (Gated DeltaNet) model under vLLM V1 (hybrid_layout): the attention block vLLM
    # raises so a page holds a layer's recurrent state (0: config.block_size) and the state
    # pages (in attention blocks) each running request takes from the same pool, which the
    # scheduler charges at its admission (SchedulerParams.state_blocks). kv_capacity_blocks /
    # _tokens are then the whole pool, its attention-token capacity before any state block is
    # taken; max_concurrent_requests counts the state blocks. (A plan stored before this held
    # max_running_by_state, a cap with the state pages set aside: from_dict drops it.)
    block_size_tokens: int = 0
    state_blocks_per_request: int = 0
    state_bytes_per_request: float = 0.0
    # a hybrid under SGLang (tuner.core.sglang._hybrid_state_pool): its Mamba state pool's slots
    # (max_mamba_cache_size) and the running requests they allow (0: not a hybrid SGLang plan)
    state_slots: int = 0
    max_running_by_slots: int = 0

    @property
    def state_pool_bytes(self) -> float:
        """SGLang's Mamba state pool of a hybrid plan: its slots and the padding slot
        (tuner.core.sglang._hybrid_state_pool), carved out before the KV pool; 0 otherwise."""
        if not self.state_slots:
            return 0.0
        return (self.state_slots + 1) * (self.state_bytes_per_request or 0.0)

    @property
    def kv_gpu_bytes_used(self) -> float:
        """KV bytes on the GPU at full capacity (whole blocks only)."""
        return self.kv_capacity_tokens * self.kv_bytes_per_token

    def breakdown(self) -> dict[str, float]:
        """Where the bytes of one GPU (and its share of host RAM) go, for reports."""
        return {
            "weights_gpu_bytes": self.weight_bytes,
            "weights_host_bytes": self.weight_offloaded_bytes,
            "kv_gpu_bytes": self.kv_gpu_bytes_used,
            "kv_host_bytes": self.host_kv_bytes,
            "activations_bytes": self.activation_bytes,
            "offload_staging_bytes": self.offload_staging_bytes,
            "runtime_overhead_bytes": self.runtime_overhead_bytes,
            "gpu_usable_bytes": self.usable_bytes,
            "host_used_bytes": self.host_used_bytes,
            "host_limit_bytes": self.host_limit_bytes,
        }

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> MemoryPlan:
        """A stored plan (:meth:`to_dict`: a trial's, results.json's, a report context's). A
        field it lacks (an older or a hand-written plan) takes its default, or None where it
        has none (readers show None as unknown); keys it does not know are dropped."""
        kw = {}
        for f in dataclasses.fields(cls):
            if f.name in d:
                kw[f.name] = d[f.name]
            elif f.default is dataclasses.MISSING:
                kw[f.name] = None
        return cls(**kw)


#: the GPU buffers offloaded weights arrive in, by tuner.core.engines.weight_offload_scheme
#: (offload_staging_bytes; vLLM's UVA offload has none); "": a plan stored before the scheme
#: was, which streamed them (LM-Offload's prefetch)
OFFLOAD_BUFFER_LABELS = {"vllm-copy": "offloaded-layer copy (1 layer, each forward)",
                         "prefetch": "streamed-weight buffers (2 layers)",
                         "": "streamed-weight buffers (2 layers)"}
#: a name for gpu_memory_items' rows whose label depends on the plan, for a column over plans
#: whose labels differ (two engines, two offload schemes)
MEMORY_ITEM_NAMES = {"runtime": "runtime", "offload_buffers": "weight-offload buffers"}


def gpu_memory_items(plan: MemoryPlan,
                     engine: str = "vllm") -> list[tuple[str, str, float | None]]:
    """Where one GPU's memory goes under `plan`, as (key, label, bytes), in the order and
    words of `tuner simulate`'s memory table and the report's memory rows (one list, so the two
    agree): weights, activations, the runtime, the weight-offload buffers (where the plan has
    any), SGLang's Mamba state pool (a hybrid's), the KV cache. A figure a stored plan lacks
    is None."""
    items = [("weights", "weights", plan.weight_bytes),
             ("activations", "activations (start-up profile peak)", plan.activation_bytes),
             # vLLM's non-torch memory and CUDA graphs; SGLang's, what its preload holds
             ("runtime", "runtime (non-torch memory, CUDA graphs)" if engine == "vllm"
              else "runtime (held before the weights load)", plan.runtime_overhead_bytes)]
    if plan.offload_staging_bytes:
        items.append(("offload_buffers", OFFLOAD_BUFFER_LABELS.get(
            plan.weight_offload_scheme or "", OFFLOAD_BUFFER_LABELS["prefetch"]),
            plan.offload_staging_bytes))
    if plan.state_slots:  # carved out before the KV pool (tuner.core.sglang)
        items.append(("state", "Mamba state pool", plan.state_pool_bytes))
    items.append(("kv", "KV cache", plan.kv_bytes))
    return items


@dataclass(frozen=True)
class ProfileRun:
    """How a vLLM release's start-up profile run sizes what it reserves besides the weights:
    the forward pass over max_num_batched_tokens, then the sampler over min(max_num_seqs,
    max_num_batched_tokens) dummy requests; the reservation is the larger of the two peaks (the
    forward pass's intermediates are freed before the sampler runs)."""

    since: tuple[int, int, int]
    sampler: str  # how the dummy requests sample (said in describe_reserve)
    sampler_bytes_per_logit: float  # x rows x vocabulary
    # rows of the fp32 [rows, vocabulary] buffer Triton's top-k / top-p kernel keeps (the GPU's
    # SM count, capped at the rows; ~128); 0 where that kernel does not run
    sampler_buffer_rows: int
    cuda_graphs_in_budget: bool
    source: str
    # the model runner this row describes: "v1" (gpu_model_runner) or "v2" (model runner V2,
    # vllm/v1/worker/gpu/), which a release picks per model (MRV2_DEFAULTS)
    runner: str = "v1"


#: Oldest first; a release takes the last row of the model runner it picks for the model
#: (`mrv2_default`) whose `since` it has reached. Each `since` is the first release whose wheel
#: was checked to have the change (vLLM wheels 0.8.0-0.33.0 read from PyPI, 0.6.0).
PROFILE_RUNS: tuple[ProfileRun, ...] = (
    ProfileRun((0, 5, 0), "top-k / top-p by sort", 40.0, 0, False,
               "vLLM 0.6.0 model_runner.profile_run: PyTorch's sort-based top-k / top-p over "
               "bf16 + fp32 logits (sorted values, int64 indices, masks, softmax, cumsum, "
               "scatter): ~40 bytes per logit; public V0 logs give 1.40 GiB for R 256 x "
               "V 151,936 (1.45 predicted) and 1.26 GiB for R 256 x V 128,256 (1.22)"),
    ProfileRun((0, 8, 0), "top-k / top-p by sort", 38.5, 0, False,
               "V1 gpu_model_runner._dummy_sampler_run, sort-based top-k / top-p until 0.16: "
               "public vLLM 0.11 logs on H100 at R 1,024 give 4.76, 5.56 and 7.38 GiB for "
               "vocabularies of 128,256, 151,936 and 201,088 (38.5 bytes per logit). Where "
               "FlashInfer is installed (an optional extra until 0.11, in the vllm-openai image), "
               "0.8-0.11 sample through it by default and reserve far less (the 0.10 A100 rows "
               "of benchmarks/kv_logs.py); from 0.12 it is opt-in"),
    ProfileRun((0, 17, 0), "Triton top-k / top-p", 14.0, 128, False,
               "Triton top-k / top-p from 0.17 (rows >= 8), in place on the fp32 logits; bf16 + "
               "fp32 logits, probabilities and sampling noise: 14 bytes per logit, plus the "
               "kernel's cached fp32 [SMs, vocabulary] buffer (0.19.1 source)"),
    ProfileRun((0, 18, 0), "Triton top-k / top-p", 14.0, 128, True,
               "as 0.17, and CUDA graphs count: vLLM captures its graph-memory probes inside "
               "the memory profile (0.19.1 gpu_worker.determine_available_memory; "
               "profile_cudagraph_memory is new in 0.18) and from 0.20 subtracts that estimate "
               "(VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS default 1)"),
    ProfileRun((0, 22, 0), "greedy", 2.0, 0, False,
               "model runner V2 (the models MRV2_DEFAULTS gives it): its dummy requests sample "
               "greedily (bf16 logits only; InputBatch.make_dummy, 0.22-0.32 "
               "v1/worker/gpu/model_runner.py _dummy_sampler_run) and its "
               "profile_cudagraph_memory returns 0 in 0.22-0.28", runner="v2"),
    ProfileRun((0, 29, 0), "greedy", 2.0, 0, True,
               "model runner V2 from 0.29: greedy dummy sampling; its CUDA-graph estimate "
               "(cudagraph_utils.profile_cudagraph_memory, a throwaway pool) is subtracted",
               runner="v2"),
    ProfileRun((0, 33, 0), "every sampling step (FlashInfer top-k / top-p)", 14.0, 0, True,
               "model runner V2 in 0.33: _dummy_sampler_run samples a second time with "
               "SamplingParams.for_sampler_warmup (temperature, top-k 50, top-p, min-p, "
               "penalties, logit bias, logprobs) so the profile pays for the fp32 pipeline; on "
               "CUDA (VLLM_USE_FLASHINFER_SAMPLER default on, FlashInfer a requirement) the bf16 "
               "logits, their fp32 copy, and FlashInfer's top_k_mask_logits output and softmax "
               "probabilities are alive together: 2 + 4 + 4 + 4 = 14 bytes per logit (an "
               "ESTIMATE read from the 0.33.0 wheel's source, not measured); graphs as 0.29",
               runner="v2"),
)


@dataclass(frozen=True)
class V2Default:
    """Which models a release runs on model runner V2 when VLLM_USE_V2_MODEL_RUNNER is unset
    (VllmConfig.use_v2_model_runner / _is_default_v2_model_runner_model): `rule` over the
    config.json `architectures` (`listed`: DEFAULT_V2_MODEL_RUNNER_ARCHITECTURES), ModelConfig
    .is_moe (routed experts) and .is_quantized (the checkpoint's quantization_config)."""

    since: tuple[int, int, int]
    listed: frozenset[str]
    # "listed dense unquantized" (0.22-0.23), "listed" (0.24), "listed or dense" (0.25-0.28),
    # "every" (0.29 on)
    rule: str
    source: str

    def runs_v2(self, architectures: tuple[str, ...], moe: bool, quantized: bool) -> bool:
        on_list = any(a in self.listed for a in architectures)
        if self.rule == "listed dense unquantized":
            return on_list and not moe and not quantized
        if self.rule == "listed":
            return on_list
        if self.rule == "listed or dense":
            return on_list or not moe
        return self.rule == "every"


_MRV2_MOE_LIST = frozenset({"DeepseekV2ForCausalLM", "Qwen2MoeForCausalLM",
                            "GraniteMoeForCausalLM"})
#: Oldest first; a release before the first row runs model runner V1 for every model (0.21.0's
#: VLLM_USE_V2_MODEL_RUNNER defaults to 0). Read in each wheel's vllm/config/vllm.py (0.22.1,
#: 0.25.1 and 0.27.1 as their .0). Left out: speculative methods, hybrid / attention-free models
#: (tuner refuses hybrids), and ROCm's own exclusions (0.27 on).
MRV2_DEFAULTS: tuple[V2Default, ...] = (
    V2Default((0, 22, 0), frozenset({"Qwen3ForCausalLM"}), "listed dense unquantized",
              "0.22.0 DEFAULT_V2_MODEL_RUNNER_ARCHITECTURES = {Qwen3ForCausalLM}, and "
              "_is_default_v2_model_runner_model requires not is_moe and not is_quantized"),
    V2Default((0, 23, 0), frozenset({"LlamaForCausalLM", "MistralForCausalLM",
                                     "Qwen3ForCausalLM"}), "listed dense unquantized",
              "0.23.0: Llama, Mistral and Qwen3 listed; the same dense, unquantized condition"),
    V2Default((0, 24, 0), _MRV2_MOE_LIST | {"LlamaForCausalLM", "MistralForCausalLM",
                                            "Qwen3ForCausalLM"}, "listed",
              "0.24.0: MoE architectures join the list and the MoE / quantized condition goes: "
              "any listed architecture, quantized or not"),
    V2Default((0, 25, 0), _MRV2_MOE_LIST, "listed or dense",
              "0.25.0: every dense model (quantized too) plus the listed MoE architectures "
              "(`any(listed) or not is_moe`)"),
    V2Default((0, 26, 0), _MRV2_MOE_LIST | {"InklingForCausalLM",
                                            "InklingForConditionalGeneration",
                                            "LongcatFlashNgramForCausalLM"}, "listed or dense",
              "0.26.0: as 0.25, list grown"),
    V2Default((0, 27, 0), _MRV2_MOE_LIST | {"InklingForCausalLM",
                                            "InklingForConditionalGeneration",
                                            "LongcatFlashNgramForCausalLM",
                                            "KimiK3ForConditionalGeneration"}, "listed or dense",
              "0.27.0: as 0.25, list grown"),
    V2Default((0, 28, 0), _MRV2_MOE_LIST | {"InklingForCausalLM",
                                            "InklingForConditionalGeneration",
                                            "LongcatFlashNgramForCausalLM",
                                            "KimiK3ForConditionalGeneration",
                                            "DeepseekV4ForCausalLM"}, "listed or dense",
              "0.28.0: as 0.25, list grown"),
    V2Default((0, 29, 0), frozenset(), "every",
              "0.29.0: use_v2_model_runner no longer reads an architecture list: every model "
              "(0.29-0.33) unless an unsupported feature is set"),
)


def model_runner_key(model: ModelSpec | None) -> tuple[tuple[str, ...], bool, bool]:
    """(config.json architectures, MoE, quantized checkpoint) of `model`: what vLLM's model
    runner choice reads; ((), False, False) for no model."""
    if model is None:
        return (), False, False
    return (_architectures_of(model), model.is_moe,
            model.checkpoint_bits < 16 or bool(model.checkpoint_quantization))


@lru_cache(maxsize=256)
def _architectures_of(model: ModelSpec) -> tuple[str, ...]:
    # cached: a spec read from a config.json path has its file read again otherwise
    arch = model_architecture(model)
    return arch.architectures if arch is not None else ()


def mrv2_default(engine_version: str | None, architectures: tuple[str, ...] = (),
                 moe: bool = False, quantized: bool = False) -> bool:
    """Whether `engine_version` (None: the newest) runs a model on model runner V2 by default
    (MRV2_DEFAULTS). An unknown architecture (()) counts as one not on the list."""
    v = parse_version(engine_version)
    rows = [r for r in MRV2_DEFAULTS if v is None or r.since <= v]
    return bool(rows) and rows[-1].runs_v2(tuple(architectures), moe, quantized)


def profile_run_for(engine_version: str | None = None, moe: bool = False,
                    architectures: tuple[str, ...] = (), quantized: bool = False) -> ProfileRun:
    """The start-up profile of `engine_version` (None / 'newest': the newest release) for a
    model of these config.json `architectures` (() unknown), MoE (`moe`) or dense, quantized
    checkpoint or not: the rows of the model runner that release picks for it."""
    v = parse_version(engine_version)
    runner = "v2" if mrv2_default(engine_version, architectures, moe, quantized) else "v1"
    rows = [p for p in PROFILE_RUNS if p.runner == runner]
    if v is None:
        return rows[-1]
    return ([p for p in rows if p.since <= v] or rows[:1])[-1]


def _key_args(model: ModelSpec) -> tuple[bool, tuple[str, ...], bool]:
    """profile_run_for's (moe, architectures, quantized) for `model`."""
    archs, moe, quantized = model_runner_key(model)
    return moe, archs, quantized


def activation_bytes(model: ModelSpec, config: ServingConfig,
                     engine_version: str | None = None) -> float:
    """Peak memory of vLLM's start-up profile run (what it reserves for activations): the larger
    of the forward pass at the full token budget (at the MLP: the residual and normed hidden
    states, gate/up and activated intermediate in 16-bit) and the sampler over
    min(R_max, budget) dummy requests (`ProfileRun`, by release; the [tokens, hidden] output is
    still alive then)."""
    tokens = config.chunk_size
    tp = config.tp
    # FFN width one token touches: a dense layer's, or an MoE layer's top-k experts + shared
    # experts (vLLM's fused-MoE kernel holds top_k intermediate rows per token)
    moe_width = model.experts_per_token * model.moe_intermediate_size \
        + model.shared_expert_intermediate_size if model.is_moe else 0
    ffn_width = max(model.intermediate_size if model.num_dense_layers else 0, moe_width)
    forward = tokens * 2.0 * (2 * model.hidden_size + 3 * ffn_width / tp)
    run = profile_run_for(engine_version, *_key_args(model))
    rows = min(config.max_running, tokens)
    sampler = (run.sampler_bytes_per_logit * rows * model.vocab_size
               + 4.0 * min(rows, run.sampler_buffer_rows) * model.vocab_size
               + 2.0 * tokens * model.hidden_size)
    return max(forward, sampler)


def runtime_overhead_bytes(config: ServingConfig, engine_version: str | None = None,
                           moe: bool = False, cuda_graphs: bool = True,
                           nvlink: bool = True, model: ModelSpec | None = None) -> float:
    """Non-torch memory (grows with tensor-parallel ranks) and, where the release counts them
    and the device captures them (`cuda_graphs`: an NVIDIA GPU; not a CPU device, and not AMD,
    whose estimate vLLM skipped until 0.3x), CUDA graphs: what vLLM's profile takes from the
    budget besides weights and activations. `model` (its architecture, MoE, quantization:
    model_runner_key) picks the model runner where given; else a model of `moe` whose
    architecture is unknown."""
    key = _key_args(model) if model is not None else (moe, (), False)
    counted = cuda_graphs and profile_run_for(engine_version, *key).cuda_graphs_in_budget
    graphs = (CUDA_GRAPH_BYTES * cuda_graph_capture_sizes(config.max_running, config.chunk_size)
              / DEFAULT_CAPTURE_SIZES if counted else 0.0)
    per_rank = NON_TORCH_PER_EXTRA_RANK_BYTES if nvlink else NON_TORCH_PER_EXTRA_PCIE_RANK_BYTES
    return NON_TORCH_BYTES + per_rank * (config.tp - 1) + graphs


def describe_reserve(model: ModelSpec, config: ServingConfig,
                     engine_version: str | None = None) -> str:
    """One line on what vLLM's start-up profile reserves for this plan (ProfileRun)."""
    run = profile_run_for(engine_version, *_key_args(model))
    rows = min(config.max_running, config.chunk_size)
    release = f"vLLM {engine_version}" if parse_version(engine_version) else "the newest vLLM"
    graphs = (f"CUDA graphs for {cuda_graph_capture_sizes(config.max_running, config.chunk_size)}"
              " batch sizes counted" if run.cuda_graphs_in_budget
              else "CUDA graphs outside the budget")
    return (f"{release}'s start-up profile: the larger of the forward pass at "
            f"{config.chunk_size:,} tokens and the sampler over {rows:,} dummy requests "
            f"({run.sampler}); {graphs}")


#: the first vLLM release that caches an MLA model's compressed latent: v0.7.1 ("MLA ... 10x
#: token memory capacity"; Neural Magic's "Enhancing DeepSeek Models with MLA and FP8
#: Optimizations in vLLM", 2025-02-04: DeepSeek on 8 x H200 holds 54,560 tokens under v0.7.0,
#: 512,000 under v0.7.1). Before it vLLM's DeepseekV2Attention up-projects every head's K and V
#: and caches them, V padded to the query / key width (qk_nope + qk_rope: "padding value to
#: qk_head_dim for alignment"), the heads split over the tensor-parallel ranks
VLLM_MLA_CACHE_SINCE = (0, 7, 1)


#: vLLM's sparse-MLA (DeepSeek-V3.2) attention backend for an FP8 KV cache, by the GPU's CUDA
#: compute capability (major), and whether it keeps the packed fp8_ds_mla layout (656 bytes
#: per token for V3.2's latent) or a plain FP8 cache (576). Read in vLLM 0.32's source
#: (vllm/platforms/cuda.py _get_backend_priorities; the backends' supports_combination under
#: vllm/v1/attention/backends/mla/; mla_attention.py _canonicalize_sparse_mla_kv_cache_dtype);
#: earlier releases are not known here and are planned the same:
#: - 9.x (H100, H200): FLASH_ATTN_MLA_SPARSE takes a 16-bit cache only, so FLASHMLA_SPARSE,
#:   which serves fp8 as fp8_ds_mla
#: - 10.x (B200, B300, GB200): FLASHINFER_MLA_SPARSE comes first for a quantized cache and
#:   refuses fp8_ds_mla, so the cache stays plain fp8 (vLLM logs "Using standard fp8 KV cache
#:   format"; --attention-backend FLASHMLA_SPARSE would pack it)
#: - 12.x (RTX PRO 6000): FLASHINFER_MLA_SPARSE_SM120, which turns fp8 (and auto) into
#:   fp8_ds_mla (tuner.core.engine_defaults.SM120_GPUS)
SPARSE_MLA_FP8_BACKENDS = {9: ("FLASHMLA_SPARSE", True),
                           10: ("FLASHINFER_MLA_SPARSE", False),
                           12: ("FLASHINFER_MLA_SPARSE_SM120", True)}


def sparse_mla_fp8_backend(gpu, engine: str = "vllm") -> tuple[str, bool]:
    """(backend, packed): vLLM's sparse-MLA backend for an FP8 cache on `gpu` and whether its
    cache is the packed fp8_ds_mla layout (SPARSE_MLA_FP8_BACKENDS). ("", True) where that is
    not read here (no GPU, one of no stated compute capability, SGLang, whose layout is its
    own): the packed layout, as tuner has planned it."""
    cc = getattr(gpu, "compute_capability", None)
    if engine != "vllm" or cc is None:
        return "", True
    return SPARSE_MLA_FP8_BACKENDS.get(int(cc), ("", True))


def sparse_mla_packed_fp8(gpu, engine: str = "vllm") -> bool:
    """Whether a sparse-MLA model's 8-bit cache is vLLM's packed fp8_ds_mla on `gpu` (False:
    plain FP8 on data-centre Blackwell, sparse_mla_fp8_backend)."""
    return sparse_mla_fp8_backend(gpu, engine)[1]


def sparse_mla_cache_note(model: ModelSpec, gpu, kv_bits: int, engine: str = "vllm") -> str:
    """What the plan's KV bytes per token and layer are for a sparse-MLA model's FP8 cache
    under vLLM on `gpu`: the backend, its layout and its bytes, sourced; "" elsewhere."""
    if not (getattr(model, "is_sparse_attention", False) and kv_bits == 8):
        return ""
    backend, packed = sparse_mla_fp8_backend(gpu, engine)
    if not backend:
        return ""
    latent = model.latent_bytes_per_token_per_layer(8, packed)
    layout = ("the packed fp8_ds_mla layout (FP8 latent, an FP32 scale per 128 values, 16-bit "
              "rope)" if packed else "a plain FP8 cache (it refuses fp8_ds_mla)")
    return (f"KV cache of {model.name} on {gpu.name} (compute capability "
            f"{gpu.compute_capability:.1f}): vLLM picks its {backend} backend, which keeps "
            f"{layout}: {latent:g} bytes per token and layer + the indexer's "
            f"{model.index_bytes_per_token_per_layer:g} (read in vLLM 0.32's "
            "vllm/platforms/cuda.py and vllm/v1/attention/backends/mla/; earlier releases are "
            "not known).")


def kv_bytes_per_token_per_layer_rank(model: ModelSpec, kv_bits: int, tp: int = 1,
                                      engine_version: str | None = None, gpu=None,
                                      engine: str = "vllm") -> float:
    """KV bytes one token holds in one attention layer on one tensor-parallel rank: K and V of
    the rank's KV heads (heads are split across ranks, replicated when fewer than `tp`); MLA
    (DeepSeek) caches one latent of kv_lora_rank + qk_rope_head_dim per token that every rank
    keeps whole (vLLM's MLA backends replicate it), except under a vLLM release before
    VLLM_MLA_CACHE_SINCE (`engine_version`; None: the newest), which caches every head's K and
    V at the query / key width. A sparse-MLA model's 8-bit cache is laid out as `engine`'s
    backend on `gpu` keeps it (sparse_mla_packed_fp8; no GPU: packed)."""
    if model.is_mla:
        v = parse_version(engine_version)
        if v is not None and v < VLLM_MLA_CACHE_SINCE:
            return max(1.0, model.num_heads / tp) * 2 * model.head_dim * kv_bits / 8.0
        return model.kv_bytes_per_token_per_layer(kv_bits, sparse_mla_packed_fp8(gpu, engine))
    kv_heads_per_rank = max(1.0, model.num_kv_heads / tp)
    return kv_heads_per_rank * (model.head_dim + model.value_head_dim) * kv_bits / 8.0


def window_kv_tokens(model: ModelSpec, tokens: float) -> float:
    """Tokens of KV a sliding-window layer keeps for a request of `tokens` tokens: at most
    `sliding_window` (vLLM frees the blocks that fall out of the window); all of them for a
    model without a window."""
    return min(tokens, model.sliding_window) if model.sliding_window > 0 else tokens


def kv_bytes_per_request(model: ModelSpec, tokens: float, kv_bits: int, tp: int = 1,
                         layers: int | None = None) -> float:
    """KV bytes per rank of one request holding `tokens` tokens over `layers` layers (default
    all): full-attention layers keep every token, sliding-window layers at most the window.
    With fewer than all layers (KV offload) the window layers are taken in proportion."""
    n = model.num_kv_layers if layers is None else min(layers, model.num_kv_layers)
    per_layer = kv_bytes_per_token_per_layer_rank(model, kv_bits, tp)
    window_layers = model.num_window_layers * n / model.num_kv_layers
    return per_layer * ((n - window_layers) * tokens
                        + window_layers * window_kv_tokens(model, tokens))


def kv_layer_fraction(model: ModelSpec, mean_request_tokens: float = 0.0) -> float:
    """Mean over layers of the share of a request's tokens whose KV a layer keeps: 1 without
    sliding windows; with them, window layers keep window / `mean_request_tokens` (at most 1;
    1 when the mean is unknown, i.e. every token counted). The memory plan multiplies the
    per-layer KV of one token by this, so KV capacity is in tokens of the workload's mean
    request (an estimate: requests far from the mean hold more or fewer bytes per token)."""
    if model.num_window_layers == 0 or mean_request_tokens <= 0:
        return 1.0
    kept = window_kv_tokens(model, mean_request_tokens) / mean_request_tokens
    return (model.num_full_attention_layers + model.num_window_layers * kept) / model.num_kv_layers


#: FlashAttention's kernel block (its supported sizes are multiples of 16): vLLM raises a
#: hybrid model's attention block in steps of it (platforms/interface.py
#: _align_hybrid_block_size, vLLM 0.32)
HYBRID_BLOCK_ALIGN_TOKENS = 16


@dataclass(frozen=True)
class HybridLayout:
    """How vLLM V1 pages a Gated DeltaNet hybrid (0.32 kv_cache_utils
    _get_kv_cache_groups_uniform_page_size and _align_hybrid_block_size): every page is one
    layer's attention block or one layer's recurrent state, padded to one size; layers group
    by type in groups of `group_layers` (the smaller type's count), a block serves one group,
    and a request holds its attention groups' blocks per block_size tokens plus one state block
    per linear-layer group (mamba_cache_mode "none"; "align", with prefix caching, keeps the
    running state in one block too)."""

    block_size_tokens: int
    group_layers: int
    attention_groups: int
    state_groups: int
    block_bytes: float  # one block of one group: group_layers pages, per rank
    state_bytes_per_request: float  # the unpadded recurrent state of all linear layers


#: vLLM's NemotronHForCausalLMConfig hook (model_executor/models/config.py), read in the wheels:
#: none through 0.12.0 (mamba_ssm_cache_dtype "auto": the temporal state at the model dtype,
#: whatever the config says); from 0.13.0 (vllm#29978) the config's mamba_ssm_cache_dtype,
#: else "float16" (0.13.0 - 0.19.1); from 0.20.0 (vllm#39032) else "float32"
#: (DEFAULT_MAMBA_SSM_CACHE_DTYPE; the 0.20.0, 0.24.0 and 0.33.0 wheels)
NEMOTRON_H_SSM_HOOK_SINCE = (0, 13, 0)
NEMOTRON_H_SSM_FLOAT32_SINCE = (0, 20, 0)


def vllm_ssm_state_bits(model: ModelSpec, engine_version: str | None = None) -> int:
    """The temporal (SSM) state's width vLLM `engine_version` (None: the newest) keeps for
    `model`: a Nemotron-H's as its release's hook sets it (NEMOTRON_H_SSM_*; 16-bit model
    dtype, the config's dtype, else float16 or float32); any other hybrid's
    linear_ssm_state_bits on every release (GraniteMoeHybrid and Qwen3-Next have no hook:
    "auto", the model dtype; Qwen3.5's hook copies the config's mamba_ssm_dtype)."""
    if model.linear_ssm_dtype_rule != "nemotron_h":
        return model.linear_ssm_state_bits
    v = parse_version(engine_version)
    if v is not None and v < NEMOTRON_H_SSM_HOOK_SINCE:
        return 16
    if model.linear_ssm_dtype:
        return 32 if model.linear_ssm_dtype in ("float32", "fp32") else 16
    return 16 if v is not None and v < NEMOTRON_H_SSM_FLOAT32_SINCE else 32


def hybrid_layout(model: ModelSpec, config: ServingConfig,
                  ssm_state_bits: int | None = None) -> HybridLayout:
    """`ssm_state_bits`: the temporal state's width (vllm_ssm_state_bits for the release
    planned); None: the spec's linear_ssm_state_bits."""
    tp = config.tp
    if ssm_state_bits is not None and ssm_state_bits != model.linear_ssm_state_bits:
        model = dataclasses.replace(model, linear_ssm_state_bits=ssm_state_bits)
    page_token = kv_bytes_per_token_per_layer_rank(model, config.kv_bits, tp)
    state = model.linear_state_bytes_per_layer_rank(tp)
    align = max(HYBRID_BLOCK_ALIGN_TOKENS, config.block_size)
    block = max(config.block_size, align * math.ceil(state / (align * page_token)))
    attn, lin = model.num_kv_layers, model.linear_attention_layers
    group = min(attn, lin)
    if max(attn, lin) < 1.5 * group:
        group = max(attn, lin)
    return HybridLayout(block, group, math.ceil(attn / group), math.ceil(lin / group),
                        group * block * page_token, state * lin)


def moe_replica_config(model: ModelSpec, config: ServingConfig, engine_version: str | None,
                       engine: str = "vllm") -> ServingConfig:
    """The config one replica is sized and priced at: `config` at dp 1 where a
    mixture-of-experts plan's dp > 1 is dp independent engines, each holding every expert
    (vLLM V0: tuner.core.engines.moe_independent_replicas), as a dense replica is; else
    `config` itself (V1's one data-parallel engine splits the experts over all tp x dp GPUs)."""
    if not (model.is_moe and config.dp > 1) or not moe_independent_replicas(  # cheap test first
            generation_of(engine_version), engine, model.is_moe, config.dp):
        return config
    return dataclasses.replace(config, dp=1)


def weight_bytes_per_rank(model: ModelSpec, config: ServingConfig) -> float:
    """Weight bytes one GPU holds (before any offload): its tensor-parallel share; vLLM splits
    an MoE model's routed experts over all tp x dp GPUs (sliced, or whole experts with expert
    parallelism), so each GPU holds 1/dp of its replica's share of them (predictors.moe).
    With pipeline parallelism a GPU holds its stage's layers (the first stage, of
    ceil(layers / pp), the most) plus the larger of the embedding (first stage) and the LM head
    (last stage), as vLLM partitions them."""
    per_rank = model.weight_bytes(config.weight_bits) / config.tp
    if config.pp > 1:
        layers = math.ceil(model.num_layers / config.pp)
        head = 0 if model.tie_embeddings else model.lm_head_params
        ends = 2.0 * max(model.embedding_params, head)
        per_rank = (layers * model.linear_weight_bytes_per_layer(config.weight_bits) + ends
                    + 2.0 * model.norm_params * layers / model.num_layers) / config.tp
    if model.is_moe and config.dp > 1:
        bits = config.weight_bits
        per_param = model.weight_bytes_per_param(bits)  # as weight_bytes counted them
        experts = model.num_moe_layers * model.num_experts * model.expert_params * per_param
        per_rank -= experts / config.tp * (1.0 - 1.0 / config.dp) \
            * math.ceil(model.num_layers / config.pp) / model.num_layers
    return per_rank + mla_rank_extra_bytes(model, config)


def decoder_layer_bytes_per_rank(model: ModelSpec, config: ServingConfig) -> float:
    """One decoder layer's weights on one GPU (weight_bytes_per_rank over its pipeline stage's
    layers, the embedding and LM head it holds left out): what vLLM's --cpu-offload-gb moves
    per layer, as it offloads decoder layers only (make_layers wraps them; the embedding and
    the LM head stay on the GPU)."""
    head = 0 if model.tie_embeddings else model.lm_head_params
    ends = (model.embedding_params + head if config.pp == 1
            else max(model.embedding_params, head))
    layers = math.ceil(model.num_layers / config.pp)
    return max(weight_bytes_per_rank(model, config) - 2.0 * ends / config.tp, 0.0) / layers


def mla_rank_extra_bytes(model: ModelSpec, config: ServingConfig) -> float:
    """Bytes one GPU of an MLA (DeepSeek-style) model holds beyond its 1/tp share of
    ModelSpec.weight_bytes, as vLLM builds the model (deepseek_v2.py and mla_attention.py, read
    in the 0.32 source; SGLang's deepseek_v2.py replicates the same layers), for the layers of
    the first pipeline stage:

    - the q / kv down-projection (mla_down_proj_params_per_layer) runs replicated: whole on
      every rank, (1 - 1/tp) of it more than the share;
    - the MoE router (GateLinear, a ReplicatedLinear built without quant_config, so at the
      16-bit model dtype): whole and 16-bit on every rank, not 1/tp at the weight bits;
    - W_UK_T and W_UV, the 16-bit copy of the rank's kv_b_proj slice the absorbed decode
      reads (mla_absorbed_params_per_layer / tp), next to kv_b_proj itself;
    - DeepSeek sparse attention's indexer, whole on every rank: wq_b at the weight bits and
      wk + weights_proj at 16 bits (index_*_params_per_layer).

    About 1.2 GiB per GPU for DeepSeek-V3 and 2.0 GiB for V3.2 at TP 8 (FP8): KV capacity
    taken from a plan that fits with little room. 0 for a GQA model."""
    if not model.is_mla:
        return 0.0
    tp = config.tp
    per_param = model.weight_bytes_per_param(config.weight_bits)  # as weight_bytes counts it
    per_layer = (model.mla_down_proj_params_per_layer * per_param * (1.0 - 1.0 / tp)
                 + 2.0 * model.mla_absorbed_params_per_layer / tp
                 + model.index_quantized_params_per_layer * per_param
                 + 2.0 * model.index_16bit_params_per_layer)
    router = model.router_params * (2.0 - per_param / tp)  # per MoE layer
    stage = math.ceil(model.num_layers / config.pp) / model.num_layers
    return stage * (model.num_kv_layers * per_layer + model.num_moe_layers * router)


#: vLLM releases that build a VLM's vision tower only when --limit-mm-per-prompt leaves one of
#: its modalities above 0, per config.json architecture: (first release, the tower's
#: modalities). qwen2_5_vl.py, mistral3.py and mllama4.py test the limits from 0.11 (the 0.14.0
#: wheel's Qwen2_5_VLForConditionalGeneration builds `visual` only `if get_limit_per_prompt(
#: "image") or get_limit_per_prompt("video")`); gemma3_mm.py builds its SiglipVisionModel
#: unconditionally through 0.14.0 and inside `_mark_tower_model(vllm_config, "image")` from 0.15.0
VLLM_TOWER_SKIP: dict[str, tuple[tuple[int, int, int], tuple[str, ...]]] = {
    "Qwen2_5_VLForConditionalGeneration": ((0, 11, 0), ("image", "video")),
    "Mistral3ForConditionalGeneration": ((0, 11, 0), ("image",)),
    "Llama4ForConditionalGeneration": ((0, 11, 0), ("image",)),
    "Gemma3ForConditionalGeneration": ((0, 15, 0), ("image",)),
}
#: from 0.15.0 every multimodal model builds its towers in `_mark_tower_model`
#: (model_executor/models/interfaces.py), which leaves out a tower whose modalities all have
#: limit 0; a vision tower's are image (and video)
VLLM_MARK_TOWER_SINCE = (0, 15, 0)
_VISION_MODALITIES = ("image", "video")


def vllm_text_only_limits(model: ModelSpec, engine_version: str | None = None) -> dict[str, int]:
    """--limit-mm-per-prompt for a text-only job on `model` under vLLM `engine_version` (None:
    the newest): every modality of its vision tower at 0 where that release then skips
    building the tower (VLLM_TOWER_SKIP, VLLM_MARK_TOWER_SINCE); {} for a text model or a
    release that builds the tower anyway. tuner's workloads are text-only, so its vLLM exports
    set these and the memory plan leaves the tower out; with every limit 0 the encoder budget
    is 0 too (no encoder profiling at start-up)."""
    if model.vision_params <= 0:
        return {}
    v = parse_version(engine_version)
    for arch in _architectures_of(model):
        row = VLLM_TOWER_SKIP.get(arch)
        if row is not None:
            since, modalities = row
            return {m: 0 for m in modalities} if v is None or v >= since else {}
    if v is None or v >= VLLM_MARK_TOWER_SINCE:
        return {m: 0 for m in _VISION_MODALITIES}
    return {}


def vision_weight_bytes_per_rank(model: ModelSpec, config: ServingConfig,
                                 engine_version: str | None = None) -> float:
    """A multimodal checkpoint's vision tower on one GPU (ModelSpec.vision_params, 16-bit):
    loaded for a text-only job too by SGLang (0.5.23 builds it unconditionally) and by the vLLM
    releases that build it whatever the limits (vllm_text_only_limits empty: Gemma-3 through
    0.14.0). A vLLM plan (`config.engine`) under `engine_version` (None: the newest) whose
    release skips the tower once --limit-mm-per-prompt zeroes its modalities counts 0: tuner's
    vLLM exports set those limits (its jobs are text-only). Split over the tensor-parallel
    ranks (mm_encoder_tp_mode "weights", the default), held on the first pipeline stage (the
    one the plan sizes), and never offloaded (cpu_offload_gb wraps the decoder layers
    make_layers builds)."""
    if config.engine == "vllm" and vllm_text_only_limits(model, engine_version):
        return 0.0
    return model.vision_weight_bytes / config.tp


def assumed_shape_clause(model: ModelSpec) -> str:
    """'; model: <its shape assumed from a repo name>' where it is (the weights and KV sizes
    that do not fit are then the catalog model's, not the checkpoint's own), else ''."""
    assumed = assumed_shape(model)
    return f"; model: {assumed}" if assumed else ""


def plan_memory(model: ModelSpec, gpu: GPU, config: ServingConfig, *,
                mean_request_tokens: float = 0.0, max_request_tokens: int = 0,
                engine_version: str | None = None) -> MemoryPlan:
    """KV capacity M for (model, gpu, config) under vLLM `engine_version` (None: the newest;
    its start-up profile, `ProfileRun`, sets what the budget loses besides the weights);
    `fits` False with the numbers when it cannot run. A V0 mixture-of-experts plan at dp > 1
    is sized per replica, every expert held (moe_replica_config)."""
    config = moe_replica_config(model, config, engine_version)
    tp = config.tp
    usable = gpu.memory_bytes * config.gpu_memory_utilization
    all_weights = weight_bytes_per_rank(model, config)
    offloaded = all_weights * config.weight_offload_fraction
    weights = all_weights - offloaded + vision_weight_bytes_per_rank(model, config,
                                                                 engine_version)
    acts = activation_bytes(model, config, engine_version)
    runtime = runtime_overhead_bytes(config, engine_version, model.is_moe,
                                     cuda_graphs=gpu.architecture in ARCHITECTURES,
                                     nvlink=gpu.nvlink_gbps is not None, model=model)
    scheme = (weight_offload_scheme(config.engine, config.kv_offload_layers,
                                    config.attention_on_cpu, engine_version)
              if offloaded > 0 else "")
    staging = offload_staging_bytes(model, offloaded, scheme,
                                    decoder_layer_bytes_per_rank(model, config)
                                    if scheme == "vllm-copy" else 0.0)
    kv = usable - weights - acts - runtime - staging
    # a pipeline stage keeps the KV of its layers (the first, of ceil(layers / pp), the most)
    stage_layers = math.ceil(model.num_kv_layers / config.pp)
    layers_on_gpu = max(stage_layers - config.kv_offload_layers, 0)
    # mean over layers of one token's KV per rank; sliding-window layers count by the share of
    # the workload's mean request they keep (window / mean tokens, at most 1)
    per_layer_token = (kv_bytes_per_token_per_layer_rank(model, config.kv_bits, tp,
                                                         engine_version, gpu, config.engine)
                       * kv_layer_fraction(model, mean_request_tokens))
    kv_per_token = per_layer_token * layers_on_gpu
    host_kv_per_token = per_layer_token * min(config.kv_offload_layers, model.num_layers)
    if kv_per_token > 0 and kv > 0:
        blocks = int(kv // (kv_per_token * config.block_size))
    else:
        blocks = 0
    tokens = blocks * config.block_size
    conc = tokens / mean_request_tokens if mean_request_tokens > 0 else 0.0
    hybrid: dict = {}
    state_tokens = 0  # the pool's tokens one request's state blocks take (hybrids only)
    if model.is_hybrid and kv > 0:
        # the whole pool, in blocks of the attention groups (one block of each): vLLM takes a
        # request's state blocks (one per linear-layer group) from the same pool at its
        # admission and frees them with it; the scheduler charges them per running request
        # (SchedulerParams.state_blocks), so none are set aside here. Their count is rounded
        # up to whole attention-group blocks (exact with one attention group, as Qwen3-Next's
        # and Qwen3.5's 1 in 4 attention layers give)
        lay = hybrid_layout(model, config, vllm_ssm_state_bits(model, engine_version))
        blocks = int(kv // lay.block_bytes) // lay.attention_groups
        per_req = math.ceil(lay.state_groups / lay.attention_groups)
        tokens = blocks * lay.block_size_tokens
        state_tokens = per_req * lay.block_size_tokens
        kv_per_token = lay.block_bytes * lay.attention_groups / lay.block_size_tokens
        # requests of the mean length the pool holds at once, each with its whole blocks and
        # its state blocks
        mean_blocks = max(math.ceil(mean_request_tokens / lay.block_size_tokens), 1)
        conc = blocks / (mean_blocks + per_req) if mean_request_tokens > 0 else 0.0
        hybrid = dict(block_size_tokens=lay.block_size_tokens, state_blocks_per_request=per_req,
                      state_bytes_per_request=lay.state_bytes_per_request)

    fits, reason = True, ""
    gib = lambda b: f"{b / GIB:.1f} GiB"  # noqa: E731
    # the offload checks come first: with no KV layer left on the GPU the capacity below is 0
    # tokens, and "holds 0 tokens" would hide why
    k = config.kv_offload_layers
    held = (f"{model.name}'s {stage_layers} layers" if config.pp == 1 else
            f"the {stage_layers} layers of each of {model.name}'s {config.pp} pipeline stages")
    if model.is_hybrid and (k > 0 or config.pp > 1):
        fits = False  # the state pages are planned for one stage whose KV all stays on the GPU
        reason = (f"{model.name} is a hybrid ({model.linear_mixer_label}) model: tuner plans its "
                  "recurrent state pages without KV offload and pipeline stages; use "
                  "kv_offload_layers 0 and pp 1")
    elif k > model.num_layers:
        fits = False
        reason = (f"kv_offload_layers {k} is more than {model.name} has ({model.num_layers} "
                  f"layers): offload at most {stage_layers - 1}, the GPU must keep at least "
                  "one layer's KV")
    elif layers_on_gpu == 0:
        fits = False
        reason = (f"all KV layers offloaded (kv_offload_layers {k}, {held}): the GPU must "
                  f"keep at least one layer's KV; offload at most {stage_layers - 1}")
    elif kv <= 0:
        fits = False
        shape = f"TP {tp}" + (f" x PP {config.pp}" if config.pp > 1 else "")
        # with weight offload: the GPU's share and the streaming buffers, so the sum is the
        # one that does not fit (the model's whole weights are printed elsewhere)
        held_gpu = (f"weights {gib(weights)} on the GPU ({gib(offloaded)} offloaded)"
                    if offloaded > 0 else f"weights {gib(weights)}")
        buffers = f" + offload staging {gib(staging)}" if staging > 0 else ""
        reason = (f"{model.name} at {config.weight_bits}-bit weights, {shape}, does not fit on "
                  f"{gpu.name}: {held_gpu} + activations {gib(acts)} + runtime "
                  f"{gib(runtime)}{buffers} > {gib(usable)} usable "
                  f"({gpu.memory_gib:g} GiB x {config.gpu_memory_utilization:g})")
        if tp * config.pp >= gpu.gpus_per_machine:  # a machine's worth: say what spans more
            reason += (f"; --pp {2 * config.pp} splits the layers over "
                       f"{2 * config.pp} stages (machines)")
        reason += assumed_shape_clause(model)
    elif max_request_tokens and tokens - state_tokens < max_request_tokens:
        fits = False
        state = (f" less one request's {hybrid.get('state_blocks_per_request')} recurrent-state "
                 f"blocks ({state_tokens} tokens' worth)" if state_tokens else "")
        reason = (f"KV cache on {gpu.name} holds {tokens} tokens ({gib(kv)}){state}, fewer than "
                  f"the longest request ({max_request_tokens} tokens)"
                  + assumed_shape_clause(model))
    host_kv = tokens * host_kv_per_token
    host_used = host_kv + offloaded
    host_limit = host_limit_bytes(gpu)
    if fits and host_used > host_limit:
        fits = False
        reason = (f"host memory exceeded on {gpu.name}: offloaded weights {gib(offloaded)} + KV "
                  f"of {min(config.kv_offload_layers, model.num_layers)} offloaded layers for "
                  f"{tokens} tokens {gib(host_kv)} = {gib(host_used)} > {gib(host_limit)} "
                  f"(host RAM {gpu.host_ram_gib:g} GiB per GPU - {gib(HOST_RESERVE_BYTES)} "
                  "reserved); offload fewer layers or a smaller weight fraction")
    return MemoryPlan(
        gpu_memory_bytes=gpu.memory_bytes,
        usable_bytes=usable,
        weight_bytes=weights,
        weight_offloaded_bytes=offloaded,
        activation_bytes=acts,
        runtime_overhead_bytes=runtime,
        kv_bytes=max(kv, 0.0),
        kv_bytes_per_token=kv_per_token,
        kv_capacity_blocks=blocks,
        kv_capacity_tokens=tokens,
        max_concurrent_requests=conc,
        host_kv_bytes_per_token=host_kv_per_token,
        fits=fits,
        reason=reason,
        offload_staging_bytes=staging,
        weight_offload_scheme=scheme,
        host_kv_bytes=host_kv,
        host_limit_bytes=host_limit,
        host_used_bytes=host_used,
        **hybrid,
    )


def host_limit_bytes(gpu: GPU) -> float:
    """Host RAM one GPU's offloaded tensors may use: its share of the instance's RAM minus
    `HOST_RESERVE_BYTES` (a hard limit: a plan above it does not fit)."""
    return max(gpu.host_ram_gib * GIB - HOST_RESERVE_BYTES, 0.0)


def offload_staging_bytes(model: ModelSpec, offloaded_bytes: float, scheme: str = "prefetch",
                          layer_bytes: float = 0.0) -> float:
    """GPU memory that receives offloaded weights, by tuner.core.engines.weight_offload_scheme:
    "prefetch" (FlexGen / LM-Offload): two layers' worth of the offloaded share (one arriving
    while the other is used); "vllm-copy": one whole decoder layer (`layer_bytes`,
    decoder_layer_bytes_per_rank; at most the offloaded bytes), the copy a forward makes,
    inside the profile run's peak; "vllm-uva": none (kernels read host memory)."""
    if offloaded_bytes <= 0 or scheme == "vllm-uva":
        return 0.0
    if scheme == "vllm-copy":
        return min(offloaded_bytes, layer_bytes)
    return 2.0 * offloaded_bytes / model.num_layers

