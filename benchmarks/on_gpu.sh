#!/usr/bin/env bash
# On a lent GPU machine (the `device` tool): profile the GPU, search a small job, run the
# winners through real vLLM with per-request timings (`tuner validate`), and keep everything
# under $OUT for the fidelity suite. Budget: <= 40 min on one H100 (the model weights must be in
# the local Hugging Face cache or at MODEL_PATH: the machine reaches no hub).
#
#   OUT=/path bash benchmarks/on_gpu.sh            (MODEL, GPU, MODEL_PATH may be set)
#
# Not yet run on a GPU (no device was lent to the session that wrote it); every step logs to
# $OUT/*.log and a failed step does not stop the ones after it.
set -uo pipefail
OUT=${OUT:?set OUT to a folder}
MODEL=${MODEL:-llama-3-8b}          # tuner's catalog name (the shape)
MODEL_PATH=${MODEL_PATH:-}          # a local checkpoint folder, when the weights are there
GPU=${GPU:-H100}                    # the catalog GPU the machine is
cd "$(dirname "$0")/.."
mkdir -p "$OUT"
nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1 || true

python -m venv .venv-gpu && . .venv-gpu/bin/activate
pip install --quiet -e ".[test,profile,validate]" > "$OUT/install.log" 2>&1 || {
    echo "install failed: see $OUT/install.log" >&2; exit 1; }

step() {  # step NAME TIMEOUT_S COMMAND...: run one step, log it, keep going on failure
    local name=$1 limit=$2; shift 2
    echo "== $name"
    timeout "$limit" "$@" > "$OUT/$name.log" 2>&1
    echo "   exit $? ($name.log)"
}

# 1. the GPU's own kernels and transfers (~10 min)
step profile 900 tuner profile --model "$MODEL" --device cuda --out "$OUT/profile"
step fit 300 tuner fit "$OUT/profile"
# 2. a search on the shipped example, priced by the measured profile (~1 min)
step search 600 tuner search --workload examples/arxiv.jsonl --model "${MODEL_PATH:-$MODEL}" \
    --gpus "$GPU" --max-gpus 1 --profile "$OUT/profile" --out "$OUT/search" --json
# 3. the winners on real vLLM: per-request timings, predicted vs measured (~15 min)
step validate 1500 tuner validate --out "$OUT/search" --top 2 --runner vllm
cp -r "$OUT/search" "$OUT/search-with-validation" 2>/dev/null || true
echo "done: $OUT"
