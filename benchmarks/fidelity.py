"""The public fidelity suite: re-simulate every public end-to-end vLLM run we can cite.

    python benchmarks/fidelity.py [--data ../shared/fidelity] [--fit] [--json]

Runs (read in place from --data, default ../shared/fidelity beside the repository; the data is
not copied into the repository):
  llmservingsim/*  four real vLLM 0.19.0 runs from github.com/casys-kaist/LLMServingSim
                   (commit 5daddb21, bench/examples, MIT): per-request lengths and arrival
                   times, KV block counts (RTX 4090 run), a 1-second timeline of running
                   requests. Replayed with their arrivals. Three dense models and one mixture
                   of experts (Qwen3-30B-A3B-Instruct-2507, TP1 DP2 with expert parallelism:
                   predictors.moe).
  lambda-a100/*    eleven real vLLM 0.6.0 runs on A100-80GB-SXM from LambdaLabsML/vllm-benchmark
                   (OpenAI API server, streaming, --num-scheduler-steps 10, every request at
                   t = 0; per-request lengths). Llama-3-8B/70B, Mistral-7B, Mistral-Nemo-12B,
                   TP 1-8, 160-1,280 requests. Simulated as V0 (prefill-first batches, chunked
                   prefill off) with the engine profile `vllm-v0-multistep`. The source's runs
                   on other GPUs are kept out of the project (its README): never read here.
For each: predicted vs measured makespan (first arrival -> last token), KV capacity vs vLLM's
measured block count where the run has it, the running-requests curve (mean |difference|
per second), and the decode speed: the median gap between streamed chunks where the run
reports it (lambda-a100's median ITL, 10 tokens a chunk) and the per-request mean gap between
tokens where it logs first and last token times (LLMServingSim). Per GPU: median and worst
|makespan error|.

Cost model: measured AIConfigurator kernel tables (or transferred ones for GPUs without tables,
e.g. the RTX 4090 from the L40S) plus the engine-overhead profile `vllm-v1-async`
(predictors/engine_overhead.py). --fit refits that profile's one free parameter (the exposed,
non-overlapped time per step) on the dense runs and reports the leave-one-out error: each run
predicted by the profile fitted on the others (the MoE run is never in the fit: it is always
predicted by the profile fitted on the dense runs); --fit --write-summary stores the per-GPU
leave-one-out errors that the measured cost model's provenance cites.

--fit also fits the V0 profile's host terms on the A100 runs and the two published vLLM 0.6.0
figures below (v0_fit_runs; host work between GPU steps, so predicted makespan = GPU-only
schedule + the terms x their step features, linear): every set of terms (per step, per
running sequence, per sampled token, per new request, per logged request, per prefill chunk,
per extra TP rank, and the GPU-time excess over the kernel tables, whose step feature is the
GPU time itself) is fitted by least squares on predicted / measured makespan and, on the
A100 runs, median ITL (the decode step: a per-request term and a per-step term can give the
same makespan, not the same ITL), sets with a negative term are dropped as unphysical, and the
set with the lowest leave-one-out median error (makespan + ITL) is kept, the fewest terms
within PARSIMONY_PP of it; the table of sets is printed so the choice can be checked. The A100 runs' API
server logged every request (LambdaLabs' benchmark.py starts it without
--disable-log-requests); the published figures' server did not: they tell a request-log
cost apart from the rest of a request's intake, where a set of terms has one.

vLLM's own throughput figures in vllm-project/vllm#12093 (VLLM_PR12093_RUNS: Llama-3.1-8B,
1,000 requests of 2,048 + 128 tokens, LLM.generate, FlashAttention 2 and 3 under V0
single-step, V0 multi-step 4 and V1; an H100 assumed, the PR names no GPU) are a check,
fitted on nothing: predicted vs published req/s, the FA2 -> FA3 change end to end (the kernel
difference an older vLLM on Hopper has from the tables), and what the single-step vs
multi-step pair says a V0 scheduler call costs.

Published vLLM V1 offline figures (VLLM_V1_PUBLISHED_RUNS: `vllm bench throughput`, random
dataset, every request of the stated lengths; GPU, model, dtype, TP, prompt count and version
stated) are a check of the V1 host overhead, fitted on nothing: each is simulated with the
settings its command states, the release's LLM-class defaults for the rest and the engine
profile the release is priced with (vllm-v1-offline from 0.14 on); predicted vs published
req/s (signed), the median, the worst and how many are too fast, with vllm#12093's V1 pair, and
what the gap would be as host time per step, per request and per running sequence a step.

The same source's `vllm bench latency` figures (VLLM_V1_PUBLISHED_LATENCY_RUNS: one
llm.generate call of batch 1, 8 or 32 prompts of the stated lengths on a warm engine, mean
seconds per call) are a check of the same kind at small batches, where the per-step host cost
and the weight read dominate decode: each is simulated as one batch of its requests at t = 0,
no start-up, with the command's settings and the release's LLM-class defaults; predicted vs
published seconds (signed as the req/s: + = too fast) and the same gap arithmetic.

A second, independent H100 source (VLLM25915_RUNS: vllm-project/vllm#25915, `vllm bench
throughput --model Qwen/Qwen3-8B --input-len 1024 --output-len 2048`, BF16, on the
vllm/vllm-openai v0.8.5 and v0.10.2 images; the bench's defaults for the rest: 1,000 prompts,
random dataset) is rebuilt the same way, each prompt of the mean length the figure's own input /
output tok/s gives, priced with the release's profile (vllm-v1-sync), fitted on nothing, and
printed beside the first source's H100 figures; published_per_gpu keeps it apart from the
headline figures of the GPU's main profile (other_engines).

Published figures have no per-request lengths. SGLang's benchmark of vLLM 0.6.0 (offline,
5,000 ShareGPT prompts; sgl-project/sglang benchmark/benchmark_vllm_060/README.md) is rebuilt
from its stated length distribution (published_workload: ShareGPT lengths resampled from the
lambda-a100 Llama-3-8B run, outputs rescaled to the published output tok/s / req/s) and
simulated with the settings its commands state; predicted vs published req/s and output tok/s.
They are in the V0 fit (above), so --fit prints each one's leave-one-out error beside them.
MLPerf v5.1's vLLM figure is listed with the reason it is not re-simulated.

SGLang: the same README's SGLang v0.3.0 rows (PUBLISHED_SGLANG_RUNS, the same 5,000 requests
rebuilt the same way) are simulated as SGLang (engine="sglang": tuner.sim.sglang's scheduler,
SGLang's memory plan, AIConfigurator's SGLang kernel tables, the engine profile of the release,
sglang_profile_for("0.3.0") = sglang-v0.3) with the settings its commands state. That profile's
host term is fitted on these two figures (so the shipped rows are in-sample); --fit refits it
(fit_sglang: each single host term, leave-one-out = each figure predicted by the term fitted on
the other) and prints the table; --write-summary stores the leave-one-out errors apart
(sglang_per_gpu) for the SGLang cost model's provenance.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from tuner.core.catalog import (  # noqa: E402
    ModelSpec,
    load_gpus,
    load_models,
    model_from_hf_config,  # noqa: E402
)
from tuner.core.config import ServingConfig  # noqa: E402
from tuner.core.workload import Workload  # noqa: E402
from tuner.predictors.aic import table_cost_model  # noqa: E402
from tuner.predictors.engine_overhead import PROFILES, EngineProfile  # noqa: E402
from tuner.sim.simulator import simulate  # noqa: E402

DEFAULT_DATA = REPO.parent / "shared" / "fidelity"

# Hugging Face model -> shape. Llama-3.1-8B has Llama-3-8B's shapes (catalog); Qwen3-32B from
# its config.json (Qwen/Qwen3-32B: 64 layers, hidden 5120, 64 heads / 8 KV heads of 128,
# intermediate 25600, vocab 151936, untied embeddings).
QWEN3_32B = ModelSpec(name="qwen3-32b", num_layers=64, hidden_size=5120, num_heads=64,
                      num_kv_heads=8, head_dim=128, intermediate_size=25600, vocab_size=151936,
                      max_position=40960, hf_id="Qwen/Qwen3-32B", source="Qwen/Qwen3-32B config.json")


def model_spec(hf_id: str) -> ModelSpec | None:
    if hf_id == "meta-llama/Llama-3.1-8B":
        m = load_models()["llama-3-8b"]
        return replace(m, name="llama-3.1-8b", hf_id=hf_id, max_position=131072)
    if hf_id == "Qwen/Qwen3-32B":
        return QWEN3_32B
    # the catalog's entry (Qwen3-30B-A3B-Instruct-2507: from its config.json, 128 experts, top-8)
    return next((m for m in load_models().values() if m.hf_id == hf_id), None)


@dataclass
class Run:
    name: str
    source: str
    gpu: str
    model_id: str
    config: ServingConfig
    workload: Workload
    measured_makespan_s: float
    measured_kv_blocks: int | None
    timeline: dict | None  # t, running (1-second ticks)
    moe: bool
    engine_version: str = "0.19.0"
    suite: str = "llmservingsim"
    model: ModelSpec | None = None  # where the run ships its own config.json
    engine: EngineProfile | None = None  # the profile of its engine, where not the suite's
    # the engine simulated: "vllm", or "sglang" with its settings (tuner.core.sglang)
    simulated_engine: str = "vllm"
    # the API server logged each request (vLLM before 0.10.1 without --disable-log-requests):
    # EngineProfile.per_logged_request_s applies
    log_requests: bool = False
    sglang: object | None = None  # SGLangSettings of an SGLang run
    # the client's median gap between a request's streamed chunks (benchmark_serving's
    # median_itl_ms), where the run reports it; the engine streamed `scheduler_steps` tokens a
    # chunk (V0 multi-step) or one
    measured_median_itl_s: float | None = None
    # V0 --num-scheduler-steps (1: single-step, V1, SGLang): simulated as decode runs of that
    # many steps (tuner.sim.scheduler.multi_step_outputs)
    scheduler_steps: int = 1
    # sum of (last token - first token) / sum of (output tokens - 1) over the run's requests,
    # where it logs both times per request (LLMServingSim's requests.jsonl)
    measured_mean_itl_s: float | None = None


#: catalog GPU of a run-index `gpu` cell (LambdaLabsML names GPUs like "A100-80G", "H100";
#: LLMServingSim's folders like "RTXPRO6000"): the catalog's names and aliases, as --gpu reads
#: them (tuner.core.catalog.find_gpu)
def catalog_gpu_name(cell: str, gpus: dict) -> str | None:
    from tuner.core.catalog import find_gpu

    hit = find_gpu(cell, gpus)
    return hit.name if hit is not None else None


def index_model(row: dict, base: Path, catalog: dict) -> ModelSpec | None:
    """The model of a run-index row: a catalog name, a config.json beside the index, or the
    catalog entry whose Hugging Face id is the row's (an FP8 checkpoint's base model)."""
    m = row.get("model", "")
    if m in catalog:
        return catalog[m]
    if m.endswith(".json") and (base / m).is_file():
        return model_from_hf_config(base / m, hf_id=row.get("hf_model", ""))
    from tuner.core.catalog import catalog_base_model

    # an FP8 or -Instruct checkpoint, or a fine-tune named after its base (Hermes-3-Llama-3.1-
    # 405B): the catalog entry it is named after, as `tuner` prices such a repo offline
    name = catalog_base_model(row.get("hf_model") or "", catalog)
    return catalog[name] if name else None


def _logs_requests(row: dict, version: str) -> bool:
    """Whether the run's API server logged each request: its `log_requests` column, else the
    server's default for the release (lambda-a100's benchmark.py starts `python3 -m
    vllm.entrypoints.openai.api_server` without --disable-log-requests)."""
    from tuner.predictors.engine_overhead import logs_requests_by_default

    cell = (row.get("log_requests") or "").strip().lower()
    if cell:
        return cell in ("1", "true", "yes", "on")
    return logs_requests_by_default(version, "serve")


def _scheduler_steps(row: dict) -> int | None:
    """The run's --num-scheduler-steps: its column, else its notes; None when neither says."""
    import re

    if row.get("num_scheduler_steps"):
        return int(row["num_scheduler_steps"])
    hit = re.search(r"num_scheduler_steps\s*=\s*(\d+)", row.get("notes", ""))
    return int(hit.group(1)) if hit else None


def load_index_runs(root: Path, folder: str, gpus: dict | None = None) -> list[Run]:
    """Runs of a folder in lambda-a100's form (index.csv + one lengths CSV each), simulated with
    the engine profile of their vLLM version, API server and scheduler steps. The folder's
    README says where they come from."""
    import csv

    from tuner.predictors.engine_overhead import profile_for

    base = root / folder
    if not (base / "index.csv").is_file():
        return []
    catalog, gpus = load_models(), gpus or load_gpus()
    runs = []
    with (base / "index.csv").open(newline="") as fh:
        for row in csv.DictReader(fh):
            a = np.genfromtxt(base / row["file"], delimiter=",", names=True, dtype=np.int64)
            wl = Workload(prompt_tokens=np.atleast_1d(a["num_prefill_tokens"]),
                          output_tokens=np.atleast_1d(a["num_decode_tokens"]),
                          source=str(base / row["file"]), tokenizer="measured (vLLM)",
                          output_source="measured (vLLM)")
            spec = index_model(row, base, catalog)
            gpu = catalog_gpu_name(row["gpu"], gpus) or row["gpu"]
            fp8 = "fp8" in (row.get("hf_model", "") + row.get("model", "")).lower()
            version = row.get("vllm_version", "").split()[0] or "0.6.0"
            steps = _scheduler_steps(row)
            logs = _logs_requests(row, version)
            cfg = ServingConfig(gpu=gpu, tp=int(row["tp"]), scheduler=row["scheduler"],
                                chunk_size=int(row["max_num_batched_tokens"]),
                                max_running=int(row["max_num_seqs"]),
                                gpu_memory_utilization=float(row["gpu_memory_utilization"]),
                                weight_bits=8 if fp8 else 16)
            itl_ms = (row.get("measured_median_itl_ms") or "").strip()
            runs.append(Run(name=row["file"].removesuffix(".csv"),
                            source=f"{folder}: {row.get('source_path', row['file'])}, vLLM "
                                   f"{row.get('vllm_version', '?')}",
                            gpu=gpu, model_id=row.get("hf_model") or row.get("model", ""),
                            config=cfg, workload=wl,
                            measured_makespan_s=float(row["measured_duration_s"]),
                            measured_kv_blocks=None, timeline=None,
                            moe=bool(spec is not None and spec.is_moe),
                            engine_version=version, suite=folder, model=spec,
                            engine=profile_for(version, "serve", steps, logs),
                            log_requests=logs,
                            measured_median_itl_s=float(itl_ms) / 1e3 if itl_ms else None,
                            scheduler_steps=steps or 1))
    return runs


def load_lambda_a100(root: Path) -> list[Run]:
    """The A100 runs of ../shared/fidelity/lambda-a100 (index.csv + one lengths CSV each)."""
    return load_index_runs(root, "lambda-a100")


def load_all(root: Path, gpus: dict | None = None) -> list[Run]:
    """Every public run under `root`: LLMServingSim's, and every folder in the run-index form
    (lambda-a100, or another source's runs laid out the same way)."""
    runs = load_llmservingsim(root) if (root / "llmservingsim").is_dir() else []
    for d in sorted(p for p in root.iterdir() if p.is_dir()):
        if d.name != "llmservingsim":
            runs += load_index_runs(root, d.name, gpus)
    return runs


def load_llmservingsim(root: Path) -> list[Run]:
    runs, gpus = [], load_gpus()
    base = root / "llmservingsim"
    for d in sorted(p for p in base.iterdir() if p.is_dir()):
        meta = json.loads((d / "meta.json").read_text())
        kw = meta["engine_kwargs"]
        reqs = [json.loads(x) for x in (d / "requests.jsonl").read_text().splitlines() if x.strip()]
        q = np.array([r["queued_ts"] for r in reqs])
        last = np.array([r["last_token_ts"] for r in reqs])
        first = np.array([r.get("first_token_ts", np.nan) for r in reqs], dtype=np.float64)
        gaps = np.array([r["output_toks"] for r in reqs], dtype=np.float64) - 1.0
        ok = np.isfinite(first) & (gaps > 0)
        mean_itl = float((last - first)[ok].sum() / gaps[ok].sum()) if ok.any() else None
        # arrivals on the engine's clock: when each request was queued, from the first one
        arrival = q - q.min()
        wl = Workload(prompt_tokens=np.array([r["input_toks"] for r in reqs], dtype=np.int64),
                      output_tokens=np.array([r["output_toks"] for r in reqs], dtype=np.int64),
                      source=str(d / "requests.jsonl"), tokenizer="measured (vLLM)",
                      output_source="measured (vLLM)", arrival_s=arrival)
        kv = meta.get("kv_cache") or {}
        # the folder's GPU prefix ("RTXPRO6000_...") as --gpu reads it
        cfg = ServingConfig(gpu=catalog_gpu_name(d.name.split("_")[0], gpus),
                            tp=int(kw["tensor_parallel_size"]),
                            dp=int(kw["data_parallel_size"]), scheduler="vllm",
                            chunk_size=int(kw["max_num_batched_tokens"]),
                            max_running=int(kw["max_num_seqs"]),
                            gpu_memory_utilization=float(kv.get("gpu_memory_utilization", 0.9)),
                            block_size=int(kv.get("block_size", 16)),
                            expert_parallel=bool(kw.get("enable_expert_parallel", False)))
        ts = None
        tsf = d / "timeseries.csv"
        if tsf.is_file():
            a = np.genfromtxt(tsf, delimiter=",", names=True)
            ts = {"t": a["t"], "running": a["running"]}
        runs.append(Run(name=d.name, source=f"LLMServingSim bench/examples ({d.name}), vLLM "
                        f"{meta.get('vllm_version')}", gpu=cfg.gpu, model_id=meta["model"],
                        config=cfg, workload=wl, measured_makespan_s=float(last.max() - q.min()),
                        measured_kv_blocks=kv.get("num_gpu_blocks"), timeline=ts,
                        moe="A3B" in meta["model"] or bool(kw.get("enable_expert_parallel")),
                        measured_mean_itl_s=mean_itl))
    return runs


#: what the suite says of start-up (issue #24 item 6: reported apart where a run measures it)
STARTUP_NOTE = ("no run here measures the engine's start-up: LLMServingSim's are timed from the "
                "first request queued, LambdaLabs' from the first request sent, both with the "
                "engine up; predictions are compared without start-up (simulate(startup_s=0)), "
                "and tuner's start-up model (tuner/core/startup.py) is not checked by them")

#: SGLang's benchmark of vLLM 0.6.0 (sgl-project/sglang benchmark/benchmark_vllm_060/README.md,
#: "Offline benchmark results"): the vLLM server started as its "Offline benchmarks" commands
#: state, driven by `python3 -m sglang.bench_serving --backend vllm --dataset-name sharegpt
#: --num-prompts 5000` (no --request-rate: inf, every request at t = 0; bench_serving's vllm
#: backend posts to the OpenAI completions endpoint, streaming, with ignore_eos true unless
#: --disable-ignore-eos, so each output is its ShareGPT completion's length; python/sglang/
#: bench_serving.py, async_request_openai_completions). The README states no input tok/s.
SGLANG_060 = "sgl-project/sglang benchmark/benchmark_vllm_060/README.md (offline benchmark results)"
SGLANG_SERVER = ("python -m vllm.entrypoints.openai.api_server --model {hf} --disable-log-requests "
                 "--num-scheduler-steps 10{tp} --max_model_len 4096")
SGLANG_CLIENT = "python3 -m sglang.bench_serving --backend vllm --dataset-name sharegpt --num-prompts 5000"
PUBLISHED_RUNS = [
    {"name": "sglang-vllm060_llama-3.1-8b_a100_tp1_n5000",
     "what": "SGLang benchmark of vLLM 0.6.0, Llama-3.1-8B-Instruct, 1x A100-80G, 5,000 ShareGPT "
             "prompts, offline: 21.27 req/s, 4,132.37 output tok/s",
     "hf_model": "meta-llama/Llama-3.1-8B-Instruct", "model": "llama-3.1-8b", "gpu": "A100-80G",
     "tp": 1, "num_prompts": 5000, "req_s": 21.27, "output_tok_s": 4132.37},
    {"name": "sglang-vllm060_llama-3.1-70b_h100_tp4_n5000",
     "what": "SGLang benchmark of vLLM 0.6.0, Llama-3.1-70B-Instruct, 4x H100 80G TP4, 5,000 "
             "ShareGPT prompts, offline: 19.04 req/s, 3,700.64 output tok/s",
     "hf_model": "meta-llama/Llama-3.1-70B-Instruct", "model": "llama-3.1-70b", "gpu": "H100",
     "tp": 4, "num_prompts": 5000, "req_s": 19.04, "output_tok_s": 3700.64},
]
#: the engine settings both commands state (vLLM 0.6.0's defaults for the rest: max_num_seqs
#: 256, chunked prefill off under 32K context, token budget max(max_model_len, 2048);
#: gpu_memory_utilization 0.9, which the README's notes say vLLM kept at TP 1 and TP 4)
SGLANG_ENGINE = {"engine_version": "0.6.0", "entry_point": "serve", "num_scheduler_steps": 10,
                 "max_model_len": 4096}
#: the fixed seed of the resample (both figures: the same 5,000 requests, as bench_serving's
#: seeded ShareGPT sample with the Llama-3.1 tokenizer is the same for both models)
PUBLISHED_SEED = 0
#: the rebuild's assumption, stated with every row and in RESULTS.md
PUBLISHED_ASSUMPTION = (
    "workload rebuilt, not published: {n:,} (prompt, output) pairs resampled with replacement "
    "(numpy default_rng({seed})) from the {pool:,} distinct ShareGPT requests of the lambda-a100 "
    "Llama-3-8B runs (vLLM's ShareGPT sampler, Llama-3 tokenizer; a run that is a prefix of "
    "a larger one holds the same requests and is counted once); those outputs stop at EOS "
    "while bench_serving ignores EOS, so the outputs are rescaled (largest-remainder rounding) "
    "to mean {mean:.2f} tokens = the published output tok/s / req/s: an assumption that "
    "ShareGPT's completion lengths have the shape of the EOS-stopped ones")

PUBLISHED = [
    {"what": "MLPerf Inference v5.1 open, vLLM 0.9.2, Llama-3.1-70B FP8 offline, 8x H100 "
             "TP2 DP4: 22,820 tok/s; 8x H200: 30,893 tok/s", "source": "MLPerf Inference v5.1 results",
     "status": "not re-simulated: the OpenOrca sample's lengths are not in ../shared/fidelity"},
]


#: vLLM's own throughput figures in the description of vllm-project/vllm#12093 ("[Kernel] Flash
#: Attention 3 Support", January 2025, first released in 0.7.0): benchmarks/benchmark_throughput.py
#: (LLM.generate, every request at t = 0, timed around generate(): no start-up) on
#: Llama-3.1-8B-Instruct with --input-len 2048 --output-len 128 (ignore_eos) and its default
#: 1,000 prompts, under FlashAttention 2 and 3, V0 single-step, V0 --num-scheduler-steps 4 and
#: V1 (VLLM_USE_V1=1, then alpha). The printed total tok/s / req/s is 2,176 = 2,048 + 128: every
#: request has those lengths. The PR does not name its GPU: an H100 is assumed (FA3 then ran only
#: on Hopper, sm 9.0); on an H200 the figures would be still further from these predictions.
VLLM_PR12093 = "vllm-project/vllm#12093 (its description: benchmark_throughput.py figures)"
VLLM_PR12093_CMD = ("env VLLM_FLASH_ATTN_VERSION={fa} VLLM_USE_V1={v1} python "
                    "benchmarks/benchmark_throughput.py --model meta-llama/Llama-3.1-8B-Instruct "
                    "--input-len 2048 --output-len 128 --max-num-batched-tokens 16384{steps}")
VLLM_PR12093_RUNS = [
    {"name": "vllm12093_v0_fa2", "v1": 0, "fa": 2, "steps": 1, "req_s": 12.40},
    {"name": "vllm12093_v0_fa3", "v1": 0, "fa": 3, "steps": 1, "req_s": 12.74},
    {"name": "vllm12093_v0_ms4_fa2", "v1": 0, "fa": 2, "steps": 4, "req_s": 13.20},
    {"name": "vllm12093_v0_ms4_fa3", "v1": 0, "fa": 3, "steps": 4, "req_s": 13.34},
    {"name": "vllm12093_v1_fa2", "v1": 1, "fa": 2, "steps": None, "req_s": 12.81},
    {"name": "vllm12093_v1_fa3", "v1": 1, "fa": 3, "steps": None, "req_s": 14.24},
]
#: how each is simulated: V0 as the release before the PR (0.6.6, chunked prefill on: V0 turns
#: it on for a context over 32K, and Llama-3.1's is 131,072); V1 alpha (no asynchronous
#: scheduling) as tuner's V1-sync generation (0.8); max_num_seqs 256 (EngineArgs' default then)
VLLM_PR12093_ENGINE = {"v0": "0.6.6", "v1": "0.8.0", "gpu": "H100", "model": "llama-3.1-8b",
                       "num_prompts": 1000, "prompt_tokens": 2048, "output_tokens": 128,
                       "max_num_batched_tokens": 16384, "max_num_seqs": 256,
                       "max_model_len": 131072}


def vllm_pr12093_run(fig: dict, gpus: dict) -> Run:
    """One VLLM_PR12093_RUNS figure as a Run (VLLM_PR12093_ENGINE says how it is simulated)."""
    from tuner.core.engine_defaults import vllm_defaults
    from tuner.predictors.engine_overhead import profile_for

    e = VLLM_PR12093_ENGINE
    version = e["v1"] if fig["v1"] else e["v0"]
    gpu, model = gpus[e["gpu"]], load_models()[e["model"]]
    d = vllm_defaults(gpu.name, gpu.memory_gib, "llm", version, max_model_len=e["max_model_len"])
    cfg = ServingConfig(gpu=gpu.name, tp=1, **(d.knobs() | {
        "chunk_size": e["max_num_batched_tokens"], "max_running": e["max_num_seqs"]}))
    n = e["num_prompts"]
    wl = Workload(prompt_tokens=np.full(n, e["prompt_tokens"], dtype=np.int64),
                  output_tokens=np.full(n, e["output_tokens"], dtype=np.int64),
                  source=f"{n:,} requests of {e['prompt_tokens']:,} prompt + "
                         f"{e['output_tokens']} output tokens (benchmark_throughput.py's fixed "
                         "lengths, EOS ignored)",
                  tokenizer="stated lengths", output_source="stated lengths (ignore_eos)")
    return Run(name=fig["name"], source=VLLM_PR12093, gpu=gpu.name,
               model_id="meta-llama/Llama-3.1-8B-Instruct", config=cfg, workload=wl,
               measured_makespan_s=n / fig["req_s"], measured_kv_blocks=None, timeline=None,
               moe=False, engine_version=version, suite="vllm-pr12093", model=model,
               engine=profile_for(version, "llm", fig["steps"] if not fig["v1"] else None),
               scheduler_steps=1 if fig["v1"] else fig["steps"])


def evaluate_vllm_pr12093(gpus: dict, v0_engine: EngineProfile | None = None) -> list[dict]:
    """Predicted vs published req/s of every VLLM_PR12093_RUNS figure: a check, fitted on
    nothing (signed error %: predicted / published - 1). tuner's tables measured FA3 on the
    H100, so the FA2 and FA3 figures of one engine get one prediction; their published ratio
    is the end-to-end size of that kernel difference. `v0_engine`: the V0 multi-step profile
    (default the shipped one; --fit: the refitted one), single-step rows from it
    (engine_overhead.v0_single_step)."""
    from tuner.predictors.engine_overhead import v0_single_step

    rows = []
    for fig in VLLM_PR12093_RUNS:
        steps = f" --num-scheduler-steps {fig['steps']}" if fig["steps"] not in (None, 1) else ""
        row = {"run": fig["name"], "source": VLLM_PR12093, "gpu": VLLM_PR12093_ENGINE["gpu"],
               "command": VLLM_PR12093_CMD.format(fa=fig["fa"], v1=fig["v1"], steps=steps),
               "flash_attention": fig["fa"], "published_req_s": fig["req_s"],
               "scheduler_steps": fig["steps"]}
        run = vllm_pr12093_run(fig, gpus)
        if v0_engine is not None and not fig["v1"]:
            run = replace(run, engine=v0_engine if fig["steps"] != 1 else v0_single_step(v0_engine))
        res, cm = simulate_run(run, as_run_logs(run.engine, run), gpus)
        req_s = len(run.workload) / res.makespan_s
        row.update(status="ok", engine=run.engine.name, engine_version=run.engine_version,
                   config=(f"vLLM {run.engine_version} as simulated, LLM.generate, scheduler "
                           f"{run.config.scheduler}, max_num_seqs {run.config.max_running}, "
                           f"max_num_batched_tokens {run.config.chunk_size}, "
                           f"gpu_memory_utilization {run.config.gpu_memory_utilization:g}, "
                           "every request at t = 0, no start-up"),
                   workload=run.workload.source, predicted_makespan_s=res.makespan_s,
                   published_makespan_s=run.measured_makespan_s, predicted_req_s=req_s,
                   req_s_error_pct=100.0 * (req_s / fig["req_s"] - 1.0),
                   makespan_error_pct=100.0 * (res.makespan_s / run.measured_makespan_s - 1.0),
                   preemptions=res.preemptions, iterations=res.iterations,
                   provenance=cm.describe())
        rows.append(row)
    return rows


def single_step_gap_s(rows: list[dict]) -> dict[int, float]:
    """What vLLM's single-step vs --num-scheduler-steps 4 figures (the same job) say a V0
    scheduler call costs: their makespan gap over the scheduler calls multi-step saves (3 of
    every 4 of the job's simulated steps), per FlashAttention version."""
    out = {}
    for fa in (2, 3):
        one = [r for r in rows if r["flash_attention"] == fa and r["scheduler_steps"] == 1]
        four = [r for r in rows if r["flash_attention"] == fa and r["scheduler_steps"] == 4]
        if one and four:
            gap = one[0]["published_makespan_s"] - four[0]["published_makespan_s"]
            out[fa] = gap / (0.75 * four[0]["iterations"])
    return out


def print_vllm_pr12093(rows: list[dict]) -> None:
    print("\nvLLM's own throughput figures (" + VLLM_PR12093 + "; Llama-3.1-8B, 1,000 x (2,048 "
          "prompt + 128 output) tokens, LLM.generate; H100 assumed, the PR names no GPU; a "
          "check, fitted on nothing):")
    print(f"  {'run':<24} {'FA':>3} {'req/s pub':>9} {'pred':>7} {'error':>7}  {'makespan pub':>12} "
          f"{'pred':>7}  engine")
    for p in rows:
        print(f"  {p['run']:<24} {p['flash_attention']:>3} {p['published_req_s']:9.2f} "
              f"{p['predicted_req_s']:7.2f} {p['req_s_error_pct']:+6.1f}%  "
              f"{p['published_makespan_s']:11.1f}s {p['predicted_makespan_s']:6.1f}s  "
              f"{p['engine']} (vLLM {p['engine_version']}), {p['preemptions']} preemptions")
    by = {p["run"]: p for p in rows}
    for a, b, what in (("vllm12093_v0_fa2", "vllm12093_v0_fa3", "V0 single-step"),
                       ("vllm12093_v0_ms4_fa2", "vllm12093_v0_ms4_fa3", "V0 multi-step 4"),
                       ("vllm12093_v1_fa2", "vllm12093_v1_fa3", "V1")):
        if a in by and b in by:
            print(f"  FlashAttention 2 -> 3, {what}: {by[a]['published_req_s']:.2f} -> "
                  f"{by[b]['published_req_s']:.2f} req/s published "
                  f"({100 * (by[b]['published_req_s'] / by[a]['published_req_s'] - 1):+.1f} %); "
                  "tuner prices both with the FA3 it measured")
    gaps = single_step_gap_s(rows)
    if gaps:
        from tuner.predictors.engine_overhead import V0_SINGLE_STEP_FIXED_S

        print("  V0 single-step vs --num-scheduler-steps 4, published: "
              + ", ".join(f"FA{fa} {1e3 * g:.1f} ms" for fa, g in gaps.items())
              + " a scheduler call (their makespan gap over 3 of every 4 of the job's "
              f"simulated steps); tuner's single-step estimate {1e3 * V0_SINGLE_STEP_FIXED_S:.0f}"
              " ms a step")
    if rows:
        print(f"  cost model: {rows[0]['provenance']}")
        for p in rows:
            print(f"  {p['run']}: {p['command']}; {p['config']}")


# ---- published vLLM V1 offline figures (vllm bench throughput, random dataset) ----------------
#: Third-party `vllm bench throughput` figures of a V1 release (async scheduling on by default,
#: tuner's v1-async generation, offline: the `vllm-v1-offline` profile), each with its GPU, model,
#: dtype, TP, lengths, prompt count and version stated. The random dataset with its default
#: --random-range-ratio 0 gives every prompt the stated input length, and the throughput
#: benchmark sets ignore_eos with max_tokens = the output length, so every request has exactly
#: the stated lengths. Kept out of every fit: a check of the V1 host overhead, fitted on nothing.
#: Searched for and left out (a setting not stated): vllm-project/vllm#10753 (V1 before 0.7,
#: GPU not named), the gpustack performance-lab pages and vllm-project/vllm#52884 (online
#: `vllm bench serve`, no --ignore-eos), vllm-project/vllm#34776 (FP8, MI300X).
FERRITE_H100 = ("\"H100 Hopper - perf handoff\" (ferrite vs Python vLLM, 2026-05-28), its "
                "`vllm bench throughput` table; stored public file id 66645773073 (repository "
                "not resolved by the index)")
FERRITE_H100_CMD = ("vllm bench throughput --model Qwen/Qwen2.5-7B-Instruct --dtype bfloat16 "
                    "--num-prompts 200 --random-input-len {inp} --random-output-len {out} "
                    "--dataset-name random --gpu-memory-utilization 0.85 "
                    "--no-enable-prefix-caching")
#: its settings ("Bench setup": 1x H100 80 GB HBM3 (SXM), Qwen/Qwen2.5-7B-Instruct bf16, vLLM
#: 0.21.1.dev0+gad7125a43 built from main, FlashAttention 3 by its start-up log; the table
#: heading: 200 prompts, random dataset, prefix caching off; the command under
#: "Reproducing": --gpu-memory-utilization 0.85, no --max-model-len, so the model's 32,768).
#: The published figure is total tokens/s (prompt + output): req/s = it / (input + output).
FERRITE_H100_SETTINGS = {"source": FERRITE_H100, "gpu": "H100", "tp": 1,
                         "hf_id": "Qwen/Qwen2.5-7B-Instruct", "catalog_model": "qwen2.5-7b",
                         "dtype": "bfloat16", "engine_version": "0.21.1",
                         "engine_version_stated": "0.21.1.dev0+gad7125a43",
                         "num_prompts": 200, "gpu_memory_utilization": 0.85,
                         "max_model_len": 32768, "prefix_caching": False}
VLLM_V1_PUBLISHED_RUNS = [
    FERRITE_H100_SETTINGS | {"name": f"ferrite-h100_qwen2.5-7b_in{i}_out{o}", "input_len": i,
                             "output_len": o, "total_tok_s": t,
                             "quote": f"row in={i} out={o}, Python tok/s column: {t}"}
    for i, o, t in ((1024, 128, 38740), (1024, 512, 27859), (2048, 128, 39738),
                    (2048, 512, 29238), (4096, 128, 39626), (4096, 512, 29994))
]
#: Qwen2.5-7B-Instruct: the catalog's Qwen2.5-7B shapes, its own context (config.json:
#: max_position_embeddings 32768; the base model's is 131,072)
QWEN25_7B_INSTRUCT_MAX_POSITION = 32768


def published_v1_model(fig: dict) -> ModelSpec:
    m = load_models()[fig["catalog_model"]]
    if fig["hf_id"] == "Qwen/Qwen2.5-7B-Instruct":
        return replace(m, name="qwen2.5-7b-instruct", hf_id=fig["hf_id"],
                       max_position=QWEN25_7B_INSTRUCT_MAX_POSITION)
    return m


def published_v1_req_s(fig: dict) -> float:
    """The figure's requests/s: its total tokens/s over each request's prompt + output."""
    if "req_s" in fig:
        return float(fig["req_s"])
    return fig["total_tok_s"] / (fig["input_len"] + fig["output_len"])


def _fixed_length_run(fig: dict, gpus: dict, model, n: int, source: str, measured_s: float,
                      suite: str) -> Run:
    """A published `vllm bench` figure as a Run: n requests of the figure's stated lengths at
    t = 0, the command's settings and the release's LLM-class defaults for the rest (vllm bench
    runs LLM.generate), priced with the release's profile (profile_for: vllm-v1-offline from
    0.14 on); `measured_s` is the published time it is checked against."""
    from tuner.core.engine_defaults import vllm_defaults
    from tuner.predictors.engine_overhead import profile_for

    gpu, version = gpus[fig["gpu"]], fig["engine_version"]
    d = vllm_defaults(gpu.name, gpu.memory_gib, "llm", version,
                      max_model_len=fig["max_model_len"], model=model)
    cfg = ServingConfig(gpu=gpu.name, tp=fig["tp"], **(d.knobs() | {
        "gpu_memory_utilization": fig["gpu_memory_utilization"]}))
    inp, out = fig["input_len"], fig["output_len"]
    wl = Workload(prompt_tokens=np.full(n, inp, dtype=np.int64),
                  output_tokens=np.full(n, out, dtype=np.int64), source=source,
                  tokenizer="stated lengths", output_source="stated lengths (ignore_eos)")
    return Run(name=fig["name"], source=fig["source"], gpu=gpu.name, model_id=fig["hf_id"],
               config=cfg, workload=wl, measured_makespan_s=measured_s,
               measured_kv_blocks=None, timeline=None, moe=False, engine_version=version,
               suite=suite, model=model, engine=profile_for(version, "llm"))


def vllm_v1_published_run(fig: dict, gpus: dict) -> Run:
    """One VLLM_V1_PUBLISHED_RUNS figure as a Run (_fixed_length_run): num_prompts requests,
    checked against num_prompts / the published req/s."""
    n, inp, out = fig["num_prompts"], fig["input_len"], fig["output_len"]
    return _fixed_length_run(
        fig, gpus, published_v1_model(fig), n,
        f"{n:,} requests of {inp:,} prompt + {out:,} output tokens (random dataset, range "
        "ratio 0; ignore_eos)", n / published_v1_req_s(fig), "vllm-v1-published")


def _published_row(fig: dict, run, gpus: dict, command: str):
    """(result, steps, the row fields every published-figure block shares): the run simulated
    with its steps, the figure's identity and the schedule's counts."""
    from tuner.sim.steps import DECODES

    res, cm = simulate_run(run, run.engine, gpus, return_steps=True)
    st = np.concatenate(res.steps)
    decoding = st[:, DECODES] > 0
    return res, st, {
        "run": fig["name"], "source": fig["source"], "quote": fig["quote"],
        "gpu": fig["gpu"], "model": fig["hf_id"], "tp": fig["tp"],
        "engine_version": fig["engine_version_stated"], "command": command,
        "engine": run.engine.name, "iterations": res.iterations,
        "preemptions": res.preemptions,
        "mean_decode_batch": float(st[decoding, DECODES].mean()) if decoding.any() else 0.0,
        "provenance": cm.describe()}


def _generate_config(fig: dict, run) -> str:
    """The simulated settings of a `vllm bench throughput` figure (LLM.generate)."""
    return (f"vLLM {fig['engine_version']} as simulated, LLM.generate, scheduler "
            f"{run.config.scheduler}, max_num_seqs {run.config.max_running}, "
            f"max_num_batched_tokens {run.config.chunk_size}, "
            f"gpu_memory_utilization {run.config.gpu_memory_utilization:g}, "
            "every request at t = 0, no start-up")


def evaluate_vllm_v1_published(gpus: dict) -> list[dict]:
    """Predicted vs published req/s of every VLLM_V1_PUBLISHED_RUNS figure: a check, fitted on
    nothing (signed error %: predicted / published - 1; + = too fast). Beside it, what the gap
    would be as host time: (published - predicted makespan) over the simulated steps, and per
    running request a step (arithmetic on the figure, not a fitted term)."""
    from tuner.sim.steps import RUNNING

    rows = []
    for fig in VLLM_V1_PUBLISHED_RUNS:
        run = vllm_v1_published_run(fig, gpus)
        res, st, row = _published_row(fig, run, gpus, FERRITE_H100_CMD.format(
            inp=fig["input_len"], out=fig["output_len"]))
        pub_req_s = published_v1_req_s(fig)
        req_s = len(run.workload) / res.makespan_s
        gap_s = run.measured_makespan_s - res.makespan_s
        seq_steps = float(st[:, RUNNING].sum())
        rows.append(row | {
            "input_len": fig["input_len"], "output_len": fig["output_len"],
            "num_prompts": fig["num_prompts"], "published_total_tok_s": fig.get("total_tok_s"),
            "published_req_s": pub_req_s, "predicted_req_s": req_s,
            "req_s_error_pct": 100.0 * (req_s / pub_req_s - 1.0),
            "published_makespan_s": run.measured_makespan_s,
            "predicted_makespan_s": res.makespan_s, "config": _generate_config(fig, run),
            "gap_per_step_ms": 1e3 * gap_s / max(res.iterations, 1),
            "gap_per_request_ms": 1e3 * gap_s / len(run.workload),
            "gap_per_seq_step_us": 1e6 * gap_s / max(seq_steps, 1.0)})
    return rows


def summarise_signed(errors: list[float]) -> dict:
    """Median and worst signed error of a set of figures, and how many are too fast (> 0)."""
    e = np.asarray(errors, dtype=float)
    if not len(e):
        return {"figures": 0}
    worst = float(e[np.argmax(np.abs(e))])
    return {"figures": int(len(e)), "median_pct": float(np.median(e)), "worst_pct": worst,
            "too_fast": int((e > 0).sum())}


def print_vllm_v1_published(rows: list[dict], pr12093: list[dict] | None = None) -> None:
    print("\nPublished vLLM V1 offline figures (vllm bench throughput, random dataset: every "
          "request has the stated lengths; engine profile as the release is priced; a check, "
          "fitted on nothing; error = predicted / published req/s - 1, + = too fast):")
    print(f"  {'run':<36} {'in':>5} {'out':>4} {'req/s pub':>9} {'pred':>7} {'error':>7}  "
          f"{'decode batch':>12} {'steps':>6}  {'gap/step':>8} {'gap/request':>11} "
          f"{'gap/seq-step':>12}")
    for p in rows:
        print(f"  {p['run']:<36} {p['input_len']:>5} {p['output_len']:>4} "
              f"{p['published_req_s']:9.2f} {p['predicted_req_s']:7.2f} "
              f"{p['req_s_error_pct']:+6.1f}%  {p['mean_decode_batch']:12.1f} "
              f"{p['iterations']:>6}  {p['gap_per_step_ms']:6.2f}ms "
              f"{p['gap_per_request_ms']:9.2f}ms {p['gap_per_seq_step_us']:9.1f} us")
    s = summarise_signed([p["req_s_error_pct"] for p in rows])
    if s["figures"]:
        print(f"  {s['figures']} figures: median error {s['median_pct']:+.1f} %, worst "
              f"{s['worst_pct']:+.1f} %, {s['too_fast']} of {s['figures']} too fast")
    v1_12093 = [p for p in (pr12093 or []) if p["run"].startswith("vllm12093_v1")]
    if v1_12093:
        s = summarise_signed([p["req_s_error_pct"] for p in rows + v1_12093])
        print(f"  with vllm#12093's {len(v1_12093)} V1 figures (vLLM 0.8 alpha, vllm-v1-sync): "
              f"{s['figures']} figures, median {s['median_pct']:+.1f} %, worst "
              f"{s['worst_pct']:+.1f} %, {s['too_fast']} too fast")
    print("  gap/step, gap/request, gap/seq-step: (published - predicted makespan) over the "
          "simulated steps, the requests and the steps' running requests: what a per-step, "
          "per-request or per-sequence host term would have to add (arithmetic on each figure, "
          "not fitted)")
    if rows:
        print(f"  cost model: {rows[0]['provenance']}")
    for p in rows:
        print(f"  {p['run']}: {p['command']} [{p['source']}: \"{p['quote']}\"; vLLM "
              f"{p['engine_version']}, {p['gpu']}, TP {p['tp']}]; {p['config']}; "
              f"{p['preemptions']} preemptions")


# ---- published vLLM V1 latency figures (vllm bench latency: one batch on a warm engine) -------
#: The same file's `vllm bench latency` table (Python column). vLLM 0.21's
#: vllm/benchmarks/latency.py (read in the 0.21.0 wheel, the nearest release to 0.21.1.dev0)
#: builds LLM.from_engine_args (UsageContext.LLM_CLASS: the LLM-class defaults, 16,384 batched
#: tokens / 1,024 seqs on an H100 80 GB) with prefix caching off by default, makes batch_size
#: dummy prompts of exactly input_len random token ids, and times each llm.generate call
#: (SamplingParams temperature 1.0, top_p 1.0, ignore_eos, max_tokens = output_len, detokenize
#: on) from the call to its return, after --num-iters-warmup untimed calls: a warm engine, no
#: start-up in the figure. The table heading's "Wall-clock seconds per iter" is the bench's
#: mean of --num-iters such calls. Kept out of every fit: fitted on nothing.
FERRITE_H100_LATENCY = FERRITE_H100.replace("`vllm bench throughput` table",
                                            "`vllm bench latency` table")
FERRITE_H100_LATENCY_CMD = ("vllm bench latency --model Qwen/Qwen2.5-7B-Instruct --dtype bfloat16 "
                            "--input-len {inp} --output-len {out} --batch-size {bs} "
                            "{max_model_len}--num-iters-warmup 2 --num-iters 5 "
                            "--gpu-memory-utilization 0.85 --no-enable-prefix-caching")
#: --max-model-len: "Reproducing" shows 2,300 for in=2048 out=128 (its command at batch 8; the
#: BS=1 row of that shape is taken to be the same command at batch 1). The other shapes' is not
#: stated (2,300 cannot hold in=4096 or 8192: the bench asserts max_model_len >= input + output):
#: assumed to be the bench's own default, EngineArgs' max_model_len None -> the model's 32,768.
#: Neither changes the simulated schedule: under LLM_CLASS with chunked prefill the release's
#: max_num_batched_tokens is min(16,384, max_num_seqs x max_model_len) = 16,384 for both, and
#: the KV pool is sized from memory, not from max_model_len.
FERRITE_H100_LATENCY_MAX_MODEL_LEN = 2300
FERRITE_H100_LATENCY_SETTINGS = (
    {k: v for k, v in FERRITE_H100_SETTINGS.items() if k != "num_prompts"}
    | {"source": FERRITE_H100_LATENCY, "num_iters": 5, "num_iters_warmup": 2})
VLLM_V1_PUBLISHED_LATENCY_RUNS = [
    FERRITE_H100_LATENCY_SETTINGS | {
        "name": f"ferrite-h100_qwen2.5-7b_latency_bs{b}_in{i}_out{o}", "batch_size": b,
        "input_len": i, "output_len": o, "latency_s": t,
        "max_model_len": (FERRITE_H100_LATENCY_MAX_MODEL_LEN if (i, o) == (2048, 128)
                          else QWEN25_7B_INSTRUCT_MAX_POSITION),
        "max_model_len_stated": (i, o) == (2048, 128),
        "quote": f"row BS={b} in={i} out={o}, Python column: {t}"}
    for b, i, o, t in ((1, 2048, 128, 0.805), (1, 4096, 128, 0.856), (1, 8192, 128, 0.966),
                       (8, 2048, 128, 1.158), (8, 4096, 128, 1.555), (8, 8192, 128, 2.465),
                       (32, 2048, 16, 1.526), (32, 4096, 16, 3.054), (32, 8192, 16, 6.354))
]


def vllm_v1_latency_run(fig: dict, gpus: dict) -> Run:
    """One VLLM_V1_PUBLISHED_LATENCY_RUNS figure as a Run: one timed llm.generate call of
    batch_size requests of the stated lengths, all at t = 0, on a warm engine (its makespan is
    the published seconds per iteration), with the command's settings and the release's
    LLM-class defaults for the rest, priced with the release's profile (vllm-v1-offline)."""
    n, inp, out = fig["batch_size"], fig["input_len"], fig["output_len"]
    model = replace(published_v1_model(fig), max_position=fig["max_model_len"])
    return _fixed_length_run(
        fig, gpus, model, n, f"one batch of {n} dummy prompts of {inp:,} token ids + {out:,} "
        "output tokens (vllm bench latency; ignore_eos)", float(fig["latency_s"]),
        "vllm-v1-published-latency")


def latency_command(fig: dict) -> str:
    mml = f"--max-model-len {fig['max_model_len']} " if fig["max_model_len_stated"] else ""
    return FERRITE_H100_LATENCY_CMD.format(inp=fig["input_len"], out=fig["output_len"],
                                           bs=fig["batch_size"], max_model_len=mml)


def evaluate_vllm_v1_published_latency(gpus: dict) -> list[dict]:
    """Predicted vs published seconds per iteration of every VLLM_V1_PUBLISHED_LATENCY_RUNS
    figure: a check, fitted on nothing. Signed error % in the throughput suite's convention,
    + = too fast: predicted / published iterations per second - 1 (= published / predicted
    seconds - 1); time_error_pct is the same on the seconds themselves (+ = too slow). Beside
    it the same gap arithmetic: (published - predicted seconds) over the simulated steps, the
    requests and the steps' running requests (arithmetic on the figure, not a fitted term)."""
    from tuner.sim.steps import RUNNING

    rows = []
    for fig in VLLM_V1_PUBLISHED_LATENCY_RUNS:
        run = vllm_v1_latency_run(fig, gpus)
        res, st, row = _published_row(fig, run, gpus, latency_command(fig))
        pub_s, pred_s = run.measured_makespan_s, res.makespan_s
        gap_s = pub_s - pred_s
        steps = max(res.iterations, 1)
        rows.append(row | {
            "batch_size": fig["batch_size"], "input_len": fig["input_len"],
            "output_len": fig["output_len"], "max_model_len": fig["max_model_len"],
            "max_model_len_stated": fig["max_model_len_stated"],
            "published_s": pub_s, "predicted_s": pred_s,
            "error_pct": 100.0 * (pub_s / pred_s - 1.0),
            "time_error_pct": 100.0 * (pred_s / pub_s - 1.0),
            "config": (f"vLLM {fig['engine_version']} as simulated, LLM.generate (one call), "
                       f"scheduler {run.config.scheduler}, max_num_seqs "
                       f"{run.config.max_running}, max_num_batched_tokens "
                       f"{run.config.chunk_size}, gpu_memory_utilization "
                       f"{run.config.gpu_memory_utilization:g}, max_model_len "
                       f"{fig['max_model_len']:,} ("
                       + ("stated" if fig["max_model_len_stated"] else
                          "not stated: the bench's default, the model's") +
                       "), every request at t = 0, warm engine, no start-up"),
            "published_per_step_ms": 1e3 * pub_s / steps,
            "predicted_per_step_ms": 1e3 * pred_s / steps,
            "gap_per_step_ms": 1e3 * gap_s / steps,
            "gap_per_request_ms": 1e3 * gap_s / len(run.workload),
            "gap_per_seq_step_us": 1e6 * gap_s / max(float(st[:, RUNNING].sum()), 1.0)})
    return rows


def print_vllm_v1_published_latency(rows: list[dict], throughput: list[dict] | None = None) -> None:
    print("\nPublished vLLM V1 latency figures (vllm bench latency: one llm.generate call of "
          "batch_size prompts of the stated lengths on a warm engine, mean seconds per "
          "iteration; engine profile as the release is priced; a check, fitted on nothing; "
          "error = predicted / published iterations per second - 1 = published / predicted "
          "seconds - 1, + = too fast, as the throughput suite's req/s):")
    print(f"  {'run':<50} {'BS':>3} {'in':>5} {'out':>4} {'s pub':>6} {'pred':>6} {'error':>7}  "
          f"{'decode batch':>12} {'steps':>5}  {'step pub':>8} {'pred':>7}  {'gap/step':>8} "
          f"{'gap/request':>11} {'gap/seq-step':>12}")
    for p in rows:
        print(f"  {p['run']:<50} {p['batch_size']:>3} {p['input_len']:>5} {p['output_len']:>4} "
              f"{p['published_s']:6.3f} {p['predicted_s']:6.3f} {p['error_pct']:+6.1f}%  "
              f"{p['mean_decode_batch']:12.1f} {p['iterations']:>5}  "
              f"{p['published_per_step_ms']:6.2f}ms {p['predicted_per_step_ms']:5.2f}ms  "
              f"{p['gap_per_step_ms']:6.2f}ms {p['gap_per_request_ms']:9.2f}ms "
              f"{p['gap_per_seq_step_us']:9.1f} us")
    s = summarise_signed([p["error_pct"] for p in rows])
    if s["figures"]:
        print(f"  {s['figures']} figures: median error {s['median_pct']:+.1f} %, worst "
              f"{s['worst_pct']:+.1f} %, {s['too_fast']} of {s['figures']} too fast")
    for b in sorted({p["batch_size"] for p in rows}):
        sb = summarise_signed([p["error_pct"] for p in rows if p["batch_size"] == b])
        gaps = [p["gap_per_step_ms"] for p in rows if p["batch_size"] == b]
        print(f"  batch {b}: median error {sb['median_pct']:+.1f} %, worst "
              f"{sb['worst_pct']:+.1f} %, gap/step {min(gaps):.2f} to {max(gaps):.2f} ms")
    if throughput:
        st = summarise_signed([p["req_s_error_pct"] for p in throughput])
        batch = float(np.median([p["mean_decode_batch"] for p in throughput]))
        print(f"  beside the same file's vllm bench throughput figures (median decode batch "
              f"{batch:.0f}): median error {st['median_pct']:+.1f} %")
    print("  step pub / pred: published / predicted seconds over the simulated steps; gap/step, "
          "gap/request, gap/seq-step: (published - predicted seconds) over the simulated steps, "
          "the requests and the steps' running requests: what a per-step, per-request or "
          "per-sequence host term would have to add (arithmetic on each figure, not fitted)")
    if rows:
        print(f"  cost model: {rows[0]['provenance']}")
    for p in rows:
        print(f"  {p['run']}: {p['command']} [{p['source']}: \"{p['quote']}\"; vLLM "
              f"{p['engine_version']}, {p['gpu']}, TP {p['tp']}]; {p['config']}; "
              f"{p['preemptions']} preemptions")


# ---- a second, independent published V1 source on an H100: vllm-project/vllm#25915 ----------
#: vllm-project/vllm#25915, "[Performance]: Limited improvements when compared Qwen3 /
#: Qwen3-FP8" (Lyken17, 2025-09-30; an issue about FP8 gaining little over BF16, not about
#: vLLM's BF16 speed): `vllm bench throughput --model Qwen/Qwen3-8B --input-len 1024
#: --output-len 2048` "on the latest vllm/vllm-openai:v0.8.5 with h100 hardware", and the same
#: command on vllm/vllm-openai:v0.10.2. Only the BF16 rows are rebuilt (the FP8 checkpoint's
#: block-quantized GEMMs are left out). Every other setting is the bench's default, read in
#: vllm/benchmarks/throughput.py: no dataset path -> the random dataset, --num-prompts 1000,
#: --random-range-ratio 0 (every request the same stated lengths), SamplingParams ignore_eos
#: with max_tokens = --output-len, LLM.generate with its progress bar, EngineArgs' defaults
#: (gpu_memory_utilization 0.9, max_model_len the model's 40,960, prefix caching on: the random
#: prompts share no block). The published figures are that progress bar's "est. speed input /
#: output" at the end of the call: the finished requests' prompt and output tokens over the
#: call's elapsed time, so the call took 1,000 x 2,048 / output tok/s seconds, and the prompts
#: averaged input / output tok/s x 2,048 tokens: the random dataset builds each prompt as
#: text from 1,024 random token ids, which the engine re-tokenizes (1,085 tokens on 0.8.5;
#: 1,021 on 0.10.2, whose dataset re-encodes towards the stated length). Each run has the
#: prompt length the figure itself gives. GPU: "h100" (the SXM part assumed, as the catalog's
#: H100; the issue does not say SXM or PCIe). Fitted on nothing.
VLLM25915 = ("vllm-project/vllm#25915 \"[Performance]: Limited improvements when compared "
             "Qwen3 / Qwen3-FP8\" (2025-09-30), its BF16 rows")
VLLM25915_CMD = "vllm bench throughput --model Qwen/Qwen3-8B --input-len 1024 --output-len 2048"
VLLM25915_SETTINGS = {"source": VLLM25915, "gpu": "H100", "tp": 1, "hf_id": "Qwen/Qwen3-8B",
                      "catalog_model": "qwen3-8b", "dtype": "bfloat16", "input_len": 1024,
                      "output_len": 2048, "num_prompts": 1000, "gpu_memory_utilization": 0.9,
                      "max_model_len": 40960, "prefix_caching": True}
VLLM25915_RUNS = [
    VLLM25915_SETTINGS | {
        "name": f"vllm25915-h100_qwen3-8b_v{v}_in1024_out2048", "engine_version": v,
        "engine_version_stated": f"vllm/vllm-openai:v{v}", "input_tok_s": i, "output_tok_s": o,
        "quote": q}
    for v, i, o, q in (
        ("0.8.5", 2375.11, 4481.69, "bf16 **2375.11 toks/s, output: 4481.69 toks/s**"),
        ("0.10.2", 2697.18, 5408.88, "bf16 **speed input: 2697.18 toks/s, output: 5408.88 toks/s**"))
]


def vllm25915_prompt_len(fig: dict) -> int:
    """The prompts' mean length the figure gives: input / output tok/s x the output length
    (every request ran to --output-len: ignore_eos)."""
    return round(fig["input_tok_s"] / fig["output_tok_s"] * fig["output_len"])


def vllm25915_published_s(fig: dict) -> float:
    """The generate call's seconds: num_prompts x output_len / the published output tok/s."""
    return fig["num_prompts"] * fig["output_len"] / fig["output_tok_s"]


def vllm25915_run(fig: dict, gpus: dict) -> Run:
    """One VLLM25915_RUNS figure as a Run (_fixed_length_run): num_prompts requests of the
    figure's own mean prompt length and the stated output length, the release's LLM-class
    defaults, priced with the release's profile (vllm-v1-sync before 0.14)."""
    n, out = fig["num_prompts"], fig["output_len"]
    inp = vllm25915_prompt_len(fig)
    return _fixed_length_run(
        fig | {"input_len": inp}, gpus, load_models()[fig["catalog_model"]], n,
        f"{n:,} requests of {inp:,} prompt tokens (the figure's input / output tok/s x "
        f"{out:,}; stated --input-len {fig['input_len']:,}) + {out:,} output tokens (random "
        "dataset; ignore_eos)", vllm25915_published_s(fig), "vllm-v1-published-25915")


def evaluate_vllm25915(gpus: dict) -> list[dict]:
    """Predicted vs published seconds (and output tok/s) of every VLLM25915_RUNS figure: a
    check, fitted on nothing, signed as the other published V1 rows (+ = too fast)."""
    rows = []
    for fig in VLLM25915_RUNS:
        run = vllm25915_run(fig, gpus)
        res, _, row = _published_row(fig, run, gpus, VLLM25915_CMD)
        pub_s, pred_s = run.measured_makespan_s, res.makespan_s
        pub_req_s, req_s = fig["num_prompts"] / pub_s, fig["num_prompts"] / pred_s
        rows.append(row | {
            "input_len": vllm25915_prompt_len(fig), "input_len_stated": fig["input_len"],
            "output_len": fig["output_len"], "num_prompts": fig["num_prompts"],
            "published_output_tok_s": fig["output_tok_s"],
            "predicted_output_tok_s": fig["num_prompts"] * fig["output_len"] / pred_s,
            "published_req_s": pub_req_s, "predicted_req_s": req_s,
            "req_s_error_pct": 100.0 * (req_s / pub_req_s - 1.0),
            "published_makespan_s": pub_s, "predicted_makespan_s": pred_s,
            "time_error_pct": 100.0 * (pred_s / pub_s - 1.0),
            "config": _generate_config(fig, run),
            "gap_per_step_ms": 1e3 * (pub_s - pred_s) / max(res.iterations, 1)})
    return rows


def print_vllm25915(rows: list[dict], h100_other: list[dict] | None = None) -> None:
    print("\nPublished vLLM V1 figures, a second source on an H100 (vllm-project/vllm#25915: "
          "vllm bench throughput, Qwen3-8B BF16, 1,000 x 1,024 in / 2,048 out; the progress "
          "bar's output tok/s -> seconds; a check, fitted on nothing; error = predicted / "
          "published req/s - 1, + = too fast):")
    print(f"  {'run':<44} {'in':>5} {'out':>5} {'tok/s pub':>9} {'pred':>7} {'s pub':>7} "
          f"{'pred':>7} {'error':>7}  {'decode batch':>12} {'steps':>6} {'preempt':>7}  "
          f"{'gap/step':>8}")
    for p in rows:
        print(f"  {p['run']:<44} {p['input_len']:>5} {p['output_len']:>5} "
              f"{p['published_output_tok_s']:9.0f} {p['predicted_output_tok_s']:7.0f} "
              f"{p['published_makespan_s']:7.1f} {p['predicted_makespan_s']:7.1f} "
              f"{p['req_s_error_pct']:+6.1f}%  {p['mean_decode_batch']:12.1f} "
              f"{p['iterations']:>6} {p['preemptions']:>7}  {p['gap_per_step_ms']:6.2f}ms")
    s = summarise_signed([p["req_s_error_pct"] for p in rows])
    if s["figures"]:
        mk = [published_makespan_error_pct(p) for p in rows]
        print(f"  {s['figures']} figures: median error {s['median_pct']:+.1f} %, worst "
              f"{s['worst_pct']:+.1f} %, {s['too_fast']} of {s['figures']} too fast; as "
              f"makespans {min(mk):+.1f} to {max(mk):+.1f} % (- = predicted too short)")
    if h100_other:
        other = [published_makespan_error_pct(p) for p in h100_other if p["gpu"] == "H100"]
        if other:
            print(f"  beside the first H100 source's {len(other)} figures (vLLM 0.21.1.dev0, "
                  f"Qwen2.5-7B-Instruct): makespan median {np.median(other):+.1f} %, "
                  f"{min(other):+.1f} to {max(other):+.1f} %")
    if rows:
        print(f"  cost model: {rows[0]['provenance']}")
    for p in rows:
        print(f"  {p['run']}: {p['command']} [{p['source']}: \"{p['quote']}\"; "
              f"{p['engine_version']}, {p['gpu']} (SXM assumed), TP {p['tp']}; prompts "
              f"{p['input_len']:,} tokens from the figure, --input-len "
              f"{p['input_len_stated']:,} stated]; {p['config']}")


def sharegpt_pool(root: Path) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """(prompt, output) lengths of the distinct ShareGPT requests in lambda-a100's Llama-3-8B
    runs, and the files they come from. vLLM's sampler takes the first N of one seeded shuffle,
    so a run whose prompt lengths are a prefix of a larger run's holds the same requests: it is
    left out rather than counted twice."""
    runs = sorted((r for r in load_lambda_a100(root)
                   if r.model_id == "meta-llama/Meta-Llama-3-8B-Instruct"),
                  key=lambda r: -len(r.workload))
    kept: list[Run] = []
    for r in runs:
        p = r.workload.prompt_tokens
        if not any(np.array_equal(k.workload.prompt_tokens[:len(p)], p) for k in kept):
            kept.append(r)
    if not kept:
        raise FileNotFoundError(f"no Llama-3-8B runs in {root / 'lambda-a100'}")
    prompt = np.concatenate([k.workload.prompt_tokens for k in kept]).astype(np.int64)
    output = np.concatenate([k.workload.output_tokens for k in kept]).astype(np.int64)
    return prompt, output, [Path(k.workload.source).name for k in kept]


def rescale_to_total(x: np.ndarray, total: int) -> np.ndarray:
    """`x` scaled to sum exactly `total`, each entry >= 1 (largest-remainder rounding)."""
    y = x.astype(float) * (total / float(x.sum()))
    out = np.maximum(np.floor(y), 1.0).astype(np.int64)
    short = int(total - out.sum())
    order = np.argsort(-(y - np.floor(y)), kind="stable")
    if short > 0:
        out[order[:short]] += 1
    while short < 0:  # only where the floor of 1 pushed the sum over: take from the largest
        order = np.argsort(-out, kind="stable")
        take = order[out[order] > 1][:-short]
        if not len(take):
            raise ValueError(f"a total of {total} cannot give {len(x)} entries >= 1")
        out[take] -= 1
        short += len(take)
    return out


def published_workload(root: Path, fig: dict, seed: int = PUBLISHED_SEED) -> Workload:
    """A published figure's workload rebuilt from its stated length distribution (see
    PUBLISHED_ASSUMPTION): `num_prompts` ShareGPT requests, every one at t = 0, outputs with
    the published mean (output tok/s / req/s)."""
    prompt, output, files = sharegpt_pool(root)
    n = int(fig["num_prompts"])
    idx = np.random.default_rng(seed).integers(0, len(prompt), n)
    mean = fig["output_tok_s"] / fig["req_s"]
    out = rescale_to_total(output[idx], int(round(n * mean)))
    what = PUBLISHED_ASSUMPTION.format(n=n, seed=seed, pool=len(prompt), mean=mean)
    return Workload(prompt_tokens=prompt[idx].copy(), output_tokens=out,
                    source=f"{root / 'lambda-a100'} ({', '.join(files)}): {what}",
                    tokenizer="measured (vLLM, Llama-3 tokenizer)",
                    output_source="measured (vLLM, EOS-stopped), rescaled to the published mean")


def v0_fit_runs(root: Path, gpus: dict, a100: list[Run] | None = None) -> list[Run]:
    """What the V0 host terms are fitted on: the lambda-a100 runs (requests logged; `a100`:
    those already loaded) and the published vLLM 0.6.0 figures rebuilt
    (--disable-log-requests), those whose model is in the catalog."""
    runs = list(load_lambda_a100(root) if a100 is None else a100)
    if runs:
        runs += [r for r in (published_run(root, fig, gpus) for fig in PUBLISHED_RUNS)
                 if r.model is not None]
    return runs


def published_run(root: Path, fig: dict, gpus: dict) -> Run:
    """A published figure as a Run: its rebuilt workload on vLLM 0.6.0's defaults under the
    API server, with the settings its commands state (SGLANG_ENGINE), simulated with the
    engine profile profile_for(0.6.0, serve, 10) gives."""
    from tuner.core.engine_defaults import vllm_defaults
    from tuner.predictors.engine_overhead import profile_for

    e, gpu = SGLANG_ENGINE, gpus[fig["gpu"]]
    d = vllm_defaults(gpu.name, gpu.memory_gib, e["entry_point"], e["engine_version"],
                      max_model_len=e["max_model_len"])
    cfg = ServingConfig(gpu=fig["gpu"], tp=int(fig["tp"]), **d.knobs())
    n = int(fig["num_prompts"])
    return Run(name=fig["name"], source=SGLANG_060, gpu=fig["gpu"], model_id=fig["hf_model"],
               config=cfg, workload=published_workload(root, fig),
               measured_makespan_s=n / fig["req_s"], measured_kv_blocks=None, timeline=None,
               moe=False, engine_version=e["engine_version"], suite="published",
               model=load_models().get(fig["model"]),
               engine=profile_for(e["engine_version"], e["entry_point"],
                                  e["num_scheduler_steps"], log_requests=False),
               # the server command passes --disable-log-requests
               log_requests=False, scheduler_steps=e["num_scheduler_steps"])


def evaluate_published(root: Path, gpus: dict, engine: EngineProfile | None = None) -> list[dict]:
    """Predicted vs published req/s and output tok/s of every PUBLISHED_RUNS figure (signed
    error %: predicted / published - 1). `engine`: the V0 profile (default: the run's own,
    profile_for(0.6.0, serve, 10), with no request log, as their server ran)."""
    rows = []
    for fig in PUBLISHED_RUNS:
        tp = "" if fig["tp"] == 1 else f" --tensor {fig['tp']}"
        row = {"run": fig["name"], "what": fig["what"], "source": SGLANG_060,
               "gpu": fig["gpu"], "tp": fig["tp"], "model": fig["hf_model"],
               "command": SGLANG_SERVER.format(hf=fig["hf_model"], tp=tp) + "; " + SGLANG_CLIENT,
               "published_req_s": fig["req_s"], "published_output_tok_s": fig["output_tok_s"]}
        if not (root / "lambda-a100" / "index.csv").is_file():
            rows.append(row | {"status": "not re-simulated: ../shared/fidelity/lambda-a100 (the "
                                         "ShareGPT lengths it is rebuilt from) is absent"})
            continue
        run = published_run(root, fig, gpus)
        if run.model is None:
            rows.append(row | {"status": f"skipped: {fig['model']} is not in the catalog"})
            continue
        eng = as_run_logs(engine if engine is not None else run.engine, run)
        res, cm = simulate_run(run, eng, gpus)
        wl, n = run.workload, len(run.workload)
        req_s = n / res.makespan_s
        out_s = float(wl.output_tokens.sum()) / res.makespan_s
        row.update(
            status="ok", engine=eng.name if eng is not None else "GPU time only",
            config=(f"vLLM {run.engine_version}, API server, --num-scheduler-steps "
                    f"{SGLANG_ENGINE['num_scheduler_steps']}, max_model_len "
                    f"{SGLANG_ENGINE['max_model_len']}, TP {run.config.tp}, scheduler "
                    f"{run.config.scheduler}, max_num_seqs {run.config.max_running}, "
                    f"max_num_batched_tokens {run.config.chunk_size}, gpu_memory_utilization "
                    f"{run.config.gpu_memory_utilization:g}, every request at t = 0, no start-up"),
            workload=wl.source.split(": ", 1)[1], num_prompts=n,
            mean_prompt_tokens=float(wl.prompt_tokens.mean()),
            mean_output_tokens=float(wl.output_tokens.mean()),
            predicted_makespan_s=res.makespan_s, published_makespan_s=run.measured_makespan_s,
            predicted_req_s=req_s, req_s_error_pct=100.0 * (req_s / fig["req_s"] - 1.0),
            predicted_output_tok_s=out_s,
            output_tok_s_error_pct=100.0 * (out_s / fig["output_tok_s"] - 1.0),
            predicted_input_tok_s=float(wl.prompt_tokens.sum()) / res.makespan_s,
            kv_capacity_blocks=res.memory.kv_capacity_blocks,
            preemptions=res.preemptions, provenance=cm.describe(), kind=cm.kind)
        rows.append(row)
    return rows


# ---- SGLang's own published figures -----------------------------------------------------------
#: SGLang v0.3.0's rows of the same README's "Offline benchmark results" (its "Offline
#: benchmarks" commands: the server below, `python3 -m sglang.bench_serving --backend sglang
#: --dataset-name sharegpt --num-prompts 5000`, every request at t = 0; bench_serving's sglang
#: backend posts streaming /generate requests with ignore_eos true, so each output is its
#: ShareGPT completion's length, the same 5,000 requests as the vLLM rows). Installed as
#: `pip install "sglang[all]"==0.3.0` (the README's "Installation").
SGLANG_SGL_SERVER = "python -m sglang.launch_server --model-path {hf} {flags}"
SGLANG_SGL_CLIENT = ("python3 -m sglang.bench_serving --backend sglang --dataset-name sharegpt "
                     "--num-prompts 5000")
PUBLISHED_SGLANG_RUNS = [
    {"name": "sglang-v030_llama-3.1-8b_a100_tp1_n5000",
     "what": "SGLang v0.3.0, Llama-3.1-8B-Instruct, 1x A100-80G, 5,000 ShareGPT prompts, "
             "offline: 22.03 req/s, 4,281.51 output tok/s",
     "hf_model": "meta-llama/Llama-3.1-8B-Instruct", "model": "llama-3.1-8b", "gpu": "A100-80G",
     "tp": 1, "num_prompts": 5000, "req_s": 22.03, "output_tok_s": 4281.51,
     "flags": "--enable-torch-compile --disable-radix-cache",
     # not given: SGLang v0.3's default at TP 1 (the README's notes: "SGLang's mem_frac is
     # 0.88 at TP 1")
     "mem_fraction_static": 0.88},
    {"name": "sglang-v030_llama-3.1-70b_h100_tp4_n5000",
     "what": "SGLang v0.3.0, Llama-3.1-70B-Instruct, 4x H100 80G TP4, 5,000 ShareGPT prompts, "
             "offline: 19.84 req/s, 3,856.01 output tok/s",
     "hf_model": "meta-llama/Llama-3.1-70B-Instruct", "model": "llama-3.1-70b", "gpu": "H100",
     "tp": 4, "num_prompts": 5000, "req_s": 19.84, "output_tok_s": 3856.01,
     "flags": "--disable-radix-cache --tp 4 --mem-frac 0.88", "mem_fraction_static": 0.88},
]
SGLANG_RELEASE = "0.3.0"
#: SGLang v0.3's ServerArgs defaults for what the commands leave unset (the v0.3-era
#: server_args.py: chunked_prefill_size 8192, max_prefill_tokens 16384, schedule_policy "lpm",
#: schedule_conservativeness 1.0, enable_overlap_schedule False, enable_mixed_chunk False);
#: lpm without the radix cache is FCFS (the scheduler falls back when the tree cache is
#: disabled). max_running_requests is left to the KV pool as tuner.core.sglang computes it.
SGLANG_V03_DEFAULTS = {"chunked_prefill_size": 8192, "max_prefill_tokens": 16384,
                       "schedule_policy": "fcfs", "schedule_conservativeness": 1.0}
#: what differs between the release and what tuner simulates, stated with every row
SGLANG_V03_CAVEATS = (
    "tuner's SGLang scheduler is v0.5's (new-token-ratio constants, retraction, request pool); "
    "kernels are AIConfigurator's SGLang 0.5.x tables, not 0.3.0's (FlashInfer attention "
    "then); --enable-torch-compile (8B row) is not modelled (it speeds decode batches up to "
    "32 requests); CUDA-graph size from v0.5's defaults")


def sglang_published_run(root: Path, fig: dict, gpus: dict,
                         engine: EngineProfile | None = None) -> Run:
    """An SGLang figure as a Run: the vLLM rows' rebuilt workload (published_workload, this
    figure's own mean output), SGLang v0.3.0's settings as its command states them
    (SGLANG_V03_DEFAULTS for the rest), the `engine` profile (default: sglang_profile_for
    the release)."""
    from tuner.core.sglang import SGLangSettings, max_running_default, plan_memory_sglang
    from tuner.predictors.engine_overhead import sglang_profile_for

    d, gpu, model = SGLANG_V03_DEFAULTS, gpus[fig["gpu"]], load_models().get(fig["model"])
    base = {"gpu": fig["gpu"], "tp": int(fig["tp"]), "chunk_size": d["chunked_prefill_size"],
            "gpu_memory_utilization": fig["mem_fraction_static"], "block_size": 1}
    max_running = 1
    if model is not None:
        plan = plan_memory_sglang(model, gpu, ServingConfig(**base, max_running=1))
        max_running = max_running_default(plan.kv_capacity_tokens, model.max_position)
    settings = SGLangSettings(schedule_policy=d["schedule_policy"],
                              schedule_conservativeness=d["schedule_conservativeness"],
                              max_prefill_tokens=d["max_prefill_tokens"],
                              radix_cache="--disable-radix-cache" not in fig["flags"])
    n = int(fig["num_prompts"])
    return Run(name=fig["name"], source=SGLANG_060, gpu=fig["gpu"], model_id=fig["hf_model"],
               config=ServingConfig(**base, max_running=max_running),
               workload=published_workload(root, fig), measured_makespan_s=n / fig["req_s"],
               measured_kv_blocks=None, timeline=None, moe=False, engine_version=SGLANG_RELEASE,
               suite="published-sglang", model=model,
               engine=engine if engine is not None else sglang_profile_for(SGLANG_RELEASE),
               simulated_engine="sglang", sglang=settings)


def evaluate_published_sglang(root: Path, gpus: dict,
                              engine: EngineProfile | None = None) -> list[dict]:
    """Predicted vs published req/s and output tok/s of every PUBLISHED_SGLANG_RUNS figure,
    simulated as SGLang (its scheduler, memory plan, kernel tables and `engine` profile,
    default the shipped sglang_profile_for(0.3.0)). The shipped profile is fitted on these
    two figures: in-sample; `--fit` prints the leave-one-out."""
    rows = []
    for fig in PUBLISHED_SGLANG_RUNS:
        row = {"run": fig["name"], "what": fig["what"], "source": SGLANG_060, "gpu": fig["gpu"],
               "tp": fig["tp"], "model": fig["hf_model"],
               "command": (SGLANG_SGL_SERVER.format(hf=fig["hf_model"], flags=fig["flags"])
                           + "; " + SGLANG_SGL_CLIENT),
               "published_req_s": fig["req_s"], "published_output_tok_s": fig["output_tok_s"]}
        if not (root / "lambda-a100" / "index.csv").is_file():
            rows.append(row | {"status": "not re-simulated: ../shared/fidelity/lambda-a100 (the "
                                         "ShareGPT lengths it is rebuilt from) is absent"})
            continue
        run = sglang_published_run(root, fig, gpus, engine)
        if run.model is None:
            rows.append(row | {"status": f"skipped: {fig['model']} is not in the catalog"})
            continue
        res, cm = simulate_run(run, run.engine, gpus)
        wl, n, st = run.workload, len(run.workload), run.sglang
        req_s = n / res.makespan_s
        out_s = float(wl.output_tokens.sum()) / res.makespan_s
        row.update(
            status="ok", engine=run.engine.name if run.engine is not None else "GPU time only",
            config=(f"SGLang {SGLANG_RELEASE} as simulated: TP {run.config.tp}, "
                    f"--chunked-prefill-size {run.config.chunk_size}, --max-prefill-tokens "
                    f"{st.max_prefill_tokens}, --mem-fraction-static "
                    f"{run.config.gpu_memory_utilization:g}, --max-running-requests "
                    f"{run.config.max_running} (from the KV pool), --schedule-policy "
                    f"{st.schedule_policy}, radix cache {'on' if st.radix_cache else 'off'}, "
                    f"every request at t = 0, no start-up; {SGLANG_V03_CAVEATS}"),
            workload=wl.source.split(": ", 1)[1], num_prompts=n,
            mean_prompt_tokens=float(wl.prompt_tokens.mean()),
            mean_output_tokens=float(wl.output_tokens.mean()),
            predicted_makespan_s=res.makespan_s, published_makespan_s=run.measured_makespan_s,
            predicted_req_s=req_s, req_s_error_pct=100.0 * (req_s / fig["req_s"] - 1.0),
            predicted_output_tok_s=out_s,
            output_tok_s_error_pct=100.0 * (out_s / fig["output_tok_s"] - 1.0),
            kv_capacity_tokens=res.memory.kv_capacity_tokens, preemptions=res.preemptions,
            iterations=res.iterations, provenance=str(res.provenance), kind=cm.kind)
        rows.append(row)
    return rows


def fit_sglang(root: Path, gpus: dict | None = None) -> dict:
    """SGLang v0.3's host terms on PUBLISHED_SGLANG_RUNS: each single HOST_TERMS term (two
    figures fit one term at most) by least squares on predicted / published makespan, with
    in-sample and leave-one-out errors (each figure predicted by the term fitted on the other);
    the kept term: the lowest leave-one-out median |error| among the host terms that come out
    non-negative on both. gpu_excess is fitted and printed, not kept: two makespans cannot tell
    a GPU-time excess from a host term (the V0 fit tells them apart with its runs' ITL), and
    the kept term carries to the overlap scheduler's estimate, which hides host time and would
    not hide a GPU excess. {} without the data."""
    gpus = gpus or load_gpus()
    if not (root / "lambda-a100" / "index.csv").is_file():
        return {}
    from tuner.predictors.engine_overhead import SGLANG_V03

    base = SGLANG_V03.with_params(**{t: 0.0 for t in HOST_TERMS})
    runs = [sglang_published_run(root, fig, gpus, base) for fig in PUBLISHED_SGLANG_RUNS]
    runs = [r for r in runs if r.model is not None]
    rows = [host_row(r, gpus) for r in runs]
    terms_used, aliases = _aliases(rows)
    table = [{"terms": (), "status": "ok", "coef": {},
              "in_sample": {r.name: 100 * (r.base_s / r.measured_s - 1) for r in rows},
              "loo": {r.name: 100 * (r.base_s / r.measured_s - 1) for r in rows}}]
    for t in terms_used:
        if all(r.feats[t] == 0 for r in rows):
            table.append({"terms": (t,), "status": "no such step feature in these runs"})
            continue
        coef = fit_host_terms(rows, (t,))
        loo = {}
        for i, r in enumerate(runs):
            c = fit_host_terms(rows[:i] + rows[i + 1:], (t,)) if rows[:i] + rows[i + 1:] else None
            loo[r.name] = None if c is None else 100 * (rows[i].makespan_s(c) / rows[i].measured_s - 1)
        if coef is None or any(v is None for v in loo.values()):
            table.append({"terms": (t,), "status": "a negative term: dropped"})
            continue
        table.append({"terms": (t,), "status": "ok", "coef": coef, "loo": loo,
                      "in_sample": {r.name: 100 * (r.makespan_s(coef) / r.measured_s - 1)
                                    for r in rows}})
    for t in table:
        if t["status"] == "ok":
            ins, loo = list(t["in_sample"].values()), list(t["loo"].values())
            t.update(in_sample_median_abs_pct=float(np.median(np.abs(ins))),
                     in_sample_worst_abs_pct=float(np.max(np.abs(ins))),
                     loo_median_abs_pct=float(np.median(np.abs(loo))),
                     loo_worst_abs_pct=float(np.max(np.abs(loo))))
    ok = [t for t in table if t["status"] == "ok" and "gpu_excess" not in t["terms"]]
    best = min(ok, key=lambda t: (t["loo_median_abs_pct"], len(t["terms"])))
    return {"table": table, "best": best, "aliases": aliases,
            "gpu_only_makespan_s": {r.name: r.base_s for r in rows},
            "gpu": {r.name: r.gpu for r in runs}}


def run_model(run: Run) -> ModelSpec | None:
    return run.model if run.model is not None else model_spec(run.model_id)


def simulate_run(run: Run, engine: EngineProfile | None, gpus: dict, *, timeline: bool = False,
                 return_steps: bool = False):
    model = run_model(run)
    gpu = gpus[run.gpu]
    sglang = {}
    if run.simulated_engine == "sglang":  # SGLang's kernel tables, scheduler and settings
        sglang = {"framework": "sglang"}
    cm = table_cost_model(model, gpu, tp=run.config.tp, engine_version=run.engine_version,
                          engine=engine, gpus=gpus, dp=run.config.dp,
                          expert_parallel=run.config.expert_parallel, **sglang)
    if cm is None:
        raise RuntimeError(f"no measured or transferred tables for {run.gpu}")
    if sglang:
        sglang = {"engine": "sglang", "sglang": run.sglang,
                  "prefix_caching": run.sglang.radix_cache}
    # the real runs' makespans are timed after the engine is up: the schedule alone
    # its memory profile and (V0) its decode runs of --num-scheduler-steps
    version = {} if sglang else {"engine_version": run.engine_version,
                                 "num_scheduler_steps": run.scheduler_steps}
    res = simulate(run.workload, model, gpu, run.config, cm, timeline=timeline, startup_s=0.0,
                   return_steps=return_steps, **sglang, **version)
    return res, cm


def itl_row(run: Run, res) -> dict:
    """Predicted vs measured decode speed of a simulation run with return_steps: the median
    gap between streamed chunks (`run.scheduler_steps` tokens a chunk) where the run reports
    it, the per-request mean gap between tokens where it logs first and last token times
    (tuner.sim.steps, over the simulation's own step times)."""
    from tuner.sim.steps import mean_itl_s, median_itl_s

    row = {}
    if run.measured_median_itl_s is not None:
        pred = median_itl_s(res.steps, res.step_s, run.scheduler_steps)
        row.update(measured_median_itl_s=run.measured_median_itl_s, predicted_median_itl_s=pred,
                   itl_error_pct=100.0 * (pred / run.measured_median_itl_s - 1.0))
    if run.measured_mean_itl_s is not None:
        pred = mean_itl_s(res.steps, res.step_s)
        row.update(measured_mean_itl_s=run.measured_mean_itl_s, predicted_mean_itl_s=pred,
                   mean_itl_error_pct=100.0 * (pred / run.measured_mean_itl_s - 1.0))
    return row


# ---- the V0 host-cost fit (lambda-a100) --------------------------------------------------------
#: the EngineProfile terms the fits offer: host terms, each multiplying its step feature
#: (EngineProfile.host_s), and gpu_excess, whose step feature is the GPU time (step_time_s)
HOST_TERMS = ("fixed_s", "per_seq_s", "per_token_s", "per_new_request_s", "per_logged_request_s",
              "per_chunk_s", "per_tp_rank_s", "gpu_excess")


def term_value(term: str, v: float) -> str:
    """A fitted term as printed: seconds in ms (or us), gpu_excess in percent."""
    if term == "gpu_excess":
        return f"GPU {100 * v:+.1f} %"
    return f"{1e3 * v:.4g} ms" if v >= 1e-4 else f"{1e6 * v:.3g} us"


@dataclass
class HostRow:
    """One run in the host-term regression: with host work between GPU steps and every request
    at t = 0 the schedule does not depend on time, so under any host terms the makespan is the
    GPU-only one + sum(term * its summed step feature), and every streamed chunk's gap is its
    GPU-only gap + sum(term * the feature's gap) (tuner.sim.steps.itl_chunks is linear)."""

    name: str
    base_s: float  # GPU-only makespan
    feats: dict[str, float]  # each host term's step feature summed over the run
    measured_s: float
    # where the run measured the median gap between streamed chunks: the GPU-only gaps, each
    # term's gaps, their weights (decodes) and the measured median
    itl_base_s: np.ndarray | None = None
    itl_feats: dict[str, np.ndarray] | None = None
    itl_weight: np.ndarray | None = None
    measured_itl_s: float | None = None

    def makespan_s(self, coef: dict) -> float:
        return self.base_s + sum(c * self.feats[t] for t, c in coef.items())

    def median_chunk(self, coef: dict) -> int:
        """Index of the chunk at the weighted median gap under `coef`."""
        from tuner.sim.steps import weighted_median_index

        gaps = self.itl_base_s + sum(c * self.itl_feats[t] for t, c in coef.items())
        return weighted_median_index(gaps, self.itl_weight)

    def itl_s(self, coef: dict) -> float | None:
        if self.measured_itl_s is None:
            return None
        j = self.median_chunk(coef)
        return float(self.itl_base_s[j] + sum(c * self.itl_feats[t][j] for t, c in coef.items()))


def host_row(run: Run, gpus: dict) -> HostRow:
    """`run`'s HostRow: its GPU-only simulation and each HOST_TERMS term's step feature (as the
    run logged requests or not), with the streamed-chunk gaps where it measured them."""
    from tuner.predictors.engine_overhead import EngineProfile as EP
    from tuner.sim.steps import batch_features, itl_chunks

    res, _ = simulate_run(run, None, gpus, return_steps=True)
    per_replica = [batch_features(s) for s in res.steps]
    unit = {t: as_run_logs(EP(name="unit", entry_point="", generation="", overlapped=False,
                              **{t: 1.0}), run) for t in HOST_TERMS if t != "gpu_excess"}
    host = {t: [u.host_s(f, run.config.tp) * np.ones_like(f.decodes) for f in per_replica]
            for t, u in unit.items()}
    # gpu_excess scales the GPU time: its step feature is the GPU-only step time
    host["gpu_excess"] = [np.asarray(s, dtype=np.float64) for s in res.step_s]
    # (an SGLang run's scheduler is step-based too: its schedule does not depend on time)
    row = HostRow(run.name, res.makespan_s,
                  {t: float(sum(h.sum() for h in v)) for t, v in host.items()},
                  run.measured_makespan_s)
    if run.measured_median_itl_s is not None:
        k = run.scheduler_steps

        def gaps(step_s: list[np.ndarray]) -> np.ndarray:
            return np.concatenate([itl_chunks(s, t, k)[0]
                                   for s, t in zip(res.steps, step_s, strict=True)])

        row.itl_base_s = gaps(res.step_s)
        row.itl_feats = {t: gaps(v) for t, v in host.items()}
        row.itl_weight = np.concatenate([itl_chunks(s, np.zeros(len(s)), k)[1]
                                         for s in res.steps])
        row.measured_itl_s = run.measured_median_itl_s
    return row


def as_run_logs(engine: EngineProfile | None, run: Run) -> EngineProfile | None:
    """`engine` as `run` ran it: its request-log term only where the run logged requests."""
    if engine is None or run.log_requests or not engine.per_logged_request_s:
        return engine
    return engine.with_params(per_logged_request_s=0.0)


def fit_host_terms(rows: list[HostRow], terms: tuple[str, ...]) -> dict | None:
    """Least squares of predicted / measured - 1 over the rows' makespans and, where a row
    measured it, its median chunk gap (the median's chunk re-found under each refit until it
    settles); None where a term comes out negative (unphysical)."""
    coef: dict | None = None
    for _ in range(30):
        X, y = [], []
        for r in rows:
            X.append([r.feats[t] / r.measured_s for t in terms])
            y.append(1.0 - r.base_s / r.measured_s)
            if r.measured_itl_s is not None:
                j = r.median_chunk(coef or {})
                X.append([r.itl_feats[t][j] / r.measured_itl_s for t in terms])
                y.append(1.0 - r.itl_base_s[j] / r.measured_itl_s)
        sol, *_ = np.linalg.lstsq(np.array(X), np.array(y), rcond=None)
        new = dict(zip(terms, map(float, sol), strict=True))
        settled = coef is not None and all(np.isclose(new[t], coef[t], rtol=1e-9, atol=0.0)
                                           for t in terms)
        coef = new
        if settled:
            break
    if any(v < 0 for v in coef.values()):
        return None
    return coef


def _aliases(rows: list[HostRow]) -> tuple[list[str], dict[str, str]]:
    """HOST_TERMS whose step feature an earlier term's equals on every row (not separable):
    (the terms kept, {alias: the term it equals})."""
    aliases, terms_used = {}, []
    for t in HOST_TERMS:
        same = next((u for u in terms_used
                     if np.allclose([r.feats[t] for r in rows], [r.feats[u] for r in rows])),
                    None)
        if same is None:
            terms_used.append(t)
        else:
            aliases[t] = same
    return terms_used, aliases


#: the kept set: the lowest leave-one-out score (median |makespan error| + median |chunk-gap
#: error|), and of the sets within this many percentage points of it, the fewest terms
PARSIMONY_PP = 0.5


def fit_v0(runs: list[Run], gpus: dict | None = None) -> dict:
    """Every non-empty set of HOST_TERMS (up to 3 terms) fitted on the runs' makespans and,
    where a run measured it, its median gap between streamed chunks (the decode step the
    makespan alone cannot place: a per-request term and a per-step term can give the same
    makespan), each scored by leave-one-out. The kept set: no negative term, the lowest
    leave-one-out median |makespan error| + median |chunk-gap error|, and of the sets within
    PARSIMONY_PP of it the fewest terms. A term whose step feature equals an earlier term's on
    every run (e.g. per sampled token and per running sequence under prefill-first batches)
    cannot be told apart from it: it is named in `aliases` and left out of the sets."""
    import itertools

    gpus = gpus or load_gpus()
    rows = [host_row(r, gpus) for r in runs]
    terms_used, aliases = _aliases(rows)
    names = [r.name for r in runs]
    table = []
    for k in (1, 2, 3):
        for terms in itertools.combinations(terms_used, k):
            coef = fit_host_terms(rows, terms)
            if coef is None:
                table.append({"terms": terms, "status": "a negative term: dropped"})
                continue
            loo_c = [fit_host_terms(rows[:i] + rows[i + 1:], terms) for i in range(len(rows))]
            if any(c is None for c in loo_c):
                table.append({"terms": terms, "status": "negative in a leave-one-out fit"})
                continue

            def errs(pairs):
                m = {n: 100 * (r.makespan_s(c) / r.measured_s - 1) for n, r, c in pairs}
                i = {n: 100 * (r.itl_s(c) / r.measured_itl_s - 1) for n, r, c in pairs
                     if r.measured_itl_s is not None}
                return m, i

            ins, ins_itl = errs([(n, r, coef) for n, r in zip(names, rows, strict=True)])
            loo, loo_itl = errs(list(zip(names, rows, loo_c, strict=True)))
            row = {"terms": terms, "status": "ok", "coef": coef,
                   "in_sample_median_abs_pct": float(np.median(np.abs(list(ins.values())))),
                   "loo_median_abs_pct": float(np.median(np.abs(list(loo.values())))),
                   "loo_worst_abs_pct": float(np.max(np.abs(list(loo.values())))),
                   "loo": loo, "in_sample": ins, "loo_itl": loo_itl, "in_sample_itl": ins_itl}
            if loo_itl:
                row.update(
                    in_sample_itl_median_abs_pct=float(np.median(np.abs(list(ins_itl.values())))),
                    loo_itl_median_abs_pct=float(np.median(np.abs(list(loo_itl.values())))),
                    loo_itl_worst_abs_pct=float(np.max(np.abs(list(loo_itl.values())))))
            row["score"] = row["loo_median_abs_pct"] + row.get("loo_itl_median_abs_pct", 0.0)
            table.append(row)
    ok = [t for t in table if t["status"] == "ok"]
    top = min(t["score"] for t in ok)
    best = min((t for t in ok if t["score"] <= top + PARSIMONY_PP),
               key=lambda t: (len(t["terms"]), t["score"]))
    return {"table": table, "best": best, "aliases": aliases}


def evaluate(runs: list[Run], engines: dict[str, EngineProfile | None], gpus: dict, *,
             timeline: bool = True) -> list[dict]:
    """`engines`: suite -> the engine profile its runs are simulated with (None: GPU time
    only)."""
    rows = []
    for run in runs:
        engine = as_run_logs(engines[run.suite] if run.suite in engines else run.engine, run)
        if run.gpu not in gpus:
            rows.append({"run": run.name, "gpu": run.gpu, "suite": run.suite,
                         "measured_makespan_s": run.measured_makespan_s,
                         "status": f"skipped: GPU {run.gpu} is not in the catalog"})
            continue
        row = {"run": run.name, "gpu": run.gpu, "model": run.model_id, "source": run.source,
               "tp": run.config.tp, "dp": run.config.dp, "suite": run.suite,
               "engine": engine.name if engine is not None else "GPU time only",
               "measured_makespan_s": run.measured_makespan_s}
        model = run_model(run)
        if model is None:
            row["status"] = f"skipped: {run.model_id} is not in the catalog"
            rows.append(row)
            continue
        itl = run.measured_median_itl_s is not None or run.measured_mean_itl_s is not None
        res, cm = simulate_run(run, engine, gpus, timeline=timeline, return_steps=itl)
        if itl:
            row.update(itl_row(run, res))
        row.update(status="ok", moe=run.moe, expert_parallel=run.config.expert_parallel,
                   predicted_makespan_s=res.makespan_s,
                   makespan_error_pct=100.0 * (res.makespan_s / run.measured_makespan_s - 1.0),
                   provenance=cm.describe(), kind=cm.kind, preemptions=res.preemptions)
        plan = res.memory  # the plan the simulation ran with (the run's release's profile)
        row["kv_capacity_blocks"] = plan.kv_capacity_blocks
        if run.measured_kv_blocks:
            row["measured_kv_blocks"] = run.measured_kv_blocks
            row["kv_error_pct"] = 100.0 * (plan.kv_capacity_blocks / run.measured_kv_blocks - 1.0)
        if timeline and run.timeline is not None and res.timeline is not None:
            t_sim, r_sim = res.timeline["time_s"], res.timeline["running"]
            t = run.timeline["t"]
            sim_at = r_sim[np.minimum(np.searchsorted(t_sim, t), len(r_sim) - 1)]
            sim_at = np.where(t <= t_sim[-1], sim_at, 0)
            # the simulated timeline is replica 0's; vLLM's counts every data-parallel rank
            measured = run.timeline["running"] / run.config.dp
            row["running_mean_abs_diff"] = float(np.mean(np.abs(sim_at - measured)))
            row["running_measured_mean"] = float(np.mean(measured))
        rows.append(row)
    return rows


def fit_engine(runs: list[Run], gpus: dict, base: EngineProfile) -> EngineProfile:
    """One parameter for the whole suite, no per-run factor: the profile's exposed per-step
    time (what async scheduling does not hide), by least squares on log(predicted / measured
    makespan), on a coarse grid then a fine one. The host terms (fixed, per running sequence)
    stay at the profile's values: under max(GPU, host) these runs cannot identify them (their
    GPU steps are longer than any plausible host time). MoE runs are left out: the parameter
    is the dense runs' (so the MoE run is a prediction, not a fit)."""
    ok = [r for r in runs if run_model(r) is not None and not r.moe]

    def loss(exposed):
        e = base.with_params(exposed_s=float(exposed))
        errs = [np.log(simulate_run(r, e, gpus)[0].makespan_s / r.measured_makespan_s) for r in ok]
        return float(np.sum(np.square(errs)))

    grid = np.arange(0.0, 4.01e-3, 0.5e-3)
    best = min(grid, key=loss)
    fine = np.clip(best + np.arange(-0.4e-3, 0.41e-3, 0.1e-3), 0.0, None)
    best = min(np.unique(np.round(fine, 6)), key=loss)
    return base.with_params(exposed_s=float(best))


def published_makespan_error_pct(fig: dict) -> float:
    """A published figure's signed makespan error (predicted / published time - 1: negative =
    predicted too short), from the req/s error of a throughput figure or the time error of a
    latency one."""
    if "time_error_pct" in fig:
        return float(fig["time_error_pct"])
    return 100.0 * (1.0 / (1.0 + fig["req_s_error_pct"] / 100.0) - 1.0)


def published_per_gpu(figs: list[dict], exclude: dict) -> dict:
    """Per GPU without real runs of its own (``exclude``: the GPUs the leave-one-out rows
    cover): the published figures' |makespan error|, fitted on nothing, for the cost model's
    provenance line; one engine profile per GPU (the one most of its figures check)."""
    out: dict[str, dict] = {}
    by_gpu: dict[str, list[dict]] = {}
    for f in figs:
        if f["gpu"] not in exclude:
            by_gpu.setdefault(f["gpu"], []).append(f)
    for g, fs in by_gpu.items():
        engines = [f["engine"] for f in fs]
        engine = max(set(engines), key=engines.count)
        err = [published_makespan_error_pct(f) for f in fs if f["engine"] == engine]
        a = np.abs(err)
        out[g] = {"runs": len(err), "median_abs_pct": float(np.median(a)),
                  "worst_abs_pct": float(np.max(a)), "median_pct": float(np.median(err)),
                  "too_short": int(sum(e < 0 for e in err)), "engine": engine,
                  "fitted": False, "unit": "published vLLM V1 figure(s)",
                  "sources": sorted({f["source"] for f in fs if f["engine"] == engine})}
        # the GPU's figures priced with another profile (an older release's): kept beside,
        # apart from the headline numbers above (stop 52: vllm-project/vllm#25915 on H100)
        rest = [f for f in fs if f["engine"] != engine]
        if rest:
            e = [published_makespan_error_pct(f) for f in rest]
            out[g]["other_engines"] = {
                "runs": len(e), "engines": sorted({f["engine"] for f in rest}),
                "median_pct": float(np.median(e)), "worst_abs_pct": float(np.max(np.abs(e))),
                "too_short": int(sum(x < 0 for x in e)),
                "sources": sorted({f["source"] for f in rest})}
    return out


def summarise(rows: list[dict]) -> dict:
    per_gpu = {}
    for r in rows:
        if r.get("status") != "ok":
            continue
        per_gpu.setdefault(r["gpu"], []).append(abs(r["makespan_error_pct"]))
    all_err = [e for v in per_gpu.values() for e in v]
    return {"per_gpu": {g: {"runs": len(v), "median_abs_pct": float(np.median(v)),
                            "worst_abs_pct": float(np.max(v))} for g, v in per_gpu.items()},
            "median_abs_pct": float(np.median(all_err)) if all_err else None,
            "worst_abs_pct": float(np.max(all_err)) if all_err else None}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA,
                    help="folder of public runs (default ../shared/fidelity beside the repo)")
    ap.add_argument("--engine", default="vllm-v1-async", choices=sorted(PROFILES))
    ap.add_argument("--fit", action="store_true",
                    help="refit the engine profile's host terms on the runs; leave-one-out error")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--write-summary", action="store_true",
                    help="store the per-GPU errors in predictors/data/aic/fidelity_summary.json "
                         "(cited by the measured cost model's provenance)")
    a = ap.parse_args(argv)
    if not a.data.is_dir():
        print(f"no public runs at {a.data} (pass --data)", file=sys.stderr)
        return 2
    gpus = load_gpus()
    every = load_all(a.data, gpus)
    if not every:
        print(f"no public runs at {a.data} (pass --data)", file=sys.stderr)
        return 2
    runs = [r for r in every if r.suite == "llmservingsim"]
    v0_runs = [r for r in every if r.suite == "lambda-a100"]
    other = [r for r in every if r.suite not in ("llmservingsim", "lambda-a100")]
    engine = PROFILES[a.engine]
    v0_engine = PROFILES["vllm-v0-multistep"]
    out = {"engine": engine.describe(), "v0_engine": v0_engine.describe()}
    if a.fit:
        fitted = fit_engine(runs, gpus, engine)
        out["fitted"] = {"exposed_s": fitted.exposed_s}
        loo = []
        ok = [r for r in runs if run_model(r) is not None and not r.moe]
        for i, r in enumerate(ok):
            e = fit_engine(ok[:i] + ok[i + 1:], gpus, engine)
            res, _ = simulate_run(r, e, gpus)
            loo.append({"run": r.name, "gpu": r.gpu, "engine": engine.name,
                        "term": f"exposed {1e3 * e.exposed_s:.2f} ms/step",
                        "error_pct": 100.0 * (res.makespan_s / r.measured_makespan_s - 1.0)})
        for r in runs:  # MoE runs: never in the fit, so the fitted profile predicts them
            if r.moe and run_model(r) is not None:
                res, _ = simulate_run(r, fitted, gpus)
                loo.append({"run": r.name, "gpu": r.gpu, "engine": engine.name,
                            "term": f"exposed {1e3 * fitted.exposed_s:.2f} ms/step",
                            "error_pct": 100.0 * (res.makespan_s / r.measured_makespan_s - 1.0)})
        engine = fitted
        if v0_runs:
            fit_runs = v0_fit_runs(a.data, gpus, v0_runs)
            v0 = fit_v0(fit_runs, gpus)
            out["v0_fit"] = v0
            best = v0["best"]
            v0_engine = v0_engine.with_params(**{t: 0.0 for t in HOST_TERMS} | best["coef"])
            for r in v0_runs:
                loo.append({"run": r.name, "gpu": r.gpu, "engine": v0_engine.name,
                            "term": f"terms fitted on the other {len(fit_runs) - 1}",
                            "error_pct": best["loo"][r.name]})
            out["published_loo"] = {r.name: best["loo"][r.name] for r in fit_runs
                                    if r.suite == "published"}
        out["leave_one_out"] = loo
    rows = evaluate(runs + v0_runs + other, {"llmservingsim": engine, "lambda-a100": v0_engine},
                    gpus)
    published = evaluate_published(a.data, gpus, v0_engine)
    sg_engine = None  # SGLang rows: the shipped profile of their release, unless refitted
    if a.fit:
        sg_fit = fit_sglang(a.data, gpus)
        if sg_fit:
            from tuner.predictors.engine_overhead import SGLANG_V03

            out["sglang_fit"] = sg_fit
            sg_engine = SGLANG_V03.with_params(**{t: 0.0 for t in HOST_TERMS}
                                               | sg_fit["best"]["coef"])
            out["sglang_leave_one_out"] = [
                {"run": r, "gpu": sg_fit["gpu"][r], "engine": sg_engine.name, "error_pct": e}
                for r, e in sg_fit["best"]["loo"].items()]
    published_sglang = evaluate_published_sglang(a.data, gpus, sg_engine)
    out.update(runs=rows, summary=summarise(rows), published=published + PUBLISHED,
               published_sglang=published_sglang,
               vllm_pr12093=evaluate_vllm_pr12093(gpus, v0_engine if a.fit else None),
               vllm_v1_published=evaluate_vllm_v1_published(gpus),
               vllm_v1_published_latency=evaluate_vllm_v1_published_latency(gpus),
               vllm25915=evaluate_vllm25915(gpus), startup=STARTUP_NOTE)
    if a.write_summary:
        from tuner.predictors.aic import FIDELITY_FILE
        from tuner.predictors.aic_tables import data_dir

        if not a.fit:
            print("--write-summary needs --fit (the summary stores leave-one-out errors)",
                  file=sys.stderr)
            return 2
        loo_rows = [{"run": x["run"], "gpu": x["gpu"], "status": "ok", "engine": x["engine"],
                     "makespan_error_pct": x["error_pct"]} for x in out["leave_one_out"]]
        per_gpu = summarise(loo_rows)["per_gpu"]
        for g, v in per_gpu.items():  # the engine profile each GPU's runs check
            v["engine"] = next(x["engine"] for x in out["leave_one_out"] if x["gpu"] == g)
        if "v0_fit" in out:  # the decode step too, where the runs report their median ITL
            gpu_of = {r.name: r.gpu for r in v0_runs}
            by_gpu: dict[str, list[float]] = {}
            for name, e in out["v0_fit"]["best"]["loo_itl"].items():
                by_gpu.setdefault(gpu_of[name], []).append(abs(e))
            for g, errs in by_gpu.items():
                per_gpu[g].update(itl_runs=len(errs), itl_median_abs_pct=float(np.median(errs)),
                                  itl_worst_abs_pct=float(np.max(errs)))
        doc = {"what": "benchmarks/fidelity.py --fit: leave-one-out |predicted / measured "
                       "makespan - 1| per GPU (engine profile fitted on the other runs); "
                       "itl_*: the same for the median ITL where the runs report it",
               "engines": sorted({x["engine"] for x in out["leave_one_out"]}),
               "per_gpu": per_gpu,
               "runs": [{k: r[k] for k in ("run", "gpu", "engine", "makespan_error_pct")}
                        for r in loo_rows]}
        if out.get("sglang_leave_one_out"):  # SGLang's published figures, apart (sglang_*)
            sg_loo = [{"run": x["run"], "gpu": x["gpu"], "status": "ok", "engine": x["engine"],
                       "makespan_error_pct": x["error_pct"]} for x in out["sglang_leave_one_out"]]
            sg_gpu = summarise(sg_loo)["per_gpu"]
            for g, v in sg_gpu.items():
                v.update(engine=next(x["engine"] for x in sg_loo if x["gpu"] == g),
                         unit="published SGLang v0.3.0 figure(s)")
            doc["sglang_per_gpu"] = sg_gpu
            doc["sglang_runs"] = [{k: r[k] for k in ("run", "gpu", "engine",
                                                     "makespan_error_pct")} for r in sg_loo]
        doc["published_per_gpu"] = published_per_gpu(
            out["vllm_v1_published"] + out["vllm_v1_published_latency"] + out["vllm25915"],
            exclude=per_gpu)
        (data_dir() / FIDELITY_FILE).write_text(json.dumps(doc, indent=1) + "\n")
    if a.json:
        print(json.dumps(out, indent=1, default=float))
        return 0
    print(f"engine overhead (LLMServingSim runs): {engine.describe()}")
    print(f"engine overhead (A100 runs): {v0_engine.describe()}\n")
    print(f"{'run':<42} {'measured':>9} {'predicted':>9} {'error':>7}  {'KV blocks (sim/vLLM)':>21}  "
          "running |diff|  [ITL predicted/measured]")
    for r in rows:
        if r.get("status") != "ok":
            print(f"{r['run']:<42} {r['measured_makespan_s']:8.1f}s {'':>9} {'':>7}  {r['status']}")
            continue
        kv = (f"{r['kv_capacity_blocks']}/{r['measured_kv_blocks']} ({r['kv_error_pct']:+.1f} %)"
              if "measured_kv_blocks" in r else f"{r['kv_capacity_blocks']}/n.a.")
        run_diff = (f"{r['running_mean_abs_diff']:.1f} of {r['running_measured_mean']:.0f}"
                    + (" per replica" if r["dp"] > 1 else "")
                    if "running_mean_abs_diff" in r else "n.a.")
        itl = (f"  median ITL {1e3 * r['predicted_median_itl_s']:.0f}/"
               f"{1e3 * r['measured_median_itl_s']:.0f} ms ({r['itl_error_pct']:+.1f} %)"
               if "itl_error_pct" in r else "")
        itl += (f"  mean ITL {1e3 * r['predicted_mean_itl_s']:.1f}/"
                f"{1e3 * r['measured_mean_itl_s']:.1f} ms ({r['mean_itl_error_pct']:+.1f} %)"
                if "mean_itl_error_pct" in r else "")
        print(f"{r['run']:<42} {r['measured_makespan_s']:8.1f}s {r['predicted_makespan_s']:8.1f}s "
              f"{r['makespan_error_pct']:+6.1f}%  {kv:>21}  {run_diff}{itl}")
    s = out["summary"]
    print()
    for g, v in s["per_gpu"].items():
        print(f"{g:<14} runs {v['runs']}  median |error| {v['median_abs_pct']:.1f} %  "
              f"worst {v['worst_abs_pct']:.1f} %")
    if s["median_abs_pct"] is not None:
        print(f"{'all':<14} median |error| {s['median_abs_pct']:.1f} %  worst {s['worst_abs_pct']:.1f} %")
    itl = [abs(r["itl_error_pct"]) for r in rows if "itl_error_pct" in r]
    if itl:
        print(f"median ITL (gap between streamed chunks) of the {len(itl)} runs that report it: "
              f"median |error| {np.median(itl):.1f} %  worst {max(itl):.1f} %")
    for r in rows:
        if "mean_itl_error_pct" in r:
            print(f"mean ITL (per-request first to last token) {r['run']}: "
                  f"{r['mean_itl_error_pct']:+.1f} %")
    for r in rows:
        if r.get("status") == "ok":
            print(f"  {r['run']}: {r['provenance']}")
    if "v0_fit" in out:
        n_fit = len(out["v0_fit"]["best"]["loo"])
        print(f"\nV0 host terms fitted on the A100 runs and the published vLLM 0.6.0 figures "
              f"(leave-one-out over {n_fit} runs):")
        print("  makespan and median chunk gap (ITL) |error|, in-sample and leave-one-out")
        print(f"  {'terms':<44} {'fitted':<32} {'makespan: in / LOO med / worst':>31} "
              f"{'ITL: in / LOO med / worst':>26}")
        for t in out["v0_fit"]["table"]:
            name = " + ".join(t["terms"])
            if t["status"] != "ok":
                print(f"  {name:<44} {t['status']}")
                continue
            coef = ", ".join(term_value(k, v) for k, v in t["coef"].items())
            mark = "  <- kept" if t is out["v0_fit"]["best"] else ""
            itl = (f"{t['in_sample_itl_median_abs_pct']:5.1f} {t['loo_itl_median_abs_pct']:5.1f} "
                   f"{t['loo_itl_worst_abs_pct']:5.1f} %" if "loo_itl_median_abs_pct" in t else "")
            print(f"  {name:<44} {coef:<32} {t['in_sample_median_abs_pct']:13.1f} "
                  f"{t['loo_median_abs_pct']:5.1f} {t['loo_worst_abs_pct']:5.1f} % {itl:>26}{mark}")
        print(f"  kept: the lowest LOO makespan + ITL median, fewest terms within {PARSIMONY_PP} pp")
        for t, u in out["v0_fit"]["aliases"].items():
            print(f"  {t}: the same step feature as {u} on these runs (not separable; left out)")
    if "leave_one_out" in out:
        print("\nleave-one-out (profile fitted on the other runs):")
        for x in out["leave_one_out"]:
            print(f"  {x['run']:<40} {x['error_pct']:+6.1f} %  ({x['engine']}: {x['term']})")
        s_loo = summarise([{"gpu": x["gpu"], "status": "ok", "makespan_error_pct": x["error_pct"]}
                           for x in out["leave_one_out"]])
        for g, v in s_loo["per_gpu"].items():
            print(f"  {g:<14} runs {v['runs']}  leave-one-out median |error| "
                  f"{v['median_abs_pct']:.1f} %  worst {v['worst_abs_pct']:.1f} %")
    print(f"\nstart-up: {STARTUP_NOTE}")
    print("\npublished figures (rebuilt workloads; in the V0 host-term fit beside the A100 runs: "
          "their server ran with --disable-log-requests, which tells a request-log term "
          "apart where a set of terms has one" + ("; leave-one-out in the last column" if "published_loo" in out else "")
          + "):")
    print_published_table(published, out.get("published_loo"))
    for p in published:
        print(f"  {p['run']}: {p['what']} [{p['source']}]; {p['command']}")
        if p["status"] == "ok":
            print(f"    {p['config']}; engine {p['engine']}; {p['num_prompts']:,} requests, mean "
                  f"prompt {p['mean_prompt_tokens']:.1f}, mean output {p['mean_output_tokens']:.2f}"
                  f" tokens; makespan {p['predicted_makespan_s']:.1f} s predicted, "
                  f"{p['published_makespan_s']:.1f} s published (prompts / req/s); "
                  f"{p['preemptions']} preemptions")
            print(f"    {p['workload']}")
            print(f"    cost model: {p['provenance']}")
    for p in PUBLISHED:
        print(f"  {p['what']} [{p['source']}] -- {p['status']}")
    print_vllm_pr12093(out["vllm_pr12093"])
    print_vllm_v1_published(out["vllm_v1_published"], out["vllm_pr12093"])
    print_vllm_v1_published_latency(out["vllm_v1_published_latency"], out["vllm_v1_published"])
    print_vllm25915(out["vllm25915"], out["vllm_v1_published"] + out["vllm_v1_published_latency"])
    print_sglang(out)
    return 0


def print_published_table(rows: list[dict], loo: dict | None = None) -> None:
    """Published vs predicted req/s and output tok/s, a row per rebuilt figure (`loo`: run ->
    leave-one-out makespan error %, printed last)."""
    print(f"  {'run':<44} {'req/s pub':>9} {'pred':>7} {'error':>7}  {'out tok/s pub':>13} "
          f"{'pred':>7} {'error':>7}" + ("  LOO makespan" if loo else ""))
    for p in rows:
        if p["status"] != "ok":
            print(f"  {p['run']:<44} {p['published_req_s']:9.2f} {'':>7} {'':>7}  "
                  f"{p['published_output_tok_s']:13.2f}  {p['status']}")
            continue
        print(f"  {p['run']:<44} {p['published_req_s']:9.2f} {p['predicted_req_s']:7.2f} "
              f"{p['req_s_error_pct']:+6.1f}%  {p['published_output_tok_s']:13.2f} "
              f"{p['predicted_output_tok_s']:7.0f} {p['output_tok_s_error_pct']:+6.1f}%"
              + (f"  {loo[p['run']]:+11.1f}%" if loo and p["run"] in loo else ""))


def print_sglang(out: dict) -> None:
    """The SGLang part of the report: SGLang's own published figures and (--fit) the fit."""
    rows = out["published_sglang"]
    fitted = "sglang_fit" in out
    print("\nSGLang's own published figures (SGLang v0.3.0, rebuilt workloads, simulated as "
          "SGLang; engine profile sglang-v0.3, " + ("refitted here" if fitted else "shipped")
          + ", fitted on these two figures: in-sample):")
    print_published_table(rows)
    for p in rows:
        print(f"  {p['run']}: {p['what']} [{p['source']}]; {p['command']}")
        if p["status"] == "ok":
            print(f"    {p['config']}; engine {p['engine']}; {p['num_prompts']:,} requests, mean "
                  f"prompt {p['mean_prompt_tokens']:.1f}, mean output "
                  f"{p['mean_output_tokens']:.2f} tokens; KV pool {p['kv_capacity_tokens']:,} "
                  f"tokens; makespan {p['predicted_makespan_s']:.1f} s predicted, "
                  f"{p['published_makespan_s']:.1f} s published (prompts / req/s); "
                  f"{p['iterations']:,} steps, {p['preemptions']} retractions")
            print(f"    cost model: {p['provenance']}")
    if not fitted:
        return
    fit = out["sglang_fit"]
    print("\nSGLang v0.3 host terms fitted on its two published figures (one term at most; "
          "leave-one-out: each figure predicted by the term fitted on the other; makespan "
          "errors, the req/s error is their inverse):")
    print(f"  {'term':<20} {'fitted':<14} {'in-sample med/worst':>20} {'LOO med/worst':>16}  "
          "per figure (in-sample / LOO)")
    for t in fit["table"]:
        name = " + ".join(t["terms"]) or "none (GPU time only)"
        if t["status"] != "ok":
            print(f"  {name:<20} {t['status']}")
            continue
        coef = ", ".join(term_value(k, v) for k, v in t["coef"].items()) or "-"
        per = "; ".join(f"{r.split('_')[1]} {t['in_sample'][r]:+.1f} / {t['loo'][r]:+.1f} %"
                        for r in t["in_sample"])
        mark = "  <- kept" if t is fit["best"] else ""
        print(f"  {name:<20} {coef:<14} {t['in_sample_median_abs_pct']:9.1f}% / "
              f"{t['in_sample_worst_abs_pct']:5.1f}% {t['loo_median_abs_pct']:7.1f}% / "
              f"{t['loo_worst_abs_pct']:5.1f}%  {per}{mark}")
    for t, u in fit["aliases"].items():
        print(f"  {t}: the same step feature as {u} on these runs (not separable; left out)")


if __name__ == "__main__":
    raise SystemExit(main())
