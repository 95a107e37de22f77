"""Scheduler presets: named settings of the switches of InferMax's unified scheduler (Alg. 1).

Plain data in the core layer so that every layer reads one registry: `ServingConfig` validates
`scheduler` against its keys, the simulator (tuner.sim.scheduler.preset) runs the switches, and
exporters and runners can ask what a preset does (e.g. `chunked_prefill`) instead of matching
its name. Adding a preset is one entry here (a new *behaviour* is a new switch in the kernel).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass


@dataclass(frozen=True)
class SchedulerPreset:
    """The policy switches of one preset (budgets and capacity come from the ServingConfig)."""

    prefill_first: bool = False  # vLLM V0: a step is either prefills or decodes, prefills win
    chunked_prefill: bool = True  # a prompt may be split over steps
    decodes_first: bool = False  # Sarathi-Serve: all decodes, then ongoing prefills, then new
    upfront_prompt_alloc: bool = False  # KV for the whole prompt at admission (V0 block manager)
    reserve_full: bool = False  # eviction-free: reserve prompt + output at admission
    # vLLM V1 (scheduler_reserve_full_isl, default on): admit a request only when KV for its
    # whole current sequence is free, though blocks are still taken chunk by chunk
    admit_full_sequence: bool = False
    # vLLM V1 prefix caching (on by default): a preempted request's freed blocks stay cached
    # until the LRU free queue reuses them, so its recompute skips what survived
    cache_preempted: bool = False
    # Which presets an engine runs as exported (the others are simulator studies, never
    # recommended) is the engine generation's: tuner.core.engines.EngineGeneration.schedulers


_BASE = {
    # vLLM V1 as current releases run it by default (vLLM 0.19's resolved config in
    # ../shared/fidelity): one token budget for decodes and prefill chunks, running list in
    # admission order, KV allocated as tokens are computed, full-sequence admission
    # (scheduler_reserve_full_isl) and prefix caching, which lets a preempted request's
    # recompute skip its still-cached blocks. The preset benchmarks/fidelity.py validates.
    "vllm": SchedulerPreset(admit_full_sequence=True, cache_preempted=True),
    # The same batching without those two refinements: the plain vLLM form of InferMax's
    # unified scheduler, which its MILP optimum reproduces (a reference, not an engine default)
    "vllm-basic": SchedulerPreset(),
    # vLLM V0 default: prefill-first, no chunked prefill, no hybrid batches
    "vllm-v0": SchedulerPreset(prefill_first=True, chunked_prefill=False),
    # Sarathi-Serve (Alg. 3): stall-free hybrid batching, chunk = budget, on V0's block manager
    "sarathi": SchedulerPreset(decodes_first=True, upfront_prompt_alloc=True),
}

#: Every preset by name; "-noevict" variants reserve prompt + output at admission.
SCHEDULER_PRESETS: dict[str, SchedulerPreset] = {
    **_BASE,
    **{f"{name}-noevict": dataclasses.replace(p, reserve_full=True)
       for name, p in _BASE.items()},
}
