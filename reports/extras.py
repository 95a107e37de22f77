"""Report context beyond the search's records: what the report shows about the winners.

:func:`report_extras` returns the optional fields of :class:`reports.context.ReportContext`::

    ctx = build_report_context(..., extras=report_extras(study, records, workload, model, gpus))

- ``timelines``: each distinct winner (overall and per GPU) simulated again with
  ``simulate(..., timeline=True)``: running requests (batch size), KV use and preemptions over
  time, downsampled to at most :data:`TIMELINE_POINTS` points, with the re-simulated makespan
  beside the study's so a mismatch is visible.
- ``importances``: the fANOVA importance of each searched knob, per objective, over the
  distinct feasible trials (:func:`fanova_importances`: a small random forest fitted here in
  numpy, main effects under the uniform distribution on each knob's values; Optuna's
  FanovaImportanceEvaluator needs scikit-learn, whose import alone took longer than the rest
  of the report); skipped with a reason when the study is too small or constant.
- ``export_snippets``: the fastest and cheapest winners in every export format.
- ``validation``: real runs of winners (``tuner validate``): OUT/validation.json when ``out_dir``
  is given and holds one, else the study's ``validation`` user attribute, if any.

Pure functions over a finished study; nothing is written.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any

import numpy as np
import optuna

from tuner.core.catalog import GPU, ModelSpec, chat_checkpoint
from tuner.core.config import ServingConfig
from tuner.core.engines import priced_scheduler_steps
from tuner.core.errors import TunerError
from tuner.core.units import as_finite, fmt_duration, fmt_usd
from tuner.core.workload import STDIN_NAME, Workload
from tuner.exports import EXPORTERS, ExportCannotStart, formats_for, render_export
from tuner.exports.common import Deployment
from tuner.predictors.protocol import CostModel
from tuner.predictors.sources import cost_model_for as default_cost_models
from tuner.search.constraints import trial_ref
from tuner.search.meta import study_meta
from tuner.search.records import (
    TrialRecord,
    all_records,
    completed,
    study_constraints,
    trial_records,
    winner_roles_of,
    winners,
)
from tuner.sim.parallel import parallel_workers, thread_map
from tuner.sim.simulator import simulate

TIMELINE_POINTS = 400  # per winner: enough for a smooth line, small enough to embed
# rows the simulation keeps per point drawn (consecutive steps merged beyond): a row then spans
# at most 1/64 of a bin, and a multi-million-step timeline takes megabytes, not a GiB
TIMELINE_ROWS_PER_POINT = 64
MIN_IMPORTANCE_TRIALS = 8  # distinct feasible trials below which importances are not computed
OBJECTIVES = ("makespan_s", "cost_usd")  # the study's objectives, in order
# fANOVA over a small forest: on the shipped example within 4 points of 64 trees of unlimited
# depth, in a tenth of the time (the search waits for it).
FANOVA = {"n_trees": 16, "max_depth": 6, "seed": 0}
IMPORTANCE_METHOD = ("fANOVA (Hutter et al. 2014) over a random forest of 16 trees of depth 6 "
                     "(bootstrap, seed 0), main effects under the uniform distribution on each "
                     "knob's values in the search space")


# ---------------------------------------------------------------------------------------------
# Winners


def winner_roles(records: list[TrialRecord]) -> dict[int, list[str]]:
    """Trial number -> its roles ('overall fastest', 'A10 cheapest', ...), overall first."""
    return winner_roles_of(*winners(records))


def max_request_tokens(workload: Workload) -> int:
    """The longest request (prompt + output) in tokens."""
    return int((np.asarray(workload.prompt_tokens) + np.asarray(workload.output_tokens)).max())


#: The deployed context's margin over the longest request when its tokens were estimated (4
#: characters per token under-counts code and non-Latin text by tens of percent; a prompt over
#: max_model_len is refused, and vLLM's server cuts the output of one that nearly fills it)
ESTIMATE_MARGIN = 1.25


def deploy_max_model_len(workload: Workload, model: ModelSpec,
                         record: TrialRecord | None = None, *,
                         sglang: bool = False) -> tuple[int, str]:
    """(the max-model-len an export deploys, a note or ""): the longest request when its
    tokens were counted; with ESTIMATE_MARGIN more when they were estimated, at most the
    model's context and the plan's KV capacity (the engine refuses to start below one
    max-model-len of KV), never below the longest request. `sglang`: the note heads an SGLang
    file, so it names SGLang's flag (a vLLM file's names vLLM's only)."""
    longest = max_request_tokens(workload)
    if not str(workload.tokenizer).startswith("estimate"):
        return longest, ""
    mml = min(model.max_position, -(-int(longest * ESTIMATE_MARGIN) // 16) * 16)
    kv = record.metrics.kv_capacity_tokens if record is not None and record.metrics else None
    if kv:
        mml = min(mml, int(kv))
    if record is not None and not record.config.chunked_prefill:
        mml = min(mml, record.config.chunk_size)  # without chunks the budget holds a prompt
    mml = max(mml, longest)
    if mml == longest:
        return longest, ""
    # the file's own engine's name for it (SGLang's check is strict: one token more)
    limit = (f"max-model-len {mml} (SGLang: --context-length {mml + 1}, its check being "
             "strict)" if sglang else f"max-model-len {mml}")
    return mml, (f"{limit}: the longest request ({longest} tokens) was "
                 "estimated at 4 characters per token (no tokenizer offline), so the context "
                 "keeps a margin "
                 "(up to 25 %); for exact counts give -m a local model folder with its "
                 "tokenizer.json, or pass --max-model-len.")


def winner_header(label: str, record: TrialRecord, requests: int | None,
                  study: str | None = None, *, cite_trial: bool = True) -> str:
    """The summary line an export starts with: which trial (``cite_trial``), what it predicts,
    from what."""
    ref = trial_ref(record)  # an engine's defaults outside the space: no trial number
    where = ("" if not study else f" of study {study!r}" if ref.startswith("trial ")
             else f", which the space of study {study!r} does not hold")
    which = f" ({ref}{where})" if cite_trial else ""
    job = f" for {requests} requests" if requests else ""
    return (f"{label} config found by tuner{which}: predicted makespan "
            f"{fmt_duration(record.makespan_s)}, {fmt_usd(record.cost_usd)}{job} "
            f"({record.provenance or 'cost model not recorded'})")


#: the endpoints `vllm run-batch` serves (vllm/entrypoints/launchers/run_batch.py, 0.32: its
#: endpoint registry); a /v1/completions line fails its validation and stops the run
RUN_BATCH_URLS = ("/v1/chat/completions", "/v1/embeddings", "/v1/audio/transcriptions",
                  "/v1/audio/translations")


def _head_objects(path: str | Path, max_lines: int):
    """The JSON values of the first `max_lines` non-blank lines of a JSONL file (None for a
    line that is not JSON); nothing more once the file cannot be read."""
    try:
        with open(path, encoding="utf-8") as fh:
            for i, line in enumerate(fh):
                if i >= max_lines:
                    return
                if line.strip():
                    try:
                        yield json.loads(line)
                    except json.JSONDecodeError:
                        yield None
    except (OSError, UnicodeDecodeError):
        return


def run_batch_refused_urls(path: str | Path, max_lines: int = 10_000) -> list[str]:
    """The request URLs of the first lines of a Batch API JSONL that `vllm run-batch` has no
    endpoint for (sorted; [] when none, or the file cannot be read)."""
    urls = {obj.get("url") for obj in _head_objects(path, max_lines) if isinstance(obj, dict)}
    return sorted(u for u in urls if isinstance(u, str) and u not in RUN_BATCH_URLS
                  and not u.endswith(("/score", "/rerank")))


def chat_requests(path: str | Path, max_lines: int = 50) -> bool:
    """Whether the first requests of a JSONL job are chat messages (``messages``, top level or
    in a Batch API body); False when the file cannot be read."""
    for obj in _head_objects(path, max_lines):
        if isinstance(obj, dict):
            body = obj.get("body") if isinstance(obj.get("body"), dict) else obj
            if "messages" in body:
                return True
    return False


def openai_batch_info(path: str | Path, max_lines: int = 50) -> tuple[bool, str | None]:
    """(is an OpenAI Batch API JSONL, the ``body.model`` its requests name) from the first
    lines of ``path``; (False, None) when the file cannot be read."""
    try:
        with open(path, encoding="utf-8") as fh:
            for i, line in enumerate(fh):
                if i >= max_lines:
                    break
                line = line.strip()
                if not line:
                    continue
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError:
                    return False, None
                if not isinstance(obj, dict):
                    return False, None
                body = obj.get("body")
                if not ("custom_id" in obj and "url" in obj and isinstance(body, dict)):
                    return False, None
                model = body.get("model")
                return True, model if isinstance(model, str) and model else None
    except OSError:
        pass
    return False, None


def batch_paths(workload_path: str) -> tuple[str, str]:
    """(input, output) paths for ``vllm run-batch``: the study's workload and STEM.results.jsonl
    beside it (INPUT.jsonl for none, or one read from standard input)."""
    p = Path(workload_path if workload_path not in ("", STDIN_NAME) else "INPUT.jsonl")
    return str(p), str(p.with_name(f"{p.stem}.results.jsonl"))


def chat_served_model(model: ModelSpec, workload_path: str, fmt: str,
                      quantized: str | None = None) -> tuple[ModelSpec, str]:
    """(the model an export of ``fmt`` serves, a header NOTE line or ""): for a job of chat
    requests on a base checkpoint, its chat model (catalog.chat_checkpoint), which has the same
    shapes and cost; `quantized`: the user's checkpoint the plan serves, which keeps its name
    and is said to need a chat template."""
    chat = chat_checkpoint(model)
    if chat and not (workload_path and workload_path != STDIN_NAME
                     and chat_requests(workload_path)):
        chat = None  # no chat requests: the base checkpoint serves them
    if chat and quantized:  # the user's checkpoint is served: say what it needs
        return model, (f"\nNOTE: the requests are chat messages: {quantized} must carry a chat "
                       f"template (a quantization of the base {model.load_id} has none; "
                       f"quantize its chat model, {chat}).")
    if not chat:
        return model, ""
    # a base checkpoint has no chat template: vLLM (transformers >= 4.44) and SGLang answer
    # every chat request with an error; its chat form has the same shapes and cost
    # said in the words of the engine the file runs (an SGLang file names no vLLM error)
    if fmt in ("sglang", "sglang-offline"):
        refusal, how = ("SGLang answers each one with an error: transformers' "
                        "'tokenizer.chat_template is not set'", "SGLang --chat-template "
                        "FILE" if fmt == "sglang" else "its tokenizer's chat_template")
    else:
        refusal, how = ("vLLM answers each one 400, 'default chat template is no longer "
                        "allowed'", "vLLM --chat-template FILE")
    note = (f"\nNOTE: the requests are chat messages and {model.load_id} is a base "
            f"checkpoint without a chat template ({refusal}): this serves {chat}, the "
            "chat model of the same shapes and cost; to serve the base one, set it back "
            f"and give the engine a chat template ({how}).")
    return dataclasses.replace(model, checkpoint=chat), note


def export_text(fmt: str, record: TrialRecord, model: ModelSpec, gpus: dict[str, GPU], *,
                max_model_len: int, header: str, workload_path: str = "",
                batch_output: str | None = None, extra: dict | None = None,
                quantized_model: str | None = None,
                num_scheduler_steps: int | None = None,
                disable_log_requests: bool = False,
                engine_version: str | None = None) -> str:
    """One export of a trial record (``render_export`` with the record's figures; for a format
    that runs the batch (``ExportFormat.batch``) the study's workload as input and the model
    name its requests use); `engine_version`: the vLLM release searched (None: the newest)."""
    config = record.config
    if config.gpu not in gpus:
            raise TunerError(f"GPU {config.gpu!r} of {trial_ref(record)} is not in the GPU "
                         "catalog; pass the --gpu-file the search used.")
    # the user's checkpoint is served only for plans at its own weight bits
    quantized = (quantized_model if quantized_model and Deployment(
        config, model, gpus[config.gpu], max_model_len,
        quantized_model=quantized_model).serves_quantized_checkpoint else None)
    model, note = chat_served_model(model, workload_path, fmt, quantized)
    header += note
    m, mem = record.metrics, record.memory
    kw: dict[str, Any] = {}
    exporter = EXPORTERS.get(fmt)  # render_export refuses an unknown format
    if exporter is not None and exporter.batch:
        src, dst = batch_paths(workload_path)
        ok, served = openai_batch_info(src) if workload_path else (False, None)
        if workload_path == STDIN_NAME:  # `tuner search -w -`: no file to name
            header += ("\nNOTE: the search read its workload from standard input; set the "
                       "input to the job's file before running (tuner export --batch-input "
                       "FILE, or INPUT=FILE for a script).")
        elif workload_path and not ok and exporter.batch_api_input:
            header += (f"\nNOTE: {src} is not an OpenAI Batch API JSONL (custom_id, method, url, "
                       "body); convert it to that form (url /v1/chat/completions) before "
                       "running.")
        elif workload_path and fmt == "vllm-run-batch":
            refused = run_batch_refused_urls(src)
            if refused:
                header += (f"\nNOTE: {src} has requests to {', '.join(refused)}, which `vllm "
                           "run-batch` does not serve (it takes /v1/chat/completions, not "
                           "/v1/completions: each such line fails and stops the run); use the "
                           "run-batch export (tuner export --format run-batch), which sends "
                           "every request to a `vllm serve` at its own URL.")
        kw = dict(input_path=src, output_path=batch_output or dst, served_model_name=served)
    return render_export(
        fmt, config, model, gpus[config.gpu], max_model_len=max_model_len, header=header,
        kv_capacity_tokens=m.kv_capacity_tokens if m is not None else None,
        metrics=m.to_dict() if m is not None else None,
        memory=mem.to_dict() if mem is not None else None, extra=extra,
        quantized_model=quantized_model, num_scheduler_steps=num_scheduler_steps,
        disable_log_requests=disable_log_requests, engine_version=engine_version, **kw)


#: the export formats that write SGLang's flags (the others: vLLM's, or JSON's engine-neutral
#: fields)
SGLANG_FORMATS = ("sglang", "sglang-offline")


def export_snippets(records: list[TrialRecord], model: ModelSpec, gpus: dict[str, GPU], *,
                    max_model_len: int | Callable[..., tuple[int, str]],
                    requests: int, study: str | None = None,
                    workload_path: str = "", quantized_model: str | None = None,
                    num_scheduler_steps: int | None = None,
                    disable_log_requests: bool = False, misses: str = "",
                    engine_version: str | None = None) -> dict:
    """{'fastest'|'cheapest': {'trial': n, 'formats': {format: text}, 'skipped': {format: why}}}
    for the overall winners ('skipped': the formats whose engines could not start for the plan,
    tuner.exports.export_refusal); `misses`: a NOTE every winner carries (the --deadline /
    --budget no single type meets)."""
    best, _ = winners(records)
    by_num = {r.number: r for r in records}
    out = {}
    for which in ("fastest", "cheapest"):
        n = best.get(which)
        if n is None:
            continue
        r = by_num[n]
        header = winner_header(which, r, requests, study)
        extra = {"trial": n, "goal": which, "rank": 1, "study": study,
                 "provenance": r.provenance}
        texts, skipped = {}, {}
        for fmt in formats_for(r.config.engine):
            # the margin's note names the file's engine's flag (deploy_max_model_len)
            mml, note = (max_model_len(r, sglang=fmt in SGLANG_FORMATS) if callable(max_model_len)
                         else (max_model_len, ""))
            head = header + (f"\nNOTE: {note}" if note else "") \
                + (f"\nNOTE: {misses}" if misses else "")
            try:
                texts[fmt] = export_text(fmt, r, model, gpus, max_model_len=mml, header=head,
                                         workload_path=workload_path, extra=extra,
                                         quantized_model=quantized_model,
                                         num_scheduler_steps=num_scheduler_steps,
                                         disable_log_requests=disable_log_requests,
                                         engine_version=engine_version)
            except ExportCannotStart as exc:  # not written: its engines could not start
                skipped[fmt] = exc.why
        out[which] = {"trial": n, "formats": texts, "skipped": skipped}
    return out


# ---------------------------------------------------------------------------------------------
# Timelines


def downsample_timeline(tl: dict[str, np.ndarray], points: int = TIMELINE_POINTS) -> dict:
    """Per-step arrays (``time_s`` = each step's end) -> at most ``points`` time bins:
    time-weighted means of running requests, batch tokens and KV use, and the preemptions that
    happened in each bin. The result's ``time_s`` is when each bin (or step) starts, so a
    step-shaped line starts at 0; ``end_s`` is the end of the last step (the makespan)."""
    t_end = np.asarray(tl["time_s"], dtype=np.float64)
    n = t_end.size
    if n == 0:
        return {"time_s": [], "running": [], "tokens": [], "kv_fraction": [], "preemptions": [],
                "end_s": 0.0}
    dt = np.diff(np.concatenate([[0.0], t_end]))
    running = np.asarray(tl["running"], dtype=np.float64)
    tokens = (np.asarray(tl["prefill_tokens"], dtype=np.float64)
              + np.asarray(tl["decode_tokens"], dtype=np.float64))
    kv = np.asarray(tl["kv_fraction"], dtype=np.float64)
    pre = np.asarray(tl["preemptions"], dtype=np.float64)
    end = float(t_end[-1])
    if n <= points:
        return {"time_s": (t_end - dt).tolist(), "running": running.tolist(),
                "tokens": tokens.tolist(), "kv_fraction": kv.tolist(),
                "preemptions": pre.astype(int).tolist(), "end_s": end}
    edges = np.linspace(0.0, end, points + 1)
    # each step goes to the bin its end time falls in
    idx = np.clip(np.searchsorted(edges, t_end, side="left") - 1, 0, points - 1)
    w = np.bincount(idx, weights=dt, minlength=points)
    keep = np.bincount(idx, minlength=points) > 0

    def mean(x: np.ndarray) -> np.ndarray:
        s = np.bincount(idx, weights=x * dt, minlength=points)
        return np.divide(s, w, out=np.zeros(points), where=w > 0)

    return {
        "time_s": edges[:-1][keep].tolist(),
        "running": mean(running)[keep].tolist(),
        "tokens": mean(tokens)[keep].tolist(),
        "kv_fraction": mean(kv)[keep].tolist(),
        "preemptions": np.bincount(idx, weights=pre, minlength=points)[keep].astype(int).tolist(),
        "end_s": end,
    }


def winner_timelines(records: list[TrialRecord], workload: Workload, model: ModelSpec,
                     gpus: dict[str, GPU], *,
                     cost_model_for: Callable[[GPU, ServingConfig], CostModel] | None = None,
                     points: int = TIMELINE_POINTS, startup_s: float | None = None,
                     engine_version: str | None = None,
                     num_scheduler_steps: int | None = None) -> list[dict]:
    """Each distinct winner simulated again with its timeline (replica 0 of a data-parallel
    deployment, which alone is simulated again: its makespan is then ``replica_makespan_s``,
    else ``makespan_s``, checked against the study's; time from the engines being up, after
    ``startup_s``). An entry carries
    ``error`` instead of the series when it cannot be simulated. `startup_s`,
    `engine_version`, `num_scheduler_steps`: the study's (its start-up and V0 decode runs
    priced as the search did)."""
    by_num = {r.number: r for r in records}
    cms = cost_model_for or default_cost_models(model)

    def one(item):
        num, roles = item
        r = by_num[num]
        config = r.config
        entry: dict[str, Any] = {"trial": num, "roles": roles, "gpu": config.gpu,
                                 "study_makespan_s": r.makespan_s,
                                 "dp": config.dp}
        gpu = gpus.get(config.gpu)
        try:
            if gpu is None:
                raise TunerError(f"GPU {config.gpu!r} is not in the catalog")
            # the timeline is replica 0's: a dp plan's other replicas are not simulated again
            res = simulate(workload, model, gpu, config, cms(gpu, config), timeline=True,
                           startup_s=startup_s, engine_version=engine_version,
                           num_scheduler_steps=num_scheduler_steps,
                           replicas=1 if config.dp > 1 else None,
                           timeline_rows=TIMELINE_ROWS_PER_POINT * points)
        except TunerError as exc:
            entry["error"] = str(exc)
            return entry, None
        return entry, res

    items = list(winner_roles(records).items())
    out = []
    # the winners' simulations are independent: a thread each on a large job
    for entry, res in thread_map(one, items, parallel_workers(len(items), len(workload))):
        out.append(entry)
        if res is None:
            continue
        # the whole plan's makespan, to check against the study's (replica 0's alone for dp)
        entry["makespan_s" if entry["dp"] == 1 else "replica_makespan_s"] = res.makespan_s
        entry["startup_s"] = res.startup_s
        entry["iterations"] = res.iterations
        entry.update(downsample_timeline(res.timeline or {"time_s": []}, points))
    return out


# ---------------------------------------------------------------------------------------------
# Importances


def _distinct_feasible(study: optuna.Study,
                       numbers: Collection[int] | None = None) -> list[optuna.trial.FrozenTrial]:
    """Feasible completed trials with finite objectives: those in ``numbers`` (e.g. the trial
    records of :func:`tuner.search.records.trial_records`), else each distinct configuration
    simulated on the full workload once."""
    if numbers is None:
        numbers = {r.number for r in trial_records(study)}
    feasible = {r.number for r in all_records(study, with_config=False) if r.feasible}
    return [t for t in completed(study)
            if t.number in numbers and t.number in feasible and t.values is not None
            and all(math.isfinite(v) for v in t.values)]


def param_importances(study: optuna.Study, *, min_trials: int = MIN_IMPORTANCE_TRIALS,
                      numbers: Collection[int] | None = None) -> dict:
    """{objective: {'importances': {knob: share}, 'n_trials', 'trials', 'method'} or
    {'skipped': reason}} for each objective of the study, over the feasible trials in
    ``numbers`` (default: each distinct configuration simulated on the full workload)."""
    trials = _distinct_feasible(study, numbers)
    numbers = [t.number for t in trials]
    out: dict[str, dict] = {}

    def skip(reason: str) -> dict:
        return {obj: {"skipped": reason, "n_trials": len(trials)} for obj in OBJECTIVES}

    if len(trials) < min_trials:
        return skip(f"only {len(trials)} distinct feasible trial(s); importances need at least "
                    f"{min_trials} (run more trials)")
    params = sorted({p for t in trials for p in t.params})
    varying = [p for p in params
               if len({json.dumps(t.params.get(p), sort_keys=True) for t in trials}) > 1]
    if not varying:
        return skip("every searched knob took a single value in the feasible trials")
    # each knob's values in the search space (the latest trial's, should the space have grown)
    dists = {p: next(t.distributions[p] for t in reversed(trials) if p in t.distributions)
             for p in varying}
    rows = {t.number: _choice_indices(dists, t.params) for t in trials}
    trials = [t for t in trials if rows[t.number] is not None]  # from that space
    if len(trials) < min_trials:  # a resumed study whose space changed: count these only
        return skip(f"only {len(trials)} distinct feasible trial(s) in the latest search "
                    f"space; importances need at least {min_trials} (run more trials)")
    numbers = [t.number for t in trials]
    codes = np.array([rows[t.number] for t in trials], dtype=np.int64)
    n_levels = np.array([len(dists[p].choices) for p in varying], dtype=np.int64)
    for i, obj in enumerate(OBJECTIVES):
        vals = np.array([t.values[i] for t in trials], dtype=np.float64)
        if np.ptp(vals) <= 1e-12 * max(abs(vals).max(), 1.0):
            out[obj] = {"skipped": f"{obj} is the same in every feasible trial",
                        "n_trials": len(trials)}
            continue
        shares = fanova_importances(codes, n_levels, vals, **FANOVA)
        order = sorted(range(len(varying)), key=lambda j: -shares[j])
        out[obj] = {"importances": {varying[j]: float(shares[j]) for j in order},
                    "n_trials": len(trials), "trials": numbers, "method": IMPORTANCE_METHOD,
                    "fixed": [p for p in params if p not in varying]}
    return out


def _choice_indices(dists: dict, params: dict) -> list[int] | None:
    """Each knob's value as its index among the knob's choices; None when one is not there."""
    try:
        return [int(d.to_internal_repr(params[p])) for p, d in dists.items()]
    except (KeyError, ValueError):
        return None


def fanova_importances(codes: np.ndarray, n_levels: np.ndarray, y: np.ndarray, *,
                       n_trees: int = 16, max_depth: int = 6, seed: int = 0) -> np.ndarray:
    """fANOVA main-effect importance of each categorical knob (F. Hutter, H. Hoos, K.
    Leyton-Brown, *An Efficient Approach for Assessing Hyperparameter Importance*, ICML 2014):
    a random forest is fitted to ``y`` (``n_trees`` regression trees on bootstrap samples,
    one-vs-rest splits on a knob's value chosen by squared error, depth <= ``max_depth``); for
    each tree, the variance of knob k's marginal prediction (averaged over every other knob's
    values, uniformly) divided by the tree's total variance over the whole space; averaged over
    the trees and normalised to sum to 1.

    ``codes[i, k]``: the index of trial i's value of knob k among its ``n_levels[k]`` values.
    Every tree's leaves partition the space into boxes (per knob, a set of allowed values), so
    both variances are exact sums over the leaves."""
    codes = np.asarray(codes, dtype=np.int64)
    y = np.asarray(y, dtype=np.float64)
    n, p = codes.shape
    n_levels = np.asarray(n_levels, dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(n_levels)])
    group = np.repeat(np.arange(p), n_levels)  # knob of each one-hot column
    onehot = np.zeros((n, int(offsets[-1])))
    onehot[np.arange(n)[:, None], codes + offsets[:-1]] = 1.0
    rng = np.random.default_rng(seed)
    fractions = []
    for _ in range(n_trees):
        leaves: list[tuple[float, np.ndarray]] = []
        _grow_tree(onehot, group, y, rng.integers(0, n, n), np.ones(onehot.shape[1], bool),
                   max_depth, leaves)
        value = np.array([v for v, _ in leaves])
        allowed = np.array([m for _, m in leaves], dtype=np.float64)  # leaves x columns
        # share of each knob's values a leaf allows; the leaf's volume is their product
        share = np.stack([allowed[:, offsets[k]:offsets[k + 1]].sum(1) / n_levels[k]
                          for k in range(p)], axis=1)
        volume = share.prod(axis=1)
        mean = volume @ value
        total = volume @ (value - mean) ** 2
        if total <= 0.0:
            continue
        frac = np.empty(p)
        for k in range(p):
            # the marginal at each value a of knob k: sum over the leaves allowing a of the
            # leaf's value times its volume in the other knobs
            marginal = (value * volume / share[:, k]) @ allowed[:, offsets[k]:offsets[k + 1]]
            frac[k] = np.mean((marginal - mean) ** 2) / total
        fractions.append(frac)
    if not fractions:
        return np.full(p, 1.0 / p)
    imp = np.mean(fractions, axis=0)
    return imp / imp.sum() if imp.sum() > 0 else np.full(p, 1.0 / p)


def _grow_tree(onehot: np.ndarray, group: np.ndarray, y: np.ndarray, rows: np.ndarray,
               allowed: np.ndarray, depth_left: int,
               leaves: list[tuple[float, np.ndarray]]) -> None:
    """Split ``rows`` on the one-hot column that most reduces the squared error (ties: the
    first), down to ``depth_left`` levels; each leaf appends (mean of its y, allowed columns)."""
    ys = y[rows]
    m = rows.size
    if depth_left > 0 and m >= 2 and ys.max() > ys.min():
        x = onehot[rows]
        n_left = x.sum(axis=0)
        sum_left = ys @ x
        total = ys.sum()
        ok = (n_left >= 1) & (n_left <= m - 1)
        if ok.any():
            gain = np.where(ok, sum_left**2 / np.where(ok, n_left, 1.0)
                            + (total - sum_left) ** 2 / np.where(ok, m - n_left, 1.0), -np.inf)
            c = int(np.argmax(gain))
            if gain[c] > total**2 / m * (1.0 + 1e-12):
                left = x[:, c] > 0
                in_left = allowed & (group != group[c])
                in_left[c] = True  # the left box holds knob group[c] at this one value
                in_right = allowed.copy()
                in_right[c] = False
                _grow_tree(onehot, group, y, rows[left], in_left, depth_left - 1, leaves)
                _grow_tree(onehot, group, y, rows[~left], in_right, depth_left - 1, leaves)
                return
    leaves.append((float(ys.mean()), allowed))


# ---------------------------------------------------------------------------------------------


def report_extras(study: optuna.Study, records: list[TrialRecord], workload: Workload,
                  model: ModelSpec, gpus: dict[str, GPU], *,
                  cost_model_for: Callable[[GPU, ServingConfig], CostModel] | None = None,
                  workload_path: str | None = None, out_dir: str | Path | None = None) -> dict:
    """The optional fields of the report context (see module docstring)."""
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    meta = study_meta(study)
    if workload_path is None:
        workload_path = str(meta.workload or workload.source or "")
    limits = study_constraints(study)
    extras: dict[str, Any] = {
        "timelines": winner_timelines(records, workload, model, gpus,
                                      cost_model_for=cost_model_for, **meta.sim_options()),
        "importances": param_importances(study, numbers={r.number for r in records}),
        "export_snippets": export_snippets(
            records, model, gpus,
            max_model_len=lambda r, **kw: deploy_max_model_len(workload, model, r, **kw),
            misses=(f"no plan of one GPU type {limits.describe()}, this one included: only a "
                    "mix of GPU types meets it (results.json \"fleets\"; tuner export --fleet "
                    "K --output DIR)"
                    if limits.on_figures and not any(r.feasible and r.within for r in records)
                    else ""),
            requests=len(workload), study=study.study_name, workload_path=workload_path,
            quantized_model=limits.quantized_model,
            num_scheduler_steps=priced_scheduler_steps(meta.engine_version,
                                                       meta.num_scheduler_steps),
            disable_log_requests=meta.disable_log_requests,
            engine_version=meta.engine_version),
        "deadline_s": limits.deadline_s,
    }
    validation = load_validation(out_dir) if out_dir is not None else None
    if validation is None:
        validation = study.user_attrs.get("validation")
    if isinstance(validation, list) and validation:
        extras["validation"] = validation
    return extras


def load_validation(out_dir: str | Path) -> list[dict] | None:
    """The ``validation`` list of OUT/validation.json (written by `tuner validate`), or None.
    Entries without a predicted and a measured makespan or a config are left out."""
    path = Path(out_dir) / "validation.json"
    if not path.is_file():
        return None
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None
    runs = doc.get("validation") if isinstance(doc, dict) else None
    if not isinstance(runs, list):
        return None
    good = []
    for r in runs:
        if not isinstance(r, dict) or not isinstance(r.get("config"), dict):
            continue
        meas = as_finite(r.get("measured_s"))
        if as_finite(r.get("predicted_s")) is not None and meas is not None and meas > 0:
            good.append(r)
    return good


__all__ = [
    "batch_paths", "downsample_timeline", "export_snippets", "export_text", "fanova_importances",
    "load_validation",
    "deploy_max_model_len",
    "max_request_tokens",
    "openai_batch_info", "param_importances", "report_extras", "winner_header", "winner_roles",
    "winner_timelines",
]
