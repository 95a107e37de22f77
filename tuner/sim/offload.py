"""Memory-stretching knobs priced iteration by iteration: KV-layer offload (Vasuki
§5.1), weight streaming and CPU attention (FlexGen / LM-Offload Eq. 2), (de)quantization
(LM-Offload §3.2, Eqs. 3-24) and CPU thread-level parallelism (LM-Offload Alg. 3).

Free of I/O; everything is vectorised over the iterations of a schedule (numpy arrays, one
entry per iteration). `tuner.core.memory.plan_memory` decides what fits (KV capacity grows with the
offloaded layers, host RAM is a hard limit); this module prices what the offloading costs in
time. `price_iterations` is what `tuner.sim.simulator.simulate` calls after the cost model.

Per iteration i, with L layers, k = kv_offload_layers, wf = weight_offload_fraction:

* compute_i   = dt_i (cost model, all layers on the GPU)
                + k * (cpu_attention_i - gpu_decode_attention_layer_i)   [attention_on_cpu]
                + quantize-on-write of the new KV of the GPU-resident layers [kv_bits < 16]
* load_weight = h2d(wf * weights / L) + dequantize(wf * layer weights)   (Eq. 4, per layer)
* layer wall  = max(compute_layer, load_weight)                          (Eq. 2, per layer)
* KV transfer (Vasuki Alg. 1-2 lines 5-9) for k layers:
      T(k) = d2h(k * m_d2h) + h2d(k * m_h2d) + (alloc + dealloc) * n_requests * k
             + k * (dequantize old KV on arrival + quantize new KV before the store)  (Eqs. 6-7)
  overlapped with the layer wall time left over after the weight copies on the same link,
  e = mean layer wall - h2d(weights / layer). Two schedules (the engine takes the better
  one each iteration, as Vasuki takes the max of its two algorithms):
      Alg. 1 (offload the first k, load the last k):   stall = max(0, T(k) - e (L - 2k))
      Alg. 2 (cyclic, window w = floor((L - k) / 2)):  stall = k/w * max(0, T(w) - e w)
  With k at most what Alg. 1 or the exhaustive variants return, the stall is 0 (tested);
  `max_overlapped_layers` reports both the published searches and the exhaustive ones.
* dt'_i = compute_i + weight stall (sum over layers of max(0, load_weight - compute_layer))
          + KV stall.

That weight stream is LM-Offload's; a plan vLLM runs (weights offloaded, no KV offload, no CPU
attention) is priced as vLLM's --cpu-offload-gb runs (tuner.core.engines.weight_offload_scheme):
m = offloaded bytes / one decoder layer's bytes whole first layers in host memory (the embedding
and LM head stay on the GPU), nothing prefetched:
      copies (before 0.8.4):  weight stall = m * h2d(layer weights)
      UVA (0.8.4 on):         weight stall = m * max(0, h2d(layer weights) - compute_layer)

Vasuki moves the whole offloaded layer KV both ways each iteration (line 8: d2h and h2d of
layer_mem x mid): m_h2d = m_d2h = KV of the batch in one layer (old + new tokens). That is
the default (`KV_WRITEBACK_FULL`); an engine keeping the host copy writes back only the new
tokens (m_d2h = new tokens). With attention on the CPU (FlexGen's decode path) the decode KV of
the offloaded layers never crosses the link: the CPU reads it from host memory, the link
carries the activations (q, k, v in; attention output back), and only prefill chunks on the
GPU move KV (their context in, their new KV out).

Estimates, not measurements (`tuner profile` / `predictors` replace them behind the same
interfaces: `predictors.transfer_model.TransferModel`, `QuantCostModel`, `CPUModel`):
see the constants below, each with its source.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

import numpy as np

from tuner.core.catalog import GPU, ModelSpec
from tuner.core.config import ServingConfig
from tuner.core.engines import weight_offload_scheme
from tuner.core.memory import (
    MemoryPlan,
    decoder_layer_bytes_per_rank,
    kv_bytes_per_token_per_layer_rank,
    weight_bytes_per_rank,
)
from tuner.predictors.features import BatchFeatures
from tuner.predictors.host import (
    CPUModel,
    QuantCostModel,
    ThreadChoice,
    threads_for,
)
from tuner.predictors.protocol import CostModel
from tuner.predictors.transfer_model import SaturatingTransferModel, TransferModel

# Vasuki writes the whole offloaded layer back each iteration (Alg. 1-2 line 8).
KV_WRITEBACK_FULL = True

# ---------------------------------------------------------------------------------------
# Vasuki §5.1: Algorithms 1 and 2


@dataclass(frozen=True)
class KVTransfer:
    """Per-iteration inputs of Vasuki's offload time (arrays of one length, or scalars).

    h2d_bytes_per_layer / d2h_bytes_per_layer: one layer's KV loaded / stored per iteration
    (Vasuki: both = layer_mem, the batch's KV in one layer); num_requests: requests in the
    batch (alloc / dealloc are paid per request per layer); extra_s_per_layer: work on the
    transfer path per layer ((de)quantization, LM-Offload Eqs. 6-7)."""

    h2d_bytes_per_layer: np.ndarray
    d2h_bytes_per_layer: np.ndarray
    num_requests: np.ndarray
    extra_s_per_layer: np.ndarray | float = 0.0

    def time_s(self, layers, transfer: TransferModel) -> np.ndarray:
        """Alg. 1-2 lines 5-9 for `layers` layers (scalar or per-iteration array):
        d2h(layer_mem x mid) + h2d(layer_mem x mid) + (alloc + dealloc) x requests x mid."""
        k = np.asarray(layers, dtype=np.float64)
        t = (transfer.d2h_s(k * self.d2h_bytes_per_layer)
             + transfer.h2d_s(k * self.h2d_bytes_per_layer)
             + (transfer.alloc_s + transfer.dealloc_s) * self.num_requests * k
             + self.extra_s_per_layer * k)
        return np.where(k > 0, t, 0.0)


def _published_bisection(shape, num_layers: int, test, *, ok_raises_lo: bool) -> np.ndarray:
    """The binary search both Vasuki algorithms publish (l = 0, r = floor(L/2); a passing test
    moves l up in Alg. 1 and r down in Alg. 2), vectorised: the final l per iteration."""
    lo = np.zeros(shape, dtype=np.int64)
    hi = np.full(shape, num_layers // 2, dtype=np.int64)
    while True:
        active = lo < hi
        if not active.any():
            return lo
        mid = (lo + hi) // 2
        ok = test(mid)
        up = ok if ok_raises_lo else ~ok
        lo = np.where(active & up, mid + 1, lo)
        hi = np.where(active & ~up, mid - 1, hi)


def vasuki_alg1(num_layers: int, kv: KVTransfer, exec_layer_s, transfer: TransferModel, *,
                exact: bool = False) -> np.ndarray:
    """Algorithm 1 (maximize layers offloaded), exactly as published: binary search on
    l = 0, r = floor(L/2) with the test offload_time(mid) <= exec_time x (L - 2 mid), result
    l - 1 (clipped at 0). The result is at most floor(L/2) - 1: l never exceeds r <= floor(L/2).
    The published search can stop below the largest mid passing the test (e.g. L = 32 and
    the test true for mid <= 2: mid 8, 3 fail, mid 1 passes, l = r = 2, result 1);
    exact=True scans mid = 0 .. floor(L/2) - 1 instead and returns the largest passing one.
    Vectorised: one answer per iteration."""
    ex = np.asarray(exec_layer_s, dtype=np.float64)
    shape = np.broadcast(ex, kv.h2d_bytes_per_layer, kv.num_requests).shape
    if exact:
        best = np.zeros(shape, dtype=np.int64)
        for mid in range(1, num_layers // 2):
            ok = kv.time_s(mid, transfer) <= ex * (num_layers - 2 * mid)
            best = np.where(ok, mid, best)
        return best
    lo = _published_bisection(shape, num_layers,
                              lambda mid: kv.time_s(mid, transfer) <= ex * (num_layers - 2 * mid),
                              ok_raises_lo=True)
    return np.maximum(lo - 1, 0)


def vasuki_alg2(num_layers: int, kv: KVTransfer, exec_layer_s, transfer: TransferModel, *,
                exact: bool = False) -> np.ndarray:
    """Algorithm 2 (minimize layers in memory, cyclic), exactly as published: binary search on
    l = 0, r = floor(L/2) with the test offload_time(mid) <= exec_time x mid (move the previous
    mid layers out and the next mid in while the current mid compute); layers in memory
    = 2 (l + 1), result L - 2 (l + 1) (clipped at 0). At most L - 2 (l >= 0). The published
    search can overclaim: when r reaches 1 it tests the empty window mid = 0 (always passes)
    and reports windows of 1 layer without testing them (L = 3, r = 1 from the start).
    exact=True takes the smallest window w = 1 .. floor(L/2) passing the test: L - 2 w (0 if
    none). Vectorised."""
    ex = np.asarray(exec_layer_s, dtype=np.float64)
    shape = np.broadcast(ex, kv.h2d_bytes_per_layer, kv.num_requests).shape
    if exact:
        best = np.zeros(shape, dtype=np.int64)
        for w in range(num_layers // 2, 0, -1):
            ok = kv.time_s(w, transfer) <= ex * w
            best = np.where(ok, num_layers - 2 * w, best)
        return best
    lo = _published_bisection(shape, num_layers,
                              lambda mid: kv.time_s(mid, transfer) <= ex * mid,
                              ok_raises_lo=False)
    return np.maximum(num_layers - 2 * (lo + 1), 0)


def max_overlapped_layers(num_layers: int, kv: KVTransfer, exec_layer_s,
                          transfer: TransferModel, *, exact: bool = False
                          ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Vasuki §5.1: the most layers offloadable with full overlap = max of Alg. 1 and Alg. 2.
    Returns (best, alg1, alg2), one entry per iteration."""
    a1 = vasuki_alg1(num_layers, kv, exec_layer_s, transfer, exact=exact)
    a2 = vasuki_alg2(num_layers, kv, exec_layer_s, transfer, exact=exact)
    return np.maximum(a1, a2), a1, a2


def kv_offload_stall_s(layers: int, num_layers: int, kv: KVTransfer, exec_layer_s,
                       transfer: TransferModel) -> dict[str, np.ndarray]:
    """Non-overlapped KV transfer per iteration for `layers` offloaded layers: the better of
    Alg. 1's schedule (budget exec x (L - 2k)) and Alg. 2's cyclic one (windows of
    w = floor((L - k) / 2) layers, each moving w layers while w compute). Returns arrays
    stall_s, transfer_s (link + path time) and budget_s (compute it overlaps with)."""
    ex = np.asarray(exec_layer_s, dtype=np.float64)
    k, L = int(layers), int(num_layers)
    shape = np.broadcast(ex, kv.h2d_bytes_per_layer, kv.num_requests).shape
    if k <= 0:
        z = np.zeros(shape)
        return {"stall_s": z, "transfer_s": z, "budget_s": z}
    t1 = np.broadcast_to(kv.time_s(k, transfer), shape)
    b1 = np.broadcast_to(ex * max(L - 2 * k, 0), shape)
    s1 = np.maximum(t1 - b1, 0.0)
    w = (L - k) // 2
    if w >= 1:
        windows = k / w
        t2 = np.broadcast_to(windows * kv.time_s(w, transfer), shape)
        b2 = np.broadcast_to(windows * ex * w, shape)
        s2 = windows * np.maximum(np.broadcast_to(kv.time_s(w, transfer), shape) - ex * w, 0.0)
    else:
        t2 = b2 = s2 = np.full(shape, np.inf)
    use1 = s1 <= s2
    return {"stall_s": np.where(use1, s1, s2), "transfer_s": np.where(use1, t1, t2),
            "budget_s": np.where(use1, b1, b2)}


# ---------------------------------------------------------------------------------------
# Pricing the iterations of a schedule


@dataclass(frozen=True)
class OffloadContext:
    """Everything `price_iterations` needs that does not change between iterations."""

    model: ModelSpec
    gpu: GPU
    config: ServingConfig
    transfer: TransferModel
    quant: QuantCostModel
    cpu: CPUModel
    threads: ThreadChoice
    kv_bytes_per_token_layer: float  # per rank, at kv_bits
    kv_elems_per_token_layer: float  # K and V elements per token per layer, per rank
    heads_per_rank: float
    weight_stream_bytes_per_layer: float  # offloaded weights streamed per layer per iteration
    weight_stream_elems_per_layer: float
    weight_init_quantize_s: float  # Eq. 3: one-time quantization of offloaded weights (CPU)
    # how the offloaded weights reach the GPU (tuner.core.engines.weight_offload_scheme):
    # "prefetch" streams a share of every layer (Eq. 2); vLLM's schemes hold whole layers
    weight_scheme: str = "prefetch"
    weight_layer_bytes: float = 0.0  # one whole layer's weights per rank (vLLM's schemes)
    weight_offloaded_layers: float = 0.0  # the whole layers vLLM's budget offloads, per rank

    @property
    def active(self) -> bool:
        c = self.config
        return c.kv_offload_layers > 0 or c.weight_offload_fraction > 0 or c.kv_bits < 16

    @classmethod
    def build(cls, model: ModelSpec, gpu: GPU, config: ServingConfig,
              transfer: TransferModel | None = None, quant: QuantCostModel | None = None,
              cpu: CPUModel | None = None,
              engine_version: str | None = None) -> OffloadContext:
        tp = config.tp
        cpu = cpu or CPUModel.from_gpu(gpu)
        quant = quant or QuantCostModel.from_specs(gpu, cpu)
        transfer = transfer or SaturatingTransferModel.from_specs(gpu)
        # KV values one token holds per layer and rank (MLA: its one latent; every head's K and
        # V under vLLM before 0.7.1), as the memory plan
        elems = kv_bytes_per_token_per_layer_rank(model, 16, tp, engine_version) / 2.0
        wf = config.weight_offload_fraction
        held = weight_bytes_per_rank(model, config)  # MoE with dp > 1: 1/dp of the experts
        offloaded = wf * held
        lin_elems = (wf * model.linear_params_per_layer / tp
                     * held / (model.weight_bytes(config.weight_bits) / tp))
        scheme = (weight_offload_scheme(config.engine, config.kv_offload_layers,
                                        config.attention_on_cpu, engine_version)
                  if wf > 0 else "prefetch")
        # vLLM offloads whole decoder layers, first ones first (embedding and LM head stay), of
        # the rank's pipeline stage
        layer_bytes = decoder_layer_bytes_per_rank(model, config)
        stage_layers = math.ceil(model.num_layers / config.pp)
        init = 0.0
        # vLLM quantizes (or loads quantized) weights on the GPU before offloading them: no
        # CPU quantization pass (Eq. 3 is LM-Offload's)
        if wf > 0 and config.weight_bits < 16 and scheme == "prefetch":
            init = float(quant.quantize_s(lin_elems * model.num_layers, "cpu"))
        return cls(model=model, gpu=gpu, config=config, transfer=transfer, quant=quant, cpu=cpu,
                   threads=threads_for(config, cpu),
                   # the bytes the memory plan holds at kv_bits (a packed layout such as
                   # DeepSeek-V3.2's FP8 MLA cache with its scales is not elems x bits)
                   kv_bytes_per_token_layer=kv_bytes_per_token_per_layer_rank(
                       model, config.kv_bits, tp, engine_version, gpu, config.engine),
                   kv_elems_per_token_layer=elems, heads_per_rank=model.num_heads / tp,
                   weight_stream_bytes_per_layer=offloaded / model.num_layers,
                   weight_stream_elems_per_layer=lin_elems, weight_init_quantize_s=init,
                   weight_scheme=scheme, weight_layer_bytes=layer_bytes,
                   weight_offloaded_layers=(min(offloaded / layer_bytes, stage_layers)
                                            if layer_bytes > 0 else 0.0))


def _per_layer_times(cost_model: CostModel, f: BatchFeatures):
    """(one layer's GPU time, one layer's GPU decode attention) per iteration."""
    layer_s = np.asarray(cost_model.layer_time_s(f), dtype=np.float64)
    dec_s = np.asarray(cost_model.decode_attention_layer_s(f), dtype=np.float64)
    return layer_s, np.minimum(dec_s, layer_s)


def _cpu_attention(f: BatchFeatures, ctx: OffloadContext, gpu_dec_s: np.ndarray):
    """CPU attention for the offloaded layers' decodes (FlexGen decode path): (extra time per
    offloaded layer over GPU attention, KV tokens per layer moved host->device and
    device->host). Without it: none, and every offloaded layer's KV makes the round trip."""
    c = ctx.config
    new_tok = f.prefill_tokens + f.decodes
    pf_ctx = np.where(f.prefill_tokens > 0, f.prefill_ctx / np.maximum(f.prefill_tokens, 1.0), 0.0)
    if not (c.attention_on_cpu and min(int(c.kv_offload_layers), ctx.model.num_layers) > 0):
        h2d_tok = np.maximum(f.decode_kv - f.decodes, 0.0) + pf_ctx
        return np.zeros(len(f)), h2d_tok, (h2d_tok + new_tok) if KV_WRITEBACK_FULL else new_tok
    e_tok = ctx.kv_elems_per_token_layer
    flops = 4.0 * ctx.heads_per_rank * ctx.model.head_dim * f.decode_kv
    cpu_attn = ctx.cpu.attention_s(f.decode_kv * ctx.kv_bytes_per_token_layer, flops,
                                   ctx.threads.intra, ctx.threads.inter)
    if c.kv_bits < 16:  # dequantize the host KV on the CPU before use (Eq. 16-style, on CPU)
        cpu_attn = cpu_attn + np.where(f.decodes > 0,
                                       ctx.quant.dequantize_s(f.decode_kv * e_tok, "cpu"), 0.0)
    act_out = f.decodes * (ctx.heads_per_rank * ctx.model.head_dim + e_tok) * 2.0  # q, k, v
    act_in = f.decodes * ctx.heads_per_rank * ctx.model.head_dim * 2.0  # attention output
    act = ctx.transfer.d2h_s(act_out) + ctx.transfer.h2d_s(act_in)
    # prefill chunks still attend on the GPU
    return np.where(f.decodes > 0, cpu_attn + act - gpu_dec_s, 0.0), pf_ctx, f.prefill_tokens


def _kv_quantization(f: BatchFeatures, ctx: OffloadContext, h2d_tok: np.ndarray):
    """LM-Offload Eqs. 6-7 on the transfer path of the offloaded layers (per layer), and
    quantize-on-write on the GPU for the resident ones (per iteration)."""
    c, L = ctx.config, ctx.model.num_layers
    k = min(int(c.kv_offload_layers), L)
    zero = np.zeros(len(f))
    if c.kv_bits >= 16:
        return zero, zero
    e_tok = ctx.kv_elems_per_token_layer
    new_tok = f.prefill_tokens + f.decodes
    extra = zero
    if k > 0:
        deq = ctx.quant.dequantize_s(h2d_tok * e_tok, "gpu")
        q_new = ctx.quant.quantize_s((f.prefill_tokens if c.attention_on_cpu else new_tok)
                                     * e_tok, "gpu")
        extra = np.where(h2d_tok > 0, deq, 0.0) + np.where(new_tok > 0, q_new, 0.0)
    quant_s = np.where(new_tok > 0, ctx.quant.quantize_s(new_tok * e_tok * (L - k), "gpu"), 0.0)
    return extra, quant_s


def price_iterations(f: BatchFeatures, dt: np.ndarray, ctx: OffloadContext,
                     cost_model=None) -> dict[str, np.ndarray]:
    """Per-iteration times with the offload knobs of ctx.config; dt from the cost model.

    Returns arrays: dt_s (the new iteration times), kv_stall_s, weight_stall_s,
    cpu_attention_s (extra over GPU attention), quant_s (quantize-on-write on the GPU),
    kv_transfer_s, kv_budget_s, weight_transfer_s, max_layers (Vasuki: max of Alg. 1 and 2 as
    published), max_layers_exact (the same tests scanned exhaustively), alg1, alg2."""
    c, L = ctx.config, ctx.model.num_layers
    k = min(int(c.kv_offload_layers), L)
    n = len(f)
    zero = np.zeros(n)
    layer_s, gpu_dec_s = _per_layer_times(cost_model, f)
    n_req = f.decodes + np.maximum(f.seqs_sampled - f.decodes, (f.prefill_tokens > 0) * 1.0)
    cpu_delta, h2d_tok, d2h_tok = _cpu_attention(f, ctx, gpu_dec_s)
    extra, quant_s = _kv_quantization(f, ctx, h2d_tok)
    b_tok = ctx.kv_bytes_per_token_layer

    if ctx.weight_scheme != "prefetch" and c.weight_offload_fraction > 0:
        # vLLM's --cpu-offload-gb (tuner.core.engines.WEIGHT_OFFLOAD_SCHEMES): whole layers in
        # host memory, nothing prefetched; no KV offload beside it (the scheme requires none)
        one_layer_s = float(ctx.transfer.h2d_s(ctx.weight_layer_bytes))
        m = ctx.weight_offloaded_layers
        if ctx.weight_scheme == "vllm-uva":  # the kernels read over the link as they compute
            weight_stall = m * np.maximum(one_layer_s - layer_s, 0.0)
        else:  # copied before the layer's forward, on the compute stream
            weight_stall = np.full(n, m * one_layer_s)
        weight_transfer = np.full(n, m * one_layer_s)
        exec_kv = layer_s
    else:
        # Eq. 2 per layer: weights streamed for the next layer vs this layer's compute
        compute_layer_res = layer_s
        compute_layer_off = layer_s + cpu_delta
        w_link = float(ctx.transfer.h2d_s(ctx.weight_stream_bytes_per_layer))
        w_load = w_link
        if c.weight_offload_fraction > 0 and c.weight_bits < 16:
            w_load += float(ctx.quant.dequantize_s(ctx.weight_stream_elems_per_layer, "gpu"))
        if w_load > 0:
            weight_stall = ((L - k) * np.maximum(w_load - compute_layer_res, 0.0)
                            + k * np.maximum(w_load - compute_layer_off, 0.0))
        else:
            weight_stall = zero
        weight_transfer = np.full(n, L * w_load) if w_load > 0 else zero
        wall_layer = (((L - k) * np.maximum(compute_layer_res, w_load)
                       + k * np.maximum(compute_layer_off, w_load)) / L)
        exec_kv = np.maximum(wall_layer - w_link, 0.0)

    kv = KVTransfer(h2d_bytes_per_layer=h2d_tok * b_tok, d2h_bytes_per_layer=d2h_tok * b_tok,
                    num_requests=n_req, extra_s_per_layer=extra)
    st = kv_offload_stall_s(k, L, kv, exec_kv, ctx.transfer)
    best, a1, a2 = max_overlapped_layers(L, kv, exec_kv, ctx.transfer)
    best_exact, _, _ = max_overlapped_layers(L, kv, exec_kv, ctx.transfer, exact=True)

    dt_new = dt + k * cpu_delta + quant_s + weight_stall + st["stall_s"]
    return {
        "dt_s": dt_new,
        "kv_stall_s": st["stall_s"],
        "weight_stall_s": weight_stall,
        "cpu_attention_s": k * cpu_delta,
        "quant_s": quant_s,
        "kv_transfer_s": st["transfer_s"],
        "kv_budget_s": st["budget_s"],
        "weight_transfer_s": weight_transfer,
        "max_layers": best,
        "max_layers_exact": best_exact,
        "layer_transfer_s": kv.time_s(1, ctx.transfer),  # one layer's KV moved (both ways)
        "layer_exec_s": exec_kv,  # one layer's compute left for overlapping KV
        "alg1": a1,
        "alg2": a2,
    }


# ---------------------------------------------------------------------------------------
# Aggregation for SimResult.summary()["offload"]


@dataclass
class OffloadTotals:
    """Sums over every replica's iterations; `summary` turns them into the report figures."""

    iterations: int = 0
    time_s: float = 0.0
    kv_stall_s: float = 0.0
    weight_stall_s: float = 0.0
    cpu_attention_s: float = 0.0
    quant_s: float = 0.0
    kv_transfer_s: float = 0.0
    kv_budget_s: float = 0.0
    weight_transfer_s: float = 0.0
    layer_transfer_s: float = 0.0
    layer_exec_s: float = 0.0
    stalled_iterations: int = 0
    kv_stalled_iterations: int = 0
    max_layers: list = field(default_factory=list)
    max_layers_exact: list = field(default_factory=list)
    alg1: list = field(default_factory=list)
    alg2: list = field(default_factory=list)

    def add(self, p: dict[str, np.ndarray]) -> None:
        self.iterations += len(p["dt_s"])
        self.time_s += float(p["dt_s"].sum())
        for name in ("kv_stall_s", "weight_stall_s", "cpu_attention_s", "quant_s",
                     "kv_transfer_s", "kv_budget_s", "weight_transfer_s", "layer_transfer_s",
                     "layer_exec_s"):
            setattr(self, name, getattr(self, name) + float(p[name].sum()))
        stall = p["kv_stall_s"] + p["weight_stall_s"]
        self.stalled_iterations += int((stall > 1e-12).sum())
        self.kv_stalled_iterations += int((p["kv_stall_s"] > 1e-12).sum())
        self.max_layers.append(p["max_layers"])
        self.max_layers_exact.append(p["max_layers_exact"])
        self.alg1.append(p["alg1"])
        self.alg2.append(p["alg2"])

    @property
    def stall_s(self) -> float:
        return self.kv_stall_s + self.weight_stall_s

    def summary(self, ctx: OffloadContext, plan: MemoryPlan, *, dp: int,
                kv_capacity_tokens_no_offload: int) -> dict:
        c = ctx.config
        best = np.concatenate(self.max_layers) if self.max_layers else np.zeros(0)
        exact = np.concatenate(self.max_layers_exact) if self.max_layers_exact else np.zeros(0)
        a1 = np.concatenate(self.alg1) if self.alg1 else np.zeros(0)
        a2 = np.concatenate(self.alg2) if self.alg2 else np.zeros(0)
        pct = (lambda a, q: int(np.percentile(a, q)) if a.size else 0)  # noqa: E731
        per = 1.0 / max(dp, 1)
        k = min(c.kv_offload_layers, ctx.model.num_layers)
        return {
            "kv_offload_layers": k,
            "weight_offload_fraction": c.weight_offload_fraction,
            "attention_on_cpu": c.attention_on_cpu,
            "weight_bits": c.weight_bits,
            "kv_bits": c.kv_bits,
            "memory": {key: float(v) for key, v in plan.breakdown().items()},
            "kv_capacity_tokens": plan.kv_capacity_tokens,
            "kv_capacity_tokens_without_offload": int(kv_capacity_tokens_no_offload),
            "kv_capacity_gain": (plan.kv_capacity_tokens / kv_capacity_tokens_no_offload
                                 if kv_capacity_tokens_no_offload else None),
            # Vasuki §5.1 per iteration: most layers offloadable with full overlap
            "max_overlapped_layers": {
                "best_p10": pct(best, 10), "best_median": pct(best, 50), "best_p90": pct(best, 90),
                "alg1_median": pct(a1, 50), "alg2_median": pct(a2, 50),
                "exact_p10": pct(exact, 10), "exact_median": pct(exact, 50),
                "exact_p90": pct(exact, 90),
            },
            "iterations_fully_overlapped": (1.0 - self.kv_stalled_iterations / self.iterations
                                            if self.iterations else 1.0),
            # why: moving one layer's batch KV (both ways) vs computing one layer, mean per
            # iteration; Alg. 1 overlaps k layers while k x ratio <= L - 2k, Alg. 2 needs < 1
            "layer_kv_transfer_ms": 1e3 * self.layer_transfer_s / max(self.iterations, 1),
            "layer_exec_ms": 1e3 * self.layer_exec_s / max(self.iterations, 1),
            "transfer_to_compute_ratio": (self.layer_transfer_s / self.layer_exec_s
                                          if self.layer_exec_s > 0 else None),
            # per replica (sums over its iterations; dp replicas run in parallel)
            "kv_transfer_s": self.kv_transfer_s * per,
            "kv_overlap_budget_s": self.kv_budget_s * per,
            "weight_transfer_s": self.weight_transfer_s * per,
            "kv_stall_s": self.kv_stall_s * per,
            "weight_stall_s": self.weight_stall_s * per,
            "cpu_attention_extra_s": self.cpu_attention_s * per,
            "kv_quantize_s": self.quant_s * per,
            "offload_stall_s": self.stall_s * per,
            "stall_fraction": self.stall_s / self.time_s if self.time_s > 0 else 0.0,
            "stalled_iterations_fraction": (self.stalled_iterations / self.iterations
                                            if self.iterations else 0.0),
            "weight_init_quantize_s": ctx.weight_init_quantize_s,
            "weight_offload_scheme": ctx.weight_scheme if c.weight_offload_fraction > 0 else None,
            "weight_offloaded_layers": (round(ctx.weight_offloaded_layers, 2)
                                        if ctx.weight_scheme != "prefetch" else None),
            "cpu_threads": dataclasses.asdict(ctx.threads) | {"cores": ctx.cpu.cores},
            "transfer_model": ctx.transfer.describe(),
        }
