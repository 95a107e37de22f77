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
- from whole runs otherwise: measured makespan ~ a * sum(base) + b * steps + c * sequences
  + idle, with sum(base), steps and sequences of the *simulated* schedule and idle the time it
  spent waiting for requests to arrive (not scaled: no kernel runs then; a record without it
  must come from a schedule with no such wait, `tuner calibrate` checks replayed runs).

Which terms are fitted is chosen by the data, on both paths: with three runs or more, every
subset that keeps kernel_factor (and that the runs left in each leave-one-out fit can pin down:
no more terms than runs) is fitted, and the one with the lowest leave-one-out makespan error
wins (ties: the fewer terms). A term the runs cannot pin down (on a noisy machine, the split
between a per-step and a per-sequence cost) then stays at 0 instead of fitting the noise of the
runs it saw. With fewer runs there is no such check: one run fits the kernel factor alone, two
runs the kernel factor and the per-step cost; the fit then passes through its runs, and the
Calibration's ``warnings`` say so.

:func:`fit_calibration` refuses (ValueError) runs of mixed engine generations (a V0 engine's
host cost per step is not a V1 one's: :func:`apply_stored` applies a fit to one generation) and
a fit that is no usable cost model (a kernel factor <= 0, a non-finite term: every prediction
would be 0 s or NaN); :func:`plausibility_problem` names a kernel factor too far from 1 to be a
cost model's error (`tuner calibrate` then writes nothing unless --force).

The error before (base model) and after (calibrated) is computed on every stored run, and, with
three runs or more, also leave-one-out (each run predicted by a fit without it), which is the
honest figure for predicting a configuration that was not measured.

Storage: measured runs are appended to ``STORE/runs.jsonl``; a fit is written to
``STORE/<device>--<model>.json``. STORE is ``$TUNER_CALIBRATION_DIR`` or
``~/.cache/tuner/calibration``. :func:`apply_stored` wraps a cost model with the stored fit for
its device and model (``TUNER_NO_CALIBRATION=1`` turns that off); this is the hook for every
prediction on a calibrated device.

No import of tuner's upper layers (cli, sim, search); plain data in, plain data out.
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
#: the term subsets a fit chooses among (each keeps the kernel factor)
TERM_SUBSETS: tuple[tuple[int, ...], ...] = ((0,), (0, 1), (0, 2), (0, 1, 2))
#: runs from which the terms are chosen by leave-one-out error, and that error is reported
MIN_RUNS_LOO = 3
#: A kernel factor outside this range is not taken for a cost model's error (host costs go to
#: the other two terms; the CPU validation fits 0.88): the runs were more likely not what the
#: simulation assumed (a client capping concurrency, other engine settings, another GPU or
#: model, a loaded machine). `tuner calibrate --force` writes such a fit anyway.
KERNEL_FACTOR_PLAUSIBLE = (1.0 / 3.0, 3.0)


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
    # what the figures above cannot show (too few runs for a check, runs with arrival waits)
    warnings: list[str] = field(default_factory=list)

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
        cal = cls(**{k: v for k, v in d.items() if k in names})
        # a calibration that would make every prediction 0 s (or NaN) must not be applied:
        # throughputs divide by the makespan
        if problem := cal.invalid():
            raise ValueError(problem)
        return cal

    def invalid(self) -> str | None:
        """Why these terms are not a usable cost model, or None."""
        for name in TERMS:
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
                return f"{name} is {v!r}, not a finite number"
        if self.kernel_factor <= 0:
            return (f"the kernel factor is {self.kernel_factor:.3g}: a calibration must keep a "
                    "positive share of the cost model's kernel time")
        if self.iteration_overhead_s < 0 or self.per_sequence_s < 0:
            return "a per-step or per-sequence cost is negative"
        return None

    def save(self, store: str | Path | None = None) -> Path:
        if problem := self.invalid():
            raise ValueError(problem)
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


class RunsError(ValueError):
    """A runs file or record that cannot be used; the message names the file (and line) and
    the field."""


#: what a runs file is, for messages about one that is not
RUNS_EXPECTED = ("a runs JSONL (one record per line, as `tuner validate` and `tuner replay "
                 "--record` append to the calibration store) or a validation.json "
                 "({\"validation\": [...]}, written by `tuner validate`)")


@dataclass
class RunsRead:
    """What :func:`read_runs` found."""

    runs: list[dict]
    origins: list[str]  # where each run is ("FILE line N", "FILE validation[i]")
    files: list[Path]  # the files read
    bad_lines: dict[str, list[int]] = field(default_factory=dict)  # JSONL lines not JSON
    other_records: int = 0  # JSON values that are no measured run (no measured_s and sim)
    filtered_out: dict[tuple[str, str, str], int] = field(default_factory=dict)  # by filters


def _is_run(r: object) -> bool:
    return isinstance(r, dict) and "measured_s" in r and "sim" in r


def _bench_like(doc: dict) -> bool:
    return bool({"input_lens", "output_lens", "request_rate", "duration"} & set(doc))


def _json_records(p: Path, text: str) -> list[tuple[str, object]]:
    """(origin, value) of each record in a .json runs file; RunsError for any other JSON."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise RunsError(f"{p}: not valid JSON ({exc.msg} at line {exc.lineno}); expected "
                        f"{RUNS_EXPECTED}.") from None
    if isinstance(doc, dict) and "validation" in doc:
        recs = doc["validation"]
        if not isinstance(recs, list):
            raise RunsError(f"{p}: 'validation' is not a list; expected {RUNS_EXPECTED}.")
        return [(f"{p} validation[{i}]", r) for i, r in enumerate(recs)]
    if isinstance(doc, dict) and _is_run(doc):
        return [(str(p), doc)]
    if isinstance(doc, list) and doc and all(_is_run(r) for r in doc):
        return [(f"{p} [{i}]", r) for i, r in enumerate(doc)]
    if isinstance(doc, dict) and _bench_like(doc):
        raise RunsError(f"{p} looks like a `vllm bench serve` result, not measured runs: record "
                        f"it first with `tuner replay {p} -g GPU --record` (then `tuner "
                        "calibrate` reads the calibration store), or pass "
                        f"{RUNS_EXPECTED}.")
    what = {dict: "an object without 'validation'", list: "an array whose items are not all measured runs",
            str: "a string"}.get(type(doc), f"a {type(doc).__name__}")
    raise RunsError(f"{p} holds {what}; expected {RUNS_EXPECTED}.")


def _number(v: object, name: str, *, positive: bool = False) -> str | None:
    """Why `v` is not a finite number (> 0 with `positive`, else >= 0), or None."""
    if isinstance(v, bool) or not isinstance(v, int | float):
        return f"{name} must be a number, got {json.dumps(v)[:40]}"
    if not math.isfinite(v) or v < 0 or (positive and v == 0):
        return f"{name} must be a finite number {'> 0' if positive else '>= 0'}, got {v!r}"
    return None


def run_problem(r: dict) -> str | None:
    """Why a measured-run record cannot be fitted (the field and what it should be), or None."""
    if problem := _number(r.get("measured_s"), "measured_s", positive=True):
        return problem + " (the measured makespan in seconds)"
    if r.get("predicted_s") is not None and (
            problem := _number(r["predicted_s"], "predicted_s", positive=True)):
        return problem
    s = r.get("sim")
    if not isinstance(s, dict):
        return ("sim must be an object {base_time_s, iterations, sampled} (the simulated "
                f"schedule), got {json.dumps(s)[:40]}")
    for name in ("base_time_s", "iterations", "sampled"):
        if problem := _number(s.get(name), f"sim.{name}", positive=name == "base_time_s"):
            return problem
    if "idle_s" in s:
        if problem := _number(s["idle_s"], "sim.idle_s"):
            return problem
        if s["idle_s"] >= s["base_time_s"]:
            return "sim.idle_s must be below sim.base_time_s (it is the part spent waiting)"
    if r.get("config") is not None and not isinstance(r["config"], dict):
        return "config must be an object (the serving configuration)"
    st = r.get("real_steps")
    if st is not None:
        if not isinstance(st, dict):
            return "real_steps must be an object {base_dt_s, dt_s, sampled}"
        for name in ("base_dt_s", "dt_s", "sampled"):
            v = st.get(name)
            if v is None:
                continue
            if not isinstance(v, list):
                return f"real_steps.{name} must be a list of numbers"
            for x in v:
                if _number(x, "x") is not None:
                    return (f"real_steps.{name} must hold finite numbers >= 0, got "
                            f"{json.dumps(x)[:40]}")
    return None


def read_runs(paths: list[str | Path] | None = None, *, store: str | Path | None = None,
              device: str | None = None, model: str | None = None,
              runner: str | None = None) -> RunsRead:
    """Run records from JSONL stores or validation JSON files ({"validation": [...]}),
    filtered by device, model and runner (engine; case-insensitive). A JSONL line that is not
    JSON is skipped and counted (a store appended to by a process that died mid-line); a file
    of another kind, or a record of the filters' device, model and runner whose fields cannot
    be fitted, is a RunsError naming the file, line and field."""
    files = [Path(p) for p in paths] if paths else [runs_path(store)]
    out = RunsRead([], [], [])
    for p in files:
        if not p.is_file():
            continue
        out.files.append(p)
        try:
            text = p.read_text()
        except (OSError, UnicodeDecodeError) as exc:
            raise RunsError(f"{p}: cannot be read ({getattr(exc, 'strerror', None) or exc}); "
                            f"expected {RUNS_EXPECTED}.") from None
        recs: list[tuple[str, object]] = []
        if p.suffix.lower() == ".json":
            recs = _json_records(p, text)
        else:
            for n, line in enumerate(text.splitlines(), 1):
                line = line.strip()
                if not line:
                    continue
                try:
                    recs.append((f"{p} line {n}", json.loads(line)))
                except json.JSONDecodeError:
                    out.bad_lines.setdefault(str(p), []).append(n)
        for origin, r in recs:
            if not _is_run(r):
                out.other_records += 1
                continue
            assert isinstance(r, dict)
            key = tuple(str(r.get(k, "?")) for k in ("device_name", "model", "runner"))
            if (device and key[0].lower() != device.lower()
                    or model and key[1].lower() != model.lower()
                    or runner and key[2].lower() != runner.lower()):
                out.filtered_out[key] = out.filtered_out.get(key, 0) + 1  # type: ignore[index]
                continue
            if problem := run_problem(r):
                raise RunsError(f"{origin}: {problem}; fix or delete that record.")
            out.runs.append(r)
            out.origins.append(origin)
    return out


def load_runs(paths: list[str | Path] | None = None, *, store: str | Path | None = None,
              device: str | None = None, model: str | None = None,
              runner: str | None = None) -> list[dict]:
    """The runs of :func:`read_runs` (RunsError for a file or record that cannot be used)."""
    return read_runs(paths, store=store, device=device, model=model, runner=runner).runs


# ---- fitting ------------------------------------------------------------------------------
def _nnls(X: np.ndarray, y: np.ndarray) -> np.ndarray:
    from scipy.optimize import nnls

    scale = np.maximum(np.abs(X).max(axis=0), 1e-30)
    coef, _ = nnls(X / scale, y)
    return coef / scale


def _makespan_features(r: dict) -> tuple[float, float, float, float]:
    """(busy base time, steps, sampled sequences, idle time) of a run's simulated schedule:
    `idle` (sim.idle_s, waiting for arrivals) is part of sim.base_time_s but no step runs then,
    so it is kept out of the scaled term."""
    s = r["sim"]
    idle = float(s.get("idle_s") or 0.0)
    return float(s["base_time_s"]) - idle, float(s["iterations"]), float(s["sampled"]), idle


def _fit_makespans(runs: list[dict], terms: tuple[int, ...] = (0, 1, 2),
                   ) -> tuple[np.ndarray, str, int]:
    F = np.array([_makespan_features(r) for r in runs], dtype=np.float64)
    X = F[:, :3]
    y = np.array([float(r["measured_s"]) for r in runs]) - F[:, 3]
    coef = np.zeros(3)
    coef[list(terms)] = _nnls(X[:, list(terms)], y)
    if coef[0] == 0 and not np.any(coef[1:]):  # nothing fitted: the kernels take it all
        coef[0] = float(y.sum() / max(X[:, 0].sum(), 1e-30))
    return coef, f"makespan least squares over {len(runs)} run(s)", 0


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
    """The run's makespan under the calibrated model: its steps rescaled, its waits as they
    were (a run's schedule does not depend on step times when every request is there from the
    start, so this is what the calibrated simulation computes)."""
    T, N, S, idle = _makespan_features(r)
    return float(coef[0] * T + coef[1] * N + coef[2] * S + idle)


def _err(pred: float, meas: float) -> float:
    return 100.0 * (pred - meas) / meas


def has_steps(r: dict) -> bool:
    st = r.get("real_steps") or {}
    return bool(st.get("dt_s")) and len(st.get("dt_s") or []) == len(st.get("base_dt_s") or [])


def generation_label(key: str | None) -> str:
    """'vLLM V0', ... for a key of :func:`engine_generation`."""
    from tuner.core.engines import GENERATIONS

    if key is None:
        return "an engine of no recorded version"
    if key == "sglang":
        return "SGLang"
    return next((g.label for g in GENERATIONS if g.key == key), key)


def generations(runs: list[dict]) -> dict[str | None, list[int]]:
    """The indices of the runs of each engine generation (:func:`engine_generation`)."""
    out: dict[str | None, list[int]] = {}
    for i, r in enumerate(runs):
        out.setdefault(engine_generation(str(r.get("engine", ""))), []).append(i)
    return out


def fit_calibration(runs: list[dict], *, device: str, model: str,
                    method: str = "auto") -> Calibration:
    """Fit a Calibration from measured-run records.

    Each record: ``measured_s`` (makespan), ``predicted_s`` (base model), ``sim`` =
    {``base_time_s``, ``iterations``, ``sampled``, optionally ``idle_s``: the part of
    base_time_s spent waiting for requests to arrive} of the simulated schedule under the base
    model, optionally ``real_steps`` = {``base_dt_s``, ``dt_s``, ``sampled``} (per real step),
    and for provenance ``base_provenance``, ``measured_device``, ``engine`` (one engine
    generation for all).
    method: "auto" (per step when every run has steps), "steps" or "makespan".
    ValueError for runs that cannot be fitted or a fit that is no usable cost model."""
    if not runs:
        raise ValueError(f"no measured runs for {model} on {device}")
    for r in runs:
        if problem := run_problem(r):
            raise ValueError(problem)
    gens = generations(runs)
    if len(gens) > 1:
        raise ValueError("the runs come from different engine generations ("
                         + ", ".join(generation_label(g) for g in gens)
                         + "), whose host cost per step differs; fit each apart")
    steps_ok = all(has_steps(r) for r in runs)
    if method == "steps" and not steps_ok:
        raise ValueError("per-step calibration needs runs with recorded steps")
    use_steps = method == "steps" or (method == "auto" and steps_ok)

    n = len(runs)
    meas = [float(r["measured_s"]) for r in runs]
    fit = _fit_steps if use_steps else _fit_makespans

    def loo_errors(terms: tuple[int, ...]) -> list[float]:
        out = []
        for i in range(n):
            c, _, _ = fit(runs[:i] + runs[i + 1:], terms)
            out.append(_err(_predict(c, runs[i]), meas[i]))
        return out

    if n >= MIN_RUNS_LOO:
        # per run, a makespan fit has one equation: no more terms than the n - 1 runs of each
        # leave-one-out fit (per step, every run has hundreds)
        candidates = [t for t in TERM_SUBSETS if use_steps or len(t) <= n - 1]
        # a subset whose fit on all runs drops the kernels (collinear terms: the per-sequence
        # cost can stand in for them) does not keep kernel_factor; the kernels alone always do
        candidates = [t for t in candidates if t == (0,) or fit(runs, t)[0][0] > 0]
        scored = [(float(np.median(np.abs(e))), len(t), t, e)
                  for t in candidates for e in [loo_errors(t)]]
        _, _, terms, loo = min(scored, key=lambda x: (round(x[0], 6), x[1]))
    else:
        terms = (0, 1, 2) if use_steps else TERM_SUBSETS[:2][n - 1]
        loo = []
    coef, how, n_steps = fit(runs, terms)
    names = ", ".join(TERMS[i] for i in terms)
    how += (f"; terms chosen by leave-one-out error: {names}" if n >= MIN_RUNS_LOO
            else f"; terms: {names}")
    before = [_err(float(r.get("predicted_s") or r["sim"]["base_time_s"]), m)
              for r, m in zip(runs, meas, strict=True)]
    after = [_err(_predict(coef, r), m) for r, m in zip(runs, meas, strict=True)]
    if not (np.all(np.isfinite(coef)) and np.all(np.isfinite(after))):
        raise ValueError("the fit is not finite (are the runs' simulated figures all zero?)")
    warnings = _fit_warnings(runs, terms, use_steps)
    last = runs[-1]  # the newest record: one engine generation, its latest version
    cal = Calibration(
        device=device, model=model,
        kernel_factor=float(coef[0]), iteration_overhead_s=float(coef[1]),
        per_sequence_s=float(coef[2]), method=how, runs=n, steps=n_steps,
        base_provenance=str(last.get("base_provenance", "")),
        measured_on=str(last.get("measured_device", "")), engine=str(last.get("engine", "")),
        error_before_pct=[round(x, 3) for x in before],
        error_after_pct=[round(x, 3) for x in after],
        error_loo_pct=[round(x, 3) for x in loo],
        created=datetime.now(UTC).isoformat(timespec="seconds"),
        warnings=warnings,
    )
    if problem := cal.invalid():
        raise ValueError(f"{problem} (not written)")
    return cal


def _fit_warnings(runs: list[dict], terms: tuple[int, ...], use_steps: bool) -> list[str]:
    n = len(runs)
    out = []
    if n < MIN_RUNS_LOO:
        exact = (f"; with {n} run(s) for {len(terms)} term(s) the fit passes through every "
                 "run, so the error after is ~0 by construction and says nothing"
                 if not use_steps and n <= len(terms) else "")
        out.append(f"only {n} run(s): no leave-one-out check{exact}; record {MIN_RUNS_LOO} or "
                   "more runs of different configurations (chunk size, max-num-seqs) before "
                   "trusting this fit")
    waits = [float(r["sim"].get("idle_s") or 0.0) for r in runs]
    if any(waits):
        out.append(f"{sum(w > 0 for w in waits)} run(s) spent time waiting for requests to "
                   f"arrive ({sum(waits):.3g} s in all): that wait is kept as the base model "
                   "simulated it, in the fit and in the error after; a calibrated simulation "
                   "re-times it, so its error may differ")
    return out


def plausibility_problem(cal: Calibration) -> str | None:
    """Why a fit is too far off to be a cost model's error (KERNEL_FACTOR_PLAUSIBLE), or
    None."""
    lo, hi = KERNEL_FACTOR_PLAUSIBLE
    if lo <= cal.kernel_factor <= hi:
        return None
    return (f"the fit multiplies the cost model's kernel time by {cal.kernel_factor:.3g}, "
            f"outside the plausible {lo:.2g}-{hi:.2g}: a cost model is not that far off, so "
            "the runs were most likely not what the simulation assumed (a client that capped "
            "concurrency, `vllm bench serve --max-concurrency`; other engine settings than "
            "the ones replayed; another GPU or model; a loaded machine)")


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
