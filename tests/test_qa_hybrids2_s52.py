"""Stop 52 QA (Q2) over the Gated DeltaNet hybrids under SGLang (Qwen3-Next, Qwen3.5):
--disable-radix-cache without --max-running-requests sizes the Mamba state pool by the ratio
(SGLang's _handle_max_mamba_cache falls back to the memory split unless both flags are given),
a state pool larger than the memory is refused naming the pool, the memory table shows the pool,
the exports give --max-running-requests at the slot cap the simulator takes, and the physical
limit stays below every SGLang prediction of a hybrid with the memory within the GPU."""

from __future__ import annotations

import json

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from tests.test_qa_hybrids_s52 import _qwen35
from tuner.cli.main import app
from tuner.core import sglang as sg
from tuner.core.catalog import get_model, load_gpus
from tuner.core.errors import TunerError
from tuner.core.workload import Workload
from tuner.predictors.sources import cost_model_for
from tuner.sim.simulator import InfeasibleConfig, simulate

GPUS = load_gpus()
QNEXT = get_model("qwen3-next-80b-a3b")
runner = CliRunner()


def _sim(tmp_path, *extra):
    w = tmp_path / "w.jsonl"
    w.write_text("".join(json.dumps({"prompt_tokens": 200 + 37 * i, "output_tokens": 50 + i})
                         + "\n" for i in range(20)))
    return runner.invoke(app, ["simulate", "-w", str(w), "-m", QNEXT.name, "-g", "H100",
                               "--engine", "sglang", "--tp", "4", *extra],
                         env={"COLUMNS": "200"})


def test_disable_radix_cache_alone_keeps_the_ratio_pool():
    # SGLang 0.5.23: the pool follows --max-running-requests only when both flags are given;
    # --disable-radix-cache alone splits the memory 0.9 : 1 and caps at slots // 1
    on = sg.default_config(QNEXT, GPUS["H100"], {"tp": 4})[0]
    ratio = sg.plan_memory_sglang(QNEXT, GPUS["H100"], on)
    off = sg.default_config(QNEXT, GPUS["H100"], {"tp": 4}, radix_cache=False)[0]
    assert off.max_running == ratio.state_slots > 5 * on.max_running - 5
    plan = sg.plan_memory_sglang(QNEXT, GPUS["H100"], off, radix_cache=False)
    assert plan.state_slots == ratio.state_slots
    assert plan.kv_capacity_tokens == ratio.kv_capacity_tokens


def test_disable_radix_cache_cli_default_max_running(tmp_path):
    r = _sim(tmp_path, "--disable-radix-cache", "--json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    on = sg.plan_memory_sglang(QNEXT, GPUS["H100"],
                               sg.default_config(QNEXT, GPUS["H100"], {"tp": 4})[0])
    assert d["config"]["max_running"] == on.state_slots  # 716, not the radix cap 143
    assert d["memory"]["kv_capacity_tokens"] == on.kv_capacity_tokens


def test_a_state_pool_past_the_memory_is_refused_naming_it(tmp_path):
    r = _sim(tmp_path, "--disable-radix-cache", "--max-running-requests", "4000")
    assert r.exit_code != 0
    msg = " ".join((r.output + str(r.exception)).split())
    assert "Mamba state pool" in msg and "4,000 request states" in msg, msg
    assert "weights 37.1 GiB + preload" not in msg  # the weights fit: not the reason


def test_memory_table_shows_the_state_pool(tmp_path):
    r = _sim(tmp_path)
    assert r.exit_code == 0, r.output
    plan = sg.plan_memory_sglang(QNEXT, GPUS["H100"],
                                 sg.default_config(QNEXT, GPUS["H100"], {"tp": 4})[0])
    row = next(ln for ln in r.output.splitlines() if "Mamba state pool  " in ln)
    gib = (plan.state_slots + 1) * plan.state_bytes_per_request / 2**30
    assert f"{gib:.1f} GiB" in row and f"{plan.state_slots:,} request states" in row


def test_export_gives_max_running_at_the_slot_cap():
    from tuner.exports.sglang import sglang_server_args

    cfg = sg.default_config(QNEXT, GPUS["H100"], {"tp": 4, "max_running": 1024})[0]
    cap = sg.plan_memory_sglang(QNEXT, GPUS["H100"], cfg).max_running_by_slots
    assert 0 < cap < 1024
    opts = dict(sglang_server_args(cfg, QNEXT, GPUS["H100"], max_model_len=4096)[0])
    assert opts["max-running-requests"] == cap
    assert opts["mem-fraction-static"] == cfg.gpu_memory_utilization
    # under the cap: as given
    small = sg.default_config(QNEXT, GPUS["H100"], {"tp": 4, "max_running": 16})[0]
    opts = dict(sglang_server_args(small, QNEXT, GPUS["H100"], max_model_len=4096)[0])
    assert opts["max-running-requests"] == 16


HYBRIDS = {"qwen3-next-80b-a3b": QNEXT, "qwen3.5-9b": _qwen35()}
SG_GPUS = ["H100", "H200", "B200", "A100-80G", "L40S", "A10"]


@settings(max_examples=40, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(model=st.sampled_from(sorted(HYBRIDS)), gpu=st.sampled_from(SG_GPUS),
       tp=st.sampled_from([1, 2, 4, 8]), mem=st.sampled_from([None, 0.6, 0.95]),
       radix=st.booleans(), max_running=st.sampled_from([None, 8, 300]),
       n=st.integers(1, 40), seed=st.integers(0, 2**16))
def test_no_sglang_hybrid_prediction_beats_the_physical_limit(model, gpu, tp, mem, radix,
                                                              max_running, n, seed):
    m, g = HYBRIDS[model], GPUS[gpu]
    rng = np.random.default_rng(seed)
    w = Workload(prompt_tokens=rng.integers(1, 3000, n), output_tokens=rng.integers(1, 600, n))
    try:
        cfg = sg.default_config(m, g, {"tp": tp, "gpu_memory_utilization": mem,
                                       "max_running": max_running}, radix_cache=radix)[0]
        res = simulate(w, m, g, cfg, cost_model_for(m)(g, cfg), startup_s=0,
                       sglang=sg.SGLangSettings(radix_cache=radix))
    except (InfeasibleConfig, TunerError):  # refused in one line: nothing to compare
        return
    assert res.schedule_lower_bound_s <= res.schedule_s * (1 + 1e-9), (
        res.schedule_lower_bound_s, res.schedule_s)
    p = res.memory
    pool = (p.state_slots + 1) * p.state_bytes_per_request if p.state_slots else 0.0
    used = (p.weight_bytes + p.runtime_overhead_bytes + pool
            + p.kv_capacity_tokens * p.kv_bytes_per_token)
    assert used <= p.usable_bytes * (1 + 1e-9)
    assert p.state_slots >= 1
    assert p.max_running_by_slots == p.state_slots // (5 if radix else 1)
