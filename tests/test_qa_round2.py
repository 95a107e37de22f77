"""The second QA pass over the CLI (2026-11-28): exports a real engine would refuse or misread
(a mixture-of-experts plan at dp > 1, SGLang's context check, an estimated context), V0's prefix
caching default, vLLM's start-up check of a prefill-first token budget, calibrations kept to
their engine generation, LLM.generate's cut outputs, arrival times in JSONL, each engine's best
plan on a sampled search, the study a rerun may replace, and the answer's estimated GPUs."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import optuna
import pytest
import yaml
from typer.testing import CliRunner

from tuner.cli.main import app
from tuner.core.catalog import get_model, load_gpus
from tuner.core.config import ServingConfig
from tuner.core.errors import TunerError
from tuner.core.workload import Workload, load_workload
from tuner.exports import common
from tuner.exports.sglang import sglang_server_args
from tuner.exports.vllm import to_vllm_yaml

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "arxiv.jsonl"
runner = CliRunner()
LLAMA = get_model("llama-3-8b")
MOE = get_model("qwen3-30b-a3b")
GPUS = load_gpus()


def _refused(r, message: str) -> None:
    assert isinstance(r.exception, TunerError), (r.output, r.exception)
    assert message in " ".join(str(r.exception).split()), str(r.exception)


# ---- a mixture-of-experts plan at dp > 1 is one engine, as it is sized and priced ----------------
def test_moe_at_dp_keeps_vllms_data_parallel_engine():
    cfg = ServingConfig(gpu="H100", tp=1, dp=4)
    text = to_vllm_yaml(cfg, MOE, GPUS["H100"], max_model_len=4096)
    data = yaml.safe_load(text)
    assert data["data-parallel-size"] == 4 and data["tensor-parallel-size"] == 1
    assert "One data-parallel engine over all 4 GPUs" in text and "once, on one machine" in text
    # over two machines: vLLM's multi-node data parallel, rank offsets per machine
    wide = to_vllm_yaml(ServingConfig(gpu="H100", tp=1, dp=16), MOE, GPUS["H100"],
                        max_model_len=4096)
    assert "--data-parallel-size-local 8" in wide and "--headless" in wide
    assert "--data-parallel-start-rank 8*K" in wide
    # a dense model's replicas stay engines of their own
    dense = yaml.safe_load(to_vllm_yaml(cfg, LLAMA, GPUS["H100"], max_model_len=4096))
    assert "data-parallel-size" not in dense


def test_moe_replicas_as_separate_engines_say_whether_one_fits():
    fits = common.Deployment(ServingConfig(gpu="H100", tp=1, dp=4), MOE, GPUS["H100"], 4096)
    assert "it fits" in common.moe_separate_engines_note(fits)
    # Qwen3-30B-A3B's 61 GB of BF16 weights do not fit one 48 GB L40S
    tight = common.Deployment(ServingConfig(gpu="L40S", tp=1, dp=2), MOE, GPUS["L40S"], 4096)
    assert "does NOT fit" in common.moe_separate_engines_note(tight)


def test_sglang_moe_at_dp_is_dp_attention_over_every_gpu():
    opts, notes = sglang_server_args(ServingConfig(gpu="L40S", tp=1, dp=2, engine="sglang"),
                                     MOE, GPUS["L40S"], max_model_len=4096)
    opts = dict(opts)
    assert (opts["tp-size"], opts["attn-dp-size"], "dp-size" in opts) == (2, 2, False)
    assert "ep-size" not in opts
    assert any("DP attention" in n for n in notes)


# ---- SGLang's context check is strict ------------------------------------------------------------
def test_sglang_context_length_serves_the_longest_request():
    opts = dict(sglang_server_args(ServingConfig(gpu="A40"), LLAMA, GPUS["A40"],
                                   max_model_len=4095)[0])
    # SGLang refuses prompt + max_new_tokens >= context_length
    assert opts["context-length"] == 4096
    at_limit = dict(sglang_server_args(ServingConfig(gpu="A40"), LLAMA, GPUS["A40"],
                                       max_model_len=LLAMA.max_position)[0])
    assert at_limit["context-length"] == LLAMA.max_position  # never beyond the model's


# ---- the deployed context keeps a margin over estimated token counts -----------------------------
def test_estimated_counts_deploy_a_context_with_a_margin():
    from tuner.reports.extras import deploy_max_model_len

    w = load_workload(EXAMPLE, model=LLAMA)
    assert w.tokenizer.startswith("estimate")
    longest = int((w.prompt_tokens + w.output_tokens).max())
    mml, note = deploy_max_model_len(w, LLAMA)
    assert longest < mml <= min(LLAMA.max_position, 1.25 * longest + 16) and note
    counted = Workload(np.array([1000, 3000]), np.array([10, 20]), tokenizer="given")
    assert deploy_max_model_len(counted, LLAMA) == (3020, "")

    class Rec:  # a plan whose KV holds less than the margin, and a prefill-first one
        def __init__(self, kv, cfg):
            self.metrics = type("M", (), {"kv_capacity_tokens": kv})()
            self.config = cfg

    assert deploy_max_model_len(w, LLAMA, Rec(longest + 100, ServingConfig(gpu="A40")))[0] \
        == longest + 100
    prefill_first = ServingConfig(gpu="A40", scheduler="vllm-v0", chunk_size=longest + 8)
    assert deploy_max_model_len(w, LLAMA, Rec(None, prefill_first))[0] == longest + 8


@pytest.fixture(scope="module")
def a40_vllm_study(tmp_path_factory) -> Path:
    """The shipped example (chat requests, estimated tokens) on one A40 under vLLM."""
    out = tmp_path_factory.mktemp("qa2") / "out"
    r = runner.invoke(app, ["search", "-w", str(EXAMPLE), "-m", "llama-3-8b", "--gpus", "A40",
                            "--engines", "vllm", "--max-gpus", "1", "--n-trials", "6",
                            "--out", str(out)])
    assert r.exit_code == 0, r.output
    return out


def test_search_exports_carry_the_margin(a40_vllm_study):
    text = (a40_vllm_study / "cheapest.vllm.yaml").read_text()
    assert yaml.safe_load(text)["max-model-len"] > 4095
    assert "NOTE: max-model-len" in text and "estimated at 4 characters per token" in text


# ---- V0's defaults ------------------------------------------------------------------------------
def _shared_prefix_job() -> Workload:
    n = 64
    return Workload(np.full(n, 2000), np.full(n, 50), prefix_ids=np.zeros(n, dtype=np.int64),
                    prefix_tokens=np.full(n, 1800))


@pytest.mark.parametrize("version, cached", [("0.6.0", False), ("0.8.0", True), (None, True)])
def test_prefix_caching_is_on_by_default_only_from_v1(version, cached):
    from tests.sim import simulate_default

    cfg = ServingConfig(gpu="A100-80G", scheduler="vllm-v0" if version == "0.6.0" else "vllm")
    res = simulate_default(_shared_prefix_job(), LLAMA, GPUS["A100-80G"], cfg,
                           engine_version=version)
    assert (res.summary()["cached_prompt_tokens"] > 0) is cached
    on = simulate_default(_shared_prefix_job(), LLAMA, GPUS["A100-80G"], cfg,
                          engine_version=version, prefix_caching=True)
    assert on.summary()["cached_prompt_tokens"] > 0


def test_simulate_says_v0_runs_without_prefix_caching(tmp_path):
    path = tmp_path / "w.jsonl"
    path.write_text("".join(json.dumps({"prompt_tokens": 300, "output_tokens": 20}) + "\n"
                            for _ in range(4)))
    r = runner.invoke(app, ["simulate", "-w", str(path), "-m", "llama-3-8b", "-g", "A100-80G",
                            "--engine-version", "0.6.0"])
    assert r.exit_code == 0, r.output
    assert "prefix caching off (this generation's default" in " ".join(r.output.split())


def test_prefill_first_budget_below_the_context_is_refused_as_vllm_does(tmp_path):
    path = tmp_path / "w.jsonl"
    path.write_text(json.dumps({"prompt_tokens": 300, "output_tokens": 20}) + "\n")
    base = ["simulate", "-w", str(path), "-m", "llama-3-8b", "-g", "A100-80G",
            "--engine-version", "0.6.0", "--max-num-batched-tokens", "4096"]
    _refused(runner.invoke(app, base), "max_num_batched_tokens (4096) is smaller than "
                                       "max_model_len (8192) without chunked prefill")
    r = runner.invoke(app, [*base, "--max-model-len", "4096"])
    assert r.exit_code == 0, r.output


# ---- a calibration applies to its own engine generation ------------------------------------------
def test_a_v0_calibration_is_not_applied_to_a_v1_prediction(tmp_path, monkeypatch):
    from tuner.predictors.calibration import Calibration, apply_stored, calibration_path

    monkeypatch.delenv("TUNER_NO_CALIBRATION", raising=False)
    cal = Calibration(device="A100-80G", model="llama-3-8b", iteration_overhead_s=2e-3,
                      runs=4, engine="vLLM 0.6.0: vLLM V0 (known from 11 public A100 runs)")
    path = calibration_path("A100-80G", "llama-3-8b", tmp_path)
    path.write_text(json.dumps(cal.to_json()))

    class Base:
        provenance = None

    base = Base()
    assert apply_stored(base, "A100-80G", "llama-3-8b", tmp_path, engine_version="0.6.0") \
        is not base
    assert apply_stored(base, "A100-80G", "llama-3-8b", tmp_path) is base  # the newest: V1
    assert apply_stored(base, "A100-80G", "llama-3-8b", tmp_path, engine="sglang") is base


# ---- LLM.generate cuts an output at the context ---------------------------------------------------
def test_on_too_long_cap_ends_outputs_at_the_context(tmp_path):
    from tuner.core.workload import apply_on_too_long

    w = Workload(np.array([100, 100, 8000]), np.array([10000, 50, 500]))
    capped, info = apply_on_too_long(w, 8192, "llama-3-8b", "cap")
    assert capped.output_tokens.tolist() == [8092, 50, 192]
    assert info["count"] == 2 and info["output_tokens_lost"] == (10000 - 8092) + (500 - 192)
    with pytest.raises(TunerError, match="leave no room for an output token"):
        apply_on_too_long(Workload(np.array([8192]), np.array([5])), 8192, "llama-3-8b", "cap")
    path = tmp_path / "w.jsonl"
    path.write_text(json.dumps({"prompt_tokens": 100, "output_tokens": 10000}) + "\n")
    r = runner.invoke(app, ["simulate", "-w", str(path), "-m", "llama-3-8b", "-g", "A100-80G"])
    _refused(r, "--on-too-long cap to end their outputs at the limit as LLM.generate")
    r = runner.invoke(app, ["simulate", "-w", str(path), "-m", "llama-3-8b", "-g", "A100-80G",
                            "--on-too-long", "cap", "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["output_tokens"] == 8092


# ---- arrival times in JSONL --------------------------------------------------------------------
def test_jsonl_arrival_times_are_read_and_checked(tmp_path):
    path = tmp_path / "a.jsonl"
    path.write_text(json.dumps({"prompt_tokens": 100, "output_tokens": 50, "arrival_s": 5}) + "\n"
                    + json.dumps({"custom_id": "x", "method": "POST",
                                  "url": "/v1/chat/completions", "arrived_at": 12.5,
                                  "body": {"prompt": "hi", "max_tokens": 9}}) + "\n")
    with pytest.raises(TunerError, match="one format per file"):  # shapes still one per file
        load_workload(path, model=LLAMA)
    path.write_text(json.dumps({"prompt_tokens": 100, "output_tokens": 50, "arrival_s": 5}) + "\n"
                    + json.dumps({"prompt_tokens": 80, "output_tokens": 9, "arrived_at": 12.5})
                    + "\n")
    w = load_workload(path, model=LLAMA)
    assert w.arrival_s.tolist() == [0.0, 7.5]
    for bad, message in (({"arrival_s": -5}, "arrival_s must be a time in seconds >= 0"),
                         ({"arrival_s": "abc"}, "arrival_s must be a time in seconds >= 0"),
                         ({"arrival_s": 1, "arrived_at": 2}, "both arrived_at and arrival_s")):
        path.write_text(json.dumps({"prompt_tokens": 100, "output_tokens": 50, **bad}) + "\n")
        with pytest.raises(TunerError, match=message):
            load_workload(path, model=LLAMA)
    path.write_text(json.dumps({"prompt_tokens": 100, "output_tokens": 50, "arrival_s": 1})
                    + "\n" + json.dumps({"prompt_tokens": 100, "output_tokens": 50}) + "\n")
    with pytest.raises(TunerError, match=":2: no arrival_s / arrived_at, but line 1 has one"):
        load_workload(path, model=LLAMA)


# ---- a sampled search: every engine's best plan is a full simulation of its own front ------------
def test_each_engines_candidates_are_judged_against_its_own_front():
    from types import SimpleNamespace

    from tuner.search.loop import final_candidates

    def rec(level, **fid):
        return SimpleNamespace(feasible=True, level=level, fidelity=fid)

    sglang = {"gpu": "A40", "engine": "sglang", "tp": 1}
    vllm = {"gpu": "A40", "engine": "vllm", "tp": 2}
    done = {
        tuple(sorted(sglang.items())): ([50.0, 1.0], rec("full"), 0),
        tuple(sorted(vllm.items())): ([70.0, 1.2], rec("sample", candidate=True,
                                                       sample_makespan_s=7.0, scale=10.0), 1),
    }
    ev = SimpleNamespace(
        known=SimpleNamespace(calibration=lambda: (1.0, 0.05), done=done),
        config=lambda params: params,
        estimate=lambda config, s, scale, startup, k: (s * scale, 1.2))
    # SGLang's full plan beats vLLM's estimate on the GPU, but vLLM's best plan still needs a
    # full simulation: the "best per engine" line and vLLM's gain over its defaults use it
    assert [p for p, _r in final_candidates(ev)] == [vllm]
    # against a full vLLM plan that beats it, the estimate stays one
    done[tuple(sorted({**vllm, "tp": 4}.items()))] = ([40.0, 0.9], rec("full"), 2)
    assert final_candidates(ev) == []


# ---- a rerun may replace only a study without results --------------------------------------------
def test_an_interrupted_sampled_study_is_not_replaced_by_a_rerun(tmp_path):
    from tuner.search.storage import _n_results

    study = optuna.create_study(directions=["minimize", "minimize"])
    dist = {"x": optuna.distributions.IntDistribution(0, 9)}
    study.add_trial(optuna.trial.create_trial(
        params={"x": 1}, distributions=dist, values=[10.0, 1.0],
        user_attrs={"feasible": True, "fidelity": {"level": "sample"}}))
    assert _n_results(study) == 1


def test_resume_with_another_entry_point_is_refused(tmp_path):
    out = tmp_path / "out"
    base = ["search", "-w", str(EXAMPLE), "-m", "llama-3-8b", "--gpus", "A40", "--engines",
            "vllm", "--max-gpus", "1", "--n-trials", "5", "--out", str(out)]
    assert runner.invoke(app, base).exit_code == 0
    r = runner.invoke(app, [*base, "--resume", "--entry-point", "serve"])
    _refused(r, "another --entry-point (llm vs now serve)")
    r = runner.invoke(app, [*base, "--resume", "--entry-point", "llm"])
    assert r.exit_code == 0, r.output


# ---- the answer says where its GPU's figures are estimated ----------------------------------------
def test_winners_on_an_unmeasured_gpu_are_labelled_estimated():
    from tuner.reports.outputs import estimate_verdicts
    from tuner.search.records import TrialRecord

    def rec(n, gpu, kind, s, usd):
        return TrialRecord.from_dict({"number": n, "config": ServingConfig(gpu=gpu).to_dict(),
                                      "feasible": True, "reason": "",
                                      "metrics": {"makespan_s": s, "cost_usd": usd},
                                      "provenance": f"{kind} detail", "provenance_kind": kind})

    lines = estimate_verdicts([rec(0, "MI300X", "roofline", 10.0, 5.0),
                               rec(1, "A100-80G", "tables", 20.0, 1.0)])
    assert lines == [lines[0]] and lines[0].startswith("Fastest plan on MI300X: estimated")
    assert "spec sheet (roofline)" in lines[0]
    assert estimate_verdicts([rec(1, "A100-80G", "tables", 20.0, 1.0)]) == []


# ---- exports a real engine runs: chat requests, run-batch's endpoints ----------------------------
def test_chat_requests_on_a_base_checkpoint_serve_its_chat_model(a40_vllm_study, tmp_path):
    from tuner.core.catalog import chat_checkpoint

    assert chat_checkpoint(LLAMA) == "meta-llama/Meta-Llama-3-8B-Instruct"
    assert chat_checkpoint(get_model("meta-llama/Meta-Llama-3-8B-Instruct")) is None
    assert chat_checkpoint(get_model("qwen3-8b")) is None  # no other form in the catalog
    text = (a40_vllm_study / "cheapest.vllm.yaml").read_text()
    assert yaml.safe_load(text)["model"] == "meta-llama/Meta-Llama-3-8B-Instruct"
    assert "is a base checkpoint without a chat template" in text
    # token-count requests are not chat: the base checkpoint stays
    toks = tmp_path / "t.jsonl"
    toks.write_text("".join(json.dumps({"prompt_tokens": 200, "output_tokens": 20}) + "\n"
                            for _ in range(8)))
    r = runner.invoke(app, ["search", "-w", str(toks), "-m", "llama-3-8b", "--gpus", "A40",
                            "--engines", "vllm", "--max-gpus", "1", "--n-trials", "4",
                            "--out", str(tmp_path / "o2")])
    assert r.exit_code == 0, r.output
    assert yaml.safe_load((tmp_path / "o2" / "cheapest.vllm.yaml").read_text())["model"] \
        == "meta-llama/Meta-Llama-3-8B"


def test_vllm_run_batch_export_names_the_endpoints_it_does_not_serve(tmp_path):
    from tuner.reports.extras import run_batch_refused_urls

    path = tmp_path / "b.jsonl"
    path.write_text("".join(json.dumps({"custom_id": f"r{i}", "method": "POST", "url": url,
                                        "body": {"prompt": "hi", "max_tokens": 4}}) + "\n"
                            for i, url in enumerate(["/v1/completions", "/v1/chat/completions",
                                                     "/v1/embeddings", "/v2/rerank"])))
    assert run_batch_refused_urls(path) == ["/v1/completions"]
    assert run_batch_refused_urls(EXAMPLE) == []


# ---- the search covers every GPU type it can, and says which it cannot ----------------------------
def test_a_gpu_type_the_trials_missed_gets_its_smallest_tp_that_runs(tmp_path):
    from tuner.search import load_study
    from tuner.search.records import trial_records

    out = tmp_path / "out"
    # 10 trials over 2 GPU types and 4 TPs: Llama-3-70B needs TP 8 on the A10
    r = runner.invoke(app, ["search", "-w", str(EXAMPLE), "-m", "llama-3-70b", "--gpus",
                            "A10,H100", "--engines", "vllm", "--n-trials", "10", "--seed", "3",
                            "--out", str(out)])
    assert r.exit_code == 0, r.output
    records = trial_records(load_study(None, None, out_dir=out))
    a10 = [x for x in records if x.gpu == "A10" and x.feasible]
    assert a10 and min(x.config.tp for x in a10) == 8
    r = runner.invoke(app, ["search", "-w", str(EXAMPLE), "-m", "llama-3.1-405b", "--gpus",
                            "A10,H200", "--engines", "vllm", "--n-trials", "10",
                            "--out", str(tmp_path / "o2")])
    assert r.exit_code == 0, r.output
    assert "A10: no feasible plan in the space" in " ".join(r.output.split())


def test_timeout_says_it_stopped_the_search(tmp_path, monkeypatch):
    import tuner.search.loop as loop

    real = loop._count_budget
    monkeypatch.setattr(loop, "_count_budget", lambda st: min(real(st), 3))
    r = runner.invoke(app, ["search", "-w", str(EXAMPLE), "-m", "llama-3-8b", "--gpus", "A40",
                            "--engines", "vllm", "--max-gpus", "1", "--n-trials", "6",
                            "--timeout", "600", "--out", str(tmp_path / "out")])
    assert r.exit_code == 0, r.output
    assert "--timeout 600 s stopped the search after 3 of 6 trials" in " ".join(r.output.split())


# ---- smaller things ------------------------------------------------------------------------------
def test_small_fixes(tmp_path):
    from tuner.core.pricing import place

    assert "(1 on the last)" in place("A100-80G", 8, tp=1, dp=9).describe()
    r = runner.invoke(app, ["fit", str(REPO / "benchmarks" / "data" / "h100-2026-11-26"
                                       / "llama-3-8b"), "--out", str(tmp_path / "fit"),
                            "--folds", "1"])
    _refused(r, "--folds must be >= 2")
    assert not (tmp_path / "fit").exists()
    path = tmp_path / "w.jsonl"
    path.write_text(json.dumps({"prompt_tokens": 300, "output_tokens": 20}) + "\n")
    r = runner.invoke(app, ["simulate", "-w", str(path), "-m", "llama-3-70b", "-g", "A10",
                            "--timeline", str(tmp_path / "tl" / "a" / "steps.csv")])
    assert r.exit_code != 0 and not (tmp_path / "tl").exists()


def test_transfer_to_the_same_device_is_not_recorded(tmp_path):
    import shutil

    src = tmp_path / "src"
    shutil.copytree(REPO / "benchmarks" / "data" / "h100-2026-11-26" / "llama-3-8b", src)
    before = (src / "fit.json").read_text() if (src / "fit.json").exists() else None
    r = runner.invoke(app, ["transfer", str(src), str(src), "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["recorded_in"] is None
    after = (src / "fit.json").read_text() if (src / "fit.json").exists() else None
    assert after == before


def test_only_a_mix_meeting_the_deadline_marks_the_single_type_files(tmp_path):
    out = tmp_path / "out"
    r = runner.invoke(app, ["search", "-w", str(EXAMPLE), "-m", "llama-3-8b", "--gpus",
                            "A10,L40S,A100-40G", "--max-gpus", "A10=2,L40S=2,A100-40G=1",
                            "--deadline", "110s", "--out", str(out)])
    assert r.exit_code == 0, r.output
    said = " ".join(r.output.split())
    assert "Plan: only a mix of GPU types finishes within" in said
    assert "tuner export --fleet" in said
    files = [p for p in out.iterdir() if p.name.startswith(("fastest.", "cheapest."))
             and p.suffix in (".sh", ".yaml", ".py")]
    assert files and all("only a mix of GPU types meets it" in p.read_text() for p in files)


def test_json_export_of_an_sglang_plan_over_machines_gives_each_servers_dp():
    from tuner.exports.formats import render_export

    cfg = ServingConfig(gpu="A40", engine="sglang", tp=4, dp=8)
    doc = json.loads(render_export("json", cfg, LLAMA, GPUS["A40"], max_model_len=4096))
    assert doc["sglang"]["server_args"]["dp-size"] == 8
    assert doc["sglang"]["per_machine_dp_size"] == [2, 2, 2, 2]


def test_v0_long_context_model_runs_single_step_when_steps_are_not_given(tmp_path):
    path = tmp_path / "w.jsonl"
    path.write_text(json.dumps({"prompt_tokens": 300, "output_tokens": 20}) + "\n")
    base = ["simulate", "-w", str(path), "-m", "llama-3.1-8b", "-g", "A100-80G",
            "--engine-version", "0.6.0"]
    r = runner.invoke(app, base)  # a 128K context: vLLM 0.6.0 turns chunked prefill on
    assert r.exit_code == 0, r.output
    assert "single-step, as vLLM 0.6.0 runs chunked prefill" in " ".join(r.output.split())
    # asked for multi-step with it: refused, as vLLM 0.6.0 refuses it
    r = runner.invoke(app, [*base, "--num-scheduler-steps", "10"])
    assert r.exit_code != 0


# ---- SGLang's DP attention as SGLang runs it -------------------------------------------------------
def test_dp_attention_exports_the_whole_servers_budget():
    from tuner.exports.formats import render_export
    from tuner.exports.sglang import from_sglang_command, to_sglang_command

    cfg = ServingConfig(gpu="H100", engine="sglang", tp=2, dp=8, chunk_size=8192,
                        max_running=256)
    opts = dict(sglang_server_args(cfg, MOE, GPUS["H100"], max_model_len=4096)[0])
    # ServerArgs divides the chunk by dp and scales conservativeness by 0.3; each worker runs
    # max_running_requests // dp: the export gives what makes each rank the plan's
    assert (opts["tp-size"], opts["chunked-prefill-size"], opts["max-running-requests"]) \
        == (16, 65536, 2048)
    assert opts["schedule-conservativeness"] * 0.3 == pytest.approx(1.0, abs=1e-4)
    assert from_sglang_command(to_sglang_command(cfg, MOE, GPUS["H100"],
                                                 max_model_len=4096)) == cfg
    # over two machines the offline job is one engine: NODE_RANK / DIST_INIT_ADDR on each
    script = render_export("sglang-offline", cfg, MOE, GPUS["H100"], max_model_len=4096)
    assert "ENGINE_NODES = 2" in script and "NODE_RANK=K DIST_INIT_ADDR=HEAD_IP:5000" in script
    one = render_export("sglang-offline", ServingConfig(gpu="H100", engine="sglang", dp=4), MOE,
                        GPUS["H100"], max_model_len=4096)
    assert "ENGINE_NODES = 1" in one


def test_sglang_moe_at_dp_needs_a_family_with_dp_attention():
    from tests.sim import simulate_default
    from tuner.sim.simulator import InfeasibleConfig

    w = Workload(np.full(16, 500), np.full(16, 50))
    mixtral = get_model("mixtral-8x7b")
    with pytest.raises(InfeasibleConfig, match="only as independent servers"):
        simulate_default(w, mixtral, GPUS["H100"],
                         ServingConfig(gpu="H100", engine="sglang", tp=2, dp=2))
    simulate_default(w, mixtral, GPUS["H100"], ServingConfig(gpu="H100", tp=2, dp=2))  # vLLM
    simulate_default(w, MOE, GPUS["H100"], ServingConfig(gpu="H100", engine="sglang", dp=2))


# ---- the separate-engine exports of a one-engine plan ------------------------------------------
def test_separate_engine_exports_give_no_one_engine_launch_lines(tmp_path):
    from tuner.exports.formats import render_export

    cfg = ServingConfig(gpu="H100", tp=2, dp=8)  # 16 GPUs: two machines
    text = render_export("run-batch", cfg, MOE, GPUS["H100"], max_model_len=4096,
                         input_path=str(tmp_path / "in.jsonl"),
                         output_path=str(tmp_path / "out.jsonl"))
    assert "--headless" not in text and "NOTE: dp=8 of a mixture-of-experts model" in text
    assert "--headless" in render_export("vllm", cfg, MOE, GPUS["H100"], max_model_len=4096)


# ---- a mixture-of-experts plan's sample is one replica of the whole plan ----------------------
def test_moe_sample_screening_simulates_a_replica_of_the_whole_plan():
    from tuner.search.evaluator import Evaluator
    from tuner.search.space import load_space

    rng = np.random.default_rng(0)
    w = Workload(rng.integers(50, 2000, 4000), rng.integers(10, 400, 4000))
    space = load_space(None)
    ev = Evaluator(w, MOE, {"H100": GPUS["H100"]}, space, sample_fraction=0.25)
    cfg = ServingConfig(gpu="H100", tp=1, dp=4)
    s, sample, scale = ev._one_replica(GPUS["H100"], cfg)
    full = ev._simulate(w, GPUS["H100"], cfg)
    # the one-replica estimate of the whole plan's schedule: within a few percent (a dp-1
    # replica would hold every expert and gather no other rank's tokens)
    assert s.schedule_s * scale == pytest.approx(full.schedule_s, rel=0.08)
    alone = ev._simulate(sample, GPUS["H100"], dataclasses.replace(cfg, dp=1))
    assert abs(alone.schedule_s * scale / full.schedule_s - 1) > \
        abs(s.schedule_s * scale / full.schedule_s - 1)


def test_small_fixes_2(tmp_path):
    from tuner.core.workload import apply_on_too_long

    w = Workload(np.array([8192, 8191, 8000, 9000, 100]), np.array([5, 5, 500, 5, 5]))
    with pytest.raises(TunerError, match=r"\(request 1: 8,192 tokens\)"):
        apply_on_too_long(w, 8192, "llama-3-8b", "cap")
