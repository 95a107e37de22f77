"""QA b (workloads): `tuner simulate -w` reads the per-request files `tuner replay` reads (epoch
ms/us/ns arrivals, JSON arrays, the run files' column names) through one reader; --ordering
says when replayed arrivals make it moot; a client's max_concurrency is simulated as a closed
loop (simulate --max-concurrency, replay's bench results); "does not fit" says when the
model's shape was assumed from its name."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.test_bad_inputs import main_in_process

GPU = ["-m", "llama-3-8b", "-g", "A40"]
EPOCH_S = 1_700_000_000.0
ARRIVAL_S = [0.0, 0.5, 1.25, 2.0]
PROMPT = [300, 120, 800, 64]
OUTPUT = [40, 90, 16, 200]


def _simulate(tmp_path: Path, capsys, *args: str) -> tuple[int, dict | str]:
    """(exit code, the --json document or, on a failure, stderr as one line)."""
    code = main_in_process(["simulate", *args, "--json"], tmp_path)
    got = capsys.readouterr()
    return code, json.loads(got.out) if code == 0 else " ".join(got.err.split())


def _csv(path: Path, header: str, rows) -> Path:
    path.write_text(header + "\n" + "".join(",".join(str(v) for v in r) + "\n" for r in rows))
    return path


def _seconds_file(tmp_path: Path) -> Path:
    return _csv(tmp_path / "s.csv", "arrived_at,num_prefill_tokens,num_decode_tokens",
                zip(ARRIVAL_S, PROMPT, OUTPUT, strict=True))


# ---- 1: the per-request forms replay reads ------------------------------------------------
def _per_request_forms(tmp_path: Path) -> dict[str, Path]:
    """The same four requests in the per-request forms replay accepts."""
    finish = [a + 5.0 for a in ARRIVAL_S]
    rows = list(zip(PROMPT, OUTPUT, ARRIVAL_S, finish, strict=True))
    forms = {
        "ms-csv": _csv(tmp_path / "ms.csv", "prompt_tokens,output_tokens,queued_ts,last_token_ts",
                       [(p, o, int((EPOCH_S + a) * 1e3), int((EPOCH_S + f) * 1e3))
                        for p, o, a, f in rows]),
        "us-csv": _csv(tmp_path / "us.csv", "input_len,output_len,sent_s,end_s",
                       [(p, o, int((EPOCH_S + a) * 1e6), int((EPOCH_S + f) * 1e6))
                        for p, o, a, f in rows]),
        "negative-origin-csv": _csv(tmp_path / "neg.csv", "input_toks,output_toks,start_s",
                                    [(p, o, a - 10.0) for p, o, a, _ in rows]),
    }
    ns = [{"prompt_tokens": p, "output_tokens": o, "arrival_s": int((EPOCH_S + a) * 1e9),
           "finished_s": int((EPOCH_S + f) * 1e9)} for p, o, a, f in rows]
    forms["ns-json-array"] = tmp_path / "ns.json"
    forms["ns-json-array"].write_text(json.dumps(ns))
    forms["epoch-s-jsonl"] = tmp_path / "s.jsonl"
    forms["epoch-s-jsonl"].write_text("".join(
        json.dumps({"input_len": p, "output_len": o, "queued_ts": EPOCH_S + a,
                    "last_token_ts": EPOCH_S + f}) + "\n" for p, o, a, f in rows))
    # a job file's own names, its arrivals in Unix milliseconds
    forms["token-jsonl-ms"] = tmp_path / "t.jsonl"
    forms["token-jsonl-ms"].write_text("".join(
        json.dumps({"prompt_tokens": p, "output_tokens": o, "arrival_s": (EPOCH_S + a) * 1e3})
        + "\n" for p, o, a, _ in rows))
    forms["vidur-csv-ms"] = _csv(tmp_path / "v.csv", "arrived_at,num_prefill_tokens,"
                                 "num_decode_tokens", [(int((EPOCH_S + a) * 1e3), p, o)
                                                       for p, o, a, _ in rows])
    return forms


@pytest.mark.parametrize("form", ["ms-csv", "us-csv", "negative-origin-csv", "ns-json-array",
                                  "epoch-s-jsonl", "token-jsonl-ms", "vidur-csv-ms"])
def test_simulate_reads_the_per_request_forms_replay_reads(form, tmp_path, capsys):
    """Each form simulates as the same requests at the same seconds from the first arrival."""
    code, want = _simulate(tmp_path, capsys, "-w", str(_seconds_file(tmp_path)), *GPU)
    assert code == 0, want
    code, got = _simulate(tmp_path, capsys, "-w", str(_per_request_forms(tmp_path)[form]), *GPU)
    assert code == 0, got
    assert got["requests"] == 4 and got["output_tokens"] == sum(OUTPUT)
    assert got["arrivals"]["span_s"] == pytest.approx(ARRIVAL_S[-1], abs=1e-6)
    assert got["makespan_s"] == pytest.approx(want["makespan_s"], rel=1e-9)


def test_the_workload_reader_and_replay_share_one_per_request_reader(tmp_path):
    from tuner.cli import replay
    from tuner.core.workload import load_workload, timed

    f = _per_request_forms(tmp_path)["ms-csv"]
    w = load_workload(f)
    run = replay.read_run(f)
    assert w.arrival_s.tolist() == pytest.approx(run.arrival_s.tolist())
    assert w.prompt_tokens.tolist() == run.prompt.tolist() == PROMPT
    assert replay.PROMPT_KEYS is timed.PROMPT_KEYS
    assert "prompt_tokens column" in w.tokenizer


@pytest.mark.parametrize(("name", "content", "match"), [
    ("r.csv", "input_len,output_len,sent_s\n100,20,5\n100,abc,6\n",
     r"r.csv: request 2 \(line 3\): output_len must be a number, got 'abc'"),
    ("r.csv", "input_len,output_len,sent_s\n100,20,5\n0,30,6\n",
     r"r.csv:3: input_len must be a positive integer, got 0"),
    ("r.json", '[{"input_len": 100, "output_len": 20}, {"input_len": 9.5, "output_len": 1}]',
     r"r.json: request 2: input_len must be a whole number of tokens, got 9.5"),
    ("r.jsonl", '{"input_len":100,"output_len":20,"queued_ts":1}\n\n'
                '{"input_len":100,"output_len":20,"queued_ts":"x"}\n',
     r"r.jsonl: request 2 \(line 3\): queued_ts must be a number"),
    ("r.json", '[{"input_len": 100, "output_len": 20}, 7]',
     "item 2 of the JSON array is not an object"),
    # seconds mixed with milliseconds: a span of decades, the latest arrival's line named
    ("r.csv", "arrived_at,num_prefill_tokens,num_decode_tokens\n0,100,20\n1700000000000,9,9\n",
     r"r.csv:3: arrives .* s after the first request \(2\), over a year"),
    ("r.jsonl", '{"prompt_tokens":1,"output_tokens":1,"arrival_s":5}\n'
                '{"prompt_tokens":1,"output_tokens":1,"arrival_s":9e10}\n',
     r"r.jsonl:2: arrives .* over a year"),
])
def test_a_bad_row_is_one_error_line_with_its_line_or_request(name, content, match, tmp_path,
                                                              capsys):
    import re

    f = tmp_path / name
    f.write_text(content)
    code = main_in_process(["simulate", "-w", str(f), *GPU], tmp_path)
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err, err
    assert len([ln for ln in err.splitlines() if ln.strip()]) == 1, err
    assert re.search(match, " ".join(err.split())), err


# ---- 2: --ordering with replayed arrivals -----------------------------------------------------
def test_ordering_says_it_is_ignored_when_arrivals_are_replayed(tmp_path, capsys):
    f = _seconds_file(tmp_path)
    code, d = _simulate(tmp_path, capsys, "-w", str(f), *GPU, "--ordering", "shortest-prompt")
    assert code == 0
    assert "--ordering shortest-prompt is ignored" in d["ordering_note"]
    assert "--ignore-arrivals" in d["ordering_note"]
    code = main_in_process(["simulate", "-w", str(f), *GPU, "--ordering", "binpack"], tmp_path)
    out = " ".join(capsys.readouterr().out.split())
    assert code == 0 and "note: --ordering binpack is ignored" in out
    # offline (--ignore-arrivals) it applies, and FCFS is what arrivals do anyway: no note
    for extra in (["--ignore-arrivals", "--ordering", "binpack"], ["--ordering", "fcfs"]):
        code, d = _simulate(tmp_path, capsys, "-w", str(f), *GPU, *extra)
        assert code == 0 and d["ordering_note"] is None


# ---- 3: a client's max_concurrency ----------------------------------------------------------
def _kernel_params(max_running: int = 256):
    from tuner.sim import scheduler as sch

    return sch.preset("vllm", token_budget=2048, max_running=max_running, block_size=16,
                      capacity_blocks=100_000)


@pytest.mark.parametrize("fast", [True, False])
def test_the_client_cap_is_a_closed_loop(fast):
    """At most N requests in the engine; request i is admitted only after i + 1 - N have
    finished, the step after the one where the last of them finished; fast and exact agree."""
    from tuner.sim import scheduler as sch

    rng = np.random.default_rng(1)
    prompt, output = rng.integers(20, 400, 60), rng.integers(2, 120, 60)
    s = sch.run_schedule(prompt, output, _kernel_params()._replace(client_cap=5), fast=fast)
    assert s.status == sch.STATUS_OK and int(s.steps[:, sch.RUNNING].max()) <= 5
    finish = np.sort(s.finish_step)
    for i in range(5, 60):
        assert s.first_step[i] == finish[i - 5] + 1
    exact = sch.run_schedule(prompt, output, _kernel_params()._replace(client_cap=5), fast=False)
    assert np.array_equal(s.steps, exact.steps)


def test_no_cap_is_bit_identical_and_a_cap_at_t0_admits_as_max_num_seqs():
    """client_cap 0 changes nothing; all at t = 0 with KV to spare, a cap of N holds N in the
    engine as max_num_seqs N does (the documented approximation's case; with arrivals,
    preemptions or DP replicas the two differ, which is why the cap is simulated)."""
    from tuner.sim import scheduler as sch

    rng = np.random.default_rng(2)
    prompt, output = rng.integers(20, 400, 80), rng.integers(2, 120, 80)
    base = sch.run_schedule(prompt, output, _kernel_params())
    same = sch.run_schedule(prompt, output, _kernel_params()._replace(client_cap=0))
    assert np.array_equal(base.steps, same.steps)
    cap = sch.run_schedule(prompt, output, _kernel_params()._replace(client_cap=4))
    seqs = sch.run_schedule(prompt, output, _kernel_params(max_running=4))
    assert np.array_equal(cap.steps, seqs.steps)


def test_simulate_max_concurrency_slows_the_job_as_a_client_would(tmp_path, capsys):
    wl = Path(__file__).resolve().parents[1] / "examples" / "arxiv.jsonl"
    code, free = _simulate(tmp_path, capsys, "-w", str(wl), *GPU)
    code2, capped = _simulate(tmp_path, capsys, "-w", str(wl), *GPU, "--max-concurrency", "2")
    assert code == code2 == 0
    assert capped["max_concurrency"] == 2 and free["max_concurrency"] is None
    assert capped["makespan_s"] > 2 * free["makespan_s"]
    # with arrival times too: each request is sent once it has arrived and a slot is free
    f = _seconds_file(tmp_path)
    code, one = _simulate(tmp_path, capsys, "-w", str(f), *GPU, "--max-concurrency", "1")
    code2, four = _simulate(tmp_path, capsys, "-w", str(f), *GPU)
    assert code == code2 == 0 and one["makespan_s"] > four["makespan_s"]
    code, err = _simulate(tmp_path, capsys, "-w", str(wl), *GPU, "--max-concurrency", "2",
                          "--engine", "sglang")
    assert code == 2 and "vLLM only" in err


def test_simulator_splits_the_cap_over_dp_replicas():
    from tuner.sim.simulator import client_cap_shares

    assert client_cap_shares(10, 4) == [3, 3, 2, 2]
    assert client_cap_shares(2, 4) == [1, 1, 1, 1]
    assert sum(client_cap_shares(64, 8)) == 64


def test_replay_simulates_a_bench_results_max_concurrency(tmp_path, capsys):
    """Without start_times the client's cap is simulated (and recorded), not just flagged;
    the prediction is the same as `simulate --max-concurrency` of the same requests."""
    from tests.test_qa_replay import _bench, _replay

    rng = np.random.default_rng(0)
    p, o = rng.integers(50, 400, 40), rng.integers(20, 100, 40)
    f = _bench(tmp_path / "r.json", p, o, 60.0, request_rate="inf", max_concurrency=3)
    code, d = _replay(tmp_path, capsys, str(f), *GPU)
    assert code == 0 and d["warnings"] == [] and d["client_max_concurrency"] == 3
    g = _bench(tmp_path / "n.json", p, o, 60.0, request_rate="inf")
    code, free = _replay(tmp_path, capsys, str(g), *GPU)
    assert code == 0 and d["predicted_makespan_s"] > 1.5 * free["predicted_makespan_s"]
    w = tmp_path / "w.jsonl"
    w.write_text("".join(json.dumps({"prompt_tokens": int(a), "output_tokens": int(b)}) + "\n"
                         for a, b in zip(p, o, strict=True)))
    code, s = _simulate(tmp_path, capsys, "-w", str(w), *GPU, "--max-concurrency", "3",
                        "--startup-s", "0", "--entry-point", "serve")
    assert code == 0 and s["makespan_s"] == pytest.approx(d["predicted_makespan_s"], rel=1e-9)
    store = tmp_path / "store"
    code, d = _replay(tmp_path, capsys, str(f), *GPU, "--record", "--store", str(store))
    assert code == 0 and "recorded_in" in d
    record = [json.loads(line) for line in Path(d["recorded_in"]).read_text().splitlines()
              if line.strip()][-1]
    assert record["max_concurrency"] == 3


# ---- 4: "does not fit" with a shape assumed from the name -------------------------------------
def test_does_not_fit_says_the_shape_was_assumed_from_the_name(tmp_path, monkeypatch, capsys):
    from tests.test_models_catalog import _offline_empty_cache

    _offline_empty_cache(tmp_path, monkeypatch)
    wl = Path(__file__).resolve().parents[1] / "examples" / "arxiv.jsonl"
    code, err = _simulate(tmp_path, capsys, "-w", str(wl), "-g", "A10", "-m",
                          "NousResearch/Hermes-3-Llama-3.1-405B-FP8")
    assert code == 2 and "does not fit on A10" in err
    assert "shape, assumed from the name NousResearch/Hermes-3-Llama-3.1-405B-FP8" in err
    assert "pass its config.json" in err
    # a shape read from a config (the catalog's) says nothing of the sort
    code, err = _simulate(tmp_path, capsys, "-w", str(wl), "-g", "A10", "-m", "llama-3.1-405b")
    assert code == 2 and "does not fit on A10" in err and "assumed" not in err


def test_sglang_does_not_fit_says_the_shape_was_assumed_from_the_name(tmp_path, monkeypatch):
    # SGLang's memory plan words its own refusal; it carries the same clause as vLLM's
    from tests.test_models_catalog import _offline_empty_cache
    from tuner.core.catalog import get_model, load_gpus
    from tuner.core.config import ServingConfig
    from tuner.core.sglang import plan_memory_sglang

    _offline_empty_cache(tmp_path, monkeypatch)
    cfg = ServingConfig(gpu="A10", engine="sglang", chunk_size=2048, max_running=64,
                        gpu_memory_utilization=0.85)
    assumed = plan_memory_sglang(get_model("NousResearch/Hermes-3-Llama-3.1-405B-FP8"),
                                 load_gpus()["A10"], cfg)
    assert not assumed.fits and "under SGLang" in assumed.reason
    assert "assumed from the name NousResearch/Hermes-3-Llama-3.1-405B-FP8" in assumed.reason
    read = plan_memory_sglang(get_model("llama-3.1-405b"), load_gpus()["A10"], cfg)
    assert not read.fits and "assumed" not in read.reason
