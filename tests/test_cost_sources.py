"""The cost-source registry (predictors.sources): its order, --profile-mode's restriction of it,
and a simulator that takes the chosen model without reading files or choosing one."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

import tuner.predictors.sources as sources
from tests.test_predictors import synth_profile
from tuner.core.catalog import get_model, load_gpus
from tuner.core.config import ServingConfig
from tuner.core.errors import TunerError
from tuner.core.provenance import PROVENANCE_KINDS
from tuner.predictors.loader import PROFILE_MODES
from tuner.predictors.sources import (
    COST_SOURCES,
    SOURCES_BY_MODE,
    Declined,
    cost_model_for,
    resolve,
    sources_for,
)

REPO = Path(__file__).resolve().parents[1]
SHIPPED = REPO / "predictors" / "data" / "tiny-llama-cpu"
GPUS = load_gpus()
LLAMA, TINY = get_model("llama-3-8b"), get_model("tiny-llama")


def names(srcs) -> tuple[str, ...]:
    return tuple(s.name for s in srcs)


def test_registry_order_is_profile_tables_transfer_roofline():
    assert names(COST_SOURCES) == ("profile", "tables", "transfer", "roofline")
    # the provenance kinds each source yields, in the order the provenance prefers them
    kinds = ("measured", "tables", "transferred", "roofline")
    assert [PROVENANCE_KINDS.index(k) for k in kinds] == sorted(
        PROVENANCE_KINDS.index(k) for k in kinds)


def test_every_profile_mode_restricts_the_registry_and_keeps_its_order():
    assert tuple(SOURCES_BY_MODE) == tuple(PROFILE_MODES)
    full = names(COST_SOURCES)
    for mode in PROFILE_MODES:
        for profile in (False, True):
            got = names(sources_for(mode, profile=profile))
            assert got and got == tuple(n for n in full if n in got)  # a subsequence
    assert names(sources_for("auto")) == full
    # then, where the folder does not apply, the whole registry without it (resolve)
    assert names(sources_for("auto", profile=True)) == ("profile", "transfer")
    assert names(sources_for("measured", profile=True)) == ("profile",)
    assert names(sources_for("transfer", profile=True)) == ("transfer",)
    for profile in (False, True):
        assert names(sources_for("roofline", profile=profile)) == ("roofline",)
    with pytest.raises(TunerError, match="Unknown profile mode"):
        sources_for("table")
    with pytest.raises(TunerError, match="Unknown profile mode"):
        cost_model_for(LLAMA, None, "bogus")  # fails when the command resolves, not later


def test_resolver_walks_the_sources_in_order_and_keeps_each_reason(monkeypatch):
    asked = []

    def spy(name, price=None):
        def fn(q, declined):
            asked.append((name, declined))
            return price if price is not None else Declined(f"{name} cannot")
        return sources.CostSource(name, name, fn)

    roof = sources.COST_SOURCES[-1]

    def roofline(q, declined):
        asked.append(("roofline", declined))
        return roof.price(q, declined)

    monkeypatch.setattr(sources, "COST_SOURCES", (
        spy("profile"), spy("tables"), spy("transfer"),
        sources.CostSource("roofline", "", roofline)))
    r = resolve(LLAMA, GPUS["A40"], ServingConfig(gpu="A40"), calibrated=False)
    assert [a[0] for a in asked] == ["profile", "tables", "transfer", "roofline"]
    # each source sees the reasons of those before it; the resolution keeps them all
    assert asked[-1][1] == r.declined == (("profile", "profile cannot"),
                                          ("tables", "tables cannot"),
                                          ("transfer", "transfer cannot"))
    assert r.source == "roofline" and r.cost_model.provenance.kind == "roofline"
    assert r.trail().endswith("priced by roofline")
    # the first source that prices is used: the later ones are not asked
    first = r.cost_model
    asked.clear()
    monkeypatch.setattr(sources, "COST_SOURCES", (spy("profile", first), spy("tables")))
    monkeypatch.setitem(sources.SOURCES_BY_MODE, "auto", (("profile",), ("profile", "tables")))
    assert resolve(LLAMA, GPUS["A40"], ServingConfig(gpu="A40")).source == "profile"
    assert [a[0] for a in asked] == ["profile"]
    # a restricted registry that cannot price it: one TunerError with every reason
    monkeypatch.setattr(sources, "COST_SOURCES", (spy("profile"), spy("tables")))
    with pytest.raises(TunerError, match="profile: profile cannot; tables: tables cannot"):
        resolve(LLAMA, GPUS["A40"], ServingConfig(gpu="A40"))


def test_default_registry_without_a_profile():
    """Measured tables on a measured GPU, transferred tables on another of its architecture,
    the roofline where no table applies (MLA on a GPU without AIConfigurator's MLA tables) or
    --profile-mode roofline asks for it."""
    h100 = resolve(LLAMA, GPUS["H100"], ServingConfig(gpu="H100"), calibrated=False)
    assert h100.source == "tables" and h100.cost_model.provenance.kind == "tables"
    assert [s for s, _ in h100.declined] == ["profile"]
    a40 = resolve(LLAMA, GPUS["A40"], ServingConfig(gpu="A40"), calibrated=False)
    assert a40.source == "transfer" and a40.cost_model.provenance.kind == "transferred"
    assert [s for s, _ in a40.declined] == ["profile", "tables"]
    assert "A40 has no measured kernel tables of its own" in a40.declined[1][1]
    mla = resolve(get_model("deepseek-v3"), GPUS["A100-80G"],
                  ServingConfig(gpu="A100-80G", tp=8, weight_bits=8), calibrated=False)
    assert mla.source == "roofline" and [s for s, _ in mla.declined] == [
        "profile", "tables", "transfer"]
    assert str(mla.cost_model.provenance) == "roofline from A100-80G spec sheet (not measured)"
    rf = resolve(LLAMA, GPUS["H100"], ServingConfig(gpu="H100"), mode="roofline",
                 calibrated=False)
    assert rf.source == "roofline" and rf.declined == ()  # nothing else consulted
    # without a folder, measured / transfer have nothing to restrict: the whole registry
    for mode in ("measured", "transfer"):
        r = resolve(LLAMA, GPUS["A40"], ServingConfig(gpu="A40"), mode=mode, calibrated=False)
        assert r.source == "transfer" and r.cost_model.provenance.kind == "transferred"


def test_a_profile_folder_stands_in_for_the_shipped_tables_only_where_it_applies():
    """With --profile, `auto` prices from the folder where it applies; a CPU profile applies to
    no GPU, so the folder is set aside (the provenance says why) and the model is priced as
    without it: the H100's measured kernel tables, not the roofline (QA h3 item 6)."""
    h100 = GPUS["H100"]
    cfg = ServingConfig(gpu="H100")
    auto = resolve(TINY, h100, cfg, profile=SHIPPED, calibrated=False)
    assert auto.source == "tables" and [s for s, _ in auto.declined] == [
        "profile", "transfer", "profile"]
    assert auto.cost_model.provenance.kind == "tables"
    text = str(auto.cost_model.provenance)
    assert f"--profile set aside (no GPU profile in {SHIPPED} applies to H100" in text
    measured = resolve(TINY, h100, cfg, profile=SHIPPED, mode="measured", calibrated=False)
    assert measured.source == "profile" and measured.declined == ()
    assert measured.cost_model.provenance.kind == "measured"
    transfer = resolve(TINY, h100, cfg, profile=SHIPPED, mode="transfer", calibrated=False)
    assert transfer.source == "transfer" and transfer.declined == ()
    assert transfer.cost_model.provenance.kind == "transferred"
    rf = resolve(TINY, h100, cfg, profile=SHIPPED, mode="roofline", calibrated=False)
    assert rf.source == "roofline" and "applies" not in str(rf.cost_model.provenance)
    with pytest.raises(TunerError, match="was taken at llama-3-8b's shapes"):
        resolve(LLAMA, h100, cfg, profile=SHIPPED, mode="measured")  # strict: no fallback
    with pytest.raises(TunerError, match="does not exist"):
        cost_model_for(TINY, SHIPPED / "absent", check_gpu=h100)  # fails before a search


def test_own_gpu_profile_comes_before_its_transfer(tmp_path):
    synth_profile(tmp_path / "a10", "A10", noise=0.02, seed=2)
    a10 = resolve(TINY, GPUS["A10"], ServingConfig(gpu="A10"), profile=tmp_path,
                  calibrated=False)
    assert a10.source == "profile" and a10.cost_model.provenance.kind == "measured"
    tp2 = resolve(TINY, GPUS["A10"], ServingConfig(gpu="A10", tp=2), profile=tmp_path,
                  calibrated=False)
    assert tp2.source == "transfer" and [s for s, _ in tp2.declined] == ["profile"]
    h100 = resolve(TINY, GPUS["H100"], ServingConfig(gpu="H100"), profile=tmp_path,
                   calibrated=False)  # H100 has measured kernel tables: the folder wins
    assert h100.source == "transfer" and "transferred to H100" in str(h100.cost_model.provenance)


# ---- the simulator reads no files and chooses no source ----------------------------------------
SIMULATOR = REPO / "tuner" / "sim" / "simulator.py"
FILE_MODULES = {"pathlib", "os", "io", "json", "yaml", "pickle", "shutil", "tempfile", "csv",
                "importlib", "importlib.resources", "importlib.util", "glob"}
FILE_CALLS = {"open", "read_text", "read_bytes", "write_text", "write_bytes", "load", "loadtxt",
              "fromfile", "genfromtxt", "read_csv", "safe_load", "files", "iterdir", "glob",
              "exists", "is_file", "is_dir", "stat"}
# tuner.predictors modules that read files (profiles, kernel tables, calibrations) or choose
# a cost source: the simulator imports none of them
CHOOSERS = {"loader", "aic", "aic_tables", "aic_transfer", "calibration", "sources", "fit",
            "fitted", "engine_overhead", "roofline", "transfer"}


def test_simulator_module_performs_no_file_io_and_chooses_no_cost_source():
    tree = ast.parse(SIMULATOR.read_text())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            imported.add(node.module or "")
            imported |= {f"{node.module}.{a.name}" for a in node.names}
        elif isinstance(node, ast.Call):
            f = node.func
            name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
            assert name not in FILE_CALLS, f"simulator.py calls {name}() (line {node.lineno})"
    assert not imported & FILE_MODULES, imported & FILE_MODULES
    predictors = {m.split(".")[2] for m in imported if m.startswith("tuner.predictors.")}
    assert not predictors & CHOOSERS, predictors & CHOOSERS


def test_simulate_requires_a_cost_model():
    from tuner.sim import simulator

    p = inspect.signature(simulator.simulate).parameters["cost_model"]
    assert p.default is inspect.Parameter.empty
    assert not hasattr(simulator, "default_cost_model")
    assert not hasattr(simulator, "profile_cost_model_for")
