"""The one output pipeline of a finished study: winners -> exports -> report -> results.json.

`tuner search` and `tuner results` run all of it (:func:`study_outputs`, then
:func:`write_outputs`); `tuner report` renders the same context again (:func:`study_outputs`
and :func:`reports.html.render_html`, written by :func:`write_output_set`). Nothing here
prints: the CLI shows the result.

The outputs are a set: every file is rendered in memory first, written into a staging folder
(a hidden folder inside the output folder, so on the same file system; the output folder is the
one place the CLI has checked is writable), and moved into place only when all are complete,
with Ctrl-C held back while they move. An error or Ctrl-C before that leaves the previous
complete set as it was; one during the moves (the file system refusing a rename) puts the
previous set back.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import tempfile
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import optuna

from tuner.core.catalog import GPU, ModelSpec
from tuner.core.config import ServingConfig
from tuner.core.io import dumps, write_atomic
from tuner.core.workload import Workload
from tuner.exports import EXPORT_SUFFIX, to_json
from tuner.predictors.protocol import CostModel
from tuner.reports.context import Exports, ReportContext, build_report_context
from tuner.reports.extras import report_extras
from tuner.reports.html import render_html
from tuner.search.constraints import trial_ref
from tuner.search.meta import StudyMeta, study_meta
from tuner.search.records import (
    GOALS,
    TrialRecord,
    bounds_hit,
    engine_winners,
    infeasible_summary,
    offload_verdict,
    outside_space_verdicts,
    pareto,
    require_feasible,
    search_stats,
    study_constraints,
    trial_records,
    winners,
)
from tuner.search.spot import attach as spot_attach
from tuner.search.spot import study_rates as spot_study_rates
from tuner.search.spot import verdicts as spot_verdicts

#: Export formats `tuner search` writes for each winner besides its vLLM YAML and JSON.
SCALE_FORMATS = ("run-batch", "ray-data")
#: each engine's config files beside a winner's JSON, and the one the report shows first
ENGINE_FORMATS = {"vllm": ("vllm",), "sglang": ("sglang", "sglang-offline")}
PRIMARY_FORMAT = {"vllm": "vllm", "sglang": "sglang"}


@dataclass
class StudyOutputs:
    """What a finished study yields: its records, report context and search statistics."""

    study_name: str
    records: list[TrialRecord]
    context: ReportContext
    stats: dict
    files: dict[str, Path] = field(default_factory=dict)  # filled by write_outputs
    # requests longer than the context, reported as failed (--on-too-long skip)
    failed_too_long: dict | None = None
    # {goal: where the winner sits on a bound of the search} (winner_bounds)
    bounds: dict = field(default_factory=dict)
    # mixes of GPU types on the makespan-$ front beside the single-type plans
    # (tuner.search.fleet), as results.json's "fleets" entries
    fleets: list[dict] = field(default_factory=list)
    # {file name: why it was not written} (filled by output_texts): a winner's export whose
    # engines could not start for its plan (tuner.exports.export_refusal)
    skipped: dict[str, str] = field(default_factory=dict)

    @property
    def by_number(self) -> dict[int, TrialRecord]:
        return self.context.by_number

    def summary(self) -> dict:
        """The results.json document (and `--json` output)."""
        ctx, by_num = self.context, self.by_number
        return {
            "study": self.study_name,
            "verdicts": ctx.verdicts,
            "winners": {g: by_num[ctx.winners.of(g)] for g in GOALS},
            "best_per_gpu": {gpu: {g: by_num[p.of(g)] for g in GOALS}
                             for gpu, p in ctx.best_per_gpu.items()},
            "pareto": [by_num[n] for n in ctx.pareto],
            "fleets": self.fleets,
            "infeasible": infeasible_summary(self.records),
            "gain_over_vllm_defaults": {g: _gain_entry(by_num[ctx.winners.of(g)])
                                        for g in GOALS},
            # each engine's own best plans (--engines), each against its engine's defaults
            "best_per_engine": {e: {g: by_num[n] for g, n in d.items()}
                                for e, d in engine_winners(self.records).items()},
            "bounds": self.bounds,
            "failed_too_long": self.failed_too_long,
            "importances": ctx.importances,
            "search": self.stats,
            "files": {k: str(v) for k, v in self.files.items()},
            "skipped_files": dict(self.skipped),
        }


def _notes(workload: Workload, stats: dict, extra_notes: list[str]) -> list[str]:
    notes = [f"Prompt lengths: {workload.tokenizer}. Output lengths: {workload.output_source}."]
    err = stats.get("sampling_error")
    if err:
        notes.append(
            f"Multi-fidelity: {stats['screened_on_sample']} of {stats['configurations']} "
            f"configurations were judged on a stratified sample only (one replica's share of "
            f"the job, up to {stats.get('sample_requests')} requests); the sample's estimate "
            f"was within "
            f"{100 * err['relative_error']['max']:.1f} % of the full simulation on all "
            f"{err['pairs']} configurations simulated both ways.")
        rung = stats.get("rung_error")
        if stats.get("judged_on_rung"):
            notes.append(
                f"Successive rungs: {stats['judged_on_rung']} configurations were judged on a "
                f"larger stratified sample of up to {stats.get('rung_requests')} requests "
                f"before only those still near a front were simulated in full"
                + (f"; the rung's estimate was within {100 * rung['max']:.2f} % of the full "
                   f"simulation on all {rung['pairs']} simulated both ways." if rung else "."))
    return notes + list(extra_notes)


def study_outputs(study: optuna.Study, workload: Workload, model: ModelSpec,
                  gpus: dict[str, GPU], *, tool_version: str,
                  cost_model_for: Callable[[GPU, ServingConfig], CostModel] | None = None,
                  out_dir: Path | None = None, workload_path: str | None = None,
                  extra_notes: list[str] = ()) -> StudyOutputs:
    """Records, winners' exports and the report context of a finished study; TunerError when no
    configuration is feasible."""
    records = trial_records(study)
    require_feasible(records, study.study_name)
    meta = study_meta(study)
    # which sampler settings proposed which trials (more than one after a --resume with
    # another --sampler / --seed)
    stats = {**search_stats(study), "samplers": meta.sampler_history()}
    extra_notes = [*extra_notes, *_baseline_notes(records, workload, model, gpus, meta,
                                                  cost_model_for), *_sampler_notes(meta)]
    too_long = meta.too_long
    if too_long:
        extra_notes.append(too_long_note(too_long))
    start = startup_note(records)
    if start:
        extra_notes.append(start)
    extras = report_extras(study, records, workload, model, gpus, out_dir=out_dir,
                           workload_path=workload_path, cost_model_for=cost_model_for)
    fleets = fleet_entries(study, records, workload, model, gpus, cost_model_for)
    rates = spot_study_rates(meta)
    if rates is not None:  # --spot: expected figures under interruptions beside each plan's
        spot_attach(rates, records, fleets)
    verdicts = constraint_verdicts(study, records, fleets,
                                   beside=_sixteen_bit_beside(records, workload, model, gpus,
                                                              meta, cost_model_for))
    bounds = winner_bounds(study, records, gpus)
    verdicts += estimate_verdicts(records) + price_verdicts(records, gpus)
    verdicts += outside_space_verdicts(records)  # the defaults beat the space: said first
    verdicts += runs_as_verdicts(records)
    verdicts += engine_verdicts(records) + defaults_verdicts(records) + [
        f"{goal} sits on a bound of the search: {'; '.join(lines)}."
        for goal, lines in bounds.items() if lines]
    verdict = offload_verdict(records, gpus)
    verdicts += [verdict] if verdict else []
    verdicts += fleet_verdicts(fleets, records)
    if rates is not None:
        verdicts += spot_verdicts(records, winners(records)[0], fleets)
    ctx = build_report_context(
        study_name=study.study_name, records=records, workload=workload, model=model,
        gpus=gpus, exports=_winner_yaml(extras["export_snippets"],
                                        {r.number: r for r in records}),
        question=(f"{Path(workload.source).name or 'workload'} ({len(workload)} requests) on "
                  f"{model.name}: which of {', '.join(gpus)} finishes fastest, and which "
                  "cheapest?"),
        tool_version=tool_version, notes=_notes(workload, stats, extra_notes),
        verdicts=verdicts, extras={**extras, "fleets": fleets})
    return StudyOutputs(study.study_name, records, ctx, stats, failed_too_long=too_long,
                        bounds=bounds, fleets=fleets)


def _sampler_notes(meta: StudyMeta) -> list[str]:
    """One note when a --resume went on under another sampler or seed: which proposed which
    trials (rerunning with either setting alone proposes other trials)."""
    runs = meta.sampler_history()
    if len(runs) < 2:
        return []
    spans = [f"trials #{r['from_trial']}"
             + (f"-#{nxt['from_trial'] - 1}" if nxt is not None else " on")
             + f" by {r['description']}"
             for r, nxt in zip(runs, [*runs[1:], None], strict=True)]
    return [f"Sampler: {'; '.join(spans)} (--resume with another --sampler or --seed; one run "
            "with either setting alone would propose other trials)."]


def fleet_entries(study: optuna.Study, records: list[TrialRecord], workload: Workload,
                  model: ModelSpec, gpus: dict[str, GPU],
                  cost_model_for: Callable[[GPU, ServingConfig], CostModel] | None) -> list[dict]:
    """results.json's "fleets": the mixes of GPU types (tuner.search.fleet) that no single-type
    plan and no other mix beats on both makespan and $, within each type's --max-gpus cap (and
    the total one), each marked with whether it meets --deadline / --budget; [] with one GPU
    type."""
    from tuner.predictors.sources import cost_model_for as default_cost_models
    from tuner.search.fleet import fleet_front

    if len({r.gpu for r in records if r.feasible}) < 2:
        return []
    from tuner.search.space import DEFAULT_MAX_GPUS

    meta = study_meta(study)
    limits = meta.constraints
    # a mix is one plan: the default cap on a plan's GPUs holds for its total too, unless
    # --max-gpus set the total or what each type can be had at
    total = limits.max_gpus if limits.max_gpus is not None or limits.max_gpus_per_type \
        else DEFAULT_MAX_GPUS
    plans = fleet_front(workload, model, gpus, records,
                        caps={g: limits.gpu_cap(g) for g in gpus},
                        max_total_gpus=total,
                        cost_model_for=cost_model_for or default_cost_models(model),
                        max_plans=4, **meta.sim_options())
    # with --deadline / --budget, a mix that misses them is no answer (its rivals are the
    # single-type plans that meet them)
    return [{**p.to_dict(), "meets_constraints": True} for p in plans
            if limits.meets(p.makespan_s, p.cost_usd)]


def fleet_verdicts(fleets: list[dict], records: list[TrialRecord]) -> list[str]:
    """One line for the fastest mix on the front."""
    from tuner.core.units import fmt_duration, fmt_usd
    from tuner.search.fleet import beaten_by_mix, single_plans

    if not fleets:
        return []
    f = fleets[0]
    fastest = min(single_plans(records), key=lambda r: r.metrics.makespan_s, default=None)
    than = ("" if fastest is None else
            f" (the fastest single GPU type: {fmt_duration(fastest.metrics.makespan_s)} = "
            f"{fastest.metrics.makespan_s:,.0f} s on "
            f"{fastest.config.num_gpus} x {fastest.gpu}, {fmt_usd(fastest.metrics.cost_usd)})")
    lines = [f"A mix of GPU types is on the front: {f['description']} finishes in "
             f"{fmt_duration(f['makespan_s'])} = {f['makespan_s']:,.0f} s for "
             f"{fmt_usd(f['cost_usd'])}, its parts within "
             f"{100 * f['finish_spread']:.1f} % of each other{than}; results.json's \"fleets\" "
             "lists each part's share."]
    # a winner is single-type (its exports run one GPU type): say where a mix beats it on both
    by_num = {r.number: r for r in records}
    for goal, n in winners(records)[0].items():
        r = by_num[n]
        k = beaten_by_mix([(r.makespan_s, r.cost_usd)], fleets)[0]
        if k is not None:
            m = fleets[k - 1]
            lines.append(
                f"The {goal} single-type plan ({r.config.num_gpus} x {r.gpu}, "
                f"{fmt_duration(r.makespan_s)} = {r.makespan_s:,.0f} s, {fmt_usd(r.cost_usd)}) "
                f"is beaten on both makespan and $ by mix {k}, {m['description']}: "
                f"{m['makespan_s']:,.0f} s, {fmt_usd(m['cost_usd'])} (`tuner export --fleet {k} "
                "--output DIR` writes it).")
    return lines


def winner_bounds(study: optuna.Study, records: list[TrialRecord],
                  gpus: dict[str, GPU]) -> dict[str, list[str]]:
    """{goal: where the overall winner sits on a bound of the search, with the flag that
    widens it} (tuner.search.records.bounds_hit)."""
    meta = study_meta(study)
    limits = meta.constraints
    best, _ = winners(records)
    by_num = {r.number: r for r in records}
    out = {}
    for goal, n in best.items():
        r = by_num[n]
        per = gpus[r.gpu].gpus_per_machine if r.gpu in gpus else 8
        out[goal] = bounds_hit(r, meta.knobs or {}, limits, per, Path(meta.space).name)
    return out


#: how an unmeasured GPU's step times are had, by provenance kind (tuner.core.provenance)
_ESTIMATED_HOW = {
    "transferred": "its kernel times are carried from a measured GPU by spec-sheet ratios",
    "roofline": "its step times come from its spec sheet (roofline), nothing measured",
}


def estimate_verdicts(records: list[TrialRecord]) -> list[str]:
    """One line per overall winner whose GPU's figures are estimated (transferred or roofline),
    so the answer never reads as measured where it is not."""
    best, _ = winners(records)
    by_num = {r.number: r for r in records}
    by_gpu: dict[str, tuple[list[str], TrialRecord]] = {}
    for goal, n in best.items():
        r = by_num[n]
        if r.provenance is not None and r.provenance.kind in _ESTIMATED_HOW:
            by_gpu.setdefault(r.gpu, ([], r))[0].append(goal)
    out = []
    for gpu, (named, r) in by_gpu.items():
        p = r.provenance
        err = (f" (that rule's error: {p.error_pct:.1f} % median where it could be checked)"
               if p.error_pct is not None else "")
        plans = " and ".join(named).capitalize() + (" plans" if len(named) > 1 else " plan")
        out.append(f"{plans} on {gpu}: estimated, not measured on {gpu}: "
                   f"{_ESTIMATED_HOW[p.kind]}{err}; the cost-model lines below say how.")
    return out


def price_verdicts(records: list[TrialRecord], gpus: dict[str, GPU]) -> list[str]:
    """One line naming the GPUs with a feasible plan whose $/GPU-h is no current list price
    (tuner.core.pricing.price_caveat), so no $ reads as a quote where it rests on a guess."""
    from tuner.core.pricing import price_caveat

    shown = [g for g in dict.fromkeys(r.gpu for r in records if r.feasible) if g in gpus]
    named = [f"{g}'s ${gpus[g].price_usd_per_h:,.2f}/GPU-h is {caveat}"
             for g in shown if (caveat := price_caveat(gpus[g]))]
    if not named:
        return []
    # the listing that shows these prices' source: a provider's spot table where --spot
    billings = [gpus[g].billing for g in shown if getattr(gpus[g], "billing", None) is not None]
    where = ("tuner gpus" if not billings else
             f"tuner gpus --provider {billings[0].provider}"
             + (" --spot" if any(b.spot for b in billings) else ""))
    return [f"Prices: {'; '.join(named)} (`{where}` gives the source): every $ of a plan on "
            "such a GPU rests on that figure; --price GPU=USD sets yours."]


def engine_verdicts(records: list[TrialRecord]) -> list[str]:
    """One line with each engine's best plans when the study simulated more than one engine
    (--engines): the answer to "and on the other engine?"."""
    from tuner.core.units import fmt_duration, fmt_usd
    from tuner.search.baseline import describe_gain, engine_name
    from tuner.search.constraints import plan_label

    per = engine_winners(records)
    if len(per) < 2:
        return []
    by_num = {r.number: r for r in records}
    parts = []
    for engine, d in per.items():
        f, c = by_num[d["fastest"]], by_num[d["cheapest"]]
        # one plan both: named as both ("fastest" alone read as a missing cheapest)
        both = "fastest and cheapest" if c.number == f.number else "fastest"
        says = [f"{both} {plan_label(f.config)} {fmt_duration(f.makespan_s)} "
                f"{fmt_usd(f.cost_usd)} ({trial_ref(f)}"
                + (f", {describe_gain(f.baseline)}" if f.baseline else "") + ")"]
        if c.number != f.number:
            says.append(f"cheapest {plan_label(c.config)} {fmt_duration(c.makespan_s)} "
                        f"{fmt_usd(c.cost_usd)} ({trial_ref(c)}"
                        + (f", {describe_gain(c.baseline)}" if c.baseline else "") + ")")
        # its best plans fall back to those that miss the goal where none meets it
        # (tuner.search.records.rank): said, so no over-budget plan reads as an answer
        miss = ("" if f.within else
                f" (no {engine_name(engine)} plan meets the --deadline / --budget)")
        parts.append(f"{engine_name(engine)}: {'; '.join(says)}{miss}")
    return ["Best per engine — " + ". ".join(parts) + "."]


def runs_as_verdicts(records: list[TrialRecord]) -> list[str]:
    """One line per winner or Pareto point that runs another R_max than the search sampled
    (TrialRecord.runs_as_note: a hybrid's SGLang state pool caps it): its tables and exports
    give the R_max that runs, this says why it is not the one sampled."""
    best, _ = winners(records)
    by_num = {r.number: r for r in records}
    roles: dict[int, list[str]] = {}
    for goal, n in best.items():
        roles.setdefault(n, []).append(goal)
    for n in pareto(records):
        roles.setdefault(n, [f"Pareto point {trial_ref(by_num[n])}"])
    return [f"{' and '.join(named).capitalize() if named[0] in GOALS else named[0]}: "
            f"{by_num[n].runs_as_note}."
            for n, named in roles.items() if by_num[n].runs_as_note]


def defaults_verdicts(records: list[TrialRecord]) -> list[str]:
    """One line per overall winner that is its engine's own defaults (same GPUs, same
    precision): tuning the serving knobs gains nothing there."""
    from tuner.search.baseline import engine_name
    from tuner.search.constraints import plan_label

    best, _ = winners(records)
    by_num = {r.number: r for r in records}
    out = []
    goals: dict[int, list[str]] = {}
    for goal, n in best.items():
        goals.setdefault(n, []).append(goal)
    for n, named in goals.items():
        r = by_num[n]
        b = r.baseline or {}
        # defaults outside the space: outside_space_verdicts says it; defaults run at another
        # scheduler step count (untuned V0: 1, the plan 10) are not the plan
        steps = (b.get("defaults") or {}).get("num_scheduler_steps")
        if (b.get("feasible") and b.get("config") == r.config.to_dict()
                and not r.engine_defaults and steps is None):
            out.append(f"{' and '.join(named).capitalize()}: {engine_name(r.config.engine)}'s "
                       "defaults are already the "
                       f"best plan on {plan_label(r.config)}; only the GPU type and count are "
                       "tuner's answer there.")
    return out


def _gain_entry(r: TrialRecord) -> dict | None:
    """results.json's gain of one winner over vLLM's defaults (same GPU type and count)."""
    from tuner.search.baseline import describe_gain

    if r.baseline is None:
        return None
    return {"trial": r.number, "gpu": r.gpu, "engine": r.config.engine, "tp": r.config.tp,
            "dp": r.config.dp, **(r.baseline.get("gain") or {}),
            "defaults_feasible": r.baseline.get("feasible"),
            "defaults_makespan_s": (r.baseline.get("metrics") or {}).get("makespan_s"),
            "defaults_cost_usd": (r.baseline.get("metrics") or {}).get("cost_usd"),
            "defaults": r.baseline.get("defaults"), "summary": describe_gain(r.baseline)}


def _baseline_notes(records: list[TrialRecord], workload: Workload, model: ModelSpec,
                    gpus: dict[str, GPU], meta: StudyMeta, cost_model_for) -> list[str]:
    """Simulate vLLM's defaults beside every winner and Pareto point (tuner.search.baseline);
    the report's note saying what the baseline is."""
    from tuner.core.engine_defaults import DEFAULT_ENTRY_POINT, ENTRY_POINTS
    from tuner.search.baseline import attach_baselines
    from tuner.search.records import pareto

    best, per_gpu = winners(records)
    numbers = [*best.values(), *(n for d in per_gpu.values() for n in d.values()),
               *(n for d in engine_winners(records).values() for n in d.values()),
               *pareto(records)]
    entry = meta.entry_point or DEFAULT_ENTRY_POINT
    sims = attach_baselines(records, numbers, workload, model, gpus, entry_point=entry,
                            engine_version=meta.engine_version,
                            cost_model_for=cost_model_for, startup_s=meta.startup_s,
                            num_scheduler_steps=meta.num_scheduler_steps)
    if not sims:
        return []
    notes = []
    vllm = {k: s for k, s in sims.items() if k[-1] == "vllm"}
    if vllm:
        described = "; ".join(dict.fromkeys(
            f"{g}: max_num_batched_tokens {s['defaults']['max_num_batched_tokens']:,}, "
            f"max_num_seqs {s['defaults']['max_num_seqs']:,}" for (g, *_), s in vllm.items()))
        notes.append(f"Gain over vLLM's defaults: each vLLM plan against vLLM's own defaults for "
                     f"the '{entry}' entry point ({ENTRY_POINTS[entry]}) on the same GPU type "
                     f"and count ({described}; gpu_memory_utilization 0.9, block 16, 16-bit, "
                     "FCFS, chunked prefill), simulated on the full workload with the same cost "
                     "model; ratios are winner / defaults."
                     + "".join(dict.fromkeys(  # V0 above 32K context (baseline.simulate_baseline)
                         " " + _sentence(s["defaults"]["description"].rsplit("; ", 1)[-1])
                         for s in vllm.values() if s["defaults"].get("num_scheduler_steps"))))
    sglang = {k: s for k, s in sims.items() if k[-1] == "sglang"}
    if sglang:
        described = "; ".join(dict.fromkeys(
            f"{g}: --chunked-prefill-size {s['config']['chunk_size']:,}, --mem-fraction-static "
            f"{s['config']['gpu_memory_utilization']:g}, --max-running-requests "
            f"{s['config']['max_running']:,} at TP {tp}" if s.get("defaults") is not None
            else f"{g} at TP {tp}: none ({s['reason'].rstrip('.')})"
            for (g, tp, *_), s in sglang.items()))
        notes.append(f"Gain over SGLang's defaults: each SGLang plan against SGLang's own "
                     f"defaults on the same GPU type and count ({described}; schedule policy "
                     "fcfs, radix cache on; tuner.core.sglang), simulated the same way.")
    return notes


def _sentence(clause: str) -> str:
    """A clause as a sentence: its first letter upper-case, a full stop."""
    return clause[:1].upper() + clause[1:] + "."


def startup_note(records: list[TrialRecord]) -> str | None:
    """The line on engine start-up (tuner.core.startup) the makespans and $ include, with the
    fastest plan's breakdown; None for a study simulated before start-up was priced."""
    best, _ = winners(records)
    r = next((r for r in records if r.number == best.get("fastest")), None)
    st = r.metrics.startup if r is not None and r.metrics is not None else None
    if not isinstance(st, dict) or not st.get("description"):
        return None
    return ("Start-up: every makespan and job $ include each replica's engine start-up before "
            "its first step (replicas start at once, and every rented GPU is paid for it); the "
            "\"of physical limit\" figure leaves it out on both sides (the schedule against "
            "its bound T_o). Fastest plan "
            f"({trial_ref(r)}): {st['description']}. --startup-s S sets it (0: the schedule alone).")


def too_long_note(info: dict) -> str:
    ids = info.get("ids") or []
    shown = ", ".join(str(i) for i in ids[:50]) + (f" and {len(ids) - 50} more"
                                                    if len(ids) > 50 else "")
    if info.get("mode") == "cap":
        return (f"{info['count']} of {info['requests']} requests exceed the model's context of "
                f"{info['context_tokens']:,} tokens (longest {info['longest_tokens']:,} prompt + "
                "output tokens): their outputs end at the context, as LLM.generate ends them "
                f"({info['output_tokens_lost']:,} output tokens fewer; "
                f"{info.get('id_kind', 'request numbers')}: {shown}).")
    return (f"{info['count']} of {info['requests']} requests exceed the model's context of "
            f"{info['context_tokens']:,} tokens (longest {info['longest_tokens']:,} prompt + "
            "output tokens): reported as failed, as vLLM's server once refused them, and left out of the "
            f"simulation ({info.get('id_kind', 'request numbers')}: {shown}).")


def _sixteen_bit_beside(records: list[TrialRecord], workload: Workload, model: ModelSpec,
                        gpus: dict[str, GPU], meta: StudyMeta,
                        cost_model_for) -> Callable[[TrialRecord], list[dict]]:
    """16 bits on a quantized plan's GPUs, simulated as the defaults beside the winners are
    (tuner.search.baseline.sixteen_bit_beside), for the quantization verdict."""
    from tuner.core.engine_defaults import DEFAULT_ENTRY_POINT
    from tuner.search.baseline import sixteen_bit_beside

    simulated = {r.config: r.metrics for r in records
                 if r.feasible and r.metrics and r.level == "full"}

    def beside(record: TrialRecord) -> list[dict]:
        if record.gpu not in gpus:
            return []
        return sixteen_bit_beside(record, workload, model, gpus,
                                  entry_point=meta.entry_point or DEFAULT_ENTRY_POINT,
                                  engine_version=meta.engine_version,
                                  cost_model_for=cost_model_for, simulated=simulated,
                                  startup_s=meta.startup_s,
                                  num_scheduler_steps=meta.num_scheduler_steps)
    return beside


def constraint_verdicts(study: optuna.Study, records: list[TrialRecord],
                        fleets: list[dict] = (),
                        beside: Callable[[TrialRecord], list[dict]] | None = None) -> list[str]:
    """The plan a --deadline / --budget picks (one TunerError line when no plan meets it, nor
    a mix of GPU types among `fleets`), and what quantization buys when the search allowed
    it (`beside`: 16 bits simulated on a quantized plan's GPUs where the search tried none,
    tuner.search.constraints.quantization_verdict)."""
    from tuner.core.errors import TunerError
    from tuner.core.units import fmt_duration, fmt_usd
    from tuner.search.constraints import no_plan_line, parallel_label, quantization_verdict
    from tuner.search.records import rank

    limits = study_constraints(study)
    out = []
    if limits.on_figures:
        mixes = [f for f in fleets if f["meets_constraints"]]
        if not any(r.feasible and r.within for r in records):
            if not mixes:
                raise TunerError(no_plan_line(records, limits, fmt_usd))
            key = "cost_usd" if limits.goal == "cheapest" else "makespan_s"
            m = min(mixes, key=lambda f: f[key])
            k = next(i for i, f in enumerate(fleets, 1) if f is m)
            return [f"Plan: only a mix of GPU types {limits.describe()}: {m['description']}: "
                    f"{fmt_duration(m['makespan_s'])}, {fmt_usd(m['cost_usd'])} (results.json "
                    f"\"fleets\" #{k}: `tuner export --fleet {k} --output DIR` writes it; as one "
                    f"GPU type, {no_plan_line(records, limits, fmt_usd)[:-1]}: the fastest and "
                    "cheapest files are single-type plans that miss it)."]
        best = rank(records, limits.goal)[0]
        c = best.config
        out.append(f"Plan: the {limits.goal} that {limits.describe()} is "
                   f"{c.num_gpus} x {best.gpu} ({'SGLang, ' if c.engine == 'sglang' else ''}"
                   f"{parallel_label(c)})"
                   f": {fmt_duration(best.makespan_s)}, {fmt_usd(best.cost_usd)} "
                   f"({trial_ref(best)}).")
    verdict = quantization_verdict(records, limits.goal if limits.on_figures else "cheapest",
                                   fmt_usd, beside)
    if verdict:
        out.append(verdict)
    return out


def _winner_yaml(snippets: dict, records: dict) -> Exports:
    """The overall winners' engine configs (`vllm serve --config` YAML, or an SGLang plan's
    launch command): the report's snippets, rendered once (:func:`reports.extras.
    export_snippets`; a quantized plan names its checkpoint or is refused,
    tuner.exports.common.Deployment.check_deployable)."""
    def primary(goal: str) -> str:
        engine = records[snippets[goal]["trial"]].config.engine
        fmt = PRIMARY_FORMAT[engine]
        text = snippets[goal]["formats"].get(fmt)
        if text is None:  # refused for the plan (e.g. flags its vLLM release lacks): say why
            why = (snippets[goal].get("skipped") or {}).get(fmt, "not written")
            ref = trial_ref(records[snippets[goal]["trial"]])
            text = f"# The {fmt} export of {ref} is not written: {why}.\n"
        return text

    return Exports(primary("fastest"), primary("cheapest"))


def _export_model(ctx: ReportContext, snippets: dict) -> dict:
    """A winner JSON's model: the JSON export's (name, HF id and the checkpoint the engine
    loads: the one the user named, or the --quantized-model one), else the report's."""
    doc = (snippets.get("formats") or {}).get("json")
    if doc:
        return json.loads(doc)["model"]
    m = ctx.model
    return {"name": m.name, "hf_id": m.hf_id, "checkpoint": m.checkpoint or m.hf_id or m.name}


def output_texts(outputs: StudyOutputs, out_dir: Path) -> tuple[dict[str, str], dict]:
    """({file name: text} of the whole output set, the results.json document), rendered in
    memory; ``outputs.files`` gets each file's final path under ``out_dir``."""
    ctx, files = outputs.context, outputs.files
    texts: dict[str, str] = {}
    for goal in GOALS:
        r = outputs.by_number[ctx.winners.of(goal)]
        snippets = (ctx.export_snippets or {}).get(goal) or {}
        # the winner's engine config: vLLM's YAML, or for an SGLang-simulated plan its launch
        # command and offline engine script
        for fmt in ENGINE_FORMATS[r.config.engine]:
            text = (snippets.get("formats") or {}).get(fmt)
            if fmt == PRIMARY_FORMAT[r.config.engine]:
                text = (ctx.exports.fastest_engine_config if goal == "fastest"
                        else ctx.exports.cheapest_engine_config)
            if text is not None:
                texts[f"{goal}{EXPORT_SUFFIX[fmt]}"] = text
                files[f"{goal}_{fmt.replace('-', '_')}{'_yaml' if fmt == 'vllm' else ''}"] = \
                    out_dir / f"{goal}{EXPORT_SUFFIX[fmt]}"
        texts[f"{goal}.json"] = to_json(r.config, r.metrics.to_dict(),
                                        r.memory.to_dict() if r.memory is not None else None,
                                        {"model": _export_model(ctx, snippets),
                                         "machines": r.metrics.machines,
                                         "trial": r.number, "provenance": str(r.provenance)})
        files[f"{goal}_json"] = out_dir / f"{goal}.json"
        # at scale, as written: the plan's DP replicas as `vllm run-batch` over a split of the
        # workload, and the same plan as a Ray Data LLM job (rendered once, for the report;
        # vLLM plans only)
        for fmt in SCALE_FORMATS if r.config.engine == "vllm" else ():
            text = (snippets.get("formats") or {}).get(fmt)
            why = (snippets.get("skipped") or {}).get(fmt)
            if why is not None:
                outputs.skipped[f"{goal}{EXPORT_SUFFIX[fmt]}"] = why
            if text is not None:
                texts[f"{goal}{EXPORT_SUFFIX[fmt]}"] = text
                files[f"{goal}_{fmt.replace('-', '_')}"] = out_dir / f"{goal}{EXPORT_SUFFIX[fmt]}"
    texts["report.html"] = render_html(ctx)  # the report is assembled once, here
    files["report"] = out_dir / "report.html"
    files["results"] = out_dir / "results.json"
    summary = outputs.summary()
    texts["results.json"] = dumps(summary)
    return texts, summary


def write_outputs(outputs: StudyOutputs, out_dir: Path) -> dict:
    """Write the winners' exports (vLLM YAML, JSON), the report and results.json into
    ``out_dir`` as one set (:func:`write_output_set`); return the results.json document."""
    texts, summary = output_texts(outputs, out_dir)
    write_output_set(out_dir, texts)
    # a winner's export an earlier write left (the other engine's form, a vLLM plan's scale
    # files) would sit beside this study's winners as if it were theirs
    for goal in GOALS:
        written = {f for fmts in ENGINE_FORMATS.values() for f in fmts} | set(SCALE_FORMATS)
        for suffix in {EXPORT_SUFFIX[f] for f in written}:
            stale = Path(out_dir) / f"{goal}{suffix}"
            if stale.name not in texts:
                with contextlib.suppress(FileNotFoundError):
                    stale.unlink()
    return summary


@contextlib.contextmanager
def _interrupts_held() -> Iterator[None]:
    """Ctrl-C (SIGINT) waits until the block is done, then is raised (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[tuple] = []
    previous = signal.signal(signal.SIGINT, lambda *a: caught.append(a))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if not caught or previous == signal.SIG_IGN:
        return
    if callable(previous):
        previous(*caught[0])  # Python's default handler raises KeyboardInterrupt
    raise KeyboardInterrupt


def write_output_set(out_dir: str | Path, texts: dict[str, str | bytes]) -> dict[str, Path]:
    """Write ``{file name: content}`` into ``out_dir`` all or nothing; return the final paths.

    The files are written (each by :func:`tuner.core.io.write_atomic`) into a staging folder
    inside ``out_dir`` and moved into place only when every one is complete, with Ctrl-C held
    until the moves are done; a failing move puts the previous files back. The staging folder
    is removed in every case."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(dir=out_dir, prefix=".tuner-outputs-"))
    try:
        new_dir, old_dir = stage / "new", stage / "old"
        new_dir.mkdir()
        old_dir.mkdir()
        for name, text in texts.items():
            write_atomic(new_dir / name, text)
        with _interrupts_held():
            _move_in(new_dir, old_dir, out_dir, list(texts))
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    return {name: out_dir / name for name in texts}


def _move_in(new_dir: Path, old_dir: Path, out_dir: Path, names: list[str]) -> None:
    """Move the staged files over the previous ones (each rename atomic: a reader sees the old
    file or the new one); on an error, put back every previous file (kept in ``old_dir`` as a
    hard link, or a copy) and remove the new ones that had none."""
    moved: list[tuple[str, bool]] = []  # (name, whether it replaced a previous file), in order
    try:
        for name in names:
            target = out_dir / name
            had = target.exists()
            if had:
                try:
                    os.link(target, old_dir / name)
                except OSError:  # a file system without hard links
                    shutil.copy2(target, old_dir / name)
            os.replace(new_dir / name, target)
            moved.append((name, had))
    except BaseException:
        for name, had in reversed(moved):
            with contextlib.suppress(OSError):
                if had:
                    os.replace(old_dir / name, out_dir / name)
                else:
                    (out_dir / name).unlink()
        raise


__all__ = ["StudyOutputs", "output_texts", "study_outputs", "write_output_set",
           "write_outputs"]
