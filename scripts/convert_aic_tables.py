"""Convert NVIDIA AIConfigurator's measured vLLM (or SGLang) kernel tables into tuner's compact form.

    pip download --no-deps aiconfigurator-core==0.12.0   # Apache-2.0, ~82 MB wheel
    python scripts/convert_aic_tables.py aiconfigurator_core-0.12.0-*.whl [--out predictors/data/aic]
    python scripts/convert_aic_tables.py aiconfigurator_core-0.12.0-*.whl --framework sglang
                                                         # -> predictors/data/aic-sglang

Needs pandas + pyarrow (the wheel stores parquet); tuner itself does not: it reads the output
(one .npz per GPU plus manifest.json) with numpy alone.

Why convert instead of depending on the package: the wheel is 82 MB (plus pyarrow, scipy and
pandas), most of it TensorRT-LLM / SGLang tables and Blackwell data-centre parts tuner does not
use; the vLLM tables of the eight GPUs below, kept at the shapes a decoder uses (dense GEMMs,
attention, collectives, fused-MoE experts), fit in ~4 MB and load in milliseconds with numpy.

What is kept (vLLM framework tables only, newest version of each op per GPU):
  gemm        bf16 (torch.nn.functional.linear / vllm_default) and per-tensor FP8
              (CutlassFP8ScaledMMLinearKernel) as dense [m, n, k] grids of latency (ms);
              cells the table lacks are filled along m in log-log space (documented in
              fill_along_m) and flagged in a mask so provenance can count them
  ctx_attn    context (prefill) attention, window_size 0, beam 1: rows of
              (kv_fp8, batch, isl, num_heads, num_kv_heads, head_dim, latency_ms)
  gen_attn    generation (decode) attention, same columns with `step` (KV length) for isl
  allreduce   vLLM custom all-reduce per table version: (version_code, graph, num_gpus,
              message_bytes, latency_ms)
  nccl_allreduce  NCCL all-reduce, bf16/half, newest NCCL version with one:
              (num_gpus, message_bytes, latency_ms)
  nccl_allgather, nccl_reducescatter  the same for NCCL all-gather and reduce-scatter (what
              vLLM's default expert-parallel all2all backend, allgather_reducescatter, runs)
  moe         fused mixture-of-experts layer (router output -> gate/up -> SiLU*mul -> down ->
              weighted sum), newest vLLM version with a moe_perf table, bf16 (unquantized
              fused-MoE kernel) and per-tensor FP8 only: rows of (fp8, distribution code,
              hidden, moe_inter, topk, num_experts, moe_tp, moe_ep, num_tokens, latency_ms);
              num_tokens counts the tokens entering the layer across the expert-parallel group,
              latency is one GPU's kernel time for its num_experts / moe_ep experts at
              moe_inter / moe_tp (AIConfigurator's collector, collector/vllm/collect_moe.py);
              distribution codes in MOE_DISTRIBUTIONS
  mla_ctx, mla_gen  MLA attention module (DeepSeek-V3: the layer's whole attention block,
              projections included), prefill by (batch, isl) and decode by (batch, KV length):
              rows of (kv_fp8, gemm_fp8, num_heads, batch, isl | step, latency_ms), the
              backend per KV dtype in the manifest (_mla_module)
  dsa_ctx, dsa_gen  the same for DeepSeek sparse attention (DeepSeek-V3.2, indexer included)

--framework sglang keeps the SGLang tables of the same GPUs (systems/data/<gpu>/<op>/sglang/)
in the same compact form, in predictors/data/aic-sglang with its own manifest: the kernels a
dense decoder runs, newest SGLang version of each op per GPU (convert_sglang):
  gemm        bf16 (sglang_torch_linear; the A100's 0.5.10 table names it "sglang") and FP8
              (sgl-kernel's fp8_scaled_mm, gemm_dtype fp8), same grid treatment as above
  ctx_attn, gen_attn  the attention backend SGLang runs by default on the architecture, the
              first of SGLANG_ATTN the table has (fa3 on Hopper, trtllm_mha on data-centre
              Blackwell, flashinfer on Ada / RTX Blackwell, flash_attention in the A100's
              table), BF16 and FP8 KV (FP8 KV rows of any attention dtype, BF16 first)
  allreduce   SGLang's custom all-reduce per table version (graph / eager), bf16
Not converted (tuner prices them from the same GPU's vLLM tables and says so, see
predictors.aic_tables.SGLANG_BORROWED): the NCCL collectives (AIConfigurator measures NCCL
once, outside any framework: the vLLM file's are the same measurements), the fused-MoE layer
(SGLang's bf16 Triton rows would add 0.15-0.42 MB a GPU, 2.3 MB for the eight; no SGLang
fidelity run here exercises them) and the MLA / DeepSeek sparse attention tables (SGLang's are
per kernel, not the per-module form tuner reads).
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import re
import zipfile
from pathlib import Path

import numpy as np

# AIConfigurator system name -> tuner catalog GPU it measures
GPUS = {
    "a100_sxm": "A100-80G",
    "h100_sxm": "H100",
    "h200_sxm": "H200",
    "l40s": "L40S",
    "rtx_pro_6000_server": "RTX-PRO-6000",
    "b200_sxm": "B200",
    "b300_sxm": "B300",
    "gb200": "GB200",
}
BF16_GEMM = ("torch.nn.functional.linear", "vllm_default")
FP8_GEMM = ("CutlassFP8ScaledMMLinearKernel",)
# the kernel vLLM picks for bf16 attention on each architecture (what the table measured);
# fp8 KV uses whatever kernel the table has for it
# (data-centre Blackwell, sm_100/103: FlashInfer with TensorRT-LLM's prefill / decode kernels,
# what vLLM runs there; the context table has the prefill one, the generation table the decode)
BF16_ATTN = ("vllm_flash_attn_fa3", "vllm_flash_attn_fa2", "vllm_flash_attn",
             "vllm_flashinfer_trtllmprefill", "vllm_flashinfer_trtllmdecode")
FP8_ATTN = ("vllm_flash_attn_fa3", "vllm_flashinfer_fiprefill", "vllm_flashinfer_fidecode",
            "vllm_flashinfer_trtllmprefill", "vllm_flashinfer_trtllmdecode")
# SGLang: GEMM kernels per dtype (kernel_source, gemm_dtype) and attention backends by preference
SGLANG_BF16_GEMM = (("sglang_torch_linear", "sglang"), "bfloat16")
SGLANG_FP8_GEMM = (("sglang_sgl_kernel_fp8_scaled_mm", "sglang"), "fp8")
SGLANG_ATTN = ("fa3", "trtllm_mha", "flashinfer", "flash_attention", "triton")
# token -> expert routing the MoE table was measured under -> code stored in the `moe` rows
MOE_DISTRIBUTIONS = {"balanced": 0.0, "power_law_1.01": 1.0, "power_law_1.2": 2.0}
# moe_dtype values kept: bf16 (the unquantized fused-MoE kernel) and per-tensor FP8 (one kernel
# per GPU and dtype in the tables)
MOE_DTYPES = {"bfloat16": 0.0, "fp8": 1.0}


def _ver_key(v: str) -> tuple:
    return tuple(int(x) if x.isdigit() else -1 for x in re.split(r"[.]", v))


def version_code(v: str) -> float:
    """'0.19.0' -> 19000.0 (major * 1e6 + minor * 1e3 + patch), a float column of the table."""
    parts = [int(x) for x in re.findall(r"\d+", v)[:3]] + [0, 0, 0]
    return float(parts[0] * 1_000_000 + parts[1] * 1_000 + parts[2])


def fill_along_m(m: np.ndarray, lat: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Fill NaN cells of lat[m, n, k] along m by log-log interpolation between measured m;
    beyond the largest measured m time grows in proportion to m (a throughput-bound GEMM),
    below the smallest it stays at the smallest measured time (a latency-bound GEMM).
    Returns (filled, measured_mask)."""
    out = lat.copy()
    mask = np.isfinite(lat)
    lm = np.log(m.astype(np.float64))
    for j in range(lat.shape[1]):
        for k in range(lat.shape[2]):
            col = lat[:, j, k]
            ok = np.isfinite(col) & (col > 0)
            if ok.all() or not ok.any():
                continue
            x, y = lm[ok], np.log(col[ok])
            miss = ~ok
            v = np.interp(lm[miss], x, y)
            hi = lm[miss] > x[-1]
            v[hi] = y[-1] + (lm[miss][hi] - x[-1])
            out[miss, j, k] = np.exp(v)
    return out, mask


def _gemm(df, kernels, dtype: str | None = None) -> dict | None:
    d = df[df["kernel_source"].isin(kernels)]
    if dtype is not None:  # SGLang's tables hold several dtypes under one kernel name
        d = d[d["gemm_dtype"] == dtype]
    if d.empty:
        return None
    d = d.groupby(["m", "n", "k"], as_index=False)["latency"].median()
    m = np.sort(d["m"].unique())
    n = np.sort(d["n"].unique())
    k = np.sort(d["k"].unique())
    lat = np.full((len(m), len(n), len(k)), np.nan)
    lat[np.searchsorted(m, d["m"]), np.searchsorted(n, d["n"]), np.searchsorted(k, d["k"])] = d["latency"]
    filled, mask = fill_along_m(m, lat)
    return {"m": m.astype(np.int32), "n": n.astype(np.int32), "k": k.astype(np.int32),
            "lat_ms": filled.astype(np.float32), "measured": mask}


def _attn(df, pos_col: str, kept: dict | None = None) -> np.ndarray:
    """Attention rows (window 0, beam 1, BF16 math) of the first kernel of BF16_ATTN /
    FP8_ATTN the table has per KV dtype; `kept` gets {"bf16" | "fp8": that kernel_source}."""
    d = df
    if "window_size" in d.columns:
        d = d[d["window_size"] == 0]
    if "beam_width" in d.columns:
        d = d[d["beam_width"] == 1]
    d = d[d["attn_dtype"] == "bfloat16"]
    parts = []
    for fp8, kernels in ((0, BF16_ATTN), (1, FP8_ATTN)):
        sub = d[d["kv_cache_dtype"] == ("fp8" if fp8 else "bfloat16")]
        for kern in kernels:  # first kernel of the preference list the table has
            s = sub[sub["kernel_source"] == kern]
            if not s.empty:
                break
        else:
            continue
        if kept is not None:
            kept["fp8" if fp8 else "bf16"] = kern
        s = s.groupby(["batch_size", pos_col, "num_heads", "num_key_value_heads", "head_dim"],
                      as_index=False)["latency"].median()
        a = np.column_stack([np.full(len(s), fp8), s["batch_size"], s[pos_col], s["num_heads"],
                             s["num_key_value_heads"], s["head_dim"], s["latency"]])
        parts.append(a)
    return np.concatenate(parts).astype(np.float64) if parts else np.zeros((0, 7))


def _pick_source(rows_by_source: dict[str, tuple]) -> str | None:
    """The kernel source (vLLM attention backend) a table is read for: the one with the
    largest (coverage, rows) key (ties: alphabetical); None when no source has rows."""
    if not rows_by_source:
        return None
    return max(sorted(rows_by_source), key=lambda k: rows_by_source[k])


def _mla_module(ctx, gen) -> tuple[np.ndarray, np.ndarray, dict]:
    """AIConfigurator's vLLM MLA (or DeepSeek sparse attention) module tables: the whole
    attention block of one layer (q/kv down- and up-projections, rope, the attention kernel,
    o_proj) per rank, by local heads. Per KV dtype: for decode the backend with the most rows;
    for prefill the one measured to the longest prompt (vLLM's MLA backends prefill through
    FlashAttention's varlen kernel; their own context rows stop at short prompts), then the
    most rows. Rows of (kv_fp8, gemm_fp8, num_heads, batch, isl | step, latency_ms),
    duplicates reduced to their median; and {kv dtype: {phase: backend}}."""
    out_ctx, out_gen, picked = [], [], {}
    for fp8, kv in ((0, "bfloat16"), (1, "fp8")):
        g = gen[(gen["kv_cache_dtype"] == kv) & gen["gemm_type"].isin(["bfloat16", "fp8_block"])]
        c = ctx[(ctx["kv_cache_dtype"] == kv) & ctx["gemm_type"].isin(["bfloat16", "fp8_block"])
                & (ctx["step"] == 0)]
        gsrc = _pick_source({k: (len(v),) for k, v in g.groupby("kernel_source")})
        csrc = _pick_source({k: (v["isl"].max(), len(v)) for k, v in c.groupby("kernel_source")})
        if gsrc is None or csrc is None:
            continue
        picked["fp8" if fp8 else "bf16"] = {"context": csrc, "generation": gsrc}
        for d, src, pos, dest in ((c, csrc, "isl", out_ctx), (g, gsrc, "step", out_gen)):
            d = d[d["kernel_source"] == src]
            d = d.groupby(["gemm_type", "num_heads", "batch_size", pos],
                          as_index=False)["latency"].median()
            dest.append(np.column_stack([np.full(len(d), fp8),
                                         (d["gemm_type"] == "fp8_block").astype(float),
                                         d["num_heads"], d["batch_size"], d[pos], d["latency"]]))
    cat = lambda parts: (np.concatenate(parts).astype(np.float64) if parts  # noqa: E731
                         else np.zeros((0, 6)))
    return cat(out_ctx), cat(out_gen), picked


def _moe(df) -> np.ndarray:
    """The fused-MoE rows kept (see the module docstring), duplicates reduced to their median."""
    d = df[df["moe_dtype"].isin(list(MOE_DTYPES)) & df["distribution"].isin(list(MOE_DISTRIBUTIONS))]
    if d.empty:
        return np.zeros((0, 10))
    keys = ["moe_dtype", "distribution", "hidden_size", "inter_size", "topk", "num_experts",
            "moe_tp_size", "moe_ep_size", "num_tokens"]
    d = d.groupby(keys, as_index=False)["latency"].median()
    return np.column_stack([d["moe_dtype"].map(MOE_DTYPES), d["distribution"].map(MOE_DISTRIBUTIONS),
                            d["hidden_size"], d["inter_size"], d["topk"], d["num_experts"],
                            d["moe_tp_size"], d["moe_ep_size"], d["num_tokens"],
                            d["latency"]]).astype(np.float64)


def _attn_sglang(df, pos_col: str) -> tuple[np.ndarray, dict]:
    """SGLang attention rows in _attn's form, and the backend kept per KV dtype: the first of
    SGLANG_ATTN with rows (BF16 KV: BF16 attention; FP8 KV: BF16 attention rows where the
    backend has them, else its FP8 ones, e.g. FA3's FP8 prefill)."""
    d = df
    if "window_size" in d.columns:
        d = d[d["window_size"] == 0]
    if "beam_width" in d.columns:
        d = d[d["beam_width"] == 1]
    parts, picked = [], {}
    for fp8 in (0, 1):
        sub = d[d["kv_cache_dtype"] == ("fp8" if fp8 else "bfloat16")]
        for kern in SGLANG_ATTN:
            s = sub[sub["kernel_source"] == kern]
            if fp8:
                s = s[s["attn_dtype"] == ("bfloat16" if (s["attn_dtype"] == "bfloat16").any()
                                          else "fp8")]
            else:
                s = s[s["attn_dtype"] == "bfloat16"]
            if not s.empty:
                break
        else:
            continue
        picked["fp8" if fp8 else "bf16"] = f"{kern} ({s['attn_dtype'].iloc[0]} attention)"
        s = s.groupby(["batch_size", pos_col, "num_heads", "num_key_value_heads", "head_dim"],
                      as_index=False)["latency"].median()
        parts.append(np.column_stack([np.full(len(s), fp8), s["batch_size"], s[pos_col],
                                      s["num_heads"], s["num_key_value_heads"], s["head_dim"],
                                      s["latency"]]))
    return (np.concatenate(parts).astype(np.float64) if parts else np.zeros((0, 7))), picked


def convert_sglang(wheel: Path, out: Path) -> dict:
    """The SGLang tables (module docstring, --framework sglang) of the GPUs in GPUS."""
    import pandas as pd

    zf = zipfile.ZipFile(wheel)
    names = zf.namelist()
    root = "aiconfigurator_core/systems/data/"
    wheel_version = re.search(r"-(\d+[.]\d+[.]\d+)-", wheel.name).group(1)
    manifest = {"format": "tuner-aic/1", "framework": "sglang",
                "source": f"aiconfigurator-core {wheel_version} (NVIDIA AIConfigurator, "
                          "Apache-2.0), aiconfigurator_core/systems/data/<gpu>/<op>/sglang",
                "wheel_sha256": hashlib.sha256(wheel.read_bytes()).hexdigest(),
                "units": "latency_ms per call; message_bytes",
                "not_converted": "NCCL collectives, fused MoE, MLA / DSA modules: priced from "
                                 "the same GPU's vLLM tables (predictors/data/aic)",
                "gpus": {}}

    def read(path):
        return pd.read_parquet(io.BytesIO(zf.read(path)))

    def versions(sysname, op, fname):
        pat = re.compile(rf"{root}{sysname}/{op}/sglang/([^/]+)/{fname}$")
        return sorted({mm.group(1) for p in names if (mm := pat.match(p))}, key=_ver_key)

    out.mkdir(parents=True, exist_ok=True)
    for sysname, gpu in GPUS.items():
        gv = versions(sysname, "gemm", "gemm_perf.parquet")
        av = versions(sysname, "attention", "context_attention_perf.parquet")
        if not gv or not av:
            continue
        arrays: dict[str, np.ndarray] = {}
        info = {"catalog_gpu": gpu, "aic_system": sysname}
        df = read(f"{root}{sysname}/gemm/sglang/{gv[-1]}/gemm_perf.parquet")
        info["device"] = str(df["device"].iloc[0])
        info["gemm_version"] = gv[-1]
        for tag, (kernels, dtype) in (("bf16", SGLANG_BF16_GEMM), ("fp8", SGLANG_FP8_GEMM)):
            g = _gemm(df, kernels, dtype)
            if g is None:
                continue
            for key, v in g.items():
                arrays[f"gemm_{tag}_{key}"] = v
            info[f"gemm_{tag}_filled_cells"] = int((~g["measured"]).sum())
        info["attention_version"] = av[-1]
        base = f"{root}{sysname}/attention/sglang/{av[-1]}/"
        arrays["ctx_attn"], ctx_k = _attn_sglang(read(base + "context_attention_perf.parquet"),
                                                 "isl")
        arrays["gen_attn"], gen_k = _attn_sglang(read(base + "generation_attention_perf.parquet"),
                                                 "step")
        info["attention_backends"] = {kv: {"context": ctx_k.get(kv), "generation": gen_k.get(kv)}
                                      for kv in ("bf16", "fp8") if kv in ctx_k or kv in gen_k}
        rows, cv = [], []
        for v in versions(sysname, "comm", "custom_allreduce_perf.parquet"):
            c = read(f"{root}{sysname}/comm/sglang/{v}/custom_allreduce_perf.parquet")
            c = c[(c["allreduce_dtype"] == "bfloat16")
                  & c["kernel_source"].str.startswith("SGLang_CustomAllReduce")]
            if c.empty:  # e.g. a version whose table measured TensorRT-LLM's all-reduce
                continue
            cv.append(v)
            for _, r in c.iterrows():
                rows.append([version_code(v),
                             1.0 if r["kernel_source"].endswith("graph") else 0.0,
                             r["num_gpus"], r["message_size"], r["latency"]])
        arrays["allreduce"] = np.array(rows, dtype=np.float64).reshape(-1, 5)
        info["allreduce_versions"] = cv
        np.savez_compressed(out / f"{sysname}.npz", **arrays)
        manifest["gpus"][sysname] = info
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest


def convert(wheel: Path, out: Path) -> dict:
    import pandas as pd

    zf = zipfile.ZipFile(wheel)
    names = zf.namelist()
    root = "aiconfigurator_core/systems/data/"
    wheel_version = re.search(r"-(\d+[.]\d+[.]\d+)-", wheel.name).group(1)
    manifest = {"format": "tuner-aic/1",
                "source": f"aiconfigurator-core {wheel_version} (NVIDIA AIConfigurator, "
                          "Apache-2.0), aiconfigurator_core/systems/data",
                "wheel_sha256": hashlib.sha256(wheel.read_bytes()).hexdigest(),
                "units": "latency_ms per call; message_bytes",
                "gpus": {}}

    def read(path):
        return pd.read_parquet(io.BytesIO(zf.read(path)))

    def versions(sysname, op, fname):
        pat = re.compile(rf"{root}{sysname}/{op}/vllm/([^/]+)/{fname}$")
        return sorted({mm.group(1) for p in names if (mm := pat.match(p))}, key=_ver_key)

    out.mkdir(parents=True, exist_ok=True)
    for sysname, gpu in GPUS.items():
        arrays: dict[str, np.ndarray] = {}
        info = {"catalog_gpu": gpu, "aic_system": sysname}
        gv = versions(sysname, "gemm", "gemm_perf.parquet")
        if not gv:
            continue
        df = read(f"{root}{sysname}/gemm/vllm/{gv[-1]}/gemm_perf.parquet")
        info["device"] = str(df["device"].iloc[0])
        info["gemm_version"] = gv[-1]
        for tag, kernels in (("bf16", BF16_GEMM), ("fp8", FP8_GEMM)):
            g = _gemm(df, kernels)
            if g is None:
                continue
            for key, v in g.items():
                arrays[f"gemm_{tag}_{key}"] = v
            info[f"gemm_{tag}_filled_cells"] = int((~g["measured"]).sum())
        av = versions(sysname, "attention", "context_attention_perf.parquet")
        info["attention_version"] = av[-1]
        kernels: dict[str, dict] = {"context": {}, "generation": {}}
        arrays["ctx_attn"] = _attn(read(f"{root}{sysname}/attention/vllm/{av[-1]}/"
                                        "context_attention_perf.parquet"), "isl",
                                   kernels["context"])
        arrays["gen_attn"] = _attn(read(f"{root}{sysname}/attention/vllm/{av[-1]}/"
                                        "generation_attention_perf.parquet"), "step",
                                   kernels["generation"])
        info["attention_kernels"] = kernels
        rows = []
        cv = versions(sysname, "comm", "custom_allreduce_perf.parquet")
        for v in cv:
            c = read(f"{root}{sysname}/comm/vllm/{v}/custom_allreduce_perf.parquet")
            c = c[c["allreduce_dtype"] == "bfloat16"]
            for _, r in c.iterrows():
                rows.append([version_code(v),
                             1.0 if r["kernel_source"].endswith("graph") else 0.0,
                             r["num_gpus"], r["message_size"], r["latency"]])
        arrays["allreduce"] = np.array(rows, dtype=np.float64).reshape(-1, 5)
        info["allreduce_versions"] = cv
        # NCCL all-reduce (vLLM hands messages above its custom all-reduce's size limit to
        # NCCL): newest NCCL version with an all_reduce table
        npat = re.compile(rf"{root}{sysname}/comm/nccl/([^/]+)/nccl_perf.parquet$")
        nv = sorted({mm.group(1) for p in names if (mm := npat.match(p))}, key=_ver_key)
        for op, key in (("all_reduce", "nccl_allreduce"), ("all_gather", "nccl_allgather"),
                        ("reduce_scatter", "nccl_reducescatter")):
            nrows = []
            for v in reversed(nv):
                c = read(f"{root}{sysname}/comm/nccl/{v}/nccl_perf.parquet")
                c = c[(c["op_name"] == op) & c["nccl_dtype"].isin(["half", "bfloat16"])]
                if c.empty:
                    continue
                c = c.groupby(["num_gpus", "message_size"], as_index=False)["latency"].median()
                nrows = np.column_stack([c["num_gpus"], c["message_size"], c["latency"]])
                if op == "all_reduce":
                    info["nccl_version"] = v
                else:
                    info[f"{key}_version"] = v
                break
            arrays[key] = np.asarray(nrows, dtype=np.float64).reshape(-1, 3)
        # fused MoE: newest vLLM version with a moe_perf table
        mv = versions(sysname, "moe", "moe_perf.parquet")
        arrays["moe"] = _moe(read(f"{root}{sysname}/moe/vllm/{mv[-1]}/moe_perf.parquet")) \
            if mv else np.zeros((0, 10))
        if mv:
            info["moe_version"] = mv[-1]
            info["moe_rows"] = int(len(arrays["moe"]))
        # MLA (DeepSeek-V3) and DeepSeek sparse attention (V3.2) module tables
        for kind, op, pre in (("mla", "mla", "mla"), ("dsa", "sparse_attention", "dsa")):
            v = versions(sysname, op, f"{pre}_generation_module_perf.parquet")
            if not v:
                continue
            base = f"{root}{sysname}/{op}/vllm/{v[-1]}/{pre}"
            mctx, mgen, picked = _mla_module(read(f"{base}_context_module_perf.parquet"),
                                             read(f"{base}_generation_module_perf.parquet"))
            if len(mctx) and len(mgen):
                arrays[f"{kind}_ctx"], arrays[f"{kind}_gen"] = mctx, mgen
                info[f"{kind}_version"] = v[-1]
                info[f"{kind}_backends"] = picked
        np.savez_compressed(out / f"{sysname}.npz", **arrays)
        manifest["gpus"][sysname] = info
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("wheel", type=Path)
    ap.add_argument("--framework", choices=("vllm", "sglang"), default="vllm",
                    help="whose tables: vLLM's (predictors/data/aic) or SGLang's "
                         "(predictors/data/aic-sglang)")
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args()
    data = Path(__file__).resolve().parents[1] / "predictors" / "data"
    if a.framework == "sglang":
        a.out = a.out or data / "aic-sglang"
        m = convert_sglang(a.wheel, a.out)
    else:
        a.out = a.out or data / "aic"
        m = convert(a.wheel, a.out)
    total = sum(p.stat().st_size for p in a.out.glob("*.npz"))
    print(f"wrote {len(m['gpus'])} GPUs to {a.out} ({total / 1e6:.2f} MB)")


if __name__ == "__main__":
    main()
