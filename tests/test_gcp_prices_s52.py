"""GCP's multi-GPU shapes in the shipped provider table (tuner/core/data/providers.yaml).

Every figure below is transcribed from github.com/skypilot-org/skypilot-catalog,
catalogs/v7/gcp/vms.csv at commit 6f65ab58724c0a5b17dbb81ee124e7d7dee0d4a5, the same file and
commit as the older GCP rows. GCP lists a VM row (InstanceType set) and a GPU row (empty
InstanceType, AcceleratorName and AcceleratorCount set) separately; a shape's price is their
sum. Columns copied: Price (on-demand) and SpotPrice, in the region named per shape (the same
for every zone of it there):

    g2-standard-24  us-central1  VM 0.88075 / 0.35242   L4 x2        1.12008 / 0.4462
    g2-standard-48  us-central1  VM 1.7615 / 0.70483    L4 x4        2.24016 / 0.8924
    g2-standard-96  us-central1  VM 3.52301 / 1.40966   L4 x8        4.48032 / 1.7848
    a2-ultragpu-1g  us-east5     VM 1.09962 / 0.25831   A100-80GB x1 4.4242 / 1.479
    a2-ultragpu-2g  us-east5     VM 2.19924 / 0.51662   A100-80GB x2 8.84839 / 2.958
    a2-ultragpu-4g  us-east5     VM 4.39849 / 1.03324   A100-80GB x4 17.69679 / 5.916
    a2-ultragpu-8g  us-east5     VM 8.79698 / 2.06648   A100-80GB x8 35.39358 / 11.832
    a3-highgpu-1g   us-east4     VM 1.18251 / 0.21294   H100 x1      9.79655 / 1.7632
    a3-highgpu-2g   us-east4     VM 2.36502 / 0.42588   H100 x2      19.5931 / 3.5264
    a3-highgpu-4g   us-east4     VM 4.73003 / 0.85176   H100 x4      39.1862 / 7.0528
    a3-highgpu-8g   us-east4     VM 9.46006 / 1.70352   H100 x8      78.37241 / 14.1056

Why us-east4 / us-east5 for the H100 and A100 80 GB (the header of providers.yaml says it in
full): the catalog's us-central1 GPU rows for them (H100 x1 4.57009, A100-80GB x1 1.8462) are
less than half the list price that two other transcriptions give for us-central1, while its
us-east4 H100 row plus the a3 VM row (1.18251, the same in us-central1) is that list price
(a3-highgpu-1g $10.9791/h in github.com/tgarg01/silybench-data derived/csv/gpu_prices.csv).
"""

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tuner.cli.app import load_gpu_catalog
from tuner.cli.main import app
from tuner.core.pricing import choose_instances, load_providers, require_offered

COMMIT = "6f65ab5"

# name: (catalog GPU, GPUs, vCPUs, RAM GiB, region, (VM, GPU) on-demand, (VM, GPU) spot)
TRANSCRIBED = {
    "g2-standard-24": ("L4", 2, 24, 96, "us-central1", (0.88075, 1.12008), (0.35242, 0.4462)),
    "g2-standard-48": ("L4", 4, 48, 192, "us-central1", (1.7615, 2.24016), (0.70483, 0.8924)),
    "g2-standard-96": ("L4", 8, 96, 384, "us-central1", (3.52301, 4.48032), (1.40966, 1.7848)),
    "a2-ultragpu-1g": ("A100-80G", 1, 12, 170, "us-east5", (1.09962, 4.4242), (0.25831, 1.479)),
    "a2-ultragpu-2g": ("A100-80G", 2, 24, 340, "us-east5", (2.19924, 8.84839), (0.51662, 2.958)),
    "a2-ultragpu-4g": ("A100-80G", 4, 48, 680, "us-east5", (4.39849, 17.69679),
                       (1.03324, 5.916)),
    "a2-ultragpu-8g": ("A100-80G", 8, 96, 1360, "us-east5", (8.79698, 35.39358),
                       (2.06648, 11.832)),
    "a3-highgpu-1g": ("H100", 1, 26, 234, "us-east4", (1.18251, 9.79655), (0.21294, 1.7632)),
    "a3-highgpu-2g": ("H100", 2, 52, 468, "us-east4", (2.36502, 19.5931), (0.42588, 3.5264)),
    "a3-highgpu-4g": ("H100", 4, 104, 936, "us-east4", (4.73003, 39.1862), (0.85176, 7.0528)),
    "a3-highgpu-8g": ("H100", 8, 208, 1872, "us-east4", (9.46006, 78.37241),
                      (1.70352, 14.1056)),
}


@pytest.fixture(scope="module")
def gcp():
    return load_providers()["gcp"]


def _rows(gcp):
    return {r.name: r for r in gcp.instances}


@pytest.mark.parametrize("name", sorted(TRANSCRIBED))
def test_each_new_shape_is_the_sum_of_its_source_rows(gcp, name):
    gpu, gpus, vcpus, ram, region, od, spot = TRANSCRIBED[name]
    row = _rows(gcp)[name]
    assert (row.gpu, row.gpus, row.vcpus, row.ram_gib) == (gpu, gpus, vcpus, ram)
    assert row.usd_per_h == pytest.approx(sum(od), abs=1e-9)
    assert row.spot_usd_per_h == pytest.approx(sum(spot), abs=1e-9)
    assert COMMIT in row.source and f"({region})" in row.source and "vms.csv" in row.source
    assert COMMIT in row.date
    # GCP publishes no spot interruption rate per machine type: like the older GCP rows
    assert row.spot_interruption is None
    assert gcp.interruption_rate(name) is None


def test_older_gcp_rows_unchanged(gcp):
    rows = _rows(gcp)
    assert rows["g2-standard-4"].usd_per_h == pytest.approx(0.14679 + 0.56004)
    assert rows["a2-highgpu-8g"].usd_per_h == pytest.approx(5.91582 + 23.47126)
    assert rows["a2-highgpu-8g"].spot_usd_per_h == pytest.approx(2.36604 + 9.1776)


@pytest.mark.parametrize("family", ["a2-ultragpu-{}g", "a3-highgpu-{}g"])
def test_a2_ultra_and_a3_high_price_linearly_in_gpus(gcp, family):
    """GCP prices these families per GPU with a VM share per GPU: n GPUs = n x the 1-GPU shape
    (within the catalog's 5-decimal rounding), on demand and spot."""
    rows = _rows(gcp)
    one = rows[family.format(1)]
    for n in (2, 4, 8):
        r = rows[family.format(n)]
        assert r.usd_per_h == pytest.approx(n * one.usd_per_h, abs=1e-4)
        assert r.spot_usd_per_h == pytest.approx(n * one.spot_usd_per_h, abs=1e-4)
        assert (r.vcpus, r.ram_gib) == (n * one.vcpus, n * one.ram_gib)
        assert r.spot_usd_per_h < r.usd_per_h


def test_transcribed_gpu_rows_are_linear_too():
    """The GPU rows themselves: n GPUs = n x one (a typo in the transcription would show)."""
    for family in ("a2-ultragpu-{}g", "a3-highgpu-{}g", "g2-standard-{}"):
        names = [n for n in TRANSCRIBED if n.startswith(family.split("{")[0])]
        per_gpu = {TRANSCRIBED[n][1]: (TRANSCRIBED[n][5][1] / TRANSCRIBED[n][1],
                                      TRANSCRIBED[n][6][1] / TRANSCRIBED[n][1]) for n in names}
        first = next(iter(per_gpu.values()))
        for od, sp in per_gpu.values():
            assert od == pytest.approx(first[0], abs=1e-5)
            assert sp == pytest.approx(first[1], abs=1e-5)


def test_g2_multi_gpu_shapes_are_sane(gcp):
    """g2's VM share grows with vCPUs: the 2/4/8-GPU shapes (12 vCPUs per GPU) cost the same
    per GPU (96 = 2 x 48 = 4 x 24), more per GPU than g2-standard-4 and -8 (4 and 8 vCPUs)."""
    rows = _rows(gcp)
    g24, g48, g96 = rows["g2-standard-24"], rows["g2-standard-48"], rows["g2-standard-96"]
    assert g96.usd_per_h == pytest.approx(2 * g48.usd_per_h, abs=1e-4)
    assert g96.usd_per_h == pytest.approx(4 * g24.usd_per_h, abs=1e-4)
    assert g96.spot_usd_per_h == pytest.approx(4 * g24.spot_usd_per_h, abs=1e-4)
    for r in (g24, g48, g96):
        assert r.vcpus / r.gpus == 12
        assert rows["g2-standard-4"].usd_per_h < rows["g2-standard-8"].usd_per_h \
            < r.usd_per_h / r.gpus


def test_h100_per_gpu_price_is_above_a100s(gcp):
    rows = _rows(gcp)
    per = {n: rows[n].usd_per_h / rows[n].gpus
           for n in ("a2-highgpu-1g", "a2-ultragpu-1g", "a3-highgpu-1g")}
    assert per["a2-highgpu-1g"] < per["a2-ultragpu-1g"] < per["a3-highgpu-1g"]


def test_gcp_now_offers_h100_and_a100_80g_and_rents_the_8_gpu_h100_shape():
    cat = load_gpu_catalog(None, None, "gcp")
    for gpu in ("H100", "A100-80G", "L4"):
        require_offered(cat[gpu], "gcp")  # refused before: "no H100 instance"
        assert cat[gpu].gpus_per_machine == 8
    h100 = cat["H100"].billing
    inst, n = choose_instances(h100, 8)
    assert (inst.name, n, inst.usd_per_h) == ("a3-highgpu-8g", 1, pytest.approx(87.83247))
    # a3-highgpu-1g/2g/4g are Spot / Flex-start only (on_demand: false): on-demand rents the 8g
    assert choose_instances(h100, 2)[0].name == "a3-highgpu-8g"
    assert cat["H100"].price_usd_per_h == pytest.approx(10.97906)  # the 1-GPU shape's
    assert "us-east4" in cat["H100"].price_source and "Spot or Flex-start" in h100.source
    assert choose_instances(cat["L4"].billing, 2)[0].name == "g2-standard-24"
    assert choose_instances(cat["L4"].billing, 8)[0].name == "g2-standard-96"
    assert choose_instances(cat["A100-80G"].billing, 8)[0].name == "a2-ultragpu-8g"
    spot = load_gpu_catalog(None, None, "gcp", spot=True)["H100"].billing
    assert choose_instances(spot, 8)[0].usd_per_h == pytest.approx(1.70352 + 14.1056)


def test_shapes_left_out_for_want_of_a_source_row(gcp):
    names = {r.name for r in gcp.instances}
    assert not names & {"a3-megagpu-8g", "a3-edgegpu-8g", "a3-ultragpu-8g", "a4-highgpu-8g"}
    assert not set(gcp.gpu_names()) & {"H200", "B200", "RTX-PRO-6000"}


def test_cli_search_prices_h100_on_gcp(tmp_path):
    example = Path(__file__).resolve().parents[1] / "examples" / "arxiv.jsonl"
    r = CliRunner().invoke(app, [
        "search", "-w", str(example), "-m", "llama-3-70b", "--gpus", "H100", "--provider", "gcp",
        "--engines", "vllm", "--n-trials", "6", "--max-gpus", "8", "--out", str(tmp_path / "o"),
        "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert "a3-highgpu-8g" in json.dumps(out)
    g = CliRunner().invoke(app, ["gpus", "--provider", "gcp", "--json"])
    d = json.loads(g.stdout)
    assert [i["name"] for i in d["H100"]["billing"]["instances"]] == ["a3-highgpu-8g"]
    assert [i["name"] for i in d["H100"]["billing"]["not_on_demand"]] == [
        "a3-highgpu-1g", "a3-highgpu-2g", "a3-highgpu-4g"]
