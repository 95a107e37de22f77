"""Optuna multi-objective search (makespan, $) over GPU type x the knobs of a search space.

tuner composes Optuna's study / sampler / storage and writes no search algorithm of its own:

* **Samplers**: TPE (default) or NSGA-II propose configurations; infeasible ones (model does not
  fit, host memory exceeded...) are constraints (``trial.set_constraint``), not failures. The
  engines' own defaults (vLLM, Sarathi-Serve) are enqueued first, identical configurations are
  simulated once (a repeat is a ``duplicate`` trial with the first one's values).
* **Multi-fidelity**: a proposed configuration is first simulated on a stratified sample of the
  workload (fixed seed; strata = prompt x output length quantiles; the longest request always
  in, so memory feasibility is the full workload's). Its sample makespan, scaled by
  n_full / n_sample and a calibration factor, estimates the full makespan. It is *promoted* to
  the full workload unless a configuration of the same GPU type already simulated in full beats
  the estimate on both objectives by more than the sampling error ``eps`` (epsilon-dominance).
  ``eps`` is measured, not assumed: every promoted trial yields an (estimate, full) pair and
  every AUDIT_EVERY-th trial is promoted regardless, so the error is also measured on
  configurations the rule would have dropped. A configuration is dropped only when, within the
  measured error, it is dominated; the winners are always full-workload simulations. (Optuna's
  pruners cannot do this: ``Trial.report`` / ``should_prune`` refuse multi-objective studies.)
* **Polish**: after most of the budget, every configuration one knob away from the fastest and
  the cheapest so far is simulated (one trial each, its parameters fixed with Optuna's
  ``PartialFixedSampler``), round after round until neither improves.
* **Exhaustive**: every point of the space at full fidelity (the reference the search is
  checked against, ``benchmarks/search_quality.py``).
* **Storage**: in-memory, SQLite (the CLI's default, resumable after SIGKILL), PostgreSQL or any
  Optuna RDB URL for many workers (:func:`run_worker`); every worker rebuilds the workload,
  model, GPUs and space from the study's user attributes (:func:`setup_from_study`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import os
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import optuna
from optuna.distributions import CategoricalDistribution

from tuner.core.catalog import GPU, ModelSpec
from tuner.core.config import ServingConfig
from tuner.core.errors import TunerError
from tuner.core.workload import Workload
from tuner.search.space import SearchSpace
from tuner.sim.simulator import CostModel, InfeasibleConfig, check_feasible, simulate

OBJECTIVES = ("makespan_s", "cost_usd")
SAMPLERS = ("auto", "tpe", "nsga2")
# "auto": TPE for small budgets (it learns fastest per trial, but each proposal costs time
# growing with the study: ~20 s for 1,000 trials of 9 knobs, against ~3 s for NSGA-II).
AUTO_TPE_MAX_TRIALS = 300
GRID_CHECK_LIMIT = 20_000  # assert_some_gpu_fits checks every point of spaces up to this size
# Reference points enqueued first so the front always contains the engines' own defaults:
# vLLM V1's offline defaults (LLM class: max_num_batched_tokens 8192, max_num_seqs 256) and
# Sarathi-Serve's chunk 512 (seed 004 §5). Knobs a preset does not name take ServingConfig's
# default (vLLM's) when the space offers it.
PRESETS = ({"chunk_size": 8192, "max_running": 256, "scheduler": "vllm"},
           {"chunk_size": 512, "max_running": 128, "scheduler": "sarathi"})

# ---- multi-fidelity constants ------------------------------------------------------------------
SAMPLE_FRACTION = 0.125  # default share of the workload in the sample
# Requests; below 4x this the workload is simulated in full only. A sample must keep the engine
# as busy as the full job (hundreds of concurrent requests on a big GPU) and make the longest
# request's tail a small part of its makespan: measured on examples/arxiv.jsonl, a 64-request
# sample misjudges the full makespan by up to 90 % (100 requests: 44 %), and costs 77 % of a
# full simulation there anyway (fixed per-simulation costs), so small jobs gain nothing.
MIN_SAMPLE = 512
SAMPLE_SEED = 0
N_CALIBRATE = 8  # (estimate, full) pairs measured before any configuration may be dropped
AUDIT_EVERY = 10  # every 10th trial is promoted whatever its estimate (unbiased error sample)
EPS_FLOOR = 0.02  # the promotion margin never goes below 2 %
POLISH_AT = 0.8  # share of n_trials the sampler proposes before the neighbourhood polish
HEARTBEAT_S = 30  # RDB storages: a worker's running trial is failed 2 x this after it died


@dataclass(frozen=True)
class SearchSettings:
    # 300: TPE + polish reaches the exhaustive grid's best makespan and $ on 3 seeds of 3 on
    # the default space (6 GPUs, 81,648 configurations); 150 missed by up to 6 %.
    n_trials: int = 300
    timeout_s: float | None = None
    seed: int = 0
    sampler: str = "auto"  # "auto" | "tpe" | "nsga2"
    storage: str | None = None  # Optuna storage URL; None: in-memory
    study_name: str = "tuner"
    resume: bool = False
    exhaustive: bool = False  # every point of the space, full workload (n_trials ignored)
    # Share of the workload simulated first (multi-fidelity); None: SAMPLE_FRACTION when the
    # workload has >= 4 x MIN_SAMPLE requests; 1.0 (or 0): full workload only.
    sample_fraction: float | None = None


# ---- samplers and storages ---------------------------------------------------------------------
def sampler_name(settings: SearchSettings) -> str:
    if settings.sampler == "auto":
        return "tpe" if settings.n_trials <= AUTO_TPE_MAX_TRIALS else "nsga2"
    return settings.sampler


def make_sampler(settings: SearchSettings) -> optuna.samplers.BaseSampler:
    name = sampler_name(settings)
    if name == "tpe":
        return optuna.samplers.TPESampler(seed=settings.seed, multivariate=True,
                                          n_startup_trials=20)
    if name == "nsga2":
        # Mutation 0.3 (Optuna's default: 1 / number of knobs, ~0.1): in a categorical space
        # the population otherwise converges onto configurations already simulated, and each
        # repeat is a wasted trial (measured on the default space, 6 GPUs, 1,500 trials: ~1,000
        # distinct configurations at the default, ~1,350 at 0.3, both reaching the grid's best).
        pop = int(min(100, max(20, settings.n_trials // 15)))
        return optuna.samplers.NSGAIISampler(seed=settings.seed, population_size=pop,
                                             mutation_prob=0.3)
    raise TunerError(f"Unknown sampler {settings.sampler!r}; choose auto, tpe or nsga2.")


def storage_url(url: str) -> str:
    """A storage URL with the PostgreSQL driver the `postgres` extra installs spelled out:
    SQLAlchemy 2.1 maps a bare postgresql:// to psycopg 3, tuner[postgres] ships psycopg2."""
    import importlib.util

    for bare in ("postgresql://", "postgres://"):
        if url.startswith(bare) and importlib.util.find_spec("psycopg") is None \
                and importlib.util.find_spec("psycopg2") is not None:
            return "postgresql+psycopg2://" + url[len(bare):]
    return url


def _storage_error(url: str, exc: BaseException) -> TunerError:
    if isinstance(exc, ImportError):
        return TunerError(f"Cannot open storage {url}: its database driver is not installed "
                          "(PostgreSQL: pip install 'tuner[postgres]').")
    return TunerError(f"Cannot open storage {url}: {' '.join(str(exc).split())}")


def make_storage(url: str | None) -> optuna.storages.BaseStorage | None:
    """An Optuna storage for a URL (None: in-memory). RDB storages get a heartbeat so a killed
    worker's running trial is marked failed instead of staying RUNNING for ever, and SQLite
    waits for its lock (several local workers) instead of failing at once."""
    if url is None:
        return None
    url = storage_url(url)
    engine_kwargs: dict = {}
    sqlite = url.startswith("sqlite")
    if sqlite:
        # isolation_level=None: the driver opens no transaction of its own; _serialize_sqlite
        # then starts every transaction with BEGIN IMMEDIATE (see there).
        engine_kwargs = {"connect_args": {"timeout": 60, "isolation_level": None}}
    else:
        engine_kwargs = {"pool_pre_ping": True}
    try:
        with warnings.catch_warnings():  # heartbeat_interval is "experimental" in Optuna 5
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            storage = optuna.storages.RDBStorage(url, engine_kwargs=engine_kwargs,
                                                 heartbeat_interval=HEARTBEAT_S,
                                                 grace_period=2 * HEARTBEAT_S)
    except Exception as exc:  # noqa: BLE001 - storage URLs fail in many driver-specific ways
        raise _storage_error(url, exc) from None
    if sqlite:
        _serialize_sqlite(storage.engine)
    return storage


def _serialize_sqlite(engine) -> None:
    """Make every SQLite transaction take the database's write lock when it begins.

    Optuna guards read-check-write steps (a worker popping an enqueued trial: WAITING ->
    RUNNING; finishing a trial) with SELECT ... FOR UPDATE, which SQLite ignores, and Python's
    sqlite3 opens its transaction only at the first write: two workers could both read a
    preset trial as WAITING and both run it, and the second to finish failed with "Trial#N has
    already finished and can not be updated" (optuna/optuna#4002, #4621). With BEGIN
    IMMEDIATE the second worker waits (up to the 60 s busy timeout) and then sees the trial
    taken. Transactions are milliseconds against seconds of simulation per trial."""
    from sqlalchemy import event

    @event.listens_for(engine, "begin")
    def _begin_immediate(conn):
        conn.exec_driver_sql("BEGIN IMMEDIATE")


def check_study_settings(settings: SearchSettings) -> None:
    """Fail early (before any progress output) on a bad sampler, an unreachable storage, or a
    study that already exists without --resume."""
    make_sampler(settings)
    storage = settings.storage
    if storage is not None and not settings.resume:
        try:
            existing = optuna.study.get_all_study_names(storage_url(storage))
        except Exception as exc:  # noqa: BLE001 - storage URLs fail in many driver-specific ways
            raise _storage_error(storage, exc) from None
        if settings.study_name in existing:
            raise TunerError(
                f"Study {settings.study_name!r} already exists in {storage}; pass --resume to "
                "continue it, or --study NAME / --out DIR for a new one.")


def open_study(settings: SearchSettings, *, metadata: dict | None = None,
               workload_tokens: dict | None = None) -> optuna.Study:
    """Create the study, or load it with --resume; refuses to silently mix two searches."""
    # ERROR: on Ctrl-C Optuna would log the interrupted trial with a traceback at WARNING.
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    check_study_settings(settings)  # a bad --sampler fails before the storage is touched
    sampler = make_sampler(settings)
    storage = make_storage(settings.storage)
    try:
        study = optuna.create_study(
            study_name=settings.study_name, storage=storage, directions=["minimize", "minimize"],
            sampler=sampler, load_if_exists=settings.resume)
    except Exception as exc:  # noqa: BLE001
        raise TunerError(f"Cannot create study in {settings.storage}: {exc}") from None
    n_old = len(study.get_trials(deepcopy=False))
    if settings.resume and n_old:
        # A fresh sampler with the same seed would replay the first run's random draws, and
        # every replayed draw is a duplicate that uses up a trial; continue from a new seed.
        study.sampler = make_sampler(dataclasses.replace(settings, seed=settings.seed + n_old))
    old = study.user_attrs.get("metadata")
    if metadata and not old:
        if workload_tokens is not None:
            study.set_user_attr("workload_tokens", workload_tokens)
        study.set_user_attr("metadata", metadata)  # last: a worker waits for it
    elif metadata and old:
        _check_same_search(settings.study_name, old, metadata)
        if old.get("search") != metadata.get("search"):  # e.g. more --n-trials: workers follow
            study.set_user_attr("metadata", {**old, "search": metadata.get("search")})
    return study


_SAME = {"workload_sha256": "workload", "model": "model", "gpus": "GPU types",
         "knobs": "search space", "fixed": "fixed knobs", "prices": "GPU prices"}


def _check_same_search(name: str, old: dict, new: dict) -> None:
    """--resume must continue the same search: same workload, model, GPUs, space, prices."""
    for key, what in _SAME.items():
        if key in old and key in new and old[key] != new[key]:
            raise TunerError(f"Study {name!r} was searched with another {what} "
                             f"({_short(old[key])} vs now {_short(new[key])}); resume it with "
                             "the same inputs, or start a new study (--study NAME).")


def _short(v) -> str:
    text = str(v)
    return text if len(text) <= 60 else text[:57] + "..."


# ---- the study's metadata: everything a worker or `tuner results` needs ------------------------
def workload_digest(w: Workload) -> str:
    h = hashlib.sha256()
    for a in (w.prompt_tokens, w.output_tokens, w.prefix_ids, w.prefix_tokens):
        h.update(b"-" if a is None else np.ascontiguousarray(a, dtype=np.int64).tobytes())
    return h.hexdigest()


def workload_tokens(w: Workload) -> dict:
    """The workload's token counts as plain lists (stored in the study: a worker on another
    machine simulates exactly these requests, whatever tokenizer it has)."""
    def lst(a):
        return None if a is None else np.asarray(a, dtype=np.int64).tolist()

    return {"prompt_tokens": lst(w.prompt_tokens), "output_tokens": lst(w.output_tokens),
            "prefix_ids": lst(w.prefix_ids), "prefix_tokens": lst(w.prefix_tokens)}


def study_metadata(workload: Workload, model: ModelSpec, gpus: dict[str, GPU],
                   space: SearchSpace, settings: SearchSettings, extra: dict | None = None) -> dict:
    """The study's ``metadata`` user attribute. Keys read elsewhere: workload, model, gpus,
    prices, fixed, gpu_file, skip_invalid, output_dist (tuner.cli.exports)."""
    return {
        "workload": workload.source,
        "model": model.name,
        "gpus": list(gpus),
        "space": space.source,
        "knobs": {k: list(v) for k, v in space.knobs.items()},
        "fixed": dict(space.fixed),
        "prices": {n: g.price_usd_per_h for n, g in gpus.items()},
        "gpu_specs": {n: dataclasses.asdict(g) for n, g in gpus.items()},
        "model_spec": dataclasses.asdict(model),
        "workload_requests": len(workload),
        "workload_sha256": workload_digest(workload),
        "tokenizer": workload.tokenizer,
        "output_source": workload.output_source,
        "search": {"sampler": settings.sampler, "seed": settings.seed,
                   "n_trials": settings.n_trials, "timeout_s": settings.timeout_s,
                   "exhaustive": settings.exhaustive,
                   "sample_fraction": settings.sample_fraction},
        **(extra or {}),
    }


@dataclass
class StudySetup:
    """What a search needs, rebuilt from a study's user attributes."""

    workload: Workload
    model: ModelSpec
    gpus: dict[str, GPU]
    space: SearchSpace
    settings: SearchSettings
    metadata: dict


def setup_from_study(study: optuna.Study, *, workload_path: str | Path | None = None) -> StudySetup:
    """Workload, model, GPUs (with the search's prices), space and settings of a study written
    by :func:`run_search`; raises TunerError when the study has no such metadata."""
    meta = study.user_attrs.get("metadata") or {}
    if not meta.get("gpus") or "knobs" not in meta or not meta.get("model_spec"):
        raise TunerError(f"Study {study.study_name!r} has no complete search metadata (model, "
                         "GPUs, knobs); it was not written by this version of `tuner search`.")
    model = ModelSpec(**meta["model_spec"])
    try:
        gpus = {n: GPU(**d) for n, d in meta["gpu_specs"].items()}
    except TypeError as exc:
        raise TunerError(f"Study {study.study_name!r}: GPU specs written by another tuner "
                         f"version ({exc}).") from None
    space = SearchSpace(knobs={k: list(v) for k, v in meta["knobs"].items()},
                        fixed=dict(meta.get("fixed") or {}), source=str(meta.get("space", "")))
    tokens = study.user_attrs.get("workload_tokens")
    if workload_path is not None or not tokens:
        from tuner.core.workload import load_workload

        path = workload_path or meta.get("workload")
        if not path or not Path(path).is_file():
            raise TunerError(f"Workload {path} of study {study.study_name!r} is not stored in "
                             "the study nor on this machine; pass --workload FILE.")
        w = load_workload(Path(path), model=model, skip_invalid=bool(meta.get("skip_invalid")),
                          output_dist=meta.get("output_dist"))
    else:
        def arr(k):
            v = tokens.get(k)
            return None if v is None else np.asarray(v, dtype=np.int64)

        w = Workload(prompt_tokens=arr("prompt_tokens"), output_tokens=arr("output_tokens"),
                     prefix_ids=arr("prefix_ids"), prefix_tokens=arr("prefix_tokens"),
                     source=str(meta.get("workload", "")), tokenizer=meta.get("tokenizer", ""),
                     output_source=meta.get("output_source", ""))
    want = meta.get("workload_sha256")
    if want and workload_digest(w) != want:
        raise TunerError(f"Workload {w.source} does not match the one study "
                         f"{study.study_name!r} searched ({len(w)} vs "
                         f"{meta.get('workload_requests')} requests, or other token counts); "
                         "workers must simulate the same job.")
    s = meta.get("search") or {}
    settings = SearchSettings(n_trials=int(s.get("n_trials", 300)), timeout_s=s.get("timeout_s"),
                              seed=int(s.get("seed", 0)), sampler=s.get("sampler", "auto"),
                              study_name=study.study_name, resume=True,
                              exhaustive=bool(s.get("exhaustive", False)),
                              sample_fraction=s.get("sample_fraction"))
    return StudySetup(workload=w, model=model, gpus=gpus, space=space, settings=settings,
                      metadata=meta)


# ---- multi-fidelity: the sample -----------------------------------------------------------------
def sample_size(n: int, fraction: float | None) -> int:
    """Requests in the sample (n: no multi-fidelity). None: SAMPLE_FRACTION of the workload,
    at least MIN_SAMPLE requests, for workloads of 4 x MIN_SAMPLE requests and more; a given
    fraction is taken as it is (0 or 1: full workload only)."""
    if fraction is None:
        if n < 4 * MIN_SAMPLE:
            return n
        return min(n, max(MIN_SAMPLE, math.ceil(n * SAMPLE_FRACTION)))
    if fraction <= 0 or fraction >= 1:
        return n
    return min(n, max(1, math.ceil(n * fraction)))


def stratified_sample(w: Workload, n_sample: int, seed: int = SAMPLE_SEED) -> np.ndarray:
    """Sorted indices of a stratified random sample of `n_sample` requests: strata are the
    cells of a B x B grid of prompt-length and output-length quantiles, each cell contributes
    in proportion to its size (largest remainders), and the longest request (prompt + output)
    is always in, so the sample's memory feasibility is the full workload's."""
    n = len(w)
    if n_sample >= n:
        return np.arange(n)
    rng = np.random.default_rng(seed)
    bins = int(np.clip(round(math.sqrt(n_sample / 4)), 1, 8))
    cell = np.zeros(n, dtype=np.int64)
    for col in (w.prompt_tokens, w.output_tokens):
        edges = np.quantile(col, np.linspace(0, 1, bins + 1)[1:-1])
        cell = cell * bins + np.searchsorted(edges, col, side="right")
    ids, counts = np.unique(cell, return_counts=True)
    quota = counts * n_sample / n
    take = np.floor(quota).astype(np.int64)
    short = n_sample - int(take.sum())
    if short > 0:
        take[np.argsort(-(quota - take), kind="stable")[:short]] += 1
    longest = int(np.argmax(w.prompt_tokens + w.output_tokens))
    home = int(np.searchsorted(ids, cell[longest]))
    if take[home] == 0:  # the longest request's stratum gets one place, the largest one less
        take[int(np.argmax(take))] -= 1
        take[home] = 1
    chosen = []
    for cid, k in zip(ids, take, strict=True):
        members = np.flatnonzero(cell == cid)
        pick = rng.choice(members, size=int(k), replace=False)
        if cid == cell[longest] and longest not in pick:
            pick[0] = longest
        chosen.append(pick)
    return np.sort(np.concatenate(chosen))


# ---- evaluating one configuration ---------------------------------------------------------------
@dataclass
class _Knowledge:
    """What this process knows of the study: finished configs (dedup), per-GPU full-fidelity
    fronts (promotion), and (sample estimate, full) pairs (calibration, sampling error)."""

    done: dict = field(default_factory=dict)  # key -> (values, attrs, number)
    fronts: dict = field(default_factory=dict)  # gpu -> [(makespan, cost), ...] non-dominated
    pairs: list = field(default_factory=list)  # (scaled sample makespan, full makespan)
    seen: set = field(default_factory=set)  # trial numbers ingested
    n_full: int = 0  # full-workload simulations (feasible or not) ingested
    n_sample: int = 0  # configurations decided on the sample alone
    best: dict = field(default_factory=dict)  # objective index -> (value, other, key)

    def add(self, number: int, params: dict, values, attrs: dict) -> None:
        if number in self.seen:
            return
        self.seen.add(number)
        if attrs.get("duplicate"):
            return
        key = _key(params)
        if key in self.done:  # two workers simulated the same config at once: keep the first
            return
        self.done[key] = (tuple(values), attrs, number)
        fid = attrs.get("fidelity") or {}
        if fid.get("level", "full") == "full":
            self.n_full += 1
        else:
            self.n_sample += 1
        if not attrs.get("feasible"):
            return
        if fid.get("level", "full") == "full":
            _add_to_front(self.fronts.setdefault(params["gpu"], []), tuple(values))
            for i in (0, 1):
                cand = (values[i], values[1 - i], key)
                if i not in self.best or cand < self.best[i]:
                    self.best[i] = cand
            if fid.get("sample_makespan_s") is not None:
                self.pairs.append((fid["sample_makespan_s"] * fid["scale"], values[0]))

    def ingest(self, study: optuna.Study) -> None:
        """Trials other workers finished since the last call."""
        for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)):
            if t.number not in self.seen:
                self.add(t.number, t.params, t.values, t.user_attrs)

    def calibration(self) -> tuple[float, float]:
        """(k, eps): full makespan ~= k x n_full/n_sample x sample makespan (k: the median
        ratio), and the largest relative error |estimate / full - 1| of that estimate over
        every measured pair (floored at EPS_FLOOR)."""
        if not self.pairs:
            return 1.0, math.inf
        r = np.array([full / est for est, full in self.pairs if est > 0])
        if r.size == 0:
            return 1.0, math.inf
        k = float(np.median(r))
        return k, max(EPS_FLOOR, float(np.max(np.abs(k / r - 1.0))))


def _add_to_front(front: list, p: tuple) -> None:
    if any(q[0] <= p[0] and q[1] <= p[1] for q in front):
        return
    front[:] = [q for q in front if not (p[0] <= q[0] and p[1] <= q[1])] + [p]


def _key(params: dict) -> tuple:
    return tuple(sorted(params.items()))


class Evaluator:
    """Simulates configurations of one search (full workload or its sample) and decides
    promotions; plain Python, no Optuna, so the benchmark can time it alone."""

    def __init__(self, workload: Workload, model: ModelSpec, gpus: dict[str, GPU],
                 space: SearchSpace, *, sample_fraction: float | None = None,
                 cost_model_for: Callable[[GPU, ServingConfig], CostModel] | None = None) -> None:
        self.workload, self.model, self.gpus, self.space = workload, model, gpus, space
        self.cost_model_for = cost_model_for
        n = len(workload)
        self.n_sample = sample_size(n, sample_fraction)
        self.sample = None
        self.scale = 1.0
        if self.n_sample < n:
            self.sample = workload.take(stratified_sample(workload, self.n_sample))
            self.scale = n / self.n_sample
        self.known = _Knowledge()
        self.sim_s = 0.0  # time spent simulating

    def config(self, params: dict) -> ServingConfig:
        return ServingConfig(**self.space.fixed, **params)

    def _simulate(self, w: Workload, gpu: GPU, config: ServingConfig):
        t0 = time.perf_counter()
        try:
            cm = self.cost_model_for(gpu, config) if self.cost_model_for else None
            return simulate(w, self.model, gpu, config, cm)
        finally:
            self.sim_s += time.perf_counter() - t0

    def evaluate(self, params: dict, number: int, *, full: bool = False) -> tuple[tuple, dict]:
        """(values, user attrs) of one configuration. `full`: skip the sample (exhaustive)."""
        config = self.config(params)
        gpu = self.gpus[params["gpu"]]
        fid: dict = {"level": "full"}
        try:
            if self.sample is not None and not full:
                s = self._simulate(self.sample, gpu, config)
                k, eps = self.known.calibration()
                est = (s.makespan_s * self.scale * k, s.cost_usd * self.scale * k)
                why = self._promotion(params["gpu"], est, eps, number)
                fid = {"level": "sample", "requests": self.n_sample,
                       "sample_makespan_s": s.makespan_s, "scale": self.scale, "k": k,
                       "eps": eps if math.isfinite(eps) else None,
                       "estimate_makespan_s": est[0], "promoted": why}
                if why is None:
                    return est, {"feasible": True, "reason": "", "fidelity": fid}
                fid["level"] = "full"
            res = self._simulate(self.workload, gpu, config)
        except InfeasibleConfig as exc:
            return (math.inf, math.inf), {"feasible": False, "reason": str(exc),
                                          "fidelity": fid}
        summary = res.summary()
        return (res.makespan_s, res.cost_usd), {
            "feasible": True, "reason": "",
            "metrics": {k: v for k, v in summary.items()
                        if k not in ("memory", "config", "provenance")},
            "memory": summary["memory"],
            "provenance": summary["provenance"],
            "fidelity": fid,
        }

    def _promotion(self, gpu: str, est: tuple, eps: float, number: int) -> str | None:
        """Why the configuration goes to the full workload, or None to keep the estimate."""
        if len(self.known.pairs) < N_CALIBRATE:
            return "calibration"
        if number % AUDIT_EVERY == 0:
            return "audit"
        front = self.known.fronts.get(gpu)
        if not front:
            return "first of its GPU"
        for m, c in front:
            if m * (1 + eps) <= est[0] and c * (1 + eps) <= est[1]:
                return None
        return "within the sampling error of the front"


# ---- the search loop ---------------------------------------------------------------------------
def _distributions(space: SearchSpace, gpu_names: list[str]) -> dict:
    return {"gpu": CategoricalDistribution(gpu_names),
            **{k: CategoricalDistribution(v) for k, v in space.knobs.items()}}


def _preset_value(name: str, values: list, preset: dict):
    want = preset.get(name)
    if want is not None and want in values:
        return want
    default = ServingConfig.__dataclass_fields__[name].default
    if default in values:
        return default
    return max(values) if name.endswith("_bits") else values[len(values) // 2]


def _enqueue_presets(study: optuna.Study, space: SearchSpace, gpu_names: list[str]) -> None:
    seen = set()
    for preset in PRESETS:
        for gpu in gpu_names:
            params = {"gpu": gpu, **{name: _preset_value(name, values, preset)
                                     for name, values in space.knobs.items()}}
            if _key(params) not in seen:
                seen.add(_key(params))
                study.enqueue_trial(params, skip_if_exists=True)


def _set_attrs(trial: optuna.Trial, values: tuple, attrs: dict) -> None:
    for k, v in attrs.items():
        trial.set_user_attr(k, v)
    trial.set_constraint("fits", 0.0 if attrs.get("feasible") else 1.0)  # > 0: infeasible


def _objective(ev: Evaluator, gpu_names: list[str], shared: bool):
    space = ev.space

    def objective(trial: optuna.Trial) -> tuple[float, float]:
        params = {"gpu": trial.suggest_categorical("gpu", gpu_names)}
        for name, values in space.knobs.items():
            params[name] = trial.suggest_categorical(name, values)
        if shared:  # other workers' trials: dedup and promotion see them too
            ev.known.ingest(trial.study)
        key = _key(params)
        prev = ev.known.done.get(key)
        if prev is not None:  # identical config already simulated: reuse, do not re-simulate
            values, attrs, _first = prev
            _set_attrs(trial, values, {"duplicate": True,
                                       "feasible": attrs.get("feasible", False),
                                       "fidelity": {"level": (attrs.get("fidelity") or {})
                                                    .get("level", "full")}})
            return tuple(values)
        values, attrs = ev.evaluate(params, trial.number)
        _set_attrs(trial, values, attrs)
        ev.known.add(trial.number, params, values, attrs)
        return values

    return objective


def _count_complete(study: optuna.Study) -> int:
    return len(study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)))


def _neighbours(key: tuple, space: SearchSpace, gpu_names: list[str]) -> list[dict]:
    """Configurations that differ from `key` in one knob (or the GPU type)."""
    base = dict(key)
    out = []
    for name, values in (("gpu", gpu_names), *space.knobs.items()):
        for v in values:
            if v != base[name]:
                out.append({**base, name: v})
    return out


def _optimize(study: optuna.Study, ev: Evaluator, settings: SearchSettings, *, shared: bool,
              on_trial: Callable | None, mirror: optuna.Study | None = None) -> None:
    """Run trials on `study` until it holds n_trials complete ones: the sampler proposes the
    first POLISH_AT share of the budget; then every configuration one knob away from the
    fastest and from the cheapest found so far is enqueued, round after round until neither
    improves (a sampler's best is rarely a local optimum of a discrete space; measured on the
    default space: without this, NSGA-II misses the grid's cheapest by 2-7 % on 3 seeds of
    10 at 1,200 trials); the sampler has what is left. `mirror`: the persistent study an
    in-memory `study` copies each finished trial into (one transaction per trial instead of
    one per parameter and attribute)."""
    gpu_names = list(ev.gpus)
    ev.known.ingest(study)
    if settings.exhaustive:
        _exhaustive(mirror or study, ev, settings, on_trial)
        return
    if settings.n_trials <= _count_complete(study):
        return
    t_end = None if settings.timeout_s is None else time.monotonic() + settings.timeout_s
    callbacks = []
    if mirror is not None:
        def persist(_study, trial):
            if trial.state == optuna.trial.TrialState.COMPLETE:
                mirror.add_trial(trial)

        callbacks.append(persist)
    if on_trial:
        callbacks.append(on_trial)
    if shared:  # several workers: stop when the study as a whole has its trials
        callbacks.append(optuna.study.MaxTrialsCallback(
            settings.n_trials, states=(optuna.trial.TrialState.COMPLETE,)))
    objective = _objective(ev, gpu_names, shared)

    def run(n: int) -> bool:
        """Up to `n` more trials, fewer when the study has its n_trials; False when the study
        has them or time is up (nothing more to do)."""
        n = min(n, settings.n_trials - _count_complete(study))
        left = None if t_end is None else t_end - time.monotonic()
        if n > 0 and (left is None or left > 0):
            study.optimize(objective, n_trials=n, timeout=left, callbacks=callbacks, catch=(),
                           gc_after_trial=False)
        return (t_end is None or time.monotonic() < t_end) and \
            _count_complete(study) < settings.n_trials

    if not run(math.ceil(POLISH_AT * settings.n_trials) - _count_complete(study)):
        return
    sampler = study.sampler
    try:
        while True:  # polish: each candidate is one trial with every parameter fixed
            targets = tuple(ev.known.best[i][2] for i in (0, 1) if i in ev.known.best)
            cand = {}
            for key in targets:
                for p in _neighbours(key, ev.space, gpu_names):
                    cand.setdefault(_key(p), p)
            todo = [p for k, p in cand.items() if k not in ev.known.done]
            if not todo:
                break
            for p in todo:
                if shared:
                    ev.known.ingest(study)
                if _key(p) in ev.known.done:  # another worker got there first
                    continue
                with warnings.catch_warnings():  # "experimental" since Optuna 2.4
                    warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                    study.sampler = optuna.samplers.PartialFixedSampler(p, sampler)
                if not run(1):
                    return
            if tuple(ev.known.best[i][2] for i in (0, 1) if i in ev.known.best) == targets:
                break
    finally:
        study.sampler = sampler
    run(settings.n_trials)


def _exhaustive(study: optuna.Study, ev: Evaluator, settings: SearchSettings,
                on_trial: Callable | None) -> None:
    """Every point of the space at full fidelity, added as finished trials (no sampler: Optuna's
    GridSampler rescans the whole study per trial, quadratic in the grid size)."""
    dists = _distributions(ev.space, list(ev.gpus))
    t_end = None if settings.timeout_s is None else time.monotonic() + settings.timeout_s
    batch: list = []
    last_flush = time.monotonic()

    def flush():
        nonlocal batch, last_flush
        if batch:
            study.add_trials(batch)
            if on_trial:
                for ft in batch:
                    on_trial(study, ft)
        batch, last_flush = [], time.monotonic()

    number = len(study.get_trials(deepcopy=False))
    for params in ev.space.grid_params(list(ev.gpus)):
        if _key(params) in ev.known.done:
            continue
        if t_end is not None and time.monotonic() > t_end:
            break
        values, attrs = ev.evaluate(params, number, full=True)
        ev.known.add(number, params, values, attrs)  # add_trials numbers them in order
        batch.append(optuna.trial.create_trial(
            values=list(values), params=params, distributions=dists, user_attrs=attrs,
            constraints={"fits": 0.0 if attrs["feasible"] else 1.0}))
        number += 1
        if len(batch) >= 500 or time.monotonic() - last_flush > 1.0:
            flush()
    flush()


def run_search(workload: Workload, model: ModelSpec, gpus: dict[str, GPU], space: SearchSpace,
               settings: SearchSettings, *,
               cost_model_for: Callable[[GPU, ServingConfig], CostModel] | None = None,
               on_trial: Callable[[optuna.Study, optuna.trial.FrozenTrial], None] | None = None,
               metadata: dict | None = None, evaluator: Evaluator | None = None) -> optuna.Study:
    """Run (or resume) the study until `n_trials` trials are complete, the timeout hits, or
    (exhaustive) every point of the space is simulated. `metadata`: extra keys for the study's
    metadata attribute (the CLI adds the workload file's path and loading options)."""
    meta = study_metadata(workload, model, gpus, space, settings, metadata)
    study = open_study(settings, metadata=meta, workload_tokens=workload_tokens(workload))
    ev = evaluator or Evaluator(workload, model, gpus, space,
                                sample_fraction=settings.sample_fraction,
                                cost_model_for=cost_model_for)
    work, mirror = study, None
    if settings.storage is not None:
        # One process owns the study: sample in memory, persist each finished trial whole.
        # Optuna's RDB storage commits every parameter and attribute of a running trial on its
        # own (~17 transactions a trial); a finished trial is one transaction, and nothing
        # unfinished (RUNNING) is left behind by a kill.
        work = optuna.create_study(directions=study.directions, sampler=study.sampler)
        work.add_trials(study.get_trials(deepcopy=False,
                                         states=(optuna.trial.TrialState.COMPLETE,)))
        mirror = study
    if not settings.exhaustive and not work.get_trials(deepcopy=False):
        _enqueue_presets(work, space, list(gpus))
    _optimize(work, ev, settings, shared=False, on_trial=on_trial, mirror=mirror)
    return study


def prepare_study(workload: Workload, model: ModelSpec, gpus: dict[str, GPU],
                  space: SearchSpace, settings: SearchSettings, *,
                  metadata: dict | None = None) -> optuna.Study:
    """Create (or, with resume, load) the study with its metadata and presets, for workers to
    run (`tuner search --workers N`)."""
    if settings.storage is None:
        raise TunerError("Workers need a shared storage (--storage URL); an in-memory study "
                         "cannot be shared.")
    meta = study_metadata(workload, model, gpus, space, settings, metadata)
    study = open_study(settings, metadata=meta, workload_tokens=workload_tokens(workload))
    if not settings.exhaustive and not study.get_trials(deepcopy=False):
        _enqueue_presets(study, space, list(gpus))
    return study


def load_study(study_name: str, storage: str) -> optuna.Study:
    """An existing study; one TunerError line when the storage or the name is wrong."""
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    st = make_storage(storage)
    try:
        names = optuna.study.get_all_study_names(st)
    except Exception as exc:  # noqa: BLE001
        raise _storage_error(storage, exc) from None
    if study_name not in names:
        raise TunerError(f"No study {study_name!r} in {storage}"
                         + (f"; it has {', '.join(sorted(names))}." if names else
                            "; it holds no study (create it with `tuner search --storage URL "
                            "--study NAME`)."))
    return optuna.load_study(study_name=study_name, storage=st)


@dataclass
class WorkerJob:
    """A worker attached to a shared study, ready to run (see :func:`connect_worker`)."""

    study: optuna.Study
    setup: StudySetup
    settings: SearchSettings
    evaluator: Evaluator

    def run(self, on_trial: Callable | None = None) -> optuna.Study:
        """Trials until the study has its n_trials complete ones (or the timeout)."""
        _optimize(self.study, self.evaluator, self.settings, shared=True, on_trial=on_trial)
        return self.study


def study_cost_model_for(meta: dict, model: ModelSpec, gpus: dict[str, GPU], *,
                         study_name: str, profile: str | Path | None = None,
                         profile_mode: str | None = None):
    """The cost models a study was searched with: its `--profile` folder (stored in the
    metadata; `profile` overrides the path, e.g. a copy on another machine), or None for the
    default (shipped profile or roofline)."""
    from tuner.sim.simulator import profile_cost_model_for

    path = profile or meta.get("profile")
    if path is None:
        return None
    if profile is None and not Path(path).exists():
        raise TunerError(f"Study {study_name!r} was searched with the profile folder {path}, "
                         "which is not on this machine; pass --profile DIR with a copy of it.")
    return profile_cost_model_for(model, path,
                                  profile_mode=profile_mode or meta.get("profile_mode") or "auto",
                                  check_gpu=next(iter(gpus.values())))


def connect_worker(study_name: str, storage: str, *, n_trials: int | None = None,
                   timeout_s: float | None = None, seed: int | None = None,
                   workload_path: str | Path | None = None,
                   cost_model_for: Callable[[GPU, ServingConfig], CostModel] | None = None,
                   profile: str | Path | None = None, wait_s: float = 0.0) -> WorkerJob:
    """A worker of a shared study: the search rebuilt from the study's metadata. It runs until
    the study has n_trials (the search's, or `n_trials`) complete trials. `wait_s`: how long to
    wait for the study to appear (workers started before the search). Cost models: the
    search's `--profile` folder (from the study; `profile`: a copy of it on this machine),
    unless `cost_model_for` is given."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            study = load_study(study_name, storage)
            if study.user_attrs.get("metadata"):
                break
            problem = TunerError(f"Study {study_name!r} in {storage} has no search metadata; "
                                 "create it with `tuner search --storage URL --study NAME`.")
        except TunerError as exc:
            problem = exc
        if time.monotonic() >= deadline:
            raise problem
        time.sleep(0.5)
    setup = setup_from_study(study, workload_path=workload_path)
    s = setup.settings
    if s.exhaustive:
        raise TunerError(f"Study {study_name!r} is an exhaustive grid; it is run by `tuner "
                         "search --exhaustive`, not by workers.")
    # Each worker draws from its own seed, else all would propose the same configurations.
    seed = seed if seed is not None else int.from_bytes(os.urandom(4), "little")
    settings = dataclasses.replace(s, storage=storage, seed=seed,
                                   n_trials=n_trials if n_trials is not None else s.n_trials,
                                   timeout_s=timeout_s if timeout_s is not None else s.timeout_s)
    study.sampler = make_sampler(settings)
    if cost_model_for is None:  # the search's own measured profile, if it had one
        cost_model_for = study_cost_model_for(setup.metadata, setup.model, setup.gpus,
                                              study_name=study_name, profile=profile)
    ev = Evaluator(setup.workload, setup.model, setup.gpus, setup.space,
                   sample_fraction=settings.sample_fraction, cost_model_for=cost_model_for)
    return WorkerJob(study=study, setup=setup, settings=settings, evaluator=ev)


# ---- feasibility before the search -------------------------------------------------------------
def assert_some_gpu_fits(workload: Workload, model: ModelSpec, gpus: dict[str, GPU],
                         space: SearchSpace) -> None:
    """Fail fast, with the numbers, when the model fits on none of the GPUs at the most
    memory-lenient point of the space (fewest bits, smallest budget, largest TP)."""
    lenient = {}
    for name, values in space.knobs.items():
        if name in ("weight_bits", "kv_bits", "chunk_size", "max_running", "gpu_memory_utilization"):
            lenient[name] = max(values) if name == "gpu_memory_utilization" else min(values)
        elif name in ("tp", "kv_offload_layers", "weight_offload_fraction"):
            lenient[name] = max(values)
        else:
            lenient[name] = values[0]
    reasons = []
    for gpu in gpus.values():
        config = ServingConfig(gpu=gpu.name, **space.fixed, **lenient)
        try:
            check_feasible(workload, model, gpu, config)
            return
        except InfeasibleConfig as exc:
            reasons.append(str(exc))
    # The lenient point can fail on a rule other than memory (vllm-v0 needs chunk_size >= the
    # longest request): look for any feasible point of a not-too-large grid before refusing.
    if space.size(len(gpus)) > GRID_CHECK_LIMIT:
        return  # too many to check here; the search's constraints handle infeasible points
    for config in space.grid(list(gpus)):
        try:
            check_feasible(workload, model, gpus[config.gpu], config)
            return
        except InfeasibleConfig:
            pass
    raise TunerError(f"No candidate GPU can run {model.name} even at its most memory-lenient "
                     f"setting ({', '.join(f'{k}={v}' for k, v in lenient.items())}): "
                     + "; ".join(reasons))


def default_storage(out_dir: Path) -> str:
    return f"sqlite:///{(out_dir / 'study.db').resolve()}"
