"""QA pass on the report's figures and the search's printed tables (stop 50): hover $ rounded as
the tables round it, the plan in the Pareto hover, mixes of GPU types on the report's front,
one cost-model line per engine, the terminal's and the report's $ figures alike, a front whose
makespans read apart, and a study name quoted in the report's export command."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tuner.core.config import ServingConfig
from tuner.core.units import fmt_duration, fmt_usd
from tuner.reports import html as report_html
from tuner.reports.context import ReportContext
from tuner.reports.views import fmt_usd_mtok

VLLM_PROV = {"kind": "transferred", "detail": "A40 kernels transferred; engine overhead: "
             "vllm-v1-offline (not fitted)", "error_pct": None}
SGLANG_PROV = {"kind": "transferred", "detail": "A40 kernels transferred; SGLang priced with "
               "vLLM's kernel tables; engine overhead: sglang-overlap (estimated, not fitted)",
               "error_pct": None, "engine": "sglang"}


def _trial(n: int, gpu: str, makespan_s: float, cost_usd: float, *, engine: str = "vllm",
           tp: int = 1, dp: int = 1) -> dict:
    cfg = ServingConfig(gpu=gpu, engine=engine, tp=tp, dp=dp).to_dict()
    return dict(number=n, config=cfg, feasible=True, reason="",
                provenance=SGLANG_PROV if engine == "sglang" else VLLM_PROV,
                metrics=dict(makespan_s=makespan_s, cost_usd=cost_usd,
                             usd_per_1k_requests=cost_usd * 2.5, usd_per_million_tokens=15.4512,
                             qps_per_usd_per_h=0.0155, lower_bound_s=0.5 * makespan_s),
                memory=None)


def _context(fleets: list[dict] | None = None, study: str = "s") -> dict:
    # costs below a dime that 2 decimals would all read "$0.04"; trial 3 a mix beats
    trials = [_trial(0, "A40", 300.0, 0.0366), _trial(1, "A40", 318.0, 0.0391),
              _trial(2, "A40", 67.7, 0.1323, engine="sglang", tp=2, dp=8),
              _trial(3, "A10", 130.0, 0.30, engine="sglang", dp=4)]
    gpu = {"price_usd_per_h": 0.44, "price_source": "test price", "price_date": "2026-08",
           "memory_gib": 44.0, "cost_model": VLLM_PROV}
    return dict(
        title="t", question="q", generated_at="2026-11-29T00:00:00+00:00", tool_version="0.1.0",
        study=study,
        workload=dict(source="w.jsonl", requests=400, tokenizer="estimate",
                      output_source="max_tokens", prompt_tokens=[100] * 4, output_tokens=[50] * 4),
        model=dict(name="llama-3-8b", num_params=8_030_000_000),
        gpus={"A40": gpu, "A10": dict(gpu, memory_gib=22.0)},
        trials=trials, pareto=[2, 3, 0], winners=dict(fastest=2, cheapest=0),
        best_per_gpu={"A40": dict(fastest=2, cheapest=0), "A10": dict(fastest=3, cheapest=3)},
        exports=dict(fastest_engine_config="a: 1", cheapest_engine_config="b: 2"),
        fleets=fleets)


MIX = {"makespan_s": 120.0, "cost_usd": 0.25, "description": "4 x A10 (TP 1 x DP 4) + 1 x A40",
       "finish_spread": 0.01, "meets_constraints": True,
       "parts": [{"gpu": "A10", "count": 4, "tp": 1, "dp": 4, "requests": 200, "makespan_s": 119.0,
                  "cost_usd": 0.2},
                 {"gpu": "A40", "count": 1, "tp": 1, "dp": 1, "requests": 200,
                  "makespan_s": 120.0, "cost_usd": 0.05}]}


def _render(ctx: dict) -> tuple[str, dict]:
    text = report_html.render_html(ReportContext.from_dict(ctx))
    figs = {name: json.loads(body) for name, body in re.findall(
        r'<script type="application/json" id="data-(\w+)">(.*?)</script>', text, re.S)}
    return text, figs


def test_pareto_hover_shows_the_tables_cents_and_the_plan():
    _, figs = _render(_context())
    traces = [t for t in figs["pareto"]["data"] if t.get("hovertemplate")]
    for t in traces:
        # 2 decimals read $0.0366 and $0.0391 both as "$0.04"
        assert ".2f" not in t["hovertemplate"] and ",.4f" in t["hovertemplate"]
    by_trial = {cd[1]: cd for t in traces for cd in t["customdata"]}
    assert by_trial[2][2] == "16 x A40 (SGLang, TP 2 x DP 8, 16-bit)"  # count, TP x DP, engine
    assert by_trial[0][2] == "1 x A40 (TP 1 x DP 1, 16-bit)"
    for name in ("deadline", "slices"):
        for t in figs[name]["data"]:
            assert ".2f}" not in t["hovertemplate"] and ",.4f}" in t["hovertemplate"]


def test_hover_keeps_two_decimals_above_a_dollar():
    ctx = _context()
    for t in ctx["trials"]:
        t["metrics"]["cost_usd"] *= 100
    _, figs = _render(ctx)
    assert all(",.2f" in t["hovertemplate"] for t in figs["pareto"]["data"]
               if t.get("hovertemplate"))


def test_mixes_are_on_the_reports_front_as_the_terminal_prints_it():
    text, figs = _render(_context([MIX]))
    mix = [t for t in figs["pareto"]["data"] if t.get("name") == "mix of GPU types"]
    assert len(mix) == 1 and mix[0]["x"] == [pytest.approx(120.0 / 60)]
    assert mix[0]["y"] == [0.25]
    # trial 3 (130 s, $0.30) is beaten by the mix (120 s, $0.25): no longer bold
    bold = {cd[1] for t in figs["pareto"]["data"] if t.get("marker", {}).get("opacity") == 1.0
            for cd in t["customdata"]}
    assert bold == {0, 2}
    line = next(t for t in figs["pareto"]["data"] if t.get("name") == "Pareto front")
    assert [round(x * 60, 1) for x in line["x"]] == [67.7, 120.0, 300.0]
    assert "bold dots are the 2 on the Pareto front" in text
    assert "grey diamonds the 1 mix of GPU types" in text
    text, _ = _render(_context())
    assert "bold dots are the 3 on the Pareto front" in text and "diamonds" not in text


def test_provenance_names_each_engines_cost_model():
    text, _ = _render(_context())
    # each engine's winners, trial named (stop 53: the rows had described a first trial)
    assert "SGLang, fastest and cheapest (trial #2): A40 kernels transferred; SGLang priced " \
           "with vLLM&#39;s kernel tables; engine overhead: sglang-overlap (estimated, not " \
           "fitted)" in text
    assert "vLLM, fastest and cheapest (trial #0): A40 kernels transferred; engine overhead: " \
           "vllm-v1-offline" in text
    # one engine on a GPU: the plain line, as before
    ctx = _context()
    ctx["trials"] = [t for t in ctx["trials"] if t["config"]["engine"] == "vllm"]
    ctx.update(pareto=[0], winners=dict(fastest=0, cheapest=0),
               best_per_gpu={"A40": dict(fastest=0, cheapest=0)})
    text, _ = _render(ctx)
    assert "<div>fastest and cheapest (trial #0): A40 kernels transferred; engine overhead" \
        in text and "vLLM, fastest" not in text


def test_per_token_and_ratio_figures_round_as_the_terminal():
    from tuner.reports.views import fmt_sig

    text, _ = _render(_context())
    assert "$15.45" in text and "$15.5<" not in text  # the terminal's $/1M tok reads $15.45
    assert fmt_usd_mtok(15.4512) == fmt_usd(15.4512) == "$15.45"
    assert fmt_usd_mtok(0.11236) == "$0.1124" and fmt_usd_mtok(None) == "—"
    assert fmt_sig(0.0155) == "0.0155" and fmt_sig(0.0079) == "0.0079"  # not "0.02"
    assert fmt_sig(1234.5) == "1,234" or fmt_sig(1234.5) == "1,235"
    assert fmt_sig(float("nan")) == "—"


def test_export_command_quotes_the_study_name():
    text, _ = _render(_context(study="my study; rm"))
    assert "tuner export --study &#39;my study; rm&#39; --out DIR" in text


def test_front_rows_read_apart():
    from tuner.cli.search import distinct_durations

    # the front of `tuner search -m qwen3-30b-a3b --gpus H100,A100-80G`: three rows read
    # "1.2 min" over falling $, as if each were beaten by the next
    front = [71.71, 72.82, 74.91, 82.16]
    assert [fmt_duration(s) for s in front[:3]] == ["1.2 min"] * 3
    assert distinct_durations(front) == ["1.20 min", "1.21 min", "1.25 min", "1.4 min"]
    assert distinct_durations([126.4, 127.2]) == ["2.11 min", "2.12 min"]
    assert distinct_durations([43.0, 43.0]) == ["43 s", "43 s"]  # equal values stay as they are
    assert distinct_durations([]) == []


@settings(derandomize=True, max_examples=200, deadline=None)
@given(st.lists(st.floats(min_value=0.5, max_value=5e5, allow_nan=False), min_size=1,
                max_size=8))
def test_distinct_durations_keep_the_order_they_show(values):
    from tuner.cli.search import distinct_durations

    values = sorted(values)
    out = distinct_durations(values)
    assert len(out) == len(values)
    div = {"s": 1.0, "min": 60.0, "h": 3600.0, "d": 86400.0}
    for a, b, sa, sb in zip(values, values[1:], out, out[1:], strict=False):
        if sa == sb:  # still one text: equal, or too close to part at 4 decimals of the unit
            assert b - a <= 1e-4 * div[sa.split()[1]] * (1 + 1e-9)
        elif sa.split()[1] == sb.split()[1]:  # same unit: the numbers shown ascend
            assert float(sa.split()[0]) <= float(sb.split()[0])
