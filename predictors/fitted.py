"""FittedCostModel: one engine iteration from measured (or transferred) per-operation curves.

    iteration = L x [ 4 projections(T) + 2 norm(T) + activation(T) + rotary(T) + 2 add(T)
                      + prefill attention + decode attention (+ all-reduce when tp > 1) ]
                + LM head(sampled rows) + engine overhead

with T = prefill tokens + decode requests of the step. The prefill chunks of one step are
summarised by the features the simulator keeps (sum c, sum c^2, sum c*k): they are priced as
n_eq = (sum c)^2 / sum c^2 chunks of c_eq = sum c^2 / sum c tokens after k_eq = sum c*k / sum c
context tokens each — exact when the chunks are alike. Decode attention is priced at the mean
KV length per request. Every curve is an interpolation table (predictors.tables), so pricing
500k iterations is a handful of numpy passes.

The per-step engine overhead (scheduling, input preparation: vLLM V1's CPU side) is not
something an operator profile measures; it keeps the roofline model's documented default.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from tuner.core.provenance import Provenance
from tuner.predictors.features import BatchFeatures, sum_parts
from tuner.predictors.opmath import ELEMENTWISE_OPS, LINEAR_OPS, TOKEN_OPS, flops_bytes
from tuner.predictors.roofline import RooflineCostModel
from tuner.predictors.tables import Table1D, Table2D, grid_axis, table_from_dict, token_axis

REQUIRED_OPS = (*TOKEN_OPS, "lm_head", "attn.prefill", "attn.decode")
_DEFAULT_OVERHEAD_S = RooflineCostModel.__dataclass_fields__["iteration_overhead_s"].default
_DEFAULT_PER_REQ_S = RooflineCostModel.__dataclass_fields__["per_request_overhead_s"].default
_DEFAULT_AR_LAT_S = RooflineCostModel.__dataclass_fields__["allreduce_latency_s"].default


@dataclass
class FittedCostModel:
    """CostModel protocol: iteration_time_s(BatchFeatures), breakdown(...), provenance."""

    num_layers: int
    hidden_size: int
    tables: dict[str, object]  # op -> Table1D (token ops, lm_head) / Table2D (attention)
    kind: str = "measured"  # measured | transferred
    description: str = "fitted profile"
    copies: dict[str, Table1D] = field(default_factory=dict)  # "copy.h2d[pinned]" -> Table1D
    tp: int = 1
    interconnect_bytes_per_s: float = 0.0
    allreduce_latency_s: float = _DEFAULT_AR_LAT_S
    iteration_overhead_s: float = _DEFAULT_OVERHEAD_S
    per_request_overhead_s: float = _DEFAULT_PER_REQ_S
    info: dict = field(default_factory=dict)

    def __post_init__(self):
        missing = [op for op in REQUIRED_OPS if op not in self.tables]
        if missing:
            raise ValueError(f"missing operations: {', '.join(missing)}")
        L = self.num_layers
        self._linear = self._combine(LINEAR_OPS, L)  # all layers, zero at 0 tokens
        self._elementwise = self._combine(ELEMENTWISE_OPS, L)
        lm = self.tables["lm_head"]
        self._lm_head = Table1D(np.concatenate([[0.0], lm.x[lm.x > 0]]),
                                np.concatenate([[0.0], lm.y[lm.x > 0]]))

    def _combine(self, ops, scale: float = 1.0) -> Table1D:
        """One table for the sum of several per-layer token ops (count x time each), times
        `scale`, with time 0 at 0 tokens (no step, no kernel)."""
        grid = np.unique(np.concatenate([self.tables[op].x for op in ops]))
        grid = grid[grid > 0]
        y = scale * sum(TOKEN_OPS[op] * self.tables[op](grid) for op in ops)
        return Table1D(np.concatenate([[0.0], grid]), np.concatenate([[0.0], y]))

    # ---- CostModel ----------------------------------------------------------------------
    def breakdown(self, f: BatchFeatures) -> dict[str, np.ndarray]:
        L = self.num_layers
        T = f.prefill_tokens + f.decodes
        n = len(T)
        P, S, X = f.prefill_tokens, f.prefill_sq, f.prefill_ctx
        prefill = np.zeros(n)
        ip = np.flatnonzero((P > 0) & (S > 0))
        if ip.size:  # only the steps that prefill (a minority in long jobs)
            Pp, Sp = P[ip], S[ip]
            prefill[ip] = (L * Pp * Pp / Sp) * self.tables["attn.prefill"](Sp / Pp, X[ip] / Pp)
        B = f.decodes
        idc = np.flatnonzero(B > 0)
        if idc.size == n:  # every step decodes: no gather/scatter
            decode = self.tables["attn.decode"](B, np.maximum(f.decode_kv / B, 1.0))
            decode *= L
        else:
            decode = np.zeros(n)
            if idc.size:
                Bd = B[idc]
                decode[idc] = L * self.tables["attn.decode"](
                    Bd, np.maximum(f.decode_kv[idc] / Bd, 1.0))
        sampled = f.seqs_sampled
        if self.tp > 1:
            msg = T * self.hidden_size * 2.0
            ring = 2.0 * (self.tp - 1) / self.tp * msg / self.interconnect_bytes_per_s
            allreduce = np.where(T > 0, (2.0 * L) * (ring + self.allreduce_latency_s), 0.0)
        else:
            allreduce = np.zeros(n)
        overhead = self.iteration_overhead_s + self.per_request_overhead_s * (f.decodes + sampled)
        return {
            "linear": self._linear(T),
            "elementwise": self._elementwise(T),
            "attention_prefill": prefill,
            "attention_decode": decode,
            "allreduce": allreduce,
            "lm_head": self._lm_head(sampled),
            "overhead": overhead,
        }

    def iteration_time_s(self, f: BatchFeatures) -> np.ndarray:
        return sum_parts(self.breakdown(f), len(f))

    @property
    def provenance(self) -> Provenance:
        return Provenance(self.kind, self.description)

    def describe(self) -> str:
        return str(self.provenance)

    # ---- detail ---------------------------------------------------------------------------
    def breakdown_ops(self, f: BatchFeatures) -> dict[str, np.ndarray]:
        """Seconds per iteration of every operation, per layer for layer ops (times
        num_layers for the iteration), for `tuner cost`."""
        T = f.prefill_tokens + f.decodes
        has = T > 0
        out = {}
        for op, count in TOKEN_OPS.items():
            out[op] = np.where(has, count * self.tables[op](T), 0.0)
        parts = self.breakdown(f)
        L = self.num_layers
        out["attn.prefill"] = parts["attention_prefill"] / L
        out["attn.decode"] = parts["attention_decode"] / L
        if self.tp > 1:
            out["allreduce"] = parts["allreduce"] / L
        return out

    def layer_time_s(self, f: BatchFeatures) -> np.ndarray:
        """Seconds of ONE decoder layer per iteration (projections, element-wise, attention,
        all-reduce); no LM head, no overhead (tuner.sim.offload's overlap budget)."""
        p = self.breakdown(f)
        return (p["linear"] + p["elementwise"] + p["attention_prefill"] + p["attention_decode"]
                + p["allreduce"]) / self.num_layers

    def decode_attention_layer_s(self, f: BatchFeatures) -> np.ndarray:
        """Seconds of ONE layer's decode attention per iteration."""
        return self.breakdown(f)["attention_decode"] / self.num_layers

    @property
    def transfer_model(self):
        """tuner.predictors.transfer_model.CallableTransferModel over the measured (or transferred)
        pinned host<->device copy curves; None when the profile has none (e.g. a CPU profile),
        so the simulator keeps its spec-sheet curve."""
        h2d, d2h = self.copies.get("copy.h2d[pinned]"), self.copies.get("copy.d2h[pinned]")
        if h2d is None or d2h is None:
            return None
        from tuner.predictors.transfer_model import CallableTransferModel

        return CallableTransferModel(h2d=h2d, d2h=d2h,
                                     name=f"{self.kind} pinned copy curves ({self.description})")


# ---- builders ------------------------------------------------------------------------------
def _copies(fit: dict) -> dict[str, Table1D]:
    return {k: table_from_dict(v["table"]) for k, v in fit["ops"].items()
            if k.startswith("copy.") and v.get("table")}


def measured_cost_model(fit: dict, model, *, description: str, tp: int = 1) -> FittedCostModel:
    """From a fit.json document whose profile was taken at `model`'s shapes."""
    tables = {}
    for op in REQUIRED_OPS:
        d = fit["ops"].get(op)
        if d is not None and d.get("table"):
            tables[op] = table_from_dict(d["table"])
    missing = [op for op in REQUIRED_OPS if op not in tables]
    if missing:
        raise ValueError(f"the profile lacks {', '.join(missing)}")
    return FittedCostModel(num_layers=model.num_layers, hidden_size=model.hidden_size,
                           tables=tables, kind="measured", description=description,
                           copies=_copies(fit), tp=tp,
                           info={"chosen": {op: fit["ops"][op]["chosen"] for op in REQUIRED_OPS},
                                 "cv_mape": {op: fit["ops"][op]["cv_mape"].get(
                                     fit["ops"][op]["chosen"]) for op in REQUIRED_OPS}})


def transferred_cost_model(fit: dict, model, target, *, description: str, tp: int = 1,
                           weight_bits: int = 16, kv_bits: int = 16, dtype_bytes: float = 2.0,
                           gemm_peak_flops: float | None = None,
                           interconnect_bytes_per_s: float = 0.0) -> FittedCostModel:
    """Tables for `model` (per tensor-parallel rank) on a device with `target` specs
    (predictors.devices.DeviceSpecs), from the source fit's efficiency curves."""
    from tuner.predictors.efficiency import predict_s
    from tuner.predictors.opmath import (
        class_peaks,
        efficiency_class,
        linear_dims,
        quantized_bytes_per_param,
        unconverted_shares,
    )

    eff = fit.get("efficiency", {})
    need = ("gemm", "elementwise", "attn.prefill", "attn.decode")
    missing = [c for c in need if c not in eff]
    if missing:
        raise ValueError(f"the source profile has no efficiency curve for {', '.join(missing)}")

    class curve:  # noqa: N801 - a tiny adapter with .predict(X) like the estimator's
        def __init__(self, op):
            self.cls = efficiency_class(op)
            self.pf, self.pb = class_peaks(self.cls, target)
            if self.cls == "gemm" and gemm_peak_flops:
                self.pf = gemm_peak_flops

        def predict(self, X):
            return predict_s(eff[self.cls], X, self.pf, self.pb)

    kw = {"dtype_bytes": dtype_bytes, "tp": tp, "weight_bits": weight_bits, "kv_bits": kv_bits}
    tokens = token_axis(np.concatenate([2.0 ** np.arange(15), [3 * 2.0 ** i for i in range(13)]]))
    tables: dict[str, object] = {}
    # the checkpoint's projections kept at 16 bits (modules_to_not_convert) run at the 16-bit
    # peak reading 2-byte weights, the others at the quantized peak reading their own bytes
    attn16, mlp16 = unconverted_shares(model, weight_bits)
    share16 = {"linear.qkv": attn16, "linear.o": attn16, "linear.gate_up": mlp16,
               "linear.down": mlp16}
    for op in (*TOKEN_OPS, "lm_head"):
        f_, b_ = flops_bytes(op, model, tokens=tokens, **kw)
        c = curve(op)
        if not ((attn16 or mlp16) and op in share16):
            tables[op] = Table1D(tokens, c.predict(np.column_stack([f_, b_])))
            continue
        # flops_bytes reads the memory plan's mean bytes: here the quantized ones alone
        _, b16 = flops_bytes(op, model, tokens=tokens, **dict(kw, weight_bits=16))
        k, n = linear_dims(op, model, tp)
        bq = b16 + k * n * (quantized_bytes_per_param(model, weight_bits) - dtype_bytes)
        t = c.predict(np.column_stack([f_, bq]))
        s16 = share16[op]
        if s16:
            t = (1.0 - s16) * t + s16 * predict_s(eff[c.cls], np.column_stack([f_, b16]),
                                                  class_peaks(c.cls, target)[0], c.pb)
        tables[op] = Table1D(tokens, t)
    a = grid_axis(2.0 ** np.arange(0, 15), 28, "log")
    b = grid_axis(np.concatenate([[0.0], 2.0 ** np.arange(4, 18)]), 28, "log1p")
    A, Bk = np.meshgrid(a, b, indexing="ij")
    f_, b_ = flops_bytes("attn.prefill", model, tokens=A.ravel(), context=Bk.ravel(), **kw)
    z = curve("attn.prefill").predict(np.column_stack([f_, b_])).reshape(A.shape)
    tables["attn.prefill"] = Table2D("attn.prefill", a, b, z, ("log", "log1p"))
    a = grid_axis(2.0 ** np.arange(0, 11), 24, "log")
    b = grid_axis(2.0 ** np.arange(0, 18), 28, "log")
    A, Bk = np.meshgrid(a, b, indexing="ij")
    f_, b_ = flops_bytes("attn.decode", model, batch=A.ravel(), kv_len=Bk.ravel(), **kw)
    z = curve("attn.decode").predict(np.column_stack([f_, b_])).reshape(A.shape)
    tables["attn.decode"] = Table2D("attn.decode", a, b, z, ("log", "log"))
    copies = {}
    sizes = np.geomspace(4096, 2.0 ** 34, 64)
    for direction in ("h2d", "d2h"):
        for memory in ("pinned", "pageable"):
            cls = f"copy.{direction}.{memory}"
            if cls in eff:
                pf, pb = class_peaks(cls, target)
                copies[f"copy.{direction}[{memory}]"] = Table1D(
                    sizes, predict_s(eff[cls], np.column_stack([0 * sizes, sizes]), pf, pb))
    return FittedCostModel(num_layers=model.num_layers, hidden_size=model.hidden_size,
                           tables=tables, kind="transferred", description=description,
                           copies=copies, tp=tp,
                           interconnect_bytes_per_s=interconnect_bytes_per_s)
