"""Interpolation tables: the hot path of a fitted cost model.

Whatever estimator wins an operation's cross-validation (linear, polynomial, forest,
interpolation), it is evaluated once on a grid and the simulator then only interpolates —
numpy over all iterations at once, no per-row Python and no forest on 500k rows.
Beyond the grid a time grows with the work (tokens, or chunk x context, or batch x KV).
"""

from __future__ import annotations

import numpy as np


def token_axis(measured: np.ndarray, n_log: int = 160) -> np.ndarray:
    """Grid for a one-feature table: every measured value plus a dense log-spaced grid."""
    m = np.unique(np.asarray(measured, dtype=np.float64))
    m = m[m > 0]
    if len(m) == 0:
        return np.array([1.0])
    return np.unique(np.concatenate([m, np.geomspace(m[0], m[-1], n_log)]))


class Table1D:
    """t(x) piecewise linear through (x_i, y_i); flat below x_0; proportional to x above x_n.

    Integer-valued queries (token counts) up to LUT_MAX are served from a dense lookup array
    (one gather instead of a binary search per row)."""

    LUT_MAX = 16384

    def __init__(self, x, y):
        self.x = np.asarray(x, dtype=np.float64)
        self.y = np.asarray(y, dtype=np.float64)
        self._lut = self._interp(np.arange(self.LUT_MAX + 1, dtype=np.float64))

    def _interp(self, q: np.ndarray) -> np.ndarray:
        t = np.interp(q, self.x, self.y)
        hi = self.x[-1]
        over = q > hi
        if over.any():
            t = np.where(over, self.y[-1] * q / hi, t)
        return t

    def __call__(self, q) -> np.ndarray:
        q = np.asarray(q, dtype=np.float64)
        if q.ndim == 1 and q.size > 256:
            qi = q.astype(np.int64)
            if (qi == q).all() and qi.min(initial=0) >= 0 and qi.max(initial=0) <= self.LUT_MAX:
                return self._lut[qi]
        return self._interp(q)

    def to_dict(self) -> dict:
        return {"kind": "1d", "x": self.x.tolist(), "y": self.y.tolist()}


def _fwd(axis_kind: str, v: np.ndarray) -> np.ndarray:
    return np.log1p(v) if axis_kind == "log1p" else np.log(np.maximum(v, 1e-12))


WORK = {
    # work of one call, used to extrapolate beyond the grid (times grow with it)
    "attn.prefill": lambda a, b: a * (b + 0.5 * a) + 64.0 * a,
    "attn.decode": lambda a, b: a * b + 16.0 * a,
}


class Table2D:
    """t(a, b) bilinear on a (log a, log1p b)-style grid; outside it, the value at the nearest
    grid point scaled by the ratio of work (WORK[op]). For speed the table is resampled once
    onto a uniform grid in the transformed coordinates, so a lookup is arithmetic, not a
    binary search."""

    RESAMPLE = 128

    def __init__(self, op: str, a, b, z, kinds=("log", "log1p")):
        self.op = op
        self.a = np.asarray(a, dtype=np.float64)
        self.b = np.asarray(b, dtype=np.float64)
        self.z = np.asarray(z, dtype=np.float64)
        self.kinds = tuple(kinds)
        ua, ub = _fwd(self.kinds[0], self.a), _fwd(self.kinds[1], self.b)
        n = self.RESAMPLE
        self._ga = np.linspace(ua[0], ua[-1], n) if len(ua) > 1 else ua.copy()
        self._gb = np.linspace(ub[0], ub[-1], n) if len(ub) > 1 else ub.copy()
        # bilinear on the original (irregular) grid, sampled on the uniform one
        A, B = np.meshgrid(self._ga, self._gb, indexing="ij")
        self._gz = _bilinear_irregular(ua, ub, self.z, A.ravel(), B.ravel()).reshape(A.shape)

    def __call__(self, a, b) -> np.ndarray:
        a = np.asarray(a, dtype=np.float64)
        b = np.asarray(b, dtype=np.float64)
        ac = np.clip(a, self.a[0], self.a[-1])
        bc = np.clip(b, self.b[0], self.b[-1])
        t = _bilinear_uniform(self._ga, self._gb, self._gz, _fwd(self.kinds[0], ac),
                              _fwd(self.kinds[1], bc))
        out = (a != ac) | (b != bc)
        if out.any():
            w = WORK[self.op]
            t = np.where(out, t * w(a, b) / np.maximum(w(ac, bc), 1e-30), t)
        return t

    def to_dict(self) -> dict:
        return {"kind": "2d", "op": self.op, "a": self.a.tolist(), "b": self.b.tolist(),
                "z": self.z.tolist(), "kinds": list(self.kinds)}


def _bilinear_irregular(ga, gb, z, ua, ub):
    i = np.clip(np.searchsorted(ga, ua, side="right") - 1, 0, max(len(ga) - 2, 0))
    j = np.clip(np.searchsorted(gb, ub, side="right") - 1, 0, max(len(gb) - 2, 0))
    i1 = np.minimum(i + 1, len(ga) - 1)
    j1 = np.minimum(j + 1, len(gb) - 1)
    fa = np.where(i1 > i, (ua - ga[i]) / np.where(i1 > i, ga[i1] - ga[i], 1.0), 0.0)
    fb = np.where(j1 > j, (ub - gb[j]) / np.where(j1 > j, gb[j1] - gb[j], 1.0), 0.0)
    return ((1 - fa) * (1 - fb) * z[i, j] + fa * (1 - fb) * z[i1, j]
            + (1 - fa) * fb * z[i, j1] + fa * fb * z[i1, j1])


def _bilinear_uniform(ga, gb, z, ua, ub):
    na, nb = len(ga), len(gb)
    if na > 1:
        pa = (ua - ga[0]) * ((na - 1) / (ga[-1] - ga[0]))
        i = np.minimum(pa.astype(np.int64), na - 2)
        fa = pa - i
    else:
        i, fa = np.zeros(ua.shape, np.int64), np.zeros_like(ua)
    if nb > 1:
        pb = (ub - gb[0]) * ((nb - 1) / (gb[-1] - gb[0]))
        j = np.minimum(pb.astype(np.int64), nb - 2)
        fb = pb - j
    else:
        j, fb = np.zeros(ub.shape, np.int64), np.zeros_like(ub)
    flat = z.ravel()
    k = i * nb + j
    if na > 1 and nb > 1:
        z00 = flat.take(k)
        z01 = flat.take(k + 1)
        k += nb
        z10 = flat.take(k)
        z11 = flat.take(k + 1)
        z01 -= z00
        z01 *= fb
        z00 += z01  # top row at fb
        z11 -= z10
        z11 *= fb
        z10 += z11  # bottom row at fb
        z10 -= z00
        z10 *= fa
        z00 += z10
        return z00
    if na > 1:
        return flat[k] + fa * (flat[k + nb] - flat[k])
    if nb > 1:
        return flat[k] + fb * (flat[k + 1] - flat[k])
    return flat[k]


def table_from_dict(d: dict):
    if d["kind"] == "1d":
        return Table1D(d["x"], d["y"])
    return Table2D(d["op"], d["a"], d["b"], d["z"], d.get("kinds", ("log", "log1p")))


def grid_axis(measured, n: int, kind: str) -> np.ndarray:
    m = np.unique(np.asarray(measured, dtype=np.float64))
    if kind == "log":
        m = m[m > 0]
        extra = np.geomspace(m[0], m[-1], n) if len(m) else np.array([1.0])
    else:  # log1p: includes 0
        extra = np.expm1(np.linspace(np.log1p(m[0]), np.log1p(m[-1]), n)) if len(m) else np.array([0.0])
    return np.unique(np.round(np.concatenate([m, extra]), 6))
