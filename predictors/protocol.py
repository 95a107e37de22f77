"""The one CostModel protocol every cost model implements (roofline, measured kernel tables,
fitted profiles, calibrated): the simulator, the offload pricing and `tuner cost` call these
members directly, never probing for them.

All timing methods are vectorised: ``f`` holds the batch features of many iterations
(`predictors.features.BatchFeatures`) and each returns one float64 array of seconds per
iteration.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np

from tuner.core.provenance import Provenance
from tuner.predictors.features import BatchFeatures
from tuner.predictors.transfer_model import TransferModel

#: Operation groups of `CostModel.breakdown` priced once per iteration (not per layer).
ITERATION_GROUPS = frozenset({"lm_head", "overhead"})


@runtime_checkable
class CostModel(Protocol):
    @property
    def provenance(self) -> Provenance:
        """Where the figures come from (measured / tables / transferred / calibrated /
        roofline) and their validated error."""

    @property
    def transfer_model(self) -> TransferModel | None:
        """Measured host<->device copy curve, or None (the simulator then uses the GPU's
        spec-sheet host link)."""

    def describe(self) -> str:
        """The provenance as one line of text."""

    def iteration_time_s(self, f: BatchFeatures) -> np.ndarray:
        """Seconds of each whole engine iteration."""

    def breakdown(self, f: BatchFeatures) -> dict[str, np.ndarray]:
        """Seconds of each operation group per iteration, summed over the layers (groups in
        ITERATION_GROUPS once per iteration)."""

    def breakdown_ops(self, f: BatchFeatures) -> dict[str, np.ndarray]:
        """Seconds per layer of each per-layer operation (as finely as the model knows them:
        a fitted profile per operator, others per group)."""

    def layer_time_s(self, f: BatchFeatures) -> np.ndarray:
        """Seconds of one transformer layer (the overlap budget of KV offloading)."""

    def decode_attention_layer_s(self, f: BatchFeatures) -> np.ndarray:
        """Seconds of one layer's decode attention (what CPU attention replaces)."""


def group_ops(parts: dict[str, np.ndarray], num_layers: int) -> dict[str, np.ndarray]:
    """`breakdown_ops` of a model that knows only operation groups: each per-layer group's
    seconds per layer."""
    return {k: v / num_layers for k, v in parts.items() if k not in ITERATION_GROUPS}
