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
        assert any("MLA backends page" in n for n in notes) is said, engines


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
