"""A hybrid's SGLang plan runs at most its Mamba state pool's cap of requests
(tuner.core.sglang._hybrid_state_pool: max_running_by_slots): the search simulates and records
such a plan as it runs (tuner.search.evaluator.Evaluator.runs_as), so every R_max above the cap
is one plan, simulated once, shown at the cap with a note saying why."""
from __future__ import annotations

import numpy as np
import pytest

from tuner.core.catalog import load_gpus, load_models
from tuner.core.config import ServingConfig
from tuner.core.sglang import plan_memory_sglang
from tuner.core.workload import Workload
from tuner.reports.outputs import runs_as_verdicts
from tuner.search import SearchSettings, run_search
from tuner.search.evaluator import Evaluator
from tuner.search.records import TrialRecord, search_stats, trial_records
from tuner.search.space import SearchSpace

FIXED = {"engine": "sglang", "tp": 4, "dp": 1, "chunk_size": 2048, "ordering": "fcfs",
         "gpu_memory_utilization": 0.85, "weight_bits": 16, "kv_bits": 16}


def workload(n: int = 24) -> Workload:
    rng = np.random.default_rng(0)
    return Workload(prompt_tokens=rng.integers(200, 1500, n).astype(np.int64),
                    output_tokens=rng.integers(20, 200, n).astype(np.int64),
                    source="slotcap-test", tokenizer="given", output_source="given")


@pytest.fixture(scope="module")
def hybrid():
    return load_models()["qwen3-next-80b-a3b"]


@pytest.fixture(scope="module")
def h100():
    return {"H100": load_gpus()["H100"]}


def cap_of(model, gpu, **knobs) -> int:
    config = ServingConfig(**{**FIXED, "gpu": gpu.name, "max_running": 1, **knobs})
    return plan_memory_sglang(model, gpu, config).max_running_by_slots


def evaluator(model, gpus, knobs: dict, fixed: dict = FIXED) -> Evaluator:
    return Evaluator(workload(), model, gpus, SearchSpace(knobs=knobs, fixed=dict(fixed), source="test"),
                     sample_fraction=0)


def test_capped_r_runs_as_the_cap(hybrid, h100):
    cap = cap_of(hybrid, h100["H100"])
    assert 0 < cap < 512
    ev = evaluator(hybrid, h100, {"max_running": [512, 1024]})
    over, note = ev.runs_as({"gpu": "H100", "max_running": 1024})
    assert over == {"max_running": cap}
    assert note.startswith(f"R 1024 -> {cap}: SGLang's Mamba state pool")
    assert ev.runs_as({"gpu": "H100", "max_running": cap}) == ({}, "")
    # simulated as it runs, and the record shows the R that runs
    values, attrs = ev.evaluate({"gpu": "H100", "max_running": 1024}, 0)
    assert attrs["feasible"] and attrs["runs_as"] == {"max_running": cap}
    rec = TrialRecord.from_attrs(0, ev.config({"gpu": "H100", "max_running": 1024}), values,
                                 attrs)
    assert rec.config.max_running == cap and rec.sampled == {"max_running": 1024}
    d = rec.to_dict()
    assert d["config"]["max_running"] == cap
    assert d["runs_as"] == {"sampled": {"max_running": 1024}, "note": note}
    back = TrialRecord.from_dict(d)
    assert back.runs_as == {"max_running": cap} and back.runs_as_note == note
    # the same plan: no second simulation for another R above the cap, nor for the cap itself
    ev.known.add(0, {"gpu": "H100", "max_running": 1024}, rec)
    for r in (512, cap):
        p = {"gpu": "H100", "max_running": r}
        assert ev.known.simulated(p, ev.runs_as(p)[0]) is not None
    p = {"gpu": "H100", "max_running": cap - 1}
    assert ev.known.simulated(p, ev.runs_as(p)[0]) is None


def test_other_plans_untouched(hybrid, h100):
    """vLLM plans of the hybrid and SGLang plans of a non-hybrid run the R_max sampled."""
    ev = evaluator(hybrid, h100, {"max_running": [1024]}, {**FIXED, "engine": "vllm"})
    assert ev.runs_as({"gpu": "H100", "max_running": 1024}) == ({}, "")
    dense = load_models()["qwen3-8b"]
    ev = evaluator(dense, h100, {"max_running": [1024]})
    assert ev.runs_as({"gpu": "H100", "max_running": 1024}) == ({}, "")


def test_search_simulates_each_running_plan_once(hybrid, h100):
    """R_max 256, 512 and 1024 are all above the cap: one simulation, two duplicates, and the
    answer shows the cap with the note."""
    cap = cap_of(hybrid, h100["H100"])
    space = SearchSpace(knobs={"max_running": [256, 512, 1024]}, fixed=dict(FIXED), source="test")
    st = run_search(workload(), hybrid, h100, space,
                    SearchSettings(exhaustive=True, study_name="slotcap", sample_fraction=0))
    stats = search_stats(st)
    assert stats["configurations"] == 1 and stats["full_simulations"] == 1
    recs = [r for r in trial_records(st) if not r.engine_defaults]
    assert len(recs) == 1 and recs[0].config.max_running == cap
    lines = runs_as_verdicts(trial_records(st))
    assert lines and f"-> {cap}: SGLang's Mamba state pool" in lines[0]


def test_polish_skips_r_above_the_cap(hybrid, h100):
    """Around a plan that runs at the cap, the polish spends no trial on another R_max above
    it (the same plan): the next neighbour it proposes changes another knob."""
    from tuner.search.constraints import Constraints
    from tuner.search.loop import next_polish

    fixed = {k: v for k, v in FIXED.items() if k != "ordering"}
    ev = evaluator(hybrid, h100, {"max_running": [256, 512, 1024],
                                  "ordering": ["fcfs", "shortest-prompt"]}, fixed)
    params = {"gpu": "H100", "max_running": 512, "ordering": "fcfs"}
    values, attrs = ev.evaluate(params, 0)
    ev.known.add(0, params, TrialRecord.from_attrs(0, ev.config(params), values, attrs))
    assert next_polish(ev, ["H100"], Constraints()) == {**params, "ordering": "shortest-prompt"}
