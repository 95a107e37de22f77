"""Per-request files of a run: one row per request with its token counts and times (when it
arrived, when its last token came), as a CSV, a JSONL or a JSON array of objects, the first
column name found of each kind wins (PROMPT_KEYS, OUTPUT_KEYS, ARRIVAL_KEYS, FINISH_KEYS).

The one reader of these files: `tuner replay` compares a run with its prediction
(`parse_rows` with the finish times), and `tuner simulate` / `tuner search` read one as a
workload (`timed_columns`: the lengths, and the arrivals where the file has them). Times are
seconds from any origin, or Unix time; Unix time in milliseconds, microseconds or nanoseconds
is converted by the scale of the earliest arrival (`epoch_unit`), and every time is then taken
from the first arrival (`seconds_from_first`, which the job formats' arrival columns share).
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tuner.core.errors import TunerError
from tuner.core.workload.base import (
    CSV_ARRIVAL_COLUMNS,
    CSV_OUTPUT_COLUMN,
    CSV_PROMPT_COLUMN,
    MAX_ARRIVAL_S,
    MAX_TOKENS,
    RequestColumns,
    one_line,
)

#: per-request file columns, first match wins: (prompt tokens, output tokens, arrival, finish)
PROMPT_KEYS = ("prompt_tokens", "input_toks", "input_len", "num_prefill_tokens")
OUTPUT_KEYS = ("output_tokens", "output_toks", "output_len", "num_decode_tokens")
ARRIVAL_KEYS = ("arrival_s", "arrived_at", "queued_ts", "sent_s", "start_s")
FINISH_KEYS = ("finished_s", "completed_at", "last_token_ts", "end_s", "finish_s")
#: a per-request file's times are seconds; Unix time past these is in ms, us or ns (1e11 s is
#: the year 5138, and 1e11 ms 1973), converted by the scale of the earliest time
EPOCH_UNITS = ((1e17, 1e9, "nanoseconds"), (1e14, 1e6, "microseconds"),
               (1e11, 1e3, "milliseconds"))
#: the longest span a per-request file may cover (simulate's cap on arrivals: a year)
MAX_SPAN_S = MAX_ARRIVAL_S
#: a bench result's summary fields: a JSON object with `duration` and one of these is one
BENCH_SUMMARY_KEYS = ("completed", "request_throughput", "output_throughput",
                      "total_input_tokens")


def _fail(name: str | Path, msg: str) -> TunerError:
    return TunerError(f"{name}: {msg}")


def is_bench_result(obj: dict) -> bool:
    """`obj` is a `vllm bench serve` result (its summary fields), not one request."""
    return "input_lens" in obj or ("duration" in obj and any(k in obj
                                                              for k in BENCH_SUMMARY_KEYS))


def epoch_unit(earliest: float) -> tuple[float, str] | None:
    """(units per second, name) where `earliest` is Unix time in a unit finer than seconds;
    None where it is seconds (of any origin)."""
    for above, per_s, unit in EPOCH_UNITS:
        if earliest >= above:
            return per_s, unit
    return None


def seconds_from_first(arrival: np.ndarray) -> tuple[np.ndarray, str]:
    """Arrival times as seconds after the first arrival (Unix time in ms, us or ns converted
    first), and what was converted ('' where nothing was)."""
    if not arrival.size:
        return arrival, ""
    earliest = float(arrival.min())
    unit = epoch_unit(earliest)
    if unit is not None:
        arrival = arrival / unit[0]
    note = "" if unit is None else (f"arrival times read as Unix time in {unit[1]} (from "
                                    f"{earliest:.4g}) and converted to seconds")
    return arrival - float(arrival.min()), note


def check_span(name: str | Path, arrival_s: np.ndarray, where) -> None:
    """A TunerError naming the latest arrival (`where(i)`: how the file numbers request i)
    where the arrivals span over MAX_SPAN_S: the times are not seconds (nor Unix time)."""
    if arrival_s.size and float(arrival_s.max()) > MAX_SPAN_S:
        i, j = int(np.argmax(arrival_s)), int(np.argmin(arrival_s))
        raise TunerError(f"{name}:{where(i)}: arrives {float(arrival_s[i]):,.0f} s after the "
                         f"first request ({where(j)}), over a year (at most {MAX_SPAN_S:,.0f} s): "
                         "arrival times are read as "
                         "seconds (or Unix time in s, ms, us or ns); convert them.")


# ---- the file's rows ----------------------------------------------------------------------
def rows_of_array(name: str | Path, doc: list) -> list[dict]:
    """The requests of a JSON array of per-request objects."""
    bad = next((i for i, r in enumerate(doc) if not isinstance(r, dict)), None)
    if bad is not None:
        raise _fail(name, f"item {bad + 1} of the JSON array is not an object: expected "
                          "one object per request.")
    if doc and is_bench_result(doc[0]):
        raise _fail(name, f"a JSON array of {len(doc)} `vllm bench serve` results: one run at "
                          "a time; give each its own file.")
    return doc


def rows_of_jsonl(name: str | Path, text: str) -> tuple[list[dict], list[int]]:
    """(rows, their line numbers) of a JSONL file, one object a line."""
    rows, lines = [], []
    for i, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise _fail(name, f"line {i}: not JSON ({exc.msg}).") from None
        if not isinstance(obj, dict):
            raise _fail(name, f"line {i}: expected a JSON object per request.")
        if is_bench_result(obj):  # --append-result: one run a line
            raise _fail(name, f"line {i} is a whole `vllm bench serve` result (results "
                              "appended with --append-result?): one run at a time; give each its "
                              "own file.")
        rows.append(obj)
        lines.append(i)
    return rows, lines


def rows_of_csv(text: str, sep: str = ",") -> tuple[list[dict], list[int]]:
    """(rows, their line numbers) of a CSV with a header line."""
    reader = csv.DictReader(text.splitlines(), delimiter=sep)
    rows, lines = [], []
    for r in reader:
        rows.append({(k or "").strip(): v for k, v in r.items()})
        lines.append(reader.line_num)  # the header is line 1
    return rows, lines


def read_rows(path: Path, name: str | Path | None = None
              ) -> tuple[list[dict], list[int] | None]:
    """(rows, line numbers; None for a JSON array, whose requests are numbered) of a
    per-request file: a JSON array, a JSONL or a CSV (a .tsv: tab-separated)."""
    name = path if name is None else name
    try:
        text = path.read_text(encoding="utf-8-sig", errors="replace")
    except OSError as exc:
        raise _fail(name, f"cannot read ({one_line(exc)}).") from None
    stripped = text.lstrip()
    if stripped.startswith("["):
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as exc:
            raise _fail(name, f"not JSON ({exc.msg}, line {exc.lineno}).") from None
        return rows_of_array(name, doc), None
    if stripped.startswith("{"):
        return rows_of_jsonl(name, text)
    return rows_of_csv(text, "\t" if path.suffix.lower() == ".tsv" else ",")


def run_file_keys(keys, job_prompt: str, job_output: str) -> bool:
    """Whether a record (or CSV header) with `keys` is a per-request file's rather than a job
    format's (whose prompt and output columns are `job_prompt`, `job_output`, its arrival
    CSV_ARRIVAL_COLUMNS): it names its counts or its arrival only by a run file's names."""
    keys = set(keys)
    if keys & {"body", "prompt", "messages"}:
        return False
    return ((job_prompt not in keys and any(k in keys for k in PROMPT_KEYS))
            or (job_output not in keys and any(k in keys for k in OUTPUT_KEYS))
            or (not keys & set(CSV_ARRIVAL_COLUMNS) and any(k in keys for k in ARRIVAL_KEYS)))


def is_run_file(path: Path) -> bool:
    """Whether the workload file `path` is a per-request file of a run (read by
    `timed_columns`) rather than a job file: a JSON array of objects, or a JSONL / CSV that
    names its columns only as run files do (`run_file_keys`)."""
    try:
        with path.open(encoding="utf-8-sig", errors="replace") as fh:
            head = next((line for line in fh if line.strip()), "")
    except OSError:
        return False  # the job readers word the error
    head = head.strip()
    if head.startswith("["):
        return True
    if head.startswith("{"):
        try:
            obj = json.loads(head)
        except json.JSONDecodeError:
            return False
        return (isinstance(obj, dict) and not is_bench_result(obj)
                and run_file_keys(obj, "prompt_tokens", "output_tokens"))
    sep = "\t" if path.suffix.lower() == ".tsv" else ","
    header = [c.strip() for c in head.split(sep)]
    return run_file_keys(header, CSV_PROMPT_COLUMN, CSV_OUTPUT_COLUMN)


# ---- the columns --------------------------------------------------------------------------
@dataclass
class TimedRows:
    """A per-request file's columns, every row, in file order; times in seconds on the
    file's own clock (Unix time in ms, us or ns converted: `note` says so)."""

    prompt: np.ndarray  # int64, >= 0
    output: np.ndarray  # int64, >= 0
    arrival: np.ndarray | None  # float64; None where the file has no arrival column
    finish: np.ndarray | None  # float64; None where not asked for or not there
    columns: dict[str, str | None]  # kind (prompt, output, arrival, finish) -> the file's name
    note: str
    head: dict  # the first row (a file may carry run-wide fields in it)

    def times(self) -> str:
        """'arrival -> finish' column names."""
        return f"{self.columns['arrival']} -> {self.columns['finish']}"


def parse_rows(name: str | Path, rows: list[dict], lines: list[int] | None, *,
               need_times: bool) -> TimedRows:
    """The columns of a per-request file's `rows` (`lines`: each row's line in the file, which
    errors name; None: a JSON array, rows by number). `need_times`: the arrival and finish
    columns are required (replay), else each is read where the file has one. A bad value is a
    TunerError naming its request (and line)."""
    if not rows:
        raise _fail(name, "no requests.")
    head = rows[0]
    wanted = {"prompt": PROMPT_KEYS, "output": OUTPUT_KEYS, "arrival": ARRIVAL_KEYS,
              "finish": FINISH_KEYS}
    cols = {kind: next((k for k in keys if k in head), None) for kind, keys in wanted.items()}
    required = ("prompt", "output", "arrival", "finish") if need_times else ("prompt", "output")
    missing = [n for n in required if cols[n] is None]
    if missing:
        raise _fail(name, "per-request file needs " + "; ".join(
            f"a {n} column ({' | '.join(wanted[n])})" for n in missing) + ".")
    if not need_times:
        cols["finish"] = None  # a workload's requests have not run yet

    def where(i: int) -> str:
        return f"request {i + 1}" + (f" (line {lines[i]})" if lines else "")

    def column(kind: str, dtype: type) -> np.ndarray | None:
        key = cols[kind]
        if key is None:
            return None
        vals = []
        for i, r in enumerate(rows):
            try:
                v = float(r[key])
            except (KeyError, TypeError, ValueError):
                raise _fail(name, f"{where(i)}: {key} must be a number, got "
                                  f"{r.get(key)!r}.") from None
            # a count is >= 0; a time may be negative (times are taken from the first arrival)
            if not math.isfinite(v) or (dtype is np.int64 and v < 0):
                raise _fail(name, f"{where(i)}: {key} must be a finite number"
                                  f"{' >= 0' if dtype is np.int64 else ''}, got {r.get(key)!r}.")
            # a fractional count is no count: int64 would truncate it (100.9 -> 100) silently
            if dtype is np.int64 and not v.is_integer():
                raise _fail(name, f"{where(i)}: {key} must be a whole number of tokens, got "
                                  f"{r.get(key)!r}.")
            if dtype is np.int64 and v > MAX_TOKENS:  # int64 would overflow (a traceback)
                raise _fail(name, f"{where(i)}: {key} must be at most {MAX_TOKENS:,} tokens, "
                                  f"got {r.get(key)!r}.")
            vals.append(v)
        return np.asarray(vals, dtype=dtype)

    prompt, output = column("prompt", np.int64), column("output", np.int64)
    arrival, finish = column("arrival", np.float64), column("finish", np.float64)
    if arrival is not None and finish is not None:
        bad = np.flatnonzero(finish < arrival)
        if bad.size:
            i = int(bad[0])
            raise _fail(name, f"{where(i)} finishes ({finish[i]:g}) before it arrives "
                              f"({arrival[i]:g}).")
    note = ""
    if arrival is not None:
        earliest = float(arrival.min())
        unit = epoch_unit(earliest)
        if unit is not None:  # Unix time in a finer unit: seconds
            arrival = arrival / unit[0]
            finish = None if finish is None else finish / unit[0]
            note = (f"times read as Unix time in {unit[1]} ({cols['arrival']} from "
                    f"{earliest:.4g}) and converted to seconds")
    return TimedRows(prompt, output, arrival, finish, cols, note, head)


def timed_columns(path: Path, name: str | Path, skip_invalid: bool) -> RequestColumns:
    """A per-request file of a run read as a workload (`tuner simulate`, `tuner search`): its
    token counts, and its arrivals (seconds from the first) where it has an arrival column;
    its finish times are not read. A request without a prompt or an output is a bad row (left
    out with `skip_invalid`)."""
    rows, lines = read_rows(path, name)
    if lines is None and rows and {"body", "prompt", "messages"} & set(rows[0]):
        # a JSON array of text job records: the job readers stream JSONL, one request a line
        raise _fail(name, "a JSON array of requests; a job file is JSONL, one request per line "
                          f"(convert it: jq -c '.[]' {name} > jobs.jsonl).")
    t = parse_rows(name, rows, lines, need_times=False)
    numbers = np.asarray(lines if lines is not None else range(1, len(rows) + 1), dtype=np.int64)

    def where(i: int) -> str:
        return (f"{int(numbers[i])}" if lines is not None else f"request {int(numbers[i])}")

    bad = (t.prompt < 1) | (t.output < 1)
    # arrival_s / arrived_at are the job formats' columns, whose times are >= 0 (a JSONL
    # record's, records.parse_arrival); a run's own names (queued_ts, start_s) keep any origin
    key_t = t.columns["arrival"]
    early = (t.arrival < 0 if t.arrival is not None and key_t in CSV_ARRIVAL_COLUMNS
             else np.zeros_like(bad))
    if (bad | early).any() and not skip_invalid:
        i = int(np.flatnonzero(bad | early)[0])
        if early[i]:
            raise TunerError(f"{name}:{where(i)}: {key_t} must be a time in seconds >= 0 (or "
                             f"Unix time), got {rows[i].get(key_t)!r}")
        key = t.columns["prompt"] if t.prompt[i] < 1 else t.columns["output"]
        raise TunerError(f"{name}:{where(i)}: {key} must be a positive integer, got 0; every "
                         "request needs a prompt and an output token")
    bad |= early
    keep = ~bad
    arrival_s = None
    if t.arrival is not None:
        arrival_s, _ = seconds_from_first(t.arrival[keep])
        check_span(name, arrival_s, lambda i: where(int(np.flatnonzero(keep)[i])))
    return RequestColumns(
        numbers[keep], t.prompt[keep], t.output[keep], f"{t.columns['output']} column",
        None, None, f"given: {t.columns['prompt']} column (the run's own tokenizer)",
        int(bad.sum()), arrival_s)
