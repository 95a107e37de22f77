"""Integration QA, stop 51: bugs found running the CLI end to end, each pinned here."""

from __future__ import annotations

from tuner.core.config import ServingConfig
from tuner.search.records import study_only_reason

V0_SCHEDULERS = ("vllm-v0", "sarathi")  # what vLLM 0.6.0's flags select (tuner.core.engines)


def test_sglang_plan_is_no_simulator_study_under_a_v0_engine_version():
    """`tuner search --engine-version 0.6.0` (both engines): every SGLang plan holds the
    scheduler knob at 'vllm' (ENGINE_HELD), which vLLM 0.6.0 does not run; the plan runs
    SGLang's own scheduler, so it must stay a recommendation (it was dropped from the winners,
    the front and the per-engine line as a 'simulator study')."""
    sglang = ServingConfig(gpu="A100-80G", engine="sglang")
    assert sglang.scheduler == "vllm"
    assert study_only_reason(sglang, True, V0_SCHEDULERS) == ""


def test_vllm_plan_with_a_preset_its_release_lacks_stays_a_study():
    """The check itself still holds for vLLM plans."""
    vllm = ServingConfig(gpu="A100-80G", engine="vllm", scheduler="vllm")
    assert study_only_reason(vllm, True, V0_SCHEDULERS).startswith("simulator study")
    v0 = ServingConfig(gpu="A100-80G", engine="vllm", scheduler="vllm-v0")
    assert study_only_reason(v0, True, V0_SCHEDULERS) == ""


def test_sglang_defaults_load_an_fp8_checkpoint_at_its_own_precision():
    """`tuner simulate -m deepseek-v3 -g B200 --engine sglang --tp 8` (no --weight-bits):
    SGLang's defaults left the weights at ServingConfig's 16 bits, which the FP8 checkpoint
    refuses ('Use --weight-bits 8 (the default)'); vLLM's defaults take the checkpoint's 8."""
    from tuner.core.catalog import get_gpu, get_model, load_gpus
    from tuner.core.sglang import default_config

    model, gpu = get_model("deepseek-v3"), get_gpu("B200", load_gpus())
    config, _ = default_config(model, gpu, {"tp": 8})
    assert config.weight_bits == model.checkpoint_bits == 8
    # a precision given is kept
    assert default_config(model, gpu, {"tp": 8, "weight_bits": 4})[0].weight_bits == 4
    # a 16-bit checkpoint stays at 16
    assert default_config(get_model("llama-3-8b"), gpu, {})[0].weight_bits == 16


def test_mla_block_note_only_where_vllm_is_searched():
    """`tuner search -m deepseek-v3 --engines sglang`: the space's notes named vLLM's MLA
    64-token blocks though no vLLM plan is searched (SGLang picks its own page)."""
    from tuner.core.catalog import get_model, load_gpus
    from tuner.search.space import fit_space, load_space

    ds, gpus = get_model("deepseek-v3"), load_gpus()
    for engines, said in ((["sglang"], False), (["vllm", "sglang"], True), (["vllm"], True)):
        _, notes = fit_space(load_space("default"), model=ds, gpus={"H200": gpus["H200"]},
                             gpu_caps={}, defaults={}, outputs_from_input=True, engines=engines)
        assert any("MLA latent cache" in n for n in notes) is said, engines


def test_a_refused_precision_names_the_engine_asked():
    import pytest

    from tuner.core.catalog import get_model
    from tuner.core.config import check_model_config
    from tuner.core.errors import TunerError

    ds = get_model("deepseek-v3")
    with pytest.raises(TunerError, match="SGLang serves it at 8 bits"):
        check_model_config(ServingConfig(gpu="B200", engine="sglang", weight_bits=16), ds)
    with pytest.raises(TunerError, match="vLLM serves it at 8 bits"):
        check_model_config(ServingConfig(gpu="B200", weight_bits=16), ds)


def test_an_engines_own_default_is_not_called_a_bound_of_the_space_file():
    """`tuner search -m llama-3-70b --gpus B200 --engines sglang`: the winner, SGLang's own
    defaults (max running 4,096, mem fraction 0.849, which the search adds to the lists), was
    said to sit on 'the largest the space offers (default.yaml)', which offers at most 1,024."""
    from tuner.search.constraints import Constraints
    from tuner.search.records import TrialRecord, bounds_hit

    cfg = ServingConfig(gpu="B200", engine="sglang", max_running=4096,
                        gpu_memory_utilization=0.849).to_dict()
    knobs = {"max_running": [64, 256, 1024, 4096], "gpu_memory_utilization": [0.849, 0.9]}
    base = {"engine": "sglang", "config": cfg, "feasible": True}
    r = TrialRecord(number=3, config=cfg, feasible=True, baseline=base,
                    metrics={"makespan_s": 1.0, "cost_usd": 1.0})
    text = " | ".join(bounds_hit(r, knobs, Constraints(), 8, "default.yaml"))
    assert "the space offers" not in text
    assert "max_running 4096 (SGLang's own default here, which the search adds) is the " \
           "largest searched: a --space listing larger values widens it" in text
    # a vLLM plan at the end of the file's own list is still on the space's bound
    v = ServingConfig(gpu="B200", max_running=4096).to_dict()
    rv = TrialRecord(number=4, config=v, feasible=True, metrics={"makespan_s": 1.0,
                                                                  "cost_usd": 1.0})
    assert "max_running 4096 is the largest the space offers (default.yaml)" in " | ".join(
        bounds_hit(rv, knobs, Constraints(), 8, "default.yaml"))


def test_v0_defaults_at_one_step_are_not_the_ten_step_plan():
    """`--engine-version 0.6.0`: the winner had vLLM's default knobs but runs 10 scheduler
    steps; its defaults run 1. 'vLLM's defaults are already the best plan' contradicted the
    next line ('the plan is 1.26x faster')."""
    from reports.outputs import defaults_verdicts
    from tuner.search.records import TrialRecord

    cfg = ServingConfig(gpu="A100-80G", scheduler="vllm-v0").to_dict()

    def rec(steps):
        d = {"description": "x"} | ({"num_scheduler_steps": steps} if steps else {})
        return TrialRecord(number=0, config=cfg, feasible=True,
                           metrics={"makespan_s": 1.0, "cost_usd": 1.0},
                           baseline={"engine": "vllm", "config": cfg, "feasible": True,
                                     "defaults": d})
    assert defaults_verdicts([rec(None)])  # the same plan: said
    assert defaults_verdicts([rec(1)]) == []  # another step count: not the plan
