"""The study's metadata record (tuner.search.meta.StudyMeta) and the typed trial records: old
studies load, the stored and the JSON forms are what they always were."""

from __future__ import annotations

import json

import numpy as np
import optuna
import pytest

from tuner.core.catalog import get_model, load_gpus
from tuner.core.config import ServingConfig
from tuner.core.memory import MemoryPlan
from tuner.core.pricing import Rental, usd_per_million_tokens
from tuner.core.workload import Workload
from tuner.search import (
    STUDY_META_VERSION,
    Metrics,
    SearchSettings,
    StudyMeta,
    run_search,
    setup_from_study,
    study_meta,
    trial_records,
    workload_digest,
)
from tuner.search.constraints import Constraints
from tuner.search.records import TrialRecord, completed
from tuner.search.space import SearchSpace

#: what `tuner search` stored before the record had a version: no outputs_known, startup_s,
#: entry_point, on_too_long, too_long, provider, spot, engine_version, profile_mode, version
OLD_META = {
    "workload": "/data/arxiv.jsonl", "model": "llama-3-8b", "gpus": ["A10", "A40"],
    "space": "search_spaces/default.yaml",
    "knobs": {"chunk_size": [512, 2048], "max_running": [64, 256]},
    "fixed": {"tp": 1, "dp": 1}, "prices": {"A10": 1.0, "A40": 1.2},
    "workload_requests": 400, "workload_sha256": "ab" * 32,
    "tokenizer": "meta-llama/Meta-Llama-3-8B-Instruct", "output_source": "max_tokens",
    "search": {"sampler": "tpe", "seed": 3, "n_trials": 50, "timeout_s": None,
               "exhaustive": False, "sample_fraction": None},
    "constraints": {"deadline_s": 3600.0, "budget_usd": None, "max_gpus": 8,
                    "max_gpus_per_type": {}, "quantized_model": None},
    "gpu_file": None, "skip_invalid": True, "output_dist": None, "profile": None,
}


def test_an_old_studys_metadata_loads_with_the_defaults_its_readers_assumed():
    m = StudyMeta.from_dict(OLD_META)
    assert m.version == 1  # unversioned: written before the record
    assert (m.model, m.gpus, m.workload) == ("llama-3-8b", ["A10", "A40"], "/data/arxiv.jsonl")
    assert m.knobs == OLD_META["knobs"] and m.fixed == {"tp": 1, "dp": 1}
    assert m.search.n_trials == 50 and m.search.sampler == "tpe" and m.search.seed == 3
    assert m.constraints == Constraints(deadline_s=3600.0, max_gpus=8)
    assert m.skip_invalid is True
    # the newer keys: what the readers assumed for a study without them
    assert m.outputs_known is False and m.startup_s is None and m.engine_version is None
    assert m.entry_point is None and m.provider is None and m.spot is False
    assert m.on_too_long == "fail" and not m.skips_too_long and m.too_long is None
    assert m.profile_mode is None
    assert m.sim_options() == {"startup_s": None, "engine_version": None,
                               "num_scheduler_steps": None}
    assert m.has_search and not m.complete  # no model or GPU specs: rebuilt from the catalogs
    # max_tokens outputs are the input's own: orderings by them may be recommended
    assert m.outputs_recommendable
    # older still: no output_source at all keeps its orderings
    assert StudyMeta.from_dict({k: v for k, v in OLD_META.items()
                                if k != "output_source"}).outputs_recommendable


def test_metadata_round_trips_and_keeps_what_it_does_not_know():
    m = StudyMeta.from_dict({**OLD_META, "from_a_newer_tuner": {"x": 1}})
    d = m.to_dict()
    assert d["from_a_newer_tuner"] == {"x": 1}
    assert StudyMeta.from_dict(d) == m
    assert StudyMeta.from_dict(json.loads(json.dumps(d))) == m  # as a storage keeps it
    # every key the old study stored, with its value, and the newer ones beside them
    assert {k: d[k] for k in OLD_META} == OLD_META
    empty = StudyMeta.from_dict(None)
    assert not empty.has_search and empty == StudyMeta.from_dict({})


@pytest.fixture(scope="module")
def searched(tmp_path_factory):
    rng = np.random.default_rng(0)
    w = Workload(prompt_tokens=rng.integers(64, 1500, 30).astype(np.int64),
                 output_tokens=rng.integers(16, 300, 30).astype(np.int64),
                 source="tiny.jsonl", tokenizer="given", output_source="given")
    cat = load_gpus()
    gpus = {"A10": cat["A10"], "A40": cat["A40"]}
    space = SearchSpace(knobs={"chunk_size": [512, 2048], "max_running": [16, 64]},
                        fixed={"tp": 1, "dp": 1}, source="test")
    storage = f"sqlite:///{tmp_path_factory.mktemp('meta') / 's.db'}"
    st = run_search(w, get_model("llama-3-8b"), gpus, space,
                    SearchSettings(n_trials=8, seed=1, storage=storage, study_name="m"),
                    metadata={"outputs_known": True, "startup_s": 30.0})
    return st, w


def test_a_new_study_stores_every_key_with_its_version(searched):
    st, w = searched
    stored = st.user_attrs["metadata"]
    meta = study_meta(st)
    assert stored == meta.to_dict()  # one writer, one reader: the same dict
    assert stored["version"] == STUDY_META_VERSION
    assert stored["outputs_known"] is True and stored["startup_s"] == 30.0
    assert stored["workload_sha256"] == workload_digest(w)
    assert meta.complete and meta.sim_options() == {"startup_s": 30.0, "engine_version": None,
                                                    "num_scheduler_steps": None}


def test_a_study_with_old_metadata_is_rebuilt_and_read(searched, tmp_path):
    st, w = searched
    new = st.user_attrs["metadata"]
    old = {k: v for k, v in new.items()
           if k not in ("outputs_known", "startup_s", "version", "entry_point", "on_too_long",
                        "too_long", "provider", "spot", "engine_version", "profile_mode")}
    optuna.copy_study(from_study_name="m", from_storage=st._storage,
                             to_storage=f"sqlite:///{tmp_path / 'old.db'}", to_study_name="old")
    copy = optuna.load_study(study_name="old", storage=f"sqlite:///{tmp_path / 'old.db'}")
    copy.set_user_attr("metadata", old)
    meta = study_meta(copy)
    assert meta.version == 1 and meta.startup_s is None and not meta.outputs_known
    setup = setup_from_study(copy)
    assert workload_digest(setup.workload) == workload_digest(w)
    assert setup.space.knobs == new["knobs"] and setup.settings.n_trials == 8
    assert [r.number for r in trial_records(copy)] == [r.number for r in trial_records(st)]


def test_trial_records_are_typed_and_write_the_json_they_always_wrote(searched):
    st, _ = searched
    meta = study_meta(st)
    for t in completed(st):
        r = TrialRecord.from_trial(t, meta.fixed)
        assert isinstance(r.config, ServingConfig)
        assert r.config == ServingConfig(**meta.fixed, **t.params)
        d = r.to_dict()
        assert d["config"] == ServingConfig(**meta.fixed, **t.params).to_dict()
        if not r.feasible or r.duplicate:  # a duplicate stores no figures of its own
            assert r.metrics is None and d["metrics"] is None
            continue
        assert isinstance(r.metrics, Metrics) and isinstance(r.memory, MemoryPlan)
        # exactly what the trial stored, key for key and in its order
        assert list(d["metrics"].items()) == list(t.user_attrs["metrics"].items())
        assert d["memory"] == t.user_attrs["memory"]
        assert r.makespan_s == t.user_attrs["metrics"]["makespan_s"] == t.values[0]
        assert TrialRecord.from_dict(json.loads(json.dumps(d))).to_dict() == d


def test_metrics_keep_the_keys_they_were_read_with():
    partial = {"makespan_s": 10.0, "cost_usd": 2.0, "prompt_tokens": 600_000,
               "output_tokens": 400_000, "from_a_newer_tuner": 1}
    m = Metrics.from_dict(partial)
    assert m.to_dict() == partial and list(m.to_dict()) == list(partial)
    assert m.rental is None and m.startup is None
    # one $ per million tokens: the stored figure, else the core formula on cost and tokens
    assert m.cost_per_million_tokens() == usd_per_million_tokens(2.0, 600_000, 400_000)
    assert Metrics(usd_per_million_tokens=1.5).cost_per_million_tokens() == 1.5
    assert Metrics(cost_usd=1.0).cost_per_million_tokens() is None


def test_sim_result_rental_is_a_rental_and_its_summary_the_dict():
    from tests.sim import simulate_default as simulate
    from tuner.core.pricing import apply_provider, get_provider, load_providers

    cat = apply_provider(load_gpus(), get_provider("aws", load_providers()))
    rng = np.random.default_rng(1)
    w = Workload(prompt_tokens=rng.integers(200, 800, 16).astype(np.int64),
                 output_tokens=rng.integers(20, 100, 16).astype(np.int64))
    res = simulate(w, get_model("llama-3-8b"), cat["A10"], ServingConfig(gpu="A10"))
    assert isinstance(res.rental, Rental)
    assert res.summary()["rental"] == res.rental.to_dict()
    assert MemoryPlan.from_dict(res.memory.to_dict()) == res.memory


def test_gpu_specs_stored_before_architectures_take_the_catalogs():
    """A study stored before GPUs stated their architecture is priced as it was: its A10 is
    still transferred from the A100's measured tables, not sent to the roofline."""
    from tuner.search.storage import _with_catalog_architecture

    old = {"name": "A10", "memory_gib": 24}
    assert _with_catalog_architecture("A10", old)["architecture"] == "ampere"
    assert "architecture" not in _with_catalog_architecture("MyGPU", {"name": "MyGPU"})
    stated = {"name": "A10", "architecture": None}  # stored by this version: kept as stored
    assert _with_catalog_architecture("A10", stated) == stated
