"""Summary statistics of a workload (`tuner workload stats`)."""

from __future__ import annotations

import dataclasses

import numpy as np

from tuner.core.units import plural
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
    prompt/output ratios), prefix_groups and prefixed_requests, prefix_sharing_ratio (the share
    of prompt tokens a prefix cache can serve: each group's shared prefix computed once, the
    other members' copies reused; BlendServe's sharing ratio s), tokenizer, output_source.
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
        "prefix_sharing_ratio": prefix_sharing_ratio(w),
        "tokenizer": w.tokenizer,
        "output_source": w.output_source,
    }




def prefix_sharing_ratio(w: Workload) -> float:
    """Share of the workload's prompt tokens that repeat a shared prefix already counted: the
    sum of prefix_tokens over requests in a group, less one prefix per group, over all prompt
    tokens (0 without groups)."""
    p = np.asarray(w.prompt_tokens, dtype=np.int64)
    total = int(p.sum())
    if w.prefix_ids is None or w.prefix_tokens is None or total == 0:
        return 0.0
    ids = np.asarray(w.prefix_ids, dtype=np.int64)
    x = np.minimum(np.asarray(w.prefix_tokens, dtype=np.int64), p)
    has = ids >= 0
    if not has.any():
        return 0.0
    _, first = np.unique(ids[has], return_index=True)
    return float(x[has].sum() - x[has][first].sum()) / total


def check_context(w: Workload, context_tokens: int, model_name: str,
                  limit_name: str | None = None) -> None:
    """One TunerError, before any search, when requests exceed the model's context window
    (prompt + output tokens): every configuration would be infeasible, and vLLM would fail
    those requests. Names how many and the longest, and the fix."""
    total = np.asarray(w.prompt_tokens, dtype=np.int64) + np.asarray(w.output_tokens,
                                                                     dtype=np.int64)
    over = total > context_tokens
    if over.any():
        from tuner.core.errors import TunerError

        limit = limit_name or f"{model_name}'s context"
        raise TunerError(
            f"{int(over.sum())} of {len(w)} requests exceed {limit} of "
            f"{context_tokens:,} tokens (longest: {int(total.max()):,} prompt + output tokens, "
            f"request {int(np.argmax(total)) + 1}); shorten or drop them, or pass "
            "--on-too-long skip to leave them out as failed, or --on-too-long cap to "
            "end their outputs at the limit as LLM.generate and vLLM's current server do.")


ON_TOO_LONG = ("fail", "skip", "cap")


def cap_too_long(w: Workload, context_tokens: int) -> tuple[Workload, dict | None]:
    """(the workload with each too-long request's output cut to fit the context, what was cut
    or None): vLLM's LLM.generate runs such a request and ends it when prompt + output reach
    max_model_len (check_stop: FINISHED_LENGTH_CAPPED); it refuses a prompt that leaves no
    room for one output token (InputProcessor: prompt_len >= max_model_len), and so does
    this, with one TunerError."""
    p = np.asarray(w.prompt_tokens, dtype=np.int64)
    o = np.asarray(w.output_tokens, dtype=np.int64)
    over = p + o > context_tokens
    if not over.any():
        return w, None
    from tuner.core.errors import TunerError

    full = p >= context_tokens
    if full.any():
        first = int(np.argmax(full))
        raise TunerError(
            f"{plural(int(full.sum()), 'prompt')} of {context_tokens:,} tokens or more (request "
            f"{first + 1}: {int(p[first]):,} tokens) leave no room for an "
            "output token: LLM.generate refuses them; shorten them, or pass --on-too-long "
            "skip to leave them out.")
    capped = np.where(over, context_tokens - p, o)
    info = {"mode": "cap", "count": int(over.sum()), "requests": len(w),
            "context_tokens": int(context_tokens), "longest_tokens": int((p + o).max()),
            "ids": [int(i) + 1 for i in np.flatnonzero(over)],
            "id_kind": "request number (1-based, file order of the valid records)",
            "output_tokens_lost": int((o - capped).sum())}
    out = dataclasses.replace(w, output_tokens=capped.astype(np.asarray(w.output_tokens).dtype))
    return out, info


def drop_too_long(w: Workload, context_tokens: int) -> tuple[Workload, dict | None]:
    """(the workload without the requests longer than the context, what was dropped or None).

    vLLM rejects a request whose prompt + max_tokens exceed max_model_len; the rest of the job
    runs. The report names them by request number (1-based, in file order of the valid
    records), as `check_context` does."""
    total = np.asarray(w.prompt_tokens, dtype=np.int64) + np.asarray(w.output_tokens,
                                                                     dtype=np.int64)
    over = total > context_tokens
    if not over.any():
        return w, None
    from tuner.core.errors import TunerError

    if over.all():
        raise TunerError(f"All {len(w)} requests exceed the model's context of "
                         f"{context_tokens:,} tokens; nothing is left to simulate.")
    info = {"count": int(over.sum()), "requests": len(w), "context_tokens": int(context_tokens),
            "longest_tokens": int(total.max()),
            "ids": [int(i) + 1 for i in np.flatnonzero(over)],
            "id_kind": "request number (1-based, file order of the valid records)",
            "output_tokens_lost": int(np.asarray(w.output_tokens)[over].sum())}
    return w.take(np.flatnonzero(~over)), info


def apply_on_too_long(w: Workload, context_tokens: int, model_name: str,
                      on_too_long: str, limit_name: str | None = None
                      ) -> tuple[Workload, dict | None]:
    """--on-too-long: fail (one TunerError, see `check_context`) or skip (`drop_too_long`).
    `limit_name`: what the limit is called where it is not the model's context."""
    if on_too_long not in ON_TOO_LONG:
        from tuner.core.errors import TunerError

        raise TunerError(f"--on-too-long must be fail, skip or cap, got {on_too_long!r}.")
    if on_too_long == "fail":
        check_context(w, context_tokens, model_name, limit_name)
        return w, None
    if on_too_long == "cap":
        return cap_too_long(w, context_tokens)
    return drop_too_long(w, context_tokens)
