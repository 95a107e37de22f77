"""QA h1 findings 1, 5, 6 and 7 on `tuner calibrate`: bad runs files and records are one
error line and write nothing; a fit is never a calibration that breaks later simulations, nor
one built on too few or implausible runs without saying so; runs of different engine
generations are not fitted together; the "error after" is what the calibrated simulator
computes (replayed runs whose arrivals are spread over time are left out)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.test_bad_inputs import main_in_process
from tuner.predictors.calibration import (
    KERNEL_FACTOR_PLAUSIBLE,
    CalibratedCostModel,
    Calibration,
    RunsError,
    _err,
    _fit_makespans,
    _predict,
    apply_stored,
    calibration_path,
    fit_calibration,
    load_calibration,
    read_runs,
)

V1 = "the newest vLLM: vLLM V1, asynchronous scheduling"
V0 = "vLLM 0.6.0: vLLM V0 (known from 11 public A100 runs)"


def _run(i: int, *, measured: float | None = None, base: float = 10.0, engine: str = V1,
         factor: float = 1.5, **extra) -> dict:
    """A replay-like record whose measured makespan is factor x its simulated one."""
    iters = 400 + 50 * i
    return {"config": {"chunk_size": 512 * (i + 1), "max_running": 64 * (i + 1)},
            "device_name": "A100-80G", "model": "llama-3-8b", "runner": "vllm",
            "engine": engine, "predicted_s": base,
            "measured_s": factor * base if measured is None else measured,
            "sim": {"base_time_s": base, "iterations": iters, "sampled": 30 * iters}, **extra}


def _store(tmp_path: Path, records: list[dict], name: str = "store") -> Path:
    store = tmp_path / name
    store.mkdir()
    (store / "runs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return store


def _calibrate(tmp_path: Path, capsys, *args: str) -> tuple[int, str, str]:
    code = main_in_process(["calibrate", *args], tmp_path)
    got = capsys.readouterr()
    return code, got.out, got.err


def _one_error_line(code: int, err: str, *needles: str) -> None:
    assert code == 2, err
    assert "Traceback" not in err
    lines = [x for x in err.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), err
    for n in needles:
        assert n in lines[0], (n, lines[0])


# ---- finding 6: bad files and records ------------------------------------------------------------
@pytest.mark.parametrize(("name", "content", "needles"), [
    ("bad.json", "{bad", ["bad.json: not valid JSON", "expected a runs JSONL"]),
    ("s.json", '"x"', ["s.json holds a string", "expected a runs JSONL"]),
    ("arr.json", '[{"prompt_tokens": 10, "output_tokens": 5}]',
     ["arr.json holds an array", "expected"]),
    ("bench.json", json.dumps({"duration": 42.5, "input_lens": [1], "output_lens": [1],
                               "request_rate": "inf"}),
     ["looks like a `vllm bench serve` result", "tuner replay", "--record"]),
    ("v.json", '{"validation": 3}', ["'validation' is not a list"]),
])
def test_a_runs_file_of_another_kind_is_one_line_saying_what_was_expected(
        tmp_path, capsys, name, content, needles):
    (tmp_path / name).write_text(content)
    code, out, err = _calibrate(tmp_path, capsys, "--runs", name, "--store", "st")
    _one_error_line(code, err, *needles)
    assert not (tmp_path / "st").exists() and out == ""


@pytest.mark.parametrize(("change", "needles"), [
    ({"sim": "x"}, ["line 2", "sim must be an object"]),
    ({"measured_s": 0}, ["line 2", "measured_s must be a finite number > 0, got 0"]),
    ({"measured_s": -5}, ["line 2", "measured_s", "got -5"]),
    ({"measured_s": "ten"}, ["line 2", "measured_s must be a number"]),
    ({"measured_s": float("inf")}, ["line 2", "measured_s", "inf"]),
    ({"sim": {"base_time_s": "x", "iterations": 1, "sampled": 1}}, ["sim.base_time_s"]),
    ({"sim": {"base_time_s": 0, "iterations": 1, "sampled": 1}}, ["sim.base_time_s"]),
    ({"predicted_s": -1}, ["predicted_s"]),
    ({"config": "x"}, ["config must be an object"]),
    ({"real_steps": {"dt_s": ["a"], "base_dt_s": [1], "sampled": [1]}}, ["real_steps.dt_s"]),
])
def test_a_bad_record_names_its_file_line_and_field_and_writes_nothing(
        tmp_path, capsys, change, needles):
    recs = [_run(0), {**_run(1), **change}, _run(2)]
    # json.dumps writes inf as Infinity, which Python's json (and so the store) reads back
    store = _store(tmp_path, recs)
    code, out, err = _calibrate(tmp_path, capsys, "--store", str(store))
    _one_error_line(code, err, "runs.jsonl", *needles)
    assert not calibration_path("A100-80G", "llama-3-8b", store).exists()


def test_lines_that_are_not_json_are_skipped_and_counted(tmp_path, capsys):
    store = _store(tmp_path, [_run(i) for i in range(3)])
    with (store / "runs.jsonl").open("a") as fh:
        fh.write('{"measured_s": 3, "sim": {"base_ti\n')  # a process that died mid-line
        fh.write("not json\n")
    code, out, err = _calibrate(tmp_path, capsys, "--store", str(store))
    assert code == 0, err
    text = " ".join(out.split())
    assert "skipped 2 line(s)" in text and "line 4, 5" in text
    assert calibration_path("A100-80G", "llama-3-8b", store).is_file()


def test_no_runs_points_to_validate_and_replay_record(tmp_path, capsys):
    code, out, err = _calibrate(tmp_path, capsys, "--store", str(tmp_path / "empty"))
    _one_error_line(code, err, "No measured runs", "tuner validate", "tuner replay", "--record")
    # a JSONL of other records (a per-request file) says what it expected
    (tmp_path / "perreq.jsonl").write_text('{"prompt_tokens": 5, "output_tokens": 3}\n' * 4)
    code, out, err = _calibrate(tmp_path, capsys, "--runs", "perreq.jsonl")
    _one_error_line(code, err, "4 JSON record(s) are not measured runs", "expected a runs JSONL")
    # runs that exist, but not of the filters' device: which runs there are
    store = _store(tmp_path, [_run(0)])
    code, out, err = _calibrate(tmp_path, capsys, "--store", str(store), "--device", "H100")
    _one_error_line(code, err, "on H100", "1 of llama-3-8b on A100-80G with vllm")


def test_read_runs_reports_what_it_skipped(tmp_path):
    store = _store(tmp_path, [_run(0), {"hello": 1}])
    with (store / "runs.jsonl").open("a") as fh:
        fh.write("{\n")
    got = read_runs(store=store)
    assert len(got.runs) == 1 and got.origins == [f"{store / 'runs.jsonl'} line 1"]
    assert got.other_records == 1 and list(got.bad_lines.values()) == [[3]]
    (tmp_path / "x.json").write_text("[1, 2]")
    with pytest.raises(RunsError, match="x.json holds an array"):
        read_runs([tmp_path / "x.json"])


def test_a_fit_never_drops_the_kernels(tmp_path, capsys):
    """Measured makespans explained by the step count alone, against simulated kernel times
    that vary the other way: least squares over kernels + per-step cost gives the kernels a
    factor of 0, which would price every later step-free schedule at 0 s (a division by zero
    in simulate). The fit keeps the kernels instead."""
    runs = []
    for i in range(4):
        r = _run(i, base=10.0 - 2 * i)
        r["measured_s"] = 0.03 * r["sim"]["iterations"]
        runs.append(r)
    c, _, _ = _fit_makespans(runs, (0, 1))
    assert c[0] == 0  # the data really do ask for it
    cal = fit_calibration(runs, device="A100-80G", model="llama-3-8b")
    assert cal.kernel_factor > 0 and "terms chosen by leave-one-out error" in cal.method


def test_a_fit_with_no_kernel_share_is_never_written(tmp_path, capsys):
    """Runs measured faster than the simulated wait for their arrivals alone: no positive
    kernel factor fits them, and nothing is written."""
    runs = []
    for i in range(3):
        r = _run(i, base=10.0)
        r["sim"]["idle_s"] = 9.0
        r["measured_s"] = 5.0
        runs.append(r)
    with pytest.raises(ValueError, match="kernel factor"):
        fit_calibration(runs, device="A100-80G", model="llama-3-8b")
    store = _store(tmp_path, runs)
    code, out, err = _calibrate(tmp_path, capsys, "--store", str(store), "--force")
    _one_error_line(code, err, "Cannot calibrate", "kernel factor")
    assert not calibration_path("A100-80G", "llama-3-8b", store).exists()


def test_a_stored_calibration_that_would_divide_by_zero_is_not_applied(tmp_path):
    """A file written by an older tuner (kernel_factor 0): simulate must not crash on it."""
    path = calibration_path("A100-80G", "llama-3-8b", tmp_path)
    doc = Calibration(device="A100-80G", model="llama-3-8b").to_json()
    path.write_text(json.dumps({**doc, "kernel_factor": 0.0}))
    assert load_calibration("A100-80G", "llama-3-8b", tmp_path) is None

    class Base:
        provenance = None

    base = Base()
    assert apply_stored(base, "A100-80G", "llama-3-8b", tmp_path) is base
    path.write_text(json.dumps(doc))
    assert isinstance(apply_stored(base, "A100-80G", "llama-3-8b", tmp_path),
                      CalibratedCostModel)
    with pytest.raises(ValueError, match="kernel factor"):
        Calibration(device="d", model="m", kernel_factor=-1.0).save(tmp_path)


# ---- finding 7: too few runs, implausible factors, where the fit is used -----------------------
def test_one_run_fits_the_kernel_factor_alone_and_warns(tmp_path, capsys):
    store = _store(tmp_path, [_run(0, factor=1.4)])
    code, out, err = _calibrate(tmp_path, capsys, "--store", str(store))
    assert code == 0, err
    text = " ".join(out.split())
    assert "warning: only 1 run(s): no leave-one-out check" in text
    assert "says nothing" in text
    doc = json.loads(calibration_path("A100-80G", "llama-3-8b", store).read_text())
    assert doc["kernel_factor"] == pytest.approx(1.4)
    assert doc["iteration_overhead_s"] == 0 and doc["per_sequence_s"] == 0
    assert doc["warnings"] and "only 1 run" in doc["warnings"][0]


def test_enough_runs_have_no_few_runs_warning():
    cal = fit_calibration([_run(i) for i in range(4)], device="A100-80G", model="llama-3-8b")
    assert not cal.warnings and len(cal.error_loo_pct) == 4


def test_an_implausible_kernel_factor_is_refused_with_its_number(tmp_path, capsys):
    hi = KERNEL_FACTOR_PLAUSIBLE[1]
    store = _store(tmp_path, [_run(0, factor=1.3 * hi)])
    code, out, err = _calibrate(tmp_path, capsys, "--store", str(store))
    _one_error_line(code, err, "Not writing the calibration", f"{1.3 * hi:.3g}",
                    "capped concurrency", "--force")
    assert not calibration_path("A100-80G", "llama-3-8b", store).exists()
    code, out, err = _calibrate(tmp_path, capsys, "--store", str(store), "--force")
    assert code == 0, err
    assert "written anyway (--force)" in " ".join(out.split())
    assert calibration_path("A100-80G", "llama-3-8b", store).is_file()
    # too small a factor too
    low = _store(tmp_path, [_run(0, factor=0.5 * KERNEL_FACTOR_PLAUSIBLE[0])], "low")
    code, out, err = _calibrate(tmp_path, capsys, "--store", str(low))
    _one_error_line(code, err, "Not writing the calibration")


def test_a_custom_store_says_how_simulate_picks_the_fit_up(tmp_path, capsys, monkeypatch):
    store = _store(tmp_path, [_run(i) for i in range(3)])
    monkeypatch.setenv("TUNER_CALIBRATION_DIR", str(tmp_path / "elsewhere"))
    code, out, err = _calibrate(tmp_path, capsys, "--store", str(store))
    assert code == 0, err
    assert f"TUNER_CALIBRATION_DIR={store}" in "".join(out.split("\n"))
    # the store simulate reads: no such hint needed
    monkeypatch.setenv("TUNER_CALIBRATION_DIR", str(store))
    code, out, err = _calibrate(tmp_path, capsys, "--store", str(store))
    assert code == 0, err
    assert "TUNER_CALIBRATION_DIR=" not in out and "`tuner simulate`" in out
    # and it is indeed how simulate's cost models find it
    cal = load_calibration("A100-80G", "llama-3-8b")
    assert cal is not None and cal.kernel_factor == pytest.approx(1.5, rel=1e-6)


# ---- finding 5: engine generations ---------------------------------------------------------------
def test_runs_of_different_generations_are_not_fitted_together(tmp_path, capsys):
    runs = [_run(0, engine=V1), _run(1, engine=V0, factor=1.2), _run(2, engine=V0, factor=1.2)]
    with pytest.raises(ValueError, match="different engine generations"):
        fit_calibration(runs, device="A100-80G", model="llama-3-8b")
    store = _store(tmp_path, runs)
    code, out, err = _calibrate(tmp_path, capsys, "--store", str(store))
    _one_error_line(code, err, "different engine generations", "vLLM V0 (2 run(s): 0.6.0)",
                    "vLLM V1, asynchronous scheduling (1 run(s): newest)",
                    "--engine-version newest or 0.6.0")
    assert not calibration_path("A100-80G", "llama-3-8b", store).exists()
    code, out, err = _calibrate(tmp_path, capsys, "--store", str(store), "--engine-version",
                                "0.6.0", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["runs"] == 2 and doc["engine"] == V0
    assert doc["kernel_factor"] == pytest.approx(1.2, rel=1e-6)  # the V1 run is not in it
    # the table says which engine each run is of; a fit of another generation is replaced
    code, out, err = _calibrate(tmp_path, capsys, "--store", str(store), "--engine-version",
                                "newest")
    assert code == 0, err
    assert "engine" in out and "newest (V1 async)" in out
    assert "replaces the fit for vLLM V0" in " ".join(out.split())
    code, out, err = _calibrate(tmp_path, capsys, "--store", str(store), "--engine-version",
                                "0.11.0")
    _one_error_line(code, err, "No run of vLLM V1, synchronous scheduling")


# ---- finding 1: the error after is the calibrated simulator's -----------------------------------
def test_the_makespan_fit_chooses_its_terms_by_leave_one_out():
    """Near-identical runs (QA: the same chunk and R_max) cannot tell the three terms apart:
    the fit keeps the subset with the best leave-one-out error, as the docstring says."""
    rng = np.random.default_rng(3)
    runs = []
    for i in range(5):
        r = _run(0, base=10.0 * rng.uniform(0.97, 1.03))
        r["measured_s"] = 1.4 * r["sim"]["base_time_s"] * rng.uniform(0.97, 1.03)
        r["trial"] = i
        runs.append(r)
    cal = fit_calibration(runs, device="A100-80G", model="llama-3-8b")
    assert "makespan" in cal.method and "terms chosen by leave-one-out error" in cal.method
    full = []
    for i in range(len(runs)):
        c, _, _ = _fit_makespans(runs[:i] + runs[i + 1:], (0, 1, 2))
        full.append(abs(_err(_predict(c, runs[i]), runs[i]["measured_s"])))
    assert cal.median_error_loo_pct <= float(np.median(full)) + 1e-3  # stored to 3 decimals
    assert cal.iteration_overhead_s == 0 and cal.per_sequence_s == 0  # noise, not terms
    # three runs: no leave-one-out fit of two runs gets three terms
    three = fit_calibration(runs[:3], device="A100-80G", model="llama-3-8b")
    assert "per_sequence_s" not in three.method or "iteration_overhead_s" not in three.method


def test_a_wait_for_arrivals_is_not_scaled():
    """A record that says how long its schedule waited for arrivals (sim.idle_s): the fit
    scales the steps only, and its error after adds the wait unscaled."""
    runs = []
    for i in range(4):
        r = _run(i, base=20.0 + 5 * i)
        idle = 4.0 + 3 * i
        r["sim"]["idle_s"] = idle
        r["measured_s"] = 1.5 * (r["sim"]["base_time_s"] - idle) + idle
        runs.append(r)
    cal = fit_calibration(runs, device="A100-80G", model="llama-3-8b")
    assert cal.kernel_factor == pytest.approx(1.5, rel=1e-6)
    assert max(abs(x) for x in cal.error_after_pct) < 1e-3
    assert any("waiting for requests" in w for w in cal.warnings)


def _bench(path: Path, prompt, output, duration: float, **extra) -> Path:
    path.write_text(json.dumps({"duration": duration, "input_lens": [int(x) for x in prompt],
                                "output_lens": [int(x) for x in output], **extra}))
    return path


def test_error_after_is_what_the_calibrated_simulation_gives(tmp_path, capsys, monkeypatch):
    """QA finding 1 end to end: replayed runs recorded, calibrated, then the same jobs
    simulated with the fit. Runs whose requests arrive over time are left out (their recorded
    makespan holds the wait for arrivals, which a fit would scale), and every run that is
    fitted has the error after that `tuner simulate` reproduces."""
    store = tmp_path / "store"
    rng = np.random.default_rng(7)
    jobs = []
    for i, (n, factor, rate) in enumerate([(150, 1.35, "inf"), (250, 1.5, "inf"),
                                           (350, 1.6, "inf"), (200, 1.4, 4.0)]):
        p, o = rng.integers(50, 600, n), rng.integers(20, 250, n)
        f = _bench(tmp_path / f"r{i}.json", p, o, 100.0, request_rate=rate)
        assert main_in_process(["replay", str(f), "-m", "llama-3-8b", "-g", "A100-80G",
                                "--json"], tmp_path) == 0
        pred = json.loads(capsys.readouterr().out)["predicted_makespan_s"]
        _bench(f, p, o, factor * pred, request_rate=rate)  # "measured": off by the factor
        assert main_in_process(["replay", str(f), "-m", "llama-3-8b", "-g", "A100-80G",
                                "--record", "--store", str(store), "--json"], tmp_path) == 0
        capsys.readouterr()
        jobs.append((f, p, o, rate))
    code, out, err = _calibrate(tmp_path, capsys, "--store", str(store), "--json")
    assert code == 0, err
    cal = json.loads(out)
    assert cal["runs"] == 3
    assert [x["run"] for x in cal["left_out"]] == [str(jobs[3][0])]
    assert "arriving over" in cal["left_out"][0]["why"]
    assert any("left out 1 replayed run" in n for n in cal["notes"])
    monkeypatch.setenv("TUNER_CALIBRATION_DIR", str(store))
    monkeypatch.delenv("TUNER_NO_CALIBRATION", raising=False)
    measured = [json.loads(x)["measured_s"]
                for x in (store / "runs.jsonl").read_text().splitlines()][:3]
    for (f, p, o, _), meas, after in zip(jobs[:3], measured, cal["error_after_pct"],
                                         strict=True):
        w = tmp_path / f"{f.stem}.csv"
        w.write_text("num_prefill_tokens,num_decode_tokens\n"
                     + "".join(f"{a},{b}\n" for a, b in zip(p, o, strict=True)))
        assert main_in_process(["simulate", "-w", str(w), "-m", "llama-3-8b", "-g",
                                "A100-80G", "--entry-point", "serve", "--startup-s", "0",
                                "--json"], tmp_path) == 0
        sim = json.loads(capsys.readouterr().out)
        assert "calibrated" in sim["provenance"]
        assert _err(sim["makespan_s"], meas) == pytest.approx(after, abs=0.05)


def test_a_replayed_run_whose_file_is_gone_is_left_out_and_said(tmp_path, capsys):
    recs = [{**_run(i), "runner": "replay", "source": str(tmp_path / f"gone{i}.json")}
            for i in range(2)]
    store = _store(tmp_path, recs + [{**_run(2), "runner": "replay"}])
    code, out, err = _calibrate(tmp_path, capsys, "--store", str(store))
    _one_error_line(code, err, "No run to fit", "gone0.json", "is not here")
