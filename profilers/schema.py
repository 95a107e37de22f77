"""The profile format: one CSV row per measured case, plus provenance.json. No torch here.

profile.csv columns (features not used by an operation are 0):
  operation      see predictors.opmath (linear.qkv, attn.decode, copy.h2d, quant, ...)
  variant        sub-kind: pinned/pageable (copies), int8/int4 + where (quant), '' otherwise
  tokens         token rows (projections, element-wise ops, LM head, prefill chunk, CPU matmul)
  context        KV tokens before a prefill chunk
  batch          decode requests
  kv_len         KV tokens per decode request
  size_bytes     bytes copied / bytes of the (de)quantized 16-bit or 32-bit tensor
  bits           target bit width of (de)quantization
  intra_threads  torch intra-op threads (CPU ops; 0 = not varied)
  inter_threads  torch inter-op threads (CPU ops; 0 = not varied)
  shape          human-readable tensor shape of the case
  flops          FLOPs of one call (predictors.opmath)
  bytes_moved    bytes one call moves to/from memory (predictors.opmath)
  dtype          element type of the inputs
  median_s, p10_s, p90_s   per-call seconds over the samples (NaN when not measured)
  repeats        timed samples; calls_per_sample: calls averaged inside each sample
  status         ok | oom | skipped: REASON
"""

from __future__ import annotations

import csv
import math
from dataclasses import asdict, dataclass
from pathlib import Path

COLUMNS = ["operation", "variant", "tokens", "context", "batch", "kv_len", "size_bytes", "bits",
           "intra_threads", "inter_threads", "shape", "flops", "bytes_moved", "dtype", "median_s",
           "p10_s", "p90_s", "repeats", "calls_per_sample", "status"]
KEY_COLUMNS = ["operation", "variant", "tokens", "context", "batch", "kv_len", "size_bytes",
               "bits", "intra_threads", "inter_threads", "dtype"]
PROFILE_CSV = "profile.csv"
PROVENANCE_JSON = "provenance.json"


@dataclass(frozen=True)
class Case:
    """One measurement to make: an operation at one point of its feature grid."""

    operation: str
    variant: str = ""
    tokens: int = 0
    context: int = 0
    batch: int = 0
    kv_len: int = 0
    size_bytes: int = 0
    bits: int = 0
    intra_threads: int = 0
    inter_threads: int = 0
    shape: str = ""
    flops: float = 0.0
    bytes_moved: float = 0.0

    def key(self, dtype: str) -> tuple[str, ...]:
        d = asdict(self) | {"dtype": dtype}
        return tuple(str(d[c]) for c in KEY_COLUMNS)

    @property
    def family(self) -> str:
        return self.operation.split(".")[0] if "." in self.operation else self.operation


def row_key(row: dict) -> tuple[str, ...]:
    """The resume key of a CSV row (same as Case.key)."""
    return tuple(str(row[c]) for c in KEY_COLUMNS)


def make_row(case: Case, dtype: str, *, median_s: float = math.nan, p10_s: float = math.nan,
             p90_s: float = math.nan, repeats: int = 0, calls_per_sample: int = 0,
             status: str = "ok") -> dict:
    row = asdict(case) | {"dtype": dtype, "median_s": median_s, "p10_s": p10_s, "p90_s": p90_s,
                          "repeats": repeats, "calls_per_sample": calls_per_sample,
                          "status": status}
    return {c: row[c] for c in COLUMNS}


def read_rows(path: Path) -> list[dict]:
    """Rows of a profile.csv (strings); [] when the file does not exist."""
    if not path.is_file():
        return []
    with path.open(newline="") as fh:
        return list(csv.DictReader(fh))


class RowWriter:
    """Appends rows to profile.csv one at a time (flushed), so an interrupted run keeps them."""

    def __init__(self, path: Path):
        new = not path.is_file() or path.stat().st_size == 0
        self._fh = path.open("a", newline="")
        self._w = csv.DictWriter(self._fh, fieldnames=COLUMNS)
        if new:
            self._w.writeheader()
            self._fh.flush()

    def write(self, row: dict) -> None:
        self._w.writerow({k: (f"{v:.6g}" if isinstance(v, float) and k in ("flops", "bytes_moved")
                              else (f"{v:.9g}" if isinstance(v, float) else v))
                          for k, v in row.items()})
        self._fh.flush()

    def close(self) -> None:
        self._fh.close()

    def __enter__(self) -> RowWriter:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
