"""Every cost model implements the whole CostModel protocol (predictors.protocol): the simulator,
the offload pricing and `tuner cost` call its members without probing for them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tuner import predictors
from tuner.core.catalog import get_gpu, get_model, load_gpus
from tuner.core.config import ServingConfig
from tuner.core.provenance import PROVENANCE_KINDS
from tuner.predictors.calibration import CalibratedCostModel, Calibration
from tuner.predictors.features import BatchFeatures
from tuner.predictors.protocol import CostModel
from tuner.predictors.roofline import RooflineCostModel
from tuner.predictors.sources import resolve_cost_model

GPUS = load_gpus()


def features() -> BatchFeatures:
    """Five iterations: prefill only, small and large decode batches, mixed."""
    chunk = np.array([512.0, 0, 64, 0, 2048])
    ctx = np.array([256.0, 0, 32, 0, 1024])
    decodes = np.array([0.0, 8, 32, 256, 4])
    return BatchFeatures(prefill_tokens=chunk, prefill_sq=chunk**2, prefill_ctx=chunk * ctx,
                         decodes=decodes, decode_kv=decodes * 900,
                         seqs_sampled=decodes + (chunk > 0))


def models():
    m = get_model("llama-3-8b")
    out = {}
    for gpu in ("H100", "A40", "A10"):  # measured tables, transferred, transferred
        g = get_gpu(gpu, GPUS)
        out[gpu] = resolve_cost_model(m, g, ServingConfig(gpu=g.name), calibrated=False)
    g = get_gpu("A10", GPUS)
    out["roofline"] = RooflineCostModel.from_specs(g, m)
    out["calibrated"] = CalibratedCostModel(out["roofline"], Calibration(
        device="A10", model=m.name, kernel_factor=1.1))
    # the shipped CPU profile of tiny-llama, used as the measured model on purpose
    shipped = Path(predictors.__file__).parent / "data" / "tiny-llama-cpu"
    out["fitted"] = resolve_cost_model(get_model("tiny-llama"), g, ServingConfig(gpu="A10"),
                                       profile=shipped, mode="measured", calibrated=False)
    return out


@pytest.mark.parametrize("name", list(models()))
def test_cost_model_implements_the_whole_protocol(name):
    cm = models()[name]
    assert isinstance(cm, CostModel)
    f = features()
    for method in (cm.iteration_time_s, cm.layer_time_s, cm.decode_attention_layer_s):
        v = np.asarray(method(f))
        assert v.shape == (len(f),) and np.all(np.isfinite(v)) and np.all(v >= 0)
    parts = cm.breakdown(f)
    assert all(np.asarray(v).shape == (len(f),) for v in parts.values())
    assert all(np.asarray(v).shape == (len(f),) for v in cm.breakdown_ops(f).values())
    assert cm.provenance.kind in PROVENANCE_KINDS and cm.describe()
    assert cm.transfer_model is None or hasattr(cm.transfer_model, "h2d_s")
    # one layer never exceeds the iteration
    assert np.all(cm.layer_time_s(f) <= cm.iteration_time_s(f) + 1e-12)
