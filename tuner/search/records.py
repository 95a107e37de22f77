"""From a finished study to plain records: Pareto front, winners, report context."""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import UTC, datetime

import numpy as np
import optuna

from tuner.core.catalog import GPU, ModelSpec
from tuner.core.config import ServingConfig
from tuner.core.workload import Workload


def _fidelity(t: optuna.trial.FrozenTrial) -> str:
    return (t.user_attrs.get("fidelity") or {}).get("level", "full")


def fmt_duration(seconds: float) -> str:
    """'2.41 h', '3.5 min' or '42.0 s'."""
    if seconds >= 3600:
        return f"{seconds / 3600:.2f} h"
    if seconds >= 60:
        return f"{seconds / 60:.1f} min"
    return f"{seconds:.1f} s"


def trial_records(study: optuna.Study) -> list[dict]:
    """One dict per distinct configuration simulated on the full workload (completed trials;
    duplicates, configurations only screened on the workload's sample, and a repeat of a
    configuration two workers simulated at once are left out): number, config, feasible,
    reason, metrics, memory, provenance."""
    meta = study.user_attrs.get("metadata", {})
    fixed = meta.get("fixed", {})
    out, seen = [], set()
    for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)):
        if t.user_attrs.get("duplicate") or _fidelity(t) != "full":
            continue
        key = tuple(sorted(t.params.items()))
        if key in seen:
            continue
        seen.add(key)
        config = ServingConfig(**fixed, **t.params).to_dict()
        out.append({
            "number": t.number,
            "config": config,
            "feasible": bool(t.user_attrs.get("feasible", False)),
            "reason": t.user_attrs.get("reason", ""),
            "metrics": t.user_attrs.get("metrics"),
            "memory": t.user_attrs.get("memory"),
            "provenance": t.user_attrs.get("provenance", ""),
        })
    return out


_KNOB_TITLES = {"chunk_size": "chunk", "max_running": "R_max", "tp": "TP", "dp": "DP",
                "scheduler": "scheduler", "ordering": "order",
                "gpu_memory_utilization": "mem util", "kv_offload_layers": "KV offl.",
                "weight_offload_fraction": "W offl.", "attention_on_cpu": "CPU attn",
                "cpu_threads_intra": "thr intra", "cpu_threads_inter": "thr inter",
                "block_size": "block"}


def knob_columns(records: list[dict]) -> list[tuple[str, Callable[[dict], str]]]:
    """(column title, cell of a config) for the tables: every knob that varies among the
    records, plus the weight/KV bits."""
    configs = [r["config"] for r in records]
    varying = [k for k in (configs[0] if configs else {})
               if k not in ("gpu", "weight_bits", "kv_bits")
               and len({str(c[k]) for c in configs}) > 1]
    cols = [(_KNOB_TITLES.get(k, k), lambda c, k=k: str(c[k])) for k in varying]
    cols.append(("W/KV bits", lambda c: f"{c['weight_bits']}/{c['kv_bits']}"))
    return cols


def search_stats(study: optuna.Study) -> dict:
    """How the search spent its trials, and the measured sampling error of the multi-fidelity
    estimates: every trial simulated on both the sample and the full workload gives one
    relative error |estimate / full - 1| (estimate = calibrated, scaled sample makespan)."""
    trials = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    n_dup = sum(1 for t in trials if t.user_attrs.get("duplicate"))
    distinct = [t for t in trials if not t.user_attrs.get("duplicate")]
    full = [t for t in distinct if _fidelity(t) == "full"]
    screened = [t for t in distinct if _fidelity(t) != "full"]
    pairs = []
    reasons: dict[str, int] = {}
    for t in full:
        fid = t.user_attrs.get("fidelity") or {}
        if fid.get("sample_makespan_s") is None or not t.user_attrs.get("feasible"):
            continue
        why = str(fid.get("promoted", ""))
        reasons[why] = reasons.get(why, 0) + 1
        est = fid["sample_makespan_s"] * fid["scale"]
        pairs.append((est, t.values[0], why))
    stats: dict = {
        "trials": len(trials),
        "duplicates": n_dup,
        "configurations": len(distinct),
        "full_simulations": len(full),
        "screened_on_sample": len(screened),
        "infeasible": sum(1 for t in distinct if not t.user_attrs.get("feasible", False)),
    }
    fid0 = next((t.user_attrs.get("fidelity") for t in distinct
                 if (t.user_attrs.get("fidelity") or {}).get("requests")), None)
    if fid0:
        stats["sample_requests"] = fid0["requests"]
        stats["sample_scale"] = fid0["scale"]
    if pairs:
        est = np.array([p[0] for p in pairs])
        fullv = np.array([p[1] for p in pairs])
        ratio = fullv / est  # full / (n_full/n_sample x sample): 1 if the sample scaled exactly
        k = float(np.median(ratio))
        err = np.abs(k / ratio - 1.0)  # |calibrated estimate / full - 1|
        audit = np.array([p[2] == "audit" for p in pairs])
        stats["sampling_error"] = {
            "pairs": len(pairs),
            "promoted_because": reasons,
            "ratio_full_over_scaled_sample": {"median": k, "min": float(ratio.min()),
                                              "max": float(ratio.max())},
            "relative_error": {"median": float(np.median(err)),
                               "p90": float(np.quantile(err, 0.9)),
                               "max": float(err.max())},
            "audited": int(audit.sum()),
            "audited_max_relative_error": float(err[audit].max()) if audit.any() else None,
        }
    return stats


def pareto_front(records: list[dict]) -> list[int]:
    """Trial numbers not dominated in (makespan_s, cost_usd), sorted by makespan."""
    feas = [r for r in records if r["feasible"]]
    feas.sort(key=lambda r: (r["metrics"]["makespan_s"], r["metrics"]["cost_usd"]))
    front, best_cost = [], math.inf
    for r in feas:
        if r["metrics"]["cost_usd"] < best_cost:
            front.append(r["number"])
            best_cost = r["metrics"]["cost_usd"]
    return front


def winners(records: list[dict]) -> tuple[dict, dict]:
    """({'fastest': n, 'cheapest': n}, {gpu: {'fastest': n, 'cheapest': n}}) over feasible trials."""
    feas = [r for r in records if r["feasible"]]
    if not feas:
        return {}, {}

    def pick(rs):
        fastest = min(rs, key=lambda r: (r["metrics"]["makespan_s"], r["metrics"]["cost_usd"]))
        cheapest = min(rs, key=lambda r: (r["metrics"]["cost_usd"], r["metrics"]["makespan_s"]))
        return {"fastest": fastest["number"], "cheapest": cheapest["number"]}

    per_gpu = {}
    for gpu in dict.fromkeys(r["config"]["gpu"] for r in feas):
        per_gpu[gpu] = pick([r for r in feas if r["config"]["gpu"] == gpu])
    return pick(feas), per_gpu


def infeasible_summary(records: list[dict]) -> dict[str, int]:
    """Infeasibility reasons with how many trials hit each (numbers stripped for grouping)."""
    counts: dict[str, int] = {}
    for r in records:
        if not r["feasible"]:
            counts[r["reason"]] = counts.get(r["reason"], 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: -kv[1]))


def build_context(*, study: optuna.Study, records: list[dict], workload: Workload,
                  model: ModelSpec, gpus: dict[str, GPU], exports: dict[str, str],
                  question: str, tool_version: str, notes: list[str]) -> dict:
    """The report context (schema documented in reports/html.py)."""
    best, per_gpu = winners(records)
    provenance = {}
    for r in records:
        if r["feasible"]:
            provenance.setdefault(r["config"]["gpu"], r["provenance"])
    return {
        "title": f"tuner: {model.name} on {', '.join(gpus)}",
        "question": question,
        "generated_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "tool_version": tool_version,
        "study": study.study_name,
        "workload": {
            "source": workload.source,
            "requests": len(workload),
            "tokenizer": workload.tokenizer,
            "output_source": workload.output_source,
            "prompt_tokens": np.asarray(workload.prompt_tokens).tolist(),
            "output_tokens": np.asarray(workload.output_tokens).tolist(),
        },
        "model": {"name": model.name, "num_params": model.num_params, "hf_id": model.hf_id},
        "gpus": {
            name: {
                "price_usd_per_h": g.price_usd_per_h,
                "price_source": g.price_source,
                "price_date": g.price_date,
                "memory_gib": g.memory_gib,
                "cost_model": provenance.get(name, "roofline from spec sheet (not measured)"),
            }
            for name, g in gpus.items()
        },
        "trials": records,
        "pareto": pareto_front(records),
        "winners": best,
        "best_per_gpu": per_gpu,
        "exports": exports,
        "notes": notes,
    }


def offload_verdict(records: list[dict], gpus: dict[str, GPU]) -> str | None:
    """Vasuki's question, answered from the study: does the smallest-memory GPU, with the
    memory-stretching knobs, approach the largest one? None when the space has no offload knob
    or fewer than two GPU sizes."""
    feas = [r for r in records if r["feasible"]]
    if not any(r["config"].get("kv_offload_layers") or r["config"].get("weight_offload_fraction")
               for r in feas):
        return None
    by_gpu: dict[str, list[dict]] = {}
    for r in feas:
        by_gpu.setdefault(r["config"]["gpu"], []).append(r)
    sizes = sorted((gpus[g].memory_gib, g) for g in by_gpu if g in gpus)
    if len(sizes) < 2 or sizes[0][0] == sizes[-1][0]:
        return None
    small, big = sizes[0][1], sizes[-1][1]
    fs = min(by_gpu[small], key=lambda r: r["metrics"]["makespan_s"])
    fb = min(by_gpu[big], key=lambda r: r["metrics"]["makespan_s"])
    cs = min(r["metrics"]["cost_usd"] for r in by_gpu[small])
    cb = min(r["metrics"]["cost_usd"] for r in by_gpu[big])
    ratio = fs["metrics"]["makespan_s"] / fb["metrics"]["makespan_s"]
    verdict = "approaches" if ratio <= 1.1 else "does not approach"
    cfg = fs["config"]
    text = (f"Offloading: {small} {verdict} {big} — best {small} makespan is {ratio:.2f}x "
            f"{big}'s ({cfg.get('kv_offload_layers', 0)} KV layers and "
            f"{100 * cfg.get('weight_offload_fraction', 0):.0f} % of weights offloaded, "
            f"{cfg['weight_bits']}/{cfg['kv_bits']}-bit), cheapest {small} job costs "
            f"{cs / cb:.2f}x {big}'s.")
    off = fs["metrics"].get("offload") or {}
    parts = []
    if off.get("kv_capacity_gain"):
        parts.append(f"KV capacity x{off['kv_capacity_gain']:.2f}")
    if off.get("transfer_to_compute_ratio"):
        parts.append(f"one layer's KV transfer takes {off['transfer_to_compute_ratio']:.1f}x its "
                     "compute")
    if off.get("offload_stall_s") is not None:
        parts.append(f"stalls {off['offload_stall_s']:.0f} s")
    if parts:
        text += f" Why: {', '.join(parts)}."
    return text
