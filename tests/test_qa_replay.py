"""QA h1 on `tuner replay` (findings 2-4, 8, 9, 11-13): a bench result saved without
--save-detailed, start_times as the send times, a client's max_concurrency, the engine settings
replay assumed, the Ctrl-C line, per-request files (units, epoch ms, JSON arrays), the index a
too-long request is named by, and bench results given to the workload readers."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import numpy as np
import pytest

from tests.test_bad_inputs import main_in_process

GPU = ["-m", "llama-3-8b", "-g", "A40"]


def _bench(path: Path, prompt, output, duration: float = 30.0, **extra) -> Path:
    path.write_text(json.dumps({"duration": duration, "input_lens": [int(x) for x in prompt],
                                "output_lens": [int(x) for x in output], **extra}))
    return path


def _replay(tmp_path: Path, capsys, *args: str) -> tuple[int, dict | str]:
    """(exit code, the --json document or, on a failure, stderr as one line)."""
    code = main_in_process(["replay", *args, "--json"], tmp_path)
    got = capsys.readouterr()
    return code, json.loads(got.out) if code == 0 else " ".join(got.err.split())


def _one_line_error(tmp_path, capsys, args: list[str]) -> str:
    code = main_in_process(args, tmp_path)
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err, err
    assert len([ln for ln in err.splitlines() if ln.strip()]) == 1, err
    return " ".join(err.split())


# ---- 2: --save-detailed, start_times --------------------------------------------------------
def test_a_bench_result_saved_without_save_detailed_says_to_re_run_with_it(tmp_path, capsys):
    """vllm bench serve drops input_lens, output_lens, start_times ... without --save-detailed:
    the summary it keeps is still a bench result, not some other file."""
    f = tmp_path / "r.json"
    f.write_text(json.dumps({"duration": 42.5, "completed": 300, "request_throughput": 7.0,
                             "output_throughput": 1500.0, "request_rate": "inf",
                             "max_concurrency": None, "model_id": "llama-3-8b"}))
    err = _one_line_error(tmp_path, capsys, ["replay", str(f), "-g", "A40"])
    assert "--save-detailed" in err and "not a `vllm bench serve" not in err


def test_start_times_are_replayed_as_the_send_times(tmp_path, capsys):
    """Three requests sent 10 s apart: the prediction spans the 20 s of send times (from the
    first successful request; the failed one and its missing time are left out). Without
    start_times an infinite request rate sends them all at once."""
    p, o = [200, 300, 200, 250], [20, 30, 0, 25]
    f = _bench(tmp_path / "r.json", p, o, 30.0, request_rate="inf",
               start_times=[1000.0, 1010.0, None, 1020.0], errors=["", "", "reset", ""])
    code, d = _replay(tmp_path, capsys, str(f), *GPU)
    assert code == 0, d
    assert d["requests"] == 3 and "start_times" in d["note"]
    assert 20.0 < d["predicted_makespan_s"] < 25.0
    code, at_once = _replay(tmp_path, capsys, str(_bench(tmp_path / "n.json", p, o, 30.0,
                                                         request_rate="inf",
                                                         errors=["", "", "reset", ""])), *GPU)
    assert code == 0 and at_once["predicted_makespan_s"] < 5.0
    # start_times win over the even spacing a request rate would give
    f = _bench(tmp_path / "q.json", p, o, 30.0, request_rate=100.0,
               start_times=[0.0, 10.0, 15.0, 20.0], errors=["", "", "reset", ""])
    code, d = _replay(tmp_path, capsys, str(f), *GPU)
    assert code == 0 and d["predicted_makespan_s"] > 20.0 and "evenly" not in d["note"]


def test_a_bad_start_time_of_a_completed_request_is_one_line(tmp_path, capsys):
    f = _bench(tmp_path / "r.json", [100, 100], [10, 10], start_times=[0.0, "x"])
    assert "start_times[1] must be a time in seconds" in _one_line_error(
        tmp_path, capsys, ["replay", str(f), *GPU])
    f = _bench(tmp_path / "r.json", [100, 100], [10, 10], start_times=[0.0])
    assert "start_times must be a list of 2 send times" in _one_line_error(
        tmp_path, capsys, ["replay", str(f), *GPU])


# ---- 3: max_concurrency, request_rate ------------------------------------------------------
def test_a_client_cap_without_send_times_is_simulated_and_recorded(tmp_path, capsys):
    """(Was: flagged as not valid and refused by --record.) The client's max_concurrency is
    now simulated as a closed-loop client (tests/test_qa_workloads.py checks the model)."""
    rng = np.random.default_rng(0)
    p, o = rng.integers(50, 400, 40), rng.integers(20, 100, 40)
    f = _bench(tmp_path / "r.json", p, o, 60.0, request_rate="inf", max_concurrency=4)
    code, d = _replay(tmp_path, capsys, str(f), *GPU)
    assert code == 0 and d["client_max_concurrency"] == 4 and d["warnings"] == []
    assert "max_concurrency 4 simulated" in d["note"]
    assert "--max-num-seqs at most" not in json.dumps(d)  # the old, misleading advice
    store = tmp_path / "store"
    code, d = _replay(tmp_path, capsys, str(f), *GPU, "--record", "--store", str(store))
    assert code == 0 and "recorded_in" in d
    # an engine limit no looser than the cap binds first: the comparison holds, no warning
    code, d = _replay(tmp_path, capsys, str(f), *GPU, "--max-num-seqs", "4")
    assert code == 0 and d["warnings"] == [] and "binds first" in d["note"]
    # send times carry the cap: replayed, recordable
    g = _bench(tmp_path / "s.json", p, o, 60.0, request_rate="inf", max_concurrency=4,
               start_times=[float(i) for i in range(40)])
    code, d = _replay(tmp_path, capsys, str(g), *GPU, "--record", "--store", str(store))
    assert code == 0 and d["warnings"] == [] and d["client_max_concurrency"] is None
    assert "recorded_in" in d and "max_concurrency 4" in d["note"]


@pytest.mark.parametrize(("extra", "match"), [
    ({"request_rate": -1}, 'request_rate must be a positive number of requests/s or "inf", '
                           "got -1"),
    ({"request_rate": 0}, "request_rate must be a positive number"),
    ({"request_rate": "fast"}, "request_rate must be a positive number"),
    ({"max_concurrency": "abc"}, "max_concurrency must be a whole number of requests >= 1"),
    ({"max_concurrency": 0}, "max_concurrency must be a whole number"),
    ({"max_concurrency": 2.5}, "max_concurrency must be a whole number"),
    ({"max_concurrency": True}, "max_concurrency must be a whole number"),
])
def test_bad_traffic_fields_are_one_line(tmp_path, capsys, extra, match):
    f = _bench(tmp_path / "r.json", [100, 200], [10, 20], **extra)
    assert match in _one_line_error(tmp_path, capsys, ["replay", str(f), *GPU])


def test_a_bench_result_of_only_failed_requests_is_one_line(tmp_path, capsys):
    f = _bench(tmp_path / "r.json", [100, 200], [0, 0], errors=["reset", "reset"])
    assert "nothing to replay" in _one_line_error(tmp_path, capsys, ["replay", str(f), *GPU])


# ---- 4: the settings assumed, uncalibrated --------------------------------------------------
def test_replay_prints_the_engine_settings_it_assumed_and_that_it_is_uncalibrated(tmp_path,
                                                                                   capsys):
    f = _bench(tmp_path / "r.json", [100, 200, 300], [10, 20, 30])
    assert main_in_process(["replay", str(f), *GPU], tmp_path) == 0
    text = " ".join(capsys.readouterr().out.split())
    for part in ("max_num_seqs 256", "max_num_batched_tokens 2,048", "TP 1",
                 "prefix caching on", "block 16", "gpu_memory_utilization 0.9",
                 "the newest release tuner has read is", "not given (--max-num-batched-tokens, "
                 "--max-num-seqs", "uncalibrated"):
        assert part in text, part
    assert main_in_process(["replay", str(f), *GPU, "--engine-version", "0.6.0",
                            "--max-num-seqs", "64", "--tp", "2"], tmp_path) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "max_num_seqs 64" in text and "TP 2" in text and "prefix caching off" in text
    assert "the newest release tuner has read" not in text
    assert "not given (--max-num-batched-tokens, --scheduler" in text  # --max-num-seqs given
    code, d = _replay(tmp_path, capsys, str(f), *GPU)
    assert code == 0 and d["calibrated"] is False and d["prefix_caching"] is True
    assert "max_running" in d["defaulted"] and d["vllm_defaults"]["max_num_seqs"] == 256


# ---- 8: the Ctrl-C line ---------------------------------------------------------------------
@pytest.mark.parametrize(("argv", "line"), [
    (["replay", "r.json", "-g", "A40"], "interrupted"),
    (["simulate", "-w", "w.jsonl"], "interrupted"),
    (["search", "-w", "w.jsonl"],
     "interrupted (finished trials are saved; rerun with --resume to continue)"),
])
def test_ctrl_c_mentions_resume_only_for_the_command_that_has_it(monkeypatch, capsys, argv,
                                                                 line):
    import sys

    import tuner.cli.main as cli_main

    def app(**_kw):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli_main, "load_commands", lambda names=None: app)
    monkeypatch.setattr(sys, "argv", ["tuner", *argv])
    previous = signal.getsignal(signal.SIGINT)
    try:
        with pytest.raises(SystemExit) as done:
            cli_main.main()
    finally:
        signal.signal(signal.SIGINT, previous)
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert done.value.code == 130 and lines == [line]


# ---- 9, 11: per-request files ---------------------------------------------------------------
def _per_request(path: Path, arrival, finish, prompt=None, output=None,
                 cols=("arrived_at", "completed_at")) -> Path:
    n = len(arrival)
    prompt = prompt or [200 + 10 * i for i in range(n)]
    output = output or [40 + i for i in range(n)]
    rows = [f"{p},{o},{a!r},{f!r}" for p, o, a, f in zip(prompt, output, arrival, finish,
                                                         strict=True)]
    path.write_text(f"prompt_tokens,output_tokens,{cols[0]},{cols[1]}\n" + "\n".join(rows)
                    + "\n")
    return path


ARRIVAL_S = [0.0, 0.4, 1.1, 1.5, 2.0]
FINISH_S = [3.0, 3.9, 4.2, 5.5, 6.0]


def test_replay_help_names_the_per_request_columns_and_save_detailed(tmp_path, capsys):
    from tuner.cli.replay import ARRIVAL_KEYS, FINISH_KEYS, OUTPUT_KEYS, PROMPT_KEYS

    main_in_process(["replay", "--help"], tmp_path)
    text = " ".join(capsys.readouterr().out.replace("│", " ").split())
    for key in (*PROMPT_KEYS, *OUTPUT_KEYS, *ARRIVAL_KEYS, *FINISH_KEYS):
        assert key in text, key
    assert "--save-detailed" in text and "Times in seconds" in text and "JSON array" in text


def test_unix_time_in_milliseconds_is_converted(tmp_path, capsys):
    epoch = 1_700_000_000.0
    s = _per_request(tmp_path / "s.csv", [epoch + a for a in ARRIVAL_S],
                     [epoch + f for f in FINISH_S])
    ms = _per_request(tmp_path / "ms.csv", [(epoch + a) * 1e3 for a in ARRIVAL_S],
                      [(epoch + f) * 1e3 for f in FINISH_S])
    code, d_s = _replay(tmp_path, capsys, str(s), *GPU)
    assert code == 0 and d_s["warnings"] == [] and "Unix time" not in d_s["note"]
    code, d_ms = _replay(tmp_path, capsys, str(ms), *GPU)
    assert code == 0 and "Unix time in milliseconds" in d_ms["note"]
    assert d_ms["measured_makespan_s"] == pytest.approx(6.0)
    assert d_ms["predicted_makespan_s"] == pytest.approx(d_s["predicted_makespan_s"], rel=1e-6)


def test_relative_milliseconds_are_flagged_and_not_recorded(tmp_path, capsys):
    f = _per_request(tmp_path / "ms.csv", [a * 1e3 for a in ARRIVAL_S],
                     [x * 1e3 for x in FINISH_S])
    code, d = _replay(tmp_path, capsys, str(f), *GPU)
    assert code == 0 and "look like milliseconds" in d["warnings"][0]
    code, err = _replay(tmp_path, capsys, str(f), *GPU, "--record", "--store",
                        str(tmp_path / "store"))
    assert code == 2 and "not recorded" in err and "milliseconds" in err


def test_negative_relative_times_are_taken_from_the_first_arrival(tmp_path, capsys):
    a = _per_request(tmp_path / "a.csv", ARRIVAL_S, FINISH_S)
    b = _per_request(tmp_path / "b.csv", [x - 1.0 for x in ARRIVAL_S],
                     [x - 1.0 for x in FINISH_S])
    got = []
    for f in (a, b):
        code, d = _replay(tmp_path, capsys, str(f), *GPU)
        assert code == 0, d
        got.append(d)
    assert got[1]["measured_makespan_s"] == pytest.approx(got[0]["measured_makespan_s"])
    assert got[1]["predicted_makespan_s"] == pytest.approx(got[0]["predicted_makespan_s"])


def test_a_span_over_a_year_is_refused(tmp_path, capsys):
    f = _per_request(tmp_path / "f.csv", [0.0, 1.0], [5.0, 4e7])
    assert "over a year" in _one_line_error(tmp_path, capsys, ["replay", str(f), *GPU])


def test_a_json_array_reads_as_the_jsonl_does(tmp_path, capsys):
    rows = [{"prompt_tokens": 200 + i, "output_tokens": 30 + i, "arrival_s": a,
             "finished_s": f} for i, (a, f) in enumerate(zip(ARRIVAL_S, FINISH_S, strict=True))]
    arr = tmp_path / "r.json"
    arr.write_text(json.dumps(rows, indent=1))
    lines = tmp_path / "r.jsonl"
    lines.write_text("".join(json.dumps(r) + "\n" for r in rows))
    code, d_arr = _replay(tmp_path, capsys, str(arr), *GPU)
    assert code == 0, d_arr
    code, d_lines = _replay(tmp_path, capsys, str(lines), *GPU)
    assert code == 0 and d_arr["requests"] == d_lines["requests"] == 5
    assert d_arr["predicted_makespan_s"] == d_lines["predicted_makespan_s"]
    arr.write_text("[1, 2]")
    assert "item 1 of the JSON array is not an object" in _one_line_error(
        tmp_path, capsys, ["replay", str(arr), *GPU])
    rows[1]["finished_s"] = "soon"
    arr.write_text(json.dumps(rows))
    assert "request 2: finished_s must be a number" in _one_line_error(
        tmp_path, capsys, ["replay", str(arr), *GPU])


def test_bench_results_appended_to_one_file_are_one_line(tmp_path, capsys):
    one = json.dumps({"duration": 3.0, "input_lens": [10], "output_lens": [5],
                      "completed": 1})
    f = tmp_path / "r.json"
    f.write_text(one + "\n" + one)
    assert "give each its own file" in _one_line_error(tmp_path, capsys,
                                                        ["replay", str(f), *GPU])


# ---- 12: a too-long request is named by its place in the file -------------------------------
def test_a_too_long_request_is_named_by_its_index_in_the_file(tmp_path, capsys):
    p, o = [100] * 8, [10] * 8
    p[5] = 9000  # beyond llama-3-8b's 8,192
    f = _bench(tmp_path / "r.json", p, o, errors=["x", "", "x", "", "", "", "", ""])
    err = _one_line_error(tmp_path, capsys, ["replay", str(f), *GPU])
    assert "request 6 (input_lens[5]) has 9000 + 10 tokens" in err
    csv = _per_request(tmp_path / "r.csv", ARRIVAL_S, FINISH_S,
                       prompt=[100, 0, 100, 9000, 100], output=[10, 10, 10, 10, 10])
    err = _one_line_error(tmp_path, capsys, ["replay", str(csv), *GPU])
    assert "request 4 (line 5) has 9000 + 10 tokens" in err


# ---- 13: bench results in the workload readers, --max-num-seqs 0, arrivals in stats ----------
@pytest.mark.parametrize("cmd", [["workload", "stats"], ["simulate", *GPU, "-w"]])
def test_a_bench_result_given_as_a_workload_points_to_replay(tmp_path, capsys, cmd):
    f = _bench(tmp_path / "r.json", [100], [10], completed=1, request_throughput=1.0)
    assert "tuner replay" in _one_line_error(tmp_path, capsys, [*cmd, str(f)])


def test_a_bad_knob_names_the_flag(tmp_path, capsys):
    w = tmp_path / "w.jsonl"
    w.write_text('{"prompt_tokens": 10, "output_tokens": 5}\n')
    err = _one_line_error(tmp_path, capsys, ["simulate", "-w", str(w), *GPU,
                                             "--max-num-seqs", "0"])
    assert "--max-num-seqs" in err


def test_workload_stats_report_arrivals(tmp_path, capsys):
    w = tmp_path / "w.jsonl"
    w.write_text("".join(json.dumps({"prompt_tokens": 10, "output_tokens": 5, "arrival_s": a})
                         + "\n" for a in (0.0, 2.0, 4.0)))
    assert main_in_process(["workload", "stats", str(w), "--json"], tmp_path) == 0
    st = json.loads(capsys.readouterr().out)
    assert st["arrivals"] == {"requests": 3, "span_s": 4.0, "mean_rate_req_s": 0.5}
    assert main_in_process(["workload", "stats", str(w)], tmp_path) == 0
    assert "arrivals: 3 requests over" in " ".join(capsys.readouterr().out.split())
    w.write_text('{"prompt_tokens": 10, "output_tokens": 5}\n')
    assert main_in_process(["workload", "stats", str(w), "--json"], tmp_path) == 0
    assert json.loads(capsys.readouterr().out)["arrivals"] is None
