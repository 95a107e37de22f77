"""Engine overhead profiles: host-side time of one engine step, by entry point and generation.

Kernel tables price the GPU's work; a real engine step also spends CPU time scheduling,
preparing inputs, sampling, detokenising and streaming. That time grows with the number of
running sequences and the tokens sampled, and whether it adds to the GPU time or hides under it
depends on the engine generation:

  additive   host work sits between GPU steps (vLLM V0, V1 with synchronous scheduling):
             step = gpu + host
  overlapped V1 with asynchronous scheduling prepares step k+1 while the GPU runs step k:
             step = max(gpu, host) + exposed, where `exposed` is what never overlaps

where gpu = the kernel tables' time x (1 + gpu_excess): what an engine's step spends on the GPU
beyond the tables' isolated, back-to-back kernel timings (fitted for V0, 0 elsewhere), and

    host = fixed + per_seq * running + per_token * sampled + per_new_request * admitted
           + per_logged_request * admitted + per_chunk * prefill chunks + per_tp_rank * (tp - 1)

`running` is the step's decodes plus its prefill chunks; prefill chunks are not in
BatchFeatures and are counted as max(1, prefills completed) in a step with prefill tokens.
`admitted` is the prefills completed in the step (sampled - decodes where the step has prefill
tokens): once per request (and per recompute after a preemption), its intake cost.
`per_logged_request` is the part of it that request logging adds: vLLM's API server logged
every request (its prompt and token ids) unless started with --disable-log-requests, until
0.10.1 made logging opt-in (--enable-log-requests, vllm-project/vllm#21739); profile_for keeps
it only where the job logs requests.

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
    per_new_request_s: float = 0.0
    per_logged_request_s: float = 0.0  # the API server's request log (see the module doc)
    exposed_s: float = 0.0  # overlapped engines: per-step time that never overlaps
    # the engine's GPU time over the tables' (a fraction): step GPU time = kernel tables x
    # (1 + gpu_excess). AIConfigurator times each kernel alone, back to back; in an engine step
    # kernels run in sequence, eager outside CUDA graphs (V0 runs every prefill step eagerly),
    # with the work the tables leave out (sampling, cache writes, input copies) and at the
    # clocks a sustained load holds. Fitted where a fit moves it, else 0
    gpu_excess: float = 0.0
    source: str = "estimated"  # "fitted on ..." | "estimated: ..."
    # True only where a fit on public runs moved a term; False for estimates and for terms a
    # fit left at zero (describe/summary say which)
    fitted: bool = False

    def host_s(self, f: BatchFeatures, tp: int = 1) -> np.ndarray:
        prefilling = f.prefill_tokens > 0
        admitted = np.where(prefilling, np.maximum(f.seqs_sampled - f.decodes, 0.0), 0.0)
        chunks = np.where(prefilling, np.maximum(admitted, 1.0), 0.0)
        return (self.fixed_s + self.per_seq_s * (f.decodes + chunks)
                + self.per_token_s * f.seqs_sampled + self.per_chunk_s * chunks
                + (self.per_new_request_s + self.per_logged_request_s) * admitted
                + self.per_tp_rank_s * (tp - 1))

    def step_time_s(self, gpu_s: np.ndarray, f: BatchFeatures, tp: int = 1) -> np.ndarray:
        if self.gpu_excess:
            gpu_s = gpu_s * (1.0 + self.gpu_excess)
        if not self.has_host_terms:  # skip the array work
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
        if self.per_new_request_s:
            host.append(f"{1e3 * self.per_new_request_s:.2f} ms/new request")
        if self.per_logged_request_s:
            host.append(f"{1e3 * self.per_logged_request_s:.2f} ms/logged request")
        if self.per_tp_rank_s:
            host.append(f"{1e3 * self.per_tp_rank_s:.2f} ms/extra TP rank")
        terms = [f"host {' + '.join(host)}" if host else "no host terms"]
        if self.gpu_excess:
            terms.insert(0, f"GPU time {100 * self.gpu_excess:+.1f} % over the kernel tables")
        if self.overlapped:
            terms.append(f"exposed {1e3 * self.exposed_s:.2f} ms/step")
        gpu = "GPU x (1 + excess)" if self.gpu_excess else "GPU"
        how = f"max({gpu}, host) + exposed" if self.overlapped else f"{gpu} + host"
        return (f"{self.name} ({self.generation}, {self.entry_point}; step = {how}; "
                f"{', '.join(terms)}; {self.source})")

    def summary(self) -> str:
        """One short clause for a provenance line (`describe` has the whole profile)."""
        if self.fitted:
            return f"{self.name} (fitted on public runs)"
        if not self.has_host_terms and not self.exposed_s:
            return f"{self.name} (no host terms: GPU time only, not fitted)"
        return f"{self.name} (estimated, not fitted)"

    @property
    def has_host_terms(self) -> bool:
        return bool(self.fixed_s or self.per_seq_s or self.per_token_s or self.per_chunk_s
                    or self.per_tp_rank_s or self.per_new_request_s or self.per_logged_request_s)


# Fitted by `python benchmarks/fidelity.py --fit` on the three dense vLLM 0.19 runs of
# ../shared/fidelity/llmservingsim (V1, async scheduling on); see benchmarks/RESULTS.md for the
# fit and its leave-one-out error. Update both together.
EXPOSED_FIT_S = 0.0  # the fit's answer: no exposed time (so the profile is not "fitted")
V1_ASYNC = EngineProfile(
    name="vllm-v1-async", entry_point="OpenAI API server (AsyncLLM)",
    generation="V1 async scheduling", overlapped=True,
    fixed_s=0.0, per_seq_s=0.0, exposed_s=EXPOSED_FIT_S,
    # Only `exposed_s` is fitted, and the fit leaves it at 0: in these runs every GPU step
    # (15-350 ms) outlasts any plausible host time, so async scheduling hides the host terms
    # and the runs cannot identify them
    source="GPU time only: the exposed time fitted on 3 public vLLM 0.19 runs is 0 "
           "(benchmarks/fidelity.py --fit); host terms not identifiable from them")

# Fitted by `python benchmarks/fidelity.py --fit` on the 11 public vLLM 0.6.0 A100-80GB runs of
# ../shared/fidelity/lambda-a100 (OpenAI API server, streaming, --num-scheduler-steps 10, every
# request at t = 0, each request logged: LambdaLabs' benchmark.py starts the server without
# --disable-log-requests) and SGLang's two published vLLM 0.6.0 figures, rebuilt (the same
# server with --disable-log-requests): least squares on predicted / measured makespan and, on
# the A100 runs, on their median gap between streamed chunks (benchmark_serving's median ITL:
# the decode step, which the makespan alone cannot tell from a per-request cost); of every set
# of up to three terms (the host terms and the GPU-time excess), the one with the lowest
# leave-one-out median error (makespan + ITL), the fewest terms within 0.5 point, no negative
# term (the table is in benchmarks/RESULTS.md). The runs are simulated as the engine ran them,
# in decode runs of 10 steps (tuner.sim.scheduler.multi_step_outputs: a request that stops
# mid-run is computed to the run's end) and with the all-reduces of decode batches above 256
# eager (V0's CUDA graphs stop there: predictors.aic.V0_CUDA_GRAPH_MAX_TOKENS); the kept set
# is host time only: per running sequence, per new request and per extra TP rank, with no
# fixed term, no GPU-time excess and no request-log term (the published figures, not logged,
# fit beside the logged runs without one). Update both together.
V0_MULTISTEP_FIXED_S = 0.0  # the fit's answer (see above)
V0_MULTISTEP_PER_SEQ_S = 27.80e-6
V0_MULTISTEP_PER_NEW_REQUEST_S = 5.865e-3
V0_MULTISTEP_PER_TP_RANK_S = 0.3072e-3
V0_MULTISTEP_GPU_EXCESS = 0.0  # the fit's answer
V0_MULTISTEP_PER_LOGGED_REQUEST_S = 0.0  # the fit's answer
V0_MULTISTEP_SOURCE = ("fitted on 11 public vLLM 0.6.0 A100 runs (API server, requests logged, "
                       "--num-scheduler-steps 10; makespans and median ITL) and 2 published vLLM "
                       "0.6.0 figures (A100, H100; --disable-log-requests), simulated in decode "
                       "runs of 10 steps; benchmarks/fidelity.py --fit: leave-one-out median "
                       "|makespan error| 1.7 % (worst 6.0 %) and |median ITL error| 4.1 % (worst "
                       "15.6 %) on the runs, 0.2 % and 4.8 % on the figures; checked, not fitted, "
                       "on vLLM's own H100 figures (vllm#12093)")
V0_MULTISTEP = EngineProfile(
    name="vllm-v0-multistep", entry_point="OpenAI API server (streaming)",
    generation="V0 multi-step", overlapped=False, fixed_s=V0_MULTISTEP_FIXED_S,
    per_seq_s=V0_MULTISTEP_PER_SEQ_S, per_new_request_s=V0_MULTISTEP_PER_NEW_REQUEST_S,
    per_tp_rank_s=V0_MULTISTEP_PER_TP_RANK_S, gpu_excess=V0_MULTISTEP_GPU_EXCESS,
    per_logged_request_s=V0_MULTISTEP_PER_LOGGED_REQUEST_S, fitted=True,
    source=V0_MULTISTEP_SOURCE)
#: V0 single-step's host time per step (the scheduler runs every step): the low end of the 8-16
#: ms per step observed on vLLM 0.5.x (issue 14) (ESTIMATE). vLLM's own H100 figures check it
#: (vllm-project/vllm#12093: single-step and --num-scheduler-steps 4, the same job): the step
#: count of that job puts their gap at 7.1 (FA3) to 9.8 (FA2) ms a scheduler call
#: (benchmarks/fidelity.py prints it)
V0_SINGLE_STEP_FIXED_S = 8e-3


def v0_single_step(multistep: EngineProfile) -> EngineProfile:
    """V0 single-step from a V0 multi-step profile: its per-sequence, per-request, TP,
    request-log and GPU terms, with V0_SINGLE_STEP_FIXED_S per step in place of the multi-step
    fixed term."""
    return replace(multistep, name="vllm-v0", entry_point="any", generation="V0 single-step",
                   fixed_s=V0_SINGLE_STEP_FIXED_S, fitted=False,
                   source=("estimated: 8 ms per step (the low end of the 8-16 ms observed on "
                           "vLLM 0.5.x, issue 14) + the multi-step fit's other terms (per "
                           "running sequence, per new request, per extra TP rank); no "
                           "single-step run to fit; vLLM's own H100 single-step figures "
                           "(vllm#12093) check it"))


PROFILES: dict[str, EngineProfile] = {
    "vllm-v1-async": V1_ASYNC,
    # Offline LLM.generate on V1 runs the same engine core with async scheduling by default
    # (vLLM >= 0.11); no public offline run with per-request data was found to fit it apart
    "vllm-v1-offline": replace(V1_ASYNC, name="vllm-v1-offline", entry_point="LLM.generate",
                               source=V1_ASYNC.source + ", as vllm-v1-async"),
    # V1 before asynchronous scheduling by default (0.8 - 0.13): host work between GPU steps;
    # no public run of it with per-request lengths is in ../shared/fidelity (ESTIMATE)
    "vllm-v1-sync": EngineProfile(
        name="vllm-v1-sync", entry_point="any", generation="V1 sync scheduling",
        overlapped=False, fixed_s=1.5e-3, per_seq_s=2e-6,
        source="estimated: the spec-sheet roofline's V1 step overhead (1.5 ms + 2 us per "
               "request), no public V1-sync run to fit"),
    "vllm-v0-multistep": V0_MULTISTEP,
    # V0 single-step: the scheduler runs every step (ESTIMATE: v0_single_step)
    "vllm-v0": v0_single_step(V0_MULTISTEP),
}
DEFAULT_PROFILE = "vllm-v1-offline"

# ---- SGLang --------------------------------------------------------------------------------
# SGLang's scheduler is one process per TP rank; tokenizing and detokenizing run in processes of
# their own (TokenizerManager, DetokenizerManager), so the host time of a step is the
# scheduler's: forming the batch, preparing its inputs, reading back the sampled tokens.
#   before v0.3.6  it runs between GPU steps: step = GPU + host
#   v0.3.6 on      the overlap ("zero-overhead") scheduler, on by default from v0.3.6 (sglang
#                PR #2067 "Enable overlap by default"; LMSYS blog 2024-12-04, "SGLang v0.4":
#                "The scheduler runs one batch ahead and prepares all the metadata required for
#                the next batch", no GPU idle time between decode batches in its Nsight
#                profile): it prepares step k+1 while the GPU runs step k, so
#                step = max(GPU, host) + exposed (exposed = what never overlaps)
# Fitted by `python benchmarks/fidelity.py --fit` on SGLang v0.3.0's two published offline
# figures (sgl-project/sglang benchmark/benchmark_vllm_060/README.md: Llama-3.1-8B on 1x A100,
# 70B on 4x H100; workloads rebuilt as the vLLM rows' are): of every single host term, the one
# with the lowest leave-one-out error and no negative value (two figures: one term at most,
# each predicted by the term fitted on the other). Update with benchmarks/RESULTS.md.
SGLANG_V03_PER_SEQ_S = 56.81e-6
SGLANG_V03_TERMS: dict[str, float] = {"per_seq_s": SGLANG_V03_PER_SEQ_S}
SGLANG_V03_SOURCE = (
    "fitted on SGLang v0.3.0's 2 published offline figures (sgl-project/sglang "
    "benchmark/benchmark_vllm_060: Llama-3.1-8B on 1x A100, 70B on 4x H100; workloads "
    "rebuilt; benchmarks/fidelity.py --fit): in-sample |makespan error| 4.4 % and 4.9 %, "
    "leave-one-out 9.8 % and 8.9 %; a per-new-request term or a GPU-time excess fits as well "
    "(the two figures cannot tell them apart)")
SGLANG_V03 = EngineProfile(
    name="sglang-v0.3", entry_point="launch_server (bench_serving, streaming)",
    generation="SGLang v0.3 (scheduler between GPU steps)", overlapped=False,
    fitted=bool(SGLANG_V03_TERMS), source=SGLANG_V03_SOURCE, **SGLANG_V03_TERMS)
SGLANG_OVERLAP = EngineProfile(
    name="sglang-overlap", entry_point="any", generation="SGLang v0.3.6+ overlap scheduler",
    overlapped=True, exposed_s=0.0, fitted=False, **SGLANG_V03_TERMS,
    source=("estimated: the sglang-v0.3 host terms, hidden under the GPU step by the overlap "
            "scheduler (step = max(GPU, host)); no exposed time: the v0.4 blog's profile shows "
            "no GPU idle time between batches; no public v0.4+ run with a stated workload was "
            "found to fit or check it. Likely optimistic: on v0.3.0's two published jobs it "
            "predicts 1.27x and 1.37x v0.3.0's throughput (GPU time only), where the v0.4 blog "
            "and sglang PR #1738 report ~1.1x for the overlap scheduler"))
PROFILES.update({"sglang-v0.3": SGLANG_V03, "sglang-overlap": SGLANG_OVERLAP})
#: the first SGLang release with the overlap scheduler on by default: the 0.3.6 wheel's
#: sglang/srt/server_args.py has disable_overlap_schedule = False (the scheduler overlaps unless
#: told not to); 0.3.5.post2's has enable_overlap_schedule = False (opt-in)
SGLANG_OVERLAP_SINCE = (0, 3, 6)


#: SGLang turns the overlap scheduler off for pipeline parallelism: the 0.5.23 wheel's
#: sglang/srt/arg_groups/overrides.py _pipeline_parallel_overlap_disable (pp_size > 1 ->
#: disable_overlap_schedule = True, "Pipeline parallelism is incompatible with overlap schedule")
SGLANG_PP_NO_OVERLAP_NOTE = ("--pp-size > 1: SGLang turns the overlap scheduler off "
                             "(overrides.py _pipeline_parallel_overlap_disable), so the "
                             "scheduler runs between GPU steps")


def sglang_profile_for(engine_version: str | None = None, pp: int = 1) -> EngineProfile:
    """The host-cost profile of an SGLang release: sglang-v0.3 before v0.3.6 (fitted on v0.3.0's
    published figures; used for older releases too, and its source says so), sglang-overlap
    from v0.3.6 on and for None (the newest: tuner simulates SGLang v0.5's scheduler), except
    under pipeline parallelism (pp > 1), where SGLang runs without the overlap scheduler."""
    from tuner.core.engines import parse_version

    v = parse_version(engine_version)
    if pp > 1 and (v is None or v >= SGLANG_OVERLAP_SINCE):
        return replace(SGLANG_V03, source=SGLANG_V03.source + "; " + SGLANG_PP_NO_OVERLAP_NOTE)
    if v is None or v >= SGLANG_OVERLAP_SINCE:
        return SGLANG_OVERLAP
    if v[:2] == (0, 3):
        return SGLANG_V03
    return replace(SGLANG_V03, source=SGLANG_V03.source + f"; fitted on v0.3.0, used for "
                   f"{engine_version}")


def get_profile(name: str | None = None) -> EngineProfile:
    name = name or DEFAULT_PROFILE
    if name not in PROFILES:
        raise KeyError(f"unknown engine profile {name!r}; known: {', '.join(sorted(PROFILES))}")
    return PROFILES[name]


#: the first vLLM release whose API server does not log each request by default (vllm-project/
#: vllm#21739: --enable-log-requests, off by default, replaces --disable-log-requests): the
#: 0.10.1 wheel's api_server.py builds its RequestLogger only with enable_log_requests, 0.10.0's
#: unless disable_log_requests
LOG_REQUESTS_OPT_IN_SINCE = (0, 10, 1)


def logs_requests_by_default(engine_version: str | None, entry_point: str) -> bool:
    """Whether vLLM logs each request without a logging flag: its API server before
    LOG_REQUESTS_OPT_IN_SINCE (None = the newest release: no)."""
    from tuner.core.engines import parse_version

    v = parse_version(engine_version)
    return entry_point == "serve" and v is not None and v < LOG_REQUESTS_OPT_IN_SINCE


def profile_for(engine_version: str | None = None, entry_point: str = "llm",
                num_scheduler_steps: int | None = None,
                log_requests: bool | None = None) -> EngineProfile:
    """The host-cost profile of a release (tuner.core.engines generation), entry point
    (tuner.core.engine_defaults.ENTRY_POINTS) and --num-scheduler-steps. Where the profile was
    fitted under another entry point or step count, its `source` says so. V0 without
    --num-scheduler-steps: the fitted multi-step profile, the only V0 profile fitted on runs
    (every public V0 run here used multi-step, as vLLM 0.6's throughput guidance did), and the
    source says that vLLM's own default is single-step; a V0 release before 0.5.5 has no
    multi-step and is priced single-step. `log_requests`: whether the API server
    logs each request (None: its default, on for V0's `serve`, which is where the term is
    priced; LLM.generate and run-batch do not log them)."""
    from tuner.core.engines import FITTED_SCHEDULER_STEPS as FITTED
    from tuner.core.engines import MULTI_STEP_SINCE, check_scheduler_steps, dotted, generation_of

    release = generation_of(engine_version)
    steps = check_scheduler_steps(release, num_scheduler_steps)
    key = release.generation.key
    if key == "v0":
        single = steps == 1 or not release.multi_step
        p = PROFILES["vllm-v0" if single else "vllm-v0-multistep"]
        notes = []
        if not release.multi_step:
            notes.append(f"vLLM {release.version} has no multi-step scheduling (from "
                         f"{dotted(MULTI_STEP_SINCE)}): single-step")
        elif steps is None:
            notes.append(f"--num-scheduler-steps not given: priced as the multi-step ({FITTED}) "
                         "runs it was fitted on, and exported so; vLLM's own default is 1 "
                         "(pass --num-scheduler-steps 1 for the single-step estimate)")
        elif steps not in (1, FITTED):
            notes.append(f"fitted at {FITTED} scheduler steps, used for {steps}")
        if entry_point != "serve":
            notes.append(f"fitted under the API server, used for {entry_point}, which does not "
                         "stream (likely an overestimate)")
        logged = (logs_requests_by_default(engine_version, entry_point) if log_requests is None
                  else log_requests)
        if logged and not p.per_logged_request_s:
            notes.append("every request logged, as the API server does unless started with "
                         "--disable-log-requests; the fit prices no cost per logged request")
        elif logged:
            notes.append("every request logged, as the API server does unless started with "
                         "--disable-log-requests")
        else:
            p = replace(p, per_logged_request_s=0.0)
            notes.append("requests not logged (--disable-log-requests)" if entry_point == "serve"
                         else "requests priced as not logged (whether V0's run-batch pays the "
                         "API server's log cost is not measured)" if entry_point == "run-batch"
                         else "requests not logged (LLM.generate does not log them)")
        return replace(p, source=p.source + "; " + "; ".join(notes))
    if key == "v1-sync":
        return PROFILES["vllm-v1-sync"]
    return PROFILES["vllm-v1-async" if entry_point == "serve" else DEFAULT_PROFILE]
