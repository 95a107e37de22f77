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

Tensor FLOP/s enter as what a GPU achieves, not its spec sheet (`achievable_fraction`): the
source's fraction of its spec is read off its own tables (the 90th percentile of its measured
large-GEMM throughput; within 8 % of the public MAMF benchmark on the five measured GPUs it
covers, RESULTS.md), the target's is the median fraction of the measured
GPUs (a GPU with the source's spec, the same chip at the same clocks, keeps the source's).
Spec ratios alone carried a power-capped source's shortfall to every target: the L40S reaches
0.74 of its 362 TF, the A100 0.94; the rule's prefill error over the measured pairs fell from
11.9 to 10.4 % (median, Llama-3-8B shapes; worst 27 -> 18 %).

Here: the rule itself (plain numpy on duck-typed GPUs); KernelTables applies it at every
lookup of a transferred table.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

# GPU architecture (tuner.core.catalog.ARCHITECTURES) -> the measured GPU (a catalog name in
# predictors.aic_tables.MEASURED) whose tables a GPU of that architecture without its own is
# transferred from. In the shipped catalog: A100-40G (GA100, as the A100-80G), A10 and A40
# (GA102) from the A100-80G; L4 (AD104) and RTX4090 (AD102) from the L40S (AD102); a
# Blackwell GPU by its compute capability (TRANSFER_SOURCE_BY_CC below)
TRANSFER_SOURCE = {"ampere": "A100-80G", "ada": "L40S", "hopper": "H100",
                   "blackwell": "RTX-PRO-6000"}
# Blackwell is two chip families the engines run apart: the data-centre parts (compute
# capability 10.x: B200, B300, GB200; tcgen05 GEMMs, FlashInfer trtllm attention) and the
# workstation GB202 (12.0: RTX PRO 6000; FA2 attention). The rule measured between them
# (predictors/data/aic/transfer_checks.json, Llama-3-8B): from the B200 to the B300 and GB200
# 1.5 and 3.3 % (median), from the RTX PRO 6000 13.2 and 18.6 %. (architecture, major) -> source
TRANSFER_SOURCE_BY_CC = {("blackwell", 10): "B200", ("blackwell", 12): "RTX-PRO-6000"}


def transfer_source(gpu) -> str | None:
    """The measured GPU a GPU (duck-typed tuner GPU) without tables is transferred from: the one
    of its architecture (of its compute capability's major where TRANSFER_SOURCE_BY_CC names
    one); None where it states none (or no GPU of it is measured)."""
    arch = getattr(gpu, "architecture", None)
    if not arch:
        return None
    cc = getattr(gpu, "compute_capability", None)
    by_cc = TRANSFER_SOURCE_BY_CC.get((arch, int(cc))) if cc is not None else None
    return by_cc or TRANSFER_SOURCE.get(arch)


def spec_peaks(gpu) -> dict:
    """Spec-sheet peaks of a tuner GPU (duck-typed) as the transfer rule uses them."""
    bf16 = gpu.bf16_tflops * 1e12
    fp8 = (getattr(gpu, "fp8_tflops", None) or 0.0) * 1e12 or bf16
    return {"flops": {"bf16": bf16, "fp8": fp8}, "bw": gpu.hbm_gbps * 1e9,
            "link": (getattr(gpu, "nvlink_gbps", None) or gpu.host_link_gbps) * 1e9}


# large GEMMs whose throughput says what a GPU's tensor cores achieve (m x n x k at least)
ACHIEVABLE_MIN_M, ACHIEVABLE_MIN_NK = 1024, 4096
ACHIEVABLE_PERCENTILE = 90.0


def achievable_fraction(tables, gpu, dtype: str = "bf16") -> float | None:
    """The fraction of its spec-sheet tensor FLOP/s (`dtype` "bf16" or "fp8") a measured GPU's
    GEMMs reach: the ACHIEVABLE_PERCENTILE-th percentile of the throughput of the measured
    (not filled) cells of at least ACHIEVABLE_MIN_M x ACHIEVABLE_MIN_NK x ACHIEVABLE_MIN_NK;
    None where the tables have no such cells (no GEMM table of that dtype)."""
    if f"gemm_{dtype}_loglat" not in tables.arrays:
        return None
    a = tables.arrays
    m, n, k = (a[f"gemm_{dtype}_{x}"].astype(np.float64) for x in "mnk")
    M, N, K = np.meshgrid(m, n, k, indexing="ij")
    keep = (a[f"gemm_{dtype}_measured"].astype(bool) & (M >= ACHIEVABLE_MIN_M)
            & (N >= ACHIEVABLE_MIN_NK) & (K >= ACHIEVABLE_MIN_NK))
    if not keep.any():
        return None
    flops_s = 2.0 * M * N * K / (np.exp(a[f"gemm_{dtype}_loglat"]) * 1e-3)
    return float(np.percentile(flops_s[keep], ACHIEVABLE_PERCENTILE)
                 / spec_peaks(gpu)["flops"][dtype])


def typical_fractions(per_gpu: dict[str, dict[str, float | None]]) -> dict[str, float]:
    """Median achievable fraction per dtype over the measured GPUs that have one."""
    out = {}
    for dtype in ("bf16", "fp8"):
        v = [d[dtype] for d in per_gpu.values() if d.get(dtype)]
        if v:
            out[dtype] = float(np.median(v))
    return out


def transfer_tables(source, source_gpu, target_gpu, achievable: dict | None = None):
    """`source`'s tables (a predictors.aic_tables.KernelTables) re-priced for `target_gpu`
    (both GPUs duck-typed tuner GPUs): the same tables with the rule's ratios attached.
    `achievable` ({"per_gpu": {gpu: {dtype: fraction}}, "typical": {dtype: fraction}}, as
    predictors.aic.achievable_fractions ships them): tensor FLOP/s as achieved (the module
    doc); None: spec sheets alone."""
    s, t = spec_peaks(source_gpu), spec_peaks(target_gpu)
    src_flops, dst_flops = dict(s["flops"]), dict(t["flops"])
    fractions = {}
    if achievable:
        own = achievable.get("per_gpu", {})
        for dtype in src_flops:
            f_src = (own.get(source.gpu) or {}).get(dtype)
            if not f_src:  # no table of this dtype on the source: spec ratio
                continue
            if (own.get(target_gpu.name) or {}).get(dtype):
                f_dst, how = own[target_gpu.name][dtype], "measured"
            elif src_flops[dtype] == dst_flops[dtype]:
                f_dst, how = f_src, "the source's, same spec"
            elif achievable.get("typical", {}).get(dtype):
                f_dst, how = achievable["typical"][dtype], "the measured GPUs' median"
            else:
                f_dst, how = f_src, "the source's"
            src_flops[dtype] *= f_src
            dst_flops[dtype] *= f_dst
            fractions[dtype] = (f_src, f_dst, how)
    tr = {"source": source.gpu, "src_flops": src_flops, "dst_flops": dst_flops,
          "src_bw": s["bw"], "dst_bw": t["bw"], "link_ratio": s["link"] / t["link"],
          "achievable": fractions}
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
