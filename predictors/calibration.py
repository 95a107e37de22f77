"""Calibration: fit the residual between predicted and measured real runs, and apply it.

A cost model (roofline, measured or transferred) prices the kernels of an engine iteration; a
real engine also spends time the model does not see (the scheduler, input preparation, the
sampler, process hand-offs: on a CPU or with a small model that is most of a step) and its
kernels reach a different fraction of the predicted speed. Calibration fits, per device and
model, three numbers by non-negative least squares:

    calibrated step time = kernel_factor * base(step) + iteration_overhead_s
                           + per_sequence_s * sequences sampled in the step

- from the measured time of every engine step, when the runner recorded the real schedule
  (vLLM: runners/_vllm_sched.py), with the base model priced on the *real* steps; each run's
  steps are weighted by 1 / its makespan, so every run counts alike in relative terms (a run
  of 1,200 short steps does not outvote one of 160); or
- from whole runs otherwise: measured makespan ~ a * sum(base) + b * steps + c * sequences,
  with sum(base), steps and sequences of the *simulated* schedule (fewer runs: fewer terms).

Which terms are fitted is chosen by the data: with three runs or more, every subset that keeps
kernel_factor is fitted and the one with the lowest leave-one-out makespan error wins (ties: the
fewer terms). A term the runs cannot pin down (on a noisy machine, the split between a per-step
and a per-sequence cost) then stays at 0 instead of fitting the noise of the runs it saw.

The error before (base model) and after (calibrated) is computed on every stored run, and, with
three runs or more, also leave-one-out (each run predicted by a fit without it), which is the
honest figure for predicting a configuration that was not measured.

Storage: measured runs are appended to ``STORE/runs.jsonl``; a fit is written to
``STORE/<device>--<model>.json``. STORE is ``$TUNER_CALIBRATION_DIR`` or
``~/.cache/tuner/calibration``. :func:`apply_stored` wraps a cost model with the stored fit for
its device and model (``TUNER_NO_CALIBRATION=1`` turns that off); this is the hook for every
prediction on a calibrated device.

No tuner import (predictors must not depend on tuner); plain data in, plain data out.
"""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from tuner.core.io import dumps, user_cache_dir, write_atomic
from tuner.core.provenance import Provenance
from tuner.predictors.features import BatchFeatures

FORMAT = "tuner-calibration/1"
TERMS = ("kernel_factor", "iteration_overhead_s", "per_sequence_s")


def default_store() -> Path:
    env = os.environ.get("TUNER_CALIBRATION_DIR")
    if env:
        return Path(env)
    return user_cache_dir("calibration")


def _slug(s: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", str(s)).strip("_") or "x"


def calibration_path(device: str, model: str, store: str | Path | None = None) -> Path:
    return Path(store or default_store()) / f"{_slug(device)}--{_slug(model)}.json"


@dataclass(frozen=True)
class Calibration:
    """A fitted residual for one (device, model); see the module docstring."""

    device: str  # the catalog device the predictions are for ("CPU", "H100", ...)
    model: str
    kernel_factor: float = 1.0
    iteration_overhead_s: float = 0.0
    per_sequence_s: float = 0.0
    method: str = ""
    runs: int = 0
    steps: int = 0
    base_provenance: str = ""
    measured_on: str = ""  # the device string the runner reported
    engine: str = ""
    error_before_pct: list[float] = field(default_factory=list)  # per run, signed
    error_after_pct: list[float] = field(default_factory=list)
    error_loo_pct: list[float] = field(default_factory=list)
    created: str = ""

    # ---- summary figures ----
    @staticmethod
    def _median_abs(v: list[float]) -> float | None:
        return float(np.median(np.abs(v))) if v else None

    @property
    def median_error_before_pct(self) -> float | None:
        return self._median_abs(self.error_before_pct)

    @property
    def median_error_after_pct(self) -> float | None:
        return self._median_abs(self.error_after_pct)

    @property
    def median_error_loo_pct(self) -> float | None:
        return self._median_abs(self.error_loo_pct)

    def describe(self) -> str:
        return (f"calibrated on {self.runs} real run(s) on {self.measured_on or self.device} "
                f"({self.method}): x{self.kernel_factor:.3g} kernels + "
                f"{1e3 * self.iteration_overhead_s:.3g} ms/step + "
                f"{1e6 * self.per_sequence_s:.3g} us/sequence")

    def step_time_s(self, base_dt: np.ndarray, sampled: np.ndarray) -> np.ndarray:
        return (self.kernel_factor * np.asarray(base_dt, dtype=np.float64)
                + self.iteration_overhead_s + self.per_sequence_s * np.asarray(sampled))

    def apply(self, base) -> CalibratedCostModel:
        return CalibratedCostModel(base, self)

    def to_json(self) -> dict:
        d = asdict(self)
        d["format"] = FORMAT
        d["median_error_before_pct"] = self.median_error_before_pct
        d["median_error_after_pct"] = self.median_error_after_pct
        d["median_error_loo_pct"] = self.median_error_loo_pct
        return d

    @classmethod
    def from_json(cls, d: dict) -> Calibration:
        if d.get("format") != FORMAT:
            raise ValueError(f"not a tuner calibration (format {d.get('format')!r})")
        names = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in d.items() if k in names})

    def save(self, store: str | Path | None = None) -> Path:
        path = calibration_path(self.device, self.model, store)
        return write_atomic(path, dumps(self.to_json()))


class CalibratedCostModel:
    """A CostModel whose iteration time is the calibration applied to a base model's."""

    def __init__(self, base, calibration: Calibration):
        self.base = base
        self.calibration = calibration

    def iteration_time_s(self, f: BatchFeatures) -> np.ndarray:
        return self.calibration.step_time_s(self.base.iteration_time_s(f), f.seqs_sampled)

    @property
    def provenance(self) -> Provenance:
        # corrected by the user's own real runs: no longer the base model's kind
        return Provenance("calibrated", self.describe(), engine=self.base.provenance.engine)

    def describe(self) -> str:
        return f"{self.base.describe()}; {self.calibration.describe()}"

    # the calibration corrects whole iterations; the per-layer and per-operation views (offload
    # budgets, `tuner cost`) and the copy curve stay the base model's
    @property
    def transfer_model(self):
        return self.base.transfer_model

    def breakdown(self, f: BatchFeatures) -> dict[str, np.ndarray]:
        return self.base.breakdown(f)

    def breakdown_ops(self, f: BatchFeatures) -> dict[str, np.ndarray]:
        return self.base.breakdown_ops(f)

    def layer_time_s(self, f: BatchFeatures) -> np.ndarray:
        return self.base.layer_time_s(f)

    def decode_attention_layer_s(self, f: BatchFeatures) -> np.ndarray:
        return self.base.decode_attention_layer_s(f)


# ---- storage of measured runs ---------------------------------------------------------------
def runs_path(store: str | Path | None = None) -> Path:
    return Path(store or default_store()) / "runs.jsonl"


def append_runs(records: list[dict], store: str | Path | None = None) -> Path:
    """Append measured-run records (see :func:`fit_calibration` for the fields) to the store."""
    path = runs_path(store)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as fh:
        for r in records:
            fh.write(json.dumps(r) + "\n")
    return path


def load_runs(paths: list[str | Path] | None = None, *, store: str | Path | None = None,
              device: str | None = None, model: str | None = None,
              runner: str | None = None) -> list[dict]:
    """Run records from JSONL stores or validation JSON files ({"validation": [...]}),
    filtered by device, model and runner (engine; case-insensitive)."""
    files = [Path(p) for p in paths] if paths else [runs_path(store)]
    out: list[dict] = []
    for p in files:
        if not p.is_file():
            continue
        text = p.read_text()
        recs: list[dict] = []
        if p.suffix == ".json":
            doc = json.loads(text)
            recs = doc.get("validation", []) if isinstance(doc, dict) else list(doc)
        else:
            for line in text.splitlines():
                line = line.strip()
                if line:
                    try:
                        recs.append(json.loads(line))
                    except json.JSONDecodeError:
                        continue
        for r in recs:
            if not isinstance(r, dict) or "measured_s" not in r or "sim" not in r:
                continue
            if device and str(r.get("device_name", "")).lower() != device.lower():
                continue
            if model and str(r.get("model", "")).lower() != model.lower():
                continue
            if runner and str(r.get("runner", "")).lower() != runner.lower():
                continue
            out.append(r)
    return out


# ---- fitting ------------------------------------------------------------------------------
def _nnls(X: np.ndarray, y: np.ndarray) -> np.ndarray:
    from scipy.optimize import nnls

    scale = np.maximum(np.abs(X).max(axis=0), 1e-30)
    coef, _ = nnls(X / scale, y)
    return coef / scale


def _makespan_features(r: dict) -> tuple[float, float, float]:
    s = r["sim"]
    return float(s["base_time_s"]), float(s["iterations"]), float(s["sampled"])


def _fit_makespans(runs: list[dict]) -> tuple[np.ndarray, str]:
    X = np.array([_makespan_features(r) for r in runs], dtype=np.float64)
    y = np.array([float(r["measured_s"]) for r in runs])
    n = len(runs)
    k = 1 if n < 2 else (2 if n < 4 else 3)
    coef = np.zeros(3)
    coef[:k] = _nnls(X[:, :k], y)
    if coef[0] == 0 and k > 1 and not np.any(coef[1:]):
        coef[0] = float(y.sum() / max(X[:, 0].sum(), 1e-30))
    return coef, f"makespan least squares over {n} run(s), {k} term(s)"


def _fit_steps(runs: list[dict], terms: tuple[int, ...] = (0, 1, 2),
               ) -> tuple[np.ndarray, str, int]:
    rows, ys = [], []
    for r in runs:
        st = r.get("real_steps") or {}
        b = np.asarray(st.get("base_dt_s") or [], dtype=np.float64)
        d = np.asarray(st.get("dt_s") or [], dtype=np.float64)
        s = np.asarray(st.get("sampled") or [], dtype=np.float64)
        if len(b) and len(b) == len(d) == len(s):
            w = 1.0 / np.sqrt(max(float(d.sum()), 1e-12))  # squared residuals / makespan
            rows.append(w * np.c_[b, np.ones_like(b), s])
            ys.append(w * d)
    X = np.vstack(rows)
    y = np.concatenate(ys)
    coef = np.zeros(3)
    coef[list(terms)] = _nnls(X[:, list(terms)], y)
    return coef, f"per-step least squares over {len(y)} steps of {len(rows)} run(s)", len(y)


def _predict(coef: np.ndarray, r: dict) -> float:
    T, N, S = _makespan_features(r)
    return float(coef[0] * T + coef[1] * N + coef[2] * S)


def _err(pred: float, meas: float) -> float:
    return 100.0 * (pred - meas) / meas


def has_steps(r: dict) -> bool:
    st = r.get("real_steps") or {}
    return bool(st.get("dt_s")) and len(st.get("dt_s") or []) == len(st.get("base_dt_s") or [])


def fit_calibration(runs: list[dict], *, device: str, model: str,
                    method: str = "auto") -> Calibration:
    """Fit a Calibration from measured-run records.

    Each record: ``measured_s`` (makespan), ``predicted_s`` (base model), ``sim`` =
    {``base_time_s``, ``iterations``, ``sampled``} of the simulated schedule under the base model,
    optionally ``real_steps`` = {``base_dt_s``, ``dt_s``, ``sampled``} (per real step), and for
    provenance ``base_provenance``, ``measured_device``, ``engine``.
    method: "auto" (per step when every run has steps), "steps" or "makespan"."""
    if not runs:
        raise ValueError(f"no measured runs for {model} on {device}")
    steps_ok = all(has_steps(r) for r in runs)
    if method == "steps" and not steps_ok:
        raise ValueError("per-step calibration needs runs with recorded steps")
    use_steps = method == "steps" or (method == "auto" and steps_ok)

    meas = [float(r["measured_s"]) for r in runs]

    def fit(rs: list[dict], terms: tuple[int, ...]) -> tuple[np.ndarray, str, int]:
        if use_steps:
            return _fit_steps(rs, terms)
        c, m = _fit_makespans(rs)
        return c, m, 0

    def loo_errors(terms: tuple[int, ...]) -> list[float]:
        out = []
        for i in range(len(runs)):
            c, _, _ = fit(runs[:i] + runs[i + 1:], terms)
            out.append(_err(_predict(c, runs[i]), meas[i]))
        return out

    terms, loo = (0, 1, 2), []
    if len(runs) >= 3:
        candidates = [(0,), (0, 1), (0, 2), (0, 1, 2)] if use_steps else [(0, 1, 2)]
        scored = [(float(np.median(np.abs(e))), len(t), t, e)
                  for t in candidates for e in [loo_errors(t)]]
        _, _, terms, loo = min(scored, key=lambda x: (round(x[0], 6), x[1]))
    coef, how, n_steps = fit(runs, terms)
    if use_steps and len(runs) >= 3:
        names = ", ".join(TERMS[i] for i in terms)
        how += f"; terms chosen by leave-one-out error: {names}"
    before = [_err(float(r.get("predicted_s") or r["sim"]["base_time_s"]), m)
              for r, m in zip(runs, meas, strict=True)]
    after = [_err(_predict(coef, r), m) for r, m in zip(runs, meas, strict=True)]
    first = runs[-1]
    return Calibration(
        device=device, model=model,
        kernel_factor=float(coef[0]), iteration_overhead_s=float(coef[1]),
        per_sequence_s=float(coef[2]), method=how, runs=len(runs), steps=n_steps,
        base_provenance=str(first.get("base_provenance", "")),
        measured_on=str(first.get("measured_device", "")), engine=str(first.get("engine", "")),
        error_before_pct=[round(x, 3) for x in before],
        error_after_pct=[round(x, 3) for x in after],
        error_loo_pct=[round(x, 3) for x in loo],
        created=datetime.now(UTC).isoformat(timespec="seconds"),
    )


# ---- using a stored calibration ----------------------------------------------------------------
def load_calibration(device: str, model: str, store: str | Path | None = None,
                     ) -> Calibration | None:
    path = calibration_path(device, model, store)
    if not path.is_file():
        return None
    try:
        return Calibration.from_json(json.loads(path.read_text()))
    except (OSError, ValueError, TypeError, json.JSONDecodeError):
        return None


def engine_generation(engine: str) -> str | None:
    """'sglang', or the vLLM generation key ('v0' | 'v1-sync' | 'v1-async') of an engine
    string as runs record it ('vLLM 0.6.0: vLLM V0', 'vllm 0.32.0'); None when it names no
    version (a calibration that old applies wherever its device and model do)."""
    from tuner.core.engines import GENERATIONS, generation_of
    from tuner.core.errors import TunerError

    text = str(engine or "").lower()
    if "sglang" in text:
        return "sglang"
    # a generation's label ('vLLM V1, asynchronous scheduling': EngineRelease.describe), the
    # longest first ('synchronous' is within 'asynchronous')
    for g in sorted(GENERATIONS, key=lambda g: -len(g.label)):
        if g.label.lower() in text:
            return g.key
    m = re.search(r"(\d+\.\d+(?:\.\d+)?)", text)
    if m is None:
        return None

    try:
        return generation_of(m.group(1)).generation.key
    except TunerError:
        return None


def apply_stored(cost_model, device: str, model: str, store: str | Path | None = None, *,
                 engine: str = "vllm", engine_version: str | None = None):
    """`cost_model` calibrated with the stored fit for (device, model), if there is one, it was
    fitted on runs of the same engine generation as the prediction's (a V0 engine's host cost
    per step is not a V1 one's), and TUNER_NO_CALIBRATION is not set; otherwise `cost_model`
    unchanged."""
    if os.environ.get("TUNER_NO_CALIBRATION") or isinstance(cost_model, CalibratedCostModel):
        return cost_model
    cal = load_calibration(device, model, store)
    if cal is None:
        return cost_model
    fitted = engine_generation(cal.engine)
    if fitted is not None:
        from tuner.core.engines import generation_of

        wanted = "sglang" if engine == "sglang" else generation_of(engine_version).generation.key
        if fitted != wanted:
            return cost_model
    return cal.apply(cost_model)


def median_abs(values: list[float]) -> float | None:
    v = [abs(x) for x in values if x is not None and math.isfinite(x)]
    return float(np.median(v)) if v else None
