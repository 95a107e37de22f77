"""What every runner shares: the result type, finding the engine's Python, the JSON-in/JSON-out
subprocess, and turning an engine's failure into one line.

A runner executes one ServingConfig on a real engine in a *separate Python* (a virtualenv with
the engine installed: vLLM pulls its own torch, so it lives beside tuner, not inside it):

    main process (tuner, no engine import)                worker (engine's Python)
    ---------------------------------------                ------------------------
    request.json  {engine args, token lengths, options} -> python -m runners._X_worker req res
    result.json   {ok, makespan_s, startup_s, steps...} <-
    worker.log    (the engine's own output; searched for the reason when it fails)

Which Python: ``python=`` / ``--python``, else ``$TUNER_<RUNNER>_PYTHON``, else
``.venv-<runner>/bin/python`` in the repository or the current folder (transformers: also
``.venv-vllm``, which has it), else this interpreter;
the first where the engine's package is importable wins (checked without importing it).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tuner.core.errors import TunerError

REPO_ROOT = Path(__file__).resolve().parents[1]

# Columns of RunResult.steps, as runners/_vllm_sched.py writes them (its STEP_FIELDS): the
# simulator's step record (tuner.sim.steps.STEP_COLUMNS, same names and meanings) less
# kv_blocks, plus the step's start time t, waiting and admitted requests and kv_usage (a
# fraction). runners.compare maps them onto the simulator's columns by name.
STEP_COLUMNS = ("t", "prefill_tokens", "prefill_sq", "prefill_ctx", "decodes", "decode_kv",
                "sampled", "running", "waiting", "preempted", "kv_usage", "admitted")

@dataclass(frozen=True)
class Engine:
    """How to find a runner's engine: the package its Python must have, the engine's name in
    messages, how to install it, and the virtualenvs (under the repository or the current
    folder) that may hold it. Each runner module defines its own (``ENGINE``)."""

    name: str  # the runner's name: --runner NAME, $TUNER_<NAME>_PYTHON
    package: str
    label: str
    install_hint: str
    venvs: tuple[str, ...]


class RunnerNotInstalled(TunerError):
    """The engine is not importable from any candidate Python."""


class EngineRejected(TunerError):
    """The engine refused the configuration (its reason, one line)."""


class RunnerFailed(TunerError):
    """The engine started but the run failed, timed out or crashed."""


@dataclass
class RunResult:
    """One real run of a ServingConfig: what was measured, and how."""

    runner: str
    device: str
    engine_version: str
    makespan_s: float  # first request submitted -> last output returned (engine already up)
    startup_s: float  # engine construction (load, compile, KV allocation): not in the makespan
    requests: int
    prompt_tokens: int
    output_tokens: int
    throughput_tok_s: float
    preemptions: int | None
    iterations: int | None
    import_s: float = 0.0
    warmup_s: float = 0.0
    kv_capacity_tokens: int | None = None
    block_size: int | None = None
    engine_args: dict = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    steps: np.ndarray | None = field(default=None, repr=False)  # [n, len(STEP_COLUMNS)]
    step_dt_s: np.ndarray | None = field(default=None, repr=False)  # measured time of each step
    log_path: str = ""
    wall_s: float = 0.0  # the whole worker process, import to exit
    makespans_s: list[float] = field(default_factory=list)  # every repeat; makespan_s = min
    # requests whose generated length differs from the asked one, in the measured pass (None:
    # the runner does not count them): a run with any did not do the job it was timed on
    mismatched_lengths: int | None = None

    def to_dict(self, *, with_steps: bool = True) -> dict:
        d = dataclasses.asdict(self)
        d["steps"] = self.steps.tolist() if (with_steps and self.steps is not None) else None
        d["step_dt_s"] = (self.step_dt_s.tolist()
                          if (with_steps and self.step_dt_s is not None) else None)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> RunResult:
        names = {f.name for f in dataclasses.fields(cls)}
        kw = {k: v for k, v in d.items() if k in names}
        if kw.get("steps") is not None:
            kw["steps"] = np.asarray(kw["steps"], dtype=np.float64)
        if kw.get("step_dt_s") is not None:
            kw["step_dt_s"] = np.asarray(kw["step_dt_s"], dtype=np.float64)
        return cls(**kw)


# ---- finding the engine's Python ---------------------------------------------------------
def candidate_pythons(engine: Engine, python: str | Path | None = None) -> list[str]:
    if python:
        return [str(python)]
    out = []
    env = os.environ.get(f"TUNER_{engine.name.upper()}_PYTHON")
    if env:
        out.append(env)
    for base in (REPO_ROOT, Path.cwd()):
        for venv in engine.venvs:
            p = base / venv / "bin" / "python"
            if p.is_file() and str(p) not in out:
                out.append(str(p))
    out.append(sys.executable)
    return out


_FOUND: dict[tuple, str] = {}


def has_package(python: str, package: str, timeout_s: float = 60.0) -> bool:
    """Whether `package` is importable from `python` (find_spec: nothing is imported)."""
    code = ("import importlib.util, sys; "
            f"sys.exit(0 if importlib.util.find_spec({package!r}) else 3)")
    try:
        r = subprocess.run([python, "-c", code], capture_output=True, timeout=timeout_s)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return r.returncode == 0


def engine_python(engine: Engine, python: str | Path | None = None) -> str:
    """The Python to run `engine`'s worker with; RunnerNotInstalled (one line) if none has it.
    By runner name: runners.registry.find_python."""
    key = (engine.name, str(python or ""), os.environ.get(f"TUNER_{engine.name.upper()}_PYTHON", ""))
    if key in _FOUND:
        return _FOUND[key]
    cands = candidate_pythons(engine, python)
    for py in cands:
        if has_package(py, engine.package):
            _FOUND[key] = py
            return py
    if python and not Path(python).exists():
        raise RunnerNotInstalled(f"--python {python} does not exist; {engine.install_hint}.")
    raise RunnerNotInstalled(f"The {engine.name} runner needs {engine.label}, which is not "
                             f"installed (looked in {', '.join(cands)}); {engine.install_hint}.")


# ---- the subprocess ----------------------------------------------------------------------
_REASON = re.compile(r"\b([A-Za-z_][\w.]*(?:Error|Exception|Invalid\w*)): (.+)$")
_GENERIC = ("See root cause above", "Engine core initialization failed",
            "WorkerProc initialization failed", "EngineDeadError", "Engine process failed")


def _strip_prefix(line: str) -> str:
    # "(Worker pid=1) ERROR 11-23 07:41:15 [file.py:12] ValueError: ..." -> "ValueError: ..."
    line = re.sub(r"^\([^)]*\)\s*", "", line.strip())
    line = re.sub(r"^(ERROR|WARNING|INFO|CRITICAL)\s+\d\d-\d\d \d\d:\d\d:\d\d\s+\[[^\]]*\]\s*", "",
                  line)
    return line


def engine_reason(error: str, log_text: str) -> str:
    """The most specific one-line reason: the worker's exception unless it is a generic
    "see above" wrapper, then the last `SomethingError: message` line of the engine's log."""
    error = " ".join((error or "").split())
    if error and not any(g in error for g in _GENERIC):
        return error
    best = ""
    for raw in log_text.splitlines():
        line = _strip_prefix(raw)
        m = _REASON.search(line)
        if m and not any(g in line for g in _GENERIC):
            best = f"{m.group(1).split('.')[-1]}: {m.group(2).strip()}"
    return best or error or "the engine exited without a reason (see the log)"


def _tail(path: Path, n: int = 200_000) -> str:
    try:
        with path.open("rb") as fh:
            fh.seek(max(path.stat().st_size - n, 0))
            return fh.read().decode("utf-8", "replace")
    except OSError:
        return ""


def run_worker(runner: str, python: str, request: dict, work_dir: Path, *,
               timeout_s: float | None = None, echo: bool = False) -> dict:
    """Write request.json, run ``python -m runners._<runner>_worker``, return result.json.

    Raises EngineRejected when the engine refused the configuration while starting up,
    RunnerFailed for any other failure (with the log's path)."""
    # absolute: the worker runs in work_dir, so a relative one (`--out tuner-out`, the
    # default) would be resolved twice and its request not found
    work_dir = Path(work_dir).resolve()
    work_dir.mkdir(parents=True, exist_ok=True)
    req_path, res_path, log_path = (work_dir / "request.json", work_dir / "result.json",
                                    work_dir / "worker.log")
    res_path.unlink(missing_ok=True)
    req_path.write_text(json.dumps(request, indent=1))
    env = dict(os.environ)
    # The worker imports runners.* from this checkout even where the venv lacks `pip install -e`.
    env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT)] + [p for p in
                                        env.get("PYTHONPATH", "").split(os.pathsep) if p])
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    env.setdefault("HF_HUB_OFFLINE", "1")  # never download: models are local
    env.setdefault("VLLM_NO_USAGE_STATS", "1")
    env.setdefault("DO_NOT_TRACK", "1")
    cmd = [python, "-m", f"tuner.runners._{runner}_worker", str(req_path), str(res_path)]
    t0 = time.monotonic()
    with log_path.open("w") as log:
        try:
            proc = subprocess.Popen(cmd, stdout=None if echo else log,
                                    stderr=None if echo else subprocess.STDOUT, env=env,
                                    cwd=str(work_dir), start_new_session=True)
        except OSError as exc:
            raise RunnerFailed(f"Cannot start {python}: {exc.strerror or exc}.") from None
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            raise RunnerFailed(f"The {runner} run did not finish within {timeout_s:g} s "
                               f"(log: {log_path}); raise --timeout.") from None
        except KeyboardInterrupt:
            _kill_group(proc)
            raise
    _kill_group(proc)  # engine helper processes left behind by an abrupt exit
    wall = time.monotonic() - t0
    try:
        result = json.loads(res_path.read_text())
    except (OSError, json.JSONDecodeError):
        reason = engine_reason("", _tail(log_path))
        raise RunnerFailed(f"The {runner} worker exited with code {proc.returncode} and no "
                           f"result: {reason} (log: {log_path}).") from None
    result["wall_s"] = wall
    result["log_path"] = str(log_path)
    if not result.get("ok"):
        reason = engine_reason(result.get("error", ""), _tail(log_path))
        if result.get("stage") == "startup":
            raise EngineRejected(f"{runner} rejected the configuration: {reason} "
                                 f"(log: {log_path}).")
        raise RunnerFailed(f"The {runner} run failed while {result.get('stage', 'running')}: "
                           f"{reason} (log: {log_path}).")
    return result


def _kill_group(proc: subprocess.Popen) -> None:
    """End the worker's process group: the worker and the engine processes it started (vLLM's
    engine core can outlive a worker that exits abruptly, and may ignore SIGTERM while busy)."""
    import signal

    pgid = proc.pid  # start_new_session=True: the worker leads its own group

    def alive() -> bool:
        try:
            os.killpg(pgid, 0)
            return True
        except (ProcessLookupError, PermissionError):
            return False

    if not alive():
        return
    try:
        os.killpg(pgid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        return
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline:
        if proc.poll() is None:
            time.sleep(0.1)
            continue
        if not alive():
            return
        time.sleep(0.1)
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass


def step_times(steps: np.ndarray | None, end_t: float | None, t_start: float | None,
               ) -> np.ndarray | None:
    """Measured duration of each step: start of the next step (or the idle mark) minus its own
    start. The first step also carries nothing from before it (submission is not a step)."""
    if steps is None or len(steps) == 0:
        return None
    t = steps[:, 0]
    end = end_t if end_t is not None else t[-1]
    return np.diff(np.append(t, max(end, t[-1])))


def result_from_worker(runner: str, res: dict, notes: list[str]) -> RunResult:
    steps = res.get("steps")
    arr = np.asarray(steps, dtype=np.float64) if steps else None
    if arr is not None and arr.ndim != 2:
        arr = None
    dt = step_times(arr, res.get("steps_end_t"), res.get("t_start"))
    extra = list(res.get("notes", []))
    if "async_scheduling" in res:  # vLLM V1 reports it: a policy detail the schedule depends on
        extra.append("engine scheduling: " + (
            "asynchronous (vLLM's default: step k+1 is scheduled while step k runs)"
            if res["async_scheduling"] else "synchronous"))
    if res.get("warmup_passes"):
        extra.append(f"{res['warmup_passes']} untimed warm-up pass(es) of the whole job "
                     f"({float(res.get('warmup_passes_s', 0.0)):.1f} s) before the measured ones")
    return RunResult(
        runner=runner,
        device=res.get("device", "?"),
        engine_version=res.get("engine_version", "?"),
        makespan_s=float(res["makespan_s"]),
        startup_s=float(res.get("startup_s", 0.0)),
        requests=int(res["requests"]),
        prompt_tokens=int(res["prompt_tokens"]),
        output_tokens=int(res["output_tokens"]),
        throughput_tok_s=float(res["throughput_tok_s"]),
        preemptions=res.get("preemptions"),
        iterations=res.get("iterations"),
        import_s=float(res.get("import_s", 0.0)),
        warmup_s=float(res.get("warmup_s", 0.0)),
        kv_capacity_tokens=res.get("kv_capacity_tokens"),
        block_size=res.get("block_size"),
        engine_args=res.get("engine_args", {}),
        notes=list(notes) + extra,
        steps=arr,
        step_dt_s=dt,
        log_path=res.get("log_path", ""),
        wall_s=float(res.get("wall_s", 0.0)),
        makespans_s=[float(x) for x in res.get("makespans_s") or [res["makespan_s"]]],
        mismatched_lengths=(int(res["mismatched_lengths"])
                            if res.get("mismatched_lengths") is not None else None),
    )


def jsonable(obj: Any) -> Any:
    from tuner.core.io import jsonable

    return jsonable(obj)
