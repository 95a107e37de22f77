"""Host-side cost models of the memory-stretching knobs: (de)quantization (LM-Offload §3.2,
Eqs. 12-24), CPU attention and CPU thread-level parallelism (LM-Offload Alg. 3).

Estimates, not measurements: every constant below says where its value comes from; `tuner
profile` measures the CPU-thread curve and the (de)quantization kernels that replace them behind
the same interfaces. `tuner.sim.offload` prices iterations with these models.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from tuner.core.catalog import GPU
from tuner.core.config import ServingConfig

# ---- CPU (host) model constants: ESTIMATES for a cloud x86 host ---------------------------
#: all-core clock of a cloud Xeon / EPYC vCPU (Xeon Gold 6330 of LM-Offload: 2.0 base, 3.1 turbo)
CPU_FREQ_HZ = 2.5e9
#: fp32 FLOP/s one vCPU sustains in PyTorch CPU attention: AVX2 peak 2 FMA x 8 lanes x 2 =
#: 32 FLOP/cycle = 80 GFLOP/s at 2.5 GHz, x 0.5 achieved (bmm on small per-head matrices)
CPU_FLOPS_PER_CORE = CPU_FREQ_HZ * 32 * 0.5
#: host memory bandwidth per vCPU of the GPU's share of the instance (an 8-channel DDR4-3200
#: socket streams ~150 GB/s over 32 cores / 64 vCPUs -> ~2.5-5 GB/s per vCPU), capped at
#: one socket's ~150 GB/s
CPU_MEM_BYTES_PER_S_PER_CORE = 5e9
CPU_MEM_BYTES_PER_S_MAX = 150e9
#: threads at which CPU attention reaches half the memory bandwidth: LM-Offload §4.1 / Fig. 5
#: find intra-op gains flatten beyond ~8 threads (2/3 of the plateau at 8 with this value)
CPU_HALF_SATURATION_THREADS = 4.0
#: PyTorch CPU operator dispatch, per operator call
CPU_OP_OVERHEAD_S = 10e-6
#: LM-Offload Alg. 3: five load/store tasks (load weight / cache / activation, store cache /
#: activation) each need a thread besides the compute task's threads
LOADER_THREADS = 5

#: Operation dependency graph of one layer's decode attention on the CPU (FlexGen's mha_gen:
#: LM-Offload Fig. 6 is not in the text, so this is the graph of that code path). Alg. 3 takes
#: the compute task's inter-op parallelism as the graph's maximum concurrency (Kahn's
#: algorithm).
DECODE_ATTENTION_GRAPH: dict[str, tuple[str, ...]] = {
    "q_view": (),
    "k_append": (),
    "v_append": (),
    "qk_bmm": ("q_view", "k_append"),
    "scale_mask": ("qk_bmm",),
    "softmax": ("scale_mask",),
    "pv_bmm": ("softmax", "v_append"),
    "out_view": ("pv_bmm",),
}



# ---------------------------------------------------------------------------------------
# LM-Offload §3.2: (de)quantization cost (Eqs. 12-16, 20-24)


def lm_offload_quantize_s(elements, freq, flops, mem_bytes_per_s, bytes_per_elem=1.0):
    """Eq. 12 / 20: minmax (Eq. 13 / 21: n / freq) + normalisation (Eq. 14 / 22: 3 n / flops)
    + post-processing (Eq. 15 / 23: n / mem_bw). The paper divides the element count by the
    bandwidth (bytes_per_elem=1 reproduces it); the simulator passes the bytes of the 16-bit
    tensor (2)."""
    n = np.asarray(elements, dtype=np.float64)
    return n / freq + 3.0 * n / flops + n * bytes_per_elem / mem_bytes_per_s


def lm_offload_dequantize_s(elements, flops, mem_bytes_per_s, bytes_per_elem=1.0):
    """Eq. 16 / 24: de-normalisation (3 n / flops, Eq. 11) + post-processing (n / mem_bw); no
    min/max (paid at quantization)."""
    n = np.asarray(elements, dtype=np.float64)
    return 3.0 * n / flops + n * bytes_per_elem / mem_bytes_per_s


@dataclass(frozen=True)
class QuantCostModel:
    """(De)quantization time on the GPU and the CPU, LM-Offload Eqs. 12-16 / 20-24.

    The paper's `freq` is the rate at which one element stream is processed (one element per
    cycle); on a whole device that is one element per core per cycle, so `*_elem_per_s` is
    GPU: fp32 FLOP/s / 2 (one FMA per CUDA core per cycle), CPU: threads x clock. `flops` is
    the non-tensor fp32 rate (GPU) or the threads' vector FLOP/s (CPU); `mem` the device
    memory bandwidth. Estimates; measured kernel times (the profile's (de)quantization
    kernels per bit width) replace this class behind the same two methods."""

    gpu_elem_per_s: float
    gpu_flops: float
    gpu_mem_bytes_per_s: float
    cpu_elem_per_s: float
    cpu_flops: float
    cpu_mem_bytes_per_s: float
    bytes_per_elem: float = 2.0  # the 16-bit tensor read / written by post-processing

    @classmethod
    def from_specs(cls, gpu: GPU, cpu: CPUModel) -> QuantCostModel:
        threads = cpu.cores
        return cls(gpu_elem_per_s=gpu.fp32_tflops * 1e12 / 2.0, gpu_flops=gpu.fp32_tflops * 1e12,
                   gpu_mem_bytes_per_s=gpu.hbm_bytes_per_s,
                   cpu_elem_per_s=threads * cpu.freq_hz, cpu_flops=cpu.flops(threads),
                   cpu_mem_bytes_per_s=cpu.bandwidth(threads))

    def quantize_s(self, elements, where: str = "gpu") -> np.ndarray:
        if where == "gpu":
            return lm_offload_quantize_s(elements, self.gpu_elem_per_s, self.gpu_flops,
                                         self.gpu_mem_bytes_per_s, self.bytes_per_elem)
        return lm_offload_quantize_s(elements, self.cpu_elem_per_s, self.cpu_flops,
                                     self.cpu_mem_bytes_per_s, self.bytes_per_elem)

    def dequantize_s(self, elements, where: str = "gpu") -> np.ndarray:
        if where == "gpu":
            return lm_offload_dequantize_s(elements, self.gpu_flops, self.gpu_mem_bytes_per_s,
                                           self.bytes_per_elem)
        return lm_offload_dequantize_s(elements, self.cpu_flops, self.cpu_mem_bytes_per_s,
                                       self.bytes_per_elem)


# ---------------------------------------------------------------------------------------
# CPU attention and LM-Offload Alg. 3 (threads)


def max_concurrency(graph: dict[str, tuple[str, ...]]) -> int:
    """Kahn's algorithm: the widest frontier of ready operations (LM-Offload Alg. 3 line 4)."""
    indeg = {n: len(d) for n, d in graph.items()}
    users: dict[str, list[str]] = {n: [] for n in graph}
    for n, deps in graph.items():
        for d in deps:
            users[d].append(n)
    ready = [n for n, k in indeg.items() if k == 0]
    widest = 0
    seen = 0
    while ready:
        widest = max(widest, len(ready))
        nxt = []
        for n in ready:
            seen += 1
            for u in users[n]:
                indeg[u] -= 1
                if indeg[u] == 0:
                    nxt.append(u)
        ready = nxt
    if seen != len(graph):
        raise ValueError("operation graph has a cycle")
    return widest


@dataclass(frozen=True)
class CPUModel:
    """Host CPU of one GPU's share of the instance, as a thread curve (estimate; the profile's
    measured CPU-attention-vs-threads curve replaces it).

    threads t = intra x min(inter, the attention graph's concurrency): memory bandwidth
    B(t) = B_max t / (t + t_half), compute t x FLOP/s per core; oversubscription (t +
    `LOADER_THREADS` > cores) slows everything by (t + loaders) / cores."""

    cores: int
    freq_hz: float = CPU_FREQ_HZ
    flops_per_core: float = CPU_FLOPS_PER_CORE
    mem_bytes_per_s_max: float = CPU_MEM_BYTES_PER_S_MAX
    half_saturation_threads: float = CPU_HALF_SATURATION_THREADS
    op_overhead_s: float = CPU_OP_OVERHEAD_S
    loader_threads: int = LOADER_THREADS
    graph_concurrency: int = field(default_factory=lambda: max_concurrency(DECODE_ATTENTION_GRAPH))

    @classmethod
    def from_gpu(cls, gpu: GPU) -> CPUModel:
        cores = max(int(gpu.cpu_cores), 1)
        return cls(cores=cores, mem_bytes_per_s_max=min(cores * CPU_MEM_BYTES_PER_S_PER_CORE,
                                                       CPU_MEM_BYTES_PER_S_MAX))

    def bandwidth(self, threads: float) -> float:
        t = max(float(threads), 0.0)
        return self.mem_bytes_per_s_max * t / (t + self.half_saturation_threads) if t > 0 else 0.0

    def flops(self, threads: float) -> float:
        return self.flops_per_core * max(float(threads), 0.0)

    def compute_threads(self, intra: int, inter: int) -> tuple[float, float]:
        """(threads working on the attention, slowdown factor from oversubscription)."""
        conc = max(1, min(int(inter), self.graph_concurrency))
        busy = intra * conc
        total = busy + self.loader_threads
        slow = max(1.0, total / self.cores)
        return float(min(busy, self.cores)), slow

    def attention_s(self, kv_bytes, flops, intra: int, inter: int, n_ops: int | None = None):
        """One CPU attention call: max(bytes / B(t), flops / F(t)) x slowdown + dispatch."""
        t, slow = self.compute_threads(intra, inter)
        n_ops = len(DECODE_ATTENTION_GRAPH) if n_ops is None else n_ops
        kvb = np.asarray(kv_bytes, dtype=np.float64)
        fl = np.asarray(flops, dtype=np.float64)
        body = np.maximum(kvb / self.bandwidth(t), fl / self.flops(t)) * slow
        return np.where((kvb > 0) | (fl > 0), body + n_ops * self.op_overhead_s, 0.0)


@dataclass(frozen=True)
class ThreadChoice:
    intra: int  # intra-op threads of the compute (attention) task
    inter: int  # inter-op threads = compute concurrency + LOADER_THREADS (LM-Offload §4.2)
    inter_compute: int
    loader_intra: tuple[int, ...]  # threads of the five load/store tasks (by volume)
    chosen_by: str  # "config", "alg3", or which one the config gave and Alg. 3 the other


def choose_threads(cpu: CPUModel, kv_bytes: float = float(1 << 30), flops: float = 0.0,
                   volumes: tuple[float, ...] = (1.0, 1.0, 1.0, 1.0, 1.0), *,
                   intra: int = 0, inter: int = 0) -> ThreadChoice:
    """LM-Offload Alg. 3: for intra = 1 .. max_thrs - 5, inter_compute = the attention graph's
    max concurrency (Kahn); free = max_thrs - inter_compute x intra; skip when free < 5; give
    the free threads to the five load/store tasks in proportion to their volumes; keep the
    setting with the best modelled throughput (here: the shortest attention time of a
    representative call; ties: fewer threads). Falls back to intra 1 when no setting leaves
    five threads free. `intra` / `inter` > 0: that one is the user's and Alg. 3 chooses the
    other (inter: the compute task's concurrency is min(inter, the graph's))."""
    conc = max(1, min(inter, cpu.graph_concurrency)) if inter > 0 else cpu.graph_concurrency
    inter_all = inter if inter > 0 else conc + cpu.loader_threads
    best: tuple[float, int] | None = None
    # the intra-op threads to try: none when the user gave them
    tries = range(1, max(cpu.cores - cpu.loader_threads, 1) + 1) if intra <= 0 else ()
    for i in tries:
        free = cpu.cores - conc * i
        if free < cpu.loader_threads:
            continue
        t = float(cpu.attention_s(kv_bytes, flops, i, inter_all))
        if best is None or t < best[0] * (1 - 1e-9):
            best = (t, i)
    chosen_by = ("alg3" if intra <= 0 and inter <= 0 else
                 "config intra, alg3 inter" if intra > 0 else "config inter, alg3 intra")
    if intra <= 0:
        intra = best[1] if best else 1
    free = max(cpu.cores - conc * intra, cpu.loader_threads)
    vol = np.asarray(volumes, dtype=np.float64)
    share = vol / vol.sum() if vol.sum() > 0 else np.full(len(vol), 1.0 / len(vol))
    loaders = tuple(int(max(1, math.floor(free * s))) for s in share)
    return ThreadChoice(intra=intra, inter=inter_all, inter_compute=conc,
                        loader_intra=loaders, chosen_by=chosen_by)


def threads_for(config: ServingConfig, cpu: CPUModel) -> ThreadChoice:
    """The config's threads when both are set (> 0); LM-Offload Alg. 3's choice of the one
    left at 0 (both, when both are): a thread count the user gave is never replaced."""
    if config.cpu_threads_intra > 0 and config.cpu_threads_inter > 0:
        conc = max(1, min(config.cpu_threads_inter, cpu.graph_concurrency))
        return ThreadChoice(intra=config.cpu_threads_intra, inter=config.cpu_threads_inter,
                            inter_compute=conc, loader_intra=(), chosen_by="config")
    return choose_threads(cpu, intra=config.cpu_threads_intra, inter=config.cpu_threads_inter)
