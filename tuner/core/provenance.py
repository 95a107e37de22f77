"""Where a predicted figure comes from: one typed value from the cost model to the report.

Kinds, in the order DESIGN.md prefers them: a profile the user measured (``measured``), public
measured kernel tables (``tables``), a measured GPU carried to another through spec-sheet ratios
(``transferred``), the spec-sheet roofline (``roofline``). ``calibrated`` marks a model corrected by
the user's own real runs. Only ``measured`` and ``tables`` may be printed as measurements.
"""

from __future__ import annotations

from dataclasses import dataclass

PROVENANCE_KINDS = ("measured", "tables", "transferred", "calibrated", "roofline")
MEASURED_KINDS = frozenset({"measured", "tables"})


@dataclass(frozen=True)
class Provenance:
    kind: str  # one of PROVENANCE_KINDS
    detail: str  # e.g. "roofline from A10 spec sheet (not measured)"
    error_pct: float | None = None  # validated error of this source where it could be checked
    # the engine whose kernels and host overhead it was resolved for, where not vLLM's (the
    # default): "sglang" for a cost model built for SGLang (predictors.sources, engine=)
    engine: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in PROVENANCE_KINDS:
            raise ValueError(f"provenance kind {self.kind!r} is not one of {PROVENANCE_KINDS}")

    @property
    def is_measured(self) -> bool:
        return self.kind in MEASURED_KINDS

    def __str__(self) -> str:
        # the detail names the check behind error_pct (fidelity suite, transfer rule) in words
        return self.detail

    def to_dict(self) -> dict:
        d = {"kind": self.kind, "detail": self.detail, "error_pct": self.error_pct}
        if self.engine is not None:
            d["engine"] = self.engine
        return d

    @classmethod
    def from_dict(cls, d: dict) -> Provenance:
        return cls(d["kind"], d["detail"], d.get("error_pct"), d.get("engine"))
