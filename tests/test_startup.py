"""Engine start-up (tuner.core.startup, issue #23 point 5): every replica loads its weights,
compiles and captures CUDA graphs before its first step; the makespan and the $ include it."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from tests.sim import simulate_default
from tests.test_simulator import ConstantCost
from tuner.cli.main import app
from tuner.core.catalog import get_gpu, get_model, load_gpus
from tuner.core.config import ServingConfig
from tuner.core.errors import TunerError
from tuner.core.startup import (
    STORAGES,
    V1_CAPTURE_S_PER_LAYER,
    V1_COMPILE_S_PER_LAYER,
    Startup,
    startup_for,
)
from tuner.core.workload import Workload
from tuner.search.evaluator import Evaluator
from tuner.search.meta import StudyMeta
from tuner.search.records import TrialRecord
from tuner.search.space import SearchSpace
from tuner.sim.simulator import lower_bound_s, simulate

GPUS = load_gpus()
runner = CliRunner()


def workload(n: int = 64, seed: int = 0) -> Workload:
    rng = np.random.default_rng(seed)
    return Workload(prompt_tokens=rng.integers(100, 1500, n).astype(np.int64),
                    output_tokens=rng.integers(20, 300, n).astype(np.int64))


def write_workload(path: Path, n: int = 40) -> Path:
    w = workload(n)
    with path.open("w") as fh:
        for p, o in zip(w.prompt_tokens, w.output_tokens, strict=True):
            fh.write(json.dumps({"prompt_tokens": int(p), "output_tokens": int(o)}) + "\n")
    return path


# ---- the model -----------------------------------------------------------------------------------
def test_startup_grows_with_weight_bytes_and_shrinks_with_bandwidth():
    g = get_gpu("H100", GPUS)
    cfg = ServingConfig(gpu="H100")
    small, big = get_model("llama-3-8b"), get_model("llama-2-70b")
    s8, s70 = startup_for(small, g, cfg), startup_for(big, g, ServingConfig(gpu="H100", tp=4))
    assert s70.weight_bytes > s8.weight_bytes
    assert s70.weights_load_s > s8.weights_load_s and s70.total_s > s8.total_s
    # bytes / bandwidth, and the parts add up
    assert s8.weights_load_s == pytest.approx(small.weight_bytes(16) / STORAGES["nvme"].bytes_per_s)
    assert s8.total_s == pytest.approx(s8.weights_load_s + s8.graph_capture_s + s8.compile_s)
    # fewer bytes at 8-bit weights: a shorter load, the same compile and capture
    s8q = startup_for(small, g, ServingConfig(gpu="H100", weight_bits=8))
    assert s8q.weights_load_s < s8.weights_load_s and s8q.compile_s == s8.compile_s
    # slower storage, slower load; nothing else changes
    net = startup_for(small, g, cfg, storage="network")
    assert STORAGES["network"].bytes_per_s < STORAGES["nvme"].bytes_per_s
    assert net.weights_load_s == pytest.approx(
        s8.weights_load_s * STORAGES["nvme"].bytes_per_s / STORAGES["network"].bytes_per_s)
    assert net.total_s > s8.total_s and net.compile_s == s8.compile_s
    # compile and capture per decoder layer (V1)
    assert s8.compile_s == pytest.approx(V1_COMPILE_S_PER_LAYER * small.num_layers)
    assert s8.graph_capture_s == pytest.approx(V1_CAPTURE_S_PER_LAYER * small.num_layers)
    assert s70.compile_s > s8.compile_s


def test_tensor_parallel_ranks_read_the_whole_checkpoint():
    """vLLM's default loader: every TP rank reads the checkpoint (PR #10647: TP 2 loads about
    as long as TP 1), so the load does not shrink with TP."""
    m, g = get_model("llama-2-70b"), get_gpu("H100", GPUS)
    one = startup_for(m, g, ServingConfig(gpu="H100", tp=2))
    four = startup_for(m, g, ServingConfig(gpu="H100", tp=4))
    assert four.weights_load_s == pytest.approx(one.weights_load_s)


def test_engine_version_and_compile_cache():
    m, g, cfg = get_model("llama-3-8b"), get_gpu("A10", GPUS), ServingConfig(gpu="A10")
    v1 = startup_for(m, g, cfg, "0.19.0")
    assert v1.engine == "V1" and v1.compile_s > 0
    assert startup_for(m, g, cfg).total_s == pytest.approx(v1.total_s)  # newest = V1
    v0 = startup_for(m, g, cfg, "0.6.0")  # V0: no torch.compile by default
    assert v0.engine == "V0" and v0.compile_s == 0 and 0 < v0.graph_capture_s < v1.graph_capture_s
    warm = startup_for(m, g, cfg, compile_cache=True)
    assert 0 < warm.compile_s < v1.compile_s
    d = v1.to_dict()
    assert d["description"].startswith(f"{round(v1.total_s)} s (weights")
    assert "PR #10647" in d["weights_source"] and "PR #11005" in d["compile_source"]
    with pytest.raises(TunerError):
        startup_for(m, g, cfg, storage="floppy")


@pytest.mark.parametrize("bad", [-1.0, math.inf, math.nan, "soon"])
def test_a_given_startup_must_be_finite_and_not_negative(bad):
    with pytest.raises(TunerError, match="--startup-s"):
        Startup.fixed(bad)
    with pytest.raises(TunerError, match="--startup-s"):
        simulate(workload(4), get_model("llama-3-8b"), get_gpu("A40", GPUS),
                 ServingConfig(gpu="A40"), ConstantCost(), startup_s=bad)


# ---- simulate() ------------------------------------------------------------------------------
def test_makespan_cost_and_limit_include_the_startup():
    w, m, g = workload(), get_model("llama-3-8b"), get_gpu("A40", GPUS)
    cfg = ServingConfig(gpu="A40", chunk_size=512)
    bare = simulate(w, m, g, cfg, ConstantCost(), startup_s=0)
    # startup_s=0 is the schedule alone: the makespan tuner gave before start-up was priced
    assert bare.startup_s == 0 and bare.makespan_s == pytest.approx(0.01 * bare.iterations)
    res = simulate(w, m, g, cfg, ConstantCost())
    st = startup_for(m, g, cfg)
    assert res.startup_s == pytest.approx(st.total_s) and res.startup_s > 0
    assert res.makespan_s == pytest.approx(bare.makespan_s + res.startup_s)
    assert res.schedule_s == pytest.approx(bare.makespan_s)
    assert res.iterations == bare.iterations
    # every GPU is paid for the start-up too
    assert res.cost_usd == pytest.approx(res.makespan_s / 3600 * g.price_usd_per_h)
    assert res.cost_usd - bare.cost_usd == pytest.approx(
        res.startup_s / 3600 * g.price_usd_per_h)
    # the lower bound: the schedule's physical limit plus the same start-up
    assert res.schedule_lower_bound_s == pytest.approx(lower_bound_s(w, m, g, cfg))
    assert res.lower_bound_s == pytest.approx(bare.lower_bound_s + res.startup_s)
    real = simulate_default(w, m, g, cfg)  # a physical cost model cannot beat the limit
    assert real.startup_s == pytest.approx(res.startup_s)
    assert 0 < real.lower_bound_s <= real.makespan_s
    assert real.schedule_lower_bound_s <= real.schedule_s
    s = res.summary()
    assert s["startup_s"] == res.startup_s and s["schedule_s"] == pytest.approx(bare.makespan_s)
    assert s["startup"]["weights_load_s"] > 0 and s["startup"]["description"]
    # a given start-up replaces the model
    given = simulate(w, m, g, cfg, ConstantCost(), startup_s=30)
    assert given.makespan_s == pytest.approx(bare.makespan_s + 30)
    assert given.startup["given"] is True


def test_startup_with_a_provider_is_billed_on_the_whole_run():
    from tuner.cli.app import load_gpu_catalog

    aws = load_gpu_catalog(None, None, "aws")
    w, m = workload(24), get_model("llama-3-8b")
    cfg = ServingConfig(gpu="A10")
    bare = simulate_default(w, m, aws["A10"], cfg, startup_s=0)
    res = simulate_default(w, m, aws["A10"], cfg)
    assert res.rental.runtime_s == pytest.approx(res.makespan_s)
    assert res.rental.runtime_s == pytest.approx(bare.rental.runtime_s + res.startup_s)
    assert res.cost_usd > bare.cost_usd


def test_many_gpus_pay_relatively_more_startup_than_one():
    """A 32-GPU data-parallel plan finishes its schedule ~32x sooner, but every replica still
    starts its engine: start-up is a bigger share of its makespan (and of its $)."""
    w, m, g = workload(2048, seed=1), get_model("llama-3-8b"), get_gpu("H100", GPUS)
    one = simulate_default(w, m, g, ServingConfig(gpu="H100", chunk_size=2048))
    many = simulate_default(w, m, g, ServingConfig(gpu="H100", chunk_size=2048, dp=32))
    assert one.startup_s == pytest.approx(many.startup_s)  # replicas start in parallel
    assert one.startup_s > 0
    assert many.startup_s / many.makespan_s > one.startup_s / one.makespan_s
    # the $ of the start-up: 32 GPUs pay it
    assert many.cost_usd - simulate_default(w, m, g, ServingConfig(gpu="H100", chunk_size=2048, dp=32),
                                            startup_s=0).cost_usd == pytest.approx(
        many.startup_s / 3600 * g.price_usd_per_h * 32)


# ---- the command line --------------------------------------------------------------------------
def _sim_json(tmp_path: Path, *extra: str) -> dict:
    wl = write_workload(tmp_path / "w.jsonl")
    r = runner.invoke(app, ["simulate", "-w", str(wl), "-m", "llama-3-8b", "-g", "A10",
                            "--chunk-size", "2048", "--json", *extra])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def test_simulate_json_has_startup_and_startup_zero_reproduces_the_schedule(tmp_path):
    res = _sim_json(tmp_path)
    bare = _sim_json(tmp_path, "--startup-s", "0")
    assert res["startup_s"] > 0 and bare["startup_s"] == 0
    assert res["makespan_s"] == pytest.approx(bare["makespan_s"] + res["startup_s"])
    assert res["schedule_s"] == pytest.approx(bare["makespan_s"])
    assert res["cost_usd"] == pytest.approx(bare["cost_usd"] * res["makespan_s"]
                                            / bare["makespan_s"])
    assert res["startup"]["weights_load_s"] > 0 and res["startup"]["compile_s"] > 0
    given = _sim_json(tmp_path, "--startup-s", "12.5")
    assert given["makespan_s"] == pytest.approx(bare["makespan_s"] + 12.5)


def test_simulate_prints_the_startup(tmp_path):
    wl = write_workload(tmp_path / "w.jsonl")
    r = runner.invoke(app, ["simulate", "-w", str(wl), "-m", "llama-3-8b", "-g", "A10",
                            "--chunk-size", "2048"], env={"COLUMNS": "250"})
    assert r.exit_code == 0, r.output
    assert "start-up (included)" in r.output and "CUDA graphs" in r.output
    assert "torch.compile" in r.output and "GB/s from local NVMe" in r.output
    bad = runner.invoke(app, ["simulate", "-w", str(wl), "-m", "llama-3-8b", "-g", "A10",
                              "--startup-s", "-3"])
    assert bad.exit_code != 0 and isinstance(bad.exception, TunerError)
    assert "--startup-s" in str(bad.exception)


# ---- the search --------------------------------------------------------------------------------
def test_evaluator_prices_startup_as_the_search_asked():
    w, m = workload(2048, seed=2), get_model("llama-3-8b")
    gpus = {"A40": get_gpu("A40", GPUS)}
    space = SearchSpace(knobs={"chunk_size": [512, 2048]}, fixed={"max_running": 64},
                        source="test")
    params = {"gpu": "A40", "chunk_size": 2048}
    cfg = ServingConfig(gpu="A40", chunk_size=2048, max_running=64)
    for given in (None, 0.0, 100.0):
        ev = Evaluator(w, m, gpus, space, sample_fraction=1.0,
                       **StudyMeta.from_dict({"startup_s": given}).sim_options())
        (makespan, cost), attrs = ev.evaluate(params, 1)
        ref = simulate_default(w, m, gpus["A40"], cfg, startup_s=given)
        assert makespan == pytest.approx(ref.makespan_s) and cost == pytest.approx(ref.cost_usd)
        assert attrs["metrics"]["startup_s"] == pytest.approx(ref.startup_s)
    # a sample's schedule is scaled up to the full workload; its start-up is not
    ev = Evaluator(w, m, gpus, space, sample_fraction=0.25, startup_s=100.0)
    values, attrs = ev.evaluate(params, 1)
    fid = attrs["fidelity"]
    assert fid["startup_s"] == 100.0 and fid["scale"] == pytest.approx(4.0)
    assert fid["estimate_makespan_s"] == pytest.approx(
        fid["sample_makespan_s"] * fid["scale"] * fid["k"] + 100.0)
    assert fid["level"] == "full"  # the first trials calibrate: simulated in full as well
    full = simulate_default(w, m, gpus["A40"], cfg, startup_s=100.0)
    assert values[0] == pytest.approx(full.makespan_s)
    # the calibration pair compares schedules: the full makespan less its start-up
    ev.known.add(1, params, TrialRecord.from_attrs(1, params, values, attrs))
    (est, full_sched), = ev.known.pairs
    assert est == pytest.approx(fid["sample_makespan_s"] * fid["scale"])
    assert full_sched == pytest.approx(full.schedule_s)
