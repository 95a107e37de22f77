"""Reading a job file into a `Workload`: JSONL (one record format per file, see
:mod:`.records`; streamed into numpy columns by :mod:`.jsonl`) and CSV traces, then output
lengths and final checks."""

from __future__ import annotations

import os
import shutil
import stat
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from tuner.core.errors import TunerError
from tuner.core.workload.base import (
    CSV_ARRIVAL_COLUMNS,
    CSV_OUTPUT_COLUMN,
    CSV_PROMPT_COLUMN,
    MAX_ARRIVAL_S,
    MAX_TOKENS,
    RequestColumns,
    Workload,
    one_line,
)
from tuner.core.workload.jsonl import read_jsonl
from tuner.core.workload.lengths import OUTPUT_DIST_EXAMPLE, Sampler, parse_output_dist
from tuner.core.workload.timed import check_span, is_run_file, seconds_from_first, timed_columns

if TYPE_CHECKING:
    from tuner.core.catalog import ModelSpec


#: The workload "path" of a job read from standard input (``--workload -`` or /dev/stdin):
#: what a study stores, so later commands ask for the file again instead of re-reading it.
STDIN_NAME = "<stdin>"


def is_stream(path: str | Path) -> bool:
    """Whether `path` is ``-`` (standard input) or names something that can be read only once:
    a pipe, FIFO, /dev/stdin, /dev/fd/N (``<(cmd)``), a character device."""
    if str(path) == "-":
        return True
    try:
        mode = os.stat(Path(path).expanduser()).st_mode
    except (OSError, ValueError):
        return False
    return not stat.S_ISREG(mode) and not stat.S_ISDIR(mode)


def stream_name(path: str | Path) -> str:
    """How a workload read from `path` is named (STDIN_NAME for standard input)."""
    if str(path) in ("-", "/dev/stdin"):
        return STDIN_NAME
    return str(path)


def _spool(path: Path) -> Path:
    """Copy a stream (``-``: standard input) into a temporary file, read once; the caller
    deletes it. The file keeps the stream's suffix (``.csv``/``.tsv`` pick the CSV reader)."""
    if str(path) == "-":
        if sys.stdin is None or sys.stdin.isatty():
            raise TunerError("--workload -: standard input is a terminal; pipe the workload in "
                             "(e.g. cat jobs.jsonl | tuner ... --workload -).")
        src = sys.stdin.buffer
        suffix = ""
    else:
        try:
            src = path.open("rb")
        except OSError as exc:
            raise TunerError(f"{path}: cannot read ({one_line(exc)}).") from None
        suffix = path.suffix if path.suffix.lower() in _SUFFIXES else ""
    try:
        return _copy_to_temp(src, suffix)
    except OSError as exc:
        raise TunerError(f"{stream_name(path)}: cannot read ({one_line(exc)}).") from None
    finally:
        if src is not getattr(sys.stdin, "buffer", None):
            src.close()


def _copy_to_temp(src, suffix: str) -> Path:
    """Copy the binary stream `src` into a new temporary file (removed again if the copy
    fails); the caller deletes it after reading."""
    fd, name = tempfile.mkstemp(prefix="tuner-workload-", suffix=suffix)
    try:
        with os.fdopen(fd, "wb") as out:
            shutil.copyfileobj(src, out, 1 << 20)
    except BaseException:
        Path(name).unlink(missing_ok=True)
        raise
    return Path(name)


#: The first bytes of a gzip file (RFC 1952): such a workload is decompressed before reading.
GZIP_MAGIC = b"\x1f\x8b"
_SUFFIXES = (".csv", ".tsv", ".jsonl", ".json", ".ndjson")


def _is_gzip(path: Path) -> bool:
    try:
        with path.open("rb") as fh:
            return fh.read(2) == GZIP_MAGIC
    except OSError:
        return False  # the readers word the error


def _gunzip(path: Path, name: str) -> Path:
    """Decompress the gzip file `path` into a temporary file, which the caller deletes; it
    keeps the suffix under ``.gz`` (``jobs.csv.gz``: ``.csv`` picks the CSV reader). Errors
    name the file as `name`; line numbers then count the decompressed text, as zcat shows it."""
    import gzip
    import zlib

    inner = Path(name).with_suffix("").suffix if name.lower().endswith(".gz") else ""
    suffix = inner if inner.lower() in _SUFFIXES else ""
    try:
        with gzip.open(path, "rb") as src:
            return _copy_to_temp(src, suffix)
    except (gzip.BadGzipFile, EOFError, zlib.error) as exc:  # corrupt or cut short
        raise TunerError(f"{name}: not a readable gzip file ({one_line(exc)}).") from None
    except OSError as exc:  # e.g. no space left for the decompressed copy
        raise TunerError(f"{name}: cannot decompress into {tempfile.gettempdir()} "
                         f"({one_line(exc)}).") from None


def _check_file(path: Path) -> None:
    if not path.exists():
        raise TunerError(f"{path}: no such file.")
    if path.is_dir():
        raise TunerError(f"{path}: is a directory; expected a JSONL or CSV workload file.")


def _looks_like_csv(path: Path, name: str | Path | None = None) -> bool:
    if path.suffix.lower() in (".csv", ".tsv"):
        return True
    if path.suffix.lower() in (".jsonl", ".json", ".ndjson"):
        return False
    try:
        with path.open(encoding="utf-8-sig", errors="replace") as fh:
            for line in fh:
                if line.strip():  # a header line (the CSV reader words a missing column)
                    return not line.lstrip().startswith(("{", "[")) and (
                        CSV_PROMPT_COLUMN in line or "," in line)
    except OSError as exc:
        raise TunerError(f"{name or path}: cannot read ({one_line(exc)}).") from None
    return False


#: Rows of a CSV trace converted at a time: only one chunk's strings are held.
CSV_CHUNK_ROWS = 262_144




def _csv_chunk(df, wanted: list[str], arrival: str | None = None
               ) -> tuple[np.ndarray, dict[str, np.ndarray], np.ndarray, tuple[int, str] | None]:
    """(line numbers, columns, bad rows, first bad (line, message)) of one CSV chunk: the
    token columns as int64, the `arrival` column (seconds) as float64."""
    import pandas as pd

    df.columns = [str(c).strip() for c in df.columns]
    lines = df.index.to_numpy(dtype=np.int64) + 2  # header is line 1 (blank lines are dropped)
    bad = np.zeros(len(df), dtype=bool)
    cols: dict[str, np.ndarray] = {}
    first_bad: tuple[int, str] | None = None
    if arrival is not None:
        raw = df[arrival]
        v = pd.to_numeric(raw, errors="coerce").to_numpy(dtype=float)
        ok = np.isfinite(v) & (v >= 0)  # seconds, or Unix time (timed.seconds_from_first)
        if not ok.all():
            i = int(np.flatnonzero(~ok)[0])
            first_bad = (int(lines[i]), f"{arrival} must be a time in seconds >= 0 (or Unix "
                                        f"time), got {raw.iloc[i]!r}")
        bad |= ~ok
        cols[arrival] = np.where(ok, v, 0.0)
    for name in wanted:
        raw = df[name]
        v = pd.to_numeric(raw, errors="coerce").to_numpy(dtype=float)
        ok = np.isfinite(v) & (v >= 1) & (v <= MAX_TOKENS) & (v == np.floor(v))
        if not ok.all():
            i = int(np.flatnonzero(~ok)[0])
            if first_bad is None or lines[i] < first_bad[0]:
                what = (f"at most {MAX_TOKENS:,}" if np.isfinite(v[i]) and v[i] > MAX_TOKENS
                        else "a positive integer")
                first_bad = (int(lines[i]), f"{name} must be {what}, got {raw.iloc[i]!r}")
        bad |= ~ok
        cols[name] = np.where(ok, v, 0).astype(np.int64)
    return lines, cols, bad, first_bad


def _load_csv(path: Path, skip_invalid: bool, need_output: bool,
              name: str | Path | None = None) -> RequestColumns:
    """The columns of a CSV trace at `path` (`name`: how errors name it; default the path)."""
    import pandas as pd

    shown = name or path

    sep = "\t" if path.suffix.lower() == ".tsv" else ","
    try:
        header = pd.read_csv(path, sep=sep, nrows=0, skipinitialspace=True)
        columns = {str(c).strip(): c for c in header.columns}
        wanted = [c for c in (CSV_PROMPT_COLUMN, CSV_OUTPUT_COLUMN) if c in columns]
        arrivals = [c for c in CSV_ARRIVAL_COLUMNS if c in columns]
        if len(arrivals) > 1:
            raise TunerError(f"{shown}: CSV has both {' and '.join(arrivals)}; give one "
                             "arrival column.")
        arrival = arrivals[0] if arrivals else None
        missing = [
            c
            for c in (CSV_PROMPT_COLUMN, CSV_OUTPUT_COLUMN)
            if c not in columns and (c == CSV_PROMPT_COLUMN or need_output)
        ]
        if missing:
            # the Azure LLM inference traces (Splitwise's source) name them otherwise
            azure = ("; an Azure trace's ContextTokens,GeneratedTokens are these columns "
                     "(rename them; TIMESTAMP as arrived_at, seconds)"
                     if {"ContextTokens", "GeneratedTokens"} & set(columns) else "")
            raise TunerError(
                f"{shown}: CSV is missing column(s) {', '.join(missing)} (found: "
                f"{', '.join(columns) or 'none'}); "
                f"expected {CSV_PROMPT_COLUMN},{CSV_OUTPUT_COLUMN}{azure}."
            )
        chunks = []
        used = wanted + ([arrival] if arrival else [])
        with pd.read_csv(path, sep=sep, usecols=[columns[c] for c in used], dtype=str,
                         skipinitialspace=True, keep_default_na=False,
                         chunksize=CSV_CHUNK_ROWS) as reader:
            for df in reader:
                chunks.append(_csv_chunk(df, wanted, arrival))
                if chunks[-1][3] is not None and not skip_invalid:
                    break  # the first bad row is the error
    except pd.errors.EmptyDataError:
        raise TunerError(f"{shown}: no requests (empty file).") from None
    except UnicodeDecodeError as exc:
        raise TunerError(f"{shown}: not UTF-8 text ({exc.reason} at byte {exc.start}).") from None
    except (OSError, ValueError, pd.errors.ParserError) as exc:
        raise TunerError(f"{shown}: not a valid CSV ({one_line(exc)}).") from None

    first_bad = next((c[3] for c in chunks if c[3] is not None), None)
    if first_bad is not None and not skip_invalid:
        raise TunerError(f"{shown}:{first_bad[0]}: {first_bad[1]}")

    def joined(parts: list[np.ndarray], dtype: type) -> np.ndarray:
        return np.concatenate(parts) if parts else np.zeros(0, dtype=dtype)

    keep = ~joined([c[2] for c in chunks], bool)
    cols = {name: joined([c[1][name] for c in chunks], np.int64)[keep] for name in wanted}
    output = cols.get(CSV_OUTPUT_COLUMN, np.full(int(keep.sum()), -1, np.int64))
    arrival_s = None
    lines = joined([c[0] for c in chunks], np.int64)[keep]
    prompt = cols[CSV_PROMPT_COLUMN]
    if arrival is not None:
        # replayed from the first arrival: the makespan runs from it to the last token (Unix
        # time in ms, us or ns converted to seconds, as a run's per-request file is)
        arrival_s, _ = seconds_from_first(joined([c[1][arrival] for c in chunks],
                                                 np.float64)[keep])
        late = arrival_s > MAX_ARRIVAL_S
        if skip_invalid and late.any():  # over a year after the first: bad rows, dropped
            ok = ~late
            lines, prompt, output = lines[ok], prompt[ok], output[ok]
            arrival_s, _ = seconds_from_first(arrival_s[ok])
            keep[np.flatnonzero(keep)[late]] = False
        check_span(shown, arrival_s, lambda i: int(lines[i]))
    return RequestColumns(
        lines,
        prompt,
        output,
        f"{CSV_OUTPUT_COLUMN} column" if CSV_OUTPUT_COLUMN in cols else "",
        None,
        None,
        f"given: {CSV_PROMPT_COLUMN} column (the trace's own tokenizer)",
        int((~keep).sum()),
        arrival_s,
    )


def _drop_bad_prompts(data: RequestColumns, path: Path, skip_invalid: bool) -> None:
    """Checks that need the counted prompt length: an empty prompt, a prefix longer than its
    prompt (dropped with `skip_invalid`, else one error line)."""
    bad = data.prompt < 1
    if data.prefix_tokens is not None:
        bad |= data.prefix_tokens > data.prompt
    if not bad.any():
        return
    i = int(np.flatnonzero(bad)[0])
    if not skip_invalid:
        if data.prompt[i] < 1:
            msg = "empty prompt (0 tokens); every request needs a prompt"
        else:
            msg = (f"prefix_tokens ({data.prefix_tokens[i]}) exceeds the prompt's "
                   f"{data.prompt[i]} tokens")
        raise TunerError(f"{path}:{data.lines[i]}: {msg}")
    keep = ~bad
    data.lines, data.prompt, data.output = data.lines[keep], data.prompt[keep], data.output[keep]
    if data.arrival_s is not None:
        data.arrival_s = data.arrival_s[keep]
    if data.prefix_ids is not None:
        data.prefix_ids, data.prefix_tokens = data.prefix_ids[keep], data.prefix_tokens[keep]
    data.skipped += int(bad.sum())


def _fill_outputs(data: RequestColumns, dist: tuple[str, Sampler] | None, seed: int,
                  path: Path) -> tuple[np.ndarray, str]:
    """(output lengths, where they came from): the file's, and draws from the --output-dist
    `dist` for requests without one."""
    missing = data.output < 0
    n, n_missing = data.output.size, int(missing.sum())
    if not n_missing:
        return data.output, data.output_label
    output = data.output.copy()
    if dist is None:
        line = int(data.lines[np.flatnonzero(missing)[0]])
        raise TunerError(
            f"{path}:{line}: request has no max_tokens/output_tokens and no output-length "
            f"distribution was given; pass --output-dist ({OUTPUT_DIST_EXAMPLE})."
        )
    label, sampler = dist
    output[missing] = sampler(n_missing, np.random.default_rng(seed))
    label = f"{label} (seed {seed})"
    if n_missing == n:
        return output, label
    return output, f"{data.output_label} for {n - n_missing} requests; {label} for {n_missing}"


def _read_file(path: Path, name: str, skip_invalid: bool, tokenizer_path: str | Path | None,
               model: ModelSpec | None, dist: tuple[str, Sampler] | None) -> RequestColumns:
    """The columns of the regular file `path` (`name`: how errors name it)."""
    if is_run_file(path):  # a run's per-request file (tuner replay's): one reader for both
        return timed_columns(path, name, skip_invalid)
    if _looks_like_csv(path, name):
        return _load_csv(path, skip_invalid, need_output=dist is None, name=name)
    return read_jsonl(path, skip_invalid, tokenizer_path, model, name=name)


def load_workload(
    path: str | Path,
    *,
    model: ModelSpec | None = None,
    tokenizer_path: str | Path | None = None,
    skip_invalid: bool = False,
    output_dist: str | None = None,
    seed: int = 0,
) -> Workload:
    """Read a batch-job file into a `Workload` (formats: see the module docstring).

    Prompt lengths: token-count formats and CSV traces give them. For text prompts, the
    Hugging Face ``tokenizers`` library counts them when `tokenizer_path` (a tokenizer.json or
    a directory holding one) is given, or when ``model.source`` is a local model directory (or
    its config.json) next to a tokenizer.json. Otherwise they are estimated as
    ``ceil(characters / 4)`` — the common ~4-characters-per-token rule of thumb for English
    (no tokenizer is downloaded; the tool works offline). Chat messages are counted as
    ``role + "\\n" + content`` plus `CHAT_MESSAGE_OVERHEAD_TOKENS` (4) template tokens per
    message; a bare prompt gets the tokenizer's special tokens (BOS) when a tokenizer is used.

    Output lengths: ``max_tokens`` / ``max_completion_tokens`` (the cap, taken as the actual
    length: a worst case), ``output_tokens`` or the CSV's ``num_decode_tokens``. Requests without
    one draw from `output_dist` (``fixed:N``, ``uniform:LO:HI``, ``normal:MEAN:STD``,
    ``lognormal:MEDIAN:SIGMA``, ``trace:FILE.csv``; see `parse_output_dist`) with `seed`.

    `path` may be ``-`` (standard input) or a pipe, FIFO or /dev/fd/N: such a stream is read
    once, into a temporary file deleted after reading; the workload's source is then
    `STDIN_NAME` for standard input, else the path given. A gzip file or stream (found by its
    first bytes, whatever its name) is read decompressed, the same way.

    Errors raise `TunerError` with a one-line message, ``path:lineno: ...`` when a line is at
    fault. With `skip_invalid`, bad lines are dropped and counted in ``Workload.skipped``.
    ``Workload.tokenizer`` and ``Workload.output_source`` say how the lengths were obtained.
    """
    path = Path(path).expanduser()
    dist = parse_output_dist(output_dist) if output_dist is not None else None
    temps: list[Path] = []  # temporary files to delete after reading
    try:
        if is_stream(path):  # read once: spooled to a temporary file (the readers open it twice)
            name = stream_name(path)
            temps.append(_spool(path))
        else:
            _check_file(path)
            name = str(path)
        src = temps[-1] if temps else path
        if _is_gzip(src):  # jobs.jsonl.gz (or a gzip stream): read decompressed
            temps.append(_gunzip(src, name))
            src = temps[-1]
        data = _read_file(src, name, skip_invalid, tokenizer_path, model, dist)
    finally:
        for tmp in temps:
            tmp.unlink(missing_ok=True)
    path = Path(name)

    _drop_bad_prompts(data, path, skip_invalid)
    n = data.prompt.size
    if n == 0:
        extra = f" ({data.skipped} invalid line(s) skipped)" if data.skipped else ""
        raise TunerError(f"{path}: no requests{extra}.")

    output, output_source = _fill_outputs(data, dist, seed, path)
    if data.prefix_ids is not None and data.prefix_ids.max() < 0:
        data.prefix_ids = data.prefix_tokens = None
    return Workload(
        prompt_tokens=data.prompt.astype(np.int64, copy=False),
        output_tokens=output.astype(np.int64, copy=False),
        prefix_ids=data.prefix_ids,
        prefix_tokens=data.prefix_tokens,
        source=str(path),
        tokenizer=data.tokenizer,
        output_source=output_source,
        skipped=data.skipped,
        arrival_s=data.arrival_s,
    )
