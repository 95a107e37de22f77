"""Cost model from measured vLLM kernel tables (NVIDIA AIConfigurator, predictors/data/aic).

    tables = KernelTables.load("H100")                    # a catalog GPU with shipped tables
    cm = MeasuredTableCostModel.build(model, gpu, tables, tp=1)
    cm.iteration_time_s(features)                          # vectorised over many iterations

Where the numbers come from (all per tensor-parallel rank, per layer unless said):
  linear     measured GEMM latency at the model's shapes: QKV (n=(H+2K)d/tp, k=h), O (n=h,
             k=Hd/tp), gate+up (n=2I/tp, k=h), down (n=h, k=I/tp); the LM head (n=V/tp, k=h)
             at m = sampled rows, once per step
  attention  measured context attention (prefill) priced by the step's causal query-key pairs;
             measured generation attention (decode) by (decode count, mean KV length)
  allreduce  measured vLLM custom all-reduce, 2 per layer at m x h bf16 bytes, CUDA-graph
             timing up to vLLM's largest captured batch (512 tokens), eager above
  elementwise  norms, rotary, SiLU*mul, residual adds: NOT in the tables; spec-sheet memory
             traffic at 75 % of peak bandwidth (estimated, labelled so in the breakdown)

Interpolation: log latency is interpolated linearly in the log of each size between measured
points (GEMM: n and k at build time, m at run time; attention: batch and length). Beyond the
largest measured size the last measured segment's log-log slope continues (~1, i.e. time in
proportion to size, for throughput-bound kernels); below the smallest size the smallest
measured time holds (a launch-bound kernel does not get faster).

The hot path is one np.interp per curve (GEMM per layer summed into one curve over m, LM head,
prefill attention, all-reduce) plus one bilinear lookup for decode attention: pricing 500k
iterations takes tens of milliseconds (benchmarks/fidelity.py --speed).

GPUs without tables are transferred from the measured GPU of the same architecture through
spec-sheet ratios (`transfer_tables`): each kernel's measured time is multiplied by
roofline(target) / roofline(source) at that kernel's own FLOPs and bytes, so a memory-bound
decode GEMM scales with HBM bandwidth and a compute-bound prefill GEMM with tensor FLOP/s.
The same rule applied between two measured GPUs gives its error (`transfer_check`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path

import numpy as np

from predictors.features import BatchFeatures, sum_parts

# tuner catalog GPU -> AIConfigurator system whose vLLM tables measure it
MEASURED = {"A100-80G": "a100_sxm", "H100": "h100_sxm", "H200": "h200_sxm", "L40S": "l40s",
            "RTX-PRO-6000": "rtx_pro_6000_server"}
# catalog GPU without tables -> measured GPU of the same architecture (transfer source)
TRANSFER_SOURCE = {"A100-40G": "A100-80G",  # same GA100 die, less HBM bandwidth
                   "A10": "A100-80G", "A40": "A100-80G",  # Ampere (GA102)
                   "L4": "L40S", "RTX4090": "L40S"}  # Ada (AD104 / AD102)
# vLLM captures CUDA graphs up to this many tokens (cudagraph_capture_sizes' maximum in the
# resolved config of the vLLM 0.19 fidelity run); larger steps run eager
CUDA_GRAPH_MAX_TOKENS = 512
ELEMENTWISE_BW_EFFICIENCY = 0.75  # estimated, as in predictors.roofline


def data_dir() -> Path:
    return Path(__file__).resolve().parent / "data" / "aic"


def version_code(v: str) -> float:
    """'0.19.0' -> 19000.0 (as scripts/convert_aic_tables.py stores table versions)."""
    import re

    parts = [int(x) for x in re.findall(r"\d+", str(v))[:3]] + [0, 0, 0]
    return float(parts[0] * 1_000_000 + parts[1] * 1_000 + parts[2])


def version_name(code: float) -> str:
    c = int(code)
    return f"{c // 1_000_000}.{c // 1_000 % 1_000}.{c % 1_000}"


# ---- one GPU's tables --------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class KernelTables:
    """Measured (or transferred) kernel latencies of one GPU, in seconds."""

    gpu: str  # catalog name these tables price
    device: str  # device the measurements were taken on
    gemm_version: str
    attention_version: str
    arrays: dict = field(repr=False)
    # transfer: None for measured tables; else (source catalog GPU, scale functions' specs)
    transfer: dict | None = None

    @property
    def measured(self) -> bool:
        return self.transfer is None

    @classmethod
    def load(cls, gpu_name: str, path: Path | None = None) -> KernelTables:
        system = MEASURED.get(gpu_name)
        if system is None:
            raise KeyError(f"no measured kernel tables for {gpu_name}")
        return _load_tables(str(path or data_dir()), system, gpu_name)

    # -- GEMM ------------------------------------------------------------------------------
    def gemm_m_grid(self, dtype: str = "bf16") -> np.ndarray:
        return self.arrays[f"gemm_{dtype}_m"].astype(np.float64)

    def gemm_s(self, n: int, k: int, dtype: str = "bf16") -> np.ndarray:
        """Seconds of an (m x k) @ (k x n) GEMM at every m of gemm_m_grid(dtype)."""
        logl = self.arrays[f"gemm_{dtype}_loglat"]
        i0, i1, w, ex_n = _axis(self.arrays[f"gemm_{dtype}_n"], n)
        j0, j1, v, ex_k = _axis(self.arrays[f"gemm_{dtype}_k"], k)
        lat = ((1 - w) * (1 - v) * logl[:, i0, j0] + w * (1 - v) * logl[:, i1, j0]
               + (1 - w) * v * logl[:, i0, j1] + w * v * logl[:, i1, j1])
        t = np.exp(lat + ex_n + ex_k) * 1e-3
        if self.transfer:
            m = self.gemm_m_grid(dtype)
            t = t * _roof_ratio(self.transfer, 2.0 * m * n * k, 2.0 * (m * k + n * k + m * n),
                                "fp8" if dtype == "fp8" else "bf16")
        return t

    def has_gemm(self, dtype: str) -> bool:
        return f"gemm_{dtype}_loglat" in self.arrays

    # -- attention -------------------------------------------------------------------------
    def _attn_rows(self, table: str, heads: int, kv_heads: int, head_dim: int, kv_fp8: bool):
        a = self.arrays[table]
        a = a[a[:, 0] == (1.0 if kv_fp8 else 0.0)]
        if not len(a):
            raise KeyError(f"{self.gpu}: no {table} rows for {'fp8' if kv_fp8 else 'bf16'} KV")
        hd = a[np.argmin(np.abs(np.log(a[:, 5] / head_dim))), 5]
        a = a[a[:, 5] == hd]
        combos = np.unique(a[:, 3:5], axis=0)
        # nearest measured (heads, kv_heads) in log distance; scaled below when not exact
        d = np.abs(np.log(combos[:, 0] / heads)) + np.abs(np.log(combos[:, 1] / kv_heads))
        h, kv = combos[int(np.argmin(d))]
        rows = a[(a[:, 3] == h) & (a[:, 4] == kv)]
        exact = bool(h == heads and kv == kv_heads and hd == head_dim)
        return rows, (float(h), float(kv), float(hd)), exact

    def context_attention(self, heads: int, kv_heads: int, head_dim: int, kv_fp8: bool = False):
        """(causal query-key pairs, seconds) of one sequence's prefill from the batch-1 rows;
        a head configuration the table lacks is scaled from the nearest measured one by
        query heads x head_dim (prefill attention is compute-bound)."""
        rows, (h, _kv, hd), _ = self._attn_rows("ctx_attn", heads, kv_heads, head_dim, kv_fp8)
        b1 = rows[rows[:, 1] == rows[:, 1].min()]
        b1 = b1[np.argsort(b1[:, 2])]
        isl = b1[:, 2]
        pairs = b1[:, 1] * isl * (isl + 1) / 2.0
        t = b1[:, 6] * 1e-3 * (heads * head_dim) / (h * hd)
        if self.transfer:
            flops = 4.0 * heads * head_dim * pairs
            byts = 2.0 * isl * (heads + 2 * kv_heads) * head_dim * 2.0
            t = t * _roof_ratio(self.transfer, flops, byts, "bf16")
        return pairs, t

    def generation_attention(self, heads: int, kv_heads: int, head_dim: int,
                             kv_fp8: bool = False):
        """(batch grid, KV-length grid, seconds[batch, length]) of one decode step's attention;
        missing cells filled along the length axis (log-log, last slope continued); a head
        configuration the table lacks is scaled from the nearest measured one by KV heads x
        head_dim (decode attention is memory-bound)."""
        rows, (_h, kv, hd), _ = self._attn_rows("gen_attn", heads, kv_heads, head_dim, kv_fp8)
        b = np.unique(rows[:, 1])
        s = np.unique(rows[:, 2])
        g = np.full((len(b), len(s)), np.nan)
        g[np.searchsorted(b, rows[:, 1]), np.searchsorted(s, rows[:, 2])] = np.log(rows[:, 6] * 1e-3)
        g = _fill_loglog(np.log(s), g, axis=1)
        g = _fill_loglog(np.log(b), g, axis=0)
        t = np.exp(g) * (kv_heads * head_dim) / (kv * hd)
        if self.transfer:
            bb, ss = np.meshgrid(b, s, indexing="ij")
            kvb = (1.0 if kv_fp8 else 2.0)
            byts = bb * ss * 2.0 * kv_heads * head_dim * kvb
            flops = 4.0 * heads * head_dim * bb * ss
            t = t * _roof_ratio(self.transfer, flops, byts, "bf16")
        return b, s, t

    # -- all-reduce ------------------------------------------------------------------------
    def allreduce(self, num_gpus: int, graph: bool, engine_version: str | None = None):
        """(message bytes, seconds, table version) of vLLM's custom all-reduce on `num_gpus`,
        from the table version closest to `engine_version` (newest when None) that has that
        GPU count; None when no table has it."""
        a = self.arrays["allreduce"]
        a = a[(a[:, 2] == num_gpus) & (a[:, 1] == (1.0 if graph else 0.0))]
        if not len(a):
            return None
        vers = np.unique(a[:, 0])
        want = version_code(engine_version) if engine_version else vers.max()
        v = vers[np.argmin(np.abs(vers - want) - 1e-9 * vers)]  # ties: the newer
        r = a[a[:, 0] == v]
        r = r[np.argsort(r[:, 3])]
        t = r[:, 4] * 1e-3
        if self.transfer:
            # latency part (the smallest message) kept; the bandwidth part scaled by links
            t = t[0] + (t - t[0]) * self.transfer["link_ratio"]
        return r[:, 3], t, version_name(v)

    def describe(self) -> str:
        if self.measured:
            return (f"measured: AIConfigurator, vLLM {self.gemm_version} kernels on {self.device}")
        return (f"transferred to {self.gpu} from {self.transfer['source']} ({self.device}, vLLM "
                f"{self.gemm_version} kernels) via spec-sheet ratios")


@lru_cache(maxsize=16)
def _load_tables(path: str, system: str, gpu_name: str) -> KernelTables:
    d = Path(path)
    manifest = json.loads((d / "manifest.json").read_text())
    info = manifest["gpus"][system]
    z = np.load(d / f"{system}.npz")
    arrays = {k: z[k] for k in z.files}
    for dt in ("bf16", "fp8"):
        if f"gemm_{dt}_lat_ms" in arrays:
            logl = np.log(arrays.pop(f"gemm_{dt}_lat_ms").astype(np.float64))
            n = arrays[f"gemm_{dt}_n"].astype(np.float64)
            # an (n, k) column the table never measured (the 65536 x 65536 corner): from its
            # neighbour at the next smaller n, in proportion to n
            for j in range(1, logl.shape[1]):
                bad = ~np.isfinite(logl[:, j, :])
                if bad.any():
                    logl[:, j, :] = np.where(bad, logl[:, j - 1, :] + np.log(n[j] / n[j - 1]),
                                             logl[:, j, :])
            arrays[f"gemm_{dt}_loglat"] = logl
    return KernelTables(gpu=gpu_name, device=info["device"], gemm_version=info["gemm_version"],
                        attention_version=info["attention_version"], arrays=arrays)


def _axis(grid, x: float):
    """Interpolation bracket on a log axis: (i0, i1, weight, extra log) — beyond the last
    point the extra log makes time proportional to size; below the first it holds."""
    lg = np.log(np.asarray(grid, dtype=np.float64))
    lx = np.log(float(x))
    if lx <= lg[0]:
        return 0, 0, 0.0, 0.0
    if lx >= lg[-1]:
        return len(lg) - 1, len(lg) - 1, 0.0, lx - lg[-1]
    i = int(np.searchsorted(lg, lx)) - 1
    return i, i + 1, (lx - lg[i]) / (lg[i + 1] - lg[i]), 0.0


def _fill_loglog(lx: np.ndarray, g: np.ndarray, axis: int) -> np.ndarray:
    """Fill NaN cells of log-latency grid g along `axis` (log coordinates lx): interpolate
    between measured cells, continue the last segment's slope beyond them, hold below."""
    g = np.moveaxis(g.copy(), axis, -1)
    for idx in np.ndindex(g.shape[:-1]):
        row = g[idx]
        ok = np.isfinite(row)
        if ok.all() or not ok.any():
            continue
        x, y = lx[ok], row[ok]
        v = np.interp(lx, x, y)
        if ok.sum() >= 2:
            slope = (y[-1] - y[-2]) / (x[-1] - x[-2])
            hi = lx > x[-1]
            v[hi] = y[-1] + slope * (lx[hi] - x[-1])
        g[idx] = np.where(ok, row, v)
    return np.moveaxis(g, -1, axis)


# ---- transfer through spec-sheet ratios ---------------------------------------------------
def _roof_ratio(tr: dict, flops, byts, dtype: str):
    """roofline time on the target / on the source for kernels of these FLOPs and bytes."""
    fs, ft = tr["src_flops"][dtype], tr["dst_flops"][dtype]
    return (np.maximum(flops / ft, byts / tr["dst_bw"])
            / np.maximum(flops / fs, byts / tr["src_bw"]))


def spec_peaks(gpu) -> dict:
    """Spec-sheet peaks of a tuner GPU (duck-typed) as the transfer rule uses them."""
    bf16 = gpu.bf16_tflops * 1e12
    fp8 = (getattr(gpu, "fp8_tflops", None) or 0.0) * 1e12 or bf16
    return {"flops": {"bf16": bf16, "fp8": fp8}, "bw": gpu.hbm_gbps * 1e9,
            "link": (getattr(gpu, "nvlink_gbps", None) or gpu.host_link_gbps) * 1e9}


def transfer_tables(source: KernelTables, source_gpu, target_gpu) -> KernelTables:
    """`source`'s tables re-priced for `target_gpu` (both duck-typed tuner GPUs)."""
    s, t = spec_peaks(source_gpu), spec_peaks(target_gpu)
    tr = {"source": source.gpu, "src_flops": s["flops"], "dst_flops": t["flops"],
          "src_bw": s["bw"], "dst_bw": t["bw"], "link_ratio": s["link"] / t["link"]}
    return replace(source, gpu=target_gpu.name, transfer=tr)


# ---- the cost model -----------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class MeasuredTableCostModel:
    """Per-iteration GPU time from measured kernel tables at one model's shapes (per TP rank),
    precomputed into 1-D curves; plus an optional engine-overhead profile (host time)."""

    num_layers: int
    # linear: per-layer GEMMs summed, and the LM head, over the table's m grid (log-log)
    log_m: np.ndarray
    log_linear_s: np.ndarray
    log_head_s: np.ndarray
    # prefill attention over causal pairs, decode attention over (batch, KV length)
    log_pairs: np.ndarray
    log_ctx_s: np.ndarray
    log_gen_b: np.ndarray
    log_gen_s: np.ndarray
    log_gen_t: np.ndarray  # [batch, length]
    # all-reduce over message bytes (graph and eager), empty at tp 1
    log_ar_bytes: np.ndarray
    log_ar_graph_s: np.ndarray
    log_ar_eager_s: np.ndarray
    hidden_bytes_per_token: float  # all-reduce message per token (bf16 hidden state)
    elementwise_s_per_token: float  # per layer, estimated from spec-sheet bandwidth
    tp: int
    provenance: str
    kind: str  # "measured" | "transferred"
    engine: object | None = None  # predictors.engine_overhead.EngineProfile
    transfer_error: dict | None = None  # {"median_pct", "worst_pct", "pairs"} of the rule
    name: str = "measured kernel tables"

    @classmethod
    def build(cls, model, gpu, tables: KernelTables, *, tp: int = 1, weight_bits: int = 16,
              kv_bits: int = 16, engine_version: str | None = None, engine=None,
              transfer_error: dict | None = None) -> MeasuredTableCostModel:
        """Curves for `model` (duck-typed ModelSpec) on `gpu` at tensor parallelism `tp`."""
        if weight_bits not in (16, 8):
            raise ValueError(f"measured tables cover 16- and 8-bit (FP8) weights, not {weight_bits}")
        dtype = "fp8" if weight_bits == 8 else "bf16"
        if not tables.has_gemm(dtype):
            raise ValueError(f"{tables.device} has no measured {dtype} GEMM table")
        h, H, K, d = model.hidden_size, model.num_heads, model.num_kv_heads, model.head_dim
        inter, vocab = model.intermediate_size, model.vocab_size
        Hr, Kr = max(1, H // tp), max(1, K // tp)  # KV heads replicate when fewer than tp
        shapes = [((Hr + 2 * Kr) * d, h), (h, Hr * d), (2 * inter // tp, h), (h, inter // tp)]
        m = tables.gemm_m_grid(dtype)
        linear = sum(tables.gemm_s(n, k, dtype) for n, k in shapes)
        head = tables.gemm_s(max(1, vocab // tp), h, "bf16")  # vLLM keeps the LM head 16-bit
        hm = tables.gemm_m_grid("bf16")
        head = np.exp(np.interp(np.log(m), np.log(hm), np.log(head)))
        kv_fp8 = kv_bits == 8
        pairs, ctx = tables.context_attention(Hr, Kr, d, kv_fp8)
        b, s, gen = tables.generation_attention(Hr, Kr, d, kv_fp8)
        empty = np.zeros(0)
        ar_b, ar_g, ar_e, ar_note = empty, empty, empty, ""
        if tp > 1:
            g = tables.allreduce(tp, True, engine_version)
            e = tables.allreduce(tp, False, engine_version)
            if g is None or e is None:
                raise ValueError(f"{tables.device} has no all-reduce table for {tp} GPUs")
            ar_b, ar_g, ar_e = np.log(g[0]), np.log(g[1]), np.log(np.interp(g[0], e[0], e[1]))
            ar_note = f"; all-reduce: vLLM {g[2]} custom all-reduce table"
        # norms (2, fused with residual add), rotary on q and k, SiLU*mul: bytes per token
        ew_bytes = 2.0 * (2 * 4 * h + 2 * (Hr + Kr) * d + 3 * inter // tp)
        ew = ew_bytes / (gpu.hbm_gbps * 1e9 * ELEMENTWISE_BW_EFFICIENCY)
        prov = tables.describe() + ar_note
        if tables.transfer and transfer_error:
            prov += (f"; transfer error {transfer_error['median_pct']:.0f} % median, "
                     f"{transfer_error['worst_pct']:.0f} % worst over "
                     f"{transfer_error['pairs']} measured GPU pairs")
        prov += "; norms/rotary/activation estimated from spec-sheet bandwidth"
        return cls(num_layers=model.num_layers, log_m=np.log(m), log_linear_s=np.log(linear),
                   log_head_s=np.log(head), log_pairs=np.log(pairs), log_ctx_s=np.log(ctx),
                   log_gen_b=np.log(b), log_gen_s=np.log(s), log_gen_t=np.log(gen),
                   log_ar_bytes=ar_b, log_ar_graph_s=ar_g, log_ar_eager_s=ar_e,
                   hidden_bytes_per_token=2.0 * h, elementwise_s_per_token=ew, tp=tp,
                   provenance=prov, kind="measured" if tables.measured else "transferred",
                   engine=engine, transfer_error=transfer_error)

    # ---- pricing -------------------------------------------------------------------------
    def gpu_breakdown(self, f: BatchFeatures) -> dict[str, np.ndarray]:
        """Seconds of GPU work per iteration by operation group (all layers summed)."""
        L = self.num_layers
        tokens = f.prefill_tokens + f.decodes
        linear = _curve(tokens, self.log_m, self.log_linear_s)
        head = _curve(f.seqs_sampled, self.log_m, self.log_head_s)
        pairs = f.prefill_ctx + 0.5 * (f.prefill_sq + f.prefill_tokens)
        ctx = _curve(pairs, self.log_pairs, self.log_ctx_s)
        gen = _bilinear(f.decodes, f.decode_kv, self.log_gen_b, self.log_gen_s, self.log_gen_t)
        if self.tp > 1:
            msg = tokens * self.hidden_bytes_per_token
            ar = np.where(tokens <= CUDA_GRAPH_MAX_TOKENS,
                          _curve(msg, self.log_ar_bytes, self.log_ar_graph_s),
                          _curve(msg, self.log_ar_bytes, self.log_ar_eager_s))
            allreduce = 2.0 * L * ar
        else:
            allreduce = np.zeros_like(tokens)
        return {"linear": L * linear, "lm_head": head, "attention_prefill": L * ctx,
                "attention_decode": L * gen, "allreduce": allreduce,
                "elementwise_estimated": L * self.elementwise_s_per_token * tokens}

    def breakdown(self, f: BatchFeatures) -> dict[str, np.ndarray]:
        parts = self.gpu_breakdown(f)
        if self.engine is not None:
            gpu = sum_parts(parts, len(f))
            parts["engine_overhead"] = self.engine.step_time_s(gpu, f, self.tp) - gpu
        return parts

    def iteration_time_s(self, f: BatchFeatures) -> np.ndarray:
        gpu = sum_parts(self.gpu_breakdown(f), len(f))
        return gpu if self.engine is None else self.engine.step_time_s(gpu, f, self.tp)

    def describe(self) -> str:
        eng = f"; engine overhead: {self.engine.describe()}" if self.engine is not None else ""
        return self.provenance + eng

    def with_engine(self, engine) -> MeasuredTableCostModel:
        return replace(self, engine=engine)

    # per-layer views (tuner.sim.offload uses them for overlap budgets)
    def layer_time_s(self, f: BatchFeatures) -> np.ndarray:
        p = self.gpu_breakdown(f)
        return (p["linear"] + p["attention_prefill"] + p["attention_decode"] + p["allreduce"]
                + p["elementwise_estimated"]) / self.num_layers

    def decode_attention_layer_s(self, f: BatchFeatures) -> np.ndarray:
        return self.gpu_breakdown(f)["attention_decode"] / self.num_layers


def _curve(x: np.ndarray, lx: np.ndarray, ly: np.ndarray) -> np.ndarray:
    """exp(interp(log x)) with the last segment's slope continued above the grid, the first
    value held below it, and 0 where x <= 0 (no such work in the step)."""
    x = np.asarray(x, dtype=np.float64)
    pos = x > 0
    l = np.log(np.where(pos, x, 1.0))
    y = np.interp(l, lx, ly)
    if len(lx) >= 2:
        slope = (ly[-1] - ly[-2]) / (lx[-1] - lx[-2])
        y = np.where(l > lx[-1], ly[-1] + slope * (l - lx[-1]), y)
    return np.where(pos, np.exp(y), 0.0)


def _bilinear(n: np.ndarray, kv: np.ndarray, lb: np.ndarray, ls: np.ndarray,
              lt: np.ndarray) -> np.ndarray:
    """Decode attention seconds for n decodes reading kv KV tokens in total: bilinear in
    (log n, log mean length) over log time; extrapolated along the last segment above the grid,
    held below it; 0 where n == 0."""
    n = np.asarray(n, dtype=np.float64)
    pos = n > 0
    x = np.log(np.where(pos, n, 1.0))
    y = np.log(np.maximum(np.where(pos, kv / np.where(pos, n, 1.0), 1.0), 1.0))
    i = np.clip(np.searchsorted(lb, x) - 1, 0, len(lb) - 2)
    j = np.clip(np.searchsorted(ls, y) - 1, 0, len(ls) - 2)
    wx = np.maximum((x - lb[i]) / (lb[i + 1] - lb[i]), 0.0)
    wy = np.maximum((y - ls[j]) / (ls[j + 1] - ls[j]), 0.0)
    t = ((1 - wx) * (1 - wy) * lt[i, j] + wx * (1 - wy) * lt[i + 1, j]
         + (1 - wx) * wy * lt[i, j + 1] + wx * wy * lt[i + 1, j + 1])
    return np.where(pos, np.exp(t), 0.0)


# ---- transfer error: the rule applied between two measured GPUs ----------------------------
def transfer_check(source: KernelTables, target: KernelTables, source_gpu, target_gpu,
                   model, *, tp: int = 1) -> dict:
    """Error of predicting `target`'s measured kernels from `source` via spec-sheet ratios, at
    `model`'s shapes over a grid of iterations (prefill chunks 64..8192 tokens, decode batches
    1..256 at KV lengths 128..8192): median and worst |error| of the per-iteration GPU time."""
    moved = transfer_tables(source, source_gpu, target_gpu)
    real = MeasuredTableCostModel.build(model, target_gpu, target, tp=tp)
    pred = MeasuredTableCostModel.build(model, target_gpu, moved, tp=tp)
    f = reference_iterations()
    a, b = real.iteration_time_s(f), pred.iteration_time_s(f)
    err = np.abs(b / a - 1.0) * 100.0
    return {"source": source.gpu, "target": target.gpu, "median_pct": float(np.median(err)),
            "worst_pct": float(err.max()), "signed_median_pct": float(np.median((b / a - 1) * 100))}


def reference_iterations() -> BatchFeatures:
    """A fixed grid of iterations (prefill-only, decode-only, mixed) for transfer checks."""
    rows = []
    for c in (64, 256, 1024, 2048, 8192):
        rows.append((c, c * c, 0, 0, 0, 1))
    for n in (1, 8, 32, 128, 256):
        for kv in (128, 1024, 8192):
            rows.append((0, 0, 0, n, n * kv, n))
    for n in (16, 128):
        rows.append((512, 512 * 512, 512 * 1024, n, n * 1024, n + 1))
    a = np.array(rows, dtype=np.float64)
    return BatchFeatures(a[:, 0], a[:, 1], a[:, 2], a[:, 3], a[:, 4], a[:, 5])
