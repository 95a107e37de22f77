"""Stop 54's small CLI leftovers: negative arrivals in a CSV run file read as a workload, slow
throughputs printed as 0, a numpy repr in replay's message, a calibration store that is a file,
`tuner replay -`, validate's GPU name checked before the engine's Python, and a knob given no
number."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.test_bad_inputs import main_in_process
from tuner.core.config import ServingConfig
from tuner.core.errors import TunerError
from tuner.core.units import fmt_rate
from tuner.core.workload import load_workload


def _cli(tmp_path: Path, capsys, *argv: str) -> tuple[int, str, str]:
    code = main_in_process(list(argv), tmp_path)
    got = capsys.readouterr()
    return code, got.out, got.err


def _one_error_line(code: int, out: str, err: str, *needles: str) -> str:
    assert code == 2, (code, out, err)
    assert "Traceback" not in err and out == ""
    lines = [x for x in err.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), err
    for n in needles:
        assert n in lines[0], (n, lines[0])
    assert "np." not in lines[0], lines[0]
    return lines[0]


# ---- 1: a CSV with a run file's columns refuses a negative arrival_s, as JSONL does --------------
def test_negative_arrival_in_a_csv_run_file_is_refused_like_jsonl(tmp_path, capsys):
    csv = tmp_path / "run.csv"
    csv.write_text("prompt_tokens,output_tokens,arrival_s\n10,5,0\n10,5,-3\n")
    jsonl = tmp_path / "run.jsonl"
    jsonl.write_text('{"prompt_tokens": 10, "output_tokens": 5, "arrival_s": 0}\n'
                     '{"prompt_tokens": 10, "output_tokens": 5, "arrival_s": -3}\n')
    msg = "arrival_s must be a time in seconds >= 0 (or Unix time), got "
    with pytest.raises(TunerError, match=r"run\.jsonl:2: arrival_s must be a time in seconds"):
        load_workload(jsonl)
    with pytest.raises(TunerError, match=r"run\.csv:3: arrival_s must be a time in seconds"):
        load_workload(csv)
    code, out, err = _cli(tmp_path, capsys, "workload", "stats", "run.csv")
    _one_error_line(code, out, err, f"run.csv:3: {msg}'-3'")
    # --skip-invalid drops the row, as it drops the JSONL line
    w = load_workload(csv, skip_invalid=True)
    assert len(w) == 1 and w.skipped == 1
    # a run's own arrival names keep any origin (tuner replay's files: the first is t = 0)
    (tmp_path / "own.csv").write_text("input_len,output_len,start_s\n10,5,-3\n10,5,0\n")
    assert list(load_workload(tmp_path / "own.csv").arrival_s) == [0.0, 3.0]


# ---- 2: a throughput below 1 is not printed as 0 ---------------------------------------------------
def test_fmt_rate_keeps_small_throughputs():
    assert fmt_rate(0.19) == "0.19" and fmt_rate(0.001234) == "0.00123"
    assert fmt_rate(12.345) == "12.3" and fmt_rate(12_345.6) == "12,346"
    assert fmt_rate(None) == "—" and fmt_rate(float("nan")) == "—"


def test_replay_and_simulate_print_a_slow_jobs_throughput(tmp_path, capsys):
    # 2 output tokens over 10.5 s: 0.19 tok/s, which the table printed as "0"
    (tmp_path / "slow.csv").write_text("prompt_tokens,output_tokens,arrival_s,finished_s\n"
                                       "10,1,0,0.5\n10,1,10,10.5\n")
    code, out, err = _cli(tmp_path, capsys, "replay", "slow.csv", "-m", "llama-3-8b", "-g",
                          "A100-80G")
    assert code == 0, err
    row = next(x for x in out.splitlines() if "output tok/s" in x)
    cells = [c.strip() for c in row.split("│") if c.strip()]
    assert cells[1] == "0.19" and cells[2] != "0", cells
    # the same in simulate's throughput line (and its req/s, printed as 0.00)
    (tmp_path / "sparse.csv").write_text("num_prefill_tokens,num_decode_tokens,arrived_at\n"
                                         "10,1,0\n10,1,1000\n")
    code, out, err = _cli(tmp_path, capsys, "simulate", "-w", "sparse.csv", "-m", "llama-3-8b",
                          "-g", "A100-80G")
    assert code == 0, err
    line = " ".join(next(x for x in out.splitlines() if "output tok/s" in x).split())
    assert "│ 0 output tok/s" not in line and "0.00 req/s" not in line, line
    assert "0.00" in line and "req/s" in line, line  # 0.0019 tok/s, 0.0019 req/s


# ---- 3: replay's bad token count prints the number, not numpy's repr -----------------------------
def test_replay_bad_length_prints_a_plain_number(tmp_path, capsys):
    (tmp_path / "b.json").write_text(json.dumps({"duration": 10, "input_lens": [10, 3.5],
                                                 "output_lens": [5, 5]}))
    code, out, err = _cli(tmp_path, capsys, "replay", "b.json", "-m", "llama-3-8b", "-g",
                          "A100-80G")
    _one_error_line(code, out, err, "input_lens[1] must be a whole number of tokens from 0 "
                                    "to 1,099,511,627,776, got 3.5.")


# ---- found on the way: a token count beyond int64 was a traceback (run file) or wrapped ----------
def test_huge_token_counts_are_one_line(tmp_path, capsys):
    # a bench result's 1e30-token request wrapped to a negative int64 and was silently dropped
    (tmp_path / "b.json").write_text(json.dumps({"duration": 10, "input_lens": [10, 1e30],
                                                 "output_lens": [5, 5]}))
    code, out, err = _cli(tmp_path, capsys, "replay", "b.json", "-m", "llama-3-8b", "-g",
                          "A100-80G")
    _one_error_line(code, out, err, "input_lens[1] must be a whole number of tokens", "1e+30")
    # a per-request file's 5e40 was an OverflowError traceback, in replay and as a workload
    (tmp_path / "r.csv").write_text("prompt_tokens,output_tokens,arrival_s,finished_s\n"
                                    "10,5,0,1\n10,5e40,0,1\n")
    for argv in (["replay", "r.csv", "-m", "llama-3-8b", "-g", "A100-80G"],
                 ["workload", "stats", "r.csv"]):
        code, out, err = _cli(tmp_path, capsys, *argv)
        _one_error_line(code, out, err, "request 2 (line 3): output_tokens must be at most "
                                        "1,099,511,627,776 tokens, got '5e40'")


# ---- 4: a calibration store that is a file --------------------------------------------------------
@pytest.mark.parametrize("store", ["notadir", "notadir/sub"])
def test_a_store_that_is_a_file_is_one_clear_line(tmp_path, capsys, store):
    (tmp_path / "notadir").write_text("")
    code, out, err = _cli(tmp_path, capsys, "calibrate", "--store", store)
    why = "is a file, not a folder" if store == "notadir" else "notadir is a file, not a folder"
    _one_error_line(code, out, err, f"--store {store}", why, "the calibration store is a folder")
    # replay --record: refused before the simulation, not "File exists" after it
    (tmp_path / "slow.csv").write_text("prompt_tokens,output_tokens,arrival_s,finished_s\n"
                                       "10,1,0,0.5\n10,1,10,10.5\n")
    code, out, err = _cli(tmp_path, capsys, "replay", "slow.csv", "-m", "llama-3-8b", "-g",
                          "A100-80G", "--record", "--store", store)
    _one_error_line(code, out, err, f"--store {store}", why)
    # validate writes the store after its engine runs: refused before them
    (tmp_path / "w.jsonl").write_text('{"prompt_tokens": 10, "output_tokens": 5}\n')
    (tmp_path / "c.json").write_text('{"gpu": "A100-80G"}')
    code, out, err = _cli(tmp_path, capsys, "validate", "--config", "c.json", "-w", "w.jsonl",
                          "-m", "llama-3-8b", "--python", sys.executable, "--store", store)
    _one_error_line(code, out, err, f"--store {store}", why)


# ---- 5: `tuner replay -` -------------------------------------------------------------------------
def test_replay_dash_says_it_reads_a_file(tmp_path, capsys):
    code, out, err = _cli(tmp_path, capsys, "replay", "-", "-m", "llama-3-8b", "-g", "A100-80G")
    _one_error_line(code, out, err, "not from standard input", "pass its path")


# ---- 7: validate --config: the user's GPU name before the engine's Python ------------------------
def test_validate_config_names_a_gpu_typo_before_a_missing_engine(tmp_path, capsys):
    (tmp_path / "w.jsonl").write_text('{"prompt_tokens": 10, "output_tokens": 5}\n')
    (tmp_path / "c.json").write_text('{"gpu": "A100-80GX"}')
    # this interpreter has no vLLM (or has it: the GPU comes first either way)
    code, out, err = _cli(tmp_path, capsys, "validate", "--config", "c.json", "-w", "w.jsonl",
                          "-m", "llama-3-8b", "--python", sys.executable)
    _one_error_line(code, out, err, "Unknown GPU 'A100-80GX'", "A100-80G")
    assert not (tmp_path / "validation-runs").exists()


# ---- 8: a numeric knob given no number (or a fraction for a count) -------------------------------
@pytest.mark.parametrize(("knob", "value", "needle"), [
    ("chunk_size", "abc", "chunk_size must be an integer >= 1, got 'abc'"),
    ("chunk_size", 512.5, "chunk_size must be an integer >= 1, got 512.5"),
    ("max_running", "x", "max_running must be an integer >= 1, got 'x'"),
    ("kv_offload_layers", None, "kv_offload_layers must be an integer >= 0, got None"),
    ("gpu_memory_utilization", "high", "gpu_memory_utilization must be a number in (0, 1], "
                                       "got 'high'"),
    # a number out of range keeps its message; a list of choices names them
    ("max_running", 0, "max_running must be >= 1, got 0"),
    ("tp", "x", "tp must be one of 1, 2, 4, 8, got 'x'"),
])
def test_knob_without_a_number_says_which_kind(knob, value, needle):
    with pytest.raises(TunerError) as exc:
        ServingConfig(gpu="A100-80G", **{knob: value})
    assert needle in str(exc.value), str(exc.value)


def test_knob_in_a_config_file_says_integer(tmp_path, capsys):
    (tmp_path / "w.jsonl").write_text('{"prompt_tokens": 10, "output_tokens": 5}\n')
    (tmp_path / "c.json").write_text('{"gpu": "A100-80G", "chunk_size": "abc"}')
    code, out, err = _cli(tmp_path, capsys, "validate", "--config", "c.json", "-w", "w.jsonl",
                          "-m", "llama-3-8b", "--python", sys.executable)
    _one_error_line(code, out, err, "chunk_size must be an integer >= 1, got 'abc'")
    assert ServingConfig(gpu="A100-80G", chunk_size=512.0).chunk_size == 512  # whole: taken
