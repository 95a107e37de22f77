"""How a duration is shown: one rule for the terminal, the exports' headers and the report.

Seconds below a minute (3 significant digits, so a sub-second CPU run still reads), minutes
below an hour, hours below three days, then days; one decimal place above seconds (none from
100 on). 42 s -> "42 s", 72 s -> "1.2 min", 3,700 s -> "1.0 h", 1.8 h -> "1.8 h".
"""

from __future__ import annotations

import math
from typing import Any

NO_VALUE = "—"


def duration_unit(seconds: float) -> tuple[str, float]:
    """(unit, divisor) for a duration of this size: also the axis unit of the report's plots."""
    if seconds < 60:
        return "s", 1.0
    if seconds < 3600:
        return "min", 60.0
    if seconds < 72 * 3600:
        return "h", 3600.0
    return "d", 86400.0


def as_finite(x: Any) -> float | None:
    """``x`` as a finite float, or None (missing, not a number, NaN or infinite)."""
    if x is None or isinstance(x, bool):
        return None
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def fmt_duration(seconds: Any) -> str:
    """'42 s', '1.2 min', '2.4 h', '5.0 d'; '—' for None or a non-finite value."""
    s = as_finite(seconds)
    if s is None:
        return NO_VALUE
    unit, div = duration_unit(abs(s))
    v = s / div
    if unit == "s":
        return f"{v:.3g} s"
    return f"{v:.0f} {unit}" if abs(v) >= 100 else f"{v:.1f} {unit}"


def plural(count: int, noun: str) -> str:
    """'1 GPU', '8 GPUs': a count with its noun, for the lines that name machines and GPUs
    (the exports' headers, the terminal, the report)."""
    return f"{count} {noun}{'' if count == 1 else 's'}"


def fmt_usd(x: Any) -> str:
    """A job's $ as every output prints it (terminal, progress bar, report, exports): below $1
    four decimals, since cents matter on small jobs ($0.0352 and $0.0373 would both read
    $0.04), else "$1,234.50"; "—" where there is no finite figure."""
    v = as_finite(x)
    if v is None:
        return "—"
    return f"${v:.4f}" if abs(v) < 1 else f"${v:,.2f}"


def fmt_rate(x: Any) -> str:
    """A throughput (tok/s, req/s) as the terminal prints it: whole numbers with separators
    from 100 on ("12,345"), else 3 significant digits, so a slow or sparse job's 0.19 tok/s
    does not read as 0; "—" where there is no finite figure."""
    v = as_finite(x)
    if v is None:
        return NO_VALUE
    return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.3g}"
