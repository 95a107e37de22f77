"""Kernel tables across GPUs: the spec-sheet transfer rule of the measured-table cost model.

A GPU without measured tables (predictors.aic_tables) is priced from the measured GPU of its
architecture (`GPU.architecture` in tuner/core/data/gpus.yaml, or a --gpu-file's), through
spec-sheet ratios: each kernel's measured time is multiplied by
roofline(target) / roofline(source) at that kernel's own FLOPs and bytes, so a memory-bound
decode GEMM scales with HBM bandwidth and a compute-bound prefill GEMM with tensor FLOP/s;
collectives keep the source's latency floor and scale the time above it by the interconnect
bandwidth ratio. A GPU with no architecture (or one without a measured GPU) gets no tables:
the caller falls back to the roofline. The same rule applied between two measured GPUs gives
its error (predictors.aic.transfer_check).

Here: the rule itself (plain numpy on duck-typed GPUs); KernelTables applies it at every
lookup of a transferred table.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

# GPU architecture (tuner.core.catalog.ARCHITECTURES) -> the measured GPU (a catalog name in
# predictors.aic_tables.MEASURED) whose tables a GPU of that architecture without its own is
# transferred from. In the shipped catalog: A100-40G (GA100, as the A100-80G), A10 and A40
# (GA102) from the A100-80G; L4 (AD104) and RTX4090 (AD102) from the L40S (AD102)
TRANSFER_SOURCE = {"ampere": "A100-80G", "ada": "L40S", "hopper": "H100",
                   "blackwell": "RTX-PRO-6000"}


def transfer_source(gpu) -> str | None:
    """The measured GPU a GPU (duck-typed tuner GPU) without tables is transferred from: the one
    of its architecture; None where it states none (or no GPU of it is measured)."""
    arch = getattr(gpu, "architecture", None)
    return TRANSFER_SOURCE.get(arch) if arch else None


def spec_peaks(gpu) -> dict:
    """Spec-sheet peaks of a tuner GPU (duck-typed) as the transfer rule uses them."""
    bf16 = gpu.bf16_tflops * 1e12
    fp8 = (getattr(gpu, "fp8_tflops", None) or 0.0) * 1e12 or bf16
    return {"flops": {"bf16": bf16, "fp8": fp8}, "bw": gpu.hbm_gbps * 1e9,
            "link": (getattr(gpu, "nvlink_gbps", None) or gpu.host_link_gbps) * 1e9}


def transfer_tables(source, source_gpu, target_gpu):
    """`source`'s tables (a predictors.aic_tables.KernelTables) re-priced for `target_gpu`
    (both GPUs duck-typed tuner GPUs): the same tables with the rule's ratios attached."""
    s, t = spec_peaks(source_gpu), spec_peaks(target_gpu)
    tr = {"source": source.gpu, "src_flops": s["flops"], "dst_flops": t["flops"],
          "src_bw": s["bw"], "dst_bw": t["bw"], "link_ratio": s["link"] / t["link"]}
    return replace(source, gpu=target_gpu.name, transfer=tr)


def roof_ratio(tr: dict, flops, byts, dtype: str):
    """roofline time on the target / on the source for kernels of these FLOPs and bytes
    (`tr`: a transferred table's `transfer`)."""
    fs, ft = tr["src_flops"][dtype], tr["dst_flops"][dtype]
    return (np.maximum(flops / ft, byts / tr["dst_bw"])
            / np.maximum(flops / fs, byts / tr["src_bw"]))


def scale_link(t: np.ndarray, link_ratio: float) -> np.ndarray:
    """A transferred collective: the latency floor (the table's fastest call) kept, the time
    above it scaled by the interconnect bandwidth ratio (source / target)."""
    floor = float(t.min())
    return floor + (t - floor) * link_ratio
