"""Workload: token lengths of an offline batch job (all requests known at t=0).

`load_workload` (:mod:`.readers`) reads a job file into a `Workload` (:mod:`.base`), counting
prompt tokens (:mod:`.tokens`) and drawing missing output lengths (:mod:`.lengths`). A JSONL
file is streamed (:mod:`.jsonl`) into numpy columns, a few bytes per request, and a CSV trace is
read in chunks: no per-line Python object is kept, so millions of requests fit in little memory;
`workload_stats` (:mod:`.stats`) summarises one. Formats
(detected per file from the extension and the first valid record; one format per file):

* OpenAI Batch API JSONL: ``{"custom_id", "method", "url", "body": {"model", "messages": [...]
  | "prompt": str, "max_tokens" | "max_completion_tokens"}}``; ``url`` /v1/chat/completions
  or /v1/completions (an embeddings or other endpoint's request is a bad line)
* plain JSONL: ``{"prompt": str, "max_tokens": int}`` (``"messages"`` is accepted too)
* token-count JSONL: ``{"prompt_tokens": int, "output_tokens": int}``, optionally with a shared
  prefix ``"prefix_id"`` (str or int) and ``"prefix_tokens"`` (int)
* CSV traces with columns ``num_prefill_tokens,num_decode_tokens`` (others ignored), e.g. the
  Vidur / Splitwise traces.
* a run's per-request file (:mod:`.timed`, the reader `tuner replay` uses too): CSV, JSONL or a
  JSON array naming its counts and arrival by a run's column names (``input_len``,
  ``queued_ts``, ...; their finish times are not read).

An arrival column (``arrived_at`` / ``arrival_s``, or a run file's) is seconds or Unix time
(ms, us, ns converted), taken from the first arrival.

Any JSONL record may carry ``prefix_id`` + ``prefix_tokens`` at its top level. Any of these
files may be gzip-compressed (``jobs.jsonl.gz``), or read from standard input (``-``).
"""

from tuner.core.workload.base import (
    CSV_OUTPUT_COLUMN,
    CSV_PROMPT_COLUMN,
    Workload,
    pack_lengths,
    unpack_lengths,
)
from tuner.core.workload.lengths import OUTPUT_DISTS, parse_output_dist
from tuner.core.workload.readers import STDIN_NAME, is_stream, load_workload, stream_name
from tuner.core.workload.stats import (
    ON_TOO_LONG,
    apply_on_too_long,
    check_context,
    drop_too_long,
    workload_stats,
)
from tuner.core.workload.tokens import (
    CHARS_PER_TOKEN,
    CHAT_MESSAGE_OVERHEAD_TOKENS,
    ESTIMATE_TOKENIZER,
    chat_message_text,
    estimate_tokens,
)

__all__ = [
    "CHARS_PER_TOKEN",
    "CHAT_MESSAGE_OVERHEAD_TOKENS",
    "CSV_OUTPUT_COLUMN",
    "CSV_PROMPT_COLUMN",
    "ESTIMATE_TOKENIZER",
    "OUTPUT_DISTS",
    "Workload",
    "chat_message_text",
    "ON_TOO_LONG",
    "apply_on_too_long",
    "check_context",
    "drop_too_long",
    "estimate_tokens",
    "load_workload",
    "STDIN_NAME",
    "is_stream",
    "stream_name",
    "pack_lengths",
    "parse_output_dist",
    "unpack_lengths",
    "workload_stats",
]
