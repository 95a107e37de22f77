"""QA fixes: `tuner replay` of a zero-length or fractional run, --gpu-file GPUs (missing
fields, bookkeeping defaults, figures in the wrong unit), `tuner cost`'s precision, token and
fit checks, and --kv-offload-layers at or beyond the model's layer count.

Every bad input goes through the real entry point and must exit 2 with one `error: ...` line
and no traceback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.test_bad_inputs import main_in_process
from tuner.core.catalog import get_model, load_gpus
from tuner.core.config import ServingConfig
from tuner.core.memory import plan_memory

W = '{"prompt_tokens": 100, "output_tokens": 10}\n' * 4


def run(argv: list[str], tmp_path: Path, capfd) -> tuple[int, str, str]:
    capfd.readouterr()
    code = main_in_process(argv, tmp_path)
    out, err = capfd.readouterr()
    return code, out, err


def one_error(code: int, err: str, *needles: str) -> str:
    """The one `error:` line of a refused command, holding every needle."""
    assert code == 2, err
    assert "Traceback" not in err, err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), err
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


# --- 1. tuner replay ------------------------------------------------------------------------

def test_replay_of_a_zero_second_run_is_one_line(tmp_path, capfd):
    f = tmp_path / "pr.jsonl"
    f.write_text('{"prompt_tokens":100,"output_tokens":10,"arrival_s":0,"finished_s":0}\n')
    code, _out, err = run(["replay", str(f), "-m", "llama-3-8b", "-g", "A100-80G"], tmp_path,
                          capfd)
    one_error(code, err, "pr.jsonl", "measured span", "0 s", "nothing to compare")


@pytest.mark.parametrize(("name", "content", "needles"), [
    ("r.jsonl", '{"prompt_tokens":100.9,"output_tokens":10,"arrival_s":0,"finished_s":2}\n',
     ("line 1", "prompt_tokens", "whole number", "100.9")),
    # a blank line still counts: the error names the file's line
    ("r.jsonl", '{"prompt_tokens":5,"output_tokens":3,"arrival_s":0,"finished_s":1}\n\n'
                '{"prompt_tokens":5,"output_tokens":3.5,"arrival_s":0,"finished_s":1}\n',
     ("request 2 (line 3)", "output_tokens", "whole number", "3.5")),
    ("r.csv", "input_toks,output_toks,queued_ts,last_token_ts\n5,3,0,2\n5.25,3,0,2\n",
     ("request 2 (line 3)", "input_toks", "whole number", "5.25")),
])
def test_replay_refuses_fractional_token_counts(tmp_path, capfd, name, content, needles):
    f = tmp_path / name
    f.write_text(content)
    code, _out, err = run(["replay", str(f), "-m", "llama-3-8b", "-g", "A100-80G"], tmp_path,
                          capfd)
    one_error(code, err, *needles)


def test_replay_still_accepts_integral_floats(tmp_path, capfd):
    f = tmp_path / "r.jsonl"
    f.write_text('{"prompt_tokens":100.0,"output_tokens":10,"arrival_s":0,"finished_s":2}\n')
    code, out, err = run(["replay", str(f), "-m", "llama-3-8b", "-g", "A100-80G", "--json"],
                         tmp_path, capfd)
    assert code == 0, err
    assert json.loads(out)["measured_makespan_s"] == 2.0


# --- 2. --gpu-file GPUs -------------------------------------------------------------------

NEW_GPU = ("MYGPU:\n  memory_gib: 24\n  bf16_tflops: 100\n  fp32_tflops: 30\n"
           "  hbm_gbps: 600\n  pcie_gen: 4\n  host_link_gbps: 25\n  host_ram_gib: 64\n"
           "  cpu_cores: 8\n  price_usd_per_h: 1\n")


def test_new_gpu_needs_no_bookkeeping_fields(tmp_path, capfd):
    f = tmp_path / "g.yaml"
    f.write_text(NEW_GPU)  # no price_source, price_date or tdp_w
    g = load_gpus(f)["MYGPU"]
    assert g.price_source == f"given in --gpu-file {f}"
    assert g.price_date == "" and g.tdp_w is None
    code, out, err = run(["gpus", "--gpu-file", "g.yaml", "--json"], tmp_path, capfd)
    assert code == 0, err
    assert json.loads(out)["MYGPU"]["price_source"] == "given in --gpu-file g.yaml"
    # stated, they are kept
    f.write_text(NEW_GPU + "  price_source: my quote\n  price_date: 2026-01\n  tdp_w: 150\n")
    g = load_gpus(f)["MYGPU"]
    assert (g.price_source, g.price_date, g.tdp_w) == ("my quote", "2026-01", 150)


def test_missing_gpu_fields_are_named_with_units(tmp_path, capfd):
    (tmp_path / "g.yaml").write_text("MYGPU:\n  memory_gib: 24\n")
    code, _out, err = run(["gpus", "--gpu-file", "g.yaml"], tmp_path, capfd)
    line = one_error(code, err, "g.yaml", "MYGPU", "hbm_gbps (memory bandwidth in GB/s",
                     "bf16_tflops (dense BF16 tensor TFLOP/s", "host_ram_gib", "cpu_cores",
                     "price_usd_per_h", "$/GPU-h")
    assert "__init__" not in line and "positional" not in line
    # what has a default is not asked for; what is given is not either
    for key in ("price_source", "price_date", "tdp_w", "memory_gib"):
        assert f"{key} (" not in line
    # a GPU named with no fields at all is the same one line, not a crash
    (tmp_path / "g.yaml").write_text("MYGPU:\n")
    code, _out, err = run(["gpus", "--gpu-file", "g.yaml"], tmp_path, capfd)
    one_error(code, err, "memory_gib (GPU memory in GiB")


@pytest.mark.parametrize(("text", "needles"), [
    ("A100-80G:\n  hbm_gbps: 1.0\n",
     ("hbm_gbps 1.0 is implausible: GB/s", "e.g. 2039 for an A100-80G", "did you give TB/s?")),
    ("A100-80G:\n  host_link_gbps: 0.025\n",
     ("host_link_gbps 0.025 is implausible", "GB/s", "did you give TB/s?")),
    ("A100-80G:\n  memory_gib: 81920\n",
     ("memory_gib 81920 is implausible", "GiB", "1024", "did you give MiB?")),
    ("A100-80G:\n  bf16_tflops: 312000\n",
     ("bf16_tflops 312000 is implausible", "TFLOP/s", "did you give GFLOP/s?")),
    # each figure in range, the two together not: a rate in PFLOP/s ...
    ("A100-80G:\n  bf16_tflops: 0.312\n",
     ("bf16_tflops 0.312 TFLOP/s", "hbm_gbps 2039 GB/s", "FLOP per byte",
      "bf16_tflops in PFLOP/s")),
    ("A100-80G:\n  fp32_tflops: 0.0195\n", ("fp32_tflops", "fp32_tflops in PFLOP/s")),
    # ... or a bandwidth in TB/s above the per-figure floor
    ("B200:\n  hbm_gbps: 13\n", ("bf16_tflops 2250 TFLOP/s", "hbm_gbps in TB/s")),
])
def test_gpu_figures_in_the_wrong_unit_are_refused(tmp_path, capfd, text, needles):
    (tmp_path / "w.jsonl").write_text(W)
    (tmp_path / "g.yaml").write_text(text)
    code, _out, err = run(["simulate", "-w", "w.jsonl", "-m", "llama-3-8b", "-g",
                           text.split(":")[0], "--gpu-file", "g.yaml"], tmp_path, capfd)
    one_error(code, err, "g.yaml", *needles)


def test_hbm_typed_in_tbps_no_longer_simulates(tmp_path, capfd):
    """hbm_gbps 1.0 once gave a 9,431 s makespan; a real A100's is far below that."""
    (tmp_path / "w.jsonl").write_text(W)
    (tmp_path / "g.yaml").write_text("A100-80G:\n  hbm_gbps: 1.0\n")
    code, _out, err = run(["simulate", "-w", "w.jsonl", "-m", "llama-3-8b", "-g", "A100-80G",
                           "--gpu-file", "g.yaml"], tmp_path, capfd)
    one_error(code, err, "hbm_gbps")


@pytest.mark.parametrize("cores", [1, 2, 16, 192])
def test_a_cpu_validation_device_stays_plausible(tmp_path, cores):
    from tuner.runners.cpu_device import write_cpu_gpu_file

    g = load_gpus(write_cpu_gpu_file(tmp_path / "cpu.yaml", cores=cores))["CPU"]
    assert g.hbm_gbps == 10.0 * cores and g.memory_gib < 1


# --- 3. tuner cost ------------------------------------------------------------------------

@pytest.mark.parametrize(("model", "tp", "bits"), [("gpt-oss-20b", 1, 4), ("llama-3-8b", 1, 16),
                                                   ("deepseek-v3", 8, 8)])
def test_cost_defaults_to_the_checkpoints_precision(tmp_path, capfd, model, tp, bits):
    code, out, err = run(["cost", "-m", model, "-g", "H200", "--tp", str(tp), "--tokens", "512",
                          "--json"], tmp_path, capfd)
    assert code == 0, err
    assert json.loads(out)["weight_bits"] == bits == get_model(model).checkpoint_bits


def test_cost_refuses_more_bits_than_the_checkpoint(tmp_path, capfd):
    code, _out, err = run(["cost", "-m", "gpt-oss-20b", "-g", "H100", "--tokens", "512",
                           "--weight-bits", "16"], tmp_path, capfd)
    one_error(code, err, "gpt-oss-20b", "4-bit", "--weight-bits 4")


@pytest.mark.parametrize(("args", "needles"), [
    (["--tokens", "100000000"], ("--tokens 100,000,000", "context length of 8,192")),
    (["--tokens", "8000", "--context", "1000"], ("--context 1,000 + --tokens 8,000 = 9,000",)),
    (["--decodes", "2", "--kv-tokens", "20000"], ("--kv-tokens 20,000", "2 decode(s)")),
])
def test_cost_refuses_tokens_beyond_the_context(tmp_path, capfd, args, needles):
    code, _out, err = run(["cost", "-m", "llama-3-8b", "-g", "H100", *args], tmp_path, capfd)
    one_error(code, err, *needles)


def test_cost_at_the_context_length_still_prices(tmp_path, capfd):
    code, out, err = run(["cost", "-m", "llama-3-8b", "-g", "H100", "--tokens", "4096",
                          "--context", "4096", "--json"], tmp_path, capfd)
    assert code == 0, err
    assert json.loads(out)["total_s"] > 0


def test_cost_notes_weights_that_do_not_fit(tmp_path, capfd):
    code, out, err = run(["cost", "-m", "llama-3-70b", "-g", "A10", "--tokens", "512",
                          "--json"], tmp_path, capfd)
    assert code == 0, err
    note = json.loads(out)["note"]
    assert "131.4 GiB per GPU at TP 1" in note and "A10's 22.06 GiB" in note
    assert "--tp 8" in note
    code, out, err = run(["cost", "-m", "llama-3-70b", "-g", "A10", "--tokens", "512"],
                         tmp_path, capfd)
    assert code == 0 and "does not run there" in " ".join(out.split()), out
    # it fits: no note
    code, out, err = run(["cost", "-m", "llama-3-70b", "-g", "A10", "--tp", "8", "--tokens",
                          "512", "--json"], tmp_path, capfd)
    assert code == 0 and json.loads(out)["note"] is None


# --- 4. --kv-offload-layers ---------------------------------------------------------------

@pytest.mark.parametrize(("layers", "needle"), [
    (32, "all KV layers offloaded (kv_offload_layers 32, llama-3-8b's 32 layers)"),
    (33, "kv_offload_layers 33 is more than llama-3-8b has (32 layers)"),
    (100, "kv_offload_layers 100 is more than llama-3-8b has (32 layers)"),
])
def test_kv_offload_of_every_layer_says_so(layers, needle):
    gpus = load_gpus()
    plan = plan_memory(get_model("llama-3-8b"), gpus["A10"],
                       ServingConfig(gpu="A10", kv_offload_layers=layers),
                       mean_request_tokens=2000, max_request_tokens=4095)
    assert not plan.fits and needle in plan.reason and "offload at most 31" in plan.reason
    assert "holds 0 tokens" not in plan.reason


def test_kv_offload_of_a_whole_pipeline_stage_says_so():
    plan = plan_memory(get_model("llama-3-8b"), load_gpus()["A100-80G"],
                       ServingConfig(gpu="A100-80G", pp=2, kv_offload_layers=16),
                       max_request_tokens=4095)
    assert not plan.fits and "all KV layers offloaded" in plan.reason
    assert "offload at most 15" in plan.reason


@pytest.mark.parametrize(("layers", "needle"), [(32, "all KV layers offloaded"),
                                                (33, "is more than llama-3-8b has")])
def test_simulate_kv_offload_beyond_the_layers_is_one_line(tmp_path, capfd, layers, needle):
    (tmp_path / "w.jsonl").write_text(W)
    code, _out, err = run(["simulate", "-w", "w.jsonl", "-m", "llama-3-8b", "-g", "A10",
                           "--kv-offload-layers", str(layers)], tmp_path, capfd)
    one_error(code, err, needle)


def test_kv_offload_below_the_layer_count_still_plans():
    plan = plan_memory(get_model("llama-3-8b"), load_gpus()["A10"],
                       ServingConfig(gpu="A10", kv_offload_layers=31), max_request_tokens=4095)
    assert plan.fits, plan.reason
