"""Integration QA 2, stop 51: plans lost or mislabelled where features combine, found running
the CLI end to end, each pinned here."""

from __future__ import annotations

import numpy as np

from tuner.core.catalog import get_model, load_gpus
from tuner.core.config import ServingConfig
from tuner.core.workload import Workload
from tuner.search.records import TrialRecord


def _record(n: int, cfg: ServingConfig, makespan_s: float, cost_usd: float) -> TrialRecord:
    return TrialRecord(number=n, config=cfg.to_dict(), feasible=True,
                       metrics={"makespan_s": makespan_s, "cost_usd": cost_usd},
                       values=(makespan_s, cost_usd))


def test_an_engine_whose_one_plan_is_fastest_and_cheapest_is_named_both():
    """`tuner search -m mixtral-8x7b --gpus A100-80G,H100 --engines vllm,sglang
    --engine-version 0.8.5 --n-trials 30 --budget 50`: vLLM had one distinct feasible plan, and
    the per-engine line read 'vLLM: fastest 32 x H100 ...' with no cheapest (as if it were
    missing), where the answer's own line says 'fastest and cheapest'."""
    from tuner.reports.outputs import engine_verdicts

    recs = [_record(0, ServingConfig(gpu="H100", tp=4, dp=8), 113.0, 3.85),
            _record(1, ServingConfig(gpu="H100", engine="sglang", tp=8), 94.0, 0.80),
            _record(2, ServingConfig(gpu="A100-80G", engine="sglang", tp=8), 121.0, 0.20)]
    (line,) = engine_verdicts(recs)
    vllm = line.split("vLLM: ")[1]
    assert vllm.startswith("fastest and cheapest 32 x H100"), line
    sglang = line.split("SGLang: ")[1]
    assert sglang.startswith("fastest 8 x H100") and "cheapest 8 x A100-80G" in sglang, line


def test_an_engine_searched_with_no_feasible_trial_gets_its_defaults_simulated():
    """`tuner search -m deepseek-v3 --gpus H200,H100 --engines vllm,sglang --n-trials 20`: TPE
    tried vLLM only at TP 1 and over the GPU cap, SGLang found plans on H200, and the answer
    held no vLLM plan at all (no per-engine line) though vLLM at TP 8 on H200 runs the job
    (9.0 min, $2.95). Each engine searched without a feasible plan now gets its defaults on
    each GPU type, at the smallest TP that runs, as the GPU types without one did."""
    from tuner.search import SearchSettings, run_search
    from tuner.search.records import engine_winners, trial_records
    from tuner.search.space import SearchSpace

    rng = np.random.default_rng(0)
    w = Workload(prompt_tokens=rng.integers(64, 600, 24).astype(np.int64),
                 output_tokens=rng.integers(16, 120, 24).astype(np.int64),
                 source="synthetic", tokenizer="given", output_source="given")
    gpus = {"A100-80G": load_gpus()["A100-80G"]}
    # llama-3-70b (131 GiB) needs TP 2 on an 80 GB GPU: both engines' first presets (TP 1)
    # fail, the search stops there (2 trials), and only vLLM's defaults covered the GPU type
    space = SearchSpace(knobs={"engine": ["vllm", "sglang"], "tp": [1, 2],
                               "max_running": [64, 256]},
                        fixed={"block_size": 16, "ordering": "fcfs", "weight_bits": 16},
                        source="test")
    study = run_search(w, get_model("llama-3-70b"), gpus, space,
                       SearchSettings(n_trials=2, sampler="tpe", seed=0, sample_fraction=0))
    recs = trial_records(study)
    assert {r.config.engine for r in recs if r.feasible} == {"vllm", "sglang"}
    assert set(engine_winners(recs)) == {"vllm", "sglang"}


def test_spot_line_names_each_plans_rate_where_they_differ():
    """`tuner search -m qwen3-30b-a3b --gpus A100-80G,H100,L40S --provider aws --spot
    --engines vllm,sglang`: the line read 'On spot machines (at interruption rate 7.1e-05 per
    machine-hour (...'<5%'...); 0.00031 per machine-hour (...'15-20%'...)): the fastest plan
    (8 x H100) ...; the cheapest plan (8 x A100-80G) ...', naming no plan's rate."""
    from tuner.search.spot import verdicts

    f = _record(0, ServingConfig(gpu="H100", engine="sglang", tp=4, dp=2), 84.0, 0.70)
    c = _record(1, ServingConfig(gpu="A100-80G", engine="sglang", tp=4, dp=2), 96.0, 0.15)
    f.spot = {"interruption_rate": "7.1e-05 per machine-hour (H100's)",
              "expected_makespan_s": 84.0, "expected_cost_usd": 0.70}
    c.spot = {"interruption_rate": "0.00031 per machine-hour (A100-80G's)",
              "expected_makespan_s": 96.0, "expected_cost_usd": 0.15}
    (line,) = verdicts([f, c], {"fastest": 0, "cheapest": 1}, [])
    assert "the fastest plan (8 x H100, at 7.1e-05 per machine-hour (H100's))" in line, line
    assert "the cheapest plan (8 x A100-80G, at 0.00031 per machine-hour (A100-80G's))" in line
    assert line.startswith("On spot machines: ")
    # one rate for both: said once, ahead of the plans, as before
    c.spot = {**c.spot, "interruption_rate": f.spot["interruption_rate"]}
    (line,) = verdicts([f, c], {"fastest": 0, "cheapest": 1}, [])
    assert line.startswith("On spot machines (at interruption rate 7.1e-05 per machine-hour "
                           "(H100's)): the fastest plan (8 x H100) "), line


def test_an_engines_best_that_misses_the_budget_says_so():
    """`tuner search -m mixtral-8x7b --gpus A100-80G,H100 --provider lambda --engines
    vllm,sglang --budget 2`: the per-engine line gave vLLM's 'fastest and cheapest 32 x H100
    ... $4.26' beside the $2.00 budget without a word (no vLLM plan meets it; its best falls
    back to all its plans)."""
    from tuner.reports.outputs import engine_verdicts

    v = _record(0, ServingConfig(gpu="H100", tp=4, dp=8), 113.0, 4.26)
    v.within = False
    s = _record(1, ServingConfig(gpu="H100", engine="sglang", tp=8), 94.0, 1.06)
    (line,) = engine_verdicts([v, s])
    assert "$4.26 (trial #0) (no vLLM plan meets the --deadline / --budget)" in line, line
    assert "SGLang plan meets" not in line


def test_an_unseen_release_reads_as_a_sentence():
    """`tuner replay --engine-version 0.8.5` printed "(not seen by tuner: modelled as vLLM V1,
    synchronous scheduling is known to behave)"."""
    from tuner.core.engines import generation_of

    text = generation_of("0.8.5").describe()
    assert "is known to behave" not in text
    assert text.endswith("(not seen by tuner: modelled with its generation's known behaviour)")


def test_a_resume_with_other_engines_names_engine_first():
    """`--resume` with `--engines vllm,sglang` on a `--engines vllm` study: the refusal listed
    the knobs SGLang's defaults had moved and cut off before 'engine'."""
    from tuner.search.storage import _differs

    old = {"knobs": {"max_running": [16, 1024], "gpu_memory_utilization": [0.85, 0.9],
                     "chunk_size": [512, 8192], "engine": ["vllm"]}}
    new = {"knobs": {"max_running": [16, 1024, 4096],
                     "gpu_memory_utilization": [0.817, 0.828, 0.839, 0.85, 0.9],
                     "chunk_size": [512, 4096, 8192], "engine": ["vllm", "sglang"]}}
    said = _differs(old, new)
    assert said is not None and said.index("'engine'") < said.index("max_running")
