#!/usr/bin/env bash
# On a lent GPU machine (the `device` tool): profile the GPU, search a small job, run the
# winners through real vLLM with per-request timings (`tuner validate`, LLM.generate), run the
# OpenAI API server under `vllm bench serve` (every request at t = 0), and keep everything under
# $OUT in the forms the fidelity suite reads. Budget: <= 40 min on one H100 or H200 (the model weights
# must be in the local Hugging Face cache or at MODEL_PATH: the machine reaches no hub).
#
#   OUT=/path bash benchmarks/on_gpu.sh            (MODEL, HF_MODEL, GPU, MODEL_PATH may be set)
#   DRY_RUN=1 OUT=/tmp/x bash benchmarks/on_gpu.sh (print the steps, run nothing: CI checks it)
#
# Afterwards: `python benchmarks/fidelity.py --data $OUT/fidelity` re-simulates the API-server
# runs (run-index form, benchmarks/bench_to_index.py); $OUT/search-with-validation holds the
# LLM.generate runs (`tuner calibrate --runs .../validation.json`).
#
# Not yet run on a GPU (no device was lent to the sessions that wrote it); every step logs to
# $OUT/*.log and a failed step does not stop the ones after it.
set -uo pipefail
OUT=${OUT:?set OUT to a folder}
MODEL=${MODEL:-llama-3-8b}          # tuner's catalog name (the shape)
HF_MODEL=${HF_MODEL:-meta-llama/Meta-Llama-3-8B}
MODEL_PATH=${MODEL_PATH:-}          # a local checkpoint folder, when the weights are there
GPU=${GPU:-}                        # the catalog GPU the machine is (default: detected)
DRY_RUN=${DRY_RUN:-}
PORT=${PORT:-8011}
cd "$(dirname "$0")/.."
mkdir -p "$OUT"

run() {  # run COMMAND...: execute, or print it under DRY_RUN
    if [ -n "$DRY_RUN" ]; then echo "+ $*"; else "$@"; fi
}
step() {  # step NAME TIMEOUT_S COMMAND...: run one step, log it, keep going on failure
    local name=$1 limit=$2; shift 2
    echo "== $name"
    if [ -n "$DRY_RUN" ]; then echo "+ timeout $limit $*"; return 0; fi
    timeout "$limit" "$@" > "$OUT/$name.log" 2>&1
    echo "   exit $? ($name.log)"
}

run nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1 || true
if [ -z "$DRY_RUN" ]; then
    python -m venv .venv-gpu && . .venv-gpu/bin/activate
    pip install --quiet -e ".[test,profile,validate]" > "$OUT/install.log" 2>&1 || {
        echo "install failed: see $OUT/install.log" >&2; exit 1; }
fi
if [ -z "$GPU" ] && [ -n "$DRY_RUN" ]; then
    GPU=H100  # a dry run has no device to ask
elif [ -z "$GPU" ]; then
    # the lent machine's GPU (an H100 or an H200 so far) as the catalog names it
    GPU=$(python - <<'PY'
import subprocess
from tuner.core.catalog import load_gpus
from tuner.predictors.devices import match_gpu
line = subprocess.check_output(["nvidia-smi", "--query-gpu=name,memory.total",
                                "--format=csv,noheader,nounits"], text=True).splitlines()[0]
name, mib = (p.strip() for p in line.rsplit(",", 1))
print(match_gpu(name, float(mib) * 2**20, load_gpus()) or "")
PY
)
    [ -n "$GPU" ] || { echo "no catalog GPU matches this device (nvidia-smi.txt): set GPU=" >&2; exit 1; }
    echo "GPU: $GPU"
fi
CKPT=${MODEL_PATH:-$HF_MODEL}

# 1. the GPU's own kernels and transfers (~10 min)
step profile 900 tuner profile --model "$MODEL" --device cuda --out "$OUT/profile"
step fit 300 tuner fit "$OUT/profile"
# 2. a search on the shipped example, priced by the measured profile (~1 min)
step search 600 tuner search --workload examples/arxiv.jsonl --model "${MODEL_PATH:-$MODEL}" \
    --gpus "$GPU" --max-gpus 1 --profile "$OUT/profile" --out "$OUT/search" --json
# 3. the winners on real vLLM (LLM.generate): per-request timings, predicted vs measured (~15 min)
step validate 1500 tuner validate --out "$OUT/search" --top 2 --runner vllm
run cp -r "$OUT/search" "$OUT/search-with-validation" 2>/dev/null || true
# 4. the OpenAI API server, every request at t = 0 (~8 min): two batch sizes, as a user's
#    `vllm bench serve` would, kept in the run-index form and replayed by tuner
SERVE_ARGS=(--port "$PORT" --max-num-seqs 256 --max-num-batched-tokens 8192
            --gpu-memory-utilization 0.9 --max-model-len 4096)
VLLM_VERSION=$(python -c 'import vllm; print(vllm.__version__)' 2>/dev/null || echo unknown)
if [ -n "$DRY_RUN" ]; then
    echo "+ vllm serve $CKPT ${SERVE_ARGS[*]} &"
else
    vllm serve "$CKPT" "${SERVE_ARGS[@]}" > "$OUT/serve.log" 2>&1 &
    SERVER=$!
    for _ in $(seq 1 120); do  # up to 10 min for the weights and graphs
        curl -sf "http://localhost:$PORT/health" > /dev/null && break
        sleep 5
    done
fi
for N in 400 1600; do
    step "bench_$N" 900 vllm bench serve --model "$CKPT" --port "$PORT" --dataset-name random \
        --random-input-len 512 --random-output-len 256 --num-prompts "$N" --request-rate inf \
        --ignore-eos --save-result --result-dir "$OUT/bench" --result-filename "serve_$N.json"
    step "index_$N" 60 python benchmarks/bench_to_index.py "$OUT/bench/serve_$N.json" \
        --out "$OUT/fidelity/$GPU-serve" --gpu "$GPU" --model "$MODEL" --hf-model "$HF_MODEL" \
        --max-num-seqs 256 --max-num-batched-tokens 8192 --gpu-memory-utilization 0.9 \
        --vllm-version "$VLLM_VERSION"
    step "replay_$N" 120 tuner replay "$OUT/bench/serve_$N.json" -m "$MODEL" -g "$GPU" \
        --engine-version "$VLLM_VERSION" --entry-point serve --max-num-seqs 256 \
        --max-num-batched-tokens 8192 --json
done
if [ -z "$DRY_RUN" ]; then kill "$SERVER" 2>/dev/null || true; fi
step fidelity 600 python benchmarks/fidelity.py --data "$OUT/fidelity" --json
echo "done: $OUT"
