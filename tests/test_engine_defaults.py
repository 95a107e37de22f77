"""vLLM's defaults per GPU and entry point, `tuner simulate` taking them, and the gain over
them that `tuner search` reports (terminal, results.json, report)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from tests.sim import simulate_default
from tuner.cli.main import app
from tuner.core.catalog import get_model, load_gpus
from tuner.core.config import ServingConfig
from tuner.core.engine_defaults import ENTRY_POINTS, is_large_gpu, vllm_defaults
from tuner.core.errors import TunerError
from tuner.core.workload import Workload
from tuner.reports.outputs import study_outputs
from tuner.search import SearchSettings, load_space, run_search
from tuner.search.baseline import attach_baselines, gain, simulate_baseline

runner = CliRunner()
GPUS = load_gpus()


def small_workload(n: int = 48, seed: int = 1) -> Workload:
    rng = np.random.default_rng(seed)
    return Workload(prompt_tokens=rng.integers(200, 1500, n).astype(np.int64),
                    output_tokens=rng.integers(20, 200, n).astype(np.int64), source="synthetic")


def write_workload(path: Path, rows: list[tuple[int, int]]) -> Path:
    path.write_text("".join(json.dumps({"prompt_tokens": p, "output_tokens": o}) + "\n"
                            for p, o in rows))
    return path


# ---- the table ---------------------------------------------------------------------------------
@pytest.mark.parametrize(("gpu", "entry", "tokens", "seqs"), [
    ("A10", "llm", 8192, 256), ("A40", "llm", 8192, 256), ("L40S", "llm", 8192, 256),
    ("H100", "llm", 16384, 1024), ("H200", "llm", 16384, 1024),
    ("RTX-PRO-6000", "llm", 16384, 1024),
    # PR #17885: A100s keep the small defaults even with 80 GiB
    ("A100-80G", "llm", 8192, 256), ("A100-40G", "llm", 8192, 256),
    ("A10", "serve", 2048, 256), ("A100-80G", "serve", 2048, 256),
    ("H100", "serve", 8192, 1024), ("H200", "serve", 8192, 1024),
    # run-batch's OPENAI_BATCH_RUNNER is in neither table: SchedulerConfig's fallback
    ("A10", "run-batch", 2048, 128), ("H100", "run-batch", 2048, 128),
])
def test_batch_defaults_per_gpu_and_entry_point(gpu, entry, tokens, seqs):
    g = GPUS[gpu]
    d = vllm_defaults(g.name, g.memory_gib, entry)
    assert (d.max_num_batched_tokens, d.max_num_seqs) == (tokens, seqs)
    assert d.usage_context == ENTRY_POINTS[entry]
    cfg = ServingConfig(gpu=g.name, tp=2, dp=3, **d.knobs())
    assert (cfg.chunk_size, cfg.max_running, cfg.tp, cfg.dp) == (tokens, seqs, 2, 3)
    assert (cfg.gpu_memory_utilization, cfg.block_size, cfg.weight_bits, cfg.kv_bits,
            cfg.scheduler, cfg.ordering) == (0.9, 16, 16, 16, "vllm", "fcfs")
    assert cfg.chunked_prefill


def test_large_gpu_rule_is_memory_and_name():
    assert is_large_gpu("MI300X", 192) and is_large_gpu("X", 70)
    assert not is_large_gpu("X", 69.9) and not is_large_gpu("a100-custom", 80)


def test_bad_entry_point_and_old_version_are_refused():
    with pytest.raises(TunerError, match="--entry-point"):
        vllm_defaults("A10", 24, "offline")
    with pytest.raises(TunerError, match="0.5.0"):
        vllm_defaults("A10", 24, "llm", "0.4.2")
    assert vllm_defaults("A10", 24, "llm", "0.24.0").engine_version == "0.24.0"
    # V1 before the table (0.8.0 - 0.9.1): 0.9.2's, the closest known, and the source says so
    old = vllm_defaults("H100", 80, "llm", "0.8.5")
    assert (old.max_num_batched_tokens, old.max_num_seqs) == (16384, 1024)
    assert "closest known" in old.source and old.scheduler == "vllm"


# ---- tuner simulate with no knobs ---------------------------------------------------------------
def test_simulate_without_knobs_uses_vllm_defaults(tmp_path):
    wl = write_workload(tmp_path / "w.jsonl", [(500, 50)] * 8)
    r = runner.invoke(app, ["simulate", "-w", str(wl), "-m", "llama-3-8b", "-g", "H100",
                            "--json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert (d["config"]["chunk_size"], d["config"]["max_running"]) == (16384, 1024)
    assert d["defaulted"] == ["chunk_size", "max_running", "scheduler", "weight_bits",
                              "block_size", "kv_bits"]
    r = runner.invoke(app, ["simulate", "-w", str(wl), "-m", "llama-3-8b", "-g", "H100",
                            "--entry-point", "serve", "--max-num-seqs", "64", "--json"])
    d = json.loads(r.stdout)
    assert (d["config"]["chunk_size"], d["config"]["max_running"]) == (8192, 64)
    assert d["defaulted"] == ["chunk_size", "scheduler", "weight_bits", "block_size", "kv_bits"]
    r = runner.invoke(app, ["simulate", "-w", str(wl), "-m", "llama-3-8b", "-g", "A10",
                            "--chunk-size", "512", "--json"])
    d = json.loads(r.stdout)
    assert (d["config"]["chunk_size"], d["config"]["max_running"]) == (512, 256)


def test_run_batch_is_named_in_help():
    for cmd in ("search", "simulate"):
        r = runner.invoke(app, [cmd, "--help"], env={"COLUMNS": "300"})
        assert "run-batch = vllm run-batch (its OPENAI_BATCH_RUNNER" in r.stdout, r.stdout


# ---- gain over the defaults ----------------------------------------------------------------------
def test_gain_is_winner_over_defaults_on_same_gpus():
    w, m = small_workload(), get_model("llama-3-8b")
    gpus = {"A10": GPUS["A10"], "A40": GPUS["A40"]}
    settings = SearchSettings(n_trials=10, seed=0, storage=None, study_name="gain")
    st = run_search(w, m, gpus, load_space(), settings)
    outputs = study_outputs(st, w, m, gpus, tool_version="test")
    summary = outputs.summary()
    for goal in ("fastest", "cheapest"):
        rec = outputs.by_number[outputs.context.winners.of(goal)]
        base_cfg = ServingConfig(gpu=rec.gpu, tp=rec.config.tp, dp=rec.config.dp)
        assert (base_cfg.chunk_size, base_cfg.max_running) == (8192, 256)  # A10/A40, llm
        ref = simulate_default(w, m, gpus[rec.gpu], base_cfg)
        g = summary["gain_over_vllm_defaults"][goal]
        assert g["trial"] == rec.number
        assert g["makespan_ratio"] == pytest.approx(rec.makespan_s / ref.makespan_s, rel=1e-9)
        assert g["cost_ratio"] == pytest.approx(rec.cost_usd / ref.cost_usd, rel=1e-9)
        assert g["speedup"] == pytest.approx(ref.makespan_s / rec.makespan_s, rel=1e-9)
        assert rec.to_dict()["vllm_defaults"]["config"]["chunk_size"] == 8192
    assert "Gain over vLLM's defaults" in " ".join(outputs.context.notes)


def test_serve_entry_point_changes_the_baseline():
    w, m, h100 = small_workload(24), get_model("llama-3-8b"), GPUS["H100"]
    llm = simulate_baseline(w, m, h100, entry_point="llm")
    serve = simulate_baseline(w, m, h100, entry_point="serve")
    assert llm["config"]["chunk_size"] == 16384 and serve["config"]["chunk_size"] == 8192
    assert llm["feasible"] and serve["feasible"]
    assert gain({"makespan_s": 2.0, "cost_usd": 3.0},
                {"feasible": True, "metrics": {"makespan_s": 4.0, "cost_usd": 4.0}}) == {
        "makespan_ratio": 0.5, "cost_ratio": 0.75, "speedup": 2.0, "saving_fraction": 0.25}
    assert gain({"makespan_s": 1.0, "cost_usd": 1.0}, {"feasible": False}) is None


def test_baseline_is_simulated_once_per_gpu_type_and_count():
    from tuner.search.records import TrialRecord

    w, m = small_workload(16), get_model("llama-3-8b")
    recs = [TrialRecord(number=i, config=ServingConfig(gpu="A40", tp=tp, chunk_size=512).to_dict(),
                        feasible=True, metrics={"makespan_s": 10.0, "cost_usd": 1.0})
            for i, tp in enumerate((1, 1, 2))]
    sims = attach_baselines(recs, [0, 1, 2], w, m, {"A40": GPUS["A40"]})
    # one per GPU type, TP, DP and precision (weight and KV bits)
    # ... PP 1, and the plan's engine (its own defaults)
    assert set(sims) == {("A40", 1, 1, 16, 16, 1, "vllm"), ("A40", 2, 1, 16, 16, 1, "vllm")}
    assert recs[0].baseline["metrics"] == recs[1].baseline["metrics"]
    assert recs[2].baseline["config"]["tp"] == 2


def test_search_cli_prints_and_writes_the_gain(tmp_path):
    rng = np.random.default_rng(3)
    wl = write_workload(tmp_path / "w.jsonl", [(int(p), int(o)) for p, o in
                                               zip(rng.integers(100, 1500, 30),
                                                   rng.integers(20, 300, 30), strict=True)])
    out = tmp_path / "o"
    r = runner.invoke(app, ["search", "--engines", "vllm", "-w", str(wl), "-m", "llama-3-8b", "--gpus", "A10",
                            "--n-trials", "6", "--out", str(out), "--entry-point", "serve"])
    assert r.exit_code == 0, r.output
    assert "vLLM's defaults on the same" in " ".join(r.stdout.split())
    assert "per 1M tokens" in r.stdout
    res = json.loads((out / "results.json").read_text())
    g = res["gain_over_vllm_defaults"]["fastest"]
    assert g["defaults"]["entry_point"] == "serve" and g["defaults"]["max_num_batched_tokens"] == 2048
    assert res["winners"]["fastest"]["vllm_defaults"]["config"]["max_running"] == 256
    html = (out / "report.html").read_text()
    assert "vs vLLM defaults" in html and "$ / 1M tokens" in html


@pytest.mark.parametrize(("entry", "gpu", "first"), [
    ("serve", "A10", (2048, 256)), ("llm", "A10", (8192, 256)), ("run-batch", "A40", (2048, 128))])
def test_search_evaluates_the_entry_points_defaults_first(entry, gpu, first):
    w, m = small_workload(16), get_model("llama-3-8b")
    settings = SearchSettings(n_trials=2, seed=0, storage=None, study_name="presets")
    st = run_search(w, m, {gpu: GPUS[gpu]}, load_space(), settings,
                    metadata={"entry_point": entry})
    t0 = st.trials[0].params
    assert (t0["chunk_size"], t0["max_running"]) == first


# ---- against the installed vLLM's own code ----------------------------------------------------
# Runs vLLM's EngineArgs.get_batch_defaults with a stand-in platform per GPU (name and memory;
# vLLM asks its platform for both), then the same fallback its engine applies for a context the
# tables do not name, and prints {gpu: {context: [tokens, seqs]}}.
_VLLM_DEFAULTS = """
import json, sys
import vllm.engine.arg_utils as au
from vllm.config.scheduler import SchedulerConfig
from vllm.usage.usage_lib import UsageContext

class Device:
    def __init__(self, name, gib):
        self.name, self.bytes = name, int(gib * 2**30)
    def get_device_total_memory(self, device_id=0):
        return self.bytes
    def get_device_name(self, device_id=0):
        return self.name
    def is_tpu(self):
        return False
    def is_cpu(self):
        return False

out = {}
for name, gib in json.loads(sys.argv[1]).items():
    au.current_platform = Device(name, gib)
    tokens, seqs = au.EngineArgs.get_batch_defaults(world_size=1)
    out[name] = {ctx: [tokens.get(getattr(UsageContext, ctx),
                                  SchedulerConfig.DEFAULT_MAX_NUM_BATCHED_TOKENS),
                       seqs.get(getattr(UsageContext, ctx), SchedulerConfig.DEFAULT_MAX_NUM_SEQS)]
                 for ctx in ("LLM_CLASS", "OPENAI_API_SERVER", "OPENAI_BATCH_RUNNER")}
print(json.dumps(out))
"""


def _vllm_python():
    from tuner.exports.common import engine_python

    return engine_python("vllm")


@pytest.mark.skipif(_vllm_python() is None,
                    reason="needs vLLM (this Python, .venv-vllm or TUNER_VLLM_PYTHON)")
def test_table_equals_the_installed_vllms_get_batch_defaults():
    import subprocess

    py = _vllm_python()
    version = subprocess.run([py, "-c", "import vllm; print(vllm.__version__)"],
                             capture_output=True, text=True, timeout=300).stdout.strip()
    # every catalog GPU, plus a B200-class card for the >= 160 GiB tier
    devices = {g.name: g.memory_gib for g in GPUS.values()} | {"B200": 179.0}
    r = subprocess.run([py, "-c", _VLLM_DEFAULTS, json.dumps(devices)], capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    theirs = json.loads(r.stdout.strip().splitlines()[-1])
    ours = {name: {ENTRY_POINTS[e]: [d.max_num_batched_tokens, d.max_num_seqs]
                   for e in ENTRY_POINTS
                   for d in [vllm_defaults(name, gib, e, version.split("+")[0])]}
            for name, gib in devices.items()}
    assert ours == theirs
    assert theirs["B200"]["OPENAI_API_SERVER"] == [16384, 1024]  # the tier is exercised


# ---- engine generations (tuner.core.engines) -----------------------------------------------------
def test_generations_by_release():
    from tuner.core.engines import generation_of

    assert generation_of("0.5.4").generation.key == "v0"
    assert generation_of("0.7.3").generation.key == "v0"
    assert generation_of("0.8.0").generation.key == "v1-sync"
    assert generation_of("0.10.2").generation.key == "v1-sync"
    # asynchronous scheduling on by default from 0.14.0 (vllm-project/vllm#27614)
    assert generation_of("0.13.0").generation.key == "v1-sync"
    assert generation_of("0.11.0").generation.key == "v1-sync"
    assert generation_of("0.14.0").generation.key == "v1-async"
    assert generation_of(None).generation.key == "v1-async"
    assert generation_of("0.6.0").known and not generation_of("0.6.3").known
    assert "not seen by tuner" in generation_of("0.6.3").describe()
    with pytest.raises(TunerError, match="0.5.0"):
        generation_of("0.4.3")
    with pytest.raises(TunerError, match="not a version"):
        generation_of("latest-ish")


def test_multi_step_exists_from_0_5_5_only(tmp_path):
    """--num-scheduler-steps arrived in vLLM 0.5.5 (vllm-project/vllm#7000): an earlier V0
    release is priced, simulated and exported single-step, and refuses a count above 1."""
    from tuner.core.engines import check_scheduler_steps, generation_of, priced_scheduler_steps
    from tuner.predictors.engine_overhead import profile_for
    from tuner.sim.simulator import decode_run_steps

    old, new = generation_of("0.5.4"), generation_of("0.5.5")
    assert old.generation is new.generation and not old.multi_step and new.multi_step
    assert not generation_of(None).multi_step and not generation_of("0.8.0").multi_step
    assert priced_scheduler_steps("0.5.4", None) is None
    assert priced_scheduler_steps("0.5.5", None) == 10
    assert decode_run_steps("vllm", "0.5.4", None) == 1
    assert decode_run_steps("vllm", "0.5.5", None) == 10
    assert check_scheduler_steps(old, 1) == 1
    with pytest.raises(TunerError, match="arrived in 0.5.5"):
        check_scheduler_steps(old, 4)
    p = profile_for("0.5.4", "serve")
    assert p.name == "vllm-v0" and "no multi-step scheduling" in p.source
    assert profile_for("0.5.5", "serve").name == "vllm-v0-multistep"
    wl = write_workload(tmp_path / "w.jsonl", [(300, 60)] * 16)
    r = runner.invoke(app, ["simulate", "-w", str(wl), "-m", "llama-3-8b", "-g", "A100-80G",
                            "--engine-version", "0.5.4", "--startup-s", "0", "--json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["engine"]["decode_run_steps"] == 1
    assert d["engine"]["overhead"].startswith("vllm-v0 (")  # single-step, not vllm-v0-multistep


def test_v0_defaults_follow_its_scalar_rules():
    # chunked prefill off: the whole prompt in one step, so the budget covers the context
    d = vllm_defaults("A100-80G", 80, "serve", "0.6.0", max_model_len=8192)
    assert (d.max_num_batched_tokens, d.max_num_seqs, d.scheduler) == (8192, 256, "vllm-v0")
    assert vllm_defaults("A10", 24, "llm", "0.6.0", 1024).max_num_batched_tokens == 2048
    # over 32K context V0 turns chunked prefill on: 512 tokens, decodes first (Sarathi-style)
    d = vllm_defaults("H100", 80, "llm", "0.6.0", max_model_len=131072)
    assert (d.max_num_batched_tokens, d.scheduler) == (512, "sarathi")
    assert "V0" in d.describe()


def test_describe_only_names_the_knobs_asked_for():
    d = vllm_defaults("A100-80G", 80, "serve", "0.6.0", max_model_len=8192)
    full = d.describe()
    assert "max_num_seqs 256" in full and "max_num_batched_tokens 8,192" in full
    part = d.describe(["chunk_size", "scheduler"])
    # the knobs the user gave (max_num_seqs here) are not printed as defaults
    assert "max_num_batched_tokens 8,192" in part and "prefill-first" in part
    assert "max_num_seqs" not in part and "gpu_memory_utilization" not in part
    assert "-bit" not in part and "block" not in part and "V0" in part
    assert "16-bit KV cache" in d.describe(["kv_bits"])


def test_sglang_describe_only_names_the_knobs_asked_for():
    from tuner.core.catalog import get_gpu, load_gpus
    from tuner.core.sglang import sglang_defaults

    d = sglang_defaults(get_gpu("H100", load_gpus()))
    assert "--max-running-requests" in d.describe() and "page size" in d.describe()
    part = d.describe(["chunk_size"])
    assert "--chunked-prefill-size" in part and "--mem-fraction-static" not in part
    assert "--max-running-requests" not in part


def test_engine_profile_follows_generation_entry_point_and_steps():
    from tuner.predictors.engine_overhead import logs_requests_by_default, profile_for

    assert profile_for("0.6.0", "serve", 10).name == "vllm-v0-multistep"
    # the API server logged each request before 0.10.1 unless --disable-log-requests
    from tuner.predictors.engine_overhead import V0_MULTISTEP_PER_LOGGED_REQUEST_S as log_s

    logged = profile_for("0.6.0", "serve", 10)
    assert logged.per_logged_request_s == log_s and "every request logged" in logged.source
    for quiet in (profile_for("0.6.0", "serve", 10, log_requests=False),
                  profile_for("0.6.0", "llm", 10), profile_for("0.5.4", "run-batch", 1)):
        assert quiet.per_logged_request_s == 0 and "not logged" in quiet.source
        assert quiet.per_seq_s == logged.per_seq_s > 0
        assert quiet.gpu_excess == logged.gpu_excess
    assert logs_requests_by_default("0.10.0", "serve") and logs_requests_by_default("0.6.0", "serve")
    assert not logs_requests_by_default("0.10.1", "serve")
    assert not logs_requests_by_default(None, "serve") and not logs_requests_by_default("0.6.0", "llm")
    # not given: the fitted multi-step profile, saying that vLLM's own default is single-step
    unsaid = profile_for("0.6.0", "serve")
    assert unsaid.name == "vllm-v0-multistep" and "not given" in unsaid.source
    assert profile_for("0.6.0", "serve", 10).fitted
    assert "fitted at 10 scheduler steps, used for 4" in profile_for("0.6.0", "serve", 4).source
    assert "does not stream" in profile_for("0.6.0", "llm", 10).source
    single = profile_for("0.5.4", "llm", 1)
    assert single.name == "vllm-v0" and not single.fitted
    assert "estimated" in single.summary()
    assert profile_for("0.9.2").name == "vllm-v1-sync"
    assert profile_for(None, "llm").name == "vllm-v1-offline"
    # the V1 fit left every term at 0: not labelled as fitted
    assert "not fitted" in profile_for(None, "serve").summary()
    with pytest.raises(TunerError, match="V0 engine"):
        profile_for("0.19.0", "llm", 10)
    with pytest.raises(TunerError, match="1 to 64"):
        profile_for("0.6.0", "llm", 0)


def test_v0_host_terms_lengthen_the_schedule(tmp_path):
    """The same job on the same GPU under vLLM 0.6.0 (API server, multi-step) takes longer
    than under the newest vLLM: V0's host work sits between GPU steps."""
    wl = write_workload(tmp_path / "w.jsonl", [(300, 200)] * 200)
    # --max-model-len 2048: vLLM refuses a prefill-first budget below max_model_len (V0)
    base = ["simulate", "-w", str(wl), "-m", "llama-3-8b", "-g", "A100-80G", "--startup-s", "0",
            "--max-num-batched-tokens", "2048", "--max-num-seqs", "256", "--max-model-len",
            "2048", "--json"]
    new = json.loads(runner.invoke(app, base).stdout)
    r = runner.invoke(app, base + ["--engine-version", "0.6.0", "--entry-point", "serve",
                                   "--num-scheduler-steps", "10"])
    assert r.exit_code == 0, r.output
    old = json.loads(r.stdout)
    assert old["config"]["scheduler"] == "vllm-v0" and new["config"]["scheduler"] == "vllm"
    assert old["makespan_s"] > 1.1 * new["makespan_s"]
    assert "vllm-v0-multistep" in old["engine"]["overhead"]


@pytest.mark.parametrize(("args", "match"), [
    (["--engine-version", "0.4.0"], "0.5.0"),
    (["--num-scheduler-steps", "10"], "needs a V0 engine"),
    (["--engine-version", "0.6.0", "--num-scheduler-steps", "0"], "1 to 64"),
    (["--engine-version", "0.5.2", "--num-scheduler-steps", "8"], "arrived in 0.5.5"),
])
def test_engine_errors_are_one_line(tmp_path, capsys, args, match):
    from tests.test_bad_inputs import main_in_process

    wl = write_workload(tmp_path / "w.jsonl", [(300, 20)] * 4)
    for cmd in (["simulate", "-g", "A100-80G"],
                ["search", "--engines", "vllm", "--gpus", "A100-80G", "--n-trials", "2", "--out",
                 str(tmp_path / "o")]):
        code = main_in_process([*cmd, "-w", str(wl), "-m", "llama-3-8b", *args], tmp_path)
        text = capsys.readouterr().err
        assert code == 2, text
        assert match in " ".join(text.split()) and "Traceback" not in text
        assert not (tmp_path / "o").exists()


def test_a_v0_search_recommends_what_v0_runs(tmp_path):
    wl = write_workload(tmp_path / "w.jsonl", [(300, 60)] * 64)
    out = tmp_path / "o"
    r = runner.invoke(app, ["search", "--engines", "vllm", "-w", str(wl), "-m", "llama-3-8b", "--gpus", "A100-80G",
                            "--engine-version", "0.6.0", "--entry-point", "serve",
                            "--num-scheduler-steps", "10", "--n-trials", "12", "--out",
                            str(out), "--json"])
    assert r.exit_code == 0, r.output
    d = json.loads((out / "results.json").read_text())
    front = d["pareto"]
    assert front and {t["config"]["scheduler"] for t in front} == {"vllm-v0"}
    assert not any(t.get("study_only") for t in front)
    assert "vllm-v0-multistep (fitted on public runs)" in front[0]["provenance"]
    # the exports run the engine as it was priced: multi-step 10 (issue #24: --engine-version
    # and --num-scheduler-steps reach every command)
    r = runner.invoke(app, ["export", "--out", str(out), "--format", "vllm"])
    assert r.exit_code == 0, r.output
    # "False" as a string: V0's --config loader drops a dashed `key: false` (its StoreBoolean
    # dests are underscored), so chunked prefill off would not reach the engine
    assert "num-scheduler-steps: 10" in r.stdout and "enable-chunked-prefill: 'False'" in r.stdout
    snippets = d.get("export_snippets") or {}
    for goal in snippets.values():
        assert "num-scheduler-steps" in goal["formats"]["vllm"]
    assert "disable-log-requests" not in r.stdout  # priced with the server's request log


def test_a_v0_search_without_the_request_log_prices_and_exports_it(tmp_path, monkeypatch):
    """--disable-log-requests: the search prices the V0 API server without its request log
    (shorter than with it, by one log per request), stores it, and the `vllm serve` YAML
    starts the server that way. The log is priced at 5 ms here (the shipped fit may price
    it at 0: the plumbing is what is tested)."""
    from dataclasses import replace

    from tuner.predictors import engine_overhead as eo

    monkeypatch.setitem(eo.PROFILES, "vllm-v0-multistep",
                        replace(eo.V0_MULTISTEP, per_logged_request_s=5e-3))
    wl = write_workload(tmp_path / "w.jsonl", [(300, 60)] * 64)
    base = ["search", "--engines", "vllm", "-w", str(wl), "-m", "llama-3-8b", "--gpus",
            "A100-80G", "--engine-version", "0.6.0", "--entry-point", "serve",
            "--num-scheduler-steps", "10", "--exhaustive", "--json"]
    makespans = {}
    for flag in ("", "--disable-log-requests"):
        out = tmp_path / f"o{flag}"
        r = runner.invoke(app, [*base, "--out", str(out), *([flag] if flag else [])])
        assert r.exit_code == 0, r.output
        d = json.loads((out / "results.json").read_text())
        makespans[flag] = {json.dumps(t["config"], sort_keys=True): t["metrics"]["makespan_s"]
                           for t in d["pareto"]}
    log_s = 5e-3
    logged, quiet = makespans[""], makespans["--disable-log-requests"]
    common = logged.keys() & quiet.keys()  # the same configuration on both fronts
    assert common
    for k in common:  # each replica's requests (64 / dp at least) pay one log less
        dp = json.loads(k).get("dp", 1)
        assert logged[k] - quiet[k] >= (64 // dp) * log_s * (1 - 1e-9), (k, logged[k], quiet[k])
    r = runner.invoke(app, ["export", "--out", str(out), "--format", "vllm"])
    assert r.exit_code == 0, r.output
    # 0.6.0's --config loader would pass `--disable-log-requests True`: on the serve line
    assert "--config THIS_FILE --disable-log-requests" in r.stdout


def test_a_v1_export_has_no_scheduler_steps(tmp_path):
    wl = write_workload(tmp_path / "w.jsonl", [(300, 60)] * 16)
    out = tmp_path / "o"
    r = runner.invoke(app, ["search", "--engines", "vllm", "-w", str(wl), "-m", "llama-3-8b", "--gpus", "A100-80G",
                            "--n-trials", "4", "--out", str(out)])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["export", "--out", str(out), "--format", "vllm"])
    assert r.exit_code == 0 and "max-num-seqs" in r.stdout
    assert "num-scheduler-steps" not in r.stdout
