"""This machine's CPU as a 'GPU' catalog entry, so the simulator can plan and price CPU runs.

    python -m runners.cpu_device --out cpu.yaml [--name CPU] [--kv-mib 8]

writes a ``--gpu-file`` YAML (same fields as ``tuner gpus --json``). What the simulator needs
of a device is its memory (for the memory plan -> KV capacity) and its peaks (for the roofline,
only used where no profile applies; a CPU profile replaces them with measured rates). For a
CPU run the engine's KV cache is set to exactly the memory plan's KV bytes (runners/vllm.py),
so ``memory_gib`` is chosen to leave ``kv_mib`` MiB of KV cache after the plan's runtime
overhead (tuner.core.memory.runtime_overhead_bytes at TP 1, no CUDA graphs): a small KV
cache makes large R_max configurations preempt, as on a GPU. One device a machine
(``gpus_per_machine: 1``): a search's default space then holds TP 1 plans only.

Peaks are rough estimates from the core count (AVX-512: 32 BF16 FLOP/cycle/core at ~2.5 GHz;
~10 GB/s of memory bandwidth per core), marked as such in ``notes``; the price is nominal.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import yaml

from tuner.core.catalog import GIB
from tuner.core.config import ServingConfig
from tuner.core.host import cpu_name
from tuner.core.memory import runtime_overhead_bytes


def _meminfo_gib() -> float:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) / 1024**2
    except (OSError, ValueError, IndexError):
        pass
    return 16.0


def cpu_entry(*, kv_mib: float = 64.0, utilization: float = 0.9, price_usd_per_h: float = 0.1,
              cores: int | None = None) -> dict:
    """GPU-catalog fields for this machine's CPU (see the module docstring)."""
    cores = cores or os.cpu_count() or 1
    # usable = memory x utilisation must cover the runtime overhead + the KV + a little for
    # weights and activations of a tiny model (the memory plan subtracts those exactly).
    runtime_gib = runtime_overhead_bytes(ServingConfig(gpu="CPU"), cuda_graphs=False) / GIB
    memory_gib = (runtime_gib + (kv_mib + 8.0) / 1024.0) / utilization
    return {
        "memory_gib": round(memory_gib, 6),
        "bf16_tflops": round(cores * 2.5e9 * 32 / 1e12, 3),
        "fp32_tflops": round(cores * 2.5e9 * 32 / 1e12, 3),
        "hbm_gbps": float(10 * cores),
        "pcie_gen": 4,
        "host_link_gbps": float(10 * cores),
        "host_ram_gib": round(_meminfo_gib(), 1),
        "cpu_cores": int(cores),
        # one device a machine: the catalog's default (8) would make the default space offer
        # TP 2..8 and pipeline stages over "machines" of CPUs, none of which a CPU run has
        "gpus_per_machine": 1,
        "tdp_w": float(15 * cores),
        "price_usd_per_h": float(price_usd_per_h),
        "price_source": "nominal price for a CPU test device (not a quote)",
        "price_date": "",
        "notes": (f"This machine's CPU ({cpu_name()}, {cores} cores) as a device for CPU "
                  "validation runs. memory_gib leaves ~{:g} MiB of KV cache after the memory "
                  "plan's runtime overhead; peaks are estimates from the core count, "
                  "not measurements (a CPU profile replaces them).").format(kv_mib),
    }


def write_cpu_gpu_file(path: str | Path, *, name: str = "CPU", **kw) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump({"gpus": {name: cpu_entry(**kw)}}, sort_keys=False))
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--name", default="CPU")
    ap.add_argument("--kv-mib", type=float, default=64.0)
    ap.add_argument("--price", type=float, default=0.1)
    a = ap.parse_args(argv)
    print(write_cpu_gpu_file(a.out, name=a.name, kv_mib=a.kv_mib, price_usd_per_h=a.price))
    return 0


if __name__ == "__main__":
    sys.exit(main())
