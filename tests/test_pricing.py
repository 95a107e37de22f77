"""Prices per provider: billing rounding, instance choice, the provider's effect on a job's cost,
$ per million tokens, and requests longer than the context (--on-too-long)."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from tests.sim import simulate_default
from tuner.cli.app import load_gpu_catalog
from tuner.cli.main import app
from tuner.core.catalog import GPU, get_model, load_gpus
from tuner.core.config import ServingConfig
from tuner.core.errors import TunerError
from tuner.core.pricing import (
    Billing,
    Instance,
    billed_seconds,
    choose_instances,
    get_provider,
    job_cost_usd,
    load_providers,
    rent,
    usd_per_million_tokens,
)
from tuner.core.workload import Workload, apply_on_too_long, drop_too_long

runner = CliRunner()
PROVIDERS = load_providers()
BILLING = Billing(provider="test", granularity_s=60, minimum_s=120, instances=(
    Instance("one", 1, 1.0), Instance("four", 4, 3.0), Instance("eight", 8, 10.0)))


def write_workload(path: Path, rows: list[tuple[int, int]]) -> Path:
    path.write_text("".join(json.dumps({"prompt_tokens": p, "output_tokens": o}) + "\n"
                            for p, o in rows))
    return path


def small_workload(n: int = 24) -> Workload:
    rng = np.random.default_rng(0)
    return Workload(prompt_tokens=rng.integers(200, 1200, n).astype(np.int64),
                    output_tokens=rng.integers(20, 150, n).astype(np.int64))


# ---- the billing rule ---------------------------------------------------------------------------
@pytest.mark.parametrize(("runtime", "gran", "minimum", "billed"), [
    (0.4, 1, 0, 1), (1.0, 1, 0, 1), (59.5, 1, 60, 60), (61, 60, 0, 120), (120, 60, 0, 120),
    (3601, 3600, 0, 7200), (10, 3600, 0, 3600), (300.2, 1, 60, 301)])
def test_billed_seconds_round_up_to_granularity_and_minimum(runtime, gran, minimum, billed):
    assert billed_seconds(runtime, gran, minimum) == billed


@pytest.mark.parametrize(("tp", "dp", "instance", "count"), [
    (1, 1, "one", 1), (2, 1, "four", 1), (3, 1, "four", 1), (4, 1, "four", 1),
    (8, 1, "eight", 1),
    (1, 3, "one", 3),  # 3 x $1 ties one 4-GPU instance at $3: fewer GPUs rented wins
    (1, 4, "four", 1),  # $3 < 4 x $1
    (4, 2, "four", 2),  # 2 x $3 < $10
    (2, 3, "four", 2)])  # two 2-GPU replicas per 4-GPU instance
def test_instances_chosen(tp, dp, instance, count):
    inst, n = choose_instances(BILLING, tp, dp)
    assert (inst.name, n) == (instance, count)


def test_no_instance_large_enough_is_one_error():
    with pytest.raises(TunerError, match="no instance with 16 GPUs"):
        choose_instances(BILLING, 16, 1)


def test_rental_cost_and_note():
    r = rent(121.0, BILLING, tp=2)
    assert (r.instance, r.count, r.gpus_rented, r.billed_s) == ("four", 1, 4, 180.0)
    assert r.cost_usd == pytest.approx(180 / 3600 * 3.0)
    assert "2 GPUs idle" in r.note
    assert job_cost_usd(121.0, 99.0, 2, 1, BILLING) == r.cost_usd
    # without a provider: per GPU-second at the catalog price, as before
    assert job_cost_usd(121.0, 2.0, 2, 3) == pytest.approx(121 / 3600 * 2.0 * 6)


def test_shipped_table_has_sources_dates_and_shapes():
    assert {"aws", "gcp", "lambda", "runpod"} <= set(PROVIDERS)
    gpus = load_gpus()
    for p in PROVIDERS.values():
        assert p.billing_source and p.granularity_s in (1, 60, 3600)
        for row in p.instances:
            assert row.gpu in gpus, row
            assert row.source and row.date and row.usd_per_h > 0 and row.gpus >= 1
    aws = PROVIDERS["aws"].billing("A10")
    assert (aws.granularity_s, aws.minimum_s) == (1, 60)
    assert [i.gpus for i in aws.instances] == [1, 1, 4, 8]
    # TP=2 on AWS A10 rents the 4-GPU g5.12xlarge
    assert choose_instances(aws, 2)[0].name == "g5.12xlarge"
    with pytest.raises(TunerError, match="Unknown provider"):
        get_provider("azure-ish", PROVIDERS)


# ---- the provider changes what a job costs ------------------------------------------------------
def test_provider_changes_cost_as_its_billing_says():
    w, m = small_workload(), get_model("llama-3-8b")
    cat = load_gpus()
    aws = load_gpu_catalog(None, None, "aws")
    runpod = load_gpu_catalog(None, None, "runpod")
    for tp in (1, 2):
        cfg = ServingConfig(gpu="A10", tp=tp)
        base = simulate_default(w, m, cat["A10"], cfg)
        assert base.rental is None
        assert base.cost_usd == pytest.approx(base.makespan_s / 3600 * 1.29 * tp)
        res = simulate_default(w, m, aws["A10"], cfg)
        assert res.makespan_s == pytest.approx(base.makespan_s)  # same GPU, same schedule
        inst_usd_h = {1: 1.006, 2: 5.672}[tp]  # g5.xlarge / g5.12xlarge (whole instance)
        billed = max(math.ceil(res.makespan_s), 60)
        assert res.cost_usd == pytest.approx(billed / 3600 * inst_usd_h)
        assert res.rental.instance == {1: "g5.xlarge", 2: "g5.12xlarge"}[tp]
        assert res.summary()["rental"]["gpus_rented"] == {1: 1, 2: 4}[tp]
    # RunPod bills A40 pods per GPU, per minute
    res = simulate_default(w, m, runpod["A40"], ServingConfig(gpu="A40", tp=2))
    assert res.cost_usd == pytest.approx(math.ceil(res.makespan_s / 60) * 60 / 3600 * 0.88)


def test_provider_gpu_host_shape_and_stored_specs_round_trip():
    aws = load_gpu_catalog(None, None, "aws")
    g = aws["A10"]
    assert (g.price_usd_per_h, g.cpu_cores, g.host_ram_gib) == (1.006, 4, 16)
    assert "skypilot-catalog" in g.price_source and "27f67dd" in g.price_date
    back = GPU(**dataclasses.asdict(g))  # how a study stores and a worker rebuilds it
    assert back.billing == g.billing


def test_shipped_spot_prices_for_aws_and_gcp():
    aws = load_gpu_catalog(None, None, "aws", spot=True)
    assert aws["A10"].billing.spot and aws["A10"].billing.instances[0].usd_per_h == 0.4159
    gcp = load_gpu_catalog(None, None, "gcp", spot=True)
    assert gcp["L4"].billing.instances[0].usd_per_h == pytest.approx(0.05874 + 0.2231)
    # on demand, GCP's VM and GPU rows are summed
    assert load_gpu_catalog(None, None, "gcp")["A100-40G"].billing.instances[0].usd_per_h \
        == pytest.approx(0.73948 + 2.93391)


def test_price_override_reprices_every_instance():
    cat = load_gpu_catalog(None, ["A10=2.0"], "aws")
    assert [i.usd_per_h for i in cat["A10"].billing.instances] == [2.0, 2.0, 8.0, 16.0]
    assert cat["A10"].price_usd_per_h == 2.0


def test_spot_from_gpu_file_and_refusals(tmp_path):
    f = tmp_path / "gpus.yaml"
    f.write_text("""gpus: {}
providers:
  mycloud:
    title: My cloud
    billing: {granularity: hour, minimum_s: 0, source: contract}
    instances:
      box1: {gpu: L4, gpus: 1, usd_per_h: 0.8, spot_usd_per_h: 0.3, source: quote, date: "2026-11"}
""")
    spot = load_gpu_catalog(f, None, "mycloud", spot=True)
    assert spot["L4"].billing.instances[0].usd_per_h == 0.3 and spot["L4"].billing.spot
    w, m = small_workload(8), get_model("llama-3-8b")
    res = simulate_default(w, m, spot["L4"], ServingConfig(gpu="L4"))
    assert res.cost_usd == pytest.approx(0.3)  # one whole hour at the spot price
    with pytest.raises(TunerError, match="needs --provider"):
        load_gpu_catalog(None, None, None, spot=True)
    r = runner.invoke(app, ["simulate", "-w", str(write_workload(tmp_path / "w.jsonl",
                                                                 [(100, 10)])),
                            "-m", "llama-3-8b", "-g", "A40", "--provider", "aws"])
    assert isinstance(r.exception, TunerError) and "no A40 instance" in str(r.exception)


def test_gpus_provider_lists_instances():
    r = runner.invoke(app, ["gpus", "--provider", "aws"], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    assert "g5.12xlarge" in r.stdout and "p5.48xlarge" in r.stdout and "per second" in r.stdout
    r = runner.invoke(app, ["gpus", "--provider", "gcp", "--json"])
    d = json.loads(r.stdout)
    assert d["L4"]["billing"]["instances"][0]["name"] == "g2-standard-4"


# ---- $ per million tokens -----------------------------------------------------------------------
def test_usd_per_million_tokens_is_cost_over_tokens(tmp_path):
    w, m = small_workload(), get_model("llama-3-8b")
    res = simulate_default(w, m, load_gpus()["A40"], ServingConfig(gpu="A40"))
    tokens = int(w.prompt_tokens.sum() + w.output_tokens.sum())
    assert res.usd_per_million_tokens == pytest.approx(res.cost_usd / tokens * 1e6)
    assert res.summary()["usd_per_million_tokens"] == res.usd_per_million_tokens
    assert usd_per_million_tokens(2.0, 500_000, 500_000) == 2.0
    wl = write_workload(tmp_path / "w.jsonl", [(800, 100)] * 6)
    r = runner.invoke(app, ["simulate", "-w", str(wl), "-m", "llama-3-8b", "-g", "A40"],
                      env={"COLUMNS": "200"})
    assert "$ per 1M tokens (input + output)" in r.stdout


# ---- requests longer than the context -----------------------------------------------------------
def test_drop_too_long_keeps_the_rest():
    w = Workload(prompt_tokens=np.array([100, 9000, 50, 8000]),
                 output_tokens=np.array([10, 10, 10, 500]))
    kept, info = drop_too_long(w, 8192)
    assert kept.prompt_tokens.tolist() == [100, 50]
    assert info["count"] == 2 and info["ids"] == [2, 4] and info["longest_tokens"] == 9010
    assert drop_too_long(kept, 8192) == (kept, None)
    with pytest.raises(TunerError, match="--on-too-long skip"):
        apply_on_too_long(w, 8192, "m", "fail")
    with pytest.raises(TunerError, match="fail, skip or cap"):
        apply_on_too_long(w, 8192, "m", "drop")
    with pytest.raises(TunerError, match="nothing is left"):
        drop_too_long(w, 10)


def test_on_too_long_fail_and_skip_in_search(tmp_path):
    rows = [(400, 50)] * 20 + [(9000, 100), (500, 60), (8100, 200)]  # llama-3-8b: 8,192
    wl = write_workload(tmp_path / "w.jsonl", rows)
    out = tmp_path / "fail"
    r = runner.invoke(app, ["search", "-w", str(wl), "-m", "llama-3-8b", "--gpus", "A40",
                            "--n-trials", "4", "--out", str(out)])
    assert isinstance(r.exception, TunerError)
    assert "2 of 23 requests exceed" in str(r.exception)
    assert "--on-too-long skip" in str(r.exception)
    assert not out.exists() or not any(out.iterdir())  # nothing left behind
    out = tmp_path / "skip"
    r = runner.invoke(app, ["search", "-w", str(wl), "-m", "llama-3-8b", "--gpus", "A40",
                            "--n-trials", "4", "--out", str(out), "--on-too-long", "skip"])
    assert r.exit_code == 0, r.output
    res = json.loads((out / "results.json").read_text())
    assert res["failed_too_long"]["count"] == 2 and res["failed_too_long"]["ids"] == [21, 23]
    assert res["winners"]["fastest"]["metrics"]["requests"] == 21
    assert "reported as failed" in (out / "report.html").read_text()
    r = runner.invoke(app, ["simulate", "-w", str(wl), "-m", "llama-3-8b", "-g", "A40",
                            "--on-too-long", "skip", "--json"])
    d = json.loads(r.stdout)
    assert d["requests"] == 21 and d["failed_too_long"]["ids"] == [21, 23]
    r = runner.invoke(app, ["simulate", "-w", str(wl), "-m", "llama-3-8b", "-g", "A40"])
    assert isinstance(r.exception, TunerError) and "--on-too-long skip" in str(r.exception)


def test_on_too_long_fail_is_one_line_and_exit_2(tmp_path):
    import os
    import subprocess
    import sys

    wl = write_workload(tmp_path / "w.jsonl", [(400, 50), (9000, 100)])
    out = tmp_path / "o"
    r = subprocess.run([sys.executable, "-m", "tuner.cli", "search", "-w", str(wl), "-m",
                        "llama-3-8b", "--gpus", "A40", "--out", str(out)], capture_output=True,
                       text=True, timeout=120, env=dict(os.environ, COLUMNS="40"))
    assert r.returncode == 2, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "1 of 2 requests exceed" in lines[0], r.stderr
    assert "longest: 9,100" in lines[0] and "--on-too-long skip" in lines[0]
    assert not out.exists()


def test_plan_no_instance_holds_is_infeasible_not_a_crash():
    from tuner.sim.simulator import InfeasibleConfig

    runpod = load_gpu_catalog(None, None, "runpod")  # L4 only as 1-GPU pods here
    with pytest.raises(InfeasibleConfig, match="no instance with 2 GPUs"):
        simulate_default(small_workload(8), get_model("llama-3-8b"), runpod["L4"],
                         ServingConfig(gpu="L4", tp=2))
    res = simulate_default(small_workload(8), get_model("llama-3-8b"), runpod["L4"],
                           ServingConfig(gpu="L4", dp=2))
    assert res.rental.instance == "1x_L4" and res.rental.count == 2


def test_a_gpu_file_with_only_a_providers_section(tmp_path):
    f = tmp_path / "prov.yaml"
    f.write_text("""providers:
  myco:
    title: My co
    billing: {granularity: hour, minimum_s: 0, source: contract}
    instances:
      box1: {gpu: L4, gpus: 1, usd_per_h: 0.8, source: quote, date: "2026-11"}
""")
    cat = load_gpu_catalog(f, None, "myco")
    assert cat["L4"].billing.instances[0].name == "box1"
    f.write_text(f.read_text().replace("minimum_s: 0", "minimum_s: abc"))
    with pytest.raises(TunerError, match="malformed"):
        load_gpu_catalog(f, None, "myco")
    f.write_text("providers:\n  - a\n")
    with pytest.raises(TunerError, match="must map provider names"):
        load_gpu_catalog(f, None, "myco")


def test_apply_prices_reprices_the_providers_instances():
    from tuner.core.catalog import apply_prices
    from tuner.core.pricing import apply_provider, get_provider, load_providers

    aws = apply_provider(load_gpus(), get_provider("aws", load_providers()))
    a10 = apply_prices(aws, {"A10": 2.0})["A10"]  # the path `tuner export` takes too
    assert [i.usd_per_h for i in a10.billing.instances] == [2.0, 2.0, 8.0, 16.0]
