"""Leftovers of session 53: a V0 mixture-of-experts plan's dp replicas screened as the
independent replicas they are; the report's provenance rows describe each GPU's winners;
validate carries the worker's mismatched output lengths."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from tuner.core.catalog import get_model, load_gpus
from tuner.core.config import ServingConfig
from tuner.core.workload import Workload

MOE = get_model("qwen3-30b-a3b")
GPUS = load_gpus()


# ---- 1. a V0 MoE plan's dp > 1 is dp independent replicas: screened as a dense one's -------
def test_v0_moe_replicas_screened_as_independent_replicas():
    from tuner.search.evaluator import Evaluator
    from tuner.search.space import load_space

    rng = np.random.default_rng(0)
    w = Workload(rng.integers(50, 2000, 4000), rng.integers(10, 400, 4000))
    gpu = GPUS["H100"]
    ev = Evaluator(w, MOE, {"H100": gpu}, load_space(None), sample_fraction=0.25,
                   engine_version="0.6.0")
    cfg = ServingConfig(gpu="H100", tp=1, dp=4, scheduler="vllm-v0")
    s, sample, scale = ev._one_replica(gpu, cfg)
    # one replica alone on its share's sample (the dense path), not replica 0 of a
    # data-parallel engine on the whole job (which V0 does not have)
    alone = ev._simulate(sample, gpu, dataclasses.replace(cfg, dp=1))
    assert s.requests == len(sample) < len(w)
    assert s.schedule_s == pytest.approx(alone.schedule_s, rel=1e-12)
    full = ev._simulate(w, gpu, cfg)
    assert s.schedule_s * scale == pytest.approx(full.schedule_s, rel=0.02)

    # V1's data-parallel MoE engine keeps the whole-plan replica (a wider sample)
    ev1 = Evaluator(w, MOE, {"H100": gpu}, load_space(None), sample_fraction=0.25)
    cfg1 = dataclasses.replace(cfg, scheduler="vllm")
    s1, sample1, _ = ev1._one_replica(gpu, cfg1)
    assert s1.requests > len(sample1)


# ---- 2. the report's provenance rows describe each GPU's winners, as the search's lines ------
def test_report_provenance_rows_describe_the_winners_as_the_search_lines():
    from tuner.cli.search import cost_model_lines
    from tuner.core.provenance import Provenance
    from tuner.reports.context import gpu_infos
    from tuner.reports.views import _gpu_view
    from tuner.search.records import TrialRecord, cost_models_by_engine

    def rec(n, engine, makespan_s, cost_usd, detail, kind="measured"):
        r = TrialRecord.from_dict({
            "number": n, "config": ServingConfig(gpu="H100", engine=engine).to_dict(),
            "feasible": True, "metrics": {"makespan_s": makespan_s, "cost_usd": cost_usd}})
        r.provenance = Provenance(kind, detail)
        return r

    # the first feasible trial of each engine is neither of its winners
    recs = [rec(0, "vllm", 90.0, 9.0, "vLLM moe_tp 16 over 2 machines", "roofline"),
            rec(1, "vllm", 10.0, 1.0, "vLLM moe_tp 8"),
            rec(2, "sglang", 80.0, 8.0, "SGLang moe_tp 16"),
            rec(3, "sglang", 5.0, 4.0, "SGLang moe_tp 8"),
            rec(4, "sglang", 20.0, 2.0, "SGLang moe_tp 2")]
    gpu = GPUS["H100"]
    info = gpu_infos(recs, {"H100": gpu, "A40": GPUS["A40"]})
    # the GPU's cost model (and kind) is its fastest plan's, trial 3, not trial 0's
    assert str(info["H100"].cost_model) == "SGLang moe_tp 8"
    assert info["A40"].cost_model.kind == "roofline"  # no feasible trial: the catalog's
    row = _gpu_view("H100", info["H100"], "#000", cost_models_by_engine(recs)["H100"])
    terminal = cost_model_lines(recs, info)
    assert terminal[:3] == ["H100 (vLLM), fastest and cheapest (trial #1): vLLM moe_tp 8",
                            "H100 (SGLang), fastest (trial #3): SGLang moe_tp 8",
                            "H100 (SGLang), cheapest (trial #4): SGLang moe_tp 2"]
    # the report's lines are the terminal's, less the GPU (the row's first column)
    assert row["cost_models"] == [t.removeprefix("H100 (").replace("), ", ", ", 1)
                                  for t in terminal[:3]]
    assert row["kind"].startswith("measured")
    # one engine on the GPU: no engine label, the trials still named
    one = _gpu_view("H100", gpu_infos(recs[:2], {"H100": gpu})["H100"], "#000",
                    cost_models_by_engine(recs[:2])["H100"])
    assert one["cost_models"] == ["fastest and cheapest (trial #1): vLLM moe_tp 8"]
    assert one["cost_model"] == "vLLM moe_tp 8"


# ---- 3. validate carries the worker's mismatched output lengths, and warns -----------------
def test_validate_carries_mismatched_lengths_and_warns(tmp_path, monkeypatch, capsys):
    import json

    import tuner.cli.validation as val
    from tuner.predictors.sources import cost_model_for
    from tuner.runners.base import result_from_worker

    worker = {"makespan_s": 2.0, "requests": 8, "prompt_tokens": 800, "output_tokens": 70,
              "throughput_tok_s": 35.0, "mismatched_lengths": 3}
    assert result_from_worker("vllm", worker, []).mismatched_lengths == 3
    # a runner that does not count them: None, no warning
    assert result_from_worker("vllm", {k: v for k, v in worker.items()
                                       if k != "mismatched_lengths"}, []).mismatched_lengths is None

    spec, gpu = get_model("llama-3-8b"), GPUS["H100"]
    w = Workload(np.full(8, 100), np.full(8, 10))
    config = ServingConfig(gpu="H100")
    counts = iter([3, 0])
    monkeypatch.setattr(val, "_run", lambda *a, **k: result_from_worker(
        "vllm", {**worker, "mismatched_lengths": next(counts)}, []))
    recs = [val.validate_one(w, spec, gpu, config, runner="vllm", trial=t,
                             base_cost_model=cost_model_for(spec)(gpu, config))
            for t in (4, 5)]
    assert [r["mismatched_lengths"] for r in recs] == [3, 0]
    path = val.write_validation(tmp_path, recs)
    assert [r["mismatched_lengths"] for r in json.loads(path.read_text())["validation"]] == [3, 0]
    val._print_validation(recs, val.summarize(recs), path, runner="vllm", spec=spec,
                          n_requests=len(w), save_runs=False)
    out = " ".join(capsys.readouterr().out.split())
    assert ("warning: trial 4: 3 of 8 requests generated another output length than asked: the "
            "run did not do the job") in out
    assert "trial 5:" not in out
