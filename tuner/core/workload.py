"""Workload: token lengths of an offline batch job (all requests known at t=0).

`load_workload` reads a job file into a `Workload`; `workload_stats` summarises one. Formats
(detected per file from the extension and the first valid record; one format per file):

* OpenAI Batch API JSONL: ``{"custom_id", "method", "url", "body": {"model", "messages": [...]
  | "prompt": str, "max_tokens" | "max_completion_tokens"}}``
* plain JSONL: ``{"prompt": str, "max_tokens": int}`` (``"messages"`` is accepted too)
* token-count JSONL: ``{"prompt_tokens": int, "output_tokens": int}``, optionally with a shared
  prefix ``"prefix_id"`` (str or int) and ``"prefix_tokens"`` (int)
* CSV traces with columns ``num_prefill_tokens,num_decode_tokens`` (others ignored), e.g. the
  Vidur / Splitwise traces.

Any JSONL record may carry ``prefix_id`` + ``prefix_tokens`` at its top level.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from tuner.core.errors import TunerError

if TYPE_CHECKING:
    from collections.abc import Callable

    from tuner.core.catalog import ModelSpec


@dataclass(frozen=True)
class Workload:
    """Prompt and output lengths as int64 arrays of equal length (one entry per request)."""

    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    # Shared-prefix groups: prefix_ids[i] = group id (-1: none), prefix_tokens[i] = its length.
    prefix_ids: np.ndarray | None = None
    prefix_tokens: np.ndarray | None = None
    source: str = ""
    tokenizer: str = ""  # how prompt lengths were obtained (model tokenizer / documented estimate)
    output_source: str = ""  # where output lengths came from (max_tokens / output_tokens / dist)
    skipped: int = 0  # invalid input lines skipped by load_workload(skip_invalid=True)

    def __len__(self) -> int:
        return int(self.prompt_tokens.shape[0])

    def take(self, idx: np.ndarray) -> Workload:
        """The sub-workload of the requests at `idx` (in that order)."""
        return Workload(
            prompt_tokens=self.prompt_tokens[idx],
            output_tokens=self.output_tokens[idx],
            prefix_ids=None if self.prefix_ids is None else self.prefix_ids[idx],
            prefix_tokens=None if self.prefix_tokens is None else self.prefix_tokens[idx],
            source=self.source,
            tokenizer=self.tokenizer,
            output_source=self.output_source,
            skipped=self.skipped,
        )


# ---------------------------------------------------------------------------------------
# Token counting

#: The offline fallback: ~4 characters per token, the common rule of thumb for English text
#: with GPT/Llama-style BPE vocabularies. It under-counts code, numbers and non-Latin scripts
#: (a Chinese character is often a whole token); pass a tokenizer for exact counts.
CHARS_PER_TOKEN = 4
ESTIMATE_TOKENIZER = "estimate: 4 characters per token (no tokenizer available offline)"
#: Tokens a chat template adds to each message beyond its role and content (the role and the
#: content are counted as the text ``role + "\n" + content``). Llama-3's template wraps a
#: message as <|start_header_id|> ROLE <|end_header_id|> "\n\n" CONTENT <|eot_id|>: three
#: special tokens plus about one for the blank line and the conversation's <|begin_of_text|> /
#: reply header shared out; OpenAI's cookbook counts 3-4 per message for its chat models.
CHAT_MESSAGE_OVERHEAD_TOKENS = 4

CSV_PROMPT_COLUMN = "num_prefill_tokens"
CSV_OUTPUT_COLUMN = "num_decode_tokens"
_OUTPUT_DIST_EXAMPLE = "e.g. --output-dist lognormal:167:0.8 or --output-dist trace:lengths.csv"


def estimate_tokens(text: str) -> int:
    """ceil(len(text) / 4): the documented offline estimate (see `CHARS_PER_TOKEN`)."""
    return -(-len(text) // CHARS_PER_TOKEN)


def chat_message_text(role: str, content: str) -> str:
    """The text of one chat message that is tokenized: role, a newline, then the content.
    Each message then costs `CHAT_MESSAGE_OVERHEAD_TOKENS` more (template tokens)."""
    return f"{role}\n{content}"


class _Counter:
    """Accumulates the text pieces of each request and returns per-request token counts.

    The estimate keeps only lengths; a real tokenizer keeps the texts and encodes them in
    batches at the end (`encode_batch` is multi-threaded)."""

    def __init__(self, tokenizer: Any | None, description: str) -> None:
        self.tokenizer = tokenizer
        self.description = description
        self._req: list[int] = []
        self._extra: list[int] = []
        self._special: list[bool] = []
        self._texts: list[str] = []
        self._est: list[int] = []

    def add(self, req: int, text: str, *, special: bool, extra: int = 0) -> None:
        """Count `text` for request `req`, plus `extra` tokens. `special`: add the tokenizer's
        special tokens (BOS) — true for a bare prompt, false for chat messages (whose
        template tokens are in `extra`)."""
        self._req.append(req)
        self._extra.append(extra)
        if self.tokenizer is None:
            self._est.append(estimate_tokens(text))
        else:
            self._texts.append(text)
            self._special.append(special)

    def counts(self, n: int) -> np.ndarray:
        if not self._req:
            return np.zeros(n, dtype=np.int64)
        if self.tokenizer is None:
            per_piece = np.asarray(self._est, dtype=np.int64)
        else:
            per_piece = np.zeros(len(self._texts), dtype=np.int64)
            special = np.asarray(self._special, dtype=bool)
            for flag in (True, False):
                idx = np.flatnonzero(special == flag)
                for start in range(0, idx.size, 4096):
                    chunk = idx[start : start + 4096]
                    enc = self.tokenizer.encode_batch(
                        [self._texts[i] for i in chunk], add_special_tokens=flag
                    )
                    per_piece[chunk] = [len(e.ids) for e in enc]
        per_piece = per_piece + np.asarray(self._extra, dtype=np.int64)
        req = np.asarray(self._req, dtype=np.int64)
        return np.bincount(req, weights=per_piece, minlength=n).astype(np.int64)


def _tokenizer_file(
    tokenizer_path: str | Path | None, model: ModelSpec | None
) -> tuple[Path | None, bool]:
    """(tokenizer.json path or None, whether the user asked for it explicitly)."""
    if tokenizer_path is not None:
        p = Path(tokenizer_path).expanduser()
        f = p / "tokenizer.json" if p.is_dir() else p
        if not f.is_file():
            raise TunerError(
                f"{f}: tokenizer not found (pass a directory holding tokenizer.json, or the file)."
            )
        return f, True
    source = getattr(model, "source", "") or ""
    if source and source != "catalog":
        p = Path(source).expanduser()
        for d in (p,) if p.is_dir() else (p.parent,) if p.is_file() else ():
            if (d / "tokenizer.json").is_file():
                return d / "tokenizer.json", False
    return None, False


def _make_counter(tokenizer_path: str | Path | None, model: ModelSpec | None) -> _Counter:
    f, explicit = _tokenizer_file(tokenizer_path, model)
    if f is None:
        return _Counter(None, ESTIMATE_TOKENIZER)
    try:
        from tokenizers import Tokenizer  # optional dependency
    except ImportError:
        if explicit:
            raise TunerError(
                f"Counting tokens with {f} needs the optional `tokenizers` package "
                "(pip install tokenizers), or leave out the tokenizer to use the "
                "4-characters-per-token estimate."
            ) from None
        return _Counter(None, f"{ESTIMATE_TOKENIZER}; {f} found but `tokenizers` is not installed")
    try:
        tok = Tokenizer.from_file(str(f))
    except Exception as exc:  # the library raises a bare Exception for bad files
        raise TunerError(f"{f}: not a Hugging Face tokenizer.json ({_one_line(exc)}).") from None
    tok.no_truncation()
    tok.no_padding()
    return _Counter(
        tok,
        f"tokenizer {f} (Hugging Face tokenizers; chat: role + content "
        f"+ {CHAT_MESSAGE_OVERHEAD_TOKENS} tokens per message)",
    )


# ---------------------------------------------------------------------------------------
# Output-length distributions


def parse_output_dist(spec: str) -> tuple[str, Callable[[int, np.random.Generator], np.ndarray]]:
    """Parse an --output-dist spec into (description, sampler(n, rng) -> int64 lengths >= 1).

    ``fixed:N`` | ``uniform:LO:HI`` (integers, inclusive) | ``normal:MEAN:STD`` (rounded,
    clipped at >= 1) | ``lognormal:MEDIAN:SIGMA`` (sigma of the log) | ``trace:PATH`` (draw with
    replacement from the num_decode_tokens column of a CSV trace).
    """
    usage = (
        f"Bad --output-dist {spec!r}: use fixed:N, uniform:LO:HI, normal:MEAN:STD, "
        "lognormal:MEDIAN:SIGMA or trace:FILE.csv (e.g. lognormal:167:0.8)."
    )
    kind, _, rest = str(spec).strip().partition(":")
    kind = kind.lower()
    if kind == "trace":
        if not rest:
            raise TunerError(usage)
        values = _read_csv_column(Path(rest).expanduser(), CSV_OUTPUT_COLUMN)
        return f"output_dist trace:{rest}", lambda n, rng: rng.choice(values, size=n, replace=True)
    try:
        args = [float(a) for a in rest.split(":")] if rest else []
    except ValueError:
        raise TunerError(usage) from None
    if not all(math.isfinite(a) for a in args):
        raise TunerError(usage)

    def as_len(a: np.ndarray) -> np.ndarray:
        return np.maximum(np.rint(a), 1).astype(np.int64)

    if kind == "fixed" and len(args) == 1 and args[0] >= 1 and args[0].is_integer():
        n_fixed = int(args[0])
        return f"output_dist {spec}", lambda n, rng: np.full(n, n_fixed, dtype=np.int64)
    if kind == "uniform" and len(args) == 2 and 1 <= args[0] <= args[1]:
        lo, hi = math.ceil(args[0]), math.floor(args[1])
        if lo <= hi:
            return f"output_dist {spec}", lambda n, rng: rng.integers(
                lo, hi + 1, size=n, dtype=np.int64
            )
    if kind == "normal" and len(args) == 2 and args[1] >= 0:
        mean, std = args
        return f"output_dist {spec}", lambda n, rng: as_len(rng.normal(mean, std, size=n))
    if kind == "lognormal" and len(args) == 2 and args[0] > 0 and args[1] >= 0:
        median, sigma = args
        return f"output_dist {spec}", lambda n, rng: as_len(
            rng.lognormal(math.log(median), sigma, size=n)
        )
    raise TunerError(usage)


def _read_csv_column(path: Path, column: str) -> np.ndarray:
    """The positive-integer values of one column of a CSV trace (for trace:PATH)."""
    import pandas as pd

    if not path.is_file():
        raise TunerError(f"{path}: no such file (for --output-dist trace:).")
    try:
        df = pd.read_csv(path, skipinitialspace=True)
    except Exception as exc:
        raise TunerError(f"{path}: not a readable CSV ({_one_line(exc)}).") from None
    df.columns = [str(c).strip() for c in df.columns]
    if column not in df.columns:
        raise TunerError(f"{path}: CSV has no {column} column (found: {', '.join(df.columns)}).")
    v = pd.to_numeric(df[column], errors="coerce").to_numpy(dtype=float)
    v = v[np.isfinite(v) & (v >= 1) & (v == np.floor(v))].astype(np.int64)
    if v.size == 0:
        raise TunerError(f"{path}: no positive integer values in column {column}.")
    return v


# ---------------------------------------------------------------------------------------
# JSONL records


class _BadLine(Exception):
    """A record-level problem; becomes 'path:lineno: message' (or is skipped)."""


@dataclass
class _Record:
    shape: str
    prompt_tokens: int | None = None  # known count (token-count records, token-id prompts)
    pieces: list[tuple[str, bool, int]] = field(default_factory=list)  # (text, special, extra)
    output_tokens: int | None = None
    output_field: str = ""
    prefix_key: Any = None
    prefix_tokens: int | None = None


_SHAPE_NAMES = {
    "batch": "an OpenAI Batch API request",
    "prompt": "a {prompt, max_tokens} record",
    "tokens": "a {prompt_tokens, output_tokens} record",
}


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def _length(value: Any, name: str, *, minimum: int = 1) -> int:
    """A token count from JSON: an integer (or integral float) >= minimum."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _BadLine(f"{name} must be an integer, got {json.dumps(value)[:40]}")
    if isinstance(value, float) and not (math.isfinite(value) and value.is_integer()):
        raise _BadLine(f"{name} must be an integer, got {value!r}")
    if value < minimum:
        raise _BadLine(f"{name} must be >= {minimum}, got {int(value)}")
    return int(value)


def _message_content(content: Any, i: int) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # OpenAI content parts: text parts are counted, others ignored
        texts = []
        for part in content:
            if isinstance(part, str):
                texts.append(part)
            elif isinstance(part, dict) and isinstance(part.get("text"), str):
                texts.append(part["text"])
        return "\n".join(texts)
    raise _BadLine(f"messages[{i}].content must be a string or a list of content parts")


def _prompt_into(rec: _Record, holder: dict, where: str) -> None:
    """Fill rec's prompt from holder['messages'] or holder['prompt']."""
    messages = holder.get("messages")
    prompt = holder.get("prompt")
    if messages is not None:
        if not isinstance(messages, list) or not messages:
            raise _BadLine(f"{where}messages must be a non-empty list")
        for i, m in enumerate(messages):
            if not isinstance(m, dict):
                raise _BadLine(f"{where}messages[{i}] must be an object with role and content")
            role = m.get("role", "")
            text = chat_message_text(str(role), _message_content(m.get("content"), i))
            rec.pieces.append((text, False, CHAT_MESSAGE_OVERHEAD_TOKENS))
    elif isinstance(prompt, str):
        rec.pieces.append((prompt, True, 0))
    elif (
        isinstance(prompt, list)
        and prompt
        and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt)
    ):
        rec.prompt_tokens = len(prompt)  # pre-tokenized prompt: token ids
    elif isinstance(prompt, list):
        raise _BadLine(
            f"{where}prompt must be a string or a list of token ids (one request per line; "
            "batched prompt lists are not supported)"
        )
    elif prompt is None:
        raise _BadLine(f"{where}has neither messages nor prompt")
    else:
        raise _BadLine(f"{where}prompt must be a string")


def _output_into(rec: _Record, holder: dict, keys: tuple[str, ...]) -> None:
    for key in keys:
        if holder.get(key) is not None:
            rec.output_tokens = _length(holder[key], key)
            rec.output_field = key
            return


def _parse_record(obj: Any) -> _Record:
    if not isinstance(obj, dict):
        raise _BadLine(f"expected a JSON object, got {type(obj).__name__}")
    if "body" in obj:
        body = obj["body"]
        if not isinstance(body, dict):
            raise _BadLine("OpenAI Batch API request: body must be an object")
        rec = _Record("batch")
        _prompt_into(rec, body, "body ")
        _output_into(rec, body, ("max_completion_tokens", "max_tokens"))
    elif "prompt_tokens" in obj:
        rec = _Record("tokens", prompt_tokens=_length(obj["prompt_tokens"], "prompt_tokens"))
        _output_into(rec, obj, ("output_tokens",))
    elif "prompt" in obj or "messages" in obj:
        rec = _Record("prompt")
        _prompt_into(rec, obj, "")
        _output_into(rec, obj, ("max_tokens", "max_completion_tokens", "output_tokens"))
    else:
        keys = ", ".join(sorted(map(str, obj))) or "none"
        raise _BadLine(
            f"record of no known shape (keys: {keys}); expected an OpenAI Batch API request "
            '{"custom_id", "method", "url", "body"}, {"prompt", "max_tokens"} or '
            '{"prompt_tokens", "output_tokens"}'
        )
    has_id, has_len = obj.get("prefix_id") is not None, obj.get("prefix_tokens") is not None
    if has_id != has_len:
        raise _BadLine("prefix_id and prefix_tokens must be given together")
    if has_id:
        key = obj["prefix_id"]
        if isinstance(key, bool) or not isinstance(key, str | int):
            raise _BadLine("prefix_id must be a string or an integer")
        rec.prefix_key = key
        rec.prefix_tokens = _length(obj["prefix_tokens"], "prefix_tokens")
        if rec.prompt_tokens is not None and rec.prefix_tokens > rec.prompt_tokens:
            raise _BadLine(
                f"prefix_tokens ({rec.prefix_tokens}) exceeds prompt_tokens ({rec.prompt_tokens})"
            )
    return rec


# ---------------------------------------------------------------------------------------
# Loading


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
        raise TunerError(f"{path}: cannot read ({_one_line(exc)}).") from None
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


def _load_jsonl(
    path: Path, skip_invalid: bool, tokenizer_path: str | Path | None, model: ModelSpec | None
) -> _Loaded:
    records: list[_Record] = []
    lines: list[int] = []
    skipped = 0
    shape: str | None = None
    first_line = 0
    prefix_len: dict[Any, int] = {}
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
                        raise _BadLine(f"invalid JSON ({exc.msg} at column {exc.colno})") from None
                    rec = _parse_record(obj)
                    if shape is None:
                        shape, first_line = rec.shape, lineno
                    elif rec.shape != shape:
                        raise _BadLine(
                            f"{_SHAPE_NAMES[rec.shape]}, but line {first_line} is "
                            f"{_SHAPE_NAMES[shape]}; use one format per file"
                        )
                    if rec.prefix_key is not None:
                        known = prefix_len.setdefault(rec.prefix_key, rec.prefix_tokens)
                        if known != rec.prefix_tokens:
                            raise _BadLine(
                                f"prefix_id {rec.prefix_key!r} has prefix_tokens "
                                f"{rec.prefix_tokens} here but {known} earlier"
                            )
                except _BadLine as exc:
                    if skip_invalid:
                        skipped += 1
                        continue
                    raise TunerError(f"{path}:{lineno}: {exc}") from None
                records.append(rec)
                lines.append(lineno)
    except UnicodeDecodeError as exc:
        raise TunerError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start}).") from None
    except OSError as exc:
        raise TunerError(f"{path}: cannot read ({_one_line(exc)}).") from None

    n = len(records)
    known = np.fromiter(
        (-1 if r.prompt_tokens is None else r.prompt_tokens for r in records), np.int64, n
    )
    prompt = known
    tokenizer = ""
    if any(r.pieces for r in records):
        counter = _make_counter(tokenizer_path, model)
        for i, r in enumerate(records):
            for text, special, extra in r.pieces:
                counter.add(i, text, special=special, extra=extra)
        counted = counter.counts(n)
        prompt = np.where(known >= 0, known, counted)
        tokenizer = counter.description
        if (known >= 0).any():
            tokenizer += "; token-id prompts counted as given"
    elif n:
        tokenizer = "given: token ids" if shape != "tokens" else "given: prompt_tokens field"

    output = np.fromiter(
        (-1 if r.output_tokens is None else r.output_tokens for r in records), np.int64, n
    )
    fields_used = sorted({r.output_field for r in records if r.output_field})
    label = " / ".join(fields_used)
    if label in ("max_tokens", "max_completion_tokens", "max_completion_tokens / max_tokens"):
        label += " (the cap, taken as the output length)"

    pids = ptoks = None
    if prefix_len:
        ids = {k: i for i, k in enumerate(prefix_len)}
        pids = np.fromiter(
            (-1 if r.prefix_key is None else ids[r.prefix_key] for r in records), np.int64, n
        )
        ptoks = np.fromiter((r.prefix_tokens or 0 for r in records), np.int64, n)
    return _Loaded(
        np.asarray(lines, dtype=np.int64), prompt, output, label, pids, ptoks, tokenizer, skipped
    )


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
        raise TunerError(f"{path}: not a valid CSV ({_one_line(exc)}).") from None
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

    # Checks that need the counted prompt length.
    bad = data.prompt < 1
    if data.prefix_tokens is not None:
        bad |= data.prefix_tokens > data.prompt
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        if not skip_invalid:
            if data.prompt[i] < 1:
                msg = "empty prompt (0 tokens); every request needs a prompt"
            else:
                msg = (
                    f"prefix_tokens ({data.prefix_tokens[i]}) exceeds the prompt's "
                    f"{data.prompt[i]} tokens"
                )
            raise TunerError(f"{path}:{data.lines[i]}: {msg}")
        keep = ~bad
        data.lines, data.prompt, data.output = (
            data.lines[keep],
            data.prompt[keep],
            data.output[keep],
        )
        if data.prefix_ids is not None:
            data.prefix_ids, data.prefix_tokens = data.prefix_ids[keep], data.prefix_tokens[keep]
        data.skipped += int(bad.sum())

    n = data.prompt.size
    if n == 0:
        extra = f" ({data.skipped} invalid line(s) skipped)" if data.skipped else ""
        raise TunerError(f"{path}: no requests{extra}.")

    output = data.output.copy()
    missing = output < 0
    n_missing = int(missing.sum())
    output_source = data.output_label
    if n_missing:
        if dist is None:
            line = int(data.lines[np.flatnonzero(missing)[0]])
            raise TunerError(
                f"{path}:{line}: request has no max_tokens/output_tokens and no output-length "
                f"distribution was given; pass --output-dist ({_OUTPUT_DIST_EXAMPLE})."
            )
        label, sampler = dist
        output[missing] = sampler(n_missing, np.random.default_rng(seed))
        label = f"{label} (seed {seed})"
        output_source = (
            label
            if n_missing == n
            else (f"{data.output_label} for {n - n_missing} requests; {label} for {n_missing}")
        )
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


# ---------------------------------------------------------------------------------------
# Statistics


def _summary(a: np.ndarray) -> dict[str, float | int]:
    p50, p90, p99 = np.percentile(a, [50, 90, 99])
    return {
        "mean": float(a.mean()),
        "p50": float(p50),
        "p90": float(p90),
        "p99": float(p99),
        "max": int(a.max()),
        "min": int(a.min()),
    }


def workload_stats(w: Workload) -> dict:
    """Summary of a workload (plain JSON-able values).

    Keys: source, count, skipped, total_prompt_tokens, total_output_tokens, prompt and output
    (each {mean, p50, p90, p99, max, min}; percentiles linearly interpolated as numpy does),
    pd_ratio (total prompt / total output tokens), pd_ratio_median (median of the per-request
    prompt/output ratios), prefix_groups and prefixed_requests, tokenizer, output_source.
    """
    p = np.asarray(w.prompt_tokens, dtype=np.int64)
    o = np.asarray(w.output_tokens, dtype=np.int64)
    n = int(p.size)
    total_p, total_o = int(p.sum()), int(o.sum())
    has_prefix = w.prefix_ids is not None and n > 0
    return {
        "source": w.source,
        "count": n,
        "skipped": int(w.skipped),
        "total_prompt_tokens": total_p,
        "total_output_tokens": total_o,
        "prompt": _summary(p) if n else None,
        "output": _summary(o) if n else None,
        "pd_ratio": total_p / total_o if total_o else None,
        "pd_ratio_median": float(np.median(p / o)) if n else None,
        "prefix_groups": int(np.unique(w.prefix_ids[w.prefix_ids >= 0]).size) if has_prefix else 0,
        "prefixed_requests": int((w.prefix_ids >= 0).sum()) if has_prefix else 0,
        "tokenizer": w.tokenizer,
        "output_source": w.output_source,
    }


__all__ = [
    "CHARS_PER_TOKEN",
    "CHAT_MESSAGE_OVERHEAD_TOKENS",
    "ESTIMATE_TOKENIZER",
    "Workload",
    "chat_message_text",
    "estimate_tokens",
    "load_workload",
    "parse_output_dist",
    "workload_stats",
]
