"""The search picks the engine too (issue 28 item 3): `--engines vllm,sglang`, each engine's own
knobs and defaults, the best plan per engine, and a winner's exports in its own engine's
formats."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tuner.core.catalog import get_model, load_gpus
from tuner.core.config import DEFAULTS, ENGINE_HELD, ServingConfig
from tuner.core.errors import TunerError
from tuner.core.workload import load_workload
from tuner.exports import formats_for, parse_export, render_export
from tuner.search.baseline import simulate_baseline
from tuner.search.records import config_key
from tuner.search.space import fit_space, load_space

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT / "examples" / "shared_system_prompt.jsonl"
GPUS = load_gpus()
MODEL = get_model("llama-3-8b")


# ---- one plan per engine: the other engine's knobs are held -----------------------------------
def test_a_plan_holds_the_knobs_its_engine_lacks():
    vllm = ServingConfig(gpu="A10", schedule_policy="lpm")
    assert vllm.schedule_policy == "fcfs"  # vLLM has no schedule policy
    sg = ServingConfig(gpu="A10", engine="sglang", schedule_policy="lpm", block_size=16,
                       scheduler="sarathi", kv_offload_layers=4)
    assert sg.schedule_policy == "lpm"
    for name, value in ENGINE_HELD["sglang"].items():
        assert getattr(sg, name) == value
    # the search's identity of a plan: a vLLM trial's policy is no new configuration
    assert config_key({"gpu": "A10", "engine": "vllm", "schedule_policy": "lpm"}) == \
        config_key({"gpu": "A10", "engine": "vllm", "schedule_policy": "fcfs"})
    assert config_key({"gpu": "A10", "engine": "sglang", "schedule_policy": "lpm"}) != \
        config_key({"gpu": "A10", "engine": "sglang", "schedule_policy": "fcfs"})
    assert DEFAULTS["engine"] == "vllm"
    with pytest.raises(TunerError, match="engine must be one of vllm, sglang"):
        ServingConfig(gpu="A10", engine="trt")


def test_engines_become_the_engine_knob_and_sglang_adds_its_policy():
    space = load_space()
    kw = dict(model=MODEL, gpus={"A10": GPUS["A10"]}, gpu_caps={}, defaults={},
              outputs_from_input=False)
    both, _ = fit_space(space, engines=["vllm", "sglang"], **kw)
    assert both.knobs["engine"] == ["vllm", "sglang"]
    assert both.knobs["schedule_policy"] == ["fcfs", "lpm", "dfs-weight"]
    only, _ = fit_space(space, engines=["vllm"], **kw)
    assert only.knobs["engine"] == ["vllm"] and "schedule_policy" not in only.knobs
    plain, _ = fit_space(space, **kw)  # no --engines (run_search's API default): as written
    assert "engine" not in plain.knobs


# ---- each engine's defaults as its baseline ----------------------------------------------------
def test_an_sglang_plan_is_compared_with_sglangs_defaults():
    w = load_workload(SHARED, model=MODEL)
    b = simulate_baseline(w, MODEL, GPUS["A40"], engine="sglang", startup_s=0.0)
    assert b["feasible"] and b["engine"] == "sglang"
    c = b["config"]
    assert c["engine"] == "sglang" and c["chunk_size"] == 4096  # SGLang's 20-60 GiB tier
    assert c["gpu_memory_utilization"] == b["defaults"]["mem_fraction_static"]
    v = simulate_baseline(w, MODEL, GPUS["A40"], startup_s=0.0)
    assert v["engine"] == "vllm" and v["config"]["engine"] == "vllm"
    assert v["metrics"]["makespan_s"] != b["metrics"]["makespan_s"]
    # on an A10 SGLang 0.5.23's defaults leave too little for 16-bit Llama-3-8B's weights (the
    # prefill CUDA graph's reserve): the baseline says so instead of a ratio
    a10 = simulate_baseline(w, MODEL, GPUS["A10"], engine="sglang", startup_s=0.0)
    assert not a10["feasible"] and "does not fit" in a10["reason"]


def test_no_sglang_default_on_a_device_smaller_than_its_reserve(tmp_path):
    """SGLang's reserve is absolute: on a tiny device its default --mem-fraction-static is
    below 0, so its baseline says it cannot run (a search on it still finishes, CI's CPU
    loop), and `tuner simulate --engine sglang` says what to give."""
    from tuner.core.catalog import load_gpus as load
    from tuner.core.sglang import default_config
    from tuner.runners.cpu_device import write_cpu_gpu_file

    gpu_file = write_cpu_gpu_file(tmp_path / "cpu.yaml", kv_mib=2.0)
    cpu = load(gpu_file)["CPU"]
    tiny = get_model("tiny-llama")
    with pytest.raises(TunerError, match="default --mem-fraction-static on CPU .* is -"):
        default_config(tiny, cpu, {})
    w = load_workload(SHARED, model=tiny)
    b = simulate_baseline(w, tiny, cpu, engine="sglang", startup_s=0.0)
    assert not b["feasible"] and "give --mem-fraction-static" in b["reason"]
    r = subprocess.run([sys.executable, "-m", "tuner.cli", "simulate", "-w", str(SHARED), "-m",
                        "tiny-llama", "--gpu", "CPU", "--gpu-file", str(gpu_file), "--engine",
                        "sglang"], capture_output=True, text=True)
    assert r.returncode == 2 and "give --mem-fraction-static" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


# ---- exports: a winner's are its engine's -------------------------------------------------------
def test_an_sglang_plan_exports_as_sglang_only():
    c = ServingConfig(gpu="A40", engine="sglang", schedule_policy="lpm", chunk_size=4096,
                      max_running=128, gpu_memory_utilization=0.88, tp=2, dp=2)
    assert formats_for("sglang") == ("sglang", "sglang-offline", "json")
    kw = dict(max_model_len=8192)
    for fmt in ("vllm", "vllm-run-batch", "run-batch", "ray-data"):
        with pytest.raises(TunerError, match="simulated for sglang"):
            render_export(fmt, c, MODEL, GPUS["A40"], **kw)
    cmd = render_export("sglang", c, MODEL, GPUS["A40"], **kw)
    assert "--schedule-policy lpm" in cmd and "--mem-fraction-static 0.88" in cmd
    # the page is SGLang's own pick (tuner.core.sglang.sglang_page_size): not restated
    assert "--page-size" not in cmd and "enable-mixed-chunk" not in cmd
    assert parse_export("sglang", cmd) == c
    script = render_export("sglang-offline", c, MODEL, GPUS["A40"], **kw)
    compile(script, "job.py", "exec")
    assert "'schedule_policy': 'lpm'" in script and "'dp_size': 2" in script
    assert "async_generate" in script  # every request submitted at once, as simulated
    assert parse_export("sglang-offline", script) == c
    doc = json.loads(render_export("json", c, MODEL, GPUS["A40"], **kw))
    assert doc["engine"] == "sglang" and doc["vllm"] is None
    assert doc["sglang"]["server_args"]["schedule-policy"] == "lpm"
    # a vLLM plan translated to SGLang keeps the nearest policy of its order, as before
    v = ServingConfig(gpu="A40", ordering="blend")
    assert "--schedule-policy lpm" in render_export("sglang", v, MODEL, GPUS["A40"], **kw)


# ---- the search: both engines, the best of each ----------------------------------------------
def _search(tmp_path: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tuner.cli", "search", "-w", str(SHARED), "-m", "llama-3-8b",
         "--gpus", "A10", "--n-trials", "40", "--startup-s", "0", "--max-gpus", "2",
         "--out", str(tmp_path / "out"), *extra],
        capture_output=True, text=True, cwd=tmp_path)


def test_search_reports_the_best_per_engine_and_exports_the_winners_engine(tmp_path):
    p = _search(tmp_path)
    assert p.returncode == 0, p.stderr
    doc = json.loads((tmp_path / "out" / "results.json").read_text())
    per = doc["best_per_engine"]
    assert set(per) == {"vllm", "sglang"}
    for engine, best in per.items():
        for goal in ("fastest", "cheapest"):
            assert best[goal]["config"]["engine"] == engine
    assert "Best per engine — vLLM:" in " ".join(p.stdout.split())
    # on a shared-system-prompt job SGLang's radix cache + lpm beat vLLM without... and with
    # caching both reuse the prefix; whichever wins, its files are its engine's
    for goal in ("fastest", "cheapest"):
        engine = doc["winners"][goal]["config"]["engine"]
        files = {Path(f).name for f in doc["files"].values()}
        if engine == "sglang":
            assert {f"{goal}.sglang.sh", f"{goal}.sglang-offline.py"} <= files
            assert f"{goal}.vllm.yaml" not in files
        else:
            assert {f"{goal}.vllm.yaml", f"{goal}.run-batch.sh"} <= files
        assert doc["gain_over_vllm_defaults"][goal]["engine"] == engine


def test_search_engines_option(tmp_path):
    p = _search(tmp_path, "--engines", "vllm")
    assert p.returncode == 0, p.stderr
    doc = json.loads((tmp_path / "out" / "results.json").read_text())
    assert set(doc["best_per_engine"]) == {"vllm"}
    bad = _search(tmp_path, "--engines", "vllm,trtllm", "--out", str(tmp_path / "bad"))
    assert bad.returncode == 2
    assert "tuner simulates vllm, sglang" in bad.stderr and "Traceback" not in bad.stderr
    assert not (tmp_path / "bad").exists()


def test_a_plans_summary_names_its_engine_and_not_the_knobs_it_lacks():
    from tuner.cli.search import cost_model_lines
    from tuner.cli.tables import config_tokens
    from tuner.reports.views import config_summary
    from tuner.search.records import TrialRecord

    sg = ServingConfig(gpu="A10", engine="sglang", schedule_policy="dfs-weight").to_dict()
    toks = config_tokens(sg, varying={"engine", "schedule_policy", "block_size"})
    assert toks[1] == "SGLang dfs-weight" and not any(t.startswith("block") for t in toks)
    assert not any(t.startswith(("engine", "schedule_policy")) for t in toks)
    vl = ServingConfig(gpu="A10").to_dict()
    assert config_tokens(vl, varying={"engine"})[1] == "vLLM"
    assert "vLLM" not in config_tokens(vl)  # a vLLM-only study: no engine token
    assert "SGLang dfs-weight" in config_summary(sg)
    # cost-model lines: one per engine on a GPU the study priced under both
    recs = [TrialRecord.from_dict({"number": i, "config": c, "feasible": True,
                                   "metrics": {"makespan_s": 1.0, "cost_usd": 1.0}})
            for i, c in enumerate((vl, sg))]
    recs[0].provenance, recs[1].provenance = "vLLM tables", "SGLang tables"

    class Info:
        cost_model = "first trial's"
    lines = cost_model_lines(recs, {"A10": Info(), "A40": Info()})
    assert lines == ["A10 (vLLM), fastest and cheapest (trial #0): vLLM tables",
                     "A10 (SGLang), fastest and cheapest (trial #1): SGLang tables",
                     "A40: first trial's"]
