"""tuner.reports.html: one self-contained, escaped, atomically written HTML report."""

from __future__ import annotations

import copy
import html
import json
import math
import os
import random
import re
import shutil
import subprocess
from pathlib import Path

import plotly.offline
import pytest

import tuner.reports.figures as report_figures
from tuner.core.catalog import GPU, ModelSpec
from tuner.core.config import ServingConfig
from tuner.core.errors import TunerError
from tuner.core.units import duration_unit, fmt_duration
from tuner.exports import EXPORT_FORMATS, parse_export, render_export, to_vllm_yaml
from tuner.reports import html as report_html
from tuner.reports.context import ReportContext

GIB = 1024**3


def render_html(ctx) -> str:
    return report_html.render_html(ReportContext.from_dict(ctx))


def render_report(ctx, out):
    return report_html.render_report(ReportContext.from_dict(ctx), out)
LLAMA = ModelSpec(
    name="llama-3-8b", num_layers=32, hidden_size=4096, num_heads=32, num_kv_heads=8,
    head_dim=128, intermediate_size=14336, vocab_size=128256, max_position=8192,
    hf_id="meta-llama/Meta-Llama-3-8B-Instruct",
)


def _gpu(name: str, memory_gib: float, price: float) -> GPU:
    return GPU(
        name=name, memory_gib=memory_gib, bf16_tflops=125.0, fp32_tflops=31.0, hbm_gbps=600.0,
        pcie_gen=4, host_link_gbps=25.0, host_ram_gib=64.0, cpu_cores=8, tdp_w=150.0,
        price_usd_per_h=price, price_source="example cloud list price", price_date="2025-01-15",
    )


GPUS = {"A10": _gpu("A10", 24.0, 0.75), "A40": _gpu("A40", 48.0, 1.28)}


def _pareto(trials: list[dict]) -> list[int]:
    feas = sorted((t for t in trials if t["feasible"]),
                  key=lambda t: (t["metrics"]["makespan_s"], t["metrics"]["cost_usd"]))
    front, best_cost = [], float("inf")
    for t in feas:
        if t["metrics"]["cost_usd"] < best_cost:
            front.append(t["number"])
            best_cost = t["metrics"]["cost_usd"]
    return front


def make_context(n_trials: int = 20, seed: int = 0) -> dict:
    """2 GPUs, n_trials trials (some infeasible), winners and Pareto front computed here."""
    rng = random.Random(seed)
    requests = 2000
    prompt = [int(rng.lognormvariate(7.0, 0.6)) + 16 for _ in range(requests)]
    output = [int(rng.lognormvariate(5.5, 0.5)) + 8 for _ in range(requests)]
    trials = []
    for n in range(n_trials):
        gpu = GPUS["A10" if n % 2 == 0 else "A40"]
        cfg = ServingConfig(
            gpu=gpu.name, tp=rng.choice([1, 2]), chunk_size=rng.choice([512, 1024, 2048, 4096]),
            max_running=rng.choice([32, 64, 128, 256]), weight_bits=rng.choice([8, 16]),
            kv_bits=rng.choice([8, 16]), scheduler=rng.choice(["vllm", "sarathi", "vllm-v0"]),
        )
        if n % 7 == 3:
            trials.append(dict(number=n, config=cfg.to_dict(), feasible=False,
                               reason="model does not fit: weights + activations > usable memory",
                               metrics=None, memory=None))
            continue
        if n % 7 == 5:
            trials.append(dict(number=n, config=cfg.to_dict(), feasible=False,
                               reason="host memory exceeded", metrics=None, memory=None))
            continue
        speed = (1.0 if gpu.name == "A10" else 1.9) * cfg.tp ** 0.8 * rng.uniform(0.6, 1.0)
        makespan = 9000.0 / speed
        cost = makespan / 3600 * gpu.price_usd_per_h * cfg.num_gpus
        mem_total = gpu.memory_bytes
        weights = LLAMA.weight_bytes(cfg.weight_bits) / cfg.tp
        acts = 0.8 * GIB
        kv = mem_total * 0.9 - weights - acts - GIB
        kv_tokens = int(kv / LLAMA.kv_bytes_per_token(cfg.kv_bits) * cfg.tp)
        trials.append(dict(
            number=n, config=cfg.to_dict(), feasible=True, reason="",
            metrics=dict(
                makespan_s=makespan, cost_usd=cost, usd_per_1k_requests=cost / requests * 1000,
                qps=requests / makespan,
                qps_per_usd_per_h=requests / makespan / (gpu.price_usd_per_h * cfg.num_gpus),
                throughput_tok_s=(sum(prompt) + sum(output)) / makespan,
                preemptions=rng.randint(0, 40), peak_kv_fraction=rng.uniform(0.5, 1.0),
                kv_capacity_tokens=kv_tokens, max_concurrent_requests=kv_tokens / 1400,
                lower_bound_s=makespan * rng.uniform(0.3, 0.8),
            ),
            memory=dict(gpu_memory_bytes=mem_total, usable_bytes=mem_total * 0.9,
                        weight_bytes=weights, activation_bytes=acts, kv_bytes=kv,
                        kv_capacity_tokens=kv_tokens, max_concurrent_requests=kv_tokens / 1400),
        ))
    return with_winners({
        "title": "tuner report: arxiv.jsonl on llama-3-8b",
        "question": "Which GPU and settings finish arxiv.jsonl fastest or cheapest?",
        "generated_at": "2025-01-15T12:00:00+00:00",
        "tool_version": "0.1.0",
        "workload": {"source": "examples/arxiv.jsonl", "requests": requests,
                     "tokenizer": "meta-llama/Meta-Llama-3-8B-Instruct tokenizer",
                     "output_source": "max_tokens", "prompt_tokens": prompt,
                     "output_tokens": output},
        "model": {"name": LLAMA.name, "num_params": LLAMA.num_params, "hf_id": LLAMA.hf_id},
        "gpus": {name: {"price_usd_per_h": g.price_usd_per_h, "price_source": g.price_source,
                        "price_date": g.price_date, "memory_gib": g.memory_gib,
                        "cost_model": "roofline from spec sheet (not measured)"}
                 for name, g in GPUS.items()},
        "trials": trials,
        "notes": ["Output lengths assumed equal to max_tokens."],
    })


def with_winners(ctx: dict) -> dict:
    """The Pareto front, winners, best per GPU and winners' YAML of ctx's trials, set in ctx."""
    trials = ctx["trials"]
    feas = [t for t in trials if t["feasible"]]
    fastest = min(feas, key=lambda t: t["metrics"]["makespan_s"])
    cheapest = min(feas, key=lambda t: t["metrics"]["cost_usd"])
    best_per_gpu = {}
    for name in GPUS:
        ts = [t for t in feas if t["config"]["gpu"] == name]
        if ts:
            best_per_gpu[name] = {
                "fastest": min(ts, key=lambda t: t["metrics"]["makespan_s"])["number"],
                "cheapest": min(ts, key=lambda t: t["metrics"]["cost_usd"])["number"],
            }

    def export(t: dict) -> str:
        cfg = ServingConfig.from_dict(t["config"])
        m = t["metrics"]
        header = f"predicted makespan {m['makespan_s'] / 3600:.2f} h, job ${m['cost_usd']:.2f}"
        return to_vllm_yaml(cfg, LLAMA, GPUS[cfg.gpu], max_model_len=8192, header=header)

    ctx.update(
        pareto=_pareto(trials),
        winners={"fastest": fastest["number"], "cheapest": cheapest["number"]},
        best_per_gpu=best_per_gpu,
        exports={"fastest_engine_config": export(fastest), "cheapest_engine_config": export(cheapest)})
    return ctx


def add_extras(ctx: dict, seed: int = 1) -> dict:
    """The keys reports.context.report_extras adds: timelines, importances, every export
    format of the winners, a validation list; plus the study name and predictor CV error."""
    rng = random.Random(seed)
    ctx = copy.deepcopy(ctx)
    trials = {t["number"]: t for t in ctx["trials"]}
    roles: dict[int, list[str]] = {}
    for k in ("fastest", "cheapest"):
        roles.setdefault(ctx["winners"][k], []).append(f"overall {k}")
    for gpu, d in ctx["best_per_gpu"].items():
        for k in ("fastest", "cheapest"):
            roles.setdefault(d[k], []).append(f"{gpu} {k}")
    timelines = []
    for num, rs in roles.items():
        ms = trials[num]["metrics"]["makespan_s"]
        n = 300
        time_s = [ms * (i + 1) / n for i in range(n)]
        running = [min(128, 2 * i) if i < 250 else max(0, 128 - 3 * (i - 250)) for i in range(n)]
        timelines.append(dict(
            trial=num, roles=rs, gpu=trials[num]["config"]["gpu"], study_makespan_s=ms,
            makespan_s=ms, dp=1, iterations=5000, time_s=time_s, running=running,
            tokens=[r * 3.0 for r in running],
            kv_fraction=[min(1.0, r / 110) for r in running],
            preemptions=[1 if rng.random() < 0.03 else 0 for _ in range(n)]))
    ctx["timelines"] = timelines
    ctx["study"] = "arxiv-llama-3-8b"
    ctx["importances"] = {
        "makespan_s": {"importances": {"gpu": 0.55, "chunk_size": 0.2, "max_running": 0.15,
                                       "weight_bits": 0.07, "kv_bits": 0.03},
                       "n_trials": 14, "method": "fANOVA (test)"},
        "cost_usd": {"importances": {"gpu": 0.8, "chunk_size": 0.1, "max_running": 0.05,
                                     "weight_bits": 0.03, "kv_bits": 0.02},
                     "n_trials": 14, "method": "fANOVA (test)"},
    }
    snippets = {}
    for which in ("fastest", "cheapest"):
        t = trials[ctx["winners"][which]]
        cfg = ServingConfig.from_dict(t["config"])
        snippets[which] = {"trial": t["number"], "formats": {
            fmt: render_export(fmt, cfg, LLAMA, GPUS[cfg.gpu], max_model_len=8192,
                               header=f"{which} (trial #{t['number']})", metrics=t["metrics"],
                               input_path="examples/arxiv.jsonl")
            for fmt in EXPORT_FORMATS}}
    ctx["export_snippets"] = snippets
    f = trials[ctx["winners"]["fastest"]]
    ctx["validation"] = [
        {"config": f["config"], "trial": f["number"], "runner": "vllm",
         "predicted_s": f["metrics"]["makespan_s"], "measured_s": f["metrics"]["makespan_s"] * 1.1},
        {"config": trials[ctx["winners"]["cheapest"]]["config"], "runner": "transformers",
         "predicted_s": 120.0, "measured_s": 100.0, "notes": ["tiny model on CPU"],
         "measured_device": "cpu", "predicted_calibrated_s": 104.0},
    ]
    ctx["gpus"]["A10"].update(cv_error=0.083, cv_metric="MAPE, 5-fold", measured=True,
                              cost_model="fitted on a profile of A10 (measured)")
    return ctx


def _strip_scripts(text: str) -> str:
    return re.sub(r"<script\b[^>]*>.*?</script>", "<script></script>", text, flags=re.S | re.I)


@pytest.fixture(scope="module")
def ctx() -> dict:
    return make_context()


@pytest.fixture(scope="module")
def rendered(ctx, tmp_path_factory) -> tuple[Path, str]:
    out = tmp_path_factory.mktemp("report") / "report.html"
    path = render_report(ctx, out)
    return path, path.read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def full_ctx(ctx) -> dict:
    return add_extras(ctx)


@pytest.fixture(scope="module")
def full(full_ctx, tmp_path_factory) -> tuple[Path, str]:
    out = tmp_path_factory.mktemp("full") / "report.html"
    path = render_report(full_ctx, out)
    return path, path.read_text(encoding="utf-8")


def _figures(text: str) -> dict[str, dict]:
    return {k: json.loads(v) for k, v in re.findall(
        r'<script type="application/json" id="data-(\w+)">(.*?)</script>', text, re.S)}


def test_single_self_contained_file(rendered):
    path, text = rendered
    assert sorted(p.name for p in path.parent.iterdir()) == ["report.html"]
    assert text.lstrip().lower().startswith("<!doctype html>")
    bundle = plotly.offline.get_plotlyjs()
    assert bundle[:2000] in text and bundle[-2000:] in text  # plotly.js inlined
    assert not re.search(r"<script[^>]*\bsrc\s*=", text, re.I)
    assert not re.search(r"<link\b", text, re.I)
    markup = _strip_scripts(text)
    assert not re.search(r"\b(?:src|href)\s*=\s*[\"']?\s*(?:[a-z][a-z0-9+.-]*:|//)", markup, re.I)
    assert "http://" not in markup and "https://" not in markup
    assert "@import" not in markup and "url(" not in markup


def test_headline_names_winners(ctx, rendered):
    _, text = rendered
    trials = {t["number"]: t for t in ctx["trials"]}
    fast = trials[ctx["winners"]["fastest"]]
    cheap = trials[ctx["winners"]["cheapest"]]
    def label(t: dict) -> str:
        n = t["config"]["tp"] * t["config"]["dp"]
        return f"{n} × {t['config']['gpu']}" if n > 1 else t["config"]["gpu"]

    assert f"Fastest: {label(fast)}</strong>" in text  # the GPU type and how many
    assert f"Cheapest: {label(cheap)}</strong>" in text
    assert f"trial #{fast['number']}:" in text and f"trial #{cheap['number']}:" in text
    assert fmt_duration(fast["metrics"]["makespan_s"]) in text
    headline = text[text.index('id="headline"'):text.index('id="pareto"')]
    for name in ctx["gpus"]:
        assert f"<strong>{name}</strong>" in headline


def test_sections_in_order(rendered, full):
    ids = ["headline", "pareto", "best", "limit", "timeline", "sensitivity", "memory", "workload",
           "provenance", "export"]
    positions = [rendered[1].index(f'<section id="{i}"') for i in ids]
    assert positions == sorted(positions)
    assert '<section id="validation"' not in rendered[1]  # only when the context has runs
    ids.insert(ids.index("provenance"), "validation")
    positions = [full[1].index(f'<section id="{i}"') for i in ids]
    assert positions == sorted(positions)


def test_figures_embedded_as_json(ctx, rendered):
    _, text = rendered
    figs = _figures(text)
    # without report_extras: what the trials alone give
    assert set(figs) == {"pareto", "deadline", "limit", "slices", "memory", "workload"}
    for name in figs:
        assert f'id="fig-{name}"' in text
    pareto = figs["pareto"]
    names = {tr.get("name") for tr in pareto["data"]}
    assert {"A10", "A40", "Pareto front"} <= names
    hover = next(tr["hovertemplate"] for tr in pareto["data"] if "hovertemplate" in tr)
    for field in ("chunk_size", "max_running", "weight_bits", "kv_bits", "tp", "scheduler"):
        assert field in hover
    assert pareto["layout"]["paper_bgcolor"] == "rgba(0,0,0,0)"
    bold = [tr for tr in pareto["data"] if tr.get("marker", {}).get("opacity") == 1.0]
    assert sum(len(tr["x"]) for tr in bold) == len(ctx["pareto"])
    memory = figs["memory"]
    assert [tr["name"] for tr in memory["data"]] == ["weights", "activations", "KV cache",
                                                     "free / reserved"]


def test_tables_and_provenance(ctx, rendered):
    _, text = rendered
    assert "of physical limit" in text
    assert "roofline from spec sheet (not measured)" in text
    assert "example cloud list price" in text and "2025-01-15" in text
    n_bad = sum(not t["feasible"] for t in ctx["trials"])
    assert f"{n_bad} infeasible" in text
    assert "host memory exceeded" in text
    assert "tuner 0.1.0" in text
    assert "meta-llama/Meta-Llama-3-8B-Instruct tokenizer" in text
    assert "tensor-parallel-size:" in text  # export snippet
    assert "prefers-color-scheme: dark" in text and "@media print" in text


def test_user_strings_are_escaped(ctx, tmp_path):
    evil = '<script>alert("x")</script>'
    c = copy.deepcopy(ctx)
    c["workload"]["source"] = evil
    c["title"] = evil
    c["notes"] = [evil]
    c["trials"][3]["reason"] = evil
    c["exports"]["fastest_engine_config"] = "# " + evil
    c["model"]["name"] = "</script><script>alert(1)</script>"
    text = render_report(c, tmp_path / "r.html").read_text()
    assert evil not in text
    assert "alert(1)</script>" not in text
    assert "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;" in text


def test_gpu_name_cannot_break_out_of_figure_json(ctx, tmp_path):
    c = copy.deepcopy(ctx)
    evil = "A10</script><script>alert(1)//"
    c["gpus"][evil] = c["gpus"].pop("A10")
    c["best_per_gpu"][evil] = c["best_per_gpu"].pop("A10")
    for t in c["trials"]:
        if t["config"]["gpu"] == "A10":
            t["config"]["gpu"] = evil
    text = render_report(c, tmp_path / "r.html").read_text()
    assert "</script><script>alert(1)" not in text


@pytest.mark.parametrize("path", [
    ("title",), ("trials",), ("workload",), ("workload", "tokenizer"),
    ("workload", "prompt_tokens"), ("model", "num_params"), ("winners", "fastest"),
    ("exports", "cheapest_engine_config"), ("gpus", "A10", "price_source"),
])
def test_missing_key_raises_tuner_error(ctx, tmp_path, path):
    c = copy.deepcopy(ctx)
    d = c
    for key in path[:-1]:
        d = d[key]
    del d[path[-1]]
    out = tmp_path / "r.html"
    with pytest.raises(TunerError, match=re.escape(".".join(path))):
        render_report(c, out)
    assert not out.exists()


def test_bad_references_raise_tuner_error(ctx):
    c = copy.deepcopy(ctx)
    c["winners"]["fastest"] = 999
    with pytest.raises(TunerError, match="999"):
        render_html(c)
    c = copy.deepcopy(ctx)
    bad = next(t["number"] for t in c["trials"] if not t["feasible"])
    c["pareto"] = [bad]
    with pytest.raises(TunerError, match="infeasible"):
        render_html(c)
    with pytest.raises(TunerError):
        render_html(["not", "a", "dict"])


def test_failed_render_leaves_no_file(ctx, tmp_path, monkeypatch):
    def boom(*_a, **_k):
        raise RuntimeError("plot failed")

    monkeypatch.setattr(report_figures, "workload_figure", boom)
    out = tmp_path / "r.html"
    with pytest.raises(RuntimeError):
        render_report(ctx, out)
    assert list(tmp_path.iterdir()) == []


def test_failed_write_keeps_old_file_and_no_temp(ctx, tmp_path, monkeypatch):
    out = tmp_path / "r.html"
    out.write_text("old report")

    def boom(*_a, **_k):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError):
        render_report(ctx, out)
    assert out.read_text() == "old report"
    assert [p.name for p in tmp_path.iterdir()] == ["r.html"]


def test_no_feasible_trial(ctx, tmp_path):
    c = copy.deepcopy(ctx)
    for t in c["trials"]:
        t.update(feasible=False, metrics=None, memory=None, reason=t["reason"] or "does not fit")
    c.update(pareto=[], winners={"fastest": None, "cheapest": None}, best_per_gpu={})
    text = render_report(c, tmp_path / "r.html").read_text()
    assert "No feasible configuration" in text
    assert 'id="data-pareto"' not in text


def test_same_winner_and_optional_fields(ctx, tmp_path):
    c = copy.deepcopy(ctx)
    c["winners"]["cheapest"] = c["winners"]["fastest"]
    c["exports"]["cheapest_engine_config"] = c["exports"]["fastest_engine_config"]
    del c["notes"]
    del c["model"]["hf_id"]
    for t in c["trials"]:
        if t["metrics"]:
            t["metrics"]["lower_bound_s"] = None
            t["metrics"].pop("preemptions")
    text = render_report(c, tmp_path / "r.html").read_text()
    assert "Fastest and cheapest:" in text
    assert text.count('<pre id="yaml-') == 1


def test_duration_units():
    assert duration_unit(30) == ("s", 1.0)
    assert duration_unit(600)[0] == "min"
    assert duration_unit(1.8 * 3600)[0] == "h"
    assert duration_unit(5 * 86400)[0] == "d"
    assert fmt_duration(1.8 * 3600) == "1.8 h"
    assert fmt_duration(None) == "—"


def test_extras_figures_and_traceability(full_ctx, full):
    _, text = full
    figs = _figures(text)
    assert set(figs) == {"pareto", "deadline", "limit", "timeline", "importance", "slices",
                         "memory", "workload", "validation"}
    trials = {t["number"]: t for t in full_ctx["trials"]}
    # timeline: one legend entry per winner, named by trial number, GPU and role
    names = {tr["name"] for tr in figs["timeline"]["data"] if tr.get("showlegend") is not False}
    assert names == {f"#{t['trial']} {t['gpu']} ({t['roles'][0]})"
                     for t in full_ctx["timelines"]}
    assert len(figs["timeline"]["data"]) == 3 * len(full_ctx["timelines"])
    # slices: best makespan per value per GPU, each point carries its trial number
    feas = [t for t in full_ctx["trials"] if t["feasible"]]
    knobs = [a["text"] for a in figs["slices"]["layout"]["annotations"]]
    assert set(knobs) == {"chunk_size", "max_running", "weight_bits", "kv_bits", "tp",
                          "scheduler"}
    for tr in figs["slices"]["data"]:
        axis = tr.get("xaxis", "x")
        knob = knobs[int(axis[1:] or 1) - 1]
        for x, y, (num, cost, n) in zip(tr["x"], tr["y"], tr["customdata"], strict=True):
            t = trials[num]
            assert t["config"]["gpu"] == tr["name"] and t["metrics"]["cost_usd"] == cost
            assert str(t["config"][knob]) == x
            same = [u for u in feas if u["config"]["gpu"] == tr["name"]
                    and str(u["config"][knob]) == x]
            assert min(u["metrics"]["makespan_s"] for u in same) == pytest.approx(
                t["metrics"]["makespan_s"]) and n >= 1
            assert y > 0
        assert "%{text}" in tr["hovertemplate"]  # "trial #N" (or an engine's defaults)
        assert all(s.startswith("trial #") for s in tr["text"])
    # importances: both objectives, every knob
    imp = figs["importance"]["data"]
    assert len(imp) == 2 and set(imp[0]["y"]) == set(full_ctx["importances"]["makespan_s"]
                                                         ["importances"])
    # physical limit: T_o and makespan per winner, labelled with trial numbers
    labels = figs["limit"]["data"][0]["y"]
    assert all(label.startswith("#") for label in labels)
    assert "% of the limit" in figs["limit"]["data"][1]["text"][0]
    # validation: predicted vs measured points
    assert sum(len(tr["x"]) for tr in figs["validation"]["data"][1:]) == 2


def test_extras_sections_text(full_ctx, full):
    _, text = full
    sens = text[text.index('<section id="sensitivity"'):text.index('<section id="memory"')]
    assert "14 distinct feasible trials" in sens and "fANOVA (test)" in sens
    assert "55 %" in sens  # gpu's share of makespan variance in the table
    limit = text[text.index('<section id="limit"'):text.index('<section id="timeline"')]
    f = next(t for t in full_ctx["trials"] if t["number"] == full_ctx["winners"]["fastest"])
    share = f["metrics"]["lower_bound_s"] / f["metrics"]["makespan_s"]
    assert f"{100 * share:.0f} %" in limit and f"#{f['number']}" in limit
    assert "reaches" in text[:text.index('<section id="pareto"')]  # headline: share of limit
    val = text[text.index('<section id="validation"'):text.index('<section id="provenance"')]
    assert "-9 %" in val and "+20 %" in val  # (pred - meas) / meas
    assert "tiny model on CPU" in val and "transformers on cpu" in val
    assert "calibrated prediction" in val and "+4 %" in val
    prov = text[text.index('<section id="provenance"'):text.index('<section id="export"')]
    assert "8.3 %" in prov and "MAPE, 5-fold" in prov
    assert "measured (profiled)" in prov and "spec-derived (not measured)" in prov
    assert "Optuna study <strong>arxiv-llama-3-8b</strong>" in text
    timeline = text[text.index('<section id="timeline"'):text.index('<section id="sensitivity"')]
    for t in full_ctx["timelines"]:
        assert f"#{t['trial']} {t['gpu']}" in timeline


def test_export_snippets_every_format_parses_back(full_ctx, full):
    _, text = full
    exp = text[text.index('<section id="export"'):]
    for which in ("fastest", "cheapest"):
        snip = full_ctx["export_snippets"][which]
        cfg = ServingConfig.from_dict(
            next(t for t in full_ctx["trials"] if t["number"] == snip["trial"])["config"])
        for fmt in EXPORT_FORMATS:
            m = re.search(rf'<pre id="export-{which}-{re.sub("[^a-z0-9]+", "-", fmt)}">(.*?)</pre>',
                          exp, re.S)
            assert m, (which, fmt)
            shown = html.unescape(m.group(1))
            assert shown == snip["formats"][fmt]
            assert parse_export(fmt, shown) == cfg
    assert exp.count("<details") == 2 * len(EXPORT_FORMATS)


def test_timeline_mismatch_and_error_are_shown(full_ctx, tmp_path):
    c = copy.deepcopy(full_ctx)
    c["timelines"][0]["makespan_s"] = c["timelines"][0]["study_makespan_s"] * 1.05
    c["timelines"].append({"trial": c["timelines"][0]["trial"], "roles": ["x"], "gpu": "A10",
                           "error": "model does not fit"})
    text = render_report(c, tmp_path / "r.html").read_text()
    assert "+5.0 %" in text and "could not be simulated again (model does not fit)" in text


def test_a_data_parallel_winners_timeline_is_replica_0s(full_ctx, tmp_path):
    """A dp plan's timeline is replica 0 simulated again (reports.extras.winner_timelines):
    no whole-plan makespan to check against the study's, and the report says which replica."""
    c = copy.deepcopy(full_ctx)
    t = c["timelines"][0]
    t["dp"] = 8
    t["replica_makespan_s"] = t.pop("makespan_s") * 0.99
    text = render_report(c, tmp_path / "r.html").read_text()
    assert "replica 1 of 8 shown" in text
    assert "re-simulated makespan" not in text.split("replica 1 of 8")[0][-300:]


def test_importances_skipped_says_why(full_ctx, tmp_path):
    c = copy.deepcopy(full_ctx)
    c["importances"] = {"makespan_s": {"skipped": "only 3 distinct feasible trial(s)"},
                        "cost_usd": {"skipped": "only 3 distinct feasible trial(s)"}}
    text = render_report(c, tmp_path / "r.html").read_text()
    assert 'id="data-importance"' not in text
    assert "Importances not computed for makespan: only 3 distinct feasible trial(s)" in text


@pytest.mark.parametrize("key, value, needle", [
    ("timelines", {"not": "a list"}, "timelines"),
    ("timelines", [{"trial": 1, "time_s": [1.0]}], "timelines[0].running"),
    ("validation", [{"config": {"gpu": "A10"}, "predicted_s": 1.0}], "validation[0].measured_s"),
    ("validation", [{"predicted_s": 1.0, "measured_s": 2.0}], "validation[0].config"),
    ("importances", ["x"], "importances"),
])
def test_malformed_optional_keys_raise_tuner_error(full_ctx, key, value, needle):
    c = copy.deepcopy(full_ctx)
    c[key] = value
    with pytest.raises(TunerError, match=re.escape(needle)):
        render_html(c)


def test_single_knob_no_slices(ctx, tmp_path):
    c = copy.deepcopy(ctx)
    for t in c["trials"]:  # every trial the same settings but the GPU
        t["config"] = dict(ServingConfig(gpu=t["config"]["gpu"]).to_dict())
    text = render_report(c, tmp_path / "r.html").read_text()
    assert 'id="data-slices"' not in text
    assert "No knob took more than one value" in text


# ---- in a real browser ----------------------------------------------------------------------

CHROMIUM_FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run", "--hide-scrollbars",
    "--mute-audio", "--virtual-time-budget=15000",
    # offline: any attempt to reach a host fails, and so shows up as an error below
    "--host-resolver-rules=MAP * ~NOTFOUND",
]
# Injected first into <head>: records uncaught errors, failed loads, rejected promises and
# console.error calls, and writes them into the DOM after load, so --dump-dom shows them.
ERROR_HOOK = """<script>
window.__tunerErrors = [];
window.addEventListener("error", function (e) {
  var t = e.target && (e.target.src || e.target.href);
  window.__tunerErrors.push("error: " + (e.message || ("failed to load " + t)));
}, true);
window.addEventListener("unhandledrejection", function (e) {
  window.__tunerErrors.push("unhandled rejection: " + e.reason);
});
(function () {
  var orig = console.error;
  console.error = function () {
    window.__tunerErrors.push("console.error: " + Array.prototype.join.call(arguments, " "));
    return orig.apply(console, arguments);
  };
})();
window.addEventListener("load", function () {
  setTimeout(function () {
    var pre = document.createElement("pre");
    pre.id = "tuner-errors";
    pre.hidden = true;  /* in the dumped DOM, not in the screenshot */
    pre.textContent = JSON.stringify(window.__tunerErrors);
    document.body.appendChild(pre);
  }, 500);
});
</script>"""


def _chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        if path := shutil.which(name):
            return path
    return None


needs_chromium = pytest.mark.skipif(_chromium() is None,
                                    reason="needs headless Chromium (.ci/run installs it)")


def run_chromium(args: list[str], tmp_path: Path) -> subprocess.CompletedProcess:
    profile = tmp_path / f"chromium-profile-{len(list(tmp_path.glob('chromium-profile-*')))}"
    return subprocess.run(
        [_chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--enable-logging=stderr",
         "--v=0", *args], capture_output=True, text=True, timeout=180, check=True)


def browser_check(report: Path, tmp_path: Path, screenshot_name: str = "report.png",
                  modes: tuple[str, ...] = ("light", "dark")) -> str:
    """Load ``report`` in headless Chromium: no console error, every figure drawn, a screenshot
    per colour scheme in ``modes`` saved under tmp_path (path printed). Returns the dumped DOM.
    The first mode's screenshot comes from the same page load as the DOM."""
    text = report.read_text(encoding="utf-8")
    hooked = tmp_path / f"hooked-{report.name}"
    anchor = '<meta charset="utf-8">'
    assert anchor in text
    hooked.write_text(text.replace(anchor, anchor + ERROR_HOOK, 1), encoding="utf-8")
    shots = []
    for i, mode in enumerate(modes):
        shot = tmp_path / screenshot_name.replace(".png", f"-{mode}.png")
        args = ["--force-dark-mode"] if mode == "dark" else []
        args += [f"--screenshot={shot}", "--window-size=1280,9000"]
        if i == 0:
            args.append("--dump-dom")
            first = args
        else:
            run_chromium([*args, hooked.as_uri()], tmp_path)
        shots.append((mode, shot))
    r = run_chromium([*(first if modes else ["--dump-dom"]), hooked.as_uri()], tmp_path)
    dom = r.stdout
    m = re.search(r'<pre id="tuner-errors"[^>]*>(.*?)</pre>', dom, re.S)
    assert m, "the page never finished loading"
    errors = json.loads(html.unescape(m.group(1)))
    assert errors == [], errors
    assert "Uncaught" not in r.stderr, r.stderr[-2000:]
    figures = re.findall(r'<script type="application/json" id="data-(\w+)">', text)
    assert figures
    for name in figures:
        start = dom.index(f'id="fig-{name}"')
        block = dom[start:start + 400_000]
        nxt = block.find('class="plot"', 20)
        block = block if nxt < 0 else block[:nxt]
        assert "plot-container" in block and "main-svg" in block, f"{name} plot not drawn"
    for mode, shot in shots:
        assert shot.stat().st_size > 50_000  # a drawn page, not a blank one
        with _capsys_disabled():
            print(f"\nscreenshot ({mode}): {shot}")
    return dom


_CAPSYS = None


def _capsys_disabled():
    import contextlib

    return _CAPSYS.disabled() if _CAPSYS is not None else contextlib.nullcontext()


@pytest.fixture(autouse=True)
def _keep_capsys(capsys):
    global _CAPSYS
    _CAPSYS = capsys
    yield
    _CAPSYS = None


@pytest.mark.browser
@needs_chromium
def test_report_in_browser(full, tmp_path):
    path, _ = full
    dom = browser_check(path, tmp_path)
    assert "Fastest:" in dom and 'id="export-fastest-vllm"' in dom


@pytest.mark.browser
@needs_chromium
def test_minimal_report_in_browser(rendered, tmp_path):
    """The report without report_extras (no timeline, importances, validation) also renders."""
    path, _ = rendered
    browser_check(path, tmp_path, "minimal.png", modes=())


# ---- reading the answer: log axes, labels that do not collide, a page that fits 1280 px -------
# No break opportunity in it (underscores): the page must wrap it, not grow sideways.
LONG_NAME = "customer_support_transcripts_summarisation_batch_2025_01_15_" * 3


def spread_context(seed: int = 3) -> dict:
    """Plans from 1 GPU to 32 (makespans span decades, $ does not), every knob set, baselines,
    and the long strings a real study carries (a deep workload path, a long study name and
    checkpoint): the report must still fit 1280 px and draw makespan on a log axis."""
    ctx = make_context(n_trials=36, seed=seed)
    rng = random.Random(seed)
    for i, t in enumerate(ctx["trials"]):
        tp, dp = (1, 2, 4)[i % 3], (1, 2, 4, 8)[i // 3 % 4]
        t["config"].update(tp=tp, dp=dp, ordering=("shortest-prompt", "longest-output")[i % 2],
                           gpu_memory_utilization=(0.85, 0.9, 0.95)[i % 3],
                           kv_offload_layers=4 * (i % 2), weight_offload_fraction=0.25 * (i % 2))
        if not t["feasible"]:
            continue
        gpu = GPUS[t["config"]["gpu"]]
        speed = (1.0 if gpu.name == "A10" else 1.9) * tp ** 0.7 * dp ** 0.9 * rng.uniform(0.6, 1)
        ms = 9000.0 / speed
        cost = ms / 3600 * gpu.price_usd_per_h * tp * dp
        t["metrics"].update(makespan_s=ms, cost_usd=cost, usd_per_1k_requests=cost / 2,
                            qps=2000 / ms, lower_bound_s=ms * rng.uniform(0.1, 0.8))
        t["vllm_defaults"] = {"metrics": {"makespan_s": 1.45 * ms, "cost_usd": cost / 0.69},
                              "gain": {"speedup": 1.45, "saving_fraction": 0.31,
                                       "cost_ratio": 0.69}}
    ctx = add_extras(with_winners(ctx))
    ctx["deadline_s"] = 1800.0  # a line on the cost-vs-deadline figure, on its log axis
    ctx["workload"]["source"] = f"/data/{LONG_NAME}/requests.jsonl"
    ctx["study"] = LONG_NAME
    ctx["model"]["hf_id"] = f"org/{LONG_NAME}"
    ctx["notes"].append(f"workload read from /data/{LONG_NAME}/requests.jsonl")
    return ctx


def close_winners_context() -> dict:
    """The fastest and the cheapest plan a hair apart: their labels must not collide."""
    ctx = make_context()
    feas = sorted((t for t in ctx["trials"] if t["feasible"]),
                  key=lambda t: t["metrics"]["makespan_s"])
    f, c = feas[0]["metrics"], feas[1]["metrics"]
    low = min(t["metrics"]["cost_usd"] for t in feas)
    f["cost_usd"], c["cost_usd"] = 0.9 * low, 0.88 * low
    c["makespan_s"] = 1.02 * f["makespan_s"]
    ctx = with_winners(ctx)
    assert ctx["winners"] == {"fastest": feas[0]["number"], "cheapest": feas[1]["number"]}
    return ctx


@pytest.fixture(scope="module")
def spread(tmp_path_factory) -> tuple[Path, str]:
    path = render_report(spread_context(), tmp_path_factory.mktemp("spread") / "report.html")
    return path, path.read_text(encoding="utf-8")


def _numbers(values) -> list[float]:
    if isinstance(values, dict) and "bdata" in values:  # plotly's typed-array JSON
        import base64

        import numpy as np

        values = np.frombuffer(base64.b64decode(values["bdata"]), dtype=values["dtype"]).tolist()
    return [float(v) for v in values or []
            if isinstance(v, (int, float)) and not isinstance(v, bool)]


def axis_values(fig: dict) -> dict[str, list[float]]:
    """{'xaxis': [...], 'yaxis2': [...]}: the numbers every trace puts on each axis."""
    out: dict[str, list[float]] = {}
    for tr in fig["data"]:
        for letter in ("x", "y"):
            ref = tr.get(f"{letter}axis", letter)
            out.setdefault(f"{letter}axis{ref[1:]}", []).extend(_numbers(tr.get(letter)))
    return out


# the axes of makespans, $ and token lengths: log where their values span decades (shares,
# counts, GiB stacks and time since the start stay linear)
PLAN_AXES = {"pareto": ("xaxis", "yaxis"), "deadline": ("xaxis", "yaxis"), "limit": ("xaxis",),
             "validation": ("xaxis", "yaxis"), "slices": ("yaxis",), "workload": ("xaxis",)}


def test_axes_that_span_decades_are_log(spread):
    """Makespan from a 1-GPU to a 32-GPU plan spans > 10x: a log axis; the job $ of the same
    plans spans less: linear from zero. Decided per axis from the data."""
    _, text = spread
    figs = _figures(text)
    checked = []
    for name, fig in figs.items():
        for ax, values in axis_values(fig).items():
            if name not in PLAN_AXES or not any(ax.startswith(a) for a in PLAN_AXES[name]):
                continue
            if not values:
                continue
            kind = fig["layout"].get(ax, {}).get("type")
            span = max(values) / min(values) if min(values) > 0 else None
            if span is not None and span > 10:
                assert kind == "log", (name, ax, span)
            elif name != "validation":  # there both axes share one scale
                assert kind != "log", (name, ax, span)
            checked.append((name, ax, kind))
    assert ("pareto", "xaxis", "log") in checked and ("pareto", "yaxis", "linear") in checked
    assert ("deadline", "xaxis", "log") in checked and ("limit", "xaxis", "log") in checked
    assert ("workload", "xaxis", "log") in checked  # prompts of 200 to 12,000 tokens
    # the winners' labels point at their dots: an annotation takes log10 on a log axis
    ctx = spread_context()
    trials = {t["number"]: t for t in ctx["trials"]}
    pareto = figs["pareto"]
    assert {a["text"] for a in pareto["layout"]["annotations"]} == {"fastest", "cheapest"}
    _, div = duration_unit(max(t["metrics"]["makespan_s"] for t in trials.values()
                               if t["feasible"]))
    for a in pareto["layout"]["annotations"]:
        m = trials[ctx["winners"][a["text"]]]["metrics"]
        assert a["x"] == pytest.approx(math.log10(m["makespan_s"] / div))
        assert a["y"] == pytest.approx(m["cost_usd"])


def test_log_scale_rule():
    assert report_figures.scale([1, 5, 9.9]) == {"type": "linear", "rangemode": "tozero"}
    assert report_figures.scale([0.5, 50])["type"] == "log"
    assert report_figures.scale([0, 50])["type"] == "linear"  # no log of 0
    assert report_figures.scale([None, 2.0])["type"] == "linear"
    assert report_figures.scale([0.0277, 0.14], usd=True)["tickformat"] == ",.3f"
    log = report_figures.scale([0.0277, 0.44], usd=True)
    assert log["tickvals"] == [0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0]
    assert log["ticktext"] == ["$0.01", "$0.02", "$0.05", "$0.10", "$0.20", "$0.50", "$1.00"]
    assert report_figures.log_ticks(1, 1e6) == [1, 10, 100, 1e3, 1e4, 1e5, 1e6]


# Injected like ERROR_HOOK: after the plots are drawn, writes into the DOM the page's width, each
# plot's axis types and every pair of its SVG text labels whose boxes overlap, and the tables or
# config cells wider than their box.
LAYOUT_HOOK = """<script>
window.addEventListener("load", function () {
  setTimeout(function () {
    var de = document.documentElement;
    var res = { scrollWidth: de.scrollWidth, innerWidth: window.innerWidth, figures: {},
                wideTables: [], wideCells: [] };
    Array.prototype.forEach.call(document.querySelectorAll(".plot"), function (div) {
      if (!div._fullLayout) { return; }
      var fl = div._fullLayout, axes = {}, boxes = [], overlaps = [];
      Object.keys(fl).forEach(function (k) {
        if (/^[xy]axis\\d*$/.test(k)) { axes[k] = fl[k].type; }
      });
      Array.prototype.forEach.call(div.querySelectorAll("svg text"), function (t) {
        var cs = getComputedStyle(t), r = t.getBoundingClientRect();
        if (!t.textContent.trim() || cs.display === "none" || cs.visibility === "hidden" ||
            cs.opacity === "0" || r.width < 0.5 || r.height < 0.5) { return; }
        boxes.push({ text: t.textContent, l: r.left, t: r.top, r: r.right, b: r.bottom });
      });
      for (var i = 0; i < boxes.length; i++) {
        for (var j = i + 1; j < boxes.length; j++) {
          var a = boxes[i], b = boxes[j];
          var w = Math.min(a.r, b.r) - Math.max(a.l, b.l);
          var h = Math.min(a.b, b.b) - Math.max(a.t, b.t);
          if (w > 1 && h > 1) { overlaps.push([a.text, b.text]); }
        }
      }
      var rect = div.getBoundingClientRect();
      res.figures[div.id.slice(4)] = { axes: axes, overlaps: overlaps, texts: boxes.length,
                                       left: rect.left, right: rect.right };
    });
    Array.prototype.forEach.call(document.querySelectorAll(".table-wrap"), function (w) {
      if (w.scrollWidth > w.clientWidth + 1) {
        res.wideTables.push((w.closest("section") || {}).id + ": " + w.scrollWidth + " > " +
                            w.clientWidth);
      }
    });
    Array.prototype.forEach.call(document.querySelectorAll("td, dd, p, li"), function (c) {
      if (c.scrollWidth > c.clientWidth + 1) {
        res.wideCells.push(c.tagName + " " + c.textContent.slice(0, 60));
      }
    });
    var dl = document.getElementById("fig-deadline");
    var shape = dl && dl.querySelector(".shapelayer path");
    var note = dl && dl.querySelector(".annotation");
    if (shape && note) {
      var s = shape.getBoundingClientRect(), n = note.getBoundingClientRect();
      res.deadline = [s.left + s.width / 2, n.left + n.width / 2];
    }
    var pre = document.createElement("pre");
    pre.id = "tuner-layout";
    pre.hidden = true;
    pre.textContent = JSON.stringify(res);
    document.body.appendChild(pre);
  }, 1000);
});
</script>"""


def layout_at_1280(report: Path, tmp_path: Path) -> dict:
    """The page at a 1280 px window in headless Chromium, measured by LAYOUT_HOOK."""
    text = report.read_text(encoding="utf-8")
    hooked = tmp_path / f"layout-{report.name}"
    anchor = '<meta charset="utf-8">'
    hooked.write_text(text.replace(anchor, anchor + LAYOUT_HOOK, 1), encoding="utf-8")
    shot = tmp_path / "layout-1280.png"
    r = run_chromium(["--window-size=1280,9000", f"--screenshot={shot}", "--dump-dom",
                      hooked.as_uri()], tmp_path)
    m = re.search(r'<pre id="tuner-layout"[^>]*>(.*?)</pre>', r.stdout, re.S)
    assert m, "the page never finished loading"
    with _capsys_disabled():
        print(f"\nscreenshot (1280 px): {shot}")
    return json.loads(html.unescape(m.group(1)))


@pytest.mark.browser
@needs_chromium
@pytest.mark.parametrize("which", ["spread", "close", "full"])
def test_report_reads_at_1280px(which, spread, full, tmp_path):
    """At 1280 px: nothing wider than the page (long names wrap; the tables fit), axes that span
    decades drawn in log scale, and no two text labels of a figure on top of each other."""
    if which == "close":
        path = render_report(close_winners_context(), tmp_path / "report.html")
    else:
        path = (spread if which == "spread" else full)[0]
    figs = _figures(path.read_text(encoding="utf-8"))
    res = layout_at_1280(path, tmp_path)
    assert res["innerWidth"] == 1280
    assert res["scrollWidth"] <= 1280, res["scrollWidth"]
    assert res["wideTables"] == [] and res["wideCells"] == [], (res["wideTables"],
                                                                res["wideCells"])
    assert set(res["figures"]) == set(figs)
    for name, f in res["figures"].items():
        assert f["texts"] > 0 and f["overlaps"] == [], (name, f["overlaps"])
        assert 0 <= f["left"] and f["right"] <= 1280, (name, f)
        for ax, kind in f["axes"].items():  # what plotly drew is what the figure asked for
            assert kind == figs[name]["layout"].get(ax, {}).get("type", kind), (name, ax)
    if which == "spread":
        assert res["figures"]["pareto"]["axes"]["xaxis"] == "log"
        # the --deadline line and its label meet at the same x (a shape takes the value, an
        # annotation its log10 on a log axis)
        line, label = res["deadline"]
        assert abs(line - label) < 2, res["deadline"]
