"""Registries (plain dicts: name -> factory), shipped search spaces and the one study loader."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import optuna
import pytest

from tuner.core.errors import TunerError


def test_output_dist_registry_is_the_validation(monkeypatch: pytest.MonkeyPatch) -> None:
    from tuner.core.workload import OUTPUT_DISTS, parse_output_dist

    assert set(OUTPUT_DISTS) == {"fixed", "uniform", "normal", "lognormal", "trace"}
    with pytest.raises(TunerError) as ei:
        parse_output_dist("gamma:2:3")
    for form in ("fixed:N", "uniform:LO:HI", "normal:MEAN:STD", "lognormal:MEDIAN:SIGMA",
                 "trace:FILE.csv"):
        assert form in str(ei.value)

    def gamma(rest: str):
        """gamma:SHAPE:SCALE"""
        shape, scale = (float(a) for a in rest.split(":"))
        return lambda n, rng: np.maximum(rng.gamma(shape, scale, n).round(), 1).astype(np.int64)

    # adding a distribution is one entry
    monkeypatch.setitem(OUTPUT_DISTS, "gamma", gamma)
    label, sampler = parse_output_dist("gamma:2:3")
    out = sampler(100, np.random.default_rng(0))
    assert label == "output_dist gamma:2:3" and out.dtype == np.int64 and out.min() >= 1


def test_runner_registry() -> None:
    from tuner.runners.base import Engine
    from tuner.runners.registry import RUNNERS, find_python, get_runner

    assert set(RUNNERS) == {"vllm", "transformers"}
    for name, r in RUNNERS.items():
        assert isinstance(r.engine, Engine) and r.engine.name == name and callable(r.run)
    assert RUNNERS["vllm"].options == {"warmup_passes"}
    with pytest.raises(TunerError, match="Unknown runner 'sglang'; choose one of vllm, "):
        get_runner("sglang")
    with pytest.raises(TunerError, match="Unknown runner"):
        find_python("sglang")


def test_profile_mode_registry(tmp_path: Path) -> None:
    from tuner.core.catalog import get_model, load_gpus
    from tuner.core.config import ServingConfig
    from tuner.predictors.loader import MODES, PROFILE_MODES
    from tuner.predictors.sources import load_cost_model

    assert MODES == tuple(PROFILE_MODES) == ("auto", "measured", "transfer", "roofline")
    spec, gpu = get_model("llama-3-8b"), load_gpus()["A10"]
    with pytest.raises(TunerError, match="choose one of auto, measured, transfer, roofline"):
        load_cost_model(tmp_path, spec, gpu, ServingConfig(gpu="A10"), mode="table")
    # roofline reads no profile: the folder need not exist
    cm = load_cost_model(tmp_path / "absent", spec, gpu, ServingConfig(gpu="A10"),
                         mode="roofline")
    assert cm.provenance.kind == "roofline"


def test_search_spaces_are_package_data() -> None:
    from tuner.search.space import default_space_path, load_space, shipped_space_names

    assert {"default.yaml", "offload.yaml", "quality.yaml"} <= set(shipped_space_names())
    assert default_space_path().is_file()
    assert load_space("offload").source.endswith("offload.yaml")  # by name
    with pytest.raises(TunerError, match="shipped spaces, by name: default, offload, quality"):
        load_space("nope")
    pyproject = (Path(__file__).resolve().parents[1] / "pyproject.toml").read_text()
    assert '"tuner.search_spaces" = ["*.yaml"]' in pyproject


def test_search_public_names() -> None:
    import tuner.search as s

    for name in s.__all__:
        assert hasattr(s, name), name


def test_one_study_loader(tmp_path: Path) -> None:
    from tuner.search import default_storage, load_study, make_storage

    out = tmp_path / "out"
    with pytest.raises(TunerError, match="No study database at"):
        load_study(None, out_dir=out)
    out.mkdir()
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    optuna.create_study(study_name="a", storage=make_storage(default_storage(out)))
    assert load_study(None, out_dir=out).study_name == "a"  # the only one
    assert load_study("a", default_storage(out)).study_name == "a"  # by URL
    with pytest.raises(TunerError, match="No study 'b'.*; it has a."):
        load_study("b", out_dir=out)
    optuna.create_study(study_name="b", storage=make_storage(default_storage(out)))
    with pytest.raises(TunerError, match="holds 2 studies .a, b.; pass --study NAME"):
        load_study(None, out_dir=out)


def test_vllms_defaults_have_one_owner() -> None:
    """ServingConfig's batch defaults and the search's presets come from
    tuner.core.engine_defaults (issue #25: knowledge with its owner)."""
    from tuner.core.config import ServingConfig
    from tuner.core.engine_defaults import SARATHI_PRESET, SEARCH_PRESETS, vllm_defaults
    from tuner.search.loop import PRESETS

    d = vllm_defaults("A10", 24.0)  # LLM class on a GPU under 70 GiB
    cfg = ServingConfig(gpu="A10")
    assert (cfg.chunk_size, cfg.max_running) == (d.max_num_batched_tokens, d.max_num_seqs)
    assert PRESETS is SEARCH_PRESETS
    assert PRESETS[0] == {"chunk_size": d.max_num_batched_tokens,
                          "max_running": d.max_num_seqs, "scheduler": "vllm"}
    assert PRESETS[1] is SARATHI_PRESET
    assert set(d.preset()) == set(d.knobs()) - {"kv_offload_layers",
                                                "weight_offload_fraction", "attention_on_cpu"}


def test_memory_direction_is_on_the_knob() -> None:
    """assert_some_gpu_fits reads each knob's memory-lenient end from its Knob."""
    from tuner.core.config import KNOBS, Knob

    ends = {name: k.lenient for name, k in KNOBS.items() if k.lenient}
    assert ends == {"tp": "max", "pp": "max", "chunk_size": "min", "max_running": "min",
                    "weight_bits": "min", "kv_bits": "min", "kv_offload_layers": "max",
                    "weight_offload_fraction": "max", "gpu_memory_utilization": "max"}
    assert KNOBS["kv_bits"].most_lenient([16, 8, 4]) == 4
    assert KNOBS["tp"].most_lenient([1, 2, 4]) == 4
    assert KNOBS["ordering"].most_lenient(["blend", "fcfs"]) == "blend"  # no direction: first
    with pytest.raises(ValueError, match="lenient"):
        Knob(help="x", lenient="low")


def test_export_formats_carry_their_report_text() -> None:
    """Title, how to run it and whether it runs the batch live on the format entry."""
    from tuner.exports import EXPORTERS

    assert EXPORTERS["vllm"].title == "vLLM config (YAML)"
    assert EXPORTERS["vllm-run-batch"].how.startswith("Run as is on the GPU machine")
    assert {n for n, f in EXPORTERS.items() if f.batch} == {"vllm-run-batch", "run-batch",
                                                           "ray-data", "sglang-offline"}
    assert {n for n, f in EXPORTERS.items() if f.batch_api_input} == {"vllm-run-batch",
                                                                     "run-batch"}
