"""Reading a job file into a `Workload`: JSONL (one record format per file, see
:mod:`.records`) and CSV traces, then prompt counting, output lengths and final checks."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from tuner.core.errors import TunerError
from tuner.core.workload.base import CSV_OUTPUT_COLUMN, CSV_PROMPT_COLUMN, Workload, one_line
from tuner.core.workload.lengths import OUTPUT_DIST_EXAMPLE, Sampler, parse_output_dist
from tuner.core.workload.records import SHAPE_NAMES, BadLine, Record, parse_record
from tuner.core.workload.tokens import make_counter

if TYPE_CHECKING:
    from tuner.core.catalog import ModelSpec


def _check_file(path: Path) -> None:
    if not path.exists():
        raise TunerError(f"{path}: no such file.")
    if path.is_dir():
        raise TunerError(f"{path}: is a directory; expected a JSONL or CSV workload file.")


def _looks_like_csv(path: Path) -> bool:
    if path.suffix.lower() in (".csv", ".tsv"):
        return True
    if path.suffix.lower() in (".jsonl", ".json", ".ndjson"):
        return False
    try:
        with path.open(encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if line.strip():
                    return not line.lstrip().startswith(("{", "[")) and CSV_PROMPT_COLUMN in line
    except OSError as exc:
        raise TunerError(f"{path}: cannot read ({one_line(exc)}).") from None
    return False


@dataclass
class _Loaded:
    """Per-request columns before output-length filling and final validation."""

    lines: np.ndarray
    prompt: np.ndarray
    output: np.ndarray  # -1 = not given
    output_label: str
    prefix_ids: np.ndarray | None
    prefix_tokens: np.ndarray | None
    tokenizer: str
    skipped: int


@dataclass
class _Records:
    """The valid records of a JSONL file, in file order."""

    records: list[Record]
    lines: list[int]  # 1-based line number of each record
    shape: str | None  # the file's one record format
    prefix_len: dict[Any, int]  # prefix_id -> prefix_tokens, in order of first appearance
    skipped: int
    id_lines: dict[Any, int] = field(default_factory=dict)  # custom_id -> its line


def _check_record(rec: Record, out: _Records, first_line: int, lineno: int) -> None:
    """One format per file; one prefix length per prefix_id; custom_ids unique (the OpenAI
    Batch API rejects a file that repeats one: results could not be matched back)."""
    if out.shape is not None and rec.shape != out.shape:
        raise BadLine(f"{SHAPE_NAMES[rec.shape]}, but line {first_line} is "
                      f"{SHAPE_NAMES[out.shape]}; use one format per file")
    if rec.prefix_key is not None:
        known = out.prefix_len.setdefault(rec.prefix_key, rec.prefix_tokens)
        if known != rec.prefix_tokens:
            raise BadLine(f"prefix_id {rec.prefix_key!r} has prefix_tokens "
                          f"{rec.prefix_tokens} here but {known} earlier")
    if rec.custom_id is not None:
        first = out.id_lines.setdefault(rec.custom_id, lineno)
        if first != lineno:
            raise BadLine(f"duplicate custom_id {rec.custom_id!r} (first on line {first}); "
                          "the OpenAI Batch API requires unique ids")


def _read_records(path: Path, skip_invalid: bool) -> _Records:
    out = _Records([], [], None, {}, 0)
    first_line = 0
    try:
        # newline="" keeps U+2028 and friends inside JSON strings from splitting a record.
        with path.open(encoding="utf-8-sig", newline="") as fh:
            for lineno, line in enumerate(fh, start=1):
                if not line.strip():
                    continue
                try:
                    try:
                        obj = json.loads(line)
                    except json.JSONDecodeError as exc:
                        raise BadLine(f"invalid JSON ({exc.msg} at column {exc.colno})") from None
                    rec = parse_record(obj)
                    _check_record(rec, out, first_line, lineno)
                except BadLine as exc:
                    if skip_invalid:
                        out.skipped += 1
                        continue
                    raise TunerError(f"{path}:{lineno}: {exc}") from None
                if out.shape is None:
                    out.shape, first_line = rec.shape, lineno
                out.records.append(rec)
                out.lines.append(lineno)
    except UnicodeDecodeError as exc:
        raise TunerError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start}).") from None
    except OSError as exc:
        raise TunerError(f"{path}: cannot read ({one_line(exc)}).") from None
    return out


def _prompt_lengths(read: _Records, tokenizer_path: str | Path | None,
                    model: ModelSpec | None) -> tuple[np.ndarray, str]:
    """(prompt tokens per record, how they were counted)."""
    records, n = read.records, len(read.records)
    known = np.fromiter(
        (-1 if r.prompt_tokens is None else r.prompt_tokens for r in records), np.int64, n
    )
    if not any(r.pieces for r in records):
        if not n:
            return known, ""
        return known, ("given: token ids" if read.shape != "tokens"
                       else "given: prompt_tokens field")
    counter = make_counter(tokenizer_path, model)
    for i, r in enumerate(records):
        for text, special, extra in r.pieces:
            counter.add(i, text, special=special, extra=extra)
    tokenizer = counter.description
    if (known >= 0).any():
        tokenizer += "; token-id prompts counted as given"
    return np.where(known >= 0, known, counter.counts(n)), tokenizer


def _load_jsonl(
    path: Path, skip_invalid: bool, tokenizer_path: str | Path | None, model: ModelSpec | None
) -> _Loaded:
    read = _read_records(path, skip_invalid)
    records, n = read.records, len(read.records)
    prompt, tokenizer = _prompt_lengths(read, tokenizer_path, model)
    output = np.fromiter(
        (-1 if r.output_tokens is None else r.output_tokens for r in records), np.int64, n
    )
    fields_used = sorted({r.output_field for r in records if r.output_field})
    label = " / ".join(fields_used)
    if label in ("max_tokens", "max_completion_tokens", "max_completion_tokens / max_tokens"):
        label += " (the cap, taken as the output length)"

    pids = ptoks = None
    if read.prefix_len:
        ids = {k: i for i, k in enumerate(read.prefix_len)}
        pids = np.fromiter(
            (-1 if r.prefix_key is None else ids[r.prefix_key] for r in records), np.int64, n
        )
        ptoks = np.fromiter((r.prefix_tokens or 0 for r in records), np.int64, n)
    return _Loaded(np.asarray(read.lines, dtype=np.int64), prompt, output, label, pids, ptoks,
                   tokenizer, read.skipped)


def _load_csv(path: Path, skip_invalid: bool, need_output: bool) -> _Loaded:
    import pandas as pd

    sep = "\t" if path.suffix.lower() == ".tsv" else ","
    try:
        header = pd.read_csv(path, sep=sep, nrows=0, skipinitialspace=True)
        columns = {str(c).strip(): c for c in header.columns}
        wanted = [c for c in (CSV_PROMPT_COLUMN, CSV_OUTPUT_COLUMN) if c in columns]
        missing = [
            c
            for c in (CSV_PROMPT_COLUMN, CSV_OUTPUT_COLUMN)
            if c not in columns and (c == CSV_PROMPT_COLUMN or need_output)
        ]
        if missing:
            raise TunerError(
                f"{path}: CSV is missing column(s) {', '.join(missing)} (found: "
                f"{', '.join(columns) or 'none'}); "
                f"expected {CSV_PROMPT_COLUMN},{CSV_OUTPUT_COLUMN}."
            )
        df = pd.read_csv(
            path,
            sep=sep,
            usecols=[columns[c] for c in wanted],
            dtype=str,
            skipinitialspace=True,
            keep_default_na=False,
        )
    except pd.errors.EmptyDataError:
        raise TunerError(f"{path}: no requests (empty file).") from None
    except UnicodeDecodeError as exc:
        raise TunerError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start}).") from None
    except (OSError, ValueError, pd.errors.ParserError) as exc:
        raise TunerError(f"{path}: not a valid CSV ({one_line(exc)}).") from None
    df.columns = [str(c).strip() for c in df.columns]

    n = len(df)
    lines = df.index.to_numpy(dtype=np.int64) + 2  # header is line 1 (blank lines are dropped)
    bad = np.zeros(n, dtype=bool)
    cols: dict[str, np.ndarray] = {}
    first_bad: tuple[int, str] | None = None
    for name in wanted:
        raw = df[name]
        v = pd.to_numeric(raw, errors="coerce").to_numpy(dtype=float)
        ok = np.isfinite(v) & (v >= 1) & (v == np.floor(v))
        if not ok.all():
            i = int(np.flatnonzero(~ok)[0])
            if first_bad is None or lines[i] < first_bad[0]:
                first_bad = (
                    int(lines[i]),
                    f"{name} must be a positive integer, got {raw.iloc[i]!r}",
                )
        bad |= ~ok
        cols[name] = np.where(ok, v, 0).astype(np.int64)
    skipped = int(bad.sum())
    if first_bad is not None and not skip_invalid:
        raise TunerError(f"{path}:{first_bad[0]}: {first_bad[1]}")
    keep = ~bad
    output = (
        cols[CSV_OUTPUT_COLUMN][keep]
        if CSV_OUTPUT_COLUMN in cols
        else np.full(int(keep.sum()), -1, np.int64)
    )
    return _Loaded(
        lines[keep],
        cols[CSV_PROMPT_COLUMN][keep],
        output,
        f"{CSV_OUTPUT_COLUMN} column" if CSV_OUTPUT_COLUMN in cols else "",
        None,
        None,
        f"given: {CSV_PROMPT_COLUMN} column (the trace's own tokenizer)",
        skipped,
    )


def _drop_bad_prompts(data: _Loaded, path: Path, skip_invalid: bool) -> None:
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
    if data.prefix_ids is not None:
        data.prefix_ids, data.prefix_tokens = data.prefix_ids[keep], data.prefix_tokens[keep]
    data.skipped += int(bad.sum())


def _fill_outputs(data: _Loaded, dist: tuple[str, Sampler] | None, seed: int,
                  path: Path) -> tuple[np.ndarray, str]:
    """(output lengths, where they came from): the file's, and draws from the --output-dist
    `dist` for requests without one."""
    output = data.output.copy()
    missing = output < 0
    n, n_missing = output.size, int(missing.sum())
    if not n_missing:
        return output, data.output_label
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

    Errors raise `TunerError` with a one-line message, ``path:lineno: ...`` when a line is at
    fault. With `skip_invalid`, bad lines are dropped and counted in ``Workload.skipped``.
    ``Workload.tokenizer`` and ``Workload.output_source`` say how the lengths were obtained.
    """
    path = Path(path).expanduser()
    dist = parse_output_dist(output_dist) if output_dist is not None else None
    _check_file(path)
    if _looks_like_csv(path):
        data = _load_csv(path, skip_invalid, need_output=dist is None)
    else:
        data = _load_jsonl(path, skip_invalid, tokenizer_path, model)

    _drop_bad_prompts(data, path, skip_invalid)
    n = data.prompt.size
    if n == 0:
        extra = f" ({data.skipped} invalid line(s) skipped)" if data.skipped else ""
        raise TunerError(f"{path}: no requests{extra}.")

    output, output_source = _fill_outputs(data, dist, seed, path)
    if data.prefix_ids is not None and data.prefix_ids.max() < 0:
        data.prefix_ids = data.prefix_tokens = None
    return Workload(
        prompt_tokens=data.prompt.astype(np.int64),
        output_tokens=output.astype(np.int64),
        prefix_ids=data.prefix_ids,
        prefix_tokens=data.prefix_tokens,
        source=str(path),
        tokenizer=data.tokenizer,
        output_source=output_source,
        skipped=data.skipped,
    )
