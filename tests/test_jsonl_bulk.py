"""The bulk reader of token-count JSONL files gives exactly what the line-by-line pass gives,
and hands every other file (or any odd line) to that pass."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tuner.core.workload.jsonl as jsonl
from tuner.core.errors import TunerError


def _both(path, monkeypatch, skip_invalid=False):
    """(bulk columns or the error text, line-by-line columns or the error text)."""
    out = []
    for bulk in (True, False):
        with monkeypatch.context() as m:
            if not bulk:
                m.setattr(jsonl, "_bulk_token_counts", lambda _p: None)
            try:
                out.append(jsonl.read_jsonl(path, skip_invalid, None, None))
            except TunerError as exc:
                out.append(str(exc))
    return out


def _same(a, b) -> None:
    if isinstance(a, str) or isinstance(b, str):
        assert a == b
        return
    for f in ("lines", "prompt", "output"):
        assert np.array_equal(getattr(a, f), getattr(b, f)), f
    for f in ("output_label", "tokenizer", "skipped", "prefix_ids", "prefix_tokens"):
        assert getattr(a, f) == getattr(b, f), f


@pytest.mark.parametrize("text", [
    '{"prompt_tokens": 12, "output_tokens": 7}\n{"prompt_tokens": 3, "output_tokens": 1}\n',
    '{"prompt_tokens":12,"output_tokens":7}\r\n{"prompt_tokens":3,"output_tokens":1}',  # CRLF
    '\ufeff{"prompt_tokens": 12, "output_tokens": 7}\n',  # a byte-order mark
    '{"prompt_tokens": 12, "output_tokens": 7}\n\n{"prompt_tokens": 3, "output_tokens": 1}\n',
    '{"prompt_tokens": 12, "output_tokens": 0}\n',  # out of range: the line pass words it
    '{"prompt_tokens": 12, "output_tokens": 7, "custom_id": "a"}\n',
    '{"output_tokens": 7, "prompt_tokens": 12}\n',
    '{"prompt_tokens": 12}\n',
    '{"prompt_tokens": 12, "output_tokens": 7}\n{"prompt": "hi", "max_tokens": 3}\n',
    '{"prompt_tokens": 012, "output_tokens": 7}\n',  # not JSON
])
def test_bulk_and_line_passes_agree(tmp_path, monkeypatch, text):
    path = tmp_path / "job.jsonl"
    path.write_text(text, encoding="utf-8")
    a, b = _both(path, monkeypatch)
    _same(a, b)
    a, b = _both(path, monkeypatch, skip_invalid=True)
    _same(a, b)


def test_a_large_file_is_read_in_blocks(tmp_path, monkeypatch):
    monkeypatch.setattr(jsonl, "_BULK_BLOCK_BYTES", 1000)  # many blocks, lines cut across them
    rng = np.random.default_rng(0)
    p, o = rng.integers(1, 100_000, 5000), rng.integers(1, 4000, 5000)
    path = tmp_path / "job.jsonl"
    path.write_text("".join(json.dumps({"prompt_tokens": int(x), "output_tokens": int(y)}) + "\n"
                            for x, y in zip(p, o, strict=True)))
    assert jsonl._bulk_token_counts(path) is not None
    a, b = _both(path, monkeypatch)
    _same(a, b)
    assert np.array_equal(a.prompt, p) and np.array_equal(a.output, o)


@settings(max_examples=60, deadline=None)
@given(rows=st.lists(st.tuples(st.integers(0, 2_000_000), st.integers(0, 2_000_000)),
                     min_size=1, max_size=30),
       compact=st.booleans(), crlf=st.booleans(), last_newline=st.booleans())
def test_bulk_agrees_on_any_token_file(tmp_path_factory, rows, compact, crlf, last_newline):
    sep = (",", ":") if compact else (", ", ": ")
    nl = "\r\n" if crlf else "\n"
    text = nl.join(json.dumps({"prompt_tokens": a, "output_tokens": b}, separators=sep)
                   for a, b in rows) + (nl if last_newline else "")
    path = tmp_path_factory.mktemp("bulk") / "job.jsonl"
    path.write_text(text, encoding="utf-8", newline="")
    mp = pytest.MonkeyPatch()
    try:
        a, b = _both(path, mp)
        _same(a, b)
    finally:
        mp.undo()
