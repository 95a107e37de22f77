"""Host <-> device transfer time: the interface the simulator prices offloading with, and a
spec-sheet default until a measured (fitted) curve exists.

Vasuki (§5.1) measures d2h and h2d copies up to 16 GB and observes that bandwidth
grows with the transfer size up to a saturation point and is flat beyond it. The default model
here is that shape from the spec sheet:

    bandwidth(b) = B * b / (b + h)                 (saturating curve, half of B at b = h)
    time(b)      = latency + b / bandwidth(b)
                 = latency + (b + h) / B           (b > 0; time(0) = 0: no copy is issued)

with B the GPU's realistic one-direction pinned-copy bandwidth (`GPU.host_link_gbps`, ~25 GB/s
on PCIe 4.0 x16, ~50 GB/s on PCIe 5.0 x16), h = `HALF_SATURATION_BYTES` and
latency = `LATENCY_S`. Note the algebra: the saturating curve is the same thing as a fixed
cost latency + h/B plus a linear term at full bandwidth.

Constants (ESTIMATES, not measurements; `tuner profile` measures the real curves and
`predictors` fits them, replacing this class behind the same interface):

* ``LATENCY_S = 10 us``: issuing one cudaMemcpyAsync on pinned memory (driver call + DMA
  set-up); typical small-copy times on PCIe 4.0 systems are 5-15 us.
* ``HALF_SATURATION_BYTES = 128 KiB``: with the latency this gives ~3.7 GB/s at 64 KiB,
  ~14 GB/s at 512 KiB, ~23 GB/s at 4 MiB and ~24.9 GB/s at 64 MiB on a 25 GB/s link, the usual
  shape of a pinned-memory bandwidthTest curve (saturated from a few MiB).
* ``ALLOC_S = 1 us``, ``DEALLOC_S = 0.5 us``: Vasuki's alloc_time / dealloc_time, paid per
  request per offloaded layer (Alg. 1-2 line 9): block-table bookkeeping of a pre-allocated
  pinned pool, not a cudaMallocHost.

Directions are priced separately (`h2d_s`, `d2h_s`) so a measured curve with asymmetric
bandwidths drops in. predictors must not import tuner: `from_specs` duck-types the GPU.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

LATENCY_S = 10e-6
HALF_SATURATION_BYTES = 128 * 1024
ALLOC_S = 1.0e-6
DEALLOC_S = 0.5e-6


class TransferModel(Protocol):
    """What the simulator needs of a host<->device transfer model (vectorised over byte
    counts: arrays in, arrays out). alloc_s / dealloc_s: Vasuki's per-request, per-layer
    allocation and deallocation time of host KV blocks."""

    alloc_s: float
    dealloc_s: float

    def h2d_s(self, nbytes) -> np.ndarray: ...
    def d2h_s(self, nbytes) -> np.ndarray: ...
    def describe(self) -> str: ...


@dataclass(frozen=True)
class SaturatingTransferModel:
    """time(b) = latency + b / (B * b / (b + h)) per direction; 0 for b <= 0."""

    h2d_bytes_per_s: float
    d2h_bytes_per_s: float
    latency_s: float = LATENCY_S
    half_saturation_bytes: float = HALF_SATURATION_BYTES
    alloc_s: float = ALLOC_S
    dealloc_s: float = DEALLOC_S
    name: str = "saturating transfer curve"

    @classmethod
    def from_specs(cls, gpu, **overrides) -> SaturatingTransferModel:
        """From a tuner GPU (duck-typed: needs host_link_bytes_per_s and name)."""
        bw = float(gpu.host_link_bytes_per_s)
        name = (f"saturating curve from {gpu.name} spec sheet ({bw / 1e9:g} GB/s each way, "
                f"latency {overrides.get('latency_s', LATENCY_S) * 1e6:g} us, half-saturation "
                f"{overrides.get('half_saturation_bytes', HALF_SATURATION_BYTES) / 1024:g} KiB; "
                "not measured)")
        return cls(h2d_bytes_per_s=bw, d2h_bytes_per_s=bw, name=name, **overrides)

    def _time(self, nbytes, peak: float) -> np.ndarray:
        b = np.asarray(nbytes, dtype=np.float64)
        t = self.latency_s + (b + self.half_saturation_bytes) / peak
        return np.where(b > 0, t, 0.0)

    def bandwidth(self, nbytes, direction: str = "h2d") -> np.ndarray:
        """Effective bytes/s of one copy of `nbytes` (including the latency)."""
        b = np.asarray(nbytes, dtype=np.float64)
        t = self.h2d_s(b) if direction == "h2d" else self.d2h_s(b)
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(t > 0, b / np.where(t > 0, t, 1.0), 0.0)

    def h2d_s(self, nbytes) -> np.ndarray:
        return self._time(nbytes, self.h2d_bytes_per_s)

    def d2h_s(self, nbytes) -> np.ndarray:
        return self._time(nbytes, self.d2h_bytes_per_s)

    def describe(self) -> str:
        return self.name


@dataclass(frozen=True)
class CallableTransferModel:
    """Adapter for a measured / fitted curve: `h2d` and `d2h` map byte counts (arrays) to
    seconds, e.g. ``lambda b: curve.predict(np.column_stack([np.zeros_like(b), b]))`` for a
    fitted `predictors.transfer.EfficiencyCurve` of the copy.h2d / copy.d2h classes."""

    h2d: object  # Callable[[np.ndarray], np.ndarray]
    d2h: object
    alloc_s: float = ALLOC_S
    dealloc_s: float = DEALLOC_S
    name: str = "measured transfer curve"

    def h2d_s(self, nbytes) -> np.ndarray:
        b = np.atleast_1d(np.asarray(nbytes, dtype=np.float64))
        t = np.where(b > 0, np.asarray(self.h2d(np.maximum(b, 1.0)), dtype=np.float64), 0.0)
        return t.reshape(np.shape(nbytes))

    def d2h_s(self, nbytes) -> np.ndarray:
        b = np.atleast_1d(np.asarray(nbytes, dtype=np.float64))
        t = np.where(b > 0, np.asarray(self.d2h(np.maximum(b, 1.0)), dtype=np.float64), 0.0)
        return t.reshape(np.shape(nbytes))

    def describe(self) -> str:
        return self.name
