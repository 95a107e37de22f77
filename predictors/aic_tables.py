"""NVIDIA AIConfigurator's measured vLLM and SGLang kernel tables: loading and lookup.

    tables = KernelTables.load("H100")                    # a catalog GPU with shipped tables
    tables = KernelTables.load("H100", framework="sglang")  # SGLang's kernels (aic-sglang)
    tables.gemm_s(n=4096, k=4096)                          # seconds over the table's m grid

vLLM's tables live in predictors/data/aic, SGLang's in predictors/data/aic-sglang (both written
by scripts/convert_aic_tables.py). SGLang's hold the GEMMs, attention and custom all-reduce of
SGLang's own kernels; what they leave out (SGLANG_BORROWED: the NCCL collectives, measured
outside any framework, the fused MoE and the MLA / DSA modules) is read from the same GPU's
vLLM tables, and describe() says so.

One `.npz` per measured GPU (scripts/convert_aic_tables.py wrote them; manifest.json says which
device and vLLM version each table measured). All latencies are per tensor-parallel rank:
  GEMM                   BF16 / FP8 latency over (m, n, k); n and k interpolated here (log-log,
                         predictors.tables.log_bracket), m left to the caller
  context attention      prefill of one sequence by length (batch 1 rows), per head config
  generation attention   one decode step by (batch, KV length); missing cells filled log-log
  all-reduce             vLLM custom all-reduce per table version, CUDA graph / eager; NCCL
                         all-reduce, all-gather and reduce-scatter
  fused MoE              the routed experts by (shape, moe_tp, moe_ep, routing, tokens)
A head configuration, MoE shape or split the table lacks is scaled from the nearest measured
one (said so in the note a lookup returns). A transferred table (predictors.aic_transfer)
carries the spec-sheet ratios to another GPU and applies them at every lookup.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np

from tuner.predictors.aic_transfer import roof_ratio, scale_link, spec_peaks
from tuner.predictors.moe import MoEParallel, MoEShape
from tuner.predictors.tables import fill_loglog, log_bracket, loglog_curve, monotone_times_s

# tuner catalog GPU -> AIConfigurator system whose vLLM tables measure it
MEASURED = {"A100-80G": "a100_sxm", "H100": "h100_sxm", "H200": "h200_sxm", "L40S": "l40s",
            "RTX-PRO-6000": "rtx_pro_6000_server", "B200": "b200_sxm", "B300": "b300_sxm",
            "GB200": "gb200"}
# token -> expert routing of the fused-MoE table used (scripts/convert_aic_tables.py codes):
# AIConfigurator prices its MoE models with power_law at alpha 1.01 (sdk/config.py
# workload_distribution "power_law", the models' _power_law_alpha 1.01); balanced where a
# table lacks it
MOE_DISTRIBUTION = "power_law_1.01"
MOE_DISTRIBUTION_CODES = {"balanced": 0.0, "power_law_1.01": 1.0, "power_law_1.2": 2.0}
#: whose kernels a table set measured: the engine name -> its label in provenance lines
FRAMEWORKS = {"vllm": "vLLM", "sglang": "SGLang"}
#: arrays SGLang's converted tables leave out, priced from the same GPU's vLLM tables (what
#: they are, for provenance): scripts/convert_aic_tables.py says why each is not converted
SGLANG_BORROWED = {"nccl_allreduce": "NCCL collectives", "nccl_allgather": "NCCL collectives",
                   "nccl_reducescatter": "NCCL collectives", "moe": "fused MoE",
                   "mla_ctx": "MLA modules", "mla_gen": "MLA modules",
                   "dsa_ctx": "DeepSeek sparse attention modules",
                   "dsa_gen": "DeepSeek sparse attention modules"}


def data_dir(framework: str = "vllm") -> Path:
    """The folder of `framework`'s converted tables (predictors/data/aic for vLLM,
    predictors/data/aic-<framework> otherwise)."""
    if framework not in FRAMEWORKS:
        raise KeyError(f"no kernel tables for framework {framework!r}")
    base = Path(__file__).resolve().parent / "data"
    return base / ("aic" if framework == "vllm" else f"aic-{framework}")


def has_tables(gpu_name: str, framework: str = "vllm") -> bool:
    """Whether `framework`'s shipped tables measure catalog GPU `gpu_name`."""
    system = MEASURED.get(gpu_name)
    return system is not None and system in _manifest(str(data_dir(framework)))["gpus"]


@lru_cache(maxsize=4)
def _manifest(path: str) -> dict:
    p = Path(path) / "manifest.json"
    return json.loads(p.read_text()) if p.is_file() else {"gpus": {}}


def version_code(v: str) -> float:
    """'0.19.0' -> 19000.0 (as scripts/convert_aic_tables.py stores table versions)."""
    import re

    parts = [int(x) for x in re.findall(r"\d+", str(v))[:3]] + [0, 0, 0]
    return float(parts[0] * 1_000_000 + parts[1] * 1_000 + parts[2])


def version_name(code: float) -> str:
    c = int(code)
    return f"{c // 1_000_000}.{c // 1_000 % 1_000}.{c % 1_000}"


# ---- one GPU's tables --------------------------------------------------------------------
#: a decode-attention cell whose one-layer KV is at least this large cannot sit in any
#: measured GPU's L2 (several times the largest, ~128 MB on the Blackwell parts)
KV_BEYOND_L2_BYTES = 1 << 30


_ATTN_ROWS: dict = {}  # KernelTables._attn_rows' cache: (id of the array, query) -> (array, rows)


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
    moe_version: str = ""  # vLLM version of the fused-MoE table ("" = none)
    # "mla" / "dsa" module tables: {kind: {"version": vLLM version, "backends": {kv dtype:
    # {phase: attention backend}}}} (scripts/convert_aic_tables.py's manifest)
    modules: dict = field(default_factory=dict)
    framework: str = "vllm"  # whose kernels the GEMM, attention and all-reduce tables measured
    # SGLang tables: what was read from the same GPU's vLLM tables ({what: from where}), and
    # the attention backends kept ({kv dtype: {phase: backend}})
    borrowed: dict = field(default_factory=dict)
    attention_backends: dict = field(default_factory=dict)

    @property
    def measured(self) -> bool:
        return self.transfer is None

    @classmethod
    def load(cls, gpu_name: str, path: Path | None = None,
             framework: str = "vllm") -> KernelTables:
        """The tables of catalog GPU `gpu_name`: vLLM's, or `framework`'s (KeyError where
        that framework's tables do not measure the GPU)."""
        system = MEASURED.get(gpu_name)
        if system is None:
            raise KeyError(f"no measured kernel tables for {gpu_name}")
        if framework == "vllm":
            return _load_tables(str(path or data_dir()), system, gpu_name)
        if path is None and not has_tables(gpu_name, framework):
            raise KeyError(f"no {FRAMEWORKS.get(framework, framework)} kernel tables for "
                           f"{gpu_name}")
        return _load_framework_tables(str(path or data_dir(framework)), system, gpu_name,
                                      framework)

    @property
    def label(self) -> str:
        """'vLLM' | 'SGLang': whose kernels the GEMM, attention and all-reduce tables hold."""
        return FRAMEWORKS[self.framework]

    # -- GEMM ------------------------------------------------------------------------------
    def gemm_m_grid(self, dtype: str = "bf16") -> np.ndarray:
        return self.arrays[f"gemm_{dtype}_m"].astype(np.float64)

    def gemm_s(self, n: int, k: int, dtype: str = "bf16") -> np.ndarray:
        """Seconds of an (m x k) @ (k x n) GEMM at every m of gemm_m_grid(dtype)."""
        logl = self.arrays[f"gemm_{dtype}_loglat"]
        i0, i1, w, ex_n = log_bracket(self.arrays[f"gemm_{dtype}_n"], n)
        j0, j1, v, ex_k = log_bracket(self.arrays[f"gemm_{dtype}_k"], k)
        lat = ((1 - w) * (1 - v) * logl[:, i0, j0] + w * (1 - v) * logl[:, i1, j0]
               + (1 - w) * v * logl[:, i0, j1] + w * v * logl[:, i1, j1])
        t = np.exp(lat + ex_n + ex_k) * 1e-3
        if self.transfer:
            m = self.gemm_m_grid(dtype)
            t = t * roof_ratio(self.transfer, 2.0 * m * n * k, 2.0 * (m * k + n * k + m * n),
                                "fp8" if dtype == "fp8" else "bf16")
        return t

    def has_gemm(self, dtype: str) -> bool:
        return f"gemm_{dtype}_loglat" in self.arrays

    def has_attention(self, kv_fp8: bool) -> bool:
        flag = 1.0 if kv_fp8 else 0.0
        return all(bool((self.arrays[t][:, 0] == flag).any()) for t in ("ctx_attn", "gen_attn"))

    # -- attention -------------------------------------------------------------------------
    def _attn_rows(self, table: str, heads: int, kv_heads: int, head_dim: int, kv_fp8: bool):
        """(the rows of the measured head configuration nearest the asked one, its (heads,
        kv heads, head_dim), whether exact). Cached per table array (shared by a GPU's tables
        and every transfer of them; the search asks again for each engine and TP), read-only."""
        a = self.arrays[table]
        key = (id(a), heads, kv_heads, head_dim, bool(kv_fp8))
        hit = _ATTN_ROWS.get(key)
        if hit is not None and hit[0] is a:
            return hit[1]
        if len(_ATTN_ROWS) >= 256:
            _ATTN_ROWS.clear()
        out = self._find_attn_rows(table, heads, kv_heads, head_dim, kv_fp8)
        out[0].flags.writeable = False
        _ATTN_ROWS[key] = (a, out)  # holding `a`: its id is not reused while cached
        return out

    def _find_attn_rows(self, table: str, heads: int, kv_heads: int, head_dim: int,
                        kv_fp8: bool):
        a = self.arrays[table]
        a = a[a[:, 0] == (1.0 if kv_fp8 else 0.0)]
        if not len(a):
            raise KeyError(f"{self.gpu}: no {table} rows for {'fp8' if kv_fp8 else 'bf16'} KV")
        hd = a[np.argmin(np.abs(np.log(a[:, 5] / head_dim))), 5]
        a = a[a[:, 5] == hd]
        # return_inverse: numpy's plain unique imports numpy.ma (~10 ms of a simulate)
        combos = np.unique(a[:, 3:5], axis=0, return_inverse=True)[0]
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
            t = t * roof_ratio(self.transfer, flops, byts, "bf16")
        return pairs, t

    def generation_attention(self, heads: int, kv_heads: int, head_dim: int,
                             kv_fp8: bool = False):
        """(batch grid, KV-length grid, seconds[batch, length]) of one decode step's attention;
        missing cells filled along the length axis (log-log, last slope continued, at least
        1); a head configuration the table lacks is scaled from the nearest measured one by KV
        heads x head_dim (decode attention is memory-bound). No cell reads its KV faster than
        the table's large cells do (the 90th percentile of the KV bytes per second of the
        measured cells holding KV_BEYOND_L2_BYTES or more): the collector times one layer's
        attention over and over, so a KV that fits the GPU's L2 is read from L2 (the L40S's
        cells of 64-256 MB reach 2.2x its GDDR6 bandwidth, the RTX PRO 6000's 1.5x), while in a
        model's step every layer's KV, weights and activations pass through L2 in turn and
        each layer's KV comes from device memory."""
        rows, (_h, kv, hd), _ = self._attn_rows("gen_attn", heads, kv_heads, head_dim, kv_fp8)
        b, bi = np.unique(rows[:, 1], return_inverse=True)
        s, si = np.unique(rows[:, 2], return_inverse=True)
        g = np.full((len(b), len(s)), np.nan)
        g[bi, si] = np.log(rows[:, 6] * 1e-3)
        measured = np.isfinite(g)
        g = fill_loglog(np.log(s), g, axis=1)
        g = fill_loglog(np.log(b), g, axis=0)
        t = np.exp(g) * (kv_heads * head_dim) / (kv * hd)
        bb, ss = np.meshgrid(b, s, indexing="ij")
        kvb = (1.0 if kv_fp8 else 2.0)
        byts = bb * ss * 2.0 * kv_heads * head_dim * kvb
        if self.transfer:
            flops = 4.0 * heads * head_dim * bb * ss
            t = t * roof_ratio(self.transfer, flops, byts, "bf16")
        # the cells with at least KV_BEYOND_L2_BYTES of KV in the table's own head layout
        big = measured & (bb * ss * 2.0 * kv * hd * kvb >= KV_BEYOND_L2_BYTES)
        if big.any():
            s_per_byte = float(np.percentile(t[big] / byts[big], 10))
            t = np.maximum(t, byts * s_per_byte)
        return b, s, t

    # -- MLA / DeepSeek sparse attention modules ---------------------------------------------
    def has_mla(self, kind: str, kv_fp8: bool, gemm_fp8: bool) -> bool:
        """Whether measured `kind` ("mla" | "dsa") module tables cover this KV and weight
        precision in both phases (a transferred table carries none: their kernels differ by
        architecture, so no spec-sheet ratio moves them)."""
        if self.transfer:
            return False
        want = (1.0 if kv_fp8 else 0.0, 1.0 if gemm_fp8 else 0.0)
        for phase in ("ctx", "gen"):
            a = self.arrays.get(f"{kind}_{phase}")
            if a is None or not ((a[:, 0] == want[0]) & (a[:, 1] == want[1])).any():
                return False
        return True

    def mla_module(self, kind: str, phase: str, heads: int, kv_fp8: bool, gemm_fp8: bool):
        """(batch grid, length grid, seconds[batch, length], exact) of one layer's whole MLA
        attention block on one rank with `heads` local heads: phase "ctx" is a prefill of
        batch x isl tokens, "gen" one decode step of batch requests at a KV length; missing
        cells filled log-log (length axis, then batch). Heads the table lacks are scaled from
        the nearest measured count in proportion (exact False)."""
        a = self.arrays[f"{kind}_{phase}"]
        a = a[(a[:, 0] == (1.0 if kv_fp8 else 0.0)) & (a[:, 1] == (1.0 if gemm_fp8 else 0.0))]
        measured = np.unique(a[:, 2])
        h = measured[int(np.argmin(np.abs(np.log(measured / heads))))]
        rows = a[a[:, 2] == h]
        b, s = np.unique(rows[:, 3]), np.unique(rows[:, 4])
        g = np.full((len(b), len(s)), np.nan)
        g[np.searchsorted(b, rows[:, 3]), np.searchsorted(s, rows[:, 4])] = np.log(rows[:, 5] * 1e-3)
        g = fill_loglog(np.log(s), g, axis=1)
        g = fill_loglog(np.log(b), g, axis=0)
        return b, s, np.exp(g) * (heads / h), bool(h == heads)

    # -- all-reduce ------------------------------------------------------------------------
    def allreduce(self, num_gpus: int, graph: bool, engine_version: str | None = None):
        """(message bytes, seconds, table version) of the framework's custom all-reduce on
        `num_gpus`,
        from the table version closest to `engine_version` (newest when None) that has that
        GPU count; None when no table has it."""
        all_rows = self.arrays["allreduce"]

        def rows(graph_timing: bool, version: float | None = None):
            a = all_rows[(all_rows[:, 2] == num_gpus)
                         & (all_rows[:, 1] == (1.0 if graph_timing else 0.0))]
            if version is not None:
                a = a[a[:, 0] == version]
            return a[np.argsort(a[:, 3])]

        a = rows(graph)
        if not len(a):
            return None
        vers = np.unique(a[:, 0])
        want = version_code(engine_version) if engine_version else vers.max()
        v = vers[np.argmin(np.abs(vers - want) - 1e-9 * vers)]  # ties: the newer
        r = a[a[:, 0] == v]
        t = monotone_times_s(r[:, 4] * 1e-3)
        if not self.transfer:
            return r[:, 3], t, version_name(v)
        g = rows(True, v)
        if graph or len(g) < 2:
            return r[:, 3], scale_link(t, self.transfer["link_ratio"]), version_name(v)
        # eager = the graph-captured kernel + the host's launch cost: only the kernel's time
        # moves with the link. The eager table's own floor is that launch cost, which hides
        # the kernel up to ~2 MiB, so scaling eager above its floor priced a 513-token
        # all-reduce below a 512-token graph one on a slower link (A10 from A100: 694 vs
        # 1,023 us at 4 MiB)
        lx, ly = np.log(g[:, 3]), np.log(monotone_times_s(g[:, 4] * 1e-3))
        graph_src = loglog_curve(r[:, 3], lx, ly)
        graph_dst = loglog_curve(r[:, 3], lx, np.log(scale_link(np.exp(ly),
                                                               self.transfer["link_ratio"])))
        return (r[:, 3], monotone_times_s(graph_dst + np.maximum(t - graph_src, 0.0)),
                version_name(v))

    def nccl_allreduce(self, num_gpus: int):
        """(message bytes, seconds) of NCCL all-reduce on `num_gpus`; None without a table."""
        return self.nccl_collective("allreduce", num_gpus)

    def nccl_collective(self, op: str, num_gpus: int):
        """(message bytes, seconds) of NCCL `op` ("allreduce", "allgather", "reducescatter") on
        `num_gpus`, message = the whole gathered buffer; None without a table."""
        a = self.arrays.get(f"nccl_{op}")
        if a is None or not len(a):
            return None
        r = a[a[:, 0] == num_gpus]
        if not len(r):
            return None
        r = r[np.argsort(r[:, 1])]
        t = monotone_times_s(r[:, 2] * 1e-3)
        if self.transfer:
            t = scale_link(t, self.transfer["link_ratio"])
        return r[:, 1], t

    # -- mixture of experts ----------------------------------------------------------------
    def moe_experts(self, shape: MoEShape, par: MoEParallel, fp8: bool, gpu):
        """(tokens entering the layer across the expert group, seconds of one GPU's routed
        experts, note) from the fused-MoE table: the model's shape and the deployment's split
        where measured, else the nearest measured (shape, split) times the roofline ratio of the
        two on `gpu` (duck-typed tuner GPU). None without a table for this dtype."""
        a = self.arrays.get("moe")
        if a is None or not len(a):
            return None
        a = a[a[:, 0] == (1.0 if fp8 else 0.0)]
        if not len(a):
            return None
        dists = np.unique(a[:, 1])
        want = MOE_DISTRIBUTION_CODES[MOE_DISTRIBUTION]
        dist = want if want in dists else (0.0 if 0.0 in dists else dists[0])
        a = a[a[:, 1] == dist]
        dist_name = next(k for k, v in MOE_DISTRIBUTION_CODES.items() if v == dist)
        target = np.array([shape.hidden_size, shape.moe_intermediate_size,
                           shape.experts_per_token, shape.num_experts, par.moe_tp, par.moe_ep],
                          dtype=np.float64)
        combos = np.unique(a[:, 2:8], axis=0)
        dist_log = np.abs(np.log(combos / target)).sum(axis=1)
        best = combos[int(np.argmin(dist_log))]
        rows = a[(a[:, 2:8] == best).all(axis=1)]
        rows = rows[np.argsort(rows[:, 8])]
        tok, t = rows[:, 8], rows[:, 9] * 1e-3
        exact = bool(np.array_equal(best, target))
        h, inter, k, E, mtp, mep = (int(x) for x in best)
        src = (f"vLLM {self.moe_version} fused-MoE table ({dist_name} routing)")
        if exact:
            note = f"MoE experts: measured {src} at h {h}, width {inter}, top-{k} of {E}, " \
                   f"moe_tp {mtp}, moe_ep {mep}"
        else:
            wb = 1.0 if fp8 else 2.0  # the table's own kernel: per-tensor FP8 or BF16
            peaks = spec_peaks(gpu)
            fpk = peaks["flops"]["fp8" if fp8 else "bf16"]
            f1, b1 = shape.expert_flops_bytes(tok, par, weight_bytes=wb)
            f0, b0 = shape.expert_flops_bytes(tok, _FixedSplit(mtp, mep), weight_bytes=wb,
                                              experts_per_token=k, hidden_size=h,
                                              moe_intermediate_size=inter, num_experts=E)
            t = t * (np.maximum(f1 / fpk, b1 / peaks["bw"]) / np.maximum(f0 / fpk, b0 / peaks["bw"]))
            note = (f"MoE experts estimated: the {src}'s nearest measured point (h {h}, width "
                    f"{inter}, top-{k} of {E}, moe_tp {mtp}, moe_ep {mep}) x the roofline ratio "
                    f"to h {shape.hidden_size}, width {shape.moe_intermediate_size}, top-"
                    f"{shape.experts_per_token} of {shape.num_experts}, moe_tp {par.moe_tp}, "
                    f"moe_ep {par.moe_ep}")
        if self.transfer:
            wb = 1.0 if fp8 else 2.0  # the table's own kernel, as above
            fl, by = shape.expert_flops_bytes(tok, par, weight_bytes=wb)
            t = t * roof_ratio(self.transfer, fl, by, "fp8" if fp8 else "bf16")
        return tok, t, note

    def describe(self) -> str:
        if self.framework != "vllm":
            if self.measured:
                return (f"SGLang kernels: AIConfigurator sglang {self.gemm_version} tables "
                        f"({MEASURED[self.gpu]}, {self.device}){self._borrowed_note()}")
            return (f"SGLang kernels transferred to {self.gpu} from {self.transfer['source']} "
                    f"(AIConfigurator sglang {self.gemm_version} tables, {self.device}) via "
                    f"spec-sheet ratios{self._achievable_note()}{self._borrowed_note()}")
        if self.measured:
            return (f"measured: AIConfigurator, vLLM {self.gemm_version} kernels on {self.device}")
        return (f"transferred to {self.gpu} from {self.transfer['source']} ({self.device}, vLLM "
                f"{self.gemm_version} kernels) via spec-sheet ratios{self._achievable_note()}")

    def _achievable_note(self) -> str:
        """How a transfer scaled tensor FLOP/s (predictors.aic_transfer), for describe()."""
        f = (self.transfer or {}).get("achievable", {}).get("bf16")
        if not f:
            return ""
        return (f", BF16 tensor FLOP/s as achieved: {self.transfer['source']} {f[0]:.2f} of "
                f"its spec (its tables), {self.gpu} {f[1]:.2f} ("
                + ("its tables" if f[2] == "measured" else f"estimated: {f[2]}") + ")")

    def _borrowed_note(self) -> str:
        """What an SGLang table set prices from the GPU's vLLM tables, for describe()."""
        if not self.borrowed:
            return ""
        by_source: dict[str, list[str]] = {}
        for what, source in self.borrowed.items():
            by_source.setdefault(source, []).append(what)
        return "; " + "; ".join(f"{', '.join(w)} from {src}" for src, w in by_source.items())


@dataclass(frozen=True)
class _FixedSplit:
    """A measured table point's expert split (moe_tp, moe_ep) for MoEShape.expert_flops_bytes."""

    moe_tp: int
    moe_ep: int


@lru_cache(maxsize=16)
def _load_framework_tables(path: str, system: str, gpu_name: str,
                           framework: str) -> KernelTables:
    """A non-vLLM framework's tables of `system`, with what they leave out (SGLANG_BORROWED)
    read from the same GPU's vLLM tables where those have it."""
    from dataclasses import replace

    own = _load_tables(path, system, gpu_name)
    info = json.loads((Path(path) / "manifest.json").read_text())["gpus"][system]
    arrays, borrowed = dict(own.arrays), {}
    vllm = (_load_tables(str(data_dir()), system, gpu_name)
            if system in _manifest(str(data_dir()))["gpus"] else None)
    if vllm is not None:
        vinfo = _manifest(str(data_dir()))["gpus"][system]
        for key, what in SGLANG_BORROWED.items():
            if key in arrays or key not in vllm.arrays or not len(vllm.arrays[key]):
                continue
            arrays[key] = vllm.arrays[key]
            op = key.split("_")[0]
            version = (vinfo.get(f"{key}_version") or vinfo.get(f"{op}_version")
                       or vinfo.get("nccl_version", "?"))
            borrowed[what] = (f"the NCCL {version} table (measured outside any framework)"
                              if op == "nccl" else f"its vLLM {version} tables")
        return replace(own, arrays=arrays, framework=framework, borrowed=borrowed,
                       moe_version=vllm.moe_version, modules=vllm.modules,
                       attention_backends=info.get("attention_backends", {}))
    return replace(own, framework=framework, attention_backends=info.get("attention_backends", {}))


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
                        attention_version=info["attention_version"], arrays=arrays,
                        moe_version=info.get("moe_version", ""),
                        modules={k: {"version": info[f"{k}_version"],
                                     "backends": info.get(f"{k}_backends", {})}
                                 for k in ("mla", "dsa") if f"{k}_version" in info},
                        attention_backends=_by_kv_dtype(info.get("attention_kernels", {})))


def _by_kv_dtype(kernels: dict) -> dict:
    """The manifest's {phase: {kv dtype: kernel}} as {kv dtype: {phase: kernel}} (the form of
    KernelTables.attention_backends)."""
    out: dict[str, dict] = {}
    for phase, by_dtype in kernels.items():
        for dtype, kernel in by_dtype.items():
            out.setdefault(dtype, {})[phase] = kernel
    return out
