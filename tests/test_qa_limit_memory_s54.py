"""QA stop 54: (1) "of physical limit" compares the schedule with the schedule's bound T_o,
start-up left out of both (a makespan that is mostly start-up read as near the limit whatever
its schedule did); (2) the report's memory rows are `tuner simulate`'s (the runtime and the
weight-offload buffers have rows of their own, not "free")."""

from __future__ import annotations

import copy
import json
import re

import numpy as np
import pytest

from tuner.core.catalog import get_gpu, get_model, load_gpus
from tuner.core.config import ServingConfig
from tuner.core.memory import gpu_memory_items, plan_memory
from tuner.core.workload import Workload
from tuner.search.records import Metrics, TrialRecord

GPUS = load_gpus()


# ---- 1: the schedule against its own bound -----------------------------------------------------
def _startup_heavy_metrics() -> dict:
    """A winner whose 3.6 min makespan is 3.2 min of start-up: its schedule 24 s against a
    5 s bound (21 %), the whole job 197 s against 216 s (91 %)."""
    start, sched, sched_lb = 192.0, 24.0, 5.0
    return dict(makespan_s=start + sched, startup_s=start, schedule_s=sched,
                lower_bound_s=start + sched_lb, schedule_lower_bound_s=sched_lb,
                limit_fraction=(start + sched_lb) / (start + sched))


def test_simresult_reports_the_schedules_share_beside_the_whole_jobs():
    from tests.sim import simulate_default

    wl = Workload(prompt_tokens=np.arange(32, dtype=np.int64) * 7 + 300,
                  output_tokens=np.full(32, 40, dtype=np.int64))
    res = simulate_default(wl, get_model("llama-3-8b"), get_gpu("A10", GPUS),
                           ServingConfig(gpu="A10"))
    assert res.startup_s > res.schedule_s  # the case: start-up dominates
    d = res.summary()
    assert d["schedule_limit_fraction"] == pytest.approx(
        res.schedule_lower_bound_s / res.schedule_s)
    assert d["limit_fraction"] == pytest.approx(res.lower_bound_s / res.makespan_s)  # kept
    assert d["schedule_limit_fraction"] < d["limit_fraction"]
    # a trial's metrics carry it (evaluator: the summary less memory / config / provenance)
    m = Metrics.from_dict({k: v for k, v in d.items()
                           if k not in ("memory", "config", "provenance")})
    assert m.schedule_limit() == pytest.approx(d["schedule_limit_fraction"])


def test_metrics_derive_the_schedule_share_for_older_studies():
    m = Metrics.from_dict(_startup_heavy_metrics())
    assert m.schedule_limit() == pytest.approx(5 / 24)
    assert m.to_dict() == _startup_heavy_metrics()  # written back as read: no new key
    # a study that predates the schedule's fields: makespan and bound less the start-up
    old = Metrics.from_dict(dict(makespan_s=216.0, startup_s=192.0, lower_bound_s=197.0))
    assert old.schedule_limit() == pytest.approx(5 / 24)
    # one that predates start-up: no start-up on either side
    older = Metrics.from_dict(dict(makespan_s=24.0, lower_bound_s=5.0))
    assert older.schedule_limit() == pytest.approx(5 / 24)
    assert Metrics().schedule_limit() is None


def test_search_best_table_shows_the_schedules_share():
    from tuner.cli import search as cli_search

    m = Metrics.from_dict(_startup_heavy_metrics())
    assert cli_search._limit_cell(m) == "21%"  # not 91 %
    assert cli_search._limit_cell(Metrics()) == "—"
    assert "start-up" in cli_search.LIMIT_NOTE and "schedule" in cli_search.LIMIT_NOTE


def _report_ctx() -> dict:
    from tests.test_report import make_context

    ctx = make_context()
    for t in ctx["trials"]:
        if t["feasible"]:  # every winner's makespan mostly start-up
            m = t["metrics"]
            sched, sched_lb = m["makespan_s"], m["lower_bound_s"]
            m.update(startup_s=192.0, schedule_s=sched, schedule_lower_bound_s=sched_lb,
                     makespan_s=sched + 192.0, lower_bound_s=sched_lb + 192.0)
    from tests.test_report import with_winners
    return with_winners(ctx)


def test_report_limit_figures_are_the_schedules():
    from tests.test_report import render_html
    from tuner.reports.context import ReportContext
    from tuner.reports.views import view as build_view

    ctx = _report_ctx()
    view = build_view(ReportContext.from_dict(copy.deepcopy(ctx)))
    fastest = next(t for t in ctx["trials"] if t["number"] == ctx["winners"]["fastest"])
    m = fastest["metrics"]
    share, whole = (m["schedule_lower_bound_s"] / m["schedule_s"],
                    m["lower_bound_s"] / m["makespan_s"])
    assert f"{100 * share:.0f} %" != f"{100 * whole:.0f} %"  # the case tells them apart
    lim = view["fastest_limit"]
    assert lim["pct"] == f"{100 * share:.0f} %" and lim["whole_pct"] == f"{100 * whole:.0f} %"
    row = next(r for r in view["table"] if r["number"] == fastest["number"])
    assert row["limit"] == f"{100 * share:.0f} %"
    text = render_html(ctx)
    head = text[:text.index('<section id="pareto"')]
    assert re.search(rf"schedule of the fastest configuration .* reaches {100 * share:.0f} %",
                     head, re.S)
    assert "start-up adds 3.2 min on top" in " ".join(head.split())
    limit = text[text.index('<section id="limit"'):text.index('<section id="timeline"')]
    assert "predicted schedule" in limit and "start-up (on top)" in limit
    assert "start-up is left out of both" in text  # the best table's note says so


def test_simulate_prints_the_schedules_share(tmp_path):
    from typer.testing import CliRunner

    from tuner.cli.main import app

    p = tmp_path / "w.jsonl"
    p.write_text("".join(f'{{"prompt_tokens": {300 + 7 * i}, "output_tokens": 40}}\n'
                         for i in range(32)))
    base = ["simulate", "-w", str(p), "-m", "llama-3-8b", "-g", "A10"]
    r = CliRunner().invoke(app, [*base, "--json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    r = CliRunner().invoke(app, base, env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    text = " ".join(r.output.split())
    assert (f"schedule at {100 * d['schedule_limit_fraction']:.0f} % of its limit's speed"
            in text)
    assert f"{100 * d['limit_fraction']:.0f} %)" in text  # the whole-job figure kept beside


# ---- 2: the report's memory rows are simulate's ------------------------------------------------
def _offload_plan():
    m, g = get_model("llama-3-8b"), get_gpu("A10", GPUS)
    cfg = ServingConfig(gpu="A10", weight_offload_fraction=0.3)
    return cfg, plan_memory(m, g, cfg, engine_version="0.8.0")  # before UVA: the copy


def _simulate_table_rows(plan, reserve_note="vLLM's profile") -> dict[str, str]:
    from rich.console import Console

    from tuner.cli.simulate import _memory_table

    con = Console(width=200, record=True)
    con.print(_memory_table(plan, "A10", "Memory plan", reserve_note))
    rows = {}
    for line in con.export_text().splitlines():
        cells = [c.strip() for c in line.strip("│ ").split("│")]
        if len(cells) == 2 and cells[1]:
            rows[cells[0]] = cells[1]
    return rows


def test_report_memory_rows_match_simulates_table(monkeypatch):
    from tuner.reports import figures, views

    cfg, plan = _offload_plan()
    assert plan.weight_offload_scheme == "vllm-copy" and plan.offload_staging_bytes > 0
    rec = TrialRecord(number=1, config=cfg, feasible=True, memory=plan)
    monkeypatch.setattr(views, "_winner_roles", lambda ctx: [(1, ["overall fastest"])])
    rows = views._formatted_memory_rows(None, {1: rec})
    (row,) = rows
    # the runtime and the copy are no longer "free"
    used = sum(b for _, _, b in gpu_memory_items(plan))
    assert row["free"] == pytest.approx(plan.gpu_memory_bytes - used)
    assert row["free"] < plan.gpu_memory_bytes - plan.weight_bytes - plan.activation_bytes \
        - plan.kv_bytes - plan.runtime_overhead_bytes
    cols = figures.memory_columns(rows)
    sim = _simulate_table_rows(plan)
    # the same parts, in the same order, with the same labels and figures as simulate's
    sim_parts = [k for k in sim if k not in ("per GPU", "usable (memory x utilisation)",
                                             "KV capacity",
                                             "max concurrent requests (mean length)")]
    assert [label for _, label in cols] == sim_parts
    assert "runtime (non-torch memory, CUDA graphs)" in sim_parts
    assert "offloaded-layer copy (1 layer, each forward)" in sim_parts
    for key, label in cols:
        assert row["cells"][key] == sim[label]
    names = [t.name for t in figures.memory_figure(rows).data]
    assert names == ["weights", "activations", "runtime", "weight-offload buffers", "KV cache",
                     "free / reserved"]


@pytest.mark.parametrize("version, label", [("0.8.0", "offloaded-layer copy"),
                                            ("0.9.0", None)])
def test_offload_buffer_row_by_scheme(version, label):
    m, g = get_model("llama-3-8b"), get_gpu("A10", GPUS)
    cfg = ServingConfig(gpu="A10", weight_offload_fraction=0.3)
    plan = plan_memory(m, g, cfg, engine_version=version)
    keys = {k: lab for k, lab, _ in gpu_memory_items(plan)}
    if label is None:  # vLLM's UVA offload: kernels read host memory, no GPU buffer
        assert plan.weight_offload_scheme == "vllm-uva" and "offload_buffers" not in keys
    else:
        assert keys["offload_buffers"].startswith(label)
    # a streamed (prefetch) plan: layer-wise KV offload, which vLLM cannot run
    pre = plan_memory(m, g, ServingConfig(gpu="A10", weight_offload_fraction=0.3,
                                          kv_offload_layers=4), engine_version=version)
    assert pre.weight_offload_scheme == "prefetch"
    assert dict((k, lab) for k, lab, _ in gpu_memory_items(pre))["offload_buffers"] == \
        "streamed-weight buffers (2 layers)"


def test_report_memory_columns_where_labels_differ(monkeypatch):
    """Two winners of two offload schemes: one column, by its name, each cell its label."""
    from tuner.reports import figures, views

    m, g = get_model("llama-3-8b"), get_gpu("A10", GPUS)
    copy_cfg, copy_plan = _offload_plan()
    pre_cfg = ServingConfig(gpu="A10", weight_offload_fraction=0.3, kv_offload_layers=4)
    pre_plan = plan_memory(m, g, pre_cfg, engine_version="0.8.0")
    trials = {1: TrialRecord(number=1, config=copy_cfg, feasible=True, memory=copy_plan),
              2: TrialRecord(number=2, config=pre_cfg, feasible=True, memory=pre_plan)}
    monkeypatch.setattr(views, "_winner_roles",
                        lambda ctx: [(1, ["overall fastest"]), (2, ["overall cheapest"])])
    rows = views._formatted_memory_rows(None, trials)
    cols = dict(figures.memory_columns(rows))
    assert cols["offload_buffers"] == "weight-offload buffers"
    assert {r["cell_labels"]["offload_buffers"] for r in rows} == {
        "offloaded-layer copy (1 layer, each forward)", "streamed-weight buffers (2 layers)"}
