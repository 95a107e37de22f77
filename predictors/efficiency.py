"""Evaluating a learned efficiency curve (predictors.transfer.EfficiencyCurve) from its saved
parameters with numpy alone, so building a transferred cost model does not import scikit-learn.

    time = latency + t_roof / efficiency(z),  t_roof = max(FLOPs / peak_flops, bytes / peak_bw)
    z = (log10 FLOPs/byte, log10 bytes) clamped to the learned range,
    log efficiency = polynomial(standardised z) clipped to [log 1e-5, 0]
"""

from __future__ import annotations

import numpy as np

LOG_EFF_MIN = float(np.log(1e-5))


def z_features(X) -> np.ndarray:
    X = np.asarray(X, dtype=np.float64)
    b = np.maximum(X[:, 1], 1.0)
    return np.column_stack([np.log10(np.maximum(X[:, 0], 1.0) / b), np.log10(b)])


def design(z: np.ndarray, mean, std, degree: int) -> np.ndarray:
    zs = (z - np.asarray(mean)) / np.asarray(std)
    cols = [np.ones(len(z))]
    for d in range(1, degree + 1):
        for i in range(d + 1):
            cols.append(zs[:, 0] ** (d - i) * zs[:, 1] ** i)
    return np.column_stack(cols)


def roof_s(X, peak_flops: float, peak_bytes_per_s: float) -> np.ndarray:
    X = np.asarray(X, dtype=np.float64)
    return np.maximum(X[:, 0] / peak_flops, X[:, 1] / peak_bytes_per_s)


def efficiency(params: dict, X) -> np.ndarray:
    z = np.clip(z_features(X), params["z_min"], params["z_max"])
    A = design(z, params["z_mean"], params["z_std"], int(params["degree"]))
    return np.exp(np.clip(A @ np.asarray(params["coef"]), LOG_EFF_MIN, 0.0))


def predict_s(params: dict, X, peak_flops: float | None = None,
              peak_bytes_per_s: float | None = None) -> np.ndarray:
    """Seconds per call of rows X = [[flops, bytes], ...] on a device with these peaks
    (default: the device the curve was learned on)."""
    pf = params["peak_flops"] if peak_flops is None else peak_flops
    pb = params["peak_bytes_per_s"] if peak_bytes_per_s is None else peak_bytes_per_s
    return params["latency_s"] + roof_s(X, pf, pb) / efficiency(params, X)
