"""The streaming JSONL reader (tuner.core.workload.jsonl) against a line-by-line reference:
the same columns and the same errors on every kind of file, tokens conserved, bounded memory."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tuner.core.errors import TunerError
from tuner.core.workload import ESTIMATE_TOKENIZER, estimate_tokens, load_workload
from tuner.core.workload.jsonl import read_jsonl
from tuner.core.workload.records import SHAPE_NAMES, BadLine, parse_record
from tuner.core.workload.tokens import TokenCounter

REPO = Path(__file__).resolve().parents[1]


def reference_read(path: Path, skip_invalid: bool) -> dict:
    """The reader before it streamed (one Record object per line, checked line by line), kept
    as the definition the streaming reader must reproduce (estimate tokenizer)."""
    records, lines, prefix_len, id_lines = [], [], {}, {}
    shape, first_line, skipped = None, 0, 0
    with path.open(encoding="utf-8-sig", newline="") as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise BadLine(f"invalid JSON ({exc.msg} at column {exc.colno})") from None
                rec = parse_record(obj)
                if shape is not None and rec.shape != shape:
                    raise BadLine(f"{SHAPE_NAMES[rec.shape]}, but line {first_line} is "
                                  f"{SHAPE_NAMES[shape]}; use one format per file")
                if rec.prefix_key is not None:
                    known = prefix_len.setdefault(rec.prefix_key, rec.prefix_tokens)
                    if known != rec.prefix_tokens:
                        raise BadLine(f"prefix_id {rec.prefix_key!r} has prefix_tokens "
                                      f"{rec.prefix_tokens} here but {known} earlier")
                if rec.custom_id is not None:
                    first = id_lines.setdefault(rec.custom_id, lineno)
                    if first != lineno:
                        raise BadLine(f"duplicate custom_id {rec.custom_id!r} (first on line "
                                      f"{first}); the OpenAI Batch API requires unique ids")
            except BadLine as exc:
                if skip_invalid:
                    skipped += 1
                    continue
                raise TunerError(f"{path}:{lineno}: {exc}") from None
            if shape is None:
                shape, first_line = rec.shape, lineno
            records.append(rec)
            lines.append(lineno)
    prompt = [r.prompt_tokens if r.prompt_tokens is not None else
              sum(estimate_tokens(t) + extra for t, _, extra in r.pieces) for r in records]
    ids = {k: i for i, k in enumerate(prefix_len)}
    return {
        "lines": lines, "prompt": prompt,
        "output": [-1 if r.output_tokens is None else r.output_tokens for r in records],
        "fields": sorted({r.output_field for r in records if r.output_field}),
        "prefix_ids": [-1 if r.prefix_key is None else ids[r.prefix_key] for r in records]
        if prefix_len else None,
        "prefix_tokens": [r.prefix_tokens or 0 for r in records] if prefix_len else None,
        "texts": any(r.pieces for r in records), "skipped": skipped,
    }


def assert_same_as_reference(path: Path) -> None:
    for skip in (False, True):
        try:
            want = reference_read(path, skip)
        except TunerError as exc:
            with pytest.raises(TunerError) as got:
                read_jsonl(path, skip, None, None)
            assert str(got.value) == str(exc)
            continue
        got = read_jsonl(path, skip, None, None)
        assert got.lines.tolist() == want["lines"]
        assert got.prompt.tolist() == want["prompt"]
        assert got.output.tolist() == want["output"]
        assert got.skipped == want["skipped"]
        assert got.output_label.split(" (")[0] == " / ".join(want["fields"])
        for name in ("prefix_ids", "prefix_tokens"):
            arr = getattr(got, name)
            assert (None if arr is None else arr.tolist()) == want[name]
        assert got.prompt.dtype == np.int64 and got.output.dtype == np.int64
        if want["texts"]:
            assert got.tokenizer.startswith(ESTIMATE_TOKENIZER)


def write_lines(path: Path, lines: list[str], newline: str = "\n") -> Path:
    path.write_bytes(("".join(line + newline for line in lines)).encode("utf-8"))
    return path


@pytest.mark.parametrize("name", ["arxiv.jsonl", "bwb.jsonl"])
def test_examples_same_as_reference(name: str) -> None:
    assert_same_as_reference(REPO / "examples" / name)


def batch(cid: Any, body: dict, **top: Any) -> str:
    return json.dumps({"custom_id": cid, "method": "POST", "url": "/v1/chat/completions",
                       "body": body, **top}, ensure_ascii=False)


ODD_FILES = {
    # plain and Batch API lines mixed: the first format wins, the others are bad lines
    "mixed": ['{"prompt": "hello there", "max_tokens": 16}',
              batch("a", {"prompt": "x", "max_tokens": 3}),
              '{"messages": [{"role": "user", "content": "hi"}], "max_completion_tokens": 2}',
              '{"prompt_tokens": 5, "output_tokens": 2}'],
    "odd but valid": [
        "",
        '   {"prompt": "leading spaces", "max_tokens": 4}   ',
        '{"prompt": "float length", "max_tokens": 4.0}',
        '{"prompt": "no length"}',
        '{"prompt": [1, 2, 3], "max_tokens": 1}',
        '{"messages": [{"role": "user", "content": [{"type": "text", "text": "parts"}, '
        '{"type": "image_url"}]}], "max_tokens": 2}',
        '{"messages": [{"content": "no role"}, {"role": "assistant", "content": null}], '
        '"output_tokens": 9}',
        '{"prompt": "naïve café 数据 \\u2028 line sep", "max_tokens": 7}',
        "\t",
        '{"prompt": "p", "max_tokens": 1, "prefix_id": "s", "prefix_tokens": 1}',
        '{"prompt": "p", "max_tokens": 1, "prefix_id": 7, "prefix_tokens": 1, "extra": true}',
    ],
    "bad lines": [
        '{"prompt": "ok", "max_tokens": 1}',
        '{"prompt": "ok", "max_tokens": 1} trailing',
        "[1, 2]",
        '{"prompt": "ok", "max_tokens": 0}',
        '{"prompt": "ok", "max_tokens": true}',
        '{"prompt": 5, "max_tokens": 1}',
        '{"messages": [], "max_tokens": 1}',
        '{"prompt": "ok", "max_tokens": 1, "prefix_id": "s"}',
        '{"nothing": 1}',
        '{"prompt": "ok", "max_tokens": NaN}',
        '{"prompt": "x", "max_tokens": 1, "prefix_id": "s", "prefix_tokens": 1}',
        '{"prompt": "x", "max_tokens": 1, "prefix_id": "s", "prefix_tokens": 2}',
    ],
    "duplicate ids": [
        batch("a", {"prompt": "one", "max_tokens": 1}),
        batch("b", {"messages": [{"role": "user", "content": "two"}], "max_tokens": 2}),
        batch(1, {"prompt": "int id", "max_tokens": 1}),
        batch("a", {"prompt": "repeat of line 1", "max_tokens": 3}),
        batch(1.0, {"prompt": "equal to 1", "max_tokens": 1}),
        batch("1", {"prompt": "a string, not 1", "max_tokens": 1}),
        batch(None, {"prompt": "no id", "max_tokens": 1}),
        batch(None, {"prompt": "no id again", "max_tokens": 1}),
        batch("a", {"prompt": "third a", "max_tokens": 1, "max_completion_tokens": 4}),
    ],
    "duplicate after a bad line": [
        batch("a", {"prompt": "one", "max_tokens": 1}),
        "{not json",
        batch("a", {"prompt": "one", "max_tokens": 1}),
    ],
    "bad line after a duplicate": [
        batch("a", {"prompt": "one", "max_tokens": 1}),
        batch("a", {"prompt": "one", "max_tokens": 1}),
        "{not json",
    ],
    "duplicate id with a new prefix": [
        batch("a", {"prompt": "one", "max_tokens": 1}),
        batch("a", {"prompt": "two", "max_tokens": 1}, prefix_id="p", prefix_tokens=1),
        batch("c", {"prompt": "three", "max_tokens": 1}, prefix_id="p", prefix_tokens=1),
    ],
    "tokens": ['{"prompt_tokens": 5, "output_tokens": 2}',
               '{"prompt_tokens": 7, "output_tokens": 3, "prefix_id": 1, "prefix_tokens": 4}',
               '{"prompt_tokens": 3}', '{"prompt_tokens": 3.0, "output_tokens": 1.0}'],
}


@pytest.mark.parametrize("name", sorted(ODD_FILES))
@pytest.mark.parametrize("newline", ["\n", "\r\n"])
def test_odd_files_same_as_reference(tmp_path: Path, name: str, newline: str) -> None:
    assert_same_as_reference(write_lines(tmp_path / "w.jsonl", ODD_FILES[name], newline))


def test_bom_and_bare_cr(tmp_path: Path) -> None:
    f = tmp_path / "w.jsonl"
    f.write_bytes(b'\xef\xbb\xbf{"prompt": "a", "max_tokens": 1}\r{"prompt": "bb", '
                  b'"max_tokens": 2}\r\n\r\n{"prompt": "ccc", "max_tokens": 3')
    assert_same_as_reference(f)
    with pytest.raises(TunerError, match=r"w.jsonl:4: invalid JSON"):
        load_workload(f)


def test_error_line_numbers_and_first_duplicate(tmp_path: Path) -> None:
    lines = [batch(f"r{i}", {"prompt": "p" * i, "max_tokens": 1}) for i in range(1, 2001)]
    lines[1499] = batch("r7", {"prompt": "again", "max_tokens": 1})  # line 1500 repeats line 7
    lines[1799] = batch("r9", {"prompt": "again", "max_tokens": 1})
    f = write_lines(tmp_path / "d.jsonl", lines)
    with pytest.raises(TunerError, match=r"d.jsonl:1500: duplicate custom_id 'r7' \(first on "
                                         r"line 7\)"):
        load_workload(f)
    w = load_workload(f, skip_invalid=True)
    assert len(w) == 1998 and w.skipped == 2
    lines[1299] = "{broken"
    f = write_lines(tmp_path / "d.jsonl", ["", *lines])  # a blank first line shifts them all
    with pytest.raises(TunerError, match=r"d.jsonl:1301: invalid JSON"):
        load_workload(f)


def test_duplicate_found_across_chunks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import tuner.core.workload.jsonl as jsonl

    monkeypatch.setattr(jsonl, "CHUNK_RECORDS", 7)
    lines = [batch(f"r{i}", {"prompt": "x" * (i % 13), "max_tokens": 1 + i % 5})
             for i in range(1, 60)]
    lines.append(batch("r3", {"prompt": "x", "max_tokens": 1}))
    f = write_lines(tmp_path / "c.jsonl", lines)
    assert_same_as_reference(f)
    with pytest.raises(TunerError, match=r":60: duplicate custom_id 'r3' \(first on line 3\)"):
        load_workload(f)


class _CharTokenizer:
    """A deterministic stand-in for a Hugging Face tokenizer: one token per character, plus a
    BOS token with special tokens; records every batch it is given."""

    class _Enc:
        def __init__(self, n: int) -> None:
            self.ids = list(range(n))

    def __init__(self) -> None:
        self.batches: list[int] = []

    def encode_batch(self, texts: list[str], add_special_tokens: bool) -> list:
        self.batches.append(len(texts))
        return [self._Enc(len(t) + add_special_tokens) for t in texts]


def test_token_counter_batches_bounded_and_same_counts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(TokenCounter, "BATCH_PIECES", 5)
    tok = _CharTokenizer()
    counter = TokenCounter(tok, "chars")
    rng = np.random.default_rng(3)
    want = np.zeros(40, dtype=np.int64)
    for req in range(40):
        for _ in range(int(rng.integers(1, 4))):
            text = "y" * int(rng.integers(0, 30))
            special = bool(rng.integers(0, 2))
            counter.add(req, text, special=special, extra=2)
            want[req] += len(text) + special + 2
    assert counter.counts(42).tolist() == [*want.tolist(), 0, 0]
    assert max(tok.batches) <= 5  # never more than one batch of texts held


_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40)
_record = st.one_of(
    st.builds(lambda p, m: {"prompt": p, "max_tokens": m}, _text, st.integers(1, 10_000)),
    st.builds(lambda msgs, m: {"messages": [{"role": r, "content": c} for r, c in msgs],
                               "max_tokens": m},
              st.lists(st.tuples(st.sampled_from(["user", "system", "assistant"]), _text),
                       min_size=1, max_size=3), st.integers(1, 10_000)),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(records=st.lists(_record, min_size=1, max_size=30), crlf=st.booleans(),
       as_batch=st.booleans())
def test_roundtrip_tokens_conserved(tmp_path: Path, records: list[dict], crlf: bool,
                                    as_batch: bool) -> None:
    lines = [batch(f"id{i}", r) if as_batch else json.dumps(r) for i, r in enumerate(records)]
    f = write_lines(tmp_path / "h.jsonl", lines, "\r\n" if crlf else "\n")
    want_prompt = [estimate_tokens(r["prompt"]) if "prompt" in r else
                   sum(estimate_tokens(f"{m['role']}\n{m['content']}") + 4
                       for m in r["messages"]) for r in records]
    got = read_jsonl(f, False, None, None)
    assert got.prompt.tolist() == want_prompt
    assert got.output.tolist() == [r["max_tokens"] for r in records]
    assert int(got.prompt.sum()) == sum(want_prompt)  # tokens conserved
    assert_same_as_reference(f)


_PEAK_RSS = """
import resource, sys
from tuner.core.workload import load_workload
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
w = load_workload(sys.argv[1])
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(len(w), int(w.output_tokens.sum()), (after - before) * 1024)
"""


def test_memory_bounded_on_200k_lines(tmp_path: Path) -> None:
    """200k Batch API lines (~50 MB of text), read in a fresh process: its peak RSS grows by
    the columns (33 bytes a request, in buffers that double) and one chunk of Python lists,
    ~60 bytes a line in all. The reader before, one Record with its prompt text per line,
    grew by ~750 bytes a line; the bound is 250."""
    n = 200_000
    f = tmp_path / "big.jsonl"
    with f.open("w") as fh:
        for start in range(0, n, 10_000):
            fh.write("".join(
                batch(f"request-{i}", {"model": "m", "messages": [
                    {"role": "user", "content": "word " * (i % 40)}], "max_tokens": 1 + i % 500})
                + "\n" for i in range(start, start + 10_000)))
    res = subprocess.run([sys.executable, "-c", _PEAK_RSS, str(f)], capture_output=True,
                         text=True, check=True)
    count, output_sum, grown_bytes = map(int, res.stdout.split())
    assert count == n and output_sum == sum(1 + i % 500 for i in range(n))
    assert grown_bytes < 250 * n, f"{grown_bytes / n:.0f} bytes per line"


def test_csv_read_in_chunks_same_answer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import tuner.core.workload.readers as readers

    rows = [f"{p},{o},x" for p, o in zip(range(1, 21), range(40, 20, -1), strict=True)]
    f = tmp_path / "t.csv"
    f.write_text("num_prefill_tokens,num_decode_tokens,other\n" + "\n".join(rows) + "\n")
    whole = load_workload(f)
    monkeypatch.setattr(readers, "CSV_CHUNK_ROWS", 3)
    chunked = load_workload(f)
    assert chunked.prompt_tokens.tolist() == whole.prompt_tokens.tolist() == list(range(1, 21))
    assert chunked.output_tokens.tolist() == whole.output_tokens.tolist()
    rows[13] = "15,zero,x"  # line 15 (the header is line 1), in the fifth chunk
    rows[16] = "0,3,x"
    f.write_text("num_prefill_tokens,num_decode_tokens,other\n" + "\n".join(rows) + "\n")
    with pytest.raises(TunerError, match=r"t.csv:15: num_decode_tokens must be a positive "
                                         r"integer, got 'zero'"):
        load_workload(f)
    w = load_workload(f, skip_invalid=True)
    assert w.skipped == 2 and w.prompt_tokens.tolist() == [p for p in range(1, 21)
                                                            if p not in (14, 17)]


def test_tokenizer_counts_stream_in_batches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With a tokenizer, texts are encoded a batch at a time as the file streams by, and each
    request gets the tokens of exactly its own pieces (fast and general paths alike)."""
    import tuner.core.workload.jsonl as jsonl

    tok = _CharTokenizer()
    monkeypatch.setattr(jsonl, "make_counter", lambda path, model: TokenCounter(tok, "chars"))
    monkeypatch.setattr(jsonl, "CHUNK_RECORDS", 4)
    monkeypatch.setattr(TokenCounter, "BATCH_PIECES", 3)
    (tmp_path / "tokenizer.json").write_text("{}")
    records = [
        {"prompt": "abcdef", "max_tokens": 1},  # 6 + BOS
        {"messages": [{"role": "system", "content": "be brief"},
                      {"role": "user", "content": None}], "max_tokens": 1},
        {"messages": [{"content": "no role"}], "max_tokens": 1},
        {"prompt": [5, 6, 7], "max_tokens": 1},  # token ids: counted as given
        {"messages": [{"role": "user", "content": [{"type": "text", "text": "part"}]}],
         "max_tokens": 1},  # general path
    ] * 3
    f = write_lines(tmp_path / "t.jsonl", [json.dumps(r) for r in records])
    want = [6 + 1, (len("system\nbe brief") + 4) + (len("user\n") + 4), len("\nno role") + 4, 3,
            len("user\npart") + 4] * 3
    got = read_jsonl(f, False, tmp_path, None)
    assert got.prompt.tolist() == want
    assert got.tokenizer == "chars; token-id prompts counted as given"
    assert tok.batches and max(tok.batches) <= 3
