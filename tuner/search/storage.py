"""Optuna storages and studies: storage URLs (in-memory, a journal file, SQLite, PostgreSQL or
any RDB URL), opening / resuming / loading a study, and the study's metadata from which a worker or
`tuner report` / `tuner export` rebuild the search (:func:`setup_from_study`)."""

from __future__ import annotations

import dataclasses
import fcntl
import hashlib
import os
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import optuna

from tuner.core.catalog import GPU, ModelSpec
from tuner.core.errors import TunerError
from tuner.core.workload import Workload
from tuner.search.settings import SearchSettings, make_sampler
from tuner.search.space import SearchSpace

HEARTBEAT_S = 30  # RDB storages: a worker's running trial is failed 2 x this after it died
JOURNAL_FILE = "study.journal"  # the embedded default study in a search's --out folder
LEGACY_DB_FILE = "study.db"  # the SQLite default of earlier versions, still read
JOURNAL_SCHEME = "journal:"


def journal_path(url: str) -> Path | None:
    """The file of a journal storage address, None for a database URL. Accepted:
    ``journal:///abs/path`` (file-URL style), ``journal:PATH``, or a plain path ending in
    ``.journal``."""
    if url.startswith(JOURNAL_SCHEME):
        rest = url[len(JOURNAL_SCHEME):]
        return Path(rest[2:] if rest.startswith("///") else rest)
    if "://" not in url and url.endswith(".journal"):
        return Path(url)
    return None


def journal_url(path: Path) -> str:
    return f"{JOURNAL_SCHEME}//{path.resolve()}"


class _FlockLock:
    """The journal's writer lock: an exclusive flock() on the journal file itself. The kernel
    drops it when its holder dies, so a search killed with SIGKILL mid-write leaves no stale
    lock behind (Optuna's symlink / open-file locks stay until a 30 s grace period forces
    them, and then two writers can overlap)."""

    def __init__(self, path: str) -> None:
        self._path = path
        self._fd: int | None = None

    def acquire(self) -> bool:
        fd = os.open(self._path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        return True

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)  # closing the descriptor releases the flock


def _ends_with_newline(path: Path) -> bool:
    with path.open("rb") as fh:
        size_bytes = fh.seek(0, os.SEEK_END)
        if size_bytes == 0:
            return True
        fh.seek(size_bytes - 1)
        return fh.read(1) == b"\n"


def _trim_torn_tail(path: Path, lock: _FlockLock) -> None:
    """Cut a last log line that a killed writer left without its newline. Optuna skips it on
    reading, but the next append would be glued to it and make that line unreadable for ever.
    Checked read-only first: readers of an intact journal take no lock and need no write
    access."""
    if _ends_with_newline(path):
        return
    lock.acquire()
    try:
        if _ends_with_newline(path):  # a live writer finished its line meanwhile
            return
        with path.open("rb+") as fh:
            size_bytes = fh.seek(0, os.SEEK_END)
            tail_bytes, cut = 0, -1
            while cut < 0 and tail_bytes < size_bytes:  # growing windows back from the end
                tail_bytes = min(size_bytes, max(tail_bytes * 4, 1 << 16))
                fh.seek(size_bytes - tail_bytes)
                cut = fh.read(tail_bytes).rfind(b"\n")
            fh.truncate(size_bytes - tail_bytes + cut + 1)  # cut -1: no complete line at all
    finally:
        lock.release()


def _journal_storage(path: Path) -> optuna.storages.BaseStorage:
    """Optuna's journal storage on one append-only file: a finished trial is one appended
    line (no per-trial database transaction), several local processes share it through the
    lock, and the log is replayed on open (--resume)."""
    lock = _FlockLock(str(path))
    if path.exists():
        _trim_torn_tail(path, lock)
    backend = optuna.storages.journal.JournalFileBackend(str(path), lock_obj=lock)
    return optuna.storages.JournalStorage(backend)


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
    """An Optuna storage for a URL (None: in-memory; a journal address: the journal file,
    created if missing). RDB storages get a heartbeat so a killed worker's running trial is
    marked failed instead of staying RUNNING for ever, and SQLite waits for its lock (several
    local workers) instead of failing at once."""
    if url is None:
        return None
    path = journal_path(url)
    if path is not None:
        try:
            return _journal_storage(path)
        except Exception as exc:  # noqa: BLE001 - missing folder, no access, unreadable log
            raise _storage_error(url, exc) from None
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
            existing = optuna.study.get_all_study_names(
                make_storage(storage) if journal_path(storage) else storage_url(storage))
        except TunerError:
            raise
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


def default_storage(out_dir: Path) -> str:
    """The embedded study `tuner search --out OUT` writes: the journal file OUT/study.journal,
    or, in a folder an earlier version searched into (OUT/study.db and no journal), that SQLite
    study, so --resume continues it and one folder keeps one storage."""
    journal, legacy = out_dir / JOURNAL_FILE, out_dir / LEGACY_DB_FILE
    if legacy.is_file() and not journal.is_file():
        return f"sqlite:///{legacy.resolve()}"
    return journal_url(journal)


def resolve_storage(storage: str | None, out_dir: Path | None = None) -> str:
    """`storage` as given, else the study of the search's --out folder (default tuner-out):
    its study.journal, or the study.db of an earlier version; one of them must exist."""
    if storage:
        return storage
    out_dir = out_dir or Path("tuner-out")
    if not (out_dir / JOURNAL_FILE).is_file() and not (out_dir / LEGACY_DB_FILE).is_file():
        raise TunerError(f"No study database at {out_dir / JOURNAL_FILE}; run `tuner search --out "
                         f"{out_dir}` first, or pass --storage URL.")
    return default_storage(out_dir)


def load_study(study_name: str | None, storage: str | None = None, *,
               out_dir: Path | None = None) -> optuna.Study:
    """An existing study, from a storage URL or from the study of a search's --out folder
    (:func:`resolve_storage`); `study_name` None: the storage's only study. One TunerError line
    when the storage or the name is wrong. The one study loader of the CLI and the workers."""
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    url = resolve_storage(storage, out_dir)
    path = journal_path(url)
    if path is not None and not path.is_file():  # opening would create an empty journal
        raise TunerError(f"No study journal at {path}; run `tuner search` first, or pass the "
                         "right --storage.")
    st = make_storage(url)
    try:
        names = optuna.study.get_all_study_names(st)
    except Exception as exc:  # noqa: BLE001 - storage URLs fail in many driver-specific ways
        raise _storage_error(url, exc) from None
    if study_name is None:
        if len(names) != 1:
            raise TunerError(f"Storage {url} holds {len(names)} studies"
                             + (f" ({', '.join(sorted(names))})" if names else "")
                             + "; pass --study NAME.")
        study_name = names[0]
    if study_name not in names:
        raise TunerError(f"No study {study_name!r} in {url}"
                         + (f"; it has {', '.join(sorted(names))}." if names else
                            "; it holds no study (create it with `tuner search --storage URL "
                            "--study NAME`)."))
    try:
        return optuna.load_study(study_name=study_name, storage=st)
    except Exception as exc:  # noqa: BLE001
        raise TunerError(f"Cannot load study {study_name!r} from {url}: {exc}") from None
