"""Weight offload as vLLM runs it against LM-Offload's prefetched stream (stop 54).

    python benchmarks/weight_offload_schemes.py [--model llama-3-8b] [--gpu A10]

vLLM's --cpu-offload-gb keeps whole first layers in host memory and prefetches nothing: before
0.8.4 each such layer is copied to the GPU before its forward (vllm-project/vllm#6496), from
0.8.4 its kernels read it over the link (UVA, vllm-project/vllm#15354). tuner priced every
weight offload as FlexGen / LM-Offload's stream (a share of every layer, loaded behind the
previous layer's compute, LM-Offload Eq. 2) until stop 54. This prints the three on
examples/arxiv.jsonl, without start-up: the stream (forced, as tuner priced a vLLM plan
before), vLLM's UVA (the newest release) and vLLM's copies (0.6.0, V0 engine and its host
terms, so its makespan differs by more than the offload). No GPU run measures any of them here.
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from tuner.core.catalog import get_gpu, get_model, load_gpus
from tuner.core.config import ServingConfig
from tuner.core.workload import load_workload
from tuner.predictors.sources import resolve_cost_model
from tuner.sim import offload
from tuner.sim.simulator import simulate

REPO = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="llama-3-8b")
    ap.add_argument("--gpu", default="A10")
    ap.add_argument("--workload", default=str(REPO / "examples" / "arxiv.jsonl"))
    args = ap.parse_args()
    wl = load_workload(args.workload)
    model, gpu = get_model(args.model), get_gpu(args.gpu, load_gpus())
    built = offload.OffloadContext.build

    def run(cfg: ServingConfig, engine_version: str | None, force_stream: bool):
        def build(*a, **kw):  # the stream, with vLLM's memory plan (no buffer difference here)
            ctx = built(*a, **kw)
            return dataclasses.replace(ctx, weight_scheme="prefetch") if force_stream else ctx

        offload.OffloadContext.build = build  # type: ignore[method-assign]
        try:
            return simulate(wl, model, gpu, cfg, resolve_cost_model(model, gpu, cfg),
                            startup_s=0, engine_version=engine_version)
        finally:
            offload.OffloadContext.build = built  # type: ignore[method-assign]

    print(f"{args.model} on {args.gpu}, {len(wl):,} requests of {Path(args.workload).name}, "
          "no start-up")
    print(f"{'offloaded':>9}  {'priced as':<34} {'makespan s':>10} {'weight stall s':>14} "
          f"{'KV tokens':>10}")
    for wf in (0.1, 0.25, 0.5):
        for label, version, stream in (("LM-Offload stream (before stop 54)", None, True),
                                       ("vLLM UVA (newest)", None, False),
                                       ("vLLM copies (0.6.0, V0)", "0.6.0", False)):
            cfg = ServingConfig(gpu=gpu.name, weight_offload_fraction=wf,
                                scheduler="vllm-v0" if version else "vllm")
            r = run(cfg, version, stream)
            print(f"{wf:>9.0%}  {label:<34} {r.makespan_s:>10.1f} "
                  f"{r.offload['weight_stall_s']:>14.1f} {r.offload['kv_capacity_tokens']:>10,}")


if __name__ == "__main__":
    main()
