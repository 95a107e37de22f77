"""vLLM V0 multi-step scheduling (issue #24, item 1: "optional multi-step with its batching of N
decode steps"): the worker runs N decode steps per scheduler call without checking stop
conditions, so a request that stops mid-run is computed to the run's end and a waiting request
starts only at a run's end."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from tests.sim import simulate_default
from tuner.cli.main import app
from tuner.core.catalog import get_model, load_gpus
from tuner.core.config import ServingConfig
from tuner.core.errors import TunerError
from tuner.core.workload import Workload
from tuner.sim.scheduler import multi_step_outputs
from tuner.sim.simulator import decode_run_steps
from tuner.sim.steps import DECODES, PREFILL_TOKENS

GPUS = load_gpus()
MODEL = get_model("llama-3-8b")


def test_outputs_round_up_to_whole_decode_runs():
    out = np.array([1, 2, 10, 11, 12, 21, 22], dtype=np.int64)
    # the prefill samples the first token; the rest run in whole runs of 10
    assert multi_step_outputs(out, 10).tolist() == [1, 11, 11, 11, 21, 21, 31]
    assert multi_step_outputs(out, 1) is out or multi_step_outputs(out, 1).tolist() == out.tolist()
    assert multi_step_outputs(out.astype(np.int32), 4).dtype == np.int32


def test_the_count_follows_engine_release_and_flag():
    assert decode_run_steps("vllm", None, None) == 1  # V1: every step scheduled
    assert decode_run_steps("vllm", "0.6.0", 4) == 4
    assert decode_run_steps("vllm", "0.6.0", 1) == 1
    # V0 without the flag: the count the V0 host profile was fitted at, as it is exported
    assert decode_run_steps("vllm", "0.6.0", None) == 10
    assert decode_run_steps("sglang", "0.6.0", 10) == 1  # a both-engine search's vLLM flag
    with pytest.raises(TunerError, match="V0 engine"):
        decode_run_steps("vllm", "0.19.0", 10)


def _sim(wl, steps, **kw):
    cfg = ServingConfig(gpu="A100-80G", scheduler="vllm-v0", chunk_size=4096, max_running=4)
    return simulate_default(wl, MODEL, GPUS["A100-80G"], cfg, startup_s=0.0,
                            engine_version="0.6.0", num_scheduler_steps=steps,
                            return_steps=True, **kw)


def test_a_request_that_stops_mid_run_is_computed_to_its_end():
    wl = Workload(np.array([100]), np.array([12]))
    single, multi = _sim(wl, 1), _sim(wl, 10)
    assert single.iterations == 1 + 11  # a prefill, then a decode per token
    assert multi.iterations == 1 + 20  # a prefill, then two whole runs of 10
    assert multi.output_tokens == single.output_tokens == 12  # the workload's own tokens
    assert multi.decode_run_steps == 10 and single.decode_run_steps == 1


@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 400), st.integers(1, 60)), min_size=1, max_size=12),
       st.integers(2, 8))
def test_waiting_requests_start_only_at_a_runs_end(reqs, n):
    """Between two prefill steps the decode steps come in whole runs: a slot freed mid-run
    is refilled only once the run is over (ample KV: no preemption)."""
    wl = Workload(np.array([p for p, _ in reqs]), np.array([o for _, o in reqs]))
    res = _sim(wl, n)
    s = np.concatenate(res.steps)
    prefill = s[:, PREFILL_TOKENS] > 0
    assert not (prefill & (s[:, DECODES] > 0)).any()  # V0: prefill steps decode nothing
    stretch = np.diff(np.flatnonzero(np.r_[True, prefill, True])) - 1
    assert (stretch % n == 0).all(), stretch
    assert res.output_tokens == int(wl.output_tokens.sum())


def test_the_cli_says_it_simulates_decode_runs(tmp_path):
    wl = tmp_path / "w.jsonl"
    wl.write_text("".join(json.dumps({"prompt_tokens": 300, "output_tokens": 37}) + "\n"
                          for _ in range(8)))
    base = ["simulate", "-w", str(wl), "-m", "llama-3-8b", "-g", "A100-80G", "--startup-s", "0",
            "--engine-version", "0.6.0", "--entry-point", "serve"]
    runner = CliRunner()
    r = runner.invoke(app, [*base, "--num-scheduler-steps", "10", "--json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["engine"]["decode_run_steps"] == 10 and d["output_tokens"] == 8 * 37
    r = runner.invoke(app, [*base, "--num-scheduler-steps", "10"])
    assert "decode runs of 10 steps" in " ".join(r.stdout.split())
    r = runner.invoke(app, [*base, "--num-scheduler-steps", "1", "--json"])
    assert json.loads(r.stdout)["engine"]["decode_run_steps"] == 1


def test_multi_step_with_chunked_prefill_refuses_pipeline_stages():
    """vLLM V0's EngineArgs (0.6.3 on; earlier releases refuse chunked prefill with multi-step
    at all): 'Multi-Step Chunked-Prefill is not supported for pipeline-parallel-size > 1';
    single-step, prefill-first batches or one stage run."""
    import dataclasses

    from tuner.sim.simulator import InfeasibleConfig

    model, gpu = get_model("llama-3-70b"), GPUS["A100-80G"]
    wl = Workload(prompt_tokens=np.full(8, 200), output_tokens=np.full(8, 30))
    cfg = ServingConfig(gpu="A100-80G", tp=2, pp=2, scheduler="sarathi", chunk_size=2048,
                        max_running=64)
    with pytest.raises(InfeasibleConfig, match="pipeline-parallel-size > 1"):
        simulate_default(wl, model, gpu, cfg, engine_version="0.6.3", startup_s=0.0)
    with pytest.raises(InfeasibleConfig, match="pipeline-parallel-size > 1"):
        simulate_default(wl, model, gpu, cfg, engine_version="0.6.3", num_scheduler_steps=4,
                         startup_s=0.0)
    ok = [simulate_default(wl, model, gpu, c, engine_version="0.6.3", num_scheduler_steps=n,
                           startup_s=0.0)
          for c, n in ((cfg, 1), (dataclasses.replace(cfg, scheduler="vllm-v0"), None),
                       (dataclasses.replace(cfg, pp=1, tp=4), None))]
    assert all(r.makespan_s > 0 for r in ok)


def test_multi_step_with_chunked_prefill_needs_0_6_3():
    """vLLM 0.5.5 - 0.6.2 refuse multi-step with chunked prefill (vllm-project/vllm#8274 on
    0.6.0); V0 turns chunked prefill on above a 32K context, so Llama-3.1 under 0.6.0 with the
    multi-step pricing needs a shorter --max-model-len, prefill-first batches or single-step."""
    import dataclasses

    from tuner.core.engines import generation_of
    from tuner.sim.simulator import InfeasibleConfig

    assert not generation_of("0.6.1").multi_step_chunked
    # the 0.6.2 wheel's EngineArgs still refuses the pair; 0.6.3's takes it
    assert not generation_of("0.6.2").multi_step_chunked
    assert generation_of("0.6.3").multi_step_chunked
    assert not generation_of("0.5.4").multi_step_chunked  # no multi-step at all
    wl = Workload(prompt_tokens=np.full(8, 200), output_tokens=np.full(8, 30))
    cfg = ServingConfig(gpu="A100-80G", scheduler="sarathi", chunk_size=512, max_running=64)
    gpu = GPUS["A100-80G"]
    with pytest.raises(InfeasibleConfig, match="not supported with multi-step"):
        simulate_default(wl, MODEL, gpu, cfg, engine_version="0.6.0", startup_s=0.0)
    with pytest.raises(InfeasibleConfig, match="as tuner prices V0 without"):
        simulate_default(wl, MODEL, gpu, cfg, engine_version="0.6.0", startup_s=0.0)
    ok = [simulate_default(wl, MODEL, gpu, c, engine_version=v, num_scheduler_steps=n,
                           startup_s=0.0)
          for c, v, n in ((cfg, "0.6.3", None), (cfg, "0.6.0", 1),
                          (dataclasses.replace(cfg, scheduler="vllm-v0", chunk_size=2048),
                           "0.6.0", None))]
    assert all(r.makespan_s > 0 for r in ok)
    # the CLI: without --num-scheduler-steps it runs single-step, as vLLM 0.6.0 runs chunked
    # prefill; asked for multi-step, one line naming the ways out
    args = ["simulate", "-w", "examples/arxiv.jsonl", "-m", "llama-3.1-8b", "-g", "A100-80G",
            "--engine-version", "0.6.0", "--json"]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["engine"]["num_scheduler_steps"] == 1
    r = CliRunner().invoke(app, [*args, "--num-scheduler-steps", "10"])
    assert r.exit_code != 0
    assert "--max-model-len" in str(r.exception) or "--max-model-len" in r.output
