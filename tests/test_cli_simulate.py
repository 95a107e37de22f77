"""`tuner simulate` knobs beyond the defaults: offload flags, measured profile, exact mode."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def run(*args):
    return subprocess.run([sys.executable, "-m", "tuner.cli", "simulate", *args],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)


@pytest.fixture(scope="module")
def workload(tmp_path_factory):
    p = tmp_path_factory.mktemp("w") / "w.jsonl"
    p.write_text("".join(json.dumps({"prompt_tokens": 300 + 37 * i, "output_tokens": 40 + 11 * i}) + "\n"
                         for i in range(40)))
    return str(p)


def test_offload_flags_reach_the_simulator(workload):
    base = run("-w", workload, "-m", "llama-3-8b", "-g", "A10", "--json")
    off = run("-w", workload, "-m", "llama-3-8b", "-g", "A10", "--kv-offload-layers", "4", "--json")
    assert base.returncode == 0 and off.returncode == 0, off.stderr
    b, o = json.loads(base.stdout), json.loads(off.stdout)
    assert o["config"]["kv_offload_layers"] == 4
    assert o["kv_capacity_tokens"] > b["kv_capacity_tokens"]
    assert o["offload"]["kv_capacity_gain"] > 1.0
    table = run("-w", workload, "-m", "llama-3-8b", "-g", "A10", "--kv-offload-layers", "4")
    assert "Offloading on A10" in table.stdout and "transfer / compute" in table.stdout


def test_exact_mode_gives_the_same_makespan(workload):
    fast = json.loads(run("-w", workload, "-m", "llama-3-8b", "-g", "A40", "--json").stdout)
    exact = json.loads(run("-w", workload, "-m", "llama-3-8b", "-g", "A40", "--exact", "--json").stdout)
    assert exact["makespan_s"] == pytest.approx(fast["makespan_s"], rel=1e-9)
    assert exact["iterations"] == fast["iterations"]


def test_measured_profile_is_used_and_named(workload):
    prof = ROOT / "predictors" / "data" / "tiny-llama-cpu"
    if not prof.is_dir():
        pytest.skip("no shipped CPU profile")
    r = run("-w", workload, "-m", "tiny-llama", "-g", "A10", "--profile", str(prof),
            "--profile-mode", "measured", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["provenance"].startswith("measured")


def test_bad_offload_value_is_one_line(workload):
    r = run("-w", workload, "-m", "llama-3-8b", "-g", "A10", "--weight-offload-fraction", "1.5")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:")


def test_every_config_field_is_an_option_with_vllm_names_first():
    """The options come from ServingConfig's field metadata: one per field, vLLM's name as the
    primary flag and tuner's older name as an alias."""
    import typer.main

    from tuner.cli.main import app
    from tuner.core.config import KNOBS

    cmd = typer.main.get_command(app).commands["simulate"]
    params = {p.name: p for p in cmd.params}
    assert set(KNOBS) <= set(params)
    for old, new in (("--tp", "--tensor-parallel-size"), ("--chunk-size", "--max-num-batched-tokens"),
                     ("--max-running", "--max-num-seqs"), ("--dp", "--data-parallel-size")):
        opts = next(p.opts for p in cmd.params if old in p.opts)
        assert opts[0] == new, opts
    assert params["attention_on_cpu"].secondary_opts == ["--attention-on-gpu"]
    assert params["gpu"].required and not params["chunk_size"].required


def test_sglang_flag_names_are_aliases_of_the_same_knobs(workload):
    sg = run("-w", workload, "-m", "llama-3-8b", "-g", "A40", "--engine", "sglang", "--tp-size", "2",
             "--chunked-prefill-size", "1024", "--max-running-requests", "32", "--page-size", "1",
             "--json")
    ours = run("-w", workload, "-m", "llama-3-8b", "-g", "A40", "--engine", "sglang", "--tp", "2",
               "--max-num-batched-tokens", "1024", "--max-num-seqs", "32", "--block-size", "1",
               "--json")
    assert sg.returncode == 0 and ours.returncode == 0, sg.stderr + ours.stderr
    a, b = json.loads(sg.stdout), json.loads(ours.stdout)
    assert a["config"] == b["config"] and a["makespan_s"] == b["makespan_s"]
    assert (a["config"]["tp"], a["config"]["chunk_size"], a["config"]["max_running"],
            a["config"]["block_size"]) == (2, 1024, 32, 1)


def test_not_given_line_names_only_the_defaults_applied(workload):
    r = run("-w", workload, "-m", "llama-3-8b", "-g", "A100-80G", "--engine-version", "0.6.0",
            "--max-num-seqs", "1024", "--gpu-memory-utilization", "0.95")
    assert r.returncode == 0, r.stderr
    text = " ".join(r.stdout.split())  # rich wraps the line
    line = text[text.index("not given ("):]
    assert "max_num_batched_tokens" in line
    # given, so not printed as a default (vLLM 0.6.0's are 256 and 0.9)
    assert "max_num_seqs 256" not in line and "gpu_memory_utilization 0.9" not in line


def test_vllm_names_and_old_aliases_give_the_same_config(workload):
    new = run("-w", workload, "-m", "llama-3-8b", "-g", "A10", "--tensor-parallel-size", "2",
              "--max-num-batched-tokens", "1024", "--max-num-seqs", "32", "--json")
    old = run("-w", workload, "-m", "llama-3-8b", "-g", "A10", "--tp", "2", "--chunk-size", "1024",
              "--max-running", "32", "--json")
    assert new.returncode == 0 and old.returncode == 0, new.stderr + old.stderr
    a, b = json.loads(new.stdout), json.loads(old.stdout)
    assert a["config"] == b["config"] and a["makespan_s"] == b["makespan_s"]
    assert (a["config"]["tp"], a["config"]["chunk_size"], a["config"]["max_running"]) == (2, 1024, 32)
