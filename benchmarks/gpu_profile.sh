#!/usr/bin/env bash
# The short device check (<= 8 min on one H100, no network, no vLLM): measure a model's
# operators and host<->device copies with `tuner profile` on the lent GPU, using the machine's
# own PyTorch, and keep the profile under $OUT so it can ship in predictors/data and be compared
# with the kernel tables tuner prices that GPU with (benchmarks/profile_vs_tables.py).
#
#   OUT=/path bash benchmarks/gpu_profile.sh     (MODEL may be set; default llama-3-8b;
#                                                 COPY_LIMIT_S=0 skips the copies)
#   DRY_RUN=1 OUT=/tmp/x bash benchmarks/gpu_profile.sh
#
# The machine has PyTorch but not tuner's other dependencies' exact versions: typer, click and
# rich travel as wheels in .whl/ (`pip download --no-deps ... -d .whl typer click rich`) and are
# put first on PYTHONPATH with tuner itself. vLLM itself cannot travel (its wheel alone is over the 64 MiB a call
# carries), which is why the full check, benchmarks/on_gpu.sh, needs a machine with a network.
set -uo pipefail
OUT=${OUT:?set OUT to a folder}
MODEL=${MODEL:-llama-3-8b}
DRY_RUN=${DRY_RUN:-}
OPS_LIMIT_S=${OPS_LIMIT_S:-300}
COPY_LIMIT_S=${COPY_LIMIT_S:-120}
cd "$(dirname "$0")/.."
mkdir -p "$OUT"
PROFILE="$OUT/profile-$MODEL"

step() {  # step NAME TIMEOUT_S COMMAND...: run one step, log it, keep going on failure
    local name=$1 limit=$2; shift 2
    echo "== $name"
    if [ -n "$DRY_RUN" ]; then echo "+ timeout $limit $*"; return 0; fi
    timeout "$limit" "$@" > "$OUT/$name.log" 2>&1
    echo "   exit $? ($name.log)"; tail -3 "$OUT/$name.log"
}

if [ -z "$DRY_RUN" ]; then
    # tuner's installed layout (pyproject's package-dir) without pip: the sub-packages that
    # live at the top of the checkout go under tuner/ (no build step, no network).
    SITE=/tmp/tuner-site
    rm -rf "$SITE" && mkdir -p "$SITE" && cp -r tuner "$SITE/tuner" || exit 1
    for sub in predictors profilers runners reports search_spaces; do
        cp -r "$sub" "$SITE/tuner/$sub" || exit 1
    done
    if ls .whl/*.whl > /dev/null 2>&1; then
        python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
            --target "$SITE" .whl/*.whl || exit 1
    fi
    export PYTHONPATH=$SITE
    cd "$SITE"  # `python -m` puts the working folder first: the checkout's tuner/ would shadow
    nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1 || true
    python3 -c 'import torch; print("torch", torch.__version__, torch.cuda.get_device_name(0))'
fi
# Operators first (what the simulator's step time is made of), then the copies (offloading).
# A step cut by its limit keeps every row it wrote: the profile resumes where it stopped.
step "profile_ops_$MODEL" "$OPS_LIMIT_S" python3 -m tuner.cli profile --model "$MODEL" --device cuda \
    --only linear,elementwise,lm_head,attention --out "$PROFILE"
[ "$COPY_LIMIT_S" = 0 ] || step profile_copy "$COPY_LIMIT_S" python3 -m tuner.cli profile --model "$MODEL" --device cuda \
    --only copy --out "$PROFILE"
