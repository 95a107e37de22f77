"""simulate(): one ServingConfig on one workload -> SimResult (makespan, $, memory, timeline).

The caller gives the cost model (predictors.sources resolves it: own profile -> measured
tables -> transfer -> roofline); this module reads no files and chooses no source."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np

from tuner.core.catalog import GPU, ModelSpec
from tuner.core.config import ENGINES, ServingConfig, check_model_config
from tuner.core.engines import (
    check_scheduler_steps,
    generation_of,
    moe_parallel_refusal,
    moe_replicas_note,
    multi_step_refusal,
    parse_version,
    priced_scheduler_steps,
)
from tuner.core.errors import TunerError
from tuner.core.memory import MemoryPlan, moe_replica_config, plan_memory, sparse_mla_packed_fp8
from tuner.core.pricing import (
    Machines,
    Rental,
    job_cost_usd,
    place,
    plan_machine_gpu,
    rent,
    usd_per_million_tokens,
)
from tuner.core.provenance import Provenance
from tuner.core.schedulers import SCHEDULER_PRESETS
from tuner.core.sglang import (
    SGLangSettings,
    dp_attention_supported,
    plan_memory_sglang,
    sglang_page_size,
)
from tuner.core.startup import resolve_startup
from tuner.core.workload import Workload
from tuner.predictors.opmath import unconverted_shares
from tuner.predictors.protocol import CostModel
from tuner.sim import offload as _offload
from tuner.sim import scheduler as sch
from tuner.sim.kernels import library
from tuner.sim.parallel import parallel_workers, thread_map
from tuner.sim.pipeline import pipelined
from tuner.sim.steps import DECODES, KV_BLOCKS, PREEMPTED, PREFILL_TOKENS, RUNNING, batch_features


class InfeasibleConfig(TunerError):
    """The config cannot run (model does not fit, budget below the longest request...)."""


@dataclass
class SimResult:
    config: ServingConfig
    makespan_s: float
    requests: int
    prompt_tokens: int
    output_tokens: int
    iterations: int
    preemptions: int
    peak_kv_fraction: float
    mean_kv_fraction: float
    lower_bound_s: float
    cost_usd: float
    price_usd_per_h: float
    memory: MemoryPlan
    provenance: Provenance
    cached_prompt_tokens: int = 0  # prompt tokens served from the prefix cache
    vasuki_cost_metric: float | None = None  # QPS / ($ per FP32 GFLOP/W), Vasuki §3.2
    timeline: dict[str, np.ndarray] | None = field(default=None, repr=False)
    offload_stall_s: float = 0.0  # non-overlapped KV + weight transfers, per replica (tuner.sim.offload)
    offload: dict | None = None  # tuner.sim.offload breakdown (memory, transfer vs budget, stalls)
    # simulate(return_steps=True): each replica's step records (tuner.sim.steps.STEP_COLUMNS)
    steps: list[np.ndarray] | None = field(default=None, repr=False)
    # with them, each step's time as the simulation priced it (offload and host terms included)
    step_s: list[np.ndarray] | None = field(default=None, repr=False)
    # --provider: the instances rented and the billed time
    rental: Rental | None = None
    # engine start-up of every replica (tuner.core.startup), in parallel: makespan_s, cost_usd
    # and lower_bound_s include it; `startup` is its breakdown (Startup.to_dict)
    startup_s: float = 0.0
    startup: dict | None = None
    # the machines the plan runs on (tuner.core.pricing.Machines.to_dict)
    machines: dict | None = None
    # the mean time a request spends in its engine's running batch (from being scheduled to
    # its last token): the request-seconds of every step's running requests over the requests
    # (Little's law). What an interrupted engine loses is half of it (tuner.search.spot).
    mean_residence_s: float = 0.0
    engine: str = "vllm"  # the engine simulated (tuner.core.sglang.ENGINES)
    # decode steps per scheduler call (vLLM V0 multi-step: decode_run_steps), 1 elsewhere
    decode_run_steps: int = 1

    @property
    def schedule_s(self) -> float:
        """The schedule alone: the makespan from the engines being up to the last token."""
        return self.makespan_s - self.startup_s

    @property
    def schedule_lower_bound_s(self) -> float:
        """BlendServe's physical limit T_o of the schedule alone (no start-up)."""
        return self.lower_bound_s - self.startup_s

    @property
    def schedule_limit_fraction(self) -> float:
        """How near the schedule gets to its physical limit: T_o / the schedule, start-up
        excluded on both sides (it has no bound to approach: a start-up-heavy makespan would
        otherwise read near the limit whatever its schedule does)."""
        return self.schedule_lower_bound_s / self.schedule_s

    @property
    def qps(self) -> float:
        return self.requests / self.makespan_s

    @property
    def throughput_tok_s(self) -> float:
        return self.output_tokens / self.makespan_s

    @property
    def usd_per_1k_requests(self) -> float:
        return 1000.0 * self.cost_usd / self.requests

    @property
    def qps_per_usd_per_h(self) -> float:
        hourly = (self.rental.usd_per_h if self.rental is not None
                  else self.price_usd_per_h * self.config.num_gpus)
        return self.qps / hourly

    @property
    def usd_per_million_tokens(self) -> float:
        """$ per million tokens, prompt and output together."""
        return usd_per_million_tokens(self.cost_usd, self.prompt_tokens, self.output_tokens)

    def summary(self) -> dict:
        """Every figure as plain JSON-able data (the `tuner simulate --json` document)."""
        return {
            "makespan_s": self.makespan_s,
            "startup_s": self.startup_s,
            "schedule_s": self.schedule_s,
            "startup": self.startup,
            "cost_usd": self.cost_usd,
            "usd_per_1k_requests": self.usd_per_1k_requests,
            "usd_per_million_tokens": self.usd_per_million_tokens,
            "rental": self.rental.to_dict() if self.rental is not None else None,
            "machines": self.machines,
            "mean_residence_s": self.mean_residence_s,
            "requests": self.requests,
            "prompt_tokens": self.prompt_tokens,
            "output_tokens": self.output_tokens,
            "throughput_tok_s": self.throughput_tok_s,
            "qps": self.qps,
            "qps_per_usd_per_h": self.qps_per_usd_per_h,
            "iterations": self.iterations,
            "preemptions": self.preemptions,
            "cached_prompt_tokens": self.cached_prompt_tokens,
            "peak_kv_fraction": self.peak_kv_fraction,
            "mean_kv_fraction": self.mean_kv_fraction,
            "lower_bound_s": self.lower_bound_s,
            "schedule_lower_bound_s": self.schedule_lower_bound_s,
            "limit_fraction": self.lower_bound_s / self.makespan_s,  # whole job, start-up in
            "schedule_limit_fraction": self.schedule_limit_fraction,
            "kv_capacity_tokens": self.memory.kv_capacity_tokens,
            "max_concurrent_requests": self.memory.max_concurrent_requests,
            "vasuki_cost_metric": self.vasuki_cost_metric,
            "offload_stall_s": self.offload_stall_s,
            "offload": self.offload,
            "memory": self.memory.to_dict(),
            "config": self.config.to_dict(),
            "provenance": str(self.provenance),
        }


def order_requests(workload: Workload, ordering: str, *, model: ModelSpec | None = None,
                   gpu: GPU | None = None, config: ServingConfig | None = None,
                   kv_capacity_tokens: int | None = None) -> np.ndarray:
    """Indices of the requests in the order they are submitted to the engine
    (tuner.sim.ordering holds the orderings)."""
    from tuner.sim import ordering as _ordering
    return _ordering.order_requests(workload, ordering, model=model, gpu=gpu, config=config,
                                    kv_capacity_tokens=kv_capacity_tokens)


def lower_bound_s(workload: Workload, model: ModelSpec, gpu: GPU, config: ServingConfig) -> float:
    """BlendServe's physical limit T_o = max((1 - s_o) T_comp, T_mem) (§2.3-2.4):
    GEMM + prefill-attention FLOPs at peak, decode KV reads at peak HBM bandwidth, over all GPUs
    of the deployment; s_o is the best prefix-sharing ratio (each shared prefix computed once).
    Under FP8 weights the quantized GEMMs and the attention count at the FP8 peak, the LM head
    and the checkpoint's 16-bit layers at the 16-bit peak.

    The FLOPs are those the engine cannot avoid: a request of p prompt and d output tokens runs
    p + d - 1 tokens through the layers (its last token is sampled, never fed back) and the LM
    head on its d sampled positions only (vLLM and SGLang compute no logits for the other
    prompt tokens); a causal query-key pair costs QK^T and PV, 2 x heads x (head_dim +
    value_head_dim) FLOPs in each layer (MLA: its uncompressed heads, the cheaper form)."""
    p = workload.prompt_tokens.astype(np.float64)
    d = workload.output_tokens.astype(np.float64)
    fp8 = config.weight_bits == 8 and bool(gpu.fp8_tflops)
    # matmul weights a token passes through (MoE: its top-k experts, not every resident one);
    # under FP8 weights the checkpoint's 16-bit layers (opmath.unconverted_shares) run at the
    # 16-bit rate, as every timing path prices them, and so does the LM head (vLLM and SGLang
    # keep it 16-bit), so the bound splits the GEMM FLOPs by rate
    gemm_params = float(model.active_linear_params_total)
    gemm16_params = _unconverted_gemm_params(model, config.weight_bits) if fp8 else 0.0
    # only the layers that attend (a hybrid's linear layers keep no KV: their scan is left out
    # of the bound, which stays a bound)
    attn = 2.0 * model.num_heads * (model.head_dim + model.value_head_dim) * model.num_kv_layers
    tokens = (p + np.maximum(d - 1.0, 0.0)).sum()  # through the layers
    pairs = _prefill_pairs(model, p).sum()
    if workload.prefix_ids is not None and workload.prefix_tokens is not None:
        # a prefix of x tokens shared by k requests is computed once instead of k times
        x = workload.prefix_tokens.astype(np.float64)
        ids = workload.prefix_ids
        has = ids >= 0
        if has.any():
            _, first = np.unique(ids[has], return_index=True)
            shared, shared_pairs = x[has], _prefill_pairs(model, x[has])
            tokens -= shared.sum() - shared[first].sum()
            pairs -= shared_pairs.sum() - shared_pairs[first].sum()
    fast = tokens * (gemm_params - gemm16_params) * 2 + pairs * attn
    slow = tokens * gemm16_params * 2 + d.sum() * model.lm_head_params * 2
    peak = gpu.fp8_tflops * 1e12 if fp8 else gpu.peak_flops
    n = config.num_gpus
    comp_s = fast / (peak * n) + slow / (gpu.peak_flops * n)
    mem = _decode_kv_read_bytes(model, p, d, config.kv_bits,
                                sparse_mla_packed_fp8(gpu, config.engine))
    return float(max(comp_s, mem / (gpu.hbm_bytes_per_s * n)))


def _unconverted_gemm_params(model: ModelSpec, weight_bits: int) -> float:
    """Matmul weights a token passes through that a quantized checkpoint keeps at 16 bits: its
    attention projections' share in every layer and its dense MLPs' share (routed and shared
    experts read the quantized bytes), as the roofline prices them."""
    attn16, mlp16 = unconverted_shares(model, weight_bits)
    return (attn16 * model.num_kv_layers * model.attention_params_per_layer
            + mlp16 * model.num_dense_layers * model.dense_mlp_params)


def _prefill_pairs(model: ModelSpec, p: np.ndarray) -> np.ndarray:
    """Query-key pairs of prefilling p tokens (p^2 / 2, the bound's convention): under DeepSeek
    sparse attention a query attends to at most index_topk tokens."""
    if not model.is_sparse_attention:
        return 0.5 * p * p
    k = float(model.index_topk)
    under = np.minimum(p, k)
    return 0.5 * under * under + (p - under) * k


def _capped_reads(p: np.ndarray, steps: np.ndarray, cap: float) -> np.ndarray:
    """Sum over decode steps t = 1 .. steps of min(p + t, cap): the tokens read when at most
    `cap` are (a sliding window, sparse attention's top-k)."""
    below = np.clip(cap - p, 0.0, steps)  # steps whose context p + t is still within the cap
    return below * p + 0.5 * below * (below + 1) + (steps - below) * cap


def _decode_kv_read_bytes(model: ModelSpec, p: np.ndarray, d: np.ndarray, kv_bits: int,
                          packed: bool = True) -> float:
    """KV bytes the decode steps read, summed over the job: the prefill samples a request's
    first token, then its decode step t (1 .. d - 1) reads its p + t cached tokens in each
    full-attention layer and at most the window in a sliding-window layer, at the bytes per
    token and layer the cache holds (an MLA model: its latent,
    ModelSpec.kv_bytes_per_token_per_layer). Under DeepSeek sparse attention the indexer reads
    every cached key and the attention at most index_topk latents, in the layout the memory
    plan holds (`packed`: tuner.core.memory.sparse_mla_packed_fp8)."""
    steps = np.maximum(d - 1.0, 0.0)
    if model.is_sparse_attention:
        every = (p * steps + 0.5 * steps * (steps + 1)).sum()
        top = _capped_reads(p, steps, float(model.index_topk)).sum()
        return float(model.num_layers * (every * model.index_bytes_per_token_per_layer
                                         + top * model.latent_bytes_per_token_per_layer(
                                             kv_bits, packed)))
    per_layer = model.kv_bytes_per_token_per_layer(kv_bits, packed)
    windowed = model.num_window_layers
    full = (p * steps + 0.5 * steps * (steps + 1)).sum() * per_layer * (model.num_kv_layers - windowed)
    if not windowed:
        return float(full)
    reads = _capped_reads(p, steps, float(model.sliding_window))
    return float(full + reads.sum() * per_layer * windowed)


def scheduler_params(config: ServingConfig, capacity_blocks: int,
                     plan: MemoryPlan | None = None) -> sch.SchedulerParams:
    """The scheduler's knobs; a hybrid model's `plan` sets the attention block vLLM raised and
    the state blocks each running request takes from the same pool (charged at its admission,
    freed when it finishes or is preempted, as vLLM V1's KV cache manager does)."""
    params = sch.preset(config.scheduler, token_budget=config.chunk_size,
                        max_running=config.max_running, block_size=config.block_size,
                        capacity_blocks=capacity_blocks)
    if plan is not None and plan.block_size_tokens:
        params = params._replace(block_size=plan.block_size_tokens,
                                 state_blocks=plan.state_blocks_per_request)
    return params


#: the first vLLM release with a Gated DeltaNet hybrid (Qwen3-Next): 0.10.2, V1 only
HYBRID_SINCE = (0, 10, 2)
#: the releases up to here turn prefix caching off for every hybrid (Mamba / Gated DeltaNet)
#: model whatever the flags say: their MambaModelConfig.verify_and_update_config sets
#: enable_prefix_caching False ("Hybrid or mamba-based model detected: disabling prefix
#: caching since it is not yet supported"; the 0.11.0 wheel, and public Qwen3-Next start-up
#: logs of 0.10.2 and 0.11.0)
HYBRID_NO_PREFIX_CACHE_UNTIL = (0, 11, 0)
#: 0.11.1 - 0.12.x keep it only for a model class marked SupportsMambaPrefixCaching
#: (granitemoehybrid.py is, qwen3_next.py is not, in both wheels) and disable it for the rest
#: ("... without support for prefix caching: disabling."); from 0.13.0 every hybrid caches
#: prefixes (Mamba cache mode "align" or "all"; the 0.13.0 wheel has no disabling branch)
HYBRID_PREFIX_CACHE_ALL_FROM = (0, 13, 0)


def hybrid_prefix_caching_off(model: ModelSpec, engine: str, engine_version: str | None) -> bool:
    """vLLM `engine_version` turns prefix caching off for this hybrid model (the Gated
    DeltaNet family has no SupportsMambaPrefixCaching class before 0.13.0; Mamba2's has)."""
    v = parse_version(engine_version)
    if not (model.is_hybrid and engine == "vllm" and v is not None):
        return False
    if v <= HYBRID_NO_PREFIX_CACHE_UNTIL:
        return True
    return v < HYBRID_PREFIX_CACHE_ALL_FROM and model.linear_mixer != "mamba2"


def _check_hybrid_runs(model: ModelSpec, engine: str, engine_version: str | None,
                       config: ServingConfig) -> None:
    """InfeasibleConfig where tuner cannot price a hybrid model: a Mamba2 hybrid under SGLang
    (tuner plans SGLang's Mamba state pool for the Gated DeltaNet family only:
    tuner.core.sglang._hybrid_state_pool), a vLLM release before HYBRID_SINCE, or a V0
    scheduler preset."""
    if engine == "sglang":
        if model.linear_mixer:  # "": Gated DeltaNet
            # SGLang 0.5.23 runs it with another attention backend on sm_100 (flashinfer,
            # granitemoehybrid.py), whose page tuner has not read in
            raise InfeasibleConfig(
                f"{model.name} is a hybrid ({model.linear_mixer_label}) model: tuner prices "
                "it under SGLang for the Gated DeltaNet family (Qwen3-Next, Qwen3.5) only; "
                "run it under vLLM")
        return
    v = parse_version(engine_version)
    if v is not None and v < HYBRID_SINCE:
        raise InfeasibleConfig(
            f"{model.name} is a hybrid ({model.linear_mixer_label}) model, which tuner prices "
            f"on vLLM 0.10.2 (V1 engine) on, not {engine_version}: use --engine-version 0.10.2 "
            "or newer")
    if config.scheduler.removesuffix("-noevict") in ("vllm-v0", "sarathi"):
        raise InfeasibleConfig(
            f"{model.name} is a hybrid ({model.linear_mixer_label}) model, which tuner prices "
            f"on vLLM's V1 engine only; scheduler {config.scheduler} is V0's: use --scheduler "
            "vllm")


def machines_for(gpu: GPU, config: ServingConfig) -> Machines:
    """The machines the plan runs on (tuner.core.pricing.place); InfeasibleConfig when a
    tensor-parallel group does not fit one machine (or, with --provider, one instance)."""
    try:
        return place(gpu.name, gpu.gpus_per_machine, config.tp, config.dp, gpu.billing,
                     config.pp)
    except TunerError as exc:
        raise InfeasibleConfig(str(exc)) from None


def check_feasible(workload: Workload, model: ModelSpec, gpu: GPU,
                   config: ServingConfig, engine: str | None = None,
                   engine_version: str | None = None, *,
                   radix_cache: bool = True) -> MemoryPlan:
    """The memory plan of `engine` (default config.engine: tuner.core.memory's for vLLM under
    vLLM `engine_version`, None the newest; tuner.core.sglang's for SGLang); raises
    InfeasibleConfig with the numbers when the config cannot run."""
    engine = engine or config.engine
    try:
        check_model_config(config, model)  # e.g. expert parallelism on a dense model
    except TunerError as exc:  # a search's trial is infeasible; `simulate` prints the line
        raise InfeasibleConfig(str(exc)) from None
    total = workload.prompt_tokens + workload.output_tokens
    tp = config.tp
    # vLLM shards attention heads over the TP ranks: it refuses a degree that does not divide
    # them (KV heads fewer than the ranks are replicated, so those must divide the degree)
    if model.num_heads % tp or (model.num_kv_heads % tp if model.num_kv_heads >= tp
                                else tp % model.num_kv_heads):
        raise InfeasibleConfig(
            f"tensor parallel {tp} does not split {model.name}'s {model.num_heads} attention "
            f"heads / {model.num_kv_heads} KV heads evenly (vLLM refuses it)")
    machines = machines_for(gpu, config)  # a tensor-parallel group fits one machine
    if config.expert_parallel and config.num_gpus > machines.gpus_per_machine:
        raise InfeasibleConfig(
            f"expert parallelism over {config.num_gpus} GPUs spans {machines.count} machines; "
            "tuner models expert parallelism inside one machine only (fewer replicas, or no "
            "expert parallelism: each replica then holds every expert)")
    if engine == "sglang" and model.is_moe and config.dp > 1 and not dp_attention_supported(model):
        raise InfeasibleConfig(
            f"SGLang runs {model.name} at dp {config.dp} only as independent servers, each "
            "with every expert (its DP attention, which splits the experts over all ranks as "
            "tuner prices a mixture-of-experts plan at dp > 1, is for the DeepSeek and Qwen MoE "
            "families): run it under vLLM, or at dp 1")
    if engine == "sglang" and config.chunk_size > 0:
        page = sglang_page_size(model, gpu)
        if config.chunk_size % page:
            # ServerArgs' validation_hook: "chunked_prefill_size must be divisible by page_size"
            raise InfeasibleConfig(
                f"SGLang refuses --chunked-prefill-size {config.chunk_size} on {gpu.name}: it "
                f"pages {model.name}'s KV in {page}-token pages and needs a chunk of whole "
                f"pages (e.g. {max(config.chunk_size // page, 1) * page})")
    if model.is_hybrid:
        _check_hybrid_runs(model, engine, engine_version, config)
    # SGLang's radix cache (on unless --disable-radix-cache) sizes a hybrid's state pool
    version = ({"radix_cache": radix_cache} if engine == "sglang"
               else {"engine_version": engine_version})
    plan = (plan_memory_sglang if engine == "sglang" else plan_memory)(
        model, gpu, config, mean_request_tokens=float(total.mean()),
        max_request_tokens=int(total.max()), **version)
    if not plan.fits:
        raise InfeasibleConfig(plan.reason)
    if (engine == "vllm" and not SCHEDULER_PRESETS[config.scheduler].chunked_prefill
            and config.chunk_size < int(total.max()) - 1):
        raise InfeasibleConfig(
            f"{config.scheduler} has no chunked prefill: chunk_size {config.chunk_size} must be "
            f">= the longest request ({int(total.max())} tokens)")
    if engine == "vllm" and config.chunk_size < config.max_running:
        # SchedulerConfig._verify_args (V0 and V1): every running sequence needs a token of
        # the step's budget, so vLLM refuses to start
        raise InfeasibleConfig(
            f"vLLM refuses max_num_batched_tokens ({config.chunk_size}) below max_num_seqs "
            f"({config.max_running}) at start-up: raise the chunk size or lower the running "
            "requests")
    if int(total.max()) > model.max_position:
        raise InfeasibleConfig(
            f"longest request has {int(total.max())} tokens, beyond {model.name}'s context "
            f"length {model.max_position}")
    return plan


def check_decode_runs(scheduled: Workload, config: ServingConfig, plan: MemoryPlan,
                      run_steps: int) -> None:
    """vLLM V0 multi-step computes each request to the end of its last decode run
    (`scheduled`: tuner.sim.scheduler.multi_step_outputs): check_feasible's checks of the
    longest request must hold of those lengths too, or the scheduler could never place it
    (raises InfeasibleConfig with the numbers)."""
    longest = int((scheduled.prompt_tokens + scheduled.output_tokens).max())
    runs = (f"the {longest} tokens the longest request takes in vLLM V0's decode runs of "
            f"{run_steps} steps (--num-scheduler-steps {run_steps}: computed to the end of its "
            "last run)")
    if plan.kv_capacity_tokens < longest:
        raise InfeasibleConfig(
            f"KV cache holds {plan.kv_capacity_tokens} tokens, fewer than {runs}: fewer "
            "scheduler steps, or more KV memory")
    if not SCHEDULER_PRESETS[config.scheduler].chunked_prefill and config.chunk_size < longest - 1:
        raise InfeasibleConfig(
            f"{config.scheduler} has no chunked prefill: chunk_size {config.chunk_size} must be "
            f">= {longest - 1}, as a preempted request recomputes all but the last of {runs}")


# Replaying arrivals: the schedule depends on when requests arrive in step terms, and the step
# times on the schedule; iterate to a fixed point (it usually agrees within 3-6 rounds).
ARRIVAL_ITERATIONS = 12


def arrival_clock(dt: np.ndarray, first_step: np.ndarray, arrival_s: np.ndarray) -> np.ndarray:
    """End time of every step when a step that first admits a request cannot start before the
    request arrives: end[k] = max(end[k-1], latest arrival admitted at k) + dt[k]."""
    gate = np.zeros(len(dt))
    ok = first_step >= 0
    np.maximum.at(gate, first_step[ok], arrival_s[ok])
    c = np.cumsum(dt)
    return c + np.maximum.accumulate(gate - (c - dt))


@dataclass
class _Replica:
    """One data-parallel replica's schedule, priced."""

    schedule: sch.Schedule  # steps empty when they were streamed
    span_s: float  # the replica's makespan
    end_s: np.ndarray | None = None  # when each step ends (replayed arrivals only)
    step_s: np.ndarray | None = None  # each kept step's time (keep_steps only)


def _submission_order(workload: Workload, model: ModelSpec, gpu: GPU, config: ServingConfig,
                      plan: MemoryPlan) -> np.ndarray:
    if workload.arrival_s is not None:
        # replaying a real run: the engine's FCFS queue takes requests as they arrive
        return np.argsort(workload.arrival_s, kind="stable")
    return order_requests(workload, config.ordering, model=model, gpu=gpu, config=config,
                          kv_capacity_tokens=plan.kv_capacity_tokens)


def split_replicas(workload: Workload, order: np.ndarray, dp: int) -> list[np.ndarray]:
    """The requests of each of ``dp`` data-parallel replicas, each in submission order.

    An offline batch is split up front to balance the work: requests by decreasing tokens
    (prompt + output) each go to the replica with the fewest tokens so far (greedy LPT), so the
    slowest replica, which sets the makespan, carries no more than its share plus one request.
    Replaying arrivals, a load balancer sees requests one at a time: round-robin in arrival
    order."""
    if dp <= 1:
        return [order]
    if workload.arrival_s is not None:
        return [order[r::dp] for r in range(dp)]
    work = (workload.prompt_tokens[order].astype(np.int64)
            + workload.output_tokens[order].astype(np.int64))
    by_size = np.ascontiguousarray(np.argsort(-work, kind="stable"), dtype=np.int64)
    owner = np.empty(len(order), dtype=np.int64)
    library().tk_least_loaded(work, by_size, len(order), dp, np.empty(dp, dtype=np.int64), owner)
    return [order[owner == r] for r in range(dp)]


class _StepTotals:
    """Running sums over priced step records (streamed in slices, or whole)."""

    def __init__(self, cost_model: CostModel, off_ctx: _offload.OffloadContext,
                 off_totals: _offload.OffloadTotals):
        self.cost_model, self.off_ctx, self.off_totals = cost_model, off_ctx, off_totals
        self.time_s = self.kv_block_s = self.running_s = 0.0
        self.iterations = self.preemptions = self.peak_kv_blocks = 0

    def price(self, steps: np.ndarray) -> np.ndarray:
        """Price `steps`, add them to the sums; their times."""
        dt, priced = _price(steps, self.cost_model, self.off_ctx)
        self.add(steps, dt, priced)
        return dt

    def add(self, steps: np.ndarray, dt: np.ndarray, priced: dict | None) -> None:
        if priced is not None:
            self.off_totals.add(priced)
        kv = steps[:, KV_BLOCKS]
        self.iterations += len(dt)
        self.time_s += float(dt.sum())
        self.preemptions += int(steps[:, PREEMPTED].sum())
        self.peak_kv_blocks = max(self.peak_kv_blocks, int(kv.max(initial=0)))
        self.kv_block_s += float((kv * dt).sum())  # not `@`: BLAS threads spin on 2 cores
        self.running_s += float((steps[:, RUNNING] * dt).sum())  # request-seconds running


class _TimelineTotals(_StepTotals):
    """Running sums that also keep the timeline's columns of every step, compact (int32 and
    the step times): 28 bytes a step, whether or not the step records are kept. With `max_rows`
    (a report's picture, not the CSV of every step) consecutive rows are merged in pairs
    whenever there are over 2 x max_rows of them: time-weighted means of the columns, summed
    times and preemptions (a 2M-request job's 6.5M steps took 0.9 GiB to draw 400 points)."""

    COLUMNS = ((RUNNING, "running"), (PREFILL_TOKENS, "prefill_tokens"),
               (DECODES, "decode_tokens"), (KV_BLOCKS, "kv_blocks"),
               (PREEMPTED, "preemptions"))

    def __init__(self, *args, max_rows: int | None = None):
        super().__init__(*args)
        self.max_rows = max_rows
        self.rows = 0
        self.parts: dict[str, list[np.ndarray]] = {"dt_s": []}
        for _, name in self.COLUMNS:
            self.parts[name] = []

    def add(self, steps: np.ndarray, dt: np.ndarray, priced: dict | None) -> None:
        super().add(steps, dt, priced)
        self.parts["dt_s"].append(dt)
        for col, name in self.COLUMNS:
            self.parts[name].append(steps[:, col].astype(np.int32))
        self.rows += len(dt)
        while self.max_rows is not None and self.rows > 2 * self.max_rows:
            self._halve()

    def _halve(self) -> None:
        """Merge consecutive pairs of rows (an odd last row stays alone)."""
        cols = {k: np.concatenate(v) for k, v in self.parts.items()}
        dt = cols.pop("dt_s")
        m = len(dt) // 2 * 2
        d0, d1 = dt[0:m:2], dt[1:m:2]
        w = d0 + d1
        merged = {"dt_s": np.concatenate([w, dt[m:]])}
        for name, x in cols.items():
            x = x.astype(np.float64)
            if name == "preemptions":
                pair = x[0:m:2] + x[1:m:2]
            else:
                pair = np.where(w > 0, (x[0:m:2] * d0 + x[1:m:2] * d1) / np.where(w > 0, w, 1),
                                (x[0:m:2] + x[1:m:2]) / 2)
            merged[name] = np.concatenate([pair, x[m:]])
        self.parts = {k: [v] for k, v in merged.items()}
        self.rows = len(merged["dt_s"])

    def timeline(self, capacity_blocks: int, end_s: np.ndarray | None = None
                 ) -> dict[str, np.ndarray]:
        """The per-step series (per merged row with `max_rows`), in the CSV's column order;
        `end_s`: when each step ends (replayed arrivals, whose clock waits for them), else the
        running sum of step times."""
        cols = {k: np.concatenate(v) if v else np.zeros(0) for k, v in self.parts.items()}
        return {"time_s": np.cumsum(cols["dt_s"]) if end_s is None else end_s,
                "running": cols["running"],
                "prefill_tokens": cols["prefill_tokens"], "decode_tokens": cols["decode_tokens"],
                "kv_fraction": cols["kv_blocks"] / max(capacity_blocks, 1),
                "preemptions": cols["preemptions"]}


def _price(steps: np.ndarray, cost_model: CostModel, off_ctx: _offload.OffloadContext):
    """(time of each step, offload breakdown or None)."""
    feats = batch_features(steps)
    dt = cost_model.iteration_time_s(feats)
    if not off_ctx.active:
        return dt, None
    priced = _offload.price_iterations(feats, dt, off_ctx, cost_model)  # KV / weight offload,
    return priced["dt_s"], priced  # CPU attention, (de)quantization


@dataclass(frozen=True)
class SGLangParams:
    """What tuner.sim.sglang's scheduler needs of a config (its counterpart of
    SchedulerParams): the KV pool in tokens, --chunked-prefill-size, --max-running-requests
    and the SGLang-only settings."""

    capacity_tokens: int
    chunked_prefill_size: int
    max_running: int
    settings: SGLangSettings
    page_size: int = 1  # SGLang's KV page (tuner.core.sglang.sglang_page_size)


def _schedule(workload: Workload, idx: np.ndarray, params, exact: bool,
              plan: MemoryPlan, arrival_step=None, on_steps=None, cancel=None) -> sch.Schedule:
    if isinstance(params, SGLangParams):
        from tuner.sim import sglang as _sglang

        s = _sglang.run_schedule(
            workload.prompt_tokens[idx], workload.output_tokens[idx],
            capacity_tokens=params.capacity_tokens,
            chunked_prefill_size=params.chunked_prefill_size, max_running=params.max_running,
            settings=params.settings, fast=not exact,
            prefix_ids=None if workload.prefix_ids is None else workload.prefix_ids[idx],
            prefix_tokens=None if workload.prefix_tokens is None else workload.prefix_tokens[idx],
            on_steps=on_steps, cancel=cancel, page_size=params.page_size)
        return _check_schedule(s, plan)
    s = sch.run_schedule(
        workload.prompt_tokens[idx], workload.output_tokens[idx], params, fast=not exact,
        prefix_ids=None if workload.prefix_ids is None else workload.prefix_ids[idx],
        prefix_tokens=None if workload.prefix_tokens is None else workload.prefix_tokens[idx],
        arrival_step=arrival_step, on_steps=on_steps, cancel=cancel)
    return _check_schedule(s, plan)


def _check_schedule(s: sch.Schedule, plan: MemoryPlan) -> sch.Schedule:
    if s.status != sch.STATUS_OK:
        why = "stuck" if s.status == sch.STATUS_STUCK else "step limit"
        raise InfeasibleConfig(
            f"scheduler made no progress ({why}) with KV capacity "
            f"{plan.kv_capacity_tokens} tokens; a request cannot be placed")
    return s


def _map_replicas(fn, jobs: list, workers: int) -> list:
    """fn(job) for every job, in job order (the sums over replicas then add in the same order
    whatever the threads: the same figures to the last digit). On Ctrl-C, or an error in one
    replica, the other threads stop at their next pause."""
    if workers <= 1:
        return [fn(job) for job in jobs]
    import threading

    cancel = threading.Event()
    return thread_map(lambda job: fn(job, cancel), jobs, workers, on_error=cancel.set)


def _simulate_replica(workload: Workload, idx: np.ndarray, params: sch.SchedulerParams,
                      totals: _StepTotals, plan: MemoryPlan, exact: bool,
                      keep_steps: bool, cancel=None) -> _Replica:
    """Schedule and price the requests `idx` (in submission order) on one replica, adding its
    steps to `totals` (fresh per replica). Unless `keep_steps`, the steps are priced as the
    scheduler hands them on and then dropped (memory flat in the job's length). Replaying
    arrivals, the schedule depends on when requests arrive in step terms and the step times
    on the schedule: iterate to a fixed point (steps kept)."""
    arrivals = None if workload.arrival_s is None else workload.arrival_s[idx]
    if arrivals is None and not keep_steps:
        s = _schedule(workload, idx, params, exact, plan, on_steps=totals.price, cancel=cancel)
        return _Replica(s, totals.time_s)
    if arrivals is None:
        s = _schedule(workload, idx, params, exact, plan, cancel=cancel)
        # priced in slices all the same: a cost model's temporaries over millions of steps
        # at once took GiBs (the report's timelines of a 2 M-request job)
        dt = [totals.price(s.steps[i:i + sch.STREAM_ROWS])
              for i in range(0, len(s.steps), sch.STREAM_ROWS)]
        return _Replica(s, totals.time_s,
                        step_s=np.concatenate(dt) if dt else np.zeros(0))
    arrival_step = None
    for _ in range(ARRIVAL_ITERATIONS):
        s = _schedule(workload, idx, params, exact, plan, arrival_step, cancel=cancel)
        dt, priced = _price(s.steps, totals.cost_model, totals.off_ctx)
        end_s = arrival_clock(dt, s.first_step, arrivals)
        nxt = np.searchsorted(end_s - dt, arrivals, side="left")
        if arrival_step is not None and np.array_equal(nxt, arrival_step):
            break  # the schedule and its clock agree on every arrival
        arrival_step = nxt
    totals.add(s.steps, dt, priced)
    return _Replica(s, float(end_s[-1]), end_s, step_s=dt)


def client_cap_shares(max_concurrency: int, dp: int) -> list[int]:
    """Each DP replica's share of a client's cap on requests in flight: N split evenly (the
    first N mod dp replicas one more), at least 1 each (a replica with no share would never
    get a request)."""
    return [max(max_concurrency // dp + (r < max_concurrency % dp), 1) for r in range(dp)]


def decode_run_steps(engine: str, engine_version: str | None,
                     num_scheduler_steps: int | None) -> int:
    """Decode steps per scheduler call: vLLM V0's --num-scheduler-steps, or the count its
    fitted profile assumes where not given (tuner.core.engines.priced_scheduler_steps); 1 for
    V1 (which refuses a count above 1) and for SGLang, which schedules every step (a search
    over both engines gives the count for its vLLM configurations)."""
    if engine != "vllm":
        return 1
    check_scheduler_steps(generation_of(engine_version), num_scheduler_steps)
    return priced_scheduler_steps(engine_version, num_scheduler_steps) or 1


def simulate(workload: Workload, model: ModelSpec, gpu: GPU, config: ServingConfig,
             cost_model: CostModel, *, timeline: bool = False,
             exact: bool = False, return_steps: bool = False, startup_s: float | None = None,
             engine_version: str | None = None, replicas: int | None = None,
             timeline_rows: int | None = None,
             engine: str | None = None, sglang: SGLangSettings | None = None,
             prefix_caching: bool | None = None,
             num_scheduler_steps: int | None = None,
             max_concurrency: int | None = None) -> SimResult:
    """Simulate the whole job iteration by iteration, each step priced by `cost_model`
    (predictors.sources.resolve_cost_model / cost_model_for give the registry's); raises
    InfeasibleConfig if it cannot run.

    exact=True runs the scheduler strictly step by step; the default skips ahead over
    decode-only stretches, which yields the same steps (tested) in less time. timeline: replica
    0's per-step figures in `SimResult.timeline` (time from the engines being up);
    return_steps: every replica's step records in `SimResult.steps`, their times in `step_s`.

    Engine start-up (tuner.core.startup: weight loading, torch.compile, CUDA graphs of vLLM
    `engine_version`, default the newest) runs on every replica at once before the schedule:
    the makespan, its $ and the lower bound include it. `startup_s` replaces the model (0: the
    schedule alone, as a real run timed from the engine being up measures it).

    `replicas`: simulate only the first that many data-parallel replicas of the split (a
    report's timeline of replica 0 needs 1/dp of the work); the figures are then theirs, not
    the whole deployment's. `timeline_rows`: at most about twice that many timeline rows
    (consecutive steps merged, time-weighted; for a picture), not one per step; ignored when
    replaying arrivals (their clock is per step).

    The engine is config.engine (`engine` replaces it): "vllm" (the C loop's presets) or
    "sglang" (tuner.sim.sglang's scheduler, its memory plan, config.schedule_policy and
    `sglang`'s other settings; config.chunk_size is then --chunked-prefill-size,
    config.max_running --max-running-requests, config.gpu_memory_utilization
    --mem-fraction-static; priced with `cost_model`: one resolved for SGLang, engine="sglang"
    in predictors.sources, says so in its provenance; another gets a line saying it is vLLM's).
    `prefix_caching` False: shared prefixes are computed by every request (vLLM
    --no-enable-prefix-caching, SGLang --disable-radix-cache); None: the engine's default (on,
    except vLLM V0, `engine_version` before 0.8, where it was off unless asked for).

    `num_scheduler_steps`: vLLM V0's --num-scheduler-steps (a V0 `engine_version` without it
    runs the multi-step count its host profile was fitted at, as the profile and the exports
    do: tuner.core.engines.priced_scheduler_steps): each request is scheduled for whole decode
    runs of that many steps (tuner.sim.scheduler.multi_step_outputs: the worker computes a
    request that stopped mid-run to the run's end); the result's token counts stay the
    workload's.

    `max_concurrency`: a closed-loop client's cap on requests in flight (vllm bench serve
    --max-concurrency): it sends requests in submission order (replaying arrivals: each once
    it has arrived too), at most N at once, the next when one finishes, so the engine never
    holds more than N (tuner.sim.scheduler.SchedulerParams.client_cap; vLLM only). Over DP
    replicas the cap is split evenly (client_cap_shares), as one client per replica would
    hold it. None: no cap."""
    if len(workload) == 0:
        raise TunerError("The workload has no requests.")
    if workload.prompt_tokens.min() < 1 or workload.output_tokens.min() < 1:
        # the readers refuse them; a Workload built in Python is not read (an output of 0
        # tokens never finished: the loop sampled tokens until KV ran out)
        i = int(np.flatnonzero((workload.prompt_tokens < 1) | (workload.output_tokens < 1))[0])
        raise TunerError(f"request {i} has {int(workload.prompt_tokens[i])} prompt and "
                         f"{int(workload.output_tokens[i])} output tokens: every request needs "
                         "at least 1 of each (vLLM and SGLang refuse max_tokens 0).")
    if max_concurrency is not None and (isinstance(max_concurrency, bool)
                                        or int(max_concurrency) != max_concurrency
                                        or max_concurrency < 1):
        raise TunerError(f"max_concurrency must be a whole number of requests >= 1, got "
                         f"{max_concurrency!r}.")
    if engine is not None and engine != config.engine:
        if engine not in ENGINES:
            raise TunerError(f"engine {engine!r} is not one of {', '.join(ENGINES)}.")
        config = dataclasses.replace(config, engine=engine)
    engine = config.engine
    run_steps = decode_run_steps(engine, engine_version, num_scheduler_steps)
    preset = SCHEDULER_PRESETS.get(config.scheduler)
    why = multi_step_refusal(generation_of(engine_version), run_steps,
                             preset is not None and preset.chunked_prefill, config.pp)
    if why is not None:  # vLLM's EngineArgs would refuse to start this plan
        assumed = ("" if num_scheduler_steps is not None else
                   f" [{run_steps} steps: as tuner prices V0 without --num-scheduler-steps; "
                   f"scheduler {config.scheduler}]")
        raise InfeasibleConfig(why + assumed)
    why = (moe_parallel_refusal(generation_of(engine_version), model.is_moe,
                                bool(getattr(config, "expert_parallel", False)))
           if engine == "vllm" else None)
    if why is not None:  # a plan priced as V1 runs it, which this release cannot start
        raise InfeasibleConfig(why)
    # V0 has no data-parallel engine: an MoE plan's dp replicas are engines of their own, each
    # holding every expert (its memory plan and cost model are one replica's, at dp 1)
    replica = moe_replica_config(model, config, engine_version, engine)
    if prefix_caching is None:
        prefix_caching = engine == "sglang" or generation_of(engine_version).generation.prefix_caching
    # SGLang's radix cache as launched (it sizes a hybrid's Mamba state pool)
    radix = engine == "sglang" and prefix_caching and (sglang is None or sglang.radix_cache)
    if hybrid_prefix_caching_off(model, engine, engine_version):
        prefix_caching = False  # vLLM overrides the flag for a hybrid in these releases
    if engine == "sglang" and model.is_hybrid:
        # SGLang's Mamba radix cache hits only where a request state is stored (chunk-aligned
        # branch points): not modelled, so no prefix hits are simulated (a conservative figure)
        prefix_caching = False
    full_workload = workload  # the physical limit counts every shared prefix once regardless
    if not prefix_caching and workload.prefix_ids is not None:
        workload = dataclasses.replace(workload, prefix_ids=None, prefix_tokens=None)
    # with --provider: the rented instance shape is the machine (start-up, PP stages; the
    # cost model gets the same from predictors.sources); the catalog's without one
    gpu = plan_machine_gpu(gpu, config.tp, config.dp, config.pp)
    start = resolve_startup(model, gpu, config, startup_s, engine_version)
    plan = check_feasible(workload, model, gpu, config, engine, engine_version,
                          radix_cache=radix)
    cost_model = pipelined(cost_model, model, gpu, config)  # PP stages (tuner.sim.pipeline)
    provenance = cost_model.provenance
    if replica is not config:
        provenance = dataclasses.replace(
            provenance, detail=f"{provenance.detail}; {moe_replicas_note(config.dp)}")
    if engine == "sglang":
        if workload.arrival_s is not None:
            raise TunerError("replaying arrivals (a trace's arrival times) is simulated for "
                             "vLLM only; drop --engine sglang or the arrival column.")
        if max_concurrency is not None:
            raise TunerError("a client's max_concurrency (requests in flight) is simulated for "
                             "vLLM only; drop --engine sglang or --max-concurrency.")
        settings = dataclasses.replace(sglang or SGLangSettings(),
                                       schedule_policy=config.schedule_policy)
        if not start.given:  # no torch.compile: SGLang's --enable-torch-compile is off by default
            start = dataclasses.replace(
                start, compile_s=0.0, total_s=start.total_s - start.compile_s, engine="SGLang",
                compile_source="SGLang v0.5 ServerArgs.enable_torch_compile False (default); "
                               "CUDA-graph capture timed as vLLM's (not measured for SGLang)")
        if not prefix_caching:
            settings = dataclasses.replace(settings, radix_cache=False)
        from tuner.sim.sglang import admission_floor

        page = sglang_page_size(model, gpu)
        floor = admission_floor(workload.prompt_tokens, workload.output_tokens,
                                workload.prefix_ids, workload.prefix_tokens, settings.radix_cache,
                                page)
        i = int(np.argmax(floor))
        if floor[i] > plan.kv_capacity_tokens:  # the scheduler would never admit it (stuck)
            raise InfeasibleConfig(
                f"SGLang's KV pool holds {plan.kv_capacity_tokens} tokens; request {i} "
                f"({int(workload.prompt_tokens[i])} prompt + {int(workload.output_tokens[i])} "
                f"output tokens) is admitted only with {int(floor[i])} (its tokens, a page, and "
                "the cached prefix it locks): more KV memory")
        # a hybrid's Mamba state slots cap the running requests (resolve_max_num_reqs)
        running = min(config.max_running, plan.max_running_by_slots or config.max_running)
        params = SGLangParams(plan.kv_capacity_tokens, config.chunk_size, running, settings, page)
        if provenance.engine != "sglang":  # a cost model resolved for vLLM (sources, engine=)
            # a roofline has no kernel tables: it prices SGLang as it prices vLLM
            priced = ("the roofline vLLM uses" if provenance.kind == "roofline"
                      else "vLLM's kernel tables")
            provenance = Provenance(provenance.kind, f"{provenance.detail}; SGLang priced with "
                                    f"{priced}; engine overhead not fitted",
                                    provenance.error_pct)
    else:
        if sglang is not None:
            raise TunerError("SGLang settings (--schedule-policy, --schedule-conservativeness, "
                             "--max-prefill-tokens) need --engine sglang.")
        params = scheduler_params(config, plan.kv_capacity_blocks, plan)
        if not prefix_caching:  # a preempted request's blocks are not cached either
            params = params._replace(cache_preempted=False)
    order = _submission_order(workload, model, gpu, config, plan)
    # what the engine computes (V0 multi-step: whole decode runs); the figures count the
    # workload's own tokens
    scheduled = workload if run_steps == 1 else dataclasses.replace(
        workload, output_tokens=sch.multi_step_outputs(workload.output_tokens, run_steps))
    if run_steps > 1:
        check_decode_runs(scheduled, config, plan, run_steps)
    # a fitted CostModel may carry its measured host<->device curve (predictors.transfer_model)
    off_ctx = _offload.OffloadContext.build(model, gpu, replica,
                                            transfer=cost_model.transfer_model,
                                            engine_version=engine_version)
    off_totals = _offload.OffloadTotals()
    makespan = kv_time_integral = peak_kv = running_s = 0.0
    iterations = preemptions = cached = 0
    tl, steps, step_s = None, [], []
    cap = max(plan.kv_capacity_blocks, 1)
    shares = None if max_concurrency is None else client_cap_shares(int(max_concurrency),
                                                                    config.dp)
    jobs = [(replica, idx) for replica, idx in
            enumerate(split_replicas(workload, order, config.dp)[:replicas]) if idx.size]

    def one(job, cancel=None):
        replica, idx = job
        want_tl = timeline and replica == 0
        if want_tl:
            totals = _TimelineTotals(cost_model, off_ctx, off_totals, max_rows=(
                timeline_rows if workload.arrival_s is None else None))
        else:
            totals = _StepTotals(cost_model, off_ctx, off_totals)
        rep = _simulate_replica(scheduled, idx, params if shares is None else
                                params._replace(client_cap=shares[replica]), totals, plan,
                                exact, keep_steps=return_steps, cancel=cancel)
        return want_tl, totals, rep

    # replicas are independent: the C loop releases the GIL, so they run on the cores at once
    # (the offload totals are shared: those plans stay on one thread)
    workers = 1 if off_ctx.active else parallel_workers(len(jobs), len(workload))
    for want_tl, totals, rep in _map_replicas(one, jobs, workers):
        makespan = max(makespan, rep.span_s)
        iterations += totals.iterations
        running_s += totals.running_s
        preemptions += totals.preemptions
        cached += rep.schedule.cached_tokens
        peak_kv = max(peak_kv, totals.peak_kv_blocks / cap)
        kv_time_integral += totals.kv_block_s / cap / max(rep.span_s, 1e-12)
        if return_steps:
            steps.append(rep.schedule.steps)
            step_s.append(rep.step_s)
        if want_tl:
            tl = totals.timeline(plan.kv_capacity_blocks, rep.end_s)
    # every replica starts its engine at once, then runs its schedule; the rented GPUs are
    # paid from the start (--provider: whole instances, billed by its granularity, else per
    # GPU-second)
    makespan += start.total_s
    rental = None if gpu.billing is None else rent(makespan, gpu.billing, config.tp, config.dp,
                                                     config.pp)
    res = SimResult(
        config=config, makespan_s=makespan, requests=len(workload),
        prompt_tokens=int(workload.prompt_tokens.sum()),
        output_tokens=int(workload.output_tokens.sum()), iterations=iterations,
        preemptions=preemptions, peak_kv_fraction=peak_kv,
        mean_kv_fraction=kv_time_integral / config.dp,
        # the schedule's physical limit T_o plus the same start-up: a bound of makespan_s;
        # replaying arrivals, the job cannot end before its last request arrives
        lower_bound_s=max(lower_bound_s(full_workload, model, gpu, config),
                          full_workload.arrival_span_s) + start.total_s,
        cost_usd=(rental.cost_usd if rental is not None
                  else job_cost_usd(makespan, gpu.price_usd_per_h, config.tp, config.dp,
                                   pp=config.pp)),
        rental=rental,
        machines=machines_for(gpu, config).to_dict(),
        price_usd_per_h=gpu.price_usd_per_h, memory=plan, provenance=provenance,
        cached_prompt_tokens=cached, timeline=tl, steps=steps if return_steps else None,
        step_s=step_s if return_steps else None,
        startup_s=start.total_s, startup=start.to_dict(),
        mean_residence_s=running_s / max(sum(idx.size for _, idx in jobs), 1),
        engine=engine, decode_run_steps=run_steps)
    if gpu.vasuki_usd_per_fp32_gflop_per_w:
        res.vasuki_cost_metric = res.qps / gpu.vasuki_usd_per_fp32_gflop_per_w
    if off_ctx.active:
        # at the same mean request as `plan`: a sliding-window model's tokens per byte depend
        # on it, and without it the gain compared capacities in different tokens
        base = plan_memory(model, gpu, dataclasses.replace(
            config, kv_offload_layers=0, weight_offload_fraction=0.0),
            mean_request_tokens=float((workload.prompt_tokens + workload.output_tokens).mean()),
            engine_version=engine_version).kv_capacity_tokens
        res.offload = off_totals.summary(off_ctx, plan, dp=config.dp,
                                         kv_capacity_tokens_no_offload=base)
        res.offload_stall_s = res.offload["offload_stall_s"]
    return res
