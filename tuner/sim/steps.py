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


def itl_chunks(steps: np.ndarray, step_s: np.ndarray,
               tokens_per_chunk: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """The gaps a streaming client sees between a request's chunks, from one engine's step
    records and their times: (gap of every window of `tokens_per_chunk` consecutive decoding
    steps, the decodes of its first step as its weight).

    A request that decodes in a step waits that step and every step without decodes before it
    (V0's prefill-first steps stall the running requests); an engine that streams N tokens per
    chunk (V0 multi-step, --num-scheduler-steps N) sends one every N decoding steps. Linear in
    `step_s`, so the gaps of a sum of step-time terms are the sum of their gaps."""
    decodes = np.asarray(steps, dtype=np.float64)[:, DECODES]
    t = np.asarray(step_s, dtype=np.float64)
    if not (decodes > 0).any():
        return np.zeros(0), np.zeros(0)
    # a step belongs to the gap closed by the next step that decodes (itself if it decodes)
    gap = np.concatenate(([0], np.cumsum(decodes[:-1] > 0)))
    n = int(gap[-1]) + 1
    closes = np.bincount(gap, weights=(decodes > 0).astype(np.float64), minlength=n) > 0
    gaps = np.bincount(gap, weights=t, minlength=n)[closes]
    weight = np.bincount(gap, weights=decodes, minlength=n)[closes]
    k = max(1, min(int(tokens_per_chunk), len(gaps)))
    return np.convolve(gaps, np.ones(k), mode="valid"), weight[:len(gaps) - k + 1]


def weighted_median_index(x: np.ndarray, weight: np.ndarray) -> int:
    """Index of the element below which half the weight lies (x and weight of equal length,
    weight > 0)."""
    order = np.argsort(x, kind="stable")
    c = np.cumsum(np.asarray(weight, dtype=np.float64)[order])
    return int(order[np.searchsorted(c, 0.5 * c[-1])])


def weighted_median(x: np.ndarray, weight: np.ndarray) -> float:
    """The value below which half the weight lies (weighted_median_index)."""
    return float(np.asarray(x)[weighted_median_index(x, weight)])


def median_itl_s(steps_by_replica: list[np.ndarray], step_s_by_replica: list[np.ndarray],
                 tokens_per_chunk: int = 1) -> float | None:
    """Median inter-token (inter-chunk) latency over every chunk a streaming client receives,
    as `vllm bench serve` / benchmark_serving.py report it (`median_itl_ms`: the gaps between
    a request's chunks after its first, pooled over requests); None when nothing decodes."""
    parts = [itl_chunks(s, t, tokens_per_chunk)
             for s, t in zip(steps_by_replica, step_s_by_replica, strict=True)]
    gaps = np.concatenate([g for g, _ in parts]) if parts else np.zeros(0)
    if not gaps.size:
        return None
    return weighted_median(gaps, np.concatenate([w for _, w in parts]))


def mean_itl_s(steps_by_replica: list[np.ndarray],
               step_s_by_replica: list[np.ndarray]) -> float | None:
    """Mean gap between a request's consecutive tokens over every token after each request's
    first: sum over requests of (last token - first token) / sum of (output tokens - 1), the
    decode speed a per-request log with first- and last-token times measures; None when
    nothing decodes."""
    parts = [itl_chunks(s, t, 1) for s, t in zip(steps_by_replica, step_s_by_replica, strict=True)]
    tokens = sum(float(w.sum()) for _, w in parts)
    return sum(float((g * w).sum()) for g, w in parts) / tokens if tokens > 0 else None
