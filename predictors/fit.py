"""`tuner fit PROFILE_DIR`: one estimator per operation, chosen by k-fold cross-validated MAPE.

For each (operation, variant) of a profile every candidate estimator (predictors.estimators) is
scored with scikit-learn's cross_val_score over KFold(k); the one with the lowest mean absolute
percentage error is refit on all rows, tabulated for the simulator's hot path
(predictors.tables) and saved. Efficiency curves for roofline transfer (predictors.transfer)
are learned from the same rows. Outputs in FIT_DIR (default: the profile directory):

  fit.json        chosen estimator, CV errors and tables per op, device specs, efficiency curves
  cv_errors.csv   operation, variant, rows, model, cv_mape, chosen
  fit.joblib      the fitted scikit-learn-style estimators themselves (for reuse in Python)
"""

from __future__ import annotations

import json
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from tuner.core.io import dumps, sha256_file, write_atomic
from tuner.predictors.opmath import ATTENTION_OPS, COPY_OPS, ELEMENTWISE_OPS, LINEAR_OPS, QUANT_OPS

FIT_JSON = "fit.json"
CV_CSV = "cv_errors.csv"
FIT_JOBLIB = "fit.joblib"
FORMAT = "tuner-fit/1"


def _candidates(op: str) -> tuple[list[str], str, dict[str, object]]:
    """(feature columns, linear basis, {name: estimator}) for an operation."""
    from tuner.predictors.estimators import (
        ForestCost,
        InterpCost,
        LinearCost,
        PolynomialCost,
        SaturatingCurve,
    )

    if op in (*LINEAR_OPS, *ELEMENTWISE_OPS, "lm_head"):
        return ["tokens"], "tokens", {
            "linear": LinearCost("tokens"), "poly2": PolynomialCost(2),
            "forest": ForestCost(), "interp": InterpCost()}
    if op == "attn.prefill":
        return ["tokens", "context"], "prefill", {
            "linear": LinearCost("prefill"), "poly2": PolynomialCost(2), "forest": ForestCost()}
    if op == "attn.decode":
        return ["batch", "kv_len"], "decode", {
            "linear": LinearCost("decode"), "poly2": PolynomialCost(2), "forest": ForestCost()}
    if op in COPY_OPS:
        return ["size_bytes"], "size", {
            "saturating": SaturatingCurve(), "interp": InterpCost(), "forest": ForestCost()}
    if op in QUANT_OPS:
        return ["size_bytes"], "size", {
            "linear": LinearCost("size"), "interp": InterpCost(), "forest": ForestCost()}
    if op.startswith("cpu."):
        return ["intra_threads", "inter_threads"], "threads", {
            "linear": LinearCost("threads"), "poly2": PolynomialCost(2), "forest": ForestCost()}
    raise ValueError(op)


def op_key(operation: str, variant: str) -> str:
    return f"{operation}[{variant}]" if variant else operation


@dataclass
class OpFit:
    operation: str
    variant: str
    features: list[str]
    n: int
    cv_mape: dict[str, float]
    chosen: str
    estimator: object
    table: dict | None = None
    extra: dict = field(default_factory=dict)

    @property
    def key(self) -> str:
        return op_key(self.operation, self.variant)


#: profile.csv columns that hold numbers (profilers.schema.COLUMNS)
NUMERIC_COLUMNS = frozenset({"tokens", "context", "batch", "kv_len", "size_bytes", "bits",
                             "intra_threads", "inter_threads", "flops", "bytes_moved", "median_s",
                             "p10_s", "p90_s", "repeats", "calls_per_sample"})


def read_profile(profile_dir: Path):
    """(DataFrame of all rows, provenance dict); TunerError when the folder holds no profile."""
    import pandas as pd

    from tuner.core.errors import TunerError

    profile_dir = Path(profile_dir)
    csv_path = profile_dir / "profile.csv"
    if not csv_path.is_file():
        raise TunerError(f"{profile_dir} holds no profile.csv: run `tuner profile --model M "
                         f"--out {profile_dir}` first.")
    try:
        df = pd.read_csv(csv_path, keep_default_na=False, na_values=["nan", "NaN", ""])
    except Exception as exc:  # noqa: BLE001
        raise TunerError(f"Cannot read {csv_path}: {exc}.") from None
    need = {"operation", "median_s", "status"}
    if not need <= set(df.columns):
        raise TunerError(f"{csv_path} is not a tuner profile (missing {', '.join(sorted(need - set(df.columns)))}).")
    df["variant"] = df["variant"].astype(object).fillna("").astype(str)
    df["status"] = df["status"].astype(str)
    for c in NUMERIC_COLUMNS.intersection(df.columns):  # a hand-edited or damaged cell
        num = pd.to_numeric(df[c], errors="coerce")
        bad = num.isna() & df[c].notna()
        if bad.any():
            i = int(np.flatnonzero(bad.to_numpy())[0])
            raise TunerError(f"{csv_path} line {i + 2}: {c} {df[c].iloc[i]!r} is not a number "
                             f"(rerun `tuner profile --out {profile_dir}` after deleting that "
                             "line to measure it again).")
        df[c] = num
    prov_path = profile_dir / "provenance.json"
    try:
        prov = json.loads(prov_path.read_text()) if prov_path.is_file() else {}
    except (OSError, json.JSONDecodeError) as exc:
        raise TunerError(f"Cannot read {prov_path}: {exc}.") from None
    return df, prov


def cv_scores(estimators: dict, X, y, folds: int = 5, seed: int = 0) -> dict[str, float]:
    """Mean k-fold MAPE (fraction) of each estimator; NaN where it cannot be fit."""
    from sklearn.model_selection import KFold, cross_val_score

    k = min(folds, len(y))
    out: dict[str, float] = {}
    for name, est in estimators.items():
        if k < 3:
            out[name] = float("nan")
            continue
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                s = cross_val_score(est, X, y, cv=KFold(k, shuffle=True, random_state=seed),
                                    scoring="neg_mean_absolute_percentage_error",
                                    error_score="raise")
            out[name] = float(-s.mean())
        except (ValueError, np.linalg.LinAlgError):
            out[name] = float("nan")
    return out


def _tabulate(op: str, est, X: np.ndarray) -> dict | None:
    from tuner.predictors.tables import Table1D, Table2D, grid_axis, token_axis

    if X.shape[1] == 1:
        x = token_axis(X[:, 0])
        return Table1D(x, est.predict(x[:, None])).to_dict()
    if op in ATTENTION_OPS:
        kinds = ("log", "log1p") if op == "attn.prefill" else ("log", "log")
        a = grid_axis(X[:, 0], 24, kinds[0])
        b = grid_axis(X[:, 1], 24, kinds[1])
        A, B = np.meshgrid(a, b, indexing="ij")
        z = est.predict(np.column_stack([A.ravel(), B.ravel()])).reshape(A.shape)
        return Table2D(op, a, b, z, kinds).to_dict()
    return None


STATS = ("auto", "median", "p10")


def resolve_stat(stat: str, provenance: dict) -> str:
    """The time statistic fitted: `auto` is the median on CUDA (event timing sees no other
    process) and p10 on a CPU, where interference from other processes only ever adds time
    (the argument of Python's timeit for its minimum)."""
    from tuner.core.errors import TunerError

    if stat not in STATS:
        raise TunerError(f"--stat must be one of {', '.join(STATS)}, got {stat!r}.")
    if stat == "auto":
        return "median" if provenance.get("device") == "cuda" else "p10"
    return stat


def fit_ops(df, *, folds: int = 5, seed: int = 0, progress=None, stat: str = "median") -> list[OpFit]:
    from sklearn.base import clone

    from tuner.predictors.estimators import measured_saturation_bytes

    col = f"{stat}_s"
    ok = df[(df["status"] == "ok") & (df["median_s"] > 0) & (df[col] > 0)]
    fits: list[OpFit] = []
    groups = sorted(ok.groupby(["operation", "variant"]).groups.items())
    for (op, variant), idx in groups:
        try:
            features, _basis, cands = _candidates(op)
        except ValueError:
            continue
        rows = ok.loc[idx]
        X = rows[features].to_numpy(dtype=np.float64)
        y = rows[col].to_numpy(dtype=np.float64)
        if len(y) == 0:
            continue
        if X.shape[1] == 1 or op.startswith("cpu."):
            cands = {k: v for k, v in cands.items() if k != "interp" or X.shape[1] == 1}
        scores = cv_scores(cands, X, y, folds, seed)
        finite = {k: v for k, v in scores.items() if np.isfinite(v)}
        chosen = min(finite, key=finite.get) if finite else next(iter(cands))
        try:
            est = clone(cands[chosen]).fit(X, y)
        except (ValueError, np.linalg.LinAlgError):
            chosen = "interp" if X.shape[1] == 1 else "linear"
            est = clone(cands.get(chosen, cands[next(iter(cands))])).fit(X, y)
        of = OpFit(op, variant, features, int(len(y)), scores, chosen, est)
        if op in COPY_OPS:
            sat = clone(cands["saturating"]).fit(X, y)
            of.extra = {"peak_bytes_per_s": sat.peak_bytes_per_s_,
                        "half_size_bytes": sat.half_size_bytes_,
                        "saturation_bytes_90pct": sat.saturation_bytes_,
                        "measured_saturation_bytes": measured_saturation_bytes(X[:, 0], y),
                        "best_measured_bytes_per_s": float((X[:, 0] / y).max())
                        * (2.0 if op == "copy.host" else 1.0)}
        of.table = _tabulate(op, est, X)
        fits.append(of)
        if progress is not None:
            progress(of)
    return fits


@dataclass
class FitResult:
    profile_dir: Path
    provenance: dict
    ops: list[OpFit]
    specs: dict
    efficiency: dict
    efficiency_cv: dict
    csv_sha256: str
    fit_seconds: float
    stat: str = "median"

    def cv_table(self) -> list[dict]:
        rows = []
        for of in self.ops:
            for name, v in of.cv_mape.items():
                rows.append({"operation": of.operation, "variant": of.variant, "rows": of.n,
                             "model": name, "cv_mape": v, "chosen": name == of.chosen})
        return rows

    def chosen_errors(self) -> dict[str, float]:
        return {of.key: of.cv_mape.get(of.chosen, float("nan")) for of in self.ops}

    def median_cv_mape(self, model_ops_only: bool = True) -> float:
        vals = [v for k, v in self.chosen_errors().items() if np.isfinite(v)
                and (not model_ops_only or k.split("[")[0] in MODEL_OPS)]
        return float(np.median(vals)) if vals else float("nan")

    def to_json(self) -> dict:
        return {
            "format": FORMAT,
            "profile_dir": str(self.profile_dir),
            "profile_sha256": self.csv_sha256,
            "provenance": self.provenance,
            "specs": self.specs,
            "fit_seconds": round(self.fit_seconds, 3),
            "stat": self.stat,
            "median_cv_mape": self.median_cv_mape(),
            "ops": {of.key: {"operation": of.operation, "variant": of.variant,
                             "features": of.features, "rows": of.n, "chosen": of.chosen,
                             "cv_mape": of.cv_mape, "table": of.table, **({"curve": of.extra}
                                                                          if of.extra else {})}
                    for of in self.ops},
            "efficiency": self.efficiency,
            "efficiency_cv_mape": self.efficiency_cv,
            "transfer_checks": {},
        }

    def save(self, out_dir: Path) -> dict[str, Path]:
        import joblib

        out_dir = Path(out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        files = {}
        doc = self.to_json()
        old = out_dir / FIT_JSON
        if old.is_file():  # keep transfer checks recorded against this device
            try:
                doc["transfer_checks"] = json.loads(old.read_text()).get("transfer_checks", {})
            except (OSError, json.JSONDecodeError):
                pass
        files["fit"] = write_atomic(out_dir / FIT_JSON, dumps(doc, indent=1))
        lines = ["operation,variant,rows,model,cv_mape,chosen"]
        for r in self.cv_table():
            lines.append(f"{r['operation']},{r['variant']},{r['rows']},{r['model']},"
                         f"{r['cv_mape']:.6g},{int(r['chosen'])}")
        files["cv_errors"] = write_atomic(out_dir / CV_CSV, "\n".join(lines) + "\n")
        state = {"estimators": {of.key: of.estimator for of in self.ops}, "format": FORMAT}
        files["estimators"] = write_atomic(out_dir / FIT_JOBLIB,
                                           lambda tmp: joblib.dump(state, tmp, compress=3))
        return files


MODEL_OPS = (*LINEAR_OPS, *ELEMENTWISE_OPS, "lm_head", *ATTENTION_OPS)


def fit_profile(profile_dir: Path, *, folds: int = 5, seed: int = 0, progress=None,
                stat: str = "auto") -> FitResult:
    """Fit every operation of a profile (no files written; FitResult.save writes them)."""
    from tuner.core.errors import TunerError
    from tuner.predictors.devices import gpu_specs, measured_specs
    from tuner.predictors.transfer import learn_efficiency

    t0 = time.perf_counter()
    profile_dir = Path(profile_dir)
    df, prov = read_profile(profile_dir)
    if folds < 2:
        raise TunerError(f"--folds must be >= 2, got {folds}.")
    stat = resolve_stat(stat, prov)
    ops = fit_ops(df, folds=folds, seed=seed, progress=progress, stat=stat)
    if not ops:
        raise TunerError(f"{profile_dir / 'profile.csv'} has no measured rows to fit.")
    specs = None
    if prov.get("gpu"):
        try:
            from tuner.core.catalog import get_gpu, load_gpus

            specs = gpu_specs(get_gpu(prov["gpu"], load_gpus()), prov.get("dtype", "bfloat16"))
        except TunerError:
            specs = None
    if specs is None:
        specs = measured_specs(df, prov.get("device_name", "device"), prov.get("device", "cpu"),
                               stat)
    eff, eff_cv = learn_efficiency(df, specs, folds=folds, seed=seed, stat=stat)
    return FitResult(profile_dir=profile_dir, provenance=prov, ops=ops, specs=specs.to_dict(),
                     stat=stat,
                     efficiency=eff, efficiency_cv=eff_cv,
                     csv_sha256=sha256_file(profile_dir / "profile.csv"),
                     fit_seconds=time.perf_counter() - t0)
