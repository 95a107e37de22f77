"""QA s50: the workload readers on the files users feed them: gzip'd files and streams, an
OpenAI Batch API file with embeddings (or other) requests, a JSON array of job records, an
extensionless CSV, a pretty-printed JSON object, a ShareGPT file; `tuner workload stats`'s
title. Each error is one line naming the file (and line), with a non-zero exit."""

from __future__ import annotations

import gzip
import io
import json

import pytest
from typer.testing import CliRunner

from tuner.cli.main import app
from tuner.core.errors import TunerError
from tuner.core.workload import STDIN_NAME, load_workload

runner = CliRunner()


def _jsonl(path, objs) -> None:
    path.write_text("".join(json.dumps(o) + "\n" for o in objs))


def _batch(cid: str, url: str = "/v1/chat/completions", **body) -> dict:
    return {"custom_id": cid, "method": "POST", "url": url, "body": {"model": "m", **body}}


CHAT = {"messages": [{"role": "user", "content": "x" * 400}], "max_tokens": 100}
TOKENS = "".join(json.dumps({"prompt_tokens": p, "output_tokens": o}) + "\n"
                 for p, o in ((100, 10), (200, 20), (300, 30)))


def _one_line_error(r) -> str:
    """The message of the TunerError a command raised (tuner.cli.main prints it as one
    `error:` line and exits non-zero; tests/test_bad_inputs.py checks that part)."""
    assert r.exit_code != 0, r.output
    assert isinstance(r.exception, TunerError), r.exception
    msg = str(r.exception)
    assert "\n" not in msg
    return msg


# ---- gzip ----------------------------------------------------------------------------------
def test_a_gzip_jsonl_and_csv_are_read_decompressed(tmp_path):
    plain = tmp_path / "t.jsonl"
    plain.write_text(TOKENS)
    gz = tmp_path / "t.jsonl.gz"
    gz.write_bytes(gzip.compress(TOKENS.encode()))
    ref, w = load_workload(plain), load_workload(gz)
    assert w.prompt_tokens.tolist() == ref.prompt_tokens.tolist() == [100, 200, 300]
    assert w.output_tokens.tolist() == [10, 20, 30] and w.source == str(gz)
    csv = tmp_path / "trace.csv.gz"  # the inner suffix picks the CSV reader
    csv.write_bytes(gzip.compress(b"num_prefill_tokens,num_decode_tokens\n100,10\n200,20\n"))
    assert load_workload(csv).prompt_tokens.tolist() == [100, 200]
    # found by its bytes, whatever the name
    odd = tmp_path / "renamed.jsonl"
    odd.write_bytes(gz.read_bytes())
    assert load_workload(odd).output_tokens.sum() == 60


def test_a_gzip_stream_on_stdin_is_read(monkeypatch):
    class Stdin:
        buffer = io.BytesIO(gzip.compress(TOKENS.encode()))

        @staticmethod
        def isatty() -> bool:
            return False

    monkeypatch.setattr("sys.stdin", Stdin)
    w = load_workload("-")
    assert w.source == STDIN_NAME and len(w) == 3 and w.prompt_tokens.sum() == 600


def test_a_bad_line_in_a_gzip_file_names_the_file_and_line(tmp_path):
    gz = tmp_path / "t.jsonl.gz"
    gz.write_bytes(gzip.compress((TOKENS + "garbage\n").encode()))
    with pytest.raises(TunerError, match=r"t\.jsonl\.gz:4: invalid JSON"):
        load_workload(gz)
    cut = tmp_path / "cut.jsonl.gz"
    cut.write_bytes(gzip.compress(TOKENS.encode())[:30])
    r = runner.invoke(app, ["workload", "stats", str(cut)])
    assert "cut.jsonl.gz: not a readable gzip file" in _one_line_error(r)


# ---- OpenAI Batch API urls -------------------------------------------------------------------
def test_an_embeddings_request_is_refused_by_name(tmp_path):
    f = tmp_path / "b.jsonl"
    _jsonl(f, [_batch("a", **CHAT), _batch("e", "/v1/embeddings", input="hello")])
    r = runner.invoke(app, ["workload", "stats", str(f)])
    msg = _one_line_error(r)
    assert "b.jsonl:2: url '/v1/embeddings' is an embeddings request" in msg, msg
    # an embeddings body that looks like a completion is refused too (the fast path)
    _jsonl(f, [_batch("e", "/v1/embeddings", prompt="hi", max_tokens=5)])
    with pytest.raises(TunerError, match=r"b\.jsonl:1: url '/v1/embeddings'"):
        load_workload(f)
    # ... and with n > 1 (the general path)
    _jsonl(f, [_batch("e", "/v1/embeddings", prompt="hi", max_tokens=5, n=2)])
    with pytest.raises(TunerError, match=r"b\.jsonl:1: url '/v1/embeddings'"):
        load_workload(f)
    _jsonl(f, [_batch("r", "/v1/responses", input="hi", max_output_tokens=5)])
    with pytest.raises(TunerError, match=r"b\.jsonl:1: url '/v1/responses' is not an endpoint"):
        load_workload(f)


def test_embeddings_lines_are_skipped_with_skip_invalid(tmp_path):
    f = tmp_path / "b.jsonl"
    _jsonl(f, [_batch("a", **CHAT), _batch("e", "/v1/embeddings", input="x"),
               _batch("c", "/v1/completions", prompt="y" * 800, max_tokens=20)])
    w = load_workload(f, skip_invalid=True)
    assert w.skipped == 1 and w.prompt_tokens.tolist() == [106, 200]
    assert w.output_tokens.tolist() == [100, 20]


def test_a_batch_file_of_every_body_form_counts_right(tmp_path):
    f = tmp_path / "b.jsonl"
    parts = {"messages": [{"role": "user", "content": [{"type": "text", "text": "x" * 400}]}],
             "max_completion_tokens": 50}
    _jsonl(f, [_batch("a", **CHAT), _batch("b", **parts), _batch("c", **{**CHAT, "n": 3}),
               _batch("d", "/v1/completions", prompt=[1, 2, 3, 4, 5], max_tokens=20)])
    w = load_workload(f)
    # "user\n" + 400 characters: ceil(405 / 4) + 4 template tokens = 106
    assert w.prompt_tokens.tolist() == [106, 106, 106, 106, 106, 5]
    assert w.output_tokens.tolist() == [100, 50, 100, 100, 100, 20]
    assert w.prefix_ids is not None and (w.prefix_ids >= 0).sum() == 3  # n = 3 share a prompt


# ---- other shapes users have ----------------------------------------------------------------
def test_a_json_array_of_job_records_says_to_convert_it(tmp_path):
    f = tmp_path / "jobs.json"
    f.write_text(json.dumps([{"prompt": "x" * 40, "max_tokens": 9}, _batch("a", **CHAT)]))
    r = runner.invoke(app, ["workload", "stats", str(f)])
    msg = _one_line_error(r)
    assert "jobs.json: a JSON array of requests; a job file is JSONL" in msg and "jq -c" in msg
    # an array of token counts is still read (a run's per-request file)
    f.write_text(json.dumps([{"prompt_tokens": 100, "output_tokens": 10}]))
    assert load_workload(f).prompt_tokens.tolist() == [100]


def test_an_extensionless_csv_gets_the_csv_error_not_invalid_json(tmp_path):
    f = tmp_path / "AzureLLMInferenceTrace_conv"
    f.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,374,44\n")
    with pytest.raises(TunerError) as exc:
        load_workload(f)
    msg = str(exc.value)
    assert "CSV is missing column(s) num_prefill_tokens" in msg and "Azure" in msg, msg
    # a JSONL without extension (and with a BOM) is still JSONL
    g = tmp_path / "jobs"
    g.write_text("\ufeff" + json.dumps({"prompt": "x" * 40, "max_tokens": 9}) + "\n",
                 encoding="utf-8")
    assert load_workload(g).output_tokens.tolist() == [9]


def test_a_pretty_printed_json_object_says_one_record_per_line(tmp_path):
    f = tmp_path / "one.jsonl"
    f.write_text(json.dumps({"prompt": "x" * 40, "max_tokens": 9}, indent=2))
    with pytest.raises(TunerError, match=r"one\.jsonl:1: invalid JSON .*one whole record per "
                                         "line"):
        load_workload(f)


def test_sharegpt_is_named_in_the_error(tmp_path):
    f = tmp_path / "sg.jsonl"
    _jsonl(f, [{"id": "1", "conversations": [{"from": "human", "value": "hi"},
                                             {"from": "gpt", "value": "yo"}]}])
    with pytest.raises(TunerError, match=r"sg\.jsonl:1: record of no known shape .*ShareGPT"):
        load_workload(f)


# ---- tuner workload stats ---------------------------------------------------------------------
def test_stats_title_names_stdin_and_counts_in_the_singular():
    r = runner.invoke(app, ["workload", "stats", "-"],
                      input=json.dumps({"prompt_tokens": 7, "output_tokens": 3}) + "\n")
    assert r.exit_code == 0, r.output
    assert f"{STDIN_NAME}: 1 request" in r.output and "1 requests" not in r.output
