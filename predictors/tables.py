"""Interpolation tables: the hot path of every table-driven cost model. Two families:

Linear in time (fitted profiles, predictors.fitted): whatever estimator wins an operation's
cross-validation (linear, polynomial, forest, interpolation), it is evaluated once on a grid and
the simulator then only interpolates — numpy over all iterations at once, no per-row Python and
no forest on 500k rows. Table1D / Table2D: piecewise linear (bilinear on log-style axes);
beyond the grid a time grows with the work (tokens, or chunk x context, or batch x KV).

Log-log (measured kernel tables, predictors.aic_tables and predictors.aic): log latency is
interpolated linearly in the log of each size between measured points (loglog_curve,
loglog_bilinear, log_bracket, fill_loglog). Beyond the largest measured size the last measured
segment's log-log slope continues (~1, i.e. time in proportion to size, for throughput-bound
kernels); below the smallest size the smallest measured time holds (a launch-bound kernel does
not get faster); no work (x <= 0) costs 0. IntTable, UniformLogCurve and UniformLogGrid
resample such curves once so a lookup is a gather or index arithmetic, not a binary search.
"""

from __future__ import annotations

from dataclasses import dataclass

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


# ---- log-log family: measured kernel tables -----------------------------------------------
def loglog_curve(x: np.ndarray, lx: np.ndarray, ly: np.ndarray) -> np.ndarray:
    """exp(interp(log x)) with the last segment's slope continued above the grid, the first
    value held below it, and 0 where x <= 0 (no such work in the step). x counts tokens,
    pairs or bytes: a positive x is >= 1."""
    x = np.asarray(x, dtype=np.float64)
    lgx = np.log(np.maximum(x, 1.0))
    y = np.interp(lgx, lx, ly)
    if len(lx) >= 2:
        slope = (ly[-1] - ly[-2]) / (lx[-1] - lx[-2])
        y += slope * np.maximum(lgx - lx[-1], 0.0)
    t = np.exp(y)
    t *= x > 0
    return t


def monotone_times_s(t_s: np.ndarray) -> np.ndarray:
    """A measured latency curve over growing message sizes made non-decreasing by isotonic
    regression (pool adjacent violators) on log time: a collective of fewer bytes does not
    take longer than one of more, so a dip is timing noise (the tables dip by 1-40 %, e.g.
    L40S eager all-reduce on 4 GPUs 0.094 ms at 512 B, 0.057 ms at 1 KiB), and left in it made
    a step with fewer running requests price above one with more. Averaging the violators
    keeps the curve's level where a one-sided envelope would only lower or raise it. A few
    dozen points: a plain loop (scikit-learn's isotonic_regression would import SciPy on
    every `tuner simulate`)."""
    t_s = np.asarray(t_s, dtype=np.float64)
    if np.all(np.diff(t_s) >= 0.0):
        return t_s  # already in order: the measured values, untouched
    y = np.log(t_s)
    blocks: list[list[float]] = []  # [mean, count] of pooled runs
    for v in y:
        blocks.append([float(v), 1.0])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            m2, n2 = blocks.pop()
            m1, n1 = blocks[-1]
            blocks[-1] = [(m1 * n1 + m2 * n2) / (n1 + n2), n1 + n2]
    return np.exp(np.repeat([b[0] for b in blocks], [int(b[1]) for b in blocks]))


def loglog_bilinear(n: np.ndarray, kv: np.ndarray, lb: np.ndarray, ls: np.ndarray,
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


def log_bracket(grid, x: float):
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


def fill_loglog(lx: np.ndarray, g: np.ndarray, axis: int,
                min_slope: float = 1.0) -> np.ndarray:
    """Fill NaN cells of log-latency grid g along `axis` (log coordinates lx): interpolate
    between measured cells, hold below them, and beyond them continue the last segment's
    log-log slope, at least `min_slope`. The tables' missing cells are their largest (batch x
    length past what the collector's memory held), where the work is throughput-bound: time
    grows at least in proportion to size (slope 1: the last measured cell's throughput). A
    last segment still partly launch-bound has a slope below 1, and continuing it would give
    a throughput that grows without bound (decode attention above the HBM bandwidth)."""
    g = np.moveaxis(g.copy(), axis, -1)
    for idx in np.ndindex(g.shape[:-1]):
        row = g[idx]
        ok = np.isfinite(row)
        if ok.all() or not ok.any():
            continue
        x, y = lx[ok], row[ok]
        v = np.interp(lx, x, y)
        if ok.sum() >= 2:
            slope = max((y[-1] - y[-2]) / (x[-1] - x[-2]), min_slope)
            hi = lx > x[-1]
            v[hi] = y[-1] + slope * (lx[hi] - x[-1])
        g[idx] = np.where(ok, row, v)
    return np.moveaxis(g, -1, axis)


@dataclass(frozen=True)
class IntTable:
    """A curve over integer counts (tokens, sampled rows) tabulated at every integer up to
    `n`: exact at the measured points and at the steps between them (GEMM tile boundaries
    make time jump from one m to the next); counts beyond `n` take the curve itself."""

    values: np.ndarray  # seconds at 0, 1, ..., n - 1
    lx: np.ndarray
    ly: np.ndarray

    @classmethod
    def from_curve(cls, lx, ly, n: int = 1 << 15) -> IntTable:
        return cls(loglog_curve(np.arange(n, dtype=np.float64), lx, ly), lx, ly)

    def time_s(self, x: np.ndarray) -> np.ndarray:
        n = len(self.values)
        xi = x.astype(np.int64)
        t = self.values[np.minimum(xi, n - 1)]
        big = np.flatnonzero(xi >= n)
        if big.size:
            t[big] = loglog_curve(x[big], self.lx, self.ly)
        return t


@dataclass(frozen=True)
class UniformLogCurve:
    """A log-log curve resampled on a uniform grid of log x, so a lookup is index arithmetic
    (np.interp's binary search costs ~30 ns per random lookup; this ~5 ns)."""

    x0: float
    inv_dx: float
    n: int
    y: np.ndarray  # log seconds at x0 + i / inv_dx
    dy: np.ndarray  # y[i + 1] - y[i] (slope of the last segment repeated at the end)

    @classmethod
    def from_curve(cls, lx, ly, points: int = 1024) -> UniformLogCurve:
        xs = np.linspace(lx[0], lx[-1], points)
        y = np.log(loglog_curve(np.exp(xs), lx, ly))
        dy = np.append(np.diff(y), y[-1] - y[-2])
        return cls(float(xs[0]), float(1.0 / (xs[1] - xs[0])), points, y, dy)

    def time_s(self, x: np.ndarray) -> np.ndarray:
        f = np.log(np.maximum(x, 1.0))
        f -= self.x0
        f *= self.inv_dx
        np.maximum(f, 0.0, out=f)  # below the grid: hold the first value
        i = np.minimum(f.astype(np.int64), self.n - 1)
        f -= i  # beyond the grid: w > 1 continues the last segment's slope
        t = np.exp(self.y[i] + f * self.dy[i])
        t *= x > 0
        return t


_GRIDS: dict = {}  # UniformLogGrid.from_grid's cache (a pure function of its inputs' values)


@dataclass(frozen=True)
class UniformLogGrid:
    """A log-time table on a uniform grid of (log batch, log mean length), so a lookup is
    index arithmetic (no search): resampled from the measured grid by loglog_bilinear."""

    x0: float
    dx: float
    y0: float
    dy: float
    nx: int
    ny: int
    flat: np.ndarray  # log seconds, row-major [x, y]

    @classmethod
    def from_grid(cls, lb, ls, lt, points: int = 256) -> UniformLogGrid:
        """The grid resampled from the measured one (cached by its values: a search builds
        the same decode-attention grid for vLLM and SGLang, ~10 ms each, from the same
        tables; the grid is read-only)."""
        key = (points, *((a.dtype.str, a.shape, a.tobytes())
                         for a in map(np.asarray, (lb, ls, lt))))
        grid = _GRIDS.get(key)
        if grid is None:
            if len(_GRIDS) >= 64:
                _GRIDS.clear()
            grid = _GRIDS[key] = cls._resample(lb, ls, lt, points)
        return grid

    @classmethod
    def _resample(cls, lb, ls, lt, points: int) -> UniformLogGrid:
        xs = np.linspace(lb[0], lb[-1], points)
        ys = np.linspace(ls[0], ls[-1], points)
        X, Y = np.meshgrid(xs, ys, indexing="ij")
        n = np.exp(X.ravel())
        t = loglog_bilinear(n, n * np.exp(Y.ravel()), lb, ls, lt).reshape(points, points)
        flat = np.log(t).ravel()
        flat.flags.writeable = False  # shared by every cost model built on the same grid
        return cls(float(xs[0]), float(xs[1] - xs[0]), float(ys[0]), float(ys[1] - ys[0]),
                   points, points, flat)

    def time_s(self, n: np.ndarray, kv: np.ndarray) -> np.ndarray:
        nn = np.maximum(n, 1.0)  # n counts decodes: 0 or >= 1
        fy = np.log(np.maximum(kv / nn, 1.0))
        fx = np.log(nn)
        fx -= self.x0
        fx *= 1.0 / self.dx
        fy -= self.y0
        fy *= 1.0 / self.dy
        np.maximum(fx, 0.0, out=fx)  # below the grid: hold
        np.maximum(fy, 0.0, out=fy)
        i = np.minimum(fx.astype(np.int64), self.nx - 2)
        j = np.minimum(fy.astype(np.int64), self.ny - 2)
        fx -= i  # > 1 beyond the grid: the last segment continues
        fy -= j
        k = i * self.ny
        k += j
        a = self.flat[k]
        b = self.flat[k + self.ny]
        c = self.flat[k + 1]
        d = self.flat[k + (self.ny + 1)]
        d += a
        d -= b
        d -= c
        d *= fx
        d += c
        d -= a
        d *= fy
        b -= a
        b *= fx
        a += b
        a += d  # a + fx (b - a) + fy (c - a + fx (d - c - b + a))
        out = np.exp(a, out=a)
        out *= n > 0
        return out
