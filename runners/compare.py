"""Compare the simulated schedule with the one the real engine ran, step by step.

Timing error says *how much* a prediction is off; the schedule says *why*: a different number
of steps, different chunking of prompts, a different batch size, or preemptions the simulator
did not expect are policy mismatches, not cost-model error. Both schedules are compared in the
simulator's step-record columns (tuner.sim.steps); an engine's record (runners.base.STEP_COLUMNS,
written by runners/_vllm_sched.py) is mapped onto them by column name.
"""

from __future__ import annotations

import numpy as np

from tuner.runners.base import STEP_COLUMNS as ENGINE_COLUMNS
from tuner.sim.steps import DECODES, N_COLS, PREEMPTED, PREFILL_TOKENS, RUNNING, STEP_COLUMNS


def simulated_steps(workload, model, gpu, config, cost_model=None) -> np.ndarray:
    """The simulator's step records of the first replica (requests in submission order), as
    float64 in tuner.sim.steps columns: `simulate(..., return_steps=True)`; `cost_model`
    default: the cost-source registry's (predictors.sources)."""
    from tuner.predictors.sources import resolve_cost_model
    from tuner.sim.simulator import simulate

    if cost_model is None:
        cost_model = resolve_cost_model(model, gpu, config)
    sim = simulate(workload, model, gpu, config, cost_model, return_steps=True)
    return sim.steps[0].astype(np.float64)


def real_as_sim_columns(real: np.ndarray) -> np.ndarray:
    """A runner's step records in the simulator's columns; a column the engine does not record
    (kv_blocks: it reports a usage fraction) is NaN."""
    out = np.full((len(real), N_COLS), np.nan)
    for j, name in enumerate(STEP_COLUMNS):
        if name in ENGINE_COLUMNS:
            out[:, j] = real[:, ENGINE_COLUMNS.index(name)]
    return out


def _stats(s: np.ndarray) -> dict:
    pf, dec, run, pre = s[:, PREFILL_TOKENS], s[:, DECODES], s[:, RUNNING], s[:, PREEMPTED]
    has_pf = pf > 0
    return {
        "steps": int(len(s)),
        "prefill_steps": int(has_pf.sum()),
        "mixed_steps": int((has_pf & (dec > 0)).sum()),
        "decode_only_steps": int((~has_pf & (dec > 0)).sum()),
        "mean_prefill_tokens_per_prefill_step": float(pf[has_pf].mean()) if has_pf.any() else 0.0,
        "max_prefill_tokens": int(pf.max()) if len(s) else 0,
        "mean_decodes_per_step": float(dec.mean()) if len(s) else 0.0,
        "max_decodes": int(dec.max()) if len(s) else 0,
        "max_running": int(run.max()) if len(s) else 0,
        "preemptions": int(pre.sum()),
        "steps_with_preemption": int((pre > 0).sum()),
        "prefill_tokens": int(pf.sum()),
        "decode_tokens": int(dec.sum()),
    }


def compare_schedules(sim: np.ndarray, real: np.ndarray) -> dict:
    """Summary of both schedules and where they first differ (in prefill tokens, decodes or
    preemptions of a step)."""
    a, b = _stats(sim), _stats(real)
    n = min(len(sim), len(real))
    key = [PREFILL_TOKENS, DECODES, PREEMPTED]
    diff = np.nonzero(np.any(sim[:n, key] != real[:n, key], axis=1))[0]
    first = int(diff[0]) if len(diff) else (n if len(sim) != len(real) else None)
    same_steps = int(n - len(diff))
    out = {"sim": a, "real": b, "identical_steps": same_steps, "compared_steps": n,
           "first_divergence": None}
    if first is not None:
        def row(s, i):
            if i >= len(s):
                return None
            return {"prefill_tokens": int(s[i, PREFILL_TOKENS]), "decodes": int(s[i, DECODES]),
                    "running": int(s[i, RUNNING]), "preempted": int(s[i, PREEMPTED])}
        out["first_divergence"] = {"step": first, "sim": row(sim, first), "real": row(real, first)}
    out["findings"] = findings(out)
    return out


def findings(cmp: dict) -> list[str]:
    """Short, human-readable policy differences (empty when the schedules agree)."""
    a, b = cmp["sim"], cmp["real"]
    out = []
    if a["steps"] != b["steps"]:
        out.append(f"steps: simulated {a['steps']}, real {b['steps']} "
                   f"({100 * (a['steps'] - b['steps']) / max(b['steps'], 1):+.1f} %)")
    if a["preemptions"] != b["preemptions"]:
        out.append(f"preemptions: simulated {a['preemptions']}, real {b['preemptions']} "
                   "(KV capacity or victim choice differs)")
    if a["max_running"] != b["max_running"]:
        out.append(f"max running requests: simulated {a['max_running']}, real {b['max_running']}")
    if a["prefill_tokens"] != b["prefill_tokens"]:
        out.append(f"prefill tokens computed: simulated {a['prefill_tokens']}, real "
                   f"{b['prefill_tokens']} (prefix-cache hits or recompute differ)")
    if abs(a["mean_prefill_tokens_per_prefill_step"] - b["mean_prefill_tokens_per_prefill_step"]) \
            > 0.05 * max(b["mean_prefill_tokens_per_prefill_step"], 1):
        out.append(f"prefill chunking: simulated {a['mean_prefill_tokens_per_prefill_step']:.0f} "
                   f"tokens per prefill step, real {b['mean_prefill_tokens_per_prefill_step']:.0f}")
    if a["mixed_steps"] != b["mixed_steps"] and abs(a["mixed_steps"] - b["mixed_steps"]) > 0.05 * max(b["mixed_steps"], 1):
        out.append(f"hybrid (prefill + decode) steps: simulated {a['mixed_steps']}, real "
                   f"{b['mixed_steps']}")
    fd = cmp.get("first_divergence")
    if fd:
        out.append(f"per-step batches differ from step {fd['step']} on "
                   f"({cmp['compared_steps'] - cmp['identical_steps']} of "
                   f"{cmp['compared_steps']} steps): simulated {fd['sim']}, real {fd['real']}")
        s, r = fd.get("sim") or {}, fd.get("real") or {}
        if fd["step"] == 0 and r and s and r.get("running", 0) < s.get("running", 0):
            out.append("the engine started stepping before every request was submitted (the "
                       "offline API adds requests one by one; the simulator has them all at t=0)")
    return out


def summary_line(cmp: dict) -> str:
    a, b = cmp["sim"], cmp["real"]
    head = (f"steps {a['steps']} sim / {b['steps']} real, identical {cmp['identical_steps']}/"
            f"{cmp['compared_steps']}; preemptions {a['preemptions']}/{b['preemptions']}; "
            f"mean decodes/step {a['mean_decodes_per_step']:.1f}/{b['mean_decodes_per_step']:.1f}; "
            f"prefill tokens/prefill step {a['mean_prefill_tokens_per_prefill_step']:.0f}/"
            f"{b['mean_prefill_tokens_per_prefill_step']:.0f}")
    return head if not cmp["findings"] else head + " -- " + "; ".join(cmp["findings"][:3])
