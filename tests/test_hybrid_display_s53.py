"""Stop 53 QA (hybrid display): what `simulate`, the report, the search's cost-model lines, the
exports and `tuner gpus --provider` show for a Gated DeltaNet hybrid (Qwen3-Next) and around
it: SGLang's Mamba state pool and its running cap, vLLM's raised block and a hybrid's prefix
caching in the defaults line, SGLang's DP attention for the hybrid (its per-rank pool), the
margin note's engine flag, one price date a row."""

from __future__ import annotations

import json
import re

import pytest
from typer.testing import CliRunner

from tuner.cli.main import app
from tuner.core.catalog import get_model, load_gpus
from tuner.core.config import ServingConfig
from tuner.core.sglang import default_config, dp_attention_supported, plan_memory_sglang
from tuner.search.records import TrialRecord

GPUS = load_gpus()
WIDE = {"COLUMNS": "400", "NO_COLOR": "1", "TERM": "dumb"}


@pytest.fixture(scope="module")
def qnext():
    return get_model("qwen3-next-80b-a3b")


@pytest.fixture(scope="module")
def small_workload(tmp_path_factory):
    """Eight short chat requests: simulate runs in well under a second."""
    path = tmp_path_factory.mktemp("w") / "w.jsonl"
    path.write_text("".join(json.dumps(
        {"custom_id": f"r{i}", "method": "POST", "url": "/v1/chat/completions",
         "body": {"model": "m", "max_tokens": 32,
                  "messages": [{"role": "user", "content": "word " * (200 + 40 * i)}]}}) + "\n"
        for i in range(8)))
    return str(path)


def _simulate(workload: str, *args: str) -> str:
    r = CliRunner().invoke(app, ["simulate", "-w", workload, "-m", "qwen3-next-80b-a3b", *args],
                           env=WIDE)
    assert r.exit_code == 0, r.output
    return re.sub(r"\s+", " ", r.output)


# ---- A: SGLang's DP attention for Qwen3-Next, its state pool per rank -----------------------
def test_dp_attention_hybrid_pool_is_per_rank_at_attention_tp(qnext):
    """SGLang 0.5.23 runs Qwen3-Next under DP attention (qwen3_next.py splits the Gated
    DeltaNet heads by attn_tp_size; configs/qwen3_next.py sizes a state slot over the
    attention-TP group; each rank's kv_cache_configurator sizes its own pool): the plan of
    TP 1 x DP 8 holds a state slot of the whole model's linear layers at TP 1, and as many
    slots as one TP-1 GPU's memory after its (expert-split) weights gives, and the export
    says the cap is per DP-attention rank."""
    from tuner.core.sglang import MAMBA_FULL_MEMORY_RATIO, sglang_state_bytes_per_request
    from tuner.exports.sglang import _hybrid_note

    assert dp_attention_supported(qnext)
    cfg, _ = default_config(qnext, GPUS["H200"], {"tp": 1, "dp": 8})
    plan = plan_memory_sglang(qnext, GPUS["H200"], cfg)
    slot = sglang_state_bytes_per_request(qnext, 1)
    assert plan.state_bytes_per_request == slot
    rest = plan.usable_bytes - plan.weight_bytes - plan.runtime_overhead_bytes
    r = MAMBA_FULL_MEMORY_RATIO
    assert plan.state_slots == int((rest * r / (1 + r) - slot) // slot)
    assert "per DP-attention rank" in _hybrid_note(cfg, qnext, GPUS["H200"])
    one = default_config(qnext, GPUS["H200"], {"tp": 8})[0]
    assert "per replica" in _hybrid_note(one, qnext, GPUS["H200"])


# ---- B: the report's memory table shows the state pool ---------------------------------------
def _sglang_record(qnext, number=1):
    cfg, _ = default_config(qnext, GPUS["H200"], {"tp": 2})
    plan = plan_memory_sglang(qnext, GPUS["H200"], cfg, mean_request_tokens=3000.0)
    rec = TrialRecord.from_dict({"number": number, "config": cfg.to_dict(), "feasible": True,
                                 "metrics": {"makespan_s": 100.0, "cost_usd": 1.0}})
    rec.memory = plan
    return rec, plan


def test_report_memory_rows_carve_out_the_state_pool(qnext, monkeypatch):
    from tuner.reports import views

    rec, plan = _sglang_record(qnext)
    assert plan.state_slots > 0 and plan.max_running_by_slots < plan.max_concurrent_requests
    monkeypatch.setattr(views, "_winner_roles", lambda ctx: [(1, ["overall fastest"])])
    rows = views._formatted_memory_rows(None, {1: rec})
    (row,) = rows
    pool = (plan.state_slots + 1) * plan.state_bytes_per_request
    assert row["state"] == pytest.approx(pool)
    assert row["free"] == pytest.approx(plan.gpu_memory_bytes - plan.weight_bytes
                                        - plan.activation_bytes - plan.kv_bytes - pool
                                        - plan.runtime_overhead_bytes)  # its own row (s54)
    assert f"{plan.state_slots:,} states" in row["state_s"]
    assert row["max_conc_s"].startswith(f"{plan.max_running_by_slots:,} ")
    assert "state-slot cap" in row["max_conc_s"]
    from tuner.reports.figures import memory_figure
    assert "Mamba state pool" in {t.name for t in memory_figure(rows).data}


# ---- C, D: the vLLM defaults line as the hybrid runs ----------------------------------------
def test_defaults_line_says_prefix_caching_off_where_the_release_turns_it_off(small_workload):
    text = _simulate(small_workload, "-g", "H200", "--tp", "2", "--engine-version", "0.10.2")
    given = text[text.index("not given ("):]
    assert "prefix caching off" in given and "prefix caching on" not in given


def test_defaults_line_and_memory_table_give_the_raised_block(small_workload, qnext):
    from tuner.core.memory import plan_memory

    block = plan_memory(qnext, GPUS["H100"], ServingConfig(gpu="H100", tp=4)).block_size_tokens
    assert block > 16
    text = _simulate(small_workload, "-g", "H100", "--tp", "4")
    given = text[text.index("not given ("):]
    assert f"block 16, which vLLM raises to {block} tokens" in given
    assert f"block {block} tokens: vLLM raised it from 16" in text


# ---- E: simulate's max concurrent requests under SGLang's state-slot cap -------------------
def test_sglang_max_concurrent_is_the_slot_cap(small_workload, qnext):
    cfg, _ = default_config(qnext, GPUS["H100"], {"tp": 4})
    plan = plan_memory_sglang(qnext, GPUS["H100"], cfg, mean_request_tokens=3000.0)
    assert plan.max_running_by_slots < plan.max_concurrent_requests
    text = _simulate(small_workload, "-g", "H100", "--tp", "4", "--engine", "sglang")
    row = re.search(r"max concurrent requests \(mean length\) │ ([^│]+)│", text).group(1)
    assert row.startswith(f"{plan.max_running_by_slots:,}: the Mamba state pool's cap")


# ---- F: the search's cost-model lines describe the winners ----------------------------------
def test_cost_model_lines_describe_the_winner_not_the_first_trial():
    from tuner.cli.search import cost_model_lines

    def rec(n, makespan, cost, prov):
        r = TrialRecord.from_dict({"number": n, "config": ServingConfig(gpu="H100").to_dict(),
                                   "feasible": True,
                                   "metrics": {"makespan_s": makespan, "cost_usd": cost}})
        r.provenance = prov
        return r

    recs = [rec(0, 50.0, 9.0, "moe_tp 16 over 2 machines"), rec(1, 10.0, 1.0, "moe_tp 8")]

    class Info:
        cost_model = "catalog"
    lines = cost_model_lines(recs, {"H100": Info(), "A40": Info()})
    assert lines == ["H100, fastest and cheapest (trial #1): moe_tp 8", "A40: catalog"]


# ---- G: simulate --help says what the CLI takes for SGLang ----------------------------------
def test_help_does_not_map_gpu_memory_utilization_to_sglang():
    r = CliRunner().invoke(app, ["simulate", "--help"], env=WIDE)
    text = re.sub(r"[\s│]+", " ", r.output)
    i = text.index("--gpu-memory-utilization")
    opt = text[i:i + 400]
    assert "SGLang --mem-fraction-static" not in opt and "refuses this one" in opt


# ---- H: a vLLM export's margin note names vLLM's limit only ---------------------------------
def test_margin_note_names_the_files_engine_flag():
    from tuner.core.workload import load_workload
    from tuner.reports.extras import deploy_max_model_len

    llama = get_model("llama-3-8b")
    w = load_workload("examples/arxiv.jsonl", model=llama)
    mml, vllm_note = deploy_max_model_len(w, llama)
    assert vllm_note and "--context-length" not in vllm_note
    assert f"--context-length {mml + 1}" in deploy_max_model_len(w, llama, sglang=True)[1]


# ---- I: one price date a provider row ----------------------------------------------------------
def test_provider_rows_carry_their_own_date():
    r = CliRunner().invoke(app, ["gpus", "--provider", "gcp"], env=WIDE)
    assert r.exit_code == 0, r.output
    rows = [ln for ln in r.output.splitlines() if ln.startswith("│ g2-standard")]
    assert rows and all(ln.count("read 20") == 1 for ln in rows)
