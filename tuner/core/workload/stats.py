"""Summary statistics of a workload (`tuner workload stats`)."""

from __future__ import annotations

import numpy as np

from tuner.core.workload.base import Workload


def _summary(a: np.ndarray) -> dict[str, float | int]:
    p50, p90, p99 = np.percentile(a, [50, 90, 99])
    return {
        "mean": float(a.mean()),
        "p50": float(p50),
        "p90": float(p90),
        "p99": float(p99),
        "max": int(a.max()),
        "min": int(a.min()),
    }


def workload_stats(w: Workload) -> dict:
    """Summary of a workload (plain JSON-able values).

    Keys: source, count, skipped, total_prompt_tokens, total_output_tokens, prompt and output
    (each {mean, p50, p90, p99, max, min}; percentiles linearly interpolated as numpy does),
    pd_ratio (total prompt / total output tokens), pd_ratio_median (median of the per-request
    prompt/output ratios), prefix_groups and prefixed_requests, tokenizer, output_source.
    """
    p = np.asarray(w.prompt_tokens, dtype=np.int64)
    o = np.asarray(w.output_tokens, dtype=np.int64)
    n = int(p.size)
    total_p, total_o = int(p.sum()), int(o.sum())
    has_prefix = w.prefix_ids is not None and n > 0
    return {
        "source": w.source,
        "count": n,
        "skipped": int(w.skipped),
        "total_prompt_tokens": total_p,
        "total_output_tokens": total_o,
        "prompt": _summary(p) if n else None,
        "output": _summary(o) if n else None,
        "pd_ratio": total_p / total_o if total_o else None,
        "pd_ratio_median": float(np.median(p / o)) if n else None,
        "prefix_groups": int(np.unique(w.prefix_ids[w.prefix_ids >= 0]).size) if has_prefix else 0,
        "prefixed_requests": int((w.prefix_ids >= 0).sum()) if has_prefix else 0,
        "tokenizer": w.tokenizer,
        "output_source": w.output_source,
    }




def check_context(w: Workload, context_tokens: int, model_name: str) -> None:
    """One TunerError, before any search, when requests exceed the model's context window
    (prompt + output tokens): every configuration would be infeasible, and vLLM would fail
    those requests. Names how many and the longest."""
    total = w.prompt_tokens + w.output_tokens
    over = total > context_tokens
    if over.any():
        from tuner.core.errors import TunerError

        raise TunerError(
            f"{int(over.sum())} of {len(w)} requests exceed {model_name}'s context of "
            f"{context_tokens:,} tokens (longest: {int(total.max()):,} prompt + output tokens, "
            f"request {int(np.argmax(total)) + 1}); shorten or drop them.")
