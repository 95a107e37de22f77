"""Which catalog GPU a measured device is, and the peak figures a roofline transfer divides by.

A device's *specs* are (peak FLOP/s at the profile's dtype, memory bytes/s, host-link bytes/s).
For a catalog GPU they come from its spec sheet; for a CPU, or a GPU the catalog lacks, they are
the best rates the profile itself achieved (largest-GEMM FLOP/s, best element-wise or copy
bandwidth), which makes its efficiencies relative to its own best rather than to a datasheet.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass

import numpy as np


@dataclass(frozen=True)
class DeviceSpecs:
    name: str
    kind: str  # "cuda" | "cpu"
    peak_flops: float
    mem_bytes_per_s: float
    link_bytes_per_s: float | None
    source: str  # "spec sheet (...)" | "measured maxima of the profile"

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> DeviceSpecs:
        return cls(**{k: d.get(k) for k in ("name", "kind", "peak_flops", "mem_bytes_per_s",
                                           "link_bytes_per_s", "source")})


def _tokens(s: str) -> set[str]:
    return set(re.split(r"[^a-z0-9]+", s.lower())) - {""}


def match_gpu(device_name: str, memory_bytes: float | None, gpus: dict) -> str | None:
    """The catalog name for a CUDA device name ('NVIDIA A100-SXM4-80GB' -> 'A100-80G'), or None.
    The catalog's names and aliases first (tuner.core.catalog.find_gpu); else the catalog GPU
    whose base name is a word of it, the closest in memory. A PCIe or NVL part is not matched
    to an SXM entry, nor another part to a PCIe or NVL entry (their clocks, power and bandwidth
    differ)."""
    from tuner.core.catalog import find_gpu

    hit = find_gpu(device_name, gpus)
    if hit is not None:
        return hit.name
    toks = _tokens(device_name)
    joined = "".join(sorted(toks))
    other_form = bool(toks & {"pcie", "nvl"})
    hits = []
    for name, g in gpus.items():
        if other_form and any(t.startswith("sxm") for a in getattr(g, "aliases", ())
                              for t in _tokens(a)):
            continue
        if not other_form and _tokens(name) & {"pcie", "nvl"}:
            continue  # nor an unnamed part to a PCIe / NVL entry (H100-PCIe) by memory alone
        base = name.split("-")[0].lower()
        if base in toks or (base.startswith("rtx") and base[3:] in toks and "rtx" in joined):
            mem = getattr(g, "memory_gib", 0.0)
            gap = abs(mem - (memory_bytes or 0) / 1024**3) if memory_bytes else 0.0
            hits.append((gap, name))
    return min(hits)[1] if hits else None


def gpu_specs(gpu, dtype: str = "bfloat16") -> DeviceSpecs:
    """Spec-sheet peaks of a tuner GPU (duck-typed) for 16-bit (tensor) or 32-bit math."""
    peak = gpu.fp32_tflops * 1e12 if dtype == "float32" else gpu.bf16_tflops * 1e12
    return DeviceSpecs(name=gpu.name, kind="cuda", peak_flops=peak,
                       mem_bytes_per_s=gpu.hbm_gbps * 1e9,
                       link_bytes_per_s=gpu.host_link_gbps * 1e9,
                       source=f"spec sheet ({gpu.name} in the GPU catalog)")


def measured_specs(df, name: str, kind: str, stat: str = "median") -> DeviceSpecs:
    """Peaks as the best rates a profile achieved (pandas DataFrame of profile rows)."""
    ok = df[(df["status"] == "ok") & (df["median_s"] > 0)]
    ok = ok.assign(median_s=ok[f"{stat}_s"])
    gemm = ok[ok["operation"].str.startswith("linear.") | (ok["operation"] == "lm_head")]
    flops = float((gemm["flops"] / gemm["median_s"]).max()) if len(gemm) else float("nan")
    mem_ops = ok[ok["operation"].isin(["norm", "activation", "rotary", "add", "copy.host",
                                        "attn.decode"])]
    bw = float((mem_ops["bytes_moved"] / mem_ops["median_s"]).max()) if len(mem_ops) else float("nan")
    link_ops = ok[ok["operation"].isin(["copy.h2d", "copy.d2h"])]
    link = float((link_ops["bytes_moved"] / link_ops["median_s"]).max()) if len(link_ops) else None
    if not np.isfinite(flops):
        flops = 1e12
    if not np.isfinite(bw):
        bw = 1e11
    return DeviceSpecs(name=name, kind=kind, peak_flops=flops, mem_bytes_per_s=bw,
                       link_bytes_per_s=link, source="measured maxima of the profile")
