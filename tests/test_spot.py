"""Spot capacity (issue #27 item 5): interruption rates as data (AWS Spot Instance Advisor
buckets, converted; --interruption-rate elsewhere), the expected makespan and $ under Poisson
interruptions with restart from the unfinished requests (tuner.search.spot), and how
`tuner simulate` / `tuner search` show them."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tuner.core.errors import TunerError
from tuner.core.pricing import (
    SPOT_ADVISOR_BUCKETS,
    InterruptionRate,
    advisor_bucket_rate,
    get_provider,
    load_providers,
)
from tuner.search.spot import (
    Exposure,
    SpotRates,
    expected_makespan_s,
    exposure,
    fleet_spot,
    plan_spot,
    segment_s,
    spot_rates,
)

ROOT = Path(__file__).resolve().parents[1]
H = 3600.0


def exp_(T=3600.0, S=60.0, loss=10.0, units=1, rate=0.0, cost=1.0) -> Exposure:
    return Exposure(schedule_s=T, startup_s=S, loss_s=loss, units=units, unit_rate_per_h=rate,
                    cost_usd=cost)


# ---- the model: hand-computable cases -----------------------------------------------------------
def test_no_interruptions_give_the_plain_figures():
    e = exp_(T=500.0, S=50.0, loss=7.0, units=3, rate=0.0, cost=0.25)
    assert expected_makespan_s([e]) == pytest.approx(550.0)
    assert e.expected_cost_usd == pytest.approx(0.25)
    assert e.expected_interruptions == 0.0
    assert segment_s(0.0, 42.0) == 42.0


def test_closed_form_one_machine():
    # lambda = ln 2 per hour, start-up 1 h, nothing in flight: a restart segment c = 1 h takes
    # (e^(ln 2) - 1) / ln 2 = 1 / ln 2 h; E[X] = S' + T e^(lambda c) = 1/ln 2 + 2 T
    lam = math.log(2.0)
    e = exp_(T=H, S=H, loss=0.0, rate=lam)
    assert e.first_startup_s == pytest.approx(H / lam)
    assert e.recovery_s == pytest.approx(H / lam)
    assert e.domain_expected_s == pytest.approx(H / lam + 2 * H)
    assert expected_makespan_s([e]) == pytest.approx(H / lam + 2 * H, rel=1e-9)
    # the bill scales with the machine time: (1/ln 2 + 2) / (1 + 1)
    assert e.expected_cost_usd == pytest.approx((1 / lam + 2) / 2)
    # lambda x the expected machine time
    assert e.expected_interruptions == pytest.approx(lam * (1 / lam + 2))


def test_free_restarts_cost_nothing():
    # no start-up and nothing in flight: an interruption loses nothing, whatever the rate
    e = exp_(T=1000.0, S=0.0, loss=0.0, units=16, rate=5.0)
    assert expected_makespan_s([e]) == pytest.approx(1000.0)
    assert e.expected_cost_usd == pytest.approx(1.0)


def test_slowest_of_many_machines_matches_the_poisson_maximum():
    from scipy.stats import poisson

    T, S, loss, m, rate = 2 * H, 120.0, 30.0, 8, 0.4
    e = exp_(T=T, S=S, loss=loss, units=m, rate=rate)
    lam = rate / H
    mu = lam * T
    k = np.arange(0, 200)
    e_max_n = float(np.sum(1.0 - poisson.cdf(k, mu) ** m))  # E[max of m Poisson counts]
    want = segment_s(lam, S) + T + segment_s(lam, S + loss) * e_max_n
    assert expected_makespan_s([e]) == pytest.approx(want, rel=1e-9)
    # more machines, later last one; one machine: the closed form
    assert expected_makespan_s([e]) > e.domain_expected_s
    assert expected_makespan_s([exp_(T=T, S=S, loss=loss, units=1, rate=rate)]) == \
        pytest.approx(e.domain_expected_s, rel=1e-9)


def test_a_plan_waits_for_its_slowest_part():
    a = exp_(T=1000.0, S=60.0, loss=5.0, units=4, rate=1.0)
    b = exp_(T=1100.0, S=30.0, loss=5.0, units=2, rate=2.0)
    both = expected_makespan_s([a, b])
    assert both >= max(expected_makespan_s([a]), expected_makespan_s([b])) - 1e-9
    assert both <= expected_makespan_s([a]) + expected_makespan_s([b])


def test_unbounded_when_a_restart_never_finishes():
    e = exp_(T=H, S=H, loss=0.0, rate=1000.0)  # lambda c = 1000
    assert expected_makespan_s([e]) == math.inf


@settings(max_examples=60, deadline=None)
@given(T=st.floats(1.0, 1e5), S=st.floats(0.0, 600.0), loss=st.floats(0.0, 300.0),
       units=st.integers(1, 64), r1=st.floats(0.0, 3.0), dr=st.floats(1e-6, 3.0))
def test_expected_figures_grow_with_the_rate(T, S, loss, units, r1, dr):
    lo, hi = exp_(T, S, loss, units, r1), exp_(T, S, loss, units, r1 + dr)
    m_lo, m_hi = expected_makespan_s([lo]), expected_makespan_s([hi])
    assert m_lo >= (S + T) * (1 - 1e-9)
    assert m_hi >= m_lo * (1 - 1e-9)
    assert hi.expected_cost_usd >= lo.expected_cost_usd * (1 - 1e-9) >= (1 - 1e-9) * 1.0
    # and with the machines: one more machine can only finish later
    assert expected_makespan_s([exp_(T, S, loss, units + 1, r1)]) >= m_lo * (1 - 1e-9)


# ---- failure domains ----------------------------------------------------------------------------
def test_machines_are_the_failure_domains():
    rate = InterruptionRate(0.1, "test")
    # 4 machines of 8 GPUs, 8 replicas of TP 1 each: 4 domains at the machine's rate
    m = {"instance": "x", "count": 4, "gpus_per_machine": 8, "tp": 1, "pp": 1, "dp": 32}
    e = exposure(m, rate, schedule_s=100, startup_s=10, mean_residence_s=8, cost_usd=1)
    assert (e.units, e.unit_rate_per_h, e.loss_s) == (4, 0.1, 4.0)
    # a replica whose 2 pipeline stages of TP 8 span 2 machines dies with either of them
    m = {"instance": "x", "count": 4, "gpus_per_machine": 8, "tp": 8, "pp": 2, "dp": 2}
    e = exposure(m, rate, schedule_s=100, startup_s=10, mean_residence_s=8, cost_usd=1)
    assert (e.units, e.unit_rate_per_h) == (2, pytest.approx(0.2))


# ---- interruption rates as data -----------------------------------------------------------------
def test_advisor_buckets_convert_to_hourly_rates():
    r = advisor_bucket_rate("<5%", "AWS Spot Instance Advisor")
    assert r.per_h == pytest.approx(-math.log(0.95) / 720.0) and not r.at_least
    top = advisor_bucket_rate(">20%", "AWS Spot Instance Advisor")
    assert top.at_least and top.per_h == pytest.approx(-math.log(0.80) / 720.0)
    assert "at least" in top.describe() and "converted" in top.describe()
    rates = [advisor_bucket_rate(b, "s").per_h for b in SPOT_ADVISOR_BUCKETS]
    assert rates == sorted(rates)
    with pytest.raises(TunerError, match="Unknown spot interruption bucket"):
        advisor_bucket_rate("25%", "s")


def test_every_aws_spot_price_has_a_published_bucket_gcp_none():
    providers = load_providers()
    aws, gcp = providers["aws"], providers["gcp"]
    for row in aws.instances:
        if row.spot_usd_per_h is not None:
            r = aws.interruption_rate(row.name)
            assert r is not None and r.published in SPOT_ADVISOR_BUCKETS, row.name
            assert "Spot Instance Advisor" in r.source and "4105b47" in r.source
    assert aws.interruption_rate("p5.48xlarge").published == "<5%"
    assert all(gcp.interruption_rate(r.name) is None for r in gcp.instances)


def test_rates_resolve_override_first_and_refuse_what_is_missing():
    from tuner.cli.app import load_gpu_catalog

    providers = load_providers()
    gcp = spot_rates(providers["gcp"], True, None)
    with pytest.raises(TunerError, match="--interruption-rate"):
        gcp.for_gpu(load_gpu_catalog(None, None, "gcp", spot=True)["L4"])
    own = spot_rates(providers["gcp"], True, 0.2)
    own.for_gpu(load_gpu_catalog(None, None, "gcp", spot=True)["L4"])
    assert own.of("g2-standard-4").per_h == 0.2
    assert own.of("g2-standard-4").source == "--interruption-rate"
    assert spot_rates(providers["aws"], True, None).of("g5.xlarge").published == ">20%"
    assert spot_rates(None, False, None) is None
    with pytest.raises(TunerError, match="needs --spot"):
        spot_rates(None, False, 0.1)
    for bad in (-0.1, math.inf, math.nan):
        with pytest.raises(TunerError, match="interruptions per machine-hour"):
            spot_rates(providers["aws"], True, bad)


def test_gpu_file_provider_may_give_a_rate_or_bucket(tmp_path):
    f = tmp_path / "gpus.yaml"
    f.write_text("providers:\n  mycloud:\n    spot_interruption_source: my own logs\n"
                 "    billing: {granularity: second}\n    instances:\n"
                 "      a: {gpu: L4, gpus: 1, usd_per_h: 0.8, spot_usd_per_h: 0.3, "
                 "spot_interruption: 0.02, source: q, date: '2026-11'}\n"
                 "      b: {gpu: L4, gpus: 4, usd_per_h: 3.2, spot_usd_per_h: 1.2, "
                 "spot_interruption: '5-10%', source: q, date: '2026-11'}\n")
    p = get_provider("mycloud", load_providers(f))
    assert p.interruption_rate("a").per_h == 0.02 and p.interruption_rate("a").source == "my own logs"
    assert p.interruption_rate("b").published == "5-10%"
    f.write_text(f.read_text().replace("'5-10%'", "'often'"))
    with pytest.raises(TunerError, match="spot_interruption must be one of"):
        load_providers(f)


# ---- plans from their figures ---------------------------------------------------------------------
def _rates(per_h: float) -> SpotRates:
    return spot_rates(load_providers()["aws"], True, per_h)


def test_plan_and_fleet_entries():
    machines = {"instance": "g5.xlarge", "count": 2, "gpus_per_machine": 1, "tp": 1, "pp": 1,
                "dp": 2}
    figures = {"makespan_s": 600.0, "startup_s": 60.0, "mean_residence_s": 20.0,
               "cost_usd": 0.5, "machines": machines}
    zero = plan_spot(_rates(0.0), figures, "2 x A10")
    assert zero["expected_makespan_s"] == pytest.approx(600.0)
    assert zero["expected_cost_usd"] == pytest.approx(0.5)
    sp = plan_spot(_rates(0.5), figures, "2 x A10")
    assert sp["expected_makespan_s"] > 600.0 and sp["expected_cost_usd"] > 0.5
    assert "expected" in sp["note"] and "--interruption-rate" in sp["note"]
    assert sp["parts"][0]["units"] == 2 and sp["parts"][0]["loss_s"] == pytest.approx(10.0)
    assert plan_spot(_rates(0.5), {**figures, "mean_residence_s": None}, "x") is None
    plan = {"parts": [{"gpu": "A10", "count": 2, "makespan_s": 600.0, "startup_s": 60.0,
                       "cost_usd": 0.5, "mean_residence_s": 20.0, "machines": machines},
                      {"gpu": "A10", "count": 2, "makespan_s": 590.0, "startup_s": 60.0,
                       "cost_usd": 0.4, "mean_residence_s": 20.0, "machines": machines}]}
    f = fleet_spot(_rates(0.5), plan)
    assert f["expected_cost_usd"] == pytest.approx(sum(p["expected_cost_usd"]
                                                       for p in f["parts"]))
    assert f["expected_makespan_s"] >= max(p["expected_makespan_s"] for p in f["parts"])


# ---- the CLI ------------------------------------------------------------------------------------
def run(*args):
    import os

    return subprocess.run([sys.executable, "-m", "tuner.cli", *args], capture_output=True,
                          text=True, cwd=ROOT, timeout=300, env={**os.environ, "COLUMNS": "200"})


@pytest.fixture(scope="module")
def workload(tmp_path_factory):
    p = tmp_path_factory.mktemp("w") / "w.jsonl"
    p.write_text("".join(json.dumps({"prompt_tokens": 300 + 37 * i,
                                     "output_tokens": 40 + 11 * i}) + "\n" for i in range(40)))
    return str(p)


def test_simulate_shows_the_expected_figures(workload):
    base = ["simulate", "-w", workload, "-m", "llama-3-8b", "-g", "A10", "--provider", "aws",
            "--spot", "--json"]
    r = run(*base)
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    sp = d["spot"]
    assert sp["expected_makespan_s"] >= d["makespan_s"] and sp["expected_cost_usd"] >= d["cost_usd"]
    assert "Spot Instance Advisor" in sp["interruption_rate"] and "at least" in sp["interruption_rate"]
    zero = json.loads(run(*base, "--interruption-rate", "0").stdout)["spot"]
    assert zero["expected_makespan_s"] == pytest.approx(d["makespan_s"])
    assert zero["expected_cost_usd"] == pytest.approx(d["cost_usd"])
    high = json.loads(run(*base, "--interruption-rate", "2").stdout)["spot"]
    assert high["expected_makespan_s"] > d["makespan_s"]
    table = run(*base[:-1])
    assert "expected makespan on spot" in table.stdout and "Poisson" in table.stdout


@pytest.mark.parametrize("args, words", [
    (["--provider", "gcp", "-g", "L4", "--spot"], "publishes no spot interruption rate"),
    (["-g", "A10", "--interruption-rate", "0.1"], "--interruption-rate needs --spot"),
    (["--provider", "aws", "-g", "A10", "--spot", "--interruption-rate", "-1"],
     "interruptions per machine-hour"),
])
def test_user_errors_are_one_line(workload, args, words):
    r = run("simulate", "-w", workload, "-m", "llama-3-8b", *args)
    assert r.returncode == 2 and words in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_search_without_a_rate_fails_before_searching(workload, tmp_path):
    r = run("search", "-w", workload, "-m", "llama-3-8b", "--gpus", "L4", "--provider", "gcp",
            "--spot", "--n-trials", "2", "--out", str(tmp_path / "o"))
    assert r.returncode == 2 and "--interruption-rate" in r.stderr
    assert not (tmp_path / "o").exists()


def test_search_results_carry_the_spot_entries(workload, tmp_path):
    out = tmp_path / "o"
    r = run("search", "-w", workload, "-m", "llama-3-8b", "--gpus", "L4", "--provider", "gcp",
            "--spot", "--interruption-rate", "0.3", "--n-trials", "6", "--out", str(out))
    assert r.returncode == 0, r.stderr
    doc = json.loads((out / "results.json").read_text())
    w = doc["winners"]["fastest"]
    assert w["spot"]["expected_makespan_s"] >= w["metrics"]["makespan_s"]
    assert w["parts"][0]["expected_cost_usd"] >= w["parts"][0]["cost_usd"]
    assert "0.3 per machine-hour (--interruption-rate)" in w["spot"]["note"]
    assert any("On spot machines" in v for v in doc["verdicts"])
    assert all(p.get("spot") for p in doc["pareto"])


def test_gpus_lists_the_published_rates():
    aws = run("gpus", "--provider", "aws", "--spot")
    assert aws.returncode == 0 and ">20% a month" in aws.stdout and "<5% a month" in aws.stdout
    gcp = run("gpus", "--provider", "gcp", "--spot")
    assert gcp.returncode == 0 and "none: --interruption-rate" in gcp.stdout
