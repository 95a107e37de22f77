"""Replaying a real run (issue 24 item 5): arrival times in CSV workloads, and `tuner replay`
of a `vllm bench serve --save-result` JSON or a per-request file with timestamps."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.test_bad_inputs import main_in_process
from tuner.core.errors import TunerError
from tuner.core.workload import load_workload

DATA = Path(__file__).resolve().parents[2] / "shared" / "fidelity"


def _csv(path: Path, rows: list[tuple], header: str) -> Path:
    path.write_text(header + "\n" + "".join(",".join(map(str, r)) + "\n" for r in rows))
    return path


def test_csv_arrivals_are_read_from_the_first_one(tmp_path):
    f = _csv(tmp_path / "t.csv", [(10.5, 100, 20), (12.0, 50, 5), (11.0, 70, 9)],
             "arrived_at,num_prefill_tokens,num_decode_tokens")
    w = load_workload(f)
    np.testing.assert_allclose(w.arrival_s, [0.0, 1.5, 0.5])
    assert list(w.prompt_tokens) == [100, 50, 70]
    # no arrival column: an offline job, all at t = 0
    g = _csv(tmp_path / "o.csv", [(100, 20)], "num_prefill_tokens,num_decode_tokens")
    assert load_workload(g).arrival_s is None


@pytest.mark.parametrize(("value", "match"), [("-1", "arrival_s must be a time"),
                                              ("nan", "arrival_s must be a time"),
                                              ("1e12", "at most")])
def test_bad_arrivals_name_their_line(tmp_path, value, match):
    f = _csv(tmp_path / "t.csv", [(0, 100, 20), (value, 50, 5)],
             "arrival_s,num_prefill_tokens,num_decode_tokens")
    with pytest.raises(TunerError, match=f"t.csv:3: .*{match}"):
        load_workload(f)
    w = load_workload(f, skip_invalid=True)
    assert len(w) == 1 and w.skipped == 1 and list(w.arrival_s) == [0.0]


def test_simulate_replays_csv_arrivals(tmp_path, capsys):
    """Two requests 100 s apart: the makespan runs from the first arrival to the last token,
    so it is at least the gap."""
    f = _csv(tmp_path / "t.csv", [(0, 200, 20), (100, 200, 20)],
             "arrived_at,num_prefill_tokens,num_decode_tokens")
    code = main_in_process(["simulate", "-w", str(f), "-m", "llama-3-8b", "-g", "A40",
                            "--startup-s", "0", "--json"], tmp_path)
    assert code == 0
    d = json.loads(capsys.readouterr().out)
    assert 100.0 < d["makespan_s"] < 102.0


def _bench(path: Path, prompt, output, duration, **extra) -> Path:
    path.write_text(json.dumps({"duration": duration, "input_lens": [int(x) for x in prompt],
                                "output_lens": [int(x) for x in output], **extra}))
    return path


def test_replay_of_a_bench_result_matches_simulate(tmp_path, capsys):
    rng = np.random.default_rng(0)
    p, o = rng.integers(50, 800, 200), rng.integers(20, 300, 200)
    f = _bench(tmp_path / "r.json", p, o, 30.0, request_rate="inf")
    code = main_in_process(["replay", str(f), "-m", "llama-3-8b", "-g", "A100-80G",
                            "--max-num-seqs", "256", "--json"], tmp_path)
    assert code == 0
    d = json.loads(capsys.readouterr().out)
    assert d["read_as"] == "vllm bench serve result" and d["requests"] == 200
    assert d["measured_makespan_s"] == 30.0
    assert d["makespan_error_pct"] == pytest.approx(
        100 * (d["predicted_makespan_s"] / 30.0 - 1))
    # the same job through `tuner simulate` (no start-up: the run was timed with the engine up)
    w = _csv(tmp_path / "w.csv", list(zip(p, o, strict=True)),
             "num_prefill_tokens,num_decode_tokens")
    code = main_in_process(["simulate", "-w", str(w), "-m", "llama-3-8b", "-g", "A100-80G",
                            "--entry-point", "serve", "--max-num-seqs", "256", "--startup-s",
                            "0", "--json"], tmp_path)
    assert code == 0
    s = json.loads(capsys.readouterr().out)
    assert d["predicted_makespan_s"] == pytest.approx(s["makespan_s"], rel=1e-9)


def test_replay_of_a_v0_run_prices_the_request_log_unless_the_server_disabled_it(tmp_path,
                                                                                   capsys,
                                                                                   monkeypatch):
    """vLLM 0.6.0's API server logs every request unless --disable-log-requests: replayed with
    the flag, the prediction is one log cost per request shorter (priced at 5 ms here: the
    shipped fit may price it at 0, the plumbing is what is tested)."""
    from dataclasses import replace

    from tuner.predictors import engine_overhead as eo

    log_s = 5e-3
    monkeypatch.setitem(eo.PROFILES, "vllm-v0-multistep",
                        replace(eo.V0_MULTISTEP, per_logged_request_s=log_s))

    rng = np.random.default_rng(1)
    p, o = rng.integers(50, 800, 120), rng.integers(20, 300, 120)
    f = _bench(tmp_path / "r.json", p, o, 30.0, request_rate="inf")
    args = ["replay", str(f), "-m", "llama-3-8b", "-g", "A100-80G", "--engine-version", "0.6.0",
            "--num-scheduler-steps", "10", "--max-num-seqs", "256", "--json"]
    got = {}
    for extra in ([], ["--disable-log-requests"]):
        assert main_in_process([*args, *extra], tmp_path) == 0
        got[bool(extra)] = json.loads(capsys.readouterr().out)
    assert got[True]["disable_log_requests"] and not got[False]["disable_log_requests"]
    assert got[True]["preemptions"] == got[False]["preemptions"] == 0
    assert got[False]["predicted_makespan_s"] - got[True]["predicted_makespan_s"] == \
        pytest.approx(120 * log_s, rel=1e-6)


@pytest.mark.parametrize("keep", ["errors", "ttfts", "neither"])
def test_a_bench_result_tells_failed_requests_from_empty_answers(tmp_path, keep):
    """benchmark_serving saves a failed request and an empty answer both as output 0: its
    `errors` (or `ttfts`) tell them apart. A failed request is left out; an empty answer
    sampled its EOS token and stays, as 1 output token."""
    from tuner.cli.replay import read_bench_result

    doc = {"duration": 10.0, "input_lens": [100, 200, 300, 400],
           "output_lens": [50, 0, 0, 70]}  # request 1 failed, request 2 answered nothing
    if keep == "errors":
        doc["errors"] = ["", "Server disconnected", "", ""]
    elif keep == "ttfts":
        doc["ttfts"] = [0.1, 0.0, 0.2, 0.1]
    m = read_bench_result(tmp_path / "r.json", doc)
    if keep == "neither":  # the file cannot tell: both zeros are taken as failed
        assert m.prompt.tolist() == [100, 400] and m.output.tolist() == [50, 70]
        assert "2 failed requests left out" in m.note
        return
    assert m.prompt.tolist() == [100, 300, 400] and m.output.tolist() == [50, 1, 70]
    assert "1 failed request left out" in m.note
    assert "1 empty output counted as 1 generated token (EOS)" in m.note


def test_replay_takes_the_model_a_bench_result_names(tmp_path, capsys):
    rng = np.random.default_rng(2)
    p, o = rng.integers(50, 800, 50), rng.integers(20, 300, 50)
    named = _bench(tmp_path / "r.json", p, o, 30.0, model_id="meta-llama/Meta-Llama-3-8B-Instruct")
    assert main_in_process(["replay", str(named), "-g", "A100-80G", "--json"], tmp_path) == 0
    d = json.loads(capsys.readouterr().out)
    assert main_in_process(["replay", str(named), "-g", "A100-80G", "-m", "llama-3-8b",
                            "--json"], tmp_path) == 0
    assert json.loads(capsys.readouterr().out)["predicted_makespan_s"] == d["predicted_makespan_s"]
    bare = _bench(tmp_path / "b.json", p, o, 30.0)
    assert main_in_process(["replay", str(bare), "-g", "A100-80G"], tmp_path) == 2
    assert "names no model: pass --model" in capsys.readouterr().err


def test_max_model_len_bounds_the_requests_as_vllm_does(tmp_path, capsys):
    p, o = np.array([100, 900, 200]), np.array([50, 200, 60])
    f = _bench(tmp_path / "r.json", p, o, 10.0, model_id="llama-3-8b")
    assert main_in_process(["replay", str(f), "-g", "A40", "--max-model-len", "1000"],
                           tmp_path) == 2
    assert "beyond --max-model-len 1,000: the engine would have failed it" in \
        capsys.readouterr().err
    assert main_in_process(["replay", str(f), "-g", "A40", "--max-model-len", "9000"],
                           tmp_path) == 2
    assert "must be between 1 and llama-3-8b's context of 8,192" in capsys.readouterr().err
    assert main_in_process(["replay", str(f), "-g", "A40", "--max-model-len", "1100", "--json"],
                           tmp_path) == 0
    assert json.loads(capsys.readouterr().out)["max_model_len"] == 1100
    w = _csv(tmp_path / "w.csv", list(zip(p, o, strict=True)),
             "num_prefill_tokens,num_decode_tokens")
    assert main_in_process(["simulate", "-w", str(w), "-m", "llama-3-8b", "-g", "A40",
                            "--max-model-len", "1000", "--on-too-long", "skip"], tmp_path) == 0
    assert "1 request longer than --max-model-len of 1,000 tokens" in \
        " ".join(capsys.readouterr().out.split())


def test_disable_log_requests_says_where_it_changes_nothing(tmp_path, capsys):
    w = _csv(tmp_path / "w.csv", [(100, 20)] * 8, "num_prefill_tokens,num_decode_tokens")
    base = ["simulate", "-w", str(w), "-m", "llama-3-8b", "-g", "A40", "--disable-log-requests"]
    assert main_in_process(base, tmp_path) == 0
    assert "--disable-log-requests changes nothing here" in " ".join(capsys.readouterr().out.split())
    assert main_in_process([*base, "--engine", "sglang"], tmp_path) == 2
    assert "--disable-log-requests is vLLM's" in capsys.readouterr().err


def test_replay_with_a_request_rate_spaces_arrivals_and_says_so(tmp_path, capsys):
    f = _bench(tmp_path / "r.json", [100] * 50, [10] * 50, 60.0, request_rate=1.0)
    assert main_in_process(["replay", str(f), "-m", "llama-3-8b", "-g", "A40", "--json"],
                           tmp_path) == 0
    d = json.loads(capsys.readouterr().out)
    assert "evenly spaced" in d["note"]
    assert d["predicted_makespan_s"] > 49.0  # the last request arrives at 49 s


def test_replay_records_a_run_that_calibrate_fits(tmp_path, capsys):
    store = tmp_path / "store"
    rng = np.random.default_rng(1)
    for i, dur in enumerate((20.0, 24.0, 31.0)):
        n = 100 * (i + 1)
        f = _bench(tmp_path / f"r{i}.json", rng.integers(50, 500, n), rng.integers(20, 200, n),
                   dur)
        assert main_in_process(["replay", str(f), "-m", "llama-3-8b", "-g", "A40", "--record",
                                "--store", str(store), "--json"], tmp_path) == 0
        assert "recorded_in" in json.loads(capsys.readouterr().out)
    code = main_in_process(["calibrate", "--store", str(store), "--method", "makespan",
                            "--json"], tmp_path)
    text = capsys.readouterr()
    assert code == 0, text.err
    cal = json.loads(text.out)
    assert cal["runs"] == 3 and cal["model"] == "llama-3-8b"


@pytest.mark.parametrize(("content", "match"), [
    ('{"duration": 3}', "no 'input_lens'"),
    ('{"duration": -3, "input_lens": [1], "output_lens": [1]}', "duration must be"),
    ('{"duration": 3, "input_lens": [1, 2], "output_lens": [1]}', "2 entries"),
    ('{"hello": 1}', "not a `vllm bench serve"),
    ('{"prompt_tokens": 5, "output_tokens": 3}\n', "arrival column"),
    ('{"prompt_tokens": 5, "output_tokens": 3, "arrival_s": 2, "finished_s": 1}\n',
     "finishes (1) before it arrives (2)"),
    ("input_toks,output_toks,queued_ts,last_token_ts\n5,3,x,2\n", "queued_ts must be a number"),
])
def test_bad_run_files_are_one_line(tmp_path, capsys, content, match):
    f = tmp_path / ("r.json" if content.startswith("{") else "r.csv")
    f.write_text(content)
    code = main_in_process(["replay", str(f), "-m", "llama-3-8b", "-g", "A40"], tmp_path)
    text = " ".join(capsys.readouterr().err.split())
    assert code == 2 and match in text and "Traceback" not in text


@pytest.mark.skipif(not (DATA / "llmservingsim").is_dir(), reason="public runs not here")
def test_replay_of_a_public_per_request_file_agrees_with_the_fidelity_suite(tmp_path, capsys):
    """LLMServingSim's requests.jsonl (queued_ts -> last_token_ts) read as a per-request file
    gives the fidelity suite's makespan for that run."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import fidelity

    run = next(r for r in fidelity.load_llmservingsim(DATA)
               if r.name == "RTXPRO6000_Llama-3.1-8B")
    row = fidelity.evaluate([run], {"llmservingsim": fidelity.PROFILES["vllm-v1-async"]},
                            fidelity.load_gpus(), timeline=False)[0]
    f = DATA / "llmservingsim" / run.name / "requests.jsonl"
    assert main_in_process(["replay", str(f), "-m", "llama-3.1-8b", "-g", "RTX-PRO-6000",
                            "--engine-version", "0.19.0", "--entry-point", "serve",
                            "--max-num-seqs", "128", "--max-num-batched-tokens", "2048",
                            "--json"], tmp_path) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["measured_makespan_s"] == pytest.approx(run.measured_makespan_s)
    assert d["predicted_makespan_s"] == pytest.approx(row["predicted_makespan_s"], rel=1e-6)


@pytest.mark.skipif(not (DATA / "lambda-a100" / "index.csv").is_file(),
                    reason=f"A100 runs not at {DATA}")
def test_replay_compares_the_median_itl_a_bench_result_records(tmp_path, capsys):
    """A bench result's median_itl_ms (gaps between streamed chunks) is predicted from the
    simulated decode steps, 10 tokens a chunk under --num-scheduler-steps 10: the public A100
    run (Llama-3-8B, 1,280 requests, 689.3 ms) rebuilt as the file `vllm bench serve` saves."""
    import csv

    row = next(r for r in csv.DictReader((DATA / "lambda-a100" / "index.csv").open())
               if r["file"] == "A100-80G_llama-3-8b_tp1_len2000_n1280.csv")
    a = np.genfromtxt(DATA / "lambda-a100" / row["file"], delimiter=",", names=True,
                      dtype=np.int64)
    itl_ms = float(row["measured_median_itl_ms"])
    args = ["-m", "llama-3-8b", "-g", "A100-80G", "--engine-version", "0.6.0",
            "--max-num-seqs", "1024", "--max-num-batched-tokens", "2048",
            "--gpu-memory-utilization", "0.95", "--json"]
    got = {}
    for steps, extra in ((10, {"median_itl_ms": itl_ms}), (1, {"median_itl_ms": itl_ms}),
                         (10, {"median_itl_ms": "n/a"}), (10, {})):
        f = _bench(tmp_path / "r.json", a["num_prefill_tokens"], a["num_decode_tokens"],
                   float(row["measured_duration_s"]), request_rate="inf", **extra)
        code = main_in_process(["replay", str(f), *args, "--num-scheduler-steps", str(steps)],
                               tmp_path)
        assert code == 0
        got[(steps, json.dumps(extra))] = json.loads(capsys.readouterr().out)
    d = got[(10, json.dumps({"median_itl_ms": itl_ms}))]
    assert d["tokens_per_chunk"] == 10 and d["measured_median_itl_s"] == itl_ms / 1e3
    assert abs(d["itl_error_pct"]) < 5.0  # in the V0 fit: in-sample
    single = got[(1, json.dumps({"median_itl_ms": itl_ms}))]
    assert single["tokens_per_chunk"] == 1  # one step a chunk: a far shorter gap
    assert single["predicted_median_itl_s"] < d["predicted_median_itl_s"] / 3
    for extra in ({"median_itl_ms": "n/a"}, {}):  # not recorded (or not a number): no ITL row
        assert "predicted_median_itl_s" not in got[(10, json.dumps(extra))]
    assert "median_itl_ms 'n/a' is not a positive number" in got[
        (10, json.dumps({"median_itl_ms": "n/a"}))]["note"]
    assert "median_itl_ms" not in got[(10, json.dumps({}))]["note"]
