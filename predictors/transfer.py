"""Roofline transfer: predict a device nobody profiled from one that was.

On a measured device each operation class (GEMM, element-wise, prefill attention, decode
attention, each copy direction, (de)quantization) gets an *efficiency curve*:

    time = latency + t_roof / efficiency(arithmetic intensity, bytes)
    t_roof = max(FLOPs / peak FLOP/s, bytes / peak bytes/s)

where efficiency = achieved / peak is a degree-3 polynomial of (log10 FLOPs/byte, log10 bytes)
fitted in log space, clipped to (0, 1], and evaluated only inside the range it was learned on
(features are clamped to it), and latency is the device's floor (0.95 x its fastest call).
Transfer keeps latency and efficiency and swaps the peaks for the
target's spec sheet. Where two devices are measured, predicting one from the other's curves
and comparing with its measurements gives the transfer error (`tuner transfer SRC DST`).
"""

from __future__ import annotations

import copy
import warnings

import numpy as np
from sklearn.base import BaseEstimator, RegressorMixin

from tuner.predictors import efficiency as _eff
from tuner.predictors.opmath import LINK_CLASSES, class_peaks, efficiency_class  # noqa: F401


class EfficiencyCurve(RegressorMixin, BaseEstimator):
    """X = [[flops, bytes], ...] of single calls, y = seconds. Peaks are hyper-parameters so a
    fitted curve moves to another device with `set_params(peak_flops=..., peak_bytes_per_s=...)`."""

    def __init__(self, peak_flops: float = 1e12, peak_bytes_per_s: float = 1e11,
                 degree: int = 3, alpha: float = 1e-3, latency_s: float | None = None):
        self.peak_flops = peak_flops
        self.peak_bytes_per_s = peak_bytes_per_s
        self.degree = degree
        self.alpha = alpha
        self.latency_s = latency_s  # None: 0.95 x the fastest call of the class

    def _roof(self, X):
        return _eff.roof_s(X, self.peak_flops, self.peak_bytes_per_s)

    @staticmethod
    def _z(X):
        return _eff.z_features(X)

    def _design(self, z):
        return _eff.design(z, self.z_mean_, self.z_std_, self.degree)

    def fit(self, X, y):
        y = np.asarray(y, dtype=np.float64)
        z = self._z(X)
        roof = self._roof(X)
        self.z_min_, self.z_max_ = z.min(axis=0), z.max(axis=0)
        self.z_mean_ = z.mean(axis=0)
        self.z_std_ = np.where(z.std(axis=0) > 1e-9, z.std(axis=0), 1.0)
        A = self._design(z)
        reg = self.alpha * np.eye(A.shape[1])
        reg[0, 0] = 0.0
        # Latency (launch / dispatch) is not identifiable from one device's times where they are
        # latency-bound, and a wrong split between latency and efficiency does not transfer:
        # take it as the device's floor (learn_efficiency passes the fastest call of any op).
        floor = float(y.min()) if self.latency_s is None else min(self.latency_s, float(y.min()))
        self.latency_s_ = 0.95 * floor
        r = np.maximum(y - self.latency_s_, 0.05 * y)
        self.coef_ = np.linalg.solve(A.T @ A + reg, A.T @ np.log(roof / r))  # log efficiency
        return self

    def efficiency(self, X) -> np.ndarray:
        return _eff.efficiency(self.to_dict(), X)

    def predict(self, X):
        return _eff.predict_s(self.to_dict(), X)

    def on(self, peak_flops: float, peak_bytes_per_s: float) -> EfficiencyCurve:
        """The same learned curve on a device with other peaks."""
        c = copy.copy(self)
        c.peak_flops, c.peak_bytes_per_s = float(peak_flops), float(peak_bytes_per_s)
        return c

    def to_dict(self) -> dict:
        return {"peak_flops": self.peak_flops, "peak_bytes_per_s": self.peak_bytes_per_s,
                "degree": self.degree, "alpha": self.alpha, "latency_s": self.latency_s_,
                "latency_cap_s": self.latency_s,
                "coef": self.coef_.tolist(), "z_min": self.z_min_.tolist(),
                "z_max": self.z_max_.tolist(), "z_mean": self.z_mean_.tolist(),
                "z_std": self.z_std_.tolist()}

    @classmethod
    def from_dict(cls, d: dict) -> EfficiencyCurve:
        c = cls(d["peak_flops"], d["peak_bytes_per_s"], d["degree"], d["alpha"],
                d.get("latency_cap_s"))
        c.latency_s_ = float(d["latency_s"])
        c.coef_ = np.asarray(d["coef"])
        for k in ("z_min", "z_max", "z_mean", "z_std"):
            setattr(c, k + "_", np.asarray(d[k]))
        return c


def _class_rows(df, stat: str = "median"):
    ok = df[(df["status"] == "ok") & (df["median_s"] > 0) & (df["bytes_moved"] > 0)
            & (df[f"{stat}_s"] > 0)]
    ok = ok[~ok["operation"].str.startswith("cpu.")]
    classes = [efficiency_class(o, v) for o, v in zip(ok["operation"], ok["variant"], strict=True)]
    ok = ok.assign(eff_class=classes)
    return ok[ok["eff_class"].notna()]


def learn_efficiency(df, specs, *, folds: int = 5, seed: int = 0,
                     stat: str = "median") -> tuple[dict, dict]:
    """({class: EfficiencyCurve dict}, {class: k-fold MAPE}) from a profile's ok rows."""
    from sklearn.model_selection import KFold, cross_val_score

    rows = _class_rows(df, stat)
    curves, cv = {}, {}
    floor = float(rows[f"{stat}_s"].min()) if len(rows) else None
    for cls, g in rows.groupby("eff_class"):
        X = g[["flops", "bytes_moved"]].to_numpy(dtype=np.float64)
        y = g[f"{stat}_s"].to_numpy(dtype=np.float64)
        if len(y) < 3:
            continue
        pf, pb = class_peaks(cls, specs)
        # the highest degree (<= 3) whose coefficients the rows pin down (>= 2.5 rows each);
        # copies and (de)quantization have one effective feature (FLOPs/byte fixed by bytes)
        from math import comb

        z = _eff.z_features(X)
        dims = max(1, int(np.linalg.matrix_rank(z - z.mean(axis=0), tol=1e-6)))
        degree = max([1] + [k for k in (2, 3) if 2.5 * comb(k + dims, dims) <= len(y)])
        # (de)quantization runs ~8 kernels per call: its fixed cost is its own floor, not one
        # kernel launch
        cap = None if cls.startswith(("quant", "dequant")) else floor
        est = EfficiencyCurve(pf, pb, degree=degree, latency_s=cap)
        k = min(folds, len(y))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            s = cross_val_score(est, X, y, cv=KFold(k, shuffle=True, random_state=seed),
                                scoring="neg_mean_absolute_percentage_error")
        cv[cls] = float(-s.mean())
        curves[cls] = est.fit(X, y).to_dict()
    return curves, cv


def transfer_error(source_fit: dict, target_df, target_specs, stat: str = "median") -> dict:
    """Predict every ok row of a target profile from the source's efficiency curves moved to
    the target's peaks; {class: {'mape':..., 'rows':...}, 'all': {...}}."""
    rows = _class_rows(target_df, stat)
    out: dict = {}
    errs = []
    for cls, g in rows.groupby("eff_class"):
        d = source_fit.get("efficiency", {}).get(cls)
        if d is None:
            continue
        curve = EfficiencyCurve.from_dict(d).on(*class_peaks(cls, target_specs))
        X = g[["flops", "bytes_moved"]].to_numpy(dtype=np.float64)
        y = g[f"{stat}_s"].to_numpy(dtype=np.float64)
        ape = np.abs(curve.predict(X) - y) / y
        out[cls] = {"mape": float(ape.mean()), "median_ape": float(np.median(ape)),
                    "rows": int(len(y))}
        errs.append(ape)
    allape = np.concatenate(errs) if errs else np.array([np.nan])
    out["all"] = {"mape": float(np.mean(allape)), "median_ape": float(np.median(allape)),
                  "rows": int(sum(len(e) for e in errs))}
    return out
