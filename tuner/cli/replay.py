"""`tuner replay`: a real run of one's own, re-simulated and compared (predicted vs measured).

Reads what a real run left behind:

* a ``vllm bench serve --save-result --save-detailed`` JSON (or vLLM's older
  benchmarks/benchmark_serving.py result): ``input_lens``, ``output_lens``, ``duration`` (first
  request sent -> last response), ``start_times`` (when each request was sent; recent
  releases) else ``request_rate``, and ``max_concurrency``; without --save-detailed vLLM drops
  the per-request lists. The engine's settings are not in it, so they are given as options;
* a per-request file, CSV, JSONL or a JSON array, one row per request: prompt and output token
  counts and when it arrived and when its last token came (column names below).

and prints predicted vs measured makespan and output throughput, the median gap between
streamed chunks where a bench result records it (median_itl_ms: the decode step), with the KV
capacity the plan gives (and the engine's where the file records it). ``--record`` appends the comparison
to the calibration store, where ``tuner calibrate --method makespan`` fits on it.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table

from tuner.cli.app import (
    DisableLogRequestsOpt,
    EngineVersionOpt,
    EntryPointOpt,
    GpuFileOpt,
    JsonOpt,
    MaxModelLenOpt,
    PriceOpt,
    ProfileModeOpt,
    SchedulerStepsOpt,
    app,
    catalog_gpu,
    check_store,
    fmt_s,
    load_gpu_catalog,
    out,
)
from tuner.cli.simulate import (
    DEFAULTED,
    config_options,
    context_tokens,
    engine_config,
    engine_line,
)
from tuner.core.config import KNOBS
from tuner.core.errors import TunerError
from tuner.core.units import fmt_rate, plural
from tuner.core.workload.base import MAX_TOKENS
from tuner.core.workload.timed import (  # noqa: F401  (the column names, re-exported)
    ARRIVAL_KEYS,
    FINISH_KEYS,
    MAX_SPAN_S,
    OUTPUT_KEYS,
    PROMPT_KEYS,
    parse_rows,
    rows_of_array,
    rows_of_csv,
    rows_of_jsonl,
)

if TYPE_CHECKING:
    import numpy as np

#: A replayed run whose requests arrive within this fraction of its simulated makespan is
#: fitted (`tuner calibrate`) as if all came at once: an engine can only wait for requests
#: before the last one arrives, so the wait the fit scales is at most this share.
ARRIVAL_SPAN_TOLERATED = 0.02


def calibration_leaves_out(arrival_span_s: float, schedule_s: float) -> bool:
    """Whether `tuner calibrate` leaves a replayed run out: its requests arrived over more than
    ARRIVAL_SPAN_TOLERATED of the simulated schedule, a wait its record does not tell apart
    from step time (a fit would scale it too)."""
    return arrival_span_s > ARRIVAL_SPAN_TOLERATED * schedule_s


#: KV capacity the engine reported, where a file carries it (tokens, or blocks x block size)
KV_TOKEN_KEYS = ("kv_capacity_tokens", "num_gpu_kv_tokens")
KV_BLOCK_KEYS = ("num_gpu_blocks",)
#: a real run's fastest request (of >= 16 output tokens) streams faster than this per token;
#: slower, the times are likely milliseconds read as seconds (a 20 ms step reads as 20 s)
SLOWEST_TOKEN_S = 5.0

@dataclass
class MeasuredRun:
    """A real run's requests and what it measured."""

    prompt: np.ndarray
    output: np.ndarray
    arrival_s: np.ndarray | None  # None: every request at t = 0
    measured_s: float  # first arrival -> last token
    kind: str  # how the file was read
    note: str = ""  # what is approximated
    kv_tokens: int | None = None  # the engine's KV capacity, where recorded
    model_id: str = ""  # the model the run names (a bench result's model_id), if any
    # the client's median gap between a request's streamed chunks (a bench result's
    # median_itl_ms), where recorded
    median_itl_s: float | None = None
    # the client's cap on requests in flight (a bench result's max_concurrency) where the
    # file keeps no send times that carry it, simulated as a closed-loop client (the
    # simulator's max_concurrency); None: no cap, or replayed through start_times
    client_cap: int | None = None
    # why the comparison may not hold (printed as warnings; --record refuses them)
    warnings: list[str] = field(default_factory=list)
    # each kept request's 0-based position in the file, and its line there (a CSV or JSONL);
    # errors name a request by these, not by its place after failed ones were left out
    index: np.ndarray | None = None
    lines: np.ndarray | None = None
    list_name: str = ""  # the file's per-request list the index points into (input_lens)

    def where(self, i: int) -> str:
        """Request i (of those kept) as the file numbers it."""
        if self.index is None:
            return f"request {i + 1}"
        k = int(self.index[i])
        if self.lines is not None:
            return f"request {k + 1} (line {int(self.lines[i])})"
        return f"request {k + 1}" + (f" ({self.list_name}[{k}])" if self.list_name else "")


def _fail(path: Path, msg: str) -> TunerError:
    return TunerError(f"{path}: {msg}")


def _kv_tokens(row: dict, path: Path, where: str) -> int | None:
    """The engine's KV capacity in tokens a run's file states (KV_TOKEN_KEYS, the first name
    present wins; else KV_BLOCK_KEYS x block_size), None where it states none (absent, blank,
    0); a value that is not a positive whole number is one clear error."""
    def number(key: str) -> float | None:
        raw = row.get(key)
        if raw is None or (isinstance(raw, str) and not raw.strip()):
            return None
        try:
            v = float(raw)
        except (TypeError, ValueError):
            v = math.nan
        if isinstance(raw, bool) or not math.isfinite(v) or v < 0 or v != int(v):
            raise _fail(path, f"{where} {key} must be a whole number >= 0 (the engine's KV "
                              f"capacity), got {raw!r}.")
        return v or None  # 0: not recorded

    for key in KV_TOKEN_KEYS:
        if (v := number(key)) is not None:
            return int(v)
    for key in KV_BLOCK_KEYS:
        if (blocks := number(key)) is not None:
            if (size := number("block_size")) is None:
                raise _fail(path, f"{where} {key} is {int(blocks):,} blocks but no block_size "
                                  "says how many tokens a block holds; add block_size.")
            return int(blocks * size)
    return None


def _positive_ints(values: Any, name: str, path: Path) -> np.ndarray:
    import numpy as np

    try:
        a = np.asarray(values, dtype=float)
    except (TypeError, ValueError):
        raise _fail(path, f"{name} must be a list of token counts.") from None
    if a.ndim != 1 or a.size == 0:
        raise _fail(path, f"{name} must be a non-empty list of token counts.")
    # above MAX_TOKENS the int64 cast wraps (a request of 1e30 tokens became negative)
    ok = np.isfinite(a) & (a >= 0) & (a == np.floor(a)) & (a <= MAX_TOKENS)
    if not ok.all():
        i = int(np.flatnonzero(~ok)[0])
        raise _fail(path, f"{name}[{i}] must be a whole number of tokens from 0 to "
                          f"{MAX_TOKENS:,}, got {float(a[i]):g}.")
    return a.astype(np.int64)


def read_bench_result(path: Path, doc: dict) -> MeasuredRun:
    """A vllm bench serve / benchmark_serving.py --save-result JSON."""
    import numpy as np

    if "input_lens" not in doc and "duration" in doc:
        # vllm bench serve saves its per-request lists only with --save-detailed (a pooling
        # run's keeps input_lens, without output_lens: the generic message below)
        raise _fail(path, "no 'input_lens': a `vllm bench serve --save-result` file keeps the "
                          "per-request lengths (input_lens, output_lens, start_times) only "
                          "when saved with --save-detailed; re-run the benchmark with "
                          "--save-result --save-detailed.")
    for key in ("input_lens", "output_lens", "duration"):
        if key not in doc:
            raise _fail(path, f"no {key!r}: not a `vllm bench serve --save-result` file "
                              "(it needs input_lens, output_lens and duration).")
    prompt = _positive_ints(doc["input_lens"], "input_lens", path)
    output = _positive_ints(doc["output_lens"], "output_lens", path)
    if prompt.size != output.size:
        raise _fail(path, f"input_lens has {prompt.size} entries but output_lens {output.size}.")
    duration = doc["duration"]
    if isinstance(duration, bool) or not isinstance(duration, int | float) or not (
            math.isfinite(duration) and duration > 0):
        raise _fail(path, f"duration must be a positive number of seconds, got {duration!r}.")
    rate_f = _request_rate(doc, path)
    cap = _max_concurrency(doc, path)
    sent_s = _send_times(doc, path, prompt.size)
    failed, how = _failed_requests(doc, output)
    # a completed request whose text is empty still sampled one token (its EOS), which the
    # file's re-tokenised count misses
    empty = ~failed & (output == 0)
    output = np.where(empty, 1, output)
    ok = ~failed & (prompt > 0)
    if not ok.any():
        raise _fail(path, f"no completed request with a prompt ({int(failed.sum())} of "
                          f"{failed.size} failed, {how}): nothing to replay.")
    note = ""
    if failed.any():
        note += f"{plural(int(failed.sum()), 'failed request')} left out ({how}); "
    if (~failed & (prompt == 0)).any():
        note += f"{plural(int((~failed & (prompt == 0)).sum()), 'request')} with no prompt left out; "
    if empty.any():
        note += f"{plural(int(empty.sum()), 'empty output')} counted as 1 generated token (EOS); "
    arrival = None
    if sent_s is not None and not np.all(np.isfinite(sent_s[ok])):
        i = int(np.flatnonzero(ok & ~np.isfinite(sent_s))[0])
        raise _fail(path, f"start_times[{i}] must be a time in seconds, got "
                          f"{doc['start_times'][i]!r}.")
    if sent_s is not None:
        # when the client sent each request: after its wait for a max_concurrency slot, so
        # the cap is in these times and needs no simulating
        arrival = sent_s[ok] - float(sent_s[ok].min())
        note += ("arrivals: the file's start_times (when the client sent each request, from "
                 "the first" + (f"; they carry the client's max_concurrency {cap}" if cap else "")
                 + "); ")
        cap = None
    elif math.isfinite(rate_f):
        # bench serve draws send times (Poisson or gamma): without start_times the mean
        # spacing is what the file allows
        arrival = np.arange(int(ok.sum()), dtype=np.float64) / rate_f
        note += (f"arrivals approximated as evenly spaced at the run's {rate_f:g} req/s (the "
                 "file keeps no start_times: `vllm bench serve --save-detailed` saves them in "
                 "recent releases); ")
    model_id = doc.get("model_id")
    itl_ms = doc.get("median_itl_ms")
    itl_ok = (isinstance(itl_ms, int | float) and not isinstance(itl_ms, bool)
              and math.isfinite(itl_ms) and itl_ms > 0)
    if itl_ms is not None and not itl_ok:
        note += f"median_itl_ms {itl_ms!r} is not a positive number: ITL not compared; "
    return MeasuredRun(prompt[ok], output[ok], arrival, float(duration), "vllm bench serve result",
                       note.rstrip("; "), _kv_tokens(doc, path, "the result's"),
                       model_id=model_id.strip() if isinstance(model_id, str) else "",
                       median_itl_s=float(itl_ms) / 1e3 if itl_ok else None,
                       client_cap=cap, index=np.flatnonzero(ok), list_name="input_lens")


def _request_rate(doc: dict, path: Path) -> float:
    """A bench result's request_rate in requests/s: a positive number, or "inf" (vLLM's
    default: every request sent at once); absent or null: inf."""
    rate = doc.get("request_rate")
    if rate is None:
        return math.inf
    try:
        r = math.nan if isinstance(rate, bool) else float(rate)
    except (TypeError, ValueError):
        r = math.nan
    if not r > 0:  # NaN too
        raise _fail(path, f'request_rate must be a positive number of requests/s or "inf", '
                          f"got {rate!r}.")
    return r


def _max_concurrency(doc: dict, path: Path) -> int | None:
    """A bench result's max_concurrency (the client's cap on requests in flight), or None."""
    cap = doc.get("max_concurrency")
    if cap is None:
        return None
    if (isinstance(cap, bool) or not isinstance(cap, int | float) or not math.isfinite(cap)
            or cap < 1 or cap != int(cap)):
        raise _fail(path, f"max_concurrency must be a whole number of requests >= 1 (or null: "
                          f"no cap), got {cap!r}.")
    return int(cap)


def _send_times(doc: dict, path: Path, n: int) -> np.ndarray | None:
    """A bench result's start_times (seconds on the client's clock, one per request; NaN
    where not a number), or None where the file has none."""
    import numpy as np

    sent = doc.get("start_times")
    if sent is None:
        return None
    if not isinstance(sent, list) or len(sent) != n:
        size = f"{len(sent)} entries" if isinstance(sent, list) else type(sent).__name__
        raise _fail(path, f"start_times must be a list of {n} send times (one per input_lens "
                          f"entry), got {size}.")
    # NaN where not a time: only a completed request's must be one (read_bench_result)
    return np.array([float(x) if isinstance(x, int | float) and not isinstance(x, bool)
                     else math.nan for x in sent], dtype=float)


def _failed_requests(doc: dict, output: np.ndarray) -> tuple[np.ndarray, str]:
    """Which requests of a bench result failed, and how that is known: its `errors` (an
    empty string for a success), else its `ttfts` (0 for a request that never answered), else
    an output of 0 tokens (the file cannot tell a failure from an empty answer then)."""
    import numpy as np

    n = output.size
    errors = doc.get("errors")
    if isinstance(errors, list) and len(errors) == n:
        return np.array([bool(e) for e in errors], dtype=bool), "their `errors`"
    ttfts = doc.get("ttfts")
    if isinstance(ttfts, list) and len(ttfts) == n:
        try:
            t = np.array([np.nan if x is None else x for x in ttfts], dtype=float)
        except (TypeError, ValueError):
            t = None
        if t is not None:
            return ~(t > 0), "no first token in `ttfts`"
    return output == 0, "no output: the file keeps neither errors nor ttfts"


def _first(row: dict, keys: tuple[str, ...]) -> str | None:
    return next((k for k in keys if k in row), None)


def read_per_request(path: Path, rows: list[dict],
                     lines: list[int] | None = None) -> MeasuredRun:
    """A per-request CSV, JSONL or JSON array with token counts, arrival and finish times;
    `lines`: each row's line in the file (errors name it; None: a JSON array, rows by number).
    Times are seconds, relative (any origin, negative too: the first arrival is subtracted) or
    Unix time; Unix time in ms, us or ns is converted (tuner.core.workload.timed, the reader
    `tuner simulate` reads such a file with too)."""
    import numpy as np

    t = parse_rows(path, rows, lines, need_times=True)
    prompt, output, arrival, finish = t.prompt, t.output, t.arrival, t.finish
    cols, head = t.columns, t.head
    ok = (prompt > 0) & (output > 0)
    if not ok.any():
        raise _fail(path, f"no request has both a prompt and an output ({cols['prompt']} and "
                          f"{cols['output']} > 0): nothing to replay.")
    note = "" if ok.all() else f"{plural(int((~ok).sum()), 'request')} with no prompt or output left out"
    times = t.times()
    if t.note:
        note = (f"{note}; " if note else "") + t.note
    t0 = float(arrival.min())
    span_s = float(finish.max() - t0)
    if span_s <= 0:  # predicted / measured would divide by zero: nothing to compare
        raise _fail(path, f"the run's measured span ({cols['arrival']} of the first request "
                          f"-> {cols['finish']} of the last) is 0 s, so there is nothing to "
                          "compare with; are the times rounded to whole seconds?")
    if span_s > MAX_SPAN_S:
        raise _fail(path, f"the run's measured span ({times}) is {span_s:,.0f} s, over a year: "
                          "replay reads times in seconds (or Unix time); convert them.")
    warnings = []
    # seconds per output token of each request, arrival to last token: the fastest of a real
    # run streams far under SLOWEST_TOKEN_S; milliseconds read as seconds do not
    long = ok & (output >= 16)
    pick = long if long.any() else ok
    fastest_s = float(((finish - arrival)[pick] / output[pick]).min())
    if fastest_s > SLOWEST_TOKEN_S:
        warnings.append(
            f"the fastest request took {fastest_s:,.1f} s per output token ({times}): the times "
            "look like milliseconds, but replay reads seconds (divide them by 1,000); the "
            "comparison is not valid if so")
    kv = _kv_tokens(head, path, "the first request's")
    return MeasuredRun(prompt[ok], output[ok], arrival[ok] - t0, span_s,
                       f"per-request file ({times})", note, kv, warnings=warnings,
                       index=np.flatnonzero(ok),
                       lines=np.asarray(lines)[ok] if lines else None)


def read_run(path: Path) -> MeasuredRun:
    """A real run's file, by content: a bench result JSON, or per-request CSV / JSONL."""
    if str(path) == "-":  # --record stores the run's path, which calibrate reads again
        raise TunerError("-: tuner replay reads the run from a file, not from standard input; "
                         "save it to a file (e.g. `vllm bench serve --save-result "
                         "--save-detailed`) and pass its path.")
    if path.is_dir():
        raise TunerError(f"{path}: is a folder; expected a run's result JSON, CSV or JSONL file.")
    if not path.is_file():
        raise TunerError(f"{path}: no such file.")
    text = path.read_text(encoding="utf-8", errors="replace")
    stripped = text.lstrip()
    if stripped.startswith("["):  # a JSON array of per-request records
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as exc:
            raise _fail(path, f"not JSON ({exc.msg}, line {exc.lineno}).") from None
        return _with_meta_kv(path, read_per_request(path, rows_of_array(path, doc)))
    if stripped.startswith("{"):
        try:
            doc = json.loads(text)
        except json.JSONDecodeError:
            doc = None  # JSONL: one object a line
        if isinstance(doc, dict):
            if "input_lens" in doc or "duration" in doc:
                return _with_meta_kv(path, read_bench_result(path, doc))
            if _first(doc, PROMPT_KEYS):  # a per-request file of one request (a JSONL line)
                one_line = "\n" not in text.strip()
                return read_per_request(path, [doc], [1] if one_line else None)
            raise _fail(path, "a JSON object without input_lens/output_lens/duration: not a "
                              "`vllm bench serve --save-result` file.")
        return _with_meta_kv(path, read_per_request(path, *rows_of_jsonl(path, text)))
    return _with_meta_kv(path, read_per_request(path, *rows_of_csv(text)))


def _with_meta_kv(path: Path, run: MeasuredRun) -> MeasuredRun:
    """`run` with the engine's KV capacity from a meta.json beside the file (LLMServingSim's
    runs: kv_cache.num_kv_tokens, or num_gpu_blocks x block_size) where the file has none."""
    meta = path.with_name("meta.json")
    if run.kv_tokens is not None or not meta.is_file():
        return run
    try:
        kv = json.loads(meta.read_text(encoding="utf-8")).get("kv_cache") or {}
        tokens = kv.get("num_kv_tokens") or (int(kv["num_gpu_blocks"]) * int(kv["block_size"])
                                             if kv.get("num_gpu_blocks") and kv.get("block_size")
                                             else None)
    except (OSError, ValueError, TypeError, AttributeError):
        return run
    if isinstance(tokens, int | float) and not isinstance(tokens, bool) and tokens > 0:
        run.kv_tokens = int(tokens)
    return run


RUN_HELP = (
    "The run: a `vllm bench serve --save-result --save-detailed` JSON (without --save-detailed "
    "vLLM drops the per-request lengths replay needs; its start_times, where saved, are "
    "replayed as the send times), or a per-request file (CSV, JSONL or a JSON array of "
    "objects; one row per request) with these columns, the first name found wins: prompt "
    f"tokens ({' | '.join(PROMPT_KEYS)}), output tokens ({' | '.join(OUTPUT_KEYS)}), arrival "
    f"({' | '.join(ARRIVAL_KEYS)}) and finish, the last token ({' | '.join(FINISH_KEYS)}). "
    "Times in seconds, from any origin (the first arrival is t = 0) or Unix time; Unix time in "
    "milliseconds, microseconds or nanoseconds is converted.")


@app.command()
@config_options
def replay(
    run: Annotated[Path, typer.Argument(help=RUN_HELP, show_default=False)],
    knobs: dict[str, Any],  # one option per ServingConfig field (config_options)
    model: Annotated[str | None, typer.Option(
        "--model", "-m", help="Catalog name (`tuner models`), Hugging Face repo id or path to "
        "a config.json; default: the model a bench result names (its model_id).",
        show_default=False)] = None,
    profile: Annotated[Path | None, typer.Option(help="Profile or fit folder (`tuner "
                       "profile`): measured cost model of this device.")] = None,
    profile_mode: ProfileModeOpt = "auto",
    engine_version: EngineVersionOpt = None,
    num_scheduler_steps: SchedulerStepsOpt = None,
    disable_log_requests: DisableLogRequestsOpt = False,
    max_model_len: MaxModelLenOpt = None,
    entry_point: EntryPointOpt = "serve",
    price: PriceOpt = None, gpu_file: GpuFileOpt = None,
    record: Annotated[bool, typer.Option(help="Append the comparison to the calibration store "
                      "(`tuner calibrate --method makespan` fits on it where the run sent its "
                      "requests at once; a run whose requests arrived over time is recorded "
                      "but left out of the fit, and replay says so).")] = False,
    store: Annotated[Path | None, typer.Option(help="Calibration store for --record (default "
                     "$TUNER_CALIBRATION_DIR or ~/.cache/tuner/calibration).")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Check tuner against a real run of your own: re-simulate it with the run's engine
    settings and print predicted vs measured makespan and throughput, and the median ITL (the
    decode step) where a bench result records it. The engine was already
    up when the run was timed, so no start-up is added. The settings are vLLM's defaults for
    --engine-version and --entry-point (default serve, as `vllm bench serve` drives) unless
    given; the output names them. The prediction is uncalibrated: a stored `tuner calibrate`
    fit is not applied. A client's --max-concurrency is replayed through the file's
    start_times (saved with --save-detailed); without them the client is simulated: at most
    that many requests in the engine at once, the next sent when one finishes.

    Example: tuner replay result.json -m llama-3-8b -g A100-80G --engine-version 0.6.0 --num-scheduler-steps 10 --max-num-seqs 1024
    """
    import numpy as np

    from tuner.core.catalog import get_model, shape_note
    from tuner.core.workload import Workload
    from tuner.predictors.sources import cost_model_for
    from tuner.sim.simulator import simulate as run_sim

    if record:
        check_store(store)
    g = catalog_gpu(knobs["gpu"], load_gpu_catalog(gpu_file, price), None)
    m = read_run(run)
    if not (model or m.model_id):
        raise TunerError(f"{run} names no model: pass --model (a catalog name, a Hugging Face "
                         "repo id or a config.json).")
    spec = get_model(model) if model else _run_model(run, m.model_id)
    config, defaults = engine_config(knobs, g, entry_point, engine_version, spec, max_model_len,
                                     num_scheduler_steps)
    ctx = context_tokens(spec, max_model_len)
    warnings = list(m.warnings)
    note = m.note
    if m.client_cap is not None:
        # the file keeps no send times that carry the client's cap: the client is simulated
        # (a closed loop: the next request is sent when one finishes), not the engine's
        # max_num_seqs, which holds sent requests in its queue
        note = (f"{note}; " if note else "") + (
            f"the client's max_concurrency {m.client_cap} simulated (a closed loop: at most "
            f"{m.client_cap} requests in the engine at once, the next sent when one finishes"
            + (f"; split over the {config.dp} DP replicas" if config.dp > 1 else "") + ")"
            + ("" if config.max_running > m.client_cap else
               f"; no fewer than the engine's max_num_seqs {config.max_running:,}: the "
               "engine's limit binds first"))
    if record and warnings:
        raise TunerError(f"{run}: not recorded (a calibration would fit a wrong comparison): "
                         f"{warnings[0]}.")
    too_long = np.flatnonzero(m.prompt + m.output > ctx)
    if too_long.size:
        raise TunerError(f"{run}: {m.where(int(too_long[0]))} has {int(m.prompt[too_long[0]])}"
                         f" + {int(m.output[too_long[0]])} tokens, beyond "
                         + (f"{spec.name}'s context of {ctx:,}: is --model the run's model?"
                            if max_model_len is None else f"--max-model-len {ctx:,}: the engine "
                            "would have failed it; is --max-model-len the run's?"))
    w = Workload(prompt_tokens=m.prompt, output_tokens=m.output, source=str(run),
                 tokenizer="measured (the run's)", output_source="measured (the run's)",
                 arrival_s=m.arrival_s)
    for_config = cost_model_for(spec, profile, profile_mode, engine_version,
                                entry_point=entry_point, num_scheduler_steps=num_scheduler_steps,
                                calibrated=False,
                                log_requests=False if disable_log_requests else None)
    cm = for_config(g, config)
    res = run_sim(w, spec, g, config, cm, startup_s=0.0, engine_version=engine_version,
                  num_scheduler_steps=num_scheduler_steps,
                  return_steps=m.median_itl_s is not None, max_concurrency=m.client_cap)
    out_tokens = float(m.output.sum())
    err_pct = 100.0 * (res.makespan_s / m.measured_s - 1.0)
    defaulted = [k for k in DEFAULTED if knobs.get(k) is None]
    doc = {
        "run": str(run), "read_as": m.kind, "note": note, "warnings": warnings,
        "requests": int(m.prompt.size), "client_max_concurrency": m.client_cap,
        "config": config.to_dict(), "defaulted": defaulted,
        "vllm_defaults": defaults.to_dict(), "engine": defaults.release.describe(),
        "prefix_caching": defaults.release.generation.prefix_caching,
        # replay compares tuner's own model: a stored `tuner calibrate` fit is not applied
        "calibrated": False,
        "entry_point": entry_point, "num_scheduler_steps": num_scheduler_steps,
        "disable_log_requests": disable_log_requests, "max_model_len": ctx,
        "output_tokens": int(out_tokens),
        "measured_makespan_s": m.measured_s, "predicted_makespan_s": res.makespan_s,
        "makespan_error_pct": err_pct,
        "measured_output_tok_s": out_tokens / m.measured_s,
        "predicted_output_tok_s": out_tokens / res.makespan_s,
        "kv_capacity_tokens": {"plan": res.memory.kv_capacity_tokens, "engine": m.kv_tokens},
        "preemptions": res.preemptions, "iterations": res.iterations,
        "provenance": res.provenance,
    }
    if m.median_itl_s is not None:
        doc.update(_itl(m, res))
    if record:
        doc["recorded_in"] = str(_record(doc, res, cm, spec, g, config, store))
        span = 0.0 if m.arrival_s is None else float(m.arrival_s.max() - m.arrival_s.min())
        if calibration_leaves_out(span, res.schedule_s):  # say so now, not at the fit
            doc["record_note"] = (
                f"`tuner calibrate` will leave this run out: its requests arrived over "
                f"{fmt_s(span)}, a wait the record does not tell apart from step time; "
                "calibrate on runs that send every request at once (`vllm bench serve "
                "--request-rate inf`)")
    if as_json:
        from tuner.core.io import jsonable

        print(json.dumps(jsonable(doc), indent=2))
        return
    t = Table(title=f"{run.name}: {m.prompt.size:,} requests, {spec.name} on {g.name} "
                    f"x{config.num_gpus}")
    for col in ("figure", "measured", "predicted", "error"):
        t.add_column(col, justify="right" if col != "figure" else "left")
    t.add_row("makespan", fmt_s(m.measured_s), fmt_s(res.makespan_s), f"{err_pct:+.1f} %")
    t.add_row("output tok/s", fmt_rate(doc["measured_output_tok_s"]),
              fmt_rate(doc["predicted_output_tok_s"]),
              f"{100.0 * (m.measured_s / res.makespan_s - 1.0):+.1f} %")
    kv_eng = m.kv_tokens
    t.add_row("KV capacity (tokens)", f"{kv_eng:,}" if kv_eng else "not recorded",
              f"{res.memory.kv_capacity_tokens:,}",
              f"{100.0 * (res.memory.kv_capacity_tokens / kv_eng - 1.0):+.1f} %"
              if kv_eng else "")
    if doc.get("predicted_median_itl_s") is not None:
        t.add_row(f"median ITL ({doc['tokens_per_chunk']} token"
                  f"{'s' if doc['tokens_per_chunk'] > 1 else ''} a chunk)",
                  fmt_s(m.median_itl_s), fmt_s(doc["predicted_median_itl_s"]),
                  f"{doc['itl_error_pct']:+.1f} %")
    t.add_row("preemptions (simulated)", "", f"{res.preemptions:,}", "")
    out.print(t)
    out.print(f"read as: {m.kind}" + (f"; {note}" if note else ""), style="dim",
              markup=False)
    out.print(engine_line(defaults, entry_point, num_scheduler_steps, disable_log_requests,
                          res.decode_run_steps), style="dim", markup=False)
    out.print(settings_line(config, defaults), style="dim", markup=False)
    if defaulted:  # as `tuner simulate` says it, with the flags that set them
        out.print(f"not given ({', '.join(_flag(k) for k in defaulted)}): "
                  f"{defaults.describe(defaulted)}; the run's file does not record its engine's "
                  "settings: pass the run's where they differ", style="dim", markup=False)
    out.print(f"cost model, uncalibrated (replay never applies a `tuner calibrate` fit): "
              f"{res.provenance}", style="dim", markup=False)
    if note := shape_note(spec):
        out.print(note, style="yellow", markup=False)
    for w in warnings:
        out.print(f"warning: {w}.", style="yellow", markup=False)
    if "record_note" in doc:
        out.print(f"recorded in {doc['recorded_in']}; {doc['record_note']}", style="yellow",
                  markup=False)
    elif "recorded_in" in doc:
        out.print(f"recorded in {doc['recorded_in']} (fit with: tuner calibrate --device "
                  f"{g.name} --model {spec.name} --runner replay --method makespan)",
                  markup=False)


def _run_model(run: Path, model_id: str):
    """The model a bench result's model_id names; where it names none tuner can read (often
    a folder on the run's machine, or a served model name), one line that says the name came
    from the file and how to give the model instead."""
    from tuner.core.catalog import get_model

    try:
        return get_model(model_id)
    except TunerError as exc:
        raise TunerError(f"{run}: the run's model_id {model_id!r} (what --model defaults to): "
                         f"{str(exc).rstrip('.')}; pass --model (a catalog name, a Hugging "
                         "Face repo id or a config.json) for the model the run served."
                         ) from None


def settings_line(config, defaults) -> str:
    """The engine settings simulated, given or vLLM's defaults: what a run's file leaves to
    check (a bench result records none), and what "the newest" vLLM is taken as."""
    from tuner.core.engines import KNOWN, dotted

    release = defaults.release
    parallel = f"TP {config.tp}" + (f", PP {config.pp}" if config.pp > 1 else "") + (
        f", DP {config.dp}" if config.dp > 1 else "")
    version = "" if release.version != "newest" else (
        f"; --engine-version not given: the newest vLLM, taken as {release.generation.label} "
        f"(vLLM {dotted(release.generation.since)} on; the newest release tuner has read is "
        f"{dotted(max(KNOWN))})")
    return (f"engine settings simulated: max_num_seqs {config.max_running:,}, "
            f"max_num_batched_tokens {config.chunk_size:,}, {parallel}, prefix caching "
            f"{'on' if release.generation.prefix_caching else 'off'}, block {config.block_size}, "
            f"gpu_memory_utilization {config.gpu_memory_utilization:g}, {config.kv_bits}-bit "
            f"KV{version}")


def _flag(name: str) -> str:
    """The option that sets ServingConfig field `name` (its first flag: vLLM's name)."""
    flags = KNOBS[name].flags
    return flags[0].split("/")[0] if flags else f"--{name.replace('_', '-')}"


def _itl(m: MeasuredRun, res) -> dict:
    """Predicted vs measured median gap between a request's streamed chunks: the simulated
    decode steps, grouped as the engine streams them (a V0 multi-step engine sends N tokens a
    chunk, the N of its simulated decode runs; V1 one a step; tuner.sim.steps.median_itl_s)."""
    from tuner.sim.steps import median_itl_s

    k = res.decode_run_steps
    pred = median_itl_s(res.steps, res.step_s, k)
    return {"tokens_per_chunk": k, "measured_median_itl_s": m.median_itl_s,
            "predicted_median_itl_s": pred,
            "itl_error_pct": None if pred is None else 100.0 * (pred / m.median_itl_s - 1.0)}


def _record(doc: dict, res, cm, spec, g, config, store: Path | None) -> Path:
    """Append a calibration record (predictors.calibration.fit_calibration's fields)."""
    from datetime import UTC, datetime

    from tuner.predictors.calibration import append_runs

    return append_runs([{
        "config": config.to_dict(), "predicted_s": doc["predicted_makespan_s"],
        "measured_s": doc["measured_makespan_s"], "runner": "replay",
        "device_name": g.name, "model": spec.name, "measured_device": g.name,
        "engine": doc["engine"], "base_provenance": cm.describe(),
        "error_pct": doc["makespan_error_pct"], "requests": doc["requests"],
        "sim": {"base_time_s": res.schedule_s, "iterations": res.iterations,
                "sampled": doc["output_tokens"]},
        "source": doc["run"], "created": datetime.now(UTC).isoformat(timespec="seconds"),
        # the client's cap simulated (None: none, or carried by the run's send times)
        "max_concurrency": doc["client_max_concurrency"],
    }], store)
