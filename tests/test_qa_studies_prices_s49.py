"""QA of a resumed study's sampler, a fleet's pre-selection under --provider, and the labels of
spot prices, as a platform engineer meets them:

* `tuner search --resume` with another --seed / --sampler goes on (Optuna allows it) and says
  so in one line; the study stores what it continues with and which setting proposed which
  trials, and the outputs say it;
* mixes of GPU types are pre-selected at the price of the instances each part would rent (a
  TP 2 part on AWS A10s rents a 4-GPU g5.12xlarge, not 2 x the 1-GPU g5.xlarge's price), the
  rule the simulated mixes are priced by;
* a --spot price is labelled as a spot price, not with the on-demand table's title.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import optuna
import pytest
from typer.testing import CliRunner

from tuner.cli.main import app
from tuner.core.catalog import apply_prices, load_gpus
from tuner.core.config import ServingConfig
from tuner.core.pricing import (
    apply_provider,
    get_provider,
    job_cost_usd,
    load_providers,
    place,
    price_caveat,
    rent,
)
from tuner.reports.outputs import price_verdicts
from tuner.search.fleet import _fluid, _templates, candidate_mixes
from tuner.search.meta import StoredSearch, StudyMeta
from tuner.search.records import Metrics, TrialRecord
from tuner.search.storage import _inputs_changed, _sampler_switch, input_digests, make_storage

ROOT = Path(__file__).resolve().parents[1]
ARXIV = ROOT / "examples" / "arxiv.jsonl"
runner = CliRunner()


def _one_line(text: str) -> str:
    return " ".join(text.split())


# ---- 1. --resume under another sampler or seed ------------------------------------------------
def test_a_switch_is_another_sampler_or_seed_as_the_trials_are_proposed():
    def meta(**kw):
        return {"search": StoredSearch(**kw).to_dict()}

    base = meta(sampler="auto", seed=0, n_trials=20)
    assert _sampler_switch(base, meta(sampler="auto", seed=0, n_trials=40)) is None
    assert _sampler_switch(base, meta(sampler="tpe", seed=0, n_trials=40)) is None  # auto: TPE
    before, now = _sampler_switch(base, meta(sampler="auto", seed=3, n_trials=20))
    assert (before.seed, now.seed) == (0, 3)
    # --sampler auto picks NSGA-II beyond 300 trials: more --n-trials changes the sampler
    before, now = _sampler_switch(base, meta(sampler="auto", seed=0, n_trials=400))
    assert (before.sampler_used, now.sampler_used) == ("tpe", "nsga2")
    assert now.describe() == "sampler nsga2 (auto at --n-trials 400), seed 0"
    assert _sampler_switch({}, base) is None  # a study an older version wrote: nothing to say


@pytest.fixture(scope="module")
def resumed(tmp_path_factory):
    """A 6-trial search, resumed with the same settings, then with --seed 1 --sampler nsga2."""
    tmp = tmp_path_factory.mktemp("s49_resume")
    out, db = tmp / "out", f"sqlite:///{tmp / 'a.db'}"
    w = tmp / "arxiv.jsonl"  # the example's first 40 requests: seconds a search
    w.write_text("".join(ARXIV.read_text().splitlines(keepends=True)[:40]))
    base = ["search", "-w", str(w), "-m", "llama-3-8b", "--gpus", "A10", "--engines",
            "vllm", "--storage", db, "--out", str(out)]
    runs = [runner.invoke(app, [*base, *extra], env={"COLUMNS": "200"})
            for extra in (["--n-trials", "6"], ["--n-trials", "8", "--resume"],
                          ["--n-trials", "12", "--resume", "--seed", "1", "--sampler", "nsga2"])]
    for r in runs:
        assert r.exit_code == 0, (r.output, r.exception)
    return out, db, runs


def test_resume_with_the_same_sampler_and_seed_says_nothing(resumed):
    _out, _db, runs = resumed
    assert "--resume: study" not in _one_line(runs[1].output)


def test_resume_with_another_seed_and_sampler_says_what_it_ran_with_and_goes_on(resumed):
    _out, db, runs = resumed
    text = _one_line(runs[2].output)
    study = optuna.load_study(study_name="arxiv-llama-3-8b", storage=make_storage(db))
    # the trials the study held when the resume began: the first two runs' (defaults included)
    until = study.user_attrs["metadata"]["earlier_searches"][-1]["until_trial"]
    assert (f"--resume: study 'arxiv-llama-3-8b' ran {until} trials with sampler tpe (auto at "
            f"--n-trials 8), seed 0; it continues with sampler nsga2, seed 1") in text, text
    assert "will not repeat the earlier run's order" in text
    assert len(study.trials) > until  # it went on


def test_the_study_stores_what_it_continues_with_and_what_it_ran_with(resumed):
    _out, db, _runs = resumed
    study = optuna.load_study(study_name="arxiv-llama-3-8b", storage=make_storage(db))
    meta = StudyMeta.from_dict(study.user_attrs["metadata"])
    # what `tuner worker` and the outputs rebuild the search from: the new settings
    assert (meta.search.sampler, meta.search.seed, meta.search.n_trials) == ("nsga2", 1, 12)
    # the same-setting resume (6 -> 8 trials) left no entry; the switch one
    assert [(e["sampler"], e["seed"], e["n_trials"]) for e in meta.earlier_searches] == \
        [("auto", 0, 8)]
    until = meta.earlier_searches[0]["until_trial"]
    assert [(h["sampler"], h["seed"], h["from_trial"]) for h in meta.sampler_history()] == \
        [("tpe", 0, 0), ("nsga2", 1, until)]


def test_results_and_report_say_which_sampler_proposed_which_trials(resumed, tmp_path):
    _out, db, _runs = resumed
    r = runner.invoke(app, ["results", "--storage", db, "--out", str(tmp_path / "again")])
    assert r.exit_code == 0, (r.output, r.exception)
    d = json.loads((tmp_path / "again" / "results.json").read_text())
    samplers = d["search"]["samplers"]
    assert [(s["sampler"], s["seed"]) for s in samplers] == [("tpe", 0), ("nsga2", 1)]
    until = samplers[1]["from_trial"]
    html = (tmp_path / "again" / "report.html").read_text()
    assert (f"Sampler: trials #0-#{until - 1} by sampler tpe (auto at --n-trials 8), seed 0; "
            f"trials #{until} on by sampler nsga2, seed 1") in html


# ---- 2. mixes pre-selected at the instances they rent -----------------------------------------
AWS = apply_provider(load_gpus(), get_provider("aws", load_providers()))


def _record(number: int, gpu: str, tp: int, schedule_s: float, gpus=AWS,
            startup_s: float = 60.0) -> TrialRecord:
    cfg = ServingConfig(gpu=gpu, tp=tp)
    g = gpus[gpu]
    cost = job_cost_usd(schedule_s + startup_s, g.price_usd_per_h, tp, 1, g.billing)
    return TrialRecord(number, cfg, True, metrics=Metrics(
        makespan_s=schedule_s + startup_s, startup_s=startup_s, schedule_s=schedule_s,
        cost_usd=cost), fidelity={"level": "full"})


def test_a_mix_is_estimated_at_the_price_of_the_instances_it_rents():
    """AWS's A10s: 1-GPU g5.xlarge at $1.006/h, 4-GPU g5.12xlarge at $5.672/h. A TP 2 part
    rents a g5.12xlarge; the pre-selection priced it at 2 x $1.006/h (the smallest
    instance's $/GPU-h), 2.8 x too cheap."""
    recs = [_record(0, "A10", 2, 1000.0), _record(1, "L4", 1, 1500.0)]
    temps = _templates(recs, AWS)
    a10, l4 = temps["A10"][0], temps["L4"][0]
    assert a10.usd_per_h_at[1] == pytest.approx(5.672)  # not 2 x 1.006
    for counts in ([1, 4], [2, 4], [1, 1]):
        t_end, cost = _fluid((a10, l4), np.array([counts], float))
        rented = (rent(t_end[0], AWS["A10"].billing, 2, counts[0]).cost_usd
                  + rent(t_end[0], AWS["L4"].billing, 1, counts[1]).cost_usd)
        assert cost[0] == pytest.approx(rented, rel=1e-9)


def test_the_pre_selection_drops_the_mix_its_real_price_beats():
    """1 x A10 TP 2 + 4 x L4 looked cheap at the smallest instance's price ($0.48, estimated)
    and was simulated; at the g5.12xlarge it rents it costs $0.82 and 2 x A10 TP 2 + 4 x L4
    (the same instance holds both replicas) finishes sooner for $0.68: only that one is."""
    recs = [_record(0, "A10", 2, 1000.0), _record(1, "L4", 1, 1500.0)]
    singles = [(r.metrics.makespan_s, r.metrics.cost_usd) for r in recs]
    picks = candidate_mixes(recs, AWS, {"A10": 4, "L4": 4}, beaten_by=singles)
    mixes = [[(c.gpu, c.tp, c.dp) for c in cfgs] for cfgs, _shares, _trials in picks]
    assert mixes == [[("A10", 2, 2), ("L4", 1, 4)]]


def test_without_a_provider_a_mix_is_priced_per_gpu_hour_as_before():
    cat = load_gpus()
    recs = [_record(0, "A10", 2, 1000.0, cat), _record(1, "L4", 1, 1500.0, cat)]
    temps = _templates(recs, cat)
    a10, l4 = temps["A10"][0], temps["L4"][0]
    t_end, cost = _fluid((a10, l4), np.array([[1, 4]], float))
    per_h = 2 * cat["A10"].price_usd_per_h + 4 * cat["L4"].price_usd_per_h
    assert cost[0] == pytest.approx(per_h * t_end[0] / 3600.0, rel=1e-12)


# ---- 3. spot prices labelled as spot ------------------------------------------------------------
SPOT = apply_provider(load_gpus(), get_provider("aws", load_providers()), spot=True)


def test_a_spot_price_is_not_labelled_with_the_on_demand_table():
    g = SPOT["A10"]
    assert g.price_usd_per_h == pytest.approx(0.4159)  # g5.xlarge's spot price
    head = g.price_source.split(":")[0]
    assert head == "AWS EC2 spot, us-east-1, Linux", g.price_source
    assert "spot price from the same table and date as its on-demand price" in g.price_source
    assert g.price_date == "catalog commit 27f67dd, read 2026-11-24"
    assert price_caveat(g) == ("a SPOT price snapshot (aws price table, catalog commit "
                               "27f67dd, read 2026-11-24; spot prices move with demand)")
    # the on-demand labels stay
    assert AWS["A10"].price_source.startswith("AWS EC2 on-demand, us-east-1, Linux: g5.xlarge")
    assert price_caveat(AWS["A10"]) == ""
    # the user's own price is no snapshot
    assert price_caveat(apply_prices(SPOT, {"A10": 0.3})["A10"]) == ""
    # the on-demand STALE note (a list-price cut) is not the spot price's caveat
    assert price_caveat(AWS["H100"]) == "STALE"
    assert price_caveat(SPOT["H100"]).startswith("a SPOT price snapshot")


def test_spot_machines_and_rentals_say_spot():
    b = SPOT["A10"].billing
    assert "g5.12xlarge (4 GPUs) at $2.69/h spot" in rent(300.0, b, 2).note
    assert place("A10", 8, 2, 1, b).describe().startswith("1 x g5.12xlarge spot (4 GPUs each)")
    assert " spot" not in rent(300.0, AWS["A10"].billing, 2).note


def test_the_price_verdict_names_the_spot_listing():
    rec = TrialRecord(0, ServingConfig(gpu="A10"), True)
    line = price_verdicts([rec], SPOT)[0]
    assert "A10's $0.42/GPU-h is a SPOT price snapshot" in line
    assert "(`tuner gpus --provider aws --spot` gives the source)" in line
    assert price_verdicts([rec], AWS) == []


def test_a_spot_study_labelled_before_the_rewording_still_resumes():
    """The spot label is part of the GPU's stored billing: a study searched with the old
    wording is not "searched with other GPU specs"; another spot price still is."""
    new_spec = dataclasses.asdict(SPOT["A10"])
    old_spec = json.loads(json.dumps(new_spec))
    old_spec["billing"]["source"] = "g5.xlarge: the on-demand wording"
    old_spec["price_source"] = "AWS EC2 on-demand, us-east-1, Linux (spot): ..."

    def meta(spec):
        m = StudyMeta(gpus=["A10"], gpu_specs={"A10": spec})
        return dataclasses.replace(m, digests=input_digests(m)).to_dict()

    assert _inputs_changed(meta(old_spec), meta(new_spec)) is None
    dearer = json.loads(json.dumps(new_spec))
    dearer["billing"]["instances"][0]["usd_per_h"] = 0.5
    assert _inputs_changed(meta(dearer), meta(new_spec)) is not None
