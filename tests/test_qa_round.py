"""What a user's first hour with tuner hit (a QA pass over the CLI, 2026-11-28): vLLM's own
start-up refusals, arrival times in an offline search, export defaults for the plan's engine,
V0 launch flags, stale exports, --resume of another study, the trial budget, and the one-line
errors for meaningless flags."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from tuner.cli.main import app
from tuner.core.catalog import get_model, load_gpus
from tuner.core.config import ServingConfig
from tuner.core.errors import TunerError
from tuner.core.workload import Workload
from tuner.exports.formats import render_export
from tuner.exports.vllm import vllm_cli_options
from tuner.search.constraints import Constraints
from tuner.sim.simulator import InfeasibleConfig, check_feasible

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "arxiv.jsonl"
runner = CliRunner()


def _refused(r, message: str) -> None:
    """One TunerError (which `tuner` prints as one `error:` line, exit 2) saying `message`."""
    assert isinstance(r.exception, TunerError), (r.output, r.exception)
    assert message in " ".join(str(r.exception).split())
LLAMA = get_model("llama-3-8b")
GPUS = load_gpus()


def _tokens_csv(path: Path, n: int = 60, arrivals: bool = True) -> Path:
    rng = np.random.default_rng(3)
    rows = ["arrived_at,num_prefill_tokens,num_decode_tokens" if arrivals
            else "num_prefill_tokens,num_decode_tokens"]
    for i in range(n):
        p, d = int(rng.integers(100, 800)), int(rng.integers(20, 200))
        rows.append(f"{i * 2.0},{p},{d}" if arrivals else f"{p},{d}")
    path.write_text("\n".join(rows) + "\n")
    return path


# ---- vLLM's start-up refusals ------------------------------------------------------------------
def test_vllm_refuses_a_token_budget_below_its_running_requests():
    w = Workload(np.array([100, 200]), np.array([10, 20]))
    bad = ServingConfig(gpu="A40", chunk_size=256, max_running=1024)
    with pytest.raises(InfeasibleConfig, match=r"max_num_batched_tokens \(256\) below "
                                               r"max_num_seqs \(1024\)"):
        check_feasible(w, LLAMA, GPUS["A40"], bad)
    check_feasible(w, LLAMA, GPUS["A40"], ServingConfig(gpu="A40", chunk_size=1024,
                                                         max_running=1024))
    # SGLang has no such rule
    check_feasible(w, LLAMA, GPUS["A40"], ServingConfig(gpu="A40", engine="sglang",
                                                         chunk_size=256, max_running=1024,
                                                         block_size=1))
    r = runner.invoke(app, ["simulate", "-w", str(EXAMPLE), "-m", "llama-3-8b", "-g", "A40",
                            "--chunk-size", "256", "--max-running", "1024"])
    _refused(r, "max_num_batched_tokens (256) below max_num_seqs (1024)")


def test_simulate_warns_when_vllm_would_not_start_at_the_models_context():
    r = runner.invoke(app, ["simulate", "-w", str(EXAMPLE), "-m", "llama-3.1-8b", "-g", "A10",
                            "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert "vLLM would refuse to start" in doc["start_refused"]
    r = runner.invoke(app, ["simulate", "-w", str(EXAMPLE), "-m", "llama-3.1-8b", "-g", "A10",
                            "--max-model-len", "8192", "--json"])
    assert json.loads(r.output)["start_refused"] is None


def test_simulate_says_which_replicas_are_idle(tmp_path):
    wl = _tokens_csv(tmp_path / "few.csv", n=5, arrivals=False)
    r = runner.invoke(app, ["simulate", "-w", str(wl), "-m", "llama-3-8b", "-g", "A40",
                            "--dp", "8"])
    assert r.exit_code == 0, r.output
    assert "3 of the 8 replicas get no request" in " ".join(r.output.split())


# ---- arrival times ----------------------------------------------------------------------------
def test_simulate_replays_arrivals_and_says_so(tmp_path):
    wl = _tokens_csv(tmp_path / "trace.csv")
    base = ["simulate", "-w", str(wl), "-m", "llama-3-8b", "-g", "H100", "--startup-s", "0",
            "--json"]
    replayed = json.loads(runner.invoke(app, base).output)
    offline = json.loads(runner.invoke(app, [*base, "--ignore-arrivals"]).output)
    assert replayed["arrivals"] == {"replayed": True, "requests": 60, "span_s": 118.0}
    assert offline["arrivals"] is None
    # the job cannot end before its last request arrives: the bound says so
    assert replayed["lower_bound_s"] >= 118.0 > offline["lower_bound_s"]
    assert replayed["makespan_s"] >= replayed["lower_bound_s"]
    assert offline["makespan_s"] < replayed["makespan_s"]
    text = runner.invoke(app, base[:-1]).output
    assert "replayed from the file" in " ".join(text.split())


def test_search_plans_an_offline_job_whatever_the_file_says(tmp_path):
    wl = _tokens_csv(tmp_path / "trace.csv")
    out = tmp_path / "out"
    r = runner.invoke(app, ["search", "-w", str(wl), "-m", "llama-3-8b", "--gpus", "H100",
                            "--engines", "vllm", "--n-trials", "8", "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert "arrival times (60 requests over 2.0 min) are ignored" in " ".join(r.output.split())
    best = json.loads((out / "fastest.json").read_text())
    # an offline job of 60 short requests on H100s takes seconds, not the trace's 2 minutes
    assert best["metrics"]["makespan_s"] - best["metrics"]["startup_s"] < 60


# ---- exports ----------------------------------------------------------------------------------
def test_v0_launch_flags_are_the_ones_its_parser_has():
    args = {"model": "m", "enable_chunked_prefill": False, "enable_prefix_caching": False,
            "disable_log_requests": True}
    assert vllm_cli_options(args, v0=True) == [
        ("model", "m"), ("enable-chunked-prefill", "False"), ("disable-log-requests", True)]
    assert ("enable-chunked-prefill", False) in vllm_cli_options(args)  # current vLLM: --no-X
    config = ServingConfig(gpu="A40", scheduler="vllm-v0", chunk_size=4096, max_running=256)
    text = render_export("run-batch", config, LLAMA, GPUS["A40"], max_model_len=4096,
                         num_scheduler_steps=8, disable_log_requests=True)
    assert "--enable-chunked-prefill False" in text and "--no-enable" not in text
    assert "--disable-log-requests" in text  # the server starts as the prediction priced it


@pytest.fixture(scope="module")
def sglang_study(tmp_path_factory):
    out = tmp_path_factory.mktemp("qa") / "out"
    r = runner.invoke(app, ["search", "-w", str(EXAMPLE), "-m", "llama-3-8b", "--gpus", "A40",
                            "--engines", "sglang", "--max-gpus", "2", "--n-trials", "12",
                            "--out", str(out)])
    assert r.exit_code == 0, r.output
    return out


def test_export_writes_the_plans_own_engine_by_default(sglang_study):
    r = runner.invoke(app, ["export", "--out", str(sglang_study), "--goal", "cheapest"])
    assert r.exit_code == 0, r.output
    assert "python -m sglang.launch_server" in r.output
    r = runner.invoke(app, ["export", "--out", str(sglang_study), "--max-model-len", "100"])
    assert r.exit_code == 0
    assert "below the workload's longest request" in " ".join(r.output.split())


def test_report_names_the_winners_engine(sglang_study):
    page = (sglang_study / "report.html").read_text()
    assert "vs SGLang defaults" in page and "vs vLLM defaults" not in page


def test_a_second_study_leaves_no_export_of_the_first(sglang_study, tmp_path):
    import shutil

    out = tmp_path / "out"
    shutil.copytree(sglang_study, out)
    assert (out / "fastest.sglang.sh").exists()
    r = runner.invoke(app, ["search", "-w", str(EXAMPLE), "-m", "llama-3-8b", "--gpus", "A40",
                            "--engines", "vllm", "--max-gpus", "2", "--n-trials", "8",
                            "--study", "second", "--out", str(out)])
    assert r.exit_code == 0, r.output
    names = {p.name for p in out.iterdir()}
    assert "fastest.vllm.yaml" in names
    assert not {n for n in names if n.endswith((".sglang.sh", ".sglang-offline.py"))}


def test_resume_of_a_study_the_folder_does_not_hold_is_refused(sglang_study):
    r = runner.invoke(app, ["search", "-w", str(EXAMPLE), "-m", "llama-3.1-8b", "--gpus",
                            "A40", "--n-trials", "8", "--out", str(sglang_study), "--resume"])
    _refused(r, "holds no study 'arxiv-llama-3.1-8b'")


def test_the_trial_budget_counts_what_the_search_proposed(tmp_path):
    from tuner.search import load_study

    out = tmp_path / "out"
    base = ["search", "-w", str(EXAMPLE), "-m", "llama-3-8b", "--gpus", "A40", "--engines",
            "vllm", "--max-gpus", "2", "--out", str(out)]
    assert runner.invoke(app, [*base, "--n-trials", "10"]).exit_code == 0
    first = len(load_study(None, out_dir=out).trials)
    assert first >= 10  # the defaults and final full simulations come on top
    # the same budget again: nothing left to propose
    assert runner.invoke(app, [*base, "--n-trials", "10", "--resume"]).exit_code == 0
    assert len(load_study(None, out_dir=out).trials) == first
    assert runner.invoke(app, [*base, "--n-trials", "14", "--resume"]).exit_code == 0
    trials = load_study(None, out_dir=out).trials
    proposed = [t for t in trials if not t.user_attrs.get("final_candidate")
                and not t.user_attrs.get("vllm_defaults")]
    assert len(proposed) == 14


# ---- one line for a meaningless flag ----------------------------------------------------------
@pytest.mark.parametrize("args, message", [
    (["search", "-w", str(EXAMPLE), "-m", "llama-3-8b", "--gpus", "A10", "--quantized-model",
      "org/model-awq", "--n-trials", "5"], "add --allow-quantization"),
    (["worker", "--study", "x", "--storage", "journal:///nonexistent/s.journal", "--wait", "-1"],
     "--wait must be a finite number of seconds >= 0"),
    (["worker", "--study", "x", "--storage", "journal:///nonexistent/s.journal", "--n-trials",
      "0"], "--n-trials must be >= 1"),
])
def test_meaningless_flags_are_one_line(tmp_path, args, message):
    r = runner.invoke(app, [*args, *(["--out", str(tmp_path / "o")] if args[0] == "search"
                                     else [])])
    _refused(r, message)
    assert not (tmp_path / "o").exists()


def test_a_budget_under_a_dollar_is_printed_as_given():
    assert Constraints(budget_usd=0.001).describe() == "costs at most $0.001"
    assert Constraints(budget_usd=12.5).describe() == "costs at most $12.50"


# ---- the search: SGLang's defaults as candidates, the polish's targets ------------------------
def test_sglang_defaults_are_values_of_a_shipped_space_and_simulated_beside_its_winners(
        sglang_study):
    from tuner.core.sglang import default_config
    from tuner.search import load_study
    from tuner.search.meta import StudyMeta

    st = load_study(None, out_dir=sglang_study)
    knobs = StudyMeta.from_dict(st.user_attrs["metadata"]).knobs
    for tp in (1, 2):
        config, _ = default_config(LLAMA, GPUS["A40"], {"tp": tp})
        for name in ("chunk_size", "max_running", "gpu_memory_utilization"):
            assert getattr(config, name) in knobs[name]
    # SGLang untuned on a winner's GPUs is a trial of the study, its knobs SGLang's own
    checks = [t for t in st.trials if t.user_attrs.get("vllm_defaults")
              and t.params.get("engine", "sglang") == "sglang"]
    assert checks
    for t in checks:
        want, _ = default_config(LLAMA, GPUS["A40"], {"tp": t.params["tp"],
                                                      "dp": t.params["dp"]})
        assert t.params["gpu_memory_utilization"] == want.gpu_memory_utilization
        assert t.params["max_running"] == want.max_running
        assert t.params["chunk_size"] == want.chunk_size


def test_the_polish_moves_on_only_for_a_real_gain():
    from tuner.search.evaluator import improves

    assert improves((99.0, 1.0, "a"), (100.0, 1.0, "b"))
    assert improves((99.99, 0.5, "a"), (100.0, 1.0, "b"))  # a tie, and half the $
    assert not improves((99.99, 1.0, "a"), (100.0, 1.0, "b"))  # 0.01 %: the same plan
    assert not improves((100.0, 0.9999, "a"), (100.0, 1.0, "b"))
    assert not improves((101.0, 0.1, "a"), (100.0, 1.0, "b"))
