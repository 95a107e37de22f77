"""reports.html: one self-contained, escaped, atomically written HTML report."""

from __future__ import annotations

import copy
import json
import os
import random
import re
import shutil
import subprocess
from pathlib import Path

import plotly.offline
import pytest

import reports.html as report_html
from reports.html import duration_unit, fmt_duration, render_html, render_report
from tuner.catalog import GPU, ModelSpec
from tuner.config import ServingConfig
from tuner.deploy import to_vllm_yaml
from tuner.errors import TunerError

GIB = 1024**3
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

    return {
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
        "pareto": _pareto(trials),
        "winners": {"fastest": fastest["number"], "cheapest": cheapest["number"]},
        "best_per_gpu": best_per_gpu,
        "exports": {"fastest_vllm_yaml": export(fastest), "cheapest_vllm_yaml": export(cheapest)},
        "notes": ["Output lengths assumed equal to max_tokens."],
    }


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
    assert f"Fastest: {fast['config']['gpu']}</strong>" in text
    assert f"Cheapest: {cheap['config']['gpu']}</strong>" in text
    assert fmt_duration(fast["metrics"]["makespan_s"]) in text
    headline = text[text.index('id="headline"'):text.index('id="pareto"')]
    for name in ctx["gpus"]:
        assert f"<strong>{name}</strong>" in headline


def test_sections_in_order(rendered):
    _, text = rendered
    ids = ["headline", "pareto", "best", "memory", "workload", "provenance", "export"]
    positions = [text.index(f'<section id="{i}"') for i in ids]
    assert positions == sorted(positions)


def test_figures_embedded_as_json(ctx, rendered):
    _, text = rendered
    figs = dict(re.findall(r'<script type="application/json" id="data-(\w+)">(.*?)</script>',
                           text, re.S))
    assert set(figs) == {"pareto", "memory", "workload"}
    pareto = json.loads(figs["pareto"])
    names = {tr.get("name") for tr in pareto["data"]}
    assert {"A10", "A40", "Pareto front"} <= names
    hover = next(tr["hovertemplate"] for tr in pareto["data"] if "hovertemplate" in tr)
    for field in ("chunk_size", "max_running", "weight_bits", "kv_bits", "tp", "scheduler"):
        assert field in hover
    assert pareto["layout"]["paper_bgcolor"] == "rgba(0,0,0,0)"
    bold = [tr for tr in pareto["data"] if tr.get("marker", {}).get("opacity") == 1.0]
    assert sum(len(tr["x"]) for tr in bold) == len(ctx["pareto"])
    memory = json.loads(figs["memory"])
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
    c["exports"]["fastest_vllm_yaml"] = "# " + evil
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
    ("exports", "cheapest_vllm_yaml"), ("gpus", "A10", "price_source"),
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

    monkeypatch.setattr(report_html, "_workload_figure", boom)
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
    c["exports"]["cheapest_vllm_yaml"] = c["exports"]["fastest_vllm_yaml"]
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


def _chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        if path := shutil.which(name):
            return path
    return None


@pytest.mark.browser
@pytest.mark.skipif(_chromium() is None, reason="needs headless Chromium")
def test_plots_render_offline_in_browser(rendered):
    path, _ = rendered
    dom = subprocess.run(
        [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=5000",
         "--dump-dom", path.as_uri()],
        capture_output=True, text=True, timeout=120, check=True,
    ).stdout
    for name in ("pareto", "memory", "workload"):
        block = dom[dom.index(f'id="fig-{name}"'):]
        assert "main-svg" in block[:20000], f"{name} plot did not render"
