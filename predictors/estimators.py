"""Per-operation time estimators with scikit-learn's contract (hyper-parameters in __init__,
fit(X, y) returns self, predict(X), learned state in attributes ending in `_`), so that
sklearn's cross_val_score / KFold / clone work on them unchanged.

All of them fit *relative* error (an op's times span five orders of magnitude, and the error
that matters for a makespan is the relative one):
  LinearCost         InferMax §3.2: time = bias + sum_j coef_j * basis_j(X), coefficients >= 0
                     (non-negative least squares on relative residuals); bases per operation:
                     tokens for projections, (c, c^2, c*k) for prefill attention, (B, B*K) for
                     decode attention, size for copies and (de)quantization
  PolynomialCost     a degree-d polynomial of the features (relative least squares)
  ForestCost         random forest on log features -> log time (as Vidur does)
  InterpCost         piecewise-linear interpolation through the measured points (1 feature);
                     keeps tile-quantisation steps that smooth models average away
  SaturatingCurve    copies: bandwidth(size) = peak * size / (size + half_size), so
                     time(size) = (size + half_size) / peak (Vasuki §5.1's saturation)
"""

from __future__ import annotations

import numpy as np
from sklearn.base import BaseEstimator, RegressorMixin


def design(X: np.ndarray, basis: str) -> np.ndarray:
    """Columns of a linear cost model (without the bias column)."""
    X = np.asarray(X, dtype=np.float64)
    if basis in ("identity", "tokens", "size"):
        return X
    if basis == "prefill":  # X = [chunk, context]: c (per-token work), c^2 (causal), c*k
        c, k = X[:, 0], X[:, 1]
        return np.column_stack([c, c * c, c * k])
    if basis == "decode":  # X = [batch, kv_len]: B (per-request), B*K (KV read)
        b, k = X[:, 0], X[:, 1]
        return np.column_stack([b, b * k])
    if basis == "threads":  # X = [intra, inter]: work split over threads
        return 1.0 / np.maximum(X, 1.0)
    raise ValueError(f"unknown basis {basis!r}")


def _check_xy(X, y=None):
    X = np.asarray(X, dtype=np.float64)
    if X.ndim == 1:
        X = X[:, None]
    if y is None:
        return X
    y = np.asarray(y, dtype=np.float64)
    if (y <= 0).any() or not np.isfinite(y).all():
        raise ValueError("times must be positive and finite")
    return X, y


class LinearCost(RegressorMixin, BaseEstimator):
    def __init__(self, basis: str = "identity", nonneg: bool = True):
        self.basis = basis
        self.nonneg = nonneg

    def fit(self, X, y):
        from scipy.optimize import nnls

        X, y = _check_xy(X, y)
        A = np.column_stack([np.ones(len(y)), design(X, self.basis)])
        scale = np.maximum(np.abs(A).max(axis=0), 1e-30)
        Aw = (A / scale) / y[:, None]  # relative residuals: (A theta - y) / y
        if self.nonneg:
            theta, _ = nnls(Aw, np.ones(len(y)), maxiter=50 * A.shape[1])
        else:
            theta = np.linalg.lstsq(Aw, np.ones(len(y)), rcond=None)[0]
        theta = theta / scale
        self.intercept_ = float(theta[0])
        self.coef_ = theta[1:]
        return self

    def predict(self, X):
        X = _check_xy(X)
        return self.intercept_ + design(X, self.basis) @ self.coef_


class PolynomialCost(RegressorMixin, BaseEstimator):
    def __init__(self, degree: int = 2):
        self.degree = degree

    def fit(self, X, y):
        from sklearn.preprocessing import PolynomialFeatures

        X, y = _check_xy(X, y)
        self.scale_ = np.maximum(np.abs(X).max(axis=0), 1.0)
        self.poly_ = PolynomialFeatures(self.degree, include_bias=True).fit(X / self.scale_)
        A = self.poly_.transform(X / self.scale_)
        self.coef_ = np.linalg.lstsq(A / y[:, None], np.ones(len(y)), rcond=None)[0]
        self.floor_ = float(y.min()) * 0.5  # a polynomial may dip below zero between points
        return self

    def predict(self, X):
        X = _check_xy(X)
        return np.maximum(self.poly_.transform(X / self.scale_) @ self.coef_, self.floor_)


class ForestCost(RegressorMixin, BaseEstimator):
    def __init__(self, n_estimators: int = 16, min_samples_leaf: int = 1, random_state: int = 0):
        self.n_estimators = n_estimators
        self.min_samples_leaf = min_samples_leaf
        self.random_state = random_state

    def fit(self, X, y):
        from sklearn.ensemble import RandomForestRegressor

        X, y = _check_xy(X, y)
        self.forest_ = RandomForestRegressor(
            n_estimators=self.n_estimators, min_samples_leaf=self.min_samples_leaf,
            random_state=self.random_state, n_jobs=1).fit(np.log1p(X), np.log(y))
        return self

    def predict(self, X):
        X = _check_xy(X)
        return np.exp(self.forest_.predict(np.log1p(X)))


class InterpCost(RegressorMixin, BaseEstimator):
    """Piecewise-linear in (log x, log t) through the per-x mean times; beyond the largest x the
    time grows in proportion to x (throughput-bound), below the smallest it stays flat."""

    def __init__(self):
        pass

    def fit(self, X, y):
        X, y = _check_xy(X, y)
        if X.shape[1] != 1:
            raise ValueError("InterpCost takes one feature")
        x = X[:, 0]
        ux, inv = np.unique(x, return_inverse=True)
        ly = np.zeros(len(ux))
        np.add.at(ly, inv, np.log(y))
        ly /= np.bincount(inv)
        self.x_ = ux
        self.logy_ = ly
        return self

    def predict(self, X):
        X = _check_xy(X)
        x = X[:, 0]
        lx = np.log(np.maximum(self.x_, 1e-300))
        q = np.log(np.clip(x, self.x_[0], self.x_[-1]).clip(1e-300))
        t = np.exp(np.interp(q, lx, self.logy_))
        over = x > self.x_[-1]
        t[over] *= x[over] / self.x_[-1]
        return t


class SaturatingCurve(RegressorMixin, BaseEstimator):
    """time(s) = (s + half_size) / peak  <=>  bandwidth(s) = peak * s / (s + half_size)."""

    def __init__(self, saturation_fraction: float = 0.9):
        self.saturation_fraction = saturation_fraction

    def fit(self, X, y):
        X, y = _check_xy(X, y)
        lin = LinearCost(basis="size").fit(X[:, :1], y)
        slope = max(float(lin.coef_[0]), 1e-30)
        self.peak_bytes_per_s_ = 1.0 / slope
        self.half_size_bytes_ = max(lin.intercept_, 0.0) * self.peak_bytes_per_s_
        f = self.saturation_fraction
        self.saturation_bytes_ = self.half_size_bytes_ * f / (1.0 - f)
        return self

    def predict(self, X):
        X = _check_xy(X)
        return (X[:, 0] + self.half_size_bytes_) / self.peak_bytes_per_s_

    def bandwidth(self, size_bytes):
        s = np.asarray(size_bytes, dtype=np.float64)
        return self.peak_bytes_per_s_ * s / (s + self.half_size_bytes_)


def measured_saturation_bytes(size_bytes, seconds, tolerance: float = 0.05) -> float | None:
    """Vasuki's saturation point (§5.1): the first size from which bandwidth grows by
    less than `tolerance` (relative) to the next size and stays within it of the best."""
    s = np.asarray(size_bytes, dtype=np.float64)
    t = np.asarray(seconds, dtype=np.float64)
    order = np.argsort(s)
    s, bw = s[order], s[order] / t[order]
    if len(s) < 3:
        return None
    best = bw.max()
    for i in range(len(s) - 1):
        if (bw[i + 1] - bw[i]) / bw[i] < tolerance and bw[i] >= (1 - 2 * tolerance) * best:
            return float(s[i])
    return float(s[int(np.argmax(bw))])
