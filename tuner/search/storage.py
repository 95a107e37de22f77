"""Optuna storages and studies: storage URLs (in-memory, a journal file, SQLite, PostgreSQL or
any RDB URL), opening / resuming / loading a study, and the study's metadata from which a worker or
`tuner report` / `tuner export` rebuild the search (:func:`setup_from_study`)."""

from __future__ import annotations

import atexit
import dataclasses
import fcntl
import hashlib
import json
import os
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import optuna

from tuner.core.catalog import GPU, ModelSpec, load_gpus
from tuner.core.errors import TunerError
from tuner.core.interrupts import is_interrupt
from tuner.core.io import sha256_file
from tuner.core.secrets import mask_secrets
from tuner.core.units import plural
from tuner.core.workload import Workload, pack_lengths, unpack_lengths
from tuner.search.meta import STUDY_META_VERSION, StoredSearch, StudyMeta, study_meta
from tuner.search.settings import SearchSettings, make_sampler
from tuner.search.space import SearchSpace, fit_exclusions

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


JOURNAL_SYNC_EVERY_S = 1.0  # a journal's lines reach the disk (fsync) at most this late


class _JournalFile(optuna.storages.journal.JournalFileBackend):
    """Optuna's journal file, each log line written to the file at once, under the lock, as
    Optuna writes it, but flushed to the disk (fsync) at most once every JOURNAL_SYNC_EVERY_S,
    and at the process's exit, rather than after every line: a search appends a line per
    trial, and an fsync each was ~1 s of the README job's ~9 s (319 x 3 ms on a 2-core VM).
    A killed search (SIGKILL included) loses no line: they are in the file (the kernel's page
    cache) when add_trial returns, and --resume reads them; a machine crash or power loss can
    lose the last second's lines, trials --resume then simulates again."""

    def __init__(self, file_path: str, lock_obj) -> None:
        super().__init__(file_path, lock_obj=lock_obj)
        self._synced_at_s = time.monotonic()

    def append_logs(self, logs: list[dict]) -> None:
        text = "\n".join([json.dumps(log, separators=(",", ":")) for log in logs]) + "\n"
        self._lock.acquire()
        try:
            with open(self._file_path, "ab") as fh:
                fh.write(text.encode("utf-8"))
                fh.flush()
                if time.monotonic() - self._synced_at_s >= JOURNAL_SYNC_EVERY_S:
                    os.fsync(fh.fileno())
                    self._synced_at_s = time.monotonic()
                    _UNSYNCED.discard(self._file_path)
                else:
                    _UNSYNCED.add(self._file_path)
        finally:
            self._lock.release()

    def sync(self) -> None:
        """fsync the file now (the lines written since the last one)."""
        _sync_journal(self._file_path)
        self._synced_at_s = time.monotonic()


_UNSYNCED: set[str] = set()  # journal files with lines not fsynced yet (this process's)


def _sync_journal(path: str) -> None:
    _UNSYNCED.discard(path)
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # deleted meanwhile (discard_failed_study): nothing to keep
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@atexit.register
def _sync_journals() -> None:
    for path in sorted(_UNSYNCED):
        try:
            _sync_journal(path)
        except OSError:  # a full or vanished disk at exit: nothing more to do
            pass


def _journal_storage(path: Path) -> optuna.storages.BaseStorage:
    """Optuna's journal storage on one append-only file: a finished trial is one appended
    line (no per-trial database transaction), several local processes share it through the
    lock, and the log is replayed on open (--resume)."""
    lock = _FlockLock(str(path))
    if path.exists():
        _trim_torn_tail(path, lock)
    return optuna.storages.JournalStorage(_JournalFile(str(path), lock))


def storage_url(url: str) -> str:
    """A storage URL with the PostgreSQL driver the `postgres` extra installs spelled out:
    SQLAlchemy 2.1 maps a bare postgresql:// to psycopg 3, tuner[postgres] ships psycopg2."""
    import importlib.util

    for bare in ("postgresql://", "postgres://"):
        if url.startswith(bare) and importlib.util.find_spec("psycopg") is None \
                and importlib.util.find_spec("psycopg2") is not None:
            return "postgresql+psycopg2://" + url[len(bare):]
    return url


def _driver_hint(url: str) -> str:
    """Which package to install for the database driver of `url` (its scheme)."""
    scheme = url.split("://", 1)[0].lower()
    dialect, _, driver = scheme.partition("+")
    if dialect in ("postgresql", "postgres"):
        return "PostgreSQL: pip install 'tuner[postgres]'"
    if dialect in ("mysql", "mariadb"):
        if driver == "pymysql":
            return "MySQL: pip install pymysql"
        if driver in ("", "mysqldb"):
            return (f"MySQL: pip install pymysql and use {dialect}+pymysql://..., or pip install "
                    f"mysqlclient for {scheme}://")
        return f"MySQL: install the {driver} package, or pip install pymysql and use " \
               f"{dialect}+pymysql://..."
    return f"install the Python driver SQLAlchemy uses for {scheme}://"


def _storage_error(url: str, exc: BaseException) -> TunerError:
    """One line for a storage that does not open; the URL's password (and any in the driver's
    message) masked."""
    shown = mask_secrets(url)
    if isinstance(exc, ImportError):
        return TunerError(f"Cannot open storage {shown}: its database driver is not installed "
                          f"({_driver_hint(url)}).")
    return TunerError(f"Cannot open storage {shown}: {mask_secrets(' '.join(str(exc).split()))}")


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
    typed, url = url, storage_url(url)
    _check_sqlite_file(local_file(url), typed)
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
        raise _storage_error(typed, exc) from None  # the URL as the user typed it
    if sqlite:
        _serialize_sqlite(storage.engine)
    return storage


#: the first 16 bytes of every SQLite database file (sqlite.org/fileformat.html, 1.3.1)
SQLITE_HEADER = b"SQLite format 3\x00"


def _check_sqlite_file(path: Path | None, url: str) -> None:
    """Refuse a local file that is not an SQLite database before SQLite opens it: SQLite takes
    a file shorter than its 100-byte header as a new database and writes Optuna's tables into
    it, so a mistyped --storage sqlite:///notes.txt would overwrite the user's file. An empty
    file is a new database, as SQLite has it."""
    if path is None or not path.is_file() or path.stat().st_size == 0:
        return
    try:
        with path.open("rb") as fh:
            head = fh.read(len(SQLITE_HEADER))
    except OSError as exc:
        raise _storage_error(url, exc) from None
    if head != SQLITE_HEADER:
        raise TunerError(f"Cannot open storage {mask_secrets(url)}: {path} is not an SQLite "
                         "database (left as it is); give a new file or an existing study's.")


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


# ---- who holds a study ---------------------------------------------------------------------------
# Every process that runs trials of a study kept in a local file (journal or SQLite) holds a
# flock() on the file's folder while it does (StudyHold): exclusive while it opens the study
# and cleans it up, shared afterwards. A process that gets it exclusively is the only one, and
# the kernel drops the lock of a process that dies (SIGKILL included), so "no other process
# holds the study" is never stale. The lock is per folder: a search of another study in the
# same folder counts as a holder too, which errs towards leaving a trial RUNNING and a study in
# place. A database server (PostgreSQL) has no such lock; there a dead worker's RUNNING trial
# is failed by Optuna's heartbeat (HEARTBEAT_S).
_HELD: dict[str, list] = {}  # folder -> [fd, depth, alone, exclusive], per process


def local_file(url: str | None) -> Path | None:
    """The file of a journal or SQLite storage URL; None for a database server or in-memory."""
    if url is None:
        return None
    path = journal_path(url)
    if path is None and url.startswith("sqlite:///") and url[10:] not in ("", ":memory:"):
        path = Path(url[10:])
    return path


class StudyHold:
    """``with StudyHold(url) as hold``: this process runs trials of the study in `url`.
    ``hold.alone``: True when no other process held it on entry, False when one did, None for a
    database server (unknown). Entered alone, the hold is exclusive (others wait to enter)
    until :meth:`share`: the clean-up of :func:`open_study` runs before anyone joins.
    Re-entrant within a process (the inner hold reports the outer one's `alone`)."""

    def __init__(self, url: str | None) -> None:
        path = local_file(url)
        self._key = str(path.resolve().parent) if path is not None else None
        self._entered = False
        self.alone: bool | None = None

    def __enter__(self) -> StudyHold:
        if self._key is None:
            return self
        entry = _HELD.get(self._key)
        if entry is not None:
            entry[1] += 1
        elif not os.path.isdir(self._key):  # nothing can hold a folder that does not exist
            self.alone = True
            return self
        else:
            fd = os.open(self._key, os.O_RDONLY)
            try:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    entry = [fd, 1, True, True]
                except BlockingIOError:
                    fcntl.flock(fd, fcntl.LOCK_SH)  # waits while another one cleans up
                    entry = [fd, 1, False, False]
            except BaseException:
                os.close(fd)
                raise
            _HELD[self._key] = entry
        self._entered = True
        self.alone = entry[2]
        return self

    def share(self) -> None:
        """Let other processes hold the study too (workers, a concurrent --resume)."""
        entry = _HELD.get(self._key) if self._entered else None
        if entry is not None and entry[3]:
            fcntl.flock(entry[0], fcntl.LOCK_SH)
            entry[3] = False

    def __exit__(self, *exc) -> None:
        if not self._entered:
            return
        self._entered = False
        entry = _HELD[self._key]
        entry[1] -= 1
        if entry[1] == 0:
            del _HELD[self._key]
            os.close(entry[0])  # closing the descriptor drops the lock


def fail_stale_trials(study: optuna.Study, alone: bool | None) -> int:
    """Mark RUNNING trials that nobody runs any more FAIL (they neither count towards
    --n-trials nor block it); returns how many. The rule: in a local file (journal, SQLite)
    every RUNNING trial is stale when no other process holds the study (`alone`, see
    StudyHold); on a database server a trial is stale when its worker's heartbeat stopped 2 x
    HEARTBEAT_S ago (Optuna's fail_stale_trials). An enqueued preset that was running is
    enqueued again, so it is still evaluated."""
    if alone is None:
        before = len(study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.FAIL,)))
        with warnings.catch_warnings():  # "experimental" in Optuna 5
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            optuna.storages.fail_stale_trials(study)
        return len(study.get_trials(deepcopy=False,
                                    states=(optuna.trial.TrialState.FAIL,))) - before
    if not alone:
        return 0
    stale = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,))
    for t in stale:
        study.tell(t.number, state=optuna.trial.TrialState.FAIL)
        fixed = t.system_attrs.get("fixed_params")
        if fixed:
            study.enqueue_trial(fixed)
    return len(stale)


# ---- creating, resuming, replacing a study -------------------------------------------------------
def _differs(old: dict | None, new: dict | None) -> str | None:
    """What makes `new` another search than the study's `old` metadata, or None (both in the
    stored form: a key only one of them has is no difference, as for a study an older version
    wrote)."""
    for key, what in _SAME.items():
        if not (old and new and key in old and key in new):
            continue
        a, b = old[key], new[key]
        if key == "entry_point":  # None: the default entry point
            from tuner.core.engine_defaults import DEFAULT_ENTRY_POINT

            a, b = a or DEFAULT_ENTRY_POINT, b or DEFAULT_ENTRY_POINT
        if a != b:
            if isinstance(a, dict) and isinstance(b, dict):  # name what differs, not the start
                keys = [k for k in dict.fromkeys([*a, *b]) if a.get(k) != b.get(k)]
                # the flag's knob first: --engines moves other knobs' lists (SGLang's defaults
                # join them), and a cut-short listing must still name it
                keys.sort(key=lambda k: k != "engine")
                a = {k: a.get(k) for k in keys}
                b = {k: b.get(k) for k in keys}
            return f"another {what} ({_short(a)} vs now {_short(b)})"
    return None


def _new_study_hint(url: str) -> str:
    path = journal_path(url) or local_file(url)
    if path is not None and path.name in (JOURNAL_FILE, LEGACY_DB_FILE):
        return f"--out DIR or --study NAME, or delete {path} to start over"
    if path is not None:
        return f"--storage URL or --study NAME, or delete {path} to start over"
    return ("--study NAME, or delete it (optuna delete-study --storage URL "
            "--study-name NAME)")


def _drop_study(storage, url: str, name: str, names: list[str]) -> bool:
    """Remove study `name` (it has no result and no other process holds it). A journal file
    holding only that study is deleted whole (True: `storage` is stale, make a new one)."""
    path = journal_path(url)
    if path is not None and names == [name]:
        path.unlink(missing_ok=True)
        return True
    optuna.delete_study(study_name=name, storage=storage)
    return False


def _n_results(study: optuna.Study) -> int:
    """How many finished trials of `study` are results: a feasible plan that meets the study's
    own --deadline / --budget, simulated on the full workload or estimated from its sample (an
    interrupted large search may hold only estimates: --resume continues from them). A study
    with none (e.g. every plan missed `--deadline 1s`: "no plan finishes within 1 s") holds
    nothing worth keeping; the rerun with another constraint replaces it instead of being
    refused."""
    done = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    try:
        limits = study_meta(study).constraints
    except Exception:  # noqa: BLE001 - unreadable metadata: count feasible plans only
        limits = None
    n = 0
    for t in done:
        if not t.user_attrs.get("feasible"):
            continue
        if limits is not None and limits.on_figures and t.values is not None \
                and not limits.meets(*t.values[:2]):
            continue
        n += 1
    return n


def _settle_existing(settings: SearchSettings, storage, alone: bool | None,
                     metadata: StudyMeta | None):
    """Decide what happens to an existing study of this name before the search opens it:
    resume it (failing its stale RUNNING trials), replace it (no feasible result and no other
    process holds it: a failed, refused or killed run left it), or refuse with one line that
    says exactly what to pass. Returns the storage to open."""
    url, name = settings.storage, settings.study_name
    shown = mask_secrets(url)
    try:
        names = optuna.study.get_all_study_names(storage)
    except Exception as exc:  # noqa: BLE001 - storage URLs fail in many driver-specific ways
        raise _storage_error(url, exc) from None
    if name not in names:
        if settings.resume and names:  # e.g. another -m: another default study name
            raise TunerError(
                f"--resume: {shown} holds no study {name!r} (it holds "
                f"{', '.join(repr(n) for n in sorted(names))}); pass --study NAME to resume one "
                f"of those, or a new --out to start {name!r}.")
        return storage
    study = optuna.load_study(study_name=name, storage=storage)
    differs = _differs(study.user_attrs.get("metadata"),
                       metadata.to_dict() if metadata is not None else None)
    changed = None if differs else _inputs_changed(
        study.user_attrs.get("metadata"), metadata.to_dict() if metadata is not None else None)
    if settings.resume and not differs and not changed:
        fail_stale_trials(study, alone)
        return storage
    done = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    n_feasible = sum(1 for t in done if t.user_attrs.get("feasible"))
    if alone and _n_results(study) == 0 and local_file(url) is not None:
        # nothing in it worth keeping
        return make_storage(url) if _drop_study(storage, url, name, names) else storage
    if changed and settings.resume:  # trials priced with the old inputs would mix in
        raise TunerError(f"Study {name!r} was searched with {changed[0]}; rerun without "
                         f"--resume in a new --out (or --study NAME), or {changed[1]}.")
    if alone is False:
        raise TunerError(
            f"Study {name!r} in {shown} is being searched by another process right now; "
            + (f"it was searched with {differs}; start a new one with "
               if differs else "pass --resume to join it (--n-trials is their total), or "
               "start a new one with ") + _new_study_hint(url) + ".")
    have = f"{plural(len(done), 'finished trial')}, {n_feasible} feasible"
    if differs:
        raise TunerError(f"Study {name!r} in {shown} was searched with {differs} and has {have}; "
                         f"start a new one with {_new_study_hint(url)}.")
    raise TunerError(f"Study {name!r} already exists in {shown} with {have}; pass --resume to "
                     f"continue it, or start a new one with {_new_study_hint(url)}.")


def check_study_settings(settings: SearchSettings,
                         metadata: StudyMeta | None = None) -> str | None:
    """Fail early (before any progress output) on a bad sampler, an unreachable storage, or a
    study of this name that the search may not reuse (see _settle_existing; `metadata`: the
    search's, to refuse --resume of another search before the progress output). Returns the
    line to show when --resume continues the study with another sampler or seed
    (:func:`resume_sampler_note`), else None."""
    make_sampler(settings)
    url = settings.storage
    if url is None:
        return None
    file = local_file(url)
    if file is not None and not file.exists() and file.parent.is_dir():
        return None  # no file, no study (and none created by looking)
    with StudyHold(url) as hold:
        storage = make_storage(url) if journal_path(url) else storage_url(url)
        storage = _settle_existing(settings, storage, hold.alone, metadata)
        if not settings.resume or metadata is None:
            return None
        try:
            study = optuna.load_study(study_name=settings.study_name, storage=storage)
        except KeyError:  # no study of this name yet (or a result-less one was dropped)
            return None
        return resume_sampler_note(study, metadata.to_dict())


def _sampler_switch(old: dict | None, new: dict | None) -> tuple[StoredSearch,
                                                                 StoredSearch] | None:
    """(before, now) when the stored-form metadata `new` goes on with `old`'s study under
    another sampler or seed (what --sampler auto picks depends on --n-trials), else None."""
    if not (old and new and isinstance(old.get("search"), dict) and "search" in new):
        return None  # a study an older version wrote without its sampler: nothing to compare
    before, now = StoredSearch.from_dict(old["search"]), StoredSearch.from_dict(new["search"])
    return None if before.proposes_as(now) else (before, now)


def resume_sampler_note(study: optuna.Study, new: dict) -> str | None:
    """One line when a --resume goes on under another sampler or seed than the study ran with
    (`new`: this search's stored-form metadata). Optuna lets a study change samplers (e.g. random
    first, then TPE), so it is no error; but the trials from here on are not those either
    setting would have proposed alone, which a user re-running for the same answer must know."""
    switch = _sampler_switch(study.user_attrs.get("metadata"), new)
    if switch is None:
        return None
    before, now = switch
    n = len(study.get_trials(deepcopy=False))
    return (f"--resume: study {study.study_name!r} ran {plural(n, 'trial')} with "
            f"{before.describe()}; it continues with {now.describe()} (stored for its workers "
            "and outputs). The trials from here on will not repeat the earlier run's order, nor "
            "what one run with either setting would propose.")


def open_study(settings: SearchSettings, *, metadata: StudyMeta | None = None,
               workload_tokens: dict | None = None) -> optuna.Study:
    """Create the study, or load it with --resume (its stale RUNNING trials failed first);
    replaces a study of this name that holds no result; refuses to silently mix two
    searches. Call it inside the StudyHold of the search (it lets other processes in when
    done)."""
    # ERROR: on Ctrl-C Optuna would log the interrupted trial with a traceback at WARNING.
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    sampler = make_sampler(settings)  # a bad --sampler fails before the storage is touched
    with StudyHold(settings.storage) as hold:
        storage = make_storage(settings.storage)
        if storage is not None:
            storage = _settle_existing(settings, storage, hold.alone, metadata)
        try:
            study = optuna.create_study(
                study_name=settings.study_name, storage=storage,
                directions=["minimize", "minimize"], sampler=sampler,
                load_if_exists=settings.resume)
        except Exception as exc:  # noqa: BLE001
            raise TunerError(f"Cannot create study in {mask_secrets(settings.storage)}: "
                             f"{mask_secrets(str(exc))}") from None
        old = study.user_attrs.get("metadata")  # the stored form, as the study holds it
        new = metadata.to_dict() if metadata is not None else None
        if new and not old:
            if workload_tokens is not None:
                study.set_user_attr("workload_tokens", workload_tokens)
            study.set_user_attr("metadata", new)  # last: a worker waits for it
        elif new and old and old.get("search") != new["search"]:
            # e.g. more --n-trials: workers follow (the rest as the study stored it); another
            # sampler or seed is the one stored from now on, the one it replaces kept in
            # earlier_searches with the trial it stopped at (sampler_history)
            updated = {**old, "search": new["search"]}
            if _sampler_switch(old, new) is not None:
                updated["earlier_searches"] = [
                    *(old.get("earlier_searches") or []),
                    {**old["search"], "until_trial": len(study.get_trials(deepcopy=False))}]
            study.set_user_attr("metadata", updated)
        hold.share()
    return study


def discard_failed_study(settings: SearchSettings, exc: BaseException) -> bool:
    """After a search failed with `exc`: remove its study when it holds no result (no feasible
    plan, or none within its --deadline / --budget: _n_results) and no other process holds it, so the corrected rerun is not refused ("already exists")
    nor misled on --resume ("another workload"); True when removed. Kept: a study with
    results (the rerun's message says to pass --resume) and an interrupted one (Ctrl-C:
    --resume continues it)."""
    if is_interrupt(exc) or settings.storage is None:
        return False
    url, name = settings.storage, settings.study_name
    path = local_file(url)
    if path is None or not path.is_file():
        return False
    try:
        with StudyHold(url) as hold:
            if not hold.alone:
                return False
            storage = make_storage(url)
            names = optuna.study.get_all_study_names(storage)
            if name not in names:
                return False
            study = optuna.load_study(study_name=name, storage=storage)
            if _n_results(study):  # results within its --deadline / --budget: kept
                return False
            _drop_study(storage, url, name, names)
            return True
    except Exception:  # noqa: BLE001 - the search's own error is the one to report
        return False


_SAME = {"workload_sha256": "workload", "model": "model", "gpus": "GPU types",
         "knobs": "search space", "fixed": "fixed knobs", "prices": "GPU prices",
         "constraints": "--deadline/--budget/--max-gpus/--quantized-model",
         "startup_s": "--startup-s", "entry_point": "--entry-point",
         # the outputs' expected spot figures use the study's rate
         "interruption_rate_per_h": "--interruption-rate"}


def _short(v) -> str:
    text = str(v)
    return text if len(text) <= 120 else text[:117] + "..."


# ---- the study's metadata: everything a worker or `tuner results` needs ------------------------
def workload_digest(w: Workload) -> str:
    h = hashlib.sha256()
    for a in (w.prompt_tokens, w.output_tokens, w.prefix_ids, w.prefix_tokens):
        h.update(b"-" if a is None else np.ascontiguousarray(a, dtype=np.int64).tobytes())
    return h.hexdigest()


def workload_tokens(w: Workload) -> dict:
    """The workload's token counts, packed (stored in the study: a worker on another machine
    simulates exactly these requests, whatever tokenizer it has; a few bytes per request, where
    JSON lists cost ~40 bytes per request in every process that reads the study)."""
    return {"prompt_tokens": pack_lengths(w.prompt_tokens),
            "output_tokens": pack_lengths(w.output_tokens),
            "prefix_ids": pack_lengths(w.prefix_ids), "prefix_tokens": pack_lengths(w.prefix_tokens)}


#: GPU fields that only price a trial (checked as "prices" on --resume), left out of its digest
_PRICE_FIELDS = frozenset({"price_usd_per_h", "price_source", "price_date", "notes"})


def _sha(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()


def _gpu_fields(spec: dict) -> dict:
    return {k: v for k, v in spec.items() if k not in _PRICE_FIELDS}


def _unlabelled(spec: dict | None) -> dict:
    """A GPU's digested fields less its billing's source and date: words about where the
    prices come from (e.g. the spot prices' label, reworded since) change no trial's figure,
    so a study searched before such a rewording still resumes."""
    out = _gpu_fields(spec or {})
    if isinstance(out.get("billing"), dict):
        out["billing"] = {k: v for k, v in out["billing"].items() if k not in ("source", "date")}
        # and each instance's (its price's row; its network figure's words, not the figure)
        words = ("source", "date", "network_label", "network_source")
        for key in ("instances", "not_on_demand"):
            if isinstance(out["billing"].get(key), list | tuple):
                out["billing"][key] = [
                    {k: v for k, v in i.items() if k not in words}
                    if isinstance(i, dict) else i for i in out["billing"][key]]
    return out


def _cost_source(meta: StudyMeta) -> dict:
    d = {"profile": meta.profile, "profile_mode": meta.profile_mode or "auto",
         "engine_version": meta.engine_version}
    # the engine-overhead profile follows the entry point under an older engine and the
    # scheduler steps (predictors.engine_overhead.profile_for); keys only where they can
    # matter, so a study from before them keeps its digest
    if meta.engine_version is not None:
        d["entry_point"] = meta.entry_point or "llm"
    if meta.num_scheduler_steps is not None:
        d["num_scheduler_steps"] = meta.num_scheduler_steps
    if meta.disable_log_requests:
        d["disable_log_requests"] = True
    return d


def input_digests(meta: StudyMeta) -> dict:
    """Digests of everything a trial's figures depend on besides the workload, the space and
    the prices (checked on their own): each GPU's specs, the model shape, the cost-model source
    (--profile folder, --profile-mode, --engine-version and, under an older engine,
    --entry-point and --num-scheduler-steps) and the start-up override."""
    return {"gpus": {n: _sha(_gpu_fields(d)) for n, d in meta.gpu_specs.items()},
            "model": _sha(meta.model_spec), "cost_model": _sha(_cost_source(meta)),
            "startup": _sha(meta.startup_s)}


def file_digest(path: str | Path) -> str | None:
    """sha256 of a regular file's bytes; None for a stream, a label or a missing file."""
    try:
        return sha256_file(path) if path and Path(path).is_file() else None
    except OSError:
        return None


def _changes(old: dict, new: dict) -> str:
    keys = [k for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k)]
    shown = ", ".join(f"{k} {_short(old.get(k))} -> {_short(new.get(k))}" for k in keys[:3])
    return shown + (f", +{len(keys) - 3} more" if len(keys) > 3 else "")


def _inputs_changed(old: dict | None, new: dict | None) -> str | None:
    """What of the digested inputs (:func:`input_digests`) differs between the study's stored
    metadata `old` and this search's `new`, or None (also for a study without digests)."""
    if not old or not new or not isinstance(old.get("digests"), dict) \
            or not isinstance(new.get("digests"), dict):
        return None
    a, b = StudyMeta.from_dict(old), StudyMeta.from_dict(new)
    da, db = a.digests, b.digests
    for g, dg in (da.get("gpus") or {}).items():
        if g in (db.get("gpus") or {}) and db["gpus"][g] != dg \
                and _sha(_unlabelled(a.gpu_specs.get(g))) \
                != _sha(_unlabelled(b.gpu_specs.get(g))):
            what = _changes(_gpu_fields(a.gpu_specs.get(g) or {}),
                            _gpu_fields(b.gpu_specs.get(g) or {}))
            return (f"other GPU specs for {g} ({what})", "restore the GPU file")
    if da.get("model") != db.get("model"):
        return (f"another model shape ({_changes(a.model_spec or {}, b.model_spec or {})})",
                "restore the model's config")
    if da.get("cost_model") != db.get("cost_model"):
        return (f"another cost model ({_changes(_cost_source(a), _cost_source(b))})",
                "pass the search's --profile, --profile-mode, --engine-version, "
                "--entry-point, --num-scheduler-steps and --disable-log-requests")
    if da.get("startup") != db.get("startup"):
        return (f"another --startup-s ({a.startup_s} -> {b.startup_s})",
                "pass the search's --startup-s")
    return None


def study_metadata(workload: Workload, model: ModelSpec, gpus: dict[str, GPU],
                   space: SearchSpace, settings: SearchSettings,
                   extra: dict | None = None) -> StudyMeta:
    """The study's metadata record (stored as the ``metadata`` user attribute by
    :func:`open_study`): the search's inputs, with `extra` (the CLI's keys: the workload file's
    path and loading options, --profile, --entry-point ...; see :class:`StudyMeta`) over them,
    plus the digests of what the trials' figures depend on (:func:`input_digests`) and of the
    workload file's bytes."""
    meta = _study_metadata(workload, model, gpus, space, settings, extra)
    return dataclasses.replace(meta, digests=input_digests(meta),
                               workload_file_sha256=file_digest(meta.workload))


def _study_metadata(workload: Workload, model: ModelSpec, gpus: dict[str, GPU],
                    space: SearchSpace, settings: SearchSettings,
                    extra: dict | None = None) -> StudyMeta:
    return StudyMeta.from_dict({
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
        "search": StoredSearch.from_settings(settings).to_dict(),
        "constraints": settings.constraints.to_dict(),  # tuner.search.constraints
        "version": STUDY_META_VERSION,
        **(extra or {}),
    })


@dataclass
class StudySetup:
    """What a search needs, rebuilt from a study's metadata (:func:`setup_from_study`)."""

    workload: Workload | None  # None: not asked for (need_workload=False)
    model: ModelSpec
    gpus: dict[str, GPU]
    space: SearchSpace
    settings: SearchSettings
    meta: StudyMeta


def stored_model(meta: StudyMeta) -> ModelSpec:
    """The study's ModelSpec: the one it stored (its checkpoint, the model the user named,
    included), or for a study older than that (or written by another tuner version), its model
    name looked up again in the catalog."""
    if meta.model_spec is not None:
        try:
            return ModelSpec(**meta.model_spec)
        except TypeError:  # written by another tuner version: look the name up again
            pass
    from tuner.core.catalog import get_model

    return get_model(meta.model)


def _catalog_gpus(meta: StudyMeta, gpu_file: str | Path | None, study_name: str) -> dict[str, GPU]:
    """The study's GPUs from the catalogs (`gpu_file`, else the search's --gpu-file), priced as
    the search priced them (its --provider billing, then its prices where they differ)."""
    from tuner.core.catalog import apply_prices, load_gpus

    cat = load_gpus(gpu_file or meta.gpu_file)
    if meta.provider:  # the search priced by a provider's instances and billing
        from tuner.core.pricing import apply_provider, get_provider, load_providers

        cat = apply_provider(cat, get_provider(meta.provider, load_providers(
            gpu_file or meta.gpu_file)), spot=meta.spot)
    # the search's prices; only those that differ from the catalog count as overrides
    prices = {k: float(v) for k, v in meta.prices.items()
              if k in cat and abs(float(v) - cat[k].price_usd_per_h) > 1e-9}
    cat = apply_prices(cat, prices)
    missing = [g for g in meta.gpus if g not in cat]
    if missing:
        raise TunerError(f"GPU(s) {', '.join(missing)} of study {study_name!r} are not in the "
                         "GPU catalog; pass the --gpu-file the search used.")
    return {g: cat[g] for g in meta.gpus}


def study_workload(meta: StudyMeta, model: ModelSpec, workload_path: str | Path | None = None,
                   *, study_name: str | None = None) -> Workload:
    """The study's workload file (or `workload_path`, e.g. --workload), loaded as the search
    loaded it (--skip-invalid, --output-dist, --on-too-long skip) and checked against the
    token counts the study searched."""
    from tuner.core.workload import STDIN_NAME, drop_too_long, load_workload

    of = f"study {study_name!r}" if study_name else "the study"
    path = workload_path or meta.workload
    if not path:
        raise TunerError(f"{of[0].upper()}{of[1:]} does not record its workload; pass "
                         "--workload FILE.")
    if str(path) == STDIN_NAME:
        raise TunerError(f"{of[0].upper()}{of[1:]} read its workload from standard input; "
                         "give it again with --workload FILE.")
    if not Path(path).is_file():
        raise TunerError(f"Workload {path} of {of} is not stored in the study nor on this "
                         "machine; pass --workload FILE.")
    w = load_workload(Path(path), model=model, skip_invalid=meta.skip_invalid,
                      output_dist=meta.output_dist).offline()  # the search ignored arrivals
    if meta.skips_too_long:  # the search left these out (--on-too-long skip)
        w = drop_too_long(w, model.max_position)[0]
    want = meta.workload_sha256
    if want and workload_digest(w) != want:
        if workload_path is not None:  # another file than the study's
            raise TunerError(f"Workload {path} does not match the one {of} searched ({len(w)} "
                             f"vs {meta.workload_requests} requests, or other token counts); "
                             "pass --workload with the file it searched.")
        # exports would size max-model-len on another job, workers simulate another one
        raise TunerError(_changed_since(path, meta, f"{meta.workload_requests} requests then, "
                                                    f"{len(w)} now" + (
                                                        ", other token counts"
                                                        if len(w) == meta.workload_requests
                                                        else "")))
    return w


def _changed_since(path, meta: StudyMeta, how: str) -> str:
    return (f"{path} has changed since the search ({how}); search again, or pass --workload "
            "with the file as it was.")


def check_workload_file(meta: StudyMeta, model: ModelSpec, study_name: str) -> None:
    """Refuse (one line naming the file) when the workload file a study stores as its workload
    is still there but no longer holds the requests the study searched: its exports, report and
    results would be sized and priced on the old ones. Nothing to check for a study that read
    standard input or whose file is gone (its stored token counts are used). Cheap when the
    file's bytes are unchanged (:attr:`StudyMeta.workload_file_sha256`); else the file is loaded
    as the search loaded it and its token counts compared."""
    from tuner.core.workload import STDIN_NAME

    path = meta.workload
    if not path or path == STDIN_NAME or not meta.workload_sha256 or not Path(path).is_file():
        return
    if meta.workload_file_sha256 and file_digest(path) == meta.workload_file_sha256:
        return
    try:
        study_workload(meta, model, study_name=study_name)
    except TunerError as exc:
        if "has changed since the search" in str(exc):
            raise
        if meta.workload_file_sha256:  # other bytes, and they no longer load
            raise TunerError(_changed_since(path, meta, f"{meta.workload_requests} requests "
                                            f"then; it no longer loads: {exc}")) from None
        # a study older than the file digest whose file cannot be re-read here (e.g. no
        # tokenizer): its stored token counts, as before


def _stored_workload(study: optuna.Study, meta: StudyMeta, tokens: dict) -> Workload:
    """The workload whose token counts the study stores (:func:`workload_tokens`)."""
    def arr(k):
        try:
            return unpack_lengths(tokens.get(k))  # packed, or a list (older studies)
        except (ValueError, TypeError, KeyError) as exc:
            raise TunerError(f"Study {study.study_name!r}: stored workload {k} unreadable "
                             f"({exc}); pass --workload FILE.") from None

    return Workload(prompt_tokens=arr("prompt_tokens"), output_tokens=arr("output_tokens"),
                    prefix_ids=arr("prefix_ids"), prefix_tokens=arr("prefix_tokens"),
                    source=meta.workload, tokenizer=meta.tokenizer,
                    output_source=meta.output_source or "")


def _with_catalog_architecture(name: str, spec: dict) -> dict:
    """A GPU's stored specs; a study stored before GPUs stated their architecture gets the
    shipped catalog's (same name), so its transferred kernel tables price it as they did."""
    if spec.get("architecture") is not None or "architecture" in spec:
        return spec
    shipped = load_gpus().get(name)
    return {**spec, "architecture": shipped.architecture} if shipped is not None else spec


def setup_from_study(study: optuna.Study, *, workload_path: str | Path | None = None,
                     gpu_file: str | Path | None = None, need_workload: bool = True,
                     from_catalogs: bool = False) -> StudySetup:
    """Workload, model, GPUs (with the search's prices), space and settings of a study written
    by :func:`run_search`: the one rebuild of a search from its study (workers, `tuner
    results`, `tuner report`, `tuner export`, `tuner validate`).

    A study whose metadata is complete (:attr:`StudyMeta.complete`) is rebuilt from the study
    alone (the workload from its stored token counts unless `workload_path` is given); else,
    or with `gpu_file`, only when `from_catalogs` allows it: the model and GPUs from the
    catalogs (`gpu_file`, else the search's), the workload from its file (None without
    `need_workload`). Raises TunerError when the study holds no such metadata."""
    meta = study_meta(study)
    name = study.study_name
    tokens = study.user_attrs.get("workload_tokens")
    own = meta.complete and gpu_file is None and (need_workload or bool(tokens))
    if not own and not from_catalogs:
        raise TunerError(f"Study {name!r} has no complete search metadata (model, GPUs, "
                         "knobs); it was not written by this version of `tuner search`.")
    if not meta.has_search:
        raise TunerError(f"Study {name!r} has no search metadata (model, GPUs); it was not "
                         "written by `tuner search`.")
    if own:
        model = ModelSpec(**meta.model_spec)
        try:
            gpus = {n: GPU(**_with_catalog_architecture(n, d))
                    for n, d in meta.gpu_specs.items()}
        except TypeError as exc:
            raise TunerError(f"Study {name!r}: GPU specs written by another tuner version "
                             f"({exc}).") from None
        if workload_path is not None or not tokens:
            w = study_workload(meta, model, workload_path, study_name=name)
        else:
            check_workload_file(meta, model, name)
            w = _stored_workload(study, meta, tokens)
            want = meta.workload_sha256
            if want and workload_digest(w) != want:
                raise TunerError(f"Study {name!r}: its stored workload does not match the one "
                                 "it searched; pass --workload FILE.")
    else:
        model = stored_model(meta)
        gpus = _catalog_gpus(meta, gpu_file, name)
        w = study_workload(meta, model, workload_path, study_name=name) if need_workload \
            else None
    # the exclusions the search derived when it fitted the space (values an engine refuses
    # for this job), derived again from the same inputs: the study stores the knobs only
    space = fit_exclusions(SearchSpace(knobs=dict(meta.knobs or {}), fixed=dict(meta.fixed),
                                       source=meta.space),
                           model=model, engine_version=meta.engine_version, workload=w,
                           num_scheduler_steps=meta.num_scheduler_steps)
    s = meta.search
    settings = SearchSettings(n_trials=s.n_trials, timeout_s=s.timeout_s, seed=s.seed,
                              sampler=s.sampler, study_name=name, resume=True,
                              exhaustive=s.exhaustive, sample_fraction=s.sample_fraction,
                              constraints=meta.constraints)
    return StudySetup(workload=w, model=model, gpus=gpus, space=space, settings=settings,
                      meta=meta)


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
    file = local_file(url)
    if file is not None and not file.is_file():  # opening would create an empty SQLite file
        st, names = None, []
    else:
        st = make_storage(url)
        try:
            names = optuna.study.get_all_study_names(st)
        except Exception as exc:  # noqa: BLE001 - storage URLs fail in many driver-specific ways
            raise _storage_error(url, exc) from None
    if study_name is None:
        if len(names) != 1:
            raise TunerError(f"Storage {mask_secrets(url)} holds {len(names)} studies"
                             + (f" ({', '.join(sorted(names))})" if names else "")
                             + "; pass --study NAME.")
        study_name = names[0]
    if study_name not in names:
        raise TunerError(f"No study {study_name!r} in {mask_secrets(url)}"
                         + (f"; it has {', '.join(sorted(names))}." if names else
                            "; it holds no study (create it with `tuner search --storage URL "
                            "--study NAME`)."))
    try:
        return optuna.load_study(study_name=study_name, storage=st)
    except Exception as exc:  # noqa: BLE001
        raise TunerError(f"Cannot load study {study_name!r} from {mask_secrets(url)}: "
                         f"{mask_secrets(str(exc))}") from None
