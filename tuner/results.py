"""From a finished study to plain records: Pareto front, winners, report context."""

from __future__ import annotations

import math
from datetime import UTC, datetime

import numpy as np
import optuna

from tuner.catalog import GPU, ModelSpec
from tuner.config import ServingConfig
from tuner.workload import Workload


def trial_records(study: optuna.Study) -> list[dict]:
    """One dict per completed, non-duplicate trial: number, config, feasible, reason, metrics."""
    meta = study.user_attrs.get("metadata", {})
    fixed = meta.get("fixed", {})
    out = []
    for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)):
        if t.user_attrs.get("duplicate"):
            continue
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
