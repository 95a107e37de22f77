"""Search quality and speed: the search's best makespan and best $ against the exhaustive grid.

Issue 6's acceptance: 6 GPU types x every knob of search_spaces/default.yaml on
examples/arxiv.jsonl with llama-3-8b; the search's best makespan and best cost are each within
1 % of the exhaustive grid's, in <= 30 s wall on a 2-core machine, with >= 1000 configurations
evaluated (distinct configurations simulated, at any fidelity).

1. Reference: ``run_search(..., SearchSettings(exhaustive=True))`` over the whole grid (the
   GPU types split over --jobs processes; cached by a hash of the inputs and of the simulator's
   source, so a rerun after a simulator change recomputes it).
2. The search, as ``tuner search`` runs it (same objective, dedup, presets, constraints), with an
   in-memory study, once per seed: wall and CPU time, distinct configurations, configurations/s,
   best makespan and best $ against the reference.
3. Multi-fidelity (--mf-trace, default the shared 28k-request arXiv trace when present): the same
   search with and without the sample-first rule: time, full simulations, best found, and the
   measured sampling error (the exhaustive grid of that trace would take hours).

Run: python benchmarks/search_quality.py [--seeds 0,1,2] [--n-trials 1200] [--check]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import multiprocessing as mp
import os
import platform
import tempfile
import time
from pathlib import Path

import numpy as np

from tuner.core.catalog import get_model, load_gpus
from tuner.core.config import ServingConfig
from tuner.core.workload import Workload, load_workload
from tuner.predictors.sources import resolve_cost_model
from tuner.search import SearchSettings, run_search, sampler_name, workload_digest
from tuner.search.loop import search_space
from tuner.search.records import all_records, rank, search_stats, trial_records
from tuner.search.space import load_space
from tuner.sim.simulator import simulate

REPO = Path(__file__).resolve().parents[1]
GPUS = ("A10", "A40", "L4", "L40S", "A100-80G", "H100")
SHARED_TRACE = REPO.parent / "shared" / "traces" / \
    "arxiv_summarization_stats_llama2_tokenizer_filtered_v2.csv"


def _bests(study) -> dict:
    recs = trial_records(study)
    fm, fc = rank(recs, "fastest")[0], rank(recs, "cheapest")[0]
    return {"makespan_s": fm.makespan_s, "makespan_config": fm.config.to_dict(),
            "cost_usd": fc.cost_usd, "cost_config": fc.config.to_dict()}


def _setup(workload: str, model: str, gpus: list[str], space: str | None):
    cat = load_gpus()
    spec = get_model(model)
    w = load_workload(Path(workload), model=spec)
    chosen = {g: cat[g] for g in gpus}
    # the space as `tuner search` runs it (auto TP/DP, vLLM's defaults offered)
    sp, _notes = search_space(load_space(space), w, spec, chosen, SearchSettings())
    return w, spec, chosen, sp


def _grid_part(args) -> dict:
    workload, model, gpus, space = args
    w, spec, chosen, sp = _setup(workload, model, gpus, space)
    t0 = time.perf_counter()
    st = run_search(w, spec, chosen, sp, SearchSettings(exhaustive=True))
    out = _bests(st)
    out["configurations"] = len(st.trials)
    out["feasible"] = sum(1 for r in all_records(st, with_config=False) if r.feasible)
    out["wall_s"] = time.perf_counter() - t0
    return out


# What a simulation depends on (a change here recomputes the cached reference grid); the search
# code itself (tuner/search, the CLI) is left out on purpose.
SIM_SOURCES = ("tuner/sim", "tuner/core", "predictors")


def _source_digest() -> str:
    h = hashlib.sha256()
    for name in SIM_SOURCES:
        p = REPO / name
        files = sorted(f for f in p.rglob("*") if f.suffix in (".py", ".yaml", ".json")) \
            if p.is_dir() else [p]
        for f in files:
            if f.is_file():
                h.update(str(f.relative_to(REPO)).encode() + f.read_bytes())
    return h.hexdigest()


def reference(workload: str, model: str, gpus: list[str], space: str | None, jobs: int,
              cache_dir: Path) -> dict:
    w, spec, chosen, sp = _setup(workload, model, gpus, space)
    key = hashlib.sha256(json.dumps([workload_digest(w), model, gpus, sp.knobs, sp.fixed,
                                     _source_digest()], default=str).encode()).hexdigest()[:16]
    cache = cache_dir / f"grid-{key}.json"
    if cache.is_file():
        ref = json.loads(cache.read_text())
        ref["cached"] = str(cache)
        return ref
    t0 = time.perf_counter()
    parts_in = [(workload, model, list(gpus[i::jobs]), space) for i in range(jobs)]
    if jobs > 1:
        with mp.get_context("spawn").Pool(jobs) as pool:
            parts = pool.map(_grid_part, parts_in)
    else:
        parts = [_grid_part(parts_in[0])]
    ref = {
        "makespan_s": min(p["makespan_s"] for p in parts),
        "cost_usd": min(p["cost_usd"] for p in parts),
        "configurations": sum(p["configurations"] for p in parts),
        "feasible": sum(p["feasible"] for p in parts),
        "wall_s": time.perf_counter() - t0,
        "jobs": jobs,
    }
    ref["makespan_config"] = min(parts, key=lambda p: p["makespan_s"])["makespan_config"]
    ref["cost_config"] = min(parts, key=lambda p: p["cost_usd"])["cost_config"]
    cache_dir.mkdir(parents=True, exist_ok=True)
    cache.write_text(json.dumps(ref, indent=2))
    return ref


def one_search(w: Workload, spec, chosen, sp, settings: SearchSettings) -> dict:
    t0, c0 = time.perf_counter(), time.process_time()
    st = run_search(w, spec, chosen, sp, settings)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    stats = search_stats(st)
    return {"wall_s": wall, "cpu_s": cpu, "stats": stats, **_bests(st)}


def _cfg(c: dict, sp) -> str:
    return f"{c['gpu']} " + " ".join(f"{k}={c[k]}" for k in sp.knobs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workload", default=str(REPO / "examples" / "arxiv.jsonl"))
    ap.add_argument("--model", default="llama-3-8b")
    ap.add_argument("--gpus", default=",".join(GPUS))
    ap.add_argument("--space", default=None, help="default: search_spaces/default.yaml")
    ap.add_argument("--n-trials", type=int, default=1200)
    ap.add_argument("--sampler", default="auto")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--jobs", type=int, default=2, help="processes for the exhaustive reference")
    ap.add_argument("--cache-dir", type=Path,
                    default=Path(tempfile.gettempdir()) / "tuner-search-quality")
    ap.add_argument("--mf-trace", type=lambda s: Path(s) if s else None, default=SHARED_TRACE if SHARED_TRACE.is_file()
                    else None, help="large CSV trace for the multi-fidelity part ('' to skip)")
    ap.add_argument("--mf-model", default="mistral-7b")
    ap.add_argument("--mf-trials", type=int, default=400)
    ap.add_argument("--check", action="store_true", help="exit 1 if an acceptance bound fails")
    args = ap.parse_args()
    gpus = [g.strip() for g in args.gpus.split(",") if g.strip()]

    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"python {platform.python_version()}, load average "
          f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    w, spec, chosen, sp = _setup(args.workload, args.model, gpus, args.space)
    warm = ServingConfig(gpu=gpus[0], **sp.fixed)  # warm-up: loads the C kernels
    simulate(w.take(np.arange(2)), spec, chosen[gpus[0]], warm,
             resolve_cost_model(spec, chosen[gpus[0]], warm))
    size = sp.size(len(gpus))
    print(f"workload {Path(args.workload).name}: {len(w)} requests; model {spec.name}; "
          f"{len(gpus)} GPU types x {', '.join(f'{k}({len(v)})' for k, v in sp.knobs.items())} "
          f"= {size:,} configurations")

    ref = reference(args.workload, args.model, gpus, args.space, args.jobs, args.cache_dir)
    how = (f"cached in {ref['cached']}" if ref.get("cached") else
           f"{ref['wall_s']:.0f} s wall on {ref['jobs']} processes, "
           f"{ref['configurations'] / ref['wall_s']:.0f} configurations/s")
    print(f"exhaustive grid: {ref['configurations']:,} configurations ({ref['feasible']:,} "
          f"feasible), {how}")
    print(f"  best makespan {ref['makespan_s']:.3f} s: {_cfg(ref['makespan_config'], sp)}")
    print(f"  best cost     ${ref['cost_usd']:.5f}: {_cfg(ref['cost_config'], sp)}")

    ok = True
    settings0 = SearchSettings(n_trials=args.n_trials, sampler=args.sampler)
    print(f"search: {args.n_trials} trials, sampler {sampler_name(settings0)}, in-memory study")
    for seed in [int(s) for s in args.seeds.split(",") if s.strip()]:
        r = one_search(w, spec, chosen, sp, SearchSettings(n_trials=args.n_trials,
                                                            sampler=args.sampler, seed=seed))
        st = r["stats"]
        gm = r["makespan_s"] / ref["makespan_s"] - 1
        gc = r["cost_usd"] / ref["cost_usd"] - 1
        n_conf = st["configurations"]
        passed = gm <= 0.01 and gc <= 0.01 and r["wall_s"] <= 30 and n_conf >= 1000
        ok &= passed
        print(f"  seed {seed}: {r['wall_s']:.1f} s wall ({r['cpu_s']:.1f} s CPU), "
              f"{st['trials']} trials, {n_conf} distinct configurations "
              f"({st['full_simulations']} on the full workload, {st['duplicates']} duplicate "
              f"trials) = {n_conf / r['wall_s']:.0f} configurations/s; best makespan "
              f"{r['makespan_s']:.3f} s ({100 * gm:+.2f} % vs grid), best cost "
              f"${r['cost_usd']:.5f} ({100 * gc:+.2f} % vs grid): "
              f"{'PASS' if passed else 'FAIL'}")

    if args.mf_trace:
        ok &= multi_fidelity(args, gpus)
    raise SystemExit(1 if args.check and not ok else 0)


def multi_fidelity(args, gpus: list[str]) -> bool:
    import pandas as pd

    df = pd.read_csv(args.mf_trace)
    w = Workload(df["num_prefill_tokens"].to_numpy(np.int64),
                 df["num_decode_tokens"].to_numpy(np.int64), source=str(args.mf_trace))
    cat = load_gpus()
    spec = get_model(args.mf_model)
    chosen = {g: cat[g] for g in gpus}
    sp = load_space(args.space)
    print(f"multi-fidelity: {args.mf_trace.name}, {len(w)} requests, {spec.name}, "
          f"{args.mf_trials} trials (sampler {sampler_name(SearchSettings(n_trials=args.mf_trials))})")
    rows = {}
    for label, frac in (("full workload only", 1.0), ("sample first", None)):
        rows[label] = r = one_search(w, spec, chosen, sp, SearchSettings(
            n_trials=args.mf_trials, seed=0, sample_fraction=frac))
        st = r["stats"]
        screened = (f", {st['screened_on_sample']} judged on the {st['sample_requests']}-"
                    "request sample alone" if st.get("sample_requests") else "")
        print(f"  {label:18s}: {r['wall_s']:.1f} s wall ({r['cpu_s']:.1f} s CPU), "
              f"{st['configurations']} configurations, {st['full_simulations']} simulated on "
              f"the full workload{screened}; best makespan {r['makespan_s']:.1f} s, best "
              f"cost ${r['cost_usd']:.3f}")
        se = st.get("sampling_error")
        if se:
            e, q = se["relative_error"], se["ratio_full_over_scaled_sample"]
            print(f"    sampling error on {se['pairs']} configurations simulated both ways "
                  f"({se['audited']} random audits): |estimate/full - 1| median "
                  f"{100 * e['median']:.1f} %, p90 {100 * e['p90']:.1f} %, max "
                  f"{100 * e['max']:.1f} % (audits: max "
                  f"{100 * (se['audited_max_relative_error'] or 0):.1f} %); full/(n_full/"
                  f"n_sample x sample) median {q['median']:.3f} [{q['min']:.3f}, {q['max']:.3f}]")
    a, b = rows["full workload only"], rows["sample first"]
    print(f"  sample-first vs full-only: {a['wall_s'] / b['wall_s']:.1f}x faster; best makespan "
          f"{100 * (b['makespan_s'] / a['makespan_s'] - 1):+.2f} %, best cost "
          f"{100 * (b['cost_usd'] / a['cost_usd'] - 1):+.2f} %")
    return True


if __name__ == "__main__":
    main()
