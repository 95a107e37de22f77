"""One JSONL line of a job file to a record: OpenAI Batch API requests, plain
{"prompt", "max_tokens"} records and {"prompt_tokens", "output_tokens"} records.

``n`` (completions per prompt, any of the three shapes; in a Batch API request, in its body)
is read as vLLM runs it: n sequences of one prompt, i.e. n requests whose whole prompt is one
shared prefix (prefilled once with prefix caching on), each decoding its own output."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

from tuner.core.workload.base import CSV_ARRIVAL_COLUMNS, MAX_TOKENS
from tuner.core.workload.tokens import CHAT_MESSAGE_OVERHEAD_TOKENS, chat_message_text

#: Most completions one request may ask for (``n``): vLLM runs them as n sequences of one
#: prompt; a larger n is far more likely a mistake than a job.
MAX_N = 128


class BadLine(Exception):
    """A record-level problem; becomes 'path:lineno: message' (or is skipped)."""


@dataclass
class Record:
    shape: str
    prompt_tokens: int | None = None  # known count (token-count records, token-id prompts)
    pieces: list[tuple[str, bool, int]] = field(default_factory=list)  # (text, special, extra)
    output_tokens: int | None = None
    output_field: str = ""
    prefix_key: Any = None
    prefix_tokens: int | None = None
    custom_id: Any = None  # OpenAI Batch API: how results are matched back to requests
    n: int = 1  # completions asked for: n requests of this prompt, sharing it as a prefix
    arrival_s: float | None = None  # arrival time (top-level arrival_s or arrived_at), seconds


#: The OpenAI Batch API endpoints whose requests generate text (a prompt, then decode steps):
#: the jobs tuner predicts. A request with no ``url`` is read as one of them.
GENERATION_URLS = ("/v1/chat/completions", "/v1/completions")


def check_batch_url(url: Any) -> None:
    """BadLine unless a Batch API request's ``url`` is a generation endpoint (or absent): an
    embeddings, responses or moderations request has no decode to predict, or another body."""
    if url is None or url in GENERATION_URLS:
        return
    if not isinstance(url, str):
        raise BadLine(f"url must be a string, got {json.dumps(url)[:40]}")
    what = ("an embeddings request (no text is generated)" if url.rstrip("/").endswith(
        "/embeddings") else "not an endpoint tuner reads")
    raise BadLine(f"url {url!r} is {what}; expected {' or '.join(GENERATION_URLS)}")


SHAPE_NAMES = {
    "batch": "an OpenAI Batch API request",
    "prompt": "a {prompt, max_tokens} record",
    "tokens": "a {prompt_tokens, output_tokens} record",
}


def _length(value: Any, name: str, *, minimum: int = 1) -> int:
    """A token count from JSON: an integer (or integral float) >= minimum."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise BadLine(f"{name} must be an integer, got {json.dumps(value)[:40]}")
    if isinstance(value, float) and not (math.isfinite(value) and value.is_integer()):
        raise BadLine(f"{name} must be an integer, got {value!r}")
    if value < minimum:
        raise BadLine(f"{name} must be >= {minimum}, got {int(value)}")
    if value > MAX_TOKENS:
        raise BadLine(f"{name} must be at most {MAX_TOKENS:,}, got {value:.4g}")
    return int(value)


def parse_n(value: Any, where: str = "") -> int:
    """The ``n`` of a request (completions per prompt): absent/null is 1, else an integer in
    1..MAX_N (raises BadLine)."""
    if value is None:
        return 1
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadLine(f"{where}n must be an integer (completions per prompt), got "
                      f"{json.dumps(value)[:40]}")
    if not 1 <= value <= MAX_N:
        raise BadLine(f"{where}n must be between 1 and {MAX_N} (completions per prompt), "
                      f"got {value}")
    return value


def _message_content(content: Any, i: int) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # OpenAI content parts: text parts are counted, others ignored
        texts = []
        for part in content:
            if isinstance(part, str):
                texts.append(part)
            elif isinstance(part, dict) and isinstance(part.get("text"), str):
                texts.append(part["text"])
        return "\n".join(texts)
    raise BadLine(f"messages[{i}].content must be a string or a list of content parts")


def _prompt_into(rec: Record, holder: dict, where: str) -> None:
    """Fill rec's prompt from holder['messages'] or holder['prompt']."""
    messages = holder.get("messages")
    prompt = holder.get("prompt")
    if messages is not None:
        _chat_into(rec, messages, where)
    elif isinstance(prompt, str):
        rec.pieces.append((prompt, True, 0))
    elif (
        isinstance(prompt, list)
        and prompt
        and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt)
    ):
        rec.prompt_tokens = len(prompt)  # pre-tokenized prompt: token ids
    elif isinstance(prompt, list):
        raise BadLine(
            f"{where}prompt must be a string or a list of token ids (one request per line; "
            "batched prompt lists are not supported)"
        )
    elif prompt is None:
        raise BadLine(f"{where}has neither messages nor prompt")
    else:
        raise BadLine(f"{where}prompt must be a string")


def _chat_into(rec: Record, messages: Any, where: str) -> None:
    """Fill rec's prompt from a chat: one piece per message."""
    if not isinstance(messages, list) or not messages:
        raise BadLine(f"{where}messages must be a non-empty list")
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            raise BadLine(f"{where}messages[{i}] must be an object with role and content")
        role = m.get("role", "")
        text = chat_message_text(str(role), _message_content(m.get("content"), i))
        rec.pieces.append((text, False, CHAT_MESSAGE_OVERHEAD_TOKENS))


def _output_into(rec: Record, holder: dict, keys: tuple[str, ...]) -> None:
    for key in keys:
        if holder.get(key) is not None:
            rec.output_tokens = _length(holder[key], key)
            rec.output_field = key
            return


def parse_record(obj: Any) -> Record:
    """The record of one JSON line (raises BadLine, worded for 'path:lineno: message')."""
    if not isinstance(obj, dict):
        raise BadLine(f"expected a JSON object, got {type(obj).__name__}")
    rec = _shaped_record(obj)
    _prefix_into(rec, obj)
    rec.arrival_s = parse_arrival(obj)
    return rec


def parse_arrival(obj: dict) -> float | None:
    """The record's arrival time in seconds (top-level ``arrival_s`` or ``arrived_at``, as the
    CSV traces name it), or None; BadLine for both, or a value that is not a time >= 0."""
    given = [k for k in CSV_ARRIVAL_COLUMNS if obj.get(k) is not None]
    if not given:
        return None
    if len(given) > 1:
        raise BadLine(f"both {' and '.join(given)}; give one arrival time")
    key = given[0]
    value = obj[key]
    # seconds, or Unix time (in s, ms, us or ns: converted when the file is read, from the
    # first arrival, by tuner.core.workload.timed.seconds_from_first)
    ok = (not isinstance(value, bool) and isinstance(value, int | float)
          and math.isfinite(value) and value >= 0)
    if not ok:
        raise BadLine(f"{key} must be a time in seconds >= 0 (or Unix time), got "
                      f"{json.dumps(value)[:40]}")
    return float(value)


def _shaped_record(obj: dict) -> Record:
    """The record of a line by its shape (SHAPE_NAMES): prompt and output filled."""
    if "body" in obj:
        body = obj["body"]
        if not isinstance(body, dict):
            raise BadLine("OpenAI Batch API request: body must be an object")
        check_batch_url(obj.get("url"))
        rec = Record("batch", custom_id=obj.get("custom_id"))
        _prompt_into(rec, body, "body ")
        _output_into(rec, body, ("max_completion_tokens", "max_tokens"))
        rec.n = parse_n(body.get("n"), "body ")
    elif "prompt_tokens" in obj:
        rec = Record("tokens", prompt_tokens=_length(obj["prompt_tokens"], "prompt_tokens"))
        _output_into(rec, obj, ("output_tokens",))
        rec.n = parse_n(obj.get("n"))
    elif "prompt" in obj or "messages" in obj:
        rec = Record("prompt")
        _prompt_into(rec, obj, "")
        _output_into(rec, obj, ("max_tokens", "max_completion_tokens", "output_tokens"))
        rec.n = parse_n(obj.get("n"))
    elif "duration" in obj and ("input_lens" in obj or "request_throughput" in obj):
        # a run's measurements, not its requests: `tuner replay` compares tuner with them
        raise BadLine("a `vllm bench serve --save-result` file (a run's measurements, not a "
                      "workload): compare tuner with the run by `tuner replay FILE -g GPU`")
    else:
        keys = ", ".join(sorted(map(str, obj))) or "none"
        # a ShareGPT conversation holds the reply, not a cap: which turns are prompts is the
        # converter's choice (vLLM's benchmark takes the first human turn and the first reply)
        hint = ("; a ShareGPT conversation is not read: convert each to {\"prompt\", "
                "\"max_tokens\"} (or token counts)" if "conversations" in obj else "")
        raise BadLine(
            f"record of no known shape (keys: {keys}); expected an OpenAI Batch API request "
            '{"custom_id", "method", "url", "body"}, {"prompt", "max_tokens"} or '
            '{"prompt_tokens", "output_tokens"}' + hint
        )
    return rec


def _prefix_into(rec: Record, obj: dict) -> None:
    """Fill rec's shared prefix (prefix_id and prefix_tokens, given together or not at all)."""
    has_id, has_len = obj.get("prefix_id") is not None, obj.get("prefix_tokens") is not None
    if has_id != has_len:
        raise BadLine("prefix_id and prefix_tokens must be given together")
    if not has_id:
        return
    key = obj["prefix_id"]
    if isinstance(key, bool) or not isinstance(key, str | int):
        raise BadLine("prefix_id must be a string or an integer")
    rec.prefix_key = key
    rec.prefix_tokens = _length(obj["prefix_tokens"], "prefix_tokens")
    if rec.prompt_tokens is not None and rec.prefix_tokens > rec.prompt_tokens:
        raise BadLine(
            f"prefix_tokens ({rec.prefix_tokens}) exceeds prompt_tokens ({rec.prompt_tokens})"
        )
