"""Measured collective tables as the engine sees them: an all-reduce, all-gather or
reduce-scatter of more bytes never priced below one of fewer (the tables' dips are timing
noise), so a decode step with one running request fewer never prices its all-reduce higher."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tuner.core.catalog import load_gpus
from tuner.predictors.aic import _allreduce_curve, achievable_fractions
from tuner.predictors.aic_tables import MEASURED, KernelTables, has_tables
from tuner.predictors.aic_transfer import transfer_source, transfer_tables
from tuner.predictors.tables import monotone_times_s

GPUS = [g for g in MEASURED if has_tables(g)]


def _nondecreasing(t):
    return bool(np.all(np.diff(t) >= -1e-15 * np.abs(t[1:])))


@settings(derandomize=True, max_examples=200, deadline=None)
@given(st.lists(st.floats(1e-6, 1e-2), min_size=1, max_size=40))
def test_monotone_times_keeps_level_and_order(values):
    t = np.array(values)
    m = monotone_times_s(t)
    assert m.shape == t.shape and _nondecreasing(m)
    # pooling averages log times: the curve's overall level (geometric mean) is kept
    assert np.isclose(np.log(m).sum(), np.log(t).sum(), rtol=1e-9, atol=1e-9)
    assert np.all(m >= t.min() * (1 - 1e-12)) and np.all(m <= t.max() * (1 + 1e-12))


def test_monotone_times_leaves_a_monotone_curve_as_measured():
    t = np.array([1e-5, 1e-5, 2e-5, 7e-5])
    np.testing.assert_array_equal(monotone_times_s(t), t)


def test_a_measured_dip_is_averaged_not_dropped():
    # L40S eager all-reduce on 4 GPUs as shipped: 0.0941 ms at 512 B, 0.0574 ms at 1 KiB
    raw = KernelTables.load("L40S").arrays["allreduce"]
    assert len(raw)
    out = monotone_times_s(np.array([9.41e-5, 5.74e-5]))
    assert out[0] == out[1] and 5.74e-5 < out[0] < 9.41e-5


@pytest.mark.parametrize("gpu", GPUS)
def test_every_shipped_collective_curve_grows_with_its_message(gpu):
    tables = KernelTables.load(gpu)
    for n in (2, 4, 8):
        for graph in (True, False):
            r = tables.allreduce(n, graph)
            if r is not None:
                assert _nondecreasing(r[1]), (gpu, n, graph)
        for op in ("allreduce", "allgather", "reducescatter"):
            r = tables.nccl_collective(op, n)
            if r is not None:
                assert _nondecreasing(r[1]), (gpu, op, n)


@pytest.mark.parametrize("name", ["A10", "A40", "L4"])
def test_transferred_collective_curves_grow_with_their_message(name):
    gpus = load_gpus()
    src = transfer_source(gpus[name])
    tables = transfer_tables(KernelTables.load(src), gpus[src], gpus[name], achievable_fractions())
    for graph in (True, False):
        assert _nondecreasing(tables.allreduce(2, graph)[1]), (name, graph)


@pytest.mark.parametrize("gpu,tp", [("L40S", 4), ("H100", 2), ("A100-80G", 8)])
def test_a_smaller_decode_step_never_prices_a_dearer_all_reduce(gpu, tp):
    # decode batches 1..256 of an 8,192-wide model (16 KiB per token): CUDA-graph sizes,
    # below the 8 MiB where NCCL takes over
    tok = np.arange(1, 257, dtype=np.float64)
    log_tok, log_t, _ = _allreduce_curve(KernelTables.load(gpu), tp, 16384.0, tok, None)
    inside = np.exp(log_tok) <= 256.5  # the curve also holds the switch points beyond
    assert inside.sum() == 256 and _nondecreasing(np.exp(log_t[inside])), (gpu, tp)
