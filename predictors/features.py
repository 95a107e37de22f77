"""What a cost model sees of one engine iteration: plain arrays, one entry per iteration."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class BatchFeatures:
    """Batch composition of many iterations at once (all arrays share one length).

    prefill_tokens:  tokens of prefill chunks in the step (a resumed request's recompute counts)
    prefill_sq:      sum over chunks of chunk**2 (causal attention within the chunk)
    prefill_ctx:     sum over chunks of chunk * context-before-chunk (attention to earlier KV)
    decodes:         decode requests in the step (one token each)
    decode_kv:       KV tokens read by decode attention, summed over decode requests
    seqs_sampled:    requests that produce a token this step (rows of the LM head)
    """

    prefill_tokens: np.ndarray
    prefill_sq: np.ndarray
    prefill_ctx: np.ndarray
    decodes: np.ndarray
    decode_kv: np.ndarray
    seqs_sampled: np.ndarray

    @property
    def tokens(self) -> np.ndarray:
        return self.prefill_tokens + self.decodes

    def __len__(self) -> int:
        return int(self.decodes.shape[0])

    @classmethod
    def single(cls, *, prefill_tokens: int = 0, context: int = 0, decodes: int = 0,
               kv_tokens: int = 0) -> BatchFeatures:
        """One iteration: one prefill chunk of `prefill_tokens` after `context` cached tokens,
        plus `decodes` decode requests reading `kv_tokens` KV tokens in total."""
        p = float(prefill_tokens)
        sampled = decodes + (1 if prefill_tokens else 0)
        arr = lambda v: np.array([v], dtype=np.float64)  # noqa: E731
        return cls(arr(p), arr(p * p), arr(p * context), arr(decodes), arr(kv_tokens), arr(sampled))


def sum_parts(parts: dict[str, np.ndarray], n: int) -> np.ndarray:
    """Seconds per iteration from a cost model's per-operation breakdown (all arrays length n)."""
    total = np.zeros(n, dtype=np.float64)
    for v in parts.values():
        total += v
    return total
