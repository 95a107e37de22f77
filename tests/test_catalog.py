"""GPU and model catalogs: the shipped YAML files, lookups, HF configs, user overrides."""

from __future__ import annotations

import dataclasses
import json

import pytest

from tuner.core.catalog import (
    ARCHITECTURES,
    GPU,
    ModelSpec,
    apply_prices,
    get_gpu,
    get_model,
    load_gpus,
    load_models,
    model_from_hf_config,
    parse_price_overrides,
)
from tuner.core.errors import TunerError

SHIPPED_GPUS = {"A10", "A40", "L4", "L40S", "A100-40G", "A100-80G", "A100-80G-PCIe", "H100",
                "H100-PCIe", "H100-NVL", "GH200-96G", "H200", "RTX4090", "RTX-PRO-6000", "B200",
                "B300", "GB200", "MI300X", "MI325X"}
SHIPPED_MODELS = {
    "llama-2-7b", "llama-2-13b", "llama-3-8b", "mistral-7b", "qwen2.5-7b", "llama-3-70b",
    "llama-2-70b", "tiny-llama",
    # current families (issue #16; published counts in tests/test_models_catalog.py)
    "llama-3.1-8b", "llama-3.1-70b", "llama-3.2-1b", "llama-3.2-3b", "llama-3.3-70b",
    "qwen2.5-14b", "qwen2.5-32b", "qwen2.5-72b", "qwen3-8b", "qwen3-14b", "qwen3-32b",
    "qwen3-30b-a3b", "qwen3-30b-a3b-instruct-2507", "qwen3-235b-a22b", "qwen3-next-80b-a3b",
    "granite-4.0-h-tiny", "nemotron-h-8b-base-8k", "mixtral-8x7b",
    "mistral-nemo-12b", "gemma-3-4b", "gemma-3-12b", "gemma-3-27b", "phi-4", "gpt-oss-20b",
    "gpt-oss-120b", "deepseek-v3",
    # the models of the public vLLM benchmark runs (issue #24; counts in test_models_catalog)
    "llama-3.1-405b", "mistral-large-2407", "mixtral-8x22b",
    # DeepSeek sparse attention (issue #24 item 3)
    "deepseek-v3.2",
}


@pytest.fixture(scope="module")
def gpus() -> dict[str, GPU]:
    return load_gpus()


@pytest.fixture(scope="module")
def models() -> dict[str, ModelSpec]:
    return load_models()


# --- shipped GPU catalog -----------------------------------------------------------------


def test_all_gpus_load(gpus):
    assert set(gpus) == SHIPPED_GPUS
    assert all(isinstance(g, GPU) and g.name == name for name, g in gpus.items())


@pytest.mark.parametrize("name", sorted(SHIPPED_GPUS))
def test_every_gpu_has_sourced_price_and_positive_figures(gpus, name):
    g = gpus[name]
    assert g.price_source.strip() and g.price_date.strip()
    assert g.price_usd_per_h > 0
    for value in (g.memory_gib, g.bf16_tflops, g.fp32_tflops, g.hbm_gbps, g.host_link_gbps,
                  g.host_ram_gib, g.cpu_cores, g.tdp_w):
        assert value > 0
    assert g.pcie_gen in (4, 5, 6)
    for optional in (g.fp8_tflops, g.int8_tops, g.nvlink_gbps):
        assert optional is None or optional > 0
    # Dense tensor BF16 beats plain FP32 everywhere; INT8 is dense too (2x BF16 or more),
    # except on Blackwell Ultra, which cut INT8 tensor throughput (B300: 153.5 TOPS dense)
    assert g.bf16_tflops > g.fp32_tflops
    assert g.int8_tops is not None
    assert g.int8_tops >= 1.99 * g.bf16_tflops or (name == "B300" and g.int8_tops < 200)
    # The host link is far slower than device memory, and NVLink faster than the host link.
    assert g.host_link_gbps < g.hbm_gbps
    assert g.nvlink_gbps is None or g.nvlink_gbps > g.host_link_gbps
    assert g.memory_bytes == int(g.memory_gib * 1024**3)
    assert g.peak_flops == pytest.approx(g.bf16_tflops * 1e12)


def test_gpu_generations_are_ordered(gpus):
    a10, a100, h100, h200 = gpus["A10"], gpus["A100-80G"], gpus["H100"], gpus["H200"]
    assert h100.bf16_tflops > a100.bf16_tflops > a10.bf16_tflops
    assert h200.hbm_gbps > h100.hbm_gbps > a100.hbm_gbps > gpus["A100-40G"].hbm_gbps > a10.hbm_gbps
    assert gpus["H200"].memory_gib > gpus["H100"].memory_gib
    # both 80 GB parts report ~79.2 GiB to CUDA
    assert abs(gpus["H100"].memory_gib - gpus["A100-80G"].memory_gib) < 0.5


def test_dense_not_sparsity_figures(gpus):
    # The datasheets' headline numbers include 2:4 sparsity; the catalog must hold dense ones.
    assert gpus["H100"].bf16_tflops == pytest.approx(989, rel=0.01)
    assert gpus["A100-80G"].bf16_tflops == pytest.approx(312)
    assert gpus["A10"].bf16_tflops == pytest.approx(125)
    assert gpus["L4"].bf16_tflops == pytest.approx(121, rel=0.01)
    assert gpus["L40S"].bf16_tflops == pytest.approx(362, rel=0.01)


def test_fp8_only_on_ada_and_hopper(gpus):
    for name in ("A10", "A40", "A100-40G", "A100-80G"):
        assert gpus[name].fp8_tflops is None
    for name in ("L4", "L40S", "H100", "H200", "RTX4090"):
        assert gpus[name].fp8_tflops is not None


def test_architectures(gpus):
    # the measured kernel tables of one GPU price the others of its architecture
    # (predictors.aic_transfer): the catalog states every shipped NVIDIA GPU's; the AMD ones
    # state none (no measured tables to transfer from: roofline)
    want = {"A10": "ampere", "A40": "ampere", "A100-40G": "ampere", "A100-80G": "ampere",
            "A100-80G-PCIe": "ampere", "L4": "ada", "L40S": "ada", "RTX4090": "ada",
            "H100": "hopper", "H100-PCIe": "hopper", "H100-NVL": "hopper", "GH200-96G": "hopper",
            "H200": "hopper",
            "RTX-PRO-6000": "blackwell", "B200": "blackwell", "B300": "blackwell",
            "GB200": "blackwell", "MI300X": None, "MI325X": None}
    assert {n: g.architecture for n, g in gpus.items()} == want
    assert set(want.values()) - {None} == set(ARCHITECTURES)
    # FP8 tensor cores arrived with Ada / Hopper
    assert all((g.fp8_tflops is None) == (g.architecture == "ampere") for g in gpus.values())


def test_architecture_is_validated_and_optional(gpus):
    base = dataclasses.asdict(gpus["A10"])
    assert GPU(**{**base, "architecture": " Hopper "}).architecture == "hopper"
    assert GPU(**{**base, "architecture": None}).architecture is None
    for bad in ("volta", "", 3, "ampere,ada"):
        with pytest.raises(TunerError, match="architecture must be one of ampere, ada, hopper"):
            GPU(**{**base, "architecture": bad})
    # a study's stored specs from before the field rebuild without it (not stated)
    del base["architecture"]
    assert GPU(**base).architecture is None


def test_links(gpus):
    assert gpus["H100"].pcie_gen == 5 and gpus["H100"].host_link_gbps > gpus["A100-80G"].host_link_gbps
    for name in ("A10", "L4", "L40S", "RTX4090"):
        assert gpus[name].nvlink_gbps is None
        assert gpus[name].interconnect_bytes_per_s == gpus[name].host_link_bytes_per_s
    assert gpus["H100"].interconnect_bytes_per_s == pytest.approx(450e9)


def test_vasuki_table1_figures(gpus):
    assert gpus["A10"].vasuki_usd_per_fp32_gflop_per_w == 12
    assert gpus["A40"].vasuki_usd_per_fp32_gflop_per_w == 52
    # Vasuki's 24 GB and 48 GB: the catalog holds what CUDA reports, 2-8 % below the marketed
    for name, marketed in (("A10", 24), ("A40", 48)):
        assert 0.90 * marketed < gpus[name].memory_gib < 0.98 * marketed


# --- shipped model catalog ---------------------------------------------------------------


def test_all_models_load(models):
    assert set(models) == SHIPPED_MODELS
    for name, m in models.items():
        assert m.name == name
        assert m.num_heads % m.num_kv_heads == 0


@pytest.mark.parametrize(
    "name, published",
    [
        ("llama-2-7b", 6.74e9),
        ("llama-3-8b", 8.03e9),
        ("llama-2-70b", 68.98e9),
        ("mistral-7b", 7.25e9),
        ("qwen2.5-7b", 7.62e9),
    ],
)
def test_param_counts_match_published_sizes(models, name, published):
    assert models[name].num_params == pytest.approx(published, rel=0.02)


def test_kv_bytes_per_token(models):
    assert models["llama-3-8b"].kv_bytes_per_token(16) == 131072
    assert models["llama-2-7b"].kv_bytes_per_token(16) == 524288
    assert models["llama-3-8b"].kv_bytes_per_token(8) == 65536
    assert models["llama-3-8b"].kv_bytes_per_token(16, layers=16) == 65536


def test_weight_bytes_shrink_with_bits(models):
    m = models["llama-3-8b"]
    assert m.weight_bytes(16) == pytest.approx(2 * m.num_params)
    assert m.weight_bytes(16) > m.weight_bytes(8) > m.weight_bytes(4)


def test_tiny_llama_is_tiny(models):
    assert models["tiny-llama"].weight_bytes(16) < 10e6


# --- lookups -----------------------------------------------------------------------------


def test_get_gpu_is_case_insensitive(gpus):
    assert get_gpu("a10", gpus).name == "A10"
    assert get_gpu(" h100 ", gpus).name == "H100"


@pytest.mark.parametrize(("spelling", "name"), [
    ("NVIDIA A100-SXM4-80GB", "A100-80G"),  # nvidia-smi / torch.cuda.get_device_name()
    ("NVIDIA H100 80GB HBM3", "H100"),
    ("8xH100-80GB-SXM", "H100"),  # LambdaLabs' results folders
    ("A100-40GB-SXM", "A100-40G"),
    ("h200_141gb", "H200"),
    ("NVIDIA GeForce RTX 4090", "RTX4090"),
    ("NVIDIA RTX PRO 6000 Blackwell Server Edition", "RTX-PRO-6000"),
    ("AMD Instinct MI300X", "MI300X"),
    ("rtx pro 6000", "RTX-PRO-6000"),
])
def test_gpu_aliases(gpus, spelling, name):
    assert get_gpu(spelling, gpus).name == name


@pytest.mark.parametrize("spelling", ["A10G", "A100", "GH200", "GH200 144G HBM3e", "H100 NVL 2x"])
def test_other_parts_are_not_aliases(gpus, spelling):
    """A cut-down part or an ambiguous name (GH200: the 96 GB HBM3 or the 144 GB HBM3e part) is
    refused, not read as the catalog GPU its name resembles (its clocks, power and bandwidth
    differ)."""
    with pytest.raises(TunerError, match="Unknown GPU"):
        get_gpu(spelling, gpus)


@pytest.mark.parametrize("spelling", ["A10G", "NVIDIA A10G", "8x a10g"])
def test_a_known_part_outside_the_catalog_says_why_and_what_to_use(gpus, spelling):
    """AWS's A10G is refused with the reason (no datasheet of its own) and the way to price it
    (--gpu A10, as the AWS provider table prices the g5 instances), not 'did you mean A100'."""
    with pytest.raises(TunerError) as err:
        get_gpu(spelling, gpus)
    msg = str(err.value)
    assert "g5" in msg and "--gpu A10" in msg and "Did you mean" not in msg


@pytest.mark.parametrize(("spelling", "name"), [
    ("NVIDIA H100 PCIe", "H100-PCIe"), ("H100-80GB-PCIe", "H100-PCIe"),
    ("NVIDIA H100 NVL", "H100-NVL"), ("NVIDIA GH200 480GB", "GH200-96G"),
    ("NVIDIA A100 80GB PCIe", "A100-80G-PCIe"), ("A100-80GB-PCIe", "A100-80G-PCIe"),
    ("NVIDIA H100 80GB HBM3", "H100"), ("NVIDIA A100-SXM4-80GB", "A100-80G"),
])
def test_other_form_factors_are_their_own_entries(gpus, spelling, name):
    """The PCIe / NVL / Grace Hopper parts of a chip are separate entries with their own spec
    sheets (the SXM part's name never resolves to them, nor theirs to it)."""
    g = get_gpu(spelling, gpus)
    assert g.name == name
    sxm = gpus["H100"] if g.architecture == "hopper" else gpus["A100-80G"]
    if g.name not in ("H100", "A100-80G"):
        assert g.hbm_gbps != sxm.hbm_gbps and g.nvlink_gbps is None


def test_gh200_is_one_gpu_a_machine_with_a_c2c_host_link(gpus):
    g = gpus["GH200-96G"]
    # NVLink-C2C 450 GB/s one way against the ~55 GB/s measured over an H100's PCIe 5 x16
    assert g.gpus_per_machine == 1 and g.host_link_gbps >= 8 * gpus["H100"].host_link_gbps
    assert g.bf16_tflops == gpus["H100"].bf16_tflops and g.hbm_gbps > gpus["H100"].hbm_gbps


def test_aliases_name_one_gpu_each(gpus):
    from tuner.core.catalog import gpu_key

    owner: dict[str, str] = {}
    for g in gpus.values():
        keys = [gpu_key(spelling) for spelling in (g.name, *g.aliases)]
        assert len(set(keys)) == len(keys), g.name  # no alias the name or another one gives
        for spelling, key in zip((g.name, *g.aliases), keys, strict=True):
            assert owner.setdefault(key, g.name) == g.name, spelling


def test_aliases_of_a_gpu_file_gpu(tmp_path):
    f = tmp_path / "g.yaml"
    f.write_text("gpus:\n  H800-PCIE:\n    aliases: [NVIDIA H800 PCIe]\n" + "".join(
        f"    {k}: {v}\n" for k, v in {
            "memory_gib": 79.2, "bf16_tflops": 756, "fp32_tflops": 51, "hbm_gbps": 2000,
            "pcie_gen": 5, "host_link_gbps": 50, "host_ram_gib": 200, "cpu_cores": 26,
            "tdp_w": 350, "price_usd_per_h": 2.0, "price_source": "mine",
            "price_date": "2026-11"}.items()))
    assert get_gpu("NVIDIA H800 PCIe", load_gpus(f)).name == "H800-PCIE"
    f.write_text("gpus:\n  H100:\n    aliases: NVIDIA H100\n")
    with pytest.raises(TunerError, match="aliases must be a list"):
        load_gpus(f)


def test_gpu_file_spelling_of_a_shipped_gpu_overrides_it(tmp_path):
    """A --gpu-file entry spelled like a shipped GPU (H100-PCIE for H100-PCIe) overrides it,
    not a second GPU the name would never reach."""
    f = tmp_path / "g.yaml"
    f.write_text("gpus:\n  H100-PCIE:\n    price_usd_per_h: 1.23\n    hbm_gbps: 2039\n")
    gpus = load_gpus(f)
    assert "H100-PCIE" not in gpus
    g = get_gpu("H100-PCIE", gpus)
    assert (g.name, g.price_usd_per_h, g.hbm_gbps) == ("H100-PCIe", 1.23, 2039)
    assert g.bf16_tflops == load_gpus()["H100-PCIe"].bf16_tflops  # the rest stays shipped


def test_unknown_gpu_suggests_close_match(gpus):
    with pytest.raises(TunerError, match="Did you mean") as err:
        get_gpu("A1OO", gpus)
    assert "A10" in str(err.value)
    # a name inside a catalog name comes first: the part itself before a merely similar one
    with pytest.raises(TunerError, match="Did you mean") as err:
        get_gpu("GH200", gpus)
    assert str(err.value).split("Did you mean: ")[1].startswith("GH200-96G")


def test_get_model_by_name(models):
    assert get_model("LLAMA-3-8B", models).name == "llama-3-8b"


def test_unknown_model_suggests_close_match(models, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no file named like the model
    with pytest.raises(TunerError, match="Did you mean") as err:
        get_model("llama3-8b", models)
    assert "llama-3-8b" in str(err.value)


# --- Hugging Face config.json ------------------------------------------------------------

LLAMA3_8B_CONFIG = {
    "_name_or_path": "meta-llama/Meta-Llama-3-8B",
    "architectures": ["LlamaForCausalLM"],
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "max_position_embeddings": 8192,
    "model_type": "llama",
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "tie_word_embeddings": False,
    "vocab_size": 128256,
}


def test_model_from_hf_config_matches_catalog(tmp_path, models):
    (tmp_path / "config.json").write_text(json.dumps(LLAMA3_8B_CONFIG))
    for where in (tmp_path / "config.json", tmp_path):  # file or directory
        spec = model_from_hf_config(where)
        ref = models["llama-3-8b"]
        assert spec.name == "meta-llama/Meta-Llama-3-8B"
        assert spec.head_dim == 128
        assert spec.source.endswith("config.json")
        assert spec.num_params == ref.num_params
        assert spec.kv_bytes_per_token(16) == ref.kv_bytes_per_token(16)
        assert spec.max_position == 8192 and not spec.tie_embeddings


def test_get_model_accepts_a_config_path(tmp_path, models):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(LLAMA3_8B_CONFIG))
    assert get_model(str(path), models).num_kv_heads == 8


def test_hf_config_defaults_and_errors(tmp_path):
    cfg = {k: v for k, v in LLAMA3_8B_CONFIG.items() if k != "num_key_value_heads"}
    cfg.update(head_dim=64, tie_word_embeddings=True)
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    spec = model_from_hf_config(tmp_path)
    assert spec.num_kv_heads == spec.num_heads == 32  # MHA when kv heads are absent
    assert spec.head_dim == 64 and spec.tie_embeddings

    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "config.json").write_text(json.dumps({"hidden_size": 8}))
    with pytest.raises(TunerError, match="missing"):
        model_from_hf_config(bad)
    with pytest.raises(TunerError, match="Cannot read"):
        model_from_hf_config(tmp_path / "nope.json")
    (bad / "config.json").write_text("{not json")
    with pytest.raises(TunerError, match="Cannot read"):
        model_from_hf_config(bad)


# --- user GPU files and price overrides --------------------------------------------------


def test_load_gpus_extra_yaml_adds_and_partially_overrides(tmp_path, gpus):
    extra = tmp_path / "my_gpus.yaml"
    extra.write_text(
        """
gpus:
  A10:
    price_usd_per_h: 0.75
    price_source: my contract
  MYGPU:
    memory_gib: 32
    bf16_tflops: 200
    fp32_tflops: 50
    hbm_gbps: 1500
    pcie_gen: 5
    host_link_gbps: 50
    host_ram_gib: 128
    cpu_cores: 16
    tdp_w: 400
    price_usd_per_h: 1.0
    price_source: test
    price_date: "2026-11"
"""
    )
    merged = load_gpus(extra)
    assert set(merged) == SHIPPED_GPUS | {"MYGPU"}
    a10 = merged["A10"]
    assert a10.price_usd_per_h == 0.75 and a10.price_source == "my contract"
    # Fields not named in the override keep their shipped values.
    assert a10.bf16_tflops == gpus["A10"].bf16_tflops and a10.price_date == gpus["A10"].price_date
    assert merged["MYGPU"].fp8_tflops is None and merged["MYGPU"].nvlink_gbps is None
    # a new GPU states no architecture unless its file does; an override keeps the shipped one
    assert merged["MYGPU"].architecture is None and a10.architecture == "ampere"
    # The shipped catalog itself is untouched.
    assert load_gpus()["A10"].price_usd_per_h == gpus["A10"].price_usd_per_h


def test_load_gpus_extra_yaml_without_top_level_key(tmp_path):
    extra = tmp_path / "g.yaml"
    extra.write_text("L4:\n  price_usd_per_h: 0.5\n")
    assert load_gpus(extra)["L4"].price_usd_per_h == 0.5


def test_load_gpus_extra_yaml_errors(tmp_path):
    with pytest.raises(TunerError, match="does not exist"):
        load_gpus(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("gpus: [unclosed\n")
    with pytest.raises(TunerError, match="not valid YAML"):
        load_gpus(bad)
    incomplete = tmp_path / "incomplete.yaml"
    incomplete.write_text("NEW:\n  memory_gib: 16\n")
    with pytest.raises(TunerError, match="missing fields"):
        load_gpus(incomplete)
    typo = tmp_path / "typo.yaml"
    typo.write_text("NEW:\n  memory_gb: 16\n")
    with pytest.raises(TunerError, match="unknown field"):
        load_gpus(typo)
    bad_arch = tmp_path / "bad_arch.yaml"
    bad_arch.write_text("A10:\n  architecture: turing\n")
    with pytest.raises(TunerError, match="architecture must be one of"):
        load_gpus(bad_arch)
    typo_override = tmp_path / "typo_override.yaml"
    typo_override.write_text("A10:\n  price_per_hour: 0.5\n")
    with pytest.raises(TunerError, match="unknown field"):
        load_gpus(typo_override)


def test_parse_price_overrides():
    assert parse_price_overrides(None) == {}
    assert parse_price_overrides(["A10=0.75", "A40=1.1,L4=0.5"]) == {
        "A10": 0.75, "A40": 1.1, "L4": 0.5,
    }
    assert parse_price_overrides([" H100 = 2.5 "]) == {"H100": 2.5}


@pytest.mark.parametrize("bad", ["A10", "A10=", "A10=cheap", "A10=-1", "=0.5x"])
def test_parse_price_overrides_rejects_bad_values(bad):
    with pytest.raises(TunerError, match="--price"):
        parse_price_overrides([bad])


def test_apply_prices(gpus):
    out = apply_prices(gpus, parse_price_overrides(["a10=0.75"]))
    assert out["A10"].price_usd_per_h == 0.75
    assert out["A10"].price_source == "user override (--price)"
    assert out["A40"] == gpus["A40"]
    assert gpus["A10"].price_usd_per_h != 0.75  # input dict not mutated
    with pytest.raises(TunerError, match="Unknown GPU"):
        apply_prices(gpus, {"A1OO": 1.0})


def test_nvlink_all_pairs_marks_bridged_pairs(gpus, tmp_path):
    """NVSwitch boards join every pair; the A40's bridges join pairs only (the engines' custom
    all-reduce then stops at 2 GPUs, predictors.aic.custom_allreduce_on)."""
    assert gpus["A40"].nvlink_all_pairs is False
    assert all(g.nvlink_all_pairs for n, g in gpus.items() if n != "A40")
    f = tmp_path / "g.yaml"
    f.write_text("gpus:\n  A40:\n    nvlink_all_pairs: maybe\n")
    with pytest.raises(TunerError, match="nvlink_all_pairs must be true or false"):
        load_gpus(f)
