"""A GPU profile measured by `tuner profile` against the kernel tables tuner prices that GPU with.

Two independent measurements of the same operators on the same GPU type: PyTorch's kernels
timed by tuner's profiler on a lent machine (`benchmarks/gpu_profile.sh`) and NVIDIA
AIConfigurator's vLLM kernel tables (`predictors/data/aic/`), which are what `tuner search`
uses by default. Per family it prints the median and worst ratio profile / table, and then the
per-layer linear time at 1 and 4,096 tokens against the reference figures of Llama-2-7B on an
H100 (~0.16 ms and ~2.2 ms).

    python benchmarks/profile_vs_tables.py predictors/data/llama-3-8b-H100 [more profile dirs]
    python benchmarks/profile_vs_tables.py benchmarks/data/h200-2026-11-30 \
        --against benchmarks/data/h100-2026-11-26      # also GPU against GPU, same cases

Rows compared: the four projections (GEMM grid, log-log interpolated in tokens), decode
attention (batch x KV length grid) and prefill attention of one sequence with no earlier
context (the tables' batch-1 rows). Norms, rotary and activations are not in the tables (vLLM
fuses them), so they are not compared.

`--against DIR` also sets each profile beside the profile of the same model under DIR (another
GPU measured with the same grids): the median time ratio per family over the cases both hold,
the projections split into weight-read-bound (<= 16 tokens) and compute-bound (>= 2,048 tokens)
rows, which tells what a GPU's spec-sheet ratios predict from what they do not.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path

import numpy as np

from tuner.core.catalog import load_models
from tuner.predictors.aic_tables import KernelTables
from tuner.predictors.opmath import LINEAR_OPS, linear_dims


def _rows(profile: Path) -> list[dict]:
    with (profile / "profile.csv").open() as f:
        return [r for r in csv.DictReader(f) if r["status"] == "ok"]


def profile_dirs(paths: list[Path]) -> list[Path]:
    """Profile folders from the command line: a profile folder itself, or a data folder whose
    subfolders are profiles (a shell glob's README.md beside them is passed over)."""
    found: list[Path] = []
    for p in paths:
        if (p / "provenance.json").is_file():
            found.append(p)
        elif p.is_dir():
            found += sorted(d for d in p.iterdir() if (d / "provenance.json").is_file())
    if not found:
        raise SystemExit(f"no profile folder (one with provenance.json) in: "
                         f"{' '.join(map(str, paths))}")
    return found


def family(op: str) -> str:
    """The comparison family of a profile row's operation."""
    if op.startswith("linear."):
        return "linear"
    if op in ("norm", "activation", "rotary", "add"):
        return "elementwise"
    return op  # lm_head, attn.prefill, attn.decode, copy.h2d, quant, cpu.matmul, ...


# the columns that identify one measured case across two profiles of the same grids
CASE_KEY = ("operation", "variant", "tokens", "context", "batch", "kv_len", "size_bytes", "bits")


def against(rows: list[dict], ref_rows: list[dict]) -> dict:
    """Median time ratio rows / ref_rows over the cases both measured, per family; the
    projections also split into weight-read-bound (<= 16 tokens) and compute-bound
    (>= 2,048 tokens) rows."""
    base = {tuple(r[k] for k in CASE_KEY): float(r["median_s"]) for r in ref_rows}
    groups: dict[str, list[float]] = {}
    for r in rows:
        b = base.get(tuple(r[k] for k in CASE_KEY))
        if not b:
            continue
        fam, ratio = family(r["operation"]), float(r["median_s"]) / b
        groups.setdefault(fam, []).append(ratio)
        if fam == "linear" and int(r["tokens"]) <= 16:
            groups.setdefault("linear<=16tok", []).append(ratio)
        if fam == "linear" and int(r["tokens"]) >= 2048:
            groups.setdefault("linear>=2048tok", []).append(ratio)
    return {k: {"n": len(v), "median_ratio": float(np.median(v))} for k, v in groups.items()}


def _interp_loglog(x: np.ndarray, y: np.ndarray, at: np.ndarray) -> np.ndarray:
    return np.exp(np.interp(np.log(at), np.log(x), np.log(y)))


def compare(profile: Path) -> dict:
    prov = json.loads((profile / "provenance.json").read_text())
    model = load_models()[prov["model"]]
    tables = KernelTables.load(prov["gpu"])
    rows = _rows(profile)
    out: dict = {"profile": str(profile), "model": prov["model"], "gpu": prov["gpu"],
                 "device_name": prov["device_name"], "torch": prov["torch"],
                 "tables": tables.describe(), "families": {}}

    m_grid = tables.gemm_m_grid("bf16")
    ratios: list[tuple[str, int, float]] = []
    for op in LINEAR_OPS:
        k, n = linear_dims(op, model)
        t_tab = tables.gemm_s(n, k, "bf16")
        for r in (r for r in rows if r["operation"] == op):
            m = int(r["tokens"])
            if m_grid[0] <= m <= m_grid[-1]:
                ratios.append((op, m, float(r["median_s"]) / float(_interp_loglog(m_grid, t_tab, m))))
    out["families"]["linear"] = _summary([x[2] for x in ratios])

    b, s, t = tables.generation_attention(model.num_heads, model.num_kv_heads, model.head_dim)
    dec = []
    for r in (r for r in rows if r["operation"] == "attn.decode"):
        bt, kv = int(r["batch"]), int(r["kv_len"])
        if b[0] <= bt <= b[-1] and s[0] <= kv <= s[-1]:
            lb = np.interp(np.log(bt), np.log(b), np.arange(len(b)))
            ls = np.interp(np.log(kv), np.log(s), np.arange(len(s)))
            i, j = int(np.floor(lb)), int(np.floor(ls))
            i1, j1 = min(i + 1, len(b) - 1), min(j + 1, len(s) - 1)
            w, v = lb - i, ls - j
            lt = np.log(t)
            tab = np.exp((1 - w) * (1 - v) * lt[i, j] + w * (1 - v) * lt[i1, j]
                         + (1 - w) * v * lt[i, j1] + w * v * lt[i1, j1])
            dec.append(float(r["median_s"]) / float(tab))
    out["families"]["attn.decode"] = _summary(dec)

    pairs, tp = tables.context_attention(model.num_heads, model.num_kv_heads, model.head_dim)
    pre = []
    for r in (r for r in rows if r["operation"] == "attn.prefill" and int(r["context"]) == 0):
        c = int(r["tokens"])
        p = c * (c + 1) / 2.0
        if pairs[0] <= p <= pairs[-1]:
            pre.append(float(r["median_s"]) / float(_interp_loglog(pairs, tp, np.array(p))))
    out["families"]["attn.prefill"] = _summary(pre)

    # per-layer linear time (the four projections) at 1 and 4,096 tokens, both sources
    layer = {}
    for m in (1, 4096):
        prof = sum(float(r["median_s"]) for r in rows
                   if r["operation"] in LINEAR_OPS and int(r["tokens"]) == m)
        tab = sum(float(_interp_loglog(m_grid, tables.gemm_s(n, k, "bf16"), np.array(m)))
                  for n, k in (linear_dims(op, model)[::-1] for op in LINEAR_OPS))
        layer[str(m)] = {"profile_ms": prof * 1e3, "tables_ms": tab * 1e3}
    out["layer_linear"] = layer
    return out


def _summary(ratios: list[float]) -> dict:
    if not ratios:
        return {"n": 0}
    r = np.asarray(ratios)
    dev = np.abs(np.log(r))
    return {"n": int(r.size), "median_ratio": float(np.median(r)),
            "median_abs_pct": float(np.median(np.abs(r - 1)) * 100),
            "worst_ratio": float(r[np.argmax(dev)])}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("profiles", nargs="+", type=Path,
                    help="profile folders, or data folders holding one per model")
    ap.add_argument("--against", type=Path, metavar="DIR",
                    help="a data folder of another GPU's profiles (same model folder names)")
    ap.add_argument("--json", action="store_true", help="print the comparison as JSON")
    a = ap.parse_args(argv)
    results = []
    for p in profile_dirs(a.profiles):
        res = compare(p)
        if a.against and (a.against / p.name / "profile.csv").is_file():
            ref = a.against / p.name
            ref_gpu = json.loads((ref / "provenance.json").read_text()).get("device_name")
            res["against"] = {"profile": str(ref), "device_name": ref_gpu,
                              "families": against(_rows(p), _rows(ref))}
        results.append(res)
    if a.json:
        json.dump(results, sys.stdout, indent=2)
        print()
        return 0
    for res in results:
        print(f"{res['model']} on {res['device_name']} (torch {res['torch']}) vs {res['tables']}")
        print(f"  {'family':<13} {'rows':>5} {'median profile/table':>21} {'median |diff|':>14} "
              f"{'worst':>7}")
        for fam, s in res["families"].items():
            if s["n"]:
                print(f"  {fam:<13} {s['n']:>5} {s['median_ratio']:>21.3f} "
                      f"{s['median_abs_pct']:>13.1f}% {s['worst_ratio']:>7.2f}")
        for m, v in res["layer_linear"].items():
            print(f"  per-layer projections at {m:>4} token(s): profile {v['profile_ms']:.3f} ms, "
                  f"tables {v['tables_ms']:.3f} ms")
        if ag := res.get("against"):
            print(f"  against {ag['profile']} ({ag['device_name']}): median time ratio this / that")
            for fam, f in ag["families"].items():
                print(f"    {fam:<16} {f['n']:>5} cases {f['median_ratio']:>7.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
