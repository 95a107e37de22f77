"""The `Workload` value: token lengths of an offline batch job (all requests known at t=0)."""

from __future__ import annotations

import base64
import dataclasses
import zlib
from dataclasses import dataclass

import numpy as np

#: Columns of a CSV trace (the Vidur / Splitwise traces): prompt and output token counts.
# the largest token count a request may give: far above any context window, well inside
# int64 (a larger JSON integer or CSV value is a bad line, not an overflow)
MAX_TOKENS = 2**40
CSV_PROMPT_COLUMN = "num_prefill_tokens"
CSV_OUTPUT_COLUMN = "num_decode_tokens"
#: optional CSV columns giving each request's arrival in seconds (Vidur's trace CSV names it
#: arrived_at): the run is replayed with them
CSV_ARRIVAL_COLUMNS = ("arrived_at", "arrival_s")
#: the longest span of arrivals accepted (a year, first to last, after Unix time in ms, us or ns
#: is converted to seconds): a longer one is a unit mistake
MAX_ARRIVAL_S = 365 * 86400.0


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
    # Seconds after the job starts at which each request reaches the engine (replaying a real
    # run); None for an offline job, where every request is there at t = 0.
    arrival_s: np.ndarray | None = None

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
            arrival_s=None if self.arrival_s is None else self.arrival_s[idx],
        )

    def offline(self) -> Workload:
        """The same requests as an offline job: every one at t = 0 (arrival times dropped)."""
        return self if self.arrival_s is None else dataclasses.replace(self, arrival_s=None)

    @property
    def arrival_span_s(self) -> float:
        """Seconds from the first arrival to the last (0 for an offline job)."""
        a = self.arrival_s
        return 0.0 if a is None or not a.size else float(a.max() - a.min())


def lengths_from_input(output_source: str) -> bool:
    """The output lengths are every request's own max_tokens (Workload.output_source), so a job
    can be sorted by them before it runs; lengths from a trace's output_tokens or from a
    distribution are not known until the run."""
    src = output_source or ""
    return src.startswith(("max_tokens", "max_completion_tokens")) and " for " not in src


@dataclass
class RequestColumns:
    """What a reader gives for each valid request of a file, in file order, before output
    lengths are filled in and the final checks run (see :mod:`.readers`)."""

    lines: np.ndarray  # 1-based line number of each request
    prompt: np.ndarray  # prompt tokens
    output: np.ndarray  # output tokens; -1 = not given
    output_label: str  # where the given output lengths come from
    prefix_ids: np.ndarray | None  # shared-prefix group (-1: none); None: no prefix in the file
    prefix_tokens: np.ndarray | None
    tokenizer: str  # how prompt lengths were obtained
    skipped: int  # invalid lines skipped
    arrival_s: np.ndarray | None = None  # seconds after the first arrival; None: all at t = 0


def one_line(exc: BaseException) -> str:
    """An exception's message on one line (for a TunerError)."""
    return " ".join(str(exc).split()) or type(exc).__name__


#: How `pack_lengths` stores an array: the smallest integer dtype that holds it, zlib, base64.
PACKED_FORMAT = "zlib-base64"


def pack_lengths(a: np.ndarray | None) -> dict | None:
    """A per-request integer column as a small JSON-able value (stored in a study: a few bytes
    per request instead of a JSON list, which costs ~40 bytes per request once parsed)."""
    if a is None:
        return None
    a = np.asarray(a, dtype=np.int64)
    lo, hi = (int(a.min()), int(a.max())) if a.size else (0, 0)
    dtype = next(t for t in ("<u1", "<u2", "<u4", "<i2", "<i4", "<i8")
                 if np.iinfo(t).min <= lo and hi <= np.iinfo(t).max)
    data = base64.b64encode(zlib.compress(a.astype(dtype).tobytes(), 6)).decode("ascii")
    return {"format": PACKED_FORMAT, "dtype": dtype, "n": int(a.size), "data": data}


def unpack_lengths(value: dict | list | None) -> np.ndarray | None:
    """The int64 column `pack_lengths` stored (or a plain list, as older studies hold it)."""
    if value is None:
        return None
    if isinstance(value, list):
        return np.asarray(value, dtype=np.int64)
    if not isinstance(value, dict) or value.get("format") != PACKED_FORMAT:
        raise ValueError(f"not a packed length column: {str(value)[:60]}")
    try:
        raw = zlib.decompress(base64.b64decode(value["data"]))
    except zlib.error as exc:
        raise ValueError(f"packed length column is corrupt ({exc})") from None
    a = np.frombuffer(raw, dtype=np.dtype(value["dtype"])).astype(np.int64)
    if a.size != int(value["n"]):
        raise ValueError(f"packed length column holds {a.size} values, not {value['n']}")
    return a
