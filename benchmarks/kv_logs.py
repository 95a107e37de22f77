"""tuner's KV-cache budget against vLLM's own start-up logs.

    python benchmarks/kv_logs.py

vLLM prints, at start-up, the memory it leaves for the KV cache ("the rest of the memory reserved
for KV Cache is X GiB" in V0, "Available KV cache memory: X GiB" in V1, or the block count). The
rows below are facts read from public logs (each row names where): the GPU's total as that log
reports it, the model, the settings it states, and the figure. Settings a log does not state
take that release's default for the stated entry point, and the row says so. tuner's memory plan
(tuner.core.memory.plan_memory under that release) is compared with the figure.

Which rows are in-sample: the V1 sort-path sampler's 38.5 bytes per logit was read off the
llm-d rows' activation figures, so their KV is not an independent check of that term; the RTX 4090
row (../shared/fidelity/llmservingsim) is the run whose reported blocks showed that vLLM 0.19
counts its CUDA-graph probes. The others check the model out of sample.
"""

from __future__ import annotations

import dataclasses
import json
import statistics
import sys
from pathlib import Path

from tuner.core.catalog import GIB, get_model, load_gpus
from tuner.core.config import ServingConfig
from tuner.core.memory import plan_memory

HERE = Path(__file__).resolve().parent
SHARED = HERE.parent.parent / "shared" / "fidelity" / "llmservingsim"

#: name, where, catalog model, catalog GPU its architecture stands for, the log's CUDA total
#: (GiB), vLLM release, tp, gpu_memory_utilization, max_num_batched_tokens, max_num_seqs, the
#: logged KV GiB, what was assumed, in-sample
LOGS: list[dict] = [
    {"name": "Llama-3-8B, H100, V0", "where": "vllm-project/vllm#10511 (PR description log)",
     "model": "llama-3-8b", "gpu": "H100", "total_gib": 79.22, "version": "0.6.4", "tp": 1,
     "util": 0.90, "tokens": 8192, "seqs": 256, "kv_gib": 53.29,
     "assumed": "release ~0.6.4 (PR date); max_model_len 8192 -> V0 budget 8,192; 256 seqs (V0 default)"},
    {"name": "Llama-3.1-8B-Instruct, H100, vllm serve", "where":
     "llm-d/llm-d-benchmark config_explorer/empirical-vllm-memory-results.md @4f4d449",
     "model": "llama-3.1-8b", "gpu": "H100", "total_gib": 79.18, "version": "0.11.0", "tp": 1,
     "util": 0.90, "tokens": 8192, "seqs": 1024, "kv_gib": 51.38, "in_sample": True,
     "assumed": "vllm serve defaults on an H100 (8,192 tokens, 1,024 seqs); release 0.11 (as the doc's Mistral row states)"},
    {"name": "Qwen3-32B, H100, vllm serve", "where": "llm-d (as above)", "model": "qwen3-32b",
     "gpu": "H100", "total_gib": 79.18, "version": "0.11.0", "tp": 1, "util": 0.90,
     "tokens": 8192, "seqs": 1024, "kv_gib": 4.45, "in_sample": True,
     "assumed": "as above"},
    {"name": "Qwen3-32B TP2, H100, vllm serve", "where": "llm-d (as above)",
     "model": "qwen3-32b", "gpu": "H100", "total_gib": 79.18, "version": "0.11.0", "tp": 2,
     "util": 0.90, "tokens": 8192, "seqs": 1024, "kv_gib": 34.49, "in_sample": True,
     "assumed": "as above"},
    {"name": "Llama-3.1-8B-Instruct, RTX 3090, V0, max_model_len 20000",
     "where": "vllm-project/vllm#10517", "model": "llama-3.1-8b", "gpu": "A10",
     "total_gib": 23.58, "version": "0.6.4", "tp": 1, "util": 0.90, "tokens": 20000,
     "seqs": 256, "kv_gib": 3.81,
     "assumed": "release ~0.6.4 (issue date); V0 budget = max_model_len; 256 seqs; an Ampere 24 GB card"},
    {"name": "Llama-3.1-8B-Instruct, RTX 3090, V0, max_model_len 29000",
     "where": "vllm-project/vllm#10517", "model": "llama-3.1-8b", "gpu": "A10",
     "total_gib": 23.58, "version": "0.6.4", "tp": 1, "util": 0.90, "tokens": 29000,
     "seqs": 256, "kv_gib": 2.89, "assumed": "as above"},
    {"name": "Qwen2-7B-Instruct, A100 80GB, util 0.5", "where":
     "dennislee22/vLLM-benchmarking log/vllm-7B-1gpuA10080GB-0.5GRAM.log @608c86e",
     "model": "qwen2.5-7b", "gpu": "A100-80G", "total_gib": 79.25, "version": "0.10.1",
     "tp": 1, "util": 0.50, "tokens": 2048, "seqs": 256, "kv_gib": 24.83,
     "assumed": "Qwen2.5-7B's shape (Qwen2-7B's: 28 layers, 3,584 hidden, 152,064 vocabulary); 256 seqs (vllm serve default on an A100); the A100-80G's total; the sort-path sampler (with FlashInfer installed 0.10 samples through it and reserves less: the log's 0.56 GiB of activations + non-torch fits that)"},
    {"name": "Qwen2-7B-Instruct, A100 80GB, util 0.25", "where":
     "dennislee22/vLLM-benchmarking log/vllm-7B-1gpuA10080GB-0.25GRAM.log @391660d",
     "model": "qwen2.5-7b", "gpu": "A100-80G", "total_gib": 79.25, "version": "0.10.1",
     "tp": 1, "util": 0.25, "tokens": 2048, "seqs": 256, "kv_gib": 5.01, "assumed": "as above"},
]


def llmservingsim_row() -> dict | None:
    """The RTX 4090 run's reported blocks (../shared/fidelity/llmservingsim), where present."""
    meta_path = SHARED / "RTX4090_Llama-3.1-8B" / "meta.json"
    if not meta_path.is_file():
        return None
    meta = json.loads(meta_path.read_text())
    kw, kv, hw = meta["engine_kwargs"], meta["kv_cache"], meta["hardware"]
    block_bytes = kv["block_size"] * get_model("llama-3.1-8b").kv_bytes_per_token(16)
    return {"name": "Llama-3.1-8B, RTX 4090, LLM (LLMServingSim run)",
            "where": "../shared/fidelity/llmservingsim/RTX4090_Llama-3.1-8B/meta.json",
            "model": "llama-3.1-8b", "gpu": "RTX4090",
            "total_gib": hw["device_total_memory_bytes"] / GIB,
            "version": meta["vllm_version"], "tp": kw["tensor_parallel_size"],
            "util": kv["gpu_memory_utilization"], "tokens": kw["max_num_batched_tokens"],
            "seqs": kw["max_num_seqs"], "kv_gib": kv["num_gpu_blocks"] * block_bytes / GIB,
            "in_sample": True, "assumed": "none (the run's resolved config)"}


def predict(row: dict, gpus: dict | None = None) -> float:
    """tuner's KV budget (GiB) for a row: the plan's KV bytes before rounding to blocks."""
    gpus = gpus or load_gpus()
    gpu = dataclasses.replace(gpus[row["gpu"]], memory_gib=row["total_gib"])
    config = ServingConfig(gpu=gpu.name, tp=row["tp"], chunk_size=row["tokens"],
                           max_running=row["seqs"], gpu_memory_utilization=row["util"])
    return plan_memory(get_model(row["model"]), gpu, config,
                       engine_version=row["version"]).kv_bytes / GIB


def rows_with_predictions() -> list[dict]:
    gpus = load_gpus()
    rows = list(LOGS)
    extra = llmservingsim_row()
    if extra:
        rows.append(extra)
    out = []
    for r in rows:
        p = predict(r, gpus)
        out.append({**r, "predicted_gib": p, "error": p / r["kv_gib"] - 1.0})
    return out


def main() -> int:
    rows = rows_with_predictions()
    print(f"{'row':58} {'vLLM':>7} {'logged':>8} {'tuner':>8} {'error':>8}")
    for r in rows:
        tag = " (in-sample)" if r.get("in_sample") else ""
        print(f"{r['name'][:58]:58} {r['version']:>7} {r['kv_gib']:7.2f}G {r['predicted_gib']:7.2f}G "
              f"{100 * r['error']:+7.1f}%{tag}")
        print(f"    {r['where']}; assumed: {r['assumed']}")
    out = [abs(r["error"]) for r in rows if not r.get("in_sample")]
    every = [abs(r["error"]) for r in rows]
    print(f"median |error|: {100 * statistics.median(every):.1f} % over {len(every)} rows; "
          f"out of sample {100 * statistics.median(out):.1f} % (worst {100 * max(out):.1f} %) "
          f"over {len(out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
