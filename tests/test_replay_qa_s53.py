"""A QA pass on `tuner replay` (stop 53): the measured KV capacity a run's file states, read
from every file kind and checked like the other columns, and `--record` saying at once when
`tuner calibrate` will leave the run out."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from tuner.cli.main import app
from tuner.cli.replay import read_run
from tuner.core.errors import TunerError

CSV_HEAD = "prompt_tokens,output_tokens,arrival_s,finished_s"


def _csv(tmp_path, kv: str | None, arrivals=(0.0, 0.5)):
    head = CSV_HEAD + (",kv_capacity_tokens" if kv is not None else "")
    rows = [f"100,100,{a},{a + 2.0}" + (f",{kv if i == 0 else ''}" if kv is not None else "")
            for i, a in enumerate(arrivals)]
    p = tmp_path / "run.csv"
    p.write_text("\n".join([head, *rows]) + "\n")
    return p


@pytest.mark.parametrize("bad", ["abc", "nan", "inf", "-7", "1.5"])
def test_a_bad_kv_column_is_one_clear_error(tmp_path, bad):
    with pytest.raises(TunerError, match="kv_capacity_tokens must be a whole number"):
        read_run(_csv(tmp_path, bad))
    r = CliRunner().invoke(app, ["replay", str(_csv(tmp_path, bad)), "-g", "A100-80G", "-m",
                                 "llama-3-8b"])
    # the command raises the one-line error tuner.cli.main prints (no other exception)
    assert r.exit_code != 0 and isinstance(r.exception, TunerError), r.exception


@pytest.mark.parametrize("blank,want", [("", None), ("0", None), ("300000", 300000)])
def test_a_blank_or_zero_kv_is_not_recorded(tmp_path, blank, want):
    assert read_run(_csv(tmp_path, blank)).kv_tokens == want


def _bench(tmp_path, **extra):
    doc = {"duration": 10.0, "input_lens": [100, 200], "output_lens": [50, 50],
           "request_rate": "inf", "model_id": "meta-llama/Meta-Llama-3-8B-Instruct", **extra}
    p = tmp_path / "bench.json"
    p.write_text(json.dumps(doc))
    return p


def test_a_bench_result_states_its_kv_as_a_per_request_file_does(tmp_path):
    assert read_run(_bench(tmp_path)).kv_tokens is None
    assert read_run(_bench(tmp_path, kv_capacity_tokens=400000)).kv_tokens == 400000
    assert read_run(_bench(tmp_path, num_gpu_blocks=28300, block_size=16)).kv_tokens == 452800
    with pytest.raises(TunerError, match="no block_size"):
        read_run(_bench(tmp_path, num_gpu_blocks=28300))
    # a meta.json beside it (LLMServingSim's runs) where the result states none
    (tmp_path / "meta.json").write_text(json.dumps({"kv_cache": {"num_kv_tokens": 123456}}))
    assert read_run(_bench(tmp_path)).kv_tokens == 123456


def test_record_says_when_calibrate_will_leave_the_run_out(tmp_path):
    args = ["-g", "A100-80G", "-m", "llama-3-8b", "--record", "--store", str(tmp_path / "s")]
    spread = CliRunner().invoke(app, ["replay", str(_csv(tmp_path, None, (0.0, 0.5, 1.0, 1.5)))]
                                + args)
    assert spread.exit_code == 0, spread.output
    assert "will leave this run out" in spread.output and "fit with" not in spread.output
    at_once = tmp_path / "once"
    at_once.mkdir()
    once = CliRunner().invoke(app, ["replay", str(_csv(at_once, None, (0.0, 0.0)))] + args)
    assert once.exit_code == 0, once.output
    assert "fit with: tuner calibrate" in once.output and "leave this run out" not in once.output
    # and calibrate does what the line said: the spread run is left out, the other kept
    cal = CliRunner().invoke(app, ["calibrate", "--store", str(tmp_path / "s"), "--method",
                                   "makespan", "--json"])
    assert "left out 1 replayed run" in cal.output or "left out 1" in cal.output, cal.output


def test_validate_config_with_invalid_yaml_says_so_before_asking_for_the_gpu(tmp_path):
    from tuner.cli.validation import load_config_file

    bad = tmp_path / "cfg.yaml"
    bad.write_text("max-num-seqs: [unclosed\n")
    with pytest.raises(TunerError, match="not valid YAML"):
        load_config_file(bad, None)
