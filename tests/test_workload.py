"""Tests for tuner.core.workload: loading every format, errors, output distributions, statistics."""

from __future__ import annotations

import json
import math
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tuner.core.catalog import ModelSpec
from tuner.core.errors import TunerError
from tuner.core.workload import (
    CHAT_MESSAGE_OVERHEAD_TOKENS,
    ESTIMATE_TOKENIZER,
    Workload,
    estimate_tokens,
    load_workload,
    parse_output_dist,
    workload_stats,
)

REPO = Path(__file__).resolve().parents[1]
TRACES = Path(__file__).resolve().parents[2] / "shared" / "traces"
ARXIV_TRACE = TRACES / "arxiv_summarization_stats_llama2_tokenizer_filtered_v2.csv"


def write_jsonl(path: Path, records: list) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records))
    return path


def chat_estimate(*messages: tuple[str, str]) -> int:
    """The documented estimate for a chat: per message ceil(len(role\\ncontent)/4) + overhead."""
    return sum(estimate_tokens(f"{r}\n{c}") + CHAT_MESSAGE_OVERHEAD_TOKENS for r, c in messages)


def batch_request(i: int, body: dict) -> dict:
    return {"custom_id": f"r{i}", "method": "POST", "url": "/v1/chat/completions", "body": body}


# ---------------------------------------------------------------------------------------
# Formats


def test_openai_batch_roundtrip(tmp_path: Path) -> None:
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "x" * 37}]
    parts = [{"type": "text", "text": "abcd" * 5}, {"type": "image_url", "image_url": {"url": "u"}}]
    f = write_jsonl(
        tmp_path / "batch.jsonl",
        [
            batch_request(0, {"model": "m", "messages": msgs, "max_tokens": 100}),
            batch_request(1, {"model": "m", "prompt": "y" * 41, "max_completion_tokens": 7}),
            batch_request(
                2, {"model": "m", "messages": [{"role": "user", "content": parts}], "max_tokens": 3}
            ),
            batch_request(3, {"model": "m", "prompt": [1, 2, 3, 4, 5], "max_tokens": 2}),
        ],
    )
    w = load_workload(f)
    assert w.prompt_tokens.dtype == np.int64 and w.output_tokens.dtype == np.int64
    assert w.prompt_tokens.tolist() == [
        chat_estimate(("system", "Be brief."), ("user", "x" * 37)),  # 4+4 + 11+4 = 23
        11,  # ceil(41 / 4)
        chat_estimate(("user", "abcd" * 5)),  # image parts are not counted
        5,  # token ids are counted as given
    ]
    assert w.prompt_tokens[0] == 23
    assert w.output_tokens.tolist() == [100, 7, 3, 2]
    assert w.tokenizer.startswith(ESTIMATE_TOKENIZER)
    assert "max_tokens" in w.output_source and "max_completion_tokens" in w.output_source
    assert w.source == str(f) and w.skipped == 0 and w.prefix_ids is None


def test_plain_prompt_roundtrip(tmp_path: Path) -> None:
    f = write_jsonl(
        tmp_path / "p.jsonl",
        [
            {"prompt": "a" * 8, "max_tokens": 16},
            {"prompt": "b" * 9, "max_tokens": 1},
            "",  # blank lines are ignored
            {"prompt": "c", "max_tokens": 2.0},  # integral floats are accepted
        ],
    )
    w = load_workload(f)
    assert w.prompt_tokens.tolist() == [2, 3, 1]
    assert w.output_tokens.tolist() == [16, 1, 2]
    assert w.tokenizer == ESTIMATE_TOKENIZER
    assert w.output_source.startswith("max_tokens")


def test_token_counts_roundtrip_with_prefixes(tmp_path: Path) -> None:
    f = write_jsonl(
        tmp_path / "t.jsonl",
        [
            {"prompt_tokens": 100, "output_tokens": 10, "prefix_id": "sys", "prefix_tokens": 40},
            {"prompt_tokens": 50, "output_tokens": 5},
            {"prompt_tokens": 70, "output_tokens": 7, "prefix_id": "sys", "prefix_tokens": 40},
            {"prompt_tokens": 90, "output_tokens": 9, "prefix_id": 7, "prefix_tokens": 90},
        ],
    )
    w = load_workload(f)
    assert w.prompt_tokens.tolist() == [100, 50, 70, 90]
    assert w.output_tokens.tolist() == [10, 5, 7, 9]
    assert w.prefix_ids.tolist() == [0, -1, 0, 1]
    assert w.prefix_tokens.tolist() == [40, 0, 40, 90]
    assert w.tokenizer == "given: prompt_tokens field"
    assert w.output_source == "output_tokens"
    sub = w.take(np.array([2, 0]))
    assert sub.prefix_ids.tolist() == [0, 0] and sub.prompt_tokens.tolist() == [70, 100]


def test_csv_roundtrip_ignores_other_columns(tmp_path: Path) -> None:
    f = tmp_path / "trace.csv"
    f.write_text(
        "arrived_at,num_prefill_tokens,num_decode_tokens,note\n0.0,374,44,a\n4.3,396,109,b\n"
    )
    w = load_workload(f)
    assert w.prompt_tokens.tolist() == [374, 396]
    assert w.output_tokens.tolist() == [44, 109]
    assert "num_prefill_tokens" in w.tokenizer and w.output_source == "num_decode_tokens column"


def test_csv_30k_rows_loads_fast(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    p, o = rng.integers(1, 4000, 30_000), rng.integers(1, 500, 30_000)
    f = tmp_path / "big.csv"
    f.write_text(
        "num_prefill_tokens,num_decode_tokens\n"
        + "".join(f"{a},{b}\n" for a, b in zip(p, o, strict=True))
    )
    load_workload(f)  # warm up imports
    t0 = time.perf_counter()
    w = load_workload(f)
    assert time.perf_counter() - t0 < 0.5
    assert np.array_equal(w.prompt_tokens, p) and np.array_equal(w.output_tokens, o)


def test_jsonl_few_thousand_lines_fast(tmp_path: Path) -> None:
    f = write_jsonl(
        tmp_path / "many.jsonl",
        [
            batch_request(
                i,
                {
                    "model": "m",
                    "messages": [{"role": "user", "content": "w " * (i % 500 + 1)}],
                    "max_tokens": 64,
                },
            )
            for i in range(5000)
        ],
    )
    t0 = time.perf_counter()
    w = load_workload(f)
    assert time.perf_counter() - t0 < 1.0
    assert len(w) == 5000


# ---------------------------------------------------------------------------------------
# Tokenizer path


def _word_level_tokenizer(path: Path) -> Path:
    tokenizers = pytest.importorskip("tokenizers")
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import WhitespaceSplit

    vocab = {"[UNK]": 0, "hello": 1, "world": 2, "user": 3, "system": 4, "be": 5, "brief": 6}
    tok = tokenizers.Tokenizer(WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = WhitespaceSplit()
    path.mkdir(parents=True, exist_ok=True)
    tok.save(str(path / "tokenizer.json"))
    return path


def test_estimate_vs_tokenizer(tmp_path: Path) -> None:
    tok_dir = _word_level_tokenizer(tmp_path / "tok")
    chat = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello world"}]
    f = write_jsonl(
        tmp_path / "b.jsonl",
        [
            batch_request(0, {"model": "m", "messages": chat, "max_tokens": 5}),
            batch_request(1, {"model": "m", "prompt": "hello world hello xyzzy", "max_tokens": 5}),
        ],
    )
    est = load_workload(f)
    # Estimate: ceil(len("system\nbe brief")/4) + 4 + ceil(len("user\nhello world")/4) + 4
    assert est.prompt_tokens.tolist() == [4 + 4 + 4 + 4, math.ceil(23 / 4)]
    assert est.tokenizer == ESTIMATE_TOKENIZER

    # Word-level: one token per word (+4 per chat message); "xyzzy" -> [UNK].
    exact = load_workload(f, tokenizer_path=tok_dir)
    assert exact.prompt_tokens.tolist() == [(1 + 2 + 4) + (1 + 2 + 4), 4]
    assert str(tok_dir / "tokenizer.json") in exact.tokenizer
    # The tokenizer.json file itself works too.
    assert load_workload(f, tokenizer_path=tok_dir / "tokenizer.json").prompt_tokens.tolist() == [
        14,
        4,
    ]

    # A local model directory (or its config.json) next to a tokenizer.json is picked up.
    (tok_dir / "config.json").write_text("{}")
    spec = ModelSpec("tiny", 2, 64, 4, 4, 16, 128, 8, source=str(tok_dir / "config.json"))
    assert load_workload(f, model=spec).prompt_tokens.tolist() == [14, 4]
    catalog_spec = ModelSpec("tiny", 2, 64, 4, 4, 16, 128, 8)
    assert load_workload(f, model=catalog_spec).tokenizer == ESTIMATE_TOKENIZER


def test_tokenizer_path_missing(tmp_path: Path) -> None:
    f = write_jsonl(tmp_path / "p.jsonl", [{"prompt": "hi", "max_tokens": 1}])
    with pytest.raises(TunerError, match="tokenizer not found"):
        load_workload(f, tokenizer_path=tmp_path / "nope")


def test_tokenizer_without_library(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "tokenizers", None)  # import fails as if not installed
    (tmp_path / "tokenizer.json").write_text("{}")
    (tmp_path / "config.json").write_text("{}")
    f = write_jsonl(tmp_path / "p.jsonl", [{"prompt": "abcdefgh", "max_tokens": 1}])
    with pytest.raises(TunerError, match="pip install tokenizers"):
        load_workload(f, tokenizer_path=tmp_path)
    # Found only through the model: fall back to the estimate and say why.
    spec = ModelSpec("tiny", 2, 64, 4, 4, 16, 128, 8, source=str(tmp_path))
    w = load_workload(f, model=spec)
    assert w.prompt_tokens.tolist() == [2]
    assert w.tokenizer.startswith(ESTIMATE_TOKENIZER) and "not installed" in w.tokenizer


def test_bad_tokenizer_file(tmp_path: Path) -> None:
    pytest.importorskip("tokenizers")
    (tmp_path / "tokenizer.json").write_text('{"not": "a tokenizer"}')
    f = write_jsonl(tmp_path / "p.jsonl", [{"prompt": "abcdefgh", "max_tokens": 1}])
    with pytest.raises(TunerError, match="not a Hugging Face tokenizer.json"):
        load_workload(f, tokenizer_path=tmp_path)


def test_prefix_longer_than_counted_prompt(tmp_path: Path) -> None:
    f = write_jsonl(
        tmp_path / "p.jsonl",
        [
            {"prompt": "abcdefgh", "max_tokens": 1, "prefix_id": "s", "prefix_tokens": 2},
            {"prompt": "abcd", "max_tokens": 1, "prefix_id": "s", "prefix_tokens": 2},
        ],
    )
    with pytest.raises(TunerError, match=r":2: prefix_tokens \(2\) exceeds the prompt's 1 tokens"):
        load_workload(f)
    w = load_workload(f, skip_invalid=True)
    assert w.skipped == 1 and w.prefix_ids.tolist() == [0] and w.prefix_tokens.tolist() == [2]


# ---------------------------------------------------------------------------------------
# Errors


def test_malformed_jsonl_line_names_file_and_line(tmp_path: Path) -> None:
    f = write_jsonl(
        tmp_path / "bad.jsonl",
        [
            {"prompt_tokens": 5, "output_tokens": 5},
            '{"prompt_tokens": 5, ',
            {"prompt_tokens": 1, "output_tokens": 1},
        ],
    )
    with pytest.raises(TunerError) as exc:
        load_workload(f)
    msg = str(exc.value)
    assert msg.startswith(f"{f}:2: invalid JSON") and "\n" not in msg


@pytest.mark.parametrize(
    ("record", "fragment"),
    [
        ({"prompt_tokens": -3, "output_tokens": 5}, "prompt_tokens must be >= 1"),
        ({"prompt_tokens": 0, "output_tokens": 5}, "prompt_tokens must be >= 1"),
        ({"prompt_tokens": 2.5, "output_tokens": 5}, "prompt_tokens must be an integer"),
        ({"prompt_tokens": "12", "output_tokens": 5}, "prompt_tokens must be an integer"),
        ({"prompt_tokens": True, "output_tokens": 5}, "prompt_tokens must be an integer"),
        ({"prompt_tokens": 5, "output_tokens": 0}, "output_tokens must be >= 1"),
        ({"prompt": "hi", "max_tokens": -1}, "max_tokens must be >= 1"),
        ({"prompt": "", "max_tokens": 4}, "empty prompt"),
        ({"prompt": 42, "max_tokens": 4}, "prompt must be a string"),
        ({"text": "hi"}, "record of no known shape (keys: text)"),
        ([1, 2], "expected a JSON object"),
        (batch_request(0, {"model": "m", "max_tokens": 3}), "neither messages nor prompt"),
        ({"prompt_tokens": 5, "output_tokens": 5, "prefix_id": "a"}, "given together"),
        ({"prompt_tokens": 5, "output_tokens": 5, "prefix_id": "a", "prefix_tokens": 6}, "exceeds"),
    ],
)
def test_bad_records(tmp_path: Path, record: object, fragment: str) -> None:
    good = {"prompt_tokens": 3, "output_tokens": 3}
    if isinstance(record, dict) and ("prompt" in record or "body" in record):
        good = (
            {"prompt": "abc", "max_tokens": 3}
            if "prompt" in record
            else batch_request(9, {"model": "m", "prompt": "abc", "max_tokens": 3})
        )
    f = write_jsonl(tmp_path / "w.jsonl", [good, record])
    with pytest.raises(TunerError) as exc:
        load_workload(f)
    assert str(exc.value).startswith(f"{f}:2: ")
    assert fragment in str(exc.value)


def test_mixed_formats_rejected(tmp_path: Path) -> None:
    f = write_jsonl(
        tmp_path / "m.jsonl",
        [{"prompt_tokens": 3, "output_tokens": 3}, {"prompt": "abc", "max_tokens": 3}],
    )
    with pytest.raises(TunerError, match=r":2: .*line 1 is a \{prompt_tokens"):
        load_workload(f)


def test_inconsistent_prefix_length(tmp_path: Path) -> None:
    f = write_jsonl(
        tmp_path / "m.jsonl",
        [
            {"prompt_tokens": 9, "output_tokens": 3, "prefix_id": "a", "prefix_tokens": 4},
            {"prompt_tokens": 9, "output_tokens": 3, "prefix_id": "a", "prefix_tokens": 5},
        ],
    )
    with pytest.raises(TunerError, match=":2: prefix_id 'a' has prefix_tokens 5 here but 4"):
        load_workload(f)


def test_skip_invalid_counts(tmp_path: Path) -> None:
    f = write_jsonl(
        tmp_path / "s.jsonl",
        [
            {"prompt_tokens": 10, "output_tokens": 2},
            "{not json",
            {"prompt_tokens": 0, "output_tokens": 2},
            {"foo": 1},
            {"prompt": "a different shape", "max_tokens": 3},
            {"prompt_tokens": 20, "output_tokens": 4},
        ],
    )
    w = load_workload(f, skip_invalid=True)
    assert w.prompt_tokens.tolist() == [10, 20] and w.output_tokens.tolist() == [2, 4]
    assert w.skipped == 4
    assert workload_stats(w)["skipped"] == 4
    assert w.take(np.array([1])).skipped == 4


def test_skip_invalid_all_bad_is_no_requests(tmp_path: Path) -> None:
    f = write_jsonl(tmp_path / "s.jsonl", ["{", "[", '{"x": 1}'])
    with pytest.raises(TunerError, match=r": no requests \(3 invalid line\(s\) skipped\)"):
        load_workload(f, skip_invalid=True)


@pytest.mark.parametrize("content", ["", "\n\n  \n"])
@pytest.mark.parametrize("name", ["empty.jsonl", "empty.csv"])
def test_empty_file(tmp_path: Path, content: str, name: str) -> None:
    f = tmp_path / name
    f.write_text(content)
    with pytest.raises(TunerError, match=r": no requests"):
        load_workload(f)


def test_csv_header_only_is_no_requests(tmp_path: Path) -> None:
    f = tmp_path / "h.csv"
    f.write_text("num_prefill_tokens,num_decode_tokens\n")
    with pytest.raises(TunerError, match=f"^{f}: no requests"):
        load_workload(f)


def test_missing_file_and_directory(tmp_path: Path) -> None:
    with pytest.raises(TunerError, match="nope.jsonl: no such file"):
        load_workload(tmp_path / "nope.jsonl")
    with pytest.raises(TunerError, match="is a directory"):
        load_workload(tmp_path)


def test_not_utf8(tmp_path: Path) -> None:
    f = tmp_path / "bin.jsonl"
    f.write_bytes(b'{"prompt": "\xff\xfe", "max_tokens": 1}\n')
    with pytest.raises(TunerError, match="not UTF-8"):
        load_workload(f)


def test_csv_missing_column(tmp_path: Path) -> None:
    f = tmp_path / "t.csv"
    f.write_text("num_prefill_tokens,pd_ratio\n100,3.0\n")
    with pytest.raises(TunerError) as exc:
        load_workload(f)
    msg = str(exc.value)
    assert msg.startswith(f"{f}: CSV is missing column(s) num_decode_tokens")
    assert "found: num_prefill_tokens, pd_ratio" in msg
    # With an output distribution the decode column is optional.
    w = load_workload(f, output_dist="fixed:12")
    assert w.output_tokens.tolist() == [12] and w.output_source.startswith("output_dist fixed:12")


def test_csv_bad_value_names_line_and_skips(tmp_path: Path) -> None:
    f = tmp_path / "t.csv"
    f.write_text("num_prefill_tokens,num_decode_tokens\n10,2\n20,x\n0,3\n40,4.5\n50,5\n")
    with pytest.raises(
        TunerError, match=f"^{f}:3: num_decode_tokens must be a positive integer, got 'x'"
    ):
        load_workload(f)
    w = load_workload(f, skip_invalid=True)
    assert w.prompt_tokens.tolist() == [10, 50] and w.skipped == 3


# ---------------------------------------------------------------------------------------
# Output lengths


def test_missing_max_tokens_without_dist_is_an_error(tmp_path: Path) -> None:
    f = write_jsonl(tmp_path / "p.jsonl", [{"prompt": "abcd", "max_tokens": 5}, {"prompt": "abcd"}])
    with pytest.raises(TunerError) as exc:
        load_workload(f)
    msg = str(exc.value)
    assert msg.startswith(f"{f}:2: ") and "--output-dist" in msg and "e.g." in msg


def test_missing_max_tokens_filled_from_dist(tmp_path: Path) -> None:
    f = write_jsonl(
        tmp_path / "p.jsonl",
        [{"prompt": "abcd", "max_tokens": 5}, {"prompt": "abcd"}, {"prompt": "abcd"}],
    )
    w = load_workload(f, output_dist="fixed:33")
    assert w.output_tokens.tolist() == [5, 33, 33]
    assert "max_tokens" in w.output_source and "fixed:33" in w.output_source
    assert "for 1 requests" in w.output_source and "for 2" in w.output_source


@pytest.mark.parametrize(
    ("spec", "check"),
    [
        ("fixed:256", lambda a: (a == 256).all()),
        ("uniform:64:512", lambda a: a.min() >= 64 and a.max() <= 512 and abs(a.mean() - 288) < 15),
        ("normal:100:300", lambda a: a.min() >= 1 and (a == 1).mean() > 0.3),  # clipped at 1
        ("normal:500:50", lambda a: abs(np.median(a) - 500) < 10),
        ("lognormal:167:0.6", lambda a: abs(np.median(a) / 167 - 1) < 0.1 and a.min() >= 1),
    ],
)
def test_output_dist_specs(tmp_path: Path, spec: str, check) -> None:
    f = write_jsonl(tmp_path / "p.jsonl", [{"prompt": "x"}] * 2000)
    w = load_workload(f, output_dist=spec, seed=1)
    assert w.output_tokens.dtype == np.int64 and check(w.output_tokens)
    assert w.output_source == f"output_dist {spec} (seed 1)"
    again = load_workload(f, output_dist=spec, seed=1)
    assert np.array_equal(w.output_tokens, again.output_tokens)  # seeded


def test_output_dist_trace(tmp_path: Path) -> None:
    trace = tmp_path / "lens.csv"
    trace.write_text("num_prefill_tokens,num_decode_tokens\n1,7\n1,9\n1,11\n")
    f = write_jsonl(tmp_path / "p.jsonl", [{"prompt_tokens": 3}] * 300)
    w = load_workload(f, output_dist=f"trace:{trace}", seed=3)
    assert set(w.output_tokens.tolist()) == {7, 9, 11}
    assert (
        load_workload(f, output_dist=f"trace:{trace}", seed=4).output_tokens.tolist()
        != w.output_tokens.tolist()
    )


@pytest.mark.parametrize(
    "spec",
    [
        "fixed",
        "fixed:0",
        "fixed:2.5",
        "uniform:9:3",
        "normal:1",
        "lognormal:-1:1",
        "gamma:1:2",
        "uniform:a:b",
        "trace:",
        "lognormal:nan:1",
    ],
)
def test_bad_output_dist(spec: str) -> None:
    with pytest.raises(TunerError, match="--output-dist"):
        parse_output_dist(spec)


def test_output_dist_trace_missing_file(tmp_path: Path) -> None:
    with pytest.raises(TunerError, match="no such file"):
        parse_output_dist(f"trace:{tmp_path / 'x.csv'}")


# ---------------------------------------------------------------------------------------
# Statistics


def test_stats_on_known_workload() -> None:
    w = Workload(
        prompt_tokens=np.array([10, 20, 30, 40]),
        output_tokens=np.array([5, 5, 10, 20]),
        tokenizer="t",
        output_source="o",
        skipped=2,
    )
    s = workload_stats(w)
    assert s["count"] == 4 and s["skipped"] == 2
    assert s["total_prompt_tokens"] == 100 and s["total_output_tokens"] == 40
    assert s["prompt"] == {
        "mean": 25.0,
        "p50": 25.0,
        "p90": pytest.approx(37.0),
        "p99": pytest.approx(39.7),
        "max": 40,
        "min": 10,
    }
    assert s["output"] == {
        "mean": 10.0,
        "p50": 7.5,
        "p90": pytest.approx(17.0),
        "p99": pytest.approx(19.7),
        "max": 20,
        "min": 5,
    }
    assert s["pd_ratio"] == 2.5  # 100 / 40
    assert s["pd_ratio_median"] == 2.5  # median of [2, 4, 3, 2]
    assert s["tokenizer"] == "t" and s["output_source"] == "o"
    assert s["prefix_groups"] == 0
    json.dumps(s)  # plain values


@pytest.mark.skipif(not ARXIV_TRACE.is_file(), reason="shared traces not available")
def test_shared_arxiv_trace() -> None:
    w = load_workload(ARXIV_TRACE)
    s = workload_stats(w)
    assert s["count"] == 28_257
    assert s["prompt"]["p50"] == 2730 and s["prompt"]["p90"] == 3702
    assert s["output"]["p50"] == 167 and s["output"]["p90"] == 372
    assert (w.prompt_tokens + w.output_tokens).max() <= 4096


@pytest.mark.parametrize(
    ("name", "prompt_p50", "output_p50"),
    [
        ("arxiv.jsonl", 2730, 167),  # Vidur filtered arXiv trace medians (scripts/make_examples.py)
        ("bwb.jsonl", 800, 1000),
    ],  # BWB choice: prompt median 800, output ~1.25x the prompt
)
def test_examples_have_intended_medians(name: str, prompt_p50: int, output_p50: int) -> None:
    w = load_workload(REPO / "examples" / name)
    s = workload_stats(w)
    assert 300 <= s["count"] <= 500
    assert abs(s["prompt"]["p50"] / prompt_p50 - 1) < 0.10
    assert abs(s["output"]["p50"] / output_p50 - 1) < 0.10
    assert (w.prompt_tokens + w.output_tokens).max() <= 4096
    assert s["tokenizer"] == ESTIMATE_TOKENIZER
    if name == "bwb.jsonl":
        assert s["pd_ratio"] < 1 and s["pd_ratio_median"] < 1
    else:
        assert s["prompt"]["p90"] == pytest.approx(3702, rel=0.1)
        assert s["output"]["p90"] == pytest.approx(372, rel=0.1)


# ---------------------------------------------------------------------------------------
# Property


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 10**7), st.integers(1, 10**7)), min_size=1, max_size=40))
def test_token_records_roundtrip(pairs: list[tuple[int, int]]) -> None:
    with tempfile.TemporaryDirectory() as d:
        f = write_jsonl(
            Path(d) / "w.jsonl", [{"prompt_tokens": p, "output_tokens": o} for p, o in pairs]
        )
        w = load_workload(f)
    assert w.prompt_tokens.tolist() == [p for p, _ in pairs]
    assert w.output_tokens.tolist() == [o for _, o in pairs]
    assert w.skipped == 0


def test_duplicate_custom_id_is_refused_as_the_batch_api_does(tmp_path: Path) -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "hi there"}], "max_tokens": 8}
    reqs = [batch_request(i, body) for i in range(4)]
    reqs.append(dict(reqs[1]))  # line 5 repeats line 2's custom_id
    path = write_jsonl(tmp_path / "dup.jsonl", reqs)
    with pytest.raises(TunerError, match=r"dup.jsonl:5: duplicate custom_id .r1. \(first on line 2\)"):
        load_workload(path)
    assert len(load_workload(path, skip_invalid=True)) == 4


# ---------------------------------------------------------------------------------------
# Packed length columns (how a study stores the workload)


@settings(max_examples=50, deadline=None)
@given(values=st.lists(st.integers(-(2**40), 2**40), max_size=300), small=st.booleans())
def test_pack_lengths_roundtrip(values: list[int], small: bool) -> None:
    from tuner.core.workload import pack_lengths, unpack_lengths

    a = np.asarray([v % 300 for v in values] if small else values, dtype=np.int64)
    packed = pack_lengths(a)
    json.dumps(packed)  # JSON-able, as a study attribute must be
    back = unpack_lengths(json.loads(json.dumps(packed)))
    assert back.dtype == np.int64 and back.tolist() == a.tolist()
    assert unpack_lengths(a.tolist()).tolist() == a.tolist()  # the list form of older studies
    assert pack_lengths(None) is None and unpack_lengths(None) is None


def test_pack_lengths_is_compact_and_checked() -> None:
    from tuner.core.workload import pack_lengths, unpack_lengths

    lengths = np.random.default_rng(0).integers(1, 4000, 100_000)
    packed = pack_lengths(lengths)
    assert packed["dtype"] == "<u2" and len(packed["data"]) < 2.8 * lengths.size
    assert len(json.dumps(lengths.tolist())) > 4.5 * lengths.size
    with pytest.raises(ValueError, match="corrupt"):
        unpack_lengths({**packed, "data": packed["data"][:-8] + "AAAAAAAA"})
    with pytest.raises(ValueError, match="not 5"):
        unpack_lengths({**pack_lengths(np.arange(4)), "n": 5})


@pytest.mark.parametrize(("name", "text", "says"), [
    ("big.jsonl", '{"prompt_tokens": 100000000000000000000, "output_tokens": 1}\n', "at most"),
    ("big2.jsonl", '{"prompt": "hi", "max_tokens": 1e300}\n', "at most"),
    ("big.csv", "num_prefill_tokens,num_decode_tokens\n5,1e30\n", "at most"),
])
def test_token_counts_beyond_int64_are_a_bad_line_not_an_overflow(tmp_path, name, text, says):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(TunerError, match=says):
        load_workload(path)
