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


#: how far a device's memory may be from a catalog GPU's and still be that GPU: a card of
#: another memory size is another part (A100 40 GB vs 80 GB, RTX 6000 Ada 48 GB vs RTX PRO
#: 6000 96 GB); what drivers report differs from the catalog by a few %
MEMORY_TOLERANCE = 0.15


def _model_words(name: str) -> set[str]:
    """The words of a catalog GPU name that say which part it is (the memory size left out:
    'A100-80G' -> {'a100'}, 'RTX-PRO-6000' -> {'rtx', 'pro', '6000'})."""
    return {t for t in _tokens(name) if not re.fullmatch(r"\d+gi?b?", t)}


def _device_words(device_name: str) -> set[str]:
    """A device name's words, and each pair of neighbours joined ('GeForce RTX 4090' ->
    ..., 'rtx4090'), so 'RTX4090' matches 'RTX 4090'."""
    seq = [t for t in re.split(r"[^a-z0-9]+", device_name.lower()) if t]
    return set(seq) | {a + b for a, b in zip(seq, seq[1:], strict=False)}


def match_gpu(device_name: str, memory_bytes: float | None, gpus: dict) -> str | None:
    """The catalog name for a CUDA device name ('NVIDIA A100-SXM4-80GB' -> 'A100-80G'), or None.
    The catalog's names and aliases first (tuner.core.catalog.find_gpu); else the catalog GPU
    every word of whose name (its memory size aside) is a word of the device name, the
    closest in memory, and none whose memory is more than MEMORY_TOLERANCE off: an RTX 3090,
    A6000 or 6000 Ada is not an RTX PRO 6000, and a card the catalog lacks is None. A PCIe or
    NVL part is not matched to an SXM entry, nor another part to a PCIe or NVL entry (their
    clocks, power and bandwidth differ)."""
    from tuner.core.catalog import find_gpu

    hit = find_gpu(device_name, gpus)
    if hit is not None:
        return hit.name
    toks = _device_words(device_name)
    other_form = bool(toks & {"pcie", "nvl"})
    device_gib = (memory_bytes or 0) / 1024**3
    hits = []
    for name, g in gpus.items():
        if other_form and any(t.startswith("sxm") for a in getattr(g, "aliases", ())
                              for t in _tokens(a)):
            continue
        if not other_form and _tokens(name) & {"pcie", "nvl"}:
            continue  # nor an unnamed part to a PCIe / NVL entry (H100-PCIe) by memory alone
        words = _model_words(name)
        if not words or not words <= toks:
            continue
        mem = float(getattr(g, "memory_gib", 0.0) or 0.0)
        gap = abs(mem - device_gib) if memory_bytes else 0.0
        if memory_bytes and mem > 0 and gap > MEMORY_TOLERANCE * mem:
            continue  # same family, another memory size: another part
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
