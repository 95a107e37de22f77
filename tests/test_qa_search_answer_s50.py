"""The search's answer against the engines' own defaults, and workers of a shared study:

1. SGLang's defaults on a winner's GPUs (its --max-running-requests follows the KV pool the
   plan's precision and TP x DP leave) are in the fitted space, so the search simulates them as
   a trial and no winner is beaten on both makespan and $ by SGLang untuned;
2. under vLLM 0.6.0 a model of more than 32K context runs its defaults with chunked prefill
   (sarathi, 512 tokens) at vLLM's own single scheduler step: the baseline is simulated so, and
   no "defaults" trial is spent on vllm-v0 with a 512-token budget it refuses;
3. a worker rebuilt from the study fits the space's exclusions as the search did.
"""

from __future__ import annotations

import numpy as np

from tuner.core.catalog import get_model, load_gpus
from tuner.core.sglang import default_config
from tuner.core.workload import Workload
from tuner.search.baseline import attach_baselines, simulate_baseline
from tuner.search.loop import run_search, search_space
from tuner.search.records import engine_winners, pareto, trial_records, winners
from tuner.search.settings import SearchSettings
from tuner.search.space import load_space
from tuner.search.storage import setup_from_study

GPUS = load_gpus()


def _workload(n: int = 24, longest_prompt: int = 3000, seed: int = 0) -> Workload:
    rng = np.random.default_rng(seed)
    prompt = rng.integers(200, 1500, n).astype(np.int64)
    prompt[0] = longest_prompt
    return Workload(prompt_tokens=prompt, output_tokens=rng.integers(32, 200, n).astype(np.int64),
                    source="synthetic", tokenizer="given", output_source="given")


# ---- 1. SGLang's defaults are plans of the space -----------------------------------------------
def test_sglang_defaults_at_the_plans_precision_and_dp_are_in_the_fitted_space():
    model = get_model("deepseek-v3")  # FP8 checkpoint: its plans run 8-bit weights
    gpus = {"H100": GPUS["H100"], "H200": GPUS["H200"]}  # an H200 machine holds it: pp 1
    space, _ = search_space(load_space(), _workload(), model, gpus,
                            SearchSettings(n_trials=1), {"engines": ["vllm", "sglang"]})
    assert space.fixed["weight_bits"] == 8 and "pp" not in space.knobs
    for tp, dp in ((8, 2), (8, 4), (2, 8)):
        want = default_config(model, gpus["H100"], {"tp": tp, "dp": dp, "pp": 1,
                                                     "weight_bits": 8, "kv_bits": 16})[0]
        for name in ("chunk_size", "max_running", "gpu_memory_utilization"):
            assert getattr(want, name) in space.knobs[name], (tp, dp, name)


def test_no_winner_is_beaten_by_its_engines_defaults():
    model = get_model("deepseek-v3")
    gpus = {"H100": GPUS["H100"], "H200": GPUS["H200"]}
    w = _workload(n=60)
    settings = SearchSettings(n_trials=20, seed=0)
    study = run_search(w, model, gpus, load_space(), settings,
                       metadata={"engines": ["vllm", "sglang"]})
    records = trial_records(study)
    best, per_gpu = winners(records)
    picks = [*best.values(), *(n for d in per_gpu.values() for n in d.values()),
             *(n for d in engine_winners(records).values() for n in d.values()),
             *pareto(records)]
    from tuner.search.storage import study_meta

    attach_baselines(records, picks, w, model, gpus, **study_meta(study).sim_options())
    by = {r.number: r for r in records}
    for n in dict.fromkeys(picks):
        g = (by[n].baseline or {}).get("gain")
        if g is None:
            continue
        m, c = g["makespan_ratio"], g["cost_ratio"]
        # dominated: no faster and no cheaper, worse in one (beyond float noise)
        assert not (m >= 1 and c >= 1 and max(m, c) > 1 + 1e-9), (n, by[n].config, g)


# ---- 2. V0 above 32K context: chunked prefill at one scheduler step ----------------------------
def test_v0_long_context_defaults_run_as_vllm_runs_them():
    model = get_model("llama-3.1-8b")  # 128K context: V0 turns chunked prefill on
    gpu = GPUS["A100-80G"]
    b = simulate_baseline(_workload(), model, gpu, engine_version="0.6.0")
    assert b["feasible"], b["reason"]
    assert b["config"]["scheduler"] == "sarathi" and b["config"]["chunk_size"] == 512
    assert b["defaults"]["num_scheduler_steps"] == 1
    assert "single-step" in b["defaults"]["description"]
    # the search's own pricing (10 steps) is kept where the user gave the count
    given = simulate_baseline(_workload(), model, gpu, engine_version="0.6.0",
                              num_scheduler_steps=1)
    assert given["feasible"] and "num_scheduler_steps" not in given["defaults"]
    assert given["metrics"]["makespan_s"] == b["metrics"]["makespan_s"]


def test_v0_long_context_search_spends_no_trial_on_refused_defaults():
    model = get_model("llama-3.1-8b")
    gpus = {"A100-80G": GPUS["A100-80G"]}
    study = run_search(_workload(), model, gpus, load_space(),
                       SearchSettings(n_trials=8, seed=0),
                       metadata={"engines": ["vllm", "sglang"], "engine_version": "0.6.0"})
    bad = [t.number for t in study.trials if t.user_attrs.get("vllm_defaults")
           and not t.user_attrs.get("feasible")]
    assert bad == []


# ---- 3. workers fit the space's exclusions ----------------------------------------------------
def test_a_study_rebuilt_for_workers_keeps_the_spaces_exclusions(tmp_path):
    from tuner.search.workers import connect_worker

    model = get_model("llama-3-8b")
    gpus = {"H100": GPUS["H100"]}
    w = _workload()
    meta = {"engines": ["vllm", "sglang"], "engine_version": "0.6.0"}
    fitted, _ = search_space(load_space(), w, model, gpus, SearchSettings(n_trials=1), meta)
    assert fitted.excluded  # vLLM V0's budgets below the longest request (SGLang keeps them)
    storage = f"sqlite:///{tmp_path / 's.db'}"
    settings = SearchSettings(n_trials=3, seed=0, storage=storage, study_name="s")
    run_search(w, model, gpus, load_space(), settings, metadata=meta)
    from tuner.search.storage import load_study

    study = load_study("s", storage)
    assert setup_from_study(study).space.excluded == fitted.excluded
    job = connect_worker("s", storage, n_trials=3)
    assert job.evaluator.space.excluded == fitted.excluded
