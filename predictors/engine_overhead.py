"""Engine overhead profiles: host-side time of one engine step, by entry point and generation.

Kernel tables price the GPU's work; a real engine step also spends CPU time scheduling,
preparing inputs, sampling, detokenising and streaming. That time grows with the number of
running sequences and the tokens sampled, and whether it adds to the GPU time or hides under it
depends on the engine generation:

  additive   host work sits between GPU steps (vLLM V0, V1 with synchronous scheduling):
             step = gpu + host
  overlapped V1 with asynchronous scheduling prepares step k+1 while the GPU runs step k:
             step = max(gpu, host) + exposed, where `exposed` is what never overlaps

    host = fixed + per_seq * running + per_token * sampled + per_chunk * prefill chunks
           + per_tp_rank * (tp - 1)

`running` is the step's decodes plus its prefill chunks; prefill chunks are not in
BatchFeatures and are counted as max(1, prefills completed) in a step with prefill tokens.

PROFILES holds the named profiles. Their numbers are FITTED (on the public runs of
benchmarks/fidelity.py, with the leave-one-out error it prints) or ESTIMATED (from published
descriptions, no fit); `source` says which, and describe() prints it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from tuner.predictors.features import BatchFeatures


@dataclass(frozen=True)
class EngineProfile:
    name: str  # e.g. "vllm-v1-async"
    entry_point: str  # "LLM.generate" | "AsyncLLM (server / online)" | ...
    generation: str  # "V1 async scheduling" | "V1 sync" | "V0 single-step" | "V0 multi-step"
    overlapped: bool
    fixed_s: float = 0.0
    per_seq_s: float = 0.0
    per_token_s: float = 0.0
    per_chunk_s: float = 0.0
    per_tp_rank_s: float = 0.0
    exposed_s: float = 0.0  # overlapped engines: per-step time that never overlaps
    source: str = "estimated"  # "fitted on ..." | "estimated: ..."
    estimated: bool = False  # True: the terms are estimates, not fitted on runs

    def host_s(self, f: BatchFeatures, tp: int = 1) -> np.ndarray:
        chunks = np.where(f.prefill_tokens > 0, np.maximum(f.seqs_sampled - f.decodes, 1.0), 0.0)
        return (self.fixed_s + self.per_seq_s * (f.decodes + chunks)
                + self.per_token_s * f.seqs_sampled + self.per_chunk_s * chunks
                + self.per_tp_rank_s * (tp - 1))

    def step_time_s(self, gpu_s: np.ndarray, f: BatchFeatures, tp: int = 1) -> np.ndarray:
        if not (self.fixed_s or self.per_seq_s or self.per_token_s or self.per_chunk_s
                or self.per_tp_rank_s):  # no host terms: skip the array work
            return gpu_s + self.exposed_s if self.overlapped else gpu_s.copy()
        host = self.host_s(f, tp)
        if self.overlapped:
            return np.maximum(gpu_s, host) + self.exposed_s
        return gpu_s + host

    def with_params(self, **kw) -> EngineProfile:
        return replace(self, **kw)

    def describe(self) -> str:
        host = []
        if self.fixed_s:
            host.append(f"{1e3 * self.fixed_s:.2f} ms/step")
        if self.per_seq_s:
            host.append(f"{1e6 * self.per_seq_s:.0f} us/running seq")
        if self.per_token_s:
            host.append(f"{1e6 * self.per_token_s:.0f} us/sampled token")
        if self.per_chunk_s:
            host.append(f"{1e6 * self.per_chunk_s:.0f} us/prefill chunk")
        if self.per_tp_rank_s:
            host.append(f"{1e3 * self.per_tp_rank_s:.2f} ms/extra TP rank")
        terms = [f"host {' + '.join(host)}" if host else "no host terms"]
        if self.overlapped:
            terms.append(f"exposed {1e3 * self.exposed_s:.2f} ms/step")
        how = "max(GPU, host) + exposed" if self.overlapped else "GPU + host"
        return (f"{self.name} ({self.generation}, {self.entry_point}; step = {how}; "
                f"{', '.join(terms)}; {self.source})")

    def summary(self) -> str:
        """One short clause for a provenance line (`describe` has the whole profile)."""
        return f"{self.name} ({'estimated' if self.estimated else 'fitted on public runs'})"


# Fitted by `python benchmarks/fidelity.py --fit` on the three dense vLLM 0.19 runs of
# ../shared/fidelity/llmservingsim (V1, async scheduling on); see benchmarks/RESULTS.md for the
# fit and its leave-one-out error. Update both together.
EXPOSED_FIT_S = 0.0  # set from `python benchmarks/fidelity.py --fit`
V1_ASYNC = EngineProfile(
    name="vllm-v1-async", entry_point="LLM engine, requests added as they arrive",
    generation="V1 async scheduling", overlapped=True,
    fixed_s=0.0, per_seq_s=0.0, exposed_s=EXPOSED_FIT_S,
    # Only `exposed_s` is fitted: in these runs every GPU step (15-350 ms) outlasts any
    # plausible host time, so async scheduling hides the host terms and the runs cannot
    # identify them; they stay 0 until a run with short steps (small model, fast GPU) is public
    source="exposed time fitted on 3 public vLLM 0.19 runs (benchmarks/fidelity.py --fit), "
           "host terms not identifiable from them")

PROFILES: dict[str, EngineProfile] = {
    "vllm-v1-async": V1_ASYNC,
    # Offline LLM.generate on V1 runs the same engine core with async scheduling by default
    # (vLLM >= 0.11); no public offline run with per-request data was found to fit it apart
    "vllm-v1-offline": replace(V1_ASYNC, name="vllm-v1-offline", entry_point="LLM.generate",
                               source=V1_ASYNC.source + ", as vllm-v1-async"),
    # V0 single-step (vLLM <= 0.6 without multi-step): host work serial with the GPU; issue 14
    # records 8-16 ms per step of unexplained time on 0.5.x (ESTIMATE, not fitted)
    "vllm-v0": EngineProfile(
        name="vllm-v0", entry_point="LLM.generate", generation="V0 single-step",
        overlapped=False, fixed_s=8e-3, estimated=True,
        source="estimated: the low end of the 8-16 ms per step observed on vLLM 0.5.x "
               "(issue 14), not fitted"),
    # V0 multi-step (--num-scheduler-steps N): host work amortised over N GPU steps (ESTIMATE)
    "vllm-v0-multistep": EngineProfile(
        name="vllm-v0-multistep", entry_point="LLM.generate / benchmark_throughput",
        generation="V0 multi-step (10 steps)", overlapped=False, fixed_s=0.8e-3, estimated=True,
        source="estimated: vllm-v0's 8 ms divided over --num-scheduler-steps 10, not fitted"),
}
DEFAULT_PROFILE = "vllm-v1-offline"


def get_profile(name: str | None = None) -> EngineProfile:
    name = name or DEFAULT_PROFILE
    if name not in PROFILES:
        raise KeyError(f"unknown engine profile {name!r}; known: {', '.join(sorted(PROFILES))}")
    return PROFILES[name]
