"""Recommendations a user can act on as printed (issue #23): vLLM's defaults inside the space and
never better than a winner on the same GPUs, a space that follows --max-gpus and the machines, the
machines a plan needs in every export, like-for-like comparisons, and only what the engine runs
as exported."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from tests.sim import simulate_default
from tuner.core.catalog import get_model, load_gpus
from tuner.core.config import ServingConfig
from tuner.core.errors import TunerError
from tuner.core.pricing import get_provider, load_providers, place
from tuner.core.workload import Workload
from tuner.exports import common
from tuner.exports.run_batch import to_run_batch_script
from tuner.exports.vllm import from_vllm_yaml, to_vllm_yaml
from tuner.search import SearchSettings, run_search
from tuner.search.constraints import Constraints, quantization_verdict
from tuner.search.loop import search_space
from tuner.search.records import TrialRecord, bounds_hit, pareto, trial_records, winners
from tuner.search.space import DEFAULT_MAX_GPUS, SearchSpace, load_space
from tuner.sim.simulator import InfeasibleConfig, check_feasible

REPO = Path(__file__).resolve().parents[1]
CAT = load_gpus()
LLAMA = get_model("llama-3-8b")


def job(n: int = 48, seed: int = 0, output_source: str = "output_tokens") -> Workload:
    rng = np.random.default_rng(seed)
    return Workload(prompt_tokens=rng.integers(64, 1024, n).astype(np.int64),
                    output_tokens=rng.integers(16, 200, n).astype(np.int64),
                    source="job", tokenizer="given", output_source=output_source)


def fitted(gpus=("H100",), model=LLAMA, space=None, settings=None, meta=None, w=None):
    chosen = {g: CAT[g] for g in gpus}
    return search_space(space or load_space(), w or job(), model, chosen,
                        settings or SearchSettings(), meta)


# ---- 2. vLLM's defaults are inside the space, and never beat a winner ---------------------------
def test_default_space_holds_each_gpus_vllm_defaults():
    sp, _ = fitted(("H100", "A40"))
    # LLM_CLASS on H100 (>= 70 GiB, not A100): 16,384 tokens, 1,024 sequences; A40: 8,192 / 256
    assert {8192, 16384} <= set(sp.knobs["chunk_size"])
    assert {256, 1024} <= set(sp.knobs["max_running"])
    assert 0.9 in sp.knobs["gpu_memory_utilization"] and "fcfs" in sp.knobs["ordering"]
    assert sp.fixed["scheduler"] == "vllm"
    # run-batch's defaults (2,048 / 128 on every GPU)
    sp, _ = fitted(("H100",), meta={"entry_point": "run-batch"})
    assert 2048 in sp.knobs["chunk_size"] and 128 in sp.knobs["max_running"]
    # a space of the user's own is searched as written
    own = SearchSpace(knobs={"chunk_size": [512, 4096], "max_running": [64]}, fixed={},
                      source="my-space.yaml")
    sp, _ = fitted(("H100",), space=own)
    assert sp.knobs == own.knobs


def test_no_winner_is_beaten_by_the_defaults_on_the_same_gpus():
    gpus = {"H100": CAT["H100"]}
    st = run_search(job(96), LLAMA, gpus, load_space(), SearchSettings(n_trials=12, seed=3))
    recs = trial_records(st)
    by_num = {r.number: r for r in recs}
    best, per_gpu = winners(recs)
    picks = {*best.values(), *(n for d in per_gpu.values() for n in d.values()), *pareto(recs)}
    defaults = [t for t in st.trials if t.user_attrs.get("vllm_defaults")]
    assert defaults  # simulated beside the winners, as trials of the study
    for n in picks:
        r = by_num[n]
        same = [d for d in recs if d.gpu == r.gpu and d.config.tp == r.config.tp
                and d.config.dp == r.config.dp and d.config.chunk_size == 16384
                and d.config.max_running == 1024]
        assert same, f"no vLLM-defaults trial beside winner {r.config}"
        d = same[0]
        dominated = (d.makespan_s <= r.makespan_s and d.cost_usd <= r.cost_usd
                     and (d.makespan_s, d.cost_usd) != (r.makespan_s, r.cost_usd))
        assert not dominated


def test_defaults_already_best_is_one_line():
    from tuner.reports.outputs import defaults_verdicts

    cfg = ServingConfig(gpu="H100", tp=2, dp=4, chunk_size=16384, max_running=1024).to_dict()
    r = TrialRecord(number=3, config=cfg, feasible=True,
                    metrics={"makespan_s": 10.0, "cost_usd": 1.0}, values=(10.0, 1.0))
    r.baseline = {"feasible": True, "config": dict(cfg), "metrics": {"makespan_s": 10.0,
                                                                     "cost_usd": 1.0}}
    (line,) = defaults_verdicts([r])
    assert "vLLM's defaults are already the best plan on 8 x H100 (TP 2 x DP 4, 16-bit)" in line


# ---- 3. the space follows --max-gpus, the machines and the heads --------------------------------
def test_space_follows_max_gpus_machines_and_heads():
    sp, _ = fitted(("H200",))
    assert sp.knobs["tp"] == [1, 2, 4, 8]  # one 8-GPU machine; llama-3-8b's 32/8 heads split
    assert max(sp.knobs["dp"]) == DEFAULT_MAX_GPUS  # TP1 x DP32 is in the space
    sp, _ = fitted(("H200",), settings=SearchSettings(constraints=Constraints(max_gpus=64)))
    assert 64 in sp.knobs["dp"]
    sp, _ = fitted(("H200",), settings=SearchSettings(constraints=Constraints(max_gpus=12)))
    assert sp.knobs["dp"] == [1, 2, 4, 8, 12] and sp.knobs["tp"] == [1, 2, 4, 8]
    sp, _ = fitted(("H200",), model=get_model("phi-4"))  # 40 heads, 10 KV heads
    assert sp.knobs["tp"] == [1, 2]
    with pytest.raises(TunerError, match="auto"):
        load_space().size(1)


def test_winner_on_a_bound_names_the_flag():
    cfg = ServingConfig(gpu="H200", tp=8, dp=4, chunk_size=16384, max_running=64).to_dict()
    r = TrialRecord(number=1, config=cfg, feasible=True, metrics={"makespan_s": 1.0,
                                                                  "cost_usd": 1.0})
    knobs = {"chunk_size": [512, 16384], "max_running": [16, 64, 1024], "tp": [1, 8],
             "dp": [1, 32]}
    lines = bounds_hit(r, knobs, Constraints(), 8, "default.yaml")
    text = " | ".join(lines)
    assert "32 x H200 is the most GPUs a plan may use (the default --max-gpus 32): " \
           "--max-gpus 64 widens it" in text
    assert "TP 8 fills a whole H200 machine" in text
    assert "chunk_size 16384 is the largest the space offers (default.yaml)" in text
    assert "max_running" not in text  # 64 is inside its list
    per_type = bounds_hit(r, knobs, Constraints(max_gpus_per_type={"H200": 32}), 8)
    assert "--max-gpus H200=64 widens it" in per_type[0]


def test_tp1_dp32_on_32_h200_is_in_the_space_and_runs():
    sp, _ = fitted(("H200",))
    assert 1 in sp.knobs["tp"] and 32 in sp.knobs["dp"]
    res = simulate_default(job(400), LLAMA, CAT["H200"], ServingConfig(gpu="H200", tp=1, dp=32))
    assert res.summary()["machines"]["count"] == 4


# ---- 4. machines ---------------------------------------------------------------------------------
def test_machines_tp_inside_dp_across():
    m = place("H100", 8, tp=1, dp=32)
    assert (m.count, m.replicas_per_machine, m.gpus_per_machine) == (4, 8, 8)
    m = place("H100", 8, tp=4, dp=3)
    assert (m.count, m.replicas_per_machine) == (2, 2)
    with pytest.raises(TunerError, match="one machine"):
        place("H100", 8, tp=16)
    # a provider's instances: RunPod's largest A40 instance holds 4
    runpod = get_provider("runpod", load_providers())
    m = place("A40", 4, tp=4, dp=2, billing=runpod.billing("A40"))
    assert m.instance == "4x_A40" and m.count == 2 and m.provider == "runpod"
    with pytest.raises(TunerError, match="no instance with 8 GPUs"):
        place("A40", 4, tp=8, billing=runpod.billing("A40"))
    a40 = CAT["A40"].__class__(**{**CAT["A40"].__dict__, "gpus_per_machine": 4})
    with pytest.raises(InfeasibleConfig, match="machine holds 4"):
        check_feasible(job(), LLAMA, a40, ServingConfig(gpu="A40", tp=8))
    res = simulate_default(job(), LLAMA, CAT["H100"], ServingConfig(gpu="H100", dp=32))
    assert res.summary()["machines"]["count"] == 4


def test_exports_name_the_machines_and_run_one_engine_per_replica(tmp_path):
    cfg = ServingConfig(gpu="H100", tp=2, dp=8)
    text = to_vllm_yaml(cfg, LLAMA, CAT["H100"], max_model_len=4096)
    data = yaml.safe_load(text)
    assert "data-parallel-size" not in data and data["tensor-parallel-size"] == 2
    assert "# Needs 2 x H100 machine (8 GPUs each): 4 replicas of TP 2 per machine" in text
    assert "ONE replica's engine" in text
    assert from_vllm_yaml(text) == cfg  # the plan (DP 8) round-trips through the config line
    dep = common.Deployment(cfg, LLAMA, CAT["H100"], 4096)
    script = to_run_batch_script(dep, common.RenderOptions(
        input_path=str(tmp_path / "in.jsonl"), output_path=str(tmp_path / "out.jsonl")))
    assert "# Needs 2 x H100 machine" in script
    # a stand-in vllm serve logs its GPUs and port (PORT + replica): machine 1 runs replicas
    # 4..7 on its GPUs 0..7
    from tests.fake_vllm import free_port_base, install

    fake = install(tmp_path / "bin")
    lines = [json.dumps({"custom_id": f"r{i}", "body": {"messages": [{"role": "user",
                         "content": "x" * (10 * i + 1)}], "max_tokens": 8}}) for i in range(20)]
    (tmp_path / "in.jsonl").write_text("\n".join(lines) + "\n")
    (tmp_path / "job.sh").write_text(script)
    port = free_port_base(8)
    env = {**os.environ, "PATH": f"{fake}:{os.environ['PATH']}",
           "FAKE_VLLM_LOG": str(tmp_path / "log"), "PORT": str(port)}
    r = subprocess.run(["bash", str(tmp_path / "job.sh")], env=env, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 2 and "needs 2 machines" in r.stderr
    r = subprocess.run(["bash", str(tmp_path / "job.sh")], env={**env, "MACHINE": "1"},
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    calls = (tmp_path / "log").read_text().splitlines()
    assert sorted(c.split()[0] for c in calls) == ["0,1", "2,3", "4,5", "6,7"]
    assert sorted(int(c.split("--port ")[1].split()[0]) - port for c in calls) == [4, 5, 6, 7]


# ---- 6. comparisons like for like ----------------------------------------------------------------
def _rec(n, gpu, tp, dp, bits, makespan, cost):
    cfg = ServingConfig(gpu=gpu, tp=tp, dp=dp, weight_bits=bits).to_dict()
    return TrialRecord(number=n, config=cfg, feasible=True,
                       metrics={"makespan_s": makespan, "cost_usd": cost},
                       values=(makespan, cost))


def test_quantization_compares_the_same_gpu_type_and_count():
    recs = [_rec(0, "H100", 4, 2, 16, 10.0, 0.5),    # best 16-bit overall: 8 GPUs
            _rec(1, "H100", 1, 1, 16, 70.0, 0.4),    # 16-bit on the FP8 plan's GPUs
            _rec(2, "H100", 1, 1, 8, 40.0, 0.2)]     # the quantized best
    line = quantization_verdict(recs, "cheapest", lambda x: f"${x:.2f}")
    assert "1 x H100 (TP 1 x DP 1, 8-bit weights, 16-bit KV)" in line
    assert "against 1 x H100 (TP 1 x DP 1, 16-bit)" in line and "8 x H100" not in line
    assert "-43 % time" in line and "-50 % $" in line
    alone = quantization_verdict([recs[0], recs[2]], "cheapest", lambda x: f"${x:.2f}")
    # without a simulation beside the search (no `beside`) nothing says 16 bits cannot run on
    # 1 x H100, only that the search tried none there: "no 16-bit plan runs on" claimed what
    # was never checked (tests/test_qa_outputs2.py checks the simulated like for like)
    assert "the search tried no 16-bit plan on 1 x H100" in alone and "8 x H100" in alone


# ---- 7. only what the engine runs as exported ----------------------------------------------------
def test_orderings_by_output_length_need_known_lengths():
    sp, notes = fitted(w=job(output_source="output_tokens"))
    assert "longest-output" not in sp.knobs["ordering"] and "--outputs-known" in notes[0]
    sp, notes = fitted(w=job(output_source="max_tokens (the cap, taken as the output length)"))
    assert "longest-output" in sp.knobs["ordering"] and not notes
    sp, _ = fitted(w=job(output_source="output_tokens"), meta={"outputs_known": True})
    assert "longest-output" in sp.knobs["ordering"]


def test_a_preset_no_engine_runs_is_never_a_winner():
    space = SearchSpace(knobs={"chunk_size": [256, 2048], "scheduler": ["vllm", "sarathi"]},
                        fixed={}, source="t")
    st = run_search(job(64), LLAMA, {"A40": CAT["A40"]}, space,
                    SearchSettings(n_trials=12, seed=0))
    recs = trial_records(st)
    assert any(r.config.scheduler == "sarathi" and r.study_only for r in recs)
    best, per_gpu = winners(recs)
    by_num = {r.number: r for r in recs}
    for n in [*best.values(), *per_gpu["A40"].values(), *pareto(recs)]:
        assert by_num[n].config.scheduler == "vllm" and not by_num[n].study_only


# ---- the CLI, end to end -------------------------------------------------------------------------
@pytest.fixture(scope="module")
def searched(tmp_path_factory):
    out = tmp_path_factory.mktemp("reco")
    r = subprocess.run([sys.executable, "-m", "tuner.cli", "search", "--engines", "vllm", "-w",
                        str(REPO / "examples" / "arxiv.jsonl"), "-m", "llama-3-8b", "--gpus",
                        "A40,H100", "--n-trials", "40", "--out", str(out)],
                       capture_output=True, text=True, timeout=600,
                       env={**os.environ, "COLUMNS": "200"})
    assert r.returncode == 0, r.stderr
    return out, r.stdout


def test_cli_summary_names_both_sides_and_exports_name_machines(searched):
    out, text = searched
    flat = " ".join(text.split())
    assert "vLLM's defaults on the same" in flat
    res = json.loads((out / "results.json").read_text())
    for goal in ("fastest", "cheapest"):
        w = res["winners"][goal]
        m = w["metrics"]["machines"]
        assert m["gpus_used"] == w["config"]["tp"] * w["config"]["dp"]
        for suffix in (".vllm.yaml", ".run-batch.sh", ".ray-data.py"):
            assert "Needs " in (out / f"{goal}{suffix}").read_text()
        assert json.loads((out / f"{goal}.json").read_text())["machines"]["count"] >= 1
        assert w["config"]["scheduler"] == "vllm"
    assert isinstance(res["bounds"], dict)
