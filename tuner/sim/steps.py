"""The step record: one row per engine iteration, the one layout the scheduler writes, the
simulator prices, the MILP reproduces and the comparison with a real engine reads.

A row holds the batch composition the cost model needs (predictors.features.BatchFeatures)
plus the scheduler's state after the step. Columns are named here and nowhere else; code
indexes them by these constants (tuner/sim/_kernels.c numbers them alike; checked on load).
"""

from __future__ import annotations

import numpy as np

from tuner.predictors.features import BatchFeatures

STEP_COLUMNS = (
    "prefill_tokens",  # prompt (or recompute) tokens computed in the step
    "prefill_sq",  # sum of chunk^2 over the step's prefill chunks (attention FLOPs)
    "prefill_ctx",  # sum of chunk * cached context over them
    "decodes",  # requests decoding one token
    "decode_kv",  # KV tokens those decodes read
    "sampled",  # requests that produced a token
    "kv_blocks",  # KV blocks held after the step (private + shared prefix blocks)
    "preempted",  # requests evicted (by recompute) in the step
    "running",  # running requests after the step
)
(PREFILL_TOKENS, PREFILL_SQ, PREFILL_CTX, DECODES, DECODE_KV, SAMPLED, KV_BLOCKS, PREEMPTED,
 RUNNING) = range(len(STEP_COLUMNS))
N_COLS = len(STEP_COLUMNS)


def batch_features(steps: np.ndarray) -> BatchFeatures:
    """The cost model's inputs for every step of a record (any numeric dtype)."""
    st = np.asarray(steps).astype(np.float64)
    return BatchFeatures(
        prefill_tokens=st[:, PREFILL_TOKENS], prefill_sq=st[:, PREFILL_SQ],
        prefill_ctx=st[:, PREFILL_CTX], decodes=st[:, DECODES], decode_kv=st[:, DECODE_KV],
        seqs_sampled=st[:, SAMPLED])
