"""Hardening of user inputs: GPU-file figures, price bounds, export --max-model-len and
--quantized-model paths.

Each bad row runs through the real entry point as in tests/test_bad_inputs.py and must exit 2
with one `error: ...` line naming the problem, no traceback, nothing on stdout and nothing left
behind (no study journal, no export). The good rows check that what stays allowed still runs.
"""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

import pytest

from tests.test_bad_inputs import (
    SEARCH,
    SIM,
    Ctx,
    Row,
    W,
    files,
    main_in_process,
    snapshot,
    with_study,
)

GPUS = "gpus.yaml"
SEARCH_A40 = SEARCH.replace("--gpus A10", "--gpus A40")
SEARCH_Q = SEARCH + " --allow-quantization"


def gpu_file(text: str):
    return files(gpus_DOT_yaml=text)


def provider_file(price: str):
    return gpu_file("providers:\n  mine:\n    billing: {granularity: second}\n    instances:\n"
                    "      one:\n        gpu: A10\n        gpus: 1\n"
                    f"        usd_per_h: {price}\n        source: me\n        date: today\n")


ROWS = [
    # --- 1. every numeric GPU figure: positive, finite, within a plausible range
    Row("nvlink-nan-simulate", f"{SIM.replace('A10', 'A40')} --tp 2 --gpu-file {GPUS}",
        gpu_file("A40:\n  nvlink_gbps: .nan\n"), ("gpus.yaml", "GPU A40", "nvlink_gbps", "nan")),
    Row("nvlink-negative-simulate", f"{SIM.replace('A10', 'A40')} --tp 2 --gpu-file {GPUS}",
        gpu_file("A40:\n  nvlink_gbps: -5\n"), ("GPU A40", "nvlink_gbps", "-5", "GB/s")),
    Row("nvlink-nan-search", f"{SEARCH_A40} --gpu-file {GPUS}",
        gpu_file("A40:\n  nvlink_gbps: .nan\n"), ("GPU A40", "nvlink_gbps", "nan")),
    Row("nvlink-negative-search", f"{SEARCH_A40} --gpu-file {GPUS}",
        gpu_file("A40:\n  nvlink_gbps: -5\n"), ("GPU A40", "nvlink_gbps", "-5")),
    Row("fp8-nan-weight-bits-8", f"{SIM} --weight-bits 8 --gpu-file {GPUS}",
        gpu_file("A10:\n  fp8_tflops: .nan\n"), ("GPU A10", "fp8_tflops", "nan")),
    Row("fp8-nan-allow-quantization", f"{SEARCH_Q} --gpu-file {GPUS}",
        gpu_file("A10:\n  fp8_tflops: .nan\n"), ("GPU A10", "fp8_tflops", "nan")),
    Row("fp8-negative", f"{SIM} --weight-bits 8 --gpu-file {GPUS}",
        gpu_file("A10:\n  fp8_tflops: -1\n"), ("GPU A10", "fp8_tflops", "-1", "TFLOP/s")),
    Row("int8-inf", f"{SIM} --gpu-file {GPUS}", gpu_file("A10:\n  int8_tops: .inf\n"),
        ("GPU A10", "int8_tops", "inf")),
    Row("memory-too-big", f"{SIM} --gpu-file {GPUS}", gpu_file("A10:\n  memory_gib: 5000\n"),
        ("GPU A10", "memory_gib", "5000", "GiB", "1024")),
    Row("bf16-absurd", f"{SEARCH} --gpu-file {GPUS}", gpu_file("A10:\n  bf16_tflops: 1e9\n"),
        ("GPU A10", "bf16_tflops", "TFLOP/s")),
    Row("hbm-below-one", f"{SIM} --gpu-file {GPUS}", gpu_file("A10:\n  hbm_gbps: 0.5\n"),
        ("GPU A10", "hbm_gbps", "0.5", "GB/s")),
    Row("host-link-too-fast", f"{SIM} --gpu-file {GPUS}",
        gpu_file("A10:\n  host_link_gbps: 20000\n"), ("GPU A10", "host_link_gbps", "20000")),
    Row("host-ram-zero", f"{SIM} --gpu-file {GPUS}", gpu_file("A10:\n  host_ram_gib: 0\n"),
        ("GPU A10", "host_ram_gib", "0")),
    Row("cpu-cores-bool", f"{SIM} --gpu-file {GPUS}", gpu_file("A10:\n  cpu_cores: true\n"),
        ("GPU A10", "cpu_cores", "True")),
    Row("cpu-cores-fraction", f"{SIM} --gpu-file {GPUS}", gpu_file("A10:\n  cpu_cores: 2.5\n"),
        ("GPU A10", "cpu_cores", "2.5")),
    Row("pcie-gen-nine", f"{SIM} --gpu-file {GPUS}", gpu_file("A10:\n  pcie_gen: 9\n"),
        ("GPU A10", "pcie_gen", "9")),
    Row("tdp-negative", "gpus --gpu-file gpus.yaml", gpu_file("A10:\n  tdp_w: -150\n"),
        ("GPU A10", "tdp_w", "-150", "W")),
    Row("memory-bool", f"{SIM} --gpu-file {GPUS}", gpu_file("A10:\n  memory_gib: true\n"),
        ("GPU A10", "memory_gib", "True")),
    Row("vasuki-nan", f"{SIM} --gpu-file {GPUS}",
        gpu_file("A10:\n  vasuki_usd_per_fp32_gflop_per_w: .nan\n"),
        ("GPU A10", "vasuki_usd_per_fp32_gflop_per_w", "nan")),
    Row("new-gpu-bad-figure", f"{SIM.replace('A10', 'X1')} --gpu-file {GPUS}",
        gpu_file("X1:\n  memory_gib: 24\n  bf16_tflops: 100\n  fp32_tflops: 30\n"
                 "  hbm_gbps: 600\n  pcie_gen: 4\n  host_link_gbps: 25\n  host_ram_gib: 64\n"
                 "  cpu_cores: 8\n  tdp_w: 150\n  price_usd_per_h: 1\n  price_source: me\n"
                 "  price_date: today\n  nvlink_gbps: .nan\n"), ("GPU X1", "nvlink_gbps", "nan")),
    # --- 2. prices: above 0 and up to 10,000 $/GPU-h
    Row("price-1e300-simulate", f"{SIM} --price A10=1e300", None, ("'A10=1e300'", "10,000")),
    Row("price-1e300-search", f"{SEARCH} --price A10=1e300", None, "'A10=1e300'"),
    Row("price-above-bound", "gpus --price A10=10001", None, "'A10=10001'"),
    Row("price-1e300-gpu-file", f"{SIM} --gpu-file {GPUS}",
        gpu_file("A10:\n  price_usd_per_h: 1.0e+300\n"), ("GPU A10", "price_usd_per_h", "1e+300")),
    Row("price-1e300-provider", f"{SIM} --gpu-file {GPUS} --provider mine",
        provider_file("1.0e+300"), ("gpus.yaml", "mine", "one", "1e+300")),
    Row("price-nan-provider", f"gpus --gpu-file {GPUS} --provider mine",
        provider_file(".nan"), ("gpus.yaml", "mine", "one", "nan")),
    # --- 3. export --max-model-len beyond the model's context
    Row("export-max-model-len-beyond-context", "export --out out --max-model-len 10000000",
        with_study, ("--max-model-len 10000000", "llama-3-8b", "8192")),
    # --- 4. --quantized-model: an HF id or a path that exists
    Row("search-quantized-model-missing-path", f"{SEARCH_Q} --quantized-model ./nope-awq",
        None, ("--quantized-model", "./nope-awq", "no such file")),
    Row("search-quantized-model-missing-abs", f"{SEARCH_Q} --quantized-model /nonexistent/awq",
        None, ("/nonexistent/awq", "no such file")),
    Row("search-quantized-model-missing-home", f"{SEARCH_Q} --quantized-model ~/no-such-awq-x",
        None, ("~/no-such-awq-x", "no such file")),
    Row("search-quantized-model-deep-path", f"{SEARCH_Q} --quantized-model a/b/awq",
        None, ("a/b/awq", "no such file")),
    Row("search-quantized-model-bare-word", f"{SEARCH_Q} --quantized-model nope",
        None, ("'nope'", "Hugging Face repo id")),
    Row("export-quantized-model-missing-path",
        "export --out out --quantized-model ../nope-awq -o plan.yaml", with_study,
        ("--quantized-model", "../nope-awq", "no such file")),
]


def run_row(argv: list[str], tmp_path: Path, capfd) -> subprocess.CompletedProcess:
    capfd.readouterr()  # the setup's output
    code = main_in_process(argv, tmp_path)
    out, err = capfd.readouterr()
    return subprocess.CompletedProcess(argv, code, out, err)


@pytest.mark.parametrize("row", [pytest.param(r, id=r.id) for r in ROWS])
def test_hardened_input(row: Row, tmp_path: Path, request, capfd) -> None:
    (tmp_path / "w.jsonl").write_text(W)
    if row.setup is not None:
        row.setup(Ctx(tmp_path, request))
    before = snapshot(tmp_path)
    r = run_row([a.replace("{tmp}", str(tmp_path)) for a in shlex.split(row.argv)], tmp_path,
                capfd)

    assert r.returncode == row.code, (r.returncode, r.stdout[-2000:], r.stderr[-3000:])
    assert "Traceback" not in r.stderr + r.stdout, r.stderr
    assert "Warning" not in r.stderr, r.stderr  # no numpy overflow warnings
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), r.stderr
    assert r.stdout == "", r.stdout
    for needle in (row.needle,) if isinstance(row.needle, str) else row.needle:
        assert needle in lines[0], (needle, lines[0])
    after = snapshot(tmp_path)
    assert after == before, {"new or changed": sorted(k for k in after if after[k] !=
                                                      before.get(k)),
                             "gone": sorted(set(before) - set(after))}


# ---- what stays allowed ------------------------------------------------------------------------
def test_gpu_file_nulls_and_plausible_figures_accepted(tmp_path: Path, capfd) -> None:
    """Optional figures may be null; a plausible override runs."""
    (tmp_path / "w.jsonl").write_text(W)
    (tmp_path / GPUS).write_text("A10:\n  fp8_tflops: null\n  nvlink_gbps: null\n"
                                 "  int8_tops: null\n  vasuki_usd_per_fp32_gflop_per_w: null\n"
                                 "  memory_gib: 1024\n  pcie_gen: 7\n  price_usd_per_h: 10000\n")
    r = run_row(shlex.split(f"{SIM} --gpu-file {GPUS} --json"), tmp_path, capfd)
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr


def test_shipped_catalog_is_within_the_ranges() -> None:
    from tuner.core.catalog import load_gpus
    from tuner.core.pricing import load_providers

    assert len(load_gpus()) >= 10
    assert load_providers()


def test_price_at_the_bound_accepted() -> None:
    from tuner.core.catalog import parse_price_overrides

    assert parse_price_overrides(["A10=10000,A40=0.01"]) == {"A10": 10000.0, "A40": 0.01}


@pytest.mark.parametrize("value", ["nosuchorg/nosuch-awq", "TheBloke/Llama-2-7B-AWQ"])
def test_quantized_model_hf_id_accepted(value: str) -> None:
    from tuner.core.catalog import check_checkpoint_ref

    check_checkpoint_ref(value)  # an HF id: not checked against the Hub


def test_quantized_model_existing_paths_accepted(tmp_path: Path, monkeypatch) -> None:
    from tuner.core.catalog import check_checkpoint_ref

    (tmp_path / "ckpt" / "awq").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    for value in (str(tmp_path / "ckpt"), "./ckpt", "ckpt", "ckpt/awq"):
        check_checkpoint_ref(value)


def test_export_quantized_model_existing_path_written(study_out: Path, tmp_path: Path,
                                                      capfd) -> None:
    """An existing checkpoint folder and an HF id both export; a max-model-len within the
    model's context exports."""
    import shutil

    shutil.copytree(study_out, tmp_path / "out")
    (tmp_path / "w.jsonl").write_text(W)
    (tmp_path / "awq").mkdir()
    for q in ("./awq", "someorg/llama-3-8b-awq"):
        r = run_row(shlex.split(f"export --out out --format json --quantized-model {q} "
                                "--max-model-len 8192"), tmp_path, capfd)
        assert r.returncode == 0, r.stderr
        assert '"max_model_len": 8192' in r.stdout or "8192" in r.stdout
