"""QA of fleets, pricing and the Pareto front as a platform engineer reads them: the front
printed holds no plan another plan (a mix of GPU types included) beats on both makespan and $,
a winner a mix beats is said to be, prices that are estimates say so."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tuner.cli.main import app
from tuner.search.fleet import beaten_by_mix

ROOT = Path(__file__).resolve().parents[1]
ARXIV = ROOT / "examples" / "arxiv.jsonl"
runner = CliRunner()


def _one_line(text: str) -> str:
    return " ".join(text.split())


def test_beaten_by_mix_needs_no_worse_on_both_and_better_on_one():
    fleets = [{"makespan_s": 100.0, "cost_usd": 2.0}, {"makespan_s": 120.0, "cost_usd": 1.0}]
    pts = [(100.0, 2.0), (101.0, 2.0), (130.0, 1.5), (90.0, 5.0), (120.0, 0.9)]
    assert beaten_by_mix(pts, fleets) == [None, 1, 2, None, None]


@pytest.fixture(scope="module")
def mixed_search(tmp_path_factory) -> tuple[Path, dict, str]:
    """Eight A10s and eight L4s to be had: mixes of the two beat the 8 x A10 plans on both."""
    out = tmp_path_factory.mktemp("qa_fleet") / "out"
    r = runner.invoke(app, ["search", "-w", str(ARXIV), "-m", "llama-3-8b", "--gpus", "A10,L4",
                            "--max-gpus", "A10=8,L4=8", "--engines", "vllm", "--n-trials", "80",
                            "--out", str(out)], env={"COLUMNS": "200"})
    assert r.exit_code == 0, (r.output, r.exception)
    return out, json.loads((out / "results.json").read_text()), r.output


def _pareto_rows(text: str) -> list[str]:
    """The first cell (trial, or 'mix K') of every row of the printed Pareto table."""
    block = text[text.index("Pareto front: makespan vs $"):]
    block = block[:block.index("└")]
    return [ln.split("│")[1].strip() for ln in block.splitlines()
            if ln.startswith("│") and ln.split("│")[1].strip()]


def test_printed_front_holds_no_plan_a_mix_beats(mixed_search):
    _out, d, text = mixed_search
    fleets = d["fleets"]
    singles = {str(p["number"]): (p["metrics"]["makespan_s"], p["metrics"]["cost_usd"])
               for p in d["pareto"]}
    beaten = {n for n, k in zip(singles, beaten_by_mix(list(singles.values()), fleets),
                                 strict=True) if k is not None}
    assert fleets and beaten, "the scenario needs a mix that beats a single-type point"
    rows = _pareto_rows(text)
    # no single-type point a mix beats on both; every mix on the front, as `--fleet K` counts
    assert not beaten & set(rows), (beaten, rows)
    assert {f"mix {k}" for k in range(1, len(fleets) + 1)} <= set(rows)
    assert set(rows) - {r for r in rows if r.startswith("mix")} == set(singles) - beaten
    # and the points printed: none beats another
    pts = [singles[r] if not r.startswith("mix") else
           (fleets[int(r.split()[1]) - 1]["makespan_s"], fleets[int(r.split()[1]) - 1]["cost_usd"])
           for r in rows]
    for i, (t, c) in enumerate(pts):
        assert not any(t2 <= t and c2 <= c and (t2, c2) != (t, c)
                       for j, (t2, c2) in enumerate(pts) if j != i)


def test_a_winner_a_mix_beats_on_both_is_said_to_be(mixed_search):
    _out, d, text = mixed_search
    fastest = next(p for p in d["pareto"] if p["number"] == d["winners"]["fastest"]["number"])
    k = beaten_by_mix([(fastest["metrics"]["makespan_s"], fastest["metrics"]["cost_usd"])],
                      d["fleets"])[0]
    assert k is not None
    line = _one_line(text)
    assert re.search(rf"The fastest single-type plan \(.*?\) is beaten on both makespan and \$ "
                     rf"by mix {k}", line), line[:2000]


def test_simulate_says_when_the_price_is_an_estimate_or_stale():
    base = ["simulate", "-w", str(ARXIV), "-m", "llama-3-8b"]
    r = runner.invoke(app, [*base, "-g", "RTX-PRO-6000", "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["price_caveat"] == "an ESTIMATE"
    r = runner.invoke(app, [*base, "-g", "RTX-PRO-6000"], env={"COLUMNS": "200"})
    assert "that price is an ESTIMATE: --price RTX-PRO-6000=USD sets yours" in _one_line(r.output)
    # AWS's P-instance rows are marked STALE in providers.yaml (a price cut not recorded)
    r = runner.invoke(app, [*base, "-g", "H100", "--provider", "aws", "--json"])
    assert json.loads(r.output)["price_caveat"] == "STALE"
    # a listed price, or the user's own, carries no caveat
    for extra in (["-g", "A10"], ["-g", "RTX-PRO-6000", "--price", "RTX-PRO-6000=1.5"]):
        r = runner.invoke(app, [*base, *extra, "--json"])
        assert json.loads(r.output)["price_caveat"] == "", extra


def test_search_says_which_prices_are_estimates(tmp_path):
    r = runner.invoke(app, ["search", "-w", str(ARXIV), "-m", "llama-3-8b", "--gpus",
                            "RTX-PRO-6000,A40", "--engines", "vllm", "--n-trials", "12",
                            "--out", str(tmp_path / "out")], env={"COLUMNS": "200"})
    assert r.exit_code == 0, (r.output, r.exception)
    text = _one_line(r.output)
    assert "Prices: RTX-PRO-6000's $1.79/GPU-h is an ESTIMATE" in text
    assert "A40's" not in text.split("Prices:")[1].split("--price")[0]
    d = json.loads((tmp_path / "out" / "results.json").read_text())
    assert any(v.startswith("Prices: RTX-PRO-6000") for v in d["verdicts"])


def test_spot_verdict_gives_the_fastest_mix_its_dollars_too():
    from tuner.search.spot import verdicts

    mix = {"makespan_s": 600.0, "cost_usd": 1.25,
           "spot": {"expected_makespan_s": 660.0, "expected_cost_usd": 1.40,
                    "interruption_rate": "0.05 per machine-hour (--interruption-rate)"}}
    (line,) = verdicts([], {}, [mix])
    assert "the fastest mix 10.0 min, $1.25 uninterrupted -> 11.0 min, $1.40 expected" in line


def test_machines_line_says_idle_gpus_of_a_partial_machine_are_not_billed():
    from tuner.core.pricing import place

    text = place("A10", 8, tp=1, dp=9).describe()
    assert "7 idle GPUs not billed (the price is per GPU-hour" in text
    assert "idle" not in place("A10", 8, tp=2, dp=4).describe()  # a full machine
    assert "idle" not in place("A10", 8, tp=1, dp=1).describe()  # one GPU rented alone
