"""Reading a JSONL job file in one streaming pass into per-request numpy columns.

Memory is bounded by the columns (33 bytes per request: line number, prompt and output
lengths, output field, a 64-bit digest of the ``custom_id``) plus one chunk of `CHUNK_RECORDS`
records, and with a tokenizer one batch of texts (:class:`.tokens.TokenCounter`): no per-line
Python object outlives its chunk. (A ``prefix_id`` is remembered once per distinct id, with its
length, to check it: a handful of shared prefixes in practice.) Common lines take a fast path (the C JSON scanner,
then a few type checks); any other line goes through :func:`.records.parse_record`, which
defines what a valid record is and words every error, so both paths give the same answer.

``custom_id`` uniqueness is checked on the digests (Python's 64-bit ``hash``) after the
pass, by sorting: a repeated digest is confirmed on the ids themselves, read back from the
file, so a hash collision can never refuse a valid file. The error names the earliest line
that repeats an id, as a line-by-line check would (an earlier bad line is reported first).
"""

from __future__ import annotations

import itertools
import json
import json.scanner
import re
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from tuner.core.errors import TunerError
from tuner.core.workload.base import MAX_TOKENS, RequestColumns, one_line
from tuner.core.workload.records import (
    GENERATION_URLS,
    SHAPE_NAMES,
    BadLine,
    Record,
    parse_record,
)
from tuner.core.workload.timed import check_span, seconds_from_first
from tuner.core.workload.tokens import (
    CHARS_PER_TOKEN,
    CHAT_MESSAGE_OVERHEAD_TOKENS,
    ESTIMATE_TOKENIZER,
    TokenCounter,
    estimate_tokens,
    make_counter,
    tokenizer_file,
)

if TYPE_CHECKING:
    from tuner.core.catalog import ModelSpec

#: Records buffered as Python lists before they are moved into the numpy columns.
CHUNK_RECORDS = 16_384
NO_ID = -1  # digest column value for "no custom_id" (hash() never returns -1 in CPython)
SHAPES = ("batch", "prompt", "tokens")  # shape codes 0, 1, 2
OUTPUT_FIELDS = ("", "max_tokens", "max_completion_tokens", "output_tokens")  # field codes
_FIELD_CODE = {name: i for i, name in enumerate(OUTPUT_FIELDS)}
_BATCH_OUT = ("max_completion_tokens", "max_tokens")  # parse_record's order per shape
_PROMPT_OUT = ("max_tokens", "max_completion_tokens", "output_tokens")
_SLOW = object()  # "take the general path" marker
_URLS = (None, *GENERATION_URLS)  # a Batch API url the fast path takes (others: parse_record)
_N_GROUP = object()  # prefix-group key of a request's n completions: (_N_GROUP, line number)
WHOLE_PROMPT = -1  # prefix tokens column: the whole prompt (counted after the pass)
_JSON_WS = " \t\n\r"


def _id_digest(cid: Any) -> int:
    try:
        return hash(cid)
    except TypeError:  # a list or object as custom_id: digest its JSON text
        return hash(json.dumps(cid, sort_keys=True))


def _chat_estimate(messages: list) -> int | None:
    """The estimate of a chat (see tokens.py), or None when a message is not the plain
    {"role": str, "content": str | None} form (the general path then decides)."""
    total = 0
    for m in messages:
        if type(m) is not dict:
            return None
        role = m.get("role", "")
        content = m.get("content")
        if type(role) is not str:
            return None
        if content is None:
            n = len(role) + 1
        elif type(content) is str:
            n = len(role) + 1 + len(content)
        else:
            return None
        total += -(-n // CHARS_PER_TOKEN) + CHAT_MESSAGE_OVERHEAD_TOKENS
    return total


def _fast_row(obj: Any, want_text: bool) -> tuple | None:
    """(shape, known, est, texts, output, field, cid) of a common record, or None (the general
    path, :func:`.records.parse_record`, then decides and words any error)."""
    if type(obj) is not dict or "prefix_id" in obj or "prefix_tokens" in obj \
            or "arrival_s" in obj or "arrived_at" in obj:
        return None  # (a null prefix_id is valid: the general path reads it)
    if "body" in obj:
        body = obj["body"]
        if type(body) is not dict or not _single(body) or obj.get("url") not in _URLS:
            return None
        return _fast_text_row(body, 0, _BATCH_OUT, obj.get("custom_id"), want_text)
    if not _single(obj):
        return None
    if "prompt_tokens" in obj:
        return _fast_tokens_row(obj)
    if "prompt" in obj or "messages" in obj:
        return _fast_text_row(obj, 1, _PROMPT_OUT, None, want_text)
    return None


def _single(holder: dict) -> bool:
    """Whether the request asks for one completion (``n`` absent, null or 1); any other ``n``
    takes the general path (parse_record checks it; the reader expands it into n requests)."""
    n = holder.get("n")
    return n is None or (type(n) is int and n == 1)


def _fast_tokens_row(obj: dict) -> tuple | None:
    """The row of a {"prompt_tokens", "output_tokens"} record (shape 2)."""
    known = obj["prompt_tokens"]
    if type(known) is not int or not 1 <= known <= MAX_TOKENS:
        return None
    out = obj.get("output_tokens")
    if out is None:
        return 2, known, 0, None, -1, 0, None
    if type(out) is not int or not 1 <= out <= MAX_TOKENS:
        return None
    return 2, known, 0, None, out, 3, None


def _fast_text_row(holder: dict, shape: int, keys: tuple[str, ...], cid: Any,
                   want_text: bool) -> tuple | None:
    """The row of a record whose prompt is text (`holder`: a Batch API request's body, or the
    record itself); `keys`: the output fields, in parse_record's order for the shape."""
    messages = holder.get("messages")
    texts = None
    if messages is not None:
        if type(messages) is not list or not messages:
            return None
        est = _chat_estimate(messages)
        if est is None:
            return None
        if want_text:
            texts = _chat_texts(messages)
    else:
        prompt = holder.get("prompt")
        if type(prompt) is not str:
            return None
        est = -(-len(prompt) // CHARS_PER_TOKEN)
        if want_text:
            texts = [(prompt, True, 0)]
    for key in keys:
        out = holder.get(key)
        if out is not None:
            if type(out) is not int or not 1 <= out <= MAX_TOKENS:
                return None
            return shape, -1, est, texts, out, _FIELD_CODE[key], cid
    return shape, -1, est, texts, -1, 0, cid


def _chat_texts(messages: list) -> list[tuple[str, bool, int]]:
    """The (text, special, extra) pieces a tokenizer counts of a plain chat."""
    return [(f"{m.get('role', '')}\n{m.get('content') or ''}", False,
             CHAT_MESSAGE_OVERHEAD_TOKENS) for m in messages]


# A token-count line exactly as json.dumps (or a compact writer) prints it: the common form of
# a multi-million-request job, read by regular expression a block at a time (~4x faster than
# a JSON value per line). Any other line, blank line or number out of range sends the whole
# file to the line-by-line pass, which words the errors.
_TOKENS_LINE = re.compile(rb'^\{"prompt_tokens": ?(0|[1-9][0-9]{0,8}), ?'
                          rb'"output_tokens": ?(0|[1-9][0-9]{0,8})\}\r?$', re.M)
_BULK_BLOCK_BYTES = 1 << 23  # ~180,000 lines a block: the matches' lists stay ~25 MB
_BOM = b"\xef\xbb\xbf"


def _bulk_token_counts(path: Path) -> tuple[np.ndarray, np.ndarray] | None:
    """(prompt tokens, output tokens) of a file whose every line is a plain token-count
    record, or None (the line-by-line pass then reads it)."""
    prompts, outputs = [], []
    with path.open("rb") as fh:
        first = fh.readline()
        if not _TOKENS_LINE.match(first.removeprefix(_BOM)):
            return None
        rest = first.removeprefix(_BOM)
        while True:
            block = fh.read(_BULK_BLOCK_BYTES)
            if block:
                block = rest + block
                cut = block.rfind(b"\n") + 1
                chunk, rest = block[:cut], block[cut:]
                lines = chunk.count(b"\n")
            else:  # the end: a last line without a newline
                chunk, rest, lines = rest, b"", 1 if rest else 0
            if lines:
                pairs = _TOKENS_LINE.findall(chunk)
                if len(pairs) != lines:
                    return None
                got = np.fromstring(b" ".join(itertools.chain.from_iterable(pairs)),
                                    dtype=np.int64, sep=" ").reshape(-1, 2)
                if got.min() < 1 or got.max() > MAX_TOKENS:
                    return None
                prompts.append(got[:, 0].copy())
                outputs.append(got[:, 1].copy())
            if not block:
                break
    if not prompts:
        return None
    return np.concatenate(prompts), np.concatenate(outputs)


class _Columns:
    """Growing columns: Python lists for the current chunk, moved at each `flush` into numpy
    arrays that double when full. Doubling keeps every buffer one large allocation of its
    own, which the C allocator hands back to the system when it is replaced (a list of
    chunk-sized arrays leaves holes in its heap that the process keeps for good)."""

    def __init__(self, **dtypes: type) -> None:
        self.dtypes = dtypes
        self.bufs: dict[str, list] = {name: [] for name in dtypes}
        self.arrays = {name: np.zeros(0, dtype=dt) for name, dt in dtypes.items()}
        self.n = 0  # values in the arrays

    def flush(self) -> None:
        k = len(next(iter(self.bufs.values())))
        if not k:
            return
        end = self.n + k
        for name, dtype in self.dtypes.items():
            buf, arr = self.bufs[name], self.arrays[name]
            if end > arr.size:
                bigger = np.empty(max(end, 2 * arr.size, CHUNK_RECORDS), dtype=dtype)
                bigger[: self.n] = arr[: self.n]
                self.arrays[name] = arr = bigger
            arr[self.n:end] = buf
            buf.clear()
        self.n = end

    def array(self, name: str) -> np.ndarray:
        """The whole column (a view of its buffer, cut to size when over a quarter is spare)."""
        self.flush()
        arr = self.arrays[name]
        if arr.size - self.n > self.n // 4:
            self.arrays[name] = arr = arr[: self.n].copy()
        return arr[: self.n]


class _Reader:
    """One streaming pass over a JSONL file (see the module docstring)."""

    def __init__(self, path: Path, skip_invalid: bool, tokenizer_path: str | Path | None,
                 model: ModelSpec | None, name: str | Path | None = None) -> None:
        self.path, self.skip_invalid = path, skip_invalid
        self.name = path if name is None else name  # in error messages
        self.tokenizer_path, self.model = tokenizer_path, model
        try:
            self.want_text = tokenizer_file(tokenizer_path, model)[0] is not None
        except TunerError:  # reported only if some prompt needs counting, after bad lines
            self.want_text = True
        self.counter: TokenCounter | None = None
        self.counter_error: TunerError | None = None
        self.shape: int | None = None
        self.first_line = 0
        self.prefix_len: dict[Any, int] = {}  # prefix_id -> prefix_tokens
        self.prefix_index: dict[Any, int] = {}  # prefix_id -> group number (first appearance)
        self.skipped = 0
        self.n = 0  # valid records so far
        # Per record: line; prompt: the known token count, or -1 - the estimate for a prompt
        # given as text; output tokens (-1: not given); output field code; custom_id digest
        # (NO_ID: none).
        self.cols = _Columns(line=np.int64, prompt=np.int64, output=np.int64, field=np.int8,
                             cid=np.int64)
        # Sparse: the records with a shared prefix; those with an arrival time.
        self.pref = _Columns(req=np.int64, group=np.int64, tokens=np.int64)
        self.arr = _Columns(req=np.int64, t=np.float64)

    # ---- the counter of prompt texts (created at the first text prompt) ----
    def _text_counter(self) -> TokenCounter:
        if self.counter is None:
            try:
                self.counter = make_counter(self.tokenizer_path, self.model)
            except TunerError as exc:  # raised after the pass, as a bad line comes first
                self.counter_error = exc
                self.counter = TokenCounter(None, "")
        return self.counter

    # ---- one record ----
    def _general(self, obj: Any) -> tuple:
        """(the `_fast_row` tuple, the Record) from parse_record (raises BadLine)."""
        rec: Record = parse_record(obj)
        texts = rec.pieces if rec.pieces else None
        est = sum(estimate_tokens(t) + extra for t, _, extra in rec.pieces)
        known = -1 if rec.prompt_tokens is None else rec.prompt_tokens
        out = -1 if rec.output_tokens is None else rec.output_tokens
        return (SHAPES.index(rec.shape), known, est, texts, out, _FIELD_CODE[rec.output_field],
                rec.custom_id), rec

    def _check_shape(self, shape: int) -> None:
        if self.shape is not None and shape != self.shape:
            raise BadLine(f"{SHAPE_NAMES[SHAPES[shape]]}, but line {self.first_line} is "
                          f"{SHAPE_NAMES[SHAPES[self.shape]]}; use one format per file")

    def _check_prefix(self, rec: Record) -> int:
        """The record's prefix group (one prefix length per prefix_id)."""
        known = self.prefix_len.setdefault(rec.prefix_key, rec.prefix_tokens)
        if known != rec.prefix_tokens:
            raise BadLine(f"prefix_id {rec.prefix_key!r} has prefix_tokens "
                          f"{rec.prefix_tokens} here but {known} earlier")
        return self.prefix_index.setdefault(rec.prefix_key, len(self.prefix_index))

    def _bad(self, lineno: int, exc: BadLine) -> None:
        if self.skip_invalid:
            self.skipped += 1
            return
        self._check_ids(before=lineno)  # a repeated id on an earlier line is the first error
        raise TunerError(f"{self.name}:{lineno}: {exc}") from None

    # ---- the pass ----
    def read(self) -> None:
        try:
            bulk = _bulk_token_counts(self.path)
        except OSError as exc:
            raise TunerError(f"{self.name}: cannot read ({one_line(exc)}).") from None
        if bulk is not None:
            self._take_bulk(*bulk)
            return
        try:
            # newline="" keeps U+2028 and friends inside JSON strings from splitting a record.
            with self.path.open(encoding="utf-8-sig", newline="") as fh:
                self._read_records(self._objects(fh))
        except UnicodeDecodeError as exc:
            raise TunerError(f"{self.name}: not UTF-8 text ({exc.reason} at byte "
                             f"{exc.start}).") from None
        except OSError as exc:
            raise TunerError(f"{self.name}: cannot read ({one_line(exc)}).") from None

    def _take_bulk(self, prompt: np.ndarray, output: np.ndarray) -> None:
        """The columns of a token-count file read in bulk: what the line-by-line pass would
        have filled (shape "tokens", output field output_tokens, no custom_id)."""
        n = prompt.size
        self.shape, self.first_line, self.n = SHAPES.index("tokens"), 1, n
        cols = {"line": np.arange(1, n + 1, dtype=np.int64), "prompt": prompt,
                "output": output,
                "field": np.full(n, _FIELD_CODE["output_tokens"], dtype=np.int8),
                "cid": np.full(n, NO_ID, dtype=np.int64)}
        self.cols.arrays = cols
        self.cols.n = n

    def _objects(self, fh) -> Iterator[tuple[int, Any]]:
        """(line number, JSON value) of each line but blank ones; a line that is not one JSON
        value is a bad line (:meth:`_bad`). The C scanner reads common lines; json.loads words
        the error of the others."""
        decoder = json.JSONDecoder()
        scan_once = (json.scanner.c_make_scanner or json.scanner.py_make_scanner)(decoder)
        for lineno, line in enumerate(fh, start=1):
            try:
                obj, end = scan_once(line, 0)
                if end == len(line) or not line[end:].strip(_JSON_WS):
                    yield lineno, obj
                    continue
            except (StopIteration, ValueError, RecursionError):
                pass
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                # a JSON object printed over several lines (json.dumps(indent=...))
                hint = ("; JSONL holds one whole record per line" if line.strip() == "{"
                        else "")
                self._bad(lineno, BadLine(f"invalid JSON ({exc.msg} at column "
                                          f"{exc.colno}){hint}"))
                continue
            yield lineno, obj

    def _read_records(self, objects: Iterator[tuple[int, Any]]) -> None:
        """Every record into the columns (a bad one through :meth:`_bad`)."""
        cols = self.cols.bufs
        app_line, app_prompt = cols["line"].append, cols["prompt"].append
        app_out, app_field, app_cid = cols["output"].append, cols["field"].append, \
            cols["cid"].append
        fast, want_text = _fast_row, self.want_text
        n, file_shape, chunk = 0, None, CHUNK_RECORDS
        for lineno, obj in objects:
            rec = None  # the general path's Record
            try:
                row = fast(obj, want_text)
                if row is None:
                    row, rec = self._general(obj)
                if row[0] != file_shape:
                    self._check_shape(row[0])
                group = -1 if rec is None or rec.prefix_key is None else self._check_prefix(rec)
            except BadLine as exc:
                self._bad(lineno, exc)
                continue
            if file_shape is None:
                file_shape = self.shape = row[0]
                self.first_line = lineno
            _, known, est, texts, out, field, cid = row
            copies, ptoks = 1, 0 if rec is None else rec.prefix_tokens
            if rec is not None and rec.n > 1:
                copies = rec.n
                if group < 0:  # the n sequences share their whole prompt (see records.py)
                    group = self.prefix_index.setdefault((_N_GROUP, lineno),
                                                         len(self.prefix_index))
                    ptoks = known if known >= 0 else WHOLE_PROMPT
            digest = NO_ID if cid is None else _id_digest(cid)
            for _ in range(copies):
                app_line(lineno)
                app_prompt(known if known >= 0 else -1 - est)
                app_out(out)
                app_field(field)
                app_cid(digest)
                digest = NO_ID  # one custom_id per request line, not per completion
                if texts is not None and want_text:
                    self._count_texts(n, texts)
                if group >= 0:
                    self._add_prefix(n, group, ptoks)
                if rec is not None and rec.arrival_s is not None:
                    self.arr.bufs["req"].append(n)
                    self.arr.bufs["t"].append(rec.arrival_s)
                n += 1
                if n % chunk == 0:
                    self.cols.flush()
                    self.pref.flush()
                    self.arr.flush()
        self.n = n

    def _count_texts(self, n: int, texts: list[tuple[str, bool, int]]) -> None:
        counter = self.counter or self._text_counter()
        for text, special, extra in texts:
            counter.add(n, text, special=special, extra=extra)

    def _add_prefix(self, n: int, group: int, tokens: int) -> None:
        bufs = self.pref.bufs
        bufs["req"].append(n)
        bufs["group"].append(group)
        bufs["tokens"].append(tokens)

    # ---- custom_id uniqueness ----
    def _check_ids(self, before: int | None = None) -> np.ndarray:
        """Indices of records that repeat an earlier record's custom_id (skipped with
        skip_invalid); without it, a TunerError naming the earliest such line. `before`: only
        records on lines before it (the check that precedes a bad line's error)."""
        cid, lines = self.cols.array("cid"), self.cols.array("line")
        if before is not None:
            upto = int(np.searchsorted(lines, before))  # lines ascend
            cid, lines = cid[:upto], lines[:upto]
        digests = np.sort(cid[cid != NO_ID])
        if not (digests[1:] == digests[:-1]).any():  # the usual case: one sort, no repeat
            return np.zeros(0, dtype=np.int64)
        idx = np.flatnonzero(cid != NO_ID)
        order = idx[np.argsort(cid[idx], kind="stable")]  # file order within equal digests
        same = cid[order[1:]] == cid[order[:-1]]
        suspects = np.unique(np.concatenate([order[1:][same], order[:-1][same]]))
        values = self._ids_on_lines(set(lines[suspects].tolist()))
        first: dict[Any, int] = {}
        repeats = []
        for i in suspects.tolist():  # file order
            value = values[int(lines[i])]
            key = (type(value).__name__, json.dumps(value, sort_keys=True)) \
                if not _hashable(value) else value
            line0 = first.setdefault(key, int(lines[i]))
            if line0 != int(lines[i]):
                if not self.skip_invalid:
                    raise TunerError(f"{self.name}:{int(lines[i])}: duplicate custom_id "
                                     f"{value!r} (first on line {line0}); the OpenAI Batch "
                                     "API requires unique ids")
                repeats.append(i)
        return np.asarray(repeats, dtype=np.int64)

    def _ids_on_lines(self, wanted: set[int]) -> dict[int, Any]:
        """custom_id of each line number in `wanted` (read back from the file)."""
        found: dict[int, Any] = {}
        with self.path.open(encoding="utf-8-sig", newline="") as fh:
            for lineno, line in enumerate(fh, start=1):
                if lineno in wanted:
                    found[lineno] = json.loads(line).get("custom_id")
                    if len(found) == len(wanted):
                        break
        return found

    # ---- the columns ----
    def columns(self) -> RequestColumns:
        drop = self._check_ids()
        if self.counter_error is not None:
            raise self.counter_error
        n = self.n
        keep = np.ones(n, dtype=bool)
        if drop.size:  # a repeated line's n completions go with it (one line skipped)
            all_lines = self.cols.array("line")
            self.skipped += int(np.unique(all_lines[drop]).size)
            drop = np.flatnonzero(np.isin(all_lines, all_lines[drop]))
        keep[drop] = False

        def kept(a: np.ndarray) -> np.ndarray:
            return a[keep] if drop.size else a

        field, lines = kept(self.cols.array("field")), kept(self.cols.array("line"))
        output, prompt = kept(self.cols.array("output")), kept(self.cols.array("prompt"))
        self.cols = None  # the custom_id digests and chunk lists are not needed any more
        texts = prompt < 0
        if not texts.any():
            tokenizer = "" if not prompt.size else ("given: token ids" if self.shape != 2
                                                   else "given: prompt_tokens field")
        else:
            if self.want_text:
                counts = kept(self._text_counter().counts(n))
            else:
                counts = -1 - prompt
            tokenizer = (self.counter.description if self.counter is not None
                         else ESTIMATE_TOKENIZER)
            if (~texts).any():
                tokenizer += "; token-id prompts counted as given"
            prompt = np.where(texts, counts, prompt)
        # bincount, not np.unique: its plain form imports numpy.ma (~10 ms of a simulate)
        present = np.flatnonzero(np.bincount(field, minlength=len(OUTPUT_FIELDS)))
        used = sorted(OUTPUT_FIELDS[c] for c in present if c)
        label = " / ".join(used)
        if label in ("max_tokens", "max_completion_tokens", "max_completion_tokens / max_tokens"):
            label += " (the cap, taken as the output length)"
        pids = ptoks = None
        if self.prefix_index:
            pids = np.full(n, -1, dtype=np.int64)
            ptoks = np.zeros(n, dtype=np.int64)
            req = self.pref.array("req")
            pids[req] = self.pref.array("group")
            ptoks[req] = self.pref.array("tokens")
            pids, ptoks = kept(pids), kept(ptoks)
            ptoks = np.where(ptoks == WHOLE_PROMPT, prompt, ptoks)
        return RequestColumns(lines, prompt, output, label, pids, ptoks, tokenizer, self.skipped,
                              self._arrivals(n, lines, kept))

    def _arrivals(self, n: int, lines: np.ndarray, kept) -> np.ndarray | None:
        """Seconds after the first arrival of every request, or None when no record has an
        arrival time; a TunerError when some have one and others not."""
        req = self.arr.array("req")
        if not req.size:
            return None
        t = np.full(n, np.nan)
        t[req] = self.arr.array("t")
        t = kept(t)
        missing = np.isnan(t)
        if missing.any():
            i = int(np.argmax(missing))
            j = int(np.argmax(~missing))
            raise TunerError(f"{self.name}:{int(lines[i])}: no arrival_s / arrived_at, but line "
                             f"{int(lines[j])} has one; give every request an arrival time, or "
                             "none (all at t = 0)")
        # replayed from the first arrival: the makespan runs from it to the last token (Unix
        # time in ms, us or ns converted to seconds, as a run's per-request file is)
        t, _ = seconds_from_first(t)
        check_span(self.name, t, lambda i: int(lines[i]))
        return t


def _hashable(value: Any) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True


def read_jsonl(path: Path, skip_invalid: bool, tokenizer_path: str | Path | None,
               model: ModelSpec | None, *, name: str | Path | None = None) -> RequestColumns:
    """The per-request columns of a JSONL job file (see the module docstring); `name`: how
    errors name the file (default its path; a spooled stream's is not the user's)."""
    reader = _Reader(path, skip_invalid, tokenizer_path, model, name)
    reader.read()
    return reader.columns()
