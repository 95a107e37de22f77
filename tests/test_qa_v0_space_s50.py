"""The search space under old (V0) vLLM releases offers only plans the engine searched runs:

1. without chunked prefill (V0's vllm-v0 scheduler) vLLM refuses a token budget below the
   longest request, so those chunk sizes are left out of vLLM's plans (SGLang's keep them);
2. a mixture-of-experts model's expert parallelism (V1's only) is left out of vLLM's plans
   under V0 and kept for SGLang; its dp > 1 V0 runs as independent replicas (each holding every
   expert), so vLLM's plans keep it and SGLang's leave it out where SGLang lacks DP attention;
3. a fleet's run-batch launchers pass --disable-log-requests where the single export does.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tuner.core.catalog import get_model, load_gpus
from tuner.core.config import ServingConfig
from tuner.core.workload import Workload
from tuner.search.loop import neighbours, run_search
from tuner.search.records import config_key, counts_toward_budget, trial_records
from tuner.search.settings import SearchSettings
from tuner.search.space import SearchSpace, fit_space, load_space

GPUS = load_gpus()
LLAMA = get_model("llama-3-8b")
MIXTRAL = get_model("mixtral-8x7b")
QWEN_MOE = get_model("qwen3-30b-a3b")  # SGLang runs its dp > 1 (DP attention)
H100 = {"H100": GPUS["H100"]}
CHUNKS = [256, 512, 1024, 2048, 4096, 8192, 16384]


def _workload(longest_prompt: int = 3000, n: int = 24) -> Workload:
    prompt = np.full(n, 200)
    prompt[0] = longest_prompt
    return Workload(prompt_tokens=prompt, output_tokens=np.full(n, 96))


def _fit(space: SearchSpace, model=LLAMA, *, engines=("vllm",), version="0.6.0",
         workload: Workload | None = None, steps: int | None = None):
    return fit_space(space, model=model, gpus=H100, gpu_caps={}, defaults={},
                     outputs_from_input=True, engine_schedulers=("vllm-v0", "sarathi"),
                     engines=list(engines), engine_version=version,
                     workload=workload if workload is not None else _workload(),
                     num_scheduler_steps=steps)


def _space(**knobs) -> SearchSpace:
    return SearchSpace(knobs={"chunk_size": list(CHUNKS), **knobs},
                       fixed={"scheduler": "vllm-v0"}, source="t")


# ---- 1. chunk sizes without chunked prefill ---------------------------------------------------
def test_a_v0_vllm_space_offers_only_budgets_that_hold_the_longest_request():
    # longest request 3,000 + 96 tokens; V0 prices 10-step decode runs without
    # --num-scheduler-steps: 1 + ceil(95 / 10) * 10 = 101 output tokens, so 3,101 - 1 = 3,100
    space, notes = _fit(_space())
    assert space.knobs["chunk_size"] == [4096, 8192, 16384]
    note = next(n for n in notes if n.startswith("chunk_size"))
    assert "256, 512, 1024, 2048 left out" in note and "3,096 tokens" in note
    assert "3,101 to the end of" in note and "below 3,100" in note
    # single-step scheduling: the floor is the longest request itself, less its last token
    one, _ = _fit(_space(), steps=1, workload=_workload(longest_prompt=4001 - 96))
    assert one.knobs["chunk_size"] == [4096, 8192, 16384]
    # a budget equal to the floor is kept (the simulator runs it)
    exact, _ = _fit(SearchSpace(knobs={"chunk_size": [3099, 3100, 4096]},
                                fixed={"scheduler": "vllm-v0"}, source="t"))
    assert exact.knobs["chunk_size"] == [3100, 4096]


def test_the_left_out_budgets_are_exactly_those_the_simulator_refuses():
    from tuner.predictors.sources import cost_model_for
    from tuner.sim.simulator import InfeasibleConfig, simulate

    w = _workload(longest_prompt=3000, n=6)
    space, _ = _fit(SearchSpace(knobs={"chunk_size": [3098, 3099, 3100, 3101]},
                                fixed={"scheduler": "vllm-v0"}, source="t"), workload=w)
    cm = cost_model_for(LLAMA, engine_version="0.6.0")
    for chunk in (3098, 3099, 3100, 3101):
        cfg = ServingConfig(gpu="H100", chunk_size=chunk, max_running=16, scheduler="vllm-v0")
        try:
            simulate(w, LLAMA, GPUS["H100"], cfg, cm(GPUS["H100"], cfg), engine_version="0.6.0")
            runs = True
        except InfeasibleConfig:
            runs = False
        assert runs == (chunk in space.knobs["chunk_size"]), chunk


def test_a_space_with_chunked_prefill_or_without_a_workload_is_unchanged():
    newest, _ = fit_space(SearchSpace(knobs={"chunk_size": list(CHUNKS)},
                                      fixed={"scheduler": "vllm"}, source="t"),
                          model=LLAMA, gpus=H100, gpu_caps={}, defaults={},
                          outputs_from_input=True, engines=["vllm"], workload=_workload())
    assert newest.knobs["chunk_size"] == CHUNKS and newest.excluded == ()
    bare, _ = fit_space(_space(), model=LLAMA, gpus=H100, gpu_caps={}, defaults={},
                        outputs_from_input=True, engines=["vllm"], engine_version="0.6.0")
    assert bare.knobs["chunk_size"] == CHUNKS  # no workload: nothing known to leave out


def test_with_sglang_searched_the_small_budgets_are_left_out_of_vllms_plans_only():
    space, notes = _fit(_space(), engines=("vllm", "sglang"))
    assert space.knobs["chunk_size"] == CHUNKS  # SGLang's chunked prefill runs them
    assert "left out of vLLM's plans (SGLang's keep them)" in " ".join(notes)
    points = list(space.grid_params(["H100"]))
    assert len(points) == space.size(1)
    vllm = {p["chunk_size"] for p in points if p["engine"] == "vllm"}
    sglang = {p["chunk_size"] for p in points if p["engine"] == "sglang"}
    assert vllm == {4096, 8192, 16384} and sglang == set(CHUNKS)
    # a proposal is moved to the nearest budget its plan may take; SGLang's stays
    assert space.conform({"engine": "vllm", "chunk_size": 512})["chunk_size"] == 4096
    assert space.conform({"engine": "sglang", "chunk_size": 512})["chunk_size"] == 512


def test_a_searched_scheduler_keeps_small_budgets_for_the_chunking_one():
    space, _ = _fit(SearchSpace(knobs={"chunk_size": list(CHUNKS),
                                       "scheduler": ["vllm-v0", "sarathi"]},
                                fixed={}, source="t"))
    by = {(p["scheduler"], p["chunk_size"]) for p in space.grid_params(["H100"])}
    assert ("sarathi", 256) in by and ("vllm-v0", 256) not in by and ("vllm-v0", 4096) in by


# ---- 2. mixture-of-experts plans V0 does not run -----------------------------------------------
def test_v0_moe_dp_stays_for_vllms_independent_replicas_only():
    # Mixtral: vLLM V0 runs dp > 1 as independent replicas, SGLang has no DP attention for it
    space, notes = _fit(SearchSpace(knobs={"dp": [1, 2, 4], "expert_parallel": [False, True],
                                           "chunk_size": [8192]},
                                    fixed={"scheduler": "vllm-v0"}, source="t"),
                        MIXTRAL, engines=("vllm", "sglang"))
    assert space.knobs["dp"] == [1, 2, 4]
    assert any(n.startswith("dp 2, 4 left out of SGLang's plans (vLLM's keep them)")
               for n in notes)
    dp = {(p["engine"], p["dp"]) for p in space.grid_params(["H100"])}
    assert dp == {("vllm", 1), ("vllm", 2), ("vllm", 4), ("sglang", 1)}
    # expert parallelism: SGLang's plans keep it, vLLM's leave it out
    assert space.knobs["expert_parallel"] == [False, True]
    ep = {(p["engine"], p["expert_parallel"]) for p in space.grid_params(["H100"])}
    assert ep == {("vllm", False), ("sglang", False), ("sglang", True)}


def test_v0_moe_dp_stays_for_sglang_where_it_runs_it():
    space, notes = _fit(SearchSpace(knobs={"dp": [1, 2, 4], "chunk_size": [8192]},
                                    fixed={"scheduler": "vllm-v0"}, source="t"),
                        QWEN_MOE, engines=("vllm", "sglang"))
    assert space.knobs["dp"] == [1, 2, 4]
    dp = {(p["engine"], p["dp"]) for p in space.grid_params(["H100"])}
    assert dp == {(e, d) for e in ("vllm", "sglang") for d in (1, 2, 4)}  # V0: replicas
    assert any("independent replicas" in n for n in notes)
    # V1 runs them: nothing is left out
    v1, _ = _fit(SearchSpace(knobs={"dp": [1, 2, 4], "chunk_size": [8192]},
                             fixed={"scheduler": "vllm"}, source="t"),
                 QWEN_MOE, engines=("vllm", "sglang"), version=None)
    assert v1.excluded == () and v1.knobs["dp"] == [1, 2, 4]


def test_the_polish_and_presets_keep_to_the_exclusions():
    space, _ = _fit(SearchSpace(knobs={"dp": [1, 2, 4], "chunk_size": [512, 8192]},
                                fixed={"scheduler": "vllm-v0"}, source="t"),
                    QWEN_MOE, engines=("vllm", "sglang"))
    key = config_key({"gpu": "H100", "engine": "sglang", "dp": 2, "chunk_size": 512})
    near = neighbours(key, space, ["H100"])
    assert near and all(space.allows(p) for p in near)
    assert {"gpu": "H100", "engine": "vllm", "dp": 2, "chunk_size": 512} not in near


def _search_trials(model, workload, sampler: str, n: int = 26):
    space = load_space()  # the shipped default: vLLM's defaults offered, tp/dp auto
    study = run_search(workload, model, H100, space,
                       SearchSettings(n_trials=n, sampler=sampler, seed=3,
                                      sample_fraction=1.0),
                       metadata={"engine_version": "0.6.0", "engines": ["vllm", "sglang"]})
    # the trials --n-trials counts: the sampler's, the presets and the polish (vLLM's defaults
    # simulated beside the winners afterwards are vLLM's own settings, whatever they are)
    proposed = {t.number for t in study.trials if counts_toward_budget(t)}
    assert len(proposed) == n
    return [r for r in trial_records(study) if r.number in proposed]


@pytest.mark.parametrize("sampler", ["tpe", "nsga2"])
def test_a_v0_search_over_both_engines_spends_no_trial_on_what_vllm_refuses(sampler):
    w = _workload(longest_prompt=3000, n=16)
    records = _search_trials(QWEN_MOE, w, sampler)
    for r in records:
        if r.config.engine == "vllm":
            assert r.config.chunk_size >= 3100, r.config  # dp > 1: independent replicas
            assert "refuses" not in (r.reason or "") and "no chunked prefill" not in (r.reason
                                                                                     or "")
    sglang = [r.config for r in records if r.config.engine == "sglang"]
    assert sglang and any(c.dp > 1 or c.chunk_size < 3100 for c in sglang)


# ---- the exclusions' arithmetic, on random spaces ----------------------------------------------
@settings(derandomize=True, max_examples=80, deadline=None)
@given(chunks=st.lists(st.sampled_from(CHUNKS), min_size=1, max_size=5, unique=True),
       dps=st.lists(st.sampled_from([1, 2, 4, 8]), min_size=1, max_size=4, unique=True),
       cut=st.sampled_from(CHUNKS), wide=st.booleans(),
       pick=st.tuples(st.sampled_from(["vllm", "sglang"]), st.sampled_from(CHUNKS),
                      st.sampled_from([1, 2, 4, 8])))
def test_conform_allows_size_and_grid_agree(chunks, dps, cut, wide, pick):
    from tuner.search.space import Exclusion

    excluded = [Exclusion("chunk_size", tuple(c for c in chunks if c < cut),
                          (("engine", ("vllm",)),), "t")]
    if wide:
        excluded.append(Exclusion("dp", tuple(d for d in dps if d > 1),
                                  (("engine", ("vllm",)),), "t"))
    space = SearchSpace(knobs={"engine": ["vllm", "sglang"], "chunk_size": sorted(chunks),
                               "dp": sorted(dps)}, fixed={}, source="t",
                        excluded=tuple(excluded))
    grid = list(space.grid_params(["A", "B"]))
    assert len(grid) == space.size(2)
    assert all(space.allows(p) for p in grid)
    engine, chunk, dp = pick
    params = {"gpu": "A", "engine": engine,
              "chunk_size": chunk if chunk in chunks else chunks[0],
              "dp": dp if dp in dps else dps[0]}
    fixed = space.conform(params)
    assert all(fixed[k] in space.knobs[k] for k in space.knobs)
    if all(space.allowed(k, fixed) for k in ("chunk_size", "dp")):
        assert space.allows(fixed)
    if space.allows(params):
        assert fixed == params  # an allowed point is never moved


# ---- 3. a fleet's launchers and the request log ------------------------------------------------
@pytest.mark.parametrize("version,written", [("0.6.0", True), ("0.9.2", True),
                                             (None, False)])
def test_fleet_launchers_pass_disable_log_requests_as_the_single_export_does(version, written):
    from tuner.exports import render_export
    from tuner.exports.fleet import fleet_files

    w = Workload(prompt_tokens=np.full(6, 300), output_tokens=np.full(6, 50))
    lines = [json.dumps({"custom_id": f"r-{i}", "method": "POST",
                         "url": "/v1/chat/completions",
                         "body": {"model": "m", "messages": [{"role": "user",
                                                              "content": "x"}]}}) + "\n"
             for i in range(len(w))]
    configs = [ServingConfig(gpu="A10", chunk_size=8192, scheduler="vllm-v0"
                             if version == "0.6.0" else "vllm"),
               ServingConfig(gpu="L40S", chunk_size=8192, scheduler="vllm-v0"
                             if version == "0.6.0" else "vllm")]
    plan = {"parts": [{"config": c.to_dict(), "requests": 3, "machines": {}} for c in configs],
            "shares": [0.5, 0.5], "description": "A10 + L40S"}
    steps = 10 if version == "0.6.0" else None
    files = fleet_files(plan, lines, w, LLAMA, GPUS, max_model_len=4096,
                        num_scheduler_steps=steps, disable_log_requests=True,
                        engine_version=version)
    for i, c in enumerate(configs):
        single = render_export("run-batch", c, LLAMA, GPUS[c.gpu], max_model_len=4096,
                               num_scheduler_steps=steps, disable_log_requests=True,
                               engine_version=version)
        part = files[f"part-{i + 1}-{c.gpu}.run-batch.sh"]
        assert ("--disable-log-requests" in single) == written
        assert ("--disable-log-requests" in part) == written
