"""Output-length distributions for requests whose output length the job file does not give
(``--output-dist KIND:ARGS``), in a registry: :data:`OUTPUT_DISTS` maps a kind to a sampler
factory, so adding a distribution is one function and one entry."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import numpy as np

from tuner.core.errors import TunerError
from tuner.core.workload.base import CSV_OUTPUT_COLUMN, one_line

#: sampler(n, rng) -> n int64 output lengths >= 1 (rng a numpy.random.Generator: named, not
#: evaluated, so importing this module leaves numpy.random, ~7 ms, to the runs that sample)
Sampler = Callable[[int, "np.random.Generator"], np.ndarray]
OUTPUT_DIST_EXAMPLE = "e.g. --output-dist lognormal:167:0.8 or --output-dist trace:lengths.csv"


def _floats(rest: str, n: int) -> list[float]:
    """`n` finite numbers from "A:B"; ValueError otherwise (the caller prints the usage)."""
    args = [float(a) for a in rest.split(":")] if rest else []
    if len(args) != n or not all(math.isfinite(a) for a in args):
        raise ValueError(rest)
    return args


def _as_len(a: np.ndarray) -> np.ndarray:
    return np.maximum(np.rint(a), 1).astype(np.int64)


def _fixed(rest: str) -> Sampler:
    """fixed:N"""
    (n_fixed,) = _floats(rest, 1)
    if n_fixed < 1 or not n_fixed.is_integer():
        raise ValueError(rest)
    return lambda n, rng: np.full(n, int(n_fixed), dtype=np.int64)


def _uniform(rest: str) -> Sampler:
    """uniform:LO:HI"""
    lo_f, hi_f = _floats(rest, 2)
    lo, hi = math.ceil(lo_f), math.floor(hi_f)
    if not 1 <= lo_f <= hi_f or lo > hi:  # integers, inclusive
        raise ValueError(rest)
    return lambda n, rng: rng.integers(lo, hi + 1, size=n, dtype=np.int64)


def _normal(rest: str) -> Sampler:
    """normal:MEAN:STD"""
    mean, std = _floats(rest, 2)
    if std < 0:
        raise ValueError(rest)
    return lambda n, rng: _as_len(rng.normal(mean, std, size=n))  # rounded, clipped at >= 1


def _lognormal(rest: str) -> Sampler:
    """lognormal:MEDIAN:SIGMA"""
    median, sigma = _floats(rest, 2)  # sigma of the log
    if median <= 0 or sigma < 0:
        raise ValueError(rest)
    return lambda n, rng: _as_len(rng.lognormal(math.log(median), sigma, size=n))


def _trace(rest: str) -> Sampler:
    """trace:FILE.csv"""
    if not rest:
        raise ValueError(rest)
    values = read_csv_column(Path(rest).expanduser(), CSV_OUTPUT_COLUMN)
    return lambda n, rng: rng.choice(values, size=n, replace=True)  # with replacement


#: --output-dist kinds: name -> factory(text after "name:") -> sampler; a factory raises
#: ValueError on bad arguments, and its docstring is the form shown in the usage line.
OUTPUT_DISTS: dict[str, Callable[[str], Sampler]] = {
    "fixed": _fixed,
    "uniform": _uniform,
    "normal": _normal,
    "lognormal": _lognormal,
    "trace": _trace,
}


def parse_output_dist(spec: str) -> tuple[str, Sampler]:
    """Parse an --output-dist spec into (description, sampler(n, rng) -> int64 lengths >= 1).

    ``fixed:N`` | ``uniform:LO:HI`` (integers, inclusive) | ``normal:MEAN:STD`` (rounded,
    clipped at >= 1) | ``lognormal:MEDIAN:SIGMA`` (sigma of the log) | ``trace:PATH`` (draw with
    replacement from the num_decode_tokens column of a CSV trace); kinds: :data:`OUTPUT_DISTS`.
    """
    forms = [f.__doc__ for f in OUTPUT_DISTS.values()]
    usage = (f"Bad --output-dist {spec!r}: use {', '.join(forms[:-1])} or {forms[-1]} "
             "(e.g. lognormal:167:0.8).")
    kind, _, rest = str(spec).strip().partition(":")
    factory = OUTPUT_DISTS.get(kind.lower())
    if factory is None:
        raise TunerError(usage)
    try:
        sampler = factory(rest)
    except ValueError:
        raise TunerError(usage) from None
    label = f"trace:{rest}" if kind.lower() == "trace" else spec
    return f"output_dist {label}", sampler


def read_csv_column(path: Path, column: str) -> np.ndarray:
    """The positive-integer values of one column of a CSV trace (for trace:PATH)."""
    import pandas as pd

    if not path.is_file():
        raise TunerError(f"{path}: no such file (for --output-dist trace:).")
    try:
        df = pd.read_csv(path, skipinitialspace=True)
    except Exception as exc:
        raise TunerError(f"{path}: not a readable CSV ({one_line(exc)}).") from None
    df.columns = [str(c).strip() for c in df.columns]
    if column not in df.columns:
        raise TunerError(f"{path}: CSV has no {column} column (found: {', '.join(df.columns)}).")
    v = pd.to_numeric(df[column], errors="coerce").to_numpy(dtype=float)
    v = v[np.isfinite(v) & (v >= 1) & (v == np.floor(v))].astype(np.int64)
    if v.size == 0:
        raise TunerError(f"{path}: no positive integer values in column {column}.")
    return v
