"""The one output pipeline of a finished study: winners -> exports -> report -> results.json.

`tuner search` and `tuner results` run all of it (:func:`study_outputs`, then
:func:`write_outputs`); `tuner report` renders the same context again (:func:`study_outputs`
and :func:`reports.html.render_report`). Nothing here prints: the CLI shows the result.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import optuna

from predictors.protocol import CostModel
from reports.context import Exports, ReportContext, build_report_context
from reports.extras import max_request_tokens, report_extras, winner_header
from reports.html import render_report
from tuner.core.catalog import GPU, ModelSpec
from tuner.core.config import ServingConfig
from tuner.core.io import dumps, write_atomic
from tuner.core.workload import Workload
from tuner.exports import to_json, to_vllm_yaml
from tuner.search.records import (
    GOALS,
    TrialRecord,
    infeasible_summary,
    offload_verdict,
    require_feasible,
    search_stats,
    trial_records,
    winners,
)


@dataclass
class StudyOutputs:
    """What a finished study yields: its records, report context and search statistics."""

    study_name: str
    records: list[TrialRecord]
    context: ReportContext
    stats: dict
    files: dict[str, Path] = field(default_factory=dict)  # filled by write_outputs

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
            "infeasible": infeasible_summary(self.records),
            "importances": ctx.importances,
            "search": self.stats,
            "files": {k: str(v) for k, v in self.files.items()},
        }


def _notes(workload: Workload, stats: dict, extra_notes: list[str]) -> list[str]:
    notes = [f"Prompt lengths: {workload.tokenizer}. Output lengths: {workload.output_source}."]
    err = stats.get("sampling_error")
    if err:
        notes.append(
            f"Multi-fidelity: {stats['screened_on_sample']} of {stats['configurations']} "
            f"configurations were judged on a {stats.get('sample_requests')}-request stratified "
            f"sample only; the sample's estimate was within "
            f"{100 * err['relative_error']['max']:.1f} % of the full simulation on all "
            f"{err['pairs']} configurations simulated both ways.")
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
    stats = search_stats(study)
    extras = report_extras(study, records, workload, model, gpus, out_dir=out_dir,
                           workload_path=workload_path, cost_model_for=cost_model_for)
    verdict = offload_verdict(records, gpus)
    ctx = build_report_context(
        study_name=study.study_name, records=records, workload=workload, model=model,
        gpus=gpus, exports=_winner_yaml(records, workload, model, gpus),
        question=(f"{Path(workload.source).name or 'workload'} ({len(workload)} requests) on "
                  f"{model.name}: which of {', '.join(gpus)} finishes fastest, and which "
                  "cheapest?"),
        tool_version=tool_version, notes=_notes(workload, stats, extra_notes),
        verdicts=[verdict] if verdict else [], extras=extras)
    return StudyOutputs(study.study_name, records, ctx, stats)


def _winner_yaml(records: list[TrialRecord], workload: Workload, model: ModelSpec,
                 gpus: dict[str, GPU]) -> Exports:
    """The overall winners as `vllm serve --config` YAML."""
    best, _ = winners(records)
    by_num = {r.number: r for r in records}
    yaml = {}
    for goal in GOALS:
        r = by_num[best[goal]]
        cfg = r.serving_config()
        yaml[goal] = to_vllm_yaml(cfg, model, gpus[cfg.gpu],
                                  max_model_len=max_request_tokens(workload),
                                  header=winner_header(goal, r, len(workload), cite_trial=False),
                                  kv_capacity_tokens=r.metrics.get("kv_capacity_tokens"))
    return Exports(yaml["fastest"], yaml["cheapest"])


def write_outputs(outputs: StudyOutputs, out_dir: Path) -> dict:
    """Write the winners' exports (vLLM YAML, JSON), the report and results.json into
    ``out_dir``; return the results.json document."""
    ctx, files = outputs.context, outputs.files
    for goal in GOALS:
        r = outputs.by_number[ctx.winners.of(goal)]
        text = ctx.exports.fastest_vllm_yaml if goal == "fastest" else \
            ctx.exports.cheapest_vllm_yaml
        files[f"{goal}_vllm_yaml"] = write_atomic(out_dir / f"{goal}.vllm.yaml", text)
        files[f"{goal}_json"] = write_atomic(
            out_dir / f"{goal}.json",
            to_json(r.serving_config(), r.metrics, r.memory,
                    {"trial": r.number, "provenance": str(r.provenance)}))
    files["report"] = render_report(ctx, out_dir / "report.html")
    summary = outputs.summary()
    files["results"] = write_atomic(out_dir / "results.json", dumps(summary))
    return summary


__all__ = ["StudyOutputs", "study_outputs", "write_outputs"]
